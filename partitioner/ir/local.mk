# partitioner/ir: the graph IR (shapes, instructions, computations, modules),
# shape inference and validation, shardings and their text form, CSE.
libpodsim_partitioner_la_SOURCES += partitioner/ir/shape.c partitioner/ir/shape.h \
	partitioner/ir/ir.c partitioner/ir/ir.h \
	partitioner/ir/shape_infer.c \
	partitioner/ir/sharding.c partitioner/ir/sharding.h partitioner/ir/sharding_text.c \
	partitioner/ir/sharding_private.h \
	partitioner/ir/cse.c partitioner/ir/cse.h \
	partitioner/ir/async.c partitioner/ir/async.h

check_PROGRAMS += tests/check_ir tests/check_sharding
TESTS += tests/check_ir tests/check_sharding
tests_check_ir_SOURCES = tests/check_ir.c
tests_check_ir_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_ir_LDADD = $(PS_PARTITIONER_TEST_LIBS)
tests_check_sharding_SOURCES = tests/check_sharding.c
tests_check_sharding_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_sharding_LDADD = $(PS_PARTITIONER_TEST_LIBS)
EXTRA_DIST += doc/sharding.md

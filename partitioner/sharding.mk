# partitioner/sharding fragment: shardings (representation, text form,
# normalisation, mesh_split), the graph builder API, and their Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/sharding.c partitioner/sharding_text.c \
	partitioner/sharding_private.h

check_PROGRAMS += tests/check_sharding
TESTS += tests/check_sharding
tests_check_sharding_SOURCES = tests/check_sharding.c
tests_check_sharding_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_sharding_LDADD = $(PS_PARTITIONER_TEST_LIBS)

libpodsim_partitioner_la_SOURCES += partitioner/builder.c partitioner/builder_ops.c \
	partitioner/builder.h partitioner/builder_private.h
EXTRA_DIST += doc/sharding.md doc/builder.md

check_PROGRAMS += tests/check_builder
TESTS += tests/check_builder
tests_check_builder_SOURCES = tests/check_builder.c
tests_check_builder_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_builder_LDADD = $(PS_PARTITIONER_TEST_LIBS)

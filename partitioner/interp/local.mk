# partitioner/interp: the reference interpreter (values, ops, SPMD
# lockstep execution), the verification driver, and their Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/interp/interp.h partitioner/interp/interp_private.h \
	partitioner/interp/interp.c partitioner/interp/interp_ctx.c partitioner/interp/interp_value.c partitioner/interp/interp_elementwise.c \
	partitioner/interp/interp_data.c partitioner/interp/interp_window.c \
	partitioner/interp/interp_linalg.c partitioner/interp/interp_norm.c
libpodsim_partitioner_la_SOURCES += partitioner/interp/verify.h partitioner/interp/verify.c partitioner/interp/verify_widen.c
libpodsim_partitioner_la_SOURCES += partitioner/interp/shrink.h partitioner/interp/shrink_private.h partitioner/interp/shrink.c \
	partitioner/interp/shrink_classes.c partitioner/interp/shrink_rules.c

check_PROGRAMS += tests/check_interp tests/check_shrink
TESTS += tests/check_interp tests/check_shrink
tests_check_shrink_SOURCES = tests/check_shrink.c
tests_check_shrink_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_shrink_LDADD = $(PS_PARTITIONER_TEST_LIBS)
tests_check_interp_SOURCES = tests/check_interp.c
tests_check_interp_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_interp_LDADD = $(PS_PARTITIONER_TEST_LIBS)
EXTRA_DIST += doc/interpreter.md
TESTS += tests/verify_cli.sh
EXTRA_DIST += tests/verify_cli.sh tests/data/verify/dot_contracting.hlo \
	tests/data/verify/elementwise_uneven.hlo tests/data/verify/cases.jsonl \
	tests/data/verify/reduce_init.hlo tests/data/verify/no_devices.jsonl tests/data/verify/fallback.jsonl \
	tests/data/verify/cond_partial_manual.hlo \
	tests/data/verify/batch_norm_spatial.hlo

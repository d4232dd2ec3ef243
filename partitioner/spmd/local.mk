# partitioner/spmd: the SPMD partitioner (driver, builders,
# resharding, per-op handlers) and its Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/spmd/spmd.h partitioner/spmd/spmd_private.h \
	partitioner/spmd/spmd.c partitioner/spmd/spmd_build.c partitioner/spmd/spmd_value.c partitioner/spmd/spmd_reshard.c \
	partitioner/spmd/spmd_ops.c partitioner/spmd/spmd_dot.c partitioner/spmd/spmd_conv.c \
	partitioner/spmd/spmd_norm.c

check_PROGRAMS += tests/check_reshard tests/check_spmd tests/check_windowed
TESTS += tests/check_reshard tests/check_spmd tests/check_windowed
tests_check_reshard_SOURCES = tests/check_reshard.c
tests_check_reshard_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_reshard_LDADD = $(PS_PARTITIONER_TEST_LIBS)
tests_check_spmd_SOURCES = tests/check_spmd.c tests/spmd_testutil.c tests/spmd_testutil.h
tests_check_spmd_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_spmd_LDADD = $(PS_PARTITIONER_TEST_LIBS)
tests_check_windowed_SOURCES = tests/check_windowed.c tests/spmd_testutil.c tests/spmd_testutil.h
tests_check_windowed_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_windowed_LDADD = $(PS_PARTITIONER_TEST_LIBS)
TESTS += tests/partition_cli.sh
EXTRA_DIST += tests/partition_cli.sh

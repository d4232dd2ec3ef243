# partitioner/propagate: sharding propagation (XLA's ShardingPropagation), its Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/propagate/propagate.h partitioner/propagate/propagate_private.h \
	partitioner/propagate/propagate.c partitioner/propagate/propagate_algebra.c partitioner/propagate/propagate_merge.c \
	partitioner/propagate/propagate_rules.c partitioner/propagate/propagate_gather.c \
	partitioner/propagate/propagate_norm.c

check_PROGRAMS += tests/check_propagate
TESTS += tests/check_propagate
tests_check_propagate_SOURCES = tests/check_propagate.c
tests_check_propagate_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_propagate_LDADD = $(PS_PARTITIONER_TEST_LIBS)

TESTS += tests/propagate_conformance.sh tests/propagate_cli.sh
EXTRA_DIST += tests/propagate_conformance.sh tests/propagate_cli.sh doc/propagation.md

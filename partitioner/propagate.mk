# partitioner/propagate fragment: sources appended to libpodsim_partitioner_la_SOURCES, its Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/propagate.h partitioner/propagate_internal.h \
	partitioner/propagate.c partitioner/propagate_algebra.c partitioner/propagate_merge.c \
	partitioner/propagate_rules.c partitioner/propagate_gather.c

check_PROGRAMS += tests/check_propagate
TESTS += tests/check_propagate
tests_check_propagate_SOURCES = tests/check_propagate.c
tests_check_propagate_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_propagate_LDADD = $(PS_PARTITIONER_TEST_LIBS)

TESTS += tests/propagate_conformance.sh tests/propagate_cli.sh
EXTRA_DIST += tests/propagate_conformance.sh tests/propagate_cli.sh doc/propagation.md

# topology/slice fragment: slices, device assignment, platform description.
libpodsim_topology_la_SOURCES += topology/slice.c topology/slice.h \
	topology/platform.c topology/platform.h
check_PROGRAMS += tests/check_topology
TESTS += tests/check_topology
tests_check_topology_SOURCES = tests/check_topology.c
tests_check_topology_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_topology_LDADD = $(PS_TOPOLOGY_TEST_LIBS)

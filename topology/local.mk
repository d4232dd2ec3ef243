# topology/: hardware files, slices, device assignment, SimGrid platform.
noinst_LTLIBRARIES += libpodsim_topology.la
PS_LIB_TOPOLOGY = libpodsim_topology.la
libpodsim_topology_la_SOURCES = common/error.h
libpodsim_topology_la_LIBADD = libpodsim_common.la $(GLIB_LIBS) -lm
PS_TOPOLOGY_TEST_LIBS = libpodsim_topology.la libpodsim_common.la $(CHECK_LIBS) $(GLIB_LIBS) -lm
include topology/hardware.mk
include topology/slice.mk

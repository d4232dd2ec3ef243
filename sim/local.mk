# sim/: compute cost model, collective algorithms, SimGrid replay, results.
noinst_LTLIBRARIES += libpodsim_sim.la
PS_LIB_SIM = libpodsim_sim.la
libpodsim_sim_la_SOURCES = common/error.h
libpodsim_sim_la_CFLAGS = $(AM_CFLAGS) $(SIMGRID_CFLAGS)
libpodsim_sim_la_LIBADD = $(PS_LIB_TRACES) $(PS_LIB_TOPOLOGY) libpodsim_common.la $(SIMGRID_LIBS) $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm
PS_SIM_TEST_LIBS = libpodsim_sim.la $(PS_LIB_TRACES) $(PS_LIB_TOPOLOGY) libpodsim_common.la \
	$(CHECK_LIBS) $(SIMGRID_LIBS) $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm
include sim/compute.mk
include sim/replay.mk

# sim/replay fragment: SimGrid glue, collectives, replay, results.
libpodsim_sim_la_SOURCES += sim/sgnet.cpp sim/sgnet.h \
	sim/collectives.c sim/collectives.h \
	sim/replay.c sim/replay.h sim/results.c sim/results.h
libpodsim_sim_la_CXXFLAGS = $(AM_CXXFLAGS) $(SIMGRID_CFLAGS) $(GLIB_CFLAGS) -I$(top_srcdir)
check_PROGRAMS += tests/check_collectives
TESTS += tests/check_collectives
tests_check_collectives_SOURCES = tests/check_collectives.c
tests_check_collectives_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SIMGRID_CFLAGS)
tests_check_collectives_LDADD = $(PS_SIM_TEST_LIBS) -lstdc++
# libtool drops -lstdc++ from a C++ convenience library, so programs that
# link sim/sgnet.cpp name it themselves; podsim gets the C++ linker through
# a never-built source (the usual automake idiom).
nodist_EXTRA_podsim_SOURCES = sim/podsim-cxx-link.cpp
check_PROGRAMS += tests/gen_trace
tests_gen_trace_SOURCES = tests/gen_trace.c
tests_gen_trace_LDADD = $(PS_LIB_TRACES) libpodsim_common.la $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm
bench_programs += tests/gen_trace
check_PROGRAMS += tests/check_replay
TESTS += tests/check_replay
tests_check_replay_SOURCES = tests/check_replay.c
tests_check_replay_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SIMGRID_CFLAGS)
tests_check_replay_LDADD = $(PS_SIM_TEST_LIBS) -lstdc++
TESTS += tests/simulate_cli.sh tests/replay_classes.sh
EXTRA_DIST += tests/simulate_cli.sh tests/replay_classes.sh tests/bench_replay.sh
bench_scripts += tests/bench_replay.sh

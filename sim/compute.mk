# sim/compute fragment: the compute cost model (MXU, vector unit, HBM).
libpodsim_sim_la_SOURCES += sim/compute.c sim/compute.h

check_PROGRAMS += tests/check_compute
TESTS += tests/check_compute
tests_check_compute_SOURCES = tests/check_compute.c
tests_check_compute_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SIMGRID_CFLAGS)
tests_check_compute_LDADD = $(PS_SIM_TEST_LIBS)

TESTS += tests/bench_matmul.sh tests/bench_conv.sh
EXTRA_DIST += tests/bench_matmul.sh tests/bench_conv.sh
EXTRA_DIST += doc/compute-model.md

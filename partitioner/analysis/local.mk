# partitioner/analysis: cost analysis (FLOPs, HBM bytes, fusion),
# memory analysis (liveness, peak), lowering to step traces; their Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/analysis/cost.c partitioner/analysis/cost.h \
	partitioner/analysis/cost_private.h partitioner/analysis/cost_mof.c \
	partitioner/analysis/fusion.c partitioner/analysis/fusion.h \
	partitioner/analysis/memory.c partitioner/analysis/memory.h \
	partitioner/analysis/lower.c partitioner/analysis/lower.h \
	partitioner/analysis/schedule.c partitioner/analysis/schedule.h \
	partitioner/analysis/tiling.c partitioner/analysis/tiling.h
check_PROGRAMS += tests/check_analysis
TESTS += tests/check_analysis
tests_check_analysis_SOURCES = tests/check_analysis.c
tests_check_analysis_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_analysis_LDADD = $(PS_PARTITIONER_TEST_LIBS)
check_PROGRAMS += tests/check_lower
TESTS += tests/check_lower
tests_check_lower_SOURCES = tests/check_lower.c
tests_check_lower_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_lower_LDADD = $(PS_PARTITIONER_TEST_LIBS)
TESTS += tests/trace_lower.sh
EXTRA_DIST += tests/trace_lower.sh tests/data/traces/spmd_2x4.hlo
bench_scripts += tests/trace_bench.sh
EXTRA_DIST += tests/trace_bench.sh

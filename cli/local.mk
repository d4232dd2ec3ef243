bin_PROGRAMS += podsim
podsim_SOURCES = cli/main.c cli/util.c cli/commands.h cli/pipeline.c cli/pipeline.h cli/pipelining.c cli/pipelining.h \
	cli/pool.c cli/pool.h cli/study.c cli/study.h cli/cmd_sweep.c cli/cmd_search.c \
	cli/picture.c cli/picture.h cli/report.c cli/report.h \
	cli/model_options.c cli/model_options.h \
	cli/cmd_hlo.c cli/cmd_trace.c cli/cmd_propagate.c cli/cmd_conformance.c \
	cli/cmd_partition.c cli/cmd_verify.c cli/cmd_simulate.c cli/cmd_bench.c \
	cli/cmd_run.c cli/cmd_tables.c cli/cmd_tables_pipeline.c cli/cmd_tables_conv.c cli/tables.h \
	cli/cmd_bench_matmul.c cli/cmd_bench_conv.c cli/cmd_bench_collective.c \
	cli/cmd_conformance_propagation.c cli/cmd_conformance_partitioner.c
podsim_CFLAGS = $(AM_CFLAGS) $(SIMGRID_CFLAGS) $(CAIRO_CFLAGS)
# Higher floors first so static convenience libraries resolve downward.
PS_ALL_LIBS = $(PS_LIB_MODELS) $(PS_LIB_PARTITIONER) $(PS_LIB_SIM) \
	$(PS_LIB_TRACES) $(PS_LIB_TOPOLOGY) libpodsim_common.la
PS_EXT_LIBS = $(SIMGRID_LIBS) $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) $(CAIRO_LIBS) -lm
podsim_LDADD = $(PS_ALL_LIBS) $(PS_EXT_LIBS)
TESTS += tests/run_dense.sh tests/run_hlo.sh tests/hlo_corpus.sh tests/sweep_cli.sh tests/search_cli.sh tests/slurm.sh \
	tests/report_html.sh tests/run_pipeline.sh tests/run_moe.sh tests/run_convnets.sh
EXTRA_DIST += tests/run_dense.sh tests/run_hlo.sh tests/hlo_corpus.sh tests/sweep_cli.sh tests/search_cli.sh tests/slurm.sh \
	tests/report_html.sh tests/run_pipeline.sh tests/run_moe.sh tests/run_convnets.sh
bench_scripts += tests/bench_run.sh tests/bench_sweep.sh tests/bench_search.sh tests/bench_moe.sh
EXTRA_DIST += tests/bench_run.sh tests/bench_sweep.sh tests/bench_search.sh tests/bench_moe.sh doc/sweeps.md
podsim_SOURCES += cli/op_times.c cli/op_times.h
check_PROGRAMS += tests/check_cli
TESTS += tests/check_cli
tests_check_cli_SOURCES = tests/check_cli.c cli/util.c
tests_check_cli_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_cli_LDADD = $(PS_PARTITIONER_TEST_LIBS)

check_PROGRAMS += tests/check_picture
TESTS += tests/check_picture
tests_check_picture_SOURCES = tests/check_picture.c cli/picture.c cli/picture.h
tests_check_picture_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SIMGRID_CFLAGS) $(CAIRO_CFLAGS)
tests_check_picture_LDADD = $(PS_SIM_TEST_LIBS) $(CAIRO_LIBS) -lstdc++

check_PROGRAMS += tests/check_op_times
TESTS += tests/check_op_times
tests_check_op_times_SOURCES = tests/check_op_times.c cli/op_times.c cli/op_times.h
tests_check_op_times_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SIMGRID_CFLAGS)
tests_check_op_times_LDADD = $(PS_SIM_TEST_LIBS) -lstdc++

# For shell tests: is a rendered PNG blank?
check_PROGRAMS += tests/png_stats
tests_png_stats_SOURCES = tests/png_stats.c
tests_png_stats_CFLAGS = $(AM_CFLAGS) $(CAIRO_CFLAGS)
tests_png_stats_LDADD = $(CAIRO_LIBS) $(GLIB_LIBS)
TESTS += tests/progress_cli.sh
EXTRA_DIST += tests/progress_cli.sh
bench_scripts += tests/bench_overlap.sh tests/bench_events.sh tests/bench_tables.sh
EXTRA_DIST += tests/bench_overlap.sh tests/bench_events.sh tests/bench_tables.sh

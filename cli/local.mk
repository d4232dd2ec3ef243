bin_PROGRAMS += podsim
podsim_SOURCES = cli/main.c cli/util.c cli/commands.h cli/bench.h cli/pipelining.c cli/pipelining.h \
	cli/cmd_sweep.c cli/cmd_search.c cli/search_worker.c cli/search_worker.h cli/cmd_autoshard.c \
	cli/picture.c cli/picture.h cli/report.c cli/report.h \
	cli/model_options.c cli/model_options.h cli/target_options.c cli/target_options.h \
	cli/cmd_hlo.c cli/cmd_trace.c cli/cmd_propagate.c cli/cmd_conformance.c \
	cli/cmd_partition.c cli/cmd_verify.c cli/cmd_simulate.c cli/cmd_bench.c \
	cli/cmd_run.c cli/cmd_tables.c cli/cmd_tables_pipeline.c cli/cmd_tables_conv.c cli/tables.c cli/tables.h \
	cli/cmd_bench_matmul.c cli/cmd_bench_conv.c cli/cmd_bench_collective.c \
	cli/cmd_conformance_propagation.c cli/cmd_conformance_partitioner.c
podsim_CFLAGS = $(AM_CFLAGS) $(SIMGRID_CFLAGS) $(CAIRO_CFLAGS)
# Higher floors first so static convenience libraries resolve downward.
PS_ALL_LIBS = $(PS_LIB_DRIVER) $(PS_LIB_MODELS) $(PS_LIB_PARTITIONER) $(PS_LIB_SIM) \
	$(PS_LIB_TRACES) $(PS_LIB_TOPOLOGY) libpodsim_common.la
PS_EXT_LIBS = $(SIMGRID_LIBS) $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) $(CAIRO_LIBS) -lm
podsim_LDADD = $(PS_ALL_LIBS) $(PS_EXT_LIBS)
TESTS += tests/run_dense.sh tests/run_hlo.sh tests/hlo_corpus.sh tests/sweep_cli.sh tests/search_cli.sh tests/slurm.sh \
	tests/report_html.sh tests/run_pipeline.sh tests/run_moe.sh tests/run_convnets.sh
EXTRA_DIST += tests/run_dense.sh tests/run_hlo.sh tests/hlo_corpus.sh tests/sweep_cli.sh tests/search_cli.sh tests/slurm.sh \
	tests/report_html.sh tests/run_pipeline.sh tests/run_moe.sh tests/run_convnets.sh
bench_scripts += tests/bench_run.sh tests/bench_sweep.sh tests/bench_search.sh tests/bench_moe.sh
EXTRA_DIST += tests/bench_run.sh tests/bench_sweep.sh tests/bench_search.sh tests/bench_moe.sh doc/sweeps.md
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

# For shell tests: is a rendered PNG blank?
check_PROGRAMS += tests/png_stats
tests_png_stats_SOURCES = tests/png_stats.c
tests_png_stats_CFLAGS = $(AM_CFLAGS) $(CAIRO_CFLAGS)
tests_png_stats_LDADD = $(CAIRO_LIBS) $(GLIB_LIBS)
TESTS += tests/progress_cli.sh
EXTRA_DIST += tests/progress_cli.sh
bench_scripts += tests/bench_overlap.sh tests/bench_events.sh tests/bench_tables.sh
EXTRA_DIST += tests/bench_overlap.sh tests/bench_events.sh tests/bench_tables.sh

# podsim autoshard (driver/autoshard.h): the search against an enumeration.
TESTS += tests/autoshard_cli.sh
bench_scripts += tests/bench_autoshard.sh
EXTRA_DIST += tests/autoshard_cli.sh tests/data/autoshard_matmul.hlo tests/bench_autoshard.sh

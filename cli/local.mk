bin_PROGRAMS += podsim
podsim_SOURCES = cli/main.c cli/util.c cli/commands.h cli/pipeline.c cli/pipeline.h cli/pipelining.c cli/pipelining.h \
	cli/cmd_hlo.c cli/cmd_trace.c cli/cmd_propagate.c cli/cmd_conformance.c \
	cli/cmd_partition.c cli/cmd_verify.c cli/cmd_simulate.c cli/cmd_bench.c \
	cli/cmd_run.c cli/cmd_tables.c cli/cmd_tables_pipeline.c cli/tables.h \
	cli/cmd_bench_matmul.c cli/cmd_bench_conv.c cli/cmd_bench_collective.c \
	cli/cmd_conformance_propagation.c cli/cmd_conformance_partitioner.c
podsim_CFLAGS = $(AM_CFLAGS) $(SIMGRID_CFLAGS)
# Higher floors first so static convenience libraries resolve downward.
PS_ALL_LIBS = $(PS_LIB_MODELS) $(PS_LIB_PARTITIONER) $(PS_LIB_SIM) \
	$(PS_LIB_TRACES) $(PS_LIB_TOPOLOGY) libpodsim_common.la
PS_EXT_LIBS = $(SIMGRID_LIBS) $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm
podsim_LDADD = $(PS_ALL_LIBS) $(PS_EXT_LIBS)
TESTS += tests/run_dense.sh tests/run_pipeline.sh
EXTRA_DIST += tests/run_dense.sh tests/run_pipeline.sh
bench_scripts += tests/bench_run.sh
EXTRA_DIST += tests/bench_run.sh
podsim_SOURCES += cli/op_times.c cli/op_times.h
check_PROGRAMS += tests/check_cli
TESTS += tests/check_cli
tests_check_cli_SOURCES = tests/check_cli.c cli/util.c
tests_check_cli_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_cli_LDADD = $(PS_PARTITIONER_TEST_LIBS)

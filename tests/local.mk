# Shared test infrastructure. Each folder's local.mk adds its own Check suites
# (tests/check_<module>.c) and end-to-end scripts (tests/*.sh) to TESTS.
TESTS += tests/cli_basics.sh
EXTRA_DIST += tests/cli_basics.sh tests/lib.sh tests/suite_main.h tests/build_testutil.h tests/loop_hlo.h

# The layering test: includes against the floor table of doc/architecture.md,
# and a test of that test on fixture trees.
TESTS += tests/layering.sh tests/layering_selftest.sh
# Calls inside a module run one way (doc/architecture.md, "Private headers").
TESTS += tests/call_cycles.sh
EXTRA_DIST += tests/call_cycles.sh
EXTRA_DIST += tests/layering.sh tests/layering_selftest.sh doc/architecture.md \
	tests/data/layering/doc/architecture.md tests/data/layering/low/a.h \
	tests/data/layering/mid/m.h tests/data/layering/mid/m_private.h tests/data/layering/mid/m_ops.c \
	tests/data/layering/high/h.c


# Golden outputs (tests/golden.sh): `make golden` rewrites them after an
# intended change of podsim's output; review and commit the diff.
TESTS += tests/golden.sh
EXTRA_DIST += tests/golden.sh tests/data/golden/dense_spmd.hlo tests/data/golden/dense_trace.txt \
	tests/data/golden/simulate_example.json tests/data/golden/tables_dense.csv
.PHONY: golden
golden: podsim
	PODSIM=$(abs_top_builddir)/podsim PS_SRCDIR=$(abs_top_srcdir) $(SHELL) $(abs_top_srcdir)/tests/golden.sh --update

# XLA's sharding test vectors (Apache-2.0, tests/data/conformance/NOTICE) and
# the published runs the presets copy: every test's data is in the tree.
EXTRA_DIST += tests/data/conformance/README.md tests/data/conformance/HLO_SYNTAX.md \
	tests/data/conformance/NOTICE tests/data/conformance/LICENSE \
	tests/data/conformance/xla-partitioner.jsonl tests/data/conformance/xla-propagation.jsonl \
	tests/data/conformance/xla-propagation_expanded.jsonl tests/data/published.tsv

# Hostile inputs and options (issue 17, doc/robustness.md).
TESTS += tests/robust_cli.sh
EXTRA_DIST += tests/robust_cli.sh

# Reliability (issue 27, doc/robustness.md): a sweep's process group
# signalled mid-run, resume's checks of the rows it keeps.
TESTS += tests/sweep_interrupt.sh tests/reliability.sh
EXTRA_DIST += tests/sweep_interrupt.sh tests/reliability.sh tests/data/bad/trace-huge-loop.pst \
	tests/data/bad/while-huge-trips.hlo tests/data/bad/while-trips-overflow.hlo

# Property test of the partitioner (doc/robustness.md): random programs with
# random shardings, partitioned and verified on the interpreter. make check
# runs 500 fixed seeds; make fuzz-property PROPERTY_CASES=N PROPERTY_SEED=S more.
check_PROGRAMS += tests/spmd_property
TESTS += tests/spmd_property
tests_spmd_property_SOURCES = tests/spmd_property.c tests/spmd_testutil.c tests/spmd_testutil.h
tests_spmd_property_LDADD = $(PS_PARTITIONER_TEST_LIBS)
PROPERTY_CASES = 10000
PROPERTY_SEED = 100000
.PHONY: fuzz-property
fuzz-property: tests/spmd_property
	./tests/spmd_property --seed $(PROPERTY_SEED) --cases $(PROPERTY_CASES)
# gradient accumulation: peak HBM against the microbatch count (issue 21)
TESTS += tests/run_microbatches.sh
EXTRA_DIST += tests/run_microbatches.sh
# an HLO dump after XLA's optimizations costed with its own fusions (issue 21)
TESTS += tests/run_fused_hlo.sh
EXTRA_DIST += tests/run_fused_hlo.sh

# libFuzzer targets for the readers (doc/robustness.md, "Fuzzing"). They build
# only in a tree configured with --enable-fuzzing CC=clang:
#   mkdir build-fuzz && cd build-fuzz && ../configure --enable-fuzzing CC=clang CXX=clang++ --disable-werror
#   make fuzz                  each target for FUZZ_TIME seconds (default 60), one after another
#   make fuzz FUZZ_TIME=3600 FUZZ_TARGETS=hlo
#   make fuzz-ci               each target for FUZZ_RUNS executions from the checked-in
#                              seeds (run-tests.sh does this: about a minute in all)
# New corpus entries go to fuzz-corpus/TARGET in the build tree, crashes to
# fuzz-findings/; a finding becomes a file in tests/data/bad with its error.
FUZZ_TARGETS = hlo sharding trace hardware model grid rows
FUZZ_TIME = 60
FUZZ_RUNS = 50000
# Per input: 10 s (a hang), 512 MiB in one allocation (an input that asks
# for more than it holds); per process: 2 GiB.
FUZZ_FLAGS = -timeout=10 -malloc_limit_mb=512 -rss_limit_mb=2048 -print_final_stats=1

fuzz_programs = tests/fuzz/fuzz_hlo tests/fuzz/fuzz_sharding tests/fuzz/fuzz_trace tests/fuzz/fuzz_hardware \
	tests/fuzz/fuzz_model tests/fuzz/fuzz_grid tests/fuzz/fuzz_rows
EXTRA_PROGRAMS += $(fuzz_programs)
fuzz_ldflags = $(AM_LDFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_hlo_SOURCES = tests/fuzz/fuzz_hlo.c
tests_fuzz_fuzz_hlo_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_hlo_LDADD = $(PS_LIB_PARTITIONER) $(PS_LIB_TRACES) libpodsim_common.la \
	$(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm
tests_fuzz_fuzz_sharding_SOURCES = tests/fuzz/fuzz_sharding.c
tests_fuzz_fuzz_sharding_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_sharding_LDADD = $(tests_fuzz_fuzz_hlo_LDADD)
tests_fuzz_fuzz_trace_SOURCES = tests/fuzz/fuzz_trace.c
tests_fuzz_fuzz_trace_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_trace_LDADD = $(PS_LIB_TRACES) libpodsim_common.la $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm
tests_fuzz_fuzz_hardware_SOURCES = tests/fuzz/fuzz_hardware.c
tests_fuzz_fuzz_hardware_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_hardware_LDADD = $(PS_LIB_TOPOLOGY) libpodsim_common.la $(GLIB_LIBS) -lm
# The model file, grid and row readers need the registry of families and the
# target's options (driver/), hence every library below it, SimGrid's C++
# among them: they link as C++ (automake's idiom, a C++ source that is never
# built), so that UBSan's C++ runtime comes along; CXX=clang++ then.
fuzz_driver_ldadd = $(PS_LIB_DRIVER) $(PS_LIB_MODELS) $(PS_LIB_PARTITIONER) $(PS_LIB_SIM) \
	$(PS_LIB_TRACES) $(PS_LIB_TOPOLOGY) libpodsim_common.la $(SIMGRID_LIBS) $(JSONGLIB_LIBS) \
	$(GLIB_LIBS) $(ZLIB_LIBS) -lstdc++ -lm
tests_fuzz_fuzz_model_SOURCES = tests/fuzz/fuzz_model.c
tests_fuzz_fuzz_model_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_model_LDADD = $(fuzz_driver_ldadd)
nodist_EXTRA_tests_fuzz_fuzz_model_SOURCES = tests/fuzz/cxx-link.cxx
tests_fuzz_fuzz_grid_SOURCES = tests/fuzz/fuzz_grid.c
tests_fuzz_fuzz_grid_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_grid_LDADD = $(fuzz_driver_ldadd)
nodist_EXTRA_tests_fuzz_fuzz_grid_SOURCES = tests/fuzz/cxx-link.cxx
tests_fuzz_fuzz_rows_SOURCES = tests/fuzz/fuzz_rows.c
tests_fuzz_fuzz_rows_LDFLAGS = $(fuzz_ldflags)
tests_fuzz_fuzz_rows_LDADD = $(fuzz_driver_ldadd)
nodist_EXTRA_tests_fuzz_fuzz_rows_SOURCES = tests/fuzz/cxx-link.cxx
EXTRA_DIST += tests/fuzz/local.mk tests/fuzz/fuzz_check.h tests/fuzz/fuzz_hlo.c tests/fuzz/fuzz_sharding.c \
	tests/fuzz/fuzz_trace.c tests/fuzz/fuzz_hardware.c tests/fuzz/fuzz_model.c \
	tests/fuzz/fuzz_grid.c tests/fuzz/fuzz_rows.c tests/fuzz/dict tests/fuzz/corpus
CLEANFILES += $(fuzz_programs)

.PHONY: fuzz fuzz-ci fuzz-programs
if FUZZING
fuzz-programs: $(fuzz_programs)
# The checked-in seeds are read, never written: libFuzzer adds new inputs to
# the first directory it is given, here one in the build tree.
fuzz: fuzz-programs
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p fuzz-corpus/$$t fuzz-findings; \
	  echo "== fuzz $$t for $(FUZZ_TIME) s"; \
	  ./tests/fuzz/fuzz_$$t $(FUZZ_FLAGS) -max_total_time=$(FUZZ_TIME) \
	    -dict=$(srcdir)/tests/fuzz/dict/$$t.dict -artifact_prefix=fuzz-findings/$$t- \
	    fuzz-corpus/$$t $(srcdir)/tests/fuzz/corpus/$$t 2>fuzz-$$t.log; st=$$?; \
	  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)' fuzz-$$t.log; \
	  if [ $$st != 0 ]; then tail -40 fuzz-$$t.log; echo "fuzz $$t: FINDING (see fuzz-findings/)"; exit 1; fi; \
	done
fuzz-ci: fuzz-programs
	@for t in $(FUZZ_TARGETS); do \
	  rm -rf fuzz-ci-corpus/$$t && mkdir -p fuzz-ci-corpus/$$t fuzz-findings; \
	  ./tests/fuzz/fuzz_$$t $(FUZZ_FLAGS) -runs=$(FUZZ_RUNS) -seed=1 \
	    -dict=$(srcdir)/tests/fuzz/dict/$$t.dict -artifact_prefix=fuzz-findings/$$t- \
	    fuzz-ci-corpus/$$t $(srcdir)/tests/fuzz/corpus/$$t 2>fuzz-ci-$$t.log; st=$$?; \
	  if [ $$st != 0 ]; then tail -40 fuzz-ci-$$t.log; echo "FAIL: fuzz $$t"; exit 1; fi; \
	  echo "PASS: fuzz $$t ($$(sed -n 's/^stat::number_of_executed_units: *//p' fuzz-ci-$$t.log) executions)"; \
	done
else
fuzz fuzz-ci fuzz-programs:
	@echo "make $@: configure a build with --enable-fuzzing CC=clang (tests/fuzz/local.mk)" >&2; exit 2
endif

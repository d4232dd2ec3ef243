# partitioner/: graph IR, HLO text, shardings, propagation, SPMD partitioning,
# interpreter, analyses, lowering. One convenience library; each sub-folder
# (doc/architecture.md maps them) owns a local.mk that appends its sources
# and its Check suites.
noinst_LTLIBRARIES += libpodsim_partitioner.la
PS_LIB_PARTITIONER = libpodsim_partitioner.la
libpodsim_partitioner_la_SOURCES =
libpodsim_partitioner_la_LIBADD = $(PS_LIB_TRACES) libpodsim_common.la $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm
# Check suites link this.
PS_PARTITIONER_TEST_LIBS = libpodsim_partitioner.la $(PS_LIB_TRACES) libpodsim_common.la \
	$(CHECK_LIBS) $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm

include partitioner/ir/local.mk
include partitioner/hlo/local.mk
include partitioner/builder/local.mk
include partitioner/propagate/local.mk
include partitioner/spmd/local.mk
include partitioner/interp/local.mk
include partitioner/analysis/local.mk

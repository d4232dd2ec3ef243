# partitioner/: graph IR, HLO text, shardings, propagation, SPMD partitioning,
# interpreter, analyses, lowering. One convenience library; each part owns a
# fragment that appends its sources and its Check suites.
noinst_LTLIBRARIES += libpodsim_partitioner.la
PS_LIB_PARTITIONER = libpodsim_partitioner.la
libpodsim_partitioner_la_SOURCES = partitioner/ir.h partitioner/sharding.h
libpodsim_partitioner_la_LIBADD = $(PS_LIB_TRACES) libpodsim_common.la $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm
# Check suites link this.
PS_PARTITIONER_TEST_LIBS = libpodsim_partitioner.la $(PS_LIB_TRACES) libpodsim_common.la \
	$(CHECK_LIBS) $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm

include partitioner/ir.mk
include partitioner/sharding.mk
include partitioner/propagate.mk
include partitioner/interp.mk
include partitioner/spmd.mk
include partitioner/analysis.mk
include partitioner/autodiff.mk

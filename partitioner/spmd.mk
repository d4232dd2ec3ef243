# partitioner/spmd fragment: the SPMD partitioner (driver, builders,
# resharding, per-op handlers) and its Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/spmd.h partitioner/spmd_private.h \
	partitioner/spmd.c partitioner/spmd_build.c partitioner/spmd_reshard.c \
	partitioner/spmd_ops.c partitioner/spmd_dot.c partitioner/spmd_conv.c

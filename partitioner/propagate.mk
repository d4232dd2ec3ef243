# partitioner/propagate fragment: sources appended to libpodsim_partitioner_la_SOURCES, its Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/propagate.h partitioner/propagate_internal.h \
	partitioner/propagate.c partitioner/propagate_algebra.c \
	partitioner/propagate_rules.c partitioner/propagate_gather.c

# partitioner/interp fragment: the reference interpreter (values, ops, SPMD
# lockstep execution), the verification driver, and their Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/interp.h partitioner/interp_private.h \
	partitioner/interp.c partitioner/interp_value.c partitioner/interp_elementwise.c \
	partitioner/interp_data.c partitioner/interp_window.c

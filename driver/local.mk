# driver/: the stage sequence every command shares (driver.h), the process
# pool and study engine behind sweep and search (pool.h, study.h), per-op
# compute times of a lowered step (op_times.h).
noinst_LTLIBRARIES += libpodsim_driver.la
PS_LIB_DRIVER = libpodsim_driver.la
libpodsim_driver_la_SOURCES = driver/driver.c driver/driver.h driver/pool.c driver/pool.h \
	driver/study.c driver/study.h driver/op_times.c driver/op_times.h \
	driver/target.c driver/target.h \
	driver/autoshard.c driver/autoshard_cost.c driver/autoshard.h driver/autoshard_dp.c driver/autoshard_dp.h
libpodsim_driver_la_CFLAGS = $(AM_CFLAGS) $(SIMGRID_CFLAGS)
libpodsim_driver_la_LIBADD = $(PS_LIB_MODELS) $(PS_LIB_PARTITIONER) $(PS_LIB_SIM) \
	$(PS_LIB_TRACES) $(PS_LIB_TOPOLOGY) libpodsim_common.la $(GLIB_LIBS) -lm

check_PROGRAMS += tests/check_op_times
TESTS += tests/check_op_times
tests_check_op_times_SOURCES = tests/check_op_times.c driver/op_times.c driver/op_times.h
tests_check_op_times_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SIMGRID_CFLAGS)
tests_check_op_times_LDADD = $(PS_SIM_TEST_LIBS) -lstdc++

check_PROGRAMS += tests/check_driver
TESTS += tests/check_driver
tests_check_driver_SOURCES = tests/check_driver.c
tests_check_driver_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SIMGRID_CFLAGS)
tests_check_driver_LDADD = $(PS_LIB_DRIVER) $(PS_LIB_MODELS) $(PS_LIB_SIM) $(PS_PARTITIONER_TEST_LIBS) \
	$(PS_LIB_TOPOLOGY) $(SIMGRID_LIBS) -lstdc++

check_PROGRAMS += tests/check_autoshard_dp
TESTS += tests/check_autoshard_dp
tests_check_autoshard_dp_SOURCES = tests/check_autoshard_dp.c driver/autoshard_dp.c driver/autoshard_dp.h
tests_check_autoshard_dp_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_autoshard_dp_LDADD = $(GLIB_LIBS) $(CHECK_LIBS) -lm

check_PROGRAMS += tests/check_pool
TESTS += tests/check_pool
tests_check_pool_SOURCES = tests/check_pool.c driver/pool.c driver/pool.h
tests_check_pool_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_pool_LDADD = libpodsim_common.la $(GLIB_LIBS) $(CHECK_LIBS)

# partitioner/autodiff: reverse-mode autodiff and optimizers for training steps.
libpodsim_partitioner_la_SOURCES += partitioner/autodiff.c partitioner/autodiff.h \
	partitioner/optimizer.c partitioner/optimizer.h
check_PROGRAMS += tests/check_autodiff
TESTS += tests/check_autodiff
tests_check_autodiff_SOURCES = tests/check_autodiff.c
tests_check_autodiff_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_autodiff_LDADD = $(PS_PARTITIONER_TEST_LIBS)
libpodsim_partitioner_la_SOURCES += partitioner/cse.c partitioner/cse.h

# partitioner/builder: what models/ uses to write a training step: the
# builder API, reverse-mode autodiff, optimizers.
libpodsim_partitioner_la_SOURCES += partitioner/builder/builder.c partitioner/builder/builder_ops.c partitioner/builder/builder_forms.c \
	partitioner/builder/builder.h partitioner/builder/builder_private.h \
	partitioner/builder/autodiff.c partitioner/builder/autodiff_build.c partitioner/builder/autodiff.h \
	partitioner/builder/autodiff_conv.c partitioner/builder/autodiff_private.h partitioner/builder/folder_private.h \
	partitioner/builder/optimizer.c partitioner/builder/optimizer.h \
	partitioner/builder/scan.c partitioner/builder/scan.h \
	partitioner/builder/vmap.c partitioner/builder/vmap.h
EXTRA_DIST += doc/builder.md

check_PROGRAMS += tests/check_builder tests/check_autodiff tests/check_scan tests/check_vmap
TESTS += tests/check_builder tests/check_autodiff tests/check_scan tests/check_vmap
tests_check_builder_SOURCES = tests/check_builder.c
tests_check_builder_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_builder_LDADD = $(PS_PARTITIONER_TEST_LIBS)
tests_check_autodiff_SOURCES = tests/check_autodiff.c
tests_check_autodiff_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_autodiff_LDADD = $(PS_PARTITIONER_TEST_LIBS)
tests_check_scan_SOURCES = tests/check_scan.c
tests_check_scan_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_scan_LDADD = $(PS_PARTITIONER_TEST_LIBS)
tests_check_vmap_SOURCES = tests/check_vmap.c
tests_check_vmap_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_vmap_LDADD = $(PS_PARTITIONER_TEST_LIBS)
bench_scripts += tests/bench_loops.sh
EXTRA_DIST += tests/bench_loops.sh

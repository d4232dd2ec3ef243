noinst_LTLIBRARIES += libpodsim_common.la
libpodsim_common_la_SOURCES = common/error.c common/error.h common/output.c common/output.h common/checked.c common/checked.h \
	common/float16.c common/float16.h common/ndindex.c common/ndindex.h \
	common/params.c common/params.h common/json_out.h
libpodsim_common_la_LIBADD = $(GLIB_LIBS) -lm

check_PROGRAMS += tests/check_common
TESTS += tests/check_common
tests_check_common_SOURCES = tests/check_common.c
tests_check_common_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_common_LDADD = libpodsim_common.la $(CHECK_LIBS) $(GLIB_LIBS) -lm

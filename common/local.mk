noinst_LTLIBRARIES += libpodsim_common.la
libpodsim_common_la_SOURCES = common/error.c common/error.h
libpodsim_common_la_LIBADD = $(GLIB_LIBS) -lm

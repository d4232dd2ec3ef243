# traces/: the step-trace format (types, writer, streaming reader), timeline export.
noinst_LTLIBRARIES += libpodsim_traces.la
PS_LIB_TRACES = libpodsim_traces.la
libpodsim_traces_la_SOURCES = common/error.h traces/trace.h traces/trace-private.h \
	traces/trace.c traces/trace_reader.c traces/trace_writer.c traces/timeline.h
libpodsim_traces_la_LIBADD = libpodsim_common.la $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS)
PS_TRACES_TEST_LIBS = libpodsim_traces.la libpodsim_common.la $(CHECK_LIBS) $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm

check_PROGRAMS += tests/check_traces
TESTS += tests/check_traces
tests_check_traces_SOURCES = tests/check_traces.c
tests_check_traces_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_traces_LDADD = $(PS_TRACES_TEST_LIBS)

# traces/: the step-trace format (types, writer, streaming reader), timeline export.
noinst_LTLIBRARIES += libpodsim_traces.la
PS_LIB_TRACES = libpodsim_traces.la
libpodsim_traces_la_SOURCES = common/error.h traces/trace.h traces/trace_private.h \
	traces/trace.c traces/trace_groups.c traces/trace_reader.c traces/trace_writer.c traces/timeline.h traces/timeline.c
libpodsim_traces_la_LIBADD = libpodsim_common.la $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS)
PS_TRACES_TEST_LIBS = libpodsim_traces.la libpodsim_common.la $(CHECK_LIBS) $(JSONGLIB_LIBS) $(GLIB_LIBS) $(ZLIB_LIBS) -lm

check_PROGRAMS += tests/check_traces
TESTS += tests/check_traces
tests_check_traces_SOURCES = tests/check_traces.c
tests_check_traces_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_traces_LDADD = $(PS_TRACES_TEST_LIBS)

TESTS += tests/trace_check.sh
EXTRA_DIST += tests/trace_check.sh tests/data/traces/example.pst tests/data/traces/example.pst.gz \
	tests/data/bad/trace-async-open.pst \
	tests/data/bad/trace-bad-checksum.pst \
	tests/data/bad/trace-bad-number.pst \
	tests/data/bad/trace-bad-version.pst \
	tests/data/bad/trace-corrupt.pst.gz \
	tests/data/bad/trace-crlf.pst \
	tests/data/bad/trace-cut-line.pst \
	tests/data/bad/trace-done-unmatched.pst \
	tests/data/bad/trace-empty.pst \
	tests/data/bad/trace-groups-list.pst \
	tests/data/bad/trace-groups-mesh.pst \
	tests/data/bad/trace-header-order.pst \
	tests/data/bad/trace-iota-size.pst \
	tests/data/bad/trace-memory-peak.pst \
	tests/data/bad/trace-mesh-devices.pst \
	tests/data/bad/trace-missing-end.pst \
	tests/data/bad/trace-mxu-missing.pst \
	tests/data/bad/trace-permute-pairs.pst \
	tests/data/bad/trace-totals.pst \
	tests/data/bad/trace-totals-wrap.pst \
	tests/data/bad/trace-gather-wrap.pst \
	tests/data/bad/trace-truncated.pst.gz \
	tests/data/bad/trace-unknown-dtype.pst \
	tests/data/bad/trace-unknown-event.pst \
	tests/data/bad/trace-unknown-field.pst

check_PROGRAMS += tests/check_timeline
TESTS += tests/check_timeline
tests_check_timeline_SOURCES = tests/check_timeline.c
tests_check_timeline_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JSONGLIB_CFLAGS)
tests_check_timeline_LDADD = $(PS_TRACES_TEST_LIBS)

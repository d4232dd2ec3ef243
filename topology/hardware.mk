# topology/hardware fragment: hardware files (GKeyFile .ini) and their loader.
libpodsim_topology_la_SOURCES += topology/hardware.c topology/hardware.h
nodist_libpodsim_topology_la_SOURCES = topology/tpu-v3-ini.c
CLEANFILES += topology/tpu-v3-ini.c

# The bundled TPU v3 file is compiled in so podsim works from any directory
# and when installed; the installed copy is a starting point for what-if files.
dist_pkgdata_DATA = topology/tpu-v3.ini

# Each line of the .ini becomes one C string literal, escaped for C.
topology/tpu-v3-ini.c: $(top_srcdir)/topology/tpu-v3.ini $(top_srcdir)/topology/hardware.mk
	$(AM_V_GEN)$(MKDIR_P) topology && { \
	  echo '/* Generated from topology/tpu-v3.ini by topology/hardware.mk; do not edit. */'; \
	  echo 'const char ps_hardware_tpu_v3_ini[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g' -e 's/^/  "/' -e 's/$$/\\n"/' \
	    $(top_srcdir)/topology/tpu-v3.ini; \
	  echo '  ;'; \
	} > $@.tmp && mv $@.tmp $@

check_PROGRAMS += tests/check_hardware
TESTS += tests/check_hardware
tests_check_hardware_SOURCES = tests/check_hardware.c
tests_check_hardware_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_hardware_LDADD = $(PS_TOPOLOGY_TEST_LIBS)
EXTRA_DIST += tests/data/bad
EXTRA_DIST += doc/hardware.md

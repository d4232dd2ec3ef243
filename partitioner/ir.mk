# partitioner/ir fragment: the graph IR, shape inference and validation, the
# HLO text reader and printer, and their Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/ir.c partitioner/shape_infer.c \
	partitioner/hlo_parser.c partitioner/hlo_parser.h \
	partitioner/hlo_lexer.c partitioner/hlo_attrs.c partitioner/hlo_lexer.h \
	partitioner/hlo_printer.c partitioner/hlo_printer.h \
	partitioner/hlo_literal.c partitioner/hlo_internal.h

check_PROGRAMS += tests/check_ir tests/check_hlo
TESTS += tests/check_ir tests/check_hlo tests/hlo_bad.sh tests/hlo_cli.sh
tests_check_ir_SOURCES = tests/check_ir.c
tests_check_ir_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_ir_LDADD = $(PS_PARTITIONER_TEST_LIBS)
tests_check_hlo_SOURCES = tests/check_hlo.c
tests_check_hlo_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_hlo_LDADD = $(PS_PARTITIONER_TEST_LIBS)
EXTRA_DIST += tests/hlo_bad.sh tests/hlo_cli.sh examples/transformer_layer.hlo doc/hlo.md \
	tests/data/golden/printer_input.hlo tests/data/golden/printer_output.hlo \
	$(wildcard $(srcdir)/tests/data/bad/bad_*.hlo $(srcdir)/tests/data/bad/bad_*.hlo.err)

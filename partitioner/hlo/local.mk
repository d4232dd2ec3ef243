# partitioner/hlo: the HLO text reader (lexer, attributes, literals, parser)
# and printer.
libpodsim_partitioner_la_SOURCES += partitioner/hlo/hlo_parser.c partitioner/hlo/hlo_parser.h \
	partitioner/hlo/hlo_lexer.c partitioner/hlo/hlo_attrs.c partitioner/hlo/hlo_lexer.h \
	partitioner/hlo/hlo_printer.c partitioner/hlo/hlo_printer.h \
	partitioner/hlo/hlo_literal.c partitioner/hlo/hlo_private.h \
	partitioner/hlo/hlo_proto.c partitioner/hlo/hlo_proto.h \
	partitioner/hlo/stablehlo.h partitioner/hlo/stablehlo_reader.c \
	partitioner/hlo/stablehlo_private.h partitioner/hlo/stablehlo_lex.c partitioner/hlo/stablehlo_sdy.c \
	partitioner/hlo/stablehlo_regions.c partitioner/hlo/stablehlo_ops.c partitioner/hlo/stablehlo_indexing.c

check_PROGRAMS += tests/check_hlo
TESTS += tests/check_hlo tests/hlo_bad.sh tests/hlo_cli.sh tests/hlo_leaks.sh
tests_check_hlo_SOURCES = tests/check_hlo.c
tests_check_hlo_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_hlo_LDADD = $(PS_PARTITIONER_TEST_LIBS)
EXTRA_DIST += tests/hlo_bad.sh tests/hlo_cli.sh tests/hlo_leaks.sh tests/data/bad/leak_result_attr.mlir examples/transformer_layer.hlo doc/hlo.md \
	tests/data/golden/printer_input.hlo tests/data/golden/printer_output.hlo \
	$(wildcard $(srcdir)/tests/data/bad/bad_*.hlo $(srcdir)/tests/data/bad/bad_*.hlo.err) \
	$(wildcard $(srcdir)/tests/data/hloproto/*.pbtxt $(srcdir)/tests/data/hloproto/*.hlo)

# partitioner/ir fragment: the graph IR, shape inference and validation, the
# HLO text reader and printer, and their Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/ir.c partitioner/shape_infer.c \
	partitioner/hlo_parser.c partitioner/hlo_parser.h \
	partitioner/hlo_lexer.c partitioner/hlo_attrs.c partitioner/hlo_lexer.h \
	partitioner/hlo_printer.c partitioner/hlo_printer.h \
	partitioner/hlo_literal.c partitioner/hlo_internal.h

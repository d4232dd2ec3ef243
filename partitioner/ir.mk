# partitioner/ir fragment: the graph IR, shape inference and validation, the
# HLO text reader and printer, and their Check suites.
libpodsim_partitioner_la_SOURCES += partitioner/ir.c

# partitioner/analysis fragment: sources appended to libpodsim_partitioner_la_SOURCES, its Check suites.

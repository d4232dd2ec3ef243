# topology/slice fragment

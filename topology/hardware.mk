# topology/hardware fragment

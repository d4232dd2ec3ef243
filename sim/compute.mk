# sim/compute fragment

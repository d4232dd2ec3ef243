# sim/replay fragment

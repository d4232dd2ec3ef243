/* private to mid/m*.c */
#include "mid/m.h"

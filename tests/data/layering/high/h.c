#include "config.h"
#include "low/a.h"
#include "mid/m.h"

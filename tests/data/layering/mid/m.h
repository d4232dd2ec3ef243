/* floor 1, public */
#include "low/a.h"

/* Convolution and reduce-window partitioning: batch and feature dims like a
 * dot, spatial dims through halo exchange (GSPMD appendix A.2). */
#include "config.h"

#include <string.h>

#include "partitioner/spmd_private.h"

PsPVal *
sp_handle_convolution (SpComp *c, const PsInstr *in)
{
  (void) c;
  (void) in;
  return NULL;
}

PsPVal *
sp_handle_reduce_window (SpComp *c, const PsInstr *in)
{
  (void) c;
  (void) in;
  return NULL;
}

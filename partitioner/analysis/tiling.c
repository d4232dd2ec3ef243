/* Buffer tiling (see tiling.h). */
#include "config.h"

#include "common/error.h"
#include "partitioner/analysis/tiling.h"

/* In PsTilingMode order. */
static const char *const mode_names[] = { "best", "minor", "none", NULL };
static const char *const mode_docs[] = {
  "one dim padded to 128 and another to 8 (16 for 16-bit, 32 for 8-bit types), the pair that pads least",
  "the last dim padded to 128 and the one before it to 8 (16, 32), as written",
  "dense bytes, no padding",
};

const PsParamSpec ps_tiling_param_mode = {
  .section = "options", .key = "buffer_tiling", .type = PS_PARAM_CHOICE, .def = "best",
  .doc = "TPU tiling of buffers, in peak HBM and in the HBM bytes each kernel moves (doc/compute-model.md)",
  .choice_names = mode_names, .choice_docs = mode_docs
};

const char *
ps_tiling_mode_name (PsTilingMode m)
{
  return (guint) m < G_N_ELEMENTS (mode_names) - 1 ? mode_names[m] : mode_names[PS_TILING_BEST];
}

gboolean
ps_tiling_mode_parse (const char *name, const char *what, PsTilingMode *out, GError **error)
{
  for (guint i = 0; name && mode_names[i]; i++)
    if (g_ascii_strcasecmp (name, mode_names[i]) == 0)
      {
        *out = (PsTilingMode) i;
        return TRUE;
      }
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s '%s' is not best, minor or none", what,
               name ? name : "");
  return FALSE;
}

int64_t
ps_tiling_sublanes (PsElemType t)
{
  int bits = ps_etype_bits (t);
  if (bits >= 32)
    return PS_TILING_SUBLANES;
  return bits >= 16 ? 2 * PS_TILING_SUBLANES : 4 * PS_TILING_SUBLANES;
}

static int64_t
round_up (int64_t n, int64_t to)
{
  return (n + to - 1) / to * to;
}

/* Elements of the array once dims `lane` and `sub` are padded. */
static int64_t
padded_elements (const PsShape *s, int lane, int sub, int64_t rows)
{
  int64_t n = 1;
  for (int d = 0; d < s->rank; d++)
    {
      int64_t x = s->dims[d];
      if (x == 0)
        return 0;
      if (d == lane)
        x = round_up (x, PS_TILING_LANES);
      else if (d == sub)
        x = round_up (x, rows);
      n *= x;
    }
  return n;
}

int64_t
ps_tiling_bytes (const PsShape *s, PsTilingMode mode)
{
  g_return_val_if_fail (s != NULL, 0);
  if (s->etype == PS_TUPLE)
    {
      int64_t b = 0;
      for (int i = 0; i < s->n_elems; i++)
        b += ps_tiling_bytes (s->elems[i], mode);
      return b;
    }
  int64_t dense = ps_shape_bytes (s);
  if (mode == PS_TILING_NONE || s->rank == 0 || s->etype == PS_TOKEN || dense <= 0)
    return dense;
  int64_t rows = ps_tiling_sublanes (s->etype);
  int64_t elems;
  if (s->rank == 1)
    elems = round_up (s->dims[0], rows * PS_TILING_LANES);
  else if (mode == PS_TILING_MINOR)
    elems = padded_elements (s, s->rank - 1, s->rank - 2, rows);
  else
    {
      /* Every ordered pair: the lane dim and a different sublane dim. The
       * first minimum in (lane, sub) order from the minor end wins, so
       * equal choices resolve the same way on every run. */
      elems = -1;
      for (int lane = s->rank - 1; lane >= 0; lane--)
        for (int sub = s->rank - 1; sub >= 0; sub--)
          if (sub != lane)
            {
              int64_t e = padded_elements (s, lane, sub, rows);
              if (elems < 0 || e < elems)
                elems = e;
            }
    }
  int bits = ps_etype_bits (s->etype);
  if (bits < 8)
    return (elems * bits + 7) / 8;
  return elems * ps_etype_size_bytes (s->etype);
}

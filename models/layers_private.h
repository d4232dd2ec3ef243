/* What the files of the layer library (models/layers*.c) share: short
 * emission helpers over net->c, so the blocks read like the maths they
 * write. Private to layers*.c (doc/architecture.md), prefix ly_. */
#ifndef PS_MODELS_LAYERS_PRIVATE_H
#define PS_MODELS_LAYERS_PRIVATE_H

#include <glib.h>

#include "models/net.h"
#include "partitioner/builder/autodiff.h"

/* Shorthands over net->c. */
static inline PsInstr *
ly_bin (PsNet *net, PsOpcode op, PsInstr *x, PsInstr *y)
{
  return ps_ad_binary (net->c, op, x, y);
}

static inline PsInstr *
ly_un (PsNet *net, PsOpcode op, PsInstr *x)
{
  return ps_ad_unary (net->c, op, x);
}

static inline PsInstr *
ly_full (PsNet *net, const PsShape *like, double v)
{
  return ps_ad_full (net->c, like, v);
}

static inline PsInstr *
ly_bcast (PsNet *net, PsInstr *x, const PsShape *to, int n, const int64_t *dims)
{
  return ps_ad_broadcast (net->c, x, to, n, dims);
}

static inline PsInstr *
ly_convert (PsNet *net, PsInstr *x, PsElemType t)
{
  return ps_ad_convert (net->c, x, t);
}

static inline PsInstr *
ly_iota (PsNet *net, PsElemType t, int rank, const int64_t *dims, int64_t dim)
{
  PsInstr *i = ps_computation_add_instr (net->c, PS_OP_IOTA, NULL, ps_shape_new_array (t, rank, dims), 0, NULL);
  i->iota_dimension = dim;
  return i;
}

static inline PsInstr *
ly_compare (PsNet *net, PsCompareDir dir, PsInstr *x, PsInstr *y)
{
  PsInstr *ops[2] = { x, y };
  PsInstr *c = ps_computation_add_instr (net->c, PS_OP_COMPARE, NULL,
                                         ps_shape_new_array (PS_PRED, x->shape->rank, x->shape->dims), 2, ops);
  c->comparison = dir;
  return c;
}

static inline PsInstr *
ly_select3 (PsNet *net, PsInstr *pred, PsInstr *on_true, PsInstr *on_false)
{
  PsInstr *ops[3] = { pred, on_true, on_false };
  return ps_computation_add_instr (net->c, PS_OP_SELECT, NULL, ps_shape_copy (on_true->shape), 3, ops);
}

/* "<prefix>.<name>", or name alone without a prefix (transfer full). */
static inline char *
ly_weight_name (const char *prefix, const char *name)
{
  return prefix ? g_strdup_printf ("%s.%s", prefix, name) : g_strdup (name);
}

static inline PsInstr *
ly_weight (PsNet *net, const char *prefix, const char *name, const char *letters, int rank,
        const int64_t *dims)
{
  g_autofree char *full_name = ly_weight_name (prefix, name);
  return ps_net_weight (net, full_name, letters, rank, dims);
}

#endif

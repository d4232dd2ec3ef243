/* What the files of the layer library (models/layers*.c) share: short
 * shorthands for the net's builder (sticky errors), so the blocks read like the maths they
 * write. Private to layers*.c (doc/architecture.md), prefix ly_. */
#ifndef PS_MODELS_LAYERS_PRIVATE_H
#define PS_MODELS_LAYERS_PRIVATE_H

#include <glib.h>

#include "models/net.h"

/* Shorthands for the net's builder (ps_net_builder). */
static inline PsInstr *
ly_bin (PsNet *net, PsOpcode op, PsInstr *x, PsInstr *y)
{
  return ps_build_binary (ps_net_builder (net), op, x, y);
}

static inline PsInstr *
ly_un (PsNet *net, PsOpcode op, PsInstr *x)
{
  return ps_build_unary (ps_net_builder (net), op, x);
}

static inline PsInstr *
ly_full (PsNet *net, const PsShape *like, double v)
{
  return ps_build_full_like (ps_net_builder (net), like, v);
}

static inline PsInstr *
ly_bcast (PsNet *net, PsInstr *x, const PsShape *to, int n, const int64_t *dims)
{
  /* n is x's rank, which the builder checks dims against. */
  (void) n;
  return ps_build_broadcast_to (ps_net_builder (net), x, to, dims);
}

static inline PsInstr *
ly_convert (PsNet *net, PsInstr *x, PsElemType t)
{
  return ps_build_cast (ps_net_builder (net), x, t);
}

static inline PsInstr *
ly_iota (PsNet *net, PsElemType t, int rank, const int64_t *dims, int64_t dim)
{
  return ps_build_iota (ps_net_builder (net), t, rank, dims, dim);
}

static inline PsInstr *
ly_compare (PsNet *net, PsCompareDir dir, PsInstr *x, PsInstr *y)
{
  return ps_build_compare (ps_net_builder (net), dir, x, y);
}

static inline PsInstr *
ly_select3 (PsNet *net, PsInstr *pred, PsInstr *on_true, PsInstr *on_false)
{
  return ps_build_select (ps_net_builder (net), pred, on_true, on_false);
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

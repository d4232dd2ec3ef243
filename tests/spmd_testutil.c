/* See spmd_testutil.h. */
#include "config.h"

#include <string.h>

#include "partitioner/hlo_parser.h"
#include "partitioner/hlo_printer.h"
#include "partitioner/interp.h"
#include "partitioner/propagate.h"
#include "partitioner/sharding.h"
#include "tests/spmd_testutil.h"

static PsValue *
random_value (const PsShape *s, GRand *rng)
{
  if (ps_shape_is_tuple (s))
    {
      PsValue **e = g_new (PsValue *, s->n_elems > 0 ? s->n_elems : 1);
      for (int i = 0; i < s->n_elems; i++)
        e[i] = random_value (s->elems[i], rng);
      PsValue *t = ps_value_new_tuple (s->n_elems, e);
      g_free (e);
      return t;
    }
  PsValue *v = ps_value_new (s);
  for (int64_t i = 0; i < v->n; i++)
    {
      double x = s->etype == PS_PRED ? g_rand_int_range (rng, 0, 2)
                 : ps_etype_is_signed (s->etype) || ps_etype_is_float (s->etype)
                   ? g_rand_int_range (rng, -4, 5)
                   : g_rand_int_range (rng, 0, 8);
      ps_value_set (v, i, x);
    }
  return v;
}

/* Visits every index of the box [lo, hi) row-major; calls back with the
 * linear offsets in a full array of dims `fd` and a local one of `ld`. */
typedef void (*BoxFn) (int64_t full_i, int64_t local_i, gpointer data);

static void
walk_box (int rank, const int64_t *lo, const int64_t *hi, const int64_t *fd,
          const int64_t *ld, BoxFn fn, gpointer data)
{
  for (int d = 0; d < rank; d++)
    if (hi[d] <= lo[d])
      return;
  int64_t idx[rank > 0 ? rank : 1];
  for (int d = 0; d < rank; d++)
    idx[d] = lo[d];
  for (;;)
    {
      int64_t fi = 0, li = 0;
      for (int d = 0; d < rank; d++)
        {
          fi = fi * fd[d] + idx[d];
          li = li * ld[d] + (idx[d] - lo[d]);
        }
      fn (fi, li, data);
      int d = rank - 1;
      for (; d >= 0; d--)
        {
          if (++idx[d] < hi[d])
            break;
          idx[d] = lo[d];
        }
      if (d < 0)
        return;
    }
}

typedef struct {
  const PsValue *full;
  PsValue *local;
  gboolean mismatch;
  int64_t bad_full;
} CopyCtx;

static void
copy_in (int64_t fi, int64_t li, gpointer data)
{
  CopyCtx *c = data;
  ps_value_set (c->local, li, ps_value_get (c->full, fi));
}

static void
compare_at (int64_t fi, int64_t li, gpointer data)
{
  CopyCtx *c = data;
  if (c->mismatch)
    return;
  double a = ps_value_get (c->full, fi), b = ps_value_get (c->local, li);
  if (!(a == b || (a != a && b != b)))
    {
      c->mismatch = TRUE;
      c->bad_full = fi;
    }
}

static PsValue *
local_piece (const PsValue *full, const PsSharding *s, int64_t dev)
{
  if (ps_shape_is_tuple (full->shape))
    {
      int n = full->n_elems;
      PsValue **e = g_new (PsValue *, n > 0 ? n : 1);
      int leaf = 0;
      for (int i = 0; i < n; i++)
        {
          /* Only flat tuples of arrays in these tests. */
          PsSharding *ls = ps_sharding_leaf (s, leaf++);
          e[i] = local_piece (full->elems[i], ls, dev);
          ps_sharding_free (ls);
        }
      PsValue *t = ps_value_new_tuple (n, e);
      g_free (e);
      return t;
    }
  PsShape *lsh = ps_sharding_tile_shape (s, full->shape);
  PsValue *v = ps_value_new (lsh);
  int r = full->shape->rank;
  int64_t lo[r > 0 ? r : 1], hi[r > 0 ? r : 1];
  if (ps_sharding_tile_bounds (s, full->shape, dev, lo, hi) || s->kind == PS_SHARDING_MAXIMAL)
    {
      if (s->kind == PS_SHARDING_MAXIMAL)
        for (int d = 0; d < r; d++)
          {
            lo[d] = 0;
            hi[d] = full->shape->dims[d];
          }
      CopyCtx c = { full, v, FALSE, 0 };
      walk_box (r, lo, hi, full->shape->dims, lsh->dims, copy_in, &c);
    }
  ps_shape_free (lsh);
  return v;
}

static gboolean
check_piece (const PsValue *full, const PsValue *got, const PsSharding *s, int64_t dev,
             GString *why)
{
  if (ps_shape_is_tuple (full->shape))
    {
      for (int i = 0; i < full->n_elems; i++)
        {
          PsSharding *ls = ps_sharding_leaf (s, i);
          gboolean ok = check_piece (full->elems[i], got->elems[i], ls, dev, why);
          ps_sharding_free (ls);
          if (!ok)
            return FALSE;
        }
      return TRUE;
    }
  if (s->kind == PS_SHARDING_MANUAL)
    return TRUE;
  if (s->kind == PS_SHARDING_MAXIMAL && s->device != dev)
    return TRUE;
  PsShape *lsh = ps_sharding_tile_shape (s, full->shape);
  gboolean ok = ps_shape_equal (lsh, got->shape);
  if (!ok)
    {
      char *a = ps_shape_to_string (lsh, FALSE), *b = ps_shape_to_string (got->shape, FALSE);
      g_string_append_printf (why, "device %" G_GINT64_FORMAT ": local shape %s, expected %s",
                              dev, b, a);
      g_free (a);
      g_free (b);
      ps_shape_free (lsh);
      return FALSE;
    }
  int r = full->shape->rank;
  int64_t lo[r > 0 ? r : 1], hi[r > 0 ? r : 1];
  if (ps_sharding_tile_bounds (s, full->shape, dev, lo, hi) || s->kind == PS_SHARDING_MAXIMAL)
    {
      CopyCtx c = { full, (PsValue *) got, FALSE, 0 };
      walk_box (r, lo, hi, full->shape->dims, lsh->dims, compare_at, &c);
      if (c.mismatch)
        {
          g_string_append_printf (why, "device %" G_GINT64_FORMAT ": element %" G_GINT64_FORMAT
                                  " (row-major in the full array) differs: want %g",
                                  dev, c.bad_full, ps_value_get (full, c.bad_full));
          ok = FALSE;
        }
    }
  ps_shape_free (lsh);
  return ok;
}

static const PsSharding *
sharding_or_rep (const PsInstr *in, PsSharding **tmp)
{
  if (in->sharding && in->sharding->kind != PS_SHARDING_UNKNOWN)
    {
      *tmp = ps_sharding_expand_to_shape (in->sharding, in->shape);
      return *tmp;
    }
  *tmp = ps_sharding_replicated ();
  return *tmp;
}

gboolean
spmd_test_verify (const PsModule *m, int64_t n, const PsSpmdOptions *opts, guint32 seed,
                  char **out_text, GError **error)
{
  for (guint k = 0; k < m->entry->params->len; k++)
    {
      const PsInstr *p = g_ptr_array_index (m->entry->params, k);
      if (ps_shape_bytes (p->shape) > ((int64_t) 1 << 26))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED, "parameter %s too large to run",
                       p->name);
          return FALSE;
        }
    }
  g_autoptr (PsModule) part = ps_spmd_partition (m, n, opts, error);
  if (!part)
    return FALSE;
  if (out_text)
    *out_text = ps_hlo_print (part, NULL);
  const PsComputation *e = m->entry;
  int np = (int) e->params->len;
  GRand *rng = g_rand_new_with_seed (seed);
  PsValue **args = g_new0 (PsValue *, np + 1);
  PsValue **largs = g_new0 (PsValue *, (np + 1) * n);
  for (int k = 0; k < np; k++)
    {
      const PsInstr *p = g_ptr_array_index (e->params, k);
      args[k] = random_value (p->shape, rng);
      PsSharding *tmp = NULL;
      const PsSharding *s = sharding_or_rep (p, &tmp);
      for (int64_t d = 0; d < n; d++)
        largs[d * np + k] = local_piece (args[k], s, d);
      ps_sharding_free (tmp);
    }
  g_rand_free (rng);
  gboolean ok = FALSE;
  /* Small work caps: a test that needs more is too big to be a test. */
  PsInterpOptions io = { 0 };
  io.max_work = 200000000;
  PsValue *want = ps_interp_run (m, np, args, &io, error);
  PsValue **got = g_new0 (PsValue *, n);
  if (want && ps_interp_run_spmd (part, n, np, largs, got, &io, error))
    {
      PsSharding *tmp = NULL;
      const PsSharding *rs = sharding_or_rep (e->root, &tmp);
      GString *why = g_string_new (NULL);
      ok = TRUE;
      for (int64_t d = 0; d < n && ok; d++)
        ok = check_piece (want, got[d], rs, d, why);
      if (!ok)
        g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "%s", why->str);
      g_string_free (why, TRUE);
      ps_sharding_free (tmp);
    }
  for (int64_t d = 0; d < n; d++)
    ps_value_free (got[d]);
  g_free (got);
  ps_value_free (want);
  for (int k = 0; k < np; k++)
    ps_value_free (args[k]);
  for (int64_t i = 0; i < np * n; i++)
    ps_value_free (largs[i]);
  g_free (args);
  g_free (largs);
  return ok;
}

gboolean
spmd_test_verify_text (const char *hlo, int64_t n, gboolean propagate, const PsSpmdOptions *opts,
                       char **out_text, GError **error)
{
  g_autoptr (PsModule) m = ps_hlo_parse (hlo, strlen (hlo), "test.hlo", error);
  if (!m)
    return FALSE;
  if (propagate && !ps_propagate (m, NULL, error))
    return FALSE;
  return spmd_test_verify (m, n, opts, 42, out_text, error);
}

int
spmd_test_count_op (const PsModule *m, PsOpcode op)
{
  int k = 0;
  for (guint c = 0; c < m->computations->len; c++)
    {
      const PsComputation *comp = g_ptr_array_index (m->computations, c);
      for (guint i = 0; i < comp->instrs->len; i++)
        if (((const PsInstr *) g_ptr_array_index (comp->instrs, i))->opcode == op)
          k++;
    }
  return k;
}

/* The verification driver: random inputs, both runs, per-device comparison. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "common/ndindex.h"
#include "partitioner/interp/interp.h"
#include "partitioner/interp/verify.h"
#include "partitioner/ir/sharding.h"

void
ps_verify_options_init (PsVerifyOptions *opts)
{
  memset (opts, 0, sizeof *opts);
  opts->seed = 1;
}

void
ps_verify_result_clear (PsVerifyResult *r)
{
  if (!r)
    return;
  g_free (r->message);
  memset (r, 0, sizeof *r);
}

/* ---- inputs -------------------------------------------------------------------- */

static guint64
splitmix (guint64 *state)
{
  guint64 z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Follows a value through ops that keep its elements (convert, reshape,
 * slicing, concatenation...) to find the smallest dim it indexes; 0 when it
 * is not an index. `depth` bounds the walk. */
static int64_t
index_bound (const PsInstr *ins, int depth)
{
  int64_t best = 0;
  if (depth > 6)
    return 0;
  for (guint u = 0; u < ins->users->len; u++)
    {
      const PsInstr *user = ins->users->pdata[u];
      int64_t b = 0;
      for (int k = 0; k < user->n_operands; k++)
        {
          if (user->operands[k] != ins)
            continue;
          const PsShape *a = user->operands[0]->shape;
          if (user->opcode == PS_OP_GATHER && k == 1 && a->etype != PS_TUPLE)
            {
              for (int j = 0; j < user->gather.start_index_map.n; j++)
                {
                  int64_t d = user->gather.start_index_map.v[j];
                  if (d >= 0 && d < a->rank)
                    b = b ? MIN (b, a->dims[d]) : a->dims[d];
                }
            }
          else if (user->opcode == PS_OP_SCATTER && user->n_operands >= 3
                   && k == (user->n_operands - 1) / 2 && a->etype != PS_TUPLE)
            {
              for (int j = 0; j < user->scatter.scatter_dims_to_operand_dims.n; j++)
                {
                  int64_t d = user->scatter.scatter_dims_to_operand_dims.v[j];
                  if (d >= 0 && d < a->rank)
                    b = b ? MIN (b, a->dims[d]) : a->dims[d];
                }
            }
          else if ((user->opcode == PS_OP_DYNAMIC_SLICE && k >= 1)
                   || (user->opcode == PS_OP_DYNAMIC_UPDATE_SLICE && k >= 2))
            {
              int d = user->opcode == PS_OP_DYNAMIC_SLICE ? k - 1 : k - 2;
              if (a->etype != PS_TUPLE && d < a->rank)
                b = a->dims[d];
            }
          else
            switch (user->opcode)
              {
              case PS_OP_CONVERT: case PS_OP_RESHAPE: case PS_OP_COPY: case PS_OP_SLICE:
              case PS_OP_CONCATENATE: case PS_OP_TRANSPOSE: case PS_OP_BROADCAST:
              case PS_OP_BITCAST: case PS_OP_CUSTOM_CALL: case PS_OP_GET_TUPLE_ELEMENT:
              case PS_OP_TUPLE:
                b = index_bound (user, depth + 1);
                break;
              default:
                break;
              }
          if (b > 0)
            best = best ? MIN (best, b) : b;
        }
    }
  return best;
}

/* XLA may apply a reduction's init value any number of times (once per
 * partial reduction), so a reduce over a split dim is only defined for an
 * init that is the reducer's identity. When a parameter reaches (through
 * copies, converts, reshapes, broadcasts) the init operand of a reduce,
 * reduce-window or select-and-scatter whose reducer is one binary op,
 * init_identity gives that op's identity and returns TRUE. */
/* Identity of a reducer as a double (floats) and as the stored int64
 * (integers and pred: unsigned values as their zero-extended bits, u64 as
 * its bit pattern). */
typedef struct {
  double f;
  int64_t i;
} Identity;

static gboolean
reducer_identity (const PsComputation *c, PsElemType t, Identity *id)
{
  if (!c || !c->root || c->root->n_operands != 2 || c->params->len != 2
      || c->root->operands[0]->opcode != PS_OP_PARAMETER
      || c->root->operands[1]->opcode != PS_OP_PARAMETER)
    return FALSE;
  int bits = 8 * ps_etype_size_bytes (t);
  gboolean sgn = ps_etype_is_signed (t);
  /* Lowest and highest integers of t (pred: 0 and 1). */
  int64_t lo = t == PS_PRED ? 0 : sgn ? (int64_t) (-(((guint64) 1) << (bits - 1))) : 0;
  int64_t hi = t == PS_PRED ? 1
               : sgn ? (int64_t) ((((guint64) 1) << (bits - 1)) - 1)
               : bits >= 64 ? -1 : (int64_t) ((((guint64) 1) << bits) - 1);
  switch (c->root->opcode)
    {
    case PS_OP_ADD: case PS_OP_OR: case PS_OP_XOR:
      id->f = 0, id->i = 0;
      return TRUE;
    case PS_OP_MULTIPLY:
      id->f = 1, id->i = 1;
      return TRUE;
    case PS_OP_AND:
      id->f = 0, id->i = t == PS_PRED ? 1 : sgn ? -1 : hi;
      return !ps_etype_is_float (t);
    case PS_OP_MAXIMUM:
      id->f = -INFINITY, id->i = lo;
      return TRUE;
    case PS_OP_MINIMUM:
      id->f = INFINITY, id->i = hi;
      return TRUE;
    default:
      return FALSE;
    }
}

static gboolean
init_identity (const PsInstr *ins, int depth, Identity *identity)
{
  if (depth > 6 || ins->shape->etype == PS_TUPLE)
    return FALSE;
  for (guint u = 0; u < ins->users->len; u++)
    {
      const PsInstr *user = ins->users->pdata[u];
      for (int k = 0; k < user->n_operands; k++)
        {
          if (user->operands[k] != ins)
            continue;
          gboolean is_init = FALSE;
          const PsComputation *red = NULL;
          if ((user->opcode == PS_OP_REDUCE || user->opcode == PS_OP_REDUCE_WINDOW)
              && user->n_operands == 2 && k == 1 && user->n_called == 1)
            is_init = TRUE, red = user->called[0];
          else if (user->opcode == PS_OP_SELECT_AND_SCATTER && k == 2 && user->n_called == 2)
            is_init = TRUE, red = user->called[1];
          if (is_init)
            {
              if (reducer_identity (red, ins->shape->etype, identity))
                return TRUE;
              continue;
            }
          switch (user->opcode)
            {
            case PS_OP_COPY: case PS_OP_CONVERT: case PS_OP_RESHAPE: case PS_OP_BROADCAST:
            case PS_OP_BITCAST:
              if (user->shape->etype == ins->shape->etype && init_identity (user, depth + 1, identity))
                return TRUE;
              break;
            default:
              break;
            }
        }
    }
  return FALSE;
}

static void
fill_random (PsValue *v, guint64 *state, int64_t bound)
{
  if (v->shape->etype == PS_TUPLE)
    {
      for (int k = 0; k < v->n_elems; k++)
        fill_random (v->elems[k], state, bound);
      return;
    }
  PsElemType t = v->shape->etype;
  for (int64_t i = 0; i < v->n; i++)
    {
      guint64 r = splitmix (state);
      if (v->f)
        /* Multiples of 2^-10 in [-2, 2): exact in every float type podsim
         * uses except bf16/f16 (rounded), so sums rarely round. */
        ps_value_set (v, i, ((double) (int64_t) (r % 4096) - 2048.0) / 1024.0);
      else if (v->c)
        {
          v->c[2 * i] = ps_etype_round (t, ((double) (int64_t) (r % 4096) - 2048.0) / 1024.0);
          v->c[2 * i + 1] = ps_etype_round (t, ((double) (int64_t) ((r >> 20) % 4096) - 2048.0) / 1024.0);
        }
      else if (t == PS_PRED)
        v->i[i] = (int64_t) (r & 1);
      else if (bound > 0)
        v->i[i] = (int64_t) (r % (guint64) bound);
      else if (ps_etype_is_signed (t))
        v->i[i] = (int64_t) (r % 16) - 8;
      else
        v->i[i] = (int64_t) (r % 16);
    }
}

PsShape *
ps_verify_local_shape (const PsSharding *s, const PsShape *shape)
{
  if (!s)
    return ps_shape_copy (shape);
  return ps_sharding_tile_shape (s, shape);
}

/* Whether a (leaf) sharding can be applied to an array of `shape`. */
static gboolean
sharding_fits (const PsSharding *s, const PsShape *shape)
{
  if (!s || s->kind != PS_SHARDING_TILED || shape->etype == PS_TOKEN)
    return TRUE;
  return shape->etype != PS_TUPLE && ps_sharding_data_rank (s) == shape->rank;
}

/* Copies the tile [off, lim) of `full` into the corner of `local` (the rest
 * stays zero), or with `back`, compares instead. */
static void
extract_tile (PsValue *local, const PsValue *full, const int64_t *off, const int64_t *lim)
{
  int rank = full->shape->rank;
  int64_t *idx = g_new0 (int64_t, rank + 1);
  int64_t *fst = ps_shape_strides (full->shape);
  for (int64_t i = 0; i < local->n; i++)
    {
      gboolean in = TRUE;
      int64_t fi = 0;
      for (int d = 0; d < rank; d++)
        {
          int64_t g = off[d] + idx[d];
          if (g >= lim[d])
            in = FALSE;
          fi += g * fst[d];
        }
      if (in)
        ps_value_copy_elem (local, i, full, fi);
      ps_index_next (rank, local->shape->dims, idx);
    }
  g_free (idx);
  g_free (fst);
}

/* The piece of a leaf value `full` with sharding `s` that `device` holds
 * (NULL when it holds nothing meaningful: maximal on another device). */
static PsValue *
local_piece (const PsSharding *s, const PsValue *full, int64_t device, gboolean zeros_if_none)
{
  if (!s || s->kind == PS_SHARDING_REPLICATED || s->kind == PS_SHARDING_MANUAL
      || s->kind == PS_SHARDING_UNKNOWN || s->kind == PS_SHARDING_TUPLE
      || full->shape->etype == PS_TOKEN)
    return ps_value_copy (full);
  if (s->kind == PS_SHARDING_MAXIMAL)
    {
      if (s->device == device)
        return ps_value_copy (full);
      return zeros_if_none ? ps_value_new (full->shape) : NULL;
    }
  PsShape *ls = ps_sharding_tile_shape (s, full->shape);
  PsValue *local = ps_value_new (ls);
  ps_shape_free (ls);
  int rank = full->shape->rank;
  int64_t *off = g_new0 (int64_t, rank + 1), *lim = g_new0 (int64_t, rank + 1);
  if (ps_sharding_tile_bounds (s, full->shape, device, off, lim))
    extract_tile (local, full, off, lim);
  else if (!zeros_if_none)
    g_clear_pointer (&local, ps_value_free);
  g_free (off);
  g_free (lim);
  return local;
}

static PsValue *
split_value (const PsSharding *s, const PsValue *full, int64_t device)
{
  if (full->shape->etype != PS_TUPLE)
    {
      PsSharding *leaf = s && s->kind == PS_SHARDING_TUPLE && s->n_elems >= 1
                         ? ps_sharding_leaf (s, 0) : NULL;
      PsValue *v = local_piece (leaf ? leaf : s, full, device, TRUE);
      if (leaf)
        ps_sharding_free (leaf);
      return v;
    }
  /* Tuples: leaves depth-first, each with its own sharding. */
  PsValue **elems = g_new0 (PsValue *, MAX (1, full->n_elems));
  int leaf_base = 0;
  for (int k = 0; k < full->n_elems; k++)
    {
      int nl = ps_shape_leaf_count (full->elems[k]->shape);
      PsSharding *sub = NULL;
      if (s && s->kind == PS_SHARDING_TUPLE)
        {
          PsSharding **subs = g_new0 (PsSharding *, MAX (1, nl));
          for (int j = 0; j < nl; j++)
            subs[j] = ps_sharding_leaf (s, leaf_base + j);
          sub = nl == 1 ? subs[0] : ps_sharding_tuple (nl, subs);
          g_free (subs);
        }
      else if (s)
        sub = ps_sharding_copy (s);
      elems[k] = split_value (sub, full->elems[k], device);
      if (sub)
        ps_sharding_free (sub);
      leaf_base += nl;
    }
  PsValue *v = ps_value_new_tuple (full->n_elems, elems);
  g_free (elems);
  return v;
}

/* ---- comparison ------------------------------------------------------------------ */

static void
tolerance (PsElemType t, const PsVerifyOptions *o, double *rtol, double *atol)
{
  switch (t)
    {
    case PS_F64: case PS_C128: *rtol = 1e-9; *atol = 1e-9; break;
    case PS_F16: *rtol = 1e-2; *atol = 5e-2; break;
    case PS_BF16: *rtol = 2e-2; *atol = 1e-1; break;
    default:
      if (ps_etype_minifloat (t))
        {
          /* M mantissa bits: one rounding is 2^-(M+1) relative; allow two
           * (f8e4m3fn: 0.125 and 0.5, f8e5m2: 0.25 and 1). */
          *rtol = ldexp (1.0, -ps_etype_minifloat (t)->mbits);
          *atol = 4 * *rtol;
        }
      else
        *rtol = 1e-4, *atol = 1e-3;
      break;
    }
  if (o && o->rtol > 0)
    *rtol = o->rtol;
  if (o && o->atol > 0)
    *atol = o->atol;
}

static gboolean
close_enough (double a, double e, double rtol, double atol)
{
  if (isnan (a) || isnan (e))
    return isnan (a) && isnan (e);
  if (isinf (a) || isinf (e))
    return a == e;
  return fabs (a - e) <= atol + rtol * fabs (e);
}

static void
format_index (GString *out, int rank, const int64_t *idx)
{
  g_string_append_c (out, '[');
  for (int d = 0; d < rank; d++)
    g_string_append_printf (out, "%s%" G_GINT64_FORMAT, d ? "," : "", idx[d]);
  g_string_append_c (out, ']');
}

/* Compares device `device`'s result leaf `got` with the reference leaf
 * `full` under sharding `s`. Returns FALSE and fills the result at the first
 * mismatch. */
static gboolean
compare_leaf (const PsSharding *s, const PsValue *full, const PsValue *got, int64_t device,
              int leaf, const PsVerifyOptions *o, PsVerifyResult *res)
{
  GString *msg = NULL;
  if (s && s->kind == PS_SHARDING_MAXIMAL && s->device != device)
    return TRUE; /* only the owner's value is defined */
  PsShape *ls = ps_verify_local_shape (s, full->shape);
  if (!ps_shape_equal (ls, got->shape))
    {
      char *want = ps_shape_to_string (ls, FALSE), *have = ps_shape_to_string (got->shape, FALSE);
      res->message = g_strdup_printf ("output %d on device %" G_GINT64_FORMAT
                                      ": local shape %s, its sharding wants %s",
                                      leaf, device, have, want);
      g_free (want);
      g_free (have);
      ps_shape_free (ls);
      res->agree = FALSE;
      res->mismatch_output = leaf;
      res->mismatch_device = device;
      return FALSE;
    }
  ps_shape_free (ls);
  int rank = full->shape->rank;
  int64_t *off = g_new0 (int64_t, rank + 1), *lim = g_new0 (int64_t, rank + 1);
  int64_t *idx = g_new0 (int64_t, rank + 1), *gidx = g_new0 (int64_t, rank + 1);
  int64_t *fst = ps_shape_strides (full->shape);
  gboolean ok = TRUE;
  for (int d = 0; d < rank; d++)
    lim[d] = full->shape->dims[d];
  if (s && s->kind == PS_SHARDING_TILED && !ps_sharding_tile_bounds (s, full->shape, device, off, lim))
    goto done; /* device outside the tile assignment holds nothing */
  double rtol, atol;
  tolerance (full->shape->etype, o, &rtol, &atol);
  for (int64_t i = 0; i < got->n && ok; i++)
    {
      gboolean in = TRUE;
      int64_t fi = 0;
      for (int d = 0; d < rank; d++)
        {
          gidx[d] = off[d] + idx[d];
          if (gidx[d] >= lim[d])
            in = FALSE;
          fi += gidx[d] * fst[d];
        }
      if (in)
        {
          gboolean same;
          res->n_compared++;
          if (full->i)
            same = full->i[fi] == got->i[i];
          else if (full->f)
            same = close_enough (got->f[i], full->f[fi], rtol, atol);
          else if (full->c)
            same = close_enough (got->c[2 * i], full->c[2 * fi], rtol, atol)
                   && close_enough (got->c[2 * i + 1], full->c[2 * fi + 1], rtol, atol);
          else
            same = TRUE;
          if (!same)
            {
              msg = g_string_new (NULL);
              g_string_append_printf (msg, "output %d differs on device %" G_GINT64_FORMAT " at ",
                                      leaf, device);
              format_index (msg, rank, gidx);
              g_string_append (msg, ": expected ");
              ps_value_append_elem (msg, full, fi);
              g_string_append (msg, ", got ");
              ps_value_append_elem (msg, got, i);
              if (full->f)
                g_string_append_printf (msg, " (tolerance %g + %g*|expected|)", atol, rtol);
              res->message = g_string_free (msg, FALSE);
              res->agree = FALSE;
              res->mismatch_output = leaf;
              res->mismatch_device = device;
              ok = FALSE;
            }
        }
      ps_index_next (rank, got->shape->dims, idx);
    }
done:
  g_free (off);
  g_free (lim);
  g_free (idx);
  g_free (gidx);
  g_free (fst);
  return ok;
}

static void
collect_leaves (const PsValue *v, GPtrArray *out)
{
  if (v->shape->etype != PS_TUPLE)
    {
      g_ptr_array_add (out, (gpointer) v);
      return;
    }
  for (int k = 0; k < v->n_elems; k++)
    collect_leaves (v->elems[k], out);
}

/* The sharding of leaf k of a value with n leaves: tuple shardings must
 * have one element per leaf (else NULL, treated as replicated by callers
 * that checked the count). transfer full. */
static PsSharding *
leaf_sharding (const PsSharding *s, int k, int n)
{
  if (!s)
    return NULL;
  if (s->kind == PS_SHARDING_TUPLE && (s->n_elems != n || k >= s->n_elems || s->n_elems == 0))
    return NULL;
  return ps_sharding_leaf (s, k);
}

static gboolean
tuple_sharding_fits (const PsSharding *s, const PsShape *shape)
{
  /* A token carries no data: outfeed's token gets the sharding of the
   * whole (data, token) tuple, which is fine. */
  return !s || s->kind != PS_SHARDING_TUPLE || shape->etype == PS_TOKEN
         || s->n_elems == ps_shape_leaf_count (shape);
}

/* ---- the global view of programs with manual regions ------------------------------ */

static gboolean
has_manual (const PsSharding *s)
{
  if (!s)
    return FALSE;
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int k = 0; k < s->n_elems; k++)
        if (has_manual (s->elems[k]))
          return TRUE;
      return FALSE;
    }
  return s->kind == PS_SHARDING_MANUAL || ps_sharding_has_manual_subgroup (s);
}

/* Whether the original's meaning is per device: it has manual shardings,
 * asks for its device's id or exchanges data between devices. Such a
 * program is run on every device (the global view, see verify.h). */
static gboolean
needs_global_view (const PsModule *m)
{
  for (guint c = 0; c < m->computations->len; c++)
    {
      const PsComputation *comp = m->computations->pdata[c];
      for (guint i = 0; i < comp->instrs->len; i++)
        {
          const PsInstr *ins = comp->instrs->pdata[i];
          if (has_manual (ins->sharding) || ps_opcode_is_collective (ins->opcode)
              || ins->opcode == PS_OP_PARTITION_ID || ins->opcode == PS_OP_REPLICA_ID)
            return TRUE;
        }
    }
  return FALSE;
}

/* The manual group of `device` under a leaf sharding: devices of one group
 * share one value of a manual array. -1 when the sharding is not manual
 * (every device sees the same value); fully manual: the device itself;
 * partially manual: the device's coordinates in the manual subgroup dims,
 * linearized. */
static int64_t
manual_group (const PsSharding *s, int64_t device)
{
  if (!s)
    return -1;
  if (s->kind == PS_SHARDING_MANUAL)
    return device;
  if (!ps_sharding_has_manual_subgroup (s))
    return -1;
  int64_t *idx = g_new0 (int64_t, s->n_tile_dims + 1);
  int64_t g = 0;
  if (ps_sharding_device_index (s, device, idx))
    {
      int first = s->n_tile_dims - s->n_subgroups;
      for (int k = 0; k < s->n_subgroups; k++)
        if (s->subgroup_kinds[k] == PS_SUBGROUP_MANUAL)
          g = g * s->tile_dims[first + k] + idx[first + k];
    }
  g_free (idx);
  return g;
}

/* Device `device`'s view of a parameter in the global view: `full` for
 * non-manual leaves; manual leaves get values of their own for each manual
 * group (group 0 keeps `full`'s), so that devices of different groups hold
 * different data, as a manual program allows. */
static PsValue *
global_view_arg (const PsSharding *s, const PsValue *full, int64_t device, guint64 seed,
                 int64_t bound)
{
  PsValue *v = ps_value_copy (full);
  GPtrArray *leaves = g_ptr_array_new ();
  collect_leaves (v, leaves);
  for (guint k = 0; k < leaves->len; k++)
    {
      PsSharding *ls = leaf_sharding (s, (int) k, (int) leaves->len);
      int64_t g = manual_group (ls, device);
      if (g > 0)
        {
          guint64 state = seed ^ ((guint64) (g + 1) * 0xd1342543de82ef95ULL)
                          ^ ((guint64) (k + 1) * 0x2545f4914f6cdd1dULL);
          fill_random (leaves->pdata[k], &state, bound);
        }
      if (ls)
        ps_sharding_free (ls);
    }
  g_ptr_array_free (leaves, TRUE);
  return v;
}

/* ---- driver ------------------------------------------------------------------------ */

/* One verification run: the inputs (full, per device, and per device in
 * the global view), the reference result(s) and every device's outputs. */
typedef struct {
  int np;
  int64_t n_dev;
  gboolean global;            /* the original runs on every device (needs_global_view) */
  PsValue **full;             /* [np] */
  PsValue **local;            /* [n_dev * np]: each device's piece */
  PsValue **view;             /* [n_dev * np] global view inputs, or NULL */
  PsValue **refs;             /* [n_dev] global view results, or NULL */
  PsValue *ref;               /* the original's result */
  PsValue **outs;             /* [n_dev] the partitioned program's results */
  int64_t input_elements;     /* held by all the inputs */
} VerifyRun;

static void
verify_run_clear (VerifyRun *r)
{
  for (int p = 0; p < r->np; p++)
    ps_value_free (r->full[p]);
  for (gsize k = 0; k < (gsize) r->np * r->n_dev; k++)
    ps_value_free (r->local[k]);
  for (int64_t d = 0; d < r->n_dev; d++)
    ps_value_free (r->outs[d]);
  ps_value_free (r->ref);
  if (r->global)
    {
      for (gsize k = 0; k < (gsize) r->np * r->n_dev; k++)
        ps_value_free (r->view[k]);
      for (int64_t d = 0; d < r->n_dev; d++)
        ps_value_free (r->refs[d]);
    }
  g_free (r->view);
  g_free (r->refs);
  g_free (r->full);
  g_free (r->local);
  g_free (r->outs);
}

/* The two programs fit together: entries, as many parameters, devices. */
static gboolean
check_programs (const PsComputation *oe, const PsComputation *pe, int64_t num_devices, GError **error)
{
  if (!oe || !pe)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "verify: a module has no entry computation");
      return FALSE;
    }
  if (pe->params->len != oe->params->len)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                   "verify: the original has %u parameters, the partitioned program %u", oe->params->len,
                   pe->params->len);
      return FALSE;
    }
  if (num_devices < 1)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "verify: need at least one device");
      return FALSE;
    }
  return TRUE;
}

/* Parameter p's sharding fits its shape (per tuple leaf), and the
 * partitioned program's parameter has the tile shape; *tile gets it
 * (transfer full). */
static gboolean
check_param_sharding (int p, const PsInstr *param, const PsInstr *pparam, PsShape **tile, GError **error)
{
  const PsSharding *s = param->sharding;
  if (!tuple_sharding_fits (s, param->shape))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                   "verify: parameter %d (%s): tuple sharding does not match its shape", p, param->name);
      return FALSE;
    }
  gboolean ok = TRUE;
  GPtrArray *leaves = ps_shape_leaves (param->shape);
  for (guint k = 0; k < leaves->len && ok; k++)
    {
      PsSharding *ls = leaf_sharding (s, (int) k, (int) leaves->len);
      if (!sharding_fits (ls, leaves->pdata[k]))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "verify: parameter %d (%s): sharding does not fit its shape",
                       p, param->name);
          ok = FALSE;
        }
      if (ls)
        ps_sharding_free (ls);
    }
  g_ptr_array_free (leaves, TRUE);
  if (!ok)
    return FALSE;
  PsShape *want = s ? ps_sharding_tile_shape (s, param->shape) : ps_shape_copy (param->shape);
  if (!ps_shape_equal (want, pparam->shape))
    {
      g_autofree char *w = ps_shape_to_string (want, FALSE);
      g_autofree char *h = ps_shape_to_string (pparam->shape, FALSE);
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                   "verify: parameter %d (%s) has local shape %s, its sharding's tile shape is %s", p,
                   param->name, h, w);
      ps_shape_free (want);
      return FALSE;
    }
  *tile = want;
  return TRUE;
}

/* Parameter p's random full value (identities where it feeds an init
 * value) and every device's piece of it. */
static gboolean
make_param_inputs (VerifyRun *r, int p, const PsInstr *param, const PsInstr *pparam,
                   const PsVerifyOptions *opts, GError **error)
{
  int64_t max_el = opts->interp.max_elements > 0 ? opts->interp.max_elements : (int64_t) 64 * 1024 * 1024;
  if (ps_shape_leaf_elements (param->shape) > max_el)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_LIMIT,
                   "verify: parameter %d (%s) has %" G_GINT64_FORMAT " elements, over the "
                   "interpreter's limit of %" G_GINT64_FORMAT, p, param->name,
                   ps_shape_leaf_elements (param->shape), max_el);
      return FALSE;
    }
  r->full[p] = ps_value_new (param->shape);
  guint64 state = opts->seed * 0x100000001b3ULL + (guint64) p * 0x9e3779b97f4a7c15ULL;
  guint64 seed0 = state;
  int64_t bound = ps_etype_is_integral (param->shape->etype) ? index_bound (param, 0) : 0;
  fill_random (r->full[p], &state, bound);
  Identity identity;
  if (init_identity (param, 0, &identity))
    for (int64_t e = 0; e < r->full[p]->n; e++)
      {
        if (r->full[p]->f)
          r->full[p]->f[e] = identity.f;
        else if (r->full[p]->i)
          r->full[p]->i[e] = identity.i;
      }
  g_autoptr (PsShape) tile = NULL;
  if (!check_param_sharding (p, param, pparam, &tile, error))
    return FALSE;
  /* The devices' pieces of all parameters live at once: cap them like the
   * interpreter caps its values (1536 devices x a few Mi elements each
   * reached 24 GB). */
  int64_t max_live = opts->interp.max_live_elements > 0 ? opts->interp.max_live_elements : 4 * max_el;
  r->input_elements += ps_shape_leaf_elements (tile) * r->n_dev;
  if (r->global)
    r->input_elements += ps_shape_leaf_elements (param->shape) * r->n_dev;
  if (r->input_elements > max_live)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_LIMIT,
                   "verify: the parameters' pieces on %" G_GINT64_FORMAT " devices hold %" G_GINT64_FORMAT
                   " elements, over the interpreter's limit of %" G_GINT64_FORMAT,
                   r->n_dev, r->input_elements, max_live);
      return FALSE;
    }
  for (int64_t d = 0; d < r->n_dev; d++)
    {
      gsize k = (gsize) d * r->np + p;
      if (r->global)
        r->view[k] = global_view_arg (param->sharding, r->full[p], d, seed0, bound);
      r->local[k] = split_value (param->sharding, r->global ? r->view[k] : r->full[p], d);
    }
  return TRUE;
}

/* The reference: the original on the full inputs (or on every device in
 * the global view). */
static gboolean
run_original (VerifyRun *r, const PsModule *original, const PsVerifyOptions *opts, GError **error)
{
  PsInterpOptions io = opts->interp;
  io.num_replicas = 1;
  io.num_partitions = r->global ? r->n_dev : 1;
  io.rng_constant = TRUE;
  io.global_view = r->global;
  GError *e = NULL;
  if (r->global)
    {
      if (!ps_interp_run_spmd (original, r->n_dev, r->np, r->view, r->refs, &io, &e))
        g_clear_pointer (&r->refs[0], ps_value_free);
      r->ref = r->refs[0] ? ps_value_copy (r->refs[0]) : NULL;
    }
  else
    r->ref = ps_interp_run (original, r->np, r->full, &io, &e);
  if (!r->ref)
    {
      g_set_error (error, PS_ERROR, e->code, "verify: original module: %s", e->message);
      g_error_free (e);
      return FALSE;
    }
  return TRUE;
}

/* The SPMD program on all devices in lockstep; the budget covers both runs. */
static gboolean
run_partitioned (VerifyRun *r, const PsModule *partitioned, const PsVerifyOptions *opts, GError **error)
{
  PsInterpOptions io = opts->interp;
  io.num_replicas = 1;
  io.num_partitions = r->n_dev;
  io.rng_constant = TRUE;
  GError *e = NULL;
  if (!ps_interp_run_spmd (partitioned, r->n_dev, r->np, r->local, r->outs, &io, &e))
    {
      g_set_error (error, PS_ERROR, e->code, "verify: partitioned module: %s", e->message);
      g_error_free (e);
      return FALSE;
    }
  return TRUE;
}

/* Every device's piece of every output against the reference. */
static void
compare_outputs (VerifyRun *r, const PsComputation *oe, const PsVerifyOptions *opts, PsVerifyResult *result)
{
  GPtrArray *rl = g_ptr_array_new ();
  collect_leaves (r->ref, rl);
  result->n_outputs = (int) rl->len;
  result->agree = TRUE;
  const PsSharding *rs = oe->root->sharding;
  if (!tuple_sharding_fits (rs, oe->root->shape))
    {
      result->agree = FALSE;
      result->message = g_strdup ("the root's tuple sharding does not match its shape");
    }
  for (int64_t d = 0; d < r->n_dev && result->agree; d++)
    {
      GPtrArray *gl = g_ptr_array_new ();
      collect_leaves (r->outs[d], gl);
      if (r->global)
        {
          g_ptr_array_set_size (rl, 0);
          collect_leaves (r->refs[d], rl);
        }
      if (gl->len != rl->len)
        {
          result->agree = FALSE;
          result->mismatch_device = d;
          result->message = g_strdup_printf ("device %" G_GINT64_FORMAT " returns %u outputs, the original %u",
                                             d, gl->len, rl->len);
        }
      for (guint k = 0; k < rl->len && result->agree; k++)
        {
          PsSharding *ls = leaf_sharding (rs, (int) k, (int) rl->len);
          const PsValue *rv = rl->pdata[k];
          if (rv->shape->etype == PS_TOKEN)
            ; /* tokens carry no data */
          else if (!sharding_fits (ls, rv->shape))
            {
              result->agree = FALSE;
              result->message = g_strdup_printf ("output %u: root sharding does not fit its shape", k);
            }
          else
            compare_leaf (ls, rv, gl->pdata[k], d, (int) k, opts, result);
          if (ls)
            ps_sharding_free (ls);
        }
      g_ptr_array_free (gl, TRUE);
    }
  if (result->agree)
    {
      g_autofree char *what = result->n_outputs == 1 ? g_strdup ("the output agrees")
                              : g_strdup_printf ("all %d outputs agree", result->n_outputs);
      result->message = g_strdup_printf ("%s on %" G_GINT64_FORMAT " device%s (%" G_GINT64_FORMAT
                                         " elements compared)", what, r->n_dev, r->n_dev == 1 ? "" : "s",
                                         result->n_compared);
    }
  g_ptr_array_free (rl, TRUE);
}

static gboolean
verify_once (const PsModule *original, const PsModule *partitioned, int64_t num_devices,
             const PsVerifyOptions *opts, PsVerifyResult *result, GError **error)
{
  g_return_val_if_fail (original && partitioned && result, FALSE);
  memset (result, 0, sizeof *result);
  result->mismatch_output = -1;
  result->mismatch_device = -1;
  PsVerifyOptions defaults;
  if (!opts)
    {
      ps_verify_options_init (&defaults);
      opts = &defaults;
    }
  const PsComputation *oe = original->entry, *pe = partitioned->entry;
  if (!check_programs (oe, pe, num_devices, error))
    return FALSE;
  VerifyRun r = { 0 };
  r.np = (int) oe->params->len;
  r.n_dev = num_devices;
  /* Per-device meaning (manual regions, collectives, partition-id): the
   * original runs on every device, each with its own view of the inputs. */
  r.global = needs_global_view (original);
  r.full = g_new0 (PsValue *, MAX (1, r.np));
  r.local = g_new0 (PsValue *, MAX (1, (gsize) r.np * num_devices));
  r.outs = g_new0 (PsValue *, num_devices);
  if (r.global)
    {
      r.view = g_new0 (PsValue *, MAX (1, (gsize) r.np * num_devices));
      r.refs = g_new0 (PsValue *, num_devices);
    }
  gboolean ok = TRUE;
  for (int p = 0; p < r.np && ok; p++)
    ok = make_param_inputs (&r, p, oe->params->pdata[p], pe->params->pdata[p], opts, error);
  ok = ok && run_original (&r, original, opts, error) && run_partitioned (&r, partitioned, opts, error);
  if (ok)
    compare_outputs (&r, oe, opts, result);
  verify_run_clear (&r);
  return ok;
}

gboolean
ps_verify_spmd (const PsModule *original, const PsModule *partitioned, int64_t num_devices,
                const PsVerifyOptions *opts, PsVerifyResult *result, GError **error)
{
  if (!verify_once (original, partitioned, num_devices, opts, result, error))
    return FALSE;
  if (result->agree || (opts && opts->no_widen) || !ps_verify_module_has_narrow_floats (original))
    return TRUE;
  /* Recheck in f64: rounding partial results differently is not an error
   * (doc/interpreter.md, "Rounding"). */
  g_autoptr (PsModule) wo = ps_module_clone (original);
  g_autoptr (PsModule) wp = ps_module_clone (partitioned);
  if (!ps_verify_widen_floats (wo) || !ps_verify_widen_floats (wp))
    return TRUE;
  PsVerifyResult wide;
  GError *werr = NULL;
  if (!verify_once (wo, wp, num_devices, opts, &wide, &werr))
    {
      g_error_free (werr);
      return TRUE;
    }
  if (wide.agree)
    {
      char *msg = g_strdup_printf ("%s in f64 arithmetic; with the float types as written they "
                                   "differ by rounding: %s", wide.message, result->message);
      ps_verify_result_clear (result);
      *result = wide;
      g_free (result->message);
      result->message = msg;
      result->widened = TRUE;
    }
  else
    ps_verify_result_clear (&wide);
  return TRUE;
}

/* Lowering of an SPMD module to a step trace (see lower.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "partitioner/analysis/cost.h"
#include "partitioner/analysis/lower.h"
#include "partitioner/analysis/memory.h"

void
ps_lower_options_init (PsLowerOptions *opts)
{
  memset (opts, 0, sizeof *opts);
  opts->memory_events = TRUE;
  opts->max_events = 10000000;
}

/* ---- group and pair compression -------------------------------------------------- */

static int
cmp_group (const void *a, const void *b, void *size_p)
{
  guint64 n = *(const guint64 *) size_p;
  const guint32 *x = a, *y = b;
  for (guint64 i = 0; i < n; i++)
    if (x[i] != y[i])
      return x[i] < y[i] ? -1 : 1;
  return 0;
}

/* Groups in a canonical order (each group keeps its member order). */
static void
sort_groups (guint32 *ids, guint64 n_groups, guint64 size)
{
  g_qsort_with_data (ids, (gint) n_groups, size * sizeof (guint32),
                     (GCompareDataFunc) cmp_group, &size);
}

static gboolean
next_permutation (guint *a, guint n)
{
  if (n < 2)
    return FALSE;
  int i = (int) n - 2;
  while (i >= 0 && a[i] >= a[i + 1])
    i--;
  if (i < 0)
    return FALSE;
  int j = (int) n - 1;
  while (a[j] <= a[i])
    j--;
  guint t = a[i];
  a[i] = a[j];
  a[j] = t;
  for (guint l = (guint) i + 1, r = n - 1; l < r; l++, r--)
    {
      t = a[l];
      a[l] = a[r];
      a[r] = t;
    }
  return TRUE;
}

void
ps_lower_compress_groups (const PsTraceHeader *h, int n_groups, int group_size,
                          const int64_t *ids, PsTraceGroups *out)
{
  guint64 n = (guint64) n_groups * (guint64) group_size;
  memset (out, 0, sizeof *out);
  g_autofree guint32 *want = g_new (guint32, n + 1);
  for (guint64 i = 0; i < n; i++)
    want[i] = (guint32) ids[i];
  gboolean identity = n_groups == 1 && n == h->n_devices;
  for (guint64 i = 0; identity && i < n; i++)
    identity = want[i] == i;
  if (identity)
    {
      out->form = PS_TRACE_GROUPS_ALL;
      out->n_groups = 1;
      out->group_size = n;
      return;
    }
  if (n == h->n_devices)
    {
      g_autofree guint32 *sorted = g_memdup2 (want, n * sizeof (guint32));
      sort_groups (sorted, (guint64) n_groups, (guint64) group_size);
      guint rank = h->mesh.rank;
      /* every subset of mesh axes, and for small subsets every order */
      for (guint mask = 1; mask < (1u << rank); mask++)
        {
          PsTraceGroups g = { .form = PS_TRACE_GROUPS_AXES };
          guint64 size = 1;
          for (guint a = 0; a < rank; a++)
            if (mask & (1u << a))
              {
                g.axes[g.n_axes++] = a;
                size *= (guint64) h->mesh.dims[a];
              }
          if (size != (guint64) group_size)
            continue;
          do
            {
              guint64 ng, gs;
              g_autofree guint32 *got = ps_trace_groups_expand (&g, h, &ng, &gs);
              sort_groups (got, ng, gs);
              if (memcmp (got, sorted, n * sizeof (guint32)) == 0)
                {
                  *out = g;
                  out->n_groups = ng;
                  out->group_size = gs;
                  return;
                }
            }
          while (g.n_axes <= 4 && next_permutation (g.axes, g.n_axes));
        }
    }
  out->form = PS_TRACE_GROUPS_LIST;
  out->n_groups = (guint64) n_groups;
  out->group_size = (guint64) group_size;
  out->devices = g_steal_pointer (&want);
}

static int
cmp_pair (const void *a, const void *b)
{
  const guint32 *x = a, *y = b;
  if (x[0] != y[0])
    return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

void
ps_lower_compress_pairs (const PsTraceHeader *h, int n_pairs, const int64_t *pairs,
                         PsTracePairs *out)
{
  memset (out, 0, sizeof *out);
  g_autofree guint32 *want = g_new (guint32, 2 * (gsize) n_pairs + 2);
  for (int i = 0; i < 2 * n_pairs; i++)
    want[i] = (guint32) pairs[i];
  qsort (want, (gsize) n_pairs, 2 * sizeof (guint32), cmp_pair);
  if (n_pairs > 0 && want[0] < h->n_devices && want[1] < h->n_devices)
    {
      /* the axis and offset the first pair moves along */
      guint64 nd;
      g_autofree guint32 *ids = ps_trace_mesh_device_ids (&h->mesh, &nd);
      g_autofree guint64 *pos = g_new0 (guint64, nd + 1);
      for (guint64 p = 0; p < nd; p++)
        pos[ids[p]] = p;
      gint64 cs[PS_TRACE_MAX_RANK], ct[PS_TRACE_MAX_RANK];
      guint64 ps = pos[want[0]], pt = pos[want[1]];
      for (int a = (int) h->mesh.rank - 1; a >= 0; a--)
        {
          cs[a] = (gint64) (ps % (guint64) h->mesh.dims[a]);
          ct[a] = (gint64) (pt % (guint64) h->mesh.dims[a]);
          ps /= (guint64) h->mesh.dims[a];
          pt /= (guint64) h->mesh.dims[a];
        }
      int axis = -1, moved = 0;
      for (guint a = 0; a < h->mesh.rank; a++)
        if (cs[a] != ct[a])
          {
            axis = (int) a;
            moved++;
          }
      if (moved == 1)
        {
          gint64 o = ct[axis] - cs[axis], size = h->mesh.dims[axis];
          PsTracePairs cand[3] = {
            { .form = PS_TRACE_PAIRS_SHIFT, .axis = (guint) axis, .offset = o },
            { .form = PS_TRACE_PAIRS_SHIFT, .axis = (guint) axis, .offset = o, .wrap = TRUE },
            { .form = PS_TRACE_PAIRS_SHIFT, .axis = (guint) axis,
              .offset = o > 0 ? o - size : o + size, .wrap = TRUE },
          };
          for (int c = 0; c < 3; c++)
            {
              if (cand[c].offset == 0 || cand[c].offset >= size || -cand[c].offset >= size)
                continue;
              guint64 np;
              g_autofree guint32 *got = ps_trace_pairs_expand (&cand[c], h, &np);
              qsort (got, np, 2 * sizeof (guint32), cmp_pair);
              if (np == (guint64) n_pairs
                  && memcmp (got, want, 2 * np * sizeof (guint32)) == 0)
                {
                  *out = cand[c];
                  return;
                }
            }
        }
    }
  out->form = PS_TRACE_PAIRS_LIST;
  out->n_pairs = (guint64) n_pairs;
  out->pairs = g_steal_pointer (&want);
}

/* ---- lowering ---------------------------------------------------------------------------- */

typedef struct {
  const PsLowerOptions *opts;
  const PsModule *module;
  PsCostAnalysis *cost;
  const PsMemoryReport *memory;
  PsTrace *trace;
  guint64 next_async;
  GHashTable *pending;     /* collective PsInstr* -> async id */
  GHashTable *step_of;     /* entry PsInstr* -> 1 + index in memory->order */
  GHashTable *dones_at;    /* schedule: PsInstr* -> GPtrArray of collectives done before it */
  GError **error;
  gboolean failed;
} Lower;

static gboolean
too_many (Lower *l)
{
  if (ps_trace_n_events (l->trace) < l->opts->max_events)
    return FALSE;
  if (!l->failed)
    g_set_error (l->error, PS_ERROR, PS_ERROR_UNSUPPORTED, "the step trace would have "
                 "more than %" G_GUINT64_FORMAT " events; raise the limit%s",
                 (guint64) l->opts->max_events,
                 l->opts->unroll_loops ? " or do not unroll the loops" : "");
  l->failed = TRUE;
  return TRUE;
}

static PsTraceDtype
trace_dtype (const PsShape *s)
{
  while (s && s->etype == PS_TUPLE)
    s = s->n_elems > 0 ? s->elems[0] : NULL;
  if (!s)
    return PS_TRACE_F32;
  switch (s->etype)
    {
    case PS_PRED: return PS_TRACE_PRED;
    case PS_S8: return PS_TRACE_S8;
    case PS_S16: return PS_TRACE_S16;
    case PS_S32: return PS_TRACE_S32;
    case PS_S64: return PS_TRACE_S64;
    case PS_U8: return PS_TRACE_U8;
    case PS_U16: return PS_TRACE_U16;
    case PS_U32: return PS_TRACE_U32;
    case PS_U64: return PS_TRACE_U64;
    case PS_F16: return PS_TRACE_F16;
    case PS_BF16: return PS_TRACE_BF16;
    case PS_F64: return PS_TRACE_F64;
    case PS_C64: return PS_TRACE_C64;
    case PS_C128: return PS_TRACE_C128;
    /* The trace has no 4-bit or fp8 types; the bytes come from the shape.
     * TPU v3's MXU multiplies bf16 (shared/reference/tpuv3.md), so fp8
     * operands are costed as bf16 ones would be. */
    case PS_S4: case PS_S2: case PS_S1: return PS_TRACE_S8;
    case PS_U4: case PS_U2: case PS_U1: return PS_TRACE_U8;
    default: return ps_etype_minifloat (s->etype) ? PS_TRACE_BF16 : PS_TRACE_F32;
    }
}

static uint64_t
bytes_of (const PsShape *s)
{
  int64_t b = ps_shape_bytes (s);
  return b > 0 ? (uint64_t) b : 0;
}

static guint64
dim_product (const PsShape *s, const PsInts *dims)
{
  guint64 p = 1;
  for (int i = 0; i < dims->n; i++)
    p *= (guint64) s->dims[dims->v[i]];
  return p;
}

static guint64
free_product (const PsShape *s, const PsInts *a, const PsInts *b)
{
  guint64 p = 1;
  for (int d = 0; d < s->rank; d++)
    if (!ps_ints_contains (a, d) && !ps_ints_contains (b, d))
      p *= (guint64) s->dims[d];
  return p;
}

static void
mxu_dims (const PsInstr *in, PsTraceCompute *c)
{
  c->has_mxu = TRUE;
  const PsShape *lhs = in->operands[0]->shape, *rhs = in->operands[1]->shape;
  if (in->opcode == PS_OP_DOT || in->opcode == PS_OP_RAGGED_DOT)
    {
      c->mxu_batch = dim_product (lhs, &in->dot.lhs_batch);
      c->mxu_k = dim_product (lhs, &in->dot.lhs_contracting);
      c->mxu_m = free_product (lhs, &in->dot.lhs_batch, &in->dot.lhs_contracting);
      c->mxu_n = free_product (rhs, &in->dot.rhs_batch, &in->dot.rhs_contracting);
      if (in->opcode == PS_OP_RAGGED_DOT)
        {
          /* the rows (or contraction slices) of each group meet only that
           * group's weights: the rhs's group dim is not an output column,
           * and a ragged contraction is one matmul per group over its slice */
          const char *gd = ps_instr_get_raw_attr (in, "rhs_group_dims");
          int64_t d = gd ? g_ascii_strtoll (gd + (gd[0] == '{'), NULL, 10) : -1;
          if (d >= 0 && d < rhs->rank && rhs->dims[d] > 0 && !ps_ints_contains (&in->dot.rhs_batch, d)
              && !ps_ints_contains (&in->dot.rhs_contracting, d))
            c->mxu_n /= (guint64) rhs->dims[d];
          guint64 g = (guint64) ps_cost_ragged_groups (in);
          c->mxu_batch *= g;
          c->mxu_k = MAX (c->mxu_k / g, 1);
        }
    }
  else
    {
      const PsConvDims *d = &in->conv;
      const PsShape *out = in->shape;
      guint64 groups = in->feature_group_count > 1 ? (guint64) in->feature_group_count
                       : in->batch_group_count > 1 ? (guint64) in->batch_group_count : 1;
      if (d->present)
        {
          /* With the input features as the input's minor (contiguous) dim,
           * as activations are laid out, the window stays separate from
           * them: the simulator decides how window positions and features
           * meet the array (doc/compute-model.md). Otherwise (a weight
           * gradient, whose contracted "features" are the batch) the
           * contraction runs over the window positions as one contiguous
           * dim: the implicit matmul with K = features x window. */
          const PsShape *lhs_s = in->operands[0]->shape;
          int64_t minor = lhs_s->layout_n > 0 ? lhs_s->layout[0] : lhs_s->rank - 1;
          guint64 m = (guint64) out->dims[d->out_batch], w = 1;
          for (int i = 0; i < d->n_spatial; i++)
            {
              /* A base-dilated input (a transposed convolution, the input
               * gradient of a strided one) is mostly holes: with stride 1
               * each output position meets data at 1 / b of the window's
               * taps, so the array streams out / b rows per tap (the
               * sub-pixel split of the output by residue, one tap subset
               * each). */
              guint64 o = (guint64) out->dims[d->out_spatial[i]];
              const PsWindowDim *wd = i < in->window.n ? &in->window.dims[i] : NULL;
              if (wd && wd->base_dilation > 1 && wd->stride <= 1)
                o = (o + (guint64) wd->base_dilation - 1) / (guint64) wd->base_dilation;
              m *= o;
              w *= (guint64) rhs->dims[d->k_spatial[i]];
            }
          c->mxu_m = m;
          c->mxu_k = (guint64) rhs->dims[d->k_in_feature];
          c->mxu_n = (guint64) rhs->dims[d->k_out_feature] / groups;
          if (d->in_feature == minor)
            c->mxu_window = w;
          else
            c->mxu_k *= w;
        }
      else
        {
          guint64 of = rhs->rank ? (guint64) rhs->dims[rhs->rank - 1] : 1;
          c->mxu_n = of / groups;
          c->mxu_k = of ? (guint64) ps_shape_elements (rhs) / of : 1;
          c->mxu_m = of ? (guint64) ps_shape_elements (out) / of : 1;
        }
      c->mxu_batch = groups;
    }
  /* an empty dimension does no work but the trace wants positive dims */
  c->mxu_batch = MAX (c->mxu_batch, 1);
  c->mxu_m = MAX (c->mxu_m, 1);
  c->mxu_k = MAX (c->mxu_k, 1);
  c->mxu_n = MAX (c->mxu_n, 1);
}

static PsTracePrecision
precision_of (const PsInstr *in)
{
  if (!in->has_precision)
    return PS_TRACE_PRECISION_DEFAULT;
  PsPrecision p = MAX (in->precision[0], in->precision[1]);
  return p == PS_PRECISION_HIGHEST ? PS_TRACE_PRECISION_HIGHEST
         : p == PS_PRECISION_HIGH ? PS_TRACE_PRECISION_HIGH : PS_TRACE_PRECISION_DEFAULT;
}

/* Emits done for every pending collective whose result `v` reads, looking
 * through instructions that only alias or inline their operands. */
static void
finish_reads_of (Lower *l, const PsInstr *v, int depth)
{
  gpointer id;
  if (g_hash_table_lookup_extended (l->pending, v, NULL, &id))
    {
      ps_trace_add_done (l->trace, GPOINTER_TO_SIZE (id));
      g_hash_table_remove (l->pending, v);
      return;
    }
  const PsCost *c = ps_cost_get (l->cost, v);
  if (depth > 64 || !c || (c->klass != PS_COST_FREE && c->klass != PS_COST_INLINED && !c->fused))
    return;
  for (int i = 0; i < v->n_operands; i++)
    finish_reads_of (l, v->operands[i], depth + 1);
}

static void
finish_reads (Lower *l, const PsInstr *root)
{
  if (g_hash_table_size (l->pending) == 0)
    return;
  g_autoptr (GPtrArray) members = ps_cost_fusion_members (l->cost, root);
  for (guint i = 0; i < members->len; i++)
    {
      const PsInstr *m = g_ptr_array_index (members, i);
      for (int j = 0; j < m->n_operands; j++)
        finish_reads_of (l, m->operands[j], 0);
    }
}

static int
cmp_id (gconstpointer a, gconstpointer b)
{
  guint64 x = *(const guint64 *) a, y = *(const guint64 *) b;
  return x < y ? -1 : x > y;
}

/* Completes the pending collectives started in `comp`, oldest first. */
static void
flush_pending (Lower *l, const PsComputation *comp)
{
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (guint64));
  GHashTableIter it;
  gpointer k, v;
  g_hash_table_iter_init (&it, l->pending);
  while (g_hash_table_iter_next (&it, &k, &v))
    if (((const PsInstr *) k)->parent == comp)
      {
        guint64 id = GPOINTER_TO_SIZE (v);
        g_array_append_val (ids, id);
        g_hash_table_iter_remove (&it);
      }
  g_array_sort (ids, cmp_id);
  for (guint i = 0; i < ids->len; i++)
    ps_trace_add_done (l->trace, g_array_index (ids, guint64, i));
}

static void
emit_compute (Lower *l, const PsInstr *root)
{
  PsCostCounts f = ps_cost_fusion (l->cost, root);
  g_autoptr (GPtrArray) members = ps_cost_fusion_members (l->cost, root);
  /* the member that decides the kind: matmul > conv > reduce > data
   * movement > other > elementwise */
  static const int rank[] = {
    [PS_COST_MATMUL] = 6, [PS_COST_CONV] = 5, [PS_COST_REDUCE] = 4,
    [PS_COST_DATA_MOVEMENT] = 3, [PS_COST_OTHER] = 2, [PS_COST_ELEMENTWISE] = 1,
  };
  const PsInstr *main_op = root;
  int best = -1;
  for (guint i = 0; i < members->len; i++)
    {
      const PsInstr *m = g_ptr_array_index (members, i);
      PsCostClass k = ps_cost_get (l->cost, m)->klass;
      int r = k < G_N_ELEMENTS (rank) ? rank[k] : 0;
      if (r > best)
        {
          best = r;
          main_op = m;
        }
    }
  PsCostClass k = ps_cost_get (l->cost, main_op)->klass;
  PsTraceCompute c = { 0 };
  c.op = k == PS_COST_MATMUL ? PS_TRACE_OP_MATMUL : k == PS_COST_CONV ? PS_TRACE_OP_CONV
         : k == PS_COST_REDUCE ? PS_TRACE_OP_REDUCE
         : k == PS_COST_DATA_MOVEMENT ? PS_TRACE_OP_DATA_MOVEMENT
         : k == PS_COST_ELEMENTWISE ? PS_TRACE_OP_ELEMENTWISE : PS_TRACE_OP_OTHER;
  const PsInstr *mx = k == PS_COST_MATMUL || k == PS_COST_CONV ? ps_cost_mxu_op (main_op) : NULL;
  if (mx)
    {
      /* a fusion read from a file: its dot or convolution */
      c.op = mx->opcode == PS_OP_CONVOLUTION ? PS_TRACE_OP_CONV : PS_TRACE_OP_MATMUL;
      c.dtype = trace_dtype (mx->operands[0]->shape);
      c.precision = precision_of (mx);
      mxu_dims (mx, &c);
    }
  else
    c.dtype = trace_dtype (root->shape);
  c.flops = f.flops;
  c.read_bytes = f.read_bytes;
  c.write_bytes = f.write_bytes;
  c.vector_ops = f.vector_ops;
  finish_reads (l, root);
  ps_trace_add_compute (l->trace, root->name, &c);
}

/* An all-reduce over replica groups of different sizes (XLA allows them
 * for all-reduce only: CheckReplicaGroups in xla/service/hlo_verifier.cc)
 * has no trace form (trace groups have one size), so it is lowered to
 * what the simulator's default algorithm does for a 1-D group
 * (doc/collectives.md, torus2d: one bidirectional ring in the group's
 * order), spelled out with collective-permutes: each group of s > 1
 * members is its own ring; half the bytes go each way, in s - 1
 * reduce-scatter and s - 1 all-gather steps of ceil(bytes / 2s) each.
 * The groups run at the same time, as on the machine: step k is one
 * asynchronous permute per direction and group size (sizes that still
 * have a step k), all started, then all waited for; a device takes part
 * only in its own group's permutes, so it waits only for its own ring
 * (a group of one moves nothing). The reduction's adds follow the ring as
 * one vector-unit event (PS_TRACE_OP_ELEMENTWISE, no HBM bytes, as
 * collectives are modelled without HBM traffic, doc/collectives.md; being
 * an event of its own it pays the per-op overhead, which a trace cannot
 * fold into a collective): a member of a group of
 * s adds (s - 1) / s of the elements (its s - 1 received chunks of 1/s),
 * and the SPMD event list charges every device the largest group's
 * share, the one the step waits for; on the machine the adds pipeline
 * with the transfers, so placing them after the ring is an upper bound. */
static void
emit_ragged_all_reduce (Lower *l, const PsInstr *in, guint64 bytes, PsTraceDtype dtype)
{
  const PsTraceHeader *h = ps_trace_get_header (l->trace);
  finish_reads (l, in);
  int smax = 1;
  for (int g = 0; g < in->n_groups; g++)
    smax = MAX (smax, ps_instr_group_len (in, g));
  /* the ring pairs of each size: fwd[s], bwd[s] */
  GArray **fwd = g_new0 (GArray *, (gsize) smax + 1);
  GArray **bwd = g_new0 (GArray *, (gsize) smax + 1);
  for (int s = 2; s <= smax && !l->failed; s++)
    {
      for (int g = 0; g < in->n_groups; g++)
        {
          if (ps_instr_group_len (in, g) != s)
            continue;
          if (!fwd[s])
            {
              fwd[s] = g_array_new (FALSE, FALSE, sizeof (int64_t));
              bwd[s] = g_array_new (FALSE, FALSE, sizeof (int64_t));
            }
          const int64_t *m = in->replica_groups + (gsize) g * (gsize) in->group_size;
          for (int i = 0; i < s; i++)
            {
              int64_t a = m[i], b = m[(i + 1) % s];
              if (a >= (int64_t) h->n_devices || b >= (int64_t) h->n_devices)
                {
                  if (!l->failed)
                    ps_instr_error (l->error, PS_ERROR_UNSUPPORTED, in, "replica group member %" G_GINT64_FORMAT
                                    " is not one of the %" G_GUINT64_FORMAT " devices of the trace",
                                    MAX (a, b), h->n_devices);
                  l->failed = TRUE;
                }
              int64_t f[2] = { a, b }, r[2] = { b, a };
              g_array_append_vals (fwd[s], f, 2);
              g_array_append_vals (bwd[s], r, 2);
            }
        }
    }
  for (int k = 0; k < 2 * (smax - 1) && !l->failed; k++)
    {
      guint64 first = l->next_async + 1;
      for (int s = 2; s <= smax; s++)
        {
          if (!fwd[s] || k >= 2 * (s - 1))
            continue;
          guint64 step = (bytes + 2 * (guint64) s - 1) / (2 * (guint64) s);
          for (int dir = 0; dir < 2; dir++)
            {
              GArray *pairs = dir ? bwd[s] : fwd[s];
              PsTraceCollective c = { 0 };
              c.kind = PS_TRACE_COLLECTIVE_PERMUTE;
              c.dtype = dtype;
              c.in_bytes = c.out_bytes = step;
              ps_lower_compress_pairs (h, (int) (pairs->len / 2), (const int64_t *) pairs->data, &c.pairs);
              c.async_id = ++l->next_async;
              g_autofree char *name = g_strdup_printf ("%s.ring%d.%s%d", in->name, s, dir ? "b" : "f", k);
              ps_trace_add_collective (l->trace, name, &c);
              ps_trace_pairs_clear (&c.pairs);
            }
        }
      for (guint64 id = first; id <= l->next_async; id++)
        ps_trace_add_done (l->trace, id);
    }
  for (int s = 0; s <= smax; s++)
    {
      if (fwd[s])
        g_array_free (fwd[s], TRUE);
      if (bwd[s])
        g_array_free (bwd[s], TRUE);
    }
  g_free (fwd);
  g_free (bwd);
  if (smax > 1 && !l->failed)
    {
      PsTraceCompute c = { 0 };
      c.op = PS_TRACE_OP_ELEMENTWISE;
      c.dtype = dtype;
      guint64 elems = (guint64) ps_shape_leaf_elements (in->shape);
      c.vector_ops = elems * (guint64) (smax - 1) / (guint64) smax;
      g_autofree char *name = g_strdup_printf ("%s.adds", in->name);
      ps_trace_add_compute (l->trace, name, &c);
    }
}

/* collective-broadcast: the trace has no broadcast, and a permute sends
 * from each device at most once, so the group's first member sends its
 * operand to its k-th member in permute k (k = 1 .. s-1, every group at
 * once), all k started together and waited for together: a flat tree,
 * the root's links shared by the s-1 copies (doc/hlo.md,
 * "collective-broadcast"; a choice without a TPU source). */
static void
emit_coll_broadcast (Lower *l, const PsInstr *in, guint64 bytes, PsTraceDtype dtype)
{
  const PsTraceHeader *h = ps_trace_get_header (l->trace);
  finish_reads (l, in);
  gboolean listed = in->has_replica_groups && in->n_groups > 0 && in->group_size > 0;
  int ng = listed ? in->n_groups : 1;
  int smax = listed ? in->group_size : (int) MIN (h->n_devices, (guint64) G_MAXINT);
  guint64 first = l->next_async + 1;
  for (int k = 1; k < smax && !l->failed; k++)
    {
      GArray *pairs = g_array_new (FALSE, FALSE, sizeof (int64_t));
      for (int g = 0; g < ng; g++)
        {
          const int64_t *m = listed ? in->replica_groups + (gsize) g * (gsize) in->group_size : NULL;
          if (listed && k >= ps_instr_group_len (in, g))
            continue;
          int64_t p[2] = { m ? m[0] : 0, m ? m[k] : k };
          if (p[0] >= (int64_t) h->n_devices || p[1] >= (int64_t) h->n_devices)
            {
              ps_instr_error (l->error, PS_ERROR_UNSUPPORTED, in, "replica group member %" G_GINT64_FORMAT
                              " is not one of the %" G_GUINT64_FORMAT " devices of the trace",
                              MAX (p[0], p[1]), h->n_devices);
              l->failed = TRUE;
              break;
            }
          g_array_append_vals (pairs, p, 2);
        }
      if (pairs->len > 0 && !l->failed)
        {
          PsTraceCollective c = { 0 };
          c.kind = PS_TRACE_COLLECTIVE_PERMUTE;
          c.dtype = dtype;
          c.in_bytes = c.out_bytes = bytes;
          c.async_id = ++l->next_async;
          ps_lower_compress_pairs (h, (int) (pairs->len / 2), (const int64_t *) pairs->data, &c.pairs);
          g_autofree char *name = g_strdup_printf ("%s.bcast%d", in->name, k);
          ps_trace_add_collective (l->trace, name, &c);
          ps_trace_pairs_clear (&c.pairs);
        }
      g_array_free (pairs, TRUE);
    }
  for (guint64 id = first; id <= l->next_async; id++)
    ps_trace_add_done (l->trace, id);
}

static void
emit_collective (Lower *l, const PsInstr *in)
{
  const PsTraceHeader *h = ps_trace_get_header (l->trace);
  PsTraceCollective c = { 0 };
  switch (in->opcode)
    {
    case PS_OP_ALL_REDUCE: c.kind = PS_TRACE_ALL_REDUCE; break;
    case PS_OP_ALL_GATHER: c.kind = PS_TRACE_ALL_GATHER; break;
    case PS_OP_REDUCE_SCATTER: c.kind = PS_TRACE_REDUCE_SCATTER; break;
    case PS_OP_ALL_TO_ALL: c.kind = PS_TRACE_ALL_TO_ALL; break;
    default: c.kind = PS_TRACE_COLLECTIVE_PERMUTE; break;
    }
  c.dtype = in->n_operands > 0 ? trace_dtype (in->operands[0]->shape) : trace_dtype (in->shape);
  for (int i = 0; i < in->n_operands; i++)
    c.in_bytes += bytes_of (in->operands[i]->shape);
  c.out_bytes = bytes_of (in->shape);
  if (c.kind == PS_TRACE_ALL_REDUCE && in->has_replica_groups && ps_instr_groups_ragged (in))
    {
      emit_ragged_all_reduce (l, in, c.in_bytes, c.dtype);
      return;
    }
  if (in->opcode == PS_OP_COLLECTIVE_BROADCAST)
    {
      emit_coll_broadcast (l, in, c.in_bytes, c.dtype);
      return;
    }
  if (c.kind == PS_TRACE_COLLECTIVE_PERMUTE)
    ps_lower_compress_pairs (h, in->n_pairs, in->source_target_pairs, &c.pairs);
  else if (!in->has_replica_groups || in->n_groups == 0 || in->group_size == 0)
    {
      c.groups.form = PS_TRACE_GROUPS_ALL;
      c.groups.n_groups = 1;
      c.groups.group_size = h->n_devices;
    }
  else if ((guint64) in->n_groups * (guint64) in->group_size != h->n_devices)
    {
      if (!l->failed)
        ps_instr_error (l->error, PS_ERROR_UNSUPPORTED, in, "replica groups {%d x %d} do not "
                        "cover the %" G_GUINT64_FORMAT " devices of the trace", in->n_groups,
                        in->group_size, h->n_devices);
      l->failed = TRUE;
      return;
    }
  else
    ps_lower_compress_groups (h, in->n_groups, in->group_size, in->replica_groups, &c.groups);
  finish_reads (l, in);
  const PsSchedule *sch = l->opts->schedule;
  if (sch ? g_hash_table_contains (sch->done_before, in) : l->opts->async_collectives)
    {
      c.async_id = ++l->next_async;
      g_hash_table_insert (l->pending, (gpointer) in, GSIZE_TO_POINTER (c.async_id));
    }
  ps_trace_add_collective (l->trace, in->name, &c);
  ps_trace_groups_clear (&c.groups);
  ps_trace_pairs_clear (&c.pairs);
}

static void lower_computation (Lower *l, const PsComputation *comp);

static const PsComputation *
costliest_branch (Lower *l, const PsInstr *in)
{
  const PsComputation *best = NULL;
  PsCostCounts bc = { 0 };
  for (int k = 0; k < in->n_called; k++)
    {
      PsCostCounts t = ps_cost_computation (l->cost, in->called[k]);
      if (!best || t.flops > bc.flops
          || (t.flops == bc.flops && t.read_bytes + t.write_bytes > bc.read_bytes + bc.write_bytes))
        {
          best = in->called[k];
          bc = t;
        }
    }
  return best;
}

static void
lower_instr (Lower *l, const PsInstr *in)
{
  const PsCost *c = ps_cost_get (l->cost, in);
  if (!c || c->fused)
    return;
  switch (c->klass)
    {
    case PS_COST_FREE:
    case PS_COST_INLINED:
      return;
    case PS_COST_COLLECTIVE:
      emit_collective (l, in);
      return;
    case PS_COST_CONTROL:
      finish_reads (l, in);
      if (in->opcode == PS_OP_WHILE && l->opts->unroll_loops)
        {
          for (int64_t i = 0; i < c->trip_count && !l->failed; i++)
            {
              lower_computation (l, in->called[0]);
              lower_computation (l, in->called[1]);
            }
        }
      else if (in->opcode == PS_OP_WHILE)
        {
          /* one iteration (condition, then body) as a loop of the trace */
          ps_trace_add_loop (l->trace, in->name, (guint64) c->trip_count);
          lower_computation (l, in->called[0]);
          lower_computation (l, in->called[1]);
          ps_trace_add_end_loop (l->trace);
        }
      else if (in->opcode == PS_OP_CALL)
        {
          if (in->n_called > 0)
            lower_computation (l, in->called[0]);
        }
      else
        {
          const PsComputation *b = costliest_branch (l, in);
          if (b)
            lower_computation (l, b);
        }
      return;
    default:
      emit_compute (l, in);
      return;
    }
}

/* The scheduled completions due before `in` (with a schedule). */
static void
finish_scheduled (Lower *l, const PsInstr *in)
{
  GPtrArray *due = l->dones_at ? g_hash_table_lookup (l->dones_at, in) : NULL;
  for (guint i = 0; due && i < due->len; i++)
    {
      gpointer id;
      if (g_hash_table_lookup_extended (l->pending, g_ptr_array_index (due, i), NULL, &id))
        {
          ps_trace_add_done (l->trace, GPOINTER_TO_SIZE (id));
          g_hash_table_remove (l->pending, g_ptr_array_index (due, i));
        }
    }
}

static void
lower_computation (Lower *l, const PsComputation *comp)
{
  gboolean entry = comp == l->module->entry;
  GPtrArray *given = l->opts->schedule ? ps_schedule_order_of (l->opts->schedule, comp) : NULL;
  g_autoptr (GPtrArray) order = given ? g_ptr_array_ref (given) : ps_computation_post_order (comp);
  for (guint i = 0; i < order->len && !l->failed; i++)
    {
      const PsInstr *in = g_ptr_array_index (order, i);
      finish_scheduled (l, in);
      guint64 before = ps_trace_n_events (l->trace);
      lower_instr (l, in);
      if (too_many (l))
        return;
      if (entry && l->opts->memory_events && ps_trace_n_events (l->trace) > before)
        {
          guint step = GPOINTER_TO_UINT (g_hash_table_lookup (l->step_of, in));
          ps_trace_add_memory (l->trace, step ? g_array_index (l->memory->live_after_bytes,
                                                               uint64_t, step - 1) : 0);
        }
    }
  flush_pending (l, comp);
}

static gboolean
set_header (Lower *l, const PsModule *m, GError **error)
{
  const PsLowerOptions *o = l->opts;
  int64_t n = o->n_devices > 0 ? o->n_devices : m->num_partitions > 0 ? m->num_partitions : 1;
  if (n > G_MAXUINT32)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%" G_GINT64_FORMAT " devices is too "
                   "many for a trace", n);
      return FALSE;
    }
  const PsTraceMesh *mesh = o->mesh;
  if (!mesh || mesh->rank == 0)
    {
      gint64 d = n;
      ps_trace_set_mesh (l->trace, 1, &d, PS_TRACE_ORDER_ARANGE, NULL);
    }
  else
    {
      if (mesh->rank > PS_TRACE_MAX_RANK)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "mesh rank %u above %d",
                       mesh->rank, PS_TRACE_MAX_RANK);
          return FALSE;
        }
      gint64 p = 1;
      for (guint i = 0; i < mesh->rank; i++)
        p *= mesh->dims[i] > 0 ? mesh->dims[i] : 0;
      if (p != n)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "the mesh holds %" G_GINT64_FORMAT
                       " devices but the program runs on %" G_GINT64_FORMAT, p, n);
          return FALSE;
        }
      ps_trace_set_mesh (l->trace, mesh->rank, mesh->dims, mesh->order, mesh->devices);
      PsTraceHeader *h = ps_trace_header (l->trace);
      memcpy (h->mesh.physical, mesh->physical, sizeof h->mesh.physical);
      if (mesh->order == PS_TRACE_ORDER_LIST && !mesh->devices)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "mesh order list without devices");
          return FALSE;
        }
    }
  if (o->slice)
    ps_trace_set_slice (l->trace, o->slice);
  GError *local = NULL;
  /* the header alone: an empty trace validates only the mesh */
  g_autoptr (PsTrace) probe = ps_trace_new ("probe");
  const PsTraceHeader *h = ps_trace_get_header (l->trace);
  ps_trace_set_mesh (probe, h->mesh.rank, h->mesh.dims, h->mesh.order, h->mesh.devices);
  memcpy (ps_trace_header (probe)->mesh.physical, h->mesh.physical, sizeof h->mesh.physical);
  if (!ps_trace_validate (probe, &local))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "bad mesh: %s", local->message);
      g_error_free (local);
      return FALSE;
    }
  return TRUE;
}

static gint
cmp_instr_id (gconstpointer a, gconstpointer b)
{
  const PsInstr *x = *(const PsInstr *const *) a, *y = *(const PsInstr *const *) b;
  return (x->id > y->id) - (x->id < y->id);
}

PsTrace *
ps_lower_module (const PsModule *m, const PsLowerOptions *opts, GError **error)
{
  g_return_val_if_fail (m != NULL, NULL);
  PsLowerOptions defaults;
  if (!opts)
    {
      ps_lower_options_init (&defaults);
      opts = &defaults;
    }
  if (!m->entry)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "module %s has no entry computation",
                   m->name ? m->name : "?");
      return NULL;
    }
  PsCostOptions co;
  ps_cost_options_init (&co);
  co.default_trip_count = opts->default_trip_count;
  co.fusion = opts->fusion;
  co.tiling = opts->tiling;
  g_autoptr (PsCostAnalysis) cost = ps_cost_analyze (m, &co, error);
  if (!cost)
    return NULL;
  /* the schedule's own memory analysis: the same order and fusions */
  g_autoptr (PsMemoryReport) own = opts->schedule ? NULL : ps_memory_analyze (m, cost, error);
  const PsMemoryReport *memory = opts->schedule ? opts->schedule->memory : own;
  if (!memory)
    return NULL;
  g_autoptr (GHashTable) dones_at = NULL;
  if (opts->schedule)
    {
      dones_at = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) g_ptr_array_unref);
      GHashTableIter it;
      gpointer k, v;
      g_hash_table_iter_init (&it, opts->schedule->done_before);
      while (g_hash_table_iter_next (&it, &k, &v))
        if (v)
          {
            GPtrArray *due = g_hash_table_lookup (dones_at, v);
            if (!due)
              {
                due = g_ptr_array_new ();
                g_hash_table_insert (dones_at, v, due);
              }
            g_ptr_array_add (due, k);
          }
      /* The table's order is the instructions' addresses: several dones
       * due at one instruction are written in creation order instead, so
       * that one program gives one trace (it gave a different one per
       * process under --schedule eager). */
      g_hash_table_iter_init (&it, dones_at);
      while (g_hash_table_iter_next (&it, &k, &v))
        g_ptr_array_sort (v, cmp_instr_id);
    }
  g_autoptr (GHashTable) step_of = g_hash_table_new (NULL, NULL);
  for (guint i = 0; i < memory->order->len; i++)
    g_hash_table_insert (step_of, g_ptr_array_index (memory->order, i), GUINT_TO_POINTER (i + 1));
  Lower l = { opts, m, cost, memory, ps_trace_new (opts->program ? opts->program : m->name),
              0, g_hash_table_new (NULL, NULL), step_of, dones_at, error, FALSE };
  if (!set_header (&l, m, error))
    {
      ps_trace_free (l.trace);
      g_hash_table_unref (l.pending);
      return NULL;
    }
  ps_trace_header (l.trace)->totals.peak_bytes = memory->peak_bytes;
  lower_computation (&l, m->entry);
  g_hash_table_unref (l.pending);
  if (l.failed)
    {
      ps_trace_free (l.trace);
      return NULL;
    }
  ps_trace_update_totals (l.trace);
  GError *local = NULL;
  if (!ps_trace_validate (l.trace, &local))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "lowering %s gave an invalid trace: %s",
                   m->name, local->message);
      g_error_free (local);
      ps_trace_free (l.trace);
      return NULL;
    }
  return l.trace;
}

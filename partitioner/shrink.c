/* Scaled-down copies of sharded modules (see shrink.h). */
#include "config.h"

#include "partitioner/shrink.h"

#include <string.h>

#include "partitioner/sharding.h"

/* ---- dimension nodes and their classes ---------------------------------- */

typedef struct {
  const PsModule *m;
  /* By instruction id: index of its first leaf in the leaf arrays, and its
   * leaf count (0 for ids not in the module). */
  int *first_leaf, *n_leaves;
  GArray *leaf_node;      /* int: first node of each leaf */
  GArray *leaf_rank;      /* int */
  /* By node: union-find parent, size, pinned flag, shard-count lcm. */
  GArray *parent;         /* int */
  GArray *size;           /* int64_t */
  GArray *pinned;         /* gboolean */
  GArray *modulus;        /* int64_t */
} Shrink;

#define NODE_PARENT(sh, n) g_array_index ((sh)->parent, int, (n))
#define NODE_SIZE(sh, n) g_array_index ((sh)->size, int64_t, (n))
#define NODE_PINNED(sh, n) g_array_index ((sh)->pinned, gboolean, (n))
#define NODE_MOD(sh, n) g_array_index ((sh)->modulus, int64_t, (n))

static int
find (Shrink *sh, int n)
{
  int r = n;
  while (NODE_PARENT (sh, r) != r)
    r = NODE_PARENT (sh, r);
  while (NODE_PARENT (sh, n) != r)
    {
      int next = NODE_PARENT (sh, n);
      NODE_PARENT (sh, n) = r;
      n = next;
    }
  return r;
}

static int
leaf_index (const Shrink *sh, const PsInstr *in, int leaf)
{
  if (in->id < 0 || !sh->n_leaves[in->id] || leaf < 0 || leaf >= sh->n_leaves[in->id])
    return -1;
  return sh->first_leaf[in->id] + leaf;
}

static int
leaf_rank (const Shrink *sh, const PsInstr *in, int leaf)
{
  int li = leaf_index (sh, in, leaf);
  return li < 0 ? -1 : g_array_index (sh->leaf_rank, int, li);
}

static int
node_of (const Shrink *sh, const PsInstr *in, int leaf, int64_t dim)
{
  int li = leaf_index (sh, in, leaf);
  if (li < 0 || dim < 0 || dim >= g_array_index (sh->leaf_rank, int, li))
    return -1;
  return g_array_index (sh->leaf_node, int, li) + (int) dim;
}

static void
pin_node (Shrink *sh, int n)
{
  if (n >= 0)
    NODE_PINNED (sh, n) = TRUE;
}

static void
pin (Shrink *sh, const PsInstr *in, int leaf, int64_t dim)
{
  pin_node (sh, node_of (sh, in, leaf, dim));
}

static void
pin_leaf (Shrink *sh, const PsInstr *in, int leaf)
{
  for (int d = 0; d < leaf_rank (sh, in, leaf); d++)
    pin (sh, in, leaf, d);
}

static void
pin_instr (Shrink *sh, const PsInstr *in)
{
  if (in->id >= 0)
    for (int l = 0; l < sh->n_leaves[in->id]; l++)
      pin_leaf (sh, in, l);
}

/* Pins an instruction and all its operands: the op depends on their sizes
 * in ways the classes do not model. */
static void
pin_all (Shrink *sh, const PsInstr *in)
{
  pin_instr (sh, in);
  for (int i = 0; i < in->n_operands; i++)
    pin_instr (sh, in->operands[i]);
}

static void
unite_nodes (Shrink *sh, int a, int b)
{
  if (a < 0 || b < 0)
    return;
  if (NODE_SIZE (sh, a) != NODE_SIZE (sh, b))
    {
      /* Sizes the op relates in a way not modelled (e.g. an operand
       * broadcast implicitly): keep both. */
      pin_node (sh, a);
      pin_node (sh, b);
      return;
    }
  int ra = find (sh, a), rb = find (sh, b);
  if (ra != rb)
    NODE_PARENT (sh, ra) = rb;
}

static void
unite (Shrink *sh, const PsInstr *a, int la, int64_t da, const PsInstr *b, int lb, int64_t db)
{
  int na = node_of (sh, a, la, da), nb = node_of (sh, b, lb, db);
  if (na < 0 || nb < 0)
    {
      pin_node (sh, na);
      pin_node (sh, nb);
      return;
    }
  unite_nodes (sh, na, nb);
}

/* Joins two leaves dim by dim; leaves of different ranks are pinned. */
static void
unite_leaf (Shrink *sh, const PsInstr *a, int la, const PsInstr *b, int lb)
{
  int ra = leaf_rank (sh, a, la), rb = leaf_rank (sh, b, lb);
  if (ra != rb || ra < 0)
    {
      pin_leaf (sh, a, la);
      pin_leaf (sh, b, lb);
      return;
    }
  for (int d = 0; d < ra; d++)
    unite (sh, a, la, d, b, lb, d);
}

static void
unite_leaves (Shrink *sh, const PsInstr *a, int la, const PsInstr *b, int lb, int count)
{
  for (int i = 0; i < count; i++)
    unite_leaf (sh, a, la + i, b, lb + i);
}

static int
n_leaves (const Shrink *sh, const PsInstr *in)
{
  return in->id >= 0 ? sh->n_leaves[in->id] : 0;
}

/* Whole values of equal structure (tuples leaf by leaf). */
static void
unite_value (Shrink *sh, const PsInstr *a, const PsInstr *b)
{
  if (n_leaves (sh, a) != n_leaves (sh, b))
    {
      pin_instr (sh, a);
      pin_instr (sh, b);
      return;
    }
  unite_leaves (sh, a, 0, b, 0, n_leaves (sh, a));
}

/* Index of the first leaf of tuple element k of `s`. */
static int
element_first_leaf (const PsShape *s, int64_t k)
{
  int off = 0;
  for (int64_t j = 0; j < k && j < s->n_elems; j++)
    off += ps_shape_leaf_count (s->elems[j]);
  return off;
}

/* ---- per-op constraints -------------------------------------------------- */

static gboolean
window_dim_trivial (const PsWindowDim *w)
{
  return w->size == 1 && w->stride == 1 && w->pad_lo == 0 && w->pad_hi == 0
         && w->base_dilation <= 1 && w->window_dilation <= 1;
}

/* Reshape/bitcast: dims that correspond one to one (equal sizes, aligned by
 * the running products, ignoring size-1 dims) are joined; dims that are
 * split or merged are pinned. */
static void
constrain_reshape (Shrink *sh, const PsInstr *in)
{
  const PsInstr *op = in->operands[0];
  const PsShape *a = op->shape, *b = in->shape;
  if (!ps_shape_is_array (a) || !ps_shape_is_array (b))
    {
      pin_all (sh, in);
      return;
    }
  int i = 0, j = 0;
  while (i < a->rank || j < b->rank)
    {
      while (i < a->rank && a->dims[i] == 1)
        i++;
      while (j < b->rank && b->dims[j] == 1)
        j++;
      if (i >= a->rank || j >= b->rank)
        {
          for (; i < a->rank; i++)
            pin (sh, op, 0, i);
          for (; j < b->rank; j++)
            pin (sh, in, 0, j);
          break;
        }
      if (a->dims[i] == b->dims[j])
        {
          unite (sh, op, 0, i, in, 0, j);
          i++, j++;
          continue;
        }
      /* A group of dims with equal products: pin all of it. */
      int64_t pa = a->dims[i], pb = b->dims[j];
      pin (sh, op, 0, i++);
      pin (sh, in, 0, j++);
      while (pa != pb && (i < a->rank || j < b->rank))
        {
          if ((pa < pb && i < a->rank) || j >= b->rank)
            {
              pa *= a->dims[i];
              pin (sh, op, 0, i++);
            }
          else
            {
              pb *= b->dims[j];
              pin (sh, in, 0, j++);
            }
        }
    }
}

static void
constrain_dot (Shrink *sh, const PsInstr *in)
{
  if (in->n_operands != 2)
    {
      pin_all (sh, in);
      return;
    }
  const PsInstr *l = in->operands[0], *r = in->operands[1];
  const PsDotDims *dd = &in->dot;
  int out = 0;
  for (int k = 0; k < dd->lhs_batch.n && k < dd->rhs_batch.n; k++)
    {
      unite (sh, l, 0, dd->lhs_batch.v[k], r, 0, dd->rhs_batch.v[k]);
      unite (sh, l, 0, dd->lhs_batch.v[k], in, 0, out++);
    }
  for (int k = 0; k < dd->lhs_contracting.n && k < dd->rhs_contracting.n; k++)
    unite (sh, l, 0, dd->lhs_contracting.v[k], r, 0, dd->rhs_contracting.v[k]);
  for (int d = 0; d < leaf_rank (sh, l, 0); d++)
    if (!ps_ints_contains (&dd->lhs_batch, d) && !ps_ints_contains (&dd->lhs_contracting, d))
      unite (sh, l, 0, d, in, 0, out++);
  for (int d = 0; d < leaf_rank (sh, r, 0); d++)
    if (!ps_ints_contains (&dd->rhs_batch, d) && !ps_ints_contains (&dd->rhs_contracting, d))
      unite (sh, r, 0, d, in, 0, out++);
}

static void
constrain_convolution (Shrink *sh, const PsInstr *in)
{
  const PsConvDims *c = &in->conv;
  if (in->n_operands != 2 || !c->present || in->window.n != c->n_spatial)
    {
      pin_all (sh, in);
      return;
    }
  const PsInstr *x = in->operands[0], *k = in->operands[1];
  if (in->batch_group_count > 1)
    {
      pin (sh, x, 0, c->in_batch);
      pin (sh, in, 0, c->out_batch);
      pin (sh, k, 0, c->k_out_feature);
      pin (sh, in, 0, c->out_feature);
    }
  else
    unite (sh, x, 0, c->in_batch, in, 0, c->out_batch);
  if (in->feature_group_count > 1)
    {
      pin (sh, x, 0, c->in_feature);
      pin (sh, k, 0, c->k_in_feature);
      pin (sh, k, 0, c->k_out_feature);
      pin (sh, in, 0, c->out_feature);
    }
  else
    unite (sh, x, 0, c->in_feature, k, 0, c->k_in_feature);
  unite (sh, k, 0, c->k_out_feature, in, 0, c->out_feature);
  for (int s = 0; s < c->n_spatial; s++)
    {
      if (window_dim_trivial (&in->window.dims[s]))
        unite (sh, x, 0, c->in_spatial[s], in, 0, c->out_spatial[s]);
      else
        {
          pin (sh, x, 0, c->in_spatial[s]);
          pin (sh, in, 0, c->out_spatial[s]);
        }
      pin (sh, k, 0, c->k_spatial[s]);
    }
}

/* Reduce-window: operands (the first half) and outputs dim by dim where the
 * window is trivial. */
static void
constrain_reduce_window (Shrink *sh, const PsInstr *in)
{
  int n = in->n_operands / 2;
  for (int i = 0; i < n; i++)
    {
      const PsInstr *op = in->operands[i];
      int rank = leaf_rank (sh, op, 0);
      if (rank != in->window.n || rank != leaf_rank (sh, in, n > 1 ? i : 0))
        {
          pin_all (sh, in);
          return;
        }
      for (int d = 0; d < rank; d++)
        {
          if (window_dim_trivial (&in->window.dims[d]))
            unite (sh, op, 0, d, in, n > 1 ? i : 0, d);
          else
            {
              pin (sh, op, 0, d);
              pin (sh, in, n > 1 ? i : 0, d);
            }
        }
      unite_leaf (sh, op, 0, in->operands[0], 0);
    }
}

static void
constrain_select_and_scatter (Shrink *sh, const PsInstr *in)
{
  if (in->n_operands != 3)
    {
      pin_all (sh, in);
      return;
    }
  const PsInstr *op = in->operands[0], *src = in->operands[1];
  unite_leaf (sh, op, 0, in, 0);
  int rank = leaf_rank (sh, op, 0);
  if (rank != in->window.n || rank != leaf_rank (sh, src, 0))
    {
      pin_all (sh, in);
      return;
    }
  for (int d = 0; d < rank; d++)
    {
      if (window_dim_trivial (&in->window.dims[d]))
        unite (sh, op, 0, d, src, 0, d);
      else
        {
          pin (sh, op, 0, d);
          pin (sh, src, 0, d);
        }
    }
}

static void
constrain_reduce (Shrink *sh, const PsInstr *in)
{
  int n = in->n_operands / 2;
  for (int i = 0; i < n; i++)
    {
      const PsInstr *op = in->operands[i];
      int out_leaf = n > 1 ? i : 0, out = 0;
      for (int d = 0; d < leaf_rank (sh, op, 0); d++)
        if (!ps_ints_contains (&in->dimensions, d))
          unite (sh, op, 0, d, in, out_leaf, out++);
      unite_leaf (sh, op, 0, in->operands[0], 0);
    }
}

static void
constrain_slice (Shrink *sh, const PsInstr *in)
{
  const PsInstr *op = in->operands[0];
  int rank = leaf_rank (sh, op, 0);
  if (rank != in->slice_starts.n || rank != in->slice_limits.n)
    {
      pin_all (sh, in);
      return;
    }
  for (int d = 0; d < rank; d++)
    {
      int64_t stride = d < in->slice_strides.n ? in->slice_strides.v[d] : 1;
      if (in->slice_starts.v[d] == 0 && stride == 1 && in->slice_limits.v[d] == op->shape->dims[d])
        unite (sh, op, 0, d, in, 0, d);
      else
        {
          pin (sh, op, 0, d);
          pin (sh, in, 0, d);
        }
    }
}

static void
constrain_pad (Shrink *sh, const PsInstr *in)
{
  const PsInstr *op = in->operands[0];
  int rank = leaf_rank (sh, op, 0);
  if (rank != in->n_pad)
    {
      pin_all (sh, in);
      return;
    }
  for (int d = 0; d < rank; d++)
    {
      const PsPadDim *p = &in->padding[d];
      if (p->lo == 0 && p->hi == 0 && p->interior == 0)
        unite (sh, op, 0, d, in, 0, d);
      else
        {
          pin (sh, op, 0, d);
          pin (sh, in, 0, d);
        }
    }
}

static void
constrain_concatenate (Shrink *sh, const PsInstr *in)
{
  int64_t cd = in->dimensions.n == 1 ? in->dimensions.v[0] : -1;
  for (int i = 0; i < in->n_operands; i++)
    {
      const PsInstr *op = in->operands[i];
      for (int d = 0; d < leaf_rank (sh, op, 0); d++)
        {
          if (d == cd)
            pin (sh, op, 0, d);
          else
            unite (sh, op, 0, d, in, 0, d);
        }
    }
  pin (sh, in, 0, cd);
}

static void
constrain_dynamic_slice (Shrink *sh, const PsInstr *in)
{
  const PsInstr *op = in->operands[0];
  int rank = leaf_rank (sh, op, 0);
  if (rank != in->dynamic_slice_sizes.n)
    {
      pin_all (sh, in);
      return;
    }
  for (int d = 0; d < rank; d++)
    {
      if (in->dynamic_slice_sizes.v[d] == op->shape->dims[d])
        unite (sh, op, 0, d, in, 0, d);
      else if (in->dynamic_slice_sizes.v[d] == 1)
        continue; /* any operand size: the start is clamped into it */
      else
        {
          pin (sh, op, 0, d);
          pin (sh, in, 0, d);
        }
    }
}

static void
constrain_dynamic_update_slice (Shrink *sh, const PsInstr *in)
{
  const PsInstr *op = in->operands[0], *up = in->operands[1];
  unite_leaf (sh, op, 0, in, 0);
  int rank = leaf_rank (sh, op, 0);
  if (rank != leaf_rank (sh, up, 0))
    {
      pin_all (sh, in);
      return;
    }
  for (int d = 0; d < rank; d++)
    {
      if (up->shape->dims[d] == op->shape->dims[d])
        unite (sh, op, 0, d, up, 0, d);
      else if (up->shape->dims[d] == 1)
        continue;
      else
        {
          pin (sh, op, 0, d);
          pin (sh, up, 0, d);
        }
    }
}

/* Gather: the operand's full-size slice dims join their output offset dims,
 * size-1 slice dims leave the operand dim free (starts are clamped into
 * it), other slice dims are pinned; the indices' batch dims join the
 * output's batch dims; the index vector dim is pinned. */
static void
constrain_gather (Shrink *sh, const PsInstr *in)
{
  const PsGatherDims *g = &in->gather;
  if (in->n_operands != 2)
    {
      pin_all (sh, in);
      return;
    }
  const PsInstr *op = in->operands[0], *idx = in->operands[1];
  int op_rank = leaf_rank (sh, op, 0), idx_rank = leaf_rank (sh, idx, 0), out_rank = leaf_rank (sh, in, 0);
  if (g->slice_sizes.n != op_rank)
    {
      pin_all (sh, in);
      return;
    }
  int k = 0;
  for (int d = 0; d < op_rank; d++)
    {
      if (ps_ints_contains (&g->collapsed_slice_dims, d) || ps_ints_contains (&g->operand_batching_dims, d))
        continue;
      if (k >= g->offset_dims.n)
        {
          pin_all (sh, in);
          return;
        }
      int64_t od = g->offset_dims.v[k++];
      if (g->slice_sizes.v[d] == op->shape->dims[d])
        unite (sh, op, 0, d, in, 0, od);
      else if (g->slice_sizes.v[d] != 1)
        {
          pin (sh, op, 0, d);
          pin (sh, in, 0, od);
        }
    }
  for (int i = 0; i < g->operand_batching_dims.n && i < g->start_indices_batching_dims.n; i++)
    unite (sh, op, 0, g->operand_batching_dims.v[i], idx, 0, g->start_indices_batching_dims.v[i]);
  int b = 0;
  for (int od = 0; od < out_rank; od++)
    {
      if (ps_ints_contains (&g->offset_dims, od))
        continue;
      if (b == g->index_vector_dim)
        b++;
      unite (sh, idx, 0, b++, in, 0, od);
    }
  pin (sh, idx, 0, g->index_vector_dim);
  (void) idx_rank;
}

/* Scatter: like gather, with the updates' window dims in place of the
 * output's offset dims; operands, outputs and updates join among
 * themselves. */
static void
constrain_scatter (Shrink *sh, const PsInstr *in)
{
  const PsScatterDims *g = &in->scatter;
  int n = (in->n_operands - 1) / 2;
  if (n < 1 || in->n_operands != 2 * n + 1)
    {
      pin_all (sh, in);
      return;
    }
  const PsInstr *op = in->operands[0], *idx = in->operands[n], *up = in->operands[n + 1];
  for (int i = 0; i < n; i++)
    {
      unite_leaf (sh, in->operands[i], 0, in, n > 1 ? i : 0);
      unite_leaf (sh, in->operands[i], 0, op, 0);
      unite_leaf (sh, in->operands[n + 1 + i], 0, up, 0);
    }
  int op_rank = leaf_rank (sh, op, 0), up_rank = leaf_rank (sh, up, 0);
  int k = 0;
  for (int d = 0; d < op_rank; d++)
    {
      if (ps_ints_contains (&g->inserted_window_dims, d) || ps_ints_contains (&g->input_batching_dims, d))
        continue;
      if (k >= g->update_window_dims.n)
        {
          pin_all (sh, in);
          return;
        }
      int64_t ud = g->update_window_dims.v[k++];
      if (ud < 0 || ud >= up_rank)
        {
          pin_all (sh, in);
          return;
        }
      if (up->shape->dims[ud] == op->shape->dims[d])
        unite (sh, op, 0, d, up, 0, ud);
      else if (up->shape->dims[ud] != 1)
        {
          pin (sh, op, 0, d);
          pin (sh, up, 0, ud);
        }
    }
  for (int i = 0; i < g->input_batching_dims.n && i < g->scatter_indices_batching_dims.n; i++)
    unite (sh, op, 0, g->input_batching_dims.v[i], idx, 0, g->scatter_indices_batching_dims.v[i]);
  int b = 0;
  for (int ud = 0; ud < up_rank; ud++)
    {
      if (ps_ints_contains (&g->update_window_dims, ud))
        continue;
      if (b == g->index_vector_dim)
        b++;
      unite (sh, idx, 0, b++, up, 0, ud);
    }
  pin (sh, idx, 0, g->index_vector_dim);
}

/* Parameters of a called computation take the caller's operands. */
static void
unite_params (Shrink *sh, const PsComputation *c, int first_operand, const PsInstr *caller)
{
  for (guint p = 0; p < c->params->len; p++)
    {
      int o = first_operand + (int) p;
      if (o < caller->n_operands)
        unite_value (sh, caller->operands[o], c->params->pdata[p]);
      else
        pin_instr (sh, c->params->pdata[p]);
    }
}

static void
constrain (Shrink *sh, const PsInstr *in)
{
  switch (in->opcode)
    {
    case PS_OP_PARAMETER: case PS_OP_IOTA: case PS_OP_RNG: case PS_OP_PARTITION_ID:
    case PS_OP_REPLICA_ID: case PS_OP_AFTER_ALL:
      return; /* sources: any size */
    case PS_OP_BITCAST_CONVERT:
      if (in->n_operands == 1 && ps_shape_is_array (in->shape)
          && ps_etype_size_bytes (in->shape->etype) == ps_etype_size_bytes (in->operands[0]->shape->etype))
        unite_leaf (sh, in->operands[0], 0, in, 0);
      else
        pin_all (sh, in);
      return;
    case PS_OP_BROADCAST:
      for (int i = 0; i < in->dimensions.n; i++)
        unite (sh, in->operands[0], 0, i, in, 0, in->dimensions.v[i]);
      return;
    case PS_OP_TRANSPOSE:
      for (int i = 0; i < in->dimensions.n; i++)
        unite (sh, in->operands[0], 0, in->dimensions.v[i], in, 0, i);
      return;
    case PS_OP_RESHAPE: case PS_OP_BITCAST:
      constrain_reshape (sh, in);
      return;
    case PS_OP_DOT:
      constrain_dot (sh, in);
      return;
    case PS_OP_CONVOLUTION:
      constrain_convolution (sh, in);
      return;
    case PS_OP_REDUCE:
      constrain_reduce (sh, in);
      return;
    case PS_OP_REDUCE_WINDOW:
      constrain_reduce_window (sh, in);
      return;
    case PS_OP_SELECT_AND_SCATTER:
      constrain_select_and_scatter (sh, in);
      return;
    case PS_OP_SLICE:
      constrain_slice (sh, in);
      return;
    case PS_OP_PAD:
      constrain_pad (sh, in);
      return;
    case PS_OP_CONCATENATE:
      constrain_concatenate (sh, in);
      return;
    case PS_OP_DYNAMIC_SLICE:
      constrain_dynamic_slice (sh, in);
      return;
    case PS_OP_DYNAMIC_UPDATE_SLICE:
      constrain_dynamic_update_slice (sh, in);
      return;
    case PS_OP_GATHER:
      constrain_gather (sh, in);
      return;
    case PS_OP_SCATTER:
      constrain_scatter (sh, in);
      return;
    case PS_OP_REVERSE: case PS_OP_COPY: case PS_OP_DOMAIN:
      unite_value (sh, in->operands[0], in);
      return;
    case PS_OP_OPTIMIZATION_BARRIER:
      unite_value (sh, in->operands[0], in);
      return;
    case PS_OP_SORT:
      for (int i = 0; i < in->n_operands; i++)
        {
          unite_leaf (sh, in->operands[i], 0, in, in->n_operands > 1 ? i : 0);
          unite_leaf (sh, in->operands[i], 0, in->operands[0], 0);
        }
      return;
    case PS_OP_TUPLE:
      for (int i = 0; i < in->n_operands; i++)
        {
          int off = element_first_leaf (in->shape, i);
          int cnt = n_leaves (sh, in->operands[i]);
          unite_leaves (sh, in->operands[i], 0, in, off, cnt);
        }
      return;
    case PS_OP_GET_TUPLE_ELEMENT:
      {
        const PsInstr *t = in->operands[0];
        if (!ps_shape_is_tuple (t->shape) || in->tuple_index >= t->shape->n_elems)
          {
            pin_all (sh, in);
            return;
          }
        unite_leaves (sh, t, element_first_leaf (t->shape, in->tuple_index), in, 0, n_leaves (sh, in));
        return;
      }
    case PS_OP_CALL:
      if (in->n_called != 1)
        break;
      unite_params (sh, in->called[0], 0, in);
      unite_value (sh, in->called[0]->root, in);
      return;
    case PS_OP_WHILE:
      if (in->n_called != 2 || in->n_operands != 1)
        break;
      unite_params (sh, in->called[0], 0, in);
      unite_params (sh, in->called[1], 0, in);
      unite_value (sh, in->called[1]->root, in);
      unite_value (sh, in->operands[0], in);
      return;
    case PS_OP_CONDITIONAL:
      for (int b = 0; b < in->n_called; b++)
        {
          const PsComputation *c = in->called[b];
          if (c->params->len == 1 && b + 1 < in->n_operands)
            unite_value (sh, in->operands[b + 1], c->params->pdata[0]);
          else
            for (guint p = 0; p < c->params->len; p++)
              pin_instr (sh, c->params->pdata[p]);
          unite_value (sh, c->root, in);
        }
      for (int i = 1; i < in->n_operands; i++)
        if (i - 1 >= in->n_called)
          pin_instr (sh, in->operands[i]);
      return;
    case PS_OP_ALL_REDUCE: case PS_OP_COLLECTIVE_PERMUTE:
      /* Same shapes in and out; the group structure does not depend on
       * sizes. */
      if (in->n_operands == 1)
        {
          unite_value (sh, in->operands[0], in);
          return;
        }
      break;
    case PS_OP_CUSTOM_CALL:
      if (in->custom_call_target && strcmp (in->custom_call_target, "Sharding") == 0
          && in->n_operands == 1)
        {
          unite_value (sh, in->operands[0], in);
          return;
        }
      break;
    default:
      if (ps_opcode_is_elementwise (in->opcode))
        {
          int rank = leaf_rank (sh, in, 0);
          for (int i = 0; i < in->n_operands; i++)
            {
              const PsInstr *op = in->operands[i];
              if (leaf_rank (sh, op, 0) == 0 && rank > 0)
                continue; /* a scalar operand of clamp/select */
              unite_leaf (sh, op, 0, in, 0);
            }
          return;
        }
      break;
    }
  /* Everything else (constants, gather, scatter, FFT, custom-calls,
   * collectives that change shapes, async ops, ...) keeps its sizes. */
  pin_all (sh, in);
}

/* ---- shard counts ----------------------------------------------------------- */

static int64_t
gcd64 (int64_t a, int64_t b)
{
  while (b)
    {
      int64_t t = a % b;
      a = b;
      b = t;
    }
  return a;
}

static void
note_sharding (Shrink *sh, const PsInstr *in)
{
  const PsSharding *s = in->sharding;
  if (!s)
    return;
  for (int l = 0; l < n_leaves (sh, in); l++)
    {
      const PsSharding *ls = s;
      if (s->kind == PS_SHARDING_TUPLE)
        {
          if (l >= s->n_elems)
            return;
          ls = s->elems[l];
        }
      if (ls->kind != PS_SHARDING_TILED)
        continue;
      int rank = leaf_rank (sh, in, l);
      if (ls->n_tile_dims - ls->n_subgroups != rank)
        {
          pin_leaf (sh, in, l);
          continue;
        }
      for (int d = 0; d < rank; d++)
        {
          int n = node_of (sh, in, l, d);
          int64_t t = ls->tile_dims[d], m = NODE_MOD (sh, n);
          if (t > 1)
            NODE_MOD (sh, n) = m / gcd64 (m, t) * t;
        }
    }
}

/* ---- building ----------------------------------------------------------------- */

static void
shrink_init (Shrink *sh, const PsModule *m)
{
  sh->m = m;
  int n_ids = m->next_id + 1;
  sh->first_leaf = g_new0 (int, n_ids);
  sh->n_leaves = g_new0 (int, n_ids);
  sh->leaf_node = g_array_new (FALSE, FALSE, sizeof (int));
  sh->leaf_rank = g_array_new (FALSE, FALSE, sizeof (int));
  sh->parent = g_array_new (FALSE, FALSE, sizeof (int));
  sh->size = g_array_new (FALSE, FALSE, sizeof (int64_t));
  sh->pinned = g_array_new (FALSE, FALSE, sizeof (gboolean));
  sh->modulus = g_array_new (FALSE, FALSE, sizeof (int64_t));
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          const PsInstr *in = c->instrs->pdata[i];
          if (in->id < 0 || in->id >= n_ids)
            continue;
          GPtrArray *leaves = ps_shape_leaves (in->shape);
          sh->first_leaf[in->id] = (int) sh->leaf_node->len;
          sh->n_leaves[in->id] = (int) leaves->len;
          for (guint l = 0; l < leaves->len; l++)
            {
              const PsShape *ls = leaves->pdata[l];
              int first = (int) sh->parent->len, rank = ls->etype == PS_TOKEN ? 0 : ls->rank;
              g_array_append_val (sh->leaf_node, first);
              g_array_append_val (sh->leaf_rank, rank);
              for (int d = 0; d < rank; d++)
                {
                  int n = first + d;
                  int64_t one = 1;
                  g_array_append_val (sh->parent, n);
                  g_array_append_val (sh->size, ls->dims[d]);
                  /* Dynamic dims ("<=N") keep their bound. */
                  gboolean pinned = ls->dynamic && ls->dynamic[d];
                  g_array_append_val (sh->pinned, pinned);
                  g_array_append_val (sh->modulus, one);
                }
            }
          g_ptr_array_free (leaves, TRUE);
        }
    }
}

static void
shrink_clear (Shrink *sh)
{
  g_free (sh->first_leaf);
  g_free (sh->n_leaves);
  g_array_free (sh->leaf_node, TRUE);
  g_array_free (sh->leaf_rank, TRUE);
  g_array_free (sh->parent, TRUE);
  g_array_free (sh->size, TRUE);
  g_array_free (sh->pinned, TRUE);
  g_array_free (sh->modulus, TRUE);
}

static int64_t
shape_max_leaf_elements (const PsShape *s)
{
  if (!ps_shape_is_tuple (s))
    return ps_shape_elements (s);
  int64_t best = 0;
  for (int i = 0; i < s->n_elems; i++)
    best = MAX (best, shape_max_leaf_elements (s->elems[i]));
  return best;
}

static int64_t
module_max_elements (const PsModule *m)
{
  int64_t best = 0;
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          const PsInstr *in = c->instrs->pdata[i];
          best = MAX (best, shape_max_leaf_elements (in->shape));
        }
    }
  return best;
}

/* Attributes that spell out a full dim follow the dim's new size. */
static void
fix_attributes (PsInstr *ni, const PsInstr *oi)
{
  if (ni->opcode == PS_OP_SLICE && ni->n_operands == 1)
    {
      const PsShape *old_op = oi->operands[0]->shape, *new_op = ni->operands[0]->shape;
      for (int d = 0; d < ni->slice_limits.n && d < old_op->rank; d++)
        {
          int64_t stride = d < ni->slice_strides.n ? ni->slice_strides.v[d] : 1;
          if (ni->slice_starts.v[d] == 0 && stride == 1 && ni->slice_limits.v[d] == old_op->dims[d])
            ni->slice_limits.v[d] = new_op->dims[d];
        }
    }
  else if (ni->opcode == PS_OP_GATHER && ni->n_operands == 2)
    {
      const PsShape *old_op = oi->operands[0]->shape, *new_op = ni->operands[0]->shape;
      for (int d = 0; d < ni->gather.slice_sizes.n && d < old_op->rank; d++)
        if (ni->gather.slice_sizes.v[d] == old_op->dims[d])
          ni->gather.slice_sizes.v[d] = new_op->dims[d];
    }
  else if (ni->opcode == PS_OP_DYNAMIC_SLICE)
    {
      const PsShape *old_op = oi->operands[0]->shape, *new_op = ni->operands[0]->shape;
      for (int d = 0; d < ni->dynamic_slice_sizes.n && d < old_op->rank; d++)
        if (ni->dynamic_slice_sizes.v[d] == old_op->dims[d])
          ni->dynamic_slice_sizes.v[d] = new_op->dims[d];
    }
}

void
ps_shrink_options_init (PsShrinkOptions *opts)
{
  memset (opts, 0, sizeof *opts);
  opts->min_size = 8;
}

PsModule *
ps_shrink_module (const PsModule *m, const PsShrinkOptions *opts, PsShrinkReport *report,
                  GError **error)
{
  PsShrinkOptions def;
  if (!opts)
    {
      ps_shrink_options_init (&def);
      opts = &def;
    }
  int64_t min_size = opts->min_size > 0 ? opts->min_size : 8;
  int64_t extra_mod = opts->num_devices > 1 ? opts->num_devices : 1;
  PsShrinkReport rep = { 0 };
  rep.max_elements_before = module_max_elements (m);

  Shrink sh;
  shrink_init (&sh, m);
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          const PsInstr *in = c->instrs->pdata[i];
          constrain (&sh, in);
          note_sharding (&sh, in);
        }
    }

  /* Fold pins and shard counts into the class roots. */
  int n_nodes = (int) sh.parent->len;
  for (int n = 0; n < n_nodes; n++)
    {
      int r = find (&sh, n);
      if (r == n)
        continue;
      if (NODE_PINNED (&sh, n))
        NODE_PINNED (&sh, r) = TRUE;
      int64_t a = NODE_MOD (&sh, r), b = NODE_MOD (&sh, n);
      NODE_MOD (&sh, r) = a / gcd64 (a, b) * b;
    }
  int64_t *new_size = g_new (int64_t, MAX (n_nodes, 1));
  for (int n = 0; n < n_nodes; n++)
    {
      int r = find (&sh, n);
      int64_t s = NODE_SIZE (&sh, r);
      if (r == n)
        {
          rep.n_classes++;
          if (s > min_size && NODE_PINNED (&sh, r))
            rep.n_pinned++;
        }
      new_size[n] = s;
      if (r != n || NODE_PINNED (&sh, r) || s <= min_size)
        continue;
      int64_t l = NODE_MOD (&sh, r);
      l = l / gcd64 (l, extra_mod) * extra_mod;
      int64_t rem = s % l, t = rem + l;
      while (t < min_size)
        t += l;
      if (t < s)
        {
          new_size[n] = t;
          rep.n_shrunk++;
        }
    }
  for (int n = 0; n < n_nodes; n++)
    new_size[n] = new_size[find (&sh, n)];

  if (rep.n_shrunk == 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED,
                   "cannot scale the module down: every dimension over %" G_GINT64_FORMAT
                   " elements is fixed by an attribute or literal the program depends on",
                   min_size);
      g_free (new_size);
      shrink_clear (&sh);
      return NULL;
    }

  PsModule *out = ps_module_clone (m);
  g_clear_pointer (&out->entry_layout, g_free);
  for (guint k = 0; k < out->computations->len; k++)
    {
      PsComputation *c = out->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          PsInstr *in = c->instrs->pdata[i];
          GPtrArray *leaves = ps_shape_leaves (in->shape);
          for (guint l = 0; l < leaves->len; l++)
            {
              PsShape *ls = leaves->pdata[l];
              int li = leaf_index (&sh, in, (int) l);
              if (li < 0 || ls->etype == PS_TOKEN)
                continue;
              int first = g_array_index (sh.leaf_node, int, li);
              for (int d = 0; d < ls->rank; d++)
                ls->dims[d] = new_size[first + d];
            }
          g_ptr_array_free (leaves, TRUE);
        }
    }
  for (guint k = 0; k < out->computations->len; k++)
    {
      PsComputation *c = out->computations->pdata[k];
      const PsComputation *oc = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        fix_attributes (c->instrs->pdata[i], oc->instrs->pdata[i]);
    }
  g_free (new_size);
  shrink_clear (&sh);

  GError *ve = NULL;
  if (!ps_module_validate (out, NULL, &ve))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED, "cannot scale the module down: %s",
                   ve->message);
      g_error_free (ve);
      ps_module_free (out);
      return NULL;
    }
  rep.max_elements_after = module_max_elements (out);
  if (report)
    *report = rep;
  return out;
}

/* ---- comparing two partitioned programs ------------------------------------ */

static gboolean
ints_equal (const PsInts *a, const PsInts *b)
{
  return a->n == b->n && (a->n == 0 || memcmp (a->v, b->v, sizeof (int64_t) * (size_t) a->n) == 0);
}

static gboolean
shape_ranks_equal (const PsShape *a, const PsShape *b)
{
  if (a->etype != b->etype)
    return FALSE;
  if (a->etype == PS_TUPLE)
    {
      if (a->n_elems != b->n_elems)
        return FALSE;
      for (int i = 0; i < a->n_elems; i++)
        if (!shape_ranks_equal (a->elems[i], b->elems[i]))
          return FALSE;
      return TRUE;
    }
  return a->rank == b->rank;
}

static char *
instr_difference (const PsInstr *a, const PsInstr *b)
{
  if (a->opcode != b->opcode)
    return g_strdup_printf ("%s is a %s where the other program has %s (%s)", a->name,
                            ps_opcode_name (a->opcode), b->name, ps_opcode_name (b->opcode));
  if (a->n_operands != b->n_operands || !shape_ranks_equal (a->shape, b->shape))
    return g_strdup_printf ("%s (%s) has other operands or rank than %s", a->name,
                            ps_opcode_name (a->opcode), b->name);
  for (int j = 0; j < a->n_operands; j++)
    {
      const PsInstr *oa = a->operands[j], *ob = b->operands[j];
      if (oa->opcode != ob->opcode || !shape_ranks_equal (oa->shape, ob->shape))
        return g_strdup_printf ("operand %d of %s differs from that of %s", j, a->name, b->name);
    }
  if (ps_opcode_is_collective (a->opcode)
      && (a->n_groups != b->n_groups || a->group_size != b->group_size
          || (a->n_groups * a->group_size > 0
              && memcmp (a->replica_groups, b->replica_groups,
                         sizeof (int64_t) * (size_t) (a->n_groups * a->group_size)) != 0)
          || a->n_pairs != b->n_pairs
          || (a->n_pairs > 0
              && memcmp (a->source_target_pairs, b->source_target_pairs,
                         sizeof (int64_t) * 2 * (size_t) a->n_pairs) != 0)))
    return g_strdup_printf ("%s (%s) has other device groups than %s", a->name,
                            ps_opcode_name (a->opcode), b->name);
  if (!ints_equal (&a->dimensions, &b->dimensions))
    return g_strdup_printf ("%s (%s) has other dimensions than %s", a->name,
                            ps_opcode_name (a->opcode), b->name);
  return NULL;
}

gboolean
ps_shrink_same_program (const PsModule *a, const PsModule *b, char **why)
{
  char *diff = NULL;
  if (a->computations->len != b->computations->len)
    diff = g_strdup_printf ("%u computations where the other program has %u",
                            a->computations->len, b->computations->len);
  for (guint k = 0; !diff && k < a->computations->len; k++)
    {
      const PsComputation *ca = a->computations->pdata[k], *cb = b->computations->pdata[k];
      if (ca->instrs->len != cb->instrs->len)
        {
          diff = g_strdup_printf ("computation %s has %u instructions where the other program has %u",
                                  ca->name, ca->instrs->len, cb->instrs->len);
          break;
        }
      for (guint i = 0; !diff && i < ca->instrs->len; i++)
        diff = instr_difference (ca->instrs->pdata[i], cb->instrs->pdata[i]);
    }
  if (why)
    *why = diff;
  else
    g_free (diff);
  return diff == NULL;
}

/* One attempt of ps_shrink_verify with fixed shrink options. */
static gboolean
shrink_verify_once (const PsModule *sharded, const PsModule *partitioned, int64_t num_devices,
                    const PsSpmdOptions *spmd_opts, const PsShrinkOptions *shrink_opts,
                    const PsVerifyOptions *verify_opts, PsVerifyResult *result,
                    PsShrinkReport *report, GError **error)
{
  PsShrinkReport rep;
  g_autoptr (PsModule) small = ps_shrink_module (sharded, shrink_opts, &rep, error);
  if (!small)
    return FALSE;
  if (report)
    *report = rep;
  PsSpmdOptions so;
  if (spmd_opts)
    so = *spmd_opts;
  else
    ps_spmd_options_init (&so);
  so.report = NULL;
  g_autoptr (PsModule) part = ps_spmd_partition (small, num_devices, &so, error);
  if (!part)
    {
      g_prefix_error (error, "scaled copy: ");
      return FALSE;
    }
  /* Same decisions: compare the two programs before CSE, which merges
   * values of equal shapes and so merges more in the copy. */
  const PsModule *a = part, *b = partitioned;
  g_autoptr (PsModule) raw_small = NULL;
  g_autoptr (PsModule) raw_orig = NULL;
  if (so.cse)
    {
      so.cse = FALSE;
      raw_small = ps_spmd_partition (small, num_devices, &so, error);
      raw_orig = raw_small ? ps_spmd_partition (sharded, num_devices, &so, error) : NULL;
      if (!raw_orig)
        return FALSE;
      a = raw_small;
      b = raw_orig;
    }
  char *why = NULL;
  if (!ps_shrink_same_program (a, b, &why))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED,
                   "the scaled copy partitions differently from the original: %s", why);
      g_free (why);
      return FALSE;
    }
  if (!ps_verify_spmd (small, part, num_devices, verify_opts, result, error))
    {
      g_prefix_error (error, "scaled copy: ");
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_shrink_verify (const PsModule *sharded, const PsModule *partitioned, int64_t num_devices,
                  const PsSpmdOptions *spmd_opts, const PsShrinkOptions *shrink_opts,
                  const PsVerifyOptions *verify_opts, PsVerifyResult *result,
                  PsShrinkReport *report, GError **error)
{
  if (shrink_opts)
    return shrink_verify_once (sharded, partitioned, num_devices, spmd_opts, shrink_opts,
                               verify_opts, result, report, error);
  PsShrinkOptions so;
  ps_shrink_options_init (&so);
  so.num_devices = num_devices;
  GError *first = NULL;
  if (num_devices > 1
      && shrink_verify_once (sharded, partitioned, num_devices, spmd_opts, &so, verify_opts,
                             result, report, &first))
    return TRUE;
  /* A failure other than "cannot do it this way" is final. */
  if (first && !g_error_matches (first, PS_ERROR, PS_ERROR_UNSUPPORTED)
      && !g_error_matches (first, PS_ERROR, PS_ERROR_LIMIT))
    {
      g_propagate_error (error, first);
      return FALSE;
    }
  so.num_devices = 0;
  GError *second = NULL;
  gboolean ok = shrink_verify_once (sharded, partitioned, num_devices, spmd_opts, &so, verify_opts,
                                    result, report, &second);
  /* Still too large: the smallest copy (dims down to 2 where the shard
   * counts allow), e.g. for a fallback that runs the whole op per device. */
  if (!ok && g_error_matches (second, PS_ERROR, PS_ERROR_LIMIT))
    {
      g_clear_error (&second);
      so.min_size = 2;
      ok = shrink_verify_once (sharded, partitioned, num_devices, spmd_opts, &so, verify_opts,
                               result, report, &second);
    }
  if (!ok)
    {
      if (first && strcmp (first->message, second->message) != 0)
        g_prefix_error (&second, "%s; ", first->message);
      g_propagate_error (error, second);
    }
  else
    g_clear_error (&second);
  g_clear_error (&first);
  return ok;
}

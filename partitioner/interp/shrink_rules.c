/* Per-op rules for scaled copies (see shrink.h): which dims of an
 * instruction and its operands must keep equal sizes, and which sizes the
 * program depends on. */
#include "config.h"

#include <string.h>

#include "partitioner/interp/shrink_private.h"

/* ---- per-op constraints -------------------------------------------------- */

static gboolean
window_dim_trivial (const PsWindowDim *w)
{
  return w->size == 1 && w->stride == 1 && w->pad_lo == 0 && w->pad_hi == 0
         && w->base_dilation <= 1 && w->window_dilation <= 1;
}

/* A group of reshape dims with equal products, a[i0..i1) <-> b[j0..j1):
 * when one side has a single dim (ignoring size-1 dims) and the other
 * several, that dim is the merge of the others: its size follows the
 * major-most factor (which may shrink), the other factors are pinned.
 * Anything else is pinned whole. */
static void
constrain_reshape_group (SkShrink *sh, const PsInstr *x, int i0, int i1, const PsInstr *y,
                         int j0, int j1)
{
  const PsShape *a = x->shape, *b = y->shape;
  int na = 0, nb = 0;
  for (int i = i0; i < i1; i++)
    na += a->dims[i] != 1;
  for (int j = j0; j < j1; j++)
    nb += b->dims[j] != 1;
  if ((na == 1 && nb >= 2) || (nb == 1 && na >= 2))
    {
      /* One: the merged side; many: the factors. */
      const PsInstr *one = na == 1 ? x : y, *many = na == 1 ? y : x;
      int o0 = na == 1 ? i0 : j0, o1 = na == 1 ? i1 : j1;
      int m0 = na == 1 ? j0 : i0, m1 = na == 1 ? j1 : i1;
      int merged = -1, major = -1;
      int64_t rest = 1;
      for (int d = o0; d < o1; d++)
        if (one->shape->dims[d] != 1)
          merged = d;
      for (int d = m0; d < m1; d++)
        {
          if (many->shape->dims[d] == 1)
            continue;
          if (major < 0)
            major = d;
          else
            {
              rest *= many->shape->dims[d];
              sk_pin (sh, many, 0, d);
            }
        }
      sk_derive (sh, sk_node_of (sh, one, 0, merged), sk_node_of (sh, many, 0, major), rest);
      return;
    }
  for (int i = i0; i < i1; i++)
    sk_pin (sh, x, 0, i);
  for (int j = j0; j < j1; j++)
    sk_pin (sh, y, 0, j);
}

/* Reshape/bitcast: dims that correspond one to one (equal sizes, aligned by
 * the running products, ignoring size-1 dims) are joined; a dim that is the
 * merge (or split) of several follows its major factor; other groups are
 * pinned. */
static void
constrain_reshape (SkShrink *sh, const PsInstr *in)
{
  const PsInstr *op = in->operands[0];
  const PsShape *a = op->shape, *b = in->shape;
  if (!ps_shape_is_array (a) || !ps_shape_is_array (b))
    {
      sk_pin_all (sh, in);
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
            sk_pin (sh, op, 0, i);
          for (; j < b->rank; j++)
            sk_pin (sh, in, 0, j);
          break;
        }
      if (a->dims[i] == b->dims[j])
        {
          sk_unite (sh, op, 0, i, in, 0, j);
          i++, j++;
          continue;
        }
      int i0 = i, j0 = j;
      int64_t pa = a->dims[i++], pb = b->dims[j++];
      while (pa != pb && (i < a->rank || j < b->rank))
        {
          if ((pa < pb && i < a->rank) || j >= b->rank)
            pa *= a->dims[i++];
          else
            pb *= b->dims[j++];
        }
      if (pa != pb)
        {
          for (int k = i0; k < a->rank; k++)
            sk_pin (sh, op, 0, k);
          for (int k = j0; k < b->rank; k++)
            sk_pin (sh, in, 0, k);
          break;
        }
      constrain_reshape_group (sh, op, i0, i, in, j0, j);
    }
}

static void
constrain_dot (SkShrink *sh, const PsInstr *in)
{
  if (in->n_operands != 2)
    {
      sk_pin_all (sh, in);
      return;
    }
  const PsInstr *l = in->operands[0], *r = in->operands[1];
  const PsDotDims *dd = &in->dot;
  int out = 0;
  for (int k = 0; k < dd->lhs_batch.n && k < dd->rhs_batch.n; k++)
    {
      sk_unite (sh, l, 0, dd->lhs_batch.v[k], r, 0, dd->rhs_batch.v[k]);
      sk_unite (sh, l, 0, dd->lhs_batch.v[k], in, 0, out++);
    }
  for (int k = 0; k < dd->lhs_contracting.n && k < dd->rhs_contracting.n; k++)
    sk_unite (sh, l, 0, dd->lhs_contracting.v[k], r, 0, dd->rhs_contracting.v[k]);
  for (int d = 0; d < sk_leaf_rank (sh, l, 0); d++)
    if (!ps_ints_contains (&dd->lhs_batch, d) && !ps_ints_contains (&dd->lhs_contracting, d))
      sk_unite (sh, l, 0, d, in, 0, out++);
  for (int d = 0; d < sk_leaf_rank (sh, r, 0); d++)
    if (!ps_ints_contains (&dd->rhs_batch, d) && !ps_ints_contains (&dd->rhs_contracting, d))
      sk_unite (sh, r, 0, d, in, 0, out++);
}

static void
constrain_convolution (SkShrink *sh, const PsInstr *in)
{
  const PsConvDims *c = &in->conv;
  if (in->n_operands != 2 || !c->present || in->window.n != c->n_spatial)
    {
      sk_pin_all (sh, in);
      return;
    }
  const PsInstr *x = in->operands[0], *k = in->operands[1];
  if (in->batch_group_count > 1)
    {
      sk_pin (sh, x, 0, c->in_batch);
      sk_pin (sh, in, 0, c->out_batch);
      sk_pin (sh, k, 0, c->k_out_feature);
      sk_pin (sh, in, 0, c->out_feature);
    }
  else
    sk_unite (sh, x, 0, c->in_batch, in, 0, c->out_batch);
  if (in->feature_group_count > 1)
    {
      sk_pin (sh, x, 0, c->in_feature);
      sk_pin (sh, k, 0, c->k_in_feature);
      sk_pin (sh, k, 0, c->k_out_feature);
      sk_pin (sh, in, 0, c->out_feature);
    }
  else
    sk_unite (sh, x, 0, c->in_feature, k, 0, c->k_in_feature);
  sk_unite (sh, k, 0, c->k_out_feature, in, 0, c->out_feature);
  for (int s = 0; s < c->n_spatial; s++)
    {
      if (window_dim_trivial (&in->window.dims[s]))
        sk_unite (sh, x, 0, c->in_spatial[s], in, 0, c->out_spatial[s]);
      else
        {
          sk_pin (sh, x, 0, c->in_spatial[s]);
          sk_pin (sh, in, 0, c->out_spatial[s]);
        }
      sk_pin (sh, k, 0, c->k_spatial[s]);
    }
}

/* Reduce-window: operands (the first half) and outputs dim by dim where the
 * window is trivial. */
static void
constrain_reduce_window (SkShrink *sh, const PsInstr *in)
{
  int n = in->n_operands / 2;
  for (int i = 0; i < n; i++)
    {
      const PsInstr *op = in->operands[i];
      int rank = sk_leaf_rank (sh, op, 0);
      if (rank != in->window.n || rank != sk_leaf_rank (sh, in, n > 1 ? i : 0))
        {
          sk_pin_all (sh, in);
          return;
        }
      for (int d = 0; d < rank; d++)
        {
          if (window_dim_trivial (&in->window.dims[d]))
            sk_unite (sh, op, 0, d, in, n > 1 ? i : 0, d);
          else
            {
              sk_pin (sh, op, 0, d);
              sk_pin (sh, in, n > 1 ? i : 0, d);
            }
        }
      sk_unite_leaf (sh, op, 0, in->operands[0], 0);
    }
}

static void
constrain_select_and_scatter (SkShrink *sh, const PsInstr *in)
{
  if (in->n_operands != 3)
    {
      sk_pin_all (sh, in);
      return;
    }
  const PsInstr *op = in->operands[0], *src = in->operands[1];
  sk_unite_leaf (sh, op, 0, in, 0);
  int rank = sk_leaf_rank (sh, op, 0);
  if (rank != in->window.n || rank != sk_leaf_rank (sh, src, 0))
    {
      sk_pin_all (sh, in);
      return;
    }
  for (int d = 0; d < rank; d++)
    {
      if (window_dim_trivial (&in->window.dims[d]))
        sk_unite (sh, op, 0, d, src, 0, d);
      else
        {
          sk_pin (sh, op, 0, d);
          sk_pin (sh, src, 0, d);
        }
    }
}

static void
constrain_reduce (SkShrink *sh, const PsInstr *in)
{
  int n = in->n_operands / 2;
  for (int i = 0; i < n; i++)
    {
      const PsInstr *op = in->operands[i];
      int out_leaf = n > 1 ? i : 0, out = 0;
      for (int d = 0; d < sk_leaf_rank (sh, op, 0); d++)
        if (!ps_ints_contains (&in->dimensions, d))
          sk_unite (sh, op, 0, d, in, out_leaf, out++);
      sk_unite_leaf (sh, op, 0, in->operands[0], 0);
    }
}

static void
constrain_slice (SkShrink *sh, const PsInstr *in)
{
  const PsInstr *op = in->operands[0];
  int rank = sk_leaf_rank (sh, op, 0);
  if (rank != in->slice_starts.n || rank != in->slice_limits.n)
    {
      sk_pin_all (sh, in);
      return;
    }
  for (int d = 0; d < rank; d++)
    {
      int64_t stride = d < in->slice_strides.n ? in->slice_strides.v[d] : 1;
      if (in->slice_starts.v[d] == 0 && stride == 1 && in->slice_limits.v[d] == op->shape->dims[d])
        sk_unite (sh, op, 0, d, in, 0, d);
      else
        {
          sk_pin (sh, op, 0, d);
          sk_pin (sh, in, 0, d);
        }
    }
}

static void
constrain_pad (SkShrink *sh, const PsInstr *in)
{
  const PsInstr *op = in->operands[0];
  int rank = sk_leaf_rank (sh, op, 0);
  if (rank != in->n_pad)
    {
      sk_pin_all (sh, in);
      return;
    }
  for (int d = 0; d < rank; d++)
    {
      const PsPadDim *p = &in->padding[d];
      if (p->lo == 0 && p->hi == 0 && p->interior == 0)
        sk_unite (sh, op, 0, d, in, 0, d);
      else
        {
          sk_pin (sh, op, 0, d);
          sk_pin (sh, in, 0, d);
        }
    }
}

static void
constrain_concatenate (SkShrink *sh, const PsInstr *in)
{
  int64_t cd = in->dimensions.n == 1 ? in->dimensions.v[0] : -1;
  for (int i = 0; i < in->n_operands; i++)
    {
      const PsInstr *op = in->operands[i];
      for (int d = 0; d < sk_leaf_rank (sh, op, 0); d++)
        {
          if (d == cd)
            sk_pin (sh, op, 0, d);
          else
            sk_unite (sh, op, 0, d, in, 0, d);
        }
    }
  sk_pin (sh, in, 0, cd);
}

static void
constrain_dynamic_slice (SkShrink *sh, const PsInstr *in)
{
  const PsInstr *op = in->operands[0];
  int rank = sk_leaf_rank (sh, op, 0);
  if (rank != in->dynamic_slice_sizes.n)
    {
      sk_pin_all (sh, in);
      return;
    }
  for (int d = 0; d < rank; d++)
    {
      if (in->dynamic_slice_sizes.v[d] == op->shape->dims[d])
        sk_unite (sh, op, 0, d, in, 0, d);
      else if (in->dynamic_slice_sizes.v[d] == 1)
        continue; /* any operand size: the start is clamped into it */
      else
        {
          sk_pin (sh, op, 0, d);
          sk_pin (sh, in, 0, d);
        }
    }
}

static void
constrain_dynamic_update_slice (SkShrink *sh, const PsInstr *in)
{
  const PsInstr *op = in->operands[0], *up = in->operands[1];
  sk_unite_leaf (sh, op, 0, in, 0);
  int rank = sk_leaf_rank (sh, op, 0);
  if (rank != sk_leaf_rank (sh, up, 0))
    {
      sk_pin_all (sh, in);
      return;
    }
  for (int d = 0; d < rank; d++)
    {
      if (up->shape->dims[d] == op->shape->dims[d])
        sk_unite (sh, op, 0, d, up, 0, d);
      else if (up->shape->dims[d] == 1)
        continue;
      else
        {
          sk_pin (sh, op, 0, d);
          sk_pin (sh, up, 0, d);
        }
    }
}

/* Gather: the operand's full-size slice dims join their output offset dims,
 * size-1 slice dims leave the operand dim free (starts are clamped into
 * it), other slice dims are pinned; the indices' batch dims join the
 * output's batch dims; the index vector dim is pinned. */
static void
constrain_gather (SkShrink *sh, const PsInstr *in)
{
  const PsGatherDims *g = &in->gather;
  if (in->n_operands != 2)
    {
      sk_pin_all (sh, in);
      return;
    }
  const PsInstr *op = in->operands[0], *idx = in->operands[1];
  int op_rank = sk_leaf_rank (sh, op, 0), idx_rank = sk_leaf_rank (sh, idx, 0), out_rank = sk_leaf_rank (sh, in, 0);
  if (g->slice_sizes.n != op_rank)
    {
      sk_pin_all (sh, in);
      return;
    }
  int k = 0;
  for (int d = 0; d < op_rank; d++)
    {
      if (ps_ints_contains (&g->collapsed_slice_dims, d) || ps_ints_contains (&g->operand_batching_dims, d))
        continue;
      if (k >= g->offset_dims.n)
        {
          sk_pin_all (sh, in);
          return;
        }
      int64_t od = g->offset_dims.v[k++];
      if (g->slice_sizes.v[d] == op->shape->dims[d])
        sk_unite (sh, op, 0, d, in, 0, od);
      else if (g->slice_sizes.v[d] != 1)
        {
          sk_pin (sh, op, 0, d);
          sk_pin (sh, in, 0, od);
        }
    }
  for (int i = 0; i < g->operand_batching_dims.n && i < g->start_indices_batching_dims.n; i++)
    sk_unite (sh, op, 0, g->operand_batching_dims.v[i], idx, 0, g->start_indices_batching_dims.v[i]);
  int b = 0;
  for (int od = 0; od < out_rank; od++)
    {
      if (ps_ints_contains (&g->offset_dims, od))
        continue;
      if (b == g->index_vector_dim)
        b++;
      sk_unite (sh, idx, 0, b++, in, 0, od);
    }
  sk_pin (sh, idx, 0, g->index_vector_dim);
  (void) idx_rank;
}

/* Scatter: like gather, with the updates' window dims in place of the
 * output's offset dims; operands, outputs and updates join among
 * themselves. */
static void
constrain_scatter (SkShrink *sh, const PsInstr *in)
{
  const PsScatterDims *g = &in->scatter;
  int n = (in->n_operands - 1) / 2;
  if (n < 1 || in->n_operands != 2 * n + 1)
    {
      sk_pin_all (sh, in);
      return;
    }
  const PsInstr *op = in->operands[0], *idx = in->operands[n], *up = in->operands[n + 1];
  for (int i = 0; i < n; i++)
    {
      sk_unite_leaf (sh, in->operands[i], 0, in, n > 1 ? i : 0);
      sk_unite_leaf (sh, in->operands[i], 0, op, 0);
      sk_unite_leaf (sh, in->operands[n + 1 + i], 0, up, 0);
    }
  int op_rank = sk_leaf_rank (sh, op, 0), up_rank = sk_leaf_rank (sh, up, 0);
  int k = 0;
  for (int d = 0; d < op_rank; d++)
    {
      if (ps_ints_contains (&g->inserted_window_dims, d) || ps_ints_contains (&g->input_batching_dims, d))
        continue;
      if (k >= g->update_window_dims.n)
        {
          sk_pin_all (sh, in);
          return;
        }
      int64_t ud = g->update_window_dims.v[k++];
      if (ud < 0 || ud >= up_rank)
        {
          sk_pin_all (sh, in);
          return;
        }
      if (up->shape->dims[ud] == op->shape->dims[d])
        sk_unite (sh, op, 0, d, up, 0, ud);
      else if (up->shape->dims[ud] != 1)
        {
          sk_pin (sh, op, 0, d);
          sk_pin (sh, up, 0, ud);
        }
    }
  for (int i = 0; i < g->input_batching_dims.n && i < g->scatter_indices_batching_dims.n; i++)
    sk_unite (sh, op, 0, g->input_batching_dims.v[i], idx, 0, g->scatter_indices_batching_dims.v[i]);
  int b = 0;
  for (int ud = 0; ud < up_rank; ud++)
    {
      if (ps_ints_contains (&g->update_window_dims, ud))
        continue;
      if (b == g->index_vector_dim)
        b++;
      sk_unite (sh, idx, 0, b++, up, 0, ud);
    }
  sk_pin (sh, idx, 0, g->index_vector_dim);
}

/* Parameters of a called computation take the caller's operands. */
static void
unite_params (SkShrink *sh, const PsComputation *c, int first_operand, const PsInstr *caller)
{
  for (guint p = 0; p < c->params->len; p++)
    {
      int o = first_operand + (int) p;
      if (o < caller->n_operands)
        sk_unite_value (sh, caller->operands[o], c->params->pdata[p]);
      else
        sk_pin_instr (sh, c->params->pdata[p]);
    }
}

void
sk_constrain (SkShrink *sh, const PsInstr *in)
{
  switch (in->opcode)
    {
    case PS_OP_PARAMETER: case PS_OP_IOTA: case PS_OP_RNG: case PS_OP_PARTITION_ID:
    case PS_OP_REPLICA_ID: case PS_OP_AFTER_ALL:
      return; /* sources: any size */
    case PS_OP_BITCAST_CONVERT:
      if (in->n_operands == 1 && ps_shape_is_array (in->shape)
          && ps_etype_size_bytes (in->shape->etype) == ps_etype_size_bytes (in->operands[0]->shape->etype))
        sk_unite_leaf (sh, in->operands[0], 0, in, 0);
      else
        sk_pin_all (sh, in);
      return;
    case PS_OP_BROADCAST:
      for (int i = 0; i < in->dimensions.n; i++)
        sk_unite (sh, in->operands[0], 0, i, in, 0, in->dimensions.v[i]);
      return;
    case PS_OP_TRANSPOSE:
      for (int i = 0; i < in->dimensions.n; i++)
        sk_unite (sh, in->operands[0], 0, in->dimensions.v[i], in, 0, i);
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
      sk_unite_value (sh, in->operands[0], in);
      return;
    case PS_OP_OPTIMIZATION_BARRIER:
      sk_unite_value (sh, in->operands[0], in);
      return;
    case PS_OP_SORT:
      for (int i = 0; i < in->n_operands; i++)
        {
          sk_unite_leaf (sh, in->operands[i], 0, in, in->n_operands > 1 ? i : 0);
          sk_unite_leaf (sh, in->operands[i], 0, in->operands[0], 0);
        }
      return;
    case PS_OP_TUPLE:
      for (int i = 0; i < in->n_operands; i++)
        {
          int off = sk_element_first_leaf (in->shape, i);
          int cnt = sk_n_leaves (sh, in->operands[i]);
          sk_unite_leaves (sh, in->operands[i], 0, in, off, cnt);
        }
      return;
    case PS_OP_GET_TUPLE_ELEMENT:
      {
        const PsInstr *t = in->operands[0];
        if (!ps_shape_is_tuple (t->shape) || in->tuple_index >= t->shape->n_elems)
          {
            sk_pin_all (sh, in);
            return;
          }
        sk_unite_leaves (sh, t, sk_element_first_leaf (t->shape, in->tuple_index), in, 0, sk_n_leaves (sh, in));
        return;
      }
    case PS_OP_CALL:
    case PS_OP_FUSION:
      if (in->n_called != 1)
        break;
      unite_params (sh, in->called[0], 0, in);
      sk_unite_value (sh, in->called[0]->root, in);
      return;
    case PS_OP_WHILE:
      if (in->n_called != 2 || in->n_operands != 1)
        break;
      unite_params (sh, in->called[0], 0, in);
      unite_params (sh, in->called[1], 0, in);
      sk_unite_value (sh, in->called[1]->root, in);
      sk_unite_value (sh, in->operands[0], in);
      return;
    case PS_OP_CONDITIONAL:
      for (int b = 0; b < in->n_called; b++)
        {
          const PsComputation *c = in->called[b];
          if (c->params->len == 1 && b + 1 < in->n_operands)
            sk_unite_value (sh, in->operands[b + 1], c->params->pdata[0]);
          else
            for (guint p = 0; p < c->params->len; p++)
              sk_pin_instr (sh, c->params->pdata[p]);
          sk_unite_value (sh, c->root, in);
        }
      for (int i = 1; i < in->n_operands; i++)
        if (i - 1 >= in->n_called)
          sk_pin_instr (sh, in->operands[i]);
      return;
    case PS_OP_BATCH_NORM_TRAINING: case PS_OP_BATCH_NORM_INFERENCE: case PS_OP_BATCH_NORM_GRAD:
      {
        /* The operand-shaped values alike; every per-feature value's dim
         * follows the feature dim. Statistics do not depend on sizes. */
        const PsInstr *x = in->operands[0];
        int64_t f = in->feature_index;
        sk_unite_leaf (sh, x, 0, in, 0);
        for (int i = 1; i < in->n_operands; i++)
          if (in->opcode == PS_OP_BATCH_NORM_GRAD && i == 4)
            sk_unite_leaf (sh, in->operands[i], 0, x, 0);
          else
            sk_unite (sh, in->operands[i], 0, 0, x, 0, f);
        if (ps_shape_is_tuple (in->shape))
          for (int l = 1; l < 3; l++)
            sk_unite (sh, in, l, 0, x, 0, f);
        return;
      }
    case PS_OP_ALL_REDUCE: case PS_OP_COLLECTIVE_PERMUTE:
      /* Same shapes in and out; the group structure does not depend on
       * sizes. */
      if (in->n_operands == 1)
        {
          sk_unite_value (sh, in->operands[0], in);
          return;
        }
      break;
    case PS_OP_CUSTOM_CALL:
      if (in->custom_call_target && strcmp (in->custom_call_target, "Sharding") == 0
          && in->n_operands == 1)
        {
          sk_unite_value (sh, in->operands[0], in);
          return;
        }
      break;
    default:
      if (ps_opcode_is_elementwise (in->opcode))
        {
          int rank = sk_leaf_rank (sh, in, 0);
          for (int i = 0; i < in->n_operands; i++)
            {
              const PsInstr *op = in->operands[i];
              if (sk_leaf_rank (sh, op, 0) == 0 && rank > 0)
                continue; /* a scalar operand of clamp/select */
              sk_unite_leaf (sh, op, 0, in, 0);
            }
          return;
        }
      break;
    }
  /* Everything else (constants, gather, scatter, FFT, custom-calls,
   * collectives that change shapes, async ops, ...) keeps its sizes. */
  sk_pin_all (sh, in);
}

/* Handlers of batch-norm-training, batch-norm-inference and batch-norm-grad.
 *
 * The op runs in the layout of its operand-shaped result (leaf 0 of the
 * target): operand and grad_output are resharded to it, the per-feature
 * operands to its split of the feature dim alone. Then
 *
 *  - inference, and training or grad whose non-feature dims are not split:
 *    the op itself on the local tiles (statistics over a tile are the
 *    statistics over the whole batch and space when only features are
 *    split);
 *  - training or grad with a split batch or spatial dim (spatial
 *    partitioning, data parallelism): the op is expanded, as XLA's
 *    BatchNormExpander writes it, into per-tile partial sums (padding of
 *    uneven tiles masked to zero), one all-reduce of both sums over the
 *    devices that split those dims (the two sums concatenated, as XLA's
 *    all-reduce combiner would merge them), and elementwise ops:
 *      training: mean = sum(x) / N, var = sum(x^2) / N - mean^2,
 *                y = (x - mean) * (scale * rsqrt(var + eps)) + offset
 *      grad:     grad_offset = sum(dy), grad_scale = sum(dy (x - mean)) rsqrt(var + eps),
 *                dx = scale rsqrt(var + eps) (dy - grad_offset / N
 *                     - (x - mean) rsqrt(var + eps) grad_scale / N)
 *    16-bit operands are summed in f32 and the results converted back.
 *
 * XLA's own SPMD partitioner has no handler for these ops (it replicates
 * them); the expansion is what GSPMD's spatial partitioning needs (the
 * statistics of a spatially split image are reduced across its pieces). */
#include "config.h"

#include <string.h>

#include "partitioner/spmd/spmd_private.h"

/* A sum over the dims `red` of x (rank r) into a rank-1 array. */
static PsInstr *
sum_over (SpComp *c, PsInstr *x, const gboolean *red, int r)
{
  int64_t dims[r], out_dims[1];
  int nd = 0;
  for (int d = 0; d < r; d++)
    if (red[d])
      dims[nd++] = d;
    else
      out_dims[0] = x->shape->dims[d];
  PsElemType t = x->shape->etype;
  PsInstr *ops[2] = { x, sp_const_zero (c, t) };
  PsInstr *y = sp_add (c, PS_OP_REDUCE, sp_shape (t, 1, out_dims), 2, ops);
  ps_ints_set (&y->dimensions, nd, dims);
  PsComputation *sum = sp_reducer (c->m, SP_RED_SUM, t);
  ps_instr_set_called (y, 1, &sum);
  return y;
}

/* Both rank-1 partial sums combined over the groups in one all-reduce. */
static void
all_reduce_pair (SpComp *c, PsInstr **a, PsInstr **b, int ng, int gs, const int64_t *groups)
{
  int64_t nf = (*a)->shape->dims[0];
  int64_t row[2] = { 1, nf };
  /* Emitted one per statement: initializer order is unspecified in C. */
  PsInstr *parts[2];
  parts[0] = sp_reshape (c, *a, 2, row);
  parts[1] = sp_reshape (c, *b, 2, row);
  PsInstr *both = sp_all_reduce (c, sp_concat (c, 2, parts, 0), SP_RED_SUM, ng, gs, groups);
  int64_t s0[2] = { 0, 0 }, l0[2] = { 1, nf }, s1[2] = { 1, 0 }, l1[2] = { 2, nf };
  *a = sp_reshape (c, sp_slice (c, both, s0, l0), 1, &nf);
  *b = sp_reshape (c, sp_slice (c, both, s1, l1), 1, &nf);
}

static PsInstr *
bcast (SpComp *c, PsInstr *v, const PsShape *like, int64_t f)
{
  return sp_broadcast (c, v, like, 1, &f);
}

static PsInstr *
scalar_like (SpComp *c, PsInstr *v, double x)
{
  return sp_broadcast_scalar (c, sp_const_scalar (c, v->shape->etype, x), v->shape);
}

/* rsqrt(var + eps) of a rank-1 value. */
static PsInstr *
inv_sigma (SpComp *c, PsInstr *var, float eps)
{
  PsInstr *v = sp_binary (c, PS_OP_ADD, var, scalar_like (c, var, eps));
  return sp_add1 (c, PS_OP_RSQRT, ps_shape_copy (v->shape), v);
}

static PsInstr *
expand_training (SpComp *c, const PsInstr *in, const SpPVal *xv, PsInstr *const *feat,
                 const gboolean *red, int64_t n, int ng, int gs, const int64_t *groups)
{
  int r = xv->full->rank;
  int64_t f = in->feature_index;
  PsElemType t = xv->hlo->shape->etype, w = ps_etype_size_bytes (t) < 4 ? PS_F32 : t;
  PsInstr *xm = sp_convert (c, sp_mask_padding (c, xv, red, sp_const_zero (c, t)), w);
  PsInstr *sum = sum_over (c, xm, red, r);
  PsInstr *sq = sum_over (c, sp_binary (c, PS_OP_MULTIPLY, xm, xm), red, r);
  all_reduce_pair (c, &sum, &sq, ng, gs, groups);
  PsInstr *mean = sp_binary (c, PS_OP_DIVIDE, sum, scalar_like (c, sum, (double) n));
  PsInstr *ex2 = sp_binary (c, PS_OP_DIVIDE, sq, scalar_like (c, sq, (double) n));
  PsInstr *var = sp_binary (c, PS_OP_SUBTRACT, ex2, sp_binary (c, PS_OP_MULTIPLY, mean, mean));
  PsInstr *scale = sp_convert (c, feat[0], w);
  PsInstr *mult = sp_binary (c, PS_OP_MULTIPLY, scale, inv_sigma (c, var, in->epsilon));
  PsInstr *x = sp_convert (c, xv->hlo, w);
  PsInstr *xc = sp_binary (c, PS_OP_SUBTRACT, x, bcast (c, mean, x->shape, f));
  PsInstr *scaled = sp_binary (c, PS_OP_MULTIPLY, xc, bcast (c, mult, x->shape, f));
  PsInstr *offset = sp_convert (c, feat[1], w);
  PsInstr *y = sp_binary (c, PS_OP_ADD, scaled, bcast (c, offset, x->shape, f));
  PsInstr *out[3];
  out[0] = sp_convert (c, y, t);
  out[1] = sp_convert (c, mean, t);
  out[2] = sp_convert (c, var, t);
  return sp_tuple (c, 3, out);
}

static PsInstr *
expand_grad (SpComp *c, const PsInstr *in, const SpPVal *xv, const SpPVal *dyv, PsInstr *const *feat,
             const gboolean *red, int64_t n, int ng, int gs, const int64_t *groups)
{
  int r = xv->full->rank;
  int64_t f = in->feature_index;
  PsElemType t = xv->hlo->shape->etype, w = ps_etype_size_bytes (t) < 4 ? PS_F32 : t;
  PsInstr *scale = sp_convert (c, feat[0], w);
  PsInstr *mean = sp_convert (c, feat[1], w);
  PsInstr *x = sp_convert (c, xv->hlo, w);
  PsInstr *dy = sp_convert (c, dyv->hlo, w);
  PsInstr *dym = sp_convert (c, sp_mask_padding (c, dyv, red, sp_const_zero (c, t)), w);
  PsInstr *xc = sp_binary (c, PS_OP_SUBTRACT, x, bcast (c, mean, x->shape, f));
  PsInstr *sum_dy = sum_over (c, dym, red, r);
  PsInstr *sum_dyx = sum_over (c, sp_binary (c, PS_OP_MULTIPLY, dym, xc), red, r);
  all_reduce_pair (c, &sum_dy, &sum_dyx, ng, gs, groups);
  PsInstr *is = inv_sigma (c, sp_convert (c, feat[2], w), in->epsilon);
  PsInstr *g_scale = sp_binary (c, PS_OP_MULTIPLY, sum_dyx, is);
  /* dx = scale*is * (dy - sum_dy/N - xc * (is * g_scale / N)) */
  PsInstr *mean_dy = sp_binary (c, PS_OP_DIVIDE, sum_dy, scalar_like (c, sum_dy, (double) n));
  PsInstr *is_g = sp_binary (c, PS_OP_MULTIPLY, is, g_scale);
  PsInstr *k = sp_binary (c, PS_OP_DIVIDE, is_g, scalar_like (c, is, (double) n));
  PsInstr *centred = sp_binary (c, PS_OP_SUBTRACT, dy, bcast (c, mean_dy, x->shape, f));
  PsInstr *proj = sp_binary (c, PS_OP_MULTIPLY, xc, bcast (c, k, x->shape, f));
  PsInstr *inner = sp_binary (c, PS_OP_SUBTRACT, centred, proj);
  PsInstr *gain = bcast (c, sp_binary (c, PS_OP_MULTIPLY, scale, is), x->shape, f);
  PsInstr *dx = sp_binary (c, PS_OP_MULTIPLY, gain, inner);
  PsInstr *out[3];
  out[0] = sp_convert (c, dx, t);
  out[1] = sp_convert (c, g_scale, t);
  out[2] = sp_convert (c, sum_dy, t);
  return sp_tuple (c, 3, out);
}

SpPVal *
sp_handle_batch_norm (SpComp *c, const PsInstr *in)
{
  const PsSharding *t0 = sp_sharding_of (in);
  gboolean tuple = ps_shape_is_tuple (in->shape);
  g_autoptr (PsSharding) s = tuple ? ps_sharding_leaf (t0, 0) : ps_sharding_copy (t0);
  if (!s || s->kind != PS_SHARDING_TILED || ps_sharding_has_manual_subgroup (s))
    return NULL; /* replicated: the fallback is the op itself */
  const PsShape *full = in->operands[0]->shape;
  int r = full->rank;
  int64_t f = in->feature_index;
  g_autoptr (PsSharding) sf = sp_sharding_remap (s, 1, &f);
  if (!sf)
    return NULL;
  int n = in->n_operands;
  PsInstr *ops[n];
  SpPVal *xv = NULL, *dyv = NULL;
  for (int k = 0; k < n; k++)
    {
      gboolean lead = k == 0 || (in->opcode == PS_OP_BATCH_NORM_GRAD && k == 4);
      if (lead)
        {
          SpPVal *v = sp_reshard_pval (c, sp_operand (c, in, k), s);
          ops[k] = v->hlo;
          if (k == 0)
            xv = v;
          else
            dyv = v;
        }
      else
        ops[k] = sp_reshard (c, sp_operand (c, in, k), sf);
    }
  gboolean red[r];
  int64_t count = 1;
  for (int d = 0; d < r; d++)
    {
      red[d] = d != f;
      if (red[d])
        count *= full->dims[d];
    }
  int ng = 0, gs = 0;
  g_autofree int64_t *groups = in->opcode == PS_OP_BATCH_NORM_INFERENCE
                                   ? NULL : sp_reduced_groups (s, red, r, &ng, &gs);
  PsInstr *y;
  if (sp_failed (c))
    y = NULL;
  else if (!groups)
    {
      /* The statistics of a tile are the whole batch's: run the op. */
      PsShape *ls = ps_shape_copy (xv->hlo->shape);
      if (tuple)
        {
          int64_t lf = ls->dims[f];
          PsShape *fs = sp_shape (ls->etype, 1, &lf);
          PsShape *es[3] = { ls, fs, fs };
          PsShape *ts = ps_shape_new_tuple (3, es);
          ps_shape_free (ls);
          ps_shape_free (fs);
          ls = ts;
        }
      y = sp_clone_with (c, in, ls, n, ops);
    }
  else if (in->opcode == PS_OP_BATCH_NORM_TRAINING)
    y = expand_training (c, in, xv, ops + 1, red, count, ng, gs, groups);
  else
    y = expand_grad (c, in, xv, dyv, ops + 1, red, count, ng, gs, groups);
  if (xv)
    sp_pval_free (xv);
  if (dyv)
    sp_pval_free (dyv);
  if (!y)
    return NULL;
  if (!tuple)
    return sp_pval_new (y, s, in->shape);
  PsSharding *each[3] = { ps_sharding_copy (s), ps_sharding_copy (sf), ps_sharding_copy (sf) };
  g_autoptr (PsSharding) ts = ps_sharding_tuple (3, each);
  return sp_pval_new (y, ts, in->shape);
}

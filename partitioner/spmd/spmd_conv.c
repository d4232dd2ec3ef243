/* Convolution and reduce-window partitioning (GSPMD section 4.4, appendix
 * A.2): batch and output-feature dims split like a dot's free dims, spatial
 * dims through halo exchange.
 *
 * Halo exchange along one spatial dim, for any stride, padding (also
 * negative), base and window dilation and uneven shards: device i computes
 * output tile i, whose windows read the padded, base-dilated input at
 * positions [P0(i), P1(i)]. The inputs those positions need come from its
 * own tile and up to SL tiles on the left and SR on the right; they arrive by
 * collective-permute (one per neighbour distance), are concatenated, masked
 * outside the real data with the pad value, base-dilated explicitly (pad
 * with interior padding), and a dynamic-slice at a per-device offset takes
 * exactly [P0(i), P1(i)]. The local op then runs with that dim's padding 0
 * and base dilation 1, so halos whose size differs per device (non-constant
 * halos) need no special case: only the offset table differs. */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/spmd/spmd_private.h"

/* Rewrites dim `d` of the local value so that the windowed op can run on it
 * with window `w` turned into padding 0 / base dilation 1 (done by the
 * caller). v's sharding splits dim d into k tiles matching the output's. */
PsInstr *
sp_halo_exchange (SpComp *c, const SpPVal *v, int d, const PsWindowDim *w, int64_t out_size,
                  int64_t k, PsInstr *fill)
{
  int64_t n = c->m->n;
  int64_t N = v->full->dims[d];
  int64_t IS = ps_ceil_div (N, k), OS = ps_ceil_div (out_size, k);
  int64_t b = w->base_dilation > 0 ? w->base_dilation : 1;
  int64_t wd = w->window_dilation > 0 ? w->window_dilation : 1;
  int64_t span = (w->size - 1) * wd;
  int64_t SZ = (OS - 1) * w->stride + span + 1;
  /* Neighbour distances needed on each side. */
  int64_t HL = 0, HR = 0;
  for (int64_t i = 0; i < k; i++)
    {
      if (i * OS >= out_size)
        continue;
      int64_t P0 = i * OS * w->stride;
      int64_t P1 = ((i + 1) * OS - 1) * w->stride + span;
      int64_t xl = MAX (ps_ceil_div (P0 - w->pad_lo, b), 0);
      int64_t xh = MIN (ps_floor_div (P1 - w->pad_lo, b), N - 1);
      if (xl > xh)
        continue;
      HL = MAX (HL, i * IS - xl);
      HR = MAX (HR, xh - ((i + 1) * IS - 1));
    }
  int64_t SL = MIN ((HL + IS - 1) / IS, k - 1), SR = MIN ((HR + IS - 1) / IS, k - 1);
  gboolean mask[v->sharding->n_tile_dims];
  memset (mask, 0, sizeof mask);
  mask[d] = TRUE;
  int ng, gs;
  g_autofree int64_t *groups = sp_groups (v->sharding, mask, &ng, &gs);
  int npieces = (int) (SL + 1 + SR);
  PsInstr *pieces[npieces];
  int64_t *pairs = g_new (int64_t, (gsize) ng * gs * 2);
  for (int64_t s = -SL; s <= SR; s++)
    {
      PsInstr *piece = v->hlo;
      if (s != 0)
        {
          /* Device at tile j receives tile j + s. */
          int np = 0;
          for (int g = 0; g < ng; g++)
            for (int j = 0; j < gs; j++)
              {
                int64_t src = j + s;
                if (src < 0 || src >= gs)
                  continue;
                pairs[2 * np] = groups[g * gs + src];
                pairs[2 * np + 1] = groups[g * gs + j];
                np++;
              }
          piece = sp_collective_permute (c, v->hlo, np, pairs);
        }
      pieces[s + SL] = piece;
    }
  g_free (pairs);
  PsInstr *buf = sp_concat (c, npieces, pieces, d);
  /* Mask everything outside [0, N) with the pad value: tile padding, and
   * the zeros that devices at the edges received from nobody. */
  int64_t *start = g_new0 (int64_t, n);
  int64_t *offs = g_new0 (int64_t, n);
  int64_t *tile_of = g_new0 (int64_t, n);
  for (int g = 0; g < ng; g++)
    for (int j = 0; j < gs; j++)
      {
        int64_t dev = groups[g * gs + j];
        tile_of[dev] = j;
        start[dev] = (j - SL) * IS;
      }
  {
    const PsShape *bs = buf->shape;
    PsInstr *io = sp_iota (c, PS_S32, bs->rank, bs->dims, d);
    PsInstr *gidx = sp_binary (c, PS_OP_ADD, io, sp_broadcast_scalar (c, sp_table_lookup (c, start), io->shape));
    PsInstr *zero = sp_broadcast_scalar (c, sp_const_scalar (c, PS_S32, 0), io->shape);
    PsInstr *lim = sp_broadcast_scalar (c, sp_const_scalar (c, PS_S32, (double) N), io->shape);
    PsInstr *ok = sp_binary (c, PS_OP_AND, sp_compare (c, gidx, zero, PS_CMP_GE),
                             sp_compare (c, gidx, lim, PS_CMP_LT));
    buf = sp_select (c, ok, buf, sp_broadcast_scalar (c, fill, buf->shape));
  }
  int r = buf->shape->rank;
  int64_t lo[r], hi[r];
  memset (lo, 0, sizeof lo);
  memset (hi, 0, sizeof hi);
  if (b > 1)
    {
      /* Explicit base dilation: interior padding with the pad value. */
      int64_t dims[r];
      memcpy (dims, buf->shape->dims, sizeof dims);
      dims[d] = (dims[d] - 1) * b + 1;
      PsInstr *p = sp_add2 (c, PS_OP_PAD, sp_shape (buf->shape->etype, r, dims), buf, fill);
      p->n_pad = r;
      p->padding = g_new0 (PsPadDim, r);
      p->padding[d].interior = b - 1;
      buf = p;
    }
  int64_t len = buf->shape->dims[d];
  int64_t min_off = 0, max_end = len;
  for (int64_t dev = 0; dev < n; dev++)
    {
      int64_t i = tile_of[dev];
      if (i * OS >= out_size)
        {
          offs[dev] = 0;
          continue;
        }
      int64_t P0 = i * OS * w->stride;
      offs[dev] = P0 - (start[dev] * b + w->pad_lo);
      min_off = MIN (min_off, offs[dev]);
      max_end = MAX (max_end, offs[dev] + SZ);
    }
  max_end = MAX (max_end, SZ);
  lo[d] = -min_off;
  hi[d] = max_end - len;
  buf = sp_pad (c, buf, fill, lo, hi);
  for (int64_t dev = 0; dev < n; dev++)
    offs[dev] += lo[d];
  PsInstr *starts[r];
  int64_t sizes[r];
  for (int q = 0; q < r; q++)
    {
      starts[q] = q == d ? sp_table_lookup (c, offs) : sp_const_scalar (c, PS_S32, 0);
      sizes[q] = q == d ? SZ : buf->shape->dims[q];
    }
  PsInstr *res = sp_dynamic_slice (c, buf, starts, sizes);
  g_free (start);
  g_free (offs);
  g_free (tile_of);
  return res;
}

static void
normalise_window_dim (PsWindowDim *w)
{
  w->pad_lo = 0;
  w->pad_hi = 0;
  w->base_dilation = 1;
}

/* A convolution whose kernel (rhs) spatial dim and the matching input
 * spatial dim are split alike, for a result that is not tiled (the weight
 * gradient of a spatially partitioned convolution, say): the window dim is
 * contracted like a dot's contracting dim. Device i holds kernel positions
 * [i WS, (i+1) WS); the input positions those meet for all outputs form a
 * window of O outputs... seen from the kernel side: "output" w reads input
 * w * window_dilation + o * stride, o < O, so the halo exchange with that
 * transposed window brings each device exactly the input it needs. The
 * local convolution runs with padding 0 and base dilation 1 over its
 * kernel piece (padding masked to zero), and an all-reduce over the
 * devices splitting the window adds the partial sums. Replaces gathering
 * both operands by neighbour exchanges and one result-sized all-reduce. */
static SpPVal *
conv_split_window (SpComp *c, const PsInstr *in)
{
  const PsConvDims *cd = &in->conv;
  int64_t fgc = in->feature_group_count > 0 ? in->feature_group_count : 1;
  int64_t bgc = in->batch_group_count > 0 ? in->batch_group_count : 1;
  if (fgc != 1 || bgc != 1 || !cd->present || in->window.n != cd->n_spatial)
    return NULL;
  SpPVal *lhs = sp_operand (c, in, 0), *rhs = sp_operand (c, in, 1);
  int rl = lhs->full->rank, rr = rhs->full->rank;
  /* The split to follow: the first kernel spatial dim split in the rhs,
   * else the first input spatial dim split in the lhs. */
  int sd = -1;
  const PsSharding *base = NULL;
  for (int q = 0; q < cd->n_spatial && sd < 0; q++)
    if (!in->window.dims[q].reversal && rhs->sharding->kind == PS_SHARDING_TILED
        && !ps_sharding_has_manual_subgroup (rhs->sharding)
        && sp_shards (rhs->sharding, (int) cd->k_spatial[q]) > 1)
      {
        sd = q;
        base = rhs->sharding;
      }
  for (int q = 0; q < cd->n_spatial && sd < 0; q++)
    if (!in->window.dims[q].reversal && lhs->sharding->kind == PS_SHARDING_TILED
        && !ps_sharding_has_manual_subgroup (lhs->sharding)
        && sp_shards (lhs->sharding, (int) cd->in_spatial[q]) > 1)
      {
        sd = q;
        base = lhs->sharding;
      }
  if (sd < 0)
    return NULL;
  int64_t bdim = base == rhs->sharding ? cd->k_spatial[sd] : cd->in_spatial[sd];
  int64_t lsrc[rl], rsrc[rr];
  for (int q = 0; q < rl; q++)
    lsrc[q] = q == cd->in_spatial[sd] ? bdim : -1;
  for (int q = 0; q < rr; q++)
    rsrc[q] = q == cd->k_spatial[sd] ? bdim : -1;
  g_autoptr (PsSharding) ls = sp_sharding_remap (base, rl, lsrc);
  g_autoptr (PsSharding) rs = sp_sharding_remap (base, rr, rsrc);
  if (!ls || !rs)
    return NULL;
  int64_t k = sp_shards (rs, (int) cd->k_spatial[sd]);
  const PsWindowDim *ow = &in->window.dims[sd];
  int64_t O = in->shape->dims[cd->out_spatial[sd]];
  int64_t W = rhs->full->dims[cd->k_spatial[sd]];
  if (k <= 1 || O < 1 || ow->size != W)
    return NULL;
  PsInstr *l = sp_reshard (c, lhs, ls);
  SpPVal *rv = sp_reshard_pval (c, rhs, rs);
  if (!rv)
    return NULL;
  gboolean rmask[rr];
  memset (rmask, 0, sizeof rmask);
  rmask[cd->k_spatial[sd]] = TRUE;
  PsInstr *r = sp_mask_padding (c, rv, rmask, sp_const_zero (c, rhs->full->etype));
  sp_pval_free (rv);
  PsWindowDim tw = { 0 };
  tw.size = O;
  tw.stride = ow->window_dilation > 0 ? ow->window_dilation : 1;
  tw.window_dilation = ow->stride > 0 ? ow->stride : 1;
  tw.pad_lo = ow->pad_lo;
  tw.pad_hi = ow->pad_hi;
  tw.base_dilation = ow->base_dilation > 0 ? ow->base_dilation : 1;
  SpPVal lv = { l, ls, lhs->full };
  l = sp_halo_exchange (c, &lv, (int) cd->in_spatial[sd], &tw, W, k,
                        sp_const_zero (c, lhs->full->etype));
  PsWindowDim win[cd->n_spatial];
  memcpy (win, in->window.dims, sizeof (PsWindowDim) * (gsize) cd->n_spatial);
  win[sd].size = r->shape->dims[cd->k_spatial[sd]];
  normalise_window_dim (&win[sd]);
  PsInstr *ops[2] = { l, r };
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (in->shape), 2, ops);
  memcpy (y->window.dims, win, sizeof (PsWindowDim) * (gsize) cd->n_spatial);
  gboolean mask[rs->n_tile_dims];
  memset (mask, 0, sizeof mask);
  mask[cd->k_spatial[sd]] = TRUE;
  int ng, gs;
  g_autofree int64_t *groups = sp_groups (rs, mask, &ng, &gs);
  y = sp_all_reduce (c, y, SP_RED_SUM, ng, gs, groups);
  return sp_pval_new (y, sp_replicated (), in->shape);
}

/* The convolution partitioned so that its result has sharding t, or NULL
 * (nothing emitted) when t splits dims this cannot follow. */
static SpPVal *
conv_with (SpComp *c, const PsInstr *in, const PsSharding *t)
{
  if (t->kind != PS_SHARDING_TILED || ps_sharding_has_manual_subgroup (t))
    return NULL;
  const PsConvDims *cd = &in->conv;
  if (!cd->present || in->window.n != cd->n_spatial)
    return NULL;
  int64_t fgc = in->feature_group_count > 0 ? in->feature_group_count : 1;
  int64_t bgc = in->batch_group_count > 0 ? in->batch_group_count : 1;
  /* Grouped convolutions: a shard of the output features must hold whole
   * groups, so the lhs features (feature groups) or the lhs batch (batch
   * groups) split alongside and each device runs G / k groups. */
  int64_t kf = sp_shards (t, (int) cd->out_feature);
  if ((fgc > 1 && fgc % kf != 0) || (bgc > 1 && bgc % kf != 0))
    return NULL;
  if (bgc > 1 && sp_shards (t, (int) cd->out_batch) > 1)
    return NULL;
  SpPVal *lhs = sp_operand (c, in, 0), *rhs = sp_operand (c, in, 1);
  int rl = lhs->full->rank, rr = rhs->full->rank;
  int64_t lsrc[rl], rsrc[rr];
  for (int q = 0; q < rl; q++)
    lsrc[q] = -1;
  for (int q = 0; q < rr; q++)
    rsrc[q] = -1;
  lsrc[cd->in_batch] = bgc > 1 ? cd->out_feature : cd->out_batch;
  if (fgc > 1)
    lsrc[cd->in_feature] = cd->out_feature;
  for (int s = 0; s < cd->n_spatial; s++)
    lsrc[cd->in_spatial[s]] = cd->out_spatial[s];
  rsrc[cd->k_out_feature] = cd->out_feature;
  g_autoptr (PsSharding) ls = sp_sharding_remap (t, rl, lsrc);
  g_autoptr (PsSharding) rs = sp_sharding_remap (t, rr, rsrc);
  if (!ls || !rs)
    return NULL;
  PsInstr *l = sp_reshard (c, lhs, ls);
  PsInstr *r = sp_reshard (c, rhs, rs);
  PsWindowDim win[cd->n_spatial > 0 ? cd->n_spatial : 1];
  if (cd->n_spatial > 0)
    memcpy (win, in->window.dims, sizeof (PsWindowDim) * (gsize) cd->n_spatial);
  for (int s = 0; s < cd->n_spatial; s++)
    {
      int64_t k = sp_shards (t, (int) cd->out_spatial[s]);
      if (k <= 1)
        continue;
      SpPVal lv = { l, ls, lhs->full };
      l = sp_halo_exchange (c, &lv, (int) cd->in_spatial[s], &win[s],
                         in->shape->dims[cd->out_spatial[s]], k,
                         sp_const_zero (c, lhs->full->etype));
      normalise_window_dim (&win[s]);
    }
  g_autoptr (PsShape) local = ps_sharding_tile_shape (t, in->shape);
  PsInstr *ops[2] = { l, r };
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (local), 2, ops);
  if (cd->n_spatial > 0)
    memcpy (y->window.dims, win, sizeof (PsWindowDim) * (gsize) cd->n_spatial);
  if (fgc > 1)
    y->feature_group_count = fgc / kf;
  if (bgc > 1)
    y->batch_group_count = bgc / kf;
  return sp_pval_new (y, t, in->shape);
}

/* The result sharding the operand `v`'s split dims give the convolution
 * (batch / grouped batch and spatial dims from the lhs, output features
 * from the rhs), or NULL when nothing would be split. */
static PsSharding *
conv_result_from_operand (const PsInstr *in, const SpPVal *v, gboolean is_lhs)
{
  const PsConvDims *cd = &in->conv;
  if (v->sharding->kind != PS_SHARDING_TILED || ps_sharding_has_manual_subgroup (v->sharding)
      || !ps_shape_is_array (in->shape))
    return NULL;
  int ro = in->shape->rank;
  int64_t bgc = in->batch_group_count > 0 ? in->batch_group_count : 1;
  int64_t src[ro > 0 ? ro : 1];
  for (int q = 0; q < ro; q++)
    src[q] = -1;
  if (is_lhs)
    {
      src[bgc > 1 ? cd->out_feature : cd->out_batch] = cd->in_batch;
      for (int q = 0; q < cd->n_spatial; q++)
        src[cd->out_spatial[q]] = cd->in_spatial[q];
    }
  else
    src[cd->out_feature] = cd->k_out_feature;
  PsSharding *w = sp_sharding_remap (v->sharding, ro, src);
  if (w && w->kind != PS_SHARDING_TILED)
    g_clear_pointer (&w, ps_sharding_free);
  return w;
}

/* The output's sharding when the convolution can follow it; for a result
 * that is not tiled, the split window (conv_split_window); otherwise the
 * sharding the lhs's or the rhs's split dims give the result, which the
 * driver then reshards (an all-to-all, say) instead of the fallback
 * replicating both operands. */
SpPVal *
sp_handle_convolution (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  if (t->kind == PS_SHARDING_REPLICATED && ps_shape_is_array (in->shape)
      && in->shape->etype != PS_PRED)
    {
      SpPVal *r = conv_split_window (c, in);
      if (r || sp_failed (c))
        return r;
    }
  else if (t->kind != PS_SHARDING_TILED || ps_sharding_has_manual_subgroup (t))
    return NULL;
  SpPVal *r = conv_with (c, in, t);
  if (r || sp_failed (c) || !in->conv.present)
    return r;
  for (int side = 0; side < 2 && !r; side++)
    {
      g_autoptr (PsSharding) w = conv_result_from_operand (in, sp_operand (c, in, side), side == 0);
      if (w)
        r = conv_with (c, in, w);
    }
  return r;
}

SpPVal *
sp_handle_reduce_window (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  if (in->n_operands != 2 || !ps_shape_is_array (in->shape))
    return NULL;
  SpPVal *op = sp_operand (c, in, 0);
  /* A result that is not tiled: the windows run in the operand's layout
   * and the driver gathers the result. */
  if (t->kind == PS_SHARDING_REPLICATED && op->sharding->kind == PS_SHARDING_TILED)
    t = op->sharding;
  if (t->kind != PS_SHARDING_TILED || ps_sharding_has_manual_subgroup (t))
    return NULL;
  int r = op->full->rank;
  if (in->window.n != r)
    return NULL;
  int64_t src[r];
  for (int q = 0; q < r; q++)
    src[q] = q;
  g_autoptr (PsSharding) s = sp_sharding_remap (t, r, src);
  if (!s)
    return NULL;
  PsInstr *init = sp_reshard (c, sp_operand (c, in, 1), sp_replicated ());
  PsInstr *x = sp_reshard (c, op, s);
  if (r == 0)
    return NULL;
  PsWindowDim win[r];
  memcpy (win, in->window.dims, sizeof (PsWindowDim) * (gsize) r);
  for (int q = 0; q < r; q++)
    {
      int64_t k = sp_shards (t, q);
      if (k <= 1)
        continue;
      SpPVal xv = { x, s, op->full };
      x = sp_halo_exchange (c, &xv, q, &win[q], in->shape->dims[q], k, init);
      normalise_window_dim (&win[q]);
    }
  g_autoptr (PsShape) local = ps_sharding_tile_shape (t, in->shape);
  PsInstr *ops[2] = { x, init };
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (local), 2, ops);
  memcpy (y->window.dims, win, sizeof (PsWindowDim) * (gsize) r);
  return sp_pval_new (y, t, in->shape);
}

/* Convolution and reduce-window partitioning (GSPMD section 4.4, appendix
 * A.2): batch and output-feature dims split like a dot's free dims, spatial
 * dims through halo exchange.
 *
 * Halo exchange along one spatial dim, for any stride, padding (also
 * negative), base and window dilation and uneven shards: device i computes
 * output tile i, whose windows read the padded, base-dilated input at
 * positions [P0(i), P1(i)]. The inputs those positions need come from its
 * own tile and up to SL tiles on the left and SR on the right; they arrive by
 * collective-permute (one per neighbour distance; the farthest neighbour on
 * each side sends only the slab the receiver needs), are concatenated, masked
 * outside the real data with the pad value, base-dilated explicitly (pad
 * with interior padding), and a dynamic-slice at a per-device offset takes
 * exactly [P0(i), P1(i)]. The local op then runs with that dim's padding 0
 * and base dilation 1, so halos whose size differs per device (non-constant
 * halos) need no special case: only the offset table differs. */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/spmd/spmd_private.h"

/* A scalar constant whose bytes are all zero (0, +0.0, false). */
static gboolean
is_zero_constant (const PsInstr *x)
{
  if (x->opcode != PS_OP_CONSTANT || !x->literal || x->literal->n != 1)
    return FALSE;
  const guint8 *b = x->literal->data;
  for (int i = 0; i < ps_etype_size_bytes (x->literal->etype); i++)
    if (b[i] != 0)
      return FALSE;
  return TRUE;
}

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
  /* Elements needed from the left and the right neighbours together; only
   * those travel: the nearest neighbours send whole tiles, the farthest
   * one on each side only the slab next to the receiver. */
  int64_t Lreq = MIN (HL, SL * IS), Rreq = MIN (HR, SR * IS);
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
          int64_t a = s < 0 ? -s : s;
          int64_t len = MIN (IS, (s < 0 ? Lreq : Rreq) - (a - 1) * IS);
          if (len < IS)
            {
              int r0 = v->hlo->shape->rank;
              int64_t st[r0], li[r0];
              for (int q = 0; q < r0; q++)
                {
                  st[q] = 0;
                  li[q] = v->hlo->shape->dims[q];
                }
              st[d] = s < 0 ? IS - len : 0;
              li[d] = s < 0 ? IS : len;
              piece = sp_slice (c, v->hlo, st, li);
            }
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
          piece = sp_collective_permute (c, piece, np, pairs);
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
        start[dev] = j * IS - Lreq;
      }
  /* With even tiles and a zero pad value the mask changes nothing: no tile
   * has padding, and devices at the edges received zeros from nobody. */
  if (N % k != 0 || !is_zero_constant (fill))
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
  /* Every device that computes output at the same offset (the usual
   * stride-1 case): a static slice, nothing when it is the whole buffer. */
  gboolean same = TRUE;
  int64_t off0 = -1;
  for (int64_t dev = 0; dev < n && same; dev++)
    if (tile_of[dev] * OS < out_size)
      {
        if (off0 < 0)
          off0 = offs[dev];
        same = offs[dev] == off0;
      }
  PsInstr *res;
  if (same && off0 >= 0)
    {
      int64_t st[r], li[r];
      for (int q = 0; q < r; q++)
        {
          st[q] = q == d ? off0 : 0;
          li[q] = q == d ? off0 + SZ : buf->shape->dims[q];
        }
      res = sp_slice (c, buf, st, li);
    }
  else
    {
      PsInstr *starts[r];
      int64_t sizes[r];
      for (int q = 0; q < r; q++)
        {
          starts[q] = q == d ? sp_table_lookup (c, offs) : sp_const_scalar (c, PS_S32, 0);
          sizes[q] = q == d ? SZ : buf->shape->dims[q];
        }
      res = sp_dynamic_slice (c, buf, starts, sizes);
    }
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

/* A convolution whose contracted dims are split, for a result that is not
 * tiled (the weight gradient of a spatially or data-parallel partitioned
 * convolution, say): every window dim whose kernel (rhs) spatial dim is
 * split, and the contracted feature dim (lhs input features, rhs input
 * features) when split, are contracted like a dot's contracting dims, all
 * at once (a batch-grouped convolution too: its groups stay whole). The operand whose split is followed (the rhs, else the lhs)
 * keeps those splits only; the other takes the same tiles on the matching
 * dims. Along a split window dim device i holds kernel positions [i WS,
 * (i+1) WS); "output" w reads input w * window_dilation + o * stride, o <
 * O, so the halo exchange with that transposed window brings each device
 * exactly the input it needs. The local convolution runs with padding 0
 * and base dilation 1 over its kernel piece (padding of the split dims
 * masked to zero), and one all-reduce over the devices splitting any of
 * those dims adds the partial sums. Replaces gathering both operands by
 * neighbour exchanges and one result-sized all-reduce. */
static SpPVal *
conv_split_window (SpComp *c, const PsInstr *in)
{
  const PsConvDims *cd = &in->conv;
  int64_t fgc = in->feature_group_count > 0 ? in->feature_group_count : 1;
  if (!cd->present || in->window.n != cd->n_spatial)
    return NULL;
  SpPVal *lhs = sp_operand (c, in, 0), *rhs = sp_operand (c, in, 1);
  int rl = lhs->full->rank, rr = rhs->full->rank, n = cd->n_spatial;
  /* The operand to follow: the rhs when it splits a contracted dim, else
   * the lhs. A window dim qualifies when the kernel covers it whole
   * (window size = kernel size) and is not reversed. */
  gboolean split_q[n > 0 ? n : 1];
  gboolean split_f = FALSE;
  const PsSharding *base = NULL;
  for (int side = 0; side < 2 && !base; side++)
    {
      const SpPVal *v = side == 0 ? rhs : lhs;
      if (v->sharding->kind != PS_SHARDING_TILED || ps_sharding_has_manual_subgroup (v->sharding))
        continue;
      gboolean any = FALSE;
      for (int q = 0; q < n; q++)
        {
          int64_t dim = side == 0 ? cd->k_spatial[q] : cd->in_spatial[q];
          split_q[q] = !in->window.dims[q].reversal && sp_shards (v->sharding, (int) dim) > 1
                       && in->window.dims[q].size == rhs->full->dims[cd->k_spatial[q]]
                       && in->shape->dims[cd->out_spatial[q]] >= 1;
          any |= split_q[q];
        }
      /* Feature groups cut the contracted features into groups: a split
       * of them would cut groups. Batch groups cut the lhs batch and the
       * output features, which stay whole here. */
      split_f = fgc == 1
                && sp_shards (v->sharding, (int) (side == 0 ? cd->k_in_feature : cd->in_feature)) > 1;
      if (any || split_f)
        base = v->sharding;
    }
  if (!base)
    return NULL;
  gboolean from_rhs = base == rhs->sharding;
  int64_t lsrc[rl], rsrc[rr];
  for (int q = 0; q < rl; q++)
    lsrc[q] = -1;
  for (int q = 0; q < rr; q++)
    rsrc[q] = -1;
  for (int q = 0; q < n; q++)
    if (split_q[q])
      {
        int64_t b = from_rhs ? cd->k_spatial[q] : cd->in_spatial[q];
        lsrc[cd->in_spatial[q]] = rsrc[cd->k_spatial[q]] = b;
      }
  if (split_f)
    lsrc[cd->in_feature] = rsrc[cd->k_in_feature] = from_rhs ? cd->k_in_feature : cd->in_feature;
  /* The kernel's output features may stay split (the result then is too):
   * a depthwise weight gradient under model-dim sharding. With batch
   * groups the lhs batch carries the groups and splits alike. */
  int64_t bgc = in->batch_group_count > 0 ? in->batch_group_count : 1;
  int64_t kf = from_rhs ? sp_shards (base, (int) cd->k_out_feature) : 1;
  gboolean keep_out = kf > 1 && fgc == 1 && bgc % kf == 0;
  if (keep_out)
    {
      rsrc[cd->k_out_feature] = cd->k_out_feature;
      if (bgc > 1)
        lsrc[cd->in_batch] = cd->k_out_feature;
    }
  g_autoptr (PsSharding) ls = sp_sharding_remap (base, rl, lsrc);
  g_autoptr (PsSharding) rs = sp_sharding_remap (base, rr, rsrc);
  if (!ls || !rs)
    return NULL;
  SpPVal *lv0 = sp_reshard_pval (c, lhs, ls);
  SpPVal *rv = sp_reshard_pval (c, rhs, rs);
  if (!lv0 || !rv)
    {
      if (lv0)
        sp_pval_free (lv0);
      if (rv)
        sp_pval_free (rv);
      return NULL;
    }
  gboolean rmask[rr], lmask[rl];
  memset (rmask, 0, sizeof rmask);
  memset (lmask, 0, sizeof lmask);
  for (int q = 0; q < n; q++)
    rmask[cd->k_spatial[q]] = split_q[q];
  rmask[cd->k_in_feature] = lmask[cd->in_feature] = split_f;
  PsInstr *r = sp_mask_padding (c, rv, rmask, sp_const_zero (c, rhs->full->etype));
  PsInstr *l = split_f ? sp_mask_padding (c, lv0, lmask, sp_const_zero (c, lhs->full->etype)) : lv0->hlo;
  sp_pval_free (rv);
  sp_pval_free (lv0);
  PsWindowDim win[n > 0 ? n : 1];
  if (n > 0)
    memcpy (win, in->window.dims, sizeof (PsWindowDim) * (gsize) n);
  for (int q = 0; q < n; q++)
    {
      if (!split_q[q])
        continue;
      const PsWindowDim *ow = &in->window.dims[q];
      int64_t O = in->shape->dims[cd->out_spatial[q]];
      int64_t W = rhs->full->dims[cd->k_spatial[q]];
      int64_t k = sp_shards (rs, (int) cd->k_spatial[q]);
      PsWindowDim tw = { 0 };
      tw.size = O;
      tw.stride = ow->window_dilation > 0 ? ow->window_dilation : 1;
      tw.window_dilation = ow->stride > 0 ? ow->stride : 1;
      tw.pad_lo = ow->pad_lo;
      tw.pad_hi = ow->pad_hi;
      tw.base_dilation = ow->base_dilation > 0 ? ow->base_dilation : 1;
      SpPVal lv = { l, ls, lhs->full };
      l = sp_halo_exchange (c, &lv, (int) cd->in_spatial[q], &tw, W, k,
                            sp_const_zero (c, lhs->full->etype));
      win[q].size = r->shape->dims[cd->k_spatial[q]];
      normalise_window_dim (&win[q]);
    }
  PsInstr *ops[2] = { l, r };
  int ro = in->shape->rank;
  int64_t osrc[ro];
  for (int q = 0; q < ro; q++)
    osrc[q] = -1;
  if (keep_out)
    osrc[cd->out_feature] = cd->k_out_feature;
  g_autoptr (PsSharding) os = sp_sharding_remap (rs, ro, osrc);
  if (!os)
    return NULL;
  g_autoptr (PsShape) local = ps_sharding_tile_shape (os, in->shape);
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (local), 2, ops);
  if (n > 0)
    memcpy (y->window.dims, win, sizeof (PsWindowDim) * (gsize) n);
  if (keep_out && bgc > 1)
    y->batch_group_count = bgc / kf;
  gboolean mask[rs->n_tile_dims];
  memset (mask, 0, sizeof mask);
  for (int q = 0; q < n; q++)
    mask[cd->k_spatial[q]] = split_q[q];
  mask[cd->k_in_feature] = split_f;
  int ng, gs;
  g_autofree int64_t *groups = sp_groups (rs, mask, &ng, &gs);
  y = sp_all_reduce (c, y, SP_RED_SUM, ng, gs, groups);
  return sp_pval_new (y, os, in->shape);
}

/* A result tiled on its output features alone: a weight gradient whose
 * kernel features are split (model-dim sharding) may still contract its
 * split batch and window dims (conv_split_window). */
static gboolean
conv_result_follows_kernel_features (const PsInstr *in, const PsSharding *t)
{
  if (t->kind != PS_SHARDING_TILED || ps_sharding_has_manual_subgroup (t) || !in->conv.present)
    return FALSE;
  for (int q = 0; q < in->shape->rank; q++)
    if (q != in->conv.out_feature && sp_shards (t, q) > 1)
      return FALSE;
  return TRUE;
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
  if ((t->kind == PS_SHARDING_REPLICATED || conv_result_follows_kernel_features (in, t))
      && ps_shape_is_array (in->shape) && in->shape->etype != PS_PRED)
    {
      SpPVal *r = conv_split_window (c, in);
      if (r || sp_failed (c))
        return r;
    }
  if (t->kind != PS_SHARDING_REPLICATED
      && (t->kind != PS_SHARDING_TILED || ps_sharding_has_manual_subgroup (t)))
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

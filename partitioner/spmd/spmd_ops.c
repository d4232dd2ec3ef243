/* Handlers of the data-movement and reduction ops: broadcast, transpose,
 * reshape, reduce, iota, slice, pad, concatenate, dynamic-slice,
 * dynamic-update-slice, reverse, sort, gather, scatter and bitcast-convert.
 * Each picks operand shardings under which the op runs on the tiles (with
 * halo exchanges, masks or a final all-reduce where the op needs data from
 * other tiles), possibly in a layout other than the result's (the driver
 * then reshards the result), or returns NULL (fallback) when no strategy
 * here applies. */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/spmd/spmd_private.h"

static gboolean
plain_tiled (const PsSharding *s)
{
  return s->kind == PS_SHARDING_TILED && !ps_sharding_has_manual_subgroup (s);
}

static SpPVal *
finish (const PsInstr *in, PsInstr *x, const PsSharding *s)
{
  return sp_pval_new (x, s, in->shape);
}

static PsShape *
local_shape (const PsSharding *s, const PsShape *full)
{
  return ps_sharding_tile_shape (s, full);
}

SpPVal *
sp_handle_broadcast (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  if (!plain_tiled (t))
    return NULL;
  SpPVal *op = sp_operand (c, in, 0);
  int r = op->full->rank;
  int64_t src[r > 0 ? r : 1];
  for (int i = 0; i < r; i++)
    src[i] = in->dimensions.v[i];
  g_autoptr (PsSharding) os_own = NULL;
  const PsSharding *os = sp_sharding_remap_view (t, r, src, &os_own);
  if (!os)
    return NULL;
  PsInstr *x = sp_reshard (c, op, os);
  g_autoptr (PsShape) ls = local_shape (t, in->shape);
  PsInstr *b = sp_broadcast (c, x, ls, in->dimensions.n, in->dimensions.v);
  return finish (in, b, t);
}

SpPVal *
sp_handle_transpose (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  if (!plain_tiled (t))
    return NULL;
  SpPVal *op = sp_operand (c, in, 0);
  int r = op->full->rank;
  int64_t src[r > 0 ? r : 1];
  for (int i = 0; i < r; i++)
    src[in->dimensions.v[i]] = i;
  g_autoptr (PsSharding) os_own = NULL;
  const PsSharding *os = sp_sharding_remap_view (t, r, src, &os_own);
  if (!os)
    return NULL;
  PsInstr *x = sp_reshard (c, op, os);
  PsInstr *y = sp_transpose (c, x, in->dimensions.v);
  return finish (in, y, t);
}

/* Reshape groups: runs of input dims [i0, i1) and output dims [j0, j1) with
 * equal products; im / jm are the first dims of size > 1 in each (its
 * "major" dim, -1 when the group has none). Returns the number of groups,
 * or -1 when the dims do not group (cannot happen for a valid reshape). */
typedef struct { int i0, i1, j0, j1, im, jm; } SpReshapeGroup;

static int
reshape_groups (const PsShape *is, const PsShape *os, SpReshapeGroup *gr)
{
  int ri = is->rank, ro = os->rank, n = 0, i = 0, j = 0;
  while (i < ri || j < ro)
    {
      int i0 = i, j0 = j;
      int64_t pi = 1, pj = 1;
      if (i < ri)
        pi = is->dims[i++];
      if (j < ro)
        pj = os->dims[j++];
      while (pi != pj)
        {
          if (pi < pj && i < ri)
            pi *= is->dims[i++];
          else if (pj < pi && j < ro)
            pj *= os->dims[j++];
          else
            break;
        }
      if (pi != pj)
        return -1;
      /* Trailing size-1 dims join the group they follow. */
      SpReshapeGroup *g = &gr[n++];
      g->i0 = i0;
      g->i1 = i;
      g->j0 = j0;
      g->j1 = j;
      g->im = g->jm = -1;
      for (int k = i0; k < i && g->im < 0; k++)
        if (is->dims[k] > 1)
          g->im = k;
      for (int k = j0; k < j && g->jm < 0; k++)
        if (os->dims[k] > 1)
          g->jm = k;
    }
  return n;
}

/* Whether splitting the majors of group g in `sh` tiles gives each device
 * the same elements on both sides: equal majors (a one-to-one dim, then
 * even uneven tiles keep their padding where both layouts expect it, when
 * the group has no other dim larger than 1), or majors both divisible by
 * sh (each tile is a contiguous range of the group's flat index). */
static gboolean
reshape_major_carries (const PsShape *is, const PsShape *os, const SpReshapeGroup *g, int64_t sh)
{
  if (g->im < 0 || g->jm < 0)
    return FALSE;
  int64_t a = is->dims[g->im], b = os->dims[g->jm];
  if (a % sh == 0 && b % sh == 0)
    return TRUE;
  if (a != b)
    return FALSE;
  for (int k = g->i0; k < g->i1; k++)
    if (k != g->im && is->dims[k] > 1)
      return FALSE;
  for (int k = g->j0; k < g->j1; k++)
    if (k != g->jm && os->dims[k] > 1)
      return FALSE;
  return TRUE;
}

/* Reshape: dims are matched in groups of equal products (size-1 dims
 * anywhere); the major (first non-1) dims of a group may carry a split
 * when reshape_major_carries says so. With the output's sharding
 * carriable, the operand is resharded to match and the reshape is local.
 * Otherwise the reshape runs in the layout the operand's sharding carries
 * through it (splits it cannot carry are gathered first) and the driver
 * reshards the result (an all-to-all or a local slice, say) instead of
 * the fallback gathering all of the operand. */
SpPVal *
sp_handle_reshape (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  if (!plain_tiled (t) && t->kind != PS_SHARDING_REPLICATED)
    return NULL;
  SpPVal *op = sp_operand (c, in, 0);
  const PsShape *is = op->full, *os = in->shape;
  int ri = is->rank, ro = os->rank;
  SpReshapeGroup gr[ri + ro + 1];
  int ng = reshape_groups (is, os, gr);
  if (ng < 0)
    return NULL;
  g_autoptr (PsSharding) osd = NULL, rs = NULL;
  /* 1. The output's sharding, when every split is carried. */
  if (plain_tiled (t))
    {
      int64_t inv[ri > 0 ? ri : 1];
      gboolean ok = TRUE;
      for (int k = 0; k < ri; k++)
        inv[k] = -1;
      for (int q = 0; q < ng && ok; q++)
        for (int k = gr[q].j0; k < gr[q].j1 && ok; k++)
          {
            int64_t sh = sp_shards (t, k);
            if (sh <= 1)
              continue;
            if (k != gr[q].jm || !reshape_major_carries (is, os, &gr[q], sh))
              ok = FALSE;
            else
              inv[gr[q].im] = k;
          }
      if (ok)
        {
          osd = sp_sharding_remap (t, ri, inv);
          rs = ps_sharding_copy (t);
        }
    }
  /* 2. The operand's sharding, as far as it carries through. */
  if (!osd && plain_tiled (op->sharding))
    {
      int64_t src[ro > 0 ? ro : 1], keep[ri > 0 ? ri : 1];
      for (int k = 0; k < ro; k++)
        src[k] = -1;
      for (int k = 0; k < ri; k++)
        keep[k] = -1;
      gboolean any = FALSE;
      for (int q = 0; q < ng; q++)
        {
          int im = gr[q].im;
          int64_t sh = im >= 0 ? sp_shards (op->sharding, im) : 1;
          if (sh > 1 && reshape_major_carries (is, os, &gr[q], sh))
            {
              src[gr[q].jm] = im;
              keep[im] = im;
              any = TRUE;
            }
        }
      if (!any)
        return NULL; /* nothing would stay split: the fallback is as good */
      rs = sp_sharding_remap (op->sharding, ro, src);
      osd = sp_sharding_remap (op->sharding, ri, keep);
    }
  if (!osd || !rs)
    return NULL;
  PsInstr *x = sp_reshard (c, op, osd);
  g_autoptr (PsShape) ls = local_shape (rs, os);
  PsInstr *y = sp_add1 (c, PS_OP_RESHAPE, ps_shape_copy (ls), x);
  return finish (in, y, rs);
}

static SpPVal *reduce_tiled (SpComp *c, const PsInstr *in, gboolean manual);

SpPVal *
sp_handle_reduce (SpComp *c, const PsInstr *in)
{
  if (in->n_operands > 2)
    return reduce_tiled (c, in, FALSE);
  if (in->n_operands != 2 || !ps_shape_is_array (in->shape))
    return NULL;
  SpPVal *op = sp_operand (c, in, 0);
  SpPVal *init = sp_operand (c, in, 1);
  const PsSharding *s = op->sharding;
  if (s->kind == PS_SHARDING_REPLICATED)
    return NULL; /* the fallback is exactly the local reduce */
  if (!plain_tiled (s))
    return NULL;
  int r = op->full->rank;
  PsInstr *iv = sp_reshard (c, init, sp_replicated ());
  gboolean red[r > 0 ? r : 1];
  memset (red, 0, sizeof red);
  for (int k = 0; k < in->dimensions.n; k++)
    red[in->dimensions.v[k]] = TRUE;
  PsInstr *x = sp_mask_padding (c, op, red, iv);
  int ro = in->shape->rank;
  int64_t kept[ro > 0 ? ro : 1], ldims[ro > 0 ? ro : 1];
  int q = 0;
  for (int d = 0; d < r; d++)
    if (!red[d])
      {
        kept[q] = d;
        ldims[q] = x->shape->dims[d];
        q++;
      }
  PsInstr *ops[2] = { x, iv };
  PsInstr *y = sp_clone_with (c, in, sp_shape (in->shape->etype, ro, ldims), 2, ops);
  int ng, gs;
  g_autofree int64_t *groups = sp_reduced_groups (s, red, r, &ng, &gs);
  if (groups)
    y = sp_all_reduce_with (c, y, in->called[0], ng, gs, groups);
  g_autoptr (PsSharding) rs_own = NULL;
  const PsSharding *rs = sp_sharding_remap_view (s, ro, kept, &rs_own);
  return finish (in, y, rs);
}

/* A reduce of several operands (variadic, tiled), or one whose operands
 * carry a partially manual sharding (then within each manual group it is
 * partitioned like a plain reduce). Every operand takes the first one's sharding, the padding of
 * reduced split dims is masked with the init values (scalars, so each
 * device's local init is its whole init), the local reduce runs, and the
 * partial results are combined over the devices that split the reduced
 * dims (which differ in data dims only, so never across manual groups): an
 * all-reduce with the reduce's computation for one operand; for several,
 * all-gathers of the partial results along a new minor dim (in tile order,
 * so the data order is kept) and a second reduce over it, as XLA does. */
static SpPVal *
reduce_tiled (SpComp *c, const PsInstr *in, gboolean manual)
{
  int n = in->n_operands;
  if (n < 2 || n % 2 || in->n_called < 1)
    return NULL;
  int k = n / 2;
  SpPVal *op0 = sp_operand (c, in, 0);
  const PsSharding *s = op0->sharding;
  if (s->kind != PS_SHARDING_TILED || ps_sharding_has_manual_subgroup (s) != manual
      || !ps_shape_is_array (op0->full))
    return NULL;
  int r = op0->full->rank;
  gboolean red[r > 0 ? r : 1];
  memset (red, 0, sizeof red);
  for (int q = 0; q < in->dimensions.n; q++)
    if (in->dimensions.v[q] >= 0 && in->dimensions.v[q] < r)
      red[in->dimensions.v[q]] = TRUE;
  PsInstr *ops[n];
  for (int j = 0; j < k; j++)
    {
      SpPVal *iv = sp_operand (c, in, k + j);
      if (!ps_shape_is_array (iv->full) || iv->full->rank != 0)
        return NULL;
      ops[k + j] = iv->hlo;
    }
  for (int j = 0; j < k; j++)
    {
      SpPVal *v = sp_operand (c, in, j);
      if (!ps_shape_is_array (v->full) || v->full->rank != r)
        return NULL;
      SpPVal *rv = sp_reshard_pval (c, v, s);
      if (sp_failed (c))
        {
          sp_pval_free (rv);
          return NULL;
        }
      ops[j] = sp_mask_padding (c, rv, red, ops[k + j]);
      sp_pval_free (rv);
    }
  int ro = r - in->dimensions.n;
  int64_t kept[ro > 0 ? ro : 1], ldims[ro + 1];
  int q = 0;
  for (int d = 0; d < r && q < ro; d++)
    if (!red[d])
      {
        kept[q] = d;
        ldims[q] = ops[0]->shape->dims[d];
        q++;
      }
  PsShape *leaf[k];
  for (int j = 0; j < k; j++)
    leaf[j] = sp_shape (ops[j]->shape->etype, ro, ldims);
  PsShape *ls = k == 1 ? ps_shape_copy (leaf[0]) : ps_shape_new_tuple (k, leaf);
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (ls), n, ops);
  int ng, gs;
  g_autofree int64_t *groups = sp_reduced_groups (s, red, r, &ng, &gs);
  if (groups)
    {
      if (k == 1)
        y = sp_all_reduce_with (c, y, in->called[0], ng, gs, groups);
      else
        {
          PsInstr *parts[n];
          ldims[ro] = 1;
          for (int j = 0; j < k; j++)
            {
              PsInstr *p = sp_reshape (c, sp_gte (c, y, j), ro + 1, ldims);
              parts[j] = sp_all_gather (c, p, ro, ng, gs, groups);
              parts[k + j] = ops[k + j];
            }
          y = sp_clone_with (c, in, ps_shape_copy (ls), n, parts);
          int64_t last = ro;
          ps_ints_set (&y->dimensions, 1, &last);
        }
    }
  for (int j = 0; j < k; j++)
    ps_shape_free (leaf[j]);
  ps_shape_free (ls);
  g_autoptr (PsSharding) rs = sp_sharding_remap_keep_manual (s, ro, kept);
  if (!rs)
    return NULL;
  if (k == 1)
    return finish (in, y, rs);
  PsSharding *each[k];
  for (int j = 0; j < k; j++)
    each[j] = ps_sharding_copy (rs); /* the tuple takes them */
  g_autoptr (PsSharding) ts = ps_sharding_tuple (k, each);
  return finish (in, y, ts);
}

SpPVal *
sp_handle_manual_reduce (SpComp *c, const PsInstr *in)
{
  return reduce_tiled (c, in, TRUE);
}

SpPVal *
sp_handle_iota (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  if (!plain_tiled (t))
    return NULL;
  g_autoptr (PsShape) ls = local_shape (t, in->shape);
  int64_t d = in->iota_dimension;
  PsInstr *x = sp_iota (c, in->shape->etype, ls->rank, ls->dims, d);
  if (sp_shards (t, (int) d) > 1)
    {
      PsInstr *off = sp_convert (c, sp_offset (c, t, in->shape, (int) d), in->shape->etype);
      x = sp_binary (c, PS_OP_ADD, x, sp_broadcast_scalar (c, off, x->shape));
    }
  return finish (in, x, t);
}

/* Whether dim d of `in`'s output is the whole operand dim (the op leaves
 * it alone), so a sharding on it passes through. */
static gboolean
slice_keeps_dim (const PsInstr *in, const PsShape *opfull, int d)
{
  switch (in->opcode)
    {
    case PS_OP_SLICE:
      return in->slice_starts.v[d] == 0 && in->slice_limits.v[d] == opfull->dims[d]
             && (in->slice_strides.n == 0 || in->slice_strides.v[d] == 1);
    case PS_OP_PAD:
      return in->padding[d].lo == 0 && in->padding[d].hi == 0 && in->padding[d].interior == 0;
    case PS_OP_DYNAMIC_SLICE:
      return in->dynamic_slice_sizes.v[d] == opfull->dims[d];
    case PS_OP_REVERSE:
      return !ps_ints_contains (&in->dimensions, d);
    default:
      return FALSE;
    }
}

/* The target sharding with the dims the op changes made unsharded. */
static PsSharding *
passthrough_sharding (const PsInstr *in, const PsShape *opfull, const PsSharding *t)
{
  int r = opfull->rank;
  int64_t src[r > 0 ? r : 1];
  for (int d = 0; d < r; d++)
    src[d] = slice_keeps_dim (in, opfull, d) ? d : -1;
  return sp_sharding_remap (t, r, src);
}

static SpPVal *
local_passthrough_to (SpComp *c, const PsInstr *in, const PsSharding *t)
{
  if (!plain_tiled (t))
    return NULL;
  SpPVal *op = sp_operand (c, in, 0);
  g_autoptr (PsSharding) s = passthrough_sharding (in, op->full, t);
  if (!s || s->kind != PS_SHARDING_TILED)
    return NULL;
  PsInstr *x = sp_reshard (c, op, s);
  int n = in->n_operands;
  PsInstr *ops[n];
  ops[0] = x;
  for (int i = 1; i < n; i++)
    ops[i] = sp_reshard (c, sp_operand (c, in, i), sp_replicated ());
  g_autoptr (PsShape) ls = local_shape (s, in->shape);
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (ls), n, ops);
  if (in->opcode == PS_OP_DYNAMIC_SLICE)
    {
      /* Kept dims start at 0 locally (the global start clamps to 0 too). */
      for (int d = 0; d < op->full->rank; d++)
        {
          if (sp_shards (s, d) > 1)
            ps_instr_set_operand (y, d + 1, sp_const_scalar (c, ops[d + 1]->shape->etype, 0));
          y->dynamic_slice_sizes.v[d] = ls->dims[d];
        }
    }
  if (in->opcode == PS_OP_SLICE)
    for (int d = 0; d < op->full->rank; d++)
      if (sp_shards (s, d) > 1)
        y->slice_limits.v[d] = ls->dims[d];
  /* A padded dim that is sharded is untouched by the op, so the padding
   * of the tiles stays where the layout expects it. */
  return finish (in, y, s);
}

static SpPVal *
local_passthrough (SpComp *c, const PsInstr *in)
{
  return local_passthrough_to (c, in, sp_sharding_of (in));
}

/* A slice along a split dim is a window of size 1 at stride `stride`
 * starting at `start`: the halo exchange brings each device the elements
 * its output tile needs, then a local strided slice picks them. A result
 * that is not tiled is sliced in the operand's layout and the driver
 * gathers the (smaller) result. */
SpPVal *
sp_handle_slice (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  SpPVal *op = sp_operand (c, in, 0);
  int r = op->full->rank;
  if (t->kind == PS_SHARDING_REPLICATED && plain_tiled (op->sharding))
    t = op->sharding;
  gboolean cut_split = FALSE;
  if (plain_tiled (t))
    for (int d = 0; d < r; d++)
      if (sp_shards (t, d) > 1 && !slice_keeps_dim (in, op->full, d))
        cut_split = TRUE;
  if (!cut_split)
    return local_passthrough_to (c, in, t);
  int64_t src[r];
  for (int d = 0; d < r; d++)
    src[d] = d;
  g_autoptr (PsSharding) s_own = NULL;
  const PsSharding *s = sp_sharding_remap_view (t, r, src, &s_own);
  if (!s)
    return NULL;
  PsInstr *x = sp_reshard (c, op, s);
  PsInstr *zero = sp_const_zero (c, op->full->etype);
  int64_t starts[r], limits[r], strides[r];
  for (int d = 0; d < r; d++)
    {
      int64_t st = in->slice_strides.n ? in->slice_strides.v[d] : 1;
      int64_t k = sp_shards (t, d);
      starts[d] = 0;
      strides[d] = 1;
      limits[d] = x->shape->dims[d];
      if (k > 1 && !slice_keeps_dim (in, op->full, d))
        {
          PsWindowDim w = { 0 };
          w.size = 1;
          w.stride = st;
          w.pad_lo = -in->slice_starts.v[d];
          w.base_dilation = 1;
          w.window_dilation = 1;
          SpPVal xv = { x, (PsSharding *) s, op->full, FALSE };
          x = sp_halo_exchange (c, &xv, d, &w, in->shape->dims[d], k, zero);
          strides[d] = st;
          limits[d] = x->shape->dims[d];
        }
      else if (k <= 1)
        {
          starts[d] = in->slice_starts.v[d];
          limits[d] = in->slice_limits.v[d];
          strides[d] = st;
        }
    }
  int64_t dims[r];
  for (int d = 0; d < r; d++)
    dims[d] = (limits[d] - starts[d] + strides[d] - 1) / strides[d];
  PsInstr *y = sp_add1 (c, PS_OP_SLICE, sp_shape (x->shape->etype, r, dims), x);
  ps_ints_set (&y->slice_starts, r, starts);
  ps_ints_set (&y->slice_limits, r, limits);
  ps_ints_set (&y->slice_strides, r, strides);
  return sp_pval_new (y, t, in->shape);
}

/* A pad along a split dim is a window of size 1 over the padded,
 * base-dilated (interior padding + 1) operand: the halo exchange brings
 * each device exactly its output tile, with the pad value wherever there
 * is no operand element. Dims that are not split are padded locally. */
SpPVal *
sp_handle_pad (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  SpPVal *op = sp_operand (c, in, 0);
  int r = op->full->rank;
  gboolean cut_split = FALSE;
  if (plain_tiled (t) && in->n_pad == r)
    for (int d = 0; d < r; d++)
      if (sp_shards (t, d) > 1 && !slice_keeps_dim (in, op->full, d))
        cut_split = TRUE;
  if (!cut_split)
    return local_passthrough (c, in);
  int64_t src[r];
  for (int d = 0; d < r; d++)
    src[d] = d;
  g_autoptr (PsSharding) s_own = NULL;
  const PsSharding *s = sp_sharding_remap_view (t, r, src, &s_own);
  if (!s)
    return NULL;
  PsInstr *x = sp_reshard (c, op, s);
  PsInstr *fill = sp_reshard (c, sp_operand (c, in, 1), sp_replicated ());
  gboolean local_pad = FALSE;
  for (int d = 0; d < r; d++)
    {
      if (slice_keeps_dim (in, op->full, d))
        continue;
      int64_t k = sp_shards (t, d);
      if (k <= 1)
        {
          local_pad = TRUE;
          continue;
        }
      PsWindowDim w = { 0 };
      w.size = 1;
      w.stride = 1;
      w.pad_lo = in->padding[d].lo;
      w.pad_hi = in->padding[d].hi;
      w.base_dilation = in->padding[d].interior + 1;
      w.window_dilation = 1;
      SpPVal xv = { x, (PsSharding *) s, op->full, FALSE };
      x = sp_halo_exchange (c, &xv, d, &w, in->shape->dims[d], k, fill);
    }
  if (local_pad)
    {
      int64_t dims[r];
      PsPadDim *pd = g_new0 (PsPadDim, r);
      for (int d = 0; d < r; d++)
        {
          dims[d] = x->shape->dims[d];
          if (sp_shards (t, d) > 1 || slice_keeps_dim (in, op->full, d))
            continue;
          pd[d] = in->padding[d];
          dims[d] = in->shape->dims[d];
        }
      PsInstr *p = sp_add2 (c, PS_OP_PAD, sp_shape (x->shape->etype, r, dims), x, fill);
      p->n_pad = r;
      p->padding = pd;
      x = p;
    }
  return sp_pval_new (x, t, in->shape);
}

/* s with its devices in reverse order along the data dims of `rev`. */
static PsSharding *
reverse_device_order (const PsSharding *s, const gboolean *rev)
{
  PsSharding *r = ps_sharding_copy (s);
  int nt = s->n_tile_dims;
  int64_t idx[nt];
  memset (idx, 0, sizeof idx);
  for (int64_t q = 0; q < s->n_devices; q++)
    {
      int64_t p = 0;
      for (int k = 0; k < nt; k++)
        p = p * s->tile_dims[k] + (rev[k] ? s->tile_dims[k] - 1 - idx[k] : idx[k]);
      r->devices[q] = s->devices[p];
      ps_index_next (nt, s->tile_dims, idx);
    }
  /* The iota form no longer describes the devices. */
  g_clear_pointer (&r->iota_dims, g_free);
  g_clear_pointer (&r->iota_perm, g_free);
  r->n_iota_dims = 0;
  return r;
}

/* Reverse along split dims: the operand is laid out with its tiles in
 * reverse device order along those dims (one collective-permute, or
 * nothing when it already is), an uneven dim is shifted right by its
 * padding (a halo exchange) so that the tiles are full, and each device
 * reverses its tile locally: tile j of the reversed array, padding at the
 * end as the output's layout expects. */
SpPVal *
sp_handle_reverse (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  SpPVal *op = sp_operand (c, in, 0);
  int r = op->full->rank;
  if (!plain_tiled (t))
    return local_passthrough (c, in);
  gboolean rev[t->n_tile_dims];
  memset (rev, 0, sizeof rev);
  gboolean any = FALSE;
  for (int d = 0; d < r; d++)
    if (sp_shards (t, d) > 1 && ps_ints_contains (&in->dimensions, d))
      rev[d] = any = TRUE;
  if (!any)
    return local_passthrough (c, in);
  g_autoptr (PsSharding) s = reverse_device_order (t, rev);
  PsInstr *x = sp_reshard (c, op, s);
  for (int d = 0; d < r; d++)
    {
      int64_t k = sp_shards (t, d);
      int64_t n = op->full->dims[d], is = ps_ceil_div (n, k);
      if (!rev[d] || is * k == n)
        continue;
      PsWindowDim w = { 0 };
      w.size = 1;
      w.stride = 1;
      w.pad_lo = is * k - n;
      w.base_dilation = 1;
      w.window_dilation = 1;
      SpPVal xv = { x, s, op->full };
      x = sp_halo_exchange (c, &xv, d, &w, is * k, k, sp_const_zero (c, op->full->etype));
    }
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (x->shape), 1, &x);
  return sp_pval_new (y, t, in->shape);
}

SpPVal *
sp_handle_dynamic_slice (SpComp *c, const PsInstr *in)
{
  return local_passthrough (c, in);
}

/* Dynamic-update-slice along split dims: the operand keeps the output's
 * tiles and the update is replicated along the dims it updates. Each
 * device takes, for every local position, the update element at (global
 * position - start) from the update padded by a tile on both sides (a
 * dynamic-slice whose start T + offset - start stays in range whenever
 * the tile meets the update), and selects it where the position lies in
 * [start, start + update size). Only the update moves. */
static SpPVal *
dus_split (SpComp *c, const PsInstr *in, const PsSharding *t, SpPVal *op, SpPVal *upd)
{
  int r = op->full->rank;
  int64_t src[r > 0 ? r : 1];
  for (int d = 0; d < r; d++)
    src[d] = upd->full->dims[d] == op->full->dims[d] ? d : -1;
  g_autoptr (PsSharding) us = sp_sharding_remap (t, r, src);
  if (!us)
    return NULL;
  PsInstr *x = sp_reshard (c, op, t);
  PsInstr *u = sp_reshard (c, upd, us);
  const PsShape *ls = x->shape;
  int64_t lo[r], hi[r], sizes[r];
  PsInstr *starts[r], *pred = NULL;
  PsInstr *zero_s32 = sp_const_scalar (c, PS_S32, 0);
  for (int d = 0; d < r; d++)
    {
      int64_t n = op->full->dims[d], un = upd->full->dims[d], tl = ls->dims[d];
      lo[d] = hi[d] = 0;
      sizes[d] = tl;
      starts[d] = zero_s32;
      if (un == n)
        continue;
      /* The global start, clamped as dynamic-update-slice clamps it. */
      PsInstr *gs = sp_convert (c, sp_reshard (c, sp_operand (c, in, 2 + d), sp_replicated ()), PS_S32);
      gs = sp_binary (c, PS_OP_MINIMUM, sp_binary (c, PS_OP_MAXIMUM, gs, zero_s32),
                      sp_const_scalar (c, PS_S32, (double) (n - un)));
      PsInstr *off = sp_shards (t, d) > 1 ? sp_offset (c, t, op->full, d) : zero_s32;
      lo[d] = hi[d] = tl;
      starts[d] = sp_binary (c, PS_OP_SUBTRACT,
                             sp_binary (c, PS_OP_ADD, sp_const_scalar (c, PS_S32, (double) tl), off), gs);
      PsInstr *io = sp_iota (c, PS_S32, ls->rank, ls->dims, d);
      PsInstr *g = sp_binary (c, PS_OP_ADD, io, sp_broadcast_scalar (c, off, io->shape));
      PsInstr *ge = sp_compare (c, g, sp_broadcast_scalar (c, gs, io->shape), PS_CMP_GE);
      PsInstr *end = sp_binary (c, PS_OP_ADD, gs, sp_const_scalar (c, PS_S32, (double) un));
      PsInstr *lt = sp_compare (c, g, sp_broadcast_scalar (c, end, io->shape), PS_CMP_LT);
      PsInstr *p = sp_binary (c, PS_OP_AND, ge, lt);
      pred = pred ? sp_binary (c, PS_OP_AND, pred, p) : p;
    }
  if (!pred)
    return NULL;
  PsInstr *pu = sp_pad (c, u, sp_const_zero (c, u->shape->etype), lo, hi);
  PsInstr *w = sp_dynamic_slice (c, pu, starts, sizes);
  PsInstr *y = sp_select (c, pred, w, x);
  return sp_pval_new (y, t, in->shape);
}

SpPVal *
sp_handle_dynamic_update_slice (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  if (!plain_tiled (t))
    return NULL;
  SpPVal *op = sp_operand (c, in, 0);
  SpPVal *upd = sp_operand (c, in, 1);
  int r = op->full->rank;
  if (!ps_shape_is_array (op->full) || in->n_operands != 2 + r)
    return NULL;
  for (int d = 0; d < r; d++)
    if (sp_shards (t, d) > 1 && upd->full->dims[d] != op->full->dims[d])
      return dus_split (c, in, t, op, upd);
  int64_t src[r > 0 ? r : 1];
  for (int d = 0; d < r; d++)
    src[d] = upd->full->dims[d] == op->full->dims[d] ? d : -1;
  g_autoptr (PsSharding) s_own = NULL;
  const PsSharding *s = sp_sharding_remap_view (t, r, src, &s_own);
  if (!s || s->kind != PS_SHARDING_TILED)
    return NULL;
  int n = in->n_operands;
  PsInstr *ops[n];
  ops[0] = sp_reshard (c, op, s);
  ops[1] = sp_reshard (c, upd, s);
  for (int i = 2; i < n; i++)
    {
      int d = i - 2;
      if (sp_shards (s, d) > 1)
        ops[i] = sp_const_scalar (c, sp_operand (c, in, i)->full->etype, 0);
      else
        ops[i] = sp_reshard (c, sp_operand (c, in, i), sp_replicated ());
    }
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (ops[0]->shape), n, ops);
  return finish (in, y, s);
}

SpPVal *
sp_handle_concatenate (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  if (!plain_tiled (t))
    return NULL;
  int64_t dim = in->dimensions.v[0];
  int r = in->shape->rank;
  int64_t src[r];
  for (int d = 0; d < r; d++)
    src[d] = d == dim ? -1 : d;
  g_autoptr (PsSharding) s_own = NULL;
  const PsSharding *s = sp_sharding_remap_view (t, r, src, &s_own);
  if (!s)
    return NULL;
  int n = in->n_operands;
  PsInstr *ops[n];
  for (int i = 0; i < n; i++)
    ops[i] = sp_reshard (c, sp_operand (c, in, i), s);
  PsInstr *y = sp_concat (c, n, ops, dim);
  if (n == 1)
    y = sp_copy (c, y);
  return finish (in, y, s);
}

SpPVal *
sp_handle_sort (SpComp *c, const PsInstr *in)
{
  const PsSharding *t0 = sp_sharding_of (in);
  g_autoptr (PsSharding) t = ps_sharding_is_tuple (t0) ? ps_sharding_leaf (t0, 0)
                                                        : ps_sharding_copy (t0);
  if (!plain_tiled (t))
    return NULL;
  int64_t dim = in->dimensions.v[0];
  SpPVal *first = sp_operand (c, in, 0);
  int r = first->full->rank;
  int64_t src[r];
  for (int d = 0; d < r; d++)
    src[d] = d == dim ? -1 : d;
  /* A sharded sort dim moves to a free dim that is not sharded, so the
   * devices keep sorting a slice each (one all-to-all) instead of all
   * sorting everything. */
  int64_t ks = sp_shards (t, (int) dim);
  if (ks > 1)
    for (int d = 0; d < r; d++)
      if (d != dim && sp_shards (t, d) == 1 && first->full->dims[d] % ks == 0)
        {
          src[d] = dim;
          break;
        }
  g_autoptr (PsSharding) s_own = NULL;
  const PsSharding *s = sp_sharding_remap_view (t, r, src, &s_own);
  if (!s)
    return NULL;
  int n = in->n_operands;
  PsInstr *ops[n];
  for (int i = 0; i < n; i++)
    ops[i] = sp_reshard (c, sp_operand (c, in, i), s);
  PsShape *shape;
  if (ps_shape_is_tuple (in->shape))
    {
      PsShape *es[n];
      for (int i = 0; i < n; i++)
        es[i] = ops[i]->shape;
      shape = ps_shape_new_tuple (n, es);
    }
  else
    shape = ps_shape_copy (ops[0]->shape);
  PsInstr *y = sp_clone_with (c, in, shape, n, ops);
  g_autoptr (PsSharding) rs = ps_sharding_expand_to_shape (s, in->shape);
  return finish (in, y, rs);
}

/* The indices dim along which component k (of index_vector_dim ivd) of
 * the indices value `x` counts 0, 1, 2, ... (an iota seen through
 * concatenates along ivd, broadcasts and copies), or -1. Such a component
 * indexes an operand dim in parallel with that indices dim, as an explicit
 * batching dim would (XLA finds these the same way). */
static int64_t
iota_index_dim (const PsInstr *x, int64_t ivd, int64_t k)
{
  for (int depth = 0; depth < 16 && x && ps_shape_is_array (x->shape); depth++)
    {
      int r = x->shape->rank;
      switch (x->opcode)
        {
        case PS_OP_IOTA:
          if (x->iota_dimension == ivd || x->iota_dimension >= r)
            return -1;
          return x->iota_dimension;
        case PS_OP_COPY:
          x = x->operands[0];
          continue;
        case PS_OP_CONCATENATE:
          {
            if (ivd >= r || x->dimensions.n != 1 || x->dimensions.v[0] != ivd)
              return -1;
            int i = 0;
            while (i < x->n_operands && k >= x->operands[i]->shape->dims[ivd])
              k -= x->operands[i++]->shape->dims[ivd];
            if (i >= x->n_operands)
              return -1;
            x = x->operands[i];
            continue;
          }
        case PS_OP_BROADCAST:
          {
            const PsInstr *o = x->operands[0];
            int64_t ovd = o->shape->rank; /* ivd absent: every component alike */
            for (int i = 0; i < x->dimensions.n; i++)
              if (ivd < r && x->dimensions.v[i] == ivd)
                ovd = i;
            if (ovd == o->shape->rank)
              k = 0;
            int64_t od = iota_index_dim (o, ovd, k);
            return od >= 0 && od < x->dimensions.n ? x->dimensions.v[od] : -1;
          }
        default:
          return -1;
        }
    }
  return -1;
}

/* Indices minus the tile offset of operand dim od on their component k
 * (all of them when index_vector_dim is implicit): an iota-parallel dim
 * whose indices count globally while the operand tile starts at 0. */
static PsInstr *
shift_index_component (SpComp *c, PsInstr *x, int64_t ivd, int64_t k, PsInstr *off)
{
  PsInstr *o = sp_broadcast_scalar (c, sp_convert (c, off, x->shape->etype), x->shape);
  if (ivd < x->shape->rank)
    {
      PsInstr *io = sp_iota (c, PS_S32, x->shape->rank, x->shape->dims, ivd);
      PsInstr *eq = sp_compare (c, io, sp_broadcast_scalar (c, sp_const_scalar (c, PS_S32, (double) k),
                                                            io->shape), PS_CMP_EQ);
      PsInstr *z = sp_broadcast_scalar (c, sp_const_scalar (c, x->shape->etype, 0), x->shape);
      o = sp_select (c, eq, o, z);
    }
  return sp_binary (c, PS_OP_SUBTRACT, x, o);
}

/* Indices clamped as gather clamps them (component k to [0, dim - slice
 * size] of the operand dim it indexes), so that shifting them by a tile
 * offset afterwards keeps their global meaning. */
static PsInstr *
clamp_gather_indices (SpComp *c, PsInstr *x, const PsInstr *in, const PsShape *opfull)
{
  const PsGatherDims *g = &in->gather;
  int64_t ivd = g->index_vector_dim, nk = g->start_index_map.n;
  int64_t hi[nk > 0 ? nk : 1];
  for (int64_t k = 0; k < nk; k++)
    {
      int64_t od = g->start_index_map.v[k];
      hi[k] = opfull->dims[od] - g->slice_sizes.v[od];
    }
  PsInstr *h;
  if (ivd < x->shape->rank)
    h = sp_broadcast (c, sp_convert (c, sp_const_s32_vec (c, nk, hi), x->shape->etype), x->shape,
                      1, &ivd);
  else
    h = sp_broadcast_scalar (c, sp_const_scalar (c, x->shape->etype, (double) hi[0]), x->shape);
  PsInstr *z = sp_broadcast_scalar (c, sp_const_scalar (c, x->shape->etype, 0), x->shape);
  return sp_binary (c, PS_OP_MINIMUM, sp_binary (c, PS_OP_MAXIMUM, x, z), h);
}

/* Component k of indices x (index_vector_dim ivd dropped). */
static PsInstr *
index_component (SpComp *c, PsInstr *x, int64_t ivd, int64_t k)
{
  int r = x->shape->rank;
  if (ivd >= r)
    return x;
  int64_t st[r], lim[r], dims[r > 1 ? r - 1 : 1];
  int q = 0;
  for (int d = 0; d < r; d++)
    {
      st[d] = d == ivd ? k : 0;
      lim[d] = d == ivd ? k + 1 : x->shape->dims[d];
      if (d != ivd)
        dims[q++] = x->shape->dims[d];
    }
  return sp_reshape (c, sp_slice (c, x, st, lim), r - 1, dims);
}

/* Gather from an operand split along dims it indexes with slices of size
 * 1 ("trivially sliced"), for a result that is not tiled: every device
 * gathers from its own tile with the indices shifted by the tile's offset,
 * zeroes the rows whose index lies in another tile, and an all-reduce over
 * those tile dims adds the pieces (XLA does the same). Operand dims sliced
 * whole keep their sharding; the indices are replicated. Moves the result
 * once instead of the operand. */
static SpPVal *
gather_trivial_sliced (SpComp *c, const PsInstr *in, SpPVal *op, SpPVal *idx,
                       const int64_t *off_of_op)
{
  const PsGatherDims *g = &in->gather;
  if (!plain_tiled (op->sharding) || g->operand_batching_dims.n > 0)
    return NULL;
  int ro = op->full->rank, rout = in->shape->rank;
  int64_t ivd = g->index_vector_dim;
  int64_t comp_of[ro > 0 ? ro : 1], keep[ro > 0 ? ro : 1];
  gboolean trivial = FALSE;
  for (int d = 0; d < ro; d++)
    {
      comp_of[d] = -1;
      for (int k = 0; k < g->start_index_map.n; k++)
        if (g->start_index_map.v[k] == d)
          comp_of[d] = k;
      keep[d] = d;
      if (sp_shards (op->sharding, d) <= 1 || off_of_op[d] >= 0)
        continue;
      if (comp_of[d] < 0 || g->slice_sizes.v[d] != 1)
        keep[d] = -1; /* other sliced dims are gathered first */
      else
        trivial = TRUE;
    }
  if (!trivial)
    return NULL;
  g_autoptr (PsSharding) s_own = NULL;
  const PsSharding *s = sp_sharding_remap_view (op->sharding, ro, keep, &s_own);
  if (!s || !plain_tiled (s))
    return NULL;
  PsInstr *opx = sp_reshard (c, op, s);
  PsInstr *x = sp_reshard (c, idx, sp_replicated ());
  x = clamp_gather_indices (c, x, in, op->full);
  g_autoptr (PsShape) ltile = ps_sharding_tile_shape (s, op->full);
  PsInstr *pred = NULL;
  gboolean mask[s->n_tile_dims];
  memset (mask, 0, sizeof mask);
  for (int d = 0; d < ro; d++)
    if (sp_shards (s, d) > 1 && off_of_op[d] < 0)
      {
        mask[d] = TRUE;
        x = shift_index_component (c, x, ivd, comp_of[d], sp_offset (c, s, op->full, d));
        PsInstr *l = index_component (c, x, ivd, comp_of[d]);
        PsInstr *lo = sp_compare (c, l, sp_broadcast_scalar (c, sp_const_scalar (c, l->shape->etype, 0),
                                                             l->shape), PS_CMP_GE);
        PsInstr *hi = sp_compare (c, l, sp_broadcast_scalar (c, sp_const_scalar (c, l->shape->etype,
                                                                                 (double) ltile->dims[d]),
                                                             l->shape), PS_CMP_LT);
        PsInstr *p = sp_binary (c, PS_OP_AND, lo, hi);
        pred = pred ? sp_binary (c, PS_OP_AND, pred, p) : p;
      }
  int64_t src[rout > 0 ? rout : 1];
  for (int d = 0; d < rout; d++)
    src[d] = -1;
  for (int d = 0; d < ro; d++)
    if (off_of_op[d] >= 0)
      src[off_of_op[d]] = d;
  g_autoptr (PsSharding) rs_own = NULL;
  const PsSharding *rs = sp_sharding_remap_view (s, rout, src, &rs_own);
  if (!rs)
    return NULL;
  PsInstr *ops[2] = { opx, x };
  g_autoptr (PsShape) ls = ps_sharding_tile_shape (rs, in->shape);
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (ls), 2, ops);
  for (int d = 0; d < ro; d++)
    if (off_of_op[d] >= 0)
      y->gather.slice_sizes.v[d] = ltile->dims[d];
  /* The predicate has the batch dims of the output, in order. */
  int64_t bd[rout > 0 ? rout : 1];
  int nb = 0;
  for (int d = 0; d < rout; d++)
    if (!ps_ints_contains (&g->offset_dims, d))
      bd[nb++] = d;
  g_autoptr (PsShape) pshape = sp_shape (PS_PRED, rout, y->shape->dims);
  PsInstr *pb = sp_broadcast (c, pred, pshape, nb, bd);
  PsInstr *zero = sp_broadcast_scalar (c, sp_const_scalar (c, y->shape->etype, 0), y->shape);
  y = sp_select (c, pb, y, zero);
  int ng, gs;
  g_autofree int64_t *groups = sp_groups (s, mask, &ng, &gs);
  y = sp_all_reduce (c, y, y->shape->etype == PS_PRED ? SP_RED_OR : SP_RED_SUM, ng, gs, groups);
  return sp_pval_new (y, rs, in->shape);
}

/* Gather: output batch dims take their sharding from the indices, output
 * offset dims from operand dims that are sliced whole (pass-through), and
 * operand batching dims -- explicit ones, and operand dims indexed by an
 * iota along an indices dim (index parallel) -- follow their indices dims.
 * Everything else stays whole, so the local gather reads only local data
 * (iota-parallel indices are shifted by the operand tile's offset).
 *
 * The tile dims come from the output's sharding when it is tiled; when it
 * is not (a replicated result, say), from the operand's pass-through and
 * parallel dims, or else from the indices, and the driver then gathers
 * the (smaller) result rather than the fallback gathering the operand. */
SpPVal *
sp_handle_gather (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  if (!ps_shape_is_array (in->shape))
    return NULL;
  const PsGatherDims *g = &in->gather;
  SpPVal *op = sp_operand (c, in, 0), *idx = sp_operand (c, in, 1);
  int ro = op->full->rank, ri = idx->full->rank, rout = in->shape->rank;
  int64_t ivd = g->index_vector_dim;
  int64_t osrc[ro > 0 ? ro : 1], isrc[ri > 0 ? ri : 1], keep[rout > 0 ? rout : 1];
  int64_t idx_of_out[rout > 0 ? rout : 1], off_of_op[ro > 0 ? ro : 1];
  int64_t par_idx[ro > 0 ? ro : 1], par_k[ro > 0 ? ro : 1];
  /* Output batch dims <-> indices dims other than index_vector_dim. */
  int q = 0;
  for (int d = 0; d < rout; d++)
    {
      idx_of_out[d] = -1;
      if (ps_ints_contains (&g->offset_dims, d))
        continue;
      if (q == ivd)
        q++;
      idx_of_out[d] = q++;
    }
  /* Offset dims <-> operand dims not collapsed and not batching, when the
   * operand dim is sliced whole. */
  q = 0;
  for (int d = 0; d < ro; d++)
    {
      off_of_op[d] = -1;
      par_idx[d] = par_k[d] = -1;
      if (ps_ints_contains (&g->collapsed_slice_dims, d)
          || ps_ints_contains (&g->operand_batching_dims, d))
        continue;
      if (q >= g->offset_dims.n)
        return NULL;
      int64_t od = g->offset_dims.v[q++];
      if (g->slice_sizes.v[d] == op->full->dims[d])
        off_of_op[d] = od;
    }
  /* Parallel operand dims: explicit batching dims, and dims indexed by an
   * iota along an indices dim of the same size. */
  gboolean idx_used[ri > 0 ? ri : 1];
  memset (idx_used, 0, sizeof idx_used);
  for (int k = 0; k < g->operand_batching_dims.n; k++)
    {
      int64_t od = g->operand_batching_dims.v[k], id = g->start_indices_batching_dims.v[k];
      idx_used[id] = TRUE;
      if (op->full->dims[od] == idx->full->dims[id])
        par_idx[od] = id;
    }
  for (int k = 0; k < g->start_index_map.n; k++)
    {
      int64_t od = g->start_index_map.v[k];
      if (od < 0 || od >= ro || g->slice_sizes.v[od] != 1 || par_idx[od] >= 0
          || ps_ints_contains (&g->operand_batching_dims, od))
        continue;
      int64_t id = iota_index_dim (in->operands[1], ivd, k);
      if (id < 0 || id >= ri || id == ivd || idx_used[id] || op->full->dims[od] != idx->full->dims[id])
        continue;
      idx_used[id] = TRUE;
      par_idx[od] = id;
      par_k[od] = k;
    }
  /* The tile dims to follow. */
  g_autoptr (PsSharding) w = NULL;
  if (plain_tiled (t))
    w = ps_sharding_copy (t);
  else if (t->kind == PS_SHARDING_REPLICATED)
    {
      /* Split parallel dims keep the operand in place without an
       * all-reduce; trivially sliced ones otherwise. */
      gboolean par_split = FALSE;
      for (int d = 0; d < ro; d++)
        par_split = par_split || (par_idx[d] >= 0 && sp_shards (op->sharding, d) > 1);
      SpPVal *r = par_split ? NULL : gather_trivial_sliced (c, in, op, idx, off_of_op);
      if (r || sp_failed (c))
        return r;
      int64_t src[rout > 0 ? rout : 1];
      if (plain_tiled (op->sharding))
        {
          for (int d = 0; d < rout; d++)
            src[d] = -1;
          for (int d = 0; d < ro; d++)
            {
              if (off_of_op[d] >= 0)
                src[off_of_op[d]] = d;
              for (int o = 0; o < rout && par_idx[d] >= 0; o++)
                if (idx_of_out[o] == par_idx[d])
                  src[o] = d;
            }
          w = sp_sharding_remap (op->sharding, rout, src);
        }
      if ((!w || w->kind != PS_SHARDING_TILED) && plain_tiled (idx->sharding))
        {
          g_clear_pointer (&w, ps_sharding_free);
          for (int d = 0; d < rout; d++)
            src[d] = idx_of_out[d] >= 0 && idx_of_out[d] < ri ? idx_of_out[d] : -1;
          w = sp_sharding_remap (idx->sharding, rout, src);
        }
      if (!w || w->kind != PS_SHARDING_TILED)
        return NULL;
    }
  else
    return NULL;
  for (int d = 0; d < ro; d++)
    osrc[d] = -1;
  for (int d = 0; d < rout; d++)
    keep[d] = -1;
  for (int d = 0; d < ri; d++)
    isrc[d] = -1;
  for (int d = 0; d < rout; d++)
    if (idx_of_out[d] >= 0 && idx_of_out[d] < ri)
      {
        isrc[idx_of_out[d]] = d;
        keep[d] = d;
      }
  for (int d = 0; d < ro; d++)
    if (off_of_op[d] >= 0)
      {
        osrc[d] = off_of_op[d];
        keep[off_of_op[d]] = off_of_op[d];
      }
  /* Parallel operand dims follow their indices dims. */
  gboolean any_par = FALSE;
  for (int od = 0; od < ro; od++)
    {
      gboolean batching = ps_ints_contains (&g->operand_batching_dims, od);
      if (!batching && par_idx[od] < 0)
        continue;
      int64_t id = par_idx[od];
      if (batching && id < 0)
        {
          /* Explicit batching dims of different sizes: both stay whole. */
          for (int k = 0; k < g->operand_batching_dims.n; k++)
            if (g->operand_batching_dims.v[k] == od)
              id = g->start_indices_batching_dims.v[k];
          if (id >= 0 && isrc[id] >= 0)
            {
              keep[isrc[id]] = -1;
              isrc[id] = -1;
            }
          continue;
        }
      osrc[od] = isrc[id];
      any_par = any_par || isrc[id] >= 0;
    }
  g_autoptr (PsSharding) os = sp_sharding_remap (w, ro, osrc);
  g_autoptr (PsSharding) is = sp_sharding_remap (w, ri, isrc);
  g_autoptr (PsSharding) rs = sp_sharding_remap (w, rout, keep);
  if (!os || !is || !rs)
    return NULL;
  /* Uneven explicit batching dims are left to the fallback (an iota-parallel
   * dim's padding rows only read clamped rows into the output's padding). */
  if (any_par && g->operand_batching_dims.n > 0
      && (sp_has_padding (os, op->full) || sp_has_padding (is, idx->full)))
    return NULL;
  PsInstr *ops[2] = { sp_reshard (c, op, os), sp_reshard (c, idx, is) };
  for (int od = 0; od < ro; od++)
    if (par_k[od] >= 0 && sp_shards (os, od) > 1)
      ops[1] = shift_index_component (c, ops[1], ivd, par_k[od], sp_offset (c, os, op->full, od));
  g_autoptr (PsShape) ls = ps_sharding_tile_shape (rs, in->shape);
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (ls), 2, ops);
  for (int d = 0; d < ro; d++)
    if (off_of_op[d] >= 0)
      y->gather.slice_sizes.v[d] = ops[0]->shape->dims[d];
  return sp_pval_new (y, rs, in->shape);
}

/* Whether computation f is add(p0, p1) of its two scalar parameters. */
static gboolean
is_add_combiner (const PsComputation *f)
{
  const PsInstr *r = f ? f->root : NULL;
  if (!r || r->opcode != PS_OP_ADD || r->n_operands != 2 || f->params->len != 2)
    return FALSE;
  const PsInstr *a = r->operands[0], *b = r->operands[1];
  return a->opcode == PS_OP_PARAMETER && b->opcode == PS_OP_PARAMETER
         && a->parameter_number != b->parameter_number;
}

/* Scatter-add whose indices and updates are split along the scatter
 * (batch) dims, for a result that is not tiled (index pass-through): every
 * device scatters its updates into zeros, an all-reduce adds the pieces and
 * the operand is added once. Padding rows of the updates are zeroed. Moves
 * one result-sized all-reduce instead of gathering indices and updates. */
static SpPVal *
scatter_index_passthrough_add (SpComp *c, const PsInstr *in, SpPVal *op, SpPVal *idx,
                               SpPVal *upd, const int64_t *idx_of_upd)
{
  const PsScatterDims *g = &in->scatter;
  if (in->n_operands != 3 || in->n_called < 1 || !is_add_combiner (in->called[0])
      || op->full->etype == PS_PRED || g->input_batching_dims.n > 0)
    return NULL;
  int ri = idx->full->rank, ru = upd->full->rank;
  int64_t ivd = g->index_vector_dim;
  /* Follow whichever of indices and updates is split on the batch dims. */
  const PsSharding *from = NULL;
  int64_t isrc[ri > 0 ? ri : 1], usrc[ru > 0 ? ru : 1];
  if (plain_tiled (idx->sharding))
    {
      for (int d = 0; d < ri; d++)
        isrc[d] = d == ivd ? -1 : d;
      from = idx->sharding;
    }
  g_autoptr (PsSharding) is = NULL;
  if (from)
    is = sp_sharding_remap (from, ri, isrc);
  if ((!is || is->kind != PS_SHARDING_TILED) && plain_tiled (upd->sharding))
    {
      g_clear_pointer (&is, ps_sharding_free);
      for (int d = 0; d < ri; d++)
        isrc[d] = -1;
      for (int d = 0; d < ru; d++)
        if (idx_of_upd[d] >= 0 && idx_of_upd[d] < ri)
          isrc[idx_of_upd[d]] = d;
      is = sp_sharding_remap (upd->sharding, ri, isrc);
    }
  if (!is || is->kind != PS_SHARDING_TILED)
    return NULL;
  for (int d = 0; d < ru; d++)
    usrc[d] = idx_of_upd[d] >= 0 && idx_of_upd[d] < ri ? idx_of_upd[d] : -1;
  g_autoptr (PsSharding) us = sp_sharding_remap (is, ru, usrc);
  if (!us)
    return NULL;
  PsInstr *x = sp_reshard (c, idx, is);
  SpPVal *uv = sp_reshard_pval (c, upd, us);
  if (!uv)
    return NULL;
  PsInstr *zero = sp_const_scalar (c, op->full->etype, 0);
  PsInstr *u = sp_mask_padding (c, uv, NULL, zero);
  sp_pval_free (uv);
  PsInstr *base = sp_broadcast_scalar (c, zero, op->full);
  PsInstr *ops[3] = { base, x, u };
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (op->full), 3, ops);
  gboolean mask[is->n_tile_dims];
  memset (mask, 0, sizeof mask);
  for (int d = 0; d < ri; d++)
    mask[d] = sp_shards (is, d) > 1;
  int ng, gs;
  g_autofree int64_t *groups = sp_groups (is, mask, &ng, &gs);
  y = sp_all_reduce (c, y, SP_RED_SUM, ng, gs, groups);
  y = sp_binary (c, PS_OP_ADD, sp_reshard (c, op, sp_replicated ()), y);
  return sp_pval_new (y, sp_replicated (), in->shape);
}

/* Scatter: works in the operand's layout. Operand dims that every update
 * window covers whole pass their sharding to the matching update window
 * dims; parallel dims -- explicit input batching dims, and dims indexed by
 * an iota along an indices dim -- also split the indices dim and the
 * update scatter dim; dims that are indexed with windows of size 1
 * ("trivially sliced") stay split with the indices and updates whole
 * there: each device applies the updates with its tile's offset
 * subtracted, and those landing in other tiles are out of bounds and
 * skipped, as scatter skips them. The tile dims come from the output's
 * sharding when it is tiled; otherwise from the operand's, the updates'
 * or the indices', in that order. */
SpPVal *
sp_handle_scatter (SpComp *c, const PsInstr *in)
{
  const PsSharding *t0 = sp_sharding_of (in);
  g_autoptr (PsSharding) t = ps_sharding_is_tuple (t0) ? ps_sharding_leaf (t0, 0)
                                                        : ps_sharding_copy (t0);
  const PsScatterDims *g = &in->scatter;
  int nops = (in->n_operands - 1) / 2;
  SpPVal *op = sp_operand (c, in, 0), *idx = sp_operand (c, in, nops);
  SpPVal *upd = sp_operand (c, in, nops + 1);
  if (!ps_shape_is_array (op->full) || !ps_shape_is_array (upd->full))
    return NULL;
  int ro = op->full->rank, ri = idx->full->rank, ru = upd->full->rank;
  int64_t ivd = g->index_vector_dim;
  int64_t osrc[ro > 0 ? ro : 1], isrc[ri > 0 ? ri : 1], usrc[ru > 0 ? ru : 1];
  int64_t win_of_op[ro > 0 ? ro : 1], comp_of[ro > 0 ? ro : 1];
  int64_t par_idx[ro > 0 ? ro : 1], par_k[ro > 0 ? ro : 1], par_upd[ro > 0 ? ro : 1];
  gboolean pass[ro > 0 ? ro : 1], trivial[ro > 0 ? ro : 1];
  /* Update window dims <-> operand dims not inserted and not batching. */
  int q = 0;
  for (int d = 0; d < ro; d++)
    {
      win_of_op[d] = comp_of[d] = par_idx[d] = par_k[d] = par_upd[d] = -1;
      pass[d] = trivial[d] = FALSE;
      for (int k = 0; k < g->scatter_dims_to_operand_dims.n; k++)
        if (g->scatter_dims_to_operand_dims.v[k] == d)
          comp_of[d] = k;
      if (ps_ints_contains (&g->inserted_window_dims, d)
          || ps_ints_contains (&g->input_batching_dims, d))
        continue;
      if (q >= g->update_window_dims.n)
        return NULL;
      win_of_op[d] = g->update_window_dims.v[q++];
      pass[d] = upd->full->dims[win_of_op[d]] == op->full->dims[d];
    }
  /* Update scatter dims <-> indices dims other than index_vector_dim. */
  int64_t idx_of_upd[ru > 0 ? ru : 1];
  q = 0;
  for (int d = 0; d < ru; d++)
    {
      idx_of_upd[d] = -1;
      if (ps_ints_contains (&g->update_window_dims, d))
        continue;
      if (q == ivd)
        q++;
      idx_of_upd[d] = q++;
    }
  gboolean idx_used[ri > 0 ? ri : 1];
  memset (idx_used, 0, sizeof idx_used);
  for (int k = 0; k < g->input_batching_dims.n; k++)
    {
      int64_t od = g->input_batching_dims.v[k], id = g->scatter_indices_batching_dims.v[k];
      idx_used[id] = TRUE;
      if (op->full->dims[od] == idx->full->dims[id])
        par_idx[od] = id;
    }
  for (int k = 0; k < g->scatter_dims_to_operand_dims.n; k++)
    {
      int64_t od = g->scatter_dims_to_operand_dims.v[k];
      if (od < 0 || od >= ro || par_idx[od] >= 0 || pass[od]
          || ps_ints_contains (&g->input_batching_dims, od)
          || (win_of_op[od] >= 0 && upd->full->dims[win_of_op[od]] != 1))
        continue;
      trivial[od] = TRUE;
      int64_t id = iota_index_dim (in->operands[nops], ivd, k);
      if (id < 0 || id >= ri || id == ivd || idx_used[id] || op->full->dims[od] != idx->full->dims[id])
        continue;
      idx_used[id] = TRUE;
      par_idx[od] = id;
      par_k[od] = k;
      trivial[od] = FALSE;
    }
  for (int od = 0; od < ro; od++)
    for (int d = 0; d < ru && par_idx[od] >= 0; d++)
      if (idx_of_upd[d] == par_idx[od] && upd->full->dims[d] == op->full->dims[od])
        par_upd[od] = d;
  /* The tile dims to follow. */
  g_autoptr (PsSharding) w = NULL;
  if (plain_tiled (t))
    w = ps_sharding_copy (t);
  else if (t->kind == PS_SHARDING_REPLICATED)
    {
      int64_t src[ro > 0 ? ro : 1];
      if (plain_tiled (op->sharding))
        {
          for (int d = 0; d < ro; d++)
            src[d] = pass[d] || trivial[d] || par_upd[d] >= 0 ? d : -1;
          w = sp_sharding_remap (op->sharding, ro, src);
        }
      if ((!w || w->kind != PS_SHARDING_TILED) && plain_tiled (upd->sharding))
        {
          g_clear_pointer (&w, ps_sharding_free);
          for (int d = 0; d < ro; d++)
            src[d] = pass[d] ? win_of_op[d] : par_upd[d];
          w = sp_sharding_remap (upd->sharding, ro, src);
        }
      if ((!w || w->kind != PS_SHARDING_TILED) && plain_tiled (idx->sharding))
        {
          g_clear_pointer (&w, ps_sharding_free);
          for (int d = 0; d < ro; d++)
            src[d] = par_upd[d] >= 0 ? par_idx[d] : -1;
          w = sp_sharding_remap (idx->sharding, ro, src);
        }
      if (!w || w->kind != PS_SHARDING_TILED)
        return scatter_index_passthrough_add (c, in, op, idx, upd, idx_of_upd);
    }
  else
    return NULL;
  for (int d = 0; d < ri; d++)
    isrc[d] = -1;
  for (int d = 0; d < ru; d++)
    usrc[d] = -1;
  gboolean any_par = FALSE;
  for (int d = 0; d < ro; d++)
    {
      osrc[d] = -1;
      if (pass[d])
        {
          osrc[d] = d;
          usrc[win_of_op[d]] = d;
        }
      else if (par_upd[d] >= 0)
        {
          osrc[d] = d;
          isrc[par_idx[d]] = d;
          usrc[par_upd[d]] = d;
          any_par = any_par || sp_shards (w, d) > 1;
        }
      else if (trivial[d])
        osrc[d] = d;
    }
  g_autoptr (PsSharding) os = sp_sharding_remap (w, ro, osrc);
  g_autoptr (PsSharding) is = sp_sharding_remap (w, ri, isrc);
  g_autoptr (PsSharding) us = sp_sharding_remap (w, ru, usrc);
  if (!os || !is || !us)
    return NULL;
  /* Padding rows of split indices and updates would scatter garbage into
   * valid rows. */
  if (any_par && (sp_has_padding (os, op->full) || sp_has_padding (is, idx->full)))
    return NULL;
  int n = in->n_operands;
  PsInstr *ops[n];
  for (int i = 0; i < nops; i++)
    {
      ops[i] = sp_reshard (c, sp_operand (c, in, i), os);
      ops[nops + 1 + i] = sp_reshard (c, sp_operand (c, in, nops + 1 + i), us);
    }
  ops[nops] = sp_reshard (c, idx, is);
  for (int d = 0; d < ro; d++)
    if ((trivial[d] || par_k[d] >= 0) && sp_shards (os, d) > 1)
      ops[nops] = shift_index_component (c, ops[nops], ivd, comp_of[d],
                                         sp_offset (c, os, op->full, d));
  PsShape *shape;
  if (ps_shape_is_tuple (in->shape))
    {
      PsShape *es[nops];
      for (int i = 0; i < nops; i++)
        es[i] = ops[i]->shape;
      shape = ps_shape_new_tuple (nops, es);
    }
  else
    shape = ps_shape_copy (ops[0]->shape);
  PsInstr *y = sp_clone_with (c, in, shape, n, ops);
  g_autoptr (PsSharding) rs = ps_sharding_expand_to_shape (os, in->shape);
  return sp_pval_new (y, rs, in->shape);
}

/* Bitcast-convert: the dims both shapes share (all of them, or all but the
 * extra minor dim that holds the pieces of a wider element) keep their
 * tiles; the extra dim stays whole. With a result that is not tiled, the
 * operand's tiles carry through and the driver moves the result. */
SpPVal *
sp_handle_bitcast_convert (SpComp *c, const PsInstr *in)
{
  const PsSharding *t = sp_sharding_of (in);
  if (!ps_shape_is_array (in->shape))
    return NULL;
  SpPVal *op = sp_operand (c, in, 0);
  int ri = op->full->rank, ro = in->shape->rank;
  int rmin = MIN (ri, ro);
  const PsSharding *base;
  if (plain_tiled (t))
    base = t;
  else if (t->kind == PS_SHARDING_REPLICATED && plain_tiled (op->sharding) && ri == ro)
    base = op->sharding;
  else
    return NULL;
  int64_t isrc[ri > 0 ? ri : 1], osrc[ro > 0 ? ro : 1];
  for (int d = 0; d < ri; d++)
    isrc[d] = d < rmin ? d : -1;
  for (int d = 0; d < ro; d++)
    osrc[d] = d < rmin ? d : -1;
  g_autoptr (PsSharding) is = sp_sharding_remap (base, ri, isrc);
  g_autoptr (PsSharding) rs = sp_sharding_remap (base, ro, osrc);
  if (!is || !rs)
    return NULL;
  PsInstr *x = sp_reshard (c, op, is);
  g_autoptr (PsShape) ls = local_shape (rs, in->shape);
  PsInstr *y = sp_clone_with (c, in, ps_shape_copy (ls), 1, &x);
  return sp_pval_new (y, rs, in->shape);
}

/* Dot and ragged-dot partitioning (GSPMD section 4.3, "einsum").
 *
 * A dot iterates over batch (B), lhs-free (L), rhs-free (R) and contracting
 * (C) dims. A sharding of that iteration space says which block of it each
 * device computes: the lhs needs its B, L, C block, the rhs its B, R, C
 * block, and the local dot gives an output tile that still has to be summed
 * over the devices that split C (all-reduce, or reduce-scatter when the
 * output shards a dim over exactly those devices). Candidates come from the
 * output's sharding and from each operand's; the one whose reshards and
 * reduction move the fewest bytes wins, so a dot whose operands already fit
 * needs no communication but the reduction.
 *
 * Windowed einsum (XLA's SpmdPartitioner, "windowed dot general loop"):
 * when the chosen plan would all-gather one dim g of one operand (G) and
 * nothing else of it, and the gathered operand is larger than
 * PsSpmdOptions.windowed_einsum_threshold_bytes, the all-gather is replaced
 * by k = shard count of g steps around a ring of the k devices that hold
 * G's chunks (its tile order along g). Each step runs the local dot with
 * the chunk held now and passes the chunk to the next device with a
 * collective-permute, so communication overlaps the dots:
 *  - g a free dim of G: the step's result is the output block of the
 *    chunk's owner; it is dynamic-update-sliced into the output at
 *    owner * chunk (a per-step partition-id table);
 *  - g contracting: the other operand is dynamic-sliced to the chunk's
 *    contracting range and the step results are summed (G's padding is
 *    zeroed before it travels, the other operand is zero-padded).
 * The reduce-scatter variant: when the contraction is split and the
 * output is reduce-scattered over the same devices, and the local partial
 * result exceeds the threshold, the partial sums travel instead: each
 * step computes one output chunk's partial (the operand holding that dim
 * dynamic-sliced), adds the sum received from the previous device and
 * passes it on, so after k steps each device holds its own chunk's sum.
 * XLA emits a while loop; podsim unrolls it (k dots, k - 1 permutes) so the
 * trace shows every transfer and the simulator can overlap them. The
 * all-gather kinds can also run bidirectionally (windowed_dot).
 *
 * ragged-dot (XLA's three modes, ir.h) is the same einsum with one more
 * iteration dim x for its groups (the rhs group dim in the non-contracting
 * mode, the result's leading dim in the contracting one) and the rule that
 * the lhs ragged dim and x stay whole: the group sizes count rows of the
 * whole ragged dim, so every device needs the whole of it (a ragged batch
 * dim is an ordinary batch dim: the result is the dot's, Shardy's rule
 * below marks nothing of it). This is the
 * rule XLA's Shardy partitioner gives ragged-dot (its op sharding rule,
 * xla/service/spmd/shardy/test/mhlo_extensions_test.mlir: batch dims,
 * lhs and rhs free dims and contracting dims (with a reduction) may be
 * sharded; the ragged dim and the group dim "need replication"); the
 * group sizes are replicated, a split contracting dim is summed with an
 * all-reduce, and the windowed loops are not used. */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/spmd/spmd_private.h"

typedef struct {
  int nb, nl, nr, nc, ni;
  int rl, rr, ro;
  /* ragged-dot: its mode, the extra iteration dim x of its groups (the rhs
   * group dim, or the result's leading group dim; -1 when none) and the
   * iteration dims that must stay whole (the lhs ragged dim and x). */
  PsRaggedMode ragged;
  int x;
  gboolean whole[64];
  int64_t lhs_iter[16], rhs_iter[16], out_iter[16]; /* operand dim -> iteration index */
  int64_t iter_lhs[64], iter_rhs[64], iter_out[64];  /* iteration index -> dim or -1 */
} DotSpace;

static gboolean
dot_space (const PsInstr *in, int rl, int rr, DotSpace *ds)
{
  memset (ds, 0, sizeof *ds);
  if (rl > 16 || rr > 16)
    return FALSE;
  const PsDotDims *dd = &in->dot;
  int64_t lrag = -1, rgrp = -1;
  ds->ragged = ps_instr_ragged_dims (in, &lrag, &rgrp);
  if (in->opcode == PS_OP_RAGGED_DOT && ds->ragged == PS_RAGGED_NONE)
    return FALSE;
  gboolean grouped = ds->ragged == PS_RAGGED_NON_CONTRACTING || ds->ragged == PS_RAGGED_CONTRACTING;
  ds->rl = rl;
  ds->rr = rr;
  ds->nb = dd->lhs_batch.n;
  ds->nc = dd->lhs_contracting.n;
  ds->nl = rl - ds->nb - ds->nc;
  ds->nr = rr - ds->nb - ds->nc - (ds->ragged == PS_RAGGED_NON_CONTRACTING);
  ds->ni = ds->nb + ds->nl + ds->nr + ds->nc + grouped;
  ds->ro = ds->nb + ds->nl + ds->nr + (ds->ragged == PS_RAGGED_CONTRACTING);
  ds->x = grouped ? ds->ni - 1 : -1;
  if (ds->ni > 64 || ds->nl < 0 || ds->nr < 0)
    return FALSE;
  for (int i = 0; i < 64; i++)
    ds->iter_lhs[i] = ds->iter_rhs[i] = ds->iter_out[i] = -1;
  for (int k = 0; k < ds->nb; k++)
    {
      ds->lhs_iter[dd->lhs_batch.v[k]] = k;
      ds->rhs_iter[dd->rhs_batch.v[k]] = k;
    }
  for (int k = 0; k < ds->nc; k++)
    {
      int it = ds->nb + ds->nl + ds->nr + k;
      ds->lhs_iter[dd->lhs_contracting.v[k]] = it;
      ds->rhs_iter[dd->rhs_contracting.v[k]] = it;
    }
  int q = ds->nb;
  for (int d = 0; d < rl; d++)
    if (!ps_ints_contains (&dd->lhs_batch, d) && !ps_ints_contains (&dd->lhs_contracting, d))
      ds->lhs_iter[d] = q++;
  for (int d = 0; d < rr; d++)
    if (d == rgrp && ds->ragged == PS_RAGGED_NON_CONTRACTING)
      ds->rhs_iter[d] = ds->x;
    else if (!ps_ints_contains (&dd->rhs_batch, d) && !ps_ints_contains (&dd->rhs_contracting, d))
      ds->rhs_iter[d] = q++;
  int o0 = ds->ragged == PS_RAGGED_CONTRACTING;
  if (o0)
    ds->out_iter[0] = ds->x;
  for (int d = o0; d < ds->ro; d++)
    ds->out_iter[d] = d - o0;
  for (int d = 0; d < rl; d++)
    ds->iter_lhs[ds->lhs_iter[d]] = d;
  for (int d = 0; d < rr; d++)
    ds->iter_rhs[ds->rhs_iter[d]] = d;
  for (int d = 0; d < ds->ro; d++)
    ds->iter_out[ds->out_iter[d]] = d;
  if (lrag >= 0 && lrag < rl && grouped)
    ds->whole[ds->lhs_iter[lrag]] = TRUE;
  if (ds->x >= 0)
    ds->whole[ds->x] = TRUE;
  return TRUE;
}

/* The shardings are borrowed from the memo (sp_sharding_remap_view) or
 * from own[], which the plan frees: each dot tries three candidates of
 * four remaps each, and copying their device arrays dominated. */
typedef struct {
  const PsSharding *iter, *lhs, *rhs, *partial;
  PsSharding *own[4];
  double cost;
} DotPlan;

static void
plan_clear (DotPlan *p)
{
  for (int i = 0; i < 4; i++)
    if (p->own[i])
      ps_sharding_free (p->own[i]);
  memset (p, 0, sizeof *p);
}

/* iter: the candidate (iter_own: its owned copy, if any, taken). */
static gboolean
plan_make (SpComp *c, const PsInstr *in, const DotSpace *ds, const PsSharding *iter,
           PsSharding *iter_own, DotPlan *p)
{
  memset (p, 0, sizeof *p);
  p->own[0] = iter_own;
  if (!iter)
    {
      plan_clear (p);
      return FALSE;
    }
  p->iter = iter;
  p->lhs = sp_sharding_remap_view (iter, ds->rl, ds->lhs_iter, &p->own[1]);
  p->rhs = sp_sharding_remap_view (iter, ds->rr, ds->rhs_iter, &p->own[2]);
  p->partial = sp_sharding_remap_view (iter, ds->ro, ds->out_iter, &p->own[3]);
  if (!p->lhs || !p->rhs || !p->partial)
    {
      plan_clear (p);
      return FALSE;
    }
  SpPVal *lhs = sp_operand (c, in, 0), *rhs = sp_operand (c, in, 1);
  SpModule *m = c->m;
  p->cost = sp_reshard_cost (m, lhs->full, lhs->sharding, p->lhs)
            + sp_reshard_cost (m, rhs->full, rhs->sharding, p->rhs)
            + sp_reshard_cost (m, in->shape, p->partial, sp_sharding_of (in));
  int64_t csh = 1;
  for (int k = 0; k < ds->nc; k++)
    csh *= sp_shards (iter, ds->nb + ds->nl + ds->nr + k);
  if (csh > 1)
    {
      g_autoptr (PsShape) ls = ps_sharding_tile_shape (p->partial, in->shape);
      p->cost += 2.0 * (double) ps_shape_bytes (ls);
    }
  return TRUE;
}

static PsSharding *
tiled_or_null (const PsSharding *s)
{
  if (s->kind == PS_SHARDING_TILED && !ps_sharding_has_manual_subgroup (s))
    return (PsSharding *) s;
  if (s->kind == PS_SHARDING_REPLICATED)
    return (PsSharding *) s;
  return NULL;
}

/* The local dot of local operands l and r. */
static PsInstr *
local_dot (SpComp *c, const PsInstr *in, const DotSpace *ds, PsInstr *l, PsInstr *r, PsInstr *g)
{
  int64_t odims[ds->ro > 0 ? ds->ro : 1];
  for (int d = 0; d < ds->ro; d++)
    {
      int64_t it = ds->out_iter[d];
      int64_t ld = ds->iter_lhs[it], rd = ds->iter_rhs[it];
      odims[d] = it == ds->x ? in->shape->dims[d] : ld >= 0 ? l->shape->dims[ld] : r->shape->dims[rd];
    }
  PsInstr *ops[3] = { l, r, g };
  return sp_clone_with (c, in, sp_shape (in->shape->etype, ds->ro, odims), g ? 3 : 2, ops);
}

/* Whether the plan reshards operand `v` (side 0: lhs, 1: rhs) by exactly an
 * all-gather of one of its free or contracting dims (*g), which a windowed
 * einsum can replace: v is tiled (no manual subgroups), *g is split in v's
 * sharding but not in the plan's, and v's sharding with *g unsplit is the
 * plan's. Then the ring groups (devices differing only in tile dim *g) have
 * exactly as many members as *g has shards, and together they hold the
 * block of v each member needs. *bytes: the gathered operand per device. */
static gboolean
windowed_gather_dim (const DotSpace *ds, const DotPlan *p, const SpPVal *v, int side, int *g,
                     int64_t *bytes)
{
  const PsSharding *s = v->sharding, *want = side ? p->rhs : p->lhs;
  const int64_t *iter_of = side ? ds->rhs_iter : ds->lhs_iter;
  if (s->kind != PS_SHARDING_TILED || ps_sharding_has_manual_subgroup (s))
    return FALSE;
  int rank = v->full->rank, found = -1;
  for (int d = 0; d < rank; d++)
    {
      if (sp_shards (s, d) <= 1 || sp_shards (want, d) > 1)
        continue;
      if (found >= 0)
        return FALSE;
      found = d;
    }
  /* Batch dims would need the other operand sliced too; not done. */
  if (found < 0 || iter_of[found] < ds->nb)
    return FALSE;
  int64_t src[rank > 0 ? rank : 1];
  for (int d = 0; d < rank; d++)
    src[d] = d;
  src[found] = -1;
  g_autoptr (PsSharding) u = sp_sharding_remap (s, rank, src);
  if (!u || !ps_sharding_equal_layout (u, want))
    return FALSE;
  g_autoptr (PsShape) gathered = ps_sharding_tile_shape (want, v->full);
  *g = found;
  *bytes = ps_shape_bytes (gathered);
  return TRUE;
}

/* State of one windowed einsum loop while its steps are emitted. */
typedef struct {
  SpComp *c;
  const PsInstr *in;
  const DotSpace *ds;
  int side;               /* the windowed operand: 0 lhs, 1 rhs */
  gboolean contracting;   /* its gathered dim is contracting */
  PsInstr *other;         /* the other local operand (zero-padded if contracting) */
  int od;                 /* contracting: other's dim; free: the output dim */
  int64_t k, cs;          /* ring size, chunk size */
  int ng;
  const int64_t *groups;  /* ng rings of k, in tile order */
  int64_t *table;         /* scratch: n entries */
  PsInstr *zero_s32, *acc;
} WinLoop;

/* One step: every ring member i holds the chunk of member (i + shift) mod k
 * in `chunk`. */
static void
win_step (WinLoop *w, PsInstr *chunk, int64_t shift)
{
  SpComp *c = w->c;
  const DotSpace *ds = w->ds;
  int64_t k = w->k;
  for (int q = 0; q < w->ng; q++)
    for (int64_t i = 0; i < k; i++)
      w->table[w->groups[q * k + i]] = (((i + shift) % k + k) % k) * w->cs;
  PsInstr *off = sp_table_lookup (c, w->table);
  if (w->contracting)
    {
      int rk = w->other->shape->rank;
      PsInstr *starts[rk];
      int64_t sizes[rk];
      for (int d = 0; d < rk; d++)
        {
          starts[d] = d == w->od ? off : w->zero_s32;
          sizes[d] = d == w->od ? w->cs : w->other->shape->dims[d];
        }
      PsInstr *piece = sp_dynamic_slice (c, w->other, starts, sizes);
      PsInstr *y = w->side ? local_dot (c, w->in, ds, piece, chunk, NULL)
                           : local_dot (c, w->in, ds, chunk, piece, NULL);
      w->acc = w->acc ? sp_binary (c, PS_OP_ADD, w->acc, y) : y;
      return;
    }
  PsInstr *y = w->side ? local_dot (c, w->in, ds, w->other, chunk, NULL)
                       : local_dot (c, w->in, ds, chunk, w->other, NULL);
  if (!w->acc)
    {
      int64_t dims[ds->ro > 0 ? ds->ro : 1];
      memcpy (dims, y->shape->dims, sizeof (int64_t) * ds->ro);
      dims[w->od] = k * w->cs;
      g_autoptr (PsShape) as = sp_shape (y->shape->etype, ds->ro, dims);
      w->acc = sp_broadcast_scalar (c, sp_const_zero (c, y->shape->etype), as);
    }
  PsInstr *starts[ds->ro > 0 ? ds->ro : 1];
  for (int d = 0; d < ds->ro; d++)
    starts[d] = d == w->od ? off : w->zero_s32;
  w->acc = sp_dynamic_update_slice (c, w->acc, y, starts);
}

/* Source-target pairs of the rings: member i sends to member i + dir. */
static int64_t *
ring_pairs (const int64_t *groups, int ng, int64_t k, int dir)
{
  int64_t *pairs = g_new (int64_t, 2 * (gsize) ng * k);
  for (int q = 0; q < ng; q++)
    for (int64_t i = 0; i < k; i++)
      {
        pairs[2 * (q * k + i)] = groups[q * k + i];
        pairs[2 * (q * k + i) + 1] = groups[q * k + ((i + dir) % k + k) % k];
      }
  return pairs;
}

/* The windowed einsum loop, unrolled (see the file comment). gv: the
 * windowed operand as it is laid out (its local value is `side ? r : l`,
 * possibly with its contracting padding zeroed), g its gathered dim; the
 * other local operand is already in the plan's sharding. Returns the local
 * result in the plan's partial sharding, as local_dot would.
 *
 * Unidirectional: member i sends to i + 1, so at step t it holds the chunk
 * of member i - t. Bidirectional (XLA's bidirectional_windowed_einsum):
 * round r >= 1 receives chunk i - r from one neighbour and chunk i + r from
 * the other, so the k - 1 transfers take k / 2 rounds on both directions
 * of the ring's links. Every round's permutes are issued before the
 * previous round's dots. */
static PsInstr *
windowed_dot (SpComp *c, const PsInstr *in, const DotSpace *ds, int side, int g,
              const SpPVal *gv, PsInstr *l, PsInstr *r)
{
  const PsSharding *s = gv->sharding;
  int64_t k = sp_shards (s, g), full_g = gv->full->dims[g];
  gboolean mask[s->n_tile_dims];
  memset (mask, 0, sizeof mask);
  mask[g] = TRUE;
  int ng, gs;
  g_autofree int64_t *groups = sp_groups (s, mask, &ng, &gs);
  g_assert (gs == k);
  g_autofree int64_t *fwd = ring_pairs (groups, ng, k, 1);
  g_autofree int64_t *bwd = ring_pairs (groups, ng, k, -1);
  g_autofree int64_t *table = g_new0 (int64_t, c->m->n);
  int it = (int) (side ? ds->rhs_iter : ds->lhs_iter)[g];
  WinLoop w = { c, in, ds, side, it >= ds->nb + ds->nl + ds->nr, side ? l : r, -1, k,
                ps_ceil_div (full_g, k), ng, groups, table, sp_const_scalar (c, PS_S32, 0), NULL };
  if (w.contracting)
    {
      w.od = (int) (side ? ds->iter_lhs : ds->iter_rhs)[it];
      int rk = w.other->shape->rank;
      int64_t lo[rk], hi[rk];
      memset (lo, 0, sizeof lo);
      memset (hi, 0, sizeof hi);
      hi[w.od] = k * w.cs - w.other->shape->dims[w.od];
      w.other = sp_pad (c, w.other, sp_const_zero (c, w.other->shape->etype), lo, hi);
    }
  else
    w.od = it;  /* free dims keep their iteration index in the output */
  PsInstr *own = side ? r : l;
  int n_pairs = ng * gs;
  if (!c->m->opts.windowed_einsum_bidirectional)
    {
      PsInstr *chunk = own;
      for (int64_t t = 0; t < k; t++)
        {
          PsInstr *next = t + 1 < k ? sp_collective_permute (c, chunk, n_pairs, fwd) : NULL;
          win_step (&w, chunk, -t);
          chunk = next;
        }
    }
  else
    {
      PsInstr *cw = own, *ccw = own;
      for (int64_t rd = 0; rd <= k / 2; rd++)
        {
          PsInstr *ncw = NULL, *nccw = NULL;
          if (rd + 1 <= k / 2)
            {
              ncw = sp_collective_permute (c, cw, n_pairs, fwd);
              if (2 * (rd + 1) < k)
                nccw = sp_collective_permute (c, ccw, n_pairs, bwd);
            }
          if (rd == 0)
            win_step (&w, own, 0);
          else
            {
              win_step (&w, cw, -rd);
              if (2 * rd < k)
                win_step (&w, ccw, rd);
            }
          cw = ncw;
          ccw = nccw;
        }
    }
  PsInstr *acc = w.acc;
  if (!w.contracting && k * w.cs != full_g)
    {
      int64_t st[ds->ro > 0 ? ds->ro : 1], lim[ds->ro > 0 ? ds->ro : 1];
      for (int d = 0; d < ds->ro; d++)
        {
          st[d] = 0;
          lim[d] = d == w.od ? full_g : acc->shape->dims[d];
        }
      acc = sp_slice (c, acc, st, lim);
    }
  return acc;
}

/* The reduce-scatter variant: the output dim od is to end split over the
 * ring of devices that split the contraction (groups: ng rings of k, in
 * the order of the result's tiles). Member i computes at step t the
 * partial result of output chunk (i - t - 1) mod k (the operand holding od
 * dynamic-sliced to that chunk), adds it to the partial sum received from
 * member i - 1 and passes the sum on; after k steps it holds the full sum
 * of chunk i. k dots, k - 1 collective-permutes, each issued before the
 * dot it overlaps. l, r: local operands in the plan's sharding (split
 * contracting padding already zeroed). */
static PsInstr *
windowed_reduce_scatter (SpComp *c, const PsInstr *in, const DotSpace *ds, int od, int64_t k,
                         int ng, const int64_t *groups, PsInstr *l, PsInstr *r)
{
  int side = ds->iter_lhs[od] >= 0 ? 0 : 1;
  PsInstr *x = side ? r : l;
  int xd = (int) (side ? ds->iter_rhs : ds->iter_lhs)[od];
  int64_t full = in->shape->dims[od], cs = ps_ceil_div (full, k);
  int rk = x->shape->rank;
  int64_t lo[rk], hi[rk], sizes[rk];
  memset (lo, 0, sizeof lo);
  memset (hi, 0, sizeof hi);
  hi[xd] = k * cs - x->shape->dims[xd];
  x = sp_pad (c, x, sp_const_zero (c, x->shape->etype), lo, hi);
  for (int d = 0; d < rk; d++)
    sizes[d] = d == xd ? cs : x->shape->dims[d];
  g_autofree int64_t *pairs = ring_pairs (groups, ng, k, 1);
  g_autofree int64_t *table = g_new0 (int64_t, c->m->n);
  PsInstr *zero_s32 = sp_const_scalar (c, PS_S32, 0), *acc = NULL;
  for (int64_t t = 0; t < k; t++)
    {
      PsInstr *recv = acc ? sp_collective_permute (c, acc, ng * (int) k, pairs) : NULL;
      for (int q = 0; q < ng; q++)
        for (int64_t i = 0; i < k; i++)
          table[groups[q * k + i]] = ((i - t - 1 + 2 * k) % k) * cs;
      PsInstr *off = sp_table_lookup (c, table);
      PsInstr *starts[rk];
      for (int d = 0; d < rk; d++)
        starts[d] = d == xd ? off : zero_s32;
      PsInstr *piece = sp_dynamic_slice (c, x, starts, sizes);
      PsInstr *y = side ? local_dot (c, in, ds, l, piece, NULL) : local_dot (c, in, ds, piece, r, NULL);
      acc = recv ? sp_binary (c, PS_OP_ADD, recv, y) : y;
    }
  return acc;
}

SpPVal *
sp_handle_dot (SpComp *c, const PsInstr *in)
{
  SpPVal *lhs = sp_operand (c, in, 0), *rhs = sp_operand (c, in, 1);
  const PsSharding *t = sp_sharding_of (in);
  DotSpace ds;
  if (!dot_space (in, lhs->full->rank, rhs->full->rank, &ds))
    return NULL;
  DotPlan best = { 0 };
  gboolean have = FALSE;
  /* Candidate iteration shardings: each source's tile dims placed on the
   * iteration dims they cover. */
  const PsSharding *srcs[3] = { tiled_or_null (t), tiled_or_null (lhs->sharding),
                                tiled_or_null (rhs->sharding) };
  /* A ragged-dot's ragged dim and groups stay whole (their sizes are
   * data every device needs entire): the candidates leave them unsplit. */
  int64_t masked[3][64];
  memcpy (masked[0], ds.iter_out, sizeof masked[0]);
  memcpy (masked[1], ds.iter_lhs, sizeof masked[1]);
  memcpy (masked[2], ds.iter_rhs, sizeof masked[2]);
  for (int k = 0; k < 3; k++)
    for (int it = 0; it < ds.ni; it++)
      if (ds.whole[it])
        masked[k][it] = -1;
  const int64_t *maps[3] = { masked[0], masked[1], masked[2] };
  GHashTable *choices = c->m->opts.choices;
  int forced = -1, chosen = -1;
  int forced_raw = 0;
  if (choices && c->m->opts.replay_choices)
    {
      /* Recorded value: (candidate + 1) | (windowed side + 1) << 4. */
      forced_raw = GPOINTER_TO_INT (g_hash_table_lookup (choices, in->name));
      forced = (forced_raw & 15) - 1;
    }
  for (int k = 0; k < 3; k++)
    {
      if (!srcs[k] || (forced >= 0 && k != forced))
        continue;
      PsSharding *iter_own;
      const PsSharding *iter = sp_sharding_remap_view (srcs[k], ds.ni, maps[k], &iter_own);
      DotPlan p;
      if (!plan_make (c, in, &ds, iter, iter_own, &p))
        continue;
      if (!have || p.cost < best.cost)
        {
          if (have)
            plan_clear (&best);
          best = p;
          have = TRUE;
          chosen = k;
        }
      else
        plan_clear (&p);
    }
  if (!have)
    return NULL;
  /* Windowed einsum: decided after the candidate, from sizes (threshold)
   * or, on replay, from the recorded value. */
  int wside = -1, wdim = -1;
  {
    const PsSpmdOptions *o = &c->m->opts;
    int allow = 3;  /* bit 0: lhs may be windowed, bit 1: rhs */
    gboolean by_size = TRUE;
    if (forced >= 0)
      {
        int w = forced_raw >> 4;
        allow = w == 1 ? 1 : w == 2 ? 2 : 0;
        by_size = FALSE;
      }
    else if (o->windowed_einsum_threshold_bytes < 0)
      allow = 0;
    if (in->opcode == PS_OP_RAGGED_DOT)
      allow = 0; /* the windowed loops are written for dot */
    int64_t wbytes = -1;
    for (int side = 0; side < 2; side++)
      {
        int g;
        int64_t bytes;
        if (!(allow & (1 << side))
            || !windowed_gather_dim (&ds, &best, side ? rhs : lhs, side, &g, &bytes))
          continue;
        if (by_size && bytes <= o->windowed_einsum_threshold_bytes)
          continue;
        if (bytes > wbytes)
          {
            wbytes = bytes;
            wside = side;
            wdim = g;
          }
      }
  }
  PsInstr *l = wside == 0 ? lhs->hlo : sp_reshard (c, lhs, best.lhs);
  PsInstr *r = wside == 1 ? rhs->hlo : sp_reshard (c, rhs, best.rhs);
  PsInstr *g = NULL;
  if (in->opcode == PS_OP_RAGGED_DOT)
    {
      g_autoptr (PsSharding) rep = ps_sharding_replicated ();
      g = sp_reshard (c, sp_operand (c, in, 2), rep);
    }
  gboolean csharded = FALSE;
  gboolean cmask[best.iter->n_tile_dims > 0 ? best.iter->n_tile_dims : 1];
  memset (cmask, 0, sizeof cmask);
  for (int k = 0; k < ds.nc; k++)
    {
      int it = ds.nb + ds.nl + ds.nr + k;
      if (sp_shards (best.iter, it) > 1)
        cmask[it] = csharded = TRUE;
    }
  /* A windowed operand gathered along a contracting dim travels with its
   * padding zeroed, like a split contracting dim. */
  gboolean wcontract = wside >= 0
                       && (wside ? ds.rhs_iter : ds.lhs_iter)[wdim] >= ds.nb + ds.nl + ds.nr;
  if (csharded || wcontract)
    {
      /* Padding of a split contracting dim must add nothing. */
      gboolean lm[ds.rl], rm[ds.rr];
      int c0 = ds.nb + ds.nl + ds.nr, c1 = c0 + ds.nc;
      for (int d = 0; d < ds.rl; d++)
        lm[d] = ds.lhs_iter[d] >= c0 && ds.lhs_iter[d] < c1;
      for (int d = 0; d < ds.rr; d++)
        rm[d] = ds.rhs_iter[d] >= c0 && ds.rhs_iter[d] < c1;
      SpPVal lv = { l, wside == 0 ? lhs->sharding : (PsSharding *) best.lhs, lhs->full, FALSE };
      SpPVal rv = { r, wside == 1 ? rhs->sharding : (PsSharding *) best.rhs, rhs->full, FALSE };
      l = sp_mask_padding (c, &lv, lm, sp_const_zero (c, l->shape->etype));
      r = sp_mask_padding (c, &rv, rm, sp_const_zero (c, r->shape->etype));
    }
  /* When the contraction is split and the output splits a dim over
   * exactly the devices that split it, a reduce-scatter leaves each device
   * its own tile (rs_dim, in sharding rs). */
  int ng = 0, gs = 0, rs_dim = -1;
  g_autofree int64_t *groups = NULL;
  g_autoptr (PsSharding) rs = NULL;
  if (csharded)
    {
      groups = sp_groups (best.iter, cmask, &ng, &gs);
      if (in->opcode == PS_OP_RAGGED_DOT)
        goto reduced; /* an all-reduce: the reduce-scatter below maps dims as dot's */
      int citer = -1, nsplit = 0;
      for (int k = 0; k < ds.nc; k++)
        if (cmask[ds.nb + ds.nl + ds.nr + k])
          {
            citer = ds.nb + ds.nl + ds.nr + k;
            nsplit++;
          }
      for (int d = 0; d < ds.ro && nsplit == 1 && rs_dim < 0; d++)
        {
          if (sp_shards (best.iter, d) > 1)
            continue;
          int64_t src[ds.ro > 0 ? ds.ro : 1];
          for (int q = 0; q < ds.ro; q++)
            src[q] = q;
          src[d] = citer;
          PsSharding *cand = sp_sharding_remap (best.iter, ds.ro, src);
          if (cand && ps_sharding_equal_layout (cand, t))
            {
              rs = cand;
              rs_dim = d;
            }
          else if (cand)
            ps_sharding_free (cand);
        }
    }
reduced:;
  /* Windowed reduce-scatter: the partial results travel instead of an
   * operand; decided like the gather variant (the size compared is the
   * local partial result that would be reduce-scattered). */
  gboolean wrs = FALSE;
  if (rs_dim >= ds.nb && wside < 0 && gs > 1)
    {
      if (forced >= 0)
        wrs = (forced_raw >> 4) == 3;
      else if (c->m->opts.windowed_einsum_threshold_bytes >= 0)
        {
          g_autoptr (PsShape) ps = ps_sharding_tile_shape (best.partial, in->shape);
          wrs = ps_shape_bytes (ps) > c->m->opts.windowed_einsum_threshold_bytes;
        }
    }
  if (choices && !c->m->opts.replay_choices)
    g_hash_table_insert (choices, g_strdup (in->name),
                         GINT_TO_POINTER ((chosen + 1) | ((wrs ? 3 : wside + 1) << 4)));
  SpPVal *res = NULL;
  PsInstr *y = NULL;
  if (wrs)
    {
      PsInstr *z = windowed_reduce_scatter (c, in, &ds, rs_dim, gs, ng, groups, l, r);
      res = sp_pval_new (z, rs, in->shape);
    }
  else if (wside >= 0)
    y = windowed_dot (c, in, &ds, wside, wdim, wside ? rhs : lhs, l, r);
  else
    y = local_dot (c, in, &ds, l, r, g);
  if (!res && rs_dim >= 0)
    {
      int64_t k = gs, n_d = in->shape->dims[rs_dim];
      int64_t lo[ds.ro], hi[ds.ro];
      memset (lo, 0, sizeof lo);
      memset (hi, 0, sizeof hi);
      hi[rs_dim] = ps_ceil_div (n_d, k) * k - n_d;
      PsInstr *p = sp_pad (c, y, sp_const_zero (c, y->shape->etype), lo, hi);
      PsInstr *z = sp_reduce_scatter (c, p, SP_RED_SUM, rs_dim, ng, gs, groups);
      res = sp_pval_new (z, rs, in->shape);
    }
  else if (!res && csharded)
    y = sp_all_reduce (c, y, SP_RED_SUM, ng, gs, groups);
  if (!res)
    res = sp_pval_new (y, best.partial, in->shape);
  plan_clear (&best);
  return res;
}

/* Dot partitioning (GSPMD section 4.3, "einsum").
 *
 * A dot iterates over batch (B), lhs-free (L), rhs-free (R) and contracting
 * (C) dims. A sharding of that iteration space says which block of it each
 * device computes: the lhs needs its B, L, C block, the rhs its B, R, C
 * block, and the local dot gives an output tile that still has to be summed
 * over the devices that split C (all-reduce, or reduce-scatter when the
 * output shards a dim over exactly those devices). Candidates come from the
 * output's sharding and from each operand's; the one whose reshards and
 * reduction move the fewest bytes wins, so a dot whose operands already fit
 * needs no communication but the reduction. */
#include "config.h"

#include <string.h>

#include "partitioner/spmd_private.h"

typedef struct {
  int nb, nl, nr, nc, ni;
  int rl, rr, ro;
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
  ds->rl = rl;
  ds->rr = rr;
  ds->nb = dd->lhs_batch.n;
  ds->nc = dd->lhs_contracting.n;
  ds->nl = rl - ds->nb - ds->nc;
  ds->nr = rr - ds->nb - ds->nc;
  ds->ni = ds->nb + ds->nl + ds->nr + ds->nc;
  ds->ro = ds->nb + ds->nl + ds->nr;
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
    if (!ps_ints_contains (&dd->rhs_batch, d) && !ps_ints_contains (&dd->rhs_contracting, d))
      ds->rhs_iter[d] = q++;
  for (int d = 0; d < ds->ro; d++)
    ds->out_iter[d] = d;
  for (int d = 0; d < rl; d++)
    ds->iter_lhs[ds->lhs_iter[d]] = d;
  for (int d = 0; d < rr; d++)
    ds->iter_rhs[ds->rhs_iter[d]] = d;
  for (int d = 0; d < ds->ro; d++)
    ds->iter_out[d] = d;
  return TRUE;
}

typedef struct {
  PsSharding *iter, *lhs, *rhs, *partial;
  double cost;
} DotPlan;

static void
plan_clear (DotPlan *p)
{
  if (p->iter)
    ps_sharding_free (p->iter);
  if (p->lhs)
    ps_sharding_free (p->lhs);
  if (p->rhs)
    ps_sharding_free (p->rhs);
  if (p->partial)
    ps_sharding_free (p->partial);
  memset (p, 0, sizeof *p);
}

static gboolean
plan_make (SpComp *c, const PsInstr *in, const DotSpace *ds, PsSharding *iter, DotPlan *p)
{
  memset (p, 0, sizeof *p);
  if (!iter)
    return FALSE;
  p->iter = iter;
  p->lhs = sp_sharding_remap (iter, ds->rl, ds->lhs_iter);
  p->rhs = sp_sharding_remap (iter, ds->rr, ds->rhs_iter);
  p->partial = sp_sharding_remap (iter, ds->ro, ds->out_iter);
  if (!p->lhs || !p->rhs || !p->partial)
    {
      plan_clear (p);
      return FALSE;
    }
  PsPVal *lhs = sp_operand (c, in, 0), *rhs = sp_operand (c, in, 1);
  SpModule *m = c->m;
  p->cost = sp_reshard_cost (m, lhs->full, lhs->sharding, p->lhs)
            + sp_reshard_cost (m, rhs->full, rhs->sharding, p->rhs)
            + sp_reshard_cost (m, in->shape, p->partial, sp_sharding_of (in));
  int64_t csh = 1;
  for (int k = 0; k < ds->nc; k++)
    csh *= sp_shards (iter, ds->nb + ds->nl + ds->nr + k);
  if (csh > 1)
    {
      g_autoptr (SpShape) ls = ps_sharding_tile_shape (p->partial, in->shape);
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

PsPVal *
sp_handle_dot (SpComp *c, const PsInstr *in)
{
  PsPVal *lhs = sp_operand (c, in, 0), *rhs = sp_operand (c, in, 1);
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
  const int64_t *maps[3] = { ds.iter_out, ds.iter_lhs, ds.iter_rhs };
  GHashTable *choices = c->m->opts.choices;
  int forced = -1, chosen = -1;
  if (choices && c->m->opts.replay_choices)
    forced = GPOINTER_TO_INT (g_hash_table_lookup (choices, in->name)) - 1;
  for (int k = 0; k < 3; k++)
    {
      if (!srcs[k] || (forced >= 0 && k != forced))
        continue;
      PsSharding *iter = sp_sharding_remap (srcs[k], ds.ni, maps[k]);
      DotPlan p;
      if (!plan_make (c, in, &ds, iter, &p))
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
  if (choices && !c->m->opts.replay_choices)
    g_hash_table_insert (choices, g_strdup (in->name), GINT_TO_POINTER (chosen + 1));
  PsInstr *l = sp_reshard (c, lhs, best.lhs);
  PsInstr *r = sp_reshard (c, rhs, best.rhs);
  gboolean csharded = FALSE;
  gboolean cmask[best.iter->n_tile_dims > 0 ? best.iter->n_tile_dims : 1];
  memset (cmask, 0, sizeof cmask);
  for (int k = 0; k < ds.nc; k++)
    {
      int it = ds.nb + ds.nl + ds.nr + k;
      if (sp_shards (best.iter, it) > 1)
        cmask[it] = csharded = TRUE;
    }
  if (csharded)
    {
      /* Padding of a split contracting dim must add nothing. */
      gboolean lm[ds.rl], rm[ds.rr];
      for (int d = 0; d < ds.rl; d++)
        lm[d] = ds.lhs_iter[d] >= ds.nb + ds.nl + ds.nr;
      for (int d = 0; d < ds.rr; d++)
        rm[d] = ds.rhs_iter[d] >= ds.nb + ds.nl + ds.nr;
      PsPVal lv = { l, best.lhs, lhs->full }, rv = { r, best.rhs, rhs->full };
      l = sp_mask_padding (c, &lv, lm, sp_const_zero (c, l->shape->etype));
      r = sp_mask_padding (c, &rv, rm, sp_const_zero (c, r->shape->etype));
    }
  int64_t odims[ds.ro > 0 ? ds.ro : 1];
  for (int d = 0; d < ds.ro; d++)
    {
      int64_t ld = ds.iter_lhs[d], rd = ds.iter_rhs[d];
      odims[d] = ld >= 0 ? l->shape->dims[ld] : r->shape->dims[rd];
    }
  PsInstr *ops[2] = { l, r };
  PsInstr *y = sp_clone_with (c, in, sp_shape (in->shape->etype, ds.ro, odims), 2, ops);
  PsPVal *res = NULL;
  if (csharded)
    {
      int ng, gs;
      g_autofree int64_t *groups = sp_groups (best.iter, cmask, &ng, &gs);
      /* When the output splits a dim over exactly the devices that split
       * the contraction, a reduce-scatter leaves each its own tile. */
      int citer = -1, nsplit = 0;
      for (int k = 0; k < ds.nc; k++)
        if (cmask[ds.nb + ds.nl + ds.nr + k])
          {
            citer = ds.nb + ds.nl + ds.nr + k;
            nsplit++;
          }
      for (int d = 0; d < ds.ro && nsplit == 1 && !res; d++)
        {
          if (sp_shards (best.iter, d) > 1)
            continue;
          int64_t src[ds.ro > 0 ? ds.ro : 1];
          for (int q = 0; q < ds.ro; q++)
            src[q] = q;
          src[d] = citer;
          g_autoptr (PsSharding) rs = sp_sharding_remap (best.iter, ds.ro, src);
          if (!rs || !ps_sharding_equal_layout (rs, t))
            continue;
          int64_t k = gs, n_d = in->shape->dims[d];
          int64_t lo[ds.ro], hi[ds.ro];
          memset (lo, 0, sizeof lo);
          memset (hi, 0, sizeof hi);
          hi[d] = (n_d + k - 1) / k * k - n_d;
          PsInstr *p = sp_pad (c, y, sp_const_zero (c, y->shape->etype), lo, hi);
          PsInstr *z = sp_reduce_scatter (c, p, SP_RED_SUM, d, ng, gs, groups);
          res = sp_pval_new (z, rs, in->shape);
        }
      if (!res)
        y = sp_all_reduce (c, y, SP_RED_SUM, ng, gs, groups);
    }
  if (!res)
    res = sp_pval_new (y, best.partial, in->shape);
  plan_clear (&best);
  return res;
}

/* Gather and scatter rules of the propagation pass: operand pass-through
 * dims (offset/window dims as large as the operand), index pass-through dims
 * (batch dims of the indices) and index-parallel dims (indices built from an
 * iota, or explicit batching dims), as XLA's hlo_sharding_util defines them. */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/propagate/propagate_private.h"

typedef struct {
  int n;
  int64_t operand[PP_MAX_DIMS], indices[PP_MAX_DIMS], output[PP_MAX_DIMS];
} Dims;

static gboolean
spatial (const PsInstr *i)
{
  return i && i->sharding && pp_is_spatially_partitioned (i->sharding);
}

static gboolean
in (const PsInts *a, int64_t v)
{
  return ps_ints_contains (a, v);
}

/* Output (or update) dims of indices dims: batch dims of the result in
 * order, skipping offset/window dims and the index vector dim. */
static void
fill_output_dims (Dims *d, int64_t index_vector_dim, const PsInts *offset_dims)
{
  int64_t max_idx = -1;
  for (int k = 0; k < d->n; k++)
    max_idx = MAX (max_idx, d->indices[k]);
  int64_t map[PP_MAX_DIMS * 2];
  for (int k = 0; k < PP_MAX_DIMS * 2; k++)
    map[k] = -1;
  for (int64_t id = 0, od = 0; id <= max_idx && id < PP_MAX_DIMS * 2; id++, od++)
    {
      if (id == index_vector_dim)
        id++;
      while (in (offset_dims, od))
        od++;
      if (id < PP_MAX_DIMS * 2)
        map[id] = od;
    }
  for (int k = 0; k < d->n; k++)
    d->output[k] = map[d->indices[k]];
}

/* Dimension along which an index operand counts up like an iota, or -1. */
static int64_t
iota_dim (const PsInstr *x)
{
  if (x->opcode == PS_OP_IOTA)
    return x->iota_dimension;
  if (x->shape->etype != PS_S32)
    return -1;
  if (x->opcode == PS_OP_CONSTANT && x->literal && x->literal->etype == PS_S32)
    {
      int r = x->shape->rank;
      gboolean is_iota[PP_MAX_DIMS];
      for (int k = 0; k < r; k++)
        is_iota[k] = TRUE;
      int64_t idx[PP_MAX_DIMS] = { 0 };
      const int32_t *v = x->literal->data;
      for (int64_t e = 0; e < x->literal->n; e++)
        {
          for (int k = 0; k < r; k++)
            if (v[e] != idx[k])
              is_iota[k] = FALSE;
          ps_index_next (r, x->shape->dims, idx);
        }
      for (int k = 0; k < r; k++)
        if (is_iota[k] && x->shape->dims[k] > 1)
          return k;
      return -1;
    }
  if (x->opcode == PS_OP_BROADCAST)
    {
      int64_t d = iota_dim (x->operands[0]);
      if (d >= 0 && d < x->dimensions.n)
        return x->dimensions.v[d];
      return -1;
    }
  /* A loop-invariant tuple element of a while body (or a conditional
   * branch argument) is an iota if what the caller passes in is. */
  if (x->opcode == PS_OP_GET_TUPLE_ELEMENT && x->operands[0]->opcode == PS_OP_PARAMETER
      && !x->parent->is_entry)
    {
      PsComputation *comp = x->parent;
      PsModule *m = comp->parent;
      int64_t idx = x->tuple_index;
      for (guint ck = 0; m && ck < m->computations->len; ck++)
        {
          PsComputation *cc = g_ptr_array_index (m->computations, ck);
          for (guint k = 0; k < cc->instrs->len; k++)
            {
              PsInstr *caller = g_ptr_array_index (cc->instrs, k);
              if (caller->opcode == PS_OP_WHILE && caller->n_called >= 2
                  && caller->called[1] == comp && caller->operands[0]->opcode == PS_OP_TUPLE)
                {
                  PsInstr *root = comp->root;
                  if (root && root->opcode == PS_OP_TUPLE && idx < root->n_operands
                      && root->operands[idx] == x && idx < caller->operands[0]->n_operands)
                    return iota_dim (caller->operands[0]->operands[idx]);
                  return -1;
                }
              if (caller->opcode == PS_OP_CONDITIONAL)
                for (int b = 0; b < caller->n_called; b++)
                  if (caller->called[b] == comp && b + 1 < caller->n_operands)
                    {
                      PsInstr *arg = caller->operands[b + 1];
                      if (arg->opcode == PS_OP_TUPLE && idx < arg->n_operands)
                        return iota_dim (arg->operands[idx]);
                      return -1;
                    }
            }
        }
    }
  return -1;
}

static gboolean
parallel_dims (const PsInstr *operand, const PsInstr *indices, const int64_t *slice_sizes,
               int64_t ivd, const PsInts *index_map, const PsInts *indices_batching,
               const PsInts *offset_dims, Dims *out)
{
  memset (out, 0, sizeof *out);
  int nmap = index_map->n;
  if (nmap > PP_MAX_DIMS)
    return FALSE;
  int64_t par[PP_MAX_DIMS];
  for (int k = 0; k < nmap; k++)
    par[k] = -1;
  const PsInstr *x = indices;
  while (x->opcode == PS_OP_COPY)
    x = x->operands[0];
  if (x->opcode != PS_OP_CONCATENATE)
    x = indices;
  if (x->opcode == PS_OP_CONCATENATE && x->dimensions.n > 0 && x->dimensions.v[0] == ivd)
    {
      int done = 0;
      for (int k = 0; k < x->n_operands; k++)
        {
          const PsInstr *op = x->operands[k];
          int64_t cnt = op->shape->rank > ivd ? op->shape->dims[ivd] : 1;
          int64_t d = iota_dim (op);
          if (d >= 0 && d != ivd)
            for (int j = 0; j < cnt && done + j < nmap; j++)
              par[done + j] = d;
          done += (int) cnt;
        }
    }
  else
    {
      int64_t d = iota_dim (indices);
      if (d >= 0 && d != ivd)
        {
          int64_t cnt = indices->shape->rank > ivd ? indices->shape->dims[ivd] : 1;
          for (int j = 0; j < cnt && j < nmap; j++)
            par[j] = d;
        }
    }
  for (int k = 0; k < nmap; k++)
    {
      int64_t ip = par[k], opd = index_map->v[k];
      if (ip < 0)
        continue;
      for (int j = 0; j < out->n; j++)
        if (out->indices[j] == ip)
          return FALSE;
      if (slice_sizes[opd] == 1 && !in (indices_batching, ip))
        {
          if (operand->shape->dims[opd] != x->shape->dims[ip])
            return FALSE;
          out->indices[out->n] = ip;
          out->operand[out->n] = opd;
          out->n++;
        }
    }
  if (out->n == 0)
    return FALSE;
  fill_output_dims (out, ivd, offset_dims);
  return TRUE;
}

static gboolean
gather_parallel (const PsInstr *g, Dims *out)
{
  return parallel_dims (g->operands[0], g->operands[1], g->gather.slice_sizes.v,
                        g->gather.index_vector_dim, &g->gather.start_index_map,
                        &g->gather.start_indices_batching_dims, &g->gather.offset_dims, out);
}

static void
scatter_slice_sizes (const PsInstr *s, int64_t *sizes)
{
  const PsInstr *op = s->operands[0];
  const PsInstr *upd = s->operands[s->n_operands - 1];
  int nw = 0;
  for (int k = 0; k < op->shape->rank; k++)
    {
      if (in (&s->scatter.inserted_window_dims, k) || in (&s->scatter.input_batching_dims, k))
        {
          sizes[k] = 1;
          continue;
        }
      sizes[k] = nw < s->scatter.update_window_dims.n
                     ? upd->shape->dims[s->scatter.update_window_dims.v[nw++]]
                     : 1;
    }
}

static int
scatter_n (const PsInstr *s)
{
  return (s->n_operands - 1) / 2;
}

static gboolean
scatter_parallel (const PsInstr *s, Dims *out)
{
  int64_t sizes[PP_MAX_DIMS];
  scatter_slice_sizes (s, sizes);
  int n = scatter_n (s);
  return parallel_dims (s->operands[0], s->operands[n], sizes, s->scatter.index_vector_dim,
                        &s->scatter.scatter_dims_to_operand_dims,
                        &s->scatter.scatter_indices_batching_dims,
                        &s->scatter.update_window_dims, out);
}

/* Operand dims passed through to offset (window) dims. */
static void
passthrough_dims (const PsShape *operand, const PsInts *collapsed, const PsInts *batching,
                  const PsInts *offset, const int64_t *slice, Dims *out)
{
  memset (out, 0, sizeof *out);
  int skipped = 0;
  for (int k = 0; k < operand->rank; k++)
    {
      if (in (collapsed, k) || in (batching, k))
        {
          skipped++;
          continue;
        }
      if (slice[k] != operand->dims[k])
        continue;
      if (k - skipped < offset->n)
        {
          out->operand[out->n] = k;
          out->output[out->n] = offset->v[k - skipped];
          out->n++;
        }
    }
}

/* Index dims and the output (update) dims they map to. */
static void
index_connected (int64_t indices_rank, int64_t ivd, int64_t out_rank, const PsInts *offset,
                 Dims *out)
{
  memset (out, 0, sizeof *out);
  for (int64_t od = 0, id = 0; od < out_rank; od++)
    {
      if (in (offset, od))
        continue;
      if (id == ivd)
        id++;
      if (id >= indices_rank)
        break;
      out->indices[out->n] = id;
      out->output[out->n] = od;
      out->n++;
      id++;
    }
}

static PsSharding *
nonmaximal (PsSharding *s)
{
  if (s && pp_is_tile_maximal (s))
    {
      ps_sharding_free (s);
      return NULL;
    }
  return s;
}

/* Merges two optional shardings the way GatherOperandShardingFromOutput
 * does: parallel first. Takes ownership of both. */
static PsSharding *
merge_pair (PsSharding *parallel, PsSharding *pass)
{
  if (!pass)
    return parallel;
  if (!parallel)
    return pass;
  if (pp_merge_sharding (parallel, &pass, TRUE))
    {
      ps_sharding_free (parallel);
      return pass;
    }
  if (pp_merge_sharding (pass, &parallel, TRUE))
    {
      ps_sharding_free (pass);
      return parallel;
    }
  ps_sharding_free (pass);
  return parallel;
}

gboolean
pp_infer_gather_from_operands (PpCtx *c, PsInstr *i, gboolean mc)
{
  gboolean changed = FALSE;
  const PsGatherDims *gd = &i->gather;
  const PsInstr *op = i->operands[0], *idx = i->operands[1];
  int orank = i->shape->rank;
  if (gd->operand_batching_dims.n > 0)
    {
      Dims b = { 0 };
      for (int k = 0; k < gd->operand_batching_dims.n && k < gd->start_indices_batching_dims.n; k++)
        {
          b.operand[b.n] = gd->operand_batching_dims.v[k];
          b.indices[b.n] = gd->start_indices_batching_dims.v[k];
          b.n++;
        }
      fill_output_dims (&b, gd->index_vector_dim, &gd->offset_dims);
      if (spatial (op))
        changed |= pp_maybe_improve (pp_along_dims (op->sharding, b.n, b.operand, b.output, orank),
                                     i, mc, FALSE);
      if (spatial (idx))
        changed |= pp_maybe_improve (pp_along_dims (idx->sharding, b.n, b.indices, b.output, orank),
                                     i, mc, FALSE);
    }
  if (spatial (idx))
    {
      Dims d;
      index_connected (idx->shape->rank, gd->index_vector_dim, orank, &gd->offset_dims, &d);
      changed |= pp_maybe_improve (pp_along_dims (idx->sharding, d.n, d.indices, d.output, orank),
                                   i, mc, FALSE);
    }
  if (c->is_spmd)
    {
      Dims p;
      gboolean has_par = gather_parallel (i, &p);
      if (has_par)
        {
          if (spatial (op))
            changed |= pp_maybe_improve (pp_along_dims (op->sharding, p.n, p.operand, p.output,
                                                        orank), i, mc, FALSE);
          if (spatial (idx))
            changed |= pp_maybe_improve (pp_along_dims (idx->sharding, p.n, p.indices, p.output,
                                                        orank), i, mc, FALSE);
        }
      if (spatial (op))
        {
          PsSharding *filtered = has_par ? pp_partially_replicate_on_dims (op->sharding, p.n,
                                                                           p.operand)
                                         : ps_sharding_share (op->sharding);
          if (pp_is_tiled (filtered))
            {
              Dims t;
              passthrough_dims (op->shape, &gd->collapsed_slice_dims, &gd->operand_batching_dims,
                                &gd->offset_dims, gd->slice_sizes.v, &t);
              PsSharding *r = nonmaximal (pp_along_dims (filtered, t.n, t.operand, t.output, orank));
              if (r)
                changed |= pp_maybe_improve (r, i, mc, FALSE);
            }
          ps_sharding_free (filtered);
        }
    }
  return changed;
}

gboolean
pp_infer_scatter_from_operands (PpCtx *c, PsInstr *i, gboolean mc)
{
  gboolean changed = FALSE;
  const PsScatterDims *sd = &i->scatter;
  int n = scatter_n (i);
  const PsInstr *idx = i->operands[n];
  const PsShape *oshape = i->operands[0]->shape;
  int orank = oshape->rank;
  int urank = i->operands[n + 1]->shape->rank;
  if (sd->input_batching_dims.n > 0)
    {
      Dims b = { 0 };
      for (int k = 0; k < sd->input_batching_dims.n && k < sd->scatter_indices_batching_dims.n; k++)
        {
          b.operand[b.n] = sd->input_batching_dims.v[k];
          b.indices[b.n] = sd->scatter_indices_batching_dims.v[k];
          b.n++;
        }
      fill_output_dims (&b, sd->index_vector_dim, &sd->update_window_dims);
      for (int k = 0; k < n; k++)
        {
          const PsInstr *op = i->operands[k], *up = i->operands[n + 1 + k];
          if (spatial (op))
            changed |= pp_maybe_improve_sub_ (pp_along_dims (op->sharding, b.n, b.operand,
                                                             b.operand, orank), i, k, mc);
          if (spatial (up))
            changed |= pp_maybe_improve_sub_ (pp_along_dims (up->sharding, b.n, b.output,
                                                             b.operand, orank), i, k, mc);
        }
      if (spatial (idx))
        for (int k = 0; k < n; k++)
          changed |= pp_maybe_improve_sub_ (pp_along_dims (idx->sharding, b.n, b.indices,
                                                           b.operand, orank), i, k, mc);
    }
  if (!c->is_spmd)
    {
      for (int k = 0; k < n; k++)
        changed |= pp_maybe_improve_sub_ (ps_sharding_replicated (), i, k, mc);
      return changed;
    }
  for (int k = 0; k < n; k++)
    if (spatial (i->operands[k]))
      changed |= pp_maybe_improve_sub_ (ps_sharding_share (i->operands[k]->sharding), i, k, mc);
  gboolean any_upd = FALSE;
  for (int k = 0; k < n; k++)
    any_upd |= spatial (i->operands[n + 1 + k]);
  if (!spatial (idx) && !any_upd)
    return changed;
  Dims p;
  if (scatter_parallel (i, &p))
    {
      for (int k = 0; k < n; k++)
        if (spatial (i->operands[k]))
          changed |= pp_maybe_improve_sub_ (pp_along_dims (i->operands[k]->sharding, p.n,
                                                           p.operand, p.operand, orank), i, k, mc);
      if (spatial (idx))
        for (int k = 0; k < n; k++)
          changed |= pp_maybe_improve_sub_ (pp_along_dims (idx->sharding, p.n, p.indices,
                                                           p.operand, orank), i, k, mc);
      for (int k = 0; k < n; k++)
        {
          const PsInstr *up = i->operands[n + 1 + k];
          if (spatial (up))
            changed |= pp_maybe_improve_sub_ (pp_along_dims (up->sharding, p.n, p.output,
                                                             p.operand, orank), i, k, mc);
        }
    }
  int64_t sizes[PP_MAX_DIMS];
  scatter_slice_sizes (i, sizes);
  Dims t;
  passthrough_dims (oshape, &sd->inserted_window_dims, &sd->input_batching_dims,
                    &sd->update_window_dims, sizes, &t);
  for (int k = 0; k < n; k++)
    {
      const PsInstr *up = i->operands[n + 1 + k];
      if (!spatial (up))
        continue;
      PsSharding *r = nonmaximal (pp_along_dims (up->sharding, t.n, t.output, t.operand, orank));
      if (r)
        changed |= pp_maybe_improve_sub_ (r, i, k, mc);
    }
  (void) urank;
  return changed;
}

PsSharding *
pp_gather_operand_from_user (PpCtx *c, const PsInstr *i, const PsInstr *user)
{
  const PsGatherDims *gd = &user->gather;
  const PsSharding *us = user->sharding;
  if (pp_is_tile_maximal (us) || pp_is_manual (us))
    return ps_sharding_share (us);
  int orank = user->shape->rank;
  if (i == user->operands[1])
    {
      Dims d;
      index_connected (i->shape->rank, gd->index_vector_dim, orank, &gd->offset_dims, &d);
      return pp_along_dims (us, d.n, d.output, d.indices, i->shape->rank);
    }
  if (!c->is_spmd || i != user->operands[0])
    return NULL;
  Dims par = { 0 };
  if (gd->operand_batching_dims.n > 0)
    {
      for (int k = 0; k < gd->operand_batching_dims.n && k < gd->start_indices_batching_dims.n; k++)
        {
          par.operand[par.n] = gd->operand_batching_dims.v[k];
          par.indices[par.n] = gd->start_indices_batching_dims.v[k];
          par.n++;
        }
      fill_output_dims (&par, gd->index_vector_dim, &gd->offset_dims);
    }
  Dims imp;
  if (gather_parallel (user, &imp))
    for (int k = 0; k < imp.n && par.n < PP_MAX_DIMS; k++)
      {
        par.operand[par.n] = imp.operand[k];
        par.indices[par.n] = imp.indices[k];
        par.output[par.n] = imp.output[k];
        par.n++;
      }
  PsSharding *parallel = par.n > 0 ? pp_along_dims (us, par.n, par.output, par.operand,
                                                    i->shape->rank)
                                   : NULL;
  Dims t;
  passthrough_dims (i->shape, &gd->collapsed_slice_dims, &gd->operand_batching_dims,
                    &gd->offset_dims, gd->slice_sizes.v, &t);
  PsSharding *pass = nonmaximal (pp_along_dims (us, t.n, t.output, t.operand, i->shape->rank));
  return merge_pair (parallel, pass);
}

PsSharding *
pp_scatter_operand_from_user (PpCtx *c, const PsInstr *i, const PsInstr *user)
{
  int n = scatter_n (user);
  const PsScatterDims *sd = &user->scatter;
  const PsInstr *idx = user->operands[n];
  for (int k = 0; k < n; k++)
    if (i == user->operands[k])
      return pp_is_tuple (user->sharding) ? pp_sub_sharding (user->sharding, user->shape, k)
                                          : ps_sharding_share (user->sharding);
  int urank = user->operands[n + 1]->shape->rank;
  if (i == idx)
    {
      PsSharding *acc[PP_MAX_DIMS];
      int na = 0;
      for (int k = 0; k < n && na < PP_MAX_DIMS; k++)
        {
          const PsInstr *up = user->operands[n + 1 + k];
          if (!spatial (up))
            continue;
          if (pp_is_tile_maximal (up->sharding) || pp_is_manual (up->sharding))
            acc[na++] = ps_sharding_share (up->sharding);
          else
            {
              Dims d;
              index_connected (i->shape->rank, sd->index_vector_dim, urank,
                               &sd->update_window_dims, &d);
              acc[na++] = pp_along_dims (up->sharding, d.n, d.output, d.indices, i->shape->rank);
            }
        }
      if (na == 0)
        return NULL;
      PsSharding *r = pp_find_common (na, acc, NULL);
      for (int k = 0; k < na; k++)
        ps_sharding_free (acc[k]);
      return r;
    }
  int uidx = -1;
  for (int k = 0; k < n; k++)
    if (i == user->operands[n + 1 + k])
      uidx = k;
  if (uidx < 0)
    return NULL;
  PsSharding *from_idx;
  if (spatial (idx))
    {
      if (pp_is_tile_maximal (idx->sharding) || pp_is_manual (idx->sharding))
        from_idx = ps_sharding_share (idx->sharding);
      else
        {
          Dims d;
          index_connected (idx->shape->rank, sd->index_vector_dim, urank, &sd->update_window_dims,
                           &d);
          from_idx = pp_along_dims (idx->sharding, d.n, d.indices, d.output, urank);
        }
    }
  else
    from_idx = ps_sharding_replicated ();
  if (c->is_spmd)
    {
      PsSharding *os = pp_is_tuple (user->sharding)
                           ? pp_sub_sharding (user->sharding, user->shape, uidx)
                           : ps_sharding_share (user->sharding);
      PsSharding *from_out = NULL;
      if (pp_is_tile_maximal (os) || pp_is_manual (os))
        from_out = ps_sharding_share (os);
      else
        {
          Dims par = { 0 };
          if (sd->input_batching_dims.n > 0)
            {
              for (int k = 0; k < sd->input_batching_dims.n
                              && k < sd->scatter_indices_batching_dims.n; k++)
                {
                  par.operand[par.n] = sd->input_batching_dims.v[k];
                  par.indices[par.n] = sd->scatter_indices_batching_dims.v[k];
                  par.n++;
                }
              fill_output_dims (&par, sd->index_vector_dim, &sd->update_window_dims);
            }
          Dims imp;
          if (scatter_parallel (user, &imp))
            for (int k = 0; k < imp.n && par.n < PP_MAX_DIMS; k++)
              {
                par.operand[par.n] = imp.operand[k];
                par.indices[par.n] = imp.indices[k];
                par.output[par.n] = imp.output[k];
                par.n++;
              }
          PsSharding *parallel = par.n > 0 ? pp_along_dims (os, par.n, par.operand, par.output,
                                                            urank)
                                           : NULL;
          int64_t sizes[PP_MAX_DIMS];
          scatter_slice_sizes (user, sizes);
          Dims t;
          passthrough_dims (user->operands[0]->shape, &sd->inserted_window_dims,
                            &sd->input_batching_dims, &sd->update_window_dims, sizes, &t);
          PsSharding *pass = nonmaximal (pp_along_dims (os, t.n, t.operand, t.output, urank));
          from_out = merge_pair (parallel, pass);
        }
      ps_sharding_free (os);
      if (from_out)
        {
          if (!pp_is_manual (from_out) && !pp_is_tuple (from_idx) && !pp_is_manual (from_idx))
            {
              PsSharding *m = pp_merge_if_compatible (from_idx, pp_num_tiles (from_out) + 1,
                                                      from_out);
              if (m)
                {
                  ps_sharding_free (from_out);
                  from_out = m;
                }
            }
          if (!pp_is_tile_maximal (from_out))
            {
              ps_sharding_free (from_idx);
              return from_out;
            }
          ps_sharding_free (from_out);
        }
    }
  if (!pp_is_tile_maximal (from_idx))
    return from_idx;
  ps_sharding_free (from_idx);
  return NULL;
}

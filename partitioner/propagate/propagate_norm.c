/* Propagation through batch-norm-training, batch-norm-inference and
 * batch-norm-grad. XLA's ShardingPropagation does not pass shardings
 * through these ops (they are not in its SupportSpatialPartitioning list,
 * so they end up replicated); podsim partitions them (spmd_norm.c), so they
 * propagate like the elementwise ops they mostly are:
 *
 *  - the operand-shaped values (operand, grad_output, the normalized result
 *    and grad_operand) share one sharding;
 *  - the per-feature values (scale, offset, mean, variance, grad_scale,
 *    grad_offset) take that sharding's split of the feature dim, every other
 *    split becoming replication (hlo_sharding_util's
 *    PartiallyReplicateTiledShardingOnAllDimsExcept, then the feature dim as
 *    the only data dim).
 *
 * Splitting the feature dim needs no communication; splitting any other
 * dim makes the partitioner combine per-feature statistics across the
 * devices of that split. */
#include "config.h"

#include "partitioner/propagate/propagate_private.h"

static gboolean
operand_shaped (PsOpcode op, int k)
{
  return k == 0 || (op == PS_OP_BATCH_NORM_GRAD && k == 4);
}

/* The rank-1 sharding of the feature dim of `s` (an operand-shaped
 * sharding of an operand with `feature` as its feature dim). */
static PsSharding *
feature_sharding (const PsSharding *s, int64_t feature)
{
  int64_t tgt = 0;
  return pp_along_dims (s, 1, &feature, &tgt, 1);
}

gboolean
pp_infer_batch_norm_from_operands (PpCtx *c, PsInstr *i, gboolean may_combine, gboolean aggressive)
{
  (void) c;
  /* The more specific of the operand-shaped operands. */
  const PsInstr *best = NULL;
  for (int k = 0; k < i->n_operands; k++)
    {
      const PsInstr *op = i->operands[k];
      if (!operand_shaped (i->opcode, k) || !op->sharding || pp_is_tuple (op->sharding)
          || !pp_is_spatially_partitioned (op->sharding))
        continue;
      if (!best || pp_is_more_specific (op->sharding, best->sharding))
        best = op;
    }
  if (!best)
    return FALSE;
  if (i->opcode == PS_OP_BATCH_NORM_INFERENCE)
    return pp_maybe_improve (ps_sharding_share (best->sharding), i, may_combine, aggressive);
  PsSharding *e[3];
  e[0] = ps_sharding_share (best->sharding);
  e[1] = feature_sharding (best->sharding, i->feature_index);
  if (!e[1])
    {
      ps_sharding_free (e[0]);
      return FALSE;
    }
  e[2] = ps_sharding_share (e[1]);
  return pp_maybe_improve (ps_sharding_tuple (3, e), i, may_combine, aggressive);
}

PsSharding *
pp_batch_norm_operand_from_user (const PsInstr *i, const PsInstr *user)
{
  int k = pp_operand_index (user, i);
  if (k < 0)
    return NULL;
  const PsSharding *us = user->sharding;
  PsSharding *lead = NULL;
  if (ps_shape_is_tuple (user->shape))
    lead = pp_sub_sharding (us, user->shape, 0);
  else if (!pp_is_tuple (us))
    lead = ps_sharding_share (us);
  if (!lead)
    return NULL;
  if (operand_shaped (user->opcode, k))
    return lead;
  PsSharding *r = feature_sharding (lead, user->feature_index);
  ps_sharding_free (lead);
  return r;
}

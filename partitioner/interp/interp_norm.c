/* Batch normalization in the interpreter: batch-norm-training,
 * batch-norm-inference and batch-norm-grad with XLA's semantics (operation
 * semantics of BatchNormTraining/Inference/Grad): per feature c of the
 * operand's feature_index dim, over the N elements of all other dims,
 *
 *   training:  mean = sum(x) / N, var = sum((x - mean)^2) / N,
 *              y = (x - mean) / sqrt(var + eps) * scale + offset
 *   inference: y as above with the given mean and variance
 *   grad:      sigma = sqrt(var + eps), with the given mean and variance,
 *              grad_offset = sum(dy), grad_scale = sum(dy * (x - mean)) / sigma,
 *              grad_x = scale / sigma * (dy - grad_offset / N
 *                                        - (x - mean) / sigma * grad_scale / N)
 *
 * Everything is computed in double and rounded once to the result type (a
 * partitioned program that sums in pieces then agrees within verify.h's
 * tolerance). */
#include "config.h"

#include <math.h>

#include "partitioner/interp/interp_private.h"

gboolean
ip_is_norm_op (PsOpcode op)
{
  return op == PS_OP_BATCH_NORM_TRAINING || op == PS_OP_BATCH_NORM_INFERENCE
         || op == PS_OP_BATCH_NORM_GRAD;
}

/* The operand's layout around the feature dim: element i has feature
 * (i / inner) % nf. */
typedef struct {
  int64_t nf, inner, count;   /* features, elements after the feature dim, N per feature */
} FeatureLayout;

static gboolean
layout_of (const PsInstr *ins, const PsValue *x, FeatureLayout *l, GError **error)
{
  const PsShape *s = x->shape;
  if (!x->f && x->n > 0)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "needs a floating-point operand");
      return FALSE;
    }
  if (ins->feature_index < 0 || ins->feature_index >= s->rank)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "feature_index %" G_GINT64_FORMAT
               " is not a dim of the operand", ins->feature_index);
      return FALSE;
    }
  l->nf = s->dims[ins->feature_index];
  l->inner = 1;
  for (int d = (int) ins->feature_index + 1; d < s->rank; d++)
    l->inner *= s->dims[d];
  l->count = l->nf > 0 ? x->n / l->nf : 0;
  return TRUE;
}

static inline int64_t
feature_of (const FeatureLayout *l, int64_t i)
{
  return (i / l->inner) % l->nf;
}

/* Checks that operands [first, last] are rank-1 float arrays of nf elements. */
static gboolean
per_feature_ok (const PsInstr *ins, PsValue **ops, int first, int last, int64_t nf, GError **error)
{
  for (int k = first; k <= last; k++)
    if (!ops[k]->f || ops[k]->shape->rank != 1 || ops[k]->n != nf)
      {
        ip_fail (error, PS_ERROR_INVALID, ins, "operand %d must hold one value per feature (%"
                 G_GINT64_FORMAT ")", k, nf);
        return FALSE;
      }
  return TRUE;
}

static PsValue *
op_training (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *x = ops[0];
  FeatureLayout l;
  if (!layout_of (ins, x, &l, error) || !per_feature_ok (ins, ops, 1, 2, l.nf, error)
      || !ip_charge (ctx, ins, 4 * x->n, error))
    return NULL;
  PsValue *out = ps_value_new (ins->shape);
  if (out->shape->etype != PS_TUPLE || out->n_elems != 3 || out->elems[0]->n != x->n)
    {
      ps_value_free (out);
      ip_fail (error, PS_ERROR_INVALID, ins, "needs a (operand, mean, variance) result");
      return NULL;
    }
  double *mean = g_new0 (double, MAX (1, l.nf)), *var = g_new0 (double, MAX (1, l.nf));
  for (int64_t i = 0; i < x->n; i++)
    mean[feature_of (&l, i)] += x->f[i];
  for (int64_t c = 0; c < l.nf; c++)
    mean[c] = l.count > 0 ? mean[c] / (double) l.count : NAN;
  for (int64_t i = 0; i < x->n; i++)
    {
      double d = x->f[i] - mean[feature_of (&l, i)];
      var[feature_of (&l, i)] += d * d;
    }
  for (int64_t c = 0; c < l.nf; c++)
    var[c] = l.count > 0 ? var[c] / (double) l.count : NAN;
  PsElemType t = x->shape->etype;
  PsValue *y = out->elems[0], *m = out->elems[1], *v = out->elems[2];
  for (int64_t i = 0; i < x->n; i++)
    {
      int64_t c = feature_of (&l, i);
      double n = (x->f[i] - mean[c]) / sqrt (var[c] + (double) ins->epsilon);
      y->f[i] = ps_etype_round (t, n * ops[1]->f[c] + ops[2]->f[c]);
    }
  for (int64_t c = 0; c < l.nf; c++)
    {
      m->f[c] = ps_etype_round (t, mean[c]);
      v->f[c] = ps_etype_round (t, var[c]);
    }
  g_free (mean);
  g_free (var);
  return out;
}

static PsValue *
op_inference (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *x = ops[0];
  FeatureLayout l;
  if (!layout_of (ins, x, &l, error) || !per_feature_ok (ins, ops, 1, 4, l.nf, error)
      || !ip_charge (ctx, ins, 2 * x->n, error))
    return NULL;
  PsValue *y = ps_value_new (ins->shape);
  if (!y->f || y->n != x->n)
    {
      ps_value_free (y);
      ip_fail (error, PS_ERROR_INVALID, ins, "needs a result of the operand's shape");
      return NULL;
    }
  const double *scale = ops[1]->f, *offset = ops[2]->f, *mean = ops[3]->f, *var = ops[4]->f;
  for (int64_t i = 0; i < x->n; i++)
    {
      int64_t c = feature_of (&l, i);
      double n = (x->f[i] - mean[c]) / sqrt (var[c] + (double) ins->epsilon);
      y->f[i] = ps_etype_round (y->shape->etype, n * scale[c] + offset[c]);
    }
  return y;
}

static PsValue *
op_grad (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *x = ops[0], *dy = ops[4];
  FeatureLayout l;
  if (!layout_of (ins, x, &l, error) || !per_feature_ok (ins, ops, 1, 3, l.nf, error)
      || !ip_charge (ctx, ins, 4 * x->n, error))
    return NULL;
  PsValue *out = ps_value_new (ins->shape);
  if (dy->n != x->n || !dy->f || out->shape->etype != PS_TUPLE || out->n_elems != 3
      || out->elems[0]->n != x->n)
    {
      ps_value_free (out);
      ip_fail (error, PS_ERROR_INVALID, ins,
               "needs grad_output of the operand's shape and a (grad_operand, grad_scale, grad_offset) result");
      return NULL;
    }
  const double *scale = ops[1]->f, *mean = ops[2]->f, *var = ops[3]->f;
  double *sum_dy = g_new0 (double, MAX (1, l.nf)), *sum_dyx = g_new0 (double, MAX (1, l.nf));
  double *sigma = g_new0 (double, MAX (1, l.nf));
  for (int64_t c = 0; c < l.nf; c++)
    sigma[c] = sqrt (var[c] + (double) ins->epsilon);
  for (int64_t i = 0; i < x->n; i++)
    {
      int64_t c = feature_of (&l, i);
      sum_dy[c] += dy->f[i];
      sum_dyx[c] += dy->f[i] * (x->f[i] - mean[c]);
    }
  PsElemType t = x->shape->etype;
  PsValue *gx = out->elems[0], *gs = out->elems[1], *go = out->elems[2];
  double n = (double) l.count;
  for (int64_t i = 0; i < x->n; i++)
    {
      int64_t c = feature_of (&l, i);
      double g_scale = sum_dyx[c] / sigma[c];
      double xhat = (x->f[i] - mean[c]) / sigma[c];
      gx->f[i] = ps_etype_round (t, scale[c] / sigma[c] * (dy->f[i] - sum_dy[c] / n - xhat * g_scale / n));
    }
  for (int64_t c = 0; c < l.nf; c++)
    {
      gs->f[c] = ps_etype_round (t, sum_dyx[c] / sigma[c]);
      go->f[c] = ps_etype_round (t, sum_dy[c]);
    }
  g_free (sum_dy);
  g_free (sum_dyx);
  g_free (sigma);
  return out;
}

PsValue *
ip_norm_op (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  int want = ins->opcode == PS_OP_BATCH_NORM_TRAINING ? 3 : 5;
  if (ins->n_operands != want)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "takes %d operands", want);
      return NULL;
    }
  switch (ins->opcode)
    {
    case PS_OP_BATCH_NORM_TRAINING: return op_training (ctx, ins, ops, error);
    case PS_OP_BATCH_NORM_INFERENCE: return op_inference (ctx, ins, ops, error);
    default: return op_grad (ctx, ins, ops, error);
    }
}

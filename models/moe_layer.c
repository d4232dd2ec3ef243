/* The GShard MoE block: see moe_layer.h. */
#include "config.h"

#include "models/moe_layer.h"

#include <math.h>

#include "models/layers.h"
#include "partitioner/ir/sharding.h"

const char *const ps_moe_layout_names[] = { "experts-x", "experts-xy", "experts-x-hidden-y", NULL };

void
ps_moe_layout_config (PsMoeLayout layout, int64_t n_devices, const int64_t *devices, PsMoeConfig *cfg)
{
  cfg->shard_axis = 0;
  cfg->n_devices = layout == PS_MOE_LAYOUT_EXPERTS_XY ? n_devices : 0;
  cfg->devices = layout == PS_MOE_LAYOUT_EXPERTS_XY ? devices : NULL;
  cfg->split_hidden = layout == PS_MOE_LAYOUT_EXPERTS_X_HIDDEN_Y;
  cfg->hidden_axis = 1;
}

void
ps_moe_layout_plan (PsMoeLayout layout, const char *hidden, PsShardingPlan *plan)
{
  ps_sharding_plan_split (plan, PS_WEIGHTS, "e", layout == PS_MOE_LAYOUT_EXPERTS_XY ? PS_AXIS_ALL : 0);
  if (layout == PS_MOE_LAYOUT_EXPERTS_X_HIDDEN_Y)
    ps_sharding_plan_split (plan, PS_WEIGHTS, hidden, 1);
}

gboolean
ps_moe_layout_check (const PsParamStore *params, PsMoeLayout layout, int64_t experts, int64_t groups,
                     int64_t ffn_dim, const int64_t *mesh, GError **error)
{
  const gboolean xy = layout == PS_MOE_LAYOUT_EXPERTS_XY;
  const int64_t by = xy ? mesh[0] * mesh[1] : mesh[0];
  const char *over = xy ? "the device count" : "mesh axis 0";
  return ps_param_check_divides (params, experts, "experts", "--experts", by, over, error)
         && ps_param_check_divides (params, groups, "groups", "--groups", by, over, error)
         && (layout != PS_MOE_LAYOUT_EXPERTS_X_HIDDEN_Y
             || ps_param_check_divides (params, ffn_dim, "ffn_dim", "--ffn-dim", mesh[1], "mesh axis 1", error));
}

int64_t
ps_moe_capacity (int64_t group_size, int64_t experts, double capacity_factor)
{
  g_return_val_if_fail (group_size > 0 && experts > 0 && capacity_factor > 0, 1);
  double c = ceil (capacity_factor * (double) group_size / (double) experts - 1e-9);
  /* Bounded before the conversion (a double past INT64_MAX does not
   * convert); the model's check refuses any capacity this large. */
  return c < 1 ? 1 : c > 0x1p62 ? INT64_C (1) << 62 : (int64_t) c;
}

/* x broadcast into like's dims, operand dim i landing on dims[i]. */
static PsInstr *
bcast (PsBuilder *b, PsInstr *x, const PsInstr *like, const int64_t *dims)
{
  if (x == NULL || like == NULL)
    return NULL;
  return ps_build_broadcast (b, x, like->shape->rank, like->shape->dims, dims);
}

/* 0/1 of `pred` in the gating type ft. */
static PsInstr *
as_ft (PsBuilder *b, PsInstr *pred, PsElemType ft)
{
  return ps_build_convert (b, pred, ft);
}

/* Index of the largest element along the last dim of x[G, S, E] (ties: the
 * lowest index, as tf.argmax), as a one-hot mask [G, S, E] of x's type. */
static PsInstr *
argmax_mask (PsBuilder *b, PsInstr *x, PsInstr *iota_e)
{
  static const int64_t last = 2, gs[2] = { 0, 1 };
  if (x == NULL)
    return NULL;
  PsInstr *mx = ps_build_reduce_max (b, x, 1, &last);
  PsInstr *is_max = ps_build_compare (b, PS_CMP_EQ, x, bcast (b, mx, x, gs));
  int64_t E = x->shape->dims[2];
  PsInstr *none = ps_build_full (b, PS_S32, 3, x->shape->dims, (double) E);
  PsInstr *cand = ps_build_select (b, is_max, iota_e, none);
  PsInstr *init = ps_build_scalar_int (b, PS_S32, E);
  PsComputation *min = ps_builder_reducer (b, PS_OP_MINIMUM, PS_S32);
  PsInstr *idx = ps_build_reduce (b, cand, init, 1, &last, min);
  return as_ft (b, ps_build_compare (b, PS_CMP_EQ, iota_e, bcast (b, idx, x, gs)), x->shape->etype);
}

gboolean
ps_moe_gating (PsBuilder *b, const PsMoeConfig *cfg, PsInstr *logits, PsElemType act,
               PsMoeGating *out)
{
  g_return_val_if_fail (cfg != NULL && out != NULL, FALSE);
  out->combine = out->dispatch = out->aux_loss = NULL;
  if (logits == NULL || !ps_builder_ok (b))
    return FALSE;
  const PsElemType ft = logits->shape->etype;
  g_return_val_if_fail (logits->shape->rank == 3 && (ft == PS_F32 || ft == PS_F64), FALSE);
  const int64_t G = logits->shape->dims[0], S = logits->shape->dims[1], E = logits->shape->dims[2];
  const int64_t C = cfg->capacity;
  g_return_val_if_fail (E == cfg->experts && C >= 1 && cfg->top_k >= 1 && cfg->top_k <= E, FALSE);
  static const int64_t last = 2, gs[2] = { 0, 1 }, ge[2] = { 0, 2 }, s_dim = 1;
  ps_builder_set_op_name (b, PS_MOE_OP_GATING);

  /* Softmax over experts. */
  PsInstr *mx = ps_build_reduce_max (b, logits, 1, &last);
  PsInstr *ex = ps_build_unary (b, PS_OP_EXP, ps_build_sub (b, logits, bcast (b, mx, logits, gs)));
  PsInstr *raw = ps_build_div (b, ex, bcast (b, ps_build_reduce_sum (b, ex, 1, &last), logits, gs));

  /* The strictly upper triangular [S, S] matrix: tri[s, t] = (s < t), so
   * einsum("gse,st->gte", mask, tri) is the exclusive cumulative sum. */
  int64_t ss[2] = { S, S };
  PsInstr *row = ps_build_iota (b, PS_S32, 2, ss, 0);
  PsInstr *col = ps_build_iota (b, PS_S32, 2, ss, 1);
  PsInstr *tri = as_ft (b, ps_build_compare (b, PS_CMP_LT, row, col), ft);
  PsInstr *iota_e = ps_build_iota (b, PS_S32, 3, logits->shape->dims, 2);
  int64_t gsc[3] = { G, S, C };
  PsInstr *iota_c = ps_build_iota (b, PS_S32, 3, gsc, 2);

  PsInstr *chosen = NULL;            /* experts picked so far, 0/1 [G,S,E] */
  PsInstr *used = NULL;              /* slots filled so far [G,E] */
  PsInstr *first_mask = NULL;
  PsInstr **gate = g_new0 (PsInstr *, cfg->top_k);
  PsInstr **keep = g_new0 (PsInstr *, cfg->top_k);
  PsInstr **slot = g_new0 (PsInstr *, cfg->top_k);
  for (int k = 0; k < cfg->top_k && ps_builder_ok (b); k++)
    {
      PsInstr *cand = raw;
      if (chosen)
        cand = ps_build_mul (b, raw, ps_build_sub (b, ps_build_full (b, ft, 3, logits->shape->dims, 1.0),
                                                   chosen));
      PsInstr *mask = argmax_mask (b, cand, iota_e);
      if (k == 0)
        first_mask = mask;
      chosen = chosen ? ps_build_add (b, chosen, mask) : mask;
      gate[k] = ps_build_reduce_sum (b, ps_build_mul (b, cand, mask), 1, &last);
      /* Position in the expert's buffer; over capacity is dropped. */
      PsInstr *pos = ps_build_einsum (b, "gse,st->gte", mask, tri);
      if (used)
        pos = ps_build_add (b, pos, bcast (b, used, pos, ge));
      PsInstr *room = ps_build_compare (b, PS_CMP_LT, pos, ps_build_scalar (b, ft, (double) C));
      keep[k] = ps_build_mul (b, mask, as_ft (b, room, ft));
      PsInstr *count = ps_build_reduce_sum (b, keep[k], 1, &s_dim);
      used = used ? ps_build_add (b, used, count) : count;
      PsInstr *pos_tok = ps_build_reduce_sum (b, ps_build_mul (b, pos, keep[k]), 1, &last);
      PsInstr *pos_i = ps_build_convert (b, pos_tok, PS_S32);
      slot[k] = as_ft (b, ps_build_compare (b, PS_CMP_EQ, iota_c, bcast (b, pos_i, iota_c, gs)), ft);
    }
  /* Gates normalised over the chosen experts (GShard's g1 / (g1 + g2)),
   * then zeroed where the token was dropped. */
  PsInstr *denom = NULL;
  if (cfg->top_k > 1)
    {
      int64_t gsd[2] = { G, S };
      denom = ps_build_full (b, ft, 2, gsd, 1e-9);
      for (int k = 0; k < cfg->top_k; k++)
        denom = ps_build_add (b, denom, gate[k]);
    }
  PsInstr *combine = NULL;
  for (int k = 0; k < cfg->top_k; k++)
    {
      if (!ps_builder_ok (b))
        break;
      PsInstr *g = denom ? ps_build_div (b, gate[k], denom) : gate[k];
      PsInstr *w = ps_build_mul (b, bcast (b, g, keep[k], gs), keep[k]);
      /* Lingvo's einsum("gse,gsc->gsec") has no contracting dim: XLA's
       * algebraic simplifier turns such a dot into a multiply of
       * broadcasts (dot strength reduction), and so do we. */
      int64_t gsec[4] = { G, S, E, C };
      static const int64_t to_gse[3] = { 0, 1, 2 }, to_gsc[3] = { 0, 1, 3 };
      PsInstr *wb = ps_build_broadcast (b, w, 4, gsec, to_gse);
      PsInstr *part = ps_build_mul (b, wb, ps_build_broadcast (b, slot[k], 4, gsec, to_gsc));
      combine = combine ? ps_build_add (b, combine, part) : part;
    }
  g_free (gate);
  g_free (keep);
  g_free (slot);
  PsInstr *dispatch = ps_build_compare (b, PS_CMP_NE, combine, ps_build_scalar (b, ft, 0.0));
  dispatch = ps_build_convert (b, dispatch, act);

  /* Load balance: fraction of first choices per expert times mean gate. */
  PsInstr *inv_s = ps_build_scalar (b, ft, 1.0 / (double) S);
  PsInstr *density = ps_build_mul (b, ps_build_reduce_sum (b, first_mask, 1, &s_dim), inv_s);
  PsInstr *proxy = ps_build_mul (b, ps_build_reduce_sum (b, raw, 1, &s_dim), inv_s);
  static const int64_t both[2] = { 0, 1 };
  PsInstr *aux = ps_build_reduce_sum (b, ps_build_mul (b, density, proxy), 2, both);
  aux = ps_build_mul (b, aux, ps_build_scalar (b, ft, (double) E / (double) G));
  ps_builder_set_op_name (b, NULL);
  if (!ps_builder_ok (b))
    return FALSE;
  out->combine = combine;
  out->dispatch = dispatch;
  out->aux_loss = aux;
  return TRUE;
}

/* Annotates x with the layout's G/E split on dim `dim` (and, with
 * split_hidden, its hidden axis on dim `hidden`; -1: none). */
static PsInstr *
split_dims (PsBuilder *b, const PsMoeConfig *cfg, PsInstr *x, int dim, int hidden)
{
  if (cfg->shard_axis < 0 || x == NULL)
    return x;
  int64_t map[8];
  for (int i = 0; i < x->shape->rank; i++)
    map[i] = i == dim ? (cfg->n_devices > 0 ? 0 : cfg->shard_axis)
             : i == hidden && cfg->split_hidden ? cfg->hidden_axis : -1;
  if (cfg->n_devices == 0)
    return ps_build_mesh_split (b, x, map);
  GError *err = NULL;
  g_autoptr (PsSharding) s = ps_sharding_mesh_split (x->shape->rank, 1, &cfg->n_devices, cfg->devices, map, &err);
  /* The layout comes from a checked config: an error is a bug here. */
  g_assert_no_error (err);
  return ps_build_sharding_annotation (b, x, s);
}

/* The G or E split alone on dim `dim`. */
static PsInstr *
split_on (PsBuilder *b, const PsMoeConfig *cfg, PsInstr *x, int dim)
{
  return split_dims (b, cfg, x, dim, -1);
}

const char *const ps_expert_ffn_names[] = { "relu", "gelu", NULL };

/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), ps_gelu's formula on the
 * builder (scalars broadcast). */
static PsInstr *
expert_gelu (PsBuilder *b, PsInstr *x)
{
  PsElemType t = x->shape->etype;
  PsInstr *x3 = ps_build_mul (b, ps_build_mul (b, x, x), x);
  PsInstr *in = ps_build_add (b, x, ps_build_mul (b, ps_build_scalar (b, t, 0.044715), x3));
  PsInstr *th = ps_build_unary (b, PS_OP_TANH, ps_build_mul (b, ps_build_scalar (b, t, sqrt (2.0 / G_PI)), in));
  PsInstr *h = ps_build_add (b, ps_build_scalar (b, t, 1.0), th);
  return ps_build_mul (b, ps_build_mul (b, ps_build_scalar (b, t, 0.5), x), h);
}

PsInstr *
ps_moe_layer (PsBuilder *b, const PsMoeConfig *cfg, PsInstr *x, PsInstr *wg, PsInstr *wi,
              PsInstr *wo, PsInstr **aux_loss)
{
  g_return_val_if_fail (cfg != NULL && aux_loss != NULL, NULL);
  *aux_loss = NULL;
  if (x == NULL || wg == NULL || wi == NULL || wo == NULL || !ps_builder_ok (b))
    return NULL;
  PsElemType act = x->shape->etype;
  ps_builder_set_op_name (b, PS_MOE_OP_GATING);
  x = split_on (b, cfg, x, 0);
  PsInstr *logits = ps_build_einsum (b, "gsm,me->gse", x, wg);
  logits = ps_build_convert (b, logits, act == PS_F64 ? PS_F64 : PS_F32);
  PsMoeGating gt;
  if (!ps_moe_gating (b, cfg, logits, act, &gt))
    return NULL;

  /* Lingvo splits the dispatch and combine tensors on G too (gsec_split),
   * so that the einsum runs where the tokens are and only its result
   * moves. */
  PsInstr *dispatch = split_on (b, cfg, gt.dispatch, 0);
  PsInstr *combine = split_on (b, cfg, ps_build_convert (b, gt.combine, act), 0);
  ps_builder_set_op_name (b, PS_MOE_OP_DISPATCH);
  PsInstr *xin = ps_build_einsum (b, "gsec,gsm->egcm", dispatch, x);
  xin = split_on (b, cfg, xin, 0);
  ps_builder_set_op_name (b, PS_MOE_OP_EXPERTS);
  PsInstr *h = ps_build_einsum (b, "egcm,emh->egch", xin, wi);
  h = split_dims (b, cfg, cfg->gelu ? expert_gelu (b, h) : ps_build_max (b, h, ps_build_scalar (b, act, 0.0)), 0, 3);
  /* Lingvo's eah/eam splits: the experts' output stays on E, then moves
   * back to the groups (gecm_split); annotating both ends fixes the
   * backward layout too (the gradients carry the same annotations). */
  PsInstr *xout = split_on (b, cfg, ps_build_einsum (b, "egch,ehm->egcm", h, wo), 0);
  ps_builder_set_op_name (b, PS_MOE_OP_COMBINE);
  static const int64_t to_gecm[4] = { 1, 0, 2, 3 };
  xout = split_on (b, cfg, ps_build_transpose (b, xout, to_gecm), 0);
  PsInstr *y = ps_build_einsum (b, "gsec,gecm->gsm", combine, xout);
  y = split_on (b, cfg, y, 0);
  ps_builder_set_op_name (b, NULL);
  if (!ps_builder_ok (b))
    return NULL;
  *aux_loss = gt.aux_loss;
  return y;
}

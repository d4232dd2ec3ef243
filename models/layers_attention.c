/* The layer library's attention blocks: see layers.h. Split from layers.c
 * along the seam between attention (its weights, contexts: positions and
 * masks, the block) and everything else; the emission-order rule of
 * layers.c holds here too. */
#include "config.h"

#include <math.h>

#include "models/layers.h"
#include "models/layers_private.h"

/* ---- self-attention ---------------------------------------------------------------------- */

void
ps_attention_weights (PsNet *net, const char *prefix, int64_t model_dim, int64_t heads,
                      int64_t head_dim, int rel_buckets, PsAttention *out)
{
  ps_attention_weights_kv (net, prefix, model_dim, heads, head_dim, heads, rel_buckets, PS_NORM_LAYER, out);
}

void
ps_attention_weights_kv (PsNet *net, const char *prefix, int64_t model_dim, int64_t heads,
                         int64_t head_dim, int64_t kv_heads, int rel_buckets, PsNormKind norm,
                         PsAttention *out)
{
  g_return_if_fail (kv_heads >= 1 && heads % kv_heads == 0);
  out->norm = norm;
  out->ln = ps_layer_norm_weight (net, prefix, "ln1", model_dim);
  if (kv_heads == heads)
    {
      int64_t mnd[3] = { model_dim, heads, head_dim }, kn[2] = { rel_buckets, heads };
      out->wq = ly_weight (net, prefix, "wq", "mnd", 3, mnd);
      out->wk = ly_weight (net, prefix, "wk", "mnd", 3, mnd);
      out->wv = ly_weight (net, prefix, "wv", "mnd", 3, mnd);
      out->wo = ly_weight (net, prefix, "wo", "mnd", 3, mnd);
      out->rel_bias = rel_buckets > 0 ? ly_weight (net, prefix, "rel_bias", "kn", 2, kn) : NULL;
      return;
    }
  /* Grouped-query attention: the query heads as [kv heads n, group q],
   * so every einsum keeps n (the letter the plans split) and no reshape
   * of a split dim is needed; K and V have only the n kv heads. */
  const int64_t g = heads / kv_heads;
  int64_t mnqd[4] = { model_dim, kv_heads, g, head_dim }, mnd[3] = { model_dim, kv_heads, head_dim };
  int64_t knq[3] = { rel_buckets, kv_heads, g };
  out->wq = ly_weight (net, prefix, "wq", "mnqd", 4, mnqd);
  out->wk = ly_weight (net, prefix, "wk", "mnd", 3, mnd);
  out->wv = ly_weight (net, prefix, "wv", "mnd", 3, mnd);
  out->wo = ly_weight (net, prefix, "wo", "mnqd", 4, mnqd);
  out->rel_bias = rel_buckets > 0 ? ly_weight (net, prefix, "rel_bias", "knq", 3, knq) : NULL;
}

PsHeadsSplit
ps_heads_split (int64_t heads, int64_t kv_heads, int64_t ways)
{
  if (kv_heads <= 0 || kv_heads == heads || ways <= 1 || kv_heads % ways == 0)
    return PS_HEADS_SPLIT_KV;
  return (heads / kv_heads) % ways == 0 ? PS_HEADS_SPLIT_GROUPS : PS_HEADS_SPLIT_NONE;
}

gboolean
ps_param_check_divides (const PsParamStore *params, int64_t v, const char *key, const char *opt, int64_t by,
                        const char *over, GError **error)
{
  if (by <= 1 || v % by == 0)
    return TRUE;
  return ps_param_fail (error, "%s = %" G_GINT64_FORMAT " is not divisible by %s (%" G_GINT64_FORMAT ")",
                        ps_param_store_label (params, key, opt), v, over, by);
}

gboolean
ps_heads_check_split (const PsParamStore *params, int64_t heads, int64_t kv_heads, int64_t ways,
                      const char *axis, GError **error)
{
  const char *hs = ps_param_store_label (params, "heads", "--heads");
  if (kv_heads <= 0 || kv_heads == heads)
    {
      if (ways > 0 && heads % ways != 0)
        return ps_param_fail (error, "%s = %" G_GINT64_FORMAT " is not divisible by %s (%" G_GINT64_FORMAT ")",
                              hs, heads, axis, ways);
      return TRUE;
    }
  if (ps_heads_split (heads, kv_heads, ways) != PS_HEADS_SPLIT_NONE)
    return TRUE;
  return ps_param_fail (error, "%s = %" G_GINT64_FORMAT " (groups of %" G_GINT64_FORMAT " of %s = %" G_GINT64_FORMAT
                        "): neither the kv heads nor the query heads of each split evenly over %s (%"
                        G_GINT64_FORMAT ")", ps_param_store_label (params, "kv_heads", "--kv-heads"), kv_heads,
                        heads / kv_heads, hs, heads, axis, ways);
}

void
ps_heads_plan (PsShardingPlan *plan, int mesh_rank, const int64_t *mesh_dims, int64_t heads, int64_t kv_heads)
{
  int axis = plan->axis[PS_WEIGHTS]['n' - 'a'];
  if (axis == PS_AXIS_NONE)
    return;
  int64_t ways = 1;
  for (int i = 0; i < mesh_rank; i++)
    if (axis == PS_AXIS_ALL || axis == i)
      ways *= mesh_dims[i];
  if (ps_heads_split (heads, kv_heads, ways) != PS_HEADS_SPLIT_GROUPS)
    return;
  plan->axis[PS_WEIGHTS]['n' - 'a'] = PS_AXIS_NONE;
  plan->axis[PS_WEIGHTS]['q' - 'a'] = (int8_t) axis;
}

/* The bucket of each (s, t) as s32 [s, t]. */
static PsInstr *
relative_buckets (PsNet *net, int64_t S, int buckets)
{
  int64_t st[2] = { S, S };
  PsInstr *qi = ly_iota (net, PS_S32, 2, st, 0);
  PsInstr *ki = ly_iota (net, PS_S32, 2, st, 1);
  PsInstr *dist = ly_bin (net, PS_OP_SUBTRACT, qi, ki);
  dist = ly_bin (net, PS_OP_MAXIMUM, dist, ly_full (net, dist->shape, 0));
  int exact = buckets / 2;
  PsInstr *df = ly_convert (net, dist, PS_F32);
  /* exact + log(n / exact) / log(128 / exact) * (buckets - exact) */
  PsInstr *exact_f = ly_full (net, df->shape, (double) exact);
  PsInstr *ratio = ly_bin (net, PS_OP_DIVIDE, ly_bin (net, PS_OP_MAXIMUM, df, ly_full (net, df->shape, 1.0)), exact_f);
  PsInstr *lg = ly_un (net, PS_OP_LOG, ratio);
  double k = (double) (buckets - exact) / log (128.0 / exact);
  PsInstr *scaled = ly_bin (net, PS_OP_MULTIPLY, lg, ly_full (net, df->shape, k));
  PsInstr *large = ly_bin (net, PS_OP_ADD, ly_full (net, df->shape, (double) exact), scaled);
  large = ly_un (net, PS_OP_FLOOR, large);
  large = ly_bin (net, PS_OP_MINIMUM, large, ly_full (net, large->shape, (double) (buckets - 1)));
  PsInstr *small = ly_compare (net, PS_CMP_LT, dist, ly_full (net, dist->shape, exact));
  return ly_select3 (net, small, dist, ly_convert (net, large, PS_S32));
}

PsInstr *
ps_relative_buckets_bidirectional (PsNet *net, int64_t S, int buckets)
{
  int64_t st[2] = { S, S };
  PsInstr *qi = ly_iota (net, PS_S32, 2, st, 0);
  PsInstr *ki = ly_iota (net, PS_S32, 2, st, 1);
  PsInstr *rel = ly_bin (net, PS_OP_SUBTRACT, ki, qi);
  int half = buckets / 2, exact = MAX (half / 2, 1);
  PsInstr *zero = ly_full (net, rel->shape, 0);
  PsInstr *after = ly_compare (net, PS_CMP_GT, rel, zero);
  PsInstr *n = ly_un (net, PS_OP_ABS, rel);
  PsInstr *nf = ly_convert (net, n, PS_F32);
  /* One freshly emitted operand per call: argument order is unspecified. */
  PsInstr *at_least_1 = ly_bin (net, PS_OP_MAXIMUM, nf, ly_full (net, nf->shape, 1.0));
  PsInstr *ratio = ly_bin (net, PS_OP_DIVIDE, at_least_1, ly_full (net, nf->shape, (double) exact));
  double k = (double) (half - exact) / log (128.0 / exact);
  PsInstr *lg = ly_un (net, PS_OP_LOG, ratio);
  PsInstr *large = ly_bin (net, PS_OP_MULTIPLY, lg, ly_full (net, nf->shape, k));
  large = ly_un (net, PS_OP_FLOOR, ly_bin (net, PS_OP_ADD, large, ly_full (net, nf->shape, (double) exact)));
  large = ly_bin (net, PS_OP_MINIMUM, large, ly_full (net, nf->shape, (double) (half - 1)));
  PsInstr *small = ly_compare (net, PS_CMP_LT, n, ly_full (net, n->shape, exact));
  PsInstr *b = ly_select3 (net, small, n, ly_convert (net, large, PS_S32));
  return ly_select3 (net, after, ly_bin (net, PS_OP_ADD, b, ly_full (net, b->shape, half)), b);
}

/* -1e9 where t > s, else 0, f32 [s, t]. */
static PsInstr *
causal_mask (PsNet *net, int64_t S)
{
  int64_t st[2] = { S, S };
  PsInstr *qi = ly_iota (net, PS_S32, 2, st, 0);
  PsInstr *ki = ly_iota (net, PS_S32, 2, st, 1);
  PsInstr *future = ly_compare (net, PS_CMP_GT, ki, qi);
  g_autoptr (PsShape) fs = ps_shape_new_array (PS_F32, 2, st);
  PsInstr *masked = ly_full (net, fs, -1e9);
  PsInstr *open = ly_full (net, fs, 0.0);
  return ly_select3 (net, future, masked, open);
}

void
ps_attention_context_causal (PsNet *net, int64_t seq_len, int rel_buckets, PsAttentionContext *out)
{
  PsBlockOptions o;
  ps_block_options_init (&o, rel_buckets, FALSE);
  ps_attention_context_causal_opts (net, seq_len, 0, &o, out);
}

/* Rotary position embedding (RoFormer, Su et al. 2021, eq. 34; GPT-J and
 * Llama use it on q and k): the pair (x_j, x_{j+r/2}) of a head rotated
 * by the angle pos * 10000^(-2j/r), j < r/2, where r is the rotated
 * width (all of d, or the first rotary_dim dims: partial rotary, as GPT-J
 * and GPT-NeoX write it; the dims from r on pass through: cos 1, sin 0).
 * The pairing (pairs) is the half-split one of GPT-NeoX and Llama's
 * Hugging Face port by default; with PS_ROTARY_ADJACENT it is GPT-J's
 * (mesh-transformer-jax layers.py rotate_every_two, kept in Hugging Face's
 * GPT-J port): dims (2k, 2k+1) rotate by the angle of pair k, so dim j's
 * frequency index is floor(j/2) and rotate_every_two(x) puts -x[2k+1] at
 * 2k and x[2k] at 2k+1. Same einsum and cost (the tables take a few other
 * elementwise ops, once a step), other weights (a fixed permutation of the
 * rotated dims). cos and sin [s, d] are computed from
 * iota; rotate_half(x) = concat(-x[r/2:r], x[:r/2], 0) is an einsum with
 * the signed permutation R [d, d] (from iota too), so it needs no slices
 * and partitions like every other einsum (d is never split). With r = d
 * the instructions are the full-width ones, unchanged. */
static void
rope_tables (PsNet *net, int64_t S, int64_t D, int64_t R, PsRotaryPairs pairs, PsAttentionContext *out)
{
  int64_t sd[2] = { S, D }, dd[2] = { D, D };
  const int64_t half = R / 2;
  const gboolean partial = R < D;
  PsInstr *pos = ly_iota (net, PS_F32, 2, sd, 0);
  PsInstr *j = ly_iota (net, PS_S32, 2, sd, 1);
  PsInstr *jj;
  if (pairs == PS_ROTARY_ADJACENT)
    {
      PsInstr *jf = ly_convert (net, j, PS_F32);
      jj = ly_un (net, PS_OP_FLOOR, ly_bin (net, PS_OP_MULTIPLY, jf, ly_full (net, jf->shape, 0.5)));
    }
  else
    {
      PsInstr *upper = ly_compare (net, PS_CMP_GE, j, ly_full (net, j->shape, (double) half));
      PsInstr *j_low = ly_bin (net, PS_OP_SUBTRACT, j, ly_full (net, j->shape, (double) half));
      jj = ly_convert (net, ly_select3 (net, upper, j_low, j), PS_F32);
    }
  /* 10000^(-2j/r) = exp(j * (-2 ln(10000) / r)) */
  PsInstr *expo = ly_bin (net, PS_OP_MULTIPLY, jj, ly_full (net, jj->shape, -2.0 * log (10000.0) / (double) R));
  PsInstr *angle = ly_bin (net, PS_OP_MULTIPLY, pos, ly_un (net, PS_OP_EXP, expo));
  if (partial)
    {
      PsInstr *rotated = ly_compare (net, PS_CMP_LT, j, ly_full (net, j->shape, (double) R));
      PsInstr *cosv = ly_un (net, PS_OP_COSINE, angle);
      cosv = ly_select3 (net, rotated, cosv, ly_full (net, cosv->shape, 1.0));
      out->rope_cos = ly_convert (net, cosv, net->act);
      PsInstr *sinv = ly_un (net, PS_OP_SINE, angle);
      sinv = ly_select3 (net, rotated, sinv, ly_full (net, sinv->shape, 0.0));
      out->rope_sin = ly_convert (net, sinv, net->act);
    }
  else
    {
      /* The order the full-width tables were always emitted in. */
      out->rope_cos = ly_convert (net, ly_un (net, PS_OP_COSINE, angle), net->act);
      out->rope_sin = ly_convert (net, ly_un (net, PS_OP_SINE, angle), net->act);
    }
  /* R[i, e]: -1 where i = e + r/2, +1 where i = e - r/2, both i and e
   * below r; adjacent pairs: -1 where i = e + 1 and e is even, +1 where
   * i = e - 1 and e is odd. */
  PsInstr *ri = ly_iota (net, PS_S32, 2, dd, 0);
  PsInstr *re = ly_iota (net, PS_S32, 2, dd, 1);
  PsInstr *diff = ly_bin (net, PS_OP_SUBTRACT, ri, re);
  const int64_t step = pairs == PS_ROTARY_ADJACENT ? 1 : half;
  PsInstr *neg = ly_compare (net, PS_CMP_EQ, diff, ly_full (net, diff->shape, (double) step));
  PsInstr *posi = ly_compare (net, PS_CMP_EQ, diff, ly_full (net, diff->shape, (double) -step));
  g_autoptr (PsShape) fs = ps_shape_new_array (PS_F32, 2, dd);
  PsInstr *m1 = ly_full (net, fs, -1.0), *p1 = ly_full (net, fs, 1.0), *z = ly_full (net, fs, 0.0);
  PsInstr *r;
  if (pairs == PS_ROTARY_ADJACENT)
    {
      PsInstr *ef = ly_convert (net, re, PS_F32);
      PsInstr *ehalf = ly_un (net, PS_OP_FLOOR, ly_bin (net, PS_OP_MULTIPLY, ef, ly_full (net, fs, 0.5)));
      PsInstr *parity = ly_bin (net, PS_OP_SUBTRACT, ef, ly_bin (net, PS_OP_MULTIPLY, ehalf, ly_full (net, fs, 2.0)));
      PsInstr *even = ly_compare (net, PS_CMP_EQ, parity, z);
      r = ly_select3 (net, neg, ly_select3 (net, even, m1, z), ly_select3 (net, posi, ly_select3 (net, even, z, p1), z));
    }
  else
    r = ly_select3 (net, neg, m1, ly_select3 (net, posi, p1, z));
  if (partial)
    {
      PsInstr *i_in = ly_compare (net, PS_CMP_LT, ri, ly_full (net, ri->shape, (double) R));
      PsInstr *e_in = ly_compare (net, PS_CMP_LT, re, ly_full (net, re->shape, (double) R));
      r = ly_select3 (net, i_in, ly_select3 (net, e_in, r, ly_full (net, fs, 0.0)), ly_full (net, fs, 0.0));
    }
  out->rope_rot = ly_convert (net, r, net->act);
}

void
ps_attention_context_causal_opts (PsNet *net, int64_t seq_len, int64_t head_dim, const PsBlockOptions *o,
                                  PsAttentionContext *out)
{
  out->rel_onehot = NULL;
  out->rope_cos = out->rope_sin = out->rope_rot = NULL;
  int buckets = o->position == PS_POSITION_RELATIVE ? o->rel_buckets : 0;
  if (buckets > 0)
    out->rel_onehot = ps_net_one_hot (net, relative_buckets (net, seq_len, buckets), buckets, net->act);
  out->mask = causal_mask (net, seq_len);
  if (o->position == PS_POSITION_ROPE)
    {
      const int64_t rd = o->rotary_dim > 0 ? o->rotary_dim : head_dim;
      g_return_if_fail (head_dim >= 2 && head_dim % 2 == 0 && rd % 2 == 0 && rd <= head_dim);
      rope_tables (net, seq_len, head_dim, rd, o->rotary_pairs, out);
    }
}

void
ps_attention_cast (PsNet *net, const PsAttention *w, PsAttention *out)
{
  out->norm = w->norm;
  out->ln = w->ln;
  out->wq = ly_convert (net, w->wq, net->act);
  out->wk = ly_convert (net, w->wk, net->act);
  out->wv = ly_convert (net, w->wv, net->act);
  out->wo = ly_convert (net, w->wo, net->act);
  out->rel_bias = w->rel_bias ? ly_convert (net, w->rel_bias, net->act) : NULL;
}

/* x [b, s, n, (q,) d] with rotary embedding: x cos + rotate_half(x) sin. */
static PsInstr *
rope (PsNet *net, const PsAttentionContext *ctx, PsInstr *x)
{
  const int r = x->shape->rank;
  int64_t sd[2] = { 1, r - 1 };
  PsInstr *xr = ps_net_einsum (net, r == 4 ? "bsnd,de->bsne" : "bsnqd,de->bsnqe", x, ctx->rope_rot);
  PsInstr *c = ly_bin (net, PS_OP_MULTIPLY, x, ly_bcast (net, ctx->rope_cos, x->shape, 2, sd));
  PsInstr *s = ly_bin (net, PS_OP_MULTIPLY, xr, ly_bcast (net, ctx->rope_sin, xr->shape, 2, sd));
  return ly_bin (net, PS_OP_ADD, c, s);
}

PsInstr *
ps_attention_core (PsNet *net, const PsAttention *w, const PsAttentionContext *ctx, PsInstr *h)
{
  return ps_attention_core_kv (net, w, ctx, h, h);
}

PsInstr *
ps_attention_core_kv (PsNet *net, const PsAttention *w, const PsAttentionContext *ctx, PsInstr *h, PsInstr *kv)
{
  /* Multi-head ("bsnd") or grouped-query ("bsnqd": n kv heads, q queries
   * per kv head); the einsums differ only by the q letter. */
  const gboolean gq = w->wq->shape->rank == 4;
  PsInstr *q = ps_net_einsum (net, gq ? "bsm,mnqd->bsnqd" : "bsm,mnd->bsnd", h, w->wq);
  /* Letters are local to an einsum: here s is kv's own length. */
  PsInstr *k = ps_net_einsum (net, "bsm,mnd->bsnd", kv, w->wk);
  PsInstr *v = ps_net_einsum (net, "bsm,mnd->bsnd", kv, w->wv);
  double head_dim = (double) w->wq->shape->dims[w->wq->shape->rank - 1];
  if (ctx->rope_rot)
    {
      q = rope (net, ctx, q);
      k = rope (net, ctx, k);
    }
  q = ly_bin (net, PS_OP_MULTIPLY, q, ly_full (net, q->shape, 1.0 / sqrt (head_dim)));
  PsInstr *logits = ps_net_einsum (net, gq ? "bsnqd,btnd->bnqst" : "bsnd,btnd->bnst", q, k);
  const int lr = logits->shape->rank;
  PsInstr *lf;
  if (w->rel_bias)
    {
      /* Relative position bias [n, (q,) s, t] from the bucket one-hot. */
      PsInstr *bias = ps_net_einsum (net, gq ? "stk,knq->nqst" : "stk,kn->nst", ctx->rel_onehot, w->rel_bias);
      int64_t nst[4] = { 1, 2, 3, 4 };
      lf = ly_convert (net, logits, PS_F32);
      PsInstr *bf = ly_convert (net, bias, PS_F32);
      lf = ly_bin (net, PS_OP_ADD, lf, ly_bcast (net, bf, lf->shape, lr - 1, nst));
    }
  else
    lf = ly_convert (net, logits, PS_F32);
  if (ctx->mask)
    {
      int64_t st[2] = { lr - 2, lr - 1 };
      lf = ly_bin (net, PS_OP_ADD, lf, ly_bcast (net, ctx->mask, lf->shape, 2, st));
    }
  PsInstr *p = ly_convert (net, ps_softmax (net, lf), net->act);
  PsInstr *c = ps_net_einsum (net, gq ? "bnqst,btnd->bsnqd" : "bnst,btnd->bsnd", p, v);
  return ps_net_einsum (net, gq ? "bsnqd,mnqd->bsm" : "bsnd,mnd->bsm", c, w->wo);
}

PsInstr *
ps_attention (PsNet *net, const PsAttention *w, const PsAttentionContext *ctx, PsInstr *x)
{
  PsInstr *h = ps_norm (net, w->norm, x, w->ln);
  PsInstr *out = ps_attention_core (net, w, ctx, h);
  return ly_bin (net, PS_OP_ADD, x, out);
}

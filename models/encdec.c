/* The encoder-decoder training step: see encdec.h. */
#include "config.h"

#include "models/encdec.h"

#include <string.h>

#include "models/moe_layer.h"
#include "models/net.h"
#include "partitioner/builder/autodiff.h"

void
ps_encdec_config_small (PsEncDecConfig *out)
{
  memset (out, 0, sizeof *out);
  out->enc_layers = out->dec_layers = 2;
  out->model_dim = 16;
  out->ffn_dim = 32;
  out->heads = 4;
  out->head_dim = 4;
  out->src_len = 8;
  out->tgt_len = 4;
  out->global_batch = 8;
  out->vocab = 64;
  out->rel_buckets = 8;
  out->position = PS_POSITION_RELATIVE;
  out->norm = PS_NORM_RMS;
  out->ffn = PS_FFN_GEGLU;
  out->untied_embeddings = TRUE;
  out->optimizer = PS_OPTIMIZER_ADAFACTOR;
  out->mesh[0] = 2;
  out->mesh[1] = 4;
  out->sharding = PS_SHARDING_2D;
  out->moe_every = 2;
  out->top_k = 2;
  out->expert_ffn = PS_FFN_RELU;
  out->capacity_factor = 2.0;
  out->aux_loss_weight = 0.01;
  out->microbatches = 1;
}

int64_t
ps_encdec_groups (const PsEncDecConfig *c)
{
  return c->groups > 0 ? c->groups : c->mesh[0] * c->mesh[1];
}

static gboolean
divides (const PsEncDecConfig *c, int64_t v, const char *key, const char *opt, int64_t by, const char *axis,
         GError **error)
{
  return ps_param_check_divides (c->params, v, key, opt, by, axis, error);
}

/* The MoE blocks' checks: top-k, capacity factor, and groups and experts
 * over mesh axis 0 (encdec.h), groups dividing each stack's tokens. */
static gboolean
check_moe (const PsEncDecConfig *c, GError **error)
{
  if (c->experts == 0)
    return TRUE;
  const char *e = ps_param_store_label (c->params, "experts", "--experts"), *g = ps_param_store_label (c->params, "groups", "--groups");
  if (c->moe_every < 1 || c->top_k < 1 || c->top_k > c->experts)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s and %s must be at least 1, and %s at most %s (%"
                   G_GINT64_FORMAT ")", ps_param_store_label (c->params, "moe_every", "--moe-every"), ps_param_store_label (c->params, "top_k", "--top-k"),
                   ps_param_store_label (c->params, "top_k", "--top-k"), e, c->experts);
      return FALSE;
    }
  if (!(c->capacity_factor > 0) || c->capacity_factor > 1e6)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be positive (got %g)",
                   ps_param_store_label (c->params, "capacity_factor", "--capacity-factor"), c->capacity_factor);
      return FALSE;
    }
  const int64_t G = ps_encdec_groups (c);
  if (!ps_moe_layout_check (c->params, c->moe_layout, c->experts, G, c->ffn_dim, c->mesh, error))
    return FALSE;
  const int64_t mb = c->global_batch / MAX (c->microbatches, 1);
  const int64_t tokens[2] = { mb * c->src_len, mb * c->tgt_len };
  for (int i = 0; i < 2; i++)
    if (tokens[i] % G != 0)
      {
        g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %" G_GINT64_FORMAT " does not divide the %"
                     G_GINT64_FORMAT " %s tokens of a microbatch", g, G, tokens[i], i == 0 ? "source" : "target");
        return FALSE;
      }
  return TRUE;
}

static gboolean check_split (const PsEncDecConfig *c, GError **error);

gboolean
ps_encdec_check (const PsEncDecConfig *c, GError **error)
{
  if (c->mesh[0] < 1 || c->mesh[1] < 1 || c->mesh[0] * c->mesh[1] > PS_MAX_DEVICES)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be 1 .. %d devices", ps_param_store_label (c->params, "mesh", "--mesh"),
                   PS_MAX_DEVICES);
      return FALSE;
    }
  if (c->rel_buckets == 1)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be 0 (none) or 2 .. 254 (got 1)",
                   ps_param_store_label (c->params, "rel_buckets", "--rel-buckets"));
      return FALSE;
    }
  if (c->kv_heads < 0 || c->kv_heads > c->heads || (c->kv_heads > 0 && c->heads % c->kv_heads != 0))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must divide %s (%" G_GINT64_FORMAT "), got %"
                   G_GINT64_FORMAT, ps_param_store_label (c->params, "kv_heads", "--kv-heads"), ps_param_store_label (c->params, "heads", "--heads"), c->heads,
                   c->kv_heads);
      return FALSE;
    }
  if (c->position == PS_POSITION_ROPE && c->head_dim % 2 != 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s rope needs an even %s (got %" G_GINT64_FORMAT ")",
                   ps_param_store_label (c->params, "position", "--position"), ps_param_store_label (c->params, "head_dim", "--head-dim"), c->head_dim);
      return FALSE;
    }
  if (!ps_block_check_rotary (c->params, c->position, c->head_dim, c->rotary_dim, c->rotary_pairs, error))
    return FALSE;
  const int M = MAX (c->microbatches, 1);
  if (c->global_batch % M != 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s = %" G_GINT64_FORMAT " is not divisible by %s (%d)",
                   ps_param_store_label (c->params, "global_batch", "--batch"), c->global_batch,
                   ps_param_store_label (c->params, "microbatches", "--microbatches"), M);
      return FALSE;
    }
  if (!check_moe (c, error) || !check_split (c, error))
    return FALSE;
  /* A microbatch's batch splits as the step's does. */
  const int64_t by = c->sharding == PS_SHARDING_DP || c->sharding == PS_SHARDING_FSDP ? c->mesh[0] * c->mesh[1]
                     : c->sharding == PS_SHARDING_1D || c->sharding == PS_SHARDING_NONE ? 1 : c->mesh[0];
  if (M > 1 && (c->global_batch / M) % by != 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "a microbatch (%s %" G_GINT64_FORMAT " / %s %d = %"
                   G_GINT64_FORMAT " sequences) is not divisible by the %" G_GINT64_FORMAT " devices its batch splits over",
                   ps_param_store_label (c->params, "global_batch", "--batch"), c->global_batch,
                   ps_param_store_label (c->params, "microbatches", "--microbatches"), M, c->global_batch / M, by);
      return FALSE;
    }
  return TRUE;
}

/* The sharding preset's divisibility (encdec.h). */
static gboolean
check_split (const PsEncDecConfig *c, GError **error)
{
  const int64_t all = c->mesh[0] * c->mesh[1], a0 = c->mesh[0], a1 = c->mesh[1];
  switch (c->sharding)
    {
    case PS_SHARDING_2D:
      return divides (c, c->global_batch, "global_batch", "--batch", a0, "mesh axis 0", error)
             && divides (c, c->model_dim, "model_dim", "--model-dim", a0, "mesh axis 0", error)
             && divides (c, c->model_dim, "model_dim", "--model-dim", a1, "mesh axis 1", error)
             && ps_heads_check_split (c->params, c->heads, c->kv_heads, a1, "mesh axis 1", error)
             && divides (c, c->ffn_dim, "ffn_dim", "--ffn-dim", a1, "mesh axis 1", error);
    case PS_SHARDING_MEGATRON_SP:
      if (!divides (c, c->src_len, "src_len", "--src-len", a1, "mesh axis 1", error)
          || !divides (c, c->tgt_len, "tgt_len", "--tgt-len", a1, "mesh axis 1", error))
        return FALSE;
      /* fall through */
    case PS_SHARDING_MEGATRON:
      return divides (c, c->global_batch, "global_batch", "--batch", a0, "mesh axis 0", error)
             && ps_heads_check_split (c->params, c->heads, c->kv_heads, a1, "mesh axis 1", error)
             && divides (c, c->ffn_dim, "ffn_dim", "--ffn-dim", a1, "mesh axis 1", error);
    case PS_SHARDING_1D:
      return ps_heads_check_split (c->params, c->heads, c->kv_heads, all, "the device count", error)
             && divides (c, c->ffn_dim, "ffn_dim", "--ffn-dim", all, "the device count", error);
    case PS_SHARDING_DP:
      return divides (c, c->global_batch, "global_batch", "--batch", all, "the device count", error);
    case PS_SHARDING_FSDP:
      return divides (c, c->global_batch, "global_batch", "--batch", all, "the device count", error)
             && divides (c, c->model_dim, "model_dim", "--model-dim", all, "the device count", error);
    case PS_SHARDING_NONE:
      return TRUE;
    }
  return TRUE;
}

/* An MoE FFN's weights (wg NULL: the layer's FFN is dense). */
typedef struct {
  PsInstr *ln, *wg, *wi, *wo;
} MoeFfn;

/* Layer l's MoE weights "<prefix>.moe_*", or none when l is dense. The
 * router's expert dim "r" is replicated; the experts' "e" is split by the
 * plan (ps_encdec_build); their k (M) and f (H) are never split. */
static void
moe_weights (PsNet *net, const PsEncDecConfig *c, int l, const char *prefix, MoeFfn *out)
{
  memset (out, 0, sizeof *out);
  if (c->experts == 0 || l % c->moe_every != c->moe_every - 1)
    return;
  ps_moe_ffn_weights (net, prefix, "moe_ln", c->model_dim, c->ffn_dim, c->experts, "ekf", "efk",
                      &out->ln, &out->wg, &out->wi, &out->wo);
}

/* x + moe(norm x) over the step's tokens in groups; the weighted
 * load-balancing loss is added to *aux. */
static PsInstr *
moe_ffn (PsNet *net, const PsEncDecConfig *c, const MoeFfn *w, PsInstr *x, PsInstr **aux)
{
  const int64_t B = x->shape->dims[0], S = x->shape->dims[1], M = x->shape->dims[2];
  const int64_t G = ps_encdec_groups (c);
  PsInstr *h = ps_norm (net, c->norm, x, w->ln);
  PsBuilder *b = ps_net_builder (net);
  int64_t gsm[3] = { G, B * S / G, M }, bsm[3] = { B, S, M };
  PsMoeConfig mc = { c->experts, ps_moe_capacity (B * S / G, c->experts, c->capacity_factor), c->top_k, 0 };
  ps_moe_layout_config (c->moe_layout, net->m->num_partitions, net->mesh_devices, &mc);
  mc.gelu = c->expert_ffn == PS_FFN_GELU;
  PsInstr *a = NULL;
  PsInstr *y = ps_moe_layer (b, &mc, ps_build_reshape (b, h, 3, gsm), ps_build_convert (b, w->wg, net->act),
                             ps_build_convert (b, w->wi, net->act), ps_build_convert (b, w->wo, net->act), &a);
  y = ps_build_reshape (b, y, 3, bsm);
  a = ps_build_mul (b, a, ps_build_scalar (b, PS_F32, c->aux_loss_weight));
  /* Shapes come from a checked config: a builder error is a bug here. */
  g_assert (ps_builder_ok (b));
  *aux = *aux ? ps_build_add (ps_net_builder (net), *aux, a) : a;
  return ps_build_add (ps_net_builder (net), x, y);
}

/* Encoder layer l: self-attention, then the dense or MoE FFN (its
 * load-balancing term added to *aux). */
static PsInstr *
encoder_layer (PsNet *net, const PsEncDecConfig *c, const PsTransformerLayer *L, const MoeFfn *moe,
               const PsAttentionContext *ctx, PsInstr *x, PsInstr **aux)
{
  if (!moe->wg)
    return ps_transformer_layer (net, L, x);
  ps_net_annotate (net, x, "bsm");
  PsAttention att;
  ps_attention_cast (net, &L->attention, &att);
  return moe_ffn (net, c, moe, ps_attention (net, &att, ctx, x), aux);
}

/* One decoder layer: causal self-attention, cross-attention to the
 * encoder's output, FFN (dense or MoE). */
typedef struct {
  PsAttention self, cross;
  PsFfn ffn;
  MoeFfn moe;
} DecoderLayer;

static PsInstr *
decoder_layer (PsNet *net, const PsEncDecConfig *cfg, const DecoderLayer *L, const PsAttentionContext *self_ctx,
               const PsAttentionContext *cross_ctx, PsInstr *y, PsInstr *enc, PsInstr **aux)
{
  ps_net_annotate (net, y, "bsm");
  PsAttention self, cross;
  PsFfn ffn;
  ps_attention_cast (net, &L->self, &self);
  ps_attention_cast (net, &L->cross, &cross);
  if (!L->moe.wg)
    ps_ffn_cast (net, &L->ffn, &ffn);
  y = ps_attention (net, &self, self_ctx, y);
  PsInstr *h = ps_norm (net, cross.norm, y, cross.ln);
  PsInstr *c = ps_attention_core_kv (net, &cross, cross_ctx, h, enc);
  y = ps_build_add (ps_net_builder (net), y, c);
  return L->moe.wg ? moe_ffn (net, cfg, &L->moe, y, aux) : ps_ffn (net, &ffn, y);
}

/* Trainable parameters of weights [from, to); with `active`, an expert
 * weight counts top_k / E of its size (the parameters a token meets). */
static double
count_params (const PsNet *net, const PsEncDecConfig *c, gboolean active, int from, int to)
{
  double n = 0;
  for (int i = from; i < to; i++)
    {
      const PsInstr *w = net->weights->pdata[i];
      double k = (double) ps_shape_elements (w->shape);
      if (active && (strstr (w->name, ".moe_wi") || strstr (w->name, ".moe_wo")))
        k *= (double) c->top_k / (double) c->experts;
      n += k;
    }
  return n;
}

/* The vector-Jacobian product of one part of the step (ys[0] its output
 * seeded with dy, ys[1] its load-balancing term or NULL, seeded with
 * aux_seed: the term is already weighted) with respect to its n_x inputs (*dxs) and
 * the weights w[0 .. n_w), whose gradients are accumulated in the net
 * (for owner[i] instead when owner is not NULL: w[i] is a copy of it).
 * ps_net_vjp_multi takes one input; a decoder layer has two (its own
 * stream and the encoder's output), so this calls autodiff itself. Every
 * weight here is a parameter or its copy (the layers cast them, no
 * ps_net_weight_view), so its gradient has the weight's type. */
static gboolean
part_vjp (PsNet *net, PsInstr *y, PsInstr *aux, PsInstr *dy, PsInstr *aux_seed, int n_x, PsInstr *const *xs,
          PsInstr **dxs, int n_w, PsInstr *const *w, PsInstr *const *owner, GError **error)
{
  PsInstr *ys[2] = { y, aux };
  PsInstr *dys[2] = { dy, aux_seed };
  g_autofree PsInstr **wrt = g_new (PsInstr *, n_x + n_w);
  for (int i = 0; i < n_x; i++)
    wrt[i] = xs[i];
  for (int i = 0; i < n_w; i++)
    wrt[n_x + i] = w[i];
  GPtrArray *g = ps_autodiff_vjp_multi (net->c, aux ? 2 : 1, ys, dys, n_x + n_w, wrt, error);
  if (g == NULL)
    return FALSE;
  for (int i = 0; i < n_x; i++)
    dxs[i] = g->pdata[i];
  for (int i = 0; i < n_w; i++)
    ps_net_add_grad (net, owner ? owner[i] : w[i], g->pdata[n_x + i]);
  g_ptr_array_free (g, TRUE);
  return TRUE;
}

/* part_vjp over the layer whose weights are [from, to) of the net's, and,
 * when `shared` (a weight every layer of the stack reads: T5's
 * relative-bias table) is not NULL, over the copy of it the rebuilt layer
 * read, its gradient going to `shared`. */
static gboolean
layer_vjp (PsNet *net, PsInstr *y, PsInstr *aux, PsInstr *dy, PsInstr *aux_seed, int n_x, PsInstr *const *xs,
           PsInstr **dxs, int from, int to, PsInstr *shared_copy, PsInstr *shared, GError **error)
{
  const int n = to - from;
  g_autofree PsInstr **w = g_new (PsInstr *, n + 1);
  g_autofree PsInstr **owner = g_new (PsInstr *, n + 1);
  memcpy (w, net->weights->pdata + from, sizeof (PsInstr *) * (gsize) n);
  memcpy (owner, w, sizeof (PsInstr *) * (gsize) n);
  w[n] = shared_copy;
  owner[n] = shared;
  return part_vjp (net, y, aux, dy, aux_seed, n_x, xs, dxs, n + (shared ? 1 : 0), w, owner, error);
}

/* A copy of a weight every layer of a stack reads, for one rebuilt layer:
 * autodiff's product is the total derivative, and the table reaches the
 * layer through the layers below too. NULL for none. */
static PsInstr *
shared_copy (PsNet *net, PsInstr *w)
{
  return w ? ps_build_unary (ps_net_builder (net), PS_OP_COPY, w) : NULL;
}

/* A relative-bias table "<name>" [buckets, heads] ("kn"), or [buckets,
 * kv heads, group] ("knq") with grouped-query attention, as
 * ps_attention_weights_kv makes a layer's. */
static PsInstr *
rel_bias_weight (PsNet *net, const char *name, int buckets, int64_t heads, int64_t kv)
{
  if (kv == heads)
    {
      int64_t kn[2] = { buckets, heads };
      return ps_net_weight (net, name, "kn", 2, kn);
    }
  int64_t knq[3] = { buckets, kv, heads / kv };
  return ps_net_weight (net, name, "knq", 3, knq);
}

/* a + b, where either may be NULL (no gradient yet). */
static PsInstr *
add_opt (PsNet *net, PsInstr *a, PsInstr *b)
{
  return a == NULL ? b : b == NULL ? a : ps_build_add (ps_net_builder (net), a, b);
}

/* What a microbatch's forward and backward read: the weights (and
 * layer l's weight range [enc_w[l], enc_w[l + 1]), dec_w the decoder's)
 * and the attention contexts. All borrowed. */
typedef struct {
  const PsEncDecConfig *cfg;
  PsInstr *emb, *softmax, *enc_ln, *dec_ln;
  PsInstr *enc_bias, *dec_bias;    /* shared relative-bias tables, or NULL */
  const PsTransformerLayer *enc;
  const MoeFfn *enc_moe;
  const DecoderLayer *dec;
  const int *enc_w, *dec_w;
  const PsAttentionContext *enc_ctx, *dec_ctx, *cross_ctx;
  int n_weights;
} EncDec;

/* Forward and backward of one microbatch (src, tgt, labels its part of
 * the batch; all of it with one microbatch). The loss is the mean over
 * microbatches (ps_net_add_loss), so every backward is seeded with
 * 1 / microbatches. The same in an unrolled step and in the microbatch
 * loop's body. */
static gboolean
microbatch (PsNet *net, const EncDec *md, PsInstr *src, PsInstr *tgt, PsInstr *labels, GError **error)
{
  const PsEncDecConfig *cfg = md->cfg;
  const int M = MAX (cfg->microbatches, 1);
  PsInstr *emb = md->emb, *softmax = md->softmax;
  /* Forward; xs and ys keep every layer's input (and the top). */
  g_autofree PsInstr **xs = g_new0 (PsInstr *, cfg->enc_layers + 1);
  g_autofree PsInstr **ys = g_new0 (PsInstr *, cfg->dec_layers + 1);
  PsInstr *aux = NULL;   /* every layer's load-balancing term, summed */
  xs[0] = ps_embed (net, src, ps_build_cast (ps_net_builder (net), emb, net->act));
  for (int l = 0; l < cfg->enc_layers; l++)
    xs[l + 1] = encoder_layer (net, cfg, &md->enc[l], &md->enc_moe[l], md->enc_ctx, xs[l], &aux);
  PsInstr *enc_out = ps_norm (net, cfg->norm, xs[cfg->enc_layers], md->enc_ln);
  ys[0] = ps_embed (net, tgt, ps_build_cast (ps_net_builder (net), emb, net->act));
  for (int l = 0; l < cfg->dec_layers; l++)
    ys[l + 1] = decoder_layer (net, cfg, &md->dec[l], md->dec_ctx, md->cross_ctx, ys[l], enc_out, &aux);
  PsInstr *top = ps_norm (net, cfg->norm, ys[cfg->dec_layers], md->dec_ln);
  /* With remat and tied embeddings the head reads a copy of the table:
   * the head's own product (below) must not reach the embedding's other
   * uses, under every layer, which autodiff's total derivative would. */
  PsInstr *head_w = cfg->remat && softmax == emb ? ps_build_unary (ps_net_builder (net), PS_OP_COPY, emb) : softmax;
  PsInstr *head = ps_build_cast (ps_net_builder (net), head_w, net->act);
  PsInstr *logits = ps_build_cast (ps_net_builder (net), ps_net_einsum (net, "bsm,vm->bsv", top, head), PS_F32);
  PsInstr *ce = ps_softmax_cross_entropy (net, logits, labels);
  PsInstr *loss = aux ? ps_build_add (ps_net_builder (net), ce, aux) : ce;
  ps_net_add_loss (net, loss);
  PsInstr *seed = ps_build_scalar (ps_net_builder (net), PS_F32, 1.0 / M);
  if (!cfg->remat)
    /* Backward: the whole (micro)step at once (encdec.h says why). */
    return ps_net_vjp (net, loss, seed, NULL, NULL, md->n_weights, (PsInstr **) net->weights->pdata, error);

  /* Backward one layer at a time from the top, each layer's forward
   * rebuilt from its saved input first (encdec.h): the head, the
   * decoder's layers (each adding its part of the encoder output's
   * gradient), the target embedding, the encoder's final norm and layers,
   * the source embedding. */
  PsInstr *dy = NULL, *d_enc = NULL, *dx = NULL;
  PsInstr *hw[2] = { md->dec_ln, head_w }, *owner[2] = { md->dec_ln, softmax };
  if (!part_vjp (net, ce, NULL, seed, seed, 1, &ys[cfg->dec_layers], &dy, 2, hw, owner, error))
    return FALSE;
  for (int l = cfg->dec_layers - 1; l >= 0; l--)
    {
      /* The rebuilt layer reads a copy of the encoder's output: autodiff's
       * product is the total derivative, and enc_out also reaches this
       * layer through ys[l] (the layers below), which would count their
       * part twice. */
      PsInstr *a = NULL, *enc_l = ps_build_unary (ps_net_builder (net), PS_OP_COPY, enc_out);
      DecoderLayer L = md->dec[l];
      PsInstr *bias = shared_copy (net, md->dec_bias);
      if (bias)
        L.self.rel_bias = bias;
      PsInstr *out = decoder_layer (net, cfg, &L, md->dec_ctx, md->cross_ctx, ys[l], enc_l, &a);
      PsInstr *in[2] = { ys[l], enc_l }, *din[2];
      if (!layer_vjp (net, out, a, dy, seed, 2, in, din, md->dec_w[l], md->dec_w[l + 1], bias, md->dec_bias, error))
        return FALSE;
      dy = din[0];
      d_enc = add_opt (net, d_enc, din[1]);
    }
  PsInstr *enc_ln = md->enc_ln;
  if (!ps_net_vjp (net, ys[0], dy, NULL, NULL, 1, &emb, error)
      || !ps_net_vjp (net, enc_out, d_enc, xs[cfg->enc_layers], &dx, 1, &enc_ln, error))
    return FALSE;
  for (int l = cfg->enc_layers - 1; l >= 0; l--)
    {
      PsInstr *a = NULL;
      PsTransformerLayer L = md->enc[l];
      PsInstr *bias = shared_copy (net, md->enc_bias);
      if (bias)
        L.attention.rel_bias = bias;
      PsInstr *out = encoder_layer (net, cfg, &L, &md->enc_moe[l], md->enc_ctx, xs[l], &a);
      if (!layer_vjp (net, out, a, dx, seed, 1, &xs[l], &dx, md->enc_w[l], md->enc_w[l + 1], bias, md->enc_bias,
                      error))
        return FALSE;
    }
  return ps_net_vjp (net, xs[0], dx, NULL, NULL, 1, &emb, error);
}

/* The microbatch loop's body (ps_net_microbatch_loop): inputs are the
 * microbatch's source, target and labels. */
static gboolean
microbatch_body (PsNet *net, PsInstr *const *inputs, gpointer user, GError **error)
{
  return microbatch (net, user, inputs[0], inputs[1], inputs[2], error);
}

PsModule *
ps_encdec_build (const PsEncDecConfig *cfg, PsModelInfo *info, GError **error)
{
  if (!ps_encdec_check (cfg, error))
    return NULL;
  const int64_t n = cfg->mesh[0] * cfg->mesh[1];
  g_autofree int64_t *devices = g_new (int64_t, n);
  for (int64_t i = 0; i < n; i++)
    devices[i] = i;
  PsShardingPlan plan;
  ps_sharding_preset_plan (cfg->sharding, &plan);
  /* The expert weights' layout (encdec.h): E ("e") over axis 0 or every
   * device, H ("f", no other weight's letter) over axis 1. */
  if (cfg->experts > 0)
    ps_moe_layout_plan (cfg->moe_layout, "f", &plan);
  ps_heads_plan (&plan, 2, cfg->mesh, cfg->heads, cfg->kv_heads);
  g_autoptr (PsNet) net = ps_net_new ("encdec", "train_step", 2, cfg->mesh, devices, &plan);
  net->act = cfg->f32_activations ? PS_F32 : PS_BF16;

  PsDenseLmConfig view;
  memset (&view, 0, sizeof view);
  view.vocab = cfg->vocab;
  view.sharding = cfg->sharding;
  view.mesh[0] = cfg->mesh[0];
  view.mesh[1] = cfg->mesh[1];
  PsBlockOptions bo;
  ps_block_options_init (&bo, cfg->rel_buckets, TRUE);
  bo.position = cfg->position == PS_POSITION_RELATIVE && cfg->rel_buckets == 0 ? PS_POSITION_NONE : cfg->position;
  bo.norm = cfg->norm;
  bo.ffn = cfg->ffn;
  bo.kv_heads = cfg->kv_heads;
  bo.rotary_dim = cfg->rotary_dim;
  bo.rotary_pairs = cfg->rotary_pairs;
  const int64_t M = cfg->model_dim, kv = cfg->kv_heads > 0 ? cfg->kv_heads : cfg->heads;

  /* Parameters: embedding, encoder, decoder, head, state, data. */
  PsInstr *emb = ps_embedding_weight (net, "embedding", ps_dense_lm_padded_vocab (&view), M);
  PsAttentionContext enc_ctx = { 0 }, dec_ctx = { 0 }, cross_ctx = { 0 };
  g_autofree PsTransformerLayer *enc = g_new0 (PsTransformerLayer, cfg->enc_layers);
  g_autofree MoeFfn *enc_moe = g_new0 (MoeFfn, cfg->enc_layers);
  g_autofree DecoderLayer *dec = g_new0 (DecoderLayer, cfg->dec_layers);
  const int enc_first = ps_net_n_weights (net);
  /* Layer l's weights are [enc_w[l], enc_w[l + 1]) (dec_w: the decoder's). */
  g_autofree int *enc_w = g_new0 (int, cfg->enc_layers + 1);
  g_autofree int *dec_w = g_new0 (int, cfg->dec_layers + 1);
  const int buckets = bo.position == PS_POSITION_RELATIVE ? cfg->rel_buckets : 0;
  /* T5's one relative-bias table per stack, read by every layer of it
   * (the layers then make none of their own). */
  const gboolean shared = cfg->shared_rel_bias && buckets > 0;
  const int lb = shared ? 0 : buckets;
  PsBlockOptions lo = bo;
  lo.rel_buckets = lb;
  PsInstr *enc_bias = shared ? rel_bias_weight (net, "encoder.rel_bias", buckets, cfg->heads, kv) : NULL;
  for (int l = 0; l < cfg->enc_layers; l++)
    {
      g_autofree char *prefix = g_strdup_printf ("encoder.layer%d", l);
      enc_w[l] = ps_net_n_weights (net);
      if (cfg->experts > 0 && l % cfg->moe_every == cfg->moe_every - 1)
        {
          ps_attention_weights_kv (net, prefix, M, cfg->heads, cfg->head_dim, kv, lb, cfg->norm,
                                   &enc[l].attention);
          moe_weights (net, cfg, l, prefix, &enc_moe[l]);
        }
      else
        ps_transformer_layer_weights_opts (net, prefix, M, cfg->ffn_dim, cfg->heads, cfg->head_dim, &lo, &enc_ctx,
                                           &enc[l]);
      if (shared)
        enc[l].attention.rel_bias = enc_bias;
    }
  enc_w[cfg->enc_layers] = ps_net_n_weights (net);
  PsInstr *enc_ln = ps_layer_norm_weight (net, NULL, "encoder.final_ln", M);
  const int dec_first = ps_net_n_weights (net);
  PsInstr *dec_bias = shared ? rel_bias_weight (net, "decoder.rel_bias", buckets, cfg->heads, kv) : NULL;
  for (int l = 0; l < cfg->dec_layers; l++)
    {
      g_autofree char *prefix = g_strdup_printf ("decoder.layer%d", l);
      g_autofree char *cross = g_strdup_printf ("decoder.layer%d.cross", l);
      dec_w[l] = ps_net_n_weights (net);
      ps_attention_weights_kv (net, prefix, M, cfg->heads, cfg->head_dim, kv, lb, cfg->norm, &dec[l].self);
      if (shared)
        dec[l].self.rel_bias = dec_bias;
      ps_attention_weights_kv (net, cross, M, cfg->heads, cfg->head_dim, kv, 0, cfg->norm, &dec[l].cross);
      moe_weights (net, cfg, l, prefix, &dec[l].moe);
      if (!dec[l].moe.wg)
        ps_ffn_weights_kind (net, prefix, M, cfg->ffn_dim, cfg->ffn, cfg->norm, TRUE, &dec[l].ffn);
    }
  dec_w[cfg->dec_layers] = ps_net_n_weights (net);
  PsInstr *dec_ln = ps_layer_norm_weight (net, NULL, "decoder.final_ln", M);
  const int dec_end = ps_net_n_weights (net);
  PsInstr *softmax = cfg->untied_embeddings ? ps_embedding_weight (net, "softmax", emb->shape->dims[0], M) : emb;
  const int n_weights = ps_net_n_weights (net);
  int wus = PS_AXIS_NONE;
  if (cfg->weight_update_sharding)
    wus = cfg->sharding == PS_SHARDING_2D || cfg->sharding == PS_SHARDING_MEGATRON
          || cfg->sharding == PS_SHARDING_MEGATRON_SP ? 0 : PS_AXIS_ALL;
  ps_net_add_optimizer_state (net, cfg->optimizer, wus);
  int64_t bs[2] = { cfg->global_batch, cfg->src_len }, bt[2] = { cfg->global_batch, cfg->tgt_len };
  PsInstr *src = ps_net_input (net, "src_ids", PS_S32, 2, bs);
  PsInstr *tgt = ps_net_input (net, "tgt_ids", PS_S32, 2, bt);
  PsInstr *labels = ps_net_input (net, "labels", PS_S32, 2, bt);
  PsInstr *lr = ps_net_input (net, "learning_rate", PS_F32, 0, NULL);
  PsInstr *decay = ps_net_input (net, "decay", PS_F32, 0, NULL);

  /* Contexts: the encoder's bidirectional buckets (or rotary tables, no
   * mask), the decoder's causal ones; cross-attention has neither. */
  if (buckets > 0)
    enc_ctx.rel_onehot = ps_net_one_hot (net, ps_relative_buckets_bidirectional (net, cfg->src_len, buckets),
                                         buckets, net->act);
  if (bo.position == PS_POSITION_ROPE)
    {
      PsAttentionContext tables;
      PsBlockOptions ro = bo;
      ps_attention_context_causal_opts (net, cfg->src_len, cfg->head_dim, &ro, &tables);
      enc_ctx.rope_cos = tables.rope_cos;
      enc_ctx.rope_sin = tables.rope_sin;
      enc_ctx.rope_rot = tables.rope_rot;
    }
  ps_attention_context_causal_opts (net, cfg->tgt_len, cfg->head_dim, &bo, &dec_ctx);

  EncDec md = { cfg, emb, softmax, enc_ln, dec_ln, enc_bias, dec_bias, enc, enc_moe, dec, enc_w, dec_w, &enc_ctx,
                &dec_ctx, &cross_ctx, n_weights };
  const int n_mb = MAX (cfg->microbatches, 1);
  if (n_mb > 1 && !cfg->unroll_microbatches)
    {
      /* One while loop over the microbatches carrying one accumulator per
       * weight, as the dense and MoE LMs write it (doc/models.md,
       * "Gradient accumulation"); the update runs after the loop. */
      PsInstr *in[3] = { src, tgt, labels };
      if (!ps_net_microbatch_loop (net, 3, in, n_mb, microbatch_body, &md, error))
        return NULL;
    }
  else
    for (int u = 0; u < n_mb; u++)
      {
        /* In this order: the instructions as the unrolled form wrote them. */
        PsInstr *s = n_mb > 1 ? ps_net_microbatch (net, src, u, n_mb) : src;
        PsInstr *t = n_mb > 1 ? ps_net_microbatch (net, tgt, u, n_mb) : tgt;
        PsInstr *l = n_mb > 1 ? ps_net_microbatch (net, labels, u, n_mb) : labels;
        if (!microbatch (net, &md, s, t, l, error))
          return NULL;
      }

  if (info)
    {
      memset (info, 0, sizeof *info);
      info->n_annotations = net->n_annotations;
      info->params = count_params (net, cfg, FALSE, 0, n_weights);
      const double B = (double) cfg->global_batch, S = (double) cfg->src_len, T = (double) cfg->tgt_len;
      const double nd = (double) (cfg->heads * cfg->head_dim);
      /* 6 flops per active parameter per token it acts on (the encoder's on the
       * source, the decoder's and the head's on the target), plus the
       * attention scores and context (self: S^2, T^2; cross: T S). */
      info->model_flops = 6.0 * (count_params (net, cfg, TRUE, enc_first, dec_first) * B * S
                                 + (count_params (net, cfg, TRUE, dec_first, dec_end) + (double) (emb->shape->dims[0] * M)) * B * T)
                          + 12.0 * nd * B * (cfg->enc_layers * S * S + cfg->dec_layers * (T * T + T * S));
      info->items_per_step = B * T;
      info->mesh.rank = 2;
      info->mesh.dims[0] = cfg->mesh[0];
      info->mesh.dims[1] = cfg->mesh[1];
      ps_trace_mesh_set_order (&info->mesh, "arange", NULL);
    }
  PsModule *m = ps_net_finish (g_steal_pointer (&net), lr, decay);
  if (info)
    info->n_instructions = m->entry->instrs->len;
  return m;
}

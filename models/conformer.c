/* The Conformer training step: see conformer.h. */
#include "config.h"

#include "models/conformer.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "common/checked.h"
#include "common/error.h"
#include "models/conv_layers.h"
#include "models/layers.h"

static void
config_common (PsConformerConfig *out)
{
  memset (out, 0, sizeof *out);
  out->ffn_mult = 4;
  out->conv_kernel = 32;
  out->frames = 2048;
  out->mel_bins = 80;
  out->vocab = 1024;
  out->rel_buckets = 32;
  out->optimizer = PS_OPTIMIZER_ADAM;
  out->remat = TRUE;
  out->data = out->model = 1;
  out->global_batch = 8;
  out->sharding = PS_CONFORMER_2D;
  out->microbatches = 1;
  out->unroll_microbatches = TRUE;
}

void
ps_conformer_config_large (PsConformerConfig *out)
{
  config_common (out);
  out->name = "L";
  out->layers = 17;
  out->model_dim = 512;
  out->heads = 8;
}

void
ps_conformer_config_medium (PsConformerConfig *out)
{
  config_common (out);
  out->name = "M";
  out->layers = 16;
  out->model_dim = 256;
  out->heads = 4;
}

void
ps_conformer_config_small_paper (PsConformerConfig *out)
{
  config_common (out);
  out->name = "S";
  out->layers = 16;
  out->model_dim = 144;
  out->heads = 4;
}

void
ps_conformer_config_tiny (PsConformerConfig *out)
{
  config_common (out);
  out->name = "tiny";
  out->layers = 2;
  out->model_dim = 16;
  out->heads = 4;
  out->ffn_mult = 2;
  out->conv_kernel = 5;
  out->frames = 24;
  out->mel_bins = 8;
  out->vocab = 12;
  out->rel_buckets = 6;
  out->global_batch = 4;
  out->f32_activations = TRUE;
  out->data = 4;
  out->model = 2;
}

gboolean
ps_conformer_check (const PsConformerConfig *c, GError **error)
{
  struct { const char *opt; int64_t v; } pos[] = {
    { ps_param_store_label (c->params, "layers", "--layers"), c->layers }, { ps_param_store_label (c->params, "model_dim", "--model-dim"), c->model_dim },
    { ps_param_store_label (c->params, "heads", "--heads"), c->heads }, { ps_param_store_label (c->params, "ffn_mult", "--ffn-mult"), c->ffn_mult },
    { ps_param_store_label (c->params, "conv_kernel", "--conv-kernel"), c->conv_kernel }, { ps_param_store_label (c->params, "frames", "--frames"), c->frames },
    { ps_param_store_label (c->params, "mel_bins", "--mel-bins"), c->mel_bins }, { ps_param_store_label (c->params, "vocab", "--vocab"), c->vocab },
    { ps_param_store_label (c->params, "global_batch", "--batch"), c->global_batch }, { ps_param_store_label (c->params, "mesh", "--data"), c->data },
    { ps_param_store_label (c->params, "mesh", "--model"), c->model },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (pos); i++)
    if (pos[i].v <= 0)
      return ps_param_fail (error, "%s must be positive (got %" G_GINT64_FORMAT ")", pos[i].opt, pos[i].v);
  if (c->rel_buckets < 2)
    return ps_param_fail (error, "%s must be at least 2 (got %d)", ps_param_store_label (c->params, "rel_buckets", "--rel-buckets"),
                 c->rel_buckets);
  if (c->model_dim % c->heads != 0)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " does not divide %s %" G_GINT64_FORMAT,
                 ps_param_store_label (c->params, "heads", "--heads"), c->heads, ps_param_store_label (c->params, "model_dim", "--model-dim"), c->model_dim);
  if (c->frames % 4 != 0)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " is not a multiple of 4 (the front end sub-samples "
                 "time by 4)", ps_param_store_label (c->params, "frames", "--frames"), c->frames);
  if (c->mel_bins % 4 != 0)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " is not a multiple of 4 (the front end sub-samples "
                 "frequency by 4)", ps_param_store_label (c->params, "mel_bins", "--mel-bins"), c->mel_bins);
  if (c->global_batch % c->data != 0)
    return ps_param_fail (error, "%s: its data axis (%" G_GINT64_FORMAT ") does not divide %s %" G_GINT64_FORMAT,
                 ps_param_store_label (c->params, "mesh", "--data"), c->data, ps_param_store_label (c->params, "global_batch", "--batch"), c->global_batch);
  const int64_t M = MAX (c->microbatches, 1);
  if (M > 1024 || c->global_batch % (M * c->data) != 0)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " must be at most 1024 and cut %s %" G_GINT64_FORMAT
                 " into microbatches that its data axis (%" G_GINT64_FORMAT ") divides",
                 ps_param_store_label (c->params, "microbatches", "--microbatches"), c->microbatches,
                 ps_param_store_label (c->params, "global_batch", "--batch"), c->global_batch, c->data);
  /* The largest arrays of the step; the builder refuses arrays over
   * PS_MAX_ELEMENTS. */
  const int64_t B = c->global_batch, T = c->frames, F = c->mel_bins, S = T / 4, m = c->model_dim;
  struct { const char *what; int64_t d[5]; } big[] = {
    { "[batch, frames, mel bins] input", { B, T, F, 1, 1 } },
    { "[batch, frames/2, mel bins/2, d] front-end activations", { B, T / 2, F / 2, m, 1 } },
    { "[batch, heads, frames/4, frames/4] attention scores", { B, c->heads, S, S, 1 } },
    { "[batch, frames/4, ffn_mult x d] FFN activations", { B, S, c->ffn_mult, m, 1 } },
    { "[batch, frames/4, vocab] logits", { B, S, c->vocab, 1, 1 } },
    { "[frames/4, frames/4, rel_buckets] relative positions", { S, S, c->rel_buckets, 1, 1 } },
    { "[mel bins/4 x d, d] projection weight", { F / 4, m, m, 1, 1 } },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (big); i++)
    {
      int64_t n = 1;
      gboolean ok = TRUE;
      for (int k = 0; k < 5 && ok; k++)
        ok = ps_checked_mul_i64 (n, big[i].d[k], &n) && n <= PS_MAX_ELEMENTS;
      if (!ok)
        return ps_param_fail (error, "the %s would have more than 2^40 elements (%s %" G_GINT64_FORMAT ", %s %"
                     G_GINT64_FORMAT ", %s %" G_GINT64_FORMAT "; doc/robustness.md)", big[i].what,
                     ps_param_store_label (c->params, "global_batch", "--batch"), B, ps_param_store_label (c->params, "frames", "--frames"), T,
                     ps_param_store_label (c->params, "model_dim", "--model-dim"), m);
    }
  if (c->sharding == PS_CONFORMER_DP && c->global_batch % (M * c->data * c->model) != 0)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " is not divisible by the %" G_GINT64_FORMAT
                 " devices (dp sharding) times %s", ps_param_store_label (c->params, "global_batch", "--batch"), c->global_batch,
                 c->data * c->model, ps_param_store_label (c->params, "microbatches", "--microbatches"));
  return TRUE;
}

typedef struct {
  PsInstr *ln, *w1, *w2;             /* [m], [m, h], [h, m] */
} Ffn;

typedef struct {
  PsInstr *ln, *pw_value, *pw_gate;  /* [m], [m, c], [m, c] */
  PsInstr *depthwise;                /* [K, 1, c] */
  PsInstr *bn_scale, *bn_offset;     /* [c] */
  PsInstr *pw_out;                   /* [c, m] */
} ConvModule;

typedef struct {
  Ffn ffn1, ffn2;
  PsAttention attention;
  ConvModule conv;
  PsInstr *final_ln;
  const PsAttentionContext *ctx;
} Block;

static PsInstr *
weight (PsNet *net, const char *prefix, const char *name, const char *letters, int rank,
        const int64_t *dims)
{
  g_autofree char *n = g_strdup_printf ("%s.%s", prefix, name);
  return ps_net_weight (net, n, letters, rank, dims);
}

static void
ffn_weights (PsNet *net, const char *prefix, const char *name, int64_t m, int64_t h, Ffn *out)
{
  g_autofree char *p = g_strdup_printf ("%s.%s", prefix, name);
  int64_t mh[2] = { m, h }, hm[2] = { h, m };
  out->ln = ps_layer_norm_weight (net, p, "ln", m);
  out->w1 = weight (net, p, "w1", "mh", 2, mh);
  out->w2 = weight (net, p, "w2", "hm", 2, hm);
}

static void
block_weights (PsNet *net, const PsConformerConfig *c, int l, const PsAttentionContext *ctx,
               Block *out)
{
  g_autofree char *prefix = g_strdup_printf ("layer%d", l);
  int64_t m = c->model_dim, h = c->ffn_mult * m;
  ffn_weights (net, prefix, "ffn1", m, h, &out->ffn1);
  ps_attention_weights (net, prefix, m, c->heads, m / c->heads, c->rel_buckets, &out->attention);
  int64_t mc[2] = { m, m }, kc[3] = { c->conv_kernel, 1, m };
  ConvModule *cv = &out->conv;
  cv->ln = ps_layer_norm_weight (net, prefix, "conv_ln", m);
  cv->pw_value = weight (net, prefix, "conv_pw_value", "mc", 2, mc);
  cv->pw_gate = weight (net, prefix, "conv_pw_gate", "mc", 2, mc);
  cv->depthwise = weight (net, prefix, "conv_depthwise", "wic", 3, kc);
  ps_batch_norm_weights (net, prefix, "conv_bn", m, &cv->bn_scale, &cv->bn_offset);
  cv->pw_out = weight (net, prefix, "conv_pw_out", "cm", 2, mc);
  ffn_weights (net, prefix, "ffn2", m, h, &out->ffn2);
  out->final_ln = ps_layer_norm_weight (net, prefix, "final_ln", m);
  out->ctx = ctx;
}

static PsInstr *
act (PsNet *net, PsInstr *w)
{
  return ps_build_cast (ps_net_builder (net), w, net->act);
}

static PsInstr *
add_scaled (PsNet *net, PsInstr *x, PsInstr *y, double k)
{
  if (k != 1.0)
    y = ps_build_mul (ps_net_builder (net), y, ps_build_full_like (ps_net_builder (net), y->shape, k));
  return ps_build_add (ps_net_builder (net), x, y);
}

/* x + 1/2 (W2 swish (W1 LN(x))): the macaron half-step FFN. */
static PsInstr *
ffn (PsNet *net, const Ffn *w, PsInstr *x)
{
  PsInstr *h = ps_layer_norm (net, x, w->ln);
  PsInstr *w1 = act (net, w->w1);
  PsInstr *f = ps_swish (net, ps_net_einsum (net, "bsm,mh->bsh", h, w1));
  PsInstr *w2 = act (net, w->w2);
  return add_scaled (net, x, ps_net_einsum (net, "bsh,hm->bsm", f, w2), 0.5);
}

/* x + W_out swish (BN (depthwise (GLU (LN(x))))). */
static PsInstr *
conv_module (PsNet *net, const ConvModule *w, PsInstr *x)
{
  PsInstr *h = ps_layer_norm (net, x, w->ln);
  PsInstr *wv = act (net, w->pw_value);
  PsInstr *value = ps_net_einsum (net, "bsm,mc->bsc", h, wv);
  PsInstr *wg = act (net, w->pw_gate);
  PsInstr *gate = ps_net_einsum (net, "bsm,mc->bsc", h, wg);
  PsInstr *glu = ps_build_mul (ps_net_builder (net), value, ps_build_unary (ps_net_builder (net), PS_OP_LOGISTIC, gate));
  int64_t k = w->depthwise->shape->dims[0], lo = (k - 1) / 2, hi = k / 2;
  PsInstr *dw = ps_conv (net, glu, w->depthwise, NULL, &lo, &hi, NULL, glu->shape->dims[2]);
  PsInstr *y = ps_swish (net, ps_batch_norm (net, dw, w->bn_scale, w->bn_offset));
  PsInstr *wo = act (net, w->pw_out);
  return add_scaled (net, x, ps_net_einsum (net, "bsc,cm->bsm", y, wo), 1.0);
}

static PsInstr *
block (PsNet *net, gconstpointer weights, PsInstr *x)
{
  const Block *w = weights;
  ps_net_annotate (net, x, "bsm");
  x = ffn (net, &w->ffn1, x);
  PsAttention att;
  ps_attention_cast (net, &w->attention, &att);
  x = ps_attention (net, &att, w->ctx, x);
  x = conv_module (net, &w->conv, x);
  x = ffn (net, &w->ffn2, x);
  return ps_layer_norm (net, x, w->final_ln);
}

/* What one microbatch's forward and backward read. */
typedef struct {
  const PsConformerConfig *c;
  const PsLayer *layers;
  PsInstr *sub1, *sub2, *proj, *out_w;
  double front_flops;        /* summed over the microbatches built */
} Step;

/* Forward, loss and backward of the utterances feats [b, T, F] with their
 * labels [b, S]; the gradients accumulate in the net, one accumulator per
 * weight, and batch norm takes its statistics over these utterances. */
static gboolean
microbatch (PsNet *net, Step *st, PsInstr *feats, PsInstr *labels, GError **error)
{
  const PsConformerConfig *c = st->c;
  const int64_t B = feats->shape->dims[0], T = c->frames, F = c->mel_bins, m = c->model_dim;
  const int64_t S = T / 4, P = (F / 4) * m;
  /* Front end: [B, T, F, 1] -> two stride-2 3x3 convs -> [B, S, F/4, m]
   * -> [B, S, P] -> [B, S, m]. */
  int64_t btf1[4] = { B, T, F, 1 }, two[2] = { 2, 2 }, one[2] = { 1, 1 };
  PsShape *s4 = ps_shape_new_array (net->act, 4, btf1);
  PsInstr *x4 = ps_build_reshape_to (ps_net_builder (net), feats, s4);
  ps_shape_free (s4);
  PsInstr *h1 = ps_relu (net, ps_conv (net, x4, st->sub1, two, one, one, NULL, 1));
  PsInstr *h2conv = ps_conv (net, h1, st->sub2, two, one, one, NULL, 1);
  st->front_flops += ps_conv_flops (h1->operands[0]) + ps_conv_flops (h2conv);
  PsInstr *h2 = ps_relu (net, h2conv);
  int64_t bsp[3] = { B, S, P };
  PsShape *s3 = ps_shape_new_array (net->act, 3, bsp);
  PsInstr *hp = ps_build_reshape_to (ps_net_builder (net), h2, s3);
  ps_shape_free (s3);
  PsInstr *x0 = ps_net_einsum (net, "bsp,pm->bsm", hp, act (net, st->proj));

  g_autofree PsInstr **xs = g_new (PsInstr *, c->layers + 1);
  PsInstr *top = ps_layer_stack_forward (net, c->layers, st->layers, x0, xs);
  PsInstr *head = ps_net_weight_view (net, st->out_w, net->act);
  PsInstr *logits = ps_build_cast (ps_net_builder (net), ps_net_einsum (net, "bsm,mv->bsv", top, head), PS_F32);
  PsInstr *loss = ps_softmax_cross_entropy (net, logits, labels);
  ps_net_add_loss (net, loss);
  PsInstr *gx;
  PsInstr *front_w[3] = { st->sub1, st->sub2, st->proj };
  /* the loss is the mean of the microbatches' means */
  PsInstr *seed = ps_build_scalar (ps_net_builder (net), PS_F32, 1.0 / (double) MAX (c->microbatches, 1));
  return ps_net_vjp (net, loss, seed, top, &gx, 1, &head, error)
         && ps_layer_stack_backward (net, c->layers, st->layers, xs, gx, c->remat, &gx, error)
         && ps_net_vjp (net, x0, gx, NULL, NULL, 3, front_w, error);
}

static gboolean
microbatch_step (PsNet *net, PsInstr *const *data, gpointer user, GError **error)
{
  return microbatch (net, user, data[0], data[1], error);
}

PsModule *
ps_conformer_build (const PsConformerConfig *c, PsConformerInfo *info, GError **error)
{
  if (!ps_conformer_check (c, error))
    return NULL;
  int64_t mesh[2] = { c->data, c->model }, n = c->data * c->model;
  g_autofree int64_t *devices = g_new (int64_t, n);
  for (int64_t i = 0; i < n; i++)
    devices[i] = i;
  /* 1d and 2d: data parallel on the batch over `data`, the model dim
   * split over `model` in FFN hidden (h), heads (n), conv channels (c) and
   * vocabulary (v); 2d (the GSPMD paper's 2-D sharding of its dense
   * Transformer) also splits the activations' model dim over `model` and
   * the weights' over `data`. dp: the batch over every device. */
  PsShardingPlan plan;
  ps_sharding_plan_init (&plan);
  if (c->sharding == PS_CONFORMER_DP)
    {
      ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "b", PS_AXIS_ALL);
      plan.annotate[PS_WEIGHTS] = TRUE;
    }
  else
    {
      ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "b", 0);
      ps_sharding_plan_split (&plan, PS_WEIGHTS, "hncv", 1);
      if (c->sharding == PS_CONFORMER_2D)
        {
          ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "m", 1);
          ps_sharding_plan_split (&plan, PS_WEIGHTS, "m", 0);
        }
    }
  g_autofree char *mname = g_strdup_printf ("conformer_%s", c->name);
  g_autoptr (PsNet) net = ps_net_new (mname, "train_step", 2, mesh, devices, &plan);
  net->act = c->f32_activations ? PS_F32 : PS_BF16;
  const int64_t B = c->global_batch, T = c->frames, F = c->mel_bins, m = c->model_dim;
  const int64_t S = T / 4, P = (F / 4) * m;

  /* Front end, blocks, head. */
  int64_t k1[4] = { 3, 3, 1, m }, k2[4] = { 3, 3, m, m }, pm[2] = { P, m }, mv[2] = { m, c->vocab };
  PsInstr *sub1 = ps_net_weight (net, "subsample.conv1", "xyio", 4, k1);
  PsInstr *sub2 = ps_net_weight (net, "subsample.conv2", "xyio", 4, k2);
  PsInstr *proj = ps_net_weight (net, "subsample.proj", "pm", 2, pm);
  PsAttentionContext ctx = { NULL, NULL };
  g_autofree Block *blocks = g_new0 (Block, c->layers);
  g_autofree PsLayer *layers = g_new0 (PsLayer, c->layers);
  for (int l = 0; l < c->layers; l++)
    {
      int first = ps_net_n_weights (net);
      block_weights (net, c, l, &ctx, &blocks[l]);
      layers[l] = ps_layer (net, block, &blocks[l], first);
    }
  PsInstr *out_w = ps_net_weight (net, "output", "mv", 2, mv);
  ps_net_add_optimizer_state (net, c->optimizer, PS_AXIS_NONE);
  int64_t btf[3] = { B, T, F }, bs[2] = { B, S };
  PsInstr *feats = ps_net_input (net, "features", net->act, 3, btf);
  PsInstr *labels = ps_net_input (net, "labels", PS_S32, 2, bs);
  PsInstr *lr = ps_net_input (net, "learning_rate", PS_F32, 0, NULL);
  PsInstr *decay = ps_net_input (net, "decay", PS_F32, 0, NULL);
  ps_net_annotate (net, feats, "btf");
  ps_net_annotate (net, labels, "bs");
  ctx.rel_onehot = ps_net_one_hot (net, ps_relative_buckets_bidirectional (net, S, c->rel_buckets),
                                   c->rel_buckets, net->act);

  Step st = { c, layers, sub1, sub2, proj, out_w, 0 };
  const int M = (int) MAX (c->microbatches, 1);
  if (M > 1 && !c->unroll_microbatches)
    {
      /* one while loop over the microbatches (doc/models.md, "Gradient
       * accumulation"), its body built once: one microbatch's front-end
       * FLOPs */
      PsInstr *data[2] = { feats, labels };
      if (!ps_net_microbatch_loop (net, 2, data, M, microbatch_step, &st, error))
        return NULL;
      st.front_flops *= M;
    }
  else
    for (int u = 0; u < M; u++)
      {
        PsInstr *fu = M > 1 ? ps_net_microbatch (net, feats, u, M) : feats;
        PsInstr *lu = M > 1 ? ps_net_microbatch (net, labels, u, M) : labels;
        if (!microbatch (net, &st, fu, lu, error))
          return NULL;
      }
  double front_flops = st.front_flops;

  if (info)
    {
      memset (info, 0, sizeof *info);
      info->n_annotations = net->n_annotations;
      for (guint i = 0; i < net->weights->len; i++)
        info->params += (double) ps_shape_elements (((PsInstr *) net->weights->pdata[i])->shape);
      /* Forward FLOPs per frame after sub-sampling (N of them): two FFNs
       * (2 x 2 matmuls of m x 4m), four attention projections, scores and
       * context over S keys, the relative bias, three pointwise convs and
       * the depthwise conv; the front end and the head. Training: 3x. */
      double N = (double) (B * S), h = (double) (c->ffn_mult * m), md = (double) m;
      double per_layer = N * (8 * md * h + 8 * md * md + 4 * (double) S * md + 6 * md * md
                              + 2 * md * (double) c->conv_kernel)
                         + 2.0 * (double) S * (double) S * c->rel_buckets * (double) c->heads;
      double fwd = c->layers * per_layer + front_flops + 2 * N * (double) P * md
                   + 2 * N * md * (double) c->vocab;
      info->model_flops = 3.0 * fwd;
      info->utterances_per_step = B;
      info->frames_per_step = B * T;
    }
  PsModule *mod = ps_net_finish (g_steal_pointer (&net), lr, decay);
  if (info)
    info->n_instructions = mod->entry->instrs->len;
  return mod;
}

/* The sparse MoE Transformer LM training step: see moe_lm.h. */
#include "config.h"

#include "models/moe_lm.h"

#include <string.h>

#include "common/checked.h"
#include "common/error.h"
#include "models/dense_lm.h"
#include "models/layers.h"
#include "models/moe_layer.h"
#include "models/pipeline.h"

void
ps_moe_lm_config_small (PsMoeLmConfig *out)
{
  memset (out, 0, sizeof *out);
  out->name = "moe";
  out->layers = 2;
  out->moe_every = 2;
  out->model_dim = 16;
  out->ffn_dim = 32;
  out->heads = 2;
  out->head_dim = 8;
  out->seq_len = 8;
  out->global_batch = 16;
  out->vocab = 64;
  out->rel_buckets = 4;
  out->experts = 8;
  out->capacity_factor = 2.0;
  out->top_k = 2;
  out->expert_ffn = PS_FFN_RELU;
  out->aux_loss_weight = 0.01;
  out->f32_activations = TRUE;
  out->optimizer = PS_OPTIMIZER_ADAFACTOR;
  out->remat = TRUE;
  out->microbatches = 1;
  out->cores = 8;
}

int64_t
ps_moe_lm_groups (const PsMoeLmConfig *c)
{
  return c->groups > 0 ? c->groups : c->cores / MAX (c->pipeline_stages, 1);
}

int64_t
ps_moe_lm_capacity (const PsMoeLmConfig *c)
{
  int64_t tokens = c->global_batch / MAX (c->microbatches, 1) * c->seq_len;
  return ps_moe_capacity (tokens / ps_moe_lm_groups (c), c->experts, c->capacity_factor);
}

/* The 2-D layouts (moe_lm.h): the mesh covers the cores, no pipeline,
 * the dense layers' heads, FFN hidden dim and the experts split as the
 * layout says. */
static gboolean
check_mesh_layout (const PsMoeLmConfig *c, GError **error)
{
  const char *sh = ps_param_store_label (c->params, "sharding", "--sharding");
  const char *mesh = ps_param_store_label (c->params, "mesh", "--mesh");
  if (c->mesh[0] < 1 || c->mesh[1] < 1)
    return ps_param_fail (error, "%s %s needs a 2-D %s AxB (A*B = the %" G_GINT64_FORMAT " cores)", sh,
                          ps_moe_layout_names[c->layout], mesh, c->cores);
  if (c->mesh[0] * c->mesh[1] != c->cores)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " has %" G_GINT64_FORMAT
                          " devices, the slice %" G_GINT64_FORMAT " cores", mesh, c->mesh[0], c->mesh[1],
                          c->mesh[0] * c->mesh[1], c->cores);
  if (c->pipeline_stages > 1)
    return ps_param_fail (error, "%s %d: a pipeline runs the 1-D layout (got %s %s)",
                          ps_param_store_label (c->params, "pipeline_stages", "--pipeline-stages"),
                          c->pipeline_stages, sh, ps_moe_layout_names[c->layout]);
  if (!ps_heads_check_split (c->params, c->heads, c->kv_heads, c->mesh[1], "mesh axis 1", error))
    return FALSE;
  if (!ps_param_check_divides (c->params, c->ffn_dim, "ffn_dim", "--ffn-dim", c->mesh[1], "mesh axis 1", error))
    return FALSE;
  return ps_moe_layout_check (c->params, c->layout, c->experts, ps_moe_lm_groups (c), c->ffn_dim, c->mesh, error);
}

gboolean
ps_moe_lm_check (const PsMoeLmConfig *c, GError **error)
{
  struct { const char *key, *opt; int64_t v; } pos[] = {
    { "layers", "--layers", c->layers }, { "moe_every", "--moe-every", c->moe_every },
    { "model_dim", "--model-dim", c->model_dim }, { "ffn_dim", "--ffn-dim", c->ffn_dim },
    { "heads", "--heads", c->heads }, { "head_dim", "--head-dim", c->head_dim },
    { "seq_len", "--seq-len", c->seq_len }, { "global_batch", "--batch", c->global_batch },
    { "vocab", "--vocab", c->vocab }, { "experts", "--experts", c->experts }, { "top_k", "--top-k", c->top_k },
    { "microbatches", "--microbatches", c->microbatches }, { NULL, "the core count", c->cores },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (pos); i++)
    if (pos[i].v <= 0)
      return ps_param_fail (error, "%s must be positive (got %" G_GINT64_FORMAT ")",
                   pos[i].key ? ps_param_store_label (c->params, pos[i].key, pos[i].opt) : pos[i].opt, pos[i].v);
  const char *groups = ps_param_store_label (c->params, "groups", "--groups"), *batch = ps_param_store_label (c->params, "global_batch", "--batch");
  const char *mbs = ps_param_store_label (c->params, "microbatches", "--microbatches");
  if (c->groups < 0)
    return ps_param_fail (error, "%s must be positive (got %" G_GINT64_FORMAT ")", groups, c->groups);
  if (!(c->capacity_factor > 0) || c->capacity_factor > 1e6)
    return ps_param_fail (error, "%s must be positive (got %g)", ps_param_store_label (c->params, "capacity_factor", "--capacity-factor"),
                 c->capacity_factor);
  if (c->top_k > c->experts)
    return ps_param_fail (error, "%s %d exceeds %s %" G_GINT64_FORMAT, ps_param_store_label (c->params, "top_k", "--top-k"), c->top_k,
                 ps_param_store_label (c->params, "experts", "--experts"), c->experts);
  if (c->global_batch % c->microbatches != 0)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " is not divisible by %s %d", batch, c->global_batch, mbs,
                 c->microbatches);
  if (c->kv_heads < 0 || c->kv_heads > c->heads || (c->kv_heads > 0 && c->heads % c->kv_heads != 0))
    return ps_param_fail (error, "%s must divide %s (%" G_GINT64_FORMAT "), got %" G_GINT64_FORMAT,
                 ps_param_store_label (c->params, "kv_heads", "--kv-heads"), ps_param_store_label (c->params, "heads", "--heads"), c->heads, c->kv_heads);
  if (c->position == PS_POSITION_ROPE && c->head_dim % 2 != 0)
    return ps_param_fail (error, "%s rope needs an even %s (got %" G_GINT64_FORMAT ")", ps_param_store_label (c->params, "position", "--position"),
                 ps_param_store_label (c->params, "head_dim", "--head-dim"), c->head_dim);
  if (!ps_block_check_rotary (c->params, c->position, c->head_dim, c->rotary_dim, c->rotary_pairs, error))
    return FALSE;
  int K = MAX (c->pipeline_stages, 1);
  if (K > 1)
    {
      const char *stages = ps_param_store_label (c->params, "pipeline_stages", "--pipeline-stages");
      const char *layers = ps_param_store_label (c->params, "layers", "--layers"), *every = ps_param_store_label (c->params, "moe_every", "--moe-every");
      if (K > c->layers || c->layers % K != 0)
        return ps_param_fail (error, "%s = %d is not divisible by %s (%d)", layers, c->layers, stages, K);
      if (c->layers / K % c->moe_every != 0)
        return ps_param_fail (error, "%s %d: a stage's %d layers are not a whole number of %s = %d (every stage "
                     "must run the same layers)", stages, K, c->layers / K, every, c->moe_every);
      if (c->cores % K != 0)
        return ps_param_fail (error, "the %" G_GINT64_FORMAT " cores are not divisible by %s (%d)", c->cores, stages, K);
      if (c->no_annotations)
        return ps_param_fail (error, "%s %d: a pipeline is annotated by construction (got %s none)", stages, K,
                              ps_param_store_label (c->params, "sharding", "--sharding"));
    }
  if (c->mesh_layout && !check_mesh_layout (c, error))
    return FALSE;
  int64_t mb = c->global_batch / c->microbatches, tokens = mb * c->seq_len, stage_cores = c->cores / K;
  /* The batch splits over every core (of a stage), or over mesh axis 0. */
  const int64_t dp = c->mesh_layout ? c->mesh[0] : stage_cores;
  if (mb % dp != 0)
    return ps_param_fail (error, "the microbatch (%" G_GINT64_FORMAT " sequences) is not divisible by the %"
                 G_GINT64_FORMAT " %s (data parallel)", mb, dp, c->mesh_layout ? "devices of mesh axis 0"
                 : K > 1 ? "cores of a pipeline stage" : "cores");
  int64_t G = ps_moe_lm_groups (c);
  if (tokens % G != 0)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " does not divide the %" G_GINT64_FORMAT
                 " tokens of a microbatch", groups, G, tokens);
  if (c->moe_every > c->layers)
    return ps_param_fail (error, "%s %d exceeds %s %d: no MoE layer", ps_param_store_label (c->params, "moe_every", "--moe-every"), c->moe_every,
                 ps_param_store_label (c->params, "layers", "--layers"), c->layers);
  /* The largest arrays of a microbatch's step: the builder refuses arrays
   * over PS_MAX_ELEMENTS, so they are refused here, naming the options. */
  const int64_t S = c->seq_len, T = tokens / G, E = c->experts, C = ps_moe_lm_capacity (c), F = c->ffn_dim;
  struct { const char *what; int64_t d[4]; } big[] = {
    { "[batch, seq, ffn] FFN activations", { mb, S, F, 1 } },
    { "[batch, heads, seq, seq] attention scores", { mb, c->heads, S, S } },
    { "[batch, seq, vocab] logits", { mb, S, c->vocab, 1 } },
    { "[groups, group tokens, experts, capacity] dispatch tensor", { G, T, E, C } },
    { "[experts, groups, capacity, ffn] expert activations", { E, G, C, F } },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (big); i++)
    {
      int64_t n;
      if (!ps_checked_product (4, big[i].d, PS_MAX_ELEMENTS, &n))
        return ps_param_fail (error, "the %s would have more than 2^40 elements (%s %" G_GINT64_FORMAT ", %s %"
                     G_GINT64_FORMAT ", %s %" G_GINT64_FORMAT "; doc/robustness.md)", big[i].what, batch,
                     c->global_batch, ps_param_store_label (c->params, "seq_len", "--seq-len"), S, ps_param_store_label (c->params, "experts", "--experts"), E);
    }
  return TRUE;
}

/* One layer: attention, then a dense FFN or the MoE block. */
typedef struct {
  const PsMoeLmConfig *cfg;
  const PsAttentionContext *ctx;
  PsAttention attention;
  gboolean moe;
  int axis;                  /* the mesh axis of the MoE block's group and expert splits */
  PsFfn ffn;                 /* dense layers */
  PsInstr *ln, *wg, *wi, *wo; /* MoE layers */
} MoeLmLayer;

/* w cast to the activation type in net->c (in a microbatch loop's body the
 * weight is the entry's, which the loop makes an invariant). */
static PsInstr *
cast_weight (PsNet *net, PsBuilder *b, PsInstr *w)
{
  return ps_build_convert (b, w, net->act);
}

static PsInstr *
moe_ffn (PsNet *net, const MoeLmLayer *L, PsInstr *x)
{
  const PsMoeLmConfig *cfg = L->cfg;
  const int64_t B = x->shape->dims[0], S = x->shape->dims[1], M = x->shape->dims[2];
  const int64_t G = ps_moe_lm_groups (cfg), T = B * S / G;
  PsInstr *h = ps_norm (net, cfg->norm, x, L->ln);
  PsBuilder *b = ps_net_builder (net);
  int64_t gsm[3] = { G, T, M }, bsm[3] = { B, S, M };
  PsInstr *wg = cast_weight (net, b, L->wg);
  PsInstr *wi = cast_weight (net, b, L->wi);
  PsInstr *wo = cast_weight (net, b, L->wo);
  PsMoeConfig mc = { cfg->experts, ps_moe_lm_capacity (cfg), cfg->top_k, L->axis };
  if (cfg->mesh_layout)
    ps_moe_layout_config (cfg->layout, net->m->num_partitions, net->mesh_devices, &mc);
  mc.gelu = cfg->expert_ffn == PS_FFN_GELU;
  PsInstr *aux = NULL;
  PsInstr *y = ps_moe_layer (b, &mc, ps_build_reshape (b, h, 3, gsm), wg, wi, wo, &aux);
  y = ps_build_reshape (b, y, 3, bsm);
  PsInstr *weighted = ps_build_mul (b, aux, ps_build_scalar (b, PS_F32, cfg->aux_loss_weight));
  /* Shapes come from a checked config: a builder error is a bug here. */
  g_assert (ps_builder_ok (b));
  ps_net_layer_aux_loss (net, weighted);
  return ps_build_add (ps_net_builder (net), x, y);
}

static PsInstr *
moe_lm_layer (PsNet *net, gconstpointer layer, PsInstr *x)
{
  const MoeLmLayer *L = layer;
  ps_net_annotate (net, x, "bsm");
  PsAttention att;
  ps_attention_cast (net, &L->attention, &att);
  PsInstr *x1 = ps_attention (net, &att, L->ctx, x);
  if (!L->moe)
    {
      PsFfn ffn;
      ps_ffn_cast (net, &L->ffn, &ffn);
      return ps_ffn (net, &ffn, x1);
    }
  return moe_ffn (net, L, x1);
}

static PsInstr *
rebound (GHashTable *map, PsInstr *x)
{
  PsInstr *y = x ? g_hash_table_lookup (map, x) : NULL;
  return y ? y : x;
}

/* The layer's PsLayerRebindFn (a pipeline stage runs it on its rows of
 * the stacked weights). */
static gpointer
moe_lm_layer_rebind (gconstpointer layer, GHashTable *map)
{
  MoeLmLayer *r = g_memdup2 (layer, sizeof *r);
  PsInstr **f[] = { &r->attention.ln, &r->attention.wq, &r->attention.wk, &r->attention.wv, &r->attention.wo,
                    &r->attention.rel_bias, &r->ffn.ln, &r->ffn.w1, &r->ffn.w1_gate, &r->ffn.w2,
                    &r->ln, &r->wg, &r->wi, &r->wo };
  for (gsize i = 0; i < G_N_ELEMENTS (f); i++)
    *f[i] = rebound (map, *f[i]);
  return r;
}

/* Layer l's weights "<prefix>.*" (l decides whether it is an MoE layer);
 * the MoE block splits groups and experts over mesh axis `axis`. */
static void
layer_weights (PsNet *net, const PsMoeLmConfig *c, int l, const char *prefix, int axis,
               const PsAttentionContext *ctx, MoeLmLayer *out)
{
  out->cfg = c;
  out->ctx = ctx;
  out->axis = axis;
  out->moe = l % c->moe_every == c->moe_every - 1;
  int buckets = c->position == PS_POSITION_RELATIVE ? c->rel_buckets : 0;
  ps_attention_weights_kv (net, prefix, c->model_dim, c->heads, c->head_dim, c->kv_heads > 0 ? c->kv_heads : c->heads,
                           buckets, c->norm, &out->attention);
  if (!out->moe)
    {
      ps_ffn_weights_kind (net, prefix, c->model_dim, c->ffn_dim, c->ffn, c->norm, TRUE, &out->ffn);
      return;
    }
  /* The router's expert dim is "r": replicated (GShard's replicate(wg)),
   * where the experts' "e" is split; their M and H are "k" and "f", which
   * no dense weight uses, so the megatron plan of the 2-D layouts leaves
   * them whole (experts-x-hidden-y splits "f"). */
  ps_moe_ffn_weights (net, prefix, "ln2", c->model_dim, c->ffn_dim, c->experts, "ekf", "efk",
                      &out->ln, &out->wg, &out->wi, &out->wo);
}

/* The head: final layer norm, logits against the tied embedding (f32),
 * softmax cross-entropy. */
static PsInstr *
head_loss (PsNet *net, PsNormKind norm, PsInstr *top, PsInstr *final_ln, PsInstr *emb_head, PsInstr *labels)
{
  PsInstr *h = ps_norm (net, norm, top, final_ln);
  const char *spec = top->shape->rank == 4 ? "ubsm,vm->ubsv" : "bsm,vm->bsv";
  PsInstr *logits = ps_build_cast (ps_net_builder (net), ps_net_einsum (net, spec, h, emb_head), PS_F32);
  return ps_softmax_cross_entropy (net, logits, labels);
}

/* Forward and backward of microbatch u: the head's loss plus the MoE
 * layers' weighted load-balancing terms. */
static gboolean
microbatch (PsNet *net, const PsMoeLmConfig *c, PsInstr *emb, const PsLayer *layers,
            PsInstr *final_ln, PsInstr *mids, PsInstr *mlabels, GError **error)
{
  PsInstr *x0 = ps_embed (net, mids, ps_build_cast (ps_net_builder (net), emb, net->act));
  g_autofree PsInstr **xs = g_new (PsInstr *, c->layers + 1);
  g_autofree PsInstr **auxs = g_new0 (PsInstr *, c->layers);
  PsInstr *top = ps_layer_stack_forward_aux (net, c->layers, layers, x0, xs, auxs);
  PsInstr *emb_head = ps_net_weight_view (net, emb, net->act);
  PsInstr *ce = head_loss (net, c->norm, top, final_ln, emb_head, mlabels), *loss = ce;
  for (int l = 0; l < c->layers; l++)
    if (auxs[l])
      loss = ps_build_add (ps_net_builder (net), loss, auxs[l]);
  ps_net_add_loss (net, loss);
  /* The head's backward from the cross-entropy alone: the aux terms are
   * differentiated with their layers. The loss is averaged over
   * microbatches, so every seed is 1/microbatches. */
  PsInstr *seed = ps_build_scalar (ps_net_builder (net), PS_F32, 1.0 / c->microbatches);
  PsInstr *head_w[2] = { final_ln, emb_head }, *gx;
  return ps_net_vjp (net, ce, seed, top, &gx, 2, head_w, error)
         && ps_layer_stack_backward_aux (net, c->layers, layers, xs, auxs, seed, gx, c->remat, &gx, error)
         && ps_net_vjp (net, x0, gx, NULL, NULL, 1, &emb, error);
}

/* The microbatch loop's body (ps_net_microbatch_loop). */
typedef struct {
  const PsMoeLmConfig *c;
  PsInstr *emb;
  const PsLayer *layers;
  PsInstr *final_ln;
} MicrobatchStep;

static gboolean
microbatch_step (PsNet *net, PsInstr *const *data, gpointer user, GError **error)
{
  const MicrobatchStep *m = user;
  return microbatch (net, m->c, m->emb, m->layers, m->final_ln, data[0], data[1], error);
}

int64_t *
ps_moe_lm_program_mesh (const PsMoeLmConfig *c, int *rank, int64_t *dims)
{
  int K = MAX (c->pipeline_stages, 1);
  *rank = K > 1 || c->mesh_layout ? 2 : 1;
  dims[0] = K > 1 ? K : c->mesh_layout ? c->mesh[0] : c->cores;
  dims[1] = c->mesh_layout ? c->mesh[1] : c->cores / K;
  return ps_pipeline_program_devices (K, c->cores, K > 1 ? c->physical : NULL);
}

/* What the step takes after the layers' weights. */
typedef struct {
  PsInstr *final_ln, *ids, *labels, *lr, *decay;
} StepInputs;

/* The final layer norm's weight, the optimizer state, the data and the
 * scalars, then the attention context the layers share. */
static void
step_inputs (PsNet *net, const PsMoeLmConfig *c, PsAttentionContext *ctx, StepInputs *in)
{
  in->final_ln = ps_layer_norm_weight (net, NULL, "final_ln", c->model_dim);
  ps_net_add_optimizer_state (net, c->optimizer, PS_AXIS_NONE);
  int64_t bs[2] = { c->global_batch, c->seq_len };
  in->ids = ps_net_input (net, "ids", PS_S32, 2, bs);
  in->labels = ps_net_input (net, "labels", PS_S32, 2, bs);
  in->lr = ps_net_input (net, "learning_rate", PS_F32, 0, NULL);
  in->decay = ps_net_input (net, "decay", PS_F32, 0, NULL);
  PsBlockOptions o;
  ps_block_options_init (&o, c->rel_buckets, FALSE);
  o.position = c->position == PS_POSITION_RELATIVE && c->rel_buckets == 0 ? PS_POSITION_NONE : c->position;
  o.rotary_dim = c->rotary_dim;
  o.rotary_pairs = c->rotary_pairs;
  ps_attention_context_causal_opts (net, c->seq_len, c->head_dim, &o, ctx);
}

/* The step's outputs (the optimizer update, or the gradients), info. Takes net. */
static PsModule *
finish_step (const PsMoeLmConfig *c, PsNet *net, PsMoeLmInfo *info, PsInstr *lr, PsInstr *decay)
{
  if (info)
    {
      memset (info, 0, sizeof *info);
      info->n_annotations = net->n_annotations;
      double params = 0, expert = 0;
      for (guint i = 0; i < net->weights->len; i++)
        {
          const PsInstr *w = net->weights->pdata[i];
          double n = (double) ps_shape_elements (w->shape);
          params += n;
          if (strstr (w->name, ".moe_wi") || strstr (w->name, ".moe_wo"))
            expert += n;
        }
      info->params = params;
      info->active_params = params - expert + expert * c->top_k / (double) c->experts;
      info->tokens_per_step = c->global_batch * c->seq_len;
      info->model_flops = 6.0 * info->active_params * (double) info->tokens_per_step
                          + 12.0 * c->layers * (double) c->global_batch * (double) c->seq_len
                            * (double) c->seq_len * (double) (c->heads * c->head_dim);
    }
  PsModule *m = c->outputs_gradients ? ps_net_finish_gradients (net) : ps_net_finish (net, lr, decay);
  if (info)
    info->n_instructions = m->entry->instrs->len;
  return m;
}

/* The layers as a GSPMD pipeline (models/pipeline.h) on the mesh
 * [K, cores / K]: the stage letter p on axis 0; within a stage, as without
 * a pipeline on its cores (axis 1): activations split on the batch, expert
 * weights on E, the MoE block's groups and experts. Layer j of every stage
 * has its own weights [K, ...] ("stages.layer1.moe_wi"); a stage's L/K
 * layers repeat the MoE pattern, so every stage runs the same function.
 * Ids and labels are cut into the microbatches [M, B/M, S] and embedded
 * so (ps_pipeline_enter); the loss is the head's on all of them plus the
 * layers' load-balancing terms summed by the pipeline over the stages and
 * the microbatches it ran, divided by M: the same mean over microbatches
 * as without a pipeline. */
static PsModule *
build_pipelined (const PsMoeLmConfig *c, PsMoeLmInfo *info, GError **error)
{
  int rank;
  int64_t dims[2];
  g_autofree int64_t *devices = ps_moe_lm_program_mesh (c, &rank, dims);
  PsShardingPlan plan;
  ps_sharding_plan_init (&plan);
  ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "b", 1);
  ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "p", 0);
  ps_sharding_plan_split (&plan, PS_WEIGHTS, "e", 1);
  g_autofree char *mname = g_strdup_printf ("moe_lm_%s", c->name);
  g_autoptr (PsNet) net = ps_net_new (mname, "train_step", rank, dims, devices, &plan);
  net->act = c->f32_activations ? PS_F32 : PS_BF16;

  const int K = c->pipeline_stages, M = c->microbatches;
  PsPipeline p = { K, M, c->layers / K, 0, 'p', "bsm", c->remat, TRUE };
  PsAttentionContext ctx;
  PsInstr *emb = ps_embedding_weight (net, "embedding", c->vocab, c->model_dim);
  g_autofree MoeLmLayer *ml = g_new0 (MoeLmLayer, p.layers_per_stage);
  g_autofree PsLayer *layers = g_new0 (PsLayer, p.layers_per_stage);
  ps_pipeline_stack_weights (net, &p);
  for (int j = 0; j < p.layers_per_stage; j++)
    {
      g_autofree char *prefix = g_strdup_printf ("stages.layer%d", j);
      int first = ps_net_n_weights (net);
      layer_weights (net, c, j, prefix, 1, &ctx, &ml[j]);
      layers[j] = ps_layer (net, moe_lm_layer, &ml[j], first);
      layers[j].rebind = moe_lm_layer_rebind;
    }
  ps_net_stack_weights (net, 0);
  StepInputs in;
  step_inputs (net, c, &ctx, &in);

  /* The microbatches [M, B/M, S, M] from the start: embedding, head and
   * loss split them over the stages (ps_pipeline_enter). */
  PsInstr *ids_u = ps_pipeline_split_batch (net, in.ids, M), *labels_u = ps_pipeline_split_batch (net, in.labels, M);
  PsInstr *x0 = ps_net_einsum (net, "ubsv,vm->ubsm", ps_net_one_hot (net, ids_u, c->vocab, net->act),
                               ps_build_cast (ps_net_builder (net), emb, net->act));
  PsInstr *inputs = ps_pipeline_enter (net, &p, x0);
  g_autoptr (PsPipelineRun) run = NULL;
  PsInstr *outputs = ps_pipeline_forward (net, &p, layers, inputs, &run, error);
  if (!outputs)
    return NULL;
  PsInstr *top = ps_pipeline_leave (net, &p, outputs);
  PsInstr *emb_head = ps_net_weight_view (net, emb, net->act);
  PsInstr *ce = head_loss (net, c->norm, top, in.final_ln, emb_head, labels_u);
  PsInstr *per_mb = ps_build_scalar (ps_net_builder (net), PS_F32, 1.0 / M);
  ps_net_add_loss (net, ps_build_add (ps_net_builder (net), ce,
                                      ps_build_mul (ps_net_builder (net), ps_pipeline_aux_loss (run), per_mb)));
  PsInstr *head_w[2] = { in.final_ln, emb_head }, *gx, *gin;
  if (!ps_net_vjp (net, ce, NULL, outputs, &gx, 2, head_w, error)
      || !ps_pipeline_backward (net, g_steal_pointer (&run), gx, per_mb, &gin, error)
      || !ps_net_vjp (net, inputs, gin, NULL, NULL, 1, &emb, error))
    return NULL;
  return finish_step (c, g_steal_pointer (&net), info, in.lr, in.decay);
}

PsModule *
ps_moe_lm_build (const PsMoeLmConfig *c, PsMoeLmInfo *info, GError **error)
{
  if (!ps_moe_lm_check (c, error))
    return NULL;
  if (c->pipeline_stages > 1)
    return build_pipelined (c, info, error);
  int rank;
  int64_t dims[2];
  g_autofree int64_t *devices = ps_moe_lm_program_mesh (c, &rank, dims);
  /* Data parallel over every core; expert weights split on E. Without
   * annotations the plan stays empty and the MoE block's own splits are
   * off (axis -1). */
  PsShardingPlan plan;
  ps_sharding_plan_init (&plan);
  int64_t vocab = c->vocab;
  if (c->mesh_layout)
    {
      /* The dense layers as the dense family's megatron, the experts as
       * the layout says (moe_lm.h); the vocabulary padded to split over
       * axis 1 as the dense LM pads it. */
      ps_sharding_preset_plan (PS_SHARDING_MEGATRON, &plan);
      ps_moe_layout_plan (c->layout, "f", &plan);
      ps_heads_plan (&plan, 2, c->mesh, c->heads, c->kv_heads);
      PsDenseLmConfig view;
      memset (&view, 0, sizeof view);
      view.vocab = c->vocab;
      view.sharding = PS_SHARDING_MEGATRON;
      view.mesh[0] = c->mesh[0];
      view.mesh[1] = c->mesh[1];
      vocab = ps_dense_lm_padded_vocab (&view);
    }
  else if (!c->no_annotations)
    {
      ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "b", 0);
      ps_sharding_plan_split (&plan, PS_WEIGHTS, "e", 0);
    }
  g_autofree char *mname = g_strdup_printf ("moe_lm_%s", c->name);
  g_autoptr (PsNet) net = ps_net_new (mname, "train_step", rank, dims, devices, &plan);
  net->act = c->f32_activations ? PS_F32 : PS_BF16;

  PsAttentionContext ctx;
  PsInstr *emb = ps_embedding_weight (net, "embedding", vocab, c->model_dim);
  g_autofree MoeLmLayer *ml = g_new0 (MoeLmLayer, c->layers);
  g_autofree PsLayer *layers = g_new0 (PsLayer, c->layers);
  for (int l = 0; l < c->layers; l++)
    {
      g_autofree char *prefix = g_strdup_printf ("layer%d", l);
      int first = ps_net_n_weights (net);
      layer_weights (net, c, l, prefix, c->no_annotations ? -1 : 0, &ctx, &ml[l]);
      layers[l] = ps_layer (net, moe_lm_layer, &ml[l], first);
    }
  StepInputs in;
  step_inputs (net, c, &ctx, &in);
  const int M = c->microbatches;
  if (M > 1 && !c->unroll_microbatches)
    {
      /* one while loop over the microbatches (doc/models.md, "Gradient
       * accumulation") */
      MicrobatchStep ms = { c, emb, layers, in.final_ln };
      PsInstr *data[2] = { in.ids, in.labels };
      if (!ps_net_microbatch_loop (net, 2, data, M, microbatch_step, &ms, error))
        return NULL;
    }
  else
    for (int u = 0; u < M; u++)
      {
        PsInstr *mids = ps_net_microbatch (net, in.ids, u, M);
        PsInstr *mlabels = ps_net_microbatch (net, in.labels, u, M);
        if (!microbatch (net, c, emb, layers, in.final_ln, mids, mlabels, error))
          return NULL;
      }
  return finish_step (c, g_steal_pointer (&net), info, in.lr, in.decay);
}

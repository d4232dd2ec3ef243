/* The dense Transformer LM training step: see dense_lm.h. */
#include "config.h"

#include "models/dense_lm.h"

#include "models/pipeline.h"

#include <math.h>
#include <string.h>

#include "models/layers.h"
#include "models/net.h"
#include "traces/trace.h"

/* ---- configs ------------------------------------------------------------------ */

static void
config_defaults (PsDenseLmConfig *c)
{
  memset (c, 0, sizeof *c);
  c->name = "custom";
  c->head_dim = 128;
  c->vocab = 32000;
  c->rel_buckets = 32;
  c->ffn = PS_FFN_GEGLU;
  c->optimizer = PS_OPTIMIZER_ADAFACTOR;
  c->remat = TRUE;
  c->microbatches = 1;
  c->device_order = "arange";
  c->sharding = PS_SHARDING_2D;
}

void
ps_dense_lm_config_small (PsDenseLmConfig *out)
{
  config_defaults (out);
  out->name = "small";
  out->layers = 2;
  out->model_dim = 32;
  out->ffn_dim = 64;
  out->heads = 4;
  out->head_dim = 8;
  out->seq_len = 16;
  out->global_batch = 8;
  out->vocab = 64;
  out->rel_buckets = 8;
  out->gated_gelu = TRUE;
  out->mesh[0] = 2;
  out->mesh[1] = 4;
  out->physical[0] = 2;
  out->physical[1] = 2;
  out->physical[2] = 2;
}

const char *const ps_sharding_preset_names[] = {
  "2d", "1d", "dp", "megatron", "megatron-sp", "fsdp", "none", NULL
};

static gboolean
require_div (int64_t value, int64_t by, const char *what, const char *axis, GError **error)
{
  if (by > 0 && value % by != 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "%s = %" G_GINT64_FORMAT " is not divisible by %s (%" G_GINT64_FORMAT ")",
                   what, value, axis, by);
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_dense_lm_check (const PsDenseLmConfig *c, GError **error)
{
  /* Upper bounds (doc/robustness.md): the program grows with the layers
   * (256 layers of the small model take 76 s and 0.8 GB to run) and with
   * the microbatches when they are unrolled (64: 29 s, 0.18 GB against
   * 0.55 s, 47 MB as the default loop), their product with
   * the layers by the max_layer_copies option (dense_family.c), and dims up to
   * 2^24 keep every product of two of them exact in an int64; shapes over
   * 2^40 elements are refused by the builder. */
  const int64_t dim_max = INT64_C (1) << 24;
  struct { const char *key, *opt; int64_t v, max; } pos[] = {
    { "layers", "--layers", c->layers, 1024 }, { "model_dim", "--model-dim", c->model_dim, dim_max },
    { "ffn_dim", "--ffn-dim", c->ffn_dim, dim_max }, { "heads", "--heads", c->heads, dim_max },
    { "head_dim", "--head-dim", c->head_dim, dim_max }, { "seq_len", "--seq-len", c->seq_len, dim_max },
    { "global_batch", "--batch", c->global_batch, dim_max }, { "vocab", "--vocab", c->vocab, dim_max },
    { "microbatches", "--microbatches", c->microbatches, 1024 },
    { "mesh", "--mesh (first)", c->mesh[0], PS_MAX_DEVICES },
    { "mesh", "--mesh (second)", c->mesh[1], PS_MAX_DEVICES },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (pos); i++)
    {
      if (pos[i].v <= 0)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be positive (got %" G_GINT64_FORMAT ")",
                       ps_param_store_label (c->params, pos[i].key, pos[i].opt), pos[i].v);
          return FALSE;
        }
      if (pos[i].v > pos[i].max)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be at most %" G_GINT64_FORMAT
                       " (got %" G_GINT64_FORMAT ")", ps_param_store_label (c->params, pos[i].key, pos[i].opt), pos[i].max, pos[i].v);
          return FALSE;
        }
    }
  if (c->mesh[0] * c->mesh[1] > PS_MAX_DEVICES)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                   " has more than %d devices", ps_param_store_label (c->params, "mesh", "--mesh"), c->mesh[0], c->mesh[1],
                   PS_MAX_DEVICES);
      return FALSE;
    }
  /* Half the buckets are exact distances, the rest logarithmic up to 128;
   * 0: no relative bias. */
  if (c->rel_buckets != 0 && (c->rel_buckets < 2 || c->rel_buckets > 254))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be 0 (none) or 2 .. 254 (got %d)",
                   ps_param_store_label (c->params, "rel_buckets", "--rel-buckets"), c->rel_buckets);
      return FALSE;
    }
  const char *kvs = ps_param_store_label (c->params, "kv_heads", "--kv-heads");
  if (c->kv_heads < 0 || c->kv_heads > c->heads || (c->kv_heads > 0 && c->heads % c->kv_heads != 0))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must divide --heads (%" G_GINT64_FORMAT
                   "), got %" G_GINT64_FORMAT, kvs, c->heads, c->kv_heads);
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
  const char *batch = ps_param_store_label (c->params, "global_batch", "--batch"), *mbs = ps_param_store_label (c->params, "microbatches", "--microbatches");
  if (c->global_batch % c->microbatches != 0)
    return require_div (c->global_batch, c->microbatches, batch, mbs, error);
  const char *stages = ps_param_store_label (c->params, "pipeline_stages", "--pipeline-stages");
  if (c->pipeline_stages < 0 || c->pipeline_stages > c->layers)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be 1 .. --layers (%d), got %d", stages,
                   c->layers, c->pipeline_stages);
      return FALSE;
    }
  if (c->pipeline_stages > 1)
    {
      if (c->sharding != PS_SHARDING_2D && c->sharding != PS_SHARDING_1D)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: the in-layer sharding of a stage is 2d "
                       "or 1d (got %s)", stages, ps_param_store_label (c->params, "sharding", "--sharding"));
          return FALSE;
        }
      if (c->unroll)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s and --unroll: a pipeline is a loop", stages);
          return FALSE;
        }
      if (!require_div (c->layers, c->pipeline_stages, ps_param_store_label (c->params, "layers", "--layers"), stages, error))
        return FALSE;
      if (c->mesh[0] * c->mesh[1] * c->pipeline_stages > PS_MAX_DEVICES)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %d x --mesh %" G_GINT64_FORMAT
                       "x%" G_GINT64_FORMAT " has more than %d devices", stages, c->pipeline_stages,
                       c->mesh[0], c->mesh[1], PS_MAX_DEVICES);
          return FALSE;
        }
    }
  int64_t b = c->global_batch / c->microbatches;
  int64_t all = c->mesh[0] * c->mesh[1];
  const char *md = ps_param_store_label (c->params, "model_dim", "--model-dim");
  const char *ffn = ps_param_store_label (c->params, "ffn_dim", "--ffn-dim");
  const char *mb = "the microbatch size (global batch / microbatches)";
  /* Heads are split as kv heads (grouped-query attention keeps the query
   * groups of a kv head together), or by the query heads of each when the
   * kv heads are fewer than the axis (ps_heads_split); the vocabulary is
   * padded instead. */
  if (c->pipeline_stages > 1 && c->sharding == PS_SHARDING_1D)
    return require_div (b, c->mesh[0], mb, "mesh axis 0", error)
           && ps_heads_check_split (c->params, c->heads, c->kv_heads, c->mesh[1], "mesh axis 1", error)
           && require_div (c->ffn_dim, c->mesh[1], ffn, "mesh axis 1", error);
  switch (c->sharding)
    {
    case PS_SHARDING_2D:
      return require_div (b, c->mesh[0], mb, "mesh axis 0", error)
             && require_div (c->model_dim, c->mesh[0], md, "mesh axis 0", error)
             && require_div (c->model_dim, c->mesh[1], md, "mesh axis 1", error)
             && ps_heads_check_split (c->params, c->heads, c->kv_heads, c->mesh[1], "mesh axis 1", error)
             && require_div (c->ffn_dim, c->mesh[1], ffn, "mesh axis 1", error);
    case PS_SHARDING_MEGATRON_SP:
      if (!require_div (c->seq_len, c->mesh[1], ps_param_store_label (c->params, "seq_len", "--seq-len"), "mesh axis 1", error))
        return FALSE;
      /* fall through */
    case PS_SHARDING_MEGATRON:
      return require_div (b, c->mesh[0], mb, "mesh axis 0", error)
             && ps_heads_check_split (c->params, c->heads, c->kv_heads, c->mesh[1], "mesh axis 1", error)
             && require_div (c->ffn_dim, c->mesh[1], ffn, "mesh axis 1", error);
    case PS_SHARDING_1D:
      return ps_heads_check_split (c->params, c->heads, c->kv_heads, all, "the device count", error)
             && require_div (c->ffn_dim, all, ffn, "the device count", error);
    case PS_SHARDING_DP:
      return require_div (b, all, mb, "the device count", error);
    case PS_SHARDING_FSDP:
      return require_div (b, all, mb, "the device count", error)
             && require_div (c->model_dim, all, md, "the device count", error);
    case PS_SHARDING_NONE:
      return TRUE;
    }
  return TRUE;
}

int64_t
ps_dense_lm_padded_vocab (const PsDenseLmConfig *c)
{
  int64_t by = 1;
  switch (c->sharding)
    {
    case PS_SHARDING_2D:
    case PS_SHARDING_MEGATRON:
    case PS_SHARDING_MEGATRON_SP:
      by = c->mesh[1];
      break;
    case PS_SHARDING_1D:
      by = c->pipeline_stages > 1 ? c->mesh[1] : c->mesh[0] * c->mesh[1];
      break;
    case PS_SHARDING_DP:
    case PS_SHARDING_FSDP:
    case PS_SHARDING_NONE:
      by = 1;
      break;
    }
  return by > 1 ? (c->vocab + by - 1) / by * by : c->vocab;
}

int64_t *
ps_dense_lm_mesh_devices (const PsDenseLmConfig *c, GError **error)
{
  PsTraceMesh mesh = { 0 };
  mesh.rank = 2;
  mesh.dims[0] = c->mesh[0];
  mesh.dims[1] = c->mesh[1];
  if (!ps_trace_mesh_set_order (&mesh, c->device_order, c->physical))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "--device-order: unknown order '%s' (arange, arange_T or nonpod2d)", c->device_order);
      return NULL;
    }
  if (mesh.order == PS_TRACE_ORDER_NONPOD2D
      && c->physical[0] * c->physical[1] * c->physical[2] != c->mesh[0] * c->mesh[1])
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "%s nonpod2d: the slice has %" G_GINT64_FORMAT " cores but the mesh %" G_GINT64_FORMAT
                   "x%" G_GINT64_FORMAT " has %" G_GINT64_FORMAT "%s", ps_param_store_label (c->params, "device_order", "--device-order"),
                   c->physical[0] * c->physical[1] * c->physical[2], c->mesh[0], c->mesh[1], c->mesh[0] * c->mesh[1],
                   /* nonpod2d orders a whole slice; a stage's mesh is part of one. */
                   c->pipeline_stages > 1 ? " (a pipeline stage's mesh is part of the slice: --device-order arange "
                                            "places the stages)" : "");
      return NULL;
    }
  guint64 n = 0;
  guint32 *ids = ps_trace_mesh_device_ids (&mesh, &n);
  if (ids == NULL)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--device-order %s does not fit mesh %"
                   G_GINT64_FORMAT "x%" G_GINT64_FORMAT, c->device_order, c->mesh[0], c->mesh[1]);
      return NULL;
    }
  int64_t *out = g_new (int64_t, n);
  for (guint64 i = 0; i < n; i++)
    out[i] = ids[i];
  g_free (ids);
  return out;
}

int64_t
ps_dense_lm_n_devices (const PsDenseLmConfig *c)
{
  return c->mesh[0] * c->mesh[1] * (c->pipeline_stages > 1 ? c->pipeline_stages : 1);
}

int64_t *
ps_dense_lm_program_mesh (const PsDenseLmConfig *c, int *rank, int64_t *dims, GError **error)
{
  if (c->pipeline_stages <= 1)
    {
      *rank = 2;
      dims[0] = c->mesh[0];
      dims[1] = c->mesh[1];
      return ps_dense_lm_mesh_devices (c, error);
    }
  *rank = 3;
  dims[0] = c->pipeline_stages;
  dims[1] = c->mesh[0];
  dims[2] = c->mesh[1];
  return ps_pipeline_program_devices (c->pipeline_stages, ps_dense_lm_n_devices (c), c->physical);
}

/* ---- the training step ------------------------------------------------------------ */

/* The presets as plans over the 2-D mesh (doc/models.md has the table). */
void
ps_sharding_preset_plan (PsShardingPreset preset, PsShardingPlan *plan)
{
  ps_sharding_plan_init (plan);
  switch (preset)
    {
    case PS_SHARDING_2D:
      /* Axis 0 splits the batch and the weights' M; axis 1 the
       * activations' M and the weights' heads, hidden and vocabulary. */
      ps_sharding_plan_split (plan, PS_ACTIVATIONS, "b", 0);
      ps_sharding_plan_split (plan, PS_ACTIVATIONS, "m", 1);
      ps_sharding_plan_split (plan, PS_WEIGHTS, "m", 0);
      ps_sharding_plan_split (plan, PS_WEIGHTS, "nhv", 1);
      break;
    case PS_SHARDING_1D:
      /* Model parallel on all devices; activations stated replicated. */
      plan->annotate[PS_ACTIVATIONS] = TRUE;
      ps_sharding_plan_split (plan, PS_WEIGHTS, "nhv", PS_AXIS_ALL);
      break;
    case PS_SHARDING_DP:
      /* Data parallel; weights left to propagation. */
      ps_sharding_plan_split (plan, PS_ACTIVATIONS, "b", PS_AXIS_ALL);
      break;
    case PS_SHARDING_MEGATRON_SP:
      /* Sequence parallelism: the layer input (the norm and residual
       * region) split by sequence over the tensor-parallel axis, so
       * propagation turns Megatron's all-reduces into an all-gather
       * before the block and a reduce-scatter after it. */
      ps_sharding_plan_split (plan, PS_ACTIVATIONS, "s", 1);
      /* fall through */
    case PS_SHARDING_MEGATRON:
      /* Tensor parallel over axis 1 (the 1d plan within a row of the mesh),
       * data parallel over axis 0; the weights' m is never split, so each
       * row holds a whole replica. */
      ps_sharding_plan_split (plan, PS_ACTIVATIONS, "b", 0);
      ps_sharding_plan_split (plan, PS_WEIGHTS, "nhv", 1);
      break;
    case PS_SHARDING_FSDP:
      /* Every weight split along its model dim over every device, batch
       * over every device: the dots need the whole weight, so propagation
       * gathers it where each layer uses it and reduce-scatters its
       * gradient; the optimizer state follows the weight. */
      ps_sharding_plan_split (plan, PS_ACTIVATIONS, "b", PS_AXIS_ALL);
      ps_sharding_plan_split (plan, PS_WEIGHTS, "m", PS_AXIS_ALL);
      break;
    case PS_SHARDING_NONE:
      /* No annotation at all: the program a user brings to podsim
       * autoshard, to compare what it finds with the presets. */
      break;
    }
}

/* The block options of the config; gated_gelu FALSE turns the default
 * GEGLU into ReLU (the older option's meaning). */
static void
block_options (const PsDenseLmConfig *cfg, PsBlockOptions *o)
{
  ps_block_options_init (o, cfg->rel_buckets, cfg->gated_gelu);
  o->position = cfg->position;
  o->block = cfg->block;
  o->norm = cfg->norm;
  o->ffn = cfg->ffn == PS_FFN_GEGLU && !cfg->gated_gelu ? PS_FFN_RELU : cfg->ffn;
  o->kv_heads = cfg->kv_heads;
  o->rotary_dim = cfg->rotary_dim;
  o->rotary_pairs = cfg->rotary_pairs;
}

/* Weight-update sharding splits optimizer state over the data-parallel
 * axis: axis 0 of the 2-D mesh, else every device. */
static int
wus_axis (const PsDenseLmConfig *cfg)
{
  if (!cfg->weight_update_sharding)
    return PS_AXIS_NONE;
  switch (cfg->sharding)
    {
    case PS_SHARDING_2D:
    case PS_SHARDING_MEGATRON:
    case PS_SHARDING_MEGATRON_SP:
      return 0;
    default:
      return PS_AXIS_ALL;
    }
}

/* Final layer norm, logits against the tied embedding, cross-entropy. */
static PsInstr *
head_loss (PsNet *net, const PsDenseLmConfig *cfg, PsInstr *x, PsInstr *final_ln, PsInstr *emb_head,
           PsInstr *labels)
{
  PsInstr *h = ps_norm (net, cfg->norm, x, final_ln);
  const char *spec = x->shape->rank == 4 ? "ubsm,vm->ubsv" : "bsm,vm->bsv";
  PsInstr *logits = ps_build_cast (ps_net_builder (net), ps_net_einsum (net, spec, h, emb_head), PS_F32);
  return ps_softmax_cross_entropy (net, logits, labels);
}

/* Forward and backward of microbatch u, gradients accumulated in the net.
 * n_layers layers, or (loop) one layer over stacked weights run as a loop
 * of cfg->layers iterations. */
/* The embedding weights of the step: the table, then the softmax weight
 * (untied) and the learned position table, NULL where absent. */
typedef struct {
  PsInstr *table, *softmax, *positions;
} Embeddings;

static gboolean
microbatch (PsNet *net, const PsDenseLmConfig *cfg, gboolean last, const Embeddings *e, int n_layers,
            const PsLayer *layers, gboolean loop, PsInstr *final_ln, PsInstr *mids,
            PsInstr *mlabels, PsInstr *lr, PsInstr *decay, GError **error)
{
  PsInstr *x0 = ps_embed (net, mids, ps_build_cast (ps_net_builder (net), e->table, PS_BF16));
  if (e->positions)
    {
      /* GPT-2/3's learned absolute positions, added to the token embedding. */
      int64_t sm[2] = { 1, 2 };
      PsInstr *pos = ps_build_cast (ps_net_builder (net), e->positions, PS_BF16);
      x0 = ps_build_add (ps_net_builder (net), x0, ps_build_broadcast_to (ps_net_builder (net), pos, x0->shape, sm));
    }
  g_autofree PsInstr **xs = g_new (PsInstr *, n_layers + 1);
  g_autoptr (PsLayerLoop) lp = NULL;
  PsInstr *top = loop ? ps_layer_loop_forward (net, &layers[0], cfg->layers, x0, cfg->remat, &lp, error)
                      : ps_layer_stack_forward (net, n_layers, layers, x0, xs);
  if (!top)
    return FALSE;
  /* The head gets its own cast of the tied embedding, a view of it for
   * the backward pass (see ps_net_weight_view). */
  PsInstr *emb_head = ps_net_weight_view (net, e->softmax ? e->softmax : e->table, PS_BF16);
  PsInstr *loss = head_loss (net, cfg, top, final_ln, emb_head, mlabels);
  ps_net_add_loss (net, loss);

  /* Backward: head, layers from the top, embedding. The loss is averaged
   * over microbatches, so the seed is 1/microbatches. */
  PsInstr *seed = ps_build_scalar (ps_net_builder (net), PS_F32, 1.0 / cfg->microbatches);
  PsInstr *head_w[2] = { final_ln, emb_head }, *gx;
  if (!ps_net_vjp (net, loss, seed, top, &gx, 2, head_w, error))
    return FALSE;
  /* In the loop form the last microbatch updates each layer's weights in
   * its backward iteration, as soon as their gradient is complete (unless
   * the step is to return the gradients). */
  gboolean update = loop && !cfg->separate_update && !cfg->outputs_gradients && last;
  if (update ? !ps_layer_loop_backward_update (net, g_steal_pointer (&lp), gx, &gx, lr, decay, error)
      : loop ? !ps_layer_loop_backward (net, g_steal_pointer (&lp), gx, &gx, error)
             : !ps_layer_stack_backward (net, n_layers, layers, xs, gx, cfg->remat, &gx, error))
    return FALSE;
  PsInstr *in_w[2] = { e->table, e->positions };
  return ps_net_vjp (net, x0, gx, NULL, NULL, e->positions ? 2 : 1, in_w, error);
}

/* The microbatch loop's body (ps_net_microbatch_loop): no update inside,
 * the accumulated gradients are complete only after the loop. */
typedef struct {
  const PsDenseLmConfig *cfg;
  const Embeddings *e;
  int n_layers;
  const PsLayer *layers;
  gboolean loop;
  PsInstr *final_ln;
} MicrobatchStep;

static gboolean
microbatch_step (PsNet *net, PsInstr *const *inputs, gpointer user, GError **error)
{
  const MicrobatchStep *m = user;
  return microbatch (net, m->cfg, FALSE, m->e, m->n_layers, m->layers, m->loop, m->final_ln,
                     inputs[0], inputs[1], NULL, NULL, error);
}

static void
fill_info (const PsDenseLmConfig *cfg, const PsNet *net, PsDenseLmInfo *info)
{
  memset (info, 0, sizeof *info);
  info->n_annotations = net->n_annotations;
  double params = 0;
  for (guint i = 0; i < net->weights->len; i++)
    params += (double) ps_shape_elements (((PsInstr *) net->weights->pdata[i])->shape);
  info->params = params;
  const int64_t B = cfg->global_batch, S = cfg->seq_len;
  info->tokens_per_step = B * S;
  /* 6 flops per parameter per token (forward 2, backward 4) plus the
   * attention scores and context: 12 * L * B * S^2 * N * D. */
  info->model_flops = 6.0 * params * (double) (B * S)
                      + 12.0 * cfg->layers * (double) B * (double) S * (double) S
                        * (double) (cfg->heads * cfg->head_dim);
}

/* The net's step: the optimizer update, or (outputs_gradients) the
 * gradients; fills info. Takes net. */
static PsModule *
finish_step (const PsDenseLmConfig *cfg, PsNet *net, PsDenseLmInfo *info, PsInstr *lr, PsInstr *decay)
{
  if (info)
    fill_info (cfg, net, info);
  PsModule *m = cfg->outputs_gradients ? ps_net_finish_gradients (net) : ps_net_finish (net, lr, decay);
  if (info)
    info->n_instructions = m->entry->instrs->len;
  return m;
}

/* The layers as a GSPMD pipeline (models/pipeline.h): the mesh is
 * [stages, mesh[0], mesh[1]] with the stage letter p on axis 0 and, on
 * axes 1 and 2, the 2d plan or (1d) the batch on axis 1 and the weights'
 * heads, hidden and vocabulary on axis 2: model parallel within the stage
 * along axis 2, data parallel along axis 1 with the weights replicated
 * over it. Ids and labels are cut into the microbatches [M, B/M, S] and
 * embedded so (ps_pipeline_enter), run through the pipeline, and the loss
 * is taken on all of them (the mean of the microbatches' means). */
static PsModule *
build_pipelined (const PsDenseLmConfig *cfg, PsDenseLmInfo *info, GError **error)
{
  int rank;
  int64_t dims[3];
  g_autofree int64_t *devices = ps_dense_lm_program_mesh (cfg, &rank, dims, error);
  if (!devices)
    return NULL;
  PsShardingPlan plan;
  ps_sharding_plan_init (&plan);
  ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "b", 1);
  ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "p", 0);
  ps_sharding_plan_split (&plan, PS_WEIGHTS, "nhv", 2);
  if (cfg->sharding == PS_SHARDING_2D)
    {
      ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "m", 2);
      ps_sharding_plan_split (&plan, PS_WEIGHTS, "m", 1);
    }
  ps_heads_plan (&plan, rank, dims, cfg->heads, cfg->kv_heads);
  g_autofree char *mname = g_strdup_printf ("dense_lm_%s", cfg->name);
  g_autoptr (PsNet) net = ps_net_new (mname, "train_step", rank, dims, devices, &plan);

  PsPipeline p = { cfg->pipeline_stages, cfg->microbatches, cfg->layers / cfg->pipeline_stages,
                   0, 'p', "bsm", cfg->remat };
  PsAttentionContext ctx;
  PsBlockOptions bo;
  block_options (cfg, &bo);
  PsInstr *emb = ps_embedding_weight (net, "embedding", ps_dense_lm_padded_vocab (cfg), cfg->model_dim);
  PsInstr *positions = cfg->position != PS_POSITION_LEARNED ? NULL
    : ps_net_weight (net, "position_embedding", "sm", 2, (int64_t[]) { cfg->seq_len, cfg->model_dim });
  /* layer j of every stage: "stages.layer3.wq" [K, M, N, D] */
  g_autofree PsTransformerLayer *tl = g_new0 (PsTransformerLayer, p.layers_per_stage);
  g_autofree PsLayer *layers = g_new0 (PsLayer, p.layers_per_stage);
  ps_pipeline_stack_weights (net, &p);
  for (int j = 0; j < p.layers_per_stage; j++)
    {
      g_autofree char *prefix = g_strdup_printf ("stages.layer%d", j);
      int first = ps_net_n_weights (net);
      ps_transformer_layer_weights_opts (net, prefix, cfg->model_dim, cfg->ffn_dim, cfg->heads,
                                         cfg->head_dim, &bo, &ctx, &tl[j]);
      layers[j] = ps_layer (net, ps_transformer_layer, &tl[j], first);
      layers[j].rebind = ps_transformer_layer_rebind;
    }
  ps_net_stack_weights (net, 0);
  PsInstr *final_ln = ps_layer_norm_weight (net, NULL, "final_ln", cfg->model_dim);
  /* Untied: the head's own [V, M] weight, made where the unpipelined step
   * makes it; like the tied table it sits outside the stages (replicated
   * over the stage axis, v split like the embedding), so only the first
   * stage's embedding and the last stage's head read their weights. */
  PsInstr *softmax = cfg->untied_embeddings ? ps_embedding_weight (net, "softmax", emb->shape->dims[0], cfg->model_dim)
    : NULL;
  ps_net_add_optimizer_state (net, cfg->optimizer, cfg->weight_update_sharding ? 1 : PS_AXIS_NONE);
  int64_t bs[2] = { cfg->global_batch, cfg->seq_len };
  PsInstr *ids = ps_net_input (net, "ids", PS_S32, 2, bs);
  PsInstr *labels = ps_net_input (net, "labels", PS_S32, 2, bs);
  PsInstr *lr = ps_net_input (net, "learning_rate", PS_F32, 0, NULL);
  PsInstr *decay = ps_net_input (net, "decay", PS_F32, 0, NULL);
  ps_attention_context_causal_opts (net, cfg->seq_len, cfg->head_dim, &bo, &ctx);

  /* The microbatches [M, B/M, S, M] from the start: embedding, head and
   * loss split them over the stages (ps_pipeline_enter). */
  const int M = cfg->microbatches;
  PsInstr *ids_u = ps_pipeline_split_batch (net, ids, M), *labels_u = ps_pipeline_split_batch (net, labels, M);
  PsInstr *x0 = ps_net_einsum (net, "ubsv,vm->ubsm", ps_net_one_hot (net, ids_u, emb->shape->dims[0], PS_BF16),
                               ps_build_cast (ps_net_builder (net), emb, PS_BF16));
  if (positions)
    {
      int64_t sm[2] = { 2, 3 };
      PsInstr *pos = ps_build_cast (ps_net_builder (net), positions, PS_BF16);
      x0 = ps_build_add (ps_net_builder (net), x0, ps_build_broadcast_to (ps_net_builder (net), pos, x0->shape, sm));
    }
  PsInstr *inputs = ps_pipeline_enter (net, &p, x0);
  g_autoptr (PsPipelineRun) run = NULL;
  PsInstr *outputs = ps_pipeline_forward (net, &p, layers, inputs, &run, error);
  if (!outputs)
    return NULL;
  PsInstr *top = ps_pipeline_leave (net, &p, outputs);
  PsInstr *emb_head = ps_net_weight_view (net, softmax ? softmax : emb, PS_BF16);
  PsInstr *loss = head_loss (net, cfg, top, final_ln, emb_head, labels_u);
  ps_net_add_loss (net, loss);
  PsInstr *head_w[2] = { final_ln, emb_head }, *gx, *gin;
  if (!ps_net_vjp (net, loss, NULL, outputs, &gx, 2, head_w, error)
      || !ps_pipeline_backward (net, g_steal_pointer (&run), gx, NULL, &gin, error)
      || !ps_net_vjp (net, inputs, gin, NULL, NULL, positions ? 2 : 1, (PsInstr *[]) { emb, positions },
                      error))
    return NULL;
  return finish_step (cfg, g_steal_pointer (&net), info, lr, decay);
}

PsModule *
ps_dense_lm_build (const PsDenseLmConfig *cfg, PsDenseLmInfo *info, GError **error)
{
  if (!ps_dense_lm_check (cfg, error))
    return NULL;
  if (cfg->pipeline_stages > 1)
    return build_pipelined (cfg, info, error);
  g_autofree int64_t *devices = ps_dense_lm_mesh_devices (cfg, error);
  if (!devices)
    return NULL;
  PsShardingPlan plan;
  ps_sharding_preset_plan (cfg->sharding, &plan);
  ps_heads_plan (&plan, 2, cfg->mesh, cfg->heads, cfg->kv_heads);
  g_autofree char *mname = g_strdup_printf ("dense_lm_%s", cfg->name);
  g_autoptr (PsNet) net = ps_net_new (mname, "train_step", 2, cfg->mesh, devices, &plan);

  /* Parameters: weights, optimizer state, data, scalars. */
  PsAttentionContext ctx;
  PsBlockOptions bo;
  block_options (cfg, &bo);
  Embeddings e = { ps_embedding_weight (net, "embedding", ps_dense_lm_padded_vocab (cfg), cfg->model_dim),
                   NULL, NULL };
  if (cfg->position == PS_POSITION_LEARNED)
    e.positions = ps_net_weight (net, "position_embedding", "sm", 2,
                                 (int64_t[]) { cfg->seq_len, cfg->model_dim });
  /* Unrolled: one set of weights per layer ("layer3.wq"). As a loop (the
   * default): each weight stacked over the layers ("layers.wq"
   * [L, M, N, D]) and one layer run L times (doc/models.md). */
  const gboolean loop = !cfg->unroll;
  const int n_sets = loop ? 1 : cfg->layers;
  g_autofree PsTransformerLayer *tl = g_new0 (PsTransformerLayer, n_sets);
  g_autofree PsLayer *layers = g_new0 (PsLayer, n_sets);
  if (loop)
    ps_net_stack_weights (net, cfg->layers);
  for (int l = 0; l < n_sets; l++)
    {
      g_autofree char *prefix = loop ? g_strdup ("layers") : g_strdup_printf ("layer%d", l);
      int first = ps_net_n_weights (net);
      ps_transformer_layer_weights_opts (net, prefix, cfg->model_dim, cfg->ffn_dim, cfg->heads,
                                         cfg->head_dim, &bo, &ctx, &tl[l]);
      layers[l] = ps_layer (net, ps_transformer_layer, &tl[l], first);
      layers[l].rebind = ps_transformer_layer_rebind;
    }
  ps_net_stack_weights (net, 0);
  PsInstr *final_ln = ps_layer_norm_weight (net, NULL, "final_ln", cfg->model_dim);
  if (cfg->untied_embeddings)
    e.softmax = ps_embedding_weight (net, "softmax", e.table->shape->dims[0], cfg->model_dim);
  ps_net_add_optimizer_state (net, cfg->optimizer, wus_axis (cfg));
  int64_t bs[2] = { cfg->global_batch, cfg->seq_len };
  PsInstr *ids = ps_net_input (net, "ids", PS_S32, 2, bs);
  PsInstr *labels = ps_net_input (net, "labels", PS_S32, 2, bs);
  PsInstr *lr = ps_net_input (net, "learning_rate", PS_F32, 0, NULL);
  PsInstr *decay = ps_net_input (net, "decay", PS_F32, 0, NULL);

  /* Shared by the layers: relative-position buckets, causal mask, rotary
   * tables. */
  ps_attention_context_causal_opts (net, cfg->seq_len, cfg->head_dim, &bo, &ctx);
  const int M = cfg->microbatches;
  if (M > 1 && !cfg->unroll_microbatches)
    {
      /* One while loop over the microbatches carrying one accumulator per
       * weight (doc/models.md, "Gradient accumulation"). When the update
       * runs inside the layer loop's backward (the default), the last
       * microbatch is peeled off the loop and updates each layer there, as
       * the unrolled form does; else the update runs after the loop. */
      gboolean peel = loop && !cfg->separate_update && !cfg->outputs_gradients;
      const int n_loop = peel ? M - 1 : M;
      const int64_t mb = cfg->global_batch / M;
      MicrobatchStep ms = { cfg, &e, n_sets, layers, loop, final_ln };
      PsInstr *in[2] = { ids, labels };
      if (peel)
        {
          in[0] = ps_net_slice_batch (net, ids, 0, n_loop * mb);
          in[1] = ps_net_slice_batch (net, labels, 0, n_loop * mb);
        }
      if (!ps_net_microbatch_loop (net, 2, in, n_loop, microbatch_step, &ms, error))
        return NULL;
      if (peel)
        {
          PsInstr *mids = ps_net_microbatch (net, ids, M - 1, M);
          PsInstr *mlabels = ps_net_microbatch (net, labels, M - 1, M);
          if (!microbatch (net, cfg, TRUE, &e, n_sets, layers, loop, final_ln, mids, mlabels, lr,
                           decay, error))
            return NULL;
        }
    }
  else
    for (int u = 0; u < M; u++)
      {
        PsInstr *mids = ps_net_microbatch (net, ids, u, M);
        PsInstr *mlabels = ps_net_microbatch (net, labels, u, M);
        if (!microbatch (net, cfg, u == M - 1, &e, n_sets, layers, loop, final_ln, mids, mlabels,
                         lr, decay, error))
          return NULL;
      }
  return finish_step (cfg, g_steal_pointer (&net), info, lr, decay);
}

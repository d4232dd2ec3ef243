/* The dense Transformer LM as a model family: its parameters (the fields
 * of PsDenseLmConfig), their defaults (the small model of the quick start,
 * ps_dense_lm_config_small), and the adaptor from parameters to the
 * builder. The presets are models/presets/DenseLm*.ini. */
#include "config.h"

#include <string.h>

#include "common/checked.h"
#include "common/error.h"
#include "models/dense_lm.h"
#include "models/pipeline.h"

static const PsParamSpec specs[] = {
  { "model", "layers", PS_PARAM_INT, "2", "Transformer layers", 1, 1024, NULL, NULL, NULL },
  { "model", "model_dim", PS_PARAM_INT, "32", "Model dim M", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "ffn_dim", PS_PARAM_INT, "64", "Feed-forward dim H", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "heads", PS_PARAM_INT, "4", "Attention heads N", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "head_dim", PS_PARAM_INT, "8", "Attention head dim D (128 in every published run)",
    1, 1 << 24, NULL, NULL, NULL },
  { "model", "seq_len", PS_PARAM_INT, "16", "Sequence length S", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "global_batch", PS_PARAM_INT, "8", "Global batch B (sequences per step)", 1, 1 << 24,
    NULL, "batch", NULL },
  { "model", "vocab", PS_PARAM_INT, "64", "Vocabulary size V (32000 in every published run)",
    1, 1 << 24, NULL, NULL, NULL },
  { "model", "rel_buckets", PS_PARAM_INT, "8",
    "Relative-position buckets of the attention bias (32 in every published run; 0: none)", 0, 254,
    NULL, NULL, NULL },
  { "model", "gated_gelu", PS_PARAM_BOOL, "true",
    "Gated GELU feed-forward (the DenseLm128B runs); false: ReLU (DenseLm175B32x32); "
    "an alias kept for ffn = geglu", 0, 0, NULL, NULL, NULL },
  { "model", "position", PS_PARAM_CHOICE, "relative",
    "Positions: T5's relative bias (rel_buckets), rotary (GPT-J, Llama), a learned table (GPT-3) or none",
    0, 0, "relative|rope|learned|none", NULL, NULL },
  { "model", "block", PS_PARAM_CHOICE, "sequential",
    "Block: attention then FFN, or both from one norm and summed (parallel: GPT-J, PaLM)", 0, 0,
    "sequential|parallel", NULL, NULL },
  { "model", "norm", PS_PARAM_CHOICE, "layer", "Normalisation: layer norm or RMS norm (T5, Llama)", 0, 0,
    "layer|rms", NULL, NULL },
  { "model", "ffn", PS_PARAM_CHOICE, "geglu",
    "Feed-forward: relu, gelu, geglu (gated GELU; with gated_gelu = false: relu) or swiglu (Llama)",
    0, 0, "relu|gelu|geglu|swiglu", NULL, NULL },
  { "model", "kv_heads", PS_PARAM_INT, "0",
    "Key/value heads: 0 = heads (multi-head), 1 = multi-query, else grouped-query (divides heads)",
    0, 1 << 24, NULL, NULL, NULL },
  { "model", "tie_embeddings", PS_PARAM_BOOL, "true",
    "Softmax weights are the embedding's (false: a softmax weight of their own)", 0, 0, NULL, NULL, NULL },
  { "model", "optimizer", PS_PARAM_CHOICE, "adafactor", "Optimizer", 0, 0, "adafactor|adam", NULL, NULL },
  { "parallelism", "mesh", PS_PARAM_MESH, "2x4",
    "Logical device mesh AxB; A*B must be the slice's core count", 2, 2, NULL, NULL, "*" },
  { "parallelism", "device_order", PS_PARAM_CHOICE, "arange",
    "Device order of the mesh: np.arange, its transpose, or Lingvo's non-pod 2D mesh", 0, 0,
    "arange|arange_T|nonpod2d", NULL, "*" },
  { "parallelism", "sharding", PS_PARAM_CHOICE, "2d",
    "Sharding preset: 2d (the paper's), 1d (model parallel), dp (data parallel), megatron (tensor "
    "parallel over mesh axis 1, data over axis 0), megatron-sp (plus sequence parallelism), fsdp "
    "(weights and optimizer state over every device)", 0, 0,
    "2d|1d|dp|megatron|megatron-sp|fsdp", NULL, "*" },
  { "parallelism", "weight_update_sharding", PS_PARAM_BOOL, "false",
    "Shard optimizer state and the update over the data-parallel axis", 0, 0, NULL, NULL, "*" },
  { "parallelism", "microbatches", PS_PARAM_INT, "1", "Gradient accumulation steps", 1, 1024,
    NULL, NULL, "1|2|4|8" },
  { "parallelism", "remat", PS_PARAM_BOOL, "true",
    "Recompute each layer's forward in backward (keep only layer inputs)", 0, 0, NULL, NULL, "*" },
  { "parallelism", "pipeline_stages", PS_PARAM_INT, "1",
    "Pipeline the layers over K stages (GSPMD's vectorized stages; microbatches are its microbatches, "
    "mesh the in-layer mesh of one stage); 1: no pipeline", 1, 1024, NULL, NULL, "+1|2|4" },
  { "options", "unroll", PS_PARAM_BOOL, "false",
    "Write the layers one after the other (default: one loop over weights stacked by layer)",
    0, 0, NULL, NULL, NULL },
  { "options", "separate_update", PS_PARAM_BOOL, "false",
    "Loop form: update the stacked weights in a loop of their own after the backward loop "
    "(default: each layer's update in its backward iteration; doc/models.md)", 0, 0, NULL, NULL, NULL },
};

/* The builder's config from parameters; target gives the physical shape
 * of the slice for Lingvo's non-pod order. */
static void
config_from (const PsParams *p, const PsModelTarget *t, PsDenseLmConfig *c)
{
  ps_dense_lm_config_small (c);
  c->name = "dense";
  c->params = p;
  c->layers = (int) ps_params_int (p, "layers");
  c->model_dim = ps_params_int (p, "model_dim");
  c->ffn_dim = ps_params_int (p, "ffn_dim");
  c->heads = ps_params_int (p, "heads");
  c->head_dim = ps_params_int (p, "head_dim");
  c->seq_len = ps_params_int (p, "seq_len");
  c->global_batch = ps_params_int (p, "global_batch");
  c->vocab = ps_params_int (p, "vocab");
  c->rel_buckets = (int) ps_params_int (p, "rel_buckets");
  c->gated_gelu = ps_params_bool (p, "gated_gelu");
  c->position = ps_layer_choice (ps_position_names, ps_params_str (p, "position"));
  c->block = ps_layer_choice (ps_block_names, ps_params_str (p, "block"));
  c->norm = ps_layer_choice (ps_norm_names, ps_params_str (p, "norm"));
  c->ffn = ps_layer_choice (ps_ffn_names, ps_params_str (p, "ffn"));
  c->kv_heads = ps_params_int (p, "kv_heads");
  c->untied_embeddings = !ps_params_bool (p, "tie_embeddings");
  ps_optimizer_from_name (ps_params_str (p, "optimizer"), &c->optimizer);
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  ps_params_mesh (p, "mesh", dims);
  c->mesh[0] = dims[0];
  c->mesh[1] = dims[1];
  c->device_order = ps_params_str (p, "device_order");
  ps_sharding_preset_from_name (ps_params_str (p, "sharding"), &c->sharding);
  c->weight_update_sharding = ps_params_bool (p, "weight_update_sharding");
  c->microbatches = (int) ps_params_int (p, "microbatches");
  c->remat = ps_params_bool (p, "remat");
  c->unroll = ps_params_bool (p, "unroll");
  c->separate_update = ps_params_bool (p, "separate_update");
  c->pipeline_stages = (int) ps_params_int (p, "pipeline_stages");
  for (int i = 0; i < 3; i++)
    c->physical[i] = t ? t->physical[i] : 0;
}

static gboolean
check (const PsParams *p, const PsModelTarget *t, GError **error)
{
  PsDenseLmConfig c;
  config_from (p, t, &c);
  /* A mesh of the wrong size first (a divisibility error about the model
   * would hide it), when the stage count makes the device count
   * meaningful; then the model's own checks (bounds, divisibility). */
  g_autofree char *stages = c.pipeline_stages > 1
    ? g_strdup_printf ("%s %d x ", ps_params_where (p, "pipeline_stages"), c.pipeline_stages)
    : g_strdup ("");
  g_autofree char *what = g_strdup_printf ("%s%s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, stages,
                                           ps_params_where (p, "mesh"), c.mesh[0], c.mesh[1]);
  gboolean stages_ok = c.pipeline_stages <= 1
                      || (c.pipeline_stages <= c.layers && c.layers % c.pipeline_stages == 0);
  if (c.pipeline_stages >= 0 && stages_ok && ps_dense_lm_n_devices (&c) <= PS_MAX_DEVICES
      && !ps_params_check_devices (p, t, ps_dense_lm_n_devices (&c), what, error))
    return FALSE;
  if (!ps_dense_lm_check (&c, error))
    return FALSE;
  g_autofree int64_t *devices = ps_dense_lm_mesh_devices (&c, error);
  return devices != NULL;
}

static PsModule *
build (const PsParams *p, const PsModelTarget *t, PsModelInfo *info, GError **error)
{
  PsDenseLmConfig c;
  config_from (p, t, &c);
  PsDenseLmInfo di;
  PsModule *m = ps_dense_lm_build (&c, &di, error);
  if (!m)
    return NULL;
  memset (info, 0, sizeof *info);
  info->n_annotations = di.n_annotations;
  info->n_instructions = di.n_instructions;
  info->params = di.params;
  info->model_flops = di.model_flops;
  info->items_per_step = (double) di.tokens_per_step;
  if (c.pipeline_stages > 1)
    {
      /* [stages, in-layer mesh] in the order the model built it. */
      int rank;
      int64_t dims[3];
      g_autofree int64_t *ids = ps_dense_lm_program_mesh (&c, &rank, dims, error);
      if (!ids)
        {
          ps_module_free (m);
          return NULL;
        }
      ps_pipeline_trace_mesh (&info->mesh, rank, dims, ids);
    }
  else
    {
      info->mesh.rank = 2;
      info->mesh.dims[0] = c.mesh[0];
      info->mesh.dims[1] = c.mesh[1];
      ps_trace_mesh_set_order (&info->mesh, c.device_order, c.physical);
    }
  return m;
}

static char *
describe_model (const PsParams *p, const PsModelInfo *info)
{
  (void) info;
  g_autoptr (GString) extra = g_string_new ("");
  const char *keys[] = { "position", "block", "norm", "ffn" }, *defs[] = { "relative", "sequential", "layer", "geglu" };
  for (gsize i = 0; i < G_N_ELEMENTS (keys); i++)
    if (strcmp (ps_params_str (p, keys[i]), defs[i]) != 0)
      g_string_append_printf (extra, ", %s %s", keys[i], ps_params_str (p, keys[i]));
  if (ps_params_int (p, "kv_heads") > 0)
    g_string_append_printf (extra, ", %" G_GINT64_FORMAT " kv heads", ps_params_int (p, "kv_heads"));
  if (!ps_params_bool (p, "tie_embeddings"))
    g_string_append (extra, ", untied embeddings");
  return g_strdup_printf ("%d layers, M=%" G_GINT64_FORMAT " H=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT
                          " D=%" G_GINT64_FORMAT ", S=%" G_GINT64_FORMAT ", batch %" G_GINT64_FORMAT "%s%s",
                          (int) ps_params_int (p, "layers"), ps_params_int (p, "model_dim"),
                          ps_params_int (p, "ffn_dim"), ps_params_int (p, "heads"),
                          ps_params_int (p, "head_dim"), ps_params_int (p, "seq_len"),
                          ps_params_int (p, "global_batch"),
                          ps_params_bool (p, "gated_gelu") && strcmp (ps_params_str (p, "ffn"), "geglu") == 0
                          ? ", gated GELU" : "", extra->str);
}

static char *
describe_parallelism (const PsParams *p, const PsModelInfo *info)
{
  (void) info;
  g_autofree char *mesh = ps_params_text (p, "mesh");
  int64_t mb = ps_params_int (p, "microbatches"), k = ps_params_int (p, "pipeline_stages");
  if (k > 1)
    return g_strdup_printf ("%" G_GINT64_FORMAT "-stage pipeline x %s in-layer sharding on mesh %s (%"
                            G_GINT64_FORMAT " devices), slice %s; %s, remat %s, %" G_GINT64_FORMAT
                            " microbatch%s", k, ps_params_str (p, "sharding"), mesh,
                            k * ps_params_mesh_size (p, "mesh"), ps_params_str (p, "slice"),
                            ps_params_str (p, "optimizer"), ps_params_bool (p, "remat") ? "on" : "off", mb,
                            mb == 1 ? "" : "es");
  return g_strdup_printf ("%s sharding%s on mesh %s (%s), slice %s; %s, remat %s, %" G_GINT64_FORMAT
                          " microbatch%s, %s", ps_params_str (p, "sharding"),
                          ps_params_bool (p, "weight_update_sharding") ? " + weight-update sharding" : "",
                          mesh, ps_params_str (p, "device_order"), ps_params_str (p, "slice"),
                          ps_params_str (p, "optimizer"), ps_params_bool (p, "remat") ? "on" : "off",
                          mb, mb == 1 ? "" : "es",
                          ps_params_bool (p, "unroll") ? "layers unrolled" : "layers as a loop");
}

/* 1d, dp and fsdp shard over the flattened mesh: in arange order that is devices
 * 0..N-1 whatever the mesh's shape, so every shape is the same run. */
static void
canonicalize (PsParams *p, const PsModelTarget *t)
{
  const char *sh = ps_params_str (p, "sharding");
  gboolean flat = strcmp (sh, "1d") == 0 || strcmp (sh, "dp") == 0 || strcmp (sh, "fsdp") == 0;
  if (!flat || strcmp (ps_params_str (p, "device_order"), "arange") != 0)
    return;
  g_autofree char *mesh = g_strdup_printf ("1x%d", t->n_cores);
  ps_params_set (p, "mesh", mesh, "--mesh", NULL);
}

const PsModelFamily ps_dense_family = {
  .name = "dense",
  .summary = "The dense Transformer LM of the GSPMD paper (Lingvo's synthetic_packed_input.py)",
  .doc = "doc/models.md",
  .item_unit = "tokens",
  .specs = specs,
  .n_specs = G_N_ELEMENTS (specs),
  .check = check,
  .build = build,
  .describe_model = describe_model,
  .describe_parallelism = describe_parallelism,
  .canonicalize = canonicalize,
};

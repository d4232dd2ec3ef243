/* The sparse MoE Transformer LM as a model family: its parameters (the
 * fields of PsMoeLmConfig), their defaults (the small model of
 * ps_moe_lm_config_small on v3-8) and the adaptor from parameters to the
 * builder. The mesh is not a parameter: GShard's model runs on a 1-D mesh
 * of every core of the slice (experts and groups split over all of them),
 * or pipelined (pipeline_stages K) on [K, cores / K], each stage as that
 * on its cores.
 * Presets: models/presets/MoE*.ini (GShard Table 3) and GspmdMoE*.ini (the
 * GSPMD paper's expert-scaling series, doc/models.md). */
#include "config.h"

#include <string.h>

#include "common/error.h"
#include "models/family.h"
#include "models/moe_lm.h"
#include "models/moe_layer.h"
#include "models/pipeline.h"

static const PsParamSpec specs[] = {
  { "model", "layers", PS_PARAM_INT, "2", "Transformer layers", 1, 1024, NULL, NULL, NULL },
  { "model", "moe_every", PS_PARAM_INT, "2",
    "Every this many layers the feed-forward block is an MoE block (GShard: 2, every other layer)",
    1, 1024, NULL, NULL, NULL },
  { "model", "model_dim", PS_PARAM_INT, "16", "Model dim M", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "ffn_dim", PS_PARAM_INT, "32", "Feed-forward and expert hidden dim H", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "heads", PS_PARAM_INT, "2", "Attention heads N", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "head_dim", PS_PARAM_INT, "8", "Attention key/value dim D", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "seq_len", PS_PARAM_INT, "8", "Sequence length S", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "global_batch", PS_PARAM_INT, "16", "Global batch B (sequences per step)", 1, 1 << 24,
    NULL, "batch", NULL },
  { "model", "vocab", PS_PARAM_INT, "64", "Vocabulary size V", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "rel_buckets", PS_PARAM_INT, "4",
    "Relative-position buckets of the attention bias (0: none)", 0, 254, NULL, NULL, NULL },
  { "model", "position", PS_PARAM_CHOICE, "relative",
    "Positions: relative bias (rel_buckets), rotary (RoPE) or none", 0, 0, "relative|rope|none", NULL, NULL },
  { "model", "norm", PS_PARAM_CHOICE, "layer", "Normalisation: layer norm or RMS norm", 0, 0, "layer|rms",
    NULL, NULL },
  { "model", "ffn", PS_PARAM_CHOICE, "relu", "Feed-forward of the dense layers: relu, gelu, geglu or swiglu",
    0, 0, "relu|gelu|geglu|swiglu", NULL, NULL },
  { "model", "kv_heads", PS_PARAM_INT, "0",
    "Key/value heads: 0 = heads (multi-head), 1 = multi-query, else grouped-query (divides heads)",
    0, 1 << 24, NULL, NULL, NULL },
  { "model", "experts", PS_PARAM_INT, "8", "Experts E per MoE layer (GShard: one per core)", 1, 1 << 24,
    NULL, NULL, NULL },
  { "model", "top_k", PS_PARAM_INT, "2", "Experts each token is sent to (GShard: 2)", 1, 1 << 24,
    NULL, NULL, NULL },
  { "model", "capacity_factor", PS_PARAM_FLOAT, "2",
    "Expert capacity C = ceil(capacity_factor x group size / E) (GShard: 2)", 0, 1000000, NULL, NULL, NULL },
  { "model", "aux_loss_weight", PS_PARAM_FLOAT, "0.01", "Weight of the load-balancing loss", 0, 1000000,
    NULL, NULL, NULL },
  { "model", "f32_activations", PS_PARAM_BOOL, "true",
    "Activations in float32 (GShard's runs); false: bfloat16", 0, 0, NULL, NULL, NULL },
  { "model", "optimizer", PS_PARAM_CHOICE, "adafactor", "Optimizer", 0, 0, "adafactor|adam", NULL, NULL },
  { "parallelism", "groups", PS_PARAM_INT, "0",
    "Token groups G of the gating (0: one per core, Lingvo's default)", 0, 1 << 24, NULL, NULL, NULL },
  { "parallelism", "microbatches", PS_PARAM_INT, "1", "Gradient accumulation steps", 1, 1024,
    NULL, NULL, "1|2|4|8" },
  { "parallelism", "remat", PS_PARAM_BOOL, "true",
    "Recompute each layer's forward in backward (keep only layer inputs)", 0, 0, NULL, NULL, "*" },
  { "parallelism", "pipeline_stages", PS_PARAM_INT, "1",
    "Pipeline the layers over K stages of cores/K cores each (GSPMD's vectorized stages; microbatches are "
    "its microbatches; experts and groups over a stage's cores); 1: no pipeline", 1, 1024, NULL, NULL, "+1|2|4" },
};

static void
config_from (const PsParams *p, const PsModelTarget *t, PsMoeLmConfig *c)
{
  ps_moe_lm_config_small (c);
  c->name = "moe";
  c->layers = (int) ps_params_int (p, "layers");
  c->moe_every = (int) ps_params_int (p, "moe_every");
  c->model_dim = ps_params_int (p, "model_dim");
  c->ffn_dim = ps_params_int (p, "ffn_dim");
  c->heads = ps_params_int (p, "heads");
  c->head_dim = ps_params_int (p, "head_dim");
  c->seq_len = ps_params_int (p, "seq_len");
  c->global_batch = ps_params_int (p, "global_batch");
  c->vocab = ps_params_int (p, "vocab");
  c->rel_buckets = (int) ps_params_int (p, "rel_buckets");
  c->position = ps_layer_choice (ps_position_names, ps_params_str (p, "position"));
  c->norm = ps_layer_choice (ps_norm_names, ps_params_str (p, "norm"));
  c->ffn = ps_layer_choice (ps_ffn_names, ps_params_str (p, "ffn"));
  c->kv_heads = ps_params_int (p, "kv_heads");
  c->experts = ps_params_int (p, "experts");
  c->top_k = (int) ps_params_int (p, "top_k");
  c->capacity_factor = ps_params_double (p, "capacity_factor");
  c->aux_loss_weight = ps_params_double (p, "aux_loss_weight");
  c->f32_activations = ps_params_bool (p, "f32_activations");
  ps_optimizer_from_name (ps_params_str (p, "optimizer"), &c->optimizer);
  c->groups = ps_params_int (p, "groups");
  c->microbatches = (int) ps_params_int (p, "microbatches");
  c->remat = ps_params_bool (p, "remat");
  c->cores = t ? t->n_cores : 8;
  c->pipeline_stages = (int) ps_params_int (p, "pipeline_stages");
  for (int i = 0; i < 3; i++)
    c->physical[i] = t ? t->physical[i] : 0;
  c->params = p;
}

static gboolean
check (const PsParams *p, const PsModelTarget *t, GError **error)
{
  if (!(ps_params_double (p, "capacity_factor") > 0))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be positive (got 0)",
                   ps_params_where (p, "capacity_factor"));
      return FALSE;
    }
  if (ps_params_int (p, "rel_buckets") == 1)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be 0 (no bias) or at least 2 (got 1)",
                   ps_params_where (p, "rel_buckets"));
      return FALSE;
    }
  PsMoeLmConfig c;
  config_from (p, t, &c);
  return ps_moe_lm_check (&c, error);
}

static PsModule *
build (const PsParams *p, const PsModelTarget *t, PsModelInfo *info, GError **error)
{
  PsMoeLmConfig c;
  config_from (p, t, &c);
  PsMoeLmInfo mi;
  PsModule *m = ps_moe_lm_build (&c, &mi, error);
  if (!m)
    return NULL;
  memset (info, 0, sizeof *info);
  info->n_annotations = mi.n_annotations;
  info->n_instructions = mi.n_instructions;
  info->params = mi.params;
  info->model_flops = mi.model_flops;
  info->items_per_step = (double) mi.tokens_per_step;
  if (c.pipeline_stages > 1)
    {
      /* [stages, a stage's cores] in the order the model built it */
      int rank;
      int64_t dims[2];
      g_autofree int64_t *ids = ps_moe_lm_program_mesh (&c, &rank, dims);
      ps_pipeline_trace_mesh (&info->mesh, rank, dims, ids);
      return m;
    }
  info->mesh.rank = 1;
  info->mesh.dims[0] = c.cores;
  ps_trace_mesh_set_order (&info->mesh, "arange", t ? t->physical : NULL);
  return m;
}

static char *
describe_model (const PsParams *p, const PsModelInfo *info)
{
  (void) info;
  return g_strdup_printf ("%d layers (MoE every %d), %" G_GINT64_FORMAT " experts, top-%d, capacity factor %g, "
                          "M=%" G_GINT64_FORMAT " H=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT " D=%" G_GINT64_FORMAT
                          ", S=%" G_GINT64_FORMAT ", batch %" G_GINT64_FORMAT ", %s activations",
                          (int) ps_params_int (p, "layers"), (int) ps_params_int (p, "moe_every"),
                          ps_params_int (p, "experts"), (int) ps_params_int (p, "top_k"),
                          ps_params_double (p, "capacity_factor"), ps_params_int (p, "model_dim"),
                          ps_params_int (p, "ffn_dim"), ps_params_int (p, "heads"), ps_params_int (p, "head_dim"),
                          ps_params_int (p, "seq_len"), ps_params_int (p, "global_batch"),
                          ps_params_bool (p, "f32_activations") ? "f32" : "bf16");
}

static char *
describe_parallelism (const PsParams *p, const PsModelInfo *info)
{
  PsMoeLmConfig c;
  int64_t cores = 1;
  for (guint i = 0; i < info->mesh.rank; i++)
    cores *= info->mesh.dims[i];
  PsModelTarget t = { (int) cores, { 0 } };
  config_from (p, &t, &c);
  int64_t mb = c.microbatches;
  if (c.pipeline_stages > 1)
    return g_strdup_printf ("%d-stage pipeline of %" G_GINT64_FORMAT " cores each: experts and %" G_GINT64_FORMAT
                            " groups of %" G_GINT64_FORMAT " tokens (capacity %" G_GINT64_FORMAT ") over a "
                            "stage's cores, dense layers data parallel, slice %s; %s, remat %s, %" G_GINT64_FORMAT
                            " microbatch%s", c.pipeline_stages, c.cores / c.pipeline_stages, ps_moe_lm_groups (&c),
                            c.global_batch / mb * c.seq_len / ps_moe_lm_groups (&c), ps_moe_lm_capacity (&c),
                            ps_params_str (p, "slice"), ps_params_str (p, "optimizer"), c.remat ? "on" : "off", mb,
                            mb == 1 ? "" : "es");
  return g_strdup_printf ("experts and %" G_GINT64_FORMAT " groups of %" G_GINT64_FORMAT " tokens (capacity %"
                          G_GINT64_FORMAT ") over %" G_GINT64_FORMAT " cores, dense layers data parallel, slice %s; "
                          "%s, remat %s, %" G_GINT64_FORMAT " microbatch%s",
                          ps_moe_lm_groups (&c), c.global_batch / mb * c.seq_len / ps_moe_lm_groups (&c),
                          ps_moe_lm_capacity (&c), c.cores, ps_params_str (p, "slice"),
                          ps_params_str (p, "optimizer"), c.remat ? "on" : "off", mb, mb == 1 ? "" : "es");
}

/* Where the MoE block's compute goes, by the op_names it tags. */
static const PsOpGroup op_groups[] = {
  { "gating", "gating", { PS_MOE_OP_GATING, NULL } },
  { "dispatch_combine", "dispatch/combine einsums", { PS_MOE_OP_DISPATCH, PS_MOE_OP_COMBINE, NULL } },
  { "experts", "expert FFNs", { PS_MOE_OP_EXPERTS, NULL } },
  { NULL, NULL, { NULL } }
};

const PsModelFamily ps_moe_family = {
  .name = "moe",
  .summary = "The sparse Mixture-of-Experts Transformer LM of GShard (top-2 gating, experts over every core)",
  .doc = "doc/models.md",
  .item_unit = "tokens",
  .specs = specs,
  .n_specs = G_N_ELEMENTS (specs),
  .check = check,
  .build = build,
  .describe_model = describe_model,
  .describe_parallelism = describe_parallelism,
  .op_groups = op_groups,
};

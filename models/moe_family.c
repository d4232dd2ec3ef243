/* The sparse MoE Transformer LM as a model family: its parameters (the
 * fields of PsMoeLmConfig), their defaults (the small model of
 * ps_moe_lm_config_small on v3-8) and the adaptor from parameters to the
 * builder. By default (sharding experts) the mesh is not set: GShard's
 * model runs on a 1-D mesh of every core of the slice (experts and groups
 * split over all of them), or pipelined (pipeline_stages K) on
 * [K, cores / K], each stage as that on its cores. The 2-D layouts
 * (sharding experts-x, experts-xy, experts-x-hidden-y: the encoder-
 * decoder's moe_sharding, models/moe_layer.h) run on the mesh AxB.
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
  { .section = "model", .key = "layers", .type = PS_PARAM_INT, .def = "2",
    .doc = "Transformer layers",
    .min = 1, .max = 1024,
    PS_PARAM_FIELD (PsMoeLmConfig, layers) },
  { .section = "model", .key = "moe_every", .type = PS_PARAM_INT, .def = "2",
    .doc = "Every this many layers the feed-forward block is an MoE block (GShard: 2, every other layer)",
    .min = 1, .max = 1024,
    PS_PARAM_FIELD (PsMoeLmConfig, moe_every) },
  { .section = "model", .key = "model_dim", .type = PS_PARAM_INT, .def = "16",
    .doc = "Model dim M",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, model_dim) },
  { .section = "model", .key = "ffn_dim", .type = PS_PARAM_INT, .def = "32",
    .doc = "Feed-forward and expert hidden dim H",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, ffn_dim) },
  { .section = "model", .key = "heads", .type = PS_PARAM_INT, .def = "2",
    .doc = "Attention heads N",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, heads) },
  { .section = "model", .key = "head_dim", .type = PS_PARAM_INT, .def = "8",
    .doc = "Attention key/value dim D",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, head_dim) },
  { .section = "model", .key = "seq_len", .type = PS_PARAM_INT, .def = "8",
    .doc = "Sequence length S",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, seq_len) },
  { .section = "model", .key = "global_batch", .type = PS_PARAM_INT, .def = "16",
    .doc = "Global batch B (sequences per step)",
    .min = 1, .max = 1 << 24, .option = "batch",
    PS_PARAM_FIELD (PsMoeLmConfig, global_batch) },
  { .section = "model", .key = "vocab", .type = PS_PARAM_INT, .def = "64",
    .doc = "Vocabulary size V",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, vocab) },
  { .section = "model", .key = "rel_buckets", .type = PS_PARAM_INT, .def = "4",
    .doc = "Relative-position buckets of the attention bias (0: none)",
    .max = 254,
    PS_PARAM_FIELD (PsMoeLmConfig, rel_buckets) },
  { .section = "model", .key = "position", .type = PS_PARAM_CHOICE, .def = "relative",
    .doc = "Positions: relative bias (rel_buckets), rotary (RoPE) or none",
    .choices = "relative|rope|none",
    PS_PARAM_ENUM_FIELD (PsMoeLmConfig, position, ps_position_names) },
  { .section = "model", .key = "norm", .type = PS_PARAM_CHOICE, .def = "layer",
    .doc = "Normalisation: layer norm or RMS norm",
    .choices = "layer|rms",
    PS_PARAM_ENUM_FIELD (PsMoeLmConfig, norm, ps_norm_names) },
  { .section = "model", .key = "ffn", .type = PS_PARAM_CHOICE, .def = "relu",
    .doc = "Feed-forward of the dense layers: relu, gelu, geglu or swiglu",
    .choices = "relu|gelu|geglu|swiglu",
    PS_PARAM_ENUM_FIELD (PsMoeLmConfig, ffn, ps_ffn_names) },
  { .section = "model", .key = "kv_heads", .type = PS_PARAM_INT, .def = "0",
    .doc = "Key/value heads: 0 = heads (multi-head), 1 = multi-query, else grouped-query (divides heads)",
    .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, kv_heads) },
  { .section = "model", .key = "rotary_dim", .type = PS_PARAM_INT, .def = "0",
    .doc = "With position rope: dims of each head that rotate (partial rotary: GPT-J 64 of 256); 0 = all of head_dim",
    .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, rotary_dim) },
  { .section = "model", .key = "rotary_pairs", .type = PS_PARAM_CHOICE, .def = "half",
    .doc = "With position rope: dims a rotation pairs: half (j with j + r/2: GPT-NeoX, Llama) or adjacent (2j with 2j+1: GPT-J)",
    .choices = "half|adjacent",
    PS_PARAM_ENUM_FIELD (PsMoeLmConfig, rotary_pairs, ps_rotary_pairs_names) },
  { .section = "model", .key = "experts", .type = PS_PARAM_INT, .def = "8",
    .doc = "Experts E per MoE layer (GShard: one per core)",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, experts) },
  { .section = "model", .key = "top_k", .type = PS_PARAM_INT, .def = "2",
    .doc = "Experts each token is sent to (GShard: 2)",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, top_k) },
  { .section = "model", .key = "expert_ffn", .type = PS_PARAM_CHOICE, .def = "relu",
    .doc = "The experts' FFN activation: relu (GShard section 2.2) or gelu (tanh approximation); the dense layers' is ffn",
    .choices = "relu|gelu",
    PS_PARAM_ENUM_FIELD (PsMoeLmConfig, expert_ffn, ps_expert_ffn_names) },
  { .section = "model", .key = "capacity_factor", .type = PS_PARAM_FLOAT, .def = "2",
    .doc = "Expert capacity C = ceil(capacity_factor x group size / E) (GShard: 2)",
    .max = 1000000,
    PS_PARAM_FIELD (PsMoeLmConfig, capacity_factor) },
  { .section = "model", .key = "aux_loss_weight", .type = PS_PARAM_FLOAT, .def = "0.01",
    .doc = "Weight of the load-balancing loss",
    .max = 1000000,
    PS_PARAM_FIELD (PsMoeLmConfig, aux_loss_weight) },
  { .section = "model", .key = "f32_activations", .type = PS_PARAM_BOOL, .def = "true",
    .doc = "Activations in float32 (GShard's runs); false: bfloat16",
    PS_PARAM_FIELD (PsMoeLmConfig, f32_activations) },
  { .section = "model", .key = "optimizer", .type = PS_PARAM_CHOICE, .def = "adafactor",
    .doc = "Optimizer",
    .choices = "adafactor|adam",
    PS_PARAM_ENUM_FIELD (PsMoeLmConfig, optimizer, ps_optimizer_names) },
  { .section = "parallelism", .key = "groups", .type = PS_PARAM_INT, .def = "0",
    .doc = "Token groups G of the gating (0: one per core, Lingvo's default)",
    .max = 1 << 24,
    PS_PARAM_FIELD (PsMoeLmConfig, groups) },
  { .section = "parallelism", .key = "microbatches", .type = PS_PARAM_INT, .def = "1",
    .doc = "Gradient accumulation steps",
    .min = 1, .max = 1024, .search = "1|2|4|8",
    PS_PARAM_FIELD (PsMoeLmConfig, microbatches) },
  { .section = "parallelism", .key = "sharding", .type = PS_PARAM_CHOICE, .def = "experts",
    .doc = "experts: GShard's (experts and groups over every core of a 1-D mesh, dense layers data parallel); on the "
           "2-D mesh, dense layers as megatron (batch over axis 0, heads and FFN over axis 1) and experts-x (groups "
           "and experts over mesh axis 0), experts-xy (over every device) or experts-x-hidden-y (experts-x, the "
           "experts' hidden dim over axis 1); none: no annotation (input for podsim autoshard)",
    .choices = "experts|experts-x|experts-xy|experts-x-hidden-y|none",
    .search = "experts|experts-x|experts-xy|experts-x-hidden-y" },
  { .section = "parallelism", .key = "mesh", .type = PS_PARAM_MESH, .def = "",
    .doc = "Logical device mesh AxB (arange order, A*B = the slice's cores) of the 2-D layouts experts-x, "
           "experts-xy, experts-x-hidden-y; empty: sharding experts' 1-D mesh of every core",
    .max = 2, .search = "*",
    PS_PARAM_FIELD (PsMoeLmConfig, mesh) },
  { .section = "options", .key = "unroll_microbatches", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Write the microbatches one after the other (default: one while loop over them carrying one accumulator per weight; doc/models.md)",
    PS_PARAM_FIELD (PsMoeLmConfig, unroll_microbatches) },
  { .section = "parallelism", .key = "remat", .type = PS_PARAM_BOOL, .def = "true",
    .doc = "Recompute each layer's forward in backward (keep only layer inputs)",
    .search = "*",
    PS_PARAM_FIELD (PsMoeLmConfig, remat) },
  { .section = "parallelism", .key = "pipeline_stages", .type = PS_PARAM_INT, .def = "1",
    .doc = "Pipeline the layers over K stages of cores/K cores each (GSPMD's vectorized stages; microbatches are its microbatches; experts and groups over a stage's cores); 1: no pipeline",
    .min = 1, .max = 1024, .search = "+1|2|4",
    PS_PARAM_FIELD (PsMoeLmConfig, pipeline_stages) },
};

static void
config_from (const PsParams *p, const PsModelTarget *t, PsMoeLmConfig *c)
{
  ps_moe_lm_config_small (c);
  c->name = "moe";
  ps_params_fill (p, c);
  c->cores = t ? t->n_cores : 8;
  const char *sh = ps_params_str (p, "sharding");
  c->no_annotations = strcmp (sh, "none") == 0;
  int layout = ps_layer_choice (ps_moe_layout_names, sh);
  c->mesh_layout = layout >= 0;
  c->layout = c->mesh_layout ? (PsMoeLayout) layout : PS_MOE_LAYOUT_EXPERTS_X;
  for (int i = 0; i < 3; i++)
    c->physical[i] = t ? t->physical[i] : 0;
  c->params = ps_params_store (p);
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
  if (!c.mesh_layout && c.mesh[0] > 0 && !(c.mesh[1] == 0 && c.mesh[0] == c.cores))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s is for the 2-D layouts (--sharding experts-x, experts-xy, "
                   "experts-x-hidden-y); --sharding %s runs on one axis of every core", ps_params_where (p, "mesh"),
                   ps_params_str (p, "sharding"));
      return FALSE;
    }
  if (!ps_moe_lm_check (&c, error))
    return FALSE;
  /* Without a pipeline every layer is written out, in one microbatch
   * loop's body or (--unroll-microbatches) in every microbatch. */
  if (c.pipeline_stages > 1)
    return TRUE;
  g_autofree char *what = g_strdup_printf ("--layers %d x --microbatches %d%s", c.layers, c.microbatches,
                                           c.unroll_microbatches ? " (--unroll-microbatches)" : " (a loop: 1)");
  return ps_params_check_layer_copies (p, (int64_t) c.layers * (c.unroll_microbatches ? c.microbatches : 1),
                                       what, error);
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
  ps_model_info_init (info, mi.n_annotations, mi.n_instructions, mi.params, mi.model_flops,
                      (double) mi.tokens_per_step);
  if (c.pipeline_stages > 1)
    {
      /* [stages, a stage's cores] in the order the model built it */
      int rank;
      int64_t dims[2];
      g_autofree int64_t *ids = ps_moe_lm_program_mesh (&c, &rank, dims);
      ps_pipeline_trace_mesh (&info->mesh, rank, dims, ids);
      return m;
    }
  info->mesh.rank = c.mesh_layout ? 2 : 1;
  info->mesh.dims[0] = c.mesh_layout ? c.mesh[0] : c.cores;
  info->mesh.dims[1] = c.mesh_layout ? c.mesh[1] : 0;
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
  if (c.mesh_layout)
    {
      g_autofree char *mesh = ps_params_text (p, "mesh");
      return g_strdup_printf ("%s: %" G_GINT64_FORMAT " groups of %" G_GINT64_FORMAT " tokens (capacity %"
                              G_GINT64_FORMAT ") and experts over %s, dense layers as megatron, mesh %s, slice %s; "
                              "%s, remat %s, %" G_GINT64_FORMAT " microbatch%s", ps_moe_layout_names[c.layout],
                              ps_moe_lm_groups (&c), c.global_batch / mb * c.seq_len / ps_moe_lm_groups (&c),
                              ps_moe_lm_capacity (&c), c.layout == PS_MOE_LAYOUT_EXPERTS_XY ? "every device"
                              : c.layout == PS_MOE_LAYOUT_EXPERTS_X ? "mesh axis 0"
                              : "mesh axis 0 (their hidden dim over axis 1)", mesh, ps_params_str (p, "slice"),
                              ps_params_str (p, "optimizer"), c.remat ? "on" : "off", mb, mb == 1 ? "" : "es");
    }
  return g_strdup_printf ("%s%" G_GINT64_FORMAT " groups of %" G_GINT64_FORMAT " tokens (capacity %"
                          G_GINT64_FORMAT ") over %" G_GINT64_FORMAT " cores%s, slice %s; "
                          "%s, remat %s, %" G_GINT64_FORMAT " microbatch%s",
                          c.no_annotations ? "no annotation (--sharding none), " : "experts and ", ps_moe_lm_groups (&c), c.global_batch / mb * c.seq_len / ps_moe_lm_groups (&c),
                          ps_moe_lm_capacity (&c), c.cores, c.no_annotations ? "" : ", dense layers data parallel",
                          ps_params_str (p, "slice"),
                          ps_params_str (p, "optimizer"), c.remat ? "on" : "off", mb, mb == 1 ? "" : "es");
}

/* The mesh matters only to the 2-D layouts: the others get it unset, so
 * `podsim search` runs each of them once. */
static void
canonicalize (PsParams *p, const PsModelTarget *t)
{
  (void) t;
  if (ps_layer_choice (ps_moe_layout_names, ps_params_str (p, "sharding")) < 0)
    ps_params_set (p, "mesh", "", "--mesh", NULL);
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
  .summary = "The sparse Mixture-of-Experts Transformer LM of GShard (top-2 gating, experts over every core or a 2-D mesh axis)",
  .doc = "doc/models.md",
  .item_unit = "tokens",
  PS_MODEL_FAMILY_HOOKS,
  .canonicalize = canonicalize,
  .op_groups = op_groups,
};

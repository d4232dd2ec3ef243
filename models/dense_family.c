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
  { .section = "model", .key = "layers", .type = PS_PARAM_INT, .def = "2",
    .doc = "Transformer layers",
    .min = 1, .max = 1024,
    PS_PARAM_FIELD (PsDenseLmConfig, layers) },
  { .section = "model", .key = "model_dim", .type = PS_PARAM_INT, .def = "32",
    .doc = "Model dim M",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsDenseLmConfig, model_dim) },
  { .section = "model", .key = "ffn_dim", .type = PS_PARAM_INT, .def = "64",
    .doc = "Feed-forward dim H",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsDenseLmConfig, ffn_dim) },
  { .section = "model", .key = "heads", .type = PS_PARAM_INT, .def = "4",
    .doc = "Attention heads N",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsDenseLmConfig, heads) },
  { .section = "model", .key = "head_dim", .type = PS_PARAM_INT, .def = "8",
    .doc = "Attention head dim D (128 in every published run)",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsDenseLmConfig, head_dim) },
  { .section = "model", .key = "seq_len", .type = PS_PARAM_INT, .def = "16",
    .doc = "Sequence length S",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsDenseLmConfig, seq_len) },
  { .section = "model", .key = "global_batch", .type = PS_PARAM_INT, .def = "8",
    .doc = "Global batch B (sequences per step)",
    .min = 1, .max = 1 << 24, .option = "batch",
    PS_PARAM_FIELD (PsDenseLmConfig, global_batch) },
  { .section = "model", .key = "vocab", .type = PS_PARAM_INT, .def = "64",
    .doc = "Vocabulary size V (32000 in every published run)",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsDenseLmConfig, vocab) },
  { .section = "model", .key = "rel_buckets", .type = PS_PARAM_INT, .def = "8",
    .doc = "Relative-position buckets of the attention bias (32 in every published run; 0: none)",
    .max = 254,
    PS_PARAM_FIELD (PsDenseLmConfig, rel_buckets) },
  { .section = "model", .key = "gated_gelu", .type = PS_PARAM_BOOL, .def = "true",
    .doc = "Gated GELU feed-forward (the DenseLm128B runs); false: ReLU (DenseLm175B32x32); an alias kept for ffn = geglu",
    PS_PARAM_FIELD (PsDenseLmConfig, gated_gelu) },
  { .section = "model", .key = "position", .type = PS_PARAM_CHOICE, .def = "relative",
    .doc = "Positions: T5's relative bias (rel_buckets), rotary (GPT-J, Llama), a learned table (GPT-3) or none",
    .choices = "relative|rope|learned|none",
    PS_PARAM_ENUM_FIELD (PsDenseLmConfig, position, ps_position_names) },
  { .section = "model", .key = "block", .type = PS_PARAM_CHOICE, .def = "sequential",
    .doc = "Block: attention then FFN, or both from one norm and summed (parallel: GPT-J, PaLM)",
    .choices = "sequential|parallel",
    PS_PARAM_ENUM_FIELD (PsDenseLmConfig, block, ps_block_names) },
  { .section = "model", .key = "norm", .type = PS_PARAM_CHOICE, .def = "layer",
    .doc = "Normalisation: layer norm or RMS norm (T5, Llama)",
    .choices = "layer|rms",
    PS_PARAM_ENUM_FIELD (PsDenseLmConfig, norm, ps_norm_names) },
  { .section = "model", .key = "ffn", .type = PS_PARAM_CHOICE, .def = "geglu",
    .doc = "Feed-forward: relu, gelu, geglu (gated GELU; with gated_gelu = false: relu) or swiglu (Llama)",
    .choices = "relu|gelu|geglu|swiglu",
    PS_PARAM_ENUM_FIELD (PsDenseLmConfig, ffn, ps_ffn_names) },
  { .section = "model", .key = "kv_heads", .type = PS_PARAM_INT, .def = "0",
    .doc = "Key/value heads: 0 = heads (multi-head), 1 = multi-query, else grouped-query (divides heads)",
    .max = 1 << 24,
    PS_PARAM_FIELD (PsDenseLmConfig, kv_heads) },
  { .section = "model", .key = "rotary_dim", .type = PS_PARAM_INT, .def = "0",
    .doc = "With position rope: dims of each head that rotate (partial rotary: GPT-J 64 of 256); 0 = all of head_dim",
    .max = 1 << 24,
    PS_PARAM_FIELD (PsDenseLmConfig, rotary_dim) },
  { .section = "model", .key = "rotary_pairs", .type = PS_PARAM_CHOICE, .def = "half",
    .doc = "With position rope: dims a rotation pairs: half (j with j + r/2: GPT-NeoX, Llama) or adjacent (2j with 2j+1: GPT-J)",
    .choices = "half|adjacent",
    PS_PARAM_ENUM_FIELD (PsDenseLmConfig, rotary_pairs, ps_rotary_pairs_names) },
  { .section = "model", .key = "tie_embeddings", .type = PS_PARAM_BOOL, .def = "true",
    .doc = "Softmax weights are the embedding's (false: a softmax weight of their own)" },
  { .section = "model", .key = "optimizer", .type = PS_PARAM_CHOICE, .def = "adafactor",
    .doc = "Optimizer",
    .choices = "adafactor|adam",
    PS_PARAM_ENUM_FIELD (PsDenseLmConfig, optimizer, ps_optimizer_names) },
  { .section = "parallelism", .key = "mesh", .type = PS_PARAM_MESH, .def = "2x4",
    .doc = "Logical device mesh AxB; A*B must be the slice's core count",
    .min = 2, .max = 2, .search = "*",
    PS_PARAM_FIELD (PsDenseLmConfig, mesh) },
  { .section = "parallelism", .key = "device_order", .type = PS_PARAM_CHOICE, .def = "arange",
    .doc = "Device order of the mesh: np.arange, its transpose, or Lingvo's non-pod 2D mesh",
    .choices = "arange|arange_T|nonpod2d", .search = "*",
    PS_PARAM_FIELD (PsDenseLmConfig, device_order) },
  { .section = "parallelism", .key = "sharding", .type = PS_PARAM_CHOICE, .def = "2d",
    .doc = "Sharding preset: 2d (the paper's), 1d (model parallel), dp (data parallel), megatron (tensor parallel over mesh axis 1, data over axis 0), megatron-sp (plus sequence parallelism), fsdp (weights and optimizer state over every device), none (no annotation: input for podsim autoshard)",
    .choices = "2d|1d|dp|megatron|megatron-sp|fsdp|none", .search = "2d|1d|dp|megatron|megatron-sp|fsdp",
    PS_PARAM_ENUM_FIELD (PsDenseLmConfig, sharding, ps_sharding_preset_names) },
  { .section = "parallelism", .key = "weight_update_sharding", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Shard optimizer state and the update over the data-parallel axis",
    .search = "*",
    PS_PARAM_FIELD (PsDenseLmConfig, weight_update_sharding) },
  { .section = "parallelism", .key = "microbatches", .type = PS_PARAM_INT, .def = "1",
    .doc = "Gradient accumulation steps",
    .min = 1, .max = 1024, .search = "1|2|4|8",
    PS_PARAM_FIELD (PsDenseLmConfig, microbatches) },
  { .section = "parallelism", .key = "remat", .type = PS_PARAM_BOOL, .def = "true",
    .doc = "Recompute each layer's forward in backward (keep only layer inputs)",
    .search = "*",
    PS_PARAM_FIELD (PsDenseLmConfig, remat) },
  { .section = "parallelism", .key = "pipeline_stages", .type = PS_PARAM_INT, .def = "1",
    .doc = "Pipeline the layers over K stages (GSPMD's vectorized stages; microbatches are its microbatches, mesh the in-layer mesh of one stage); 1: no pipeline",
    .min = 1, .max = 1024, .search = "+1|2|4",
    PS_PARAM_FIELD (PsDenseLmConfig, pipeline_stages) },
  { .section = "options", .key = "unroll", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Write the layers one after the other (default: one loop over weights stacked by layer)",
    PS_PARAM_FIELD (PsDenseLmConfig, unroll) },
  { .section = "options", .key = "unroll_microbatches", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Write the microbatches one after the other, the last one updating (default: one while loop over them carrying one accumulator per weight, the last microbatch peeled off to update; doc/models.md)",
    PS_PARAM_FIELD (PsDenseLmConfig, unroll_microbatches) },
  { .section = "options", .key = "separate_update", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Loop form: update the stacked weights in a loop of their own after the backward loop (default: each layer's update in its backward iteration; doc/models.md)",
    PS_PARAM_FIELD (PsDenseLmConfig, separate_update) },
};

/* The builder's config from parameters; target gives the physical shape
 * of the slice for Lingvo's non-pod order. */
static void
config_from (const PsParams *p, const PsModelTarget *t, PsDenseLmConfig *c)
{
  ps_dense_lm_config_small (c);
  c->name = "dense";
  c->params = ps_params_store (p);
  ps_params_fill (p, c);
  c->untied_embeddings = !ps_params_bool (p, "tie_embeddings");
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
  /* The layer loop writes one layer per loop body, --unroll every layer;
   * the microbatch loop writes its body once (with the last microbatch
   * peeled off the program is no larger: 4,020 SPMD instructions for 8
   * unrolled layers at 2 and 4 microbatches, 6,740 at 1),
   * --unroll-microbatches every microbatch; a pipeline is one loop over a
   * stage's layers. */
  if (c.pipeline_stages <= 1)
    {
      int64_t mbs = c.unroll_microbatches ? c.microbatches : 1;
      g_autofree char *what = g_strdup_printf ("--layers %d%s x --microbatches %d%s", c.layers,
                                               c.unroll ? " (--unroll)" : " (a loop: 1)", c.microbatches,
                                               c.unroll_microbatches ? " (--unroll-microbatches)"
                                               : " (a loop: 1)");
      if (!ps_params_check_layer_copies (p, (int64_t) (c.unroll ? c.layers : 1) * mbs, what, error))
        return FALSE;
    }
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
  ps_model_info_init (info, di.n_annotations, di.n_instructions, di.params, di.model_flops,
                      (double) di.tokens_per_step);
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
  PS_MODEL_FAMILY_HOOKS,
  .canonicalize = canonicalize,
};

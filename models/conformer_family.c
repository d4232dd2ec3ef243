/* The Conformer speech encoder as a model family (`podsim run conformer`):
 * its parameters (the fields of PsConformerConfig), their defaults (the
 * tiny test model on a 4x2 mesh of v3-8) and the adaptor from parameters
 * to the builder. The mesh is [data, model]; `sharding` picks one of the
 * builder's three plans (2d, 1d, dp). Presets: models/presets/Conformer*.ini
 * (Gulati et al. 2020, Table 1; doc/models.md). */
#include "config.h"

#include <string.h>

#include "common/error.h"
#include "models/conformer.h"
#include "models/family.h"

static const PsParamSpec specs[] = {
  { .section = "model", .key = "layers", .type = PS_PARAM_INT, .def = "2",
    .doc = "Conformer blocks (paper: S 16, M 16, L 17)",
    .min = 1, .max = 1024,
    PS_PARAM_FIELD (PsConformerConfig, layers) },
  { .section = "model", .key = "model_dim", .type = PS_PARAM_INT, .def = "16",
    .doc = "Model dim d (paper: S 144, M 256, L 512)",
    .min = 1, .max = 1 << 20,
    PS_PARAM_FIELD (PsConformerConfig, model_dim) },
  { .section = "model", .key = "heads", .type = PS_PARAM_INT, .def = "4",
    .doc = "Attention heads (paper: S 4, M 4, L 8)",
    .min = 1, .max = 1 << 20,
    PS_PARAM_FIELD (PsConformerConfig, heads) },
  { .section = "model", .key = "ffn_mult", .type = PS_PARAM_INT, .def = "2",
    .doc = "FFN hidden units per model dim (paper: 4)",
    .min = 1, .max = 1024,
    PS_PARAM_FIELD (PsConformerConfig, ffn_mult) },
  { .section = "model", .key = "conv_kernel", .type = PS_PARAM_INT, .def = "5",
    .doc = "Depthwise conv kernel in frames (paper: 32)",
    .min = 1, .max = 1 << 16,
    PS_PARAM_FIELD (PsConformerConfig, conv_kernel) },
  { .section = "model", .key = "frames", .type = PS_PARAM_INT, .def = "24",
    .doc = "Input frames per utterance, 10 ms each (a multiple of 4)",
    .min = 4, .max = 1 << 20,
    PS_PARAM_FIELD (PsConformerConfig, frames) },
  { .section = "model", .key = "mel_bins", .type = PS_PARAM_INT, .def = "8",
    .doc = "Log-mel filterbank bins per frame (paper: 80; a multiple of 4)",
    .min = 4, .max = 1 << 16,
    PS_PARAM_FIELD (PsConformerConfig, mel_bins) },
  { .section = "model", .key = "vocab", .type = PS_PARAM_INT, .def = "12",
    .doc = "Output classes of the frame-level loss",
    .min = 1, .max = 1 << 24,
    PS_PARAM_FIELD (PsConformerConfig, vocab) },
  { .section = "model", .key = "rel_buckets", .type = PS_PARAM_INT, .def = "6",
    .doc = "Relative-position buckets of the attention bias",
    .min = 2, .max = 254,
    PS_PARAM_FIELD (PsConformerConfig, rel_buckets) },
  { .section = "model", .key = "global_batch", .type = PS_PARAM_INT, .def = "4",
    .doc = "Global batch (utterances per step)",
    .min = 1, .max = 1 << 24, .option = "batch",
    PS_PARAM_FIELD (PsConformerConfig, global_batch) },
  { .section = "model", .key = "f32_activations", .type = PS_PARAM_BOOL, .def = "true",
    .doc = "Activations in float32; false: bfloat16",
    PS_PARAM_FIELD (PsConformerConfig, f32_activations) },
  { .section = "model", .key = "optimizer", .type = PS_PARAM_CHOICE, .def = "adam",
    .doc = "Optimizer (the paper: Adam)",
    .choices = "adam|adafactor",
    PS_PARAM_ENUM_FIELD (PsConformerConfig, optimizer, ps_optimizer_names) },
  { .section = "parallelism", .key = "mesh", .type = PS_PARAM_MESH, .def = "4x2",
    .doc = "Logical device mesh [data, model]; data x model = the slice's cores",
    .min = 2, .max = 2, .search = "*" },
  { .section = "parallelism", .key = "sharding", .type = PS_PARAM_CHOICE, .def = "2d",
    .doc = "2d: batch over data, model dim of activations and weights 2-D (the GSPMD paper's); 1d: batch over data, weights over model (Megatron); dp: batch over every device",
    .choices = "2d|1d|dp", .search = "*" },
  { .section = "parallelism", .key = "microbatches", .type = PS_PARAM_INT, .def = "1",
    .doc = "Gradient accumulation steps (one accumulator per weight; batch norm per microbatch)",
    .min = 1, .max = 1024,
    PS_PARAM_FIELD (PsConformerConfig, microbatches) },
  { .section = "options", .key = "unroll_microbatches", .type = PS_PARAM_BOOL, .def = "true",
    .doc = "Write the microbatches one after the other (the default here: as one while loop, --no-unroll-microbatches, this family's step is slower and its peak higher; doc/models.md)",
    PS_PARAM_FIELD (PsConformerConfig, unroll_microbatches) },
  { .section = "parallelism", .key = "remat", .type = PS_PARAM_BOOL, .def = "true",
    .doc = "Recompute each block's forward in backward (keep only block inputs)",
    .search = "*",
    PS_PARAM_FIELD (PsConformerConfig, remat) },
};

static void
config_from (const PsParams *p, PsConformerConfig *c)
{
  ps_conformer_config_tiny (c);
  c->name = "conformer";
  c->params = ps_params_store (p);
  ps_params_fill (p, c);
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  ps_params_mesh (p, "mesh", dims);
  c->data = dims[0];
  c->model = dims[1];
  const char *s = ps_params_str (p, "sharding");
  c->sharding = strcmp (s, "dp") == 0 ? PS_CONFORMER_DP : strcmp (s, "1d") == 0 ? PS_CONFORMER_1D
                                                                                 : PS_CONFORMER_2D;
}

static gboolean
check (const PsParams *p, const PsModelTarget *t, GError **error)
{
  PsConformerConfig c;
  config_from (p, &c);
  if (!ps_conformer_check (&c, error))
    return FALSE;
  g_autofree char *what = g_strdup_printf ("%s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT,
                                           ps_params_where (p, "mesh"), c.data, c.model);
  return ps_params_check_devices (p, t, c.data * c.model, what, error);
}

static PsModule *
build (const PsParams *p, const PsModelTarget *t, PsModelInfo *info, GError **error)
{
  PsConformerConfig c;
  config_from (p, &c);
  PsConformerInfo ci;
  PsModule *m = ps_conformer_build (&c, &ci, error);
  if (!m)
    return NULL;
  ps_model_info_init (info, ci.n_annotations, ci.n_instructions, ci.params, ci.model_flops,
                      (double) ci.utterances_per_step);
  info->mesh.rank = 2;
  info->mesh.dims[0] = c.data;
  info->mesh.dims[1] = c.model;
  ps_trace_mesh_set_order (&info->mesh, "arange", t ? t->physical : NULL);
  return m;
}

static char *
describe_model (const PsParams *p, const PsModelInfo *info)
{
  (void) info;
  return g_strdup_printf ("Conformer, %d blocks, d=%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT " heads, FFN %"
                          G_GINT64_FORMAT "d, conv kernel %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT " frames x %"
                          G_GINT64_FORMAT " mel bins, vocab %" G_GINT64_FORMAT ", batch %" G_GINT64_FORMAT
                          ", %s activations", (int) ps_params_int (p, "layers"), ps_params_int (p, "model_dim"),
                          ps_params_int (p, "heads"), ps_params_int (p, "ffn_mult"), ps_params_int (p, "conv_kernel"),
                          ps_params_int (p, "frames"), ps_params_int (p, "mel_bins"), ps_params_int (p, "vocab"),
                          ps_params_int (p, "global_batch"), ps_params_bool (p, "f32_activations") ? "f32" : "bf16");
}

static char *
describe_parallelism (const PsParams *p, const PsModelInfo *info)
{
  (void) info;
  g_autofree char *mesh = ps_params_text (p, "mesh");
  return g_strdup_printf ("%s sharding on mesh %s [data, model], slice %s; %s, remat %s",
                          ps_params_str (p, "sharding"), mesh, ps_params_str (p, "slice"),
                          ps_params_str (p, "optimizer"), ps_params_bool (p, "remat") ? "on" : "off");
}

/* dp splits the batch over the flattened mesh (devices 0..N-1 in order):
 * every mesh shape is the same run. */
static void
canonicalize (PsParams *p, const PsModelTarget *t)
{
  if (strcmp (ps_params_str (p, "sharding"), "dp") != 0)
    return;
  g_autofree char *mesh = g_strdup_printf ("%dx1", t->n_cores);
  ps_params_set (p, "mesh", mesh, "--mesh", NULL);
}

const PsModelFamily ps_conformer_family = {
  .name = "conformer",
  .summary = "The Conformer speech encoder of Gulati et al. 2020, data parallel plus model-dim sharding",
  .doc = "doc/models.md",
  .item_unit = "utterances",
  PS_MODEL_FAMILY_HOOKS,
  .canonicalize = canonicalize,
};

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
  { "model", "layers", PS_PARAM_INT, "2", "Conformer blocks (paper: S 16, M 16, L 17)", 1, 1024, NULL, NULL, NULL },
  { "model", "model_dim", PS_PARAM_INT, "16", "Model dim d (paper: S 144, M 256, L 512)", 1, 1 << 20,
    NULL, NULL, NULL },
  { "model", "heads", PS_PARAM_INT, "4", "Attention heads (paper: S 4, M 4, L 8)", 1, 1 << 20, NULL, NULL, NULL },
  { "model", "ffn_mult", PS_PARAM_INT, "2", "FFN hidden units per model dim (paper: 4)", 1, 1024, NULL, NULL, NULL },
  { "model", "conv_kernel", PS_PARAM_INT, "5", "Depthwise conv kernel in frames (paper: 32)", 1, 1 << 16,
    NULL, NULL, NULL },
  { "model", "frames", PS_PARAM_INT, "24", "Input frames per utterance, 10 ms each (a multiple of 4)", 4, 1 << 20,
    NULL, NULL, NULL },
  { "model", "mel_bins", PS_PARAM_INT, "8", "Log-mel filterbank bins per frame (paper: 80; a multiple of 4)",
    4, 1 << 16, NULL, NULL, NULL },
  { "model", "vocab", PS_PARAM_INT, "12", "Output classes of the frame-level loss", 1, 1 << 24, NULL, NULL, NULL },
  { "model", "rel_buckets", PS_PARAM_INT, "6", "Relative-position buckets of the attention bias", 2, 254,
    NULL, NULL, NULL },
  { "model", "global_batch", PS_PARAM_INT, "4", "Global batch (utterances per step)", 1, 1 << 24,
    NULL, "batch", NULL },
  { "model", "f32_activations", PS_PARAM_BOOL, "true", "Activations in float32; false: bfloat16",
    0, 0, NULL, NULL, NULL },
  { "model", "optimizer", PS_PARAM_CHOICE, "adam", "Optimizer (the paper: Adam)", 0, 0, "adam|adafactor",
    NULL, NULL },
  { "parallelism", "mesh", PS_PARAM_MESH, "4x2",
    "Logical device mesh [data, model]; data x model = the slice's cores", 2, 2, NULL, NULL, "*" },
  { "parallelism", "sharding", PS_PARAM_CHOICE, "2d",
    "2d: batch over data, model dim of activations and weights 2-D (the GSPMD paper's); "
    "1d: batch over data, weights over model (Megatron); dp: batch over every device", 0, 0,
    "2d|1d|dp", NULL, "*" },
  { "parallelism", "remat", PS_PARAM_BOOL, "true",
    "Recompute each block's forward in backward (keep only block inputs)", 0, 0, NULL, NULL, "*" },
};

static void
config_from (const PsParams *p, PsConformerConfig *c)
{
  ps_conformer_config_tiny (c);
  c->name = "conformer";
  c->params = p;
  c->layers = (int) ps_params_int (p, "layers");
  c->model_dim = ps_params_int (p, "model_dim");
  c->heads = ps_params_int (p, "heads");
  c->ffn_mult = ps_params_int (p, "ffn_mult");
  c->conv_kernel = ps_params_int (p, "conv_kernel");
  c->frames = ps_params_int (p, "frames");
  c->mel_bins = ps_params_int (p, "mel_bins");
  c->vocab = ps_params_int (p, "vocab");
  c->rel_buckets = (int) ps_params_int (p, "rel_buckets");
  c->global_batch = ps_params_int (p, "global_batch");
  c->f32_activations = ps_params_bool (p, "f32_activations");
  ps_optimizer_from_name (ps_params_str (p, "optimizer"), &c->optimizer);
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  ps_params_mesh (p, "mesh", dims);
  c->data = dims[0];
  c->model = dims[1];
  const char *s = ps_params_str (p, "sharding");
  c->sharding = strcmp (s, "dp") == 0 ? PS_CONFORMER_DP : strcmp (s, "1d") == 0 ? PS_CONFORMER_1D
                                                                                 : PS_CONFORMER_2D;
  c->remat = ps_params_bool (p, "remat");
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
  memset (info, 0, sizeof *info);
  info->n_annotations = ci.n_annotations;
  info->n_instructions = ci.n_instructions;
  info->params = ci.params;
  info->model_flops = ci.model_flops;
  info->items_per_step = (double) ci.utterances_per_step;
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
  .specs = specs,
  .n_specs = G_N_ELEMENTS (specs),
  .check = check,
  .build = build,
  .describe_model = describe_model,
  .describe_parallelism = describe_parallelism,
  .canonicalize = canonicalize,
};

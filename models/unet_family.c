/* The 3D U-Net as a model family (`podsim run unet`): its parameters (the
 * fields of PsUnet3dConfig), their defaults (a small U-Net split 2x2x2 over
 * v3-8) and the adaptor from parameters to the builder. The mesh is
 * [data, D, H, W]: `data` ways of batch (data parallelism) times the
 * `spatial` partitions of the image's depth, height and width. Presets:
 * models/presets/Unet3d*.ini (MLPerf's KiTS19 configuration, doc/models.md). */
#include "config.h"

#include <string.h>

#include "common/error.h"
#include "models/family.h"
#include "models/unet3d.h"

static const PsParamSpec specs[] = {
  { .section = "model", .key = "image", .type = PS_PARAM_STRING, .def = "16x16x16",
    .doc = "Image size DxHxW in voxels (MLPerf KiTS19: 128x128x128 patches)" },
  { .section = "model", .key = "in_channels", .type = PS_PARAM_INT, .def = "1",
    .doc = "Input channels (KiTS19 CT: 1)",
    .min = 1, .max = 1 << 20,
    PS_PARAM_FIELD (PsUnet3dConfig, in_channels) },
  { .section = "model", .key = "classes", .type = PS_PARAM_INT, .def = "3",
    .doc = "Output classes (KiTS19: 3)",
    .min = 1, .max = 1 << 20,
    PS_PARAM_FIELD (PsUnet3dConfig, classes) },
  { .section = "model", .key = "filters", .type = PS_PARAM_STRING, .def = "8,16,32",
    .doc = "Features of the input block and each down-sampling level, comma-separated (MLPerf: 32,64,128,256,320); the bottleneck repeats the last" },
  { .section = "model", .key = "global_batch", .type = PS_PARAM_INT, .def = "2",
    .doc = "Global batch (images per step)",
    .min = 1, .max = 1 << 24, .option = "batch",
    PS_PARAM_FIELD (PsUnet3dConfig, global_batch) },
  { .section = "model", .key = "batch_norm", .type = PS_PARAM_BOOL, .def = "true",
    .doc = "Batch norm after every 3x3x3 conv, statistics over every device (MLPerf's syncbatchnorm); false: none",
    PS_PARAM_FIELD (PsUnet3dConfig, batch_norm) },
  { .section = "model", .key = "f32_activations", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Activations in float32; false: bfloat16 (MLPerf's --amp), norms and loss in f32",
    PS_PARAM_FIELD (PsUnet3dConfig, f32_activations) },
  { .section = "model", .key = "optimizer", .type = PS_PARAM_CHOICE, .def = "adam",
    .doc = "Optimizer",
    .choices = "adam|adafactor",
    PS_PARAM_ENUM_FIELD (PsUnet3dConfig, optimizer, ps_optimizer_names) },
  { .section = "parallelism", .key = "data", .type = PS_PARAM_INT, .def = "1",
    .doc = "Data-parallel ways (the batch split)",
    .min = 1, .max = 1 << 20,
    PS_PARAM_FIELD (PsUnet3dConfig, data) },
  { .section = "parallelism", .key = "microbatches", .type = PS_PARAM_INT, .def = "1",
    .doc = "Gradient accumulation steps (one accumulator per weight; batch norm per microbatch)",
    .min = 1, .max = 1024,
    PS_PARAM_FIELD (PsUnet3dConfig, microbatches) },
  { .section = "options", .key = "unroll_microbatches", .type = PS_PARAM_BOOL, .def = "false",
    .doc = "Write the microbatches one after the other (default: one while loop over them carrying one accumulator per weight; doc/models.md)",
    PS_PARAM_FIELD (PsUnet3dConfig, unroll_microbatches) },
  { .section = "parallelism", .key = "spatial", .type = PS_PARAM_MESH, .def = "2x2x2",
    .doc = "Spatial partitions of the image's D, H, W (DxHxW; fewer dims leave the rest whole: 16 = D only); data x D x H x W devices",
    .min = 1, .max = 3 },
  { .section = "parallelism", .key = "sharding", .type = PS_PARAM_CHOICE, .def = "spatial",
    .doc = "spatial: the batch over data and D, H, W over spatial, weights replicated; none: no annotation (input for podsim autoshard)",
    .choices = "spatial|none" },
};

/* Parses "32,64,128" into c->filters; FALSE when it is not a list of 1
 * to PS_UNET3D_MAX_LEVELS - 1 positive numbers. */
static gboolean
parse_filters (const PsParams *p, PsUnet3dConfig *c, GError **error)
{
  const char *text = ps_params_str (p, "filters");
  g_auto (GStrv) parts = g_strsplit (text, ",", -1);
  int n = (int) g_strv_length (parts);
  if (n < 1 || n > PS_UNET3D_MAX_LEVELS - 1)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s '%s' needs 1 to %d levels", ps_params_where (p, "filters"),
                   text, PS_UNET3D_MAX_LEVELS - 1);
      return FALSE;
    }
  for (int i = 0; i < n; i++)
    {
      guint64 v;
      g_strstrip (parts[i]);
      if (!g_ascii_string_to_unsigned (parts[i], 10, 1, 1 << 20, &v, NULL))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                       "%s '%s': level %d ('%s') is not a number of features from 1 to %d",
                       ps_params_where (p, "filters"), text, i, parts[i], 1 << 20);
          return FALSE;
        }
      c->filters[i] = (int64_t) v;
    }
  c->n_filters = n;
  return TRUE;
}

/* Parses "128x128x128" into c->image. */
static gboolean
parse_image (const PsParams *p, PsUnet3dConfig *c, GError **error)
{
  const char *text = ps_params_str (p, "image");
  g_auto (GStrv) parts = g_strsplit (text, "x", -1);
  gboolean ok = g_strv_length (parts) == 3;
  for (int d = 0; ok && d < 3; d++)
    {
      guint64 v;
      ok = g_ascii_string_to_unsigned (parts[d], 10, 1, 1 << 20, &v, NULL);
      c->image[d] = (int64_t) v;
    }
  if (!ok)
    g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s '%s' is not an image size DxHxW (3 dims from 1 to %d)",
                 ps_params_where (p, "image"), text, 1 << 20);
  return ok;
}

static gboolean
config_from (const PsParams *p, PsUnet3dConfig *c, GError **error)
{
  ps_unet3d_config_mlperf (c);
  c->name = "unet";
  c->params = ps_params_store (p);
  if (!parse_image (p, c, error))
    return FALSE;
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  ps_params_fill (p, c);
  int rank = ps_params_mesh (p, "spatial", dims);
  for (int d = 0; d < 3; d++)
    c->spatial[d] = d < rank ? dims[d] : 1;
  c->no_annotations = strcmp (ps_params_str (p, "sharding"), "none") == 0;
  return parse_filters (p, c, error);
}

static int64_t
n_devices (const PsUnet3dConfig *c)
{
  return c->data * c->spatial[0] * c->spatial[1] * c->spatial[2];
}

static gboolean
check (const PsParams *p, const PsModelTarget *t, GError **error)
{
  PsUnet3dConfig c;
  if (!config_from (p, &c, error) || !ps_unet3d_check (&c, error))
    return FALSE;
  g_autofree char *spatial = ps_params_text (p, "spatial");
  g_autofree char *what = g_strdup_printf ("%s %" G_GINT64_FORMAT " x %s %s", ps_params_where (p, "data"), c.data,
                                           ps_params_where (p, "spatial"), spatial);
  return ps_params_check_devices (p, t, n_devices (&c), what, error);
}

static PsModule *
build (const PsParams *p, const PsModelTarget *t, PsModelInfo *info, GError **error)
{
  PsUnet3dConfig c;
  if (!config_from (p, &c, error))
    return NULL;
  PsUnet3dInfo ui;
  PsModule *m = ps_unet3d_build (&c, &ui, error);
  if (!m)
    return NULL;
  ps_model_info_init (info, ui.n_annotations, ui.n_instructions, ui.params, ui.model_flops,
                      (double) ui.images_per_step);
  info->mesh.rank = 4;
  info->mesh.dims[0] = c.data;
  for (int d = 0; d < 3; d++)
    info->mesh.dims[1 + d] = c.spatial[d];
  ps_trace_mesh_set_order (&info->mesh, "arange", t ? t->physical : NULL);
  return m;
}

static char *
describe_model (const PsParams *p, const PsModelInfo *info)
{
  (void) info;
  const char *image = ps_params_str (p, "image");
  return g_strdup_printf ("3D U-Net, image %s x %" G_GINT64_FORMAT " channel%s, filters %s, %" G_GINT64_FORMAT
                          " classes, batch %" G_GINT64_FORMAT ", %s, %s activations", image,
                          ps_params_int (p, "in_channels"), ps_params_int (p, "in_channels") == 1 ? "" : "s",
                          ps_params_str (p, "filters"), ps_params_int (p, "classes"),
                          ps_params_int (p, "global_batch"),
                          ps_params_bool (p, "batch_norm") ? "batch norm" : "no norm",
                          ps_params_bool (p, "f32_activations") ? "f32" : "bf16");
}

static char *
describe_parallelism (const PsParams *p, const PsModelInfo *info)
{
  int64_t n = info->mesh.dims[0] * info->mesh.dims[1] * info->mesh.dims[2] * info->mesh.dims[3];
  if (strcmp (ps_params_str (p, "sharding"), "none") == 0)
    return g_strdup_printf ("no annotation (--sharding none) on %" G_GINT64_FORMAT " devices, slice %s; %s", n,
                            ps_params_str (p, "slice"), ps_params_str (p, "optimizer"));
  return g_strdup_printf ("data %" G_GINT64_FORMAT " x spatial (D, H, W) %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                          "x%" G_GINT64_FORMAT " (%" G_GINT64_FORMAT " devices), weights replicated, slice %s; %s",
                          info->mesh.dims[0], info->mesh.dims[1], info->mesh.dims[2], info->mesh.dims[3], n,
                          ps_params_str (p, "slice"), ps_params_str (p, "optimizer"));
}

/* Where the step's compute goes, by the op_names the builder tags. */
static const PsOpGroup op_groups[] = {
  { "conv", "convolutions", { PS_UNET3D_OP_CONV, NULL } },
  { "batch_norm", "batch norms", { PS_UNET3D_OP_NORM, NULL } },
  { NULL, NULL, { NULL } }
};

const PsModelFamily ps_unet_family = {
  .name = "unet",
  .summary = "The 3D U-Net of MLPerf's KiTS19 reference, spatially partitioned (D, H, W) and/or data parallel",
  .doc = "doc/models.md",
  .item_unit = "images",
  PS_MODEL_FAMILY_HOOKS,
  .op_groups = op_groups,
};

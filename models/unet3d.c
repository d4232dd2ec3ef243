/* The 3D U-Net training step: see unet3d.h. */
#include "config.h"

#include "models/unet3d.h"

#include <stdarg.h>
#include <string.h>

#include "common/checked.h"
#include "common/error.h"
#include "models/conv_layers.h"
#include "models/layers.h"

void
ps_unet3d_config_mlperf (PsUnet3dConfig *out)
{
  memset (out, 0, sizeof *out);
  out->name = "mlperf";
  out->image[0] = out->image[1] = out->image[2] = 128;
  out->in_channels = 1;
  out->classes = 3;
  static const int64_t f[] = { 32, 64, 128, 256, 320 };
  out->n_filters = G_N_ELEMENTS (f);
  memcpy (out->filters, f, sizeof f);
  out->global_batch = 1;
  out->microbatches = 1;
  out->batch_norm = TRUE;
  out->optimizer = PS_OPTIMIZER_ADAM;
  out->data = 1;
  out->spatial[0] = out->spatial[1] = out->spatial[2] = 1;
}

void
ps_unet3d_config_small (PsUnet3dConfig *out)
{
  ps_unet3d_config_mlperf (out);
  out->name = "small";
  out->image[0] = 8;
  out->image[1] = out->image[2] = 4;
  out->in_channels = 2;
  out->n_filters = 2;
  out->filters[0] = 4;
  out->filters[1] = 6;
  out->global_batch = 2;
  out->microbatches = 1;
  out->f32_activations = TRUE;
  out->spatial[0] = out->spatial[1] = out->spatial[2] = 2;
}

gboolean
ps_unet3d_check (const PsUnet3dConfig *c, GError **error)
{
  const char *filters = ps_param_store_label (c->params, "filters", "--filters");
  if (c->n_filters < 1 || c->n_filters > PS_UNET3D_MAX_LEVELS - 1)
    return ps_param_fail (error, "%s needs 1 to %d levels (got %d)", filters, PS_UNET3D_MAX_LEVELS - 1,
                 c->n_filters);
  for (int i = 0; i < c->n_filters; i++)
    if (c->filters[i] <= 0)
      return ps_param_fail (error, "%s: level %d has %" G_GINT64_FORMAT " features", filters, i, c->filters[i]);
  struct { const char *opt; int64_t v; } pos[] = {
    { ps_param_store_label (c->params, "in_channels", "--in-channels"), c->in_channels },
    { ps_param_store_label (c->params, "classes", "--classes"), c->classes },
    { ps_param_store_label (c->params, "global_batch", "--batch"), c->global_batch },
    { ps_param_store_label (c->params, "data", "--data"), c->data },
    { ps_param_store_label (c->params, "spatial", "--spatial"), c->spatial[0] },
    { ps_param_store_label (c->params, "spatial", "--spatial"), c->spatial[1] },
    { ps_param_store_label (c->params, "spatial", "--spatial"), c->spatial[2] },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (pos); i++)
    if (pos[i].v <= 0)
      return ps_param_fail (error, "%s must be positive (got %" G_GINT64_FORMAT ")", pos[i].opt, pos[i].v);
  /* n_filters - 1 down-sampling blocks and the bottleneck halve each dim. */
  int64_t halvings = c->n_filters;
  static const char dim_names[] = "DHW";
  for (int d = 0; d < 3; d++)
    if (c->image[d] <= 0 || c->image[d] % ((int64_t) 1 << halvings) != 0)
      return ps_param_fail (error, "%s: %c (%" G_GINT64_FORMAT ") must be a positive multiple of "
                   "%" G_GINT64_FORMAT " (%" G_GINT64_FORMAT " stride-2 halvings of %d levels)",
                   ps_param_store_label (c->params, "image", "--image"), dim_names[d], c->image[d], (int64_t) 1 << halvings,
                   halvings, c->n_filters);
  int64_t mb = MAX (c->microbatches, 1);
  if (c->global_batch % mb != 0)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " is not divisible by %s %" G_GINT64_FORMAT,
                 ps_param_store_label (c->params, "global_batch", "--batch"), c->global_batch,
                 ps_param_store_label (c->params, "microbatches", "--microbatches"), mb);
  if (mb == 1 && c->global_batch % c->data != 0)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " is not divisible by %s %" G_GINT64_FORMAT,
                 ps_param_store_label (c->params, "global_batch", "--batch"), c->global_batch, ps_param_store_label (c->params, "data", "--data"), c->data);
  if ((c->global_batch / mb) % c->data != 0)
    return ps_param_fail (error, "the microbatch size (%s / %s) %" G_GINT64_FORMAT " is not divisible by %s %"
                 G_GINT64_FORMAT, ps_param_store_label (c->params, "global_batch", "--batch"),
                 ps_param_store_label (c->params, "microbatches", "--microbatches"), c->global_batch / mb,
                 ps_param_store_label (c->params, "data", "--data"), c->data);
  /* The largest activation: the whole batch at full size with the most
   * features any level has there or below (the concatenated skip doubles
   * them); the builder refuses arrays over PS_MAX_ELEMENTS. */
  int64_t features = MAX (c->in_channels, c->classes);
  for (int i = 0; i < c->n_filters; i++)
    features = MAX (features, 2 * c->filters[i]);
  int64_t n = c->global_batch;
  if (!ps_checked_mul_i64 (n, c->image[0], &n) || !ps_checked_mul_i64 (n, c->image[1], &n)
      || !ps_checked_mul_i64 (n, c->image[2], &n) || !ps_checked_mul_i64 (n, features, &n) || n > PS_MAX_ELEMENTS)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " images of %s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%"
                 G_GINT64_FORMAT " with up to %" G_GINT64_FORMAT " features make arrays of more than 2^40 "
                 "elements (doc/robustness.md)", ps_param_store_label (c->params, "global_batch", "--batch"), c->global_batch,
                 ps_param_store_label (c->params, "image", "--image"), c->image[0], c->image[1], c->image[2], features);
  return TRUE;
}

/* The weights of one 3x3x3 conv + batch norm, and of a block of two. */
typedef struct {
  PsInstr *kernel, *scale, *offset;
} ConvBn;

typedef struct {
  PsInstr *up_kernel, *up_bias;   /* up-sampling blocks only */
  ConvBn conv1, conv2;
} Block;

typedef struct {
  const PsUnet3dConfig *cfg;
  double flops;                   /* forward convolutions */
} Unet;

static void
conv_bn_weights (PsNet *net, const Unet *u, const char *prefix, const char *name, int64_t k,
                 int64_t cin, int64_t cout, ConvBn *out)
{
  g_autofree char *kn = g_strdup_printf ("%s.%s", prefix, name);
  int64_t dims[5] = { k, k, k, cin, cout };
  out->kernel = ps_net_weight (net, kn, "xyzio", 5, dims);
  out->scale = out->offset = NULL;
  if (u->cfg->batch_norm)
    ps_batch_norm_weights (net, prefix, name, cout, &out->scale, &out->offset);
}

/* Gives the instructions emitted since `first` the op_name `op_name`
 * (autodiff and the partitioner carry it to what they derive), so `podsim
 * run unet` reports the convolutions' and batch norms' share of the step. */
static void
tag_since (PsNet *net, guint first, const char *op_name)
{
  for (guint i = first; i < net->c->instrs->len; i++)
    {
      PsInstr *in = net->c->instrs->pdata[i];
      if (in->metadata == NULL)
        in->metadata = g_strdup_printf ("op_name=\"%s\"", op_name);
    }
}

/* conv (3x3x3, padding 1, stride s), batch norm, ReLU. */
static PsInstr *
conv_bn_relu (PsNet *net, Unet *u, const ConvBn *w, PsInstr *x, int64_t s)
{
  int64_t st[3] = { s, s, s }, one[3] = { 1, 1, 1 };
  guint first = net->c->instrs->len;
  PsInstr *y = ps_conv (net, x, w->kernel, st, one, one, NULL, 1);
  tag_since (net, first, PS_UNET3D_OP_CONV);
  u->flops += ps_conv_flops (y);
  if (w->scale)
    {
      first = net->c->instrs->len;
      y = ps_batch_norm (net, y, w->scale, w->offset);
      tag_since (net, first, PS_UNET3D_OP_NORM);
    }
  return ps_relu (net, y);
}

/* A transposed 2x2x2 conv of stride 2 (plus bias: no norm follows it in
 * the reference): the input base-dilated by 2 and padded by 1. */
static PsInstr *
up_conv (PsNet *net, Unet *u, const Block *w, PsInstr *x)
{
  int64_t two[3] = { 2, 2, 2 }, one[3] = { 1, 1, 1 };
  guint first = net->c->instrs->len;
  PsInstr *y = ps_conv (net, x, w->up_kernel, NULL, one, one, two, 1);
  tag_since (net, first, PS_UNET3D_OP_CONV);
  /* Every other window position of the dilated input is a hole: half the
   * positions per dim meet data. */
  u->flops += ps_conv_flops (y) / 8;
  return ps_add_bias (net, y, w->up_bias);
}

/* Forward, loss and backward of one microbatch (image, labels: its
 * slices); the gradients accumulate in the net (ps_net_add_grad), one
 * accumulator per weight, and batch norm takes its statistics over the
 * microbatch, as gradient accumulation does in the reference. */
static gboolean
microbatch (PsNet *net, const PsUnet3dConfig *c, Unet *u_, Block *enc, Block *dec,
            PsInstr *out_kernel, PsInstr *out_bias, PsInstr *image, PsInstr *labels, GError **error)
{
  Unet u = *u_;
  int L = c->n_filters;
  /* Encoder: level 0 at full size, each next level halved. */
  PsInstr *skips[PS_UNET3D_MAX_LEVELS];
  PsInstr *x = image;
  for (int l = 0; l <= L; l++)
    {
      x = conv_bn_relu (net, &u, &enc[l].conv1, x, l == 0 ? 1 : 2);
      x = conv_bn_relu (net, &u, &enc[l].conv2, x, 1);
      if (l < L)
        skips[l] = x;
    }
  /* Decoder: up-sample, concatenate the skip along the features, two convs. */
  for (int l = L - 1; l >= 0; l--)
    {
      PsInstr *up = up_conv (net, &u, &dec[l], x);
      PsInstr *cat[2] = { up, skips[l] };
      PsInstr *xc = ps_build_concatenate (ps_net_builder (net), 2, cat, 4);
      x = conv_bn_relu (net, &u, &dec[l].conv1, xc, 1);
      x = conv_bn_relu (net, &u, &dec[l].conv2, x, 1);
    }
  guint first = net->c->instrs->len;
  PsInstr *logits = ps_conv (net, x, out_kernel, NULL, NULL, NULL, NULL, 1);
  tag_since (net, first, PS_UNET3D_OP_CONV);
  u.flops += ps_conv_flops (logits);
  logits = ps_build_cast (ps_net_builder (net), ps_add_bias (net, logits, out_bias), PS_F32);
  PsInstr *loss = ps_softmax_cross_entropy (net, logits, labels);
  ps_net_add_loss (net, loss);
  u_->flops = u.flops;
  /* the loss is the mean of the microbatches' means */
  return ps_net_vjp (net, loss, ps_build_scalar (ps_net_builder (net), PS_F32, 1.0 / (double) MAX (c->microbatches, 1)),
                     NULL, NULL, (int) net->weights->len, (PsInstr **) net->weights->pdata, error);
}

/* The microbatch loop's body (ps_net_microbatch_loop). */
typedef struct {
  const PsUnet3dConfig *c;
  Unet *u;
  Block *enc, *dec;
  PsInstr *out_kernel, *out_bias;
} MicrobatchStep;

static gboolean
microbatch_step (PsNet *net, PsInstr *const *data, gpointer user, GError **error)
{
  const MicrobatchStep *m = user;
  return microbatch (net, m->c, m->u, m->enc, m->dec, m->out_kernel, m->out_bias, data[0], data[1],
                     error);
}

PsModule *
ps_unet3d_build (const PsUnet3dConfig *c, PsUnet3dInfo *info, GError **error)
{
  if (!ps_unet3d_check (c, error))
    return NULL;
  int64_t mesh[4] = { c->data, c->spatial[0], c->spatial[1], c->spatial[2] };
  int64_t n = mesh[0] * mesh[1] * mesh[2] * mesh[3];
  g_autofree int64_t *devices = g_new (int64_t, n);
  for (int64_t i = 0; i < n; i++)
    devices[i] = i;
  /* Data parallel on the batch, spatial partitioning of D, H, W; weights
   * replicated (annotated so, as the reference's replicated variables).
   * Without annotations the plan stays empty. */
  PsShardingPlan plan;
  ps_sharding_plan_init (&plan);
  if (!c->no_annotations)
    {
      ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "b", 0);
      ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "x", 1);
      ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "y", 2);
      ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "z", 3);
      plan.annotate[PS_WEIGHTS] = TRUE;
    }
  g_autofree char *mname = g_strdup_printf ("unet3d_%s", c->name);
  g_autoptr (PsNet) net = ps_net_new (mname, "train_step", 4, mesh, devices, &plan);
  net->act = c->f32_activations ? PS_F32 : PS_BF16;
  Unet u = { c, 0 };

  /* Weights: input block, down blocks, bottleneck, up blocks, output. */
  int L = c->n_filters;
  Block enc[PS_UNET3D_MAX_LEVELS], dec[PS_UNET3D_MAX_LEVELS];
  int64_t fin = c->in_channels;
  for (int l = 0; l <= L; l++)
    {
      /* Level l < L: the input block (l = 0) or down block l; l = L: the
       * bottleneck, which keeps the last level's features. */
      int64_t f = c->filters[MIN (l, L - 1)];
      g_autofree char *prefix = l == 0 ? g_strdup ("input") : l == L ? g_strdup ("bottleneck")
                                                                       : g_strdup_printf ("down%d", l);
      conv_bn_weights (net, &u, prefix, "conv1", 3, fin, f, &enc[l].conv1);
      conv_bn_weights (net, &u, prefix, "conv2", 3, f, f, &enc[l].conv2);
      fin = f;
    }
  for (int l = L - 1; l >= 0; l--)
    {
      /* Up block to level l: from level l + 1's features (the bottleneck's
       * for the first) to filters[l]. */
      int64_t from = c->filters[MIN (l + 1, L - 1)], f = c->filters[l];
      g_autofree char *prefix = g_strdup_printf ("up%d", l);
      g_autofree char *kn = g_strdup_printf ("%s.upconv", prefix);
      g_autofree char *bn = g_strdup_printf ("%s.upconv_bias", prefix);
      int64_t kd[5] = { 2, 2, 2, from, f };
      dec[l].up_kernel = ps_net_weight (net, kn, "xyzio", 5, kd);
      dec[l].up_bias = ps_net_weight (net, bn, NULL, 1, &f);
      conv_bn_weights (net, &u, prefix, "conv1", 3, 2 * f, f, &dec[l].conv1);
      conv_bn_weights (net, &u, prefix, "conv2", 3, f, f, &dec[l].conv2);
    }
  int64_t od[5] = { 1, 1, 1, c->filters[0], c->classes };
  PsInstr *out_kernel = ps_net_weight (net, "output.conv", "xyzio", 5, od);
  PsInstr *out_bias = ps_net_weight (net, "output.bias", NULL, 1, &c->classes);
  ps_net_add_optimizer_state (net, c->optimizer, PS_AXIS_NONE);

  int64_t xd[5] = { c->global_batch, c->image[0], c->image[1], c->image[2], c->in_channels };
  int64_t ld[4] = { c->global_batch, c->image[0], c->image[1], c->image[2] };
  PsInstr *image = ps_net_input (net, "image", net->act, 5, xd);
  PsInstr *labels = ps_net_input (net, "labels", PS_S32, 4, ld);
  PsInstr *lr = ps_net_input (net, "learning_rate", PS_F32, 0, NULL);
  PsInstr *decay = ps_net_input (net, "decay", PS_F32, 0, NULL);
  /* The annotations a user writes: the batch and spatial split of the
   * input and the labels. */
  ps_net_annotate (net, image, "bxyzc");
  ps_net_annotate (net, labels, "bxyz");

  const int M = (int) MAX (c->microbatches, 1);
  if (M > 1 && !c->unroll_microbatches)
    {
      /* one while loop over the microbatches (doc/models.md, "Gradient
       * accumulation"), its body built once: the FLOPs of one microbatch */
      MicrobatchStep ms = { c, &u, enc, dec, out_kernel, out_bias };
      PsInstr *data[2] = { image, labels };
      if (!ps_net_microbatch_loop (net, 2, data, M, microbatch_step, &ms, error))
        return NULL;
      u.flops *= M;
    }
  else
    for (int mbi = 0; mbi < M; mbi++)
      {
        PsInstr *img = M > 1 ? ps_net_microbatch (net, image, mbi, M) : image;
        PsInstr *lbl = M > 1 ? ps_net_microbatch (net, labels, mbi, M) : labels;
        if (!microbatch (net, c, &u, enc, dec, out_kernel, out_bias, img, lbl, error))
          return NULL;
      }
  if (info)
    {
      memset (info, 0, sizeof *info);
      info->n_annotations = net->n_annotations;
      for (guint i = 0; i < net->weights->len; i++)
        info->params += (double) ps_shape_elements (((PsInstr *) net->weights->pdata[i])->shape);
      info->model_flops = 3.0 * u.flops;
      info->images_per_step = c->global_batch;
      info->voxels_per_step = c->global_batch * c->image[0] * c->image[1] * c->image[2];
    }
  PsModule *m = ps_net_finish (g_steal_pointer (&net), lr, decay);
  if (info)
    info->n_instructions = m->entry->instrs->len;
  return m;
}

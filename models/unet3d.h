/* The 3D U-Net of volumetric segmentation as a single-device training
 * step with its sharding annotations (doc/models.md, "3D U-Net").
 *
 * The architecture is MLPerf Training's 3D U-Net reference for KiTS19
 * (mlcommons/training, image_segmentation/pytorch/model/unet3d.py and
 * layers.py), itself the 3D U-Net of Çiçek et al. 2016 with strided
 * convolutions: on 128^3 patches of 1 input channel, an input block of two
 * 3x3x3 convs (32 features), down-sampling blocks each a 3x3x3 stride-2
 * conv and a 3x3x3 conv (64, 128, 256, 320 features), a bottleneck block
 * alike (320), up-sampling blocks each a 2x2x2 stride-2 transposed conv, a
 * concatenation with the encoder's skip, and two 3x3x3 convs (320, 256,
 * 128, 64, 32), and a 1x1x1 conv to the classes (3). Every 3x3x3 conv is
 * followed by batch normalization (the reference's "batchnorm" /
 * "syncbatchnorm" options; XLA's batch-norm-training op, in f32) and ReLU;
 * the loss is softmax cross-entropy over every voxel (Çiçek et al.'s
 * softmax loss; the reference adds a Dice term).
 *
 * Sharding, on a 4-D mesh [data, sx, sy, sz]: the input image and labels
 * are annotated with their batch split over `data` and their spatial dims
 * D, H, W over sx, sy, sz (spatial partitioning); weights are replicated.
 * Propagation carries the spatial split through every level (uneven where a
 * level's size is not a multiple of the split); the partitioner adds the
 * halo exchanges of the convolutions and the all-reduces of the batch-norm
 * statistics and of the weight gradients.
 *
 * Ownership: the module returned is transfer full.
 */
#ifndef PS_MODELS_UNET3D_H
#define PS_MODELS_UNET3D_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/builder/optimizer.h"
#include "partitioner/ir/ir.h"
#include "models/family.h"

G_BEGIN_DECLS

#define PS_UNET3D_MAX_LEVELS 8

/* The op_names of the step's parts (and of what autodiff and the
 * partitioner derive from them: gradients, halo exchanges, statistics
 * all-reduces). */
#define PS_UNET3D_OP_CONV "unet/conv"
#define PS_UNET3D_OP_NORM "unet/batch_norm"

typedef struct {
  const char *name;
  int64_t image[3];          /* D, H, W of one input image */
  int64_t in_channels;       /* KiTS19: 1 (CT) */
  int64_t classes;           /* KiTS19: 3 (background, kidney, tumour) */
  /* Features of the input block and each down-sampling block; the
   * bottleneck repeats the last. MLPerf: 32, 64, 128, 256, 320. */
  int n_filters;
  int64_t filters[PS_UNET3D_MAX_LEVELS];
  int64_t global_batch;      /* images per step */
  int64_t microbatches;      /* gradient accumulation steps (>= 1; batch norm per microbatch) */
  gboolean unroll_microbatches; /* one after the other instead of one while loop */
  gboolean batch_norm;       /* else no normalization */
  gboolean f32_activations;  /* else bf16 activations (norms and loss in f32) */
  PsOptimizerKind optimizer;
  int64_t data;              /* data-parallel ways (mesh axis 0) */
  int64_t spatial[3];        /* spatial partitions of D, H, W (mesh axes 1-3) */
  gboolean no_annotations;   /* no sharding annotation at all (--sharding
                              * none: the program podsim autoshard starts from) */
  /* Where the values came from, for error messages (ps_params_where);
   * NULL: errors name the options. */
  const PsParamStore *params;
} PsUnet3dConfig;

/* MLPerf's 3D U-Net on 128^3 images, batch 1, one core. */
void ps_unet3d_config_mlperf (PsUnet3dConfig *out);
/* A small config for tests: 3 levels, few features, 2 x 2 x 2 spatial split. */
void ps_unet3d_config_small (PsUnet3dConfig *out);

/* Checks sizes: every level's spatial dims are even so that stride-2
 * convolutions and the transposed convolutions meet; the batch divides by
 * the data-parallel ways. PS_ERROR_OPTION errors naming the option (or
 * where cfg->params says the value came from). */
gboolean ps_unet3d_check (const PsUnet3dConfig *cfg, GError **error);

typedef struct {
  int n_annotations;
  int64_t n_instructions;
  double params;
  double model_flops;        /* 3 x the forward convolutions' FLOPs (valid window positions) */
  int64_t images_per_step;
  int64_t voxels_per_step;
} PsUnet3dInfo;

/* Builds the training step. transfer full. */
PsModule *ps_unet3d_build (const PsUnet3dConfig *cfg, PsUnet3dInfo *info, GError **error);

G_END_DECLS

#endif

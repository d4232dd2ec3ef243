/* The Conformer speech encoder (Gulati et al. 2020, arXiv 2005.08100) as a
 * single-device training step with its sharding annotations
 * (doc/models.md, "Conformer").
 *
 * Input: log-mel filterbank frames [batch, frames, mel bins]. A
 * convolutional front end sub-samples time (and frequency) by 4: two 3x3
 * stride-2 2-D convolutions with ReLU (d channels), then a linear
 * projection to the model dim d. Then L Conformer blocks, each
 *
 *   x = x + 1/2 FFN(x)          (macaron half-step feed-forward: LN, d -> 4d, swish, 4d -> d)
 *   x = x + MHSA(x)             (LN, multi-head self-attention with relative positions)
 *   x = x + Conv(x)             (LN, pointwise conv d -> 2d, GLU, depthwise 1-D conv of
 *                                kernel K, batch norm, swish, pointwise conv d -> d)
 *   x = x + 1/2 FFN(x)
 *   y = LN(x)
 *
 * and a frame-level softmax cross-entropy over an output vocabulary (the
 * paper trains with an RNN-T decoder; doc/models.md says what that
 * changes). Relative positions are a learned bias per head over
 * bidirectional T5-style distance buckets (the layer library's attention),
 * where the paper uses Transformer-XL's sinusoidal relative encoding.
 *
 * Sharding, on a 2-D mesh [data, model], one of three plans: 2d (default,
 * the GSPMD paper's 2-D sharding): activations split on the batch over
 * `data` and on the model dim over `model`; weights' model dim over `data`
 * and their FFN hidden units, heads, conv channels and vocabulary over
 * `model`. 1d (Megatron-style): the batch over `data`, weights as 2d over
 * `model` only, activations' model dim replicated. dp: the batch over every
 * device, weights replicated.
 *
 * Ownership: the module returned is transfer full.
 */
#ifndef PS_MODELS_CONFORMER_H
#define PS_MODELS_CONFORMER_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/builder/optimizer.h"
#include "partitioner/ir/ir.h"
#include "models/family.h"

G_BEGIN_DECLS

typedef enum { PS_CONFORMER_2D, PS_CONFORMER_1D, PS_CONFORMER_DP } PsConformerSharding;

typedef struct {
  const char *name;
  int layers;
  int64_t model_dim;         /* d */
  int64_t heads;             /* d / heads per head */
  int64_t ffn_mult;          /* FFN hidden = ffn_mult x d (paper: 4) */
  int64_t conv_kernel;       /* depthwise kernel (paper: 32) */
  int64_t frames;            /* input frames per utterance (10 ms each) */
  int64_t mel_bins;          /* paper: 80 */
  int64_t vocab;             /* output classes of the frame-level loss */
  int rel_buckets;           /* relative-position buckets (bidirectional) */
  int64_t global_batch;      /* utterances per step */
  int64_t microbatches;      /* gradient accumulation steps (0 or 1: none;
                              * batch norm per microbatch) */
  gboolean unroll_microbatches;/* one after the other (the default here)
                              * instead of one while loop */
  PsOptimizerKind optimizer;
  gboolean remat;
  gboolean f32_activations;
  int64_t data, model;       /* mesh [data, model] */
  PsConformerSharding sharding;
  /* Where the values came from, for error messages (ps_params_where);
   * NULL: errors name the options. */
  const PsParamStore *params;
} PsConformerConfig;

/* Conformer L of the paper's Table 1 (17 layers, d 512, 8 heads, kernel
 * 32, ~118M parameters with its decoder): on 2048 frames (20.48 s) per
 * utterance, 8 utterances per core data parallel, one core. */
void ps_conformer_config_large (PsConformerConfig *out);
/* Conformer S (16 layers, d 144, 4 heads) and M (16, 256, 4). */
void ps_conformer_config_small_paper (PsConformerConfig *out);
void ps_conformer_config_medium (PsConformerConfig *out);
/* A tiny config for tests (2 layers, d 16) on a 4 x 2 mesh. */
void ps_conformer_config_tiny (PsConformerConfig *out);

/* Checks dims and divisibility (heads and channels by the model ways, the
 * batch by the data ways, frames and mel bins by the 4x sub-sampling).
 * PS_ERROR_OPTION errors naming the option (or where cfg->params says the
 * value came from). */
gboolean ps_conformer_check (const PsConformerConfig *cfg, GError **error);

typedef struct {
  int n_annotations;
  int64_t n_instructions;
  double params;
  double model_flops;        /* forward + backward (3x forward) of the matmuls, convs and attention */
  int64_t utterances_per_step;
  int64_t frames_per_step;   /* input frames */
} PsConformerInfo;

/* Builds the training step. transfer full. */
PsModule *ps_conformer_build (const PsConformerConfig *cfg, PsConformerInfo *info, GError **error);

G_END_DECLS

#endif

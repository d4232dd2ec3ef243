/* The dense Transformer language model of the GSPMD paper's experiments, as a
 * single-device training step with sharding annotations.
 *
 * ps_dense_lm_build() composes the layer library (models/layers.h,
 * models/net.h) into one training step, as a user would write it for one
 * device: token embedding (one-hot einsum, vocabulary 32000), L pre-layer-norm
 * Transformer layers (self-attention with per-head dim D and a relative
 * position bias of 32 buckets, causal mask; FFN with optional gated GELU),
 * final layer norm, softmax cross-entropy against the embedding (shared
 * softmax weights); then the backward pass one layer at a time, optionally
 * rematerialised, gradient accumulation over microbatches, and the optimizer
 * update (partitioner/builder/optimizer.h). Weights and optimizer state are
 * f32, activations bf16.
 *
 * The presets (published runs) are model files: models/family.h.
 *
 * Sharding presets annotate a few tensors per layer, as the paper describes;
 * propagation completes the rest:
 *   2d: mesh axis 0 splits the batch (activations) and M (weights); axis 1
 *       splits H, N, V and the model dim of activations (9 annotations a
 *       layer: its input, Wq Wk Wv Wo W1 W2, the W1 gate and the relative
 *       position bias).
 *   1d: model parallel on all devices (H and N split; batch replicated).
 *   dp: data parallel (batch split, weights replicated).
 *   megatron: Megatron-LM's tensor parallelism (Shoeybi et al. 2019): heads,
 *       hidden and vocabulary of the weights over axis 1, batch over axis 0,
 *       weights replicated over axis 0.
 *   megatron-sp: plus sequence parallelism (Korthikanti et al. 2022): each
 *       layer's input split by sequence over axis 1.
 *   fsdp: ZeRO-3 / FSDP (Rajbhandari et al. 2020): batch over every device,
 *       each weight split over every device along its model dim, so it is
 *       gathered where a layer uses it; optimizer state follows.
 *   weight-update sharding (wus): optimizer state and the update sharded over
 *       the data-parallel axis, on top of any preset.
 *
 * Ownership: the built module is transfer full; configs are plain values
 * (their strings are static or owned by the caller).
 */
#ifndef PS_MODELS_DENSE_LM_H
#define PS_MODELS_DENSE_LM_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/ir/ir.h"
#include "partitioner/builder/optimizer.h"
#include "models/family.h"
#include "models/layers.h"

G_BEGIN_DECLS

typedef enum {
  PS_SHARDING_2D, PS_SHARDING_1D, PS_SHARDING_DP,
  PS_SHARDING_MEGATRON,      /* heads, hidden, vocabulary over axis 1, batch over
                              * axis 0, weights replicated over axis 0 */
  PS_SHARDING_MEGATRON_SP,   /* megatron plus the activations between blocks
                              * split by sequence over axis 1 */
  PS_SHARDING_FSDP,          /* batch over every device, every weight's model
                              * dim (and its optimizer state) over every device */
  PS_SHARDING_NONE,          /* no annotation at all (podsim autoshard's input) */
} PsShardingPreset;

/* The presets' names in PsShardingPreset order, NULL-terminated (the
 * `sharding` choice of the dense and encdec families: PS_PARAM_ENUM_FIELD). */
extern const char *const ps_sharding_preset_names[];
/* The preset as a plan over a 2-D mesh of the letters of layers.h (the
 * dense LM's, also the encoder-decoder's). */
void ps_sharding_preset_plan (PsShardingPreset preset, PsShardingPlan *plan);

typedef struct {
  const char *name;          /* names the built module ("dense_lm_NAME") */
  int layers;
  int64_t model_dim;         /* M */
  int64_t ffn_dim;           /* H */
  int64_t heads;             /* N */
  int64_t head_dim;          /* D (128 in every published run) */
  int64_t seq_len;           /* S */
  int64_t global_batch;      /* B (sequences per step) */
  int64_t vocab;             /* 32000; padded up to a multiple of the devices
                              * that split it (Megatron-LM's padding) */
  int rel_buckets;           /* 32; 0: no relative bias */
  gboolean gated_gelu;       /* with ffn GEGLU (the default): FALSE means ReLU
                              * (the older option, kept as an alias) */
  /* The block (layers.h, PsBlockOptions): position, block, norm, ffn and
   * kv_heads (0: heads). */
  PsPositionKind position;
  PsBlockKind block;
  PsNormKind norm;
  PsFfnKind ffn;
  int64_t kv_heads;
  int64_t rotary_dim;        /* position rope: rotated dims per head; 0: head_dim */
  PsRotaryPairs rotary_pairs;/* position rope: which dims a rotation pairs */
  gboolean untied_embeddings;/* a softmax weight of its own instead of the
                              * embedding's transpose */
  PsOptimizerKind optimizer;
  gboolean remat;            /* recompute each layer's forward in backward */
  gboolean unroll;           /* layers one after the other instead of a loop
                              * over stacked weights (the default) */
  gboolean separate_update;  /* loop form: update the stacked weights in a
                              * loop of their own after the backward loop
                              * (default: each layer's update inside its
                              * backward iteration) */
  int microbatches;          /* gradient accumulation steps (>= 1); with a
                              * pipeline, its microbatches */
  gboolean unroll_microbatches;/* the microbatches one after the other
                              * instead of one while loop over them (the
                              * default, the last one peeled off when it
                              * updates in the layer loop) */
  int pipeline_stages;       /* > 1: the layers as a GSPMD pipeline of that
                              * many stages (models/pipeline.h); `mesh` is
                              * then one stage's in-layer mesh, the program's
                              * mesh [stages, mesh[0], mesh[1]]; 2d or 1d
                              * in-layer sharding */
  gboolean outputs_gradients;/* the step returns the loss and every weight's
                              * gradient instead of the optimizer's update
                              * (tests compare forms of the model with it) */
  /* Parallelism. */
  int64_t mesh[2];           /* logical device mesh; mesh[0]*mesh[1] devices */
  const char *device_order;  /* "arange" | "arange_T" | "nonpod2d" */
  int64_t physical[3];       /* nonpod2d: chips x, chips y, cores per chip */
  PsShardingPreset sharding;
  gboolean weight_update_sharding;
  /* Where the values came from, for error messages (ps_params_where);
   * NULL: name the command-line options. */
  const PsParamStore *params;
} PsDenseLmConfig;

/* The dense family of the model registry (models/dense_family.c): its
 * parameters are the fields above; its presets are the published runs
 * (models/presets/DenseLm*.ini, checked against published.tsv). */
extern const PsModelFamily ps_dense_family;

/* A small config for tests and the quick start (2 layers, tiny dims). */
void ps_dense_lm_config_small (PsDenseLmConfig *out);

/* Checks dims, divisibility (heads and batch by the mesh axes that split
 * them, microbatches dividing the batch) and the mesh; errors are
 * PS_ERROR_OPTION and name the option (or where cfg->params says the value
 * came from). */
gboolean ps_dense_lm_check (const PsDenseLmConfig *cfg, GError **error);

/* Device ids at each mesh position, row-major (mesh[0]*mesh[1] entries),
 * for the config's device order. transfer full. */
int64_t *ps_dense_lm_mesh_devices (const PsDenseLmConfig *cfg, GError **error);

/* The program's device mesh: [mesh[0], mesh[1]] with the config's order,
 * or with a pipeline [stages, mesh[0], mesh[1]] in an order that puts
 * neighbouring stages on neighbouring chips of the `physical` slice where
 * it can (ps_pipeline_mesh_devices), else arange. Fills rank and dims
 * (at most 3) and returns the ids, row-major. transfer full. */
int64_t *ps_dense_lm_program_mesh (const PsDenseLmConfig *cfg, int *rank, int64_t *dims,
                                   GError **error);
/* The vocabulary as built: cfg->vocab rounded up to a multiple of the
 * devices that split it under the sharding preset. */
int64_t ps_dense_lm_padded_vocab (const PsDenseLmConfig *cfg);
/* Devices of the program (the product of its mesh). */
int64_t ps_dense_lm_n_devices (const PsDenseLmConfig *cfg);

/* What the build produced, for reports. */
typedef struct {
  int n_annotations;         /* tensors a user annotates: activations and weights
                              * (optimizer state follows its weight, uncounted) */
  int64_t n_instructions;    /* in the entry computation */
  double params;             /* trainable parameters */
  double model_flops;        /* 6 * params * tokens + attention, per step
                              * (no remat), the usual utilization basis */
  int64_t tokens_per_step;
} PsDenseLmInfo;

/* Builds the training step. transfer full. */
PsModule *ps_dense_lm_build (const PsDenseLmConfig *cfg, PsDenseLmInfo *info, GError **error);

G_END_DECLS

#endif

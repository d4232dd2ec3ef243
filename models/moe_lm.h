/* The sparse Mixture-of-Experts Transformer LM of GShard (arXiv
 * 2006.16668) as the GSPMD paper trained it, as a single-device training
 * step with its sharding annotations (doc/models.md).
 *
 * L pre-layer-norm Transformer layers; every moe_every-th layer's
 * feed-forward block is an MoE block (models/moe_layer.h: E experts, top-k
 * gating, capacity C = ceil(capacity_factor x group size / E)), the others
 * a dense ReLU FFN. Tokens are cut into G groups (default: one per device,
 * Lingvo's num_groups default). The loss adds each MoE layer's
 * load-balancing term times aux_loss_weight. Embedding, attention (with a
 * relative position bias), head, backward one layer at a time with
 * optional remat, microbatches and the optimizer come from the layer
 * library (models/layers.h).
 *
 * Sharding, on a 1-D mesh of every core: activations split on the batch
 * (data parallel, GShard's "replicate the attention and dense layers"),
 * dense weights replicated, expert weights split on E, the MoE block's
 * group and expert splits inside it. Pipelined (pipeline_stages), the
 * same within each stage's cores (models/pipeline.h, doc/models.md).
 * With mesh_layout, on the 2-D mesh `mesh` instead: the dense layers as
 * the dense family's megatron preset (batch over axis 0, heads, FFN
 * hidden and vocabulary over axis 1, weights replicated over axis 0) and
 * the MoE blocks in one of the expert layouts of models/moe_layer.h
 * (`layout`), the encoder-decoder's moe_sharding.
 *
 * Ownership: the module returned is transfer full; configs are plain
 * values whose strings are static or the caller's.
 */
#ifndef PS_MODELS_MOE_LM_H
#define PS_MODELS_MOE_LM_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/builder/optimizer.h"
#include "partitioner/ir/ir.h"
#include "models/family.h"
#include "models/layers.h"
#include "models/moe_layer.h"

G_BEGIN_DECLS

typedef struct {
  const char *name;
  int layers;
  int moe_every;             /* layer l is MoE when l % moe_every == moe_every - 1 */
  int64_t model_dim;         /* M */
  int64_t ffn_dim;           /* H, dense FFN and expert hidden dim */
  int64_t heads, head_dim;   /* N, D */
  int64_t seq_len;           /* S */
  int64_t global_batch;      /* sequences per step */
  int64_t vocab;
  int rel_buckets;           /* relative-position bias buckets; 0: none */
  /* Block options (models/layers.h; zero: GShard's block): relative, rope
   * or no positions, layer or RMS norm, the dense layers' FFN (ReLU
   * default), key/value heads (0: heads). */
  PsPositionKind position;
  PsNormKind norm;
  PsFfnKind ffn;
  PsFfnKind expert_ffn;       /* the experts' activation: PS_FFN_RELU (GShard) or PS_FFN_GELU */
  int64_t kv_heads;
  int64_t rotary_dim;        /* position rope: rotated dims per head; 0: head_dim */
  PsRotaryPairs rotary_pairs;/* position rope: which dims a rotation pairs */
  int64_t experts;           /* E */
  int64_t groups;            /* G; 0: one per core */
  double capacity_factor;    /* GShard: 2 */
  int top_k;                 /* GShard: 2 */
  double aux_loss_weight;    /* weight of the load-balancing loss */
  gboolean f32_activations;  /* GShard trained with f32 activations; else bf16 */
  PsOptimizerKind optimizer;
  gboolean remat;
  int microbatches;          /* gradient accumulation steps; with a
                              * pipeline, its microbatches */
  gboolean unroll_microbatches;/* the microbatches one after the other
                              * instead of one while loop over them */
  int64_t cores;             /* devices of the 1-D mesh (= the slice's cores) */
  int pipeline_stages;       /* > 1: the layers as a GSPMD pipeline of that
                              * many stages (models/pipeline.h) on the mesh
                              * [stages, cores / stages]: each stage's
                              * layers data parallel and its experts and
                              * groups over the stage's cores */
  int64_t physical[3];       /* chips x, chips y, cores per chip of the
                              * slice (0: unknown): where the pipeline puts
                              * its stages (ps_pipeline_mesh_devices) */
  gboolean mesh_layout;      /* the 2-D mesh `mesh` and expert layout
                              * `layout` (above); not with a pipeline */
  PsMoeLayout layout;
  int64_t mesh[2];           /* A x B = cores with mesh_layout; else 0 */
  gboolean no_annotations;   /* no sharding annotation at all (--sharding
                              * none: the program podsim autoshard starts
                              * from); not with a pipeline */
  gboolean outputs_gradients;/* the step returns the loss and every weight's
                              * gradient instead of the optimizer's update
                              * (tests compare forms of the model) */
  /* Where the values came from, for error messages (ps_params_where);
   * NULL: errors name the options. */
  const PsParamStore *params;
} PsMoeLmConfig;

/* A small config for tests (2 layers, 8 experts on 8 cores). */
void ps_moe_lm_config_small (PsMoeLmConfig *out);

/* Checks dims and divisibility (batch by cores and microbatches, tokens
 * by groups, groups and experts against the cores); PS_ERROR_OPTION errors
 * naming the option, or where cfg->params says the value came from. */
gboolean ps_moe_lm_check (const PsMoeLmConfig *cfg, GError **error);

/* Groups and capacity the config resolves to (groups: one per core of a
 * pipeline stage by default). */
int64_t ps_moe_lm_groups (const PsMoeLmConfig *cfg);
int64_t ps_moe_lm_capacity (const PsMoeLmConfig *cfg);

typedef struct {
  int n_annotations;
  int64_t n_instructions;
  double params;             /* every trainable parameter */
  double active_params;      /* parameters one token uses (k experts per MoE layer) */
  double model_flops;        /* 6 x active params x tokens + attention */
  int64_t tokens_per_step;
} PsMoeLmInfo;

/* The program's device mesh: [cores] in arange order, with mesh_layout
 * `mesh` in arange order, or with a pipeline [stages, cores / stages]
 * placed by ps_pipeline_program_devices. Fills
 * rank and dims (at most 2); transfer full. */
int64_t *ps_moe_lm_program_mesh (const PsMoeLmConfig *cfg, int *rank, int64_t *dims);

/* Builds the training step. transfer full. */
PsModule *ps_moe_lm_build (const PsMoeLmConfig *cfg, PsMoeLmInfo *info, GError **error);

G_END_DECLS

#endif

/* The encoder-decoder Transformer (T5, Raffel et al. 2020), as a
 * single-device training step with sharding annotations.
 *
 * ps_encdec_build() composes the layer library (models/layers.h): the
 * shared token embedding; an encoder stack of pre-norm Transformer layers
 * over the source (bidirectional self-attention with T5's bidirectional
 * relative buckets, or rotary positions, no mask) and its final norm; a
 * decoder stack over the target whose layers are causal self-attention,
 * cross-attention (queries from the decoder, keys and values from the
 * encoder's output, no position bias) and the FFN, each pre-norm with
 * residual; the decoder's final norm, the logits against the embedding or
 * an untied softmax weight, and softmax cross-entropy over the target.
 * The block options (norm, FFN, kv heads) are the dense family's; the
 * sharding presets are its plans over the same letters
 * (ps_sharding_preset_plan). The backward pass is one vector-Jacobian
 * product of the whole step, or, with remat, one layer at a time from the
 * top with each layer's forward rebuilt from its saved input right before
 * its backward (only layer inputs stay live, as in the dense and MoE LMs):
 * a decoder layer's product is taken with respect to both of its inputs,
 * its own stream and the encoder's output, and the encoder output's
 * gradient is the sum of every decoder layer's part, which then runs back
 * through the encoder's final norm and layers. With microbatches M, the
 * step runs forward and backward on each of M slices of the batch in
 * turn: by default in one while loop over them carrying one gradient
 * accumulator per weight (ps_net_microbatch_loop, as the dense and MoE
 * LMs), with unroll_microbatches one after the other, its gradients
 * accumulated as the dense family's unrolled form does (ps_net_add_grad);
 * the loss is their mean, the update after the last.
 *
 * With experts > 0, every moe_every-th FFN of each stack (layers
 * moe_every-1, 2 moe_every-1, ...; GShard and Switch: every other one) is
 * the MoE block of models/moe_layer.h over that stack's tokens in `groups`
 * groups, its load-balancing loss added to the step's with
 * aux_loss_weight. The expert layout (moe_layout) is annotations only:
 * experts-x (the default) splits the expert weights on E over mesh axis 0
 * (the data axis of every preset) and the block's groups and experts over
 * that axis, so the partitioner turns each dispatch and combine into an
 * AllToAll there; experts-xy splits groups and experts over every device
 * (the mesh flattened: GShard's one expert per core on a 2-D mesh, the
 * AllToAll among all devices); experts-x-hidden-y is experts-x with the
 * experts' hidden dim H (weights and the [E, G, C, H] activations) split
 * over mesh axis 1 too, as a dense FFN's is (the experts' second einsum
 * then sums over axis 1).
 *
 * Ownership: the built module is transfer full; configs are plain values.
 */
#ifndef PS_MODELS_ENCDEC_H
#define PS_MODELS_ENCDEC_H

#include <glib.h>
#include <stdint.h>

#include "models/dense_lm.h"
#include "models/family.h"
#include "models/layers.h"
#include "models/moe_layer.h"

G_BEGIN_DECLS

typedef struct {
  int enc_layers, dec_layers;
  int64_t model_dim, ffn_dim, heads, head_dim;
  int64_t kv_heads;          /* 0: heads */
  int64_t rotary_dim;        /* position rope: rotated dims per head; 0: head_dim */
  PsRotaryPairs rotary_pairs;/* position rope: which dims a rotation pairs */
  int64_t src_len, tgt_len;  /* source and target lengths */
  int64_t global_batch;      /* sequence pairs per step */
  int64_t vocab;             /* padded like the dense LM's */
  int rel_buckets;           /* position relative: buckets (0: none) */
  gboolean shared_rel_bias;  /* one bias table per stack for all its layers (T5); else one a layer */
  PsPositionKind position;   /* relative, rope or none */
  PsNormKind norm;
  PsFfnKind ffn;
  PsFfnKind expert_ffn;       /* the experts' activation: PS_FFN_RELU (GShard) or PS_FFN_GELU */
  gboolean untied_embeddings;
  PsOptimizerKind optimizer;
  gboolean f32_activations;  /* activations in f32 (GShard's runs); else bf16 */
  gboolean remat;            /* per-layer backward with recomputation (above) */
  int microbatches;          /* gradient accumulation steps (0: 1) */
  gboolean unroll_microbatches;/* the microbatches one after the other
                              * instead of one while loop over them */
  int64_t mesh[2];
  PsShardingPreset sharding;
  gboolean weight_update_sharding;
  /* MoE FFNs (experts 0: all dense). */
  int64_t experts;
  int moe_every, top_k;
  double capacity_factor, aux_loss_weight;
  int64_t groups;            /* token groups per stack (0: one per device) */
  PsMoeLayout moe_layout;    /* models/moe_layer.h */
  const PsParamStore *params;    /* where values came from, for errors; NULL: options */
} PsEncDecConfig;

/* The encoder-decoder family (models/encdec_family.c): `podsim run encdec`;
 * presets models/presets/T5*.ini. */
extern const PsModelFamily ps_encdec_family;

/* A small config for tests (2 + 2 layers, tiny dims, mesh 2x4). */
void ps_encdec_config_small (PsEncDecConfig *out);
/* Token groups of the MoE blocks (groups, or one per device). */
int64_t ps_encdec_groups (const PsEncDecConfig *cfg);
/* Divisibility of the dims by the mesh axes the preset splits them over;
 * PS_ERROR_OPTION naming the option or file position. */
gboolean ps_encdec_check (const PsEncDecConfig *cfg, GError **error);
/* Builds the training step; info gets the counts for reports (may be
 * NULL). transfer full. */
PsModule *ps_encdec_build (const PsEncDecConfig *cfg, PsModelInfo *info, GError **error);

G_END_DECLS

#endif

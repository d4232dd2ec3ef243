/* The sparse Mixture-of-Experts feed-forward block of GShard (Lepikhin et
 * al., arXiv 2006.16668, section 2.2 and Algorithm 2), written as a
 * single-device program with its few sharding annotations.
 *
 * Tokens come in G groups of S, x[G, S, M]. Top-k gating (GShard: k = 2)
 * picks experts per token from softmax(x . wg) and gives every group C
 * slots per expert; a token that finds its expert full is dropped for that
 * expert (its residual connection carries it on). Dispatch and combine are
 * einsums with [G, S, E, C] tensors, as the paper writes them:
 *
 *   expert_in[E,G,C,M]  = einsum("gsec,gsm->egcm", dispatch, x)   E split
 *   h[E,G,C,H]          = act(einsum("egcm,emh->egch", expert_in, wi))
 *
 * act is ReLU (GShard section 2.2: FFN_e(x) = wo_e ReLU(wi_e x)) or the
 * tanh-approximated GELU of Hendrycks and Gimpel (arXiv 1606.08415), the
 * same formula as ps_gelu (PsMoeConfig.gelu).
 *   expert_out[G,E,C,M] = einsum("egch,ehm->gecm", h, wo)          G split
 *   y[G,S,M]            = einsum("gsec,gecm->gsm", combine, expert_out)
 *
 * With x split on G and expert_in split on E over the same devices, the
 * partitioner turns the change of split dim into an AllToAll (and back for
 * expert_out); nothing here emits a collective.
 *
 * The gating follows Lingvo's Top2GatingOnLogits (gshard_layers.py) with
 * legacy_mtf_behavior: the i-th expert is the argmax of the softmax gates
 * with the experts already chosen masked out (ties: lowest index); the
 * chosen gates are normalised by their sum (k >= 2); a token's position in
 * its i-th expert's buffer is the exclusive cumulative sum of that choice's
 * mask over the group plus what earlier choices left in the buffer, and
 * positions >= C are dropped. The cumulative sum is an einsum with a
 * strictly triangular [S, S] matrix, as Mesh TensorFlow's mtf.cumsum
 * computes it: 2 S^2 E FLOPs per group on the MXU (the sequential O(S E)
 * scan TPUs ran for tf.cumsum is not an op of our IR). The auxiliary loss
 * is Lingvo's: mean over groups and experts of (fraction of tokens whose
 * first choice is e) x (mean gate of e), times E^2.
 *
 * Gating runs in f32 whatever the activation type (Lingvo's mask_dtype and
 * gating_logits_dtype advice; f64 for f64 activations, which tests use for
 * finite differences); masks, positions and counts are float values
 * derived through compares, so autodiff sends no gradient through them.
 *
 * Every instruction gets an op_name (ps_builder_set_op_name):
 * "moe/gating" (logits, softmax, top-k, cumsum, capacity, combine and
 * dispatch tensors, aux loss), "moe/dispatch", "moe/experts",
 * "moe/combine"; the partitioner and autodiff keep it, so a report can say
 * how much of a step the gating took.
 *
 * Ownership: the instructions returned belong to the builder's computation
 * (transfer none).
 */
#ifndef PS_MODELS_MOE_LAYER_H
#define PS_MODELS_MOE_LAYER_H

#include <glib.h>
#include <stdint.h>

#include "common/params.h"
#include "partitioner/builder/builder.h"
#include "models/net.h"

G_BEGIN_DECLS

/* op_name prefixes the block gives its instructions. */
#define PS_MOE_OP_GATING "moe/gating"
#define PS_MOE_OP_DISPATCH "moe/dispatch"
#define PS_MOE_OP_EXPERTS "moe/experts"
#define PS_MOE_OP_COMBINE "moe/combine"

typedef struct {
  int64_t experts;          /* E */
  int64_t capacity;         /* C: slots per expert per group, >= 1 */
  int top_k;                /* experts per token, 1 <= top_k <= E */
  /* Mesh axis of the builder's mesh (ps_builder_set_mesh) that splits G
   * for token tensors and E for expert tensors; -1: no annotations. */
  int shard_axis;
  /* Other expert layouts (all zero: the one above). n_devices > 0: G and
   * E split over every device instead, the builder's mesh flattened
   * (`devices`, its row-major ids; borrowed). split_hidden: the experts'
   * hidden dim H of [E, G, C, H] split over mesh axis hidden_axis too (the
   * experts' second einsum then sums over it). */
  int64_t n_devices;
  const int64_t *devices;
  gboolean split_hidden;
  int hidden_axis;
  /* The experts' activation: FALSE ReLU (GShard), TRUE GELU. */
  gboolean gelu;
} PsMoeConfig;

/* The experts' activations the MoE families offer (model-file key
 * expert_ffn), "relu|gelu" (NULL-ended); index 0 and 1 are PS_FFN_RELU
 * and PS_FFN_GELU. Gated experts (GEGLU) need a second wi and are
 * not offered. */
extern const char *const ps_expert_ffn_names[];

/* The expert layouts of a 2-D mesh [A, B] that the encoder-decoder
 * (moe_sharding) and the MoE LM (sharding) offer, annotations only:
 * experts-x splits groups and experts over mesh axis 0 (the data axis),
 * so each dispatch and combine is an AllToAll among axis 0's devices;
 * experts-xy splits them over every device (the mesh flattened: one
 * expert per core, the AllToAll among all devices); experts-x-hidden-y is
 * experts-x with the experts' hidden dim H (weights and the [E, G, C, H]
 * activations) split over mesh axis 1 as a dense FFN's is (the experts'
 * second einsum then sums over axis 1). doc/models.md lists the
 * collectives each produces. */
typedef enum {
  PS_MOE_LAYOUT_EXPERTS_X,
  PS_MOE_LAYOUT_EXPERTS_XY,
  PS_MOE_LAYOUT_EXPERTS_X_HIDDEN_Y,
} PsMoeLayout;

/* Layout names, "experts-x|experts-xy|experts-x-hidden-y" (NULL-ended). */
extern const char *const ps_moe_layout_names[];

/* The block's config for `layout` on the net's 2-D mesh (devices: its
 * row-major ids, n of them; borrowed by *cfg): the G/E split, and the
 * hidden split over axis 1. Leaves experts, capacity and top_k. */
void ps_moe_layout_config (PsMoeLayout layout, int64_t n_devices, const int64_t *devices, PsMoeConfig *cfg);

/* Adds the expert weights' splits to a plan: their E (letter `e`) over
 * axis 0 or every device, and with experts-x-hidden-y their H (`hidden`,
 * a letter no other weight uses) over axis 1. */
void ps_moe_layout_plan (PsMoeLayout layout, const char *hidden, PsShardingPlan *plan);

/* Divisibility of experts and groups by what the layout splits them over
 * (mesh axis 0 or the device count) and, with experts-x-hidden-y, of
 * ffn_dim by mesh axis 1; PS_ERROR_OPTION errors naming the options, or
 * where `params` says they were set. */
gboolean ps_moe_layout_check (const PsParamStore *params, PsMoeLayout layout, int64_t experts, int64_t groups,
                              int64_t ffn_dim, const int64_t *mesh, GError **error);

/* Expert capacity per group: ceil(capacity_factor x group_size / experts),
 * at least 1 (GShard: 2 S / E, i.e. capacity_factor 2). */
int64_t ps_moe_capacity (int64_t group_size, int64_t experts, double capacity_factor);

typedef struct {
  PsInstr *combine;         /* [G, S, E, C] in the logits' type: gate weight of each kept slot */
  PsInstr *dispatch;        /* [G, S, E, C] 0/1 in the activation type */
  PsInstr *aux_loss;        /* [] load-balancing loss (unweighted), the logits' type */
} PsMoeGating;

/* Top-k gating on logits f32[G, S, E] (or f64); `act` is the dispatch
 * tensor's element type. FALSE when the builder has an error. */
gboolean ps_moe_gating (PsBuilder *b, const PsMoeConfig *cfg, PsInstr *logits, PsElemType act,
                        PsMoeGating *out);

/* The whole block on x[G, S, M]: wg[M, E], wi[E, M, H], wo[E, H, M], all
 * in x's element type (cast weights before). Returns y[G, S, M] and the
 * auxiliary loss in *aux_loss; NULL when the builder has an error. */
PsInstr *ps_moe_layer (PsBuilder *b, const PsMoeConfig *cfg, PsInstr *x, PsInstr *wg,
                       PsInstr *wi, PsInstr *wo, PsInstr **aux_loss);

G_END_DECLS

#endif

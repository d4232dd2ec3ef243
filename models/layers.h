/* The layer library: the building blocks model files compose (models/).
 *
 * Each block is a function (net, weights, input) -> output that appends its
 * forward pass to net->c (net.h) and states its own sharding annotations
 * through the net's plan, by dim letters. Weights are plain structs of
 * PsInstr*, created by a *_weights() function that names them
 * "<prefix>.<name>" and annotates them (ps_net_weight), in the order the
 * step takes them as parameters.
 *
 * Dim letters (the same in einsums, weights and the sharding plan):
 *   b batch, s and t sequence (query, key), m model dim, h FFN hidden,
 *   n heads, d head dim, v vocabulary, k relative-position buckets.
 * A new family adds its own (MoE: e experts, g groups, c capacity; conv:
 * spatial and feature letters) and its plan says how to split them.
 *
 * Precision, as in the published runs: weights f32, cast to the net's
 * activation type (net->act: bf16 for the dense runs, f32 for GShard's MoE
 * runs) where a layer starts (ps_attention_cast, ps_ffn_cast); norms,
 * softmax and the loss in f32.
 *
 * A layer of a stack is a PsLayerFn over its own weights struct; the stack
 * helpers run it forward, and backward one layer at a time from the top
 * with optional rematerialisation, accumulating weight gradients in the net.
 * A pipelined model can wrap the same PsLayerFn in a stage; a MoE layer is
 * a PsLayerFn that calls ps_attention() and its own FFN.
 *
 * Ownership: every returned PsInstr* is transfer none (owned by net->c).
 */
#ifndef PS_MODELS_LAYERS_H
#define PS_MODELS_LAYERS_H

#include <glib.h>
#include <stdint.h>

#include "common/params.h"
#include "models/net.h"

G_BEGIN_DECLS

/* ---- elementwise and normalisation ---------------------------------------------- */

/* Layer norm over the last dim with a learned f32 scale, computed in f32:
 * (x - mean) * rsqrt(var + 1e-6) * scale, returned in x's type. */
PsInstr *ps_layer_norm (PsNet *net, PsInstr *x, PsInstr *scale);
/* The f32 scale of a layer norm over dim `dim`: weight "<prefix>.<name>",
 * not annotated (propagation replicates it). */
PsInstr *ps_layer_norm_weight (PsNet *net, const char *prefix, const char *name, int64_t dim);
/* RMS norm (Zhang and Sennrich 2019; T5, Llama): x * rsqrt(mean(x^2) +
 * 1e-6) * scale over the last dim, in f32, returned in x's type. */
PsInstr *ps_rms_norm (PsNet *net, PsInstr *x, PsInstr *scale);
/* The norm of `kind` (PsNormKind below). */
typedef enum { PS_NORM_LAYER, PS_NORM_RMS } PsNormKind;
PsInstr *ps_norm (PsNet *net, PsNormKind kind, PsInstr *x, PsInstr *scale);
/* SiLU (swish): x * logistic(x), the activation of SwiGLU. */
PsInstr *ps_silu (PsNet *net, PsInstr *x);
/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
PsInstr *ps_gelu (PsNet *net, PsInstr *x);
/* max(x, 0). */
PsInstr *ps_relu (PsNet *net, PsInstr *x);
/* Softmax over the last dim (x f32): exp(x - max) / sum. */
PsInstr *ps_softmax (PsNet *net, PsInstr *x);

/* ---- block options ------------------------------------------------------------------- */

/* How a Transformer block is written; the models' papers name them
 * (doc/models.md, "Block options"):
 *   position: T5/Lingvo relative bias (rel_buckets buckets), rotary (RoPE:
 *     GPT-J, Llama), a learned absolute table added to the embedding
 *     (GPT-2/3; the model adds it, see ps_embed), or none;
 *   block: sequential (attention then FFN, each pre-norm with residual) or
 *     parallel (GPT-J, PaLM: x + attn(norm x) + ffn(norm x), one norm);
 *   norm: layer norm or RMS norm;
 *   ffn: ReLU, GELU, gated GELU (GEGLU, the DenseLm128B runs and T5 v1.1)
 *     or gated SiLU (SwiGLU, PaLM and Llama), Shazeer 2020;
 *   kv_heads: key/value heads; 0 or heads: multi-head, 1: multi-query
 *     (Shazeer 2019), else grouped-query (Ainslie et al. 2023), dividing
 *     heads;
 *   rotary_dim: with rotary positions, how many dims of each head rotate
 *     (partial rotary: GPT-J rotates 64 of 256, GPT-NeoX a quarter); the
 *     rest pass through unchanged. 0: all of head_dim;
 *   rotary_pairs: which dims a rotation pairs: half (dim j with j + r/2:
 *     GPT-NeoX, Llama, rotate_half) or adjacent (2j with 2j + 1: GPT-J's
 *     mesh-transformer-jax, rotate_every_two). Same cost, other weights. */
typedef enum { PS_POSITION_RELATIVE, PS_POSITION_ROPE, PS_POSITION_LEARNED, PS_POSITION_NONE } PsPositionKind;
typedef enum { PS_BLOCK_SEQUENTIAL, PS_BLOCK_PARALLEL } PsBlockKind;
typedef enum { PS_FFN_RELU, PS_FFN_GELU, PS_FFN_GEGLU, PS_FFN_SWIGLU } PsFfnKind;
typedef enum { PS_ROTARY_HALF, PS_ROTARY_ADJACENT } PsRotaryPairs;

typedef struct {
  PsPositionKind position;
  int rel_buckets;           /* position relative: buckets (0: no bias) */
  PsBlockKind block;
  PsNormKind norm;
  PsFfnKind ffn;
  int64_t kv_heads;          /* 0: heads */
  int64_t rotary_dim;        /* position rope: rotated dims per head, even; 0: head_dim */
  PsRotaryPairs rotary_pairs;
} PsBlockOptions;

/* The names of each choice, in enum order, NULL-terminated (the model-file
 * values). */
extern const char *const ps_position_names[];
extern const char *const ps_block_names[];
extern const char *const ps_norm_names[];
extern const char *const ps_ffn_names[];
extern const char *const ps_rotary_pairs_names[];
/* The index of `name` in `names`, or -1. */
int ps_layer_choice (const char *const *names, const char *name);
/* The block every preset before the options had: relative bias of
 * rel_buckets buckets (none for 0), sequential, layer norm, gated GELU or
 * ReLU, multi-head. */
void ps_block_options_init (PsBlockOptions *o, int rel_buckets, gboolean gated_gelu);
/* The check every Transformer family makes of its rotary_dim (0, or even
 * and at most head_dim, and only with position rope) and rotary_pairs
 * (adjacent only with position rope), the options named
 * where params says they were set. FALSE with a PS_ERROR_OPTION error. */
gboolean ps_block_check_rotary (const PsParamStore *params, PsPositionKind position, int64_t head_dim,
                                int64_t rotary_dim, PsRotaryPairs pairs, GError **error);

/* ---- embedding and loss ------------------------------------------------------------ */

/* The embedding table [v, m] ("vm"), weight `name`. */
PsInstr *ps_embedding_weight (PsNet *net, const char *name, int64_t vocab, int64_t model_dim);
/* Token ids [b, s] (s32) to activations [b, s, m]: the one-hot of the ids
 * (type of table) times table [v, m] ("bsv,vm->bsm"), the TPU-friendly
 * lookup. */
PsInstr *ps_embed (PsNet *net, PsInstr *ids, PsInstr *table);
/* Softmax cross-entropy: logits [..., v] (f32) against integer labels
 * [...], averaged over the labels: -mean(log_softmax(logits)[label]). */
PsInstr *ps_softmax_cross_entropy (PsNet *net, PsInstr *logits, PsInstr *labels);

/* ---- self-attention ---------------------------------------------------------------- */

typedef struct {
  PsNormKind norm;
  PsInstr *ln;               /* pre-norm scale [m] ("<prefix>.ln1") */
  PsInstr *wq, *wk, *wv, *wo; /* [m, n, d] ("mnd"); grouped-query: wq and wo
                              * [m, n, q, d] ("mnqd"), n the kv heads, q the
                              * query heads of each */
  PsInstr *rel_bias;         /* [k, n] ("kn") or [k, n, q]; NULL: no relative
                              * position bias */
} PsAttention;

/* What every attention layer of a causal LM shares: the relative-position
 * bucket one-hot [s, t, k] (bf16) and the causal mask [s, t] (f32, -1e9
 * above the diagonal). */
typedef struct {
  PsInstr *rel_onehot;       /* NULL without relative position bias */
  PsInstr *mask;             /* NULL: not causal */
  PsInstr *rope_cos, *rope_sin; /* [s, d] (activation type); NULL: no rotary */
  PsInstr *rope_rot;         /* [d, d]: rotate_half of the first rotary_dim
                              * dims as a signed permutation (zero beyond) */
} PsAttentionContext;

/* Weights "<prefix>.ln1, wq, wk, wv, wo, rel_bias" (rel_bias only when
 * rel_buckets > 0). */
void ps_attention_weights (PsNet *net, const char *prefix, int64_t model_dim, int64_t heads,
                           int64_t head_dim, int rel_buckets, PsAttention *out);
/* The same with kv_heads key/value heads (dividing heads) and the norm
 * of the block. */
void ps_attention_weights_kv (PsNet *net, const char *prefix, int64_t model_dim, int64_t heads,
                              int64_t head_dim, int64_t kv_heads, int rel_buckets, PsNormKind norm,
                              PsAttention *out);
/* How the heads of grouped-query or multi-query attention split over
 * `ways` devices (the axis a plan splits `n` over): by kv heads (n) when
 * they divide it, else by the query heads of each kv head (q: wq, wo and
 * the bias split, wk and wv replicated over that axis, as Megatron-LM
 * replicates K and V when there are fewer kv heads than tensor-parallel
 * ranks), else not at all. Multi-head attention (kv_heads 0 or heads)
 * always splits n. */
typedef enum { PS_HEADS_SPLIT_KV, PS_HEADS_SPLIT_GROUPS, PS_HEADS_SPLIT_NONE } PsHeadsSplit;
PsHeadsSplit ps_heads_split (int64_t heads, int64_t kv_heads, int64_t ways);
/* The check the families make of it: FALSE with a PS_ERROR_OPTION error
 * naming --heads / --kv-heads (where params says they were set) and
 * `axis` ("mesh axis 1") when the heads cannot split over `ways`. */
gboolean ps_heads_check_split (const PsParamStore *params, int64_t heads, int64_t kv_heads, int64_t ways,
                               const char *axis, GError **error);
/* TRUE when `by` <= 1 or divides v; else FALSE with a PS_ERROR_OPTION
 * error "KEY = V is not divisible by OVER (BY)", KEY named as `params`
 * says it was set (or the option `opt`). */
gboolean ps_param_check_divides (const PsParamStore *params, int64_t v, const char *key, const char *opt,
                                 int64_t by, const char *over, GError **error);
/* Moves the plan's weight split of n to q when ps_heads_split says so
 * (mesh_dims, mesh_rank: the net's mesh, for the ways of the axis). */
void ps_heads_plan (PsShardingPlan *plan, int mesh_rank, const int64_t *mesh_dims, int64_t heads,
                    int64_t kv_heads);
/* The relative buckets of a causal LM with `buckets` buckets (T5/Lingvo:
 * distance n = max(s - t, 0); exact below buckets/2, then logarithmic up
 * to 128), computed from iota so it is not a huge constant; then the
 * causal mask. rel_buckets 0: no bucket one-hot. */
void ps_attention_context_causal (PsNet *net, int64_t seq_len, int rel_buckets, PsAttentionContext *out);
/* The context for a block of options o: the bucket one-hot (position
 * relative), the causal mask, then the rotary tables for heads of
 * head_dim (position rope; head_dim and o->rotary_dim even). */
void ps_attention_context_causal_opts (PsNet *net, int64_t seq_len, int64_t head_dim, const PsBlockOptions *o,
                                       PsAttentionContext *out);
/* T5's bidirectional relative buckets [s, s] (s32): half the buckets for
 * keys after the query, each half exact below its half, then logarithmic
 * up to 128 (Raffel et al. 2020, section 2.1; the Conformer and the
 * encoder-decoder's encoder use it). */
PsInstr *ps_relative_buckets_bidirectional (PsNet *net, int64_t seq_len, int buckets);
/* The bf16 casts of w's projections (the norm scale stays f32), in the
 * order wq wk wv wo rel_bias. */
void ps_attention_cast (PsNet *net, const PsAttention *w, PsAttention *out);
/* Pre-norm self-attention with residual on x [b, s, m] (bf16), weights
 * from ps_attention_cast: q, k, v projections, q scaled by 1/sqrt(d),
 * scores in f32 plus the relative position bias and the mask, softmax over
 * t, context, output projection, x + output. */
PsInstr *ps_attention (PsNet *net, const PsAttention *w, const PsAttentionContext *ctx, PsInstr *x);
/* Its branch without norm and residual: h is the normed input; q and k
 * get the rotary embedding when ctx has it. Returns [b, s, m]. */
PsInstr *ps_attention_core (PsNet *net, const PsAttention *w, const PsAttentionContext *ctx, PsInstr *h);
/* The same with keys and values from kv [b, t, m] (cross-attention: the
 * encoder's output; ctx then usually has no bias, mask or rotary). */
PsInstr *ps_attention_core_kv (PsNet *net, const PsAttention *w, const PsAttentionContext *ctx, PsInstr *h,
                               PsInstr *kv);

/* ---- feed-forward ------------------------------------------------------------------- */

typedef struct {
  PsFfnKind kind;
  PsNormKind norm;
  PsInstr *ln;               /* pre-norm scale [m] ("<prefix>.ln2"); NULL in a
                              * parallel block */
  PsInstr *w1;               /* [m, h] ("mh") */
  PsInstr *w1_gate;          /* [m, h] ("mh"); gated kinds only */
  PsInstr *w2;               /* [h, m] ("hm") */
} PsFfn;

/* Weights "<prefix>.ln2, w1, w1_gate (gated only), w2". */
void ps_ffn_weights (PsNet *net, const char *prefix, int64_t model_dim, int64_t ffn_dim,
                     gboolean gated_gelu, PsFfn *out);
/* The same for any kind; pre_norm FALSE: no "ln2" (a parallel block). */
void ps_ffn_weights_kind (PsNet *net, const char *prefix, int64_t model_dim, int64_t ffn_dim, PsFfnKind kind,
                          PsNormKind norm, gboolean pre_norm, PsFfn *out);
/* The weights of a GShard MoE FFN (models/moe_layer.h): its pre-norm
 * scale "<prefix>.<ln_name>" [m], the router "<prefix>.moe_wg" [m, E]
 * ("mr": its expert dim replicated), and the experts' "<prefix>.moe_wi"
 * [E, m, h] and "<prefix>.moe_wo" [E, h, m] with the dim letters the
 * caller's sharding plan splits (wi_letters, wo_letters: e.g. "emh",
 * "ehm"), created in that order. */
void ps_moe_ffn_weights (PsNet *net, const char *prefix, const char *ln_name, int64_t model_dim,
                         int64_t ffn_dim, int64_t experts, const char *wi_letters, const char *wo_letters,
                         PsInstr **ln, PsInstr **wg, PsInstr **wi, PsInstr **wo);
/* The bf16 casts of w1, w1_gate, w2 (the norm scale stays f32). */
void ps_ffn_cast (PsNet *net, const PsFfn *w, PsFfn *out);
/* Pre-norm FFN with residual on x [b, s, m]: gated GELU
 * (gelu(h w1) * (h w1_gate)) or ReLU, then w2; x + output. */
PsInstr *ps_ffn (PsNet *net, const PsFfn *w, PsInstr *x);
/* Its branch on the normed input h, without residual: w1, the activation
 * (gelu(h w1) * (h w1_gate), silu(h w1) * (h w1_gate), gelu or relu of h w1),
 * w2. */
PsInstr *ps_ffn_core (PsNet *net, const PsFfn *w, PsInstr *h);

/* ---- the Transformer layer ----------------------------------------------------------- */

typedef struct {
  PsAttention attention;
  PsFfn ffn;
  const PsAttentionContext *ctx;   /* borrowed, shared by the layers */
  PsBlockKind block;
} PsTransformerLayer;

/* Weights of one layer "<prefix>.*": attention, then FFN. */
void ps_transformer_layer_weights (PsNet *net, const char *prefix, int64_t model_dim, int64_t ffn_dim,
                                   int64_t heads, int64_t head_dim, int rel_buckets,
                                   gboolean gated_gelu, const PsAttentionContext *ctx,
                                   PsTransformerLayer *out);
/* The same for a block of options o (kv_heads, norm, ffn, block; the
 * position only decides whether there is a relative bias). */
void ps_transformer_layer_weights_opts (PsNet *net, const char *prefix, int64_t model_dim, int64_t ffn_dim,
                                        int64_t heads, int64_t head_dim, const PsBlockOptions *o,
                                        const PsAttentionContext *ctx, PsTransformerLayer *out);

/* ---- layer stacks: forward, backward, remat ----------------------------------------------- */

typedef struct PsLayerLoop PsLayerLoop;

/* A layer's forward pass over its weights struct. */
typedef PsInstr *(*PsLayerFn) (PsNet *net, gconstpointer weights, PsInstr *x);

/* A copy of a layer's weights struct (transfer full, g_free) with every
 * PsInstr* found in `map` replaced by its value; what a layer stack loop
 * needs to run the layer on its slices of the stacked weights. */
typedef gpointer (*PsLayerRebindFn) (gconstpointer weights, GHashTable *map);

typedef struct {
  PsLayerFn forward;
  gconstpointer weights;     /* passed to forward; borrowed */
  int first_weight;          /* its trainable weights are net->weights */
  int n_weights;             /*   [first_weight, first_weight + n_weights) */
  PsLayerRebindFn rebind;    /* NULL: the layer cannot run in a loop */
} PsLayer;

/* A layer over the weights created since ps_net_n_weights() was
 * first_weight. */
PsLayer ps_layer (PsNet *net, PsLayerFn forward, gconstpointer weights, int first_weight);

/* The Transformer layer as a PsLayerFn (weights: a PsTransformerLayer):
 * annotates its input "bsm", casts its weights, attention, FFN. */
PsInstr *ps_transformer_layer (PsNet *net, gconstpointer layer, PsInstr *x);
/* Its PsLayerRebindFn (the context's instructions are kept: a loop reads
 * them as loop invariants). */
gpointer ps_transformer_layer_rebind (gconstpointer layer, GHashTable *map);

/* xs[0] = x, xs[i + 1] = layers[i](xs[i]); returns xs[n]. xs has n + 1
 * entries. */
PsInstr *ps_layer_stack_forward (PsNet *net, int n, const PsLayer *layers, PsInstr *x, PsInstr **xs);
/* The same for layers that report an auxiliary loss term
 * (ps_net_layer_aux_loss): auxs[i] gets layer i's term or NULL (auxs has
 * n entries); the caller adds them to the loss. */
PsInstr *ps_layer_stack_forward_aux (PsNet *net, int n, const PsLayer *layers, PsInstr *x, PsInstr **xs,
                                     PsInstr **auxs);
/* Backward from the top, one layer at a time: dy is the gradient at xs[n];
 * each layer's weight gradients are accumulated in the net and *dx gets the
 * gradient at xs[0]. With remat each layer's forward is rebuilt from its
 * input right before its backward, so only layer inputs stay live. FALSE
 * with an error when autodiff lacks a rule. */
gboolean ps_layer_stack_backward (PsNet *net, int n, const PsLayer *layers, PsInstr *const *xs,
                                  PsInstr *dy, gboolean remat, PsInstr **dx, GError **error);
/* The same with the auxiliary loss terms of ps_layer_stack_forward_aux:
 * each layer's output and its term (auxs[i], or the one its rebuilt
 * forward reports with remat) are differentiated together, the term seeded
 * with aux_seed (an f32 scalar: the loss's weight of the terms). */
gboolean ps_layer_stack_backward_aux (PsNet *net, int n, const PsLayer *layers, PsInstr *const *xs,
                                      PsInstr *const *auxs, PsInstr *aux_seed, PsInstr *dy,
                                      gboolean remat, PsInstr **dx, GError **error);

/* ---- layer stacks as a loop -------------------------------------------------------------- */

/* The n layers of a stack as one loop (partitioner/builder/scan.h), the way
 * Lingvo's repeated layers and JAX's scan write them: `layer` is one layer
 * over weights stacked by layer ([n, ...], made between
 * ps_net_stack_weights (net, n) and ps_net_stack_weights (net, 0)), with a
 * rebind function. The body runs layer.forward on layer t's slices of the
 * weights; instructions of net->c the layer reads (a shared context)
 * become loop invariants. Returns the top activation; *loop (transfer
 * full) keeps what ps_layer_loop_backward needs: with remat each layer's
 * input, else the values its backward reads. NULL with an error when
 * autodiff lacks a rule. */
PsInstr *ps_layer_loop_forward (PsNet *net, const PsLayer *layer, int64_t n, PsInstr *x,
                                gboolean remat, PsLayerLoop **loop, GError **error);
/* The backward loop, layers from the top: dy is the gradient at the top;
 * the stacked weights' gradients are accumulated in the net, *dx gets the
 * gradient at the input. Frees loop. */
gboolean ps_layer_loop_backward (PsNet *net, PsLayerLoop *loop, PsInstr *dy, PsInstr **dx,
                                 GError **error);
/* The same with each layer's optimizer update inside its backward
 * iteration (ps_net_scan_vjp_update; lr, decay: ps_net_finish's). For the
 * last microbatch. Frees loop. */
gboolean ps_layer_loop_backward_update (PsNet *net, PsLayerLoop *loop, PsInstr *dy, PsInstr **dx,
                                        PsInstr *lr, PsInstr *decay, GError **error);
void ps_layer_loop_free (PsLayerLoop *loop);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsLayerLoop, ps_layer_loop_free)

G_END_DECLS

#endif

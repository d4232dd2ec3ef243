/* The network being built: what every model file shares (models/).
 *
 * A PsNet is one training-step computation under construction, plus what a
 * model author would otherwise keep by hand next to it:
 *
 *  - the device mesh and a sharding plan. Tensors name their dims with
 *    letters, the same letters as in the einsums that use them ("bsm" for
 *    activations [batch, sequence, model], "mnd" for an attention
 *    projection). The plan says which mesh axis splits which letter, once
 *    for activations and once for weights; ps_net_annotate() and
 *    ps_net_weight() turn that into mesh_split shardings. So a block states
 *    its annotations once, and a preset (2-D, 1-D, data parallel, experts
 *    over one axis, ...) is a plan, not a copy of the block.
 *  - the parameters in the order the step takes them: weights (f32, each
 *    with its sharding), their optimizer state (sharded like the weight,
 *    optionally split further over the data-parallel axis: weight-update
 *    sharding), then data inputs and scalars.
 *  - gradient and loss accumulators, so microbatching (gradient
 *    accumulation) and a layer-at-a-time backward pass stay a few lines;
 *    the optimizer step and the step's output tuple.
 *
 * Typical use (see models/dense_lm.c):
 *
 *   PsNet *net = ps_net_new ("my_model", "train_step", 2, mesh, devices, &plan);
 *   PsInstr *w = ps_net_weight (net, "w1", "mh", 2, (int64_t[]) { M, H });
 *   ps_net_add_optimizer_state (net, PS_OPTIMIZER_ADAFACTOR, PS_AXIS_NONE);
 *   PsInstr *x = ps_net_input (net, "x", PS_BF16, 3, dims);
 *   ... forward (ps_net_annotate (net, x, "bsm"); blocks of layers.h) ...
 *   ... backward: ps_net_vjp () / ps_layer_stack_backward () ...
 *   ps_net_add_loss (net, loss);
 *   PsModule *m = ps_net_finish (net, lr, decay);
 *
 * Emission: every helper appends instructions to net->c in the order its
 * comment gives, through the net's builder (ps_net_builder; models build
 * through the builder only, never with autodiff's helpers or raw
 * instructions), so a model built twice prints the same HLO. Nothing here
 * depends on C's unspecified argument evaluation order: helpers that emit
 * two operands name them in sequence first.
 *
 * Errors: shapes are the model's own (checked by its config check), so a
 * mismatch is a programmer error; the builder keeps it (sticky) and loop
 * bodies return it. Autodiff may fail (PS_ERROR_UNSUPPORTED);
 * ps_net_vjp() returns FALSE with the error.
 *
 * Ownership: ps_net_new() creates the module; ps_net_finish() hands it to
 * the caller (transfer full) and frees the net; ps_net_free() frees both.
 * Every PsInstr* returned is transfer none (owned by the computation).
 */
#ifndef PS_MODELS_NET_H
#define PS_MODELS_NET_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/builder/builder.h"
#include "partitioner/builder/optimizer.h"
#include "partitioner/builder/scan.h"
#include "partitioner/ir/sharding.h"
#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

/* The largest tensor rank the helpers handle. */
#define PS_NET_MAX_RANK 16

/* ---- sharding plan ---------------------------------------------------------- */

/* What a plan maps a dim letter to: a mesh axis (0 .. mesh rank - 1), or: */
enum {
  PS_AXIS_NONE = -1,   /* not split */
  PS_AXIS_ALL = -2,    /* split over every device (the mesh flattened) */
};

typedef enum { PS_ACTIVATIONS, PS_WEIGHTS, PS_N_TENSOR_CLASSES } PsTensorClass;

typedef struct {
  /* FALSE: tensors of this class get no annotation at all (propagation
   * decides); TRUE: they do, replicated where no letter is split. */
  gboolean annotate[PS_N_TENSOR_CLASSES];
  /* axis[class][letter - 'a']: the mesh axis splitting that dim letter. */
  int8_t axis[PS_N_TENSOR_CLASSES][26];
} PsShardingPlan;

/* A plan that annotates nothing and splits nothing. */
void ps_sharding_plan_init (PsShardingPlan *plan);
/* Splits every letter of `letters` in tensors of `cls` over `axis`, and
 * turns annotation of that class on. */
void ps_sharding_plan_split (PsShardingPlan *plan, PsTensorClass cls, const char *letters, int axis);

/* ---- the net ------------------------------------------------------------------ */

typedef struct PsNet PsNet;
typedef struct PsNetPrivate PsNetPrivate;
struct PsNet {
  PsModule *m;
  PsComputation *c;          /* the entry computation being built */
  int mesh_rank;
  int64_t mesh_dims[4];
  int64_t *mesh_devices;     /* row-major device ids */
  PsShardingPlan plan;
  PsElemType act;            /* activation type (PS_BF16 unless the model sets it):
                              * layers cast weights to it where they start */
  int n_annotations;         /* tensors a user annotates (weights, activations) */
  GPtrArray *weights;        /* PsInstr*, the weights in parameter order */
  PsNetPrivate *priv;        /* optimizer state, accumulators (net.c) */
};

/* A new module `module_name` num_partitions = prod(mesh_dims), with an
 * empty entry computation `computation_name`. mesh_devices (row-major,
 * prod(mesh_dims) ids) and plan are copied. mesh_rank <= 4. */
PsNet *ps_net_new (const char *module_name, const char *computation_name, int mesh_rank,
                   const int64_t *mesh_dims, const int64_t *mesh_devices,
                   const PsShardingPlan *plan);
void ps_net_free (PsNet *net);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsNet, ps_net_free)

/* A PsBuilder (partitioner/builder/builder.h) appending to net->c, with
 * the net's mesh set (ps_builder_mesh_split), for blocks written with the
 * builder (models/moe_layer.h). Made on first use, owned by the net
 * (transfer none); made again when net->c has changed since (a loop body
 * being built, ps_net_microbatch_loop) unless it holds an error. Its
 * errors are sticky: check ps_builder_ok() before ps_net_finish(). */
PsBuilder *ps_net_builder (PsNet *net);

/* ---- annotations ----------------------------------------------------------- */

/* The plan's sharding for a tensor of `cls` whose dims are `letters` (one
 * letter per dim of shape x), attached to x unless x has one already or
 * the plan does not annotate that class. Counted in n_annotations. */
void ps_net_annotate_as (PsNet *net, PsInstr *x, PsTensorClass cls, const char *letters);
/* The same for an activation: what a user writes on a layer's input. */
void ps_net_annotate (PsNet *net, PsInstr *x, const char *letters);

/* ---- parameters -------------------------------------------------------------- */

/* A trainable f32 weight parameter, annotated by the plan's weight rule
 * over `letters` (NULL: never annotated, e.g. layer-norm scales, which
 * propagation replicates). Weights must all come before the optimizer
 * state. */
PsInstr *ps_net_weight (PsNet *net, const char *name, const char *letters, int rank,
                        const int64_t *dims);
/* The optimizer state of every weight so far (ps_optimizer_state_shapes),
 * as parameters "<weight>.opt<k>", each sharded as its weight minus the
 * dims the state drops. wus_axis (weight-update sharding, PS_AXIS_NONE for
 * none): the state's dim 0 is also split over that axis when no dim is
 * already split over it (or over all devices) and the axis divides it.
 * State annotations are not counted: frameworks give optimizer slots their
 * variable's sharding without the user writing them. */
void ps_net_add_optimizer_state (PsNet *net, PsOptimizerKind kind, int wus_axis);
/* A non-trainable parameter (data, scalars), not annotated. */
PsInstr *ps_net_input (PsNet *net, const char *name, PsElemType t, int rank, const int64_t *dims);
/* Weights created so far (the next weight's index). */
int ps_net_n_weights (const PsNet *net);
/* Layer stacks written as a loop (layers.h, ps_layer_loop_forward): from
 * this call on, every weight ps_net_weight() creates is stacked over n
 * layers, with a leading dim n that is never split (its other dims are
 * annotated as for one layer); n = 0 ends it. Their optimizer state is
 * stacked the same way (each layer's state), and ps_net_finish() updates
 * them one layer at a time in a loop (ps_optimizer_apply_layers). */
void ps_net_stack_weights (PsNet *net, int64_t n);
/* The same with several leading dims, each split over a mesh axis (or
 * PS_AXIS_NONE; axes NULL: none): a pipeline's [stages], split over the
 * stage axis. Weights with a split stack dim or more than one stack dim
 * get each layer's update vectorized over them
 * (ps_optimizer_apply_stacked); n_dims 0 ends it. */
void ps_net_stack_weights_split (PsNet *net, int n_dims, const int64_t *dims, const int *axes);
/* Number of stack dims of weight w (0: not stacked); their sizes in dims
 * when not NULL. */
int ps_net_weight_stack (const PsNet *net, const PsInstr *w, int64_t *dims);
/* The annotation of a value with one more leading dim, split over mesh
 * `axis`, whose other dims are annotated as s (NULL or replicated: not
 * split), for a value of `rank` dims in all: mesh_split with the axis
 * prepended to s's mapping, computed from s's tile assignment (s must be
 * replicated along the axis). NULL when s cannot be so extended.
 * transfer full. */
PsSharding *ps_net_prefix_axis (const PsNet *net, const PsSharding *s, int rank, int axis);
/* A cast of `weight` to t that the backward pass treats as the weight
 * itself: ps_net_vjp() with respect to the cast accumulates into the
 * weight (converted to f32). A tied softmax takes its own cast of the
 * embedding this way, so the head's backward stops at that cast instead of
 * walking back through every layer to the embedding lookup. */
PsInstr *ps_net_weight_view (PsNet *net, PsInstr *weight, PsElemType t);

/* ---- emission helpers ---------------------------------------------------------- */

/* einsum("bsm,mh->bsh", lhs, rhs): one dot (letters in both operands and
 * the output are batch dims, in both operands only are contracted), then a
 * transpose when the output order is not [batch, lhs free, rhs free]. Every
 * letter of the output must be in an operand. */
PsInstr *ps_net_einsum (PsNet *net, const char *spec, PsInstr *lhs, PsInstr *rhs);
/* one_hot(ids)[..., v] = (ids[...] == v) as type t, depth classes last:
 * iota, broadcast, compare, convert. */
PsInstr *ps_net_one_hot (PsNet *net, PsInstr *ids, int64_t depth, PsElemType t);
/* Rows [start, start + size) of dim 0 (x itself when that is all of it). */
PsInstr *ps_net_slice_batch (PsNet *net, PsInstr *x, int64_t start, int64_t size);
/* Microbatch u of n: ps_net_slice_batch of the u-th equal part. */
PsInstr *ps_net_microbatch (PsNet *net, PsInstr *x, int u, int n);

/* ---- backward pass, gradients, loss ----------------------------------------------- */

/* Gradient accumulation: adds g (converted to the weight's type) to the
 * weight's gradient so far. */
void ps_net_add_grad (PsNet *net, PsInstr *weight, PsInstr *g);
/* Backward through the part of the program from x and the weights to y:
 * the vector-Jacobian product seeded with dy. weights are weights or their
 * views (ps_net_weight_view). Their gradients are converted to the
 * weight's type, in the order given, then accumulated (ps_net_add_grad),
 * in the same order. *dx gets x's gradient (x and dx may be NULL). FALSE
 * with an error when autodiff lacks a rule. */
gboolean ps_net_vjp (PsNet *net, PsInstr *y, PsInstr *dy, PsInstr *x, PsInstr **dx, int n_weights,
                     PsInstr *const *weights, GError **error);
/* The same for several outputs of the part at once, ys[k] seeded with
 * dys[k]: a layer's output and its auxiliary loss term. */
gboolean ps_net_vjp_multi (PsNet *net, int n_y, PsInstr *const *ys, PsInstr *const *dys, PsInstr *x,
                           PsInstr **dx, int n_weights, PsInstr *const *weights, GError **error);
/* From inside a PsLayerFn (layers.h): the layer's auxiliary loss term, an
 * f32 scalar already weighted (an MoE layer's load-balancing loss). The
 * layer-stack helpers take it (ps_net_take_layer_aux), add it to the loss
 * and differentiate it with the layer. */
void ps_net_layer_aux_loss (PsNet *net, PsInstr *aux);
/* The term the last layer built reported, or NULL; clears it. */
PsInstr *ps_net_take_layer_aux (PsNet *net);
/* Loss accumulation over microbatches: sum now, mean at ps_net_finish. */
void ps_net_add_loss (PsNet *net, PsInstr *loss);

/* The backward loop of scan s (a layer loop over the stacked weights
 * first_weight .. first_weight + n_weights - 1, its xs in that order) with
 * each layer's optimizer update in its own iteration (ps_scan_vjp_update):
 * the gradient of layer t, plus what earlier microbatches accumulated for
 * it, updates layer t of the weights and of their state in place, as soon
 * as it exists. XLA sees the same per-layer update, right after the
 * layer's backward, in an unrolled program (Lingvo's DenseLm); so no stack
 * of every layer's gradient is live. lr and decay are the f32[] inputs
 * given to ps_net_finish, which then leaves these weights alone. dy: the
 * gradient at the top; *dx gets the one at the loop's input. Call it for
 * the last microbatch (the gradients are complete there). */
/* The backward loop of a layer scan for a microbatch that does not
 * update: each weight's layer-t gradient is added, in iteration t, into
 * one accumulator per weight carried through the loop (the earlier
 * microbatches' sum, or zeros for the first), which becomes the weight's
 * gradient so far. As Lingvo and JAX accumulate gradients: one buffer
 * per weight, updated in place, whatever the number of microbatches.
 * *dx gets the gradient at the loop's input. */
gboolean ps_net_scan_vjp_accumulate (PsNet *net, PsScan *s, int first_weight, int n_weights,
                                     PsInstr *dy, PsInstr **dx, GError **error);
gboolean ps_net_scan_vjp_update (PsNet *net, PsScan *s, int first_weight, int n_weights,
                                 PsInstr *dy, PsInstr **dx, PsInstr *lr, PsInstr *decay,
                                 GError **error);

/* ---- microbatches as a loop --------------------------------------------------------------- */

/* Builds one microbatch in net->c (which is the loop body for the time of
 * the call): inputs[k] is the microbatch's part of the k-th input given to
 * ps_net_microbatch_loop. It runs the forward and backward pass as for
 * an unrolled microbatch (ps_net_vjp, ps_net_add_loss, the layer loop's
 * ps_layer_loop_backward), but updates no weight. */
typedef gboolean (*PsNetMicrobatchFn) (PsNet *net, PsInstr *const *inputs, gpointer user,
                                       GError **error);

/* Gradient accumulation as Lingvo and JAX write it: one while loop over
 * the n microbatches (a scan, partitioner/builder/scan.h) whose body is
 * built once by fn and which carries one accumulator per weight (the
 * weight's shape, type and sharding, zeros or the gradient so far) and
 * the summed loss; so the program does not grow with n. inputs[k]
 * ([B, ...], B divisible by n) are cut into [n, B/n, ...], microbatch u
 * the rows [u B/n, (u + 1) B/n) as ps_net_microbatch cuts them. Every
 * weight's gradient is then the loop's accumulator (ps_net_finish updates
 * them after the loop). The body may read any instruction of the net's
 * computation (weights, shared tables): each becomes a loop invariant.
 * FALSE with an error from fn or the scan. */
gboolean ps_net_microbatch_loop (PsNet *net, int n_inputs, PsInstr *const *inputs, int n,
                                 PsNetMicrobatchFn fn, gpointer user, GError **error);

/* ---- optimizer step and outputs ---------------------------------------------------------- */

/* Appends the optimizer update of every weight (kind and hyper-parameter
 * defaults of ps_net_add_optimizer_state; lr and decay are f32[] inputs), and
 * makes the root tuple (mean loss, new weights, new optimizer state). New
 * weights and states keep their parameter's sharding (the buffer is
 * donated and overwritten in place). Returns the module (transfer full) and
 * frees the net. Every weight needs a gradient by then (or its update,
 * ps_net_scan_vjp_update). */
PsModule *ps_net_finish (PsNet *net, PsInstr *lr, PsInstr *decay);
/* Instead of the optimizer step: the root tuple is (mean loss, every
 * weight's gradient in weight order); the optimizer state parameters stay
 * unused. For comparing two forms of a model. transfer full; frees the
 * net. */
PsModule *ps_net_finish_gradients (PsNet *net);

G_END_DECLS

#endif

/* Optimizer updates written as IR, appended to a training-step computation.
 *
 * The model builders (models/) call these after ps_autodiff_gradients(): for
 * each weight they get the gradient, the optimizer-state parameters and the
 * scalar hyper-parameters, and append the update so that the step's outputs
 * are the new weights and states. Writing the update in the IR (rather than
 * costing it analytically) lets propagation shard the optimizer state and
 * memory analysis count it, as in the GSPMD paper's weight-update sharding.
 *
 * Adafactor follows Shazeer & Stern (2018) with beta1 = 0 (no first moment),
 * as the published GSPMD runs used it: for a weight of rank >= 2 the second
 * moment is factored into a row vector (last dim reduced) and a column vector
 * (second-to-last dim reduced); rank-1 weights keep a full second moment.
 * Update clipping (threshold d) and the relative step size (scaled by the RMS
 * of the weight) are included. Adam is the textbook one with bias correction
 * folded into the learning-rate input.
 *
 * All state is f32. Instructions returned are transfer none (owned by c).
 */
#ifndef PS_PARTITIONER_OPTIMIZER_H
#define PS_PARTITIONER_OPTIMIZER_H

#include <glib.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

typedef enum { PS_OPTIMIZER_ADAFACTOR, PS_OPTIMIZER_ADAM } PsOptimizerKind;

/* The optimizers' names in PsOptimizerKind order, NULL-terminated (a
 * model's `optimizer` choice is an index into it: PS_PARAM_ENUM_FIELD). */
extern const char *const ps_optimizer_names[];
const char *ps_optimizer_name (PsOptimizerKind k);

/* Number and shapes of the state tensors of one weight of `shape`:
 * Adafactor: rank >= 2: [row (dims without the last), col (dims without the
 * second-to-last)]; rank <= 1: [v]. Adam: [m, v]. Returns the count and fills
 * out_shapes (transfer full each) when not NULL (at most 2). */
int ps_optimizer_state_shapes (PsOptimizerKind k, const PsShape *weight, PsShape **out_shapes);

/* The same for a weight whose first `n_stack` dims stack layers: each
 * layer's state (Adafactor factors the layer's own dims). */
int ps_optimizer_state_shapes_stacked (PsOptimizerKind k, const PsShape *weight, int n_stack,
                                       PsShape **out_shapes);

/* The weight dim that dim `dim` of state tensor `state` comes from
 * (factored states drop one weight dim), so that a state can be sharded
 * like its weight. */
int ps_optimizer_state_source_dim (PsOptimizerKind k, int weight_rank, int state, int dim);

/* Hyper-parameters (scalars in the IR so one program serves every step). */
typedef struct {
  PsInstr *lr;        /* f32[] learning rate (Adam: bias correction folded in) */
  PsInstr *decay;     /* f32[] Adafactor second-moment decay (1 - t^-0.8);
                       * Adam: beta2 */
  double beta1;       /* Adam only */
  double epsilon1;    /* Adafactor: added to g^2 (1e-30); Adam: eps (1e-8) */
  double epsilon2;    /* Adafactor: floor of the parameter scale (1e-3) */
  double clip;        /* Adafactor update clipping threshold d (1.0) */
} PsOptimizerHyper;

void ps_optimizer_hyper_defaults (PsOptimizerKind k, PsOptimizerHyper *h);

/* Appends the update of one weight: `states` are the current state
 * instructions (as many as ps_optimizer_state_shapes says); fills
 * new_weight and new_states. */
void ps_optimizer_apply (PsComputation *c, PsOptimizerKind k, const PsOptimizerHyper *h,
                         PsInstr *weight, PsInstr *grad, PsInstr *const *states,
                         PsInstr **new_weight, PsInstr **new_states);

/* Updates n weights stacked by layer ([L, ...], the same L) one layer at a
 * time, in one loop over the layers (partitioner/builder/scan.h): each
 * iteration slices layer t of every weight, gradient and state, applies
 * ps_optimizer_apply to it, and writes the new weight over the gradient
 * (the gradient stack becomes the new weight stack, as buffer assignment
 * reuses a dead gradient) and the new state over the state. So the update,
 * its collectives and its memory are those of the weights one by one. `states` holds each
 * weight's states (ps_optimizer_state_shapes_stacked with n_stack 1) in
 * weight order; new_weights and new_states receive the results. */
/* The update of a weight whose first n_stack dims stack independent
 * weights (a pipeline's [stages, layers]), vectorized: the factoring and
 * the RMS of update clipping and of the relative step are per stacked
 * weight, so each gets the update ps_optimizer_apply gives it alone.
 * States: ps_optimizer_state_shapes_stacked with the same n_stack. */
void ps_optimizer_apply_stacked (PsComputation *c, PsOptimizerKind k, const PsOptimizerHyper *h,
                                 PsInstr *weight, PsInstr *grad, PsInstr *const *states,
                                 int n_stack, PsInstr **new_weight, PsInstr **new_states);

gboolean ps_optimizer_apply_layers (PsComputation *c, PsOptimizerKind k,
                                    const PsOptimizerHyper *h, int n, PsInstr *const *weights,
                                    PsInstr *const *grads, PsInstr *const *states,
                                    PsInstr **new_weights, PsInstr **new_states, GError **error);

/* Layer t (an s32[] of c) of n weights stacked by layer updated in place:
 * `grads` are layer t's gradients (not stacked), `states` the stacked
 * states as in ps_optimizer_apply_layers. new_weights and new_states
 * receive the stacks with layer t replaced (dynamic-update-slice). For the
 * update inside a layer loop's backward iteration (ps_scan_vjp_update). */
void ps_optimizer_apply_layer_at (PsComputation *c, PsOptimizerKind k, const PsOptimizerHyper *h,
                                  int n, PsInstr *const *weights, PsInstr *const *grads,
                                  PsInstr *const *states, PsInstr *t, PsInstr **new_weights,
                                  PsInstr **new_states);

G_END_DECLS

#endif

/* Reverse-mode automatic differentiation over the graph IR.
 *
 * Model builders write the forward pass of a training step as for one device
 * (models/); this module appends the backward pass to the same computation,
 * so that propagation and partitioning see one program, as XLA does after
 * JAX's or TensorFlow's autodiff. Each supported opcode has a vector-Jacobian
 * rule that emits ordinary IR instructions (dot, reduce, broadcast, select,
 * ...); the gradient of an instruction has the instruction's own shape and
 * element type.
 *
 * Supported: the elementwise math the models use (add, subtract, multiply,
 * divide, negate, exp, log, tanh, logistic, rsqrt, sqrt, maximum, minimum,
 * select, convert, copy, power with a constant exponent, erf, abs), broadcast,
 * reshape, transpose, reduce with an add or max reducer, dot with any
 * batch/contracting dimensions, slice, pad (without interior padding),
 * concatenate, dynamic-slice, dynamic-update-slice, the custom-call "Sharding" (its gradient gets the same
 * annotation), convolution (strides, padding, base and window dilation,
 * feature groups; not batch groups), batch-norm-training (its gradient is
 * batch-norm-grad; the mean and variance outputs carry none) and
 * batch-norm-inference, get-tuple-element of a tuple-shaped op. Constants, iota, compare and parameters stop the flow, and
 * so does every value that is not floating point (a mask or an index made
 * from an input is piecewise constant in it). Any
 * other opcode on the path from the output to a requested input is an error
 * (PS_ERROR_UNSUPPORTED) naming the instruction.
 *
 * Reducer computations the rules need (add over an element type) are created
 * in the module as "ad_add_<type>" ahead of the computations that use them
 * (the folder-private ad_reducer, folder_private.h).
 */
#ifndef PS_PARTITIONER_AUTODIFF_H
#define PS_PARTITIONER_AUTODIFF_H

#include <glib.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

/* Appends to `c` the gradient of `y` (an instruction of `c`, usually a scalar
 * loss) with respect to each of `wrt` (instructions of `c`, usually
 * parameters), seeding dy with ones. Returns the gradient instructions, one
 * per wrt entry (transfer container: the array is new, the instructions belong
 * to c); an input that y does not depend on gets a broadcast zero. Returns
 * NULL with an error when a rule is missing. The root of c is not changed. */
GPtrArray *ps_autodiff_gradients (PsComputation *c, PsInstr *y, int n_wrt,
                                  PsInstr *const *wrt, GError **error);

/* The vector-Jacobian product: like ps_autodiff_gradients but seeded with
 * `dy` (same shape as y) instead of ones. Model builders use it to run the
 * backward pass one layer at a time (and to rematerialise a layer's forward
 * right before its backward). */
GPtrArray *ps_autodiff_vjp (PsComputation *c, PsInstr *y, PsInstr *dy, int n_wrt,
                            PsInstr *const *wrt, GError **error);

/* The same for several outputs at once: ys[k] seeded with dys[k] (same
 * shape). A layer with an auxiliary loss (MoE) differentiates its output
 * and its loss term in one walk. */
GPtrArray *ps_autodiff_vjp_multi (PsComputation *c, int n_y, PsInstr *const *ys,
                                  PsInstr *const *dys, int n_wrt, PsInstr *const *wrt,
                                  GError **error);

G_END_DECLS

#endif

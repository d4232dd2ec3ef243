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
 * (ps_ad_reducer).
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

/* Emission helpers shared with the optimizers and model builders: each
 * appends one instruction to c and returns it (transfer none). */
PsInstr *ps_ad_scalar (PsComputation *c, PsElemType t, double value);
PsInstr *ps_ad_full (PsComputation *c, const PsShape *like, double value);
PsInstr *ps_ad_binary (PsComputation *c, PsOpcode op, PsInstr *a, PsInstr *b);
PsInstr *ps_ad_unary (PsComputation *c, PsOpcode op, PsInstr *a);
PsInstr *ps_ad_convert (PsComputation *c, PsInstr *a, PsElemType t);
/* Sum over the listed dims (result keeps the other dims in order). */
PsInstr *ps_ad_reduce_sum (PsComputation *c, PsInstr *a, int n_dims, const int64_t *dims);
/* Broadcast `a` into `shape` with operand dim i landing on dims[i]. */
PsInstr *ps_ad_broadcast (PsComputation *c, PsInstr *a, const PsShape *shape,
                          int n_dims, const int64_t *dims);
/* Reduce over the listed dims with a binary `op` (add, maximum, ...) from
 * `init`; the result keeps the other dims in order. */
PsInstr *ps_ad_reduce (PsComputation *c, PsInstr *a, PsOpcode op, double init, int n_dims,
                       const int64_t *dims);
/* dynamic-slice of a at the scalar integer starts (one per dim of a). */
PsInstr *ps_ad_dynamic_slice (PsComputation *c, PsInstr *a, PsInstr *const *starts,
                              const int64_t *sizes);
/* dynamic-update-slice: update written into a at the scalar starts. */
PsInstr *ps_ad_dynamic_update_slice (PsComputation *c, PsInstr *a, PsInstr *update,
                                     PsInstr *const *starts);
PsInstr *ps_ad_tuple (PsComputation *c, int n, PsInstr *const *elems);
/* The scalar reducer computation "ad_<op>_<type>" of m, made on first use
 * ahead of the computations that call it. */
PsComputation *ps_ad_reducer (PsModule *m, PsOpcode op, PsElemType t);
/* Transpose (perm[i] = operand dim of output dim i; a no-op returns a) and
 * reshape to `to`'s dims (a when equal). */
PsInstr *ps_ad_transpose (PsComputation *c, PsInstr *a, const int64_t *perm);
PsInstr *ps_ad_reshape (PsComputation *c, PsInstr *a, const PsShape *to);
/* A convolution with the given dimension numbers (the spatial arrays are
 * copied), window (dims->n_spatial entries) and group counts (<= 1: none);
 * the shape is inferred and must fit (programmer error otherwise). */
PsInstr *ps_ad_convolution (PsComputation *c, PsInstr *lhs, PsInstr *rhs, const PsConvDims *dims,
                            const PsWindowDim *window, int64_t feature_group_count,
                            int64_t batch_group_count);
PsInstr *ps_ad_get_tuple_element (PsComputation *c, PsInstr *tuple, int64_t index);
/* batch-norm-training (3 operands), -inference or -grad (5), shape
 * inferred (must fit). */
PsInstr *ps_ad_batch_norm (PsComputation *c, PsOpcode op, PsInstr *const *operands,
                           float epsilon, int64_t feature_index);

G_END_DECLS

#endif

/* The builder: the C API that model code uses to write single-device programs
 * in the graph IR, instruction by instruction, as one would with XlaBuilder.
 *
 * A PsBuilder appends instructions to one computation of a module:
 *
 *   g_autoptr (PsModule) m = ps_module_new ("ffn");
 *   PsBuilder *b = ps_builder_new (m, "main");
 *   PsInstr *x = ps_build_parameter (b, "x", PS_BF16, 3, (int64_t[]) { 8, 128, 512 });
 *   PsInstr *w = ps_build_parameter (b, "w1", PS_BF16, 2, (int64_t[]) { 512, 2048 });
 *   PsInstr *h = ps_build_einsum (b, "bsm,mh->bsh", x, w);
 *   ...
 *   if (!ps_builder_finish_entry (b, out, &error)) ...
 *
 * Errors. Shape mismatches and bad attributes (a dot whose contracting dims
 * differ in size, an einsum letter missing from the inputs...) are errors a
 * model's configuration can cause, so they are GErrors (PS_ERROR_INVALID),
 * not assertions. The builder keeps the FIRST error; every later call returns
 * NULL without adding anything, and NULL operands are accepted and give NULL.
 * So model code can build a whole program and check once, at
 * ps_builder_finish() / ps_builder_finish_entry(), which return the error.
 * Messages name the operation and the computation: "builder 'main': dot: lhs
 * contracting dim 2 (512) != rhs contracting dim 0 (256)". Passing a NULL
 * builder, or an instruction of another module, is a programmer error
 * (g_return_val_if_fail).
 *
 * Shapes: the builder computes every result shape itself from its
 * arguments and checks them as it goes, so its messages can name the
 * builder's arguments (einsum letters, dim_labels); the HLO reader's
 * ps_infer_shape() is not needed to build a program.
 *
 * Computation order: printed HLO must define a callee before its callers.
 * Reducers and bodies may be built while the caller is being built, so
 * ps_builder_finish() reorders the module's computations (stable topological
 * order, callees first).
 *
 * Names: instructions get unique names from their opcode ("add.7") unless
 * ps_builder_name_next() names the next one; a taken name gets a ".N"
 * suffix.
 *
 * Ownership: the module is borrowed (it owns the computations and
 * instructions); every returned PsInstr* / PsComputation* is transfer none.
 * PsShape / PsSharding arguments are borrowed and copied. The builder itself
 * is freed by ps_builder_finish*() or ps_builder_free().
 */
#ifndef PS_PARTITIONER_BUILDER_H
#define PS_PARTITIONER_BUILDER_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/ir/ir.h"
#include "partitioner/ir/sharding.h"

G_BEGIN_DECLS

typedef struct PsBuilder PsBuilder;

/* Starts a new, empty computation `name` in `m` (made unique if taken). */
PsBuilder *ps_builder_new (PsModule *m, const char *name);
/* A builder appending to c, an existing computation of m (a block of the
 * layer library emitting into a model's step: models/net.h ps_net_builder,
 * models/moe_layer.h). Parameters are numbered after c's. Free it with
 * ps_builder_free(); it does not set c's root. */
PsBuilder *ps_builder_new_in (PsModule *m, PsComputation *c);
/* Accepts operands from other computations of the module too, for the body
 * of a loop that a scan builds (partitioner/builder/scan.h): the body reads
 * its caller's instructions as a closure and the scan makes them loop
 * invariants (and reports an instruction it cannot reach). */
void ps_builder_allow_closure (PsBuilder *b);
/* Frees the builder only; the computation stays in the module. */
void ps_builder_free (PsBuilder *b);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsBuilder, ps_builder_free)

PsComputation *ps_builder_computation (const PsBuilder *b);
PsModule *ps_builder_module (const PsBuilder *b);
/* The first error so far, or NULL (transfer none). */
const GError *ps_builder_error (const PsBuilder *b);
gboolean ps_builder_ok (const PsBuilder *b);
/* TRUE when the builder has no error; else FALSE with a copy of its first
 * error in *error (the builder keeps it): for a loop body's function,
 * which returns its builder's error to the scan. */
gboolean ps_builder_check (const PsBuilder *b, GError **error);
/* Names the next instruction created (copied). */
void ps_builder_name_next (PsBuilder *b, const char *name);
/* Gives every instruction created from now on the metadata
 * op_name="op_name" (copied; NULL: none), as a TensorFlow name scope does.
 * The partitioner and autodiff carry it to what they derive from those
 * instructions, so reports can say where time went ("moe/gating"). */
void ps_builder_set_op_name (PsBuilder *b, const char *op_name);

/* Sets the root, orders the module's computations callees-first and frees
 * the builder. Returns the computation, or NULL with the builder's first
 * error (the module then holds a partial computation; free the module). */
PsComputation *ps_builder_finish (PsBuilder *b, PsInstr *root, GError **error);
/* Same, and makes the computation the module's entry. */
PsComputation *ps_builder_finish_entry (PsBuilder *b, PsInstr *root, GError **error);

/* ---- leaves ---------------------------------------------------------------- */

/* Parameters are numbered in creation order. */
PsInstr *ps_build_parameter (PsBuilder *b, const char *name, PsElemType t, int rank,
                             const int64_t *dims);
PsInstr *ps_build_parameter_shape (PsBuilder *b, const char *name, const PsShape *shape);

/* Scalar constants of any numeric type (pred: value != 0; complex: real
 * part). Integer values out of the type's range are an error. */
PsInstr *ps_build_scalar (PsBuilder *b, PsElemType t, double value);
PsInstr *ps_build_scalar_int (PsBuilder *b, PsElemType t, int64_t value);
/* Array constants: values row-major, prod(dims) of them, converted to t
 * (bf16/f16 rounded to nearest even). */
PsInstr *ps_build_constant (PsBuilder *b, PsElemType t, int rank, const int64_t *dims,
                            const double *values);
PsInstr *ps_build_constant_int (PsBuilder *b, PsElemType t, int rank, const int64_t *dims,
                                const int64_t *values);
/* A constant of `shape` (array) with every element equal to value: a scalar
 * constant broadcast, as XLA programs write it. */
PsInstr *ps_build_full (PsBuilder *b, PsElemType t, int rank, const int64_t *dims,
                        double value);
PsInstr *ps_build_iota (PsBuilder *b, PsElemType t, int rank, const int64_t *dims,
                        int64_t iota_dimension);

/* ---- elementwise ------------------------------------------------------------ */

/* Any elementwise unary opcode (abs, negate, exponential, log, tanh,
 * logistic, rsqrt, sqrt, sine, cosine, not, erf, copy, ...). */
PsInstr *ps_build_unary (PsBuilder *b, PsOpcode op, PsInstr *x);
/* Any elementwise binary opcode (add, subtract, multiply, divide, maximum,
 * minimum, power, remainder, and, or, xor, shift-*, atan2). Operands must
 * have the same dims and type, except that a scalar operand is broadcast to
 * the other one's dims (an explicit broadcast instruction is added). */
PsInstr *ps_build_binary (PsBuilder *b, PsOpcode op, PsInstr *x, PsInstr *y);
PsInstr *ps_build_add (PsBuilder *b, PsInstr *x, PsInstr *y);
PsInstr *ps_build_sub (PsBuilder *b, PsInstr *x, PsInstr *y);
PsInstr *ps_build_mul (PsBuilder *b, PsInstr *x, PsInstr *y);
PsInstr *ps_build_div (PsBuilder *b, PsInstr *x, PsInstr *y);
PsInstr *ps_build_max (PsBuilder *b, PsInstr *x, PsInstr *y);
/* Result pred; scalars broadcast as in ps_build_binary. */
PsInstr *ps_build_compare (PsBuilder *b, PsCompareDir dir, PsInstr *x, PsInstr *y);
/* pred must be pred-typed with the dims of on_true (or a scalar pred). */
PsInstr *ps_build_select (PsBuilder *b, PsInstr *pred, PsInstr *on_true, PsInstr *on_false);
PsInstr *ps_build_clamp (PsBuilder *b, PsInstr *lo, PsInstr *x, PsInstr *hi);
PsInstr *ps_build_convert (PsBuilder *b, PsInstr *x, PsElemType t);

/* ---- shape ops --------------------------------------------------------------- */

/* Operand dim i lands on output dim dims[i] (x->shape->rank entries,
 * increasing); output has out_rank dims out_dims. */
PsInstr *ps_build_broadcast (PsBuilder *b, PsInstr *x, int out_rank, const int64_t *out_dims,
                             const int64_t *dims);
/* Broadcast a scalar to dims. */
PsInstr *ps_build_broadcast_scalar (PsBuilder *b, PsInstr *x, int rank, const int64_t *dims);
PsInstr *ps_build_reshape (PsBuilder *b, PsInstr *x, int rank, const int64_t *dims);
/* perm[i] = operand dim that becomes output dim i. */
PsInstr *ps_build_transpose (PsBuilder *b, PsInstr *x, const int64_t *perm);
/* strides NULL = all 1. */
PsInstr *ps_build_slice (PsBuilder *b, PsInstr *x, const int64_t *starts, const int64_t *limits,
                         const int64_t *strides);
/* One PsPadDim per dim of x; pad_value is a scalar of x's type. */
PsInstr *ps_build_pad (PsBuilder *b, PsInstr *x, PsInstr *pad_value, const PsPadDim *padding);
PsInstr *ps_build_concatenate (PsBuilder *b, int n, PsInstr *const *xs, int64_t dim);
/* dynamic-slice: one scalar integer start per dim of x (clamped at run time,
 * as in XLA), a static size per dim. Pipelined models shift their state
 * buffers with these. */
PsInstr *ps_build_dynamic_slice (PsBuilder *b, PsInstr *x, PsInstr *const *starts,
                                 const int64_t *sizes);
/* dynamic-update-slice: writes `update` into x at the scalar starts. */
PsInstr *ps_build_dynamic_update_slice (PsBuilder *b, PsInstr *x, PsInstr *update,
                                        PsInstr *const *starts);

/* ---- contractions -------------------------------------------------------- */

/* dot with XLA's dimension numbers; the result has batch dims, then lhs free
 * dims, then rhs free dims, element type of lhs. */
PsInstr *ps_build_dot (PsBuilder *b, PsInstr *lhs, PsInstr *rhs, const PsDotDims *dims);
/* Plain matrix product over lhs's last and rhs's first dim. */
PsInstr *ps_build_matmul (PsBuilder *b, PsInstr *lhs, PsInstr *rhs);
/* Two-operand einsum "bsm,mh->bsh" (rhs NULL: one operand, "bsh->bh"). Letters
 * in both inputs and the output are batch dims, in both inputs only are
 * contracted, in one input only are free (summed first when absent from
 * the output). A dot is followed by a transpose when the output order is not
 * batch, lhs free, rhs free. Repeated letters in one operand (diagonals)
 * and output letters that no input has are errors. */
PsInstr *ps_build_einsum (PsBuilder *b, const char *spec, PsInstr *lhs, PsInstr *rhs);

/* The window comes from the kernel's spatial dims; strides, pad_lo, pad_hi
 * and rhs_dilation have n_spatial entries (NULL = 1, 0, 0, 1).
 * dim_labels as in HLO ("b01f_01io->b01f"). */
PsInstr *ps_build_convolution (PsBuilder *b, PsInstr *lhs, PsInstr *rhs, const char *dim_labels,
                               const int64_t *strides, const int64_t *pad_lo,
                               const int64_t *pad_hi, const int64_t *rhs_dilation,
                               int64_t feature_group_count);

/* Same with a base (lhs) dilation, n_spatial entries (NULL = 1): a
 * transposed ("deconvolution") up-sampling conv dilates its input. */
PsInstr *ps_build_convolution_dilated (PsBuilder *b, PsInstr *lhs, PsInstr *rhs,
                                       const char *dim_labels, const int64_t *strides,
                                       const int64_t *pad_lo, const int64_t *pad_hi,
                                       const int64_t *lhs_dilation, const int64_t *rhs_dilation,
                                       int64_t feature_group_count);

/* ---- batch normalization ---------------------------------------------------- */

/* XLA's ops (semantics in doc/interpreter.md): training returns the tuple
 * (normalized x, batch mean, batch variance) over every dim but
 * feature_index; inference normalizes with the given statistics; grad
 * returns (grad x, grad scale, grad offset). Per-feature operands are rank
 * 1 of the feature dim's size, all of x's float type. */
PsInstr *ps_build_batch_norm_training (PsBuilder *b, PsInstr *x, PsInstr *scale, PsInstr *offset,
                                       float epsilon, int64_t feature_index);
PsInstr *ps_build_batch_norm_inference (PsBuilder *b, PsInstr *x, PsInstr *scale,
                                        PsInstr *offset, PsInstr *mean, PsInstr *variance,
                                        float epsilon, int64_t feature_index);
PsInstr *ps_build_batch_norm_grad (PsBuilder *b, PsInstr *x, PsInstr *scale, PsInstr *mean,
                                   PsInstr *variance, PsInstr *grad_output, float epsilon,
                                   int64_t feature_index);

/* ---- reductions and control flow --------------------------------------------- */

/* A scalar computation (x, y) -> op(x, y) of type t, for reduce/scatter;
 * built once per (op, type) and reused ("add_f32", "maximum_bf16", ...). */
PsComputation *ps_builder_reducer (PsBuilder *b, PsOpcode op, PsElemType t);
/* Reduces dims of x with `reducer` starting from the scalar init. */
PsInstr *ps_build_reduce (PsBuilder *b, PsInstr *x, PsInstr *init, int n_dims,
                          const int64_t *dims, PsComputation *reducer);
/* Sum / max over dims (init 0 / -inf, or the type's minimum for integers). */
PsInstr *ps_build_reduce_sum (PsBuilder *b, PsInstr *x, int n_dims, const int64_t *dims);
PsInstr *ps_build_reduce_max (PsBuilder *b, PsInstr *x, int n_dims, const int64_t *dims);

PsInstr *ps_build_gather (PsBuilder *b, PsInstr *operand, PsInstr *indices,
                          const PsGatherDims *dims);
PsInstr *ps_build_scatter (PsBuilder *b, PsInstr *operand, PsInstr *indices, PsInstr *updates,
                           const PsScatterDims *dims, PsComputation *update);

PsInstr *ps_build_tuple (PsBuilder *b, int n, PsInstr *const *xs);
PsInstr *ps_build_get_tuple_element (PsBuilder *b, PsInstr *t, int64_t index);
/* opt-barrier: x unchanged (any shape, tuples too), a value XLA may not
 * fuse or move across (a gradient accumulator kept as a buffer of its
 * own). */
PsInstr *ps_build_optimization_barrier (PsBuilder *b, PsInstr *x);
/* condition: state -> pred[]; body: state -> state. */
PsInstr *ps_build_while (PsBuilder *b, PsComputation *condition, PsComputation *body,
                         PsInstr *init);
PsInstr *ps_build_call (PsBuilder *b, PsComputation *callee, int n, PsInstr *const *args);

/* ---- sharding annotations -------------------------------------------------- */

/* custom-call "Sharding" of x carrying s: the annotation GSPMD users write
 * on intermediate tensors. */
PsInstr *ps_build_sharding_annotation (PsBuilder *b, PsInstr *x, const PsSharding *s);
/* The same, leaving the listed dims of x open ("unspecified_dims", XLA's
 * partial annotation): propagation may still shard them. */
PsInstr *ps_build_sharding_annotation_open (PsBuilder *b, PsInstr *x, const PsSharding *s,
                                            int n_open, const int64_t *open_dims);
/* The device mesh mesh_split uses (mesh_devices NULL = arange; copied). */
void ps_builder_set_mesh (PsBuilder *b, int mesh_rank, const int64_t *mesh_dims,
                          const int64_t *mesh_devices);
/* Attaches mesh_split(x, mesh, dims_mapping) as x's sharding (parameters,
 * weights) and returns x. dims_mapping has x's rank entries. */
PsInstr *ps_builder_mesh_split (PsBuilder *b, PsInstr *x, const int64_t *dims_mapping);
/* Same sharding, as a Sharding custom-call on x (intermediate tensors). */
PsInstr *ps_build_mesh_split (PsBuilder *b, PsInstr *x, const int64_t *dims_mapping);

/* ---- forms the layer library writes (models/net.h; builder_forms.c) ------- */

/* x itself when it already has type t, else ps_build_convert. */
PsInstr *ps_build_cast (PsBuilder *b, PsInstr *x, PsElemType t);
/* ps_build_full with like's type and dims (a scalar when like is one). */
PsInstr *ps_build_full_like (PsBuilder *b, const PsShape *like, double value);
/* x itself when it already has to's dims, else ps_build_reshape to them
 * (x's type). */
PsInstr *ps_build_reshape_to (PsBuilder *b, PsInstr *x, const PsShape *to);
/* ps_build_broadcast to to's dims (x's type). */
PsInstr *ps_build_broadcast_to (PsBuilder *b, PsInstr *x, const PsShape *to, const int64_t *dims);
/* Reduces the listed dims of x with the binary op from the scalar init
 * (x's type), with the reducer autodiff's gradients use ("ad_<op>_<type>",
 * partitioner/builder/folder_private.h), so a model's sum and its gradient
 * share one computation; the dims are kept in the order given. x itself
 * when n_dims is 0. */
PsInstr *ps_build_reduce_op (PsBuilder *b, PsInstr *x, PsOpcode op, double init, int n_dims,
                             const int64_t *dims);
/* ps_build_reduce_op with add from 0. */
PsInstr *ps_build_sum (PsBuilder *b, PsInstr *x, int n_dims, const int64_t *dims);

G_END_DECLS

#endif

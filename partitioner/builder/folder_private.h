/* Private to partitioner/builder/ as a whole (every .c of this folder may
 * include it, nothing outside may): autodiff's unchecked emission helpers,
 * which the gradient rules (autodiff*.c), the optimizer updates
 * (optimizer.c), scans (scan.c), vmap (vmap.c) and the builder's forms
 * (builder_forms.c, for the shared "ad_<op>_<type>" reducers) write
 * instructions with. They check nothing: each appends one instruction to c
 * whose shape follows from its operands and returns it (transfer none); a
 * bad operand is a programmer error. Code outside this folder (models,
 * tests) builds through the checked builder (builder.h) instead, so that a
 * user's mistake becomes a GError and not a malformed program. Prefix
 * `ad_` (autodiff's), doc/architecture.md "Private headers". */
#ifndef PS_PARTITIONER_BUILDER_FOLDER_PRIVATE_H
#define PS_PARTITIONER_BUILDER_FOLDER_PRIVATE_H

#include <glib.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

PsInstr *ad_scalar (PsComputation *c, PsElemType t, double value);
PsInstr *ad_full (PsComputation *c, const PsShape *like, double value);
PsInstr *ad_binary (PsComputation *c, PsOpcode op, PsInstr *a, PsInstr *b);
PsInstr *ad_unary (PsComputation *c, PsOpcode op, PsInstr *a);
PsInstr *ad_convert (PsComputation *c, PsInstr *a, PsElemType t);
/* Sum over the listed dims (result keeps the other dims in order). */
PsInstr *ad_reduce_sum (PsComputation *c, PsInstr *a, int n_dims, const int64_t *dims);
/* Broadcast `a` into `shape` with operand dim i landing on dims[i]. */
PsInstr *ad_broadcast (PsComputation *c, PsInstr *a, const PsShape *shape,
                          int n_dims, const int64_t *dims);
/* Reduce over the listed dims with a binary `op` (add, maximum, ...) from
 * `init`; the result keeps the other dims in order. */
PsInstr *ad_reduce (PsComputation *c, PsInstr *a, PsOpcode op, double init, int n_dims,
                       const int64_t *dims);
/* dynamic-slice of a at the scalar integer starts (one per dim of a). */
PsInstr *ad_dynamic_slice (PsComputation *c, PsInstr *a, PsInstr *const *starts,
                              const int64_t *sizes);
/* dynamic-update-slice: update written into a at the scalar starts. */
PsInstr *ad_dynamic_update_slice (PsComputation *c, PsInstr *a, PsInstr *update,
                                     PsInstr *const *starts);
PsInstr *ad_tuple (PsComputation *c, int n, PsInstr *const *elems);
/* The scalar reducer computation "ad_<op>_<type>" of m, made on first use
 * ahead of the computations that call it. */
PsComputation *ad_reducer (PsModule *m, PsOpcode op, PsElemType t);
/* Transpose (perm[i] = operand dim of output dim i; a no-op returns a) and
 * reshape to `to`'s dims (a when equal). */
PsInstr *ad_transpose (PsComputation *c, PsInstr *a, const int64_t *perm);
PsInstr *ad_reshape (PsComputation *c, PsInstr *a, const PsShape *to);
/* A convolution with the given dimension numbers (the spatial arrays are
 * copied), window (dims->n_spatial entries) and group counts (<= 1: none);
 * the shape is inferred and must fit (programmer error otherwise). */
PsInstr *ad_convolution (PsComputation *c, PsInstr *lhs, PsInstr *rhs, const PsConvDims *dims,
                            const PsWindowDim *window, int64_t feature_group_count,
                            int64_t batch_group_count);
PsInstr *ad_get_tuple_element (PsComputation *c, PsInstr *tuple, int64_t index);
/* batch-norm-training (3 operands), -inference or -grad (5), shape
 * inferred (must fit). */
PsInstr *ad_batch_norm (PsComputation *c, PsOpcode op, PsInstr *const *operands,
                           float epsilon, int64_t feature_index);

G_END_DECLS

#endif

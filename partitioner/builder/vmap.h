/* Vectorization of instructions over a new leading dimension (JAX's vmap).
 *
 * GSPMD pipelines a stack of identical stages by running the stage function
 * once, vectorized over a leading stage dimension [K, ...], and sharding
 * that dimension (the GSPMD paper, section 3.3). ps_vmap copies a function
 * written for one stage (instructions of a source computation, usually a
 * scratch one a layer function was built in) into another computation with
 * every value that depends on a batched input given a leading dim of size n:
 *
 *   elementwise ops, compare, select, convert: unbatched operands are
 *     broadcast to the batched shape;
 *   broadcast, reshape, transpose, reduce, slice, pad, concatenate,
 *     dynamic-slice and dynamic-update-slice (unbatched start indices):
 *     their dims shift by one;
 *   dot: with both operands batched the new dim is one more batch dim;
 *     with one, it is a free dim of that operand, moved to the front by a
 *     transpose when needed.
 * Values that depend on no batched input (constants, iota, unbatched
 * inputs) are copied unbatched; an operand of another computation than src
 * (a value the function reads from its caller) is used as it is, unbatched. Other opcodes on a batched path are an
 * error (PS_ERROR_UNSUPPORTED) naming the instruction.
 *
 * Sharding annotations: a batched value's annotation (an instruction's
 * sharding, or a Sharding custom-call) is passed through `batch_sharding`,
 * which returns the annotation of the batched value (transfer full) or NULL
 * to drop it; unbatched copies keep theirs.
 *
 * Ownership: everything is borrowed; new instructions belong to dst.
 */
#ifndef PS_PARTITIONER_VMAP_H
#define PS_PARTITIONER_VMAP_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/ir/ir.h"
#include "partitioner/ir/sharding.h"

G_BEGIN_DECLS

/* The annotation of a batched value of `rank` dims (the new leading one
 * included) whose unbatched value had annotation s; transfer full, or NULL
 * for none. */
typedef PsSharding *(*PsVmapShardingFn) (const PsSharding *s, int rank, gpointer user);

typedef struct {
  int64_t n;                        /* size of the new leading dim */
  PsVmapShardingFn batch_sharding;  /* NULL: batched values lose annotations */
  gpointer user;
} PsVmapOptions;

/* Copies into dst what `roots` (instructions of src) need, vectorized.
 * `inputs` maps src instructions (usually src's parameters) to dst values;
 * those in `batched` (a set of src instructions) are dst values with the
 * leading dim n, the others are used as they are. out[i] receives root i
 * with the leading dim n (broadcast when it did not depend on a batched
 * input). FALSE with an error for an unsupported op. */
gboolean ps_vmap (PsComputation *dst, const PsComputation *src, int n_roots,
                  PsInstr *const *roots, GHashTable *inputs, GHashTable *batched,
                  const PsVmapOptions *opts, PsInstr **out, GError **error);

G_END_DECLS

#endif

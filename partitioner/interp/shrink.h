/* Scaled-down copies of sharded modules, for verifying programs that are too
 * large for the reference interpreter.
 *
 * Many partitioner test programs use shapes of 10^8 to 10^11 elements that
 * no plain-loop interpreter can run. What the partitioner does with a
 * dimension, though, depends on its size only through a few facts: how it
 * divides among the shards (the remainder decides padding and masking) and,
 * for some ops, its exact value (a slice's bounds, a convolution's window,
 * a reshape's factorisation, a constant's literal). ps_shrink_module makes a
 * copy of a module in which every dimension whose size the program does not
 * otherwise depend on is made smaller, keeping its remainder modulo every
 * shard count it is split by.
 *
 * How: every dimension of every array value (tuple leaves included) is a
 * node; the ops' semantics join nodes that must have equal sizes
 * (elementwise operands, a dot's batch and contracting dims, broadcast and
 * transpose dim maps, reshapes' one-to-one dims, loop-carried values,
 * computation parameters with their callers' operands, ...). A class is
 * "pinned" when any member's size is written into an attribute or literal
 * the program depends on (constants, slice/pad/concatenate/dynamic-slice
 * bounds other than the full dim, non-trivial window dims, the minor
 * factors of a reshape's merged or split dims (the merged dim follows the
 * major factor times their product), gather/scatter windows that are
 * neither full nor 1,
 * custom-calls, FFT, collectives, ...);
 * pinned classes keep their size. Every other class of size S is given the
 * size S' = r + k L, where L is the least common multiple of the shard
 * counts of the class's members (from their shardings), r = S mod L and k
 * the smallest positive count with S' >= min(S, min_size). Full-dim slice
 * limits, dynamic-slice sizes and gather slice sizes follow their dim. The copy is then checked
 * with ps_module_validate (shape inference of every instruction).
 *
 * The copy is a different program. A caller that verifies it in place of
 * the original should partition it too and check with
 * ps_shrink_same_program that its SPMD program has the same instructions
 * (opcodes, collectives' groups and dimensions) as the original's, so that
 * what was run exercises the same partitioning decisions.
 *
 * Ownership: arguments are borrowed; the returned module is new (transfer
 * full).
 */
#ifndef PS_PARTITIONER_SHRINK_H
#define PS_PARTITIONER_SHRINK_H

#include <glib.h>
#include <stdint.h>

#include "common/error.h"
#include "partitioner/ir/ir.h"
#include "partitioner/spmd/spmd.h"
#include "partitioner/interp/verify.h"

G_BEGIN_DECLS

typedef struct {
  /* Smallest size a shrunk dim is given (when the original is larger);
   * 0 = 8. */
  int64_t min_size;
  /* When > 1, every class also keeps its remainder modulo this count (the
   * number of devices), so that decisions such as "can this dim be split
   * over all devices" come out the same; 0 = only the shard counts. */
  int64_t num_devices;
} PsShrinkOptions;

typedef struct {
  int64_t n_classes;         /* classes of dims that must stay equal */
  int64_t n_shrunk;          /* classes given a smaller size */
  int64_t n_pinned;          /* classes of size > min_size kept as they are */
  /* Elements of the largest value (tuple leaves counted separately). */
  int64_t max_elements_before, max_elements_after;
} PsShrinkReport;

void ps_shrink_options_init (PsShrinkOptions *opts);

/* A scaled-down copy of `m` (which should carry shardings, as after
 * propagation). Errors: PS_ERROR_UNSUPPORTED when no dim can be made
 * smaller or the scaled copy does not validate (the message says why). */
PsModule *ps_shrink_module (const PsModule *m, const PsShrinkOptions *opts,
                            PsShrinkReport *report, GError **error);

/* TRUE when two partitioned programs have the same computations with the
 * same instructions in the same order: opcodes, operand positions,
 * collectives' replica groups, source-target pairs and dimensions, and
 * rank of every value (sizes may differ). Otherwise FALSE and *why (if
 * non-NULL) names the first difference (transfer full). */
gboolean ps_shrink_same_program (const PsModule *a, const PsModule *b, char **why);

/* Verifies a partitioning through a scaled copy: shrinks `sharded`,
 * partitions the copy for `num_devices` with `spmd_opts` (NULL = defaults;
 * pass the choices recorded when `partitioned` was made, with
 * replay_choices set), checks with ps_shrink_same_program that the copy's
 * SPMD program matches the original's (both without CSE, which merges more
 * in the copy), then runs ps_verify_spmd on the copy. With shrink_opts NULL
 * it first tries a copy that keeps remainders modulo num_devices too, then,
 * if that copy partitions differently or is still too large, one that
 * keeps them modulo the shard counts only, and if that is still too large,
 * the same with min_size 2.
 * Returns FALSE with an error when a step cannot be done (cannot shrink,
 * different program: PS_ERROR_UNSUPPORTED; or the partitioner's or the
 * interpreter's error); TRUE with result filled otherwise. `report` may be
 * NULL. */
gboolean ps_shrink_verify (const PsModule *sharded, const PsModule *partitioned,
                           int64_t num_devices, const PsSpmdOptions *spmd_opts,
                           const PsShrinkOptions *shrink_opts,
                           const PsVerifyOptions *verify_opts, PsVerifyResult *result,
                           PsShrinkReport *report, GError **error);

G_END_DECLS

#endif

/* Sharding propagation: completes the sharding of every instruction of a
 * module from the few a user wrote, as XLA's ShardingPropagation pass does
 * (GSPMD paper, section 3.5).
 *
 * Shardings written in the input (and `Sharding` custom-calls) are never
 * overwritten. Shardings then flow forward (operand to user) and backward
 * (user to operand) in repeated passes of rising aggressiveness until nothing
 * changes; a more specific (more tiled) sharding wins over a less specific
 * one and compatible shardings from several operands are merged (a dot with
 * a batch-sharded LHS and a feature-sharded RHS gets an output sharded on
 * both). See doc/propagation.md for the rules of each opcode.
 *
 * Use: parse or build a module, then call ps_propagate (m, NULL, &error);
 * afterwards every instruction has a sharding (unless the options keep the
 * entry parameters or the root free). The module is modified in place:
 * `Sharding` custom-calls become copies, ShardBarrier custom-calls and
 * CSE-prevention shardings are removed, exactly as XLA does.
 *
 * Ownership: the module is borrowed and modified; options are borrowed.
 */
#ifndef PS_PARTITIONER_PROPAGATE_H
#define PS_PARTITIONER_PROPAGATE_H

#include <glib.h>

#include "common/error.h"
#include "partitioner/ir/ir.h"
#include "partitioner/ir/sharding.h"

G_BEGIN_DECLS

typedef struct {
  /* SPMD mode: tiled shardings are propagated through every op (XLA's
   * is_spmd); FALSE mimics the older MPMD mode, where some ops (e.g.
   * ops that would need a halo) are more conservative. */
  gboolean is_spmd;
  /* Attach the op names of where a sharding came from to the sharding's
   * metadata. */
  gboolean propagate_metadata;
  /* Whether the entry root may get (or refine) its sharding from
   * propagation: n == 0 means "no"; one entry applies to the whole root;
   * otherwise one bool per leaf of the root's tuple shape. Borrowed. */
  int n_to_output;
  const gboolean *to_output;
  /* Same for the entry parameters: one entry for all, or one per parameter. */
  int n_to_parameters;
  const gboolean *to_parameters;
  /* Only remove the shardings added to prevent CSE, do nothing else. */
  gboolean cse_prevention_only;
  /* Only computations of these execution threads are processed
   * (NULL-terminated; NULL = every thread). An asynchronous call into a
   * thread that is not processed passes manual shardings through whole. */
  const char *const *execution_threads;
  /* Names the module's source in error messages ("FILE:LINE:COL: ...");
   * NULL = the module's source_name, or its name for a built one. */
  const char *source_name;
  /* Passes over the module before giving up (0 = default 100). Each pass is
   * O(instructions); the cap guards against cycles that never settle. */
  int max_iterations;
} PsPropagateOptions;

/* Fills `opts` with podsim's own defaults: is_spmd TRUE, propagation to the
 * output and to the parameters allowed, no metadata. (XLA's defaults differ:
 * propagation to output/parameters is off there; the conformance runner sets
 * every field from the test case.) */
void ps_propagate_options_init (PsPropagateOptions *opts);

/* What a run did. */
typedef struct {
  gboolean changed;   /* any sharding or instruction changed */
  int iterations;     /* passes run */
} PsPropagateStats;

/* Runs propagation over every computation reachable from the entry. NULL
 * opts = ps_propagate_options_init defaults. On a user error (conflicting
 * device placement, a sharding that does not fit its shape, ...) returns
 * FALSE with a PS_ERROR whose message names the instruction (and its source
 * position when known); the module may then be partially annotated. */
gboolean ps_propagate (PsModule *m, const PsPropagateOptions *opts, GError **error);
/* Same, also reporting what happened (stats may be NULL). */
gboolean ps_propagate_full (PsModule *m, const PsPropagateOptions *opts,
                            PsPropagateStats *stats, GError **error);

G_END_DECLS

#endif

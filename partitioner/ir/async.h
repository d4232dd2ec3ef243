/* From a dump XLA has scheduled to a module podsim can simulate.
 *
 * A module XLA has compiled (an `after_optimizations` dump) writes its
 * collectives as asynchronous pairs (all-gather-start/-done,
 * all-reduce-start/-done, collective-permute-start/-done, copy-start/-done,
 * async-start/-update/-done around a wrapped instruction), coalesces several
 * collectives into one variadic instruction (XLA's AllReduceCombiner,
 * AllGatherCombiner and ReduceScatterCombiner), and orders work with
 * add-dependency. The reader keeps all of that as written, so printing is a
 * fixed point; the stages after it (interpreter, propagation, partitioner,
 * scheduler, lowering) work on synchronous collectives of one operand each,
 * and podsim's own scheduler (doc/partitioner.md) decides again which
 * collectives overlap with which compute, the way XLA's latency-hiding
 * scheduler decided it for the dump.
 *
 * ps_async_make_synchronous rewrites a module in place into that form:
 *   - each -start/-done pair becomes the synchronous instruction (attributes,
 *     reducer, sharding of the -done, name of the -done); async-start of a
 *     computation whose root reads only its parameters becomes that root
 *     instruction, otherwise a call of the computation;
 *   - each variadic all-gather, reduce-scatter and all-reduce becomes one
 *     collective per operand and a tuple of them. This is a choice: XLA
 *     combines them to pay one collective's fixed latency instead of N, so
 *     the split step is slower by (N - 1) such latencies (doc/hlo.md);
 *   - add-dependency(x, token) becomes x.
 * ragged-dot, rng-get-and-update-state and get/set-dimension-size are kept
 * as they are: the cost model costs them (partitioner/analysis/cost.c), the
 * interpreter refuses them at the instruction.
 *
 * ps_async_module_is_partitioned tells whether a module is already the
 * output of an SPMD partitioner (see its comment).
 */
#ifndef PS_PARTITIONER_ASYNC_H
#define PS_PARTITIONER_ASYNC_H

#include <glib.h>

#include "common/error.h"
#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

typedef struct {
  int pairs;          /* asynchronous pairs made synchronous */
  int split;          /* variadic collectives split */
  int dependencies;   /* add-dependency removed */
} PsAsyncStats;

/* In place; stats may be NULL. FALSE with an error (PS_ERROR_UNSUPPORTED,
 * at the instruction) when the module has an instruction podsim cannot
 * simulate, or a -done whose operand is not its -start (PS_ERROR_INVALID);
 * the module may then be half rewritten and is to be freed. */
gboolean ps_async_make_synchronous (PsModule *m, PsAsyncStats *stats, GError **error);

/* Whether `m` is already a per-device SPMD program: its entry is named
 * like XLA's partitioner names it (`..._spmd`), or it has no sharding
 * annotation and reads partition-id or holds a collective over partitions.
 * Such a module is lowered as it is, never partitioned again. */
gboolean ps_async_module_is_partitioned (const PsModule *m);

G_END_DECLS

#endif

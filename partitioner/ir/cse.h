/* Common-subexpression and dead-code elimination on the graph IR.
 *
 * The SPMD partitioner reshards an operand wherever an instruction needs it,
 * so one value used by several einsums (the layer-normed activation feeding
 * Q, K and V) is gathered several times. XLA runs CSE after partitioning and
 * the program it executes has one gather; podsim does the same before
 * lowering so the trace counts what would run.
 *
 * Two instructions are the same when they have the same opcode, shape,
 * operands (after earlier merges) and attributes; collectives compare
 * without their channel ids. Instructions with side effects or hidden state
 * (parameters, rng, infeed/outfeed, send/recv, custom-calls, while,
 * conditional, call) are never merged. Instructions that end up unused and
 * have no side effects are then removed.
 */
#ifndef PS_PARTITIONER_CSE_H
#define PS_PARTITIONER_CSE_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

typedef struct {
  int64_t merged;    /* instructions replaced by an identical earlier one */
  int64_t removed;   /* instructions removed as dead (merged ones included) */
} PsCseStats;

/* Runs CSE then DCE on every computation of m. stats may be NULL. */
void ps_cse_module (PsModule *m, PsCseStats *stats);

G_END_DECLS

#endif

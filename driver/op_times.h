/* Where a step's compute time goes by op_name: the metadata a model gives
 * its instructions (ps_builder_set_op_name: "moe/gating", ...), which
 * autodiff and the partitioner carry to everything they derive.
 *
 * A lowered trace names each compute event after its fusion root; the
 * table maps those names back to op_names in the partitioned module (build
 * it before the module is freed), and ps_op_times_compute() costs every
 * compute event with the compute model of the replay (sim/compute.h), so
 * the times are the replay's own, per core (every core runs the same
 * event list).
 *
 * Ownership: the table is transfer full (g_hash_table_unref); it owns its
 * strings.
 */
#ifndef PS_DRIVER_OP_TIMES_H
#define PS_DRIVER_OP_TIMES_H

#include <glib.h>

#include "partitioner/ir/ir.h"
#include "topology/hardware.h"
#include "traces/trace.h"

/* instruction name -> op_name, for every instruction of m's computations
 * that has an op_name. */
GHashTable *ps_op_names_table (const PsModule *m);

/* Compute seconds per core of the events whose op_name starts with one of
 * the NULL-terminated `prefixes` (an event in a loop counts once per run). */
double ps_op_times_compute (const PsTrace *trace, const PsHardware *hw, GHashTable *names,
                            const char *const *prefixes);

#endif

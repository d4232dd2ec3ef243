/* Memory analysis: per-device peak live HBM bytes of a program run in its
 * sequential order, and which values hold the most at the peak. The
 * partitioner's `--memory` report and lowering's memory watermarks use it.
 *
 * Model (sequential order = the entry computation's program order, fixed up
 * so that operands come first):
 *   - parameters and constants are live for the whole program;
 *   - every other instruction defines a buffer of its result's bytes when it
 *     runs, except tuple, get-tuple-element, bitcast and reshape (aliases of
 *     their operands: they keep those alive instead), instructions that a
 *     cost analysis has fused into a consumer (never materialised), and
 *     a dynamic-update-slice that runs after every other reader of its
 *     operand: it updates the operand's buffer in place (not a parameter
 *     or constant, except a while body's loop state);
 *   - a while updates its state in place. As XLA's copy insertion does, an
 *     element the body writes gets a buffer of its own at the while (a
 *     copy) when its initial value is a parameter, a constant, has no
 *     buffer (a broadcast) or has another user; an element the body only
 *     reads, or one nothing else needs, stays the initial value's buffer;
 *   - a buffer dies after its last use; the program's outputs (the root and
 *     whatever it aliases) live to the end;
 *   - donation (the module's input_output_alias, XLA's
 *     HloInputOutputAliasConfig): an output aliased to a whole parameter is
 *     written over that parameter's buffer and takes none of its own, when
 *     the parameter is not read after the output is defined (else XLA
 *     copies it first: no saving);
 *   - reuse in place (XLA's HloDataflowAnalysis::CanShareOperandBufferWith
 *     User): a fusion made only of elementwise ops writes into the buffer
 *     of an operand of the same size that dies there; dynamic-update-slice
 *     and scatter into their updated operand's;
 *   - while executing an instruction, its operands and its result are live
 *     together; while, call and conditional add the peak temporaries of
 *     their callees (body + condition, the worst branch).
 * The peak is the largest sum of live buffers over the order, which is
 * what XLA's heap simulator reports without fragmentation
 * (NoFragmentationStatsHeap); a real best-fit heap can need a little more.
 *
 * Ownership: the report borrows the module (instruction pointers) and owns
 * its arrays; free it with ps_memory_report_free().
 */
#ifndef PS_PARTITIONER_MEMORY_H
#define PS_PARTITIONER_MEMORY_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/analysis/cost.h"
#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

typedef struct {
  const PsInstr *instr;    /* the value's defining instruction */
  uint64_t bytes;
} PsMemoryHolder;

typedef struct {
  uint64_t peak_bytes;           /* per device */
  uint64_t parameter_bytes;      /* parameters (and constants), live throughout */
  uint64_t output_bytes;         /* the root's buffers, not counting donated ones */
  uint64_t donated_bytes;        /* outputs written over donated parameters */
  uint64_t temp_peak_bytes;      /* peak minus parameters */
  const PsInstr *peak_instr;     /* entry instruction running at the peak */
  GArray *holders;               /* PsMemoryHolder, live at the peak, largest first */
  /* Sequential order and, for each step, live bytes after it ran. */
  GPtrArray *order;              /* const PsInstr*, borrowed */
  GArray *live_after_bytes;      /* uint64_t per step */
} PsMemoryReport;

/* `cost` (may be NULL) supplies the fusion decisions; without it nothing is
 * fused. transfer full. */
PsMemoryReport *ps_memory_analyze (const PsModule *m, const PsCostAnalysis *cost,
                                   GError **error);

/* The same over given orders (`orders`: PsComputation* -> GPtrArray of
 * its instructions, each once, operands first; borrowed; a computation not
 * in it runs in post order) with asynchronous collectives: `done_before`
 * maps a collective that starts where it stands in its computation's order
 * to the instruction of that computation before which it completes (NULL
 * value: at the computation's end); its result is live from its start, its
 * operands until it completes. orders and done_before may be NULL.
 * transfer full. */
PsMemoryReport *ps_memory_analyze_schedule (const PsModule *m, const PsCostAnalysis *cost,
                                            GHashTable *orders, GHashTable *done_before,
                                            GError **error);
/* The peak of computation c alone over the same orders (its parameters
 * and the temporaries of what it calls included): what a scheduler
 * compares between orders of c. */
uint64_t ps_memory_computation_peak (const PsModule *m, const PsCostAnalysis *cost,
                                     const PsComputation *c, GHashTable *orders,
                                     GHashTable *done_before);
void ps_memory_report_free (PsMemoryReport *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsMemoryReport, ps_memory_report_free)

/* Live bytes after entry instruction `instr` ran (0 if not in the entry). */
uint64_t ps_memory_live_after (const PsMemoryReport *r, const PsInstr *instr);

/* "per-device peak 1.50 GiB at dot.3 (parameters ..., temporaries ...)"
 * then up to `max_holders` lines "  NAME  SHAPE  BYTES". transfer full. */
char *ps_memory_report_to_string (const PsMemoryReport *r, int max_holders);

G_END_DECLS

#endif

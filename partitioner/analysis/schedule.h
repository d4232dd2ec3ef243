/* Scheduling: the order in which one device runs the SPMD program's entry
 * computation and the loop bodies it runs, and which collectives run asynchronously (started early,
 * completed late) so that the compute in between hides them. Peak HBM
 * (memory.h) and exposed communication (the replay of the lowered trace)
 * both come from this one schedule.
 *
 * The order is memory-aware as XLA's DefaultMemoryScheduler makes it
 * (hlo_memory_scheduler.cc): the better, by peak memory, of XLA's list
 * scheduler (at each step the ready instruction that frees the most bytes
 * minus the bytes it defines, ties to the one with more users, scalars
 * first) and the post order. A fusion (cost.h) is one unit. With the list
 * scheduler each weight's optimizer update runs as soon as its gradient
 * exists (it frees the gradient and, donated, writes over the weight), and
 * a rematerialised forward op, which only allocates, waits until it is
 * needed.
 *
 * Latency hiding, as XLA's LatencyHidingScheduler does it
 * (latency_hiding_scheduler.h, SchedulerConfig): an asynchronous collective
 * starts right after its operands exist and completes right before its
 * first user; at most one collective of each kind is in flight (the
 * *_overlap_limit defaults of 1), so a collective completes no later than
 * where the next one of its kind stands; and only while the HBM budget
 * allows: if the schedule's peak exceeds the budget, the largest
 * asynchronous collective in flight at the peak runs synchronously instead,
 * until it fits.
 *
 * Policies (`--schedule`):
 *   PS_SCHEDULE_XLA (default): collective-permutes asynchronous, every other
 *     collective synchronous: what XLA overlapped on TPU when the GSPMD
 *     paper was written (doc/partitioner.md, "Scheduling");
 *   PS_SCHEDULE_XLA_ALL: every collective kind asynchronous under the same
 *     rules (XLA's latency-hiding scheduler since 2022);
 *   PS_SCHEDULE_SYNC: every collective synchronous;
 *   PS_SCHEDULE_EAGER: every collective asynchronous as early and as late as
 *     data allows, no overlap limit, no budget (podsim's former
 *     --async-collectives).
 *
 * Ownership: the schedule borrows the module's instructions (keep the
 * module alive and unchanged); free it with ps_schedule_free().
 */
#ifndef PS_PARTITIONER_SCHEDULE_H
#define PS_PARTITIONER_SCHEDULE_H

#include <glib.h>
#include "common/params.h"
#include <stdint.h>

#include "partitioner/analysis/cost.h"
#include "partitioner/analysis/memory.h"
#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

typedef enum {
  PS_SCHEDULE_XLA = 0,
  PS_SCHEDULE_XLA_ALL,
  PS_SCHEDULE_SYNC,
  PS_SCHEDULE_EAGER,
  PS_SCHEDULE_POLICY_COUNT
} PsSchedulePolicy;

/* "xla", "xla-all", "sync", "eager". transfer none. */
const char *ps_schedule_policy_name (PsSchedulePolicy p);
/* A PS_ERROR_OPTION error naming `option` and the known names otherwise. */
gboolean ps_schedule_policy_parse (const char *name, const char *option, PsSchedulePolicy *out,
                                   GError **error);

/* The options this module reads ([options] schedule and
 * async_collectives, the eager policy's older name; common/params.h). */
extern const PsParamSpec ps_schedule_param_policy;
extern const PsParamSpec ps_schedule_param_async;

typedef struct {
  PsSchedulePolicy policy;
  uint64_t hbm_budget_bytes;   /* per device; 0: unlimited */
} PsScheduleOptions;

typedef struct {
  PsSchedulePolicy policy;
  GPtrArray *order;            /* entry instructions, borrowed, operands first */
  /* Every scheduled computation (the entry, loop bodies, called
   * computations): PsComputation* -> GPtrArray of its instructions. */
  GHashTable *orders;
  /* Asynchronous collectives: instruction -> the instruction of its
   * computation before which it completes (NULL: at the computation's
   * end: a loop body's collectives complete in their iteration). */
  GHashTable *done_before;
  int n_async;                 /* asynchronous collectives */
  int n_reverted;              /* made synchronous to stay within the budget */
  int memory_scheduler;        /* the order chosen: 0 list, 1 DFS, 2 post order */
  uint64_t peak_bytes;         /* memory.h's peak over this schedule */
  PsMemoryReport *memory;       /* memory.h's analysis of this schedule, owned */
} PsSchedule;

/* Schedules the entry computation and what it runs: while bodies, called
 * computations and branches, each with its own memory-aware order and
 * latency hiding (callees first, so that a caller's choice of order sees
 * their temporaries); loop conditions and reducers keep their post order.
 * `cost` gives the fusions. Errors: the memory analysis's. transfer full. */
PsSchedule *ps_schedule_module (const PsModule *m, const PsCostAnalysis *cost,
                                const PsScheduleOptions *opts, GError **error);
/* The order of computation c, or NULL when c is not scheduled (post
 * order). transfer none. */
GPtrArray *ps_schedule_order_of (const PsSchedule *s, const PsComputation *c);
void ps_schedule_free (PsSchedule *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsSchedule, ps_schedule_free)

G_END_DECLS

#endif

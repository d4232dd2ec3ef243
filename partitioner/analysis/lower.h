/* Lowering: an SPMD program (the partitioner's output, or any module whose
 * shapes are already per device) becomes a step trace (traces/trace.h) that
 * the simulator replays.
 *
 * What it does:
 *   - runs the cost analysis (cost.h) and emits one compute event per
 *     fusion (elementwise ops fused into their producers, see the fusion
 *     rule there): its kind (matmul, conv, reduce, data-movement, other,
 *     elementwise: the "biggest" member decides), FLOPs, HBM bytes, vector
 *     ops, and for dot / convolution the MXU dims (batch, M, K, N) with a
 *     convolution written as its implicit matmul;
 *   - emits a collective event for every all-reduce, all-gather,
 *     reduce-scatter, all-to-all and collective-permute, with replica groups
 *     compressed to mesh axes when they are exactly "the devices that differ
 *     along these mesh axes" (else an explicit list), and permute pairs
 *     compressed to a shift along one mesh axis when they are one;
 *   - writes a while loop as a loop of the trace (trip count from cost.h,
 *     or the default option; one iteration: condition, then body), or
 *     unrolled with unroll_loops; inlines calls, takes the most expensive
 *     branch of a conditional;
 *   - with a schedule (schedule.h), lowers the entry computation in the
 *     schedule's order, starts its asynchronous collectives where they stand
 *     and completes each where the schedule says (at the latest just before
 *     the first event that reads its result), and takes the memory figures
 *     from that schedule;
 *   - without one, with async_collectives, starts every collective where it
 *     stands and puts its done just before the first event that reads its
 *     result, so that the compute in between overlaps;
 *   - with memory_events, writes the memory analysis's live bytes after each
 *     entry instruction that produced events; the header's peak_bytes is the
 *     memory analysis's peak.
 *
 * Ownership: the module is borrowed; the trace is returned transfer full.
 */
#ifndef PS_PARTITIONER_LOWER_H
#define PS_PARTITIONER_LOWER_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/analysis/schedule.h"
#include "partitioner/ir/ir.h"
#include "traces/trace.h"

G_BEGIN_DECLS

typedef struct {
  const char *program;          /* NULL: the module's name */
  int64_t n_devices;            /* 0: the module's num_partitions (1 if unset) */
  /* The logical mesh written to the trace and used to compress groups,
   * as a model's build describes it (models/family.h PsModelInfo.mesh);
   * borrowed. NULL or rank 0: a 1-D mesh [n_devices] in arange order. */
  const PsTraceMesh *mesh;
  const char *slice;            /* optional hint for the simulator */
  int64_t default_trip_count;   /* while loops with no known count; 0 = error */
  PsFusionMode fusion;          /* the cost analysis's fusion rules (default 0: XLA's);
                                 * give the schedule's when there is one */
  PsTilingMode tiling;          /* buffer sizes without a schedule (default 0: best) */
  gboolean memory_events;       /* default TRUE */
  gboolean async_collectives;   /* default FALSE; ignored with a schedule */
  const PsSchedule *schedule;   /* the entry's order and async collectives; borrowed; NULL:
                                 * post order */
  uint64_t max_events;          /* refuse to write more events (default 10^7) */
  gboolean unroll_loops;        /* repeat a while's events trip-count times
                                 * instead of writing a loop (format version 1) */
} PsLowerOptions;

void ps_lower_options_init (PsLowerOptions *opts);

/* Errors: PS_ERROR_OPTION (mesh does not hold the devices),
 * PS_ERROR_UNSUPPORTED (unknown trip count, groups that do not cover the
 * devices, too many events). transfer full. */
PsTrace *ps_lower_module (const PsModule *spmd, const PsLowerOptions *opts,
                          GError **error);

/* Replica groups as the trace writes them: `all`, mesh axes if some axes
 * (in some order) give exactly these groups, else an explicit list.
 * `ids` holds n_groups * group_size device ids. The result's arrays are
 * g_malloc'ed (ps_trace_groups_clear). */
void ps_lower_compress_groups (const PsTraceHeader *header, int n_groups, int group_size,
                               const int64_t *ids, PsTraceGroups *out);

/* Permute pairs as a shift along one mesh axis if they are one, else a
 * list. `pairs` holds n_pairs (source, target) ids. */
void ps_lower_compress_pairs (const PsTraceHeader *header, int n_pairs,
                              const int64_t *pairs, PsTracePairs *out);

G_END_DECLS

#endif

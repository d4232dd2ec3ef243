/* What a replay found: step time, where each core's time went, MXU
 * utilization, peak HBM against capacity, and the load of every ICI link,
 * with the printers `podsim simulate` uses (text, --json, --links CSV).
 * The JSON keys and CSV columns are documented in doc/simulator.md.
 *
 * Definitions (per core, all in seconds of the simulated step):
 *  - compute: the merged compute executions;
 *  - communication: time its collectives were in flight (from the last
 *    member's arrival to completion), overlapped or not;
 *  - exposed communication: time it waited at a collective's completion
 *    (for the data or for peers) instead of computing;
 *  - idle: step time - compute - exposed (it finished before the slowest).
 *
 * Ownership: PsReplayResult is transfer full (ps_replay_result_free); it
 * borrows the PsPlatform it was computed on, which must outlive it.
 */
#ifndef PS_SIM_RESULTS_H
#define PS_SIM_RESULTS_H

#include <glib.h>
#include <json-glib/json-glib.h>

#include "topology/hardware.h"
#include "topology/platform.h"
#include "traces/timeline.h"

G_BEGIN_DECLS

/* One distinct collective (kind, bytes, groups) of the trace. */
typedef struct {
  char *name;               /* its first occurrence's name, owned */
  const char *kind;         /* "all-reduce", ...; static */
  double bytes;             /* per device */
  int n_groups, group_size;
  guint64 count;            /* occurrences in the step */
  double total_s;           /* summed over occurrences: last member's arrival
                             * to completion, slowest group */
} PsCollectiveStat;

/* One run of a loop of the trace outside every other loop: when each
 * iteration ended (the last device's clock, seconds from the start of the
 * step; iterations the replay did not simulate are placed by the period of
 * the one they repeat). Reports use it to say where a pipeline's bubble
 * sits. */
typedef struct {
  char *name;               /* the trace's loop name, owned */
  guint64 trips;
  double start_s;           /* when the first device entered the loop */
  double *iteration_end_s;  /* trips entries, owned */
} PsLoopStat;

typedef struct {
  const PsPlatform *platform;
  char *program;
  gboolean cache;
  double step_time_s;
  int n_devices;
  int *core_of_device;      /* owned copy */
  double *compute_s;        /* per device */
  double *comm_s;
  double *exposed_s;
  double *idle_s;
  double flops_per_device;
  double peak_flops_per_core;
  double mxu_utilization;   /* flops / (peak x step time) */
  double peak_hbm_bytes;
  double hbm_capacity_bytes;
  guint64 n_compute_events, n_compute_segments, n_collectives, n_unique_collectives;
  /* With the cache: collective occurrences that overlapped another one on
   * a shared link (simulated together), and the replay passes it took. */
  guint64 n_overlapping_collectives;
  int contention_passes;
  /* Loop iterations one step runs, and how many of them the replay
   * simulated (the others repeated a simulated one exactly). */
  guint64 n_loop_iterations, n_iterations_simulated;
  double *link_bytes;       /* per platform link id */
  PsTimeline *timeline;     /* chosen cores' spans, or NULL */
  GArray *collectives;      /* PsCollectiveStat, one per distinct collective */
  GArray *loops;            /* PsLoopStat of the outermost loops, in order */
} PsReplayResult;

void ps_replay_result_free (PsReplayResult *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsReplayResult, ps_replay_result_free)

/* The n most expensive distinct collectives by total time, most expensive
 * first (transfer container: the stats are borrowed from r). */
GPtrArray *ps_replay_result_top_collectives (const PsReplayResult *r, int n);
/* The same as indented text lines under a heading. transfer full. */
char *ps_replay_result_top_collectives_text (const PsReplayResult *r, int n);

/* Averages over devices. */
void ps_replay_result_means (const PsReplayResult *r, double *compute_s, double *comm_s,
                             double *exposed_s, double *idle_s);

/* One JSON object (keys: doc/simulator.md). transfer full. */
char *ps_replay_result_to_json (const PsReplayResult *r);
/* The slice's members of a --json object (slice, chips_x, chips_y, wrap_x,
 * wrap_y), as simulate and bench collective write them. */
void ps_replay_json_slice (JsonBuilder *b, const PsSlice *s);
/* A human summary. transfer full. */
char *ps_replay_result_to_text (const PsReplayResult *r);
/* CSV, one line per present link: link,kind,src_x,src_y,dst_x,dst_y,
 * bytes,busy_s,utilization. transfer full. */
char *ps_replay_result_links_csv (const PsReplayResult *r, gsize *len_out);

G_END_DECLS

#endif

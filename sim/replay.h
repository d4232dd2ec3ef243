/* Replays a step trace on a SimGrid model of a slice.
 *
 * One SimGrid actor per device (TensorCore) runs the trace's SPMD event
 * list: consecutive compute events are merged into one execution (times from
 * sim/compute.h); a collective synchronises the members of the device's
 * group; an asynchronous collective's start ... done lets the compute in
 * between overlap it.
 *
 * With the cache (the default), each distinct collective (kind, bytes,
 * groups) is simulated once on an idle network before the step, all its
 * groups together (sim/collectives.h), and the replay reuses the per-group
 * durations, each device keeping its own clock. Collectives that are in
 * flight at the same time and share a link are simulated together, as they
 * overlapped, and the step replayed again until those overlaps are
 * consistent (replay.c, "contention"). Without the cache (`--no-cache`)
 * every collective's transfers run on the shared network at the time its
 * last member arrives. Both give the same step time, with and without
 * overlapping collectives (tests/check_replay.c).
 *
 * SimGrid allows one engine per process, so ps_replay_run() runs once per
 * process.
 *
 * Ownership: options and the PsPlatform are borrowed (transfer none); the
 * result is transfer full and borrows the platform.
 */
#ifndef PS_SIM_REPLAY_H
#define PS_SIM_REPLAY_H

#include <glib.h>

#include "sim/collectives.h"
#include "sim/results.h"
#include "topology/hardware.h"
#include "topology/platform.h"
#include "traces/trace.h"

G_BEGIN_DECLS

typedef struct {
  const PsHardware *hw;
  const PsPlatform *platform;
  gboolean no_cache;
  /* Devices whose spans go into result->timeline; none when n = 0. */
  const int *timeline_devices;
  int n_timeline_devices;
  PsCollAlgorithm collectives;  /* default (0): PS_COLL_TORUS2D */
  /* Where a long replay is, for a progress display (NULL: none): called
   * with a short text ("replay pass 3, 12 clusters simulated") as the
   * replay goes on; the text is only valid during the call. */
  void (*progress) (const char *text, gpointer data);
  gpointer progress_data;
} PsReplayOptions;

/* Replays a trace file, streaming it. Errors: the reader's (FILE:LINE:COL),
 * a mesh that does not fit the slice, a peak HBM above the capacity
 * (PS_ERROR_NO_FIT naming both). transfer full. */
PsReplayResult *ps_replay_file (const char *path, const PsReplayOptions *opt, GError **error);

/* Same for an in-memory trace (validated first). transfer full. */
PsReplayResult *ps_replay_trace (const PsTrace *trace, const PsReplayOptions *opt,
                                 GError **error);

G_END_DECLS

#endif

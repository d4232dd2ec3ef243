/* Timeline export: the simulator's result as a Chrome trace-event JSON file
 * that chrome://tracing and Perfetto (ui.perfetto.dev) open.
 *
 * The simulator creates one timeline, names the processes (one per chip) and
 * threads (one per TensorCore, plus e.g. one per ICI link if it likes), adds a
 * complete event ("ph":"X") for every span it simulated and counter samples
 * ("ph":"C") for quantities over time (live HBM bytes, link load), then writes
 * the file atomically. Times are given in seconds and written in
 * microseconds, as the format requires. Output is deterministic: events are
 * written sorted by (start, pid, tid, insertion order), numbers with a fixed
 * format, so equal inputs give byte-identical files.
 *
 * Ownership: the timeline copies every string and args object it is given
 * (transfer none); ps_timeline_free() releases everything.
 */
#ifndef PS_TRACES_TIMELINE_H
#define PS_TRACES_TIMELINE_H

#include <glib.h>

#include "common/error.h"

G_BEGIN_DECLS

typedef struct PsTimeline PsTimeline;

/* transfer full. */
PsTimeline *ps_timeline_new (void);
void ps_timeline_free (PsTimeline *tl);

/* Metadata events: names shown for a process (chip) and a thread (core). */
void ps_timeline_set_process_name (PsTimeline *tl, int pid, const char *name);
void ps_timeline_set_thread_name (PsTimeline *tl, int pid, int tid, const char *name);

/* A complete event: a span [start_s, start_s + dur_s) on (pid, tid).
 * `category` may be NULL. `args` are "key", "value" string pairs ending with
 * NULL (values written as JSON strings), or NULL for none. */
void ps_timeline_add_complete (PsTimeline *tl, int pid, int tid, const char *name,
                               const char *category, double start_s, double dur_s,
                               const char *const *args);

/* Same, with numeric args: n_args keys and values. */
void ps_timeline_add_complete_num (PsTimeline *tl, int pid, int tid, const char *name,
                                   const char *category, double start_s, double dur_s,
                                   guint n_args, const char *const *keys,
                                   const double *values);

/* A counter sample: series `series` of counter `name` in process pid takes
 * `value` from time_s on. */
void ps_timeline_add_counter (PsTimeline *tl, int pid, const char *name,
                              const char *series, double time_s, double value);

guint64 ps_timeline_n_events (const PsTimeline *tl);

/* The JSON text: {"traceEvents":[...],"displayTimeUnit":"ms"}. transfer full. */
char *ps_timeline_to_json (const PsTimeline *tl, gsize *len_out);

/* Writes the JSON atomically (no partial file on failure); "-" is stdout. */
gboolean ps_timeline_write (const PsTimeline *tl, const char *path, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsTimeline, ps_timeline_free)

G_END_DECLS

#endif

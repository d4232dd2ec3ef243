/* What `podsim run --pipeline-stages` reports about a pipelined step
 * (models/pipeline.h): the bubble and where it sits, memory per stage, and
 * how far each collective-permute's transfers go on the torus.
 *
 * The bubble: in iteration i of a pipeline loop (forward or backward),
 * stage k works on a microbatch only when k <= i < k + M; in the other
 * K - 1 iterations it computes on padding. GSPMD runs every stage every
 * iteration, so the bubble is time spent on no microbatch; the report sums
 * the durations of those iterations per stage (from the replay's loop
 * iteration times) and compares with the formula (K - 1) / (M + K - 1).
 *
 * Ownership: the report is transfer full (ps_pipelining_report_free); the
 * pipeline result is borrowed.
 */
#ifndef PS_CLI_PIPELINING_H
#define PS_CLI_PIPELINING_H

#include <glib.h>
#include <json-glib/json-glib.h>

#include "driver/driver.h"

typedef struct {
  char *pairs;             /* the trace's form, "shift:0:1" */
  guint64 runs;            /* in one step */
  guint64 n_pairs;
  int min_hops, max_hops;  /* ICI links on a transfer's route (0: same chip) */
  double mean_hops;
} PsPermuteHops;

typedef struct {
  int stages, microbatches, iterations;
  double formula;          /* (K - 1) / (M + K - 1) */
  double loops_s;          /* time in the pipeline loops (forward + backward) */
  double *bubble_s;        /* per stage: time on no microbatch */
  double idle_loops;       /* largest stage bubble / loops_s */
  double idle_step;        /* largest stage bubble / step time */
  double peak_hbm_bytes;   /* per core; every stage runs the same program */
  char *where;             /* the bubble's intervals per stage, text lines */
  GArray *permutes;        /* PsPermuteHops */
} PsPipeliningReport;

/* The report of a run pipelined over `stages` stages with `microbatches`
 * microbatches; NULL when stages <= 1 or the replay has no pipeline loops. */
PsPipeliningReport *ps_pipelining_report (int stages, int microbatches, const PsDriverResult *r);
void ps_pipelining_report_free (PsPipeliningReport *rep);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsPipeliningReport, ps_pipelining_report_free)

/* Lines for `podsim run`'s text output. transfer full. */
char *ps_pipelining_report_text (const PsPipeliningReport *rep);
/* Members of `podsim run --json`'s object, under "pipeline". */
void ps_pipelining_report_json (const PsPipeliningReport *rep, JsonBuilder *b);

#endif

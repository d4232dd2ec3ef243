/* What `podsim tables` shares between its tables (cli/cmd_tables*.c):
 * each row is a child `podsim run --json` (SimGrid allows one engine per
 * process, and the child is exactly what a user can rerun). */
#ifndef PS_CLI_TABLES_H
#define PS_CLI_TABLES_H

#include <glib.h>
#include <json-glib/json-glib.h>

#include "driver/study.h"   /* ps_study_json_*: reading a run's JSON */

/* Options of `podsim run` that tables passes on to every row. */
typedef struct {
  const char *hw, *collectives, *schedule;
  const char *buffer_tiling;   /* --buffer-tiling (NULL: each row's own, `best` by default) */
  gboolean progress;   /* a progress line on stderr (ps_progress_on) */
} PsTablesOptions;

/* Runs `podsim run ARGS --json -q` (args NULL-terminated) and returns the
 * parsed output (transfer full). A failed run: NULL with its message, code
 * PS_ERROR_NO_FIT when the model does not fit in HBM. */
JsonParser *ps_tables_run (const char *const *args, const PsTablesOptions *o, GError **error);

/* The peak a "does not fit" message of a run names ("... per-core peak
 * 70.12 GiB exceeds ..."), in bytes; 0 when absent. */
double ps_tables_peak_of_message (const char *msg);

/* The tables of cli/cmd_tables_pipeline.c and cli/cmd_tables_conv.c;
 * exit statuses. */
int ps_tables_pipeline (gboolean csv, gboolean markdown, const PsTablesOptions *o);
int ps_tables_bubble (gboolean csv, gboolean markdown, const PsTablesOptions *o);
int ps_tables_spatial (gboolean csv, gboolean markdown, const PsTablesOptions *o);
int ps_tables_speech (gboolean csv, gboolean markdown, const PsTablesOptions *o);

#endif

/* Studies of many configurations (`podsim sweep`, `podsim search`): each
 * configuration is the study's base model file plus a few settings, run as
 * its own `podsim run --config BASE --set KEY=VALUE ... --json` through the
 * process pool (driver/pool.h), and read back as one row: inputs, step time,
 * throughput, peak HBM, whether it fits, the error if any.
 *
 * Rows are written as CSV (a header line, then one line per row) or JSONL
 * (one object per line); doc/sweeps.md lists the columns.
 *
 * Ownership: PsStudy and PsStudyRow are transfer full from their
 * constructors; the PsParams given to ps_study_new is copied.
 */
#ifndef PS_DRIVER_STUDY_H
#define PS_DRIVER_STUDY_H

#include <glib.h>

#include "driver/pool.h"
#include "models/family.h"

typedef enum { PS_STUDY_CSV, PS_STUDY_JSONL } PsStudyFormat;

typedef struct {
  guint id;                  /* the configuration's index */
  gboolean ran;              /* the child printed a result */
  gboolean fits;
  double step_time_s, throughput_per_s, mxu_utilization, model_flops_utilization;
  double peak_hbm_bytes, compute_s, communication_s, exposed_communication_s, idle_s;
  double wall_s;             /* the child's wall time */
  char *unit;                /* "tokens" */
  char *model;               /* the run's name */
  char *error;               /* NULL when it ran and fits */
} PsStudyRow;

void ps_study_row_free (PsStudyRow *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsStudyRow, ps_study_row_free)

typedef struct PsStudy PsStudy;

/* A study of `base` over the varied keys (the columns of its rows, in
 * order). transfer full. */
PsStudy *ps_study_new (const PsParams *base, const char *const *keys);
void ps_study_free (PsStudy *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsStudy, ps_study_free)

const PsParams *ps_study_base (const PsStudy *s);
guint ps_study_n_keys (const PsStudy *s);
const char *ps_study_key (const PsStudy *s, guint k);

/* Adds a configuration: one value per key, checked against the family's
 * schema (`where` names them in errors). Returns its id. */
gboolean ps_study_add (PsStudy *s, const char *const *values, const char *where, guint *id,
                       GError **error);
/* Adds every combination of values[k] (char*: the values of key k), the
 * first key outermost, without making them: the study keeps the value
 * lists and ps_study_value computes a configuration's values from its id,
 * so memory does not grow with the number of combinations. Each value is
 * checked on its own, errors naming where[k]; more than `max` combinations
 * (or than a guint holds) is a PS_ERROR_OPTION error. At most once, before
 * any ps_study_add. */
gboolean ps_study_add_grid (PsStudy *s, GPtrArray *const *values, const char *const *where, guint64 max,
                            GError **error);
guint ps_study_n_configs (const PsStudy *s);
const char *ps_study_value (const PsStudy *s, guint id, guint k);
/* The base with configuration id's values set. transfer full. */
PsParams *ps_study_params (const PsStudy *s, guint id);

/* Writes the base model file into `dir` (once) as NAME.ini, so each run is
 * named "NAME" or "NAME modified (keys)" (or the published run it equals),
 * and returns its path; children read it. `name` is the base's run name
 * (ps_model_options_name); characters that do not belong in a file name
 * become '_'. transfer none. */
const char *ps_study_write_base (PsStudy *s, const char *dir, const char *name, GError **error);

/* The child command of configuration id: podsim run --config BASE --set
 * KEY=VALUE ... --json -q, plus `extra` (NULL-terminated, may be NULL).
 * transfer full. */
char **ps_study_child_argv (const PsStudy *s, guint id, const char *const *extra);

/* podsim's own executable, for child commands. transfer none. */
const char *ps_study_exe (void);

/* A row from a child's result (its JSON, or its error line). transfer full. */
PsStudyRow *ps_study_row_from_result (const PsPoolResult *r, guint id);

/* CSV header and lines, JSONL lines; each ends with '\n'. transfer full. */
char *ps_study_header (const PsStudy *s, PsStudyFormat f);
char *ps_study_format_row (const PsStudy *s, const PsStudyRow *r, PsStudyFormat f);
/* Reads rows written by ps_study_format_row back (for resume and merge):
 * the id (an integer, nothing else) and whether its inputs equal
 * configuration id's; JSON nested deeper than PS_MAX_NESTING is refused.
 * no_result (may be NULL) is set to why the row is no result of its
 * configuration (an interrupted child's error, or neither figures nor an
 * error), else NULL; transfer full. */
gboolean ps_study_parse_row (const PsStudy *s, const char *line, PsStudyFormat f, guint *id,
                             char **no_result, GError **error);

/* Appends a CSV field: a comma first unless `out` is empty or ends a
 * line; quoted when it holds a comma, quote or newline; NULL: empty. */
void ps_study_csv_field (GString *out, const char *v);

/* A progress line on stderr ("\r... 12/100, 3.1/min, ETA 29m 10s") when it
 * is a terminal. */
void ps_study_progress (const char *what, guint done, guint total, double elapsed_s);

#endif

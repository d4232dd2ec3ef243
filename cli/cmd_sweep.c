/* podsim sweep: run a grid of configurations (a base model and the values
 * of a few keys), each in its own `podsim run` process, --jobs at a time,
 * and stream one CSV or JSONL row per configuration; resume an interrupted
 * sweep from its output file; write a Slurm job array for the grid and
 * merge its parts. doc/sweeps.md. */
#include "config.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "driver/pool.h"
#include "driver/study.h"
#include "common/checked.h"
#include "common/error.h"
#include "common/output.h"

typedef struct {
  char **vary;
  char *grid, *output, *format, *slurm, *merge;
  gint jobs, tasks, task, cpus_per_task;
  gboolean resume, quiet;
} SweepOptions;

static const char *const grid_sections[] = { "vary", "sweep", NULL };

typedef struct {
  char *key;
  GPtrArray *values;         /* char* */
  char *where;
} Axis;

static void
axis_free (gpointer p)
{
  Axis *a = p;
  g_free (a->key);
  g_ptr_array_free (a->values, TRUE);
  g_free (a->where);
  g_free (a);
}

/* "v1, v2, v3" as trimmed values; empty items are errors. */
static gboolean
split_values (const char *text, const char *where, GPtrArray *out, GError **error)
{
  g_auto (GStrv) parts = g_strsplit (text, ",", -1);
  for (int i = 0; parts[i]; i++)
    {
      g_strstrip (parts[i]);
      if (!*parts[i])
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: an empty value in '%s'", where, text);
          return FALSE;
        }
      g_ptr_array_add (out, g_strdup (parts[i]));
    }
  return TRUE;
}

static gboolean
add_axis (GPtrArray *axes, const PsParams *base, const char *key, const char *values, const char *where,
          GError **error)
{
  const PsParamSpec *s = ps_model_family_find_spec (ps_params_family (base), key);
  if (!s)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: '%s' is not a parameter of model family %s",
                   where, key, ps_params_family (base)->name);
      return FALSE;
    }
  for (guint i = 0; i < axes->len; i++)
    if (strcmp (((Axis *) axes->pdata[i])->key, s->key) == 0)
      {
        g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: %s is varied twice", where, s->key);
        return FALSE;
      }
  Axis *a = g_new0 (Axis, 1);
  a->key = g_strdup (s->key);
  a->values = g_ptr_array_new_with_free_func (g_free);
  a->where = g_strdup (where);
  g_ptr_array_add (axes, a);
  if (!split_values (values, where, a->values, error))
    return FALSE;
  if (a->values->len == 0)
    {
      /* g_strsplit of "" gives no items: a sweep of nothing would exit 0. */
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: no values (expected %s=V1,V2,...)", where, s->key);
      return FALSE;
    }
  return TRUE;
}

/* The axes of the grid file's [vary] section, then of --vary; the grid
 * file's [sweep] tasks and name. */
static GPtrArray *
read_axes (const SweepOptions *o, const PsParams *base, int *tasks_in_file, char **name_in_file,
           GError **error)
{
  g_autoptr (GPtrArray) axes = g_ptr_array_new_with_free_func (axis_free);
  if (o->grid)
    {
      g_autofree char *text = ps_ini_load_text (o->grid, error);
      if (!text)
        return NULL;
      gboolean found = FALSE;
      g_autoptr (GPtrArray) vary = ps_ini_read_section (o->grid, text, grid_sections, "vary", &found, error);
      if (!vary)
        return NULL;
      for (guint i = 0; i < vary->len; i++)
        {
          PsIniEntry *e = vary->pdata[i];
          if (!add_axis (axes, base, e->key, e->value, e->key_where, error))
            {
              /* File positions are PS_ERROR_PARSE like every file error. */
              (*error)->code = PS_ERROR_PARSE;
              return NULL;
            }
        }
      g_autoptr (GPtrArray) sweep = ps_ini_read_section (o->grid, text, grid_sections, "sweep", NULL, error);
      for (guint i = 0; sweep && i < sweep->len; i++)
        {
          PsIniEntry *e = sweep->pdata[i];
          guint64 v;
          if (strcmp (e->key, "name") == 0 && *e->value)
            {
              g_free (*name_in_file);
              *name_in_file = g_strdup (e->value);
              continue;
            }
          if (strcmp (e->key, "tasks") != 0
              || !g_ascii_string_to_unsigned (e->value, 10, 1, 1000000, &v, NULL))
            {
              g_set_error (error, PS_ERROR, PS_ERROR_PARSE, "%s: [sweep] has two keys: tasks (1 .. 1000000) "
                           "and name", e->key_where);
              return NULL;
            }
          *tasks_in_file = (int) v;
        }
    }
  for (int i = 0; o->vary && o->vary[i]; i++)
    {
      const char *eq = strchr (o->vary[i], '=');
      g_autofree char *where = g_strdup_printf ("--vary %s", o->vary[i]);
      if (!eq)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: expected KEY=V1,V2,...", where);
          return NULL;
        }
      g_autofree char *key = g_strndup (o->vary[i], (gsize) (eq - o->vary[i]));
      if (!add_axis (axes, base, key, eq + 1, where, error))
        return NULL;
    }
  if (axes->len == 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "nothing to vary: give --vary KEY=V1,V2,... or "
                   "--grid FILE with a [vary] section");
      return NULL;
    }
  return g_steal_pointer (&axes);
}

/* Every combination, the first axis outermost. */
static PsStudy *
make_study (const PsParams *base, GPtrArray *axes, GError **error)
{
  g_autofree const char **keys = g_new0 (const char *, axes->len + 1);
  g_autofree const char **where = g_new0 (const char *, axes->len + 1);
  g_autofree GPtrArray **values = g_new0 (GPtrArray *, axes->len + 1);
  for (guint i = 0; i < axes->len; i++)
    {
      Axis *a = axes->pdata[i];
      keys[i] = a->key;
      where[i] = a->where;
      values[i] = a->values;
    }
  g_autoptr (PsStudy) s = ps_study_new (base, keys);
  if (!ps_study_add_grid (s, values, where, 10000000, error))
    {
      g_prefix_error (error, "%s", (*error)->code == PS_ERROR_OPTION
                                       && g_str_has_prefix ((*error)->message, "more than") ? "the grid has " : "");
      return NULL;
    }
  return g_steal_pointer (&s);
}

/* ---- running -------------------------------------------------------------------- */

typedef struct {
  PsStudy *study;
  PsStudyFormat format;
  FILE *out;
  const char *out_name;      /* -o, or "-" */
  guint first_id;            /* pool job i is configuration first_id + i */
  gboolean progress;
  guint n_errors;
  GError *write_error;       /* the first failed write: no row after it is written */
} Run;

static void
on_done (const PsPoolResult *r, gpointer user)
{
  Run *run = user;
  /* A run the sweep itself stopped has no row: --resume runs it again. */
  if (r->interrupted || run->write_error)
    return;
  g_autoptr (PsStudyRow) row = ps_study_row_from_result (r, run->first_id + r->index);
  run->n_errors += row->error != NULL;
  g_autofree char *line = ps_study_format_row (run->study, row, run->format);
  /* One write per row, flushed: an interrupted sweep leaves whole rows (and
   * at most one partial last line, which --resume drops). */
  ps_output_stream_put (run->out, run->out_name, line, &run->write_error);
}

/* A child's argv when it starts: the grid is never expanded. */
static char **
child_argv (guint index, gpointer user)
{
  Run *run = user;
  return ps_study_child_argv (run->study, run->first_id + index, NULL);
}

static void
on_progress (guint done, guint total, double elapsed_s, gpointer user)
{
  Run *run = user;
  if (run->progress)
    ps_study_progress ("podsim sweep", done, total, elapsed_s);
}

/* --resume: the ids already in `path` (whole rows, in order from `first`);
 * with `cut`, a partial last line is cut off the file, and so is every row
 * from the first one that is no result (an interrupted child's: it runs
 * again). *next is the next id to run. With `copy` (--merge), the rows
 * kept, the very bytes just checked, are put to it: the file is read once,
 * so a part that changes while it is merged cannot differ from what was
 * checked. */
static gboolean
resume_from (PsStudy *s, PsStudyFormat f, const char *path, guint first, guint last, gboolean cut,
             PsOutputFile *copy, guint *next, GError **error)
{
  *next = first;
  g_autofree char *text = NULL;
  gsize len = 0;
  GError *local = NULL;
  if (!g_file_test (path, G_FILE_TEST_EXISTS))
    return TRUE;
  if (!ps_read_text_file (path, PS_MAX_TEXT_BYTES, &text, &len, &local))
    {
      g_set_error (error, PS_ERROR, local->code, "--resume: %s", local->message);
      g_error_free (local);
      return FALSE;
    }
  gsize whole = len;
  while (whole > 0 && text[whole - 1] != '\n')
    whole--;
  text[whole] = '\0';
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
  int l = 0;
  gsize keep = 0;            /* bytes of the header and the rows kept */
  gsize header_len = 0;
  g_autofree char *header = ps_study_header (s, f);
  if (*header)
    {
      if (!lines[0] || !*lines[0])
        return TRUE;
      header[strlen (header) - 1] = '\0';
      if (strcmp (lines[0], header) != 0)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--resume: %s has other columns than this sweep "
                       "(%s)", path, header);
          return FALSE;
        }
      l = 1;
      keep = header_len = strlen (lines[0]) + 1;
    }
  for (; lines[l] && *lines[l]; l++)
    {
      guint id;
      g_autofree char *no_result = NULL;
      if (!ps_study_parse_row (s, lines[l], f, &id, &no_result, &local))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--resume: %s:%d is not row %u of this sweep: %s", path,
                       l + 1, *next, local->message);
          g_clear_error (&local);
          return FALSE;
        }
      if (id != *next || id >= last)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--resume: %s:%d is not row %u of this sweep", path,
                       l + 1, *next);
          return FALSE;
        }
      if (no_result)
        {
          if (cut)
            fprintf (stderr, "podsim: --resume: %s:%d: row %u is no result (%s): it and the rows after it "
                     "run again\n", path, l + 1, id, no_result);
          break;
        }
      keep += strlen (lines[l]) + 1;
      (*next)++;
    }
  if (cut && keep < len && truncate (path, (off_t) keep) != 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_IO, "--resume: cannot cut %s after its last whole row: %s",
                   path, g_strerror (errno));
      return FALSE;
    }
  if (copy && keep > header_len)
    return ps_output_file_put (copy, text + header_len, keep - header_len, error);
  return TRUE;
}

static PsStudyFormat
format_of (const SweepOptions *o, const char *path)
{
  if (o->format)
    return strcmp (o->format, "jsonl") == 0 ? PS_STUDY_JSONL : PS_STUDY_CSV;
  return path && g_str_has_suffix (path, ".jsonl") ? PS_STUDY_JSONL : PS_STUDY_CSV;
}

/* Runs configurations [first, last) into o->output (or stdout); runs are
 * named after `name`. */
static int
run_sweep (const SweepOptions *o, PsStudy *s, const char *name, guint first, guint last)
{
  GError *error = NULL;
  PsStudyFormat f = format_of (o, o->output);
  guint next = first;
  gboolean resuming = FALSE;
  const char *out_name = o->output ? o->output : "-";
  GStatBuf st;
  if (o->output && !o->resume && g_stat (o->output, &st) == 0 && S_ISREG (st.st_mode))
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "-o %s exists: --resume continues it, or remove it",
                   o->output);
      return ps_cli_fail (error);
    }
  /* Opened (and locked) before --resume reads it, so a second sweep on the
   * same file is refused before it reads, cuts or appends anything. */
  FILE *out = ps_output_stream_open (out_name, o->resume, &error);
  if (!out)
    {
      g_prefix_error (&error, "-o: ");
      return ps_cli_fail (error);
    }
  if (o->output && o->resume)
    {
      if (!resume_from (s, f, o->output, first, last, TRUE, NULL, &next, &error))
        {
          ps_output_stream_close (out, out_name, NULL);
          return ps_cli_fail (error);
        }
      resuming = g_stat (o->output, &st) == 0 && S_ISREG (st.st_mode) && st.st_size > 0;
    }
  g_autofree char *tmp = g_dir_make_tmp ("podsim-sweep-XXXXXX", &error);
  const char *base_path = tmp ? ps_study_write_base (s, tmp, name, &error) : NULL;
  if (!base_path)
    {
      ps_output_stream_close (out, out_name, NULL);
      return ps_cli_fail (error);
    }
  if (!resuming)
    {
      g_autofree char *header = ps_study_header (s, f);
      if (*header && !ps_output_stream_put (out, out_name, header, &error))
        {
          ps_output_stream_close (out, out_name, NULL);
          g_unlink (base_path);
          g_rmdir (tmp);
          return ps_cli_fail (error);
        }
    }
  Run run = { s, f, out, out_name, next, ps_progress_on (o->quiet), 0, NULL };
  g_autoptr (PsPool) pool = ps_pool_new (o->jobs, on_done, on_progress, &run);
  ps_pool_add_n (pool, last > next ? last - next : 0, child_argv, &run);
  gint64 t0 = g_get_monotonic_time ();
  gboolean ok = ps_pool_run (pool, &error);
  GError *close_error = NULL;
  gboolean closed = ps_output_stream_close (out, out_name, &close_error);
  g_unlink (base_path);
  g_rmdir (tmp);
  if (run.write_error || !closed)
    {
      /* Rows lost on a full disk are a failure, not a 0-byte success. */
      if (run.progress)
        fputs ("\r\033[K", stderr);
      g_clear_error (&error);
      if (run.write_error)
        g_clear_error (&close_error);
      return ps_cli_fail (run.write_error ? run.write_error : close_error);
    }
  if (!ok && ps_pool_interrupted (pool))
    {
      /* Rows are the first N configurations (the pool hands back a prefix):
       * say how many, off the progress line. */
      int sig = ps_pool_interrupted (pool);
      if (run.progress)
        fputs ("\r\033[K", stderr);
      fprintf (stderr, "podsim: sweep interrupted by signal %d (%s): %u of %u configurations have a row%s%s%s\n",
               sig, g_strsignal (sig), next - first + ps_pool_n_done (pool), last - first,
               o->output ? " in " : "", o->output ? o->output : "", o->output ? "; --resume continues" : "");
      g_error_free (error);
      return 128 + sig;
    }
  if (!ok)
    {
      if (run.progress)
        fputs ("\r\033[K", stderr);
      return ps_cli_fail (error);
    }
  if (!o->quiet)
    {
      g_autofree char *t = ps_format_duration ((double) (g_get_monotonic_time () - t0) / 1e6);
      fprintf (stderr, "podsim sweep: %u configurations run in %s (%u with an error)", last - next, t,
               run.n_errors);
      if (next > first)
        fprintf (stderr, ", resumed after %u", next - first);
      fputc ('\n', stderr);
    }
  return 0;
}

/* ---- Slurm ---------------------------------------------------------------------- */

/* The sweep as one file: the base model, its [vary] axes, [sweep] tasks
 * and the name its runs are called by. */
static char *
grid_text (PsStudy *s, GPtrArray *axes, int tasks, const char *name)
{
  g_autofree char *model = ps_params_print (ps_study_base (s),
                                            "A podsim sweep: the base model, then the values each [vary] "
                                            "key takes\n(every combination); podsim sweep --grid FILE "
                                            "runs it");
  GString *out = g_string_new (model);
  g_string_append (out, "\n[vary]\n");
  for (guint i = 0; i < axes->len; i++)
    {
      Axis *a = axes->pdata[i];
      g_autofree char **v = (char **) g_new0 (char *, a->values->len + 1);
      for (guint k = 0; k < a->values->len; k++)
        v[k] = a->values->pdata[k];
      g_autofree char *joined = g_strjoinv (", ", v);
      g_string_append_printf (out, "%s = %s\n", a->key, joined);
    }
  g_string_append_printf (out, "\n[sweep]\n# Slurm array tasks (podsim sweep --slurm DIR)\ntasks = %d\n"
                          "# The runs are named after this\nname = %s\n", tasks, name);
  return g_string_free (out, FALSE);
}

static int
write_slurm (const SweepOptions *o, PsStudy *s, GPtrArray *axes, const char *name)
{
  GError *error = NULL;
  guint n = ps_study_n_configs (s);
  int tasks = o->tasks > 0 ? o->tasks : (int) MIN (n, 100u);
  if ((guint) tasks > n)
    tasks = (int) n;
  g_autofree char *dir = g_canonicalize_filename (o->slurm, NULL);
  g_autofree char *logs = g_build_filename (dir, "logs", NULL);
  if (g_mkdir_with_parents (logs, 0755) != 0)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_IO, "--slurm %s: %s", o->slurm, g_strerror (errno));
      return ps_cli_fail (error);
    }
  g_autofree char *grid = g_build_filename (dir, "sweep.ini", NULL);
  g_autofree char *text = grid_text (s, axes, tasks, name);
  if (!ps_write_file_atomic (grid, text, strlen (text), &error))
    return ps_cli_fail (error);
  const char *ext = format_of (o, NULL) == PS_STUDY_JSONL ? "jsonl" : "csv";
  g_autofree char *qdir = g_shell_quote (dir);
  g_autofree char *qexe = g_shell_quote (ps_study_exe ());
  g_autofree char *script = g_strdup_printf (
    "#!/bin/sh\n"
    "# A podsim sweep of %u configurations as a Slurm job array of %d tasks,\n"
    "# written by podsim sweep --slurm (doc/sweeps.md). Each task runs its share\n"
    "# of %s/sweep.ini into part-TASK.%s (resumable: a requeued task continues).\n"
    "#   submit:          sbatch %s/sweep.sbatch\n"
    "#   when all ended:  podsim sweep --merge %s -o sweep.%s\n"
    "#SBATCH --job-name=podsim-sweep\n"
    "#SBATCH --array=0-%d\n"
    "#SBATCH --cpus-per-task=%d\n"
    "#SBATCH --output=%s/logs/task-%%a.out\n"
    "task=${SLURM_ARRAY_TASK_ID:?run this script with sbatch}\n"
    "exec %s sweep --grid %s/sweep.ini --task \"$task\" --jobs \"${SLURM_CPUS_PER_TASK:-1}\" --resume -q \\\n"
    "  --format %s -o %s/part-$(printf %%04d \"$task\").%s\n",
    n, tasks, dir, ext, dir, dir, ext, tasks - 1, o->cpus_per_task > 0 ? o->cpus_per_task : 1, qdir, qexe,
    qdir, ext, qdir, ext);
  g_autofree char *sbatch = g_build_filename (dir, "sweep.sbatch", NULL);
  if (!ps_write_file_atomic (sbatch, script, strlen (script), &error))
    return ps_cli_fail (error);
  g_chmod (sbatch, 0755);
  printf ("wrote %s/sweep.ini (%u configurations) and %s/sweep.sbatch (%d array tasks)\n"
          "submit:  sbatch %s/sweep.sbatch\n"
          "merge:   podsim sweep --merge %s -o sweep.%s\n", dir, n, dir, tasks, dir, dir, ext);
  return 0;
}

/* Configurations of array task t of T: a contiguous share, so each part
 * file is a run of consecutive rows. */
static void
task_range (guint n, int tasks, int t, guint *first, guint *last)
{
  *first = (guint) ((guint64) n * (guint64) t / (guint64) tasks);
  *last = (guint) ((guint64) n * (guint64) (t + 1) / (guint64) tasks);
}

/* resume_from's errors say "--resume: "; in a merge they are --merge's. */
static GError *
merge_error (GError *e)
{
  if (g_str_has_prefix (e->message, "--resume: "))
    {
      char *m = g_strconcat ("--merge: ", e->message + strlen ("--resume: "), NULL);
      g_free (e->message);
      e->message = m;
    }
  return e;
}

/* --merge: each part is read once, its rows checked against the grid and
 * put to the output as they were read (before, a second read copied them:
 * a part that changed in between failed the merge, with part of the table
 * already on standard output). Nothing reaches the output before every
 * task's rows are there: a regular -o is a temporary renamed into place,
 * standard output and devices get the table from a spool at the end
 * (ps_output_file_begin_whole). Memory is one part file's, never the
 * grid's or the table's. */
static int
merge (const SweepOptions *o, PsStudy *s, int tasks)
{
  GError *error = NULL;
  guint n = ps_study_n_configs (s);
  PsStudyFormat f = PS_STUDY_CSV;
  const char *ext = "csv";
  g_autofree char *probe = g_strdup_printf ("%s/part-0000.jsonl", o->merge);
  if (o->format ? strcmp (o->format, "jsonl") == 0 : g_file_test (probe, G_FILE_TEST_EXISTS))
    {
      f = PS_STUDY_JSONL;
      ext = "jsonl";
    }
  PsOutputFile *out = ps_output_file_begin_whole (o->output ? o->output : "-", &error);
  if (!out)
    {
      g_prefix_error (&error, "-o: ");
      return ps_cli_fail (error);
    }
  g_autofree char *header = ps_study_header (s, f);
  if (!ps_output_file_put (out, header, strlen (header), &error))
    {
      ps_output_file_abort (out);
      return ps_cli_fail (error);
    }
  g_autoptr (GString) missing = g_string_new (NULL);
  guint n_missing = 0, n_missing_tasks = 0;
  for (int t = 0; t < tasks; t++)
    {
      guint first, last, next;
      task_range (n, tasks, t, &first, &last);
      g_autofree char *path = g_strdup_printf ("%s/part-%04d.%s", o->merge, t, ext);
      /* Once a task is short the table will not be written: the rest
       * are only checked, so that the message names every short task. */
      if (!resume_from (s, f, path, first, last, FALSE, n_missing ? NULL : out, &next, &error))
        {
          ps_output_file_abort (out);
          return ps_cli_fail (merge_error (error));
        }
      if (next < last)
        {
          /* The first tasks by number, then a count: a million tasks
           * would otherwise make a message of megabytes. */
          if (n_missing_tasks++ < 20)
            g_string_append_printf (missing, "%s%d", missing->len ? ", " : "", t);
          n_missing += last - next;
        }
    }
  if (n_missing)
    {
      ps_output_file_abort (out);
      if (n_missing_tasks > 20)
        g_string_append_printf (missing, " and %u more", n_missing_tasks - 20);
      fprintf (stderr, "podsim: --merge %s: %u of %u configurations have no row yet (tasks %s); "
               "nothing written\n", o->merge, n_missing, n, missing->str);
      return 1;
    }
  if (!ps_output_file_commit (out, &error))
    return ps_cli_fail (error);
  return 0;
}

static int
sweep (SweepOptions *o, PsModelOptions *mo, int argc, char **argv)
{
  GError *error = NULL;
  if (o->format && strcmp (o->format, "csv") != 0 && strcmp (o->format, "jsonl") != 0)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--format: '%s' is not csv or jsonl", o->format);
      return ps_cli_fail (error);
    }
  /* 0 means the default; a negative count is a mistake, not a default. */
  struct { const char *name; int v; } counts[] = {
    { "--jobs", o->jobs }, { "--tasks", o->tasks }, { "--cpus-per-task", o->cpus_per_task }
  };
  for (gsize i = 0; i < G_N_ELEMENTS (counts); i++)
    if (counts[i].v < 0)
      {
        g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "%s must be positive (got %d)", counts[i].name,
                     counts[i].v);
        return ps_cli_fail (error);
      }
  if (o->task < -1)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--task must be 0 or more (got %d)", o->task);
      return ps_cli_fail (error);
    }
  if (o->resume && !o->output)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--resume needs -o FILE");
      return ps_cli_fail (error);
    }
  g_autoptr (PsParams) base = NULL;
  if (o->merge)
    {
      /* The sweep is the one written with its parts, whatever else the
       * command line says. */
      g_free (o->grid);
      o->grid = g_build_filename (o->merge, "sweep.ini", NULL);
      g_clear_pointer (&o->vary, g_strfreev);
      g_autofree char *text = ps_ini_load_text (o->grid, &error);
      base = text ? ps_params_read_extra (o->grid, text, grid_sections, &error) : NULL;
      if (!base)
        {
          g_prefix_error (&error, "--merge %s (a directory written by podsim sweep --slurm): ", o->merge);
          return ps_cli_fail (error);
        }
    }
  else
    base = ps_model_options_params_argv (mo, argc, argv, &error);
  if (!base)
    return ps_cli_fail (error);
  int tasks = 0;
  g_autofree char *name = NULL;
  g_autoptr (GPtrArray) axes = read_axes (o, base, &tasks, &name, &error);
  if (!axes)
    return ps_cli_fail (error);
  if (!name)
    name = ps_model_options_name (mo, base, NULL);
  g_autoptr (PsStudy) s = make_study (base, axes, &error);
  if (!s)
    return ps_cli_fail (error);
  if (o->merge)
    return merge (o, s, tasks > 0 ? tasks : 1);
  if (o->slurm)
    return write_slurm (o, s, axes, name);
  guint first = 0, last = ps_study_n_configs (s);
  if (o->task >= 0)
    {
      int t = o->tasks > 0 ? o->tasks : tasks;
      if (t <= 0 || o->task >= t)
        {
          g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--task %d: the sweep has %d tasks", o->task, t);
          return ps_cli_fail (error);
        }
      task_range (last, t, o->task, &first, &last);
    }
  return run_sweep (o, s, name, first, last);
}

int
ps_cmd_sweep (int argc, char **argv)
{
  SweepOptions o = { 0 };
  o.task = -1;
  GOptionEntry entries[] = {
    { "vary", 0, 0, G_OPTION_ARG_STRING_ARRAY, &o.vary,
      "Values of one key, comma-separated (repeatable: every combination)", "KEY=V1,V2,..." },
    { "grid", 0, 0, G_OPTION_ARG_FILENAME, &o.grid,
      "A sweep file: a [vary] section (key = v1, v2, ...) and optionally the base model", "FILE.ini" },
    { "output", 'o', 0, G_OPTION_ARG_FILENAME, &o.output, "Write the rows to FILE (default: standard output)", "FILE" },
    { "format", 0, 0, G_OPTION_ARG_STRING, &o.format, "csv or jsonl (default: from -o's extension, else csv)", "FMT" },
    { "jobs", 'j', 0, G_OPTION_ARG_INT, &o.jobs, "Configurations run at once (default: the number of processors)", "N" },
    { "resume", 0, 0, G_OPTION_ARG_NONE, &o.resume, "Continue an interrupted sweep from the rows already in -o FILE", NULL },
    { "slurm", 0, 0, G_OPTION_ARG_FILENAME, &o.slurm,
      "Write DIR/sweep.ini and a Slurm job-array script DIR/sweep.sbatch instead of running", "DIR" },
    { "tasks", 0, 0, G_OPTION_ARG_INT, &o.tasks, "With --slurm: array tasks (default: one per configuration, at most 100)", "N" },
    { "cpus-per-task", 0, 0, G_OPTION_ARG_INT, &o.cpus_per_task, "With --slurm: cores per task, its --jobs (default 1)", "N" },
    { "merge", 0, 0, G_OPTION_ARG_FILENAME, &o.merge, "Merge the part files of a --slurm sweep in DIR into one table", "DIR" },
    { "task", 0, 0, G_OPTION_ARG_INT, &o.task, "Run only array task T's share of --tasks (0 .. N-1; the Slurm script does)", "T" },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &o.quiet, "No progress or summary on stderr", NULL },
    { NULL }
  };
  g_autoptr (PsModelOptions) mo = ps_model_options_new (argc, argv, entries, "--grid");
  g_autoptr (GOptionContext) ctx = g_option_context_new ("[FAMILY | FILE.hlo] - run a grid of configurations");
  g_option_context_set_main_group (ctx, ps_model_options_group (mo));
  g_option_context_set_description (ctx,
    "The base configuration comes from the model options (as for podsim run: --preset,\n"
    "--config, --layers, ...) or from the grid file; every combination of the varied\n"
    "values runs as its own 'podsim run' process, --jobs at a time. One row per\n"
    "configuration streams out as it is ready, in grid order (CSV columns: id, the\n"
    "varied keys, model, fits, step_time_s, throughput_per_s, throughput_unit,\n"
    "mxu_utilization, model_flops_utilization, peak_hbm_bytes, compute_s,\n"
    "communication_s, exposed_communication_s, idle_s, error).\n"
    "Example: podsim sweep --preset DenseLm128B8x8 --vary mesh=8x16,16x8 --vary microbatches=1,2\n"
    "Beyond one machine: --slurm DIR, sbatch DIR/sweep.sbatch, then --merge DIR.\n"
    "The grid format, the columns and the Slurm recipe: doc/sweeps.md.\n");
  int rc = PS_EXIT_USAGE;
  if (ps_cli_parse (ctx, &argc, &argv))
    rc = sweep (&o, mo, argc, argv);
  g_strfreev (o.vary);
  g_free (o.grid);
  g_free (o.output);
  g_free (o.format);
  g_free (o.slurm);
  g_free (o.merge);
  return rc;
}

/* The batch worker: see search_worker.h. */
#include "config.h"

#include "cli/search_worker.h"

#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "common/error.h"
#include "driver/driver.h"
#include "driver/pool.h"
#include "driver/target.h"

const char *const ps_search_post_partition_keys[] = { "async_collectives", "schedule", "fusion", "collectives",
                                                      "cache", NULL };

typedef struct {
  guint index, group;
  char **argv;               /* "podsim run", then its options */
  gboolean done;
} Job;

void
ps_search_batch_begin (GString *file, double time_limit_s)
{
  g_string_append_printf (file, "podsim-batch 1\nlimit %.17g\n", time_limit_s);
}

void
ps_search_batch_add (GString *file, guint index, guint group, const char *const *argv)
{
  guint n = g_strv_length ((char **) argv);
  g_string_append_printf (file, "job %u %u %u\n", index, group, n);
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *e = g_strescape (argv[i], NULL);
      g_string_append_printf (file, "%s\n", e);
    }
}

static void
job_clear (gpointer p)
{
  g_strfreev (((Job *) p)->argv);
}

static GArray *
read_batch (const char *path, double *limit, GError **error)
{
  g_autofree char *text = NULL;
  if (!g_file_get_contents (path, &text, NULL, error))
    return NULL;
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
  g_autoptr (GArray) jobs = g_array_new (FALSE, TRUE, sizeof (Job));
  g_array_set_clear_func (jobs, job_clear);
  guint at = 0, n_lines = g_strv_length (lines);
  if (n_lines < 2 || strcmp (lines[0], "podsim-batch 1") != 0 || sscanf (lines[1], "limit %lf", limit) != 1)
    goto bad;
  for (at = 2; at < n_lines && lines[at][0]; at++)
    {
      Job j = { 0 };
      guint n;
      if (sscanf (lines[at], "job %u %u %u", &j.index, &j.group, &n) != 3 || n < 2 || n > n_lines - at - 1)
        goto bad;
      /* The program and "run" become run's argv[0], as the dispatcher
       * makes it. */
      j.argv = g_new0 (char *, n);
      j.argv[0] = g_strdup ("podsim run");
      for (guint i = 2; i < n; i++)
        j.argv[i - 1] = g_strcompress (lines[at + 1 + i]);
      at += n;
      g_array_append_val (jobs, j);
    }
  return g_steal_pointer (&jobs);
bad:
  g_set_error (error, PS_ERROR, PS_ERROR_PARSE, "%s:%u: not a batch file of podsim search", path, at + 1);
  return NULL;
}

/* ---- one job -------------------------------------------------------------------- */

/* In the job's fork: the run, as `podsim run ARGS` would run it. */
static int
run_job (gpointer data)
{
  Job *j = data;
  g_set_prgname (j->argv[0]);
  char **argv = g_strdupv (j->argv);
  return ps_cmd_run ((int) g_strv_length (argv), argv);
}

typedef struct {
  Job *job;
  PsDriverResult *partitioned;     /* the group's, given to the job's fork */
} Resume;

static int
resume_job (gpointer data)
{
  Resume *rs = data;
  ps_driver_resume_next (rs->partitioned);
  return run_job (rs->job);
}

/* ---- a share group -------------------------------------------------------------- */

typedef struct {
  Job *jobs;
  guint n;
  double limit;
} Group;

/* The group's parameters as `podsim run` reads them from its first job's
 * command line (its options other than the model's are only --json and -q). */
static PsParams *
job_params (const Job *j, PsModelOptions **mo_out, GError **error)
{
  char **argv = g_strdupv (j->argv);
  int argc = (int) g_strv_length (argv);
  char **keep = g_memdup2 (argv, sizeof (char *) * ((gsize) argc + 1));
  gboolean json = FALSE, quiet = FALSE;
  GOptionEntry entries[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, NULL, NULL },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet, NULL, NULL },
    { NULL }
  };
  PsModelOptions *mo = ps_model_options_new (argc, argv, entries, NULL);
  GOptionContext *ctx = g_option_context_new (NULL);
  g_option_context_set_main_group (ctx, ps_model_options_group (mo));
  PsParams *p = NULL;
  if (ps_cli_param_argv_rewrite (argc, argv, error) && g_option_context_parse (ctx, &argc, &argv, error))
    p = ps_model_options_params_argv (mo, argc, argv, error);
  g_option_context_free (ctx);
  g_strfreev (keep);
  g_free (argv);
  if (p)
    *mo_out = mo;
  else
    ps_model_options_free (mo);
  return p;
}

/* In the group's fork: build, propagate and partition once, as the first
 * job's run would, then each job in a fork of its own from there. Exit
 * status 3: the shared stages failed; the worker runs the jobs alone. */
static int
run_group (gpointer data)
{
  Group *g = data;
  GError *error = NULL;
  g_autoptr (PsModelOptions) mo = NULL;
  g_autoptr (PsParams) p = job_params (&g->jobs[0], &mo, &error);
  if (!p)
    return g_clear_error (&error), 3;
  g_autofree char *name = ps_model_options_name (mo, p, NULL);
  g_autoptr (PsTarget) target = ps_target_from_params (p, &error);
  if (!target)
    return g_clear_error (&error), 3;
  /* As cmd_run.c runs it, up to partitioning. */
  PsDriverFamily fb = { p, target };
  PsDriverOptions dopts;
  ps_driver_options_init_family (&dopts, &fb, name);
  dopts.stop_after = PS_STAGE_PARTITION;
  dopts.keep_spmd = TRUE;
  PsDriverResult *r = ps_driver_run (&dopts, NULL, &error);
  if (!r)
    return g_clear_error (&error), 3;
  /* The shared stages ran within the time limit (the worker armed it for
   * them); each job's own starts in its fork. */
  struct itimerval off = { { 0, 0 }, { 0, 0 } };
  setitimer (ITIMER_REAL, &off, NULL);
  GString *out = g_string_new (NULL);
  for (guint i = 0; i < g->n; i++)
    {
      Resume rs = { &g->jobs[i], r };
      g_string_truncate (out, 0);
      ps_pool_fork_job (g->jobs[i].index, resume_job, &rs, g->limit, out);
      if (fwrite (out->str, 1, out->len, stdout) != out->len)
        break;
      fflush (stdout);
    }
  g_string_free (out, TRUE);
  ps_driver_result_free (r);
  return 0;
}

static void
mark_done (const PsPoolResult *r, gpointer user)
{
  Group *g = user;
  for (guint i = 0; i < g->n; i++)
    if (g->jobs[i].index == r->index)
      g->jobs[i].done = TRUE;
}

/* The group fork's record: its output is its jobs' records; the whole ones
 * go out as they are. */
static void
group_done (const PsPoolResult *r, gpointer user)
{
  gsize used = 0;
  ps_pool_batch_results (r->out, r->out_len, mark_done, user, &used);
  fwrite (r->out, 1, used, stdout);
}

/* glibc's allocator returns freed memory to the kernel eagerly: blocks
 * above 128 KiB are mmap'ed and unmapped one by one, the heap top is
 * trimmed past 128 KiB, and the replay's thread gets an arena of its own
 * that grows by mprotect. A run of DenseLm128B8x8 (mesh 4x32, overlap on)
 * made 6,162 mmap, 5,901 munmap and 13,888 mprotect calls (strace -c) and
 * spent a third of its CPU in the kernel, mostly faulting the same pages
 * in again. A worker's forks are short-lived, so they keep what they free:
 * one arena, blocks up to 32 MiB (glibc's largest mmap threshold) from the
 * heap, no trimming below 256 MiB (mallopt(3)). Measured on that run with
 * the same settings as GLIBC_TUNABLES: 0.44 -> 0.16-0.20 s system CPU and
 * 17,044 -> 6,000 minor faults at the same peak RSS; results do not
 * depend on where memory comes from. */
static void
keep_freed_memory (void)
{
#ifdef __GLIBC__
  mallopt (M_ARENA_MAX, 1);
  mallopt (M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt (M_TRIM_THRESHOLD, 256 * 1024 * 1024);
#endif
}

int
ps_search_worker (const char *path)
{
  GError *error = NULL;
  keep_freed_memory ();
  double limit = 0;
  g_autoptr (GArray) jobs = read_batch (path, &limit, &error);
  if (!jobs)
    return ps_cli_fail (error);
  GString *out = g_string_new (NULL);
  for (guint at = 0; at < jobs->len;)
    {
      Group g = { &g_array_index (jobs, Job, at), 1, limit };
      while (at + g.n < jobs->len && g_array_index (jobs, Job, at + g.n).group == g.jobs[0].group)
        g.n++;
      at += g.n;
      if (g.n > 1)
        {
          /* The group's fork writes its jobs' records; what it could not
           * (a failed shared stage, a crash) runs below, alone. */
          g_string_truncate (out, 0);
          /* A group whose shared stages outlast the time limit is killed;
           * its jobs then run alone, each stopped at the limit. */
          ps_pool_fork_job (G_MAXUINT, run_group, &g, limit, out);
          ps_pool_batch_results (out->str, out->len, group_done, &g, NULL);
        }
      for (guint i = 0; i < g.n; i++)
        if (!g.jobs[i].done)
          {
            g_string_truncate (out, 0);
            ps_pool_fork_job (g.jobs[i].index, run_job, &g.jobs[i], limit, out);
            fwrite (out->str, 1, out->len, stdout);
          }
      fflush (stdout);
    }
  g_string_free (out, TRUE);
  return 0;
}

/* The child-process pool: see pool.h. */
#include "config.h"

#include "driver/pool.h"

#include <gio/gio.h>
#include <glib-unix.h>
#include <errno.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "common/error.h"

typedef struct {
  char **argv;
  GSource *timer;            /* its time limit */
  GSubprocess *running;      /* while it runs (borrowed from the pending call) */
  gboolean finished;
  PsPoolResult r;
  GBytes *out, *err;
  gint64 t0;
  gboolean stopped;          /* the pool sent it SIGTERM when it was stopped */
} Job;

struct PsPool {
  int n_jobs;
  PsPoolDoneFn done;
  PsPoolProgressFn progress;
  gpointer user;
  /* Jobs exist only from their start to their handing back (live, in job
   * order: the head is next_emit), so a study of millions holds --jobs of
   * them; argv are queued (ps_pool_add) or made at the start (ps_pool_add_n). */
  GPtrArray *queued;         /* char**, for ps_pool_add */
  guint n_jobs_total;
  PsPoolArgvFn make_argv;
  gpointer make_user;
  GQueue live;               /* Job, started and not yet handed back */
  guint next_start, next_emit, running;
  gint64 t0;
  GError *error;
  GMainContext *ctx;
  int interrupted;           /* the signal that stopped the pool, or 0 */
  gboolean cut;              /* an interrupted job was reached: nothing after it is handed back */
  double time_limit_s;
};

/* Its time limit no longer applies: the child ended, or the job goes. */
static void
job_drop_timer (Job *j)
{
  if (j->timer)
    {
      g_source_destroy (j->timer);
      g_source_unref (j->timer);
      j->timer = NULL;
    }
}

static void
job_free (gpointer p)
{
  Job *j = p;
  job_drop_timer (j);
  g_strfreev (j->argv);
  if (j->out)
    g_bytes_unref (j->out);
  if (j->err)
    g_bytes_unref (j->err);
  g_free (j);
}

int
ps_pool_default_jobs (void)
{
  int n = (int) g_get_num_processors ();
  return n > 0 ? n : 1;
}

PsPool *
ps_pool_new (int n_jobs, PsPoolDoneFn done, PsPoolProgressFn progress, gpointer user)
{
  PsPool *p = g_new0 (PsPool, 1);
  p->n_jobs = n_jobs >= 1 ? n_jobs : ps_pool_default_jobs ();
  p->done = done;
  p->progress = progress;
  p->user = user;
  p->queued = g_ptr_array_new_with_free_func ((GDestroyNotify) g_strfreev);
  g_queue_init (&p->live);
  return p;
}

void
ps_pool_free (PsPool *p)
{
  if (!p)
    return;
  g_ptr_array_free (p->queued, TRUE);
  g_queue_clear_full (&p->live, job_free);
  g_clear_error (&p->error);
  g_free (p);
}

void
ps_pool_set_time_limit (PsPool *p, double seconds)
{
  p->time_limit_s = seconds > 0 ? seconds : 0;
}

void
ps_pool_add (PsPool *p, const char *const *argv)
{
  g_return_if_fail (p->make_argv == NULL);
  g_ptr_array_add (p->queued, g_strdupv ((char **) argv));
  p->n_jobs_total++;
}

void
ps_pool_add_n (PsPool *p, guint n, PsPoolArgvFn make_argv, gpointer user)
{
  g_return_if_fail (p->n_jobs_total == 0 && make_argv != NULL);
  p->n_jobs_total = n;
  p->make_argv = make_argv;
  p->make_user = user;
}

/* Hands back every finished job whose predecessors have been handed back. */
static void
emit_ready (PsPool *p)
{
  while (p->next_emit < p->next_start)
    {
      Job *j = g_queue_peek_head (&p->live);
      if (!j->finished || p->cut)
        return;
      /* Results are handed back as a prefix of the jobs, so that what a
       * caller kept is "the first N": an interrupted job ends it. */
      if (j->r.interrupted)
        {
          p->cut = TRUE;
          return;
        }
      gsize n = 0;
      j->r.out = j->out ? g_bytes_get_data (j->out, &n) : "";
      j->r.out_len = n;
      j->r.err = j->err ? g_bytes_get_data (j->err, NULL) : "";
      if (p->done)
        p->done (&j->r, p->user);
      job_free (g_queue_pop_head (&p->live));
      p->next_emit++;
      if (p->progress)
        p->progress (p->next_emit, p->n_jobs_total, (double) (g_get_monotonic_time () - p->t0) / 1e6, p->user);
    }
}

/* GBytes from a pipe, NUL-terminated so results can be read as text. */
static GBytes *
terminated (GBytes *b)
{
  gsize n = 0;
  const char *d = b ? g_bytes_get_data (b, &n) : NULL;
  char *t = g_malloc (n + 1);
  if (n)
    memcpy (t, d, n);
  t[n] = '\0';
  return g_bytes_new_take (t, n);
}

static void start_next (PsPool *p);

/* In the child, before exec: its own process group, so that a terminal's
 * Ctrl-C (SIGINT to the whole foreground group) reaches only the pool,
 * which then stops the children itself and knows that it did. Otherwise a
 * child's own SIGINT handler (SimGrid installs one that exits with status
 * 1) races the pool's and its death looks like a failed configuration.
 * On Linux the child also dies with the pool if the pool is killed. */
static void
child_setup (gpointer data)
{
  pid_t parent = (pid_t) GPOINTER_TO_INT (data);
  setpgid (0, 0);
#ifdef __linux__
  prctl (PR_SET_PDEATHSIG, SIGTERM);
  if (getppid () != parent)
    _exit (127);
#else
  (void) parent;
#endif
}

/* A job's child is gone: its time limit goes too. */
static void
job_ended (PsPool *p, Job *j)
{
  job_drop_timer (j);
  j->r.wall_s = (double) (g_get_monotonic_time () - j->t0) / 1e6;
  /* A child the pool stopped has no result unless it managed to finish
   * cleanly; whatever it printed while dying is not a row. */
  j->r.interrupted = j->stopped && !(j->r.exited && j->r.exit_status == 0);
  j->finished = TRUE;
  p->running--;
  emit_ready (p);
  start_next (p);
}

typedef struct {
  PsPool *pool;
  Job *job;
} Pending;

static gboolean
on_time_limit (gpointer data)
{
  Pending *pd = data;
  Job *j = pd->job;
  j->r.timed_out = TRUE;
  if (j->running)
    g_subprocess_force_exit (j->running);
  g_source_unref (j->timer);
  j->timer = NULL;
  return G_SOURCE_REMOVE;
}

static void
arm_time_limit (PsPool *p, Job *j)
{
  if (p->time_limit_s <= 0)
    return;
  Pending *pd = g_new0 (Pending, 1);
  pd->pool = p;
  pd->job = j;
  j->timer = g_timeout_source_new ((guint) MIN (p->time_limit_s * 1000.0 + 0.5, (double) G_MAXUINT));
  g_source_set_callback (j->timer, on_time_limit, pd, g_free);
  g_source_attach (j->timer, p->ctx);
  g_source_ref (j->timer);
}

static void
on_communicated (GObject *src, GAsyncResult *res, gpointer data)
{
  Pending *pd = data;
  PsPool *p = pd->pool;
  Job *j = pd->job;
  GSubprocess *sp = G_SUBPROCESS (src);
  GBytes *out = NULL, *err = NULL;
  GError *error = NULL;
  if (!g_subprocess_communicate_finish (sp, res, &out, &err, &error))
    {
      /* The pipes broke: wait for the child and keep what it said. */
      g_error_free (error);
      g_subprocess_wait (sp, NULL, NULL);
    }
  j->out = terminated (out);
  j->err = terminated (err);
  if (out)
    g_bytes_unref (out);
  if (err)
    g_bytes_unref (err);
  j->r.wait_status = g_subprocess_get_status (sp);
  j->r.exited = g_subprocess_get_if_exited (sp);
  j->r.exit_status = j->r.exited ? g_subprocess_get_exit_status (sp) : -1;
  j->r.term_signal = g_subprocess_get_if_signaled (sp) ? g_subprocess_get_term_sig (sp) : 0;
  j->running = NULL;
  g_object_unref (sp);
  g_free (pd);
  job_ended (p, j);
}

static void
start_next (PsPool *p)
{
  while (!p->error && !p->interrupted && p->running < (guint) p->n_jobs && p->next_start < p->n_jobs_total)
    {
      Job *j = g_new0 (Job, 1);
      j->r.index = p->next_start;
      if (p->make_argv)
        j->argv = p->make_argv (p->next_start, p->make_user);
      else
        j->argv = g_steal_pointer (&p->queued->pdata[p->next_start]);
      p->next_start++;
      g_queue_push_tail (&p->live, j);
      j->t0 = g_get_monotonic_time ();
      g_autoptr (GSubprocessLauncher) l
        = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
      g_subprocess_launcher_set_child_setup (l, child_setup, GINT_TO_POINTER ((int) getpid ()), NULL);
      GSubprocess *sp = g_subprocess_launcher_spawnv (l, (const char *const *) j->argv, &p->error);
      if (!sp)
        {
          g_prefix_error (&p->error, "cannot start %s: ", j->argv[0]);
          return;
        }
      p->running++;
      j->running = sp;
      Pending *pd = g_new0 (Pending, 1);
      pd->pool = p;
      pd->job = j;
      g_subprocess_communicate_async (sp, NULL, NULL, on_communicated, pd);
      arm_time_limit (p, j);
    }
}

/* SIGINT or SIGTERM: stop starting jobs and end the running children (a
 * terminal's Ctrl-C reaches them anyway; a `kill` of podsim alone would not). */
static gboolean
on_signal (gpointer data, int sig)
{
  PsPool *p = data;
  p->interrupted = sig;
  for (GList *l = p->live.head; l; l = l->next)
    {
      Job *j = l->data;
      if (j->running && !j->stopped)
        {
          j->stopped = TRUE;
          g_subprocess_send_signal (j->running, SIGTERM);
        }
    }
  return G_SOURCE_CONTINUE;
}

static gboolean
on_sigint (gpointer data)
{
  return on_signal (data, SIGINT);
}

static gboolean
on_sigterm (gpointer data)
{
  return on_signal (data, SIGTERM);
}

int
ps_pool_interrupted (const PsPool *p)
{
  return p->interrupted;
}

guint
ps_pool_n_done (const PsPool *p)
{
  return p->next_emit;
}

gboolean
ps_pool_run (PsPool *p, GError **error)
{
  p->ctx = g_main_context_new ();
  g_main_context_push_thread_default (p->ctx);
  GSource *sources[2] = { g_unix_signal_source_new (SIGINT), g_unix_signal_source_new (SIGTERM) };
  g_source_set_callback (sources[0], on_sigint, p, NULL);
  g_source_set_callback (sources[1], on_sigterm, p, NULL);
  for (int i = 0; i < 2; i++)
    g_source_attach (sources[i], p->ctx);
  p->t0 = g_get_monotonic_time ();
  start_next (p);
  while (p->running > 0)
    g_main_context_iteration (p->ctx, TRUE);
  for (int i = 0; i < 2; i++)
    {
      g_source_destroy (sources[i]);
      g_source_unref (sources[i]);
    }
  g_main_context_pop_thread_default (p->ctx);
  g_main_context_unref (p->ctx);
  p->ctx = NULL;
  if (p->error)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_IO, "%s", p->error->message);
      return FALSE;
    }
  if (p->interrupted)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_IO, "interrupted by signal %d (%s) after %u of %u jobs",
                   p->interrupted, g_strsignal (p->interrupted), p->next_emit, p->n_jobs_total);
      return FALSE;
    }
  return TRUE;
}

/* ---- batches ------------------------------------------------------------------- */

/* A record: a header line, then exactly out_len and err_len bytes. */
#define RECORD_TAG "\036podsim-job"

/* The whole of a file descriptor from its start. */
static char *
read_back (int fd, gsize *len)
{
  GString *s = g_string_new (NULL);
  if (lseek (fd, 0, SEEK_SET) == 0)
    {
      char chunk[65536];
      for (;;)
        {
          ssize_t n = read (fd, chunk, sizeof chunk);
          if (n < 0 && errno == EINTR)
            continue;
          if (n <= 0)
            break;
          g_string_append_len (s, chunk, n);
        }
    }
  *len = s->len;
  return g_string_free (s, FALSE);
}

/* An unnamed temporary file (it goes when closed). */
static int
temp_fd (void)
{
  g_autofree char *path = NULL;
  int fd = g_file_open_tmp ("podsim-job-XXXXXX", &path, NULL);
  if (fd >= 0)
    g_unlink (path);
  return fd;
}

int
ps_pool_fork_job (guint index, PsPoolForkFn fn, gpointer data, double time_limit_s, GString *out)
{
  int fo = temp_fd (), fe = temp_fd ();
  fflush (stdout);
  fflush (stderr);
  gint64 t0 = g_get_monotonic_time ();
  pid_t pid = fo >= 0 && fe >= 0 ? fork () : -1;
  if (pid == 0)
    {
#ifdef __linux__
      prctl (PR_SET_PDEATHSIG, SIGKILL);
#endif
      dup2 (fo, STDOUT_FILENO);
      dup2 (fe, STDERR_FILENO);
      close (fo);
      close (fe);
      if (time_limit_s > 0)
        {
          struct itimerval it = { { 0, 0 }, { (time_t) time_limit_s,
                                              (suseconds_t) ((time_limit_s - (double) (time_t) time_limit_s) * 1e6) } };
          if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0)
            it.it_value.tv_usec = 1;
          signal (SIGALRM, SIG_DFL);
          setitimer (ITIMER_REAL, &it, NULL);
        }
      int rc = fn (data);
      /* As podsim's exit: what was printed must have arrived. */
      if (fflush (stdout) != 0 || ferror (stdout))
        rc = rc ? rc : PS_EXIT_USAGE;
      fflush (stderr);
      _exit (rc);
    }
  int status = 0;
  gboolean timed_out = FALSE;
  g_autofree char *o = NULL, *e = NULL;
  gsize no = 0, ne = 0;
  if (pid < 0)
    {
      /* Cannot fork: the job's result says so, like a child that failed. */
      e = g_strdup_printf ("podsim: cannot start a job: %s\n", g_strerror (errno));
      ne = strlen (e);
      status = 1 << 8;
    }
  else
    {
      while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
        ;
      timed_out = WIFSIGNALED (status) && WTERMSIG (status) == SIGALRM && time_limit_s > 0;
      o = read_back (fo, &no);
      e = read_back (fe, &ne);
    }
  if (fo >= 0)
    close (fo);
  if (fe >= 0)
    close (fe);
  double wall = (double) (g_get_monotonic_time () - t0) / 1e6;
  g_string_append_printf (out, RECORD_TAG " %u %d %d %.17g %" G_GSIZE_FORMAT " %" G_GSIZE_FORMAT "\n", index,
                          status, timed_out, wall, no, ne);
  if (no)
    g_string_append_len (out, o, (gssize) no);
  if (ne)
    g_string_append_len (out, e, (gssize) ne);
  return status;
}

guint
ps_pool_batch_results (const char *data, gsize len, PsPoolDoneFn fn, gpointer user, gsize *used)
{
  guint n = 0;
  const char *p = data, *end = data + len;
  gsize tag = strlen (RECORD_TAG);
  while ((gsize) (end - p) > tag && memcmp (p, RECORD_TAG, tag) == 0)
    {
      const char *nl = memchr (p, '\n', (gsize) (end - p));
      if (!nl)
        break;
      g_autofree char *head = g_strndup (p + tag, (gsize) (nl - p) - tag);
      guint index;
      int status, timed_out;
      double wall;
      guint64 no, ne;
      if (sscanf (head, " %u %d %d %lf %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT, &index, &status, &timed_out,
                  &wall, &no, &ne) != 6 || no > (guint64) (end - nl - 1) || ne > (guint64) (end - nl - 1) - no)
        break;
      g_autofree char *o = g_strndup (nl + 1, (gsize) no);
      g_autofree char *e = g_strndup (nl + 1 + no, (gsize) ne);
      PsPoolResult r = { 0 };
      r.index = index;
      r.wait_status = status;
      r.exited = WIFEXITED (status);
      r.exit_status = r.exited ? WEXITSTATUS (status) : -1;
      r.term_signal = WIFSIGNALED (status) ? WTERMSIG (status) : 0;
      r.out = o;
      r.out_len = (gsize) no;
      r.err = e;
      r.wall_s = wall;
      r.timed_out = timed_out != 0;
      if (fn)
        fn (&r, user);
      n++;
      p = nl + 1 + no + ne;
    }
  if (used)
    *used = (gsize) (p - data);
  return n;
}

char *
ps_format_duration (double s)
{
  if (!(s >= 0) || s > 1e9)
    return g_strdup ("?");
  long t = (long) (s + 0.5);
  if (t >= 3600)
    return g_strdup_printf ("%ldh %02ldm", t / 3600, (t / 60) % 60);
  if (t >= 60)
    return g_strdup_printf ("%ldm %02lds", t / 60, t % 60);
  return g_strdup_printf ("%lds", t);
}

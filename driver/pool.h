/* A pool of child processes for `podsim sweep` and `podsim search`: each
 * configuration runs as its own `podsim run ...` process (SimGrid runs one
 * engine per process, and a crash or an out-of-memory kill of one child
 * cannot take the whole study down), at most n_jobs at a time.
 *
 * Results are handed back in job order, whatever order the children finish
 * in, so a study's output is the same for any --jobs (a finished job waits
 * until every earlier one has been handed back).
 *
 * Usage:
 *   PsPool *pool = ps_pool_new (n_jobs, on_done, on_progress, user);
 *   ps_pool_add (pool, argv);                 (argv copied)
 *     or ps_pool_add_n (pool, n, make_argv, user)   (argv made as each starts)
 *   ps_pool_run (pool, &error);
 *   ps_pool_free (pool);
 *
 * Ownership: PsPool is transfer full; the PsPoolResult passed to on_done is
 * borrowed for the call.
 */
#ifndef PS_DRIVER_POOL_H
#define PS_DRIVER_POOL_H

#include <glib.h>

typedef struct {
  guint index;               /* the job's position in ps_pool_add order */
  int wait_status;           /* as from waitpid (g_spawn_check_wait_status) */
  gboolean exited;           /* exited normally (else killed by a signal) */
  int exit_status;           /* when exited */
  int term_signal;           /* when killed */
  const char *out;           /* standard output, NUL-terminated */
  gsize out_len;
  const char *err;           /* standard error */
  double wall_s;             /* the child's wall time */
  gboolean interrupted;      /* the pool was stopped and ended this child: no result
                              * (never handed to on_done) */
  gboolean timed_out;        /* the pool killed it at its time limit */
} PsPoolResult;

typedef void (*PsPoolDoneFn) (const PsPoolResult *r, gpointer user);
/* After each job is handed back: jobs done so far (of this run) and total. */
typedef void (*PsPoolProgressFn) (guint done, guint total, double elapsed_s, gpointer user);

typedef struct PsPool PsPool;

/* n_jobs < 1 means the number of processors. done and progress may be NULL. */
PsPool *ps_pool_new (int n_jobs, PsPoolDoneFn done, PsPoolProgressFn progress, gpointer user);
void ps_pool_free (PsPool *pool);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsPool, ps_pool_free)

/* Queues one child: argv[0] is the program ("/proc/self/exe" for podsim
 * itself). Copied. */
void ps_pool_add (PsPool *pool, const char *const *argv);

/* A child still running `seconds` after it started is killed (SIGKILL);
 * its result says timed_out. 0 (default): no limit. */
void ps_pool_set_time_limit (PsPool *pool, double seconds);

/* Queues n children whose argv make_argv (index, user) makes (transfer
 * full, NULL-terminated) when each starts: memory for --jobs children at a
 * time, whatever n is. Instead of ps_pool_add, not with it. */
typedef char **(*PsPoolArgvFn) (guint index, gpointer user);
void ps_pool_add_n (PsPool *pool, guint n, PsPoolArgvFn make_argv, gpointer user);

/* Runs every queued job. FALSE (PS_ERROR_IO) when a child cannot be
 * started at all, or when SIGINT or SIGTERM stopped the pool (the running
 * children are sent SIGTERM; results handed back so far stay handed back);
 * a child that fails is a result like any other. Children run in their own
 * process groups, so a signal to the pool's group reaches only the pool. */
gboolean ps_pool_run (PsPool *pool, GError **error);
/* After ps_pool_run: the signal that stopped it (0: none), and how many
 * results were handed back (always the first N jobs: a job the pool
 * stopped is not handed back, nor is any job after it). */
int ps_pool_interrupted (const PsPool *pool);
guint ps_pool_n_done (const PsPool *pool);

/* ---- batches: one child, many jobs ---------------------------------------------
 *
 * Starting podsim (loading SimGrid, GLib and the rest) costs about as much
 * as a small configuration's run, so a study can hand a child many jobs at
 * once: the child (a batch worker) runs each job in a fork of itself, so
 * the start is paid once per batch, and writes one record per job on its
 * standard output. The parent reads the batch's output back as one result
 * per job (ps_pool_batch_results), as if each had been a child of its own:
 * its exit status, standard output and error, wall time, and timed_out. */

/* Runs fn (data) in a fork of this process with its standard output and
 * error captured, and appends the job's record (index, wait status,
 * output) to `out`. The fork exits with fn's return value; it is killed
 * (SIGALRM) after time_limit_s of wall time when that is > 0, and dies
 * with this process. Returns the wait status. */
typedef int (*PsPoolForkFn) (gpointer data);
int ps_pool_fork_job (guint index, PsPoolForkFn fn, gpointer data, double time_limit_s, GString *out);

/* Calls fn for each job record in data[0..len) (a batch worker's output),
 * r->index being the record's job index; r is borrowed for the call.
 * Returns how many records were complete (a worker that died mid-record
 * left the rest unread); *used (may be NULL) gets the bytes they took. */
guint ps_pool_batch_results (const char *data, gsize len, PsPoolDoneFn fn, gpointer user, gsize *used);

/* The default number of parallel jobs: the processors this process may use. */
int ps_pool_default_jobs (void);

/* "1h 02m", "3m 05s", "12s": for progress lines. transfer full. */
char *ps_format_duration (double seconds);

#endif

/* The process pool (driver/pool.h): children's results come back in job
 * order whatever order they end in, a time limit ends a child and says so;
 * and batches: a job run in a fork of this process writes a record that
 * reads back as the result of a child of its own (exit status, output,
 * error, timed out), records are found one after the other, and a record
 * cut short is not read. */
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/suite_main.h"
#include "driver/pool.h"

typedef struct {
  GPtrArray *out;            /* char*: each result's output, in the order handed back */
  GArray *index;             /* guint */
  GArray *timed_out;         /* gboolean */
  GArray *status;            /* int: exit status, or -signal */
  GPtrArray *err;
} Seen;

static void
seen_init (Seen *s)
{
  s->out = g_ptr_array_new_with_free_func (g_free);
  s->err = g_ptr_array_new_with_free_func (g_free);
  s->index = g_array_new (FALSE, FALSE, sizeof (guint));
  s->timed_out = g_array_new (FALSE, FALSE, sizeof (gboolean));
  s->status = g_array_new (FALSE, FALSE, sizeof (int));
}

static void
seen_clear (Seen *s)
{
  g_ptr_array_free (s->out, TRUE);
  g_ptr_array_free (s->err, TRUE);
  g_array_free (s->index, TRUE);
  g_array_free (s->timed_out, TRUE);
  g_array_free (s->status, TRUE);
}

static void
on_result (const PsPoolResult *r, gpointer user)
{
  Seen *s = user;
  g_ptr_array_add (s->out, g_strndup (r->out, r->out_len));
  g_ptr_array_add (s->err, g_strdup (r->err));
  g_array_append_val (s->index, r->index);
  g_array_append_val (s->timed_out, r->timed_out);
  int st = r->exited ? r->exit_status : -r->term_signal;
  g_array_append_val (s->status, st);
}

START_TEST (test_pool_job_order)
{
  /* The first child ends last; results still come in job order. */
  Seen s;
  seen_init (&s);
  g_autoptr (PsPool) pool = ps_pool_new (3, on_result, NULL, &s);
  const char *a[] = { "/bin/sh", "-c", "sleep 0.3; echo zero", NULL };
  const char *b[] = { "/bin/sh", "-c", "echo one", NULL };
  const char *c[] = { "/bin/sh", "-c", "echo two >&2; exit 4", NULL };
  ps_pool_add (pool, a);
  ps_pool_add (pool, b);
  ps_pool_add (pool, c);
  GError *error = NULL;
  ck_assert (ps_pool_run (pool, &error));
  ck_assert_uint_eq (s.out->len, 3);
  ck_assert_str_eq (s.out->pdata[0], "zero\n");
  ck_assert_str_eq (s.out->pdata[1], "one\n");
  ck_assert_str_eq (s.err->pdata[2], "two\n");
  ck_assert_int_eq (g_array_index (s.status, int, 2), 4);
  for (guint i = 0; i < 3; i++)
    ck_assert_uint_eq (g_array_index (s.index, guint, i), i);
  seen_clear (&s);
}
END_TEST

START_TEST (test_pool_time_limit)
{
  Seen s;
  seen_init (&s);
  g_autoptr (PsPool) pool = ps_pool_new (2, on_result, NULL, &s);
  ps_pool_set_time_limit (pool, 0.2);
  const char *a[] = { "/bin/sh", "-c", "exec sleep 30", NULL };
  const char *b[] = { "/bin/sh", "-c", "echo quick", NULL };
  ps_pool_add (pool, a);
  ps_pool_add (pool, b);
  ck_assert (ps_pool_run (pool, NULL));
  ck_assert (g_array_index (s.timed_out, gboolean, 0));
  ck_assert (!g_array_index (s.timed_out, gboolean, 1));
  ck_assert_str_eq (s.out->pdata[1], "quick\n");
  seen_clear (&s);
}
END_TEST

static int
job_prints (gpointer data)
{
  printf ("out of %s\n", (const char *) data);
  fprintf (stderr, "err of %s\n", (const char *) data);
  return 3;
}

static int
job_sleeps (gpointer data)
{
  (void) data;
  g_usleep (30 * G_USEC_PER_SEC);
  return 0;
}

static int
job_aborts (gpointer data)
{
  (void) data;
  abort ();
}

START_TEST (test_fork_job_records)
{
  GString *out = g_string_new (NULL);
  int st = ps_pool_fork_job (7, job_prints, "seven", 0, out);
  ck_assert (WIFEXITED (st) && WEXITSTATUS (st) == 3);
  ps_pool_fork_job (2, job_aborts, NULL, 0, out);
  ps_pool_fork_job (5, job_sleeps, NULL, 0.1, out);
  ps_pool_fork_job (9, job_prints, "nine", 0, out);
  Seen s;
  seen_init (&s);
  gsize used = 0;
  ck_assert_uint_eq (ps_pool_batch_results (out->str, out->len, on_result, &s, &used), 4);
  ck_assert_uint_eq (used, out->len);
  ck_assert_uint_eq (g_array_index (s.index, guint, 0), 7);
  ck_assert_str_eq (s.out->pdata[0], "out of seven\n");
  ck_assert_str_eq (s.err->pdata[0], "err of seven\n");
  ck_assert_int_eq (g_array_index (s.status, int, 0), 3);
  ck_assert_int_eq (g_array_index (s.status, int, 1), -SIGABRT);
  ck_assert (!g_array_index (s.timed_out, gboolean, 1));
  /* The time limit ends the fork and says so. */
  ck_assert_uint_eq (g_array_index (s.index, guint, 2), 5);
  ck_assert (g_array_index (s.timed_out, gboolean, 2));
  ck_assert_str_eq (s.out->pdata[3], "out of nine\n");
  seen_clear (&s);

  /* A worker that died in the middle of a record: the whole ones only. */
  seen_init (&s);
  ck_assert_uint_eq (ps_pool_batch_results (out->str, out->len - 3, on_result, &s, &used), 3);
  ck_assert_uint_lt (used, out->len - 3);
  ck_assert_uint_eq (ps_pool_batch_results (out->str, used, NULL, NULL, NULL), 3);
  /* Not records at all. */
  ck_assert_uint_eq (ps_pool_batch_results ("hello\n", 6, on_result, &s, &used), 0);
  ck_assert_uint_eq (used, 0);
  ck_assert_uint_eq (s.out->len, 3);
  seen_clear (&s);
  g_string_free (out, TRUE);
}
END_TEST

/* A record's output may hold anything, records included: a batch
 * worker's share group forwards its jobs' records that way. */
static int
job_nested (gpointer data)
{
  (void) data;
  GString *inner = g_string_new (NULL);
  ps_pool_fork_job (1, job_prints, "one", 0, inner);
  ps_pool_fork_job (2, job_prints, "two", 0, inner);
  fwrite (inner->str, 1, inner->len, stdout);
  g_string_free (inner, TRUE);
  return 0;
}

static void
on_outer (const PsPoolResult *r, gpointer user)
{
  ps_pool_batch_results (r->out, r->out_len, on_result, user, NULL);
}

START_TEST (test_fork_job_nested)
{
  GString *out = g_string_new (NULL);
  ps_pool_fork_job (0, job_nested, NULL, 0, out);
  Seen s;
  seen_init (&s);
  ck_assert_uint_eq (ps_pool_batch_results (out->str, out->len, on_outer, &s, NULL), 1);
  ck_assert_uint_eq (s.out->len, 2);
  ck_assert_str_eq (s.out->pdata[1], "out of two\n");
  ck_assert_uint_eq (g_array_index (s.index, guint, 1), 2);
  seen_clear (&s);
  g_string_free (out, TRUE);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("pool");
  ps_check_case (s, "pool", 60,
                 PS_CHECK_TESTS (test_pool_job_order, test_pool_time_limit,
                                 test_fork_job_records, test_fork_job_nested));
  return ps_check_run (s, CK_FORK_GETENV);
}

/* The command line's shared helpers (cli/util.c): the fork-with-timeout
 * runner both conformance commands use, on a child that answers, crashes,
 * exits with a status, or hangs. */
#include "config.h"

#include <check.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "tests/suite_main.h"
#include "cli/commands.h"

static GString *
answer (gpointer data)
{
  GString *r = g_string_new ("P1");
  g_string_append (r, data);
  return r;
}

/* SIGKILL: sanitizers intercept SIGSEGV and exit with a status instead. */
static GString *
crash (gpointer data)
{
  kill (getpid (), SIGKILL);
  return g_string_new ("never");
}

static GString *
exit_3 (gpointer data)
{
  _exit (3);
}

static GString *
hang (gpointer data)
{
  for (;;)
    pause ();
  return NULL;
}

START_TEST (test_run_isolated)
{
  char *why = NULL;
  GString *r = ps_cli_run_isolated (answer, (gpointer) " and more", 30, &why);
  ck_assert (r != NULL && why == NULL);
  ck_assert_str_eq (r->str, "P1 and more");
  g_string_free (r, TRUE);

  r = ps_cli_run_isolated (crash, NULL, 30, &why);
  ck_assert (r != NULL && r->len == 0);
  ck_assert_msg (why && g_str_has_prefix (why, "crashed (signal 9"), "%s", why);
  g_string_free (r, TRUE);
  g_clear_pointer (&why, g_free);

  r = ps_cli_run_isolated (exit_3, NULL, 30, &why);
  ck_assert_str_eq (why, "exited with status 3");
  g_string_free (r, TRUE);
  g_clear_pointer (&why, g_free);

  r = ps_cli_run_isolated (hang, NULL, 1, &why);
  ck_assert_str_eq (why, "timed out after 1 s");
  g_string_free (r, TRUE);
  g_free (why);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("cli");
  ps_check_case (s, "cli", 60, PS_CHECK_TESTS (test_run_isolated));
  return ps_check_run (s, CK_NOFORK);
}

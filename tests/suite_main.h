/* podsim — what every Check suite's main() shares.
 *
 * A suite builds its Suite and ends with `return ps_check_run (s, ...)`;
 * ps_check_case adds a test case to it. Header-only: each check_*.c is a
 * program of its own. */
#ifndef PS_TESTS_SUITE_MAIN_H
#define PS_TESTS_SUITE_MAIN_H

#include <check.h>

/* A test case named `name` in s, with a timeout in seconds (0: Check's
 * default, or CK_DEFAULT_TIMEOUT); add its tests with tcase_add_test. */
static inline TCase *
ps_check_case (Suite *s, const char *name, double timeout)
{
  TCase *tc = tcase_create (name);
  if (timeout > 0)
    tcase_set_timeout (tc, timeout);
  suite_add_tcase (s, tc);
  return tc;
}

/* Runs s and returns main's exit status: 0 when every test passed.
 * fork: CK_FORK_GETENV (Check's default: the CK_FORK variable decides),
 * CK_FORK or CK_NOFORK. */
static inline int
ps_check_run (Suite *s, enum fork_status fork)
{
  SRunner *sr = srunner_create (s);
  srunner_set_fork_status (sr, fork);
  srunner_run_all (sr, CK_NORMAL);
  int failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? 0 : 1;
}

#endif

/* suite_main.h: the runner every Check suite shares.
 *
 * Each check_<module>.c used to end with the same fifteen lines: create a
 * suite, create a test case, set its timeout, add the tests one call a line,
 * create a runner, run it, count the failures, free it and turn the count
 * into an exit status.  Those lines differed only in names, so they live here
 * once: a suite names its test cases as NULL-terminated tables of tests and
 * hands the suite to ps_check_run().
 *
 *   int
 *   main (void)
 *   {
 *     Suite *s = suite_create ("module");
 *     ps_check_case (s, "what_it_checks", 120,
 *                    PS_CHECK_TESTS (test_a, test_b));
 *     return ps_check_run (s, CK_FORK_GETENV);
 *   }
 *
 * ps_check_case() returns the test case (transfer none: the suite owns it) so
 * a suite can still add loop tests or fixtures after the table.  Header-only
 * because each suite is its own program; it includes <check.h> itself. */
#ifndef PS_TESTS_SUITE_MAIN_H
#define PS_TESTS_SUITE_MAIN_H

#include <check.h>
#include <stddef.h>

/* A NULL-terminated table of the tests a START_TEST block defines. */
#define PS_CHECK_TESTS(...) ((const TTest *const[]) { __VA_ARGS__, NULL })

/* Adds a test case NAME to S holding TESTS in their order; TIMEOUT_S 0
 * keeps Check's default timeout (CK_DEFAULT_TIMEOUT or 4 s). */
static inline TCase *
ps_check_case (Suite *s, const char *name, double timeout_s,
               const TTest *const *tests)
{
  TCase *tc = tcase_create (name);
  if (timeout_s > 0)
    tcase_set_timeout (tc, timeout_s);
  for (size_t i = 0; tests != NULL && tests[i] != NULL; i++)
    tcase_add_test (tc, tests[i]);
  suite_add_tcase (s, tc);
  return tc;
}

/* Runs S (transfer full) and returns the process exit status: 0 when every
 * test passed, 1 otherwise.  FORK is CK_FORK_GETENV for Check's default (the
 * CK_FORK environment variable), CK_FORK or CK_NOFORK to fix it. */
static inline int
ps_check_run (Suite *s, enum fork_status fork)
{
  SRunner *sr = srunner_create (s);
  if (fork != CK_FORK_GETENV)
    srunner_set_fork_status (sr, fork);
  srunner_run_all (sr, CK_NORMAL);
  int failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? 0 : 1;
}

#endif

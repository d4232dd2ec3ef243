/* Tests of the hardware-file loader (topology/hardware.c). */
#include "config.h"

#include <check.h>
#include <string.h>

#include "common/error.h"
#include "topology/hardware.h"

START_TEST (test_placeholder)
{
  g_autoptr (PsHardware) hw = ps_hardware_default ();
  ck_assert_ptr_nonnull (hw);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("hardware");
  TCase *tc = tcase_create ("core");
  tcase_add_test (tc, test_placeholder);
  suite_add_tcase (s, tc);
  SRunner *sr = srunner_create (s);
  srunner_run_all (sr, CK_NORMAL);
  int failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed ? 1 : 0;
}

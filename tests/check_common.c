/* common/: the overflow-checked arithmetic and the capped text reader that
 * every reader's bounds rest on (common/checked.h). */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/checked.h"
#include "common/error.h"

START_TEST (test_checked_arithmetic)
{
  int64_t r = 7;
  ck_assert (ps_checked_mul_i64 (INT64_C (1) << 31, INT64_C (1) << 31, &r));
  ck_assert_int_eq (r, INT64_C (1) << 62);
  ck_assert (!ps_checked_mul_i64 (INT64_C (1) << 32, INT64_C (1) << 32, &r));
  ck_assert_int_eq (r, INT64_C (1) << 62); /* unchanged on failure */
  ck_assert (!ps_checked_mul_i64 (-1, INT64_MIN, &r));
  ck_assert (ps_checked_add_i64 (INT64_MAX - 1, 1, &r) && r == INT64_MAX);
  ck_assert (!ps_checked_add_i64 (INT64_MAX, 1, &r));
  ck_assert (!ps_checked_add_i64 (INT64_MIN, -1, &r));
  uint64_t u = 0;
  ck_assert (!ps_checked_add_u64 (UINT64_MAX, 1, &u));
  ck_assert (ps_checked_add_u64 (UINT64_MAX - 1, 1, &u) && u == UINT64_MAX);
  ck_assert (!ps_checked_mul_u64 (UINT64_C (1) << 62, 4, &u));
  ck_assert (ps_checked_mul_u64 (UINT64_C (1) << 61, 4, &u) && u == UINT64_C (1) << 63);
}
END_TEST

START_TEST (test_checked_product)
{
  int64_t n = -1;
  const int64_t ok[] = { 1024, 1024, 1024, 1024 };
  ck_assert (ps_checked_product (4, ok, PS_MAX_ELEMENTS, &n) && n == PS_MAX_ELEMENTS);
  const int64_t over[] = { 1024, 1024, 1024, 1025 };
  ck_assert (!ps_checked_product (4, over, PS_MAX_ELEMENTS, &n));
  /* The product overflows int64 before it passes the limit: still refused. */
  const int64_t wrap[] = { INT64_C (1) << 32, INT64_C (1) << 32, 0x7fffffff };
  ck_assert (!ps_checked_product (3, wrap, INT64_MAX, &n));
  /* A zero dim makes any product 0, however large the others are. */
  const int64_t zero[] = { INT64_MAX, 0, INT64_MAX };
  ck_assert (ps_checked_product (3, zero, PS_MAX_ELEMENTS, &n) && n == 0);
  const int64_t neg[] = { 4, -1 };
  ck_assert (!ps_checked_product (2, neg, PS_MAX_ELEMENTS, &n));
  ck_assert (ps_checked_product (0, NULL, 1, &n) && n == 1);
}
END_TEST

static char *
temp_file (const char *data, gsize len)
{
  char *path = NULL;
  int fd = g_file_open_tmp ("check_common-XXXXXX", &path, NULL);
  ck_assert (fd >= 0);
  ck_assert (write (fd, data, len) == (ssize_t) len);
  close (fd);
  return path;
}

START_TEST (test_read_text_file)
{
  g_autofree char *path = temp_file ("HloModule m\n", 12);
  char *text = NULL;
  gsize len = 0;
  GError *error = NULL;
  ck_assert (ps_read_text_file (path, 12, &text, &len, &error));
  ck_assert_int_eq (len, 12);
  ck_assert_str_eq (text, "HloModule m\n");
  g_free (text);
  /* One byte over the cap: refused, naming the file. */
  ck_assert (!ps_read_text_file (path, 11, &text, &len, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_PARSE));
  ck_assert_msg (strstr (error->message, path) && strstr (error->message, "larger than 11 bytes"),
                 "%s", error->message);
  g_clear_error (&error);
  unlink (path);
  /* A NUL byte: not text (/dev/zero fails on its first block). */
  g_autofree char *bin = temp_file ("ab\0cd", 5);
  ck_assert (!ps_read_text_file (bin, 1024, &text, &len, &error));
  ck_assert_msg (strstr (error->message, "not a text file (NUL byte at offset 2)"), "%s", error->message);
  g_clear_error (&error);
  unlink (bin);
  if (g_file_test ("/dev/zero", G_FILE_TEST_EXISTS))
    {
      ck_assert (!ps_read_text_file ("/dev/zero", PS_MAX_TEXT_BYTES, &text, &len, &error));
      ck_assert_str_eq (error->message, "/dev/zero: not a text file (NUL byte at offset 0)");
      g_clear_error (&error);
    }
  ck_assert (!ps_read_text_file ("/nonexistent/x.hlo", 1024, &text, &len, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_IO));
  ck_assert_msg (strstr (error->message, "/nonexistent/x.hlo: cannot open"), "%s", error->message);
  g_clear_error (&error);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("common");
  TCase *tc = tcase_create ("core");
  tcase_add_test (tc, test_checked_arithmetic);
  tcase_add_test (tc, test_checked_product);
  tcase_add_test (tc, test_read_text_file);
  suite_add_tcase (s, tc);
  SRunner *sr = srunner_create (s);
  srunner_run_all (sr, CK_NORMAL);
  int failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? 0 : 1;
}

/* common/: the 16-bit float conversions (rounding, overflow, subnormals,
 * NaN handling) and the N-dimensional index helpers. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <string.h>

#include "common/float16.h"
#include "common/ndindex.h"

static uint32_t
bits (float x)
{
  uint32_t u;
  memcpy (&u, &x, 4);
  return u;
}

static float
from_bits (uint32_t u)
{
  float x;
  memcpy (&x, &u, 4);
  return x;
}

START_TEST (test_bf16_rounding)
{
  ck_assert_uint_eq (ps_f32_to_bf16 (1.0f), 0x3f80);
  /* 1 + 2^-8 lies halfway between 1 (0x3f80, even) and 1 + 2^-7: ties to even. */
  ck_assert_uint_eq (ps_f32_to_bf16 (1.0f + 0x1p-8f), 0x3f80);
  /* 1 + 3*2^-8 halfway between 0x3f81 (odd) and 0x3f82 (even): up. */
  ck_assert_uint_eq (ps_f32_to_bf16 (1.0f + 3 * 0x1p-8f), 0x3f82);
  /* Just above the tie rounds up. */
  ck_assert_uint_eq (ps_f32_to_bf16 (1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  ck_assert_uint_eq (ps_f32_to_bf16 (-1.0f - 0x1p-8f - 0x1p-20f), 0xbf81);
  /* The largest f32 rounds to infinity; infinities stay. */
  ck_assert_uint_eq (ps_f32_to_bf16 (3.4028234663852886e38f), 0x7f80);
  ck_assert_uint_eq (ps_f32_to_bf16 (-INFINITY), 0xff80);
  ck_assert (ps_bf16_to_f32 (0x4049) == 3.140625f);
  /* Every bf16 widens exactly and narrows back to itself (NaNs aside). */
  for (uint32_t h = 0; h < 0x10000; h++)
    if ((h & 0x7fff) <= 0x7f80)
      ck_assert_uint_eq (ps_f32_to_bf16 (ps_bf16_to_f32 ((uint16_t) h)), h);
}
END_TEST

START_TEST (test_f16_rounding)
{
  ck_assert_uint_eq (ps_f32_to_f16 (1.0f), 0x3c00);
  ck_assert_uint_eq (ps_f32_to_f16 (65504.0f), 0x7bff);
  /* 65520 is halfway between 65504 and 65536 (not representable): to inf. */
  ck_assert_uint_eq (ps_f32_to_f16 (65520.0f), 0x7c00);
  ck_assert_uint_eq (ps_f32_to_f16 (65519.0f), 0x7bff);
  ck_assert_uint_eq (ps_f32_to_f16 (-1e10f), 0xfc00);
  /* Subnormals: 2^-24 is the smallest; 2^-25 ties to 0 (even); 3*2^-25 to 2*2^-24. */
  ck_assert_uint_eq (ps_f32_to_f16 (0x1p-24f), 0x0001);
  ck_assert_uint_eq (ps_f32_to_f16 (0x1p-25f), 0x0000);
  ck_assert_uint_eq (ps_f32_to_f16 (3 * 0x1p-25f), 0x0002);
  /* The largest subnormal plus half an ulp rounds to the smallest normal. */
  ck_assert_uint_eq (ps_f32_to_f16 (0x3ffp-24f + 0x1p-25f), 0x0400);
  ck_assert_uint_eq (ps_f32_to_f16 (-2.0f), 0xc000);
  ck_assert_uint_eq (ps_f32_to_f16 (-0.0f), 0x8000);
  ck_assert (ps_f16_to_f32 (0x3555) == 0.333251953125f);
  ck_assert (ps_f16_to_f32 (0x0001) == 0x1p-24f);
  ck_assert (ps_f16_to_f32 (0xfc00) == -INFINITY);
  for (uint32_t h = 0; h < 0x10000; h++)
    if ((h & 0x7fff) <= 0x7c00)
      ck_assert_uint_eq (ps_f32_to_f16 (ps_f16_to_f32 ((uint16_t) h)), h);
}
END_TEST

/* The decision (float16.h): narrowing gives the canonical quiet NaN with
 * the input's sign, payload dropped; widening keeps every bit. */
START_TEST (test_nan_handling)
{
  float qnan = from_bits (0x7fc00000u), snan = from_bits (0x7f800001u);
  float neg_payload = from_bits (0xffc12345u);
  ck_assert_uint_eq (ps_f32_to_bf16 (qnan), 0x7fc0);
  ck_assert_uint_eq (ps_f32_to_bf16 (snan), 0x7fc0);   /* not rounded to infinity */
  ck_assert_uint_eq (ps_f32_to_bf16 (neg_payload), 0xffc0);
  ck_assert_uint_eq (ps_f32_to_f16 (qnan), 0x7e00);
  ck_assert_uint_eq (ps_f32_to_f16 (snan), 0x7e00);
  ck_assert_uint_eq (ps_f32_to_f16 (neg_payload), 0xfe00);
  /* Widening: payload and sign kept, bit for bit. */
  ck_assert_uint_eq (bits (ps_bf16_to_f32 (0xffa5)), 0xffa50000u);
  ck_assert_uint_eq (bits (ps_f16_to_f32 (0xfd23)), 0xffa46000u);
  ck_assert (isnan (ps_f16_to_f32 (0x7c01)));
}
END_TEST

START_TEST (test_ndindex)
{
  int64_t d[3] = { 2, 3, 4 };
  ck_assert_int_eq (ps_product (3, d), 24);
  ck_assert_int_eq (ps_product (0, d), 1);
  ck_assert_int_eq (ps_ceil_div (7, 2), 4);
  ck_assert_int_eq (ps_ceil_div (6, 2), 3);
  ck_assert_int_eq (ps_ceil_div (-7, 2), -3);
  ck_assert_int_eq (ps_floor_div (-7, 2), -4);
  ck_assert_int_eq (ps_floor_div (7, 2), 3);
  ck_assert_int_eq (ps_ceil_div (0, 5), 0);
  int64_t st[3];
  ps_row_major_strides (3, d, st);
  ck_assert (st[0] == 12 && st[1] == 4 && st[2] == 1);
  /* The odometer visits every index once in row-major order. */
  int64_t idx[3] = { 0 }, n = 0;
  do
    {
      ck_assert_int_eq (idx[0] * st[0] + idx[1] * st[1] + idx[2] * st[2], n);
      n++;
    }
  while (ps_index_next (3, d, idx));
  ck_assert_int_eq (n, 24);
  ck_assert (idx[0] == 0 && idx[1] == 0 && idx[2] == 0);
  ck_assert (!ps_index_next (0, d, idx));
  /* Transpose [2,3,4] by (2,0,1): out[k][i][j] = in[i][j][k]. */
  int64_t in[24], perm[3] = { 2, 0, 1 };
  for (int i = 0; i < 24; i++)
    in[i] = i;
  g_autofree int64_t *out = ps_transpose_row_major (in, 3, d, perm);
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++)
        ck_assert_int_eq (out[k * 6 + i * 3 + j], in[i * 12 + j * 4 + k]);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("common");
  TCase *tc = tcase_create ("common");
  tcase_add_test (tc, test_bf16_rounding);
  tcase_add_test (tc, test_f16_rounding);
  tcase_add_test (tc, test_nan_handling);
  tcase_add_test (tc, test_ndindex);
  suite_add_tcase (s, tc);
  SRunner *sr = srunner_create (s);
  srunner_run_all (sr, CK_NORMAL);
  int failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? 0 : 1;
}

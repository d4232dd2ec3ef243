/* common/: the overflow-checked arithmetic and the capped text reader that
 * every reader's bounds rest on (common/checked.h); the 16-bit float
 * conversions (rounding, overflow, subnormals, NaN handling; float16.h) and
 * the N-dimensional index helpers (ndindex.h). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/suite_main.h"
#include "common/params.h"
#include "common/checked.h"
#include "common/error.h"
#include "common/float16.h"
#include "common/ndindex.h"

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
/* The fp8 formats, codes worked out from the OCP FP8 layout: e4m3fn
 * 1.0 = 0.0111.000 (0x38), largest 448 = 0.1111.110 (0x7e), NaN 0x7f,
 * smallest subnormal 2^-9 (0x01); e5m2 1.0 = 0.01111.00 (0x3c), largest
 * 57344 (0x7b), infinity 0x7c. Ties go to the even code. */
START_TEST (test_f8_rounding)
{
  ck_assert_uint_eq (ps_f32_to_f8e4m3fn (1.0f), 0x38);
  ck_assert_uint_eq (ps_f32_to_f8e4m3fn (-1.0f), 0xb8);
  ck_assert_uint_eq (ps_f32_to_f8e4m3fn (448.0f), 0x7e);
  ck_assert_uint_eq (ps_f32_to_f8e4m3fn (460.0f), 0x7e);   /* below 448 + 16 */
  ck_assert_uint_eq (ps_f32_to_f8e4m3fn (464.0f), 0x7f);   /* rounds past: NaN */
  ck_assert_uint_eq (ps_f32_to_f8e4m3fn (1e9f), 0x7f);
  ck_assert_uint_eq (ps_f32_to_f8e4m3fn (NAN), 0x7f);
  ck_assert_uint_eq (ps_f32_to_f8e4m3fn (0x1p-9f), 0x01);
  ck_assert_uint_eq (ps_f32_to_f8e4m3fn (1.0625f), 0x38);  /* tie: even */
  ck_assert_uint_eq (ps_f32_to_f8e4m3fn (1.1875f), 0x3a);  /* tie: even */
  ck_assert (ps_f8e4m3fn_to_f32 (0x7e) == 448.0f);
  ck_assert (isnan (ps_f8e4m3fn_to_f32 (0xff)));
  ck_assert (ps_f8e4m3fn_to_f32 (0x01) == 0x1p-9f);
  ck_assert_uint_eq (ps_f32_to_f8e5m2 (1.0f), 0x3c);
  ck_assert_uint_eq (ps_f32_to_f8e5m2 (57344.0f), 0x7b);
  ck_assert_uint_eq (ps_f32_to_f8e5m2 (61440.0f), 0x7c);   /* 57344 + 4096: infinity */
  ck_assert_uint_eq (ps_f32_to_f8e5m2 (-INFINITY), 0xfc);
  ck_assert_uint_eq (ps_f32_to_f8e5m2 (0x1p-16f), 0x01);
  ck_assert (isinf (ps_f8e5m2_to_f32 (0x7c)));
  ck_assert (isnan (ps_f8e5m2_to_f32 (0x7e)));
  /* every finite code reads back to itself */
  for (int c = 0; c < 256; c++)
    {
      float a = ps_f8e4m3fn_to_f32 ((uint8_t) c), b = ps_f8e5m2_to_f32 ((uint8_t) c);
      if (!isnan (a))
        ck_assert_uint_eq (ps_f32_to_f8e4m3fn (a), (uint8_t) c);
      if (!isnan (b))
        ck_assert_uint_eq (ps_f32_to_f8e5m2 (b), (uint8_t) c);
    }
}
END_TEST

/* XLA's other narrow floats (ml_dtypes' definitions, float16.h). */
START_TEST (test_minifloat_formats)
{
  const PsMinifloat e4m3 = { 4, 3, 7, PS_MF_IEEE }, e3m4 = { 3, 4, 3, PS_MF_IEEE };
  const PsMinifloat e4m3fnuz = { 4, 3, 8, PS_MF_FNUZ }, e5m2fnuz = { 5, 2, 16, PS_MF_FNUZ };
  const PsMinifloat e4m3b11 = { 4, 3, 11, PS_MF_FNUZ }, e2m1 = { 2, 1, 1, PS_MF_FINITE };
  const PsMinifloat e8m0 = { 8, 0, 127, PS_MF_UNSIGNED };
  /* f8e4m3: IEEE, largest 240, infinity from 248 (240 + half of 16) */
  ck_assert (ps_minifloat_decode (&e4m3, 0x77) == 240.0f);
  ck_assert_uint_eq (ps_minifloat_encode (&e4m3, 247.0f), 0x77);
  ck_assert_uint_eq (ps_minifloat_encode (&e4m3, 248.0f), 0x78);
  ck_assert (isinf (ps_minifloat_decode (&e4m3, 0xf8)) && ps_minifloat_decode (&e4m3, 0xf8) < 0);
  ck_assert (isnan (ps_minifloat_decode (&e4m3, 0x7c)));
  /* f8e3m4: largest 15.5, smallest 2^-6 */
  ck_assert (ps_minifloat_decode (&e3m4, 0x6f) == 15.5f);
  ck_assert (ps_minifloat_decode (&e3m4, 0x01) == 0x1p-6f);
  /* fnuz: 0x80 is the NaN, -0 becomes +0, largest 240 / 57344 / 30 */
  ck_assert (isnan (ps_minifloat_decode (&e4m3fnuz, 0x80)));
  ck_assert_uint_eq (ps_minifloat_encode (&e4m3fnuz, -0.0f), 0x00);
  ck_assert_uint_eq (ps_minifloat_encode (&e4m3fnuz, NAN), 0x80);
  ck_assert_uint_eq (ps_minifloat_encode (&e4m3fnuz, 1e6f), 0x80);
  ck_assert (ps_minifloat_decode (&e4m3fnuz, 0x7f) == 240.0f);
  ck_assert (ps_minifloat_decode (&e5m2fnuz, 0x7f) == 57344.0f);
  ck_assert (ps_minifloat_decode (&e4m3b11, 0x7f) == 30.0f);
  ck_assert (ps_minifloat_decode (&e4m3b11, 0x08) == 0x1p-10f);
  ck_assert_uint_eq (ps_minifloat_encode (&e4m3b11, -1.0f), 0xd8);
  /* f4e2m1fn: 0 0.5 1 1.5 2 3 4 6; 5 ties to the even code (4); no
   * infinity or NaN: past 6 saturates */
  const float e2m1_values[8] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6 };
  for (int c = 0; c < 8; c++)
    {
      ck_assert (ps_minifloat_decode (&e2m1, (uint8_t) c) == e2m1_values[c]);
      ck_assert (ps_minifloat_decode (&e2m1, (uint8_t) (c | 8)) == -e2m1_values[c]);
    }
  ck_assert_uint_eq (ps_minifloat_encode (&e2m1, 5.0f), 0x6);
  ck_assert_uint_eq (ps_minifloat_encode (&e2m1, 100.0f), 0x7);
  ck_assert_uint_eq (ps_minifloat_encode (&e2m1, -INFINITY), 0xf);
  ck_assert_uint_eq (ps_minifloat_encode (&e2m1, 0.3f), 0x1);
  /* f8e8m0fnu: powers of two 2^-127..2^127, 0xff NaN, no zero, no sign */
  ck_assert (ps_minifloat_decode (&e8m0, 127) == 1.0f);
  ck_assert (ps_minifloat_decode (&e8m0, 0) == 0x1p-127f);
  ck_assert (ps_minifloat_decode (&e8m0, 254) == 0x1p127f);
  ck_assert (isnan (ps_minifloat_decode (&e8m0, 255)));
  ck_assert_uint_eq (ps_minifloat_encode (&e8m0, 3.0f), 128);  /* tie: even */
  ck_assert_uint_eq (ps_minifloat_encode (&e8m0, 3.5f), 129);
  ck_assert_uint_eq (ps_minifloat_encode (&e8m0, -1.0f), 255);
  ck_assert_uint_eq (ps_minifloat_encode (&e8m0, 0.0f), 255);
  /* every code that is a number reads back to itself */
  const PsMinifloat *all[] = { &e4m3, &e3m4, &e4m3fnuz, &e5m2fnuz, &e4m3b11, &e2m1, &e8m0 };
  for (gsize k = 0; k < G_N_ELEMENTS (all); k++)
    {
      int codes = all[k]->kind == PS_MF_UNSIGNED ? 256 : 2 << (all[k]->ebits + all[k]->mbits);
      for (int c = 0; c < codes; c++)
        {
          float v = ps_minifloat_decode (all[k], (uint8_t) c);
          if (isnan (v) || (v == 0 && c != 0))
            continue; /* NaNs; -0 (fnuz has none, f4e2m1fn's reads as 0x8) */
          ck_assert_uint_eq (ps_minifloat_encode (all[k], v), (uint8_t) c);
        }
    }
}
END_TEST

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

START_TEST (test_parse_name)
{
  static const char *const names[] = { "xla", "xla-all", "sync" };
  int v = -1;
  ck_assert (ps_parse_name ("xla-all", names, 3, "--x", "thing", &v, NULL));
  ck_assert_int_eq (v, 1);
  GError *error = NULL;
  ck_assert (!ps_parse_name ("xl", names, 3, "--x", "thing", &v, &error));
  ck_assert_str_eq (error->message, "--x: unknown thing 'xl' (xla, xla-all, sync)");
  ck_assert_int_eq (v, 1);
  g_clear_error (&error);
  ck_assert (!ps_parse_name (NULL, names, 3, "--x", "thing", &v, NULL));
}
END_TEST

/* A spec whose choices are a module's name table gets its choice list
 * and its doc from that table. */
static const char *const colours[] = { "red", "green", "blue", NULL };
static const char *const colour_docs[] = { "warm", NULL, "cold" };
static const PsParamSpec colour_spec = {
  .section = "options", .key = "colour_mode", .type = PS_PARAM_CHOICE, .def = "green",
  .doc = "Colour", .choice_names = colours, .choice_docs = colour_docs
};
static const PsParamSpec count_spec = {
  .section = "model", .key = "count", .type = PS_PARAM_INT, .def = "2", .doc = "How many",
  .min = 1, .max = 10
};
static const PsParamSpec mesh_spec = {
  .section = "model", .key = "mesh", .type = PS_PARAM_MESH, .def = "2x4", .doc = "Mesh",
  .min = 1, .max = 2
};
static const PsParamSpec *const test_specs[] = { &count_spec, &colour_spec, &mesh_spec };

START_TEST (test_params_choices_from_names)
{
  ck_assert_str_eq (ps_param_choices (&colour_spec), "red|green|blue");
  ck_assert_str_eq (ps_param_doc (&colour_spec), "Colour: red (warm), green, blue (cold)");
  ck_assert_str_eq (ps_param_option (&colour_spec), "colour-mode");
  g_autoptr (GString) doc = g_string_new (NULL);
  ps_param_append_doc (doc, &colour_spec);
  ck_assert_str_eq (doc->str, "# Colour: red (warm), green, blue (cold) (red green blue)\n");
}
END_TEST

START_TEST (test_params_store_checks_values)
{
  g_autoptr (PsParamStore) st = ps_param_store_new (test_specs, 3, "test");
  int c = ps_param_store_find (st, "colour-mode"), n = ps_param_store_find (st, "count");
  ck_assert_int_eq (c, 1);
  ck_assert_int_eq (ps_param_store_find (st, "colour_mode"), 1);
  ck_assert_int_eq (ps_param_store_find (st, "nope"), -1);
  ck_assert_str_eq (ps_param_store_str (st, c), "green");
  ck_assert_str_eq (ps_param_store_where (st, c), "--colour-mode");
  GError *error = NULL;
  ck_assert (ps_param_store_set (st, c, "blue", "run.ini:3:9", &error));
  ck_assert_str_eq (ps_param_store_str (st, c), "blue");
  ck_assert_str_eq (ps_param_store_where (st, c), "run.ini:3:9: colour_mode");
  ck_assert (!ps_param_store_set (st, c, "pink", "--colour-mode", &error));
  ck_assert_str_eq (error->message, "--colour-mode: 'pink' is not one of red, green, blue");
  g_clear_error (&error);
  ck_assert (!ps_param_store_set (st, n, "0", "--count", &error));
  ck_assert_str_eq (error->message, "--count must be positive (got 0)");
  g_clear_error (&error);
  ck_assert (!ps_param_store_set (st, n, "11", "f.ini:1:9", &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_PARSE));
  ck_assert_str_eq (error->message, "f.ini:1:9: count must be at most 10 (got 11)");
  g_clear_error (&error);
  /* Beyond int64: a huge negative gets the range, not "at most". */
  ck_assert (!ps_param_store_set (st, n, "-99999999999999999999", "--count", &error));
  ck_assert_str_eq (error->message, "--count must be in 1 .. 10 (got -99999999999999999999)");
  g_clear_error (&error);
  ck_assert (!ps_param_store_set (st, n, "99999999999999999999", "--count", &error));
  ck_assert_str_eq (error->message, "--count must be at most 10 (got 99999999999999999999)");
  g_clear_error (&error);
  int m = ps_param_store_find (st, "mesh");
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  ck_assert_int_eq (ps_param_store_mesh (st, m, dims), 2);
  ck_assert_int_eq (dims[1], 4);
  ck_assert (!ps_param_store_set (st, m, "2x2x2", "--mesh", &error));
  ck_assert_str_eq (error->message, "--mesh: '2x2x2' has 3 dims, this model takes 1 to 2");
  g_clear_error (&error);
  /* A copy is independent of the original. */
  g_autoptr (PsParamStore) cp = ps_param_store_copy (st);
  ck_assert (ps_param_store_set (cp, c, "red", "--colour-mode", NULL));
  ck_assert_str_eq (ps_param_store_str (st, c), "blue");
  g_autofree char *text = ps_param_store_text (cp, c);
  ck_assert_str_eq (text, "red");
}
END_TEST

static gboolean
count_entry (const char *section, const char *key, const char *value, const PsIniPos *at, gpointer data,
             GError **error)
{
  GString *seen = data;
  (void) error;
  g_string_append_printf (seen, "%s.%s=%s@%d:%d:%d;", section, key, value, at->line, at->key_col, at->value_col);
  return TRUE;
}

START_TEST (test_ini_walk_positions_and_errors)
{
  static const char *const known[] = { "model", "options", NULL };
  static const char *const extra[] = { "vary", NULL };
  g_autoptr (GString) seen = g_string_new (NULL);
  GError *error = NULL;
  ck_assert (ps_ini_walk ("a.ini", "# c\n[model]\n  k =  v  \n[vary]\nx=1", known, extra, count_entry, seen,
                          &error));
  ck_assert_str_eq (seen->str, "model.k=v@3:3:8;vary.x=1@5:1:3;");
  ck_assert (!ps_ini_walk ("a.ini", "[model]\n[other]\n", known, extra, count_entry, seen, &error));
  ck_assert_str_eq (error->message, "a.ini:2:2: unknown section [other] (known: model, options, vary)");
  g_clear_error (&error);
  ck_assert (!ps_ini_walk ("a.ini", "k = v\n", known, NULL, count_entry, seen, &error));
  ck_assert_str_eq (error->message, "a.ini:1:1: a key before the first [section]");
  g_clear_error (&error);
  gboolean found = FALSE;
  g_autoptr (GPtrArray) e = ps_ini_collect_section ("a.ini", "[model]\n[vary]\n", known, extra, "vary", &found,
                                                    &error);
  ck_assert (e && e->len == 0 && found);
}
END_TEST

typedef struct {
  int count;
  int64_t big;
  double x;
  gboolean on;
  const char *mode;
  int64_t mesh[3];
} FillConfig;

static const PsParamSpec fill_specs[] = {
  { .section = "model", .key = "count", .type = PS_PARAM_INT, .def = "3", .doc = "c", .min = 0, .max = 9,
    PS_PARAM_FIELD (FillConfig, count) },
  { .section = "model", .key = "big", .type = PS_PARAM_INT, .def = "5000000000", .doc = "b", .max = G_MAXINT64,
    PS_PARAM_FIELD (FillConfig, big) },
  { .section = "model", .key = "x", .type = PS_PARAM_FLOAT, .def = "0.5", .doc = "x", .max = 1,
    PS_PARAM_FIELD (FillConfig, x) },
  { .section = "model", .key = "on", .type = PS_PARAM_BOOL, .def = "true", .doc = "o",
    PS_PARAM_FIELD (FillConfig, on) },
  { .section = "model", .key = "mode", .type = PS_PARAM_CHOICE, .def = "b", .doc = "m", .choices = "a|b",
    PS_PARAM_FIELD (FillConfig, mode) },
  { .section = "model", .key = "mesh", .type = PS_PARAM_MESH, .def = "2x4", .doc = "m", .min = 1, .max = 3,
    PS_PARAM_FIELD (FillConfig, mesh) },
  { .section = "model", .key = "unbound", .type = PS_PARAM_INT, .def = "7", .doc = "u", .max = 9 },
};

/* A config_from is one loop: every value lands in its field, in its type. */
START_TEST (test_params_fill_config_fields)
{
  const PsParamSpec *list[G_N_ELEMENTS (fill_specs)];
  for (gsize i = 0; i < G_N_ELEMENTS (fill_specs); i++)
    list[i] = &fill_specs[i];
  g_autoptr (PsParamStore) st = ps_param_store_new (list, G_N_ELEMENTS (fill_specs), "test");
  FillConfig c;
  memset (&c, 0xff, sizeof c);
  ps_param_store_fill (st, &c);
  ck_assert_int_eq (c.count, 3);
  ck_assert_int_eq (c.big, 5000000000);
  ck_assert (c.x == 0.5);
  ck_assert (c.on == TRUE);
  ck_assert_str_eq (c.mode, "b");
  ck_assert_int_eq (c.mesh[0], 2);
  ck_assert_int_eq (c.mesh[1], 4);
  ck_assert_int_eq (c.mesh[2], 0);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("common");
  ps_check_case (s, "helpers", 0,
                 PS_CHECK_TESTS (test_checked_arithmetic, test_checked_product,
                                 test_read_text_file, test_bf16_rounding,
                                 test_f16_rounding, test_nan_handling,
                                 test_f8_rounding, test_minifloat_formats,
                                 test_ndindex, test_parse_name));
  ps_check_case (s, "params", 0,
                 PS_CHECK_TESTS (test_params_choices_from_names,
                                 test_params_store_checks_values,
                                 test_ini_walk_positions_and_errors,
                                 test_params_fill_config_fields));
  return ps_check_run (s, CK_FORK_GETENV);
}

/* Check suite of the reference interpreter and the verification driver.
 * Expected values are worked out by hand in the comments. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/ir/async.h"
#include "partitioner/interp/interp.h"
#include "partitioner/ir/sharding.h"
#include "partitioner/interp/verify.h"

static PsModule *
parse (const char *text)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (text, strlen (text), "test.hlo", &error);
  if (!m)
    ck_abort_msg ("parse failed: %s", error->message);
  return m;
}

static PsValue *
arr (PsElemType t, int rank, const int64_t *dims, const double *data)
{
  return ps_value_new_from_doubles (t, rank, dims, data);
}

/* Runs a single-device module and returns its result. */
static PsValue *
run1 (const char *text, int n, PsValue **args)
{
  PsModule *m = parse (text);
  GError *error = NULL;
  PsValue *r = ps_interp_run (m, n, args, NULL, &error);
  if (!r)
    ck_abort_msg ("run failed: %s", error->message);
  ps_module_free (m);
  return r;
}

static void
expect_values (const PsValue *v, int n, const double *want)
{
  ck_assert_int_eq (v->n, n);
  for (int i = 0; i < n; i++)
    ck_assert_msg (ps_value_get (v, i) == want[i], "element %d: got %.9g, want %.9g", i,
                   ps_value_get (v, i), want[i]);
}

static void
free_args (int n, PsValue **a)
{
  for (int i = 0; i < n; i++)
    ps_value_free (a[i]);
}

/* ---- rounding ----------------------------------------------------------------- */

/* The conversions themselves are tested in check_common (common/float16.h);
 * here the interpreter's rounding of values to a type. */
START_TEST (test_etype_round)
{
  ck_assert (ps_etype_round (PS_BF16, 3.14159265) == 3.140625);
  ck_assert (ps_etype_round (PS_F16, 1.0 / 3.0) == 0.333251953125);
  ck_assert (ps_etype_round (PS_F16, 65520.0) == INFINITY);
  ck_assert (isnan (ps_etype_round (PS_BF16, NAN)));
}
END_TEST

START_TEST (test_convert_bf16_op)
{
  int64_t d[1] = { 4 };
  /* 1+2^-8 -> 1 (tie to even); 1+3*2^-8 -> 1+2^-6; 257 -> 256 (tie, even); 259 -> 260. */
  double in[4] = { 1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, 257, 259 };
  PsValue *a[1] = { arr (PS_F32, 1, d, in) };
  PsValue *r = run1 ("HloModule m\nENTRY e {\n p = f32[4] parameter(0)\n"
                     " ROOT c = bf16[4] convert(p)\n}\n", 1, a);
  double want[4] = { 1.0, 1.0 + 0x1p-6, 256, 260 };
  expect_values (r, 4, want);
  ps_value_free (r);
  /* bf16 arithmetic rounds every result: 256 + 1 = 256 in bf16. */
  PsValue *r2 = run1 ("HloModule m\nENTRY e {\n a = bf16[] constant(256)\n b = bf16[] constant(1)\n"
                      " ROOT s = bf16[] add(a, b)\n}\n", 0, NULL);
  ck_assert (r2->f[0] == 256);
  ps_value_free (r2);
  /* A bf16 reduce accumulates in f32: 256 + 1 + 1 + 1 + 1 = 260 exactly
   * (step-by-step bf16 would stay at 256), then rounds once. */
  r2 = run1 ("HloModule m\nadd {\n x = bf16[] parameter(0)\n y = bf16[] parameter(1)\n"
             " ROOT s = bf16[] add(x, y)\n}\nENTRY e {\n"
             " a = bf16[5] constant({256, 1, 1, 1, 1})\n z = bf16[] constant(0)\n"
             " ROOT r = bf16[] reduce(a, z), dimensions={0}, to_apply=add\n}\n", 0, NULL);
  ck_assert (r2->f[0] == 260);
  ps_value_free (r2);
  free_args (1, a);
}
END_TEST

START_TEST (test_integer_semantics)
{
  /* s32 wraps; x/0 = -1; INT_MIN/-1 = INT_MIN; x%0 = x; shifts past the width. */
  PsValue *r = run1 ("HloModule m\nENTRY e {\n"
                     " a = s32[4] constant({2147483647, 7, -2147483648, 9})\n"
                     " b = s32[4] constant({1, 0, -1, 0})\n"
                     " s = s32[4] add(a, b)\n d = s32[4] divide(a, b)\n q = s32[4] remainder(a, b)\n"
                     " k = s32[4] constant({1, 31, 32, -1})\n"
                     " l = s32[4] shift-left(b, k)\n r = s32[4] shift-right-arithmetic(a, k)\n"
                     " ROOT t = (s32[4], s32[4], s32[4], s32[4], s32[4]) tuple(s, d, q, l, r)\n}\n", 0, NULL);
  ck_assert_int_eq (r->n_elems, 5);
  double s[4] = { -2147483648.0, 7, 2147483647.0, 9 };
  double d[4] = { 2147483647.0, -1, -2147483648.0, -1 };
  double q[4] = { 0, 7, 0, 9 };
  /* 1<<1 = 2; 0<<31 = 0; -1<<32 = 0 (out of range); 0<<-1 = 0. */
  double l[4] = { 2, 0, 0, 0 };
  /* INT_MAX>>1; 7>>31 = 0; INT_MIN>>32 = -1 (sign fill); 9>>-1 = 0. */
  double sr[4] = { 1073741823, 0, -1, 0 };
  expect_values (r->elems[0], 4, s);
  expect_values (r->elems[1], 4, d);
  expect_values (r->elems[2], 4, q);
  expect_values (r->elems[3], 4, l);
  expect_values (r->elems[4], 4, sr);
  ps_value_free (r);
}
END_TEST

START_TEST (test_select_clamp_compare_bitcast)
{
  PsValue *r = run1 ("HloModule m\nENTRY e {\n"
                     " a = f32[4] constant({-3, 0.5, 2, 7})\n lo = f32[] constant(0)\n hi = f32[] constant(5)\n"
                     " c = f32[4] clamp(lo, a, hi)\n"
                     " z = f32[4] constant({0, 0, 0, 0})\n g = pred[4] compare(a, z), direction=GT\n"
                     " s = f32[4] select(g, a, z)\n"
                     " one = f32[] constant(1)\n bc = s32[] bitcast-convert(one)\n"
                     " ROOT t = (f32[4], pred[4], f32[4], s32[]) tuple(c, g, s, bc)\n}\n", 0, NULL);
  double c[4] = { 0, 0.5, 2, 5 }, g[4] = { 0, 1, 1, 1 }, s[4] = { 0, 0.5, 2, 7 };
  double bc[1] = { 1065353216 }; /* 0x3f800000 */
  expect_values (r->elems[0], 4, c);
  expect_values (r->elems[1], 4, g);
  expect_values (r->elems[2], 4, s);
  expect_values (r->elems[3], 1, bc);
  ps_value_free (r);
}
END_TEST

/* ---- data movement --------------------------------------------------------------- */

START_TEST (test_pad_negative_interior)
{
  /* {1,2,3} padded lo=-1 hi=2 interior=1 with 0:
   * interior: 1 0 2 0 3; drop one at the front: 0 2 0 3; two at the end: 0 2 0 3 0 0. */
  PsValue *r = run1 ("HloModule m\nENTRY e {\n a = s32[3] constant({1, 2, 3})\n z = s32[] constant(0)\n"
                     " ROOT p = s32[6] pad(a, z), padding=-1_2_1\n}\n", 0, NULL);
  double want[6] = { 0, 2, 0, 3, 0, 0 };
  expect_values (r, 6, want);
  ps_value_free (r);
}
END_TEST

START_TEST (test_slices_and_friends)
{
  /* iota [2,3] along dim 1: {{0,1,2},{0,1,2}}; transpose -> [3,2];
   * reverse dim 0 of a = {{1,2,3},{4,5,6}} -> {{4,5,6},{1,2,3}};
   * dynamic-slice with start (1, 2) clamped to (0, 1) for a 2x2 window:
   * {{2,3},{5,6}}; dynamic-update-slice of {{9}} at (5, -3) clamped to (1,0). */
  PsValue *r = run1 ("HloModule m\nENTRY e {\n"
                     " a = s32[2,3] constant({{1,2,3},{4,5,6}})\n"
                     " i = s32[2,3] iota(), iota_dimension=1\n"
                     " t = s32[3,2] transpose(a), dimensions={1,0}\n"
                     " v = s32[2,3] reverse(a), dimensions={0}\n"
                     " s1 = s32[] constant(1)\n s2 = s32[] constant(2)\n"
                     " ds = s32[2,2] dynamic-slice(a, s1, s2), dynamic_slice_sizes={2,2}\n"
                     " u = s32[1,1] constant({{9}})\n s5 = s32[] constant(5)\n sm = s32[] constant(-3)\n"
                     " dus = s32[2,3] dynamic-update-slice(a, u, s5, sm)\n"
                     " sl = s32[1,2] slice(a), slice={[1:2], [0:3:2]}\n"
                     " u2 = s32[2,1] constant({{7},{8}})\n"
                     " c = s32[2,4] concatenate(a, u2), dimensions={1}\n"
                     " b = s32[2,2,3] broadcast(a), dimensions={0,2}\n"
                     " ROOT out = (s32[2,3], s32[3,2], s32[2,3], s32[2,2], s32[2,3], s32[1,2], s32[2,4], s32[2,2,3])"
                     " tuple(i, t, v, ds, dus, sl, c, b)\n}\n", 0, NULL);
  double i[6] = { 0, 1, 2, 0, 1, 2 };
  double t[6] = { 1, 4, 2, 5, 3, 6 };
  double v[6] = { 4, 5, 6, 1, 2, 3 };
  double ds[4] = { 2, 3, 5, 6 };
  double dus[6] = { 1, 2, 3, 9, 5, 6 };
  double sl[2] = { 4, 6 };
  double c[8] = { 1, 2, 3, 7, 4, 5, 6, 8 };
  double b[12] = { 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6 };
  expect_values (r->elems[0], 6, i);
  expect_values (r->elems[1], 6, t);
  expect_values (r->elems[2], 6, v);
  expect_values (r->elems[3], 4, ds);
  expect_values (r->elems[4], 6, dus);
  expect_values (r->elems[5], 2, sl);
  expect_values (r->elems[6], 8, c);
  expect_values (r->elems[7], 12, b);
  ps_value_free (r);
}
END_TEST

START_TEST (test_gather_scatter)
{
  /* Gather rows 2, 0 and 5 (5 clamps to 2) of a 3x2 operand. */
  PsValue *r = run1 ("HloModule m\nENTRY e {\n"
                     " a = f32[3,2] constant({{1,2},{3,4},{5,6}})\n"
                     " i = s32[3] constant({2, 0, 5})\n"
                     " ROOT g = f32[3,2] gather(a, i), offset_dims={1}, collapsed_slice_dims={0},"
                     " start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}\n}\n", 0, NULL);
  double g[6] = { 5, 6, 1, 2, 5, 6 };
  expect_values (r, 6, g);
  ps_value_free (r);
  /* Scatter-add rows into zeros at 1, 1, 3 (3 is out of bounds: skipped). */
  r = run1 ("HloModule m\nadd {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
            " ROOT s = f32[] add(x, y)\n}\nENTRY e {\n"
            " z = f32[3,2] constant({{0,0},{0,0},{0,0}})\n"
            " i = s32[3] constant({1, 1, 3})\n"
            " u = f32[3,2] constant({{1,2},{10,20},{100,200}})\n"
            " ROOT s = f32[3,2] scatter(z, i, u), update_window_dims={1}, inserted_window_dims={0},"
            " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n", 0, NULL);
  double s[6] = { 0, 0, 11, 22, 0, 0 };
  expect_values (r, 6, s);
  ps_value_free (r);
}
END_TEST

START_TEST (test_sort_multi_operand)
{
  /* Sort keys descending carrying values; ties (the two 3s) keep order. */
  PsValue *r = run1 ("HloModule m\ncmp {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                     " c = s32[] parameter(2)\n d = s32[] parameter(3)\n"
                     " ROOT g = pred[] compare(a, b), direction=GT\n}\nENTRY e {\n"
                     " k = f32[5] constant({3, 1, 4, 3, 5})\n v = s32[5] iota(), iota_dimension=0\n"
                     " ROOT s = (f32[5], s32[5]) sort(k, v), dimensions={0}, is_stable=true, to_apply=cmp\n}\n",
                     0, NULL);
  double k[5] = { 5, 4, 3, 3, 1 }, v[5] = { 4, 2, 0, 3, 1 };
  expect_values (r->elems[0], 5, k);
  expect_values (r->elems[1], 5, v);
  ps_value_free (r);
}
END_TEST

/* ---- arithmetic ops ----------------------------------------------------------------- */

START_TEST (test_dot_general)
{
  /* Batched matmul: batch 2, [2x2] x [2x1].
   * batch 0: {{1,2},{3,4}} x {{1},{1}} = {{3},{7}};
   * batch 1: {{1,0},{0,1}} x {{5},{6}} = {{5},{6}}. */
  PsValue *r = run1 ("HloModule m\nENTRY e {\n"
                     " a = f32[2,2,2] constant({{{1,2},{3,4}},{{1,0},{0,1}}})\n"
                     " b = f32[2,2,1] constant({{{1},{1}},{{5},{6}}})\n"
                     " ROOT d = f32[2,2,1] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0},"
                     " lhs_contracting_dims={2}, rhs_contracting_dims={1}\n}\n", 0, NULL);
  double want[4] = { 3, 7, 5, 6 };
  expect_values (r, 4, want);
  ps_value_free (r);
  /* Two contracting dims: out[i] = sum_{j,k} a[i,j,k] * b[j,k] with b = 1..6
   * row-major: a[0] = 1..6 gives 1+4+9+16+25+36 = 91; a[1] picks b[0,0],
   * b[1,1], b[2,0] = 1 + 4 + 5 = 10. */
  r = run1 ("HloModule m\nENTRY e {\n"
            " a = f32[2,3,2] constant({{{1,2},{3,4},{5,6}},{{1,0},{0,1},{1,0}}})\n"
            " b = f32[3,2] constant({{1,2},{3,4},{5,6}})\n"
            " ROOT d = f32[2] dot(a, b), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}\n}\n",
            0, NULL);
  double want2[2] = { 91, 10 };
  expect_values (r, 2, want2);
  ps_value_free (r);
  /* Integers: s8 x s8 -> s32 without overflow of the operand type. */
  r = run1 ("HloModule m\nENTRY e {\n a = s8[1,2] constant({{100, 100}})\n b = s8[2,1] constant({{100},{2}})\n"
            " ROOT d = s32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n", 0, NULL);
  double want3[1] = { 10200 };
  expect_values (r, 1, want3);
  ps_value_free (r);
}
END_TEST

/* ragged-dot's three modes (jax.lax.ragged_dot_general's semantics) and
 * the dynamic-size ops, by hand. */
START_TEST (test_ragged_dot_and_dimension_size)
{
  /* Rows: lhs 4x2 = {{1,0},{0,1},{1,1},{2,0}}, groups of 1 and 2 rows (the
   * fourth row is in none: 0); rhs[0] = {{1,2},{3,4}}, rhs[1] = 10 x I. */
  PsValue *r = run1 ("HloModule m\nENTRY e {\n"
                     " a = f32[4,2] constant({{1,0},{0,1},{1,1},{2,0}})\n"
                     " b = f32[2,2,2] constant({{{1,2},{3,4}},{{10,0},{0,10}}})\n"
                     " g = s32[2] constant({1, 2})\n"
                     " ROOT d = f32[4,2] ragged-dot(a, b, g), lhs_contracting_dims={1},"
                     " rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}\n}\n", 0, NULL);
  double want[8] = { 1, 2, 0, 10, 10, 10, 0, 0 };
  expect_values (r, 8, want);
  ps_value_free (r);
  /* Contracting: k = 3 split into groups of 2 and 1; result [g, m, n]:
   * group 0 sums k = 0, 1; group 1 takes k = 2. */
  r = run1 ("HloModule m\nENTRY e {\n"
            " a = f32[1,3] constant({{1,2,3}})\n"
            " b = f32[3,1] constant({{1},{10},{100}})\n"
            " g = s32[2] constant({2, 1})\n"
            " ROOT d = f32[2,1,1] ragged-dot(a, b, g), lhs_contracting_dims={1},"
            " rhs_contracting_dims={0}, lhs_ragged_dims={1}\n}\n", 0, NULL);
  double want2[2] = { 21, 300 };
  expect_values (r, 2, want2);
  ps_value_free (r);
  /* Batch: a dot. */
  r = run1 ("HloModule m\nENTRY e {\n"
            " a = f32[2,1,2] constant({{{1,2}},{{3,4}}})\n"
            " b = f32[2,2,1] constant({{{1},{1}},{{1},{2}}})\n"
            " g = s32[1] constant({2})\n"
            " ROOT d = f32[2,1,1] ragged-dot(a, b, g), lhs_batch_dims={0}, rhs_batch_dims={0},"
            " lhs_contracting_dims={2}, rhs_contracting_dims={1}, lhs_ragged_dims={0}\n}\n", 0, NULL);
  double want3[2] = { 3, 11 };
  expect_values (r, 2, want3);
  ps_value_free (r);
  /* set-dimension-size zeroes past the size; get-dimension-size reads it back. */
  r = run1 ("HloModule m\nENTRY e {\n"
            " a = f32[4] constant({1,2,3,4})\n n = s32[] constant(3)\n"
            " b = f32[<=4] set-dimension-size(a, n), dimensions={0}\n"
            " s = s32[] get-dimension-size(b), dimensions={0}\n"
            " t = s32[] get-dimension-size(a), dimensions={0}\n"
            " sf = f32[] convert(s)\n tf = f32[] convert(t)\n"
            " ROOT r = (f32[<=4], f32[], f32[]) tuple(b, sf, tf)\n}\n", 0, NULL);
  double want4[4] = { 1, 2, 3, 0 };
  expect_values (r->elems[0], 4, want4);
  ck_assert (ps_value_get (r->elems[1], 0) == 3 && ps_value_get (r->elems[2], 0) == 4);
  ps_value_free (r);
  /* rng-get-and-update-state returns the state and adds delta. */
  r = run1 ("HloModule m\nENTRY e {\n"
            " a = u64[2] rng-get-and-update-state(), delta=5\n"
            " b = u64[2] rng-get-and-update-state(), delta=5\n"
            " ROOT d = u64[2] subtract(b, a)\n}\n", 0, NULL);
  double want5[2] = { 5, 0 };
  expect_values (r, 2, want5);
  ps_value_free (r);
}
END_TEST

START_TEST (test_conv_padding_dilation)
{
  /* 1-D: input {1,2,3,4,5} (b0f, one batch and feature), kernel {1,10,100}.
   * pad 1_1, stride 1: out[o] = sum_k in[o-1+k] * w[k]
   *   o0: 0*1 + 1*10 + 2*100 = 210; o1: 1+20+300 = 321; o2: 432; o3: 543; o4: 4+50+0 = 54. */
  const char *hdr = "HloModule m\nENTRY e {\n"
                    " a = f32[1,5,1] constant({{{1},{2},{3},{4},{5}}})\n"
                    " w = f32[3,1,1] constant({{{1}},{{10}},{{100}}})\n";
  char *t1 = g_strconcat (hdr, " ROOT c = f32[1,5,1] convolution(a, w), window={size=3 pad=1_1},"
                          " dim_labels=b0f_0io->b0f\n}\n", NULL);
  PsValue *r = run1 (t1, 0, NULL);
  double w1[5] = { 210, 321, 432, 543, 54 };
  expect_values (r, 5, w1);
  ps_value_free (r);
  /* rhs_dilate=2 (taps 0,2,4 apart), no pad: out[o] = in[o]*1 + in[o+2]*10 + in[o+4]*100;
   * only o=0 fits: 1 + 30 + 500 = 531. */
  char *t2 = g_strconcat (hdr, " ROOT c = f32[1,1,1] convolution(a, w), window={size=3 rhs_dilate=2},"
                          " dim_labels=b0f_0io->b0f\n}\n", NULL);
  r = run1 (t2, 0, NULL);
  double w2[1] = { 531 };
  expect_values (r, 1, w2);
  ps_value_free (r);
  /* lhs_dilate=2 makes the input 1 _ 2 _ 3 _ 4 _ 5 (9 positions), stride 2, pad 0:
   * out[o] covers positions 2o..2o+2: o0: 1*1 + 0*10 + 2*100 = 201;
   * o1: 2 + 300 = 302; o2: 403; o3: 504. */
  char *t3 = g_strconcat (hdr, " ROOT c = f32[1,4,1] convolution(a, w), window={size=3 stride=2 lhs_dilate=2},"
                          " dim_labels=b0f_0io->b0f\n}\n", NULL);
  r = run1 (t3, 0, NULL);
  double w3[4] = { 201, 302, 403, 504 };
  expect_values (r, 4, w3);
  ps_value_free (r);
  g_free (t1);
  g_free (t2);
  g_free (t3);
}
END_TEST

START_TEST (test_conv_feature_groups)
{
  /* Depthwise: 2 features, feature_group_count=2, kernel [1 tap, 1 in, 2 out]:
   * out feature 0 = in f0 * 2, out feature 1 = in f1 * 3. Input {{1,10},{2,20}} (0 = spatial). */
  PsValue *r = run1 ("HloModule m\nENTRY e {\n"
                     " a = f32[1,2,2] constant({{{1,10},{2,20}}})\n"
                     " w = f32[1,1,2] constant({{{2,3}}})\n"
                     " ROOT c = f32[1,2,2] convolution(a, w), window={size=1},"
                     " dim_labels=b0f_0io->b0f, feature_group_count=2\n}\n", 0, NULL);
  double want[4] = { 2, 30, 4, 60 };
  expect_values (r, 4, want);
  ps_value_free (r);
}
END_TEST

/* Batch normalization over feature dim 1 of x = {{1,2},{3,6}}: feature 0
 * holds {1,3} (mean 2, variance 1), feature 1 {2,6} (mean 4, variance 4).
 * Training with eps 0, scale {2,1}, offset {10,20}: y = (x - mean) /
 * sqrt(var) * scale + offset = {{8,19},{12,21}}. Inference with mean {0,0},
 * variance {3,0}, eps 1 (sigma {2,1}): {{1/2*2+10, 2+20}, {3/2*2+10, 6+20}}
 * = {{11,22},{13,26}}. */
START_TEST (test_batch_norm)
{
  PsValue *r = run1 ("HloModule m\nENTRY e {\n"
                     " x = f32[2,2] constant({{1,2},{3,6}})\n"
                     " s = f32[2] constant({2,1})\n o = f32[2] constant({10,20})\n"
                     " z = f32[2] constant({0,0})\n v = f32[2] constant({3,0})\n"
                     " t = (f32[2,2], f32[2], f32[2]) batch-norm-training(x, s, o), epsilon=0, feature_index=1\n"
                     " i = f32[2,2] batch-norm-inference(x, s, o, z, v), epsilon=1, feature_index=1\n"
                     " ROOT r = ((f32[2,2], f32[2], f32[2]), f32[2,2]) tuple(t, i)\n}\n", 0, NULL);
  expect_values (r->elems[0]->elems[0], 4, (double[]) { 8, 19, 12, 21 });
  expect_values (r->elems[0]->elems[1], 2, (double[]) { 2, 4 });
  expect_values (r->elems[0]->elems[2], 2, (double[]) { 1, 4 });
  expect_values (r->elems[1], 4, (double[]) { 11, 22, 13, 26 });
  ps_value_free (r);
  /* Grad, one feature: x {0,3,3}, mean 2, variance 2, eps 2 (sigma 2),
   * scale 1, dy {3,0,0}. grad_offset = sum dy = 3; grad_scale = sum dy (x -
   * mean) / sigma = 3 * -2 / 2 = -3; xhat = {-1, 1/2, 1/2}; dx = scale /
   * sigma * (dy - 3/3 - xhat * -3/3) = 1/2 * (dy - 1 + xhat) = {1/2, -1/4,
   * -1/4}. */
  r = run1 ("HloModule m\nENTRY e {\n"
            " x = f32[3,1] constant({{0},{3},{3}})\n dy = f32[3,1] constant({{3},{0},{0}})\n"
            " s = f32[1] constant({1})\n m = f32[1] constant({2})\n v = f32[1] constant({2})\n"
            " ROOT g = (f32[3,1], f32[1], f32[1]) batch-norm-grad(x, s, m, v, dy), epsilon=2,"
            " feature_index=1\n}\n", 0, NULL);
  expect_values (r->elems[0], 3, (double[]) { 0.5, -0.25, -0.25 });
  expect_values (r->elems[1], 1, (double[]) { -3 });
  expect_values (r->elems[2], 1, (double[]) { 3 });
  ps_value_free (r);
}
END_TEST

START_TEST (test_reduce_variants)
{
  /* Sum over dim 1 of {{1,2,3},{4,5,6}} = {6, 15}; variadic argmax over dim 0
   * of values {3,9,9,1} with indices: max 9 first at index 1. */
  PsValue *r = run1 ("HloModule m\nadd {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                     " ROOT s = f32[] add(x, y)\n}\n"
                     "argmax {\n av = f32[] parameter(0)\n ai = s32[] parameter(1)\n"
                     " bv = f32[] parameter(2)\n bi = s32[] parameter(3)\n"
                     " gt = pred[] compare(bv, av), direction=GT\n"
                     " v = f32[] select(gt, bv, av)\n i = s32[] select(gt, bi, ai)\n"
                     " ROOT t = (f32[], s32[]) tuple(v, i)\n}\n"
                     "ENTRY e {\n a = f32[2,3] constant({{1,2,3},{4,5,6}})\n z = f32[] constant(0)\n"
                     " s = f32[2] reduce(a, z), dimensions={1}, to_apply=add\n"
                     " v = f32[4] constant({3, 9, 9, 1})\n i = s32[4] iota(), iota_dimension=0\n"
                     " mi = f32[] constant(-inf)\n zi = s32[] constant(-1)\n"
                     " am = (f32[], s32[]) reduce(v, i, mi, zi), dimensions={0}, to_apply=argmax\n"
                     " ROOT t = (f32[2], (f32[], s32[])) tuple(s, am)\n}\n", 0, NULL);
  double s[2] = { 6, 15 };
  expect_values (r->elems[0], 2, s);
  ck_assert (r->elems[1]->elems[0]->f[0] == 9);
  ck_assert_int_eq (r->elems[1]->elems[1]->i[0], 1);
  ps_value_free (r);
}
END_TEST

START_TEST (test_reduce_window_and_select_and_scatter)
{
  /* Max pool size 2 stride 2 over {1,5,2,4,3,0}: {5,4,3}; with pad 1_0 and
   * size 2 stride 2: windows {pad,1},{5,2},{4,3} -> {1,5,4}. Select-and-scatter
   * (max, add) of source {10,20,30} onto the size 2 stride 2 windows: the max of
   * each window gets its source: {0,10,0,20,30,0}. */
  PsValue *r = run1 ("HloModule m\nmax {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                     " ROOT m = f32[] maximum(x, y)\n}\n"
                     "ge {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                     " ROOT g = pred[] compare(x, y), direction=GE\n}\n"
                     "add {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                     " ROOT s = f32[] add(x, y)\n}\n"
                     "ENTRY e {\n a = f32[6] constant({1, 5, 2, 4, 3, 0})\n mi = f32[] constant(-inf)\n"
                     " r1 = f32[3] reduce-window(a, mi), window={size=2 stride=2}, to_apply=max\n"
                     " r2 = f32[3] reduce-window(a, mi), window={size=2 stride=2 pad=1_0}, to_apply=max\n"
                     " src = f32[3] constant({10, 20, 30})\n z = f32[] constant(0)\n"
                     " ss = f32[6] select-and-scatter(a, src, z), window={size=2 stride=2}, select=ge, scatter=add\n"
                     " ROOT t = (f32[3], f32[3], f32[6]) tuple(r1, r2, ss)\n}\n", 0, NULL);
  double r1[3] = { 5, 4, 3 }, r2[3] = { 1, 5, 4 }, ss[6] = { 0, 10, 0, 20, 30, 0 };
  expect_values (r->elems[0], 3, r1);
  expect_values (r->elems[1], 3, r2);
  expect_values (r->elems[2], 6, ss);
  ps_value_free (r);
}
END_TEST

START_TEST (test_while_and_conditional)
{
  /* while i < 5: (i + 1, acc * 2) from (0, 1): acc = 32. conditional on pred
   * true runs the first branch (negate). */
  PsValue *r = run1 ("HloModule m\n"
                     "cond {\n p = (s32[], f32[]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
                     " five = s32[] constant(5)\n ROOT lt = pred[] compare(i, five), direction=LT\n}\n"
                     "body {\n p = (s32[], f32[]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
                     " a = f32[] get-tuple-element(p), index=1\n one = s32[] constant(1)\n"
                     " two = f32[] constant(2)\n i1 = s32[] add(i, one)\n a2 = f32[] multiply(a, two)\n"
                     " ROOT t = (s32[], f32[]) tuple(i1, a2)\n}\n"
                     "neg {\n x = f32[] parameter(0)\n ROOT n = f32[] negate(x)\n}\n"
                     "id {\n x = f32[] parameter(0)\n ROOT c = f32[] copy(x)\n}\n"
                     "ENTRY e {\n z = s32[] constant(0)\n o = f32[] constant(1)\n"
                     " init = (s32[], f32[]) tuple(z, o)\n"
                     " w = (s32[], f32[]) while(init), condition=cond, body=body\n"
                     " acc = f32[] get-tuple-element(w), index=1\n t = pred[] constant(true)\n"
                     " ROOT c = f32[] conditional(t, acc, acc), true_computation=neg, false_computation=id\n}\n",
                     0, NULL);
  ck_assert (r->f[0] == -32);
  ps_value_free (r);
}
END_TEST

START_TEST (test_fusion)
{
  /* A kOutput fusion (dot) feeding a kLoop fusion (add, then max with 0)
   * and a kInput fusion (row sums): [[1,2],[3,4]] x [[1,0],[0,-1]] =
   * [[1,-2],[3,-4]]; + itself = [[2,-4],[6,-8]]; relu [[2,0],[6,0]];
   * row sums [2, 6]. */
  static const char text[] =
    "HloModule m\n"
    "fd {\n p0 = f32[2,2] parameter(0)\n p1 = f32[2,2] parameter(1)\n"
    " ROOT d = f32[2,2] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n"
    "fl {\n q0 = f32[2,2] parameter(0)\n a = f32[2,2] add(q0, q0)\n z = f32[] constant(0)\n"
    " zb = f32[2,2] broadcast(z), dimensions={}\n ROOT r = f32[2,2] maximum(a, zb)\n}\n"
    "sum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y)\n}\n"
    "fr {\n r0 = f32[2,2] parameter(0)\n z = f32[] constant(0)\n"
    " ROOT s = f32[2] reduce(r0, z), dimensions={1}, to_apply=sum\n}\n"
    "ENTRY e {\n a = f32[2,2] parameter(0)\n b = f32[2,2] parameter(1)\n"
    " d = f32[2,2] fusion(a, b), kind=kOutput, calls=fd\n"
    " l = f32[2,2] fusion(d), kind=kLoop, calls=fl\n"
    " ROOT s = f32[2] fusion(l), kind=kInput, calls=fr\n}\n";
  static const int64_t d2[2] = { 2, 2 };
  PsValue *args[2] = { arr (PS_F32, 2, d2, (const double[]) { 1, 2, 3, 4 }),
                       arr (PS_F32, 2, d2, (const double[]) { 1, 0, 0, -1 }) };
  PsValue *r = run1 (text, 2, args);
  expect_values (r, 2, (const double[]) { 2, 6 });
  ps_value_free (r);
  free_args (2, args);
}
END_TEST

START_TEST (test_unsupported_op_error)
{
  PsModule *m = parse ("HloModule m\nENTRY e {\n a = f32[4] constant({1, 0, 1, 2})\n"
             " ROOT f = c64[3] fft(a), fft_type=RFFT, fft_length={4}\n}\n");
  GError *error = NULL;
  PsValue *r = ps_interp_run (m, 0, NULL, NULL, &error);
  ck_assert_ptr_null (r);
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_UNSUPPORTED));
  ck_assert_msg (strstr (error->message, "test.hlo:4:7: f: interpreter (fft)") != NULL, "message: %s", error->message);
  ck_assert_msg (strstr (error->message, "RFFT") != NULL, "message: %s", error->message);
  g_error_free (error);
  ps_module_free (m);
}
END_TEST

START_TEST (test_work_limit)
{
  /* A loop that never ends stops at the work budget with a clear error. */
  PsModule *m = parse ("HloModule m\ncond {\n p = s32[] parameter(0)\n ROOT t = pred[] constant(true)\n}\n"
                       "body {\n p = s32[] parameter(0)\n ROOT c = s32[] copy(p)\n}\n"
                       "ENTRY e {\n z = s32[] constant(0)\n"
                       " ROOT w = s32[] while(z), condition=cond, body=body\n}\n");
  PsInterpOptions o = { 0 };
  o.max_work = 100000;
  GError *error = NULL;
  PsValue *r = ps_interp_run (m, 0, NULL, &o, &error);
  ck_assert_ptr_null (r);
  ck_assert_msg (strstr (error->message, "work limit") != NULL, "message: %s", error->message);
  g_clear_error (&error);
  ps_module_free (m);
  /* Memory: n and e (f32[1000] on 4 devices) hold 8000 elements, and while
   * a is computed they are still live: 12000 at the peak. A cap of 6000
   * stops the run at e, 12000 lets it through. */
  m = parse ("HloModule m\nENTRY e {\n p = f32[1000] parameter(0)\n n = f32[1000] negate(p)\n"
             " e = f32[1000] exponential(p)\n ROOT a = f32[1000] add(n, e)\n}\n");
  int64_t dims[1] = { 1000 };
  PsValue *x = arr (PS_F32, 1, dims, NULL);
  PsValue *args[4] = { x, x, x, x };
  PsValue *res[4] = { NULL };
  PsInterpOptions o2 = { 0 };
  o2.max_live_elements = 6000;
  ck_assert (!ps_interp_run_spmd (m, 4, 1, args, res, &o2, &error));
  ck_assert_msg (strstr (error->message, "memory limit") != NULL, "message: %s", error->message);
  ck_assert_msg (strstr (error->message, "test.hlo:5:2: e: interpreter (exponential)") != NULL, "message: %s", error->message);
  g_clear_error (&error);
  o2.max_live_elements = 12000;
  ck_assert_msg (ps_interp_run_spmd (m, 4, 1, args, res, &o2, &error), "%s", error ? error->message : "");
  free_args (4, res);
  ps_value_free (x);
  ps_module_free (m);
}
END_TEST


START_TEST (test_linalg)
{
  /* cholesky [[4,2],[2,3]] = L L^T with L = [[2,0],[1,sqrt 2]]. */
  PsValue *r = run1 ("HloModule m\nENTRY e {\n a = f64[2,2] constant({{4,2},{2,3}})\n"
                     " ROOT c = f64[2,2] cholesky(a), lower=true\n}\n", 0, NULL);
  double l[4] = { 2, 0, 1, sqrt (2.0) };
  expect_values (r, 4, l);
  ps_value_free (r);
  /* [[2,0],[1,1]] x = [[2],[3]]: x0 = 1, x1 = 3 - 1 = 2; with the upper
   * triangle ignored (lower=true) and, unit_diagonal, x0 = 2, x1 = 1. */
  r = run1 ("HloModule m\nENTRY e {\n a = f32[2,2] constant({{2,99},{1,1}})\n b = f32[2,1] constant({{2},{3}})\n"
            " x = f32[2,1] triangular-solve(a, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE\n"
            " u = f32[2,1] triangular-solve(a, b), left_side=true, lower=true, unit_diagonal=true, transpose_a=NO_TRANSPOSE\n"
            " ROOT t = (f32[2,1], f32[2,1]) tuple(x, u)\n}\n", 0, NULL);
  double x[2] = { 1, 2 }, u[2] = { 2, 1 };
  expect_values (r->elems[0], 2, x);
  expect_values (r->elems[1], 2, u);
  ps_value_free (r);
  /* FFT of an impulse at 1: {1, -i, -1, i}; IFFT brings it back. */
  r = run1 ("HloModule m\nENTRY e {\n a = c64[4] constant({(0,0), (1,0), (0,0), (0,0)})\n"
            " f = c64[4] fft(a), fft_type=FFT, fft_length={4}\n"
            " g = c64[4] fft(f), fft_type=IFFT, fft_length={4}\n"
            " ROOT t = (c64[4], c64[4]) tuple(f, g)\n}\n", 0, NULL);
  double fre[4] = { 1, 0, -1, 0 }, fim[4] = { 0, -1, 0, 1 };
  for (int i = 0; i < 4; i++)
    {
      ck_assert (fabs (r->elems[0]->c[2 * i] - fre[i]) < 1e-6);
      ck_assert (fabs (r->elems[0]->c[2 * i + 1] - fim[i]) < 1e-6);
      ck_assert (fabs (r->elems[1]->c[2 * i] - (i == 1)) < 1e-6);
      ck_assert (fabs (r->elems[1]->c[2 * i + 1]) < 1e-6);
    }
  ps_value_free (r);
}
END_TEST

/* ---- SPMD collectives ------------------------------------------------------------------ */

/* Runs an SPMD module on n devices where device d's single argument is
 * f32[k] {d*k, d*k+1, ...}. */
static PsValue **
run_spmd (const char *text, int n, int k, GError **error)
{
  PsModule *m = parse (text);
  PsValue **args = g_new0 (PsValue *, n);
  for (int d = 0; d < n; d++)
    {
      int64_t dims[1] = { k };
      double *v = g_new0 (double, k);
      for (int i = 0; i < k; i++)
        v[i] = d * k + i;
      args[d] = arr (PS_F32, 1, dims, v);
      g_free (v);
    }
  PsValue **res = g_new0 (PsValue *, n);
  gboolean ok = ps_interp_run_spmd (m, n, 1, args, res, NULL, error);
  free_args (n, args);
  g_free (args);
  ps_module_free (m);
  if (!ok)
    {
      g_free (res);
      return NULL;
    }
  return res;
}

static void
free_results (int n, PsValue **r)
{
  free_args (n, r);
  g_free (r);
}

START_TEST (test_all_reduce_groups)
{
  static const int ns[3] = { 2, 4, 8 };
  int n = ns[_i];
  /* Groups of pairs {0,1},{2,3},...: device d gets (2p*k + i) + ((2p+1)*k + i). */
  GString *groups = g_string_new ("{");
  for (int g = 0; g < n / 2; g++)
    g_string_append_printf (groups, "%s{%d,%d}", g ? "," : "", 2 * g, 2 * g + 1);
  g_string_append (groups, "}");
  char *text = g_strdup_printf ("HloModule m\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                                " ROOT s = f32[] add(x, y)\n}\nENTRY e {\n p = f32[2] parameter(0)\n"
                                " ROOT ar = f32[2] all-reduce(p), channel_id=1, replica_groups=%s,"
                                " use_global_device_ids=true, to_apply=sum\n}\n", groups->str);
  GError *error = NULL;
  PsValue **r = run_spmd (text, n, 2, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  for (int d = 0; d < n; d++)
    {
      int p = d / 2;
      double want[2] = { (2 * p) * 2 + 0 + (2 * p + 1) * 2 + 0, (2 * p) * 2 + 1 + (2 * p + 1) * 2 + 1 };
      expect_values (r[d], 2, want);
    }
  free_results (n, r);
  g_free (text);
  /* Groups of different sizes (all-reduce only, as XLA's verifier):
   * {0}, {1..n-2}, {n-1}: the ends keep their values. */
  for (int once = n >= 4; once; once = 0)
  {
  GString *rg = g_string_new ("{{0},{1");
  for (int d = 2; d < n - 1; d++)
    g_string_append_printf (rg, ",%d", d);
  g_string_append_printf (rg, "},{%d}}", n - 1);
  text = g_strdup_printf ("HloModule m\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                          " ROOT s = f32[] add(x, y)\n}\nENTRY e {\n p = f32[2] parameter(0)\n"
                          " ROOT ar = f32[2] all-reduce(p), channel_id=1, replica_groups=%s,"
                          " use_global_device_ids=true, to_apply=sum\n}\n", rg->str);
  g_string_free (rg, TRUE);
  r = run_spmd (text, n, 2, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  double mid0 = 0, mid1 = 0;
  for (int d = 1; d < n - 1; d++)
    mid0 += 2 * d, mid1 += 2 * d + 1;
  for (int d = 0; d < n; d++)
    {
      gboolean end = d == 0 || d == n - 1;
      double want[2] = { end ? 2 * d : mid0, end ? 2 * d + 1 : mid1 };
      expect_values (r[d], 2, want);
    }
  free_results (n, r);
  g_free (text);
  }
  /* No groups + channel_id (cross replica and partition): everyone. Sum of 0..2n-1 per element parity. */
  text = g_strdup ("HloModule m\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                   " ROOT s = f32[] add(x, y)\n}\nENTRY e {\n p = f32[2] parameter(0)\n"
                   " ROOT ar = f32[2] all-reduce(p), channel_id=1, replica_groups={}, to_apply=sum\n}\n");
  r = run_spmd (text, n, 2, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  double e0 = 0, e1 = 0;
  for (int d = 0; d < n; d++)
    {
      e0 += 2 * d;
      e1 += 2 * d + 1;
    }
  double want[2] = { e0, e1 };
  for (int d = 0; d < n; d++)
    expect_values (r[d], 2, want);
  free_results (n, r);
  g_free (text);
  /* Without channel_id the group is over replicas: 1 replica, so identity. */
  text = g_strdup ("HloModule m\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                   " ROOT s = f32[] add(x, y)\n}\nENTRY e {\n p = f32[2] parameter(0)\n"
                   " ROOT ar = f32[2] all-reduce(p), replica_groups={}, to_apply=sum\n}\n");
  r = run_spmd (text, n, 2, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  for (int d = 0; d < n; d++)
    {
      double w[2] = { 2 * d, 2 * d + 1 };
      expect_values (r[d], 2, w);
    }
  free_results (n, r);
  g_free (text);
  g_string_free (groups, TRUE);
}
END_TEST

START_TEST (test_all_gather_reduce_scatter_all_to_all)
{
  static const int ns[3] = { 2, 4, 8 };
  int n = ns[_i];
  char *text = g_strdup_printf (
    "HloModule m\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y)\n}\n"
    "ENTRY e {\n p = f32[%d] parameter(0)\n"
    " ag = f32[%d] all-gather(p), channel_id=1, replica_groups={}, dimensions={0}, use_global_device_ids=true\n"
    " rs = f32[1] reduce-scatter(p), channel_id=2, replica_groups={}, dimensions={0}, use_global_device_ids=true, to_apply=sum\n"
    " a2a = f32[%d] all-to-all(p), channel_id=3, replica_groups={}, dimensions={0}\n"
    " ROOT t = (f32[%d], f32[1], f32[%d]) tuple(ag, rs, a2a)\n}\n", n, n * n, n, n * n, n);
  GError *error = NULL;
  PsValue **r = run_spmd (text, n, n, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  for (int d = 0; d < n; d++)
    {
      /* all-gather: every device sees 0 .. n*n-1. */
      for (int i = 0; i < n * n; i++)
        ck_assert (r[d]->elems[0]->f[i] == i);
      /* reduce-scatter: device d gets element d summed over devices:
       * sum_j (j*n + d) = n*(n-1)/2*n + n*d. */
      ck_assert (r[d]->elems[1]->f[0] == n * (n - 1) / 2.0 * n + n * d);
      /* all-to-all: chunk j of my result is chunk d of device j: element j*n + d. */
      for (int j = 0; j < n; j++)
        ck_assert (r[d]->elems[2]->f[j] == j * n + d);
    }
  free_results (n, r);
  g_free (text);
}
END_TEST

START_TEST (test_collective_permute_and_partition_id)
{
  static const int ns[3] = { 2, 4, 8 };
  int n = ns[_i];
  /* Shift right by one without wrap: device 0 is not a target and gets zeros. */
  GString *pairs = g_string_new ("{");
  for (int d = 0; d + 1 < n; d++)
    g_string_append_printf (pairs, "%s{%d,%d}", d ? "," : "", d, d + 1);
  g_string_append (pairs, "}");
  char *text = g_strdup_printf ("HloModule m\nENTRY e {\n p = f32[1] parameter(0)\n"
                                " cp = f32[1] collective-permute(p), channel_id=1, source_target_pairs=%s\n"
                                " id = u32[] partition-id()\n"
                                " ROOT t = (f32[1], u32[]) tuple(cp, id)\n}\n", pairs->str);
  GError *error = NULL;
  PsValue **r = run_spmd (text, n, 1, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  for (int d = 0; d < n; d++)
    {
      ck_assert (r[d]->elems[0]->f[0] == (d == 0 ? 0 : d - 1));
      ck_assert_int_eq (r[d]->elems[1]->i[0], d);
    }
  free_results (n, r);
  g_free (text);
  g_string_free (pairs, TRUE);
}
END_TEST

/* collective-broadcast (the StableHLO specification's collective_broadcast):
 * each group's first member sends its operand to the group; a device in
 * no group gets zeros. Groups {1,0} and {3,2}: device 1 and device 3 are
 * the sources; on 8 devices 4..7 are in no group. */
START_TEST (test_collective_broadcast)
{
  static const int ns[2] = { 4, 8 };
  int n = ns[_i];
  const char *text = "HloModule m\nENTRY e {\n p = f32[2] parameter(0)\n"
                     " ROOT b = f32[2] collective-broadcast(p), channel_id=1, replica_groups={{1,0},{3,2}}\n}\n";
  GError *error = NULL;
  PsValue **r = run_spmd (text, n, 2, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  for (int d = 0; d < n; d++)
    {
      int src = d < 2 ? 1 : d < 4 ? 3 : -1;
      double want[2] = { src < 0 ? 0 : 2 * src, src < 0 ? 0 : 2 * src + 1 };
      expect_values (r[d], 2, want);
    }
  free_results (n, r);
}
END_TEST

/* stochastic-convert as XLA's evaluator does it (StochasticConvertOp,
 * xla/hlo/evaluator/hlo_evaluator.cc): |x| rounds up when its fraction as
 * a 16-bit fixed-point number (0.25 -> 16384) exceeds the random bits;
 * infinities and values out of range saturate, NaN gives 0, whole numbers
 * stay. */
START_TEST (test_stochastic_convert)
{
  const char *text = "HloModule m\nENTRY e {\n x = f16[10] parameter(0)\n r = u16[10] parameter(1)\n"
                     " ROOT s = s8[10] stochastic-convert(x, r)\n}\n";
  int64_t dims[1] = { 10 };
  double x[10] = { 2.25, 2.25, -2.25, -2.25, 3, INFINITY, -INFINITY, NAN, 300, -1000 };
  double rb[10] = { 16383, 16384, 16383, 16384, 0, 0, 0, 0, 0, 0 };
  PsValue *args[2] = { arr (PS_F16, 1, dims, x), arr (PS_U16, 1, dims, rb) };
  PsValue *v = run1 (text, 2, args);
  double want[10] = { 3, 2, -3, -2, 3, 127, -128, 0, 127, -128 };
  expect_values (v, 10, want);
  ps_value_free (v);
  free_args (2, args);
  /* random bits of another width than the operand are refused on reading */
  GError *error = NULL;
  const char *bad = "HloModule m\nENTRY e {\n x = f32[2] parameter(0)\n r = u16[2] parameter(1)\n"
                    " ROOT s = s32[2] stochastic-convert(x, r)\n}\n";
  PsModule *m = ps_hlo_parse (bad, strlen (bad), "t.hlo", &error);
  ck_assert (m == NULL);
  ck_assert_msg (strstr (error->message, "stochastic-convert takes a float operand and unsigned random bits"),
                 "%s", error->message);
  g_clear_error (&error);
}
END_TEST

/* An optimized dump's asynchronous pairs, async-start wrapping, variadic
 * collectives and add-dependency, made synchronous (partitioner/ir/async.h),
 * compute on 4 devices exactly what the same program written with
 * synchronous single-operand collectives computes. */
START_TEST (test_async_pairs_as_synchronous)
{
  static const char head[] =
    "HloModule m, num_partitions=4\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
    " ROOT s = f32[] add(x, y)\n}\n"
    "wrapped {\n w = f32[8] parameter(0)\n ROOT r = f32[2] reduce-scatter(w), channel_id=9, replica_groups={},"
    " dimensions={0}, use_global_device_ids=true, to_apply=sum\n}\n";
  g_autofree char *async = g_strconcat (head,
    "ENTRY e {\n p = f32[2] parameter(0)\n"
    " ags = (f32[2], f32[8]) all-gather-start(p), channel_id=1, replica_groups={}, dimensions={0}, use_global_device_ids=true\n"
    " ars = f32[2] all-reduce-start(p), channel_id=2, replica_groups={}, use_global_device_ids=true, to_apply=sum\n"
    " cps = (f32[2], f32[2], u32[], u32[]) collective-permute-start(p), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}\n"
    " cs = (f32[2], f32[2], u32[]) copy-start(p)\n"
    " ag = f32[8] all-gather-done(ags)\n"
    " rss = ((f32[8]), f32[2], s32[]) async-start(ag), calls=wrapped\n"
    " rsu = ((f32[8]), f32[2], s32[]) async-update(rss)\n"
    " ar = f32[2] all-reduce-done(ars)\n cp = f32[2] collective-permute-done(cps)\n c = f32[2] copy-done(cs)\n"
    " rs = f32[2] async-done(rsu)\n"
    " v = (f32[2], f32[2]) all-reduce(p, c), channel_id=4, replica_groups={}, use_global_device_ids=true, to_apply=sum\n"
    " g = (f32[8], f32[8]) all-gather(p, c), channel_id=5, replica_groups={}, dimensions={0}, use_global_device_ids=true\n"
    " tok = token[] after-all()\n d = f32[2] add-dependency(cp, tok)\n"
    " ROOT t = (f32[8], f32[2], f32[2], f32[2], f32[2], (f32[2], f32[2]), (f32[8], f32[8])) tuple(ag, ar, d, c, rs, v, g)\n}\n",
    NULL);
  g_autofree char *sync = g_strconcat (head,
    "ENTRY e {\n p = f32[2] parameter(0)\n"
    " ag = f32[8] all-gather(p), channel_id=1, replica_groups={}, dimensions={0}, use_global_device_ids=true\n"
    " ar = f32[2] all-reduce(p), channel_id=2, replica_groups={}, use_global_device_ids=true, to_apply=sum\n"
    " cp = f32[2] collective-permute(p), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}\n"
    " c = f32[2] copy(p)\n"
    " rs = f32[2] reduce-scatter(ag), channel_id=9, replica_groups={}, dimensions={0}, use_global_device_ids=true, to_apply=sum\n"
    " v0 = f32[2] all-reduce(p), channel_id=4, replica_groups={}, use_global_device_ids=true, to_apply=sum\n"
    " v1 = f32[2] all-reduce(c), channel_id=6, replica_groups={}, use_global_device_ids=true, to_apply=sum\n"
    " v = (f32[2], f32[2]) tuple(v0, v1)\n"
    " g0 = f32[8] all-gather(p), channel_id=5, replica_groups={}, dimensions={0}, use_global_device_ids=true\n"
    " g1 = f32[8] all-gather(c), channel_id=7, replica_groups={}, dimensions={0}, use_global_device_ids=true\n"
    " g = (f32[8], f32[8]) tuple(g0, g1)\n"
    " ROOT t = (f32[8], f32[2], f32[2], f32[2], f32[2], (f32[2], f32[2]), (f32[8], f32[8])) tuple(ag, ar, cp, c, rs, v, g)\n}\n",
    NULL);
  PsModule *ma = parse (async);
  PsAsyncStats st;
  GError *error = NULL;
  ck_assert_msg (ps_async_make_synchronous (ma, &st, &error), "%s", error ? error->message : "");
  ck_assert_int_eq (st.pairs, 5);
  ck_assert_int_eq (st.split, 2);
  ck_assert_int_eq (st.dependencies, 1);
  GError *ve = NULL;
  ck_assert_msg (ps_module_validate (ma, "async", &ve), "%s", ve ? ve->message : "");
  PsModule *ms = parse (sync);
  PsValue *args[4], *ra[4], *rsy[4];
  for (int d = 0; d < 4; d++)
    {
      static const int64_t dims[1] = { 2 };
      args[d] = arr (PS_F32, 1, dims, (const double[]) { 2 * d, 2 * d + 1 });
    }
  ck_assert_msg (ps_interp_run_spmd (ma, 4, 1, args, ra, NULL, &error), "%s", error ? error->message : "");
  ck_assert_msg (ps_interp_run_spmd (ms, 4, 1, args, rsy, NULL, &error), "%s", error ? error->message : "");
  for (int d = 0; d < 4; d++)
    {
      g_autofree char *a = ps_value_to_string (ra[d], 100);
      g_autofree char *b = ps_value_to_string (rsy[d], 100);
      ck_assert_str_eq (a, b);
    }
  /* device 1: the permute brings device 0's {0, 1} */
  ck_assert (ra[1]->elems[2]->f[0] == 0 && ra[1]->elems[2]->f[1] == 1);
  free_args (4, args);
  free_args (4, ra);
  free_args (4, rsy);
  ps_module_free (ma);
  ps_module_free (ms);
}
END_TEST

/* ragged-dot, rng-get-and-update-state and get/set-dimension-size pass to
 * the stages after reading (each has a cost: partitioner/analysis/cost.c);
 * an unmatched pair is refused where it stands. */
START_TEST (test_unsimulatable_ops_refused)
{
  static const char *const bodies[] = {
    " p = f32[4] parameter(0)\n ROOT g = s32[] get-dimension-size(p), dimensions={0}\n",
    " ROOT s = u64[2] rng-get-and-update-state(), delta=1\n",
    " a = f32[4,8] parameter(0)\n b = f32[2,8,3] parameter(1)\n g = s32[2] parameter(2)\n"
    " ROOT r = f32[4,3] ragged-dot(a, b, g), lhs_contracting_dims={1}, rhs_contracting_dims={1},"
    " lhs_ragged_dims={0}, rhs_group_dims={0}\n",
    " p = f32[2] parameter(0)\n s = (f32[2], f32[2], u32[]) copy-start(p)\n ROOT n = f32[2] negate(p)\n",
  };
  for (gsize i = 0; i < G_N_ELEMENTS (bodies); i++)
    {
      g_autofree char *t = g_strconcat ("ENTRY e {\n", bodies[i], "}\n", NULL);
      PsModule *m = parse (t);
      GError *error = NULL;
      gboolean ok = ps_async_make_synchronous (m, NULL, &error);
      if (i < 3)
        ck_assert_msg (ok, "%s", error ? error->message : "");
      else
        {
          ck_assert (!ok);
          ck_assert_msg (g_str_has_prefix (error->message, "test.hlo:3:2: s: copy-start has no matching -done"), "%s",
                         error->message);
          g_error_free (error);
        }
      ps_module_free (m);
    }
}
END_TEST

START_TEST (test_divergent_loop_with_collective)
{
  /* Device d loops d+1 times with an all-reduce inside: device 0 leaves the
   * loop first, so device 1's second all-reduce lacks a participant. */
  GError *error = NULL;
  PsValue **r = run_spmd ("HloModule m\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                          " ROOT s = f32[] add(x, y)\n}\n"
                          "cond {\n p = f32[1] parameter(0)\n id = u32[] partition-id()\n"
                          " f = f32[] convert(id)\n b = f32[1] broadcast(f), dimensions={}\n"
                          " one = f32[1] constant({1})\n lim = f32[1] add(b, one)\n"
                          " c = pred[1] compare(p, lim), direction=LT\n ROOT r = pred[] reshape(c)\n}\n"
                          "body {\n p = f32[1] parameter(0)\n ar = f32[1] all-reduce(p), channel_id=1,"
                          " replica_groups={{0,1}}, use_global_device_ids=true, to_apply=sum\n"
                          " one = f32[1] constant({1})\n ROOT n = f32[1] add(p, one)\n}\n"
                          "ENTRY e {\n p = f32[1] parameter(0)\n z = f32[1] constant({0})\n"
                          " ROOT w = f32[1] while(z), condition=cond, body=body\n}\n", 2, 1, &error);
  ck_assert_ptr_null (r);
  ck_assert_msg (strstr (error->message, "diverged") != NULL, "message: %s", error->message);
  g_error_free (error);
}
END_TEST


START_TEST (test_bitcast_sizes_and_complex)
{
  /* s32 0x01020304 as s8[4], little-endian: {4, 3, 2, 1}; and back. c64
   * (1+2i)*(3-1i) = 3 - i + 6i - 2i^2 = 5 + 5i; real/imag pick the parts. */
  PsValue *r = run1 ("HloModule m\nENTRY e {\n x = s32[] constant(16909060)\n"
                     " b = s8[4] bitcast-convert(x)\n y = s32[] bitcast-convert(b)\n"
                     " c1 = c64[] constant((1, 2))\n c2 = c64[] constant((3, -1))\n"
                     " p = c64[] multiply(c1, c2)\n re = f32[] real(p)\n im = f32[] imag(p)\n"
                     " ROOT t = (s8[4], s32[], f32[], f32[]) tuple(b, y, re, im)\n}\n", 0, NULL);
  double b[4] = { 4, 3, 2, 1 }, y[1] = { 16909060 }, re[1] = { 5 }, im[1] = { 5 };
  expect_values (r->elems[0], 4, b);
  expect_values (r->elems[1], 1, y);
  expect_values (r->elems[2], 1, re);
  expect_values (r->elems[3], 1, im);
  ps_value_free (r);
}
END_TEST

START_TEST (test_rng_deterministic)
{
  const char *text = "HloModule m\nENTRY e {\n lo = f32[] constant(-1)\n hi = f32[] constant(1)\n"
                     " ROOT r = f32[64] rng(lo, hi), distribution=rng_uniform\n}\n";
  PsModule *m = parse (text);
  GError *error = NULL;
  PsInterpOptions o = { 0 };
  o.rng_seed = 42;
  PsValue *a = ps_interp_run (m, 0, NULL, &o, &error);
  PsValue *b = ps_interp_run (m, 0, NULL, &o, &error);
  ck_assert (a && b);
  ck_assert (ps_value_equal (a, b));
  gboolean varied = FALSE;
  for (int i = 0; i < 64; i++)
    {
      ck_assert (a->f[i] >= -1 && a->f[i] < 1);
      varied = varied || a->f[i] != a->f[0];
    }
  ck_assert (varied);
  o.rng_seed = 43;
  PsValue *c = ps_interp_run (m, 0, NULL, &o, &error);
  ck_assert (!ps_value_equal (a, c));
  o.rng_constant = TRUE;
  PsValue *d = ps_interp_run (m, 0, NULL, &o, &error);
  for (int i = 0; i < 64; i++)
    ck_assert (d->f[i] == -1);
  ps_value_free (a);
  ps_value_free (b);
  ps_value_free (c);
  ps_value_free (d);
  ps_module_free (m);
  /* rng-bit-generator: the state passes through, the bits are repeatable. */
  m = parse ("HloModule m\nENTRY e {\n s = u64[2] constant({7, 9})\n"
             " ROOT g = (u64[2], u32[8]) rng-bit-generator(s), algorithm=rng_default\n}\n");
  o.rng_constant = FALSE;
  a = ps_interp_run (m, 0, NULL, &o, &error);
  b = ps_interp_run (m, 0, NULL, &o, &error);
  ck_assert_msg (a && b, "%s", error ? error->message : "");
  ck_assert (ps_value_equal (a, b));
  ck_assert_int_eq (a->elems[0]->i[0], 7);
  ck_assert_int_eq (a->elems[0]->i[1], 9);
  gboolean any = FALSE;
  for (int i = 0; i < 8; i++)
    {
      ck_assert (a->elems[1]->i[i] >= 0 && a->elems[1]->i[i] <= 4294967295LL);
      any = any || a->elems[1]->i[i] != 0;
    }
  ck_assert (any);
  ps_value_free (a);
  ps_value_free (b);
  ps_module_free (m);
}
END_TEST

START_TEST (test_value_to_string)
{
  int64_t dims[2] = { 2, 2 };
  double v[4] = { 1, 2.5, -3, 4 };
  PsValue *x = arr (PS_F32, 2, dims, v);
  char *s = ps_value_to_string (x, 0);
  ck_assert_str_eq (s, "f32[2,2] {{1, 2.5}, {-3, 4}}");
  g_free (s);
  ps_value_free (x);
}
END_TEST

START_TEST (test_replicas_and_tuple_all_to_all)
{
  /* 2 replicas x 2 partitions: device = r*2 + p. A cross-replica all-reduce
   * (no channel) sums devices with the same partition: {0,2} and {1,3}.
   * replica-id and partition-id report the coordinates. A tuple all-to-all
   * over partitions swaps operand p between partitions. */
  PsModule *m = parse ("HloModule m\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                       " ROOT s = f32[] add(x, y)\n}\nENTRY e {\n p = f32[1] parameter(0)\n"
                       " ar = f32[1] all-reduce(p), replica_groups={}, to_apply=sum\n"
                       " r = u32[] replica-id()\n q = u32[] partition-id()\n"
                       " ten = f32[1] constant({10})\n p10 = f32[1] add(p, ten)\n"
                       " a2a = (f32[1], f32[1]) all-to-all(p, p10), channel_id=1, replica_groups={{0,1}}\n"
                       " ROOT t = (f32[1], u32[], u32[], (f32[1], f32[1])) tuple(ar, r, q, a2a)\n}\n");
  PsValue *args[4];
  for (int d = 0; d < 4; d++)
    {
      int64_t dims[1] = { 1 };
      double v = d;
      args[d] = arr (PS_F32, 1, dims, &v);
    }
  PsInterpOptions o = { 0 };
  o.num_replicas = 2;
  o.num_partitions = 2;
  PsValue *res[4];
  GError *error = NULL;
  ck_assert_msg (ps_interp_run_spmd (m, 4, 1, args, res, &o, &error), "%s", error ? error->message : "");
  for (int d = 0; d < 4; d++)
    {
      int r = d / 2, p = d % 2;
      ck_assert (res[d]->elems[0]->f[0] == p + (p + 2));
      ck_assert_int_eq (res[d]->elems[1]->i[0], r);
      ck_assert_int_eq (res[d]->elems[2]->i[0], p);
      /* Element j comes from partition j (same replica): its operand number p. */
      for (int j = 0; j < 2; j++)
        {
          int src = r * 2 + j;
          ck_assert (res[d]->elems[3]->elems[j]->f[0] == src + (p == 1 ? 10 : 0));
        }
      ps_value_free (res[d]);
    }
  free_args (4, args);
  ps_module_free (m);
}
END_TEST

START_TEST (test_divergent_conditional_without_collective)
{
  /* Device 0 takes the true branch (negate), the others copy: fine, no
   * collective inside. */
  GError *error = NULL;
  PsValue **r = run_spmd ("HloModule m\nneg {\n x = f32[2] parameter(0)\n ROOT n = f32[2] negate(x)\n}\n"
                          "id {\n x = f32[2] parameter(0)\n ROOT c = f32[2] copy(x)\n}\n"
                          "ENTRY e {\n p = f32[2] parameter(0)\n id = u32[] partition-id()\n"
                          " z = u32[] constant(0)\n is0 = pred[] compare(id, z), direction=EQ\n"
                          " ROOT c = f32[2] conditional(is0, p, p), true_computation=neg, false_computation=id\n}\n",
                          4, 2, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  for (int d = 0; d < 4; d++)
    {
      double s = d == 0 ? -1 : 1;
      double want[2] = { s * (2 * d), s * (2 * d + 1) };
      expect_values (r[d], 2, want);
    }
  free_results (4, r);
}
END_TEST

/* ---- verification driver ----------------------------------------------------------------- */

/* A dot [4,8] x [8,6] sharded on the contracting dim over n devices: each
 * device does a local dot then an all-reduce. Written by hand as the
 * partitioner would. */
static void
verify_dot (int n, gboolean broken, PsVerifyResult *res)
{
  char *orig = g_strdup_printf ("HloModule m\nENTRY e {\n"
                                " a = f32[4,8] parameter(0), sharding={devices=[1,%d]<=[%d]}\n"
                                " b = f32[8,6] parameter(1), sharding={devices=[%d,1]<=[%d]}\n"
                                " ROOT d = f32[4,6] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
                                " sharding={replicated}\n}\n", n, n, n, n);
  int k = 8 / n;
  char *part = g_strdup_printf ("HloModule m\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                                " ROOT s = f32[] add(x, y)\n}\nENTRY e {\n"
                                " a = f32[4,%d] parameter(0)\n b = f32[%d,6] parameter(1)\n"
                                " d = f32[4,6] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                                " ROOT ar = f32[4,6] all-reduce(d), channel_id=1, replica_groups={%s},"
                                " use_global_device_ids=true, to_apply=sum\n}\n",
                                k, k, broken ? "{0}" : "");
  /* The broken variant "forgets" the other devices' partial sums. */
  if (broken)
    {
      GString *g = g_string_new (NULL);
      for (int d = 0; d < n; d++)
        g_string_append_printf (g, "%s{%d}", d ? "," : "", d);
      g_free (part);
      part = g_strdup_printf ("HloModule m\nsum {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                              " ROOT s = f32[] add(x, y)\n}\nENTRY e {\n"
                              " a = f32[4,%d] parameter(0)\n b = f32[%d,6] parameter(1)\n"
                              " d = f32[4,6] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                              " ROOT ar = f32[4,6] all-reduce(d), channel_id=1, replica_groups={%s},"
                              " use_global_device_ids=true, to_apply=sum\n}\n", k, k, g->str);
      g_string_free (g, TRUE);
    }
  PsModule *mo = parse (orig), *mp = parse (part);
  GError *error = NULL;
  gboolean ok = ps_verify_spmd (mo, mp, n, NULL, res, &error);
  ck_assert_msg (ok, "verify failed: %s", error ? error->message : "");
  ps_module_free (mo);
  ps_module_free (mp);
  g_free (orig);
  g_free (part);
}

START_TEST (test_verify_dot_contracting)
{
  static const int ns[3] = { 2, 4, 8 };
  PsVerifyResult res;
  verify_dot (ns[_i], FALSE, &res);
  ck_assert_msg (res.agree, "%s", res.message);
  ck_assert_int_eq (res.n_compared, 24 * ns[_i]);
  ps_verify_result_clear (&res);
  verify_dot (ns[_i], TRUE, &res);
  ck_assert (!res.agree);
  ck_assert_msg (strstr (res.message, "output 0 differs on device 0") != NULL, "%s", res.message);
  ps_verify_result_clear (&res);
}
END_TEST

START_TEST (test_verify_uneven_tiles)
{
  /* f32[5] tiled over 2 devices: tiles [0,3) and [3,5) padded to 3. The
   * program adds 1 elementwise; the pad element is ignored. A program that
   * returns the input unchanged must be caught. */
  const char *orig = "HloModule m\nENTRY e {\n p = f32[5] parameter(0), sharding={devices=[2]0,1}\n"
                     " one = f32[] constant(1)\n b = f32[5] broadcast(one), dimensions={}, sharding={devices=[2]0,1}\n"
                     " ROOT a = f32[5] add(p, b), sharding={devices=[2]0,1}\n}\n";
  const char *good = "HloModule m\nENTRY e {\n p = f32[3] parameter(0)\n one = f32[] constant(1)\n"
                     " b = f32[3] broadcast(one), dimensions={}\n ROOT a = f32[3] add(p, b)\n}\n";
  const char *bad = "HloModule m\nENTRY e {\n p = f32[3] parameter(0)\n ROOT a = f32[3] copy(p)\n}\n";
  const char *wrong_shape = "HloModule m\nENTRY e {\n p = f32[5] parameter(0)\n ROOT a = f32[5] copy(p)\n}\n";
  PsModule *mo = parse (orig), *mg = parse (good), *mb = parse (bad), *mw = parse (wrong_shape);
  PsVerifyResult res;
  GError *error = NULL;
  ck_assert (ps_verify_spmd (mo, mg, 2, NULL, &res, &error));
  ck_assert_msg (res.agree, "%s", res.message);
  ck_assert_int_eq (res.n_compared, 5);
  ps_verify_result_clear (&res);
  ck_assert (ps_verify_spmd (mo, mb, 2, NULL, &res, &error));
  ck_assert (!res.agree);
  ps_verify_result_clear (&res);
  ck_assert (!ps_verify_spmd (mo, mw, 2, NULL, &res, &error));
  ck_assert_msg (strstr (error->message, "tile shape") != NULL, "%s", error->message);
  g_clear_error (&error);
  /* The two devices' pieces hold 2 x 3 elements: a cap of 5 refuses to run. */
  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  vo.interp.max_live_elements = 5;
  ck_assert (!ps_verify_spmd (mo, mg, 2, &vo, &res, &error));
  ck_assert_msg (strstr (error->message, "hold 6 elements") != NULL, "%s", error->message);
  g_clear_error (&error);
  ps_module_free (mo);
  ps_module_free (mg);
  ps_module_free (mb);
  ps_module_free (mw);
}
END_TEST

START_TEST (test_verify_maximal_and_replicated)
{
  /* A maximal parameter reaches only device 1; the hand-written program
   * broadcasts it with an all-reduce of the masked value (as XLA does). */
  const char *orig = "HloModule m\nENTRY e {\n p = s32[3] parameter(0), sharding={maximal device=1}\n"
                     " ROOT c = s32[3] copy(p), sharding={replicated}\n}\n";
  const char *part = "HloModule m\nsum {\n x = s32[] parameter(0)\n y = s32[] parameter(1)\n"
                     " ROOT s = s32[] add(x, y)\n}\nENTRY e {\n p = s32[3] parameter(0)\n"
                     " id = u32[] partition-id()\n one = u32[] constant(1)\n"
                     " is = pred[] compare(id, one), direction=EQ\n z = s32[3] constant({0,0,0})\n"
                     " b = pred[3] broadcast(is), dimensions={}\n m = s32[3] select(b, p, z)\n"
                     " ROOT ar = s32[3] all-reduce(m), channel_id=1, replica_groups={{0,1,2,3}},"
                     " use_global_device_ids=true, to_apply=sum\n}\n";
  PsModule *mo = parse (orig), *mp = parse (part);
  PsVerifyResult res;
  GError *error = NULL;
  ck_assert_msg (ps_verify_spmd (mo, mp, 4, NULL, &res, &error), "%s", error ? error->message : "");
  ck_assert_msg (res.agree, "%s", res.message);
  ck_assert_int_eq (res.n_compared, 12);
  ps_verify_result_clear (&res);
  ps_module_free (mo);
  ps_module_free (mp);
}
END_TEST


/* A convolution sharded along its spatial dim, written by hand the way the
 * GSPMD paper's halo exchange does it: each device receives one element
 * from each neighbour through collective-permute (the edge devices get the
 * zeros XLA defines for devices no pair targets, which is exactly the
 * convolution's zero padding), concatenates, and convolves without padding. */
START_TEST (test_verify_conv_halo_exchange)
{
  static const int ns[3] = { 2, 4, 8 };
  int n = ns[_i], len = 16, k = 16 / n;
  char *orig = g_strdup_printf ("HloModule m\nENTRY e {\n"
                                " a = f32[1,%d,1] parameter(0), sharding={devices=[1,%d,1]<=[%d]}\n"
                                " w = f32[3,1,1] parameter(1), sharding={replicated}\n"
                                " ROOT c = f32[1,%d,1] convolution(a, w), window={size=3 pad=1_1},"
                                " dim_labels=b0f_0io->b0f, sharding={devices=[1,%d,1]<=[%d]}\n}\n",
                                len, n, n, len, n, n);
  GString *right = g_string_new ("{"), *left = g_string_new ("{");
  for (int d = 0; d + 1 < n; d++)
    {
      g_string_append_printf (right, "%s{%d,%d}", d ? "," : "", d, d + 1);
      g_string_append_printf (left, "%s{%d,%d}", d ? "," : "", d + 1, d);
    }
  g_string_append (right, "}");
  g_string_append (left, "}");
  char *part = g_strdup_printf ("HloModule m\nENTRY e {\n"
                                " a = f32[1,%d,1] parameter(0)\n w = f32[3,1,1] parameter(1)\n"
                                " last = f32[1,1,1] slice(a), slice={[0:1], [%d:%d], [0:1]}\n"
                                " first = f32[1,1,1] slice(a), slice={[0:1], [0:1], [0:1]}\n"
                                " lh = f32[1,1,1] collective-permute(last), channel_id=1, source_target_pairs=%s\n"
                                " rh = f32[1,1,1] collective-permute(first), channel_id=2, source_target_pairs=%s\n"
                                " x = f32[1,%d,1] concatenate(lh, a, rh), dimensions={1}\n"
                                " ROOT c = f32[1,%d,1] convolution(x, w), window={size=3}, dim_labels=b0f_0io->b0f\n}\n",
                                k, k - 1, k, right->str, left->str, k + 2, k);
  PsModule *mo = parse (orig), *mp = parse (part);
  PsVerifyResult res;
  GError *error = NULL;
  ck_assert_msg (ps_verify_spmd (mo, mp, n, NULL, &res, &error), "%s", error ? error->message : "");
  ck_assert_msg (res.agree, "%s", res.message);
  ck_assert_int_eq (res.n_compared, len);
  ps_verify_result_clear (&res);
  ps_module_free (mp);
  /* Without the right halo, the last element of every tile but the last is wrong. */
  char *broken = g_strdup_printf ("HloModule m\nENTRY e {\n"
                                  " a = f32[1,%d,1] parameter(0)\n w = f32[3,1,1] parameter(1)\n"
                                  " last = f32[1,1,1] slice(a), slice={[0:1], [%d:%d], [0:1]}\n"
                                  " lh = f32[1,1,1] collective-permute(last), channel_id=1, source_target_pairs=%s\n"
                                  " z = f32[] constant(0)\n rh = f32[1,1,1] broadcast(z), dimensions={}\n"
                                  " x = f32[1,%d,1] concatenate(lh, a, rh), dimensions={1}\n"
                                  " ROOT c = f32[1,%d,1] convolution(x, w), window={size=3}, dim_labels=b0f_0io->b0f\n}\n",
                                  k, k - 1, k, right->str, k + 2, k);
  mp = parse (broken);
  ck_assert (ps_verify_spmd (mo, mp, n, NULL, &res, &error));
  ck_assert (!res.agree);
  char *where = g_strdup_printf ("on device 0 at [0,%d,0]", k - 1);
  ck_assert_msg (strstr (res.message, where) != NULL, "%s", res.message);
  ps_verify_result_clear (&res);
  g_free (where);
  ps_module_free (mo);
  ps_module_free (mp);
  g_free (orig);
  g_free (part);
  g_free (broken);
  g_string_free (right, TRUE);
  g_string_free (left, TRUE);
}
END_TEST

static Suite *
interp_suite (void)
{
  Suite *s = suite_create ("interp");
  ps_check_case (s, "ops", 0,
                 PS_CHECK_TESTS (test_etype_round, test_convert_bf16_op,
                                 test_integer_semantics,
                                 test_select_clamp_compare_bitcast,
                                 test_pad_negative_interior,
                                 test_slices_and_friends, test_gather_scatter,
                                 test_sort_multi_operand, test_dot_general,
                                 test_ragged_dot_and_dimension_size,
                                 test_conv_padding_dilation,
                                 test_conv_feature_groups, test_batch_norm,
                                 test_reduce_variants,
                                 test_reduce_window_and_select_and_scatter,
                                 test_while_and_conditional, test_fusion,
                                 test_unsupported_op_error, test_work_limit,
                                 test_bitcast_sizes_and_complex,
                                 test_rng_deterministic, test_value_to_string,
                                 test_linalg));
  TCase *spmd = ps_check_case (s, "spmd", 0, PS_CHECK_TESTS (
      test_stochastic_convert, test_divergent_loop_with_collective,
      test_async_pairs_as_synchronous, test_unsimulatable_ops_refused,
      test_replicas_and_tuple_all_to_all,
      test_divergent_conditional_without_collective));
  tcase_add_loop_test (spmd, test_all_reduce_groups, 0, 3);
  tcase_add_loop_test (spmd, test_all_gather_reduce_scatter_all_to_all, 0, 3);
  tcase_add_loop_test (spmd, test_collective_permute_and_partition_id, 0, 3);
  tcase_add_loop_test (spmd, test_collective_broadcast, 0, 2);
  TCase *ver = ps_check_case (s, "verify", 0, PS_CHECK_TESTS (
      test_verify_uneven_tiles, test_verify_maximal_and_replicated));
  tcase_add_loop_test (ver, test_verify_dot_contracting, 0, 3);
  tcase_add_loop_test (ver, test_verify_conv_halo_exchange, 0, 3);
  return s;
}

int
main (void)
{
  return ps_check_run (interp_suite (), CK_FORK_GETENV);
}

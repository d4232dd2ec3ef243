/* Cost and memory analysis on small HLO modules whose figures are worked
 * out by hand in the comments. */
#include "config.h"

#include <check.h>
#include <string.h>

#include "partitioner/analysis/cost.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/analysis/memory.h"

static PsModule *
parse (const char *text)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (text, strlen (text), "test.hlo", &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  return m;
}

static const char *mlp_hlo =
  "HloModule mlp\n"
  "add {\n"
  "  x = f32[] parameter(0)\n"
  "  y = f32[] parameter(1)\n"
  "  ROOT s = f32[] add(x, y)\n"
  "}\n"
  "ENTRY e {\n"
  "  p0 = f32[8,16] parameter(0)\n"
  "  p1 = f32[16,32] parameter(1)\n"
  "  dot = f32[8,32] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
  "  c = f32[] constant(0)\n"
  "  b = f32[8,32] broadcast(c), dimensions={}\n"
  "  relu = f32[8,32] maximum(dot, b)\n"
  "  ROOT r = f32[8] reduce(relu, c), dimensions={1}, to_apply=add\n"
  "}\n";

START_TEST (test_cost_mlp)
{
  g_autoptr (PsModule) m = parse (mlp_hlo);
  GError *error = NULL;
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, &error);
  ck_assert_msg (a != NULL, "%s", error ? error->message : "");
  PsInstr *dot = ps_module_find_instr (m, "dot");
  PsInstr *relu = ps_module_find_instr (m, "relu");
  PsInstr *r = ps_module_find_instr (m, "r");
  PsInstr *b = ps_module_find_instr (m, "b");
  const PsCost *cd = ps_cost_get (a, dot), *cr = ps_cost_get (a, relu);
  /* dot: 2 x 8 x 32 x 16 */
  ck_assert_uint_eq (cd->own.flops, 8192);
  ck_assert_int_eq (cd->klass, PS_COST_MATMUL);
  /* relu fuses into the dot: the dot writes nothing */
  ck_assert (cd->fused);
  ck_assert_ptr_eq (cd->root, relu);
  ck_assert_uint_eq (cd->own.read_bytes + cd->own.write_bytes, 0);
  ck_assert (!cr->fused);
  ck_assert_ptr_eq (cr->head, dot);
  ck_assert_int_eq (ps_cost_get (a, b)->klass, PS_COST_INLINED);
  /* the fusion reads p0 (512) + p1 (2048) + the broadcast's scalar (4),
   * writes relu (1024) */
  PsCostCounts f = ps_cost_fusion (a, relu);
  ck_assert_uint_eq (f.flops, 8192 + 256);
  ck_assert_uint_eq (f.read_bytes, 512 + 2048 + 4);
  ck_assert_uint_eq (f.write_bytes, 1024);
  ck_assert_uint_eq (f.vector_ops, 256);
  g_autoptr (GPtrArray) mem = ps_cost_fusion_members (a, relu);
  ck_assert_uint_eq (mem->len, 2);
  /* the reduce is not fused (its operand's fusion holds a dot): reads
   * relu and the init value, one add per input element */
  const PsCost *cred = ps_cost_get (a, r);
  ck_assert (!cred->fused);
  ck_assert_uint_eq (cred->own.flops, 256);
  ck_assert_uint_eq (cred->own.read_bytes, 1024 + 4);
  ck_assert_uint_eq (cred->own.write_bytes, 32);
  PsCostCounts t = ps_cost_computation (a, m->entry);
  ck_assert_uint_eq (t.flops, 8192 + 256 + 256);
  ck_assert_uint_eq (t.read_bytes, 2564 + 1028);
  ck_assert_uint_eq (t.write_bytes, 1024 + 32);
  g_autofree char *rep = ps_cost_report (a);
  ck_assert (strstr (rep, "relu") != NULL && strstr (rep, "matmul") != NULL);
}
END_TEST

/* Elementwise chains fuse into one loop fusion, and a reduce takes them in
 * (input fusion). */
START_TEST (test_cost_input_fusion)
{
  g_autoptr (PsModule) m = parse (
    "HloModule chain\n"
    "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
    "ENTRY e {\n"
    "  a = f32[64] parameter(0)\n"
    "  b = f32[64] parameter(1)\n"
    "  s = f32[64] add(a, b)\n"
    "  e = f32[64] exponential(s)\n"
    "  z = f32[] constant(0)\n"
    "  ROOT r = f32[] reduce(e, z), dimensions={0}, to_apply=add\n"
    "}\n");
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  PsInstr *r = ps_module_find_instr (m, "r");
  ck_assert (ps_cost_get (a, ps_module_find_instr (m, "s"))->fused);
  ck_assert (ps_cost_get (a, ps_module_find_instr (m, "e"))->fused);
  PsCostCounts f = ps_cost_fusion (a, r);
  ck_assert_uint_eq (f.flops, 64 + 64 + 64);
  ck_assert_uint_eq (f.read_bytes, 256 + 256 + 4);
  ck_assert_uint_eq (f.write_bytes, 4);
}
END_TEST

/* Convolution FLOPs count only taps on real input: a 1-D conv of 8
 * positions, window 3, padding 1 on both sides, has 8*3 - 2 = 22 taps. */
START_TEST (test_cost_conv)
{
  g_autoptr (PsModule) m = parse (
    "HloModule conv\n"
    "ENTRY e {\n"
    "  x = f32[2,8,4] parameter(0)\n"
    "  k = f32[3,4,5] parameter(1)\n"
    "  ROOT c = f32[2,8,5] convolution(x, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f\n"
    "}\n");
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  const PsCost *c = ps_cost_get (a, ps_module_find_instr (m, "c"));
  ck_assert_int_eq (c->klass, PS_COST_CONV);
  /* batch 2 x out features 5 x in features 4 x 22 taps, 2 FLOPs each */
  ck_assert_uint_eq (c->own.flops, 2 * 2 * 5 * 4 * 22);
}
END_TEST

/* The taps of random 1-D windows (size, stride, padding which may be
 * negative, base and window dilation) counted in closed form agree with
 * counting every (output, window) position; and a window of a billion
 * positions over a billion outputs is costed without visiting them (it
 * took hours). */
START_TEST (test_cost_conv_windows)
{
  GRand *r = g_rand_new_with_seed (17);
  for (int t = 0; t < 400; t++)
    {
      int64_t in = g_rand_int_range (r, 1, 12), size = g_rand_int_range (r, 1, 5);
      int64_t st = g_rand_int_range (r, 1, 4), lo = g_rand_int_range (r, -2, 4), hi = g_rand_int_range (r, -2, 4);
      int64_t ld = g_rand_int_range (r, 1, 4), rd = g_rand_int_range (r, 1, 4);
      int64_t extent = (in - 1) * ld + 1, padded = extent + lo + hi, span = (size - 1) * rd + 1;
      if (padded < span)
        continue;
      int64_t out = (padded - span) / st + 1;
      int64_t taps = 0;
      for (int64_t o = 0; o < out; o++)
        for (int64_t k = 0; k < size; k++)
          {
            int64_t pos = o * st + k * rd - lo;
            taps += pos >= 0 && pos < extent && pos % ld == 0;
          }
      g_autofree char *text = g_strdup_printf (
        "HloModule conv\nENTRY e {\n"
        "  x = f32[1,%" G_GINT64_FORMAT ",1] parameter(0)\n"
        "  k = f32[%" G_GINT64_FORMAT ",1,1] parameter(1)\n"
        "  ROOT c = f32[1,%" G_GINT64_FORMAT ",1] convolution(x, k), window={size=%" G_GINT64_FORMAT
        " stride=%" G_GINT64_FORMAT " pad=%" G_GINT64_FORMAT "_%" G_GINT64_FORMAT " lhs_dilate=%"
        G_GINT64_FORMAT " rhs_dilate=%" G_GINT64_FORMAT "}, dim_labels=b0f_0io->b0f\n}\n",
        in, size, out, size, st, lo, hi, ld, rd);
      g_autoptr (PsModule) m = parse (text);
      g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
      const PsCost *c = ps_cost_get (a, ps_module_find_instr (m, "c"));
      ck_assert_msg (c->own.flops == (uint64_t) (2 * taps), "%s: %" G_GUINT64_FORMAT " flops, %"
                     G_GINT64_FORMAT " taps", text, c->own.flops, taps);
    }
  g_rand_free (r);
  g_autoptr (PsModule) big = parse (
    "HloModule conv\nENTRY e {\n"
    "  x = f32[1,2147483648,1] parameter(0)\n"
    "  k = f32[1073741824,1,1] parameter(1)\n"
    "  ROOT c = f32[1,1073741825,1] convolution(x, k), window={size=1073741824}, dim_labels=b0f_0io->b0f\n"
    "}\n");
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (big, NULL, NULL);
  const PsCost *c = ps_cost_get (a, ps_module_find_instr (big, "c"));
  ck_assert_uint_eq (c->own.flops, 2 * (uint64_t) 1073741825 * 1073741824);
}
END_TEST

static const char *loop_hlo =
  "HloModule loop\n"
  "cond {\n"
  "  p = (s32[], f32[4]) parameter(0)\n"
  "  i = s32[] get-tuple-element(p), index=0\n"
  "  n = s32[] constant(5)\n"
  "  ROOT lt = pred[] compare(i, n), direction=LT\n"
  "}\n"
  "body {\n"
  "  p = (s32[], f32[4]) parameter(0)\n"
  "  i = s32[] get-tuple-element(p), index=0\n"
  "  one = s32[] constant(1)\n"
  "  i2 = s32[] add(i, one)\n"
  "  x = f32[4] get-tuple-element(p), index=1\n"
  "  y = f32[4] exponential(x)\n"
  "  ROOT t = (s32[], f32[4]) tuple(i2, y)\n"
  "}\n"
  "ENTRY e {\n"
  "  a = f32[4] parameter(0)\n"
  "  z = s32[] constant(%d)\n"
  "  t = (s32[], f32[4]) tuple(z, a)\n"
  "  w = (s32[], f32[4]) while(t), condition=cond, body=body\n"
  "  ROOT r = f32[4] get-tuple-element(w), index=1\n"
  "}\n";

START_TEST (test_cost_while)
{
  g_autofree char *text = g_strdup_printf (loop_hlo, 0);
  g_autoptr (PsModule) m = parse (text);
  PsInstr *w = ps_module_find_instr (m, "w");
  int64_t n = -1;
  ck_assert (ps_while_trip_count (w, &n));
  ck_assert_int_eq (n, 5);
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  ck_assert_int_eq (ps_cost_get (a, w)->trip_count, 5);
  /* per iteration: exp 4; the counter's add and the condition's compare
   * run on the scalar unit, free */
  ck_assert_uint_eq (ps_cost_computation (a, m->entry).flops, 5 * 4);
  ck_assert_int_eq (ps_cost_get (a, ps_module_find_instr (m, "i2"))->klass, PS_COST_FREE);

  /* start at 3: two iterations */
  g_autofree char *text3 = g_strdup_printf (loop_hlo, 3);
  g_autoptr (PsModule) m3 = parse (text3);
  ck_assert (ps_while_trip_count (ps_module_find_instr (m3, "w"), &n));
  ck_assert_int_eq (n, 2);
}
END_TEST

START_TEST (test_cost_while_unknown)
{
  g_autoptr (PsModule) m = parse (
    "HloModule loop\n"
    "mx {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(a, b)\n}\n"
    "cond {\n  p = f32[4] parameter(0)\n  x = f32[] constant(1)\n"
    "  y = f32[] reduce(p, x), dimensions={0}, to_apply=mx\n"
    "  ROOT lt = pred[] compare(y, x), direction=LT\n}\n"
    "body {\n  p = f32[4] parameter(0)\n  ROOT y = f32[4] exponential(p)\n}\n"
    "ENTRY e {\n  a = f32[4] parameter(0)\n"
    "  ROOT w = f32[4] while(a), condition=cond, body=body\n}\n");
  GError *error = NULL;
  ck_assert_ptr_null (ps_cost_analyze (m, NULL, &error));
  ck_assert_msg (g_error_matches (error, PS_ERROR, PS_ERROR_UNSUPPORTED), "%s", error->message);
  ck_assert (strstr (error->message, "trip count unknown") != NULL);
  g_clear_error (&error);
  PsCostOptions o;
  ps_cost_options_init (&o);
  o.default_trip_count = 3;
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, &o, &error);
  ck_assert_ptr_nonnull (a);
  ck_assert_int_eq (ps_cost_get (a, ps_module_find_instr (m, "w"))->trip_count, 3);
  /* reduce 4 + exp 4 (the scalar compare is the scalar unit's) */
  ck_assert_uint_eq (ps_cost_computation (a, m->entry).flops, 3 * (4 + 4));
}
END_TEST

/* XLA's known_trip_count in backend_config, quoted or as raw JSON. */
START_TEST (test_cost_known_trip_count)
{
  const char *forms[] = { "backend_config={\"known_trip_count\":{\"n\":\"7\"}}",
                          "backend_config=\"{\\\"known_trip_count\\\":{\\\"n\\\":\\\"7\\\"}}\"" };
  for (gsize i = 0; i < G_N_ELEMENTS (forms); i++)
    {
      g_autofree char *text = g_strdup_printf (
        "HloModule loop\n"
        "cond {\n  p = f32[4] parameter(0)\n  ROOT t = pred[] constant(true)\n}\n"
        "body {\n  p = f32[4] parameter(0)\n  ROOT y = f32[4] exponential(p)\n}\n"
        "ENTRY e {\n  a = f32[4] parameter(0)\n"
        "  ROOT w = f32[4] while(a), condition=cond, body=body, %s\n}\n", forms[i]);
      g_autoptr (PsModule) m = parse (text);
      int64_t n = 0;
      ck_assert_msg (ps_while_trip_count (ps_module_find_instr (m, "w"), &n), "%s", forms[i]);
      ck_assert_int_eq (n, 7);
      g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
      ck_assert_uint_eq (ps_cost_computation (a, m->entry).flops, 7 * 4);
    }
}
END_TEST

START_TEST (test_memory_mlp)
{
  g_autoptr (PsModule) m = parse (mlp_hlo);
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  GError *error = NULL;
  /* with fusion: p0 512 + p1 2048 + c 4 always; relu 1024 and r 32 are
   * live together at the reduce */
  g_autoptr (PsMemoryReport) r = ps_memory_analyze (m, a, &error);
  ck_assert_ptr_nonnull (r);
  ck_assert_uint_eq (r->parameter_bytes, 2564);
  ck_assert_uint_eq (r->peak_bytes, 2564 + 1024 + 32);
  ck_assert_str_eq (r->peak_instr->name, "r");
  ck_assert_uint_eq (r->output_bytes, 32);
  ck_assert_uint_eq (r->holders->len, 5);
  const PsMemoryHolder *h0 = &g_array_index (r->holders, PsMemoryHolder, 0);
  const PsMemoryHolder *h1 = &g_array_index (r->holders, PsMemoryHolder, 1);
  ck_assert_str_eq (h0->instr->name, "p1");
  ck_assert_str_eq (h1->instr->name, "relu");
  /* after the program only parameters and the output remain */
  ck_assert_uint_eq (ps_memory_live_after (r, ps_module_find_instr (m, "r")), 2564 + 32);
  g_autofree char *text = ps_memory_report_to_string (r, 3);
  ck_assert_msg (strstr (text, "per-device peak") && strstr (text, "relu"), "%s", text);

  /* without fusion the dot's result is a buffer too: dot and relu live at relu */
  g_autoptr (PsMemoryReport) u = ps_memory_analyze (m, NULL, &error);
  ck_assert_uint_eq (u->peak_bytes, 2564 + 1024 + 1024);
  ck_assert_str_eq (u->peak_instr->name, "relu");
}
END_TEST

START_TEST (test_memory_while)
{
  g_autofree char *text = g_strdup_printf (loop_hlo, 0);
  g_autoptr (PsModule) m = parse (text);
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  g_autoptr (PsMemoryReport) r = ps_memory_analyze (m, a, NULL);
  /* entry: a 16 + z 4 always; the while updates its state in place, so
   * it copies the parameter a and the constant z it writes (XLA's copy
   * insertion): 16 + 4; its body's temporaries: i2 (4) + y (16) + the
   * constant one (4) */
  ck_assert_uint_eq (r->parameter_bytes, 20);
  ck_assert_uint_eq (r->peak_bytes, 20 + 16 + 4 + 4 + 16 + 4);
  ck_assert_str_eq (r->peak_instr->name, "w");

  /* a loop state element the body only reads is not copied, and a
   * dynamic-update-slice of the loop state is in place */
  static const char *rw =
    "HloModule rw\n"
    "cond {\n"
    "  p = (s32[], f32[8,4], f32[1,4]) parameter(0)\n"
    "  i = s32[] get-tuple-element(p), index=0\n"
    "  n = s32[] constant(8)\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"
    "}\n"
    "body {\n"
    "  p = (s32[], f32[8,4], f32[1,4]) parameter(0)\n"
    "  i = s32[] get-tuple-element(p), index=0\n"
    "  one = s32[] constant(1)\n"
    "  i2 = s32[] add(i, one)\n"
    "  s = f32[8,4] get-tuple-element(p), index=1\n"
    "  u = f32[1,4] get-tuple-element(p), index=2\n"
    "  zero = s32[] constant(0)\n"
    "  d = f32[8,4] dynamic-update-slice(s, u, i, zero)\n"
    "  ROOT t = (s32[], f32[8,4], f32[1,4]) tuple(i2, d, u)\n"
    "}\n"
    "ENTRY e {\n"
    "  a = f32[1,4] parameter(0)\n"
    "  z = s32[] constant(0)\n"
    "  c0 = f32[] constant(0)\n"
    "  b = f32[8,4] broadcast(c0), dimensions={}\n"
    "  t = (s32[], f32[8,4], f32[1,4]) tuple(z, b, a)\n"
    "  w = (s32[], f32[8,4], f32[1,4]) while(t), condition=cond, body=body\n"
    "  ROOT r = f32[8,4] get-tuple-element(w), index=1\n"
    "}\n";
  g_autoptr (PsModule) m2 = parse (rw);
  g_autoptr (PsCostAnalysis) a2 = ps_cost_analyze (m2, NULL, NULL);
  g_autoptr (PsMemoryReport) r2 = ps_memory_analyze (m2, a2, NULL);
  /* a 16, z 4, the broadcast's constant 4 always; the written elements
   * get buffers (counter 4, the stack 128); a is read in place; the body
   * adds i2, one and zero (12), not a second stack */
  ck_assert_uint_eq (r2->parameter_bytes, 16 + 4 + 4);
  ck_assert_uint_eq (r2->peak_bytes, 24 + 4 + 128 + 12);
  ck_assert_uint_eq (r2->output_bytes, 128);
}
END_TEST

static Suite *
analysis_suite (void)
{
  Suite *s = suite_create ("analysis");
  TCase *tc = tcase_create ("core");
  tcase_add_test (tc, test_cost_mlp);
  tcase_add_test (tc, test_cost_input_fusion);
  tcase_add_test (tc, test_cost_conv);
  tcase_add_test (tc, test_cost_conv_windows);
  tcase_add_test (tc, test_cost_while);
  tcase_add_test (tc, test_cost_while_unknown);
  tcase_add_test (tc, test_cost_known_trip_count);
  tcase_add_test (tc, test_memory_mlp);
  tcase_add_test (tc, test_memory_while);
  suite_add_tcase (s, tc);
  return s;
}

int
main (void)
{
  SRunner *sr = srunner_create (analysis_suite ());
  srunner_run_all (sr, CK_NORMAL);
  int failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? 0 : 1;
}

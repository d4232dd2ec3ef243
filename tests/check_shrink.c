/* Scaled-down copies for verification (partitioner/interp/shrink.h): which dims
 * shrink and to what, which are kept, that the copy validates, and that a
 * module too large for the interpreter is verified through its copy; and
 * verify.h's recheck of float mismatches in f64. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/interp/shrink.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/spmd/spmd.h"
#include "partitioner/interp/verify.h"

static PsModule *
parse (const char *text)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (text, strlen (text), "test", &error);
  ck_assert_msg (m != NULL, "parse: %s", error ? error->message : "?");
  return m;
}

static const PsShape *
shape_of (const PsModule *m, const char *name)
{
  const PsInstr *in = ps_module_find_instr (m, name);
  ck_assert_msg (in != NULL, "no instruction %s", name);
  return in->shape;
}

static void
assert_dims (const PsModule *m, const char *name, int rank, const int64_t *want)
{
  const PsShape *s = shape_of (m, name);
  ck_assert_int_eq (s->rank, rank);
  for (int d = 0; d < rank; d++)
    ck_assert_msg (s->dims[d] == want[d], "%s dim %d: %" G_GINT64_FORMAT ", want %" G_GINT64_FORMAT,
                   name, d, s->dims[d], want[d]);
}

/* A dot, a transpose and a full slice: every dim shrinks to the smallest
 * size >= 8 with the same remainder modulo the lcm of its shard counts:
 * M = 1003 split 2 ways (a, d): 1 + 2k -> 9; K = 4099 split 4 ways (a, b):
 * 3 + 4k -> 11; N = 300 split 2 (b) and 4 (d) ways: lcm 4, 0 + 4k -> 8. */
START_TEST (test_shrink_sizes)
{
  g_autoptr (PsModule) m = parse (
    "HloModule m\nENTRY e {\n"
    "  a = f32[1003,4099] parameter(0), sharding={devices=[2,4]<=[8]}\n"
    "  b = f32[4099,300] parameter(1), sharding={devices=[4,2]<=[8]}\n"
    "  d = f32[1003,300] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " sharding={devices=[2,4]<=[8]}\n"
    "  t = f32[300,1003] transpose(d), dimensions={1,0}, sharding={devices=[4,2]<=[8]}\n"
    "  ROOT s = f32[300,1003] slice(t), slice={[0:300],[0:1003]}, sharding={devices=[4,2]<=[8]}\n}\n");
  PsShrinkReport rep;
  GError *error = NULL;
  g_autoptr (PsModule) small = ps_shrink_module (m, NULL, &rep, &error);
  ck_assert_msg (small != NULL, "%s", error ? error->message : "?");
  assert_dims (small, "a", 2, (int64_t[]) { 9, 11 });
  assert_dims (small, "b", 2, (int64_t[]) { 11, 8 });
  assert_dims (small, "d", 2, (int64_t[]) { 9, 8 });
  assert_dims (small, "t", 2, (int64_t[]) { 8, 9 });
  assert_dims (small, "s", 2, (int64_t[]) { 8, 9 });
  const PsInstr *s = ps_module_find_instr (small, "s");
  ck_assert_int_eq (s->slice_limits.v[0], 8);
  ck_assert_int_eq (s->slice_limits.v[1], 9);
  ck_assert_int_eq (rep.n_shrunk, 3);
  ck_assert_int_eq (rep.max_elements_before, 1003 * 4099);
  ck_assert_int_eq (rep.max_elements_after, 11 * 9);
  /* The original is untouched. */
  assert_dims (m, "a", 2, (int64_t[]) { 1003, 4099 });
}
END_TEST

/* Dims whose size the program depends on keep it: a constant's dim (and
 * everything elementwise-joined to it), a partial slice; a reshape that only
 * drops a size-1 dim joins the rest; a reshape that merges dims makes the
 * merged dim follow the major factor (x: 64 split 2 ways -> 8, so y: 8 x 50),
 * unless two different merges meet (a and b, added: all kept). */
START_TEST (test_shrink_pins)
{
  g_autoptr (PsModule) m = parse (
    "HloModule m\nENTRY e {\n"
    "  p = f32[10] parameter(0)\n"
    "  c = f32[10] constant({0,1,2,3,4,5,6,7,8,9})\n"
    "  q = f32[10] add(p, c)\n"
    "  x = f32[64,50] parameter(1), sharding={devices=[2,1]<=[2]}\n"
    "  y = f32[3200] reshape(x)\n"
    "  z = f32[40,1,70] parameter(2)\n"
    "  w = f32[40,70] reshape(z)\n"
    "  v = f32[30,70] slice(w), slice={[0:30],[0:70]}\n"
    "  a = f32[32,100] parameter(3)\n"
    "  b = f32[64,50] parameter(4)\n"
    "  ra = f32[3200] reshape(a)\n"
    "  rb = f32[3200] reshape(b)\n"
    "  s = f32[3200] add(ra, rb)\n"
    "  ROOT r = (f32[10], f32[3200], f32[30,70], f32[3200]) tuple(q, y, v, s)\n}\n");
  GError *error = NULL;
  g_autoptr (PsModule) small = ps_shrink_module (m, NULL, NULL, &error);
  ck_assert_msg (small != NULL, "%s", error ? error->message : "?");
  assert_dims (small, "p", 1, (int64_t[]) { 10 });
  assert_dims (small, "q", 1, (int64_t[]) { 10 });
  assert_dims (small, "x", 2, (int64_t[]) { 8, 50 });
  assert_dims (small, "y", 1, (int64_t[]) { 400 });
  assert_dims (small, "a", 2, (int64_t[]) { 32, 100 });
  assert_dims (small, "b", 2, (int64_t[]) { 64, 50 });
  assert_dims (small, "s", 1, (int64_t[]) { 3200 });
  assert_dims (small, "z", 3, (int64_t[]) { 40, 1, 8 });
  assert_dims (small, "w", 2, (int64_t[]) { 40, 8 });
  assert_dims (small, "v", 2, (int64_t[]) { 30, 8 });
  const PsShape *r = shape_of (small, "r");
  ck_assert_int_eq (r->elems[1]->dims[0], 400);
  ck_assert_int_eq (r->elems[2]->dims[1], 8);
}
END_TEST

START_TEST (test_shrink_nothing)
{
  g_autoptr (PsModule) m = parse (
    "HloModule m\nENTRY e {\n"
    "  c = f32[10] constant({0,1,2,3,4,5,6,7,8,9})\n"
    "  ROOT n = f32[10] negate(c)\n}\n");
  GError *error = NULL;
  PsModule *small = ps_shrink_module (m, NULL, NULL, &error);
  ck_assert (small == NULL);
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_UNSUPPORTED));
  ck_assert_msg (strstr (error->message, "cannot scale the module down") != NULL, "%s", error->message);
  g_error_free (error);
}
END_TEST

/* Loop-carried values join the body's parameter, root and the condition's
 * parameter; the copy validates and the loop still runs. */
START_TEST (test_shrink_while)
{
  g_autoptr (PsModule) m = parse (
    "HloModule m\n"
    "cond {\n  p = (s32[], f32[1000]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"
    "  n = s32[] constant(3)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
    "body {\n  p = (s32[], f32[1000]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"
    "  one = s32[] constant(1)\n  j = s32[] add(i, one)\n  x = f32[1000] get-tuple-element(p), index=1\n"
    "  y = f32[1000] add(x, x)\n  ROOT t = (s32[], f32[1000]) tuple(j, y)\n}\n"
    "ENTRY e {\n  a = f32[1000] parameter(0), sharding={devices=[3]<=[3]}\n  z = s32[] constant(0)\n"
    "  t = (s32[], f32[1000]) tuple(z, a)\n"
    "  w = (s32[], f32[1000]) while(t), condition=cond, body=body\n"
    "  ROOT r = f32[1000] get-tuple-element(w), index=1\n}\n");
  GError *error = NULL;
  g_autoptr (PsModule) small = ps_shrink_module (m, NULL, NULL, &error);
  ck_assert_msg (small != NULL, "%s", error ? error->message : "?");
  /* 1000 = 1 (mod 3): 1 + 3k >= 8 -> 10. */
  assert_dims (small, "a", 1, (int64_t[]) { 10 });
  assert_dims (small, "r", 1, (int64_t[]) { 10 });
  const PsComputation *body = ps_module_find_computation (small, "body");
  ck_assert_int_eq (ps_computation_find_instr (body, "y")->shape->dims[0], 10);
}
END_TEST

/* A contracting-dim dot over 4 devices with 2^26 + 2^25 elements per
 * operand: over the interpreter's limits, checked on its copy. The check can
 * fail: a different program does not pass for the copy's. */
START_TEST (test_shrink_verify)
{
  const char *text =
    "HloModule m\nENTRY e {\n"
    "  a = f32[1536,65537] parameter(0), sharding={devices=[1,4]<=[4]}\n"
    "  b = f32[65537,1024] parameter(1), sharding={devices=[4,1]<=[4]}\n"
    "  ROOT d = f32[1536,1024] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " sharding={devices=[4,1]<=[4]}\n}\n";
  g_autoptr (PsModule) m = parse (text);
  GError *error = NULL;
  g_autoptr (GHashTable) choices = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  PsSpmdOptions so;
  ps_spmd_options_init (&so);
  so.choices = choices;
  g_autoptr (PsModule) part = ps_spmd_partition (m, 4, &so, &error);
  ck_assert_msg (part != NULL, "%s", error ? error->message : "?");
  ck_assert_int_eq (g_hash_table_size (choices), 1);

  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  PsVerifyResult res;
  ck_assert (!ps_verify_spmd (m, part, 4, &vo, &res, &error));
  ck_assert_msg (g_error_matches (error, PS_ERROR, PS_ERROR_LIMIT), "%s", error->message);
  g_clear_error (&error);

  so.replay_choices = TRUE;
  PsShrinkReport rep;
  ck_assert_msg (ps_shrink_verify (m, part, 4, &so, NULL, &vo, &res, &rep, &error), "%s",
                 error ? error->message : "?");
  ck_assert_msg (res.agree, "%s", res.message);
  ck_assert (res.n_compared > 0);
  ck_assert (rep.max_elements_after < 1000);
  ps_verify_result_clear (&res);

  /* Another sharding of the output partitions into another program. */
  g_autoptr (PsModule) other = parse (
    "HloModule m\nENTRY e {\n"
    "  a = f32[1536,65537] parameter(0), sharding={devices=[1,4]<=[4]}\n"
    "  b = f32[65537,1024] parameter(1), sharding={devices=[4,1]<=[4]}\n"
    "  ROOT d = f32[1536,1024] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " sharding={replicated}\n}\n");
  g_autoptr (PsModule) other_part = ps_spmd_partition (other, 4, NULL, &error);
  ck_assert (other_part != NULL);
  char *why = NULL;
  ck_assert (!ps_shrink_same_program (part, other_part, &why));
  ck_assert (why != NULL);
  g_free (why);
  ck_assert (ps_shrink_same_program (part, part, NULL));
}
END_TEST

/* 16-bit floats: partial sums rounded to bf16 on 64 devices differ from the
 * whole sum by more than the bf16 tolerance; the recheck in f64 agrees and
 * says so. A wrong program (the partitioning of another module) differs in
 * f64 too. */
static const char *bf16_dot =
  "HloModule m\nENTRY e {\n"
  "  p0 = bf16[16,4,512] parameter(0), sharding={devices=[16,1,4]<=[64]}\n"
  "  p1 = bf16[16,4,512] parameter(1), sharding={devices=[16,1,4]<=[64]}\n"
  "  m = bf16[16,4,512] %s(p0, p1), sharding={devices=[16,1,4]<=[64]}\n"
  "  p2 = bf16[1,2048,16] parameter(2), sharding={devices=[1,4,16]<=[16,4]T(1,0)}\n"
  "  r = bf16[4,512,16] reshape(p2), sharding={devices=[4,1,16]<=[16,4]T(1,0)}\n"
  "  ROOT d = bf16[16,16] dot(m, r), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1},"
  " sharding={devices=[16,4]<=[64]}\n}\n";

START_TEST (test_verify_widen)
{
  g_autofree char *t_mul = g_strdup_printf (bf16_dot, "multiply");
  g_autofree char *t_add = g_strdup_printf (bf16_dot, "add");
  g_autoptr (PsModule) m = parse (t_mul);
  g_autoptr (PsModule) other = parse (t_add);
  GError *error = NULL;
  g_autoptr (PsModule) part = ps_spmd_partition (m, 64, NULL, &error);
  ck_assert_msg (part != NULL, "%s", error ? error->message : "?");
  g_autoptr (PsModule) other_part = ps_spmd_partition (other, 64, NULL, &error);
  ck_assert (other_part != NULL);

  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  PsVerifyResult res;
  vo.no_widen = TRUE;
  ck_assert (ps_verify_spmd (m, part, 64, &vo, &res, &error));
  ck_assert_msg (!res.agree, "bf16 partial sums agreed within tolerance: %s", res.message);
  ps_verify_result_clear (&res);

  vo.no_widen = FALSE;
  ck_assert (ps_verify_spmd (m, part, 64, &vo, &res, &error));
  ck_assert_msg (res.agree && res.widened, "%s", res.message);
  ck_assert (strstr (res.message, "in f64 arithmetic") != NULL);
  ps_verify_result_clear (&res);

  ck_assert (ps_verify_spmd (m, other_part, 64, &vo, &res, &error));
  ck_assert (!res.agree);
  ck_assert (!res.widened);
  ps_verify_result_clear (&res);
}
END_TEST

static char *
replace_all (const char *text, const char *from, const char *to)
{
  g_auto (GStrv) parts = g_strsplit (text, from, -1);
  return g_strjoinv (to, parts);
}

/* examples/transformer_layer.hlo differs on 8 devices as written (bf16) and
 * in f32, by rounding under cancellation (doc/interpreter.md, "Rounding"):
 * its outputs are sums of terms whose magnitudes add up to thousands of
 * times the result. Measured here on the f64 module with a second output,
 * |res1| + dot(|act|, |w_out|), on inputs like verify's; the f64 module
 * agrees without a recheck, and as written it agrees in f64 arithmetic. */
START_TEST (test_example_cancellation)
{
  g_autofree char *path = g_build_filename (g_getenv ("PS_SRCDIR") ? g_getenv ("PS_SRCDIR") : PS_SRCDIR,
                                            "examples", "transformer_layer.hlo", NULL);
  g_autofree char *text = NULL;
  ck_assert (g_file_get_contents (path, &text, NULL, NULL));
  g_autofree char *t1 = replace_all (text, "bf16", "f64");
  g_autofree char *t64 = replace_all (t1, "f32", "f64");
  const char *root = "  ROOT %out = f64[8,16,32] add(%res1, %ffn)";
  ck_assert (strstr (t64, root) != NULL);
  g_autofree char *tmag = replace_all (t64, root,
    "  %out = f64[8,16,32] add(%res1, %ffn)\n"
    "  %act.a = f64[8,16,64] abs(%act)\n"
    "  %w_out.a = f64[32,64] abs(%w_out)\n"
    "  %ffn.a = f64[8,16,32] dot(%act.a, %w_out.a), lhs_contracting_dims={2}, rhs_contracting_dims={1}\n"
    "  %res1.a = f64[8,16,32] abs(%res1)\n"
    "  %terms = f64[8,16,32] add(%res1.a, %ffn.a)\n"
    "  ROOT %t = (f64[8,16,32], f64[8,16,32]) tuple(%out, %terms)");
  g_autoptr (PsModule) mag = parse (tmag);
  PsValue *args[8];
  int np = (int) mag->entry->params->len;
  ck_assert_int_eq (np, 8);
  guint64 st = 1;
  for (int p = 0; p < np; p++)
    {
      const PsInstr *pi = mag->entry->params->pdata[p];
      args[p] = ps_value_new (pi->shape);
      for (int64_t i = 0; i < args[p]->n; i++)
        {
          st = st * 6364136223846793005ULL + 1442695040888963407ULL;
          ps_value_set (args[p], i, ((double) (int64_t) ((st >> 33) % 4096) - 2048.0) / 1024.0);
        }
    }
  GError *error = NULL;
  PsValue *r = ps_interp_run (mag, np, args, NULL, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "?");
  double mean_terms = 0, max_ratio = 0;
  const PsValue *out = r->elems[0], *terms = r->elems[1];
  for (int64_t i = 0; i < out->n; i++)
    {
      double o = fabs (ps_value_get (out, i)), t = ps_value_get (terms, i);
      mean_terms += t / (double) out->n;
      max_ratio = fmax (max_ratio, t / fmax (o, 1e-300));
    }
  printf ("transformer_layer: the output's terms add up to %.0f on average; at most %.0f times "
          "the result\n", mean_terms, max_ratio);
  ck_assert (mean_terms > 1000 && max_ratio > 1000);
  ps_value_free (r);
  for (int p = 0; p < np; p++)
    ps_value_free (args[p]);

  /* Partitioned on 8 devices: the f64 module agrees outright; as written it
   * differs and agrees in f64 arithmetic. */
  const char *texts[2] = { t64, text };
  for (int k = 0; k < 2; k++)
    {
      g_autoptr (PsModule) m = parse (texts[k]);
      /* As podsim verify: the entry's written shardings are kept. */
      static const gboolean no = FALSE;
      PsPropagateOptions po;
      ps_propagate_options_init (&po);
      po.n_to_output = po.n_to_parameters = 1;
      po.to_output = po.to_parameters = &no;
      ck_assert_msg (ps_propagate (m, &po, &error), "%s", error ? error->message : "?");
      g_autoptr (PsModule) part = ps_spmd_partition (m, 8, NULL, &error);
      ck_assert_msg (part != NULL, "%s", error ? error->message : "?");
      PsVerifyOptions vo;
      ps_verify_options_init (&vo);
      PsVerifyResult res;
      ck_assert (ps_verify_spmd (m, part, 8, &vo, &res, &error));
      ck_assert_msg (res.agree && res.widened == (k == 1), "%s", res.message);
      ps_verify_result_clear (&res);
    }
}
END_TEST

static Suite *
shrink_suite (void)
{
  Suite *s = suite_create ("shrink");
  ps_check_case (s, "scaled_copies_partition_alike", 120,
                 PS_CHECK_TESTS (test_shrink_sizes, test_shrink_pins,
                                 test_shrink_nothing, test_shrink_while,
                                 test_shrink_verify, test_verify_widen,
                                 test_example_cancellation));
  return s;
}

int
main (void)
{
  return ps_check_run (shrink_suite (), CK_FORK_GETENV);
}

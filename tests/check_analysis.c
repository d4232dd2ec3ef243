/* Cost and memory analysis on small HLO modules whose figures are worked
 * out by hand in the comments. */
#include "config.h"

#include <check.h>
#include <string.h>

#include "partitioner/analysis/cost.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/analysis/lower.h"
#include "partitioner/analysis/memory.h"
#include "partitioner/analysis/schedule.h"
#include "partitioner/analysis/tiling.h"
#include "tests/loop_hlo.h"
#include "tests/suite_main.h"

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

/* The cost analysis with dense bytes (no buffer tiling): the fusion
 * tests count bytes by hand; test_memory_tiling checks the tiled traffic. */
static PsCostAnalysis *
analyze_dense (const PsModule *m, GError **error)
{
  PsCostOptions o;
  ps_cost_options_init (&o);
  o.tiling = PS_TILING_NONE;
  return ps_cost_analyze (m, &o, error);
}

START_TEST (test_cost_mlp)
{
  g_autoptr (PsModule) m = parse (mlp_hlo);
  GError *error = NULL;
  g_autoptr (PsCostAnalysis) a = analyze_dense (m, &error);
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
  g_autoptr (PsCostAnalysis) a = analyze_dense (m, NULL);
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
/* XLA's producer duplication (fusion.h): a cheap producer read by two
 * fusible consumers is copied into both; an expensive one (exp) is not. */
static const char *dup_hlo =
  "HloModule dup\n"
  "ENTRY e {\n"
  "  p0 = f32[1024] parameter(0)\n"
  "  p1 = f32[1024] parameter(1)\n"
  "  neg = f32[1024] negate(p0)\n"
  "  a = f32[1024] add(neg, p1)\n"
  "  m = f32[1024] multiply(neg, p1)\n"
  "  ex = f32[1024] exponential(p1)\n"
  "  s = f32[1024] subtract(ex, p0)\n"
  "  d = f32[1024] divide(ex, p0)\n"
  "  ROOT t = (f32[1024], f32[1024], f32[1024], f32[1024]) tuple(a, m, s, d)\n"
  "}\n";

/* The figures worked out by hand below are dense bytes: tiling off
 * (test_memory_tiling checks the tiled sizes). */
static PsCostAnalysis *
analyze_with (const PsModule *m, PsFusionMode mode)
{
  PsCostOptions o;
  ps_cost_options_init (&o);
  o.fusion = mode;
  o.tiling = PS_TILING_NONE;
  GError *error = NULL;
  PsCostAnalysis *a = ps_cost_analyze (m, &o, &error);
  ck_assert_msg (a != NULL, "%s", error ? error->message : "");
  return a;
}

START_TEST (test_fusion_duplicates_cheap_producers)
{
  g_autoptr (PsModule) m = parse (dup_hlo);
  PsInstr *neg = ps_module_find_instr (m, "neg"), *a_ = ps_module_find_instr (m, "a");
  PsInstr *mul = ps_module_find_instr (m, "m"), *ex = ps_module_find_instr (m, "ex");
  PsInstr *s_ = ps_module_find_instr (m, "s");
  ck_assert (!ps_fusion_is_expensive (neg));
  ck_assert (ps_fusion_is_expensive (ex));
  ck_assert (ps_fusion_is_expensive (ps_module_find_instr (m, "d")));
  ck_assert (ps_fusion_duplicates (neg));
  ck_assert (!ps_fusion_duplicates (ex));

  /* xla: neg is computed inside the fusions reading it; a, m and ex,
   * all reading p1 (a and m p0 too, through neg), are one sibling
   * multi-output fusion (root ex, a and m extra outputs) reading p0 and p1
   * once (8192 B), writing all three (12288 B), computing neg once
   * (4 x 1024 vector ops); s and d, both reading ex and p0, are another
   * (root d). */
  g_autoptr (PsCostAnalysis) x = analyze_with (m, PS_FUSION_MODE_XLA);
  const PsCost *cn = ps_cost_get (x, neg);
  ck_assert (cn->duplicated);
  ck_assert_int_eq (cn->klass, PS_COST_INLINED);
  ck_assert_uint_eq (cn->own.vector_ops, 0);
  ck_assert (!ps_cost_get (x, ex)->duplicated);
  ck_assert (ps_cost_get (x, a_)->fused && ps_cost_get (x, a_)->output);
  ck_assert (ps_cost_get (x, mul)->fused && ps_cost_get (x, mul)->output);
  ck_assert_ptr_eq (ps_cost_get (x, a_)->root, ex);
  PsCostCounts fe = ps_cost_fusion (x, ex);
  ck_assert_uint_eq (fe.read_bytes, 8192);
  ck_assert_uint_eq (fe.write_bytes, 12288);
  ck_assert_uint_eq (fe.vector_ops, 4096);
  ck_assert_ptr_eq (ps_cost_get (x, s_)->root, ps_module_find_instr (m, "d"));
  PsCostCounts fs = ps_cost_fusion (x, ps_module_find_instr (m, "d"));
  ck_assert_uint_eq (fs.read_bytes, 8192);
  ck_assert_uint_eq (fs.write_bytes, 8192);
  /* entry total: {a, m, ex} 20480; {s, d} 16384 */
  PsCostCounts tx = ps_cost_computation (x, m->entry);
  ck_assert_uint_eq (tx.read_bytes + tx.write_bytes, 20480 + 16384);

  /* producer (the old rule): neg has two users, so it is a kernel too */
  g_autoptr (PsCostAnalysis) p = analyze_with (m, PS_FUSION_MODE_PRODUCER);
  ck_assert (!ps_cost_get (p, neg)->duplicated);
  ck_assert_int_eq (ps_cost_get (p, neg)->klass, PS_COST_ELEMENTWISE);
  PsCostCounts tp = ps_cost_computation (p, m->entry);
  ck_assert_uint_eq (tp.read_bytes + tp.write_bytes, 4 * 12288 + 2 * 8192);
  /* the multi-output fusion computes neg once, as its own kernel does */
  ck_assert_uint_eq (tx.vector_ops, tp.vector_ops);
}
END_TEST

static int position (const PsSchedule *s, const char *name);

static uint64_t
peak_of (const PsModule *m, const PsCostAnalysis *a)
{
  GError *error = NULL;
  g_autoptr (PsMemoryReport) r = ps_memory_analyze (m, a, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  return r->peak_bytes;
}

/* Multi-output fusion, producer-consumer (cost.h rule 6): a reduce and
 * the elementwise producer of its operand, which another op reads too
 * (an expensive one, which is not duplicated): one kernel reads p0 once
 * and writes x and s. */
START_TEST (test_mof_producer_consumer)
{
  static const char text[] =
    "HloModule pc\n"
    "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b) }\n"
    "ENTRY e {\n"
    "  p0 = f32[8,128] parameter(0)\n"
    "  p2 = f32[8,128] parameter(1)\n"
    "  z = f32[] constant(0)\n"
    "  x = f32[8,128] exponential(p0)\n"
    "  s = f32[8] reduce(x, z), dimensions={1}, to_apply=add\n"
    "  y = f32[8,128] multiply(x, p2)\n"
    "  ROOT t = (f32[8], f32[8,128]) tuple(s, y)\n"
    "}\n";
  g_autoptr (PsModule) m = parse (text);
  const PsInstr *x = ps_module_find_instr (m, "x"), *s = ps_module_find_instr (m, "s");
  g_autoptr (PsCostAnalysis) a = analyze_with (m, PS_FUSION_MODE_XLA);
  ck_assert (ps_cost_get (a, x)->fused && ps_cost_get (a, x)->output);
  ck_assert_ptr_eq (ps_cost_get (a, x)->root, s);
  /* (a reduce reads its init value: 4 B) */
  PsCostCounts f = ps_cost_fusion (a, s);
  ck_assert_uint_eq (f.read_bytes, 4096 + 4);
  ck_assert_uint_eq (f.write_bytes, 4096 + 32);
  ck_assert_uint_eq (f.vector_ops, 2048);
  g_autoptr (PsCostAnalysis) p = analyze_with (m, PS_FUSION_MODE_PRODUCER);
  ck_assert (!ps_cost_get (p, x)->fused);
  PsCostCounts tp = ps_cost_computation (p, m->entry), tx = ps_cost_computation (a, m->entry);
  /* producer: x 4096 + 4096, s 4096 + 32, y 8192 + 4096; xla saves s's read of x */
  ck_assert_uint_eq (tp.read_bytes + tp.write_bytes, 8192 + 4132 + 12288);
  ck_assert_uint_eq (tx.read_bytes + tx.write_bytes, 8192 + 36 + 12288);
  /* x is written by the fusion and read by y: the same buffers either way */
  ck_assert_uint_eq (peak_of (m, a), peak_of (m, p));
  /* it schedules as one unit, before x's other reader */
  PsScheduleOptions o = { PS_SCHEDULE_XLA, 0 };
  g_autoptr (PsSchedule) sch = ps_schedule_module (m, a, &o, NULL);
  ck_assert_ptr_nonnull (sch);
  ck_assert_int_eq (position (sch, "s"), position (sch, "x") + 1);
  ck_assert_int_lt (position (sch, "s"), position (sch, "y"));
}
END_TEST

/* The normalization diamond (rule 7): softmax over the minor dim is one
 * kernel: it reads x once and writes y; nothing in between reaches HBM. */
static const char softmax_fmt[] =
  "HloModule sm\n"
  "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b) }\n"
  "mx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] maximum(a, b) }\n"
  "ENTRY e {\n"
  "  x = f32[8,128] parameter(0)\n"
  "  lo = f32[] constant(-1e30)\n"
  "  z = f32[] constant(0)\n"
  "  m = f32[%s] reduce(x, lo), dimensions={%s}, to_apply=mx\n"
  "  bm = f32[8,128] broadcast(m), dimensions={%s}\n"
  "  d = f32[8,128] subtract(x, bm)\n"
  "  ex = f32[8,128] exponential(d)\n"
  "  se = f32[%s] reduce(ex, z), dimensions={%s}, to_apply=add\n"
  "  bs = f32[8,128] broadcast(se), dimensions={%s}\n"
  "  ROOT y = f32[8,128] divide(ex, bs)\n"
  "}\n";

START_TEST (test_mof_softmax_diamond)
{
  g_autofree char *text = g_strdup_printf (softmax_fmt, "8", "1", "0", "8", "1", "0");
  g_autoptr (PsModule) m = parse (text);
  const PsInstr *y = ps_module_find_instr (m, "y");
  g_autoptr (PsCostAnalysis) a = analyze_with (m, PS_FUSION_MODE_XLA);
  const char *members[] = { "m", "d", "ex", "se" };
  for (guint i = 0; i < G_N_ELEMENTS (members); i++)
    {
      const PsCost *c = ps_cost_get (a, ps_module_find_instr (m, members[i]));
      ck_assert_msg (c->fused && c->root == y && !c->output, "%s", members[i]);
    }
  PsCostCounts f = ps_cost_fusion (a, y);
  ck_assert_uint_eq (f.read_bytes, 4096 + 2 * 4);   /* x, the two init values */
  ck_assert_uint_eq (f.write_bytes, 4096);
  /* max, subtract, exp, sum, divide: 5 vector ops per element */
  ck_assert_uint_eq (f.vector_ops, 5 * 1024);
  g_autoptr (PsCostAnalysis) p = analyze_with (m, PS_FUSION_MODE_PRODUCER);
  PsCostCounts tp = ps_cost_computation (p, m->entry);
  /* producer: m 4096 + 32; {d, ex} 4096 + 32 + 4096; se 4096 + 32;
   * y 4096 + 32 + 4096 */
  ck_assert_uint_eq (tp.read_bytes + tp.write_bytes, 4132 + 8224 + 4132 + 8224);
  ck_assert_uint_eq (ps_cost_computation (a, m->entry).vector_ops, tp.vector_ops);
  /* peak: x, y and the two init constants (the exponentials are not in
   * HBM); producer: the row sums too (y is written over the
   * exponentials, in place) */
  ck_assert_uint_eq (peak_of (m, a), 8192 + 8);
  ck_assert_uint_eq (peak_of (m, p), 8192 + 8 + 32);

  /* over the major dim (batch-norm-like statistics) the diamond does not
   * form: the reduction needs all rows before any output */
  g_autofree char *t2 = g_strdup_printf (softmax_fmt, "128", "0", "1", "128", "0", "1");
  g_autoptr (PsModule) m2 = parse (t2);
  g_autoptr (PsCostAnalysis) a2 = analyze_with (m2, PS_FUSION_MODE_XLA);
  ck_assert (!ps_cost_get (a2, ps_module_find_instr (m2, "m"))->fused);
  ck_assert (!ps_fusion_reduce_row_wise (ps_module_find_instr (m2, "m")));
  ck_assert (ps_fusion_reduce_row_wise (ps_module_find_instr (m, "m")));
}
END_TEST

/* Batch norm (cost.h rule 9): training's normalized output read only by
 * a convert to bf16 and a ReLU: the op writes only its statistics, the
 * consumer's fusion reads x (bf16, through the widening convert) and the
 * statistics and writes bf16; the f32 output has no buffer. The
 * sharded form's get-tuple-element(tuple(y, ...)) fuses y's producer into
 * its reader (TupleSimplifier). */
START_TEST (test_fusion_batch_norm)
{
  static const char text[] =
    "HloModule bn\n"
    "ENTRY e {\n"
    "  c = bf16[64,1024] parameter(0)\n"
    "  sc = f32[1024] parameter(1)\n"
    "  of = f32[1024] parameter(2)\n"
    "  q = f32[64,1024] parameter(3)\n"
    "  x = f32[64,1024] convert(c)\n"
    "  bn = (f32[64,1024], f32[1024], f32[1024]) batch-norm-training(x, sc, of), epsilon=0.001, feature_index=1\n"
    "  y = f32[64,1024] get-tuple-element(bn), index=0\n"
    "  mu = f32[1024] get-tuple-element(bn), index=1\n"
    "  yb = bf16[64,1024] convert(y)\n"
    "  z = bf16[] constant(0)\n"
    "  zb = bf16[64,1024] broadcast(z), dimensions={}\n"
    "  r = bf16[64,1024] maximum(yb, zb)\n"
    "  q2 = f32[64,1024] exponential(q)\n"
    "  t = (f32[64,1024], f32[1024]) tuple(q2, mu)\n"
    "  x2 = f32[64,1024] get-tuple-element(t), index=0\n"
    "  n2 = f32[64,1024] negate(x2)\n"
    "  ROOT o = (bf16[64,1024], f32[1024], f32[64,1024]) tuple(r, mu, n2)\n"
    "}\n";
  g_autoptr (PsModule) m = parse (text);
  const PsInstr *bn = ps_module_find_instr (m, "bn"), *r = ps_module_find_instr (m, "r");
  ck_assert (ps_fusion_bn_normalize_fused (bn));
  ck_assert_ptr_eq (ps_fusion_bn_element0 (ps_module_find_instr (m, "y")), bn);
  ck_assert_ptr_null (ps_fusion_bn_element0 (ps_module_find_instr (m, "mu")));
  g_autoptr (PsCostAnalysis) a = analyze_with (m, PS_FUSION_MODE_XLA);
  const uint64_t n = 64 * 1024;
  PsCostCounts fb = ps_cost_fusion (a, bn);
  ck_assert (ps_cost_get (a, bn)->bn_fused);
  /* the statistics pass: reads x as bf16 and scale, offset; writes mean, var */
  ck_assert_uint_eq (fb.read_bytes, 2 * n + 2 * 4096);
  ck_assert_uint_eq (fb.write_bytes, 2 * 4096);
  ck_assert_uint_eq (fb.vector_ops, 1 * n /* convert */ + 3 * n);
  /* the consumer: convert, maximum and the normalization, reading x (bf16),
   * scale, offset and the statistics; writing bf16 */
  ck_assert_ptr_eq (ps_cost_get (a, ps_module_find_instr (m, "yb"))->root, r);
  PsCostCounts fr = ps_cost_fusion (a, r);
  ck_assert_uint_eq (fr.read_bytes, 2 * n + 4 * 4096 + 2);
  ck_assert_uint_eq (fr.write_bytes, 2 * n);
  ck_assert_uint_eq (fr.vector_ops, 2 * n + 1 * n + 3 * n);
  /* producer: the op writes its f32 output and the convert reads it */
  g_autoptr (PsCostAnalysis) p = analyze_with (m, PS_FUSION_MODE_PRODUCER);
  ck_assert (!ps_cost_get (p, bn)->bn_fused);
  ck_assert_uint_eq (ps_cost_fusion (p, bn).write_bytes, 4 * n + 2 * 4096);
  ck_assert_uint_ge (ps_cost_fusion (p, r).read_bytes, 4 * n);
  /* memory: no f32 output buffer; the producer form holds one */
  ck_assert_uint_le (peak_of (m, a) + 4 * n, peak_of (m, p));
  /* get-tuple-element(tuple(q2, ...)) read by negate: one kernel from q */
  const PsInstr *n2 = ps_module_find_instr (m, "n2");
  ck_assert_ptr_eq (ps_cost_get (a, ps_module_find_instr (m, "t"))->root, n2);
  ck_assert_ptr_eq (ps_cost_get (a, ps_module_find_instr (m, "q2"))->root, n2);
  ck_assert_uint_eq (ps_cost_fusion (a, n2).read_bytes, 4 * n);
  ck_assert_uint_eq (ps_cost_fusion (a, n2).write_bytes, 4 * n);
  ck_assert_ptr_ne (ps_cost_get (p, ps_module_find_instr (m, "t"))->root, n2);
  PsScheduleOptions o = { PS_SCHEDULE_XLA, 0 };
  g_autoptr (PsSchedule) sch = ps_schedule_module (m, a, &o, NULL);
  ck_assert_ptr_nonnull (sch);
}
END_TEST

/* Sibling multi-output fusion (rule 8): batch-norm statistics, sum x and
 * sum x^2, read x once; two siblings connected through a kernel outside
 * both (an all-reduce) stay apart: one fusion would be a cycle. */
START_TEST (test_mof_siblings)
{
  static const char text[] =
    "HloModule sib\n"
    "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b) }\n"
    "ENTRY e {\n"
    "  x = f32[1024,32] parameter(0)\n"
    "  z = f32[] constant(0)\n"
    "  s1 = f32[32] reduce(x, z), dimensions={0}, to_apply=add\n"
    "  sq = f32[1024,32] multiply(x, x)\n"
    "  s2 = f32[32] reduce(sq, z), dimensions={0}, to_apply=add\n"
    "  g1 = f32[1024,32] exponential(x)\n"
    "  ar = f32[1024,32] all-reduce(g1), replica_groups={}, to_apply=add\n"
    "  g2 = f32[1024,32] add(x, ar)\n"
    "  ROOT t = (f32[32], f32[32], f32[1024,32]) tuple(s1, s2, g2)\n"
    "}\n";
  g_autoptr (PsModule) m = parse (text);
  const PsInstr *s1 = ps_module_find_instr (m, "s1"), *s2 = ps_module_find_instr (m, "s2");
  const PsInstr *g1 = ps_module_find_instr (m, "g1"), *g2 = ps_module_find_instr (m, "g2");
  g_autoptr (PsCostAnalysis) a = analyze_with (m, PS_FUSION_MODE_XLA);
  /* s1, s2 (with sq) and g1 share x's loop (XLA's loop shape of a
   * reduce is its operand's): one fusion, root g1, reading x once and
   * writing the two sums and g1 */
  ck_assert (ps_cost_get (a, s1)->output && ps_cost_get (a, s1)->root == g1);
  ck_assert (ps_cost_get (a, s2)->output && ps_cost_get (a, s2)->root == g1);
  ck_assert (!ps_cost_get (a, ps_module_find_instr (m, "sq"))->output);
  PsCostCounts f = ps_cost_fusion (a, g1);
  ck_assert_uint_eq (f.read_bytes, 1024 * 32 * 4 + 4);
  ck_assert_uint_eq (f.write_bytes, 2 * 32 * 4 + 1024 * 32 * 4);
  /* g1 -> ar -> g2: g2 stays out (one fusion would be a cycle) */
  ck_assert (!ps_cost_get (a, g2)->fused && ps_cost_get (a, g2)->root == g2);
  PsScheduleOptions o = { PS_SCHEDULE_XLA, 0 };
  g_autoptr (PsSchedule) sch = ps_schedule_module (m, a, &o, NULL);
  ck_assert_ptr_nonnull (sch);
  ck_assert_int_lt (position (sch, "ar"), position (sch, "g2"));
  g_autoptr (PsCostAnalysis) p = analyze_with (m, PS_FUSION_MODE_PRODUCER);
  ck_assert (!ps_cost_get (p, s1)->fused);
  ck_assert_uint_eq (ps_cost_fusion (p, s1).read_bytes, 1024 * 32 * 4 + 4);
  ck_assert_uint_eq (ps_cost_fusion (p, s2).read_bytes, 1024 * 32 * 4 + 4);
}
END_TEST

/* none: the relu of mlp_hlo stays out of the dot; producer and xla fuse it. */
START_TEST (test_fusion_none)
{
  g_autoptr (PsModule) m = parse (mlp_hlo);
  g_autoptr (PsCostAnalysis) n = analyze_with (m, PS_FUSION_MODE_NONE);
  PsInstr *dot = ps_module_find_instr (m, "dot");
  ck_assert (!ps_cost_get (n, dot)->fused);
  /* dot reads 8x16 + 16x32 f32, writes 8x32 */
  PsCostCounts fd = ps_cost_fusion (n, dot);
  ck_assert_uint_eq (fd.read_bytes, (8 * 16 + 16 * 32) * 4);
  ck_assert_uint_eq (fd.write_bytes, 8 * 32 * 4);
  g_autoptr (PsCostAnalysis) x = analyze_with (m, PS_FUSION_MODE_XLA);
  ck_assert (ps_cost_get (x, dot)->fused);
  PsFusionMode mode;
  ck_assert (ps_fusion_mode_parse ("producer", "--fusion", &mode, NULL) && mode == PS_FUSION_MODE_PRODUCER);
  GError *error = NULL;
  ck_assert (!ps_fusion_mode_parse ("all", "--fusion", &mode, &error));
  ck_assert (strstr (error->message, "--fusion 'all'") != NULL);
  g_error_free (error);
}
END_TEST

/* A module read already fused (an HLO dump after XLA's optimizations):
 * each fusion instruction is one kernel, and podsim fuses nothing more. */
static const char *fused_hlo =
  "HloModule jit_step\n"
  "fused_add_tanh {\n"
  "  param_0 = f32[8,4] parameter(0)\n"
  "  param_1 = f32[8,4] parameter(1)\n"
  "  add.0 = f32[8,4] add(param_0, param_1)\n"
  "  ROOT tanh.0 = f32[8,4] tanh(add.0)\n"
  "}\n"
  "fused_dot {\n"
  "  p0 = f32[8,16] parameter(0)\n"
  "  p1 = f32[16,4] parameter(1)\n"
  "  ROOT dot.1 = f32[8,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
  "}\n"
  "add_f32 {\n"
  "  x = f32[] parameter(0)\n"
  "  y = f32[] parameter(1)\n"
  "  ROOT s = f32[] add(x, y)\n"
  "}\n"
  "fused_reduce {\n"
  "  q0 = f32[8,4] parameter(0)\n"
  "  zero = f32[] constant(0)\n"
  "  ROOT r = f32[8] reduce(q0, zero), dimensions={1}, to_apply=add_f32\n"
  "}\n"
  "ENTRY main {\n"
  "  a = f32[8,16] parameter(0)\n"
  "  b = f32[16,4] parameter(1)\n"
  "  dot_fusion = f32[8,4] fusion(a, b), kind=kOutput, calls=fused_dot\n"
  "  neg = f32[8,4] negate(dot_fusion)\n"
  "  loop_fusion = f32[8,4] fusion(neg, dot_fusion), kind=kLoop, calls=fused_add_tanh\n"
  "  input_fusion = f32[8] fusion(loop_fusion), kind=kInput, calls=fused_reduce\n"
  "  ROOT t = (f32[8,4], f32[8]) tuple(loop_fusion, input_fusion)\n"
  "}\n";

/* batch-norm-inference between a convert and a ReLU (XLA mode): one loop
 * fusion reading x as bf16 and the four per-feature operands; the producer
 * rules leave the inference as a kernel of its own between two others. */
START_TEST (test_fusion_batch_norm_inference)
{
  static const char text[] =
    "HloModule bni\n"
    "ENTRY e {\n"
    "  c = bf16[64,1024] parameter(0)\n"
    "  sc = f32[1024] parameter(1)\n"
    "  of = f32[1024] parameter(2)\n"
    "  mu = f32[1024] parameter(3)\n"
    "  va = f32[1024] parameter(4)\n"
    "  x = f32[64,1024] convert(c)\n"
    "  y = f32[64,1024] batch-norm-inference(x, sc, of, mu, va), epsilon=0.001, feature_index=1\n"
    "  z = f32[] constant(0)\n"
    "  zb = f32[64,1024] broadcast(z), dimensions={}\n"
    "  ROOT r = f32[64,1024] maximum(y, zb)\n"
    "}\n";
  g_autoptr (PsModule) m = parse (text);
  const PsInstr *x = ps_module_find_instr (m, "x"), *y = ps_module_find_instr (m, "y"),
                *r = ps_module_find_instr (m, "r");
  const uint64_t n = 64 * 1024;
  g_autoptr (PsCostAnalysis) a = analyze_with (m, PS_FUSION_MODE_XLA);
  /* the widening convert is copied into its reader (rule 5) */
  ck_assert (ps_cost_get (a, x)->duplicated || ps_cost_get (a, x)->root == r);
  ck_assert_ptr_eq (ps_cost_get (a, y)->root, r);
  PsCostCounts fr = ps_cost_fusion (a, r);
  ck_assert_uint_eq (fr.read_bytes, 2 * n + 4 * 4096 + 4);
  ck_assert_uint_eq (fr.write_bytes, 4 * n);
  ck_assert_uint_eq (fr.vector_ops, 1 * n /* convert */ + 3 * n + 1 * n /* maximum */);
  g_autoptr (PsCostAnalysis) p = analyze_with (m, PS_FUSION_MODE_PRODUCER);
  ck_assert_ptr_ne (ps_cost_get (p, y)->root, r);
  ck_assert_uint_ge (ps_cost_fusion (p, y).read_bytes, 4 * n);
  ck_assert_uint_ge (ps_cost_fusion (p, y).write_bytes, 4 * n);
}
END_TEST

START_TEST (test_fusion_from_file)
{
  g_autoptr (PsModule) m = parse (fused_hlo);
  g_autoptr (PsCostAnalysis) a = analyze_with (m, PS_FUSION_MODE_XLA);
  ck_assert (ps_cost_prefused (a));
  PsInstr *df = ps_module_find_instr (m, "dot_fusion"), *lf = ps_module_find_instr (m, "loop_fusion");
  PsInstr *in = ps_module_find_instr (m, "input_fusion"), *neg = ps_module_find_instr (m, "neg");
  /* the dot kernel: 2 x 8 x 4 x 16 FLOPs, reads 8x16 + 16x4 f32, writes 8x4 */
  const PsCost *cd = ps_cost_get (a, df);
  ck_assert_int_eq (cd->klass, PS_COST_MATMUL);
  ck_assert (!cd->fused);
  ck_assert_ptr_eq (ps_cost_mxu_op (df), ps_module_find_instr (m, "dot.1"));
  PsCostCounts fd = ps_cost_fusion (a, df);
  ck_assert_uint_eq (fd.flops, 1024);
  ck_assert_uint_eq (fd.read_bytes, (8 * 16 + 16 * 4) * 4);
  ck_assert_uint_eq (fd.write_bytes, 8 * 4 * 4);
  /* neg is an unfused op of the dump: its own kernel, not joined into the
   * dot's (the xla rules would duplicate it into the loop fusion) */
  ck_assert (!ps_cost_get (a, neg)->fused && !ps_cost_get (a, neg)->duplicated);
  ck_assert_uint_eq (ps_cost_fusion (a, neg).read_bytes, 128);
  /* add + tanh over 32 elements, reading neg and dot_fusion */
  PsCostCounts fl = ps_cost_fusion (a, lf);
  ck_assert_int_eq (ps_cost_get (a, lf)->klass, PS_COST_ELEMENTWISE);
  ck_assert_uint_eq (fl.vector_ops, 64);
  ck_assert_uint_eq (fl.read_bytes, 256);
  ck_assert_uint_eq (fl.write_bytes, 128);
  PsCostCounts fr = ps_cost_fusion (a, in);
  ck_assert_int_eq (ps_cost_get (a, in)->klass, PS_COST_REDUCE);
  ck_assert_uint_eq (fr.read_bytes, 128);
  ck_assert_uint_eq (fr.write_bytes, 32);
  /* lowering: three kernels and neg, the dot's with its MXU dims */
  GError *error = NULL;
  g_autoptr (PsMemoryReport) mr = ps_memory_analyze (m, a, &error);
  ck_assert_msg (mr != NULL, "%s", error ? error->message : "");
  /* an unfused module is not prefused */
  g_autoptr (PsModule) m2 = parse (mlp_hlo);
  g_autoptr (PsCostAnalysis) a2 = analyze_with (m2, PS_FUSION_MODE_XLA);
  ck_assert (!ps_cost_prefused (a2));
}
END_TEST

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

/* s4 and u4 buffers take half a byte per element, rounded up, as XLA's
 * SubByteNormalization and ShapeUtil::ByteSizeOfElements make them: an
 * int4 weight of 16 x 5 elements is 40 bytes, a u4[3] output 2. */
START_TEST (test_memory_int4_packed)
{
  g_autoptr (PsModule) m = parse (
    "HloModule int4\n"
    "ENTRY e {\n"
    "  w = s4[16,5] parameter(0)\n"
    "  x = bf16[2,16] parameter(1)\n"
    "  wb = bf16[16,5] convert(w)\n"
    "  d = bf16[2,5] dot(x, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  k = u4[3] constant({1, 2, 15})\n"
    "  ROOT t = (bf16[2,5], u4[3]) tuple(d, k)\n"
    "}\n");
  ck_assert_int_eq (ps_shape_bytes (ps_module_find_instr (m, "w")->shape), 40);
  ck_assert_int_eq (ps_shape_bytes (ps_module_find_instr (m, "k")->shape), 2);
  ck_assert_int_eq (ps_shape_bytes (ps_module_find_instr (m, "t")->shape), 20 + 2);
  GError *error = NULL;
  g_autoptr (PsMemoryReport) r = ps_memory_analyze (m, NULL, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  ck_assert_uint_eq (r->parameter_bytes, 40 + 64 + 2); /* constants count with parameters */
  ck_assert_uint_eq (r->output_bytes, 20); /* the constant is counted above */
}
END_TEST

/* TPU buffer tiling (tiling.h): one dim padded to 128 lanes, another to
 * 8 sublanes (16 for bf16, 32 for 8-bit); worked out by hand. */
START_TEST (test_memory_tiling)
{
  static const struct { const char *shape; int64_t best, minor; } cases[] = {
    { "f32[]", 4, 4 },
    { "f32[1000]", 1024 * 4, 1024 * 4 },          /* linear: 8 x 128 elements a tile */
    { "bf16[16,256]", 16 * 256 * 2, 16 * 256 * 2 }, /* already whole tiles */
    { "bf16[8,256]", 16 * 256 * 2, 16 * 256 * 2 },  /* 8 rows of bf16 fill half a tile */
    { "f32[64,3]", 128 * 8 * 4, 64 * 128 * 4 },   /* best: 64 on lanes, 3 on sublanes */
    { "f32[4,1000,3]", 8 * 1024 * 3 * 4, 4 * 1000 * 128 * 4 },
    { "pred[3,5]", 32 * 128, 32 * 128 },
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *text = g_strdup_printf ("HloModule t\nENTRY e {\n  ROOT p = %s parameter(0)\n}\n",
                                               cases[i].shape);
      g_autoptr (PsModule) m = parse (text);
      const PsShape *sh = ps_module_find_instr (m, "p")->shape;
      ck_assert_int_eq (ps_tiling_bytes (sh, PS_TILING_BEST), cases[i].best);
      ck_assert_int_eq (ps_tiling_bytes (sh, PS_TILING_MINOR), cases[i].minor);
      ck_assert_int_eq (ps_tiling_bytes (sh, PS_TILING_NONE), ps_shape_bytes (sh));
    }

  /* the peak (parameter and result, each tiled) and the HBM traffic (the
   * kernel reads and writes whole tiles, padding included) both follow the
   * mode; none gives the dense bytes */
  g_autoptr (PsModule) m = parse ("HloModule t\nENTRY e {\n"
                                  "  p = f32[64,3] parameter(0)\n"
                                  "  ROOT n = f32[64,3] exponential(p)\n}\n");
  static const struct { PsTilingMode mode; uint64_t bytes, peak; } peaks[] = {
    { PS_TILING_BEST, 4096, 2 * 4096 }, { PS_TILING_MINOR, 32768, 2 * 32768 },
    { PS_TILING_NONE, 768, 2 * 768 },
  };
  for (guint i = 0; i < G_N_ELEMENTS (peaks); i++)
    {
      PsCostOptions o;
      ps_cost_options_init (&o);
      o.tiling = peaks[i].mode;
      g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, &o, NULL);
      ck_assert_int_eq (ps_cost_tiling (a), peaks[i].mode);
      PsCostCounts c = ps_cost_computation (a, m->entry);
      ck_assert_uint_eq (c.read_bytes, peaks[i].bytes);
      ck_assert_uint_eq (c.write_bytes, peaks[i].bytes);
      ck_assert_uint_eq (peak_of (m, a), peaks[i].peak);
    }
  PsTilingMode mode;
  ck_assert (ps_tiling_mode_parse ("minor", "--buffer-tiling", &mode, NULL) && mode == PS_TILING_MINOR);
  GError *error = NULL;
  ck_assert (!ps_tiling_mode_parse ("rows", "--buffer-tiling", &mode, &error));
  ck_assert (strstr (error->message, "--buffer-tiling 'rows'"));
  g_error_free (error);
}
END_TEST

START_TEST (test_memory_mlp)
{
  g_autoptr (PsModule) m = parse (mlp_hlo);
  g_autoptr (PsCostAnalysis) a = analyze_with (m, PS_FUSION_MODE_XLA);
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
  g_autoptr (PsCostAnalysis) a = analyze_with (m, PS_FUSION_MODE_XLA);
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
  g_autoptr (PsCostAnalysis) a2 = analyze_with (m2, PS_FUSION_MODE_XLA);
  g_autoptr (PsMemoryReport) r2 = ps_memory_analyze (m2, a2, NULL);
  /* a 16, z 4, the broadcast's constant 4 always; the written elements
   * get buffers (counter 4, the stack 128); a is read in place; the body
   * adds i2, one and zero (12), not a second stack */
  ck_assert_uint_eq (r2->parameter_bytes, 16 + 4 + 4);
  ck_assert_uint_eq (r2->peak_bytes, 24 + 4 + 128 + 12);
  ck_assert_uint_eq (r2->output_bytes, 128);
}
END_TEST

/* A small training step (two weights, plain SGD) in its program order
 * (the post order from the root): forward h = x w1, y = h w2; backward
 * dh = y w2^T, g1 = x^T dh, g2 = h^T y; updates n_i = w_i - lr g_i. The cost
 * analysis fuses each update into its gradient's dot, so g1, u1 and g2, u2
 * are never buffers. Always live: w1, w2 (256 KiB each), x (64 KiB) and
 * lr (4 B). Temporaries: h, y, dh (64 KiB each); outputs n1, n2 (256 KiB).
 *  - without donation the peak is at n2: h + y + n1 + n2 = 640 KiB;
 *  - with w1 and w2 donated (each read last by its own update) n1 and n2
 *    are written over them, and the peak is h + y + dh = 192 KiB (first
 *    reached at dh). */
static const char *step_hlo =
  "HloModule step%s\n"
  "ENTRY e {\n"
  "  w1 = f32[256,256] parameter(0)\n"
  "  w2 = f32[256,256] parameter(1)\n"
  "  x = f32[64,256] parameter(2)\n"
  "  h = f32[64,256] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
  "  y = f32[64,256] dot(h, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
  "  dh = f32[64,256] dot(y, w2), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
  "  g1 = f32[256,256] dot(x, dh), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
  "  lr = f32[] constant(0.01)\n"
  "  b = f32[256,256] broadcast(lr), dimensions={}\n"
  "  u1 = f32[256,256] multiply(g1, b)\n"
  "  n1 = f32[256,256] subtract(w1, u1)\n"
  "  g2 = f32[256,256] dot(h, y), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
  "  u2 = f32[256,256] multiply(g2, b)\n"
  "  n2 = f32[256,256] subtract(w2, u2)\n"
  "  ROOT t = (f32[256,256], f32[256,256]) tuple(n1, n2)\n"
  "}\n";

START_TEST (test_memory_donation)
{
  const uint64_t KiB = 1024, always = 576 * KiB + 4;
  static const char *const headers[] = {
    "", ", input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {}, may-alias) }",
  };
  for (int donate = 0; donate < 2; donate++)
    {
      g_autofree char *text = g_strdup_printf (step_hlo, headers[donate]);
      g_autoptr (PsModule) m = parse (text);
      g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
      g_autoptr (PsMemoryReport) r = ps_memory_analyze (m, a, NULL);
      ck_assert_uint_eq (r->parameter_bytes, always);
      if (!donate)
        {
          ck_assert_uint_eq (r->peak_bytes, always + 640 * KiB);
          ck_assert_str_eq (r->peak_instr->name, "n2");
          ck_assert_uint_eq (r->output_bytes, 512 * KiB);
          ck_assert_uint_eq (r->donated_bytes, 0);
        }
      else
        {
          ck_assert_uint_eq (r->peak_bytes, always + 192 * KiB);
          ck_assert_str_eq (r->peak_instr->name, "dh");
          ck_assert_uint_eq (r->output_bytes, 0);
          ck_assert_uint_eq (r->donated_bytes, 512 * KiB);
        }
    }
  /* A donated parameter still read after its output is written is copied
   * first (XLA's copy insertion): no saving. Here w2 is read by n2, then
   * donated to output 0, which n1 defines earlier. */
  g_autofree char *late = g_strdup_printf (step_hlo, ", input_output_alias={ {0}: (1, {}) }");
  g_autoptr (PsModule) m = parse (late);
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  g_autoptr (PsMemoryReport) r = ps_memory_analyze (m, a, NULL);
  ck_assert_uint_eq (r->donated_bytes, 0);
  ck_assert_uint_eq (r->peak_bytes, always + 640 * KiB);
}
END_TEST

/* Buffer reuse in place: an elementwise fusion writes its result into an
 * operand's buffer that dies there (XLA's CanShareOperandBufferWithUser).
 * a = exp(p) is its own fusion (its producer is a parameter); b = -a is too
 * (a has two users); c = a + b joins b's fusion, reads a for the last time
 * and overwrites it. Each is 4 KiB: without reuse p + a + c = 12 KiB at c,
 * with it 8 KiB. */
START_TEST (test_memory_in_place)
{
  static const char text[] =
    "HloModule ip\n"
    "ENTRY e {\n"
    "  p = f32[32,32] parameter(0)\n"
    "  a = f32[32,32] exponential(p)\n"
    "  b = f32[32,32] negate(a)\n"
    "  ROOT c = f32[32,32] add(a, b)\n"
    "}\n";
  g_autoptr (PsModule) m = parse (text);
  g_autoptr (PsCostAnalysis) a = analyze_with (m, PS_FUSION_MODE_XLA);
  ck_assert (ps_cost_get (a, ps_module_find_instr (m, "b"))->fused);
  g_autoptr (PsMemoryReport) r = ps_memory_analyze (m, a, NULL);
  ck_assert_uint_eq (r->parameter_bytes, 4096);
  ck_assert_uint_eq (r->peak_bytes, 2 * 4096);
  ck_assert_uint_eq (r->output_bytes, 4096);
}
END_TEST

/* Latency hiding: a collective-permute and an all-gather with independent
 * compute (a: 1 MiB, b: 256 KiB) before their first users. */
static const char *sched_hlo =
  "HloModule s, num_partitions=2\n"
  "ENTRY e {\n"
  "  p = f32[256,256] parameter(0)\n"
  "  q = f32[256,256] parameter(1)\n"
  "  r = f32[256,1024] parameter(2)\n"
  "  cp = f32[256,256] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}}\n"
  "  ag = f32[512,256] all-gather(q), channel_id=2, replica_groups={{0,1}}, dimensions={0}\n"
  "  a = f32[256,1024] dot(q, r), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
  "  b = f32[256,256] dot(a, r), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
  "  c = f32[256,256] add(b, cp)\n"
  "  d = f32[512,256] dot(ag, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
  "  ROOT t = (f32[256,256], f32[512,256]) tuple(c, d)\n"
  "}\n";

static int
position (const PsSchedule *s, const char *name)
{
  for (guint i = 0; i < s->order->len; i++)
    if (strcmp (((const PsInstr *) g_ptr_array_index (s->order, i))->name, name) == 0)
      return (int) i;
  return -1;
}

START_TEST (test_schedule_policies)
{
  g_autoptr (PsModule) m = parse (sched_hlo);
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  const PsInstr *cp = ps_module_find_instr (m, "cp"), *ag = ps_module_find_instr (m, "ag");
  /* xla (2021): only the collective-permute is asynchronous; it starts as
   * soon as p exists and completes before its first user: the add c
   * (fused into b's dot, so before that fusion's first member) */
  PsScheduleOptions o = { PS_SCHEDULE_XLA, 0 };
  g_autoptr (PsSchedule) x = ps_schedule_module (m, a, &o, NULL);
  ck_assert_int_eq (x->n_async, 1);
  ck_assert (g_hash_table_contains (x->done_before, cp));
  ck_assert (!g_hash_table_contains (x->done_before, ag));
  const PsInstr *done = g_hash_table_lookup (x->done_before, cp);
  ck_assert_ptr_nonnull (done);
  ck_assert_int_lt (position (x, "cp"), position (x, "a"));
  ck_assert_int_gt (position (x, done->name), position (x, "a"));
  /* sync: nothing asynchronous; xla-all and eager: both */
  o.policy = PS_SCHEDULE_SYNC;
  g_autoptr (PsSchedule) y = ps_schedule_module (m, a, &o, NULL);
  ck_assert_int_eq (y->n_async, 0);
  o.policy = PS_SCHEDULE_XLA_ALL;
  g_autoptr (PsSchedule) z = ps_schedule_module (m, a, &o, NULL);
  ck_assert_int_eq (z->n_async, 2);
  ck_assert (g_hash_table_contains (z->done_before, ag));
  /* async results live longer: the all-gather's 512 KiB is live while a
   * (1 MiB) is, which is the synchronous peak */
  ck_assert_uint_eq (z->peak_bytes, y->peak_bytes + 512 * 1024);
  /* a budget below that peak (but above the synchronous one) makes the
   * largest collective in flight at the peak synchronous again */
  o.hbm_budget_bytes = y->peak_bytes;
  g_autoptr (PsSchedule) w = ps_schedule_module (m, a, &o, NULL);
  ck_assert_uint_le (w->peak_bytes, y->peak_bytes);
  ck_assert_int_ge (w->n_reverted, 1);
  ck_assert_int_eq (w->n_async + w->n_reverted, 2);
  ck_assert (!g_hash_table_contains (w->done_before, ag));
  /* names */
  PsSchedulePolicy pol;
  for (int i = 0; i < PS_SCHEDULE_POLICY_COUNT; i++)
    {
      ck_assert (ps_schedule_policy_parse (ps_schedule_policy_name (i), "--schedule", &pol, NULL));
      ck_assert_int_eq (pol, i);
    }
  GError *error = NULL;
  ck_assert (!ps_schedule_policy_parse ("lazy", "--schedule", &pol, &error));
  ck_assert (strstr (error->message, "--schedule: unknown schedule 'lazy'"));
  g_clear_error (&error);
}
END_TEST

/* Two collective-permutes of one kind: at most one in flight (XLA's
 * SchedulerConfig overlap limit 1), so the first completes by where the
 * second stands and the second starts after that. */
START_TEST (test_schedule_overlap_limit)
{
  static const char text[] =
    "HloModule s, num_partitions=2\n"
    "ENTRY e {\n"
    "  p = f32[256,256] parameter(0)\n"
    "  q = f32[256,256] parameter(1)\n"
    "  c1 = f32[256,256] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}}\n"
    "  a = f32[256,256] dot(q, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  c2 = f32[256,256] collective-permute(q), channel_id=2, source_target_pairs={{0,1},{1,0}}\n"
    "  b = f32[256,256] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  s1 = f32[256,256] add(b, c1)\n"
    "  s2 = f32[256,256] add(s1, c2)\n"
    "  ROOT t = (f32[256,256]) tuple(s2)\n"
    "}\n";
  g_autoptr (PsModule) m = parse (text);
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  PsScheduleOptions o = { PS_SCHEDULE_XLA, 0 };
  g_autoptr (PsSchedule) s = ps_schedule_module (m, a, &o, NULL);
  const PsInstr *c1 = ps_module_find_instr (m, "c1"), *c2 = ps_module_find_instr (m, "c2");
  /* whatever the order, two in flight never overlap */
  if (position (s, "c2") < position (s, "c1"))
    {
      const PsInstr *t = c1;
      c1 = c2;
      c2 = t;
    }
  if (g_hash_table_contains (s->done_before, c1))
    {
      const PsInstr *d1 = g_hash_table_lookup (s->done_before, c1);
      ck_assert_ptr_nonnull (d1);
      ck_assert_int_le (position (s, d1->name), position (s, c2->name));
    }
  /* eager has no limit: both start at the beginning */
  o.policy = PS_SCHEDULE_EAGER;
  g_autoptr (PsSchedule) e = ps_schedule_module (m, a, &o, NULL);
  ck_assert_int_eq (e->n_async, 2);
  ck_assert_int_lt (position (e, "c2"), position (e, "a"));
}
END_TEST

/* The lowered trace follows the schedule: the permute starts, the dots run,
 * the permute completes, then its user; the trace's peak is the
 * schedule's. */
/* Lowers m in schedule s (its peak must be the trace's) and returns the
 * trace's events as words: "NAME(start)" or "NAME" for a collective,
 * "done", "compute". transfer full. */
static GString *
lowered_sequence (const PsModule *m, const PsSchedule *s)
{
  PsLowerOptions lo;
  ps_lower_options_init (&lo);
  lo.schedule = s;
  lo.memory_events = FALSE;
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_lower_module (m, &lo, &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  ck_assert_uint_eq (ps_trace_get_header (t)->totals.peak_bytes, s->peak_bytes);
  GString *seq = g_string_new (NULL);
  for (guint64 i = 0; i < ps_trace_n_events (t); i++)
    {
      const PsTraceEvent *ev = ps_trace_get_event (t, i);
      if (ev->kind == PS_TRACE_EVENT_COLLECTIVE)
        g_string_append_printf (seq, "%s%s ", ev->name, ev->collective.async_id ? "(start)" : "");
      else if (ev->kind == PS_TRACE_EVENT_DONE)
        g_string_append (seq, "done ");
      else if (ev->kind == PS_TRACE_EVENT_COMPUTE)
        g_string_append (seq, "compute ");
    }
  return seq;
}

START_TEST (test_schedule_lowering)
{
  g_autoptr (PsModule) m = parse (sched_hlo);
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  PsScheduleOptions o = { PS_SCHEDULE_XLA, 0 };
  g_autoptr (PsSchedule) s = ps_schedule_module (m, a, &o, NULL);
  GString *seq = lowered_sequence (m, s);
  /* cp starts first, two compute events (a; b with c fused) follow its
   * start... the done comes before the fusion that reads it */
  ck_assert_msg (g_str_has_prefix (seq->str, "cp(start) "), "%s", seq->str);
  ck_assert_msg (strstr (seq->str, "compute done compute"), "%s", seq->str);
  g_string_free (seq, TRUE);
}
END_TEST

/* Loop bodies are scheduled too: the collective-permute of a while body
 * starts before the body's dots and completes in the same iteration,
 * before its user; the lowered trace's loop shows it, and the memory of the
 * schedule is the trace's. */
START_TEST (test_schedule_loop_body)
{
  static const char text[] =
    "HloModule l, num_partitions=2\n"
    "cond {\n  s = (s32[], f32[256,256], f32[256,256]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n  n = s32[] constant(4)\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
    "body {\n  s = (s32[], f32[256,256], f32[256,256]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n  x = f32[256,256] get-tuple-element(s), index=1\n"
    "  y = f32[256,256] get-tuple-element(s), index=2\n  one = s32[] constant(1)\n"
    "  j = s32[] add(i, one)\n"
    "  cp = f32[256,256] collective-permute(x), channel_id=1, source_target_pairs={{0,1},{1,0}}\n"
    "  a = f32[256,256] dot(y, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  b = f32[256,256] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  e = f32[256,256] exponential(cp)\n"
    "  c = f32[256,256] multiply(b, e)\n"
    "  ROOT t = (s32[], f32[256,256], f32[256,256]) tuple(j, c, b)\n}\n"
    "ENTRY e {\n  x0 = f32[256,256] parameter(0)\n  y0 = f32[256,256] parameter(1)\n"
    "  z = s32[] constant(0)\n"
    "  t0 = (s32[], f32[256,256], f32[256,256]) tuple(z, x0, y0)\n"
    "  w = (s32[], f32[256,256], f32[256,256]) while(t0), condition=cond, body=body, "
    "backend_config={\"known_trip_count\":{\"n\":\"4\"}}\n"
    "  ROOT r = f32[256,256] get-tuple-element(w), index=1\n}\n";
  g_autoptr (PsModule) m = parse (text);
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  PsScheduleOptions o = { PS_SCHEDULE_XLA, 0 };
  g_autoptr (PsSchedule) s = ps_schedule_module (m, a, &o, NULL);
  const PsInstr *cp = ps_module_find_instr (m, "cp");
  const PsComputation *body = cp->parent;
  GPtrArray *bo = ps_schedule_order_of (s, body);
  ck_assert_ptr_nonnull (bo);
  ck_assert_uint_eq (bo->len, body->instrs->len);
  ck_assert_int_eq (s->n_async, 1);
  ck_assert (g_hash_table_contains (s->done_before, cp));
  const PsInstr *done = g_hash_table_lookup (s->done_before, cp);
  ck_assert_ptr_nonnull (done);
  ck_assert_ptr_eq (done->parent, body);
  int at_cp = -1, at_a = -1, at_b = -1, at_done = -1;
  for (guint i = 0; i < bo->len; i++)
    {
      const PsInstr *in = g_ptr_array_index (bo, i);
      at_cp = in == cp ? (int) i : at_cp;
      at_a = strcmp (in->name, "a") == 0 ? (int) i : at_a;
      at_b = strcmp (in->name, "b") == 0 ? (int) i : at_b;
      at_done = in == done ? (int) i : at_done;
    }
  ck_assert_int_lt (at_cp, at_a);
  ck_assert_int_gt (at_done, at_b);
  /* the trace: inside the loop, the start, both dots, the done */
  GString *seq = lowered_sequence (m, s);
  ck_assert_msg (strstr (seq->str, "cp(start) compute compute done"), "%s", seq->str);
  g_string_free (seq, TRUE);
  /* synchronous: the permute's result is live only from where it stands */
  o.policy = PS_SCHEDULE_SYNC;
  g_autoptr (PsSchedule) y = ps_schedule_module (m, a, &o, NULL);
  ck_assert_int_eq (y->n_async, 0);
  ck_assert_uint_le (y->peak_bytes, s->peak_bytes);
}
END_TEST

static Suite *
analysis_suite (void)
{
  Suite *s = suite_create ("analysis");
  ps_check_case (s, "cost_memory_schedule", 0,
                 PS_CHECK_TESTS (test_cost_mlp, test_memory_int4_packed,
                                 test_cost_input_fusion,
                                 test_fusion_duplicates_cheap_producers,
                                 test_fusion_none, test_mof_producer_consumer,
                                 test_mof_softmax_diamond, test_mof_siblings,
                                 test_fusion_batch_norm, test_fusion_batch_norm_inference, test_fusion_from_file,
                                 test_cost_conv, test_cost_conv_windows,
                                 test_cost_while, test_cost_while_unknown,
                                 test_cost_known_trip_count,
                                 test_memory_tiling, test_memory_mlp,
                                 test_memory_while, test_memory_donation,
                                 test_memory_in_place, test_schedule_policies,
                                 test_schedule_overlap_limit,
                                 test_schedule_lowering,
                                 test_schedule_loop_body));
  return s;
}

int
main (void)
{
  /* a GLib critical (a programmer error) fails the test */
  g_log_set_always_fatal (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  return ps_check_run (analysis_suite (), CK_FORK_GETENV);
}

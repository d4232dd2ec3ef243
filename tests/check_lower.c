/* Lowering SPMD modules (hand-written per-device HLO) to step traces:
 * compute events with MXU dims, every collective kind with compressed
 * groups and pairs, async start/done placement, while unrolling, errors. */
#include "config.h"

#include <check.h>
#include <glib/gstdio.h>
#include <string.h>

#include "partitioner/analysis/cost.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/analysis/lower.h"
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

#define ADD_COMP "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n" \
                 "  ROOT s = f32[] add(x, y)\n}\n"

static const char *spmd_hlo =
  "HloModule spmd, num_partitions=8\n" ADD_COMP
  "ENTRY e {\n"
  "  x = bf16[16,64] parameter(0)\n"
  "  w = bf16[64,32] parameter(1)\n"
  "  dot = f32[16,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
  "  ar = f32[16,32] all-reduce(dot), replica_groups={{0,1,2,3},{4,5,6,7}}, channel_id=1, "
  "use_global_device_ids=true, to_apply=add\n"
  "  ag = f32[32,32] all-gather(ar), replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}, "
  "channel_id=2, use_global_device_ids=true\n"
  "  cp = f32[32,32] collective-permute(ag), channel_id=3, "
  "source_target_pairs={{0,1},{1,2},{2,3},{3,0},{4,5},{5,6},{6,7},{7,4}}\n"
  "  e = f32[32,32] exponential(cp)\n"
  "  rs = f32[8,32] reduce-scatter(e), replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, "
  "channel_id=4, use_global_device_ids=true, to_apply=add\n"
  "  a2a = f32[8,32] all-to-all(rs), replica_groups={{0,2,1,3},{4,6,5,7}}, dimensions={0}, "
  "channel_id=5\n"
  "  ROOT out = f32[8,32] negate(a2a)\n"
  "}\n";

static PsTraceMesh mesh_2x4_m;

static void
mesh_2x4 (PsLowerOptions *o)
{
  ps_lower_options_init (o);
  mesh_2x4_m = (PsTraceMesh) { .rank = 2, .dims = { 2, 4 } };
  o->mesh = &mesh_2x4_m;
  o->slice = "v3-8";
}

START_TEST (test_lower_collectives)
{
  g_autoptr (PsModule) m = parse (spmd_hlo);
  PsLowerOptions o;
  mesh_2x4 (&o);
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_lower_module (m, &o, &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  const PsTraceHeader *h = ps_trace_get_header (t);
  ck_assert_uint_eq (h->n_devices, 8);
  ck_assert_str_eq (h->program, "spmd");
  ck_assert_str_eq (h->slice, "v3-8");
  /* 8 events, each followed by a memory watermark */
  ck_assert_uint_eq (ps_trace_n_events (t), 16);
  const PsTraceEvent *dot = ps_trace_get_event (t, 0);
  ck_assert_int_eq (dot->kind, PS_TRACE_EVENT_COMPUTE);
  ck_assert_str_eq (dot->name, "dot");
  ck_assert_int_eq (dot->compute.op, PS_TRACE_OP_MATMUL);
  ck_assert_int_eq (dot->compute.dtype, PS_TRACE_BF16);
  ck_assert_uint_eq (dot->compute.flops, 2 * 16 * 32 * 64);
  ck_assert (dot->compute.has_mxu);
  ck_assert_uint_eq (dot->compute.mxu_batch, 1);
  ck_assert_uint_eq (dot->compute.mxu_m, 16);
  ck_assert_uint_eq (dot->compute.mxu_k, 64);
  ck_assert_uint_eq (dot->compute.mxu_n, 32);
  /* reads x and w, writes the f32 result, each as whole TPU tiles
   * (tiling.h, best layout): x bf16[16,64] as 16 rows x 128 lanes (4096,
   * dense 2048), w bf16[64,32] as 32 rows x 128 lanes (8192, dense 4096),
   * the result f32[16,32] as 16 x 128 (8192, dense 2048) */
  ck_assert_uint_eq (dot->compute.read_bytes, 4096 + 8192);
  ck_assert_uint_eq (dot->compute.write_bytes, 8192);
  ck_assert_int_eq (ps_trace_get_event (t, 1)->kind, PS_TRACE_EVENT_MEMORY);

  struct { guint index; PsTraceCollectiveKind kind; const char *where; guint64 in, out; } want[] = {
    { 2, PS_TRACE_ALL_REDUCE, "axes:1", 2048, 2048 },
    { 4, PS_TRACE_ALL_GATHER, "axes:0", 2048, 4096 },
    { 6, PS_TRACE_COLLECTIVE_PERMUTE, "shift:1:1:wrap", 4096, 4096 },
    { 10, PS_TRACE_REDUCE_SCATTER, "axes:1", 4096, 1024 },
    { 12, PS_TRACE_ALL_TO_ALL, "{{0,2,1,3},{4,6,5,7}}", 1024, 1024 },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (want); i++)
    {
      const PsTraceEvent *e = ps_trace_get_event (t, want[i].index);
      ck_assert_int_eq (e->kind, PS_TRACE_EVENT_COLLECTIVE);
      ck_assert_int_eq (e->collective.kind, want[i].kind);
      ck_assert_uint_eq (e->collective.in_bytes, want[i].in);
      ck_assert_uint_eq (e->collective.out_bytes, want[i].out);
      ck_assert_uint_eq (e->collective.async_id, 0);
      g_autofree char *where = want[i].kind == PS_TRACE_COLLECTIVE_PERMUTE
                               ? ps_trace_pairs_to_string (&e->collective.pairs)
                               : ps_trace_groups_to_string (&e->collective.groups);
      ck_assert_str_eq (where, want[i].where);
    }
  const PsTraceEvent *ex = ps_trace_get_event (t, 8);
  ck_assert_int_eq (ex->compute.op, PS_TRACE_OP_ELEMENTWISE);
  ck_assert_uint_eq (ex->compute.flops, 1024);
  ck_assert (!ex->compute.has_mxu);
  ck_assert_uint_eq (h->totals.collective_bytes, 2048 + 2048 + 4096 + 4096 + 1024);
  ck_assert (h->totals.peak_bytes >= 2048 + 4096);

  /* it writes and reads back */
  g_autofree char *dir = g_dir_make_tmp ("check_lower_XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "spmd.pst.gz", NULL);
  ck_assert_msg (ps_trace_write (t, path, &error), "%s", error ? error->message : "");
  g_autoptr (PsTrace) back = ps_trace_read (path, &error);
  ck_assert_msg (back != NULL, "%s", error ? error->message : "");
  ck_assert_uint_eq (ps_trace_n_events (back), 16);
  g_unlink (path);
  g_rmdir (dir);
}
END_TEST

/* A 1-D default mesh: groups of a 2x4 program still come out, as lists or
 * as the one axis. */
START_TEST (test_lower_default_mesh)
{
  g_autoptr (PsModule) m = parse (spmd_hlo);
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_lower_module (m, NULL, &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  const PsTraceHeader *h = ps_trace_get_header (t);
  ck_assert_uint_eq (h->mesh.rank, 1);
  ck_assert_int_eq (h->mesh.dims[0], 8);
  const PsTraceEvent *ar = ps_trace_get_event (t, 2);
  g_autofree char *g = ps_trace_groups_to_string (&ar->collective.groups);
  ck_assert_str_eq (g, "{{0,1,2,3},{4,5,6,7}}");
}
END_TEST

START_TEST (test_lower_async)
{
  g_autoptr (PsModule) m = parse (
    "HloModule overlap, num_partitions=4\n" ADD_COMP
    "ENTRY e {\n"
    "  a = f32[128] parameter(0)\n"
    "  b = f32[128] parameter(1)\n"
    "  ar = f32[128] all-reduce(a), replica_groups={}, to_apply=add\n"
    "  e = f32[128] exponential(b)\n"
    "  t = f32[128] tanh(e)\n"
    "  s = f32[128] add(ar, t)\n"
    "  ROOT r = (f32[128], f32[128]) tuple(s, t)\n"
    "}\n");
  PsLowerOptions o;
  ps_lower_options_init (&o);
  o.async_collectives = TRUE;
  o.memory_events = FALSE;
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_lower_module (m, &o, &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  /* ar starts, e+t (one fusion; t has two users so s cannot take it in)
   * overlaps, done just before s reads ar */
  ck_assert_uint_eq (ps_trace_n_events (t), 4);
  const PsTraceEvent *e0 = ps_trace_get_event (t, 0);
  ck_assert_int_eq (e0->kind, PS_TRACE_EVENT_COLLECTIVE);
  ck_assert_uint_eq (e0->collective.async_id, 1);
  ck_assert_int_eq (e0->collective.groups.form, PS_TRACE_GROUPS_ALL);
  const PsTraceEvent *e1 = ps_trace_get_event (t, 1);
  ck_assert_str_eq (e1->name, "t");
  ck_assert_uint_eq (e1->compute.flops, 256);
  ck_assert_int_eq (ps_trace_get_event (t, 2)->kind, PS_TRACE_EVENT_DONE);
  ck_assert_uint_eq (ps_trace_get_event (t, 2)->async_id, 1);
  ck_assert_str_eq (ps_trace_get_event (t, 3)->name, "s");
}
END_TEST

START_TEST (test_lower_while)
{
  g_autofree char *text = g_strdup_printf (loop_hlo, 0);
  g_autoptr (PsModule) m = parse (text);
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_lower_module (m, NULL, &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  /* a loop of 5 trips over y (the counter and the condition are scalar
   * ops, no events), then one watermark */
  ck_assert_uint_eq (ps_trace_n_events (t), 4);
  ck_assert_int_eq (ps_trace_get_event (t, 0)->kind, PS_TRACE_EVENT_LOOP);
  ck_assert_uint_eq (ps_trace_get_event (t, 0)->trips, 5);
  ck_assert_str_eq (ps_trace_get_event (t, 0)->name, "w");
  ck_assert_str_eq (ps_trace_get_event (t, 1)->name, "y");
  ck_assert_int_eq (ps_trace_get_event (t, 2)->kind, PS_TRACE_EVENT_END_LOOP);
  ck_assert_int_eq (ps_trace_get_event (t, 3)->kind, PS_TRACE_EVENT_MEMORY);
  /* the trace's FLOPs are the cost analysis's */
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, NULL);
  ck_assert_uint_eq (ps_trace_get_header (t)->totals.flops,
                     ps_cost_computation (a, m->entry).flops);
  ck_assert_uint_eq (ps_trace_get_header (t)->totals.flops, 20);

  /* unrolled: 5 iterations of y and the watermark, same totals */
  PsLowerOptions o;
  ps_lower_options_init (&o);
  o.unroll_loops = TRUE;
  g_autoptr (PsTrace) u = ps_lower_module (m, &o, &error);
  ck_assert_msg (u != NULL, "%s", error ? error->message : "");
  ck_assert_uint_eq (ps_trace_n_events (u), 6);
  ck_assert_str_eq (ps_trace_get_event (u, 0)->name, "y");
  ck_assert_str_eq (ps_trace_get_event (u, 4)->name, "y");
  ck_assert_uint_eq (ps_trace_get_header (u)->totals.flops, 20);
  ck_assert (!ps_trace_has_loops (u));

  /* a cap on the events is an error, not a huge trace */
  o.max_events = 4;
  ck_assert_ptr_null (ps_lower_module (m, &o, &error));
  ck_assert_msg (g_error_matches (error, PS_ERROR, PS_ERROR_UNSUPPORTED), "%s", error->message);
  g_clear_error (&error);
}
END_TEST

START_TEST (test_lower_conv)
{
  g_autoptr (PsModule) m = parse (
    "HloModule conv\n"
    "ENTRY e {\n"
    "  x = bf16[2,8,4] parameter(0)\n"
    "  k = bf16[3,4,5] parameter(1)\n"
    "  ROOT c = f32[2,8,5] convolution(x, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f,"
    " operand_precision={HIGHEST,HIGHEST}\n"
    "}\n");
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_lower_module (m, NULL, &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  const PsTraceEvent *c = ps_trace_get_event (t, 0);
  ck_assert_int_eq (c->compute.op, PS_TRACE_OP_CONV);
  ck_assert_int_eq (c->compute.precision, PS_TRACE_PRECISION_HIGHEST);
  /* M = batch x out positions, K = in features, N = out features, and the
   * 3 window positions apart (the simulator maps them onto the array) */
  ck_assert_uint_eq (c->compute.mxu_m, 16);
  ck_assert_uint_eq (c->compute.mxu_k, 4);
  ck_assert_uint_eq (c->compute.mxu_n, 5);
  ck_assert_uint_eq (c->compute.mxu_window, 3);
  ck_assert_uint_eq (c->compute.flops, 2 * 2 * 5 * 4 * 22);
}
END_TEST

/* ragged-dot is a matmul of the full bound: in the non-contracting mode
 * (an MoE layer's rows, each group's rows meeting its expert) 2 M K N flops
 * and N the columns of one group; in the contracting mode (a weight
 * gradient, result [G, M, N]) each group contracts its own slice of K.
 * The dimension-size ops and rng-get-and-update-state cost nothing, as in
 * XLA's HloCostAnalysis. */
START_TEST (test_lower_ragged_dot_and_dynamic_ops)
{
  g_autoptr (PsModule) m = parse (
    "HloModule ragged\n"
    "ENTRY e {\n"
    "  a = bf16[64,32] parameter(0)\n"
    "  b = bf16[4,32,16] parameter(1)\n"
    "  g = s32[4] parameter(2)\n"
    "  r = bf16[64,16] ragged-dot(a, b, g), lhs_contracting_dims={1}, rhs_contracting_dims={1},"
    " lhs_ragged_dims={0}, rhs_group_dims={0}\n"
    "  x = bf16[32,64] parameter(3)\n"
    "  w = bf16[4,32,16] ragged-dot(x, r, g), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " lhs_ragged_dims={1}\n"
    "  n = s32[] get-dimension-size(r), dimensions={0}\n"
    "  s = bf16[<=64,16] set-dimension-size(r, n), dimensions={0}\n"
    "  st = u64[2] rng-get-and-update-state(), delta=1\n"
    "  ROOT t = (bf16[<=64,16], bf16[4,32,16], u64[2]) tuple(s, w, st)\n"
    "}\n");
  GError *error = NULL;
  g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, NULL, &error);
  ck_assert_msg (a != NULL, "%s", error ? error->message : "");
  const PsCost *cr = ps_cost_get (a, ps_module_find_instr (m, "r"));
  const PsCost *cw = ps_cost_get (a, ps_module_find_instr (m, "w"));
  ck_assert_int_eq (cr->klass, PS_COST_MATMUL);
  ck_assert_uint_eq (cr->own.flops, 2 * 64 * 32 * 16);
  ck_assert_uint_eq (cw->own.flops, 2 * 32 * 64 * 16);
  static const char *const free_ops[] = { "n", "s", "st" };
  for (gsize i = 0; i < G_N_ELEMENTS (free_ops); i++)
    {
      const PsCost *c = ps_cost_get (a, ps_module_find_instr (m, free_ops[i]));
      ck_assert_int_eq (c->klass, PS_COST_FREE);
      ck_assert_uint_eq (c->own.flops + c->own.read_bytes + c->own.write_bytes, 0);
    }
  g_autoptr (PsTrace) t = ps_lower_module (m, NULL, &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  int seen = 0;
  for (guint64 i = 0; i < ps_trace_n_events (t); i++)
    {
      const PsTraceEvent *e = ps_trace_get_event (t, i);
      if (e->kind != PS_TRACE_EVENT_COMPUTE || e->compute.op != PS_TRACE_OP_MATMUL)
        continue;
      if (e->compute.mxu_batch == 1)
        {
          ck_assert_uint_eq (e->compute.mxu_m, 64);
          ck_assert_uint_eq (e->compute.mxu_k, 32);
          ck_assert_uint_eq (e->compute.mxu_n, 16);
        }
      else
        {
          ck_assert_uint_eq (e->compute.mxu_batch, 4);
          ck_assert_uint_eq (e->compute.mxu_m, 32);
          ck_assert_uint_eq (e->compute.mxu_k, 16);
          ck_assert_uint_eq (e->compute.mxu_n, 16);
        }
      seen++;
    }
  ck_assert_int_eq (seen, 2);
}
END_TEST

/* A transposed up-sampling conv (base dilation 2) streams only the rows
 * that meet data: out / 2 per dilated dim per tap. A weight gradient,
 * whose contracted "features" are the batch (not the input's minor dim),
 * is the implicit matmul over batch x window positions. */
START_TEST (test_lower_conv_dilated_and_weight_grad)
{
  g_autoptr (PsModule) m = parse (
    "HloModule conv\n"
    "ENTRY e {\n"
    "  x = bf16[2,8,4] parameter(0)\n"
    "  k = bf16[2,4,6] parameter(1)\n"
    "  u = bf16[2,16,6] convolution(x, k), window={size=2 pad=1_1 lhs_dilate=2}, dim_labels=b0f_0io->b0f\n"
    "  dy = bf16[2,16,6] parameter(2)\n"
    "  g = bf16[2,16,4] parameter(3)\n"
    "  ROOT dw = bf16[3,4,6] convolution(g, dy), window={size=16 pad=1_1}, dim_labels=f0b_i0o->0bf\n"
    "}\n");
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_lower_module (m, NULL, &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  const PsTraceEvent *up = NULL, *wg = NULL;
  for (guint64 i = 0; i < ps_trace_n_events (t); i++)
    {
      const PsTraceEvent *e = ps_trace_get_event (t, i);
      if (e->kind == PS_TRACE_EVENT_COMPUTE && e->compute.op == PS_TRACE_OP_CONV)
        {
          if (e->compute.mxu_window == 2)
            up = e;
          else
            wg = e;
        }
    }
  ck_assert_ptr_nonnull (up);
  ck_assert_ptr_nonnull (wg);
  ck_assert_uint_eq (up->compute.mxu_m, 2 * 16 / 2);
  ck_assert_uint_eq (up->compute.mxu_k, 4);
  /* dw: batch role 4 (g's features) x 3 positions; contracted: 2 (batch)
   * x 16 positions; 6 output features. */
  ck_assert_uint_eq (wg->compute.mxu_m, 4 * 3);
  ck_assert_uint_eq (wg->compute.mxu_k, 2 * 16);
  ck_assert_uint_eq (wg->compute.mxu_n, 6);
  ck_assert_uint_eq (wg->compute.mxu_window, 0);
}
END_TEST

START_TEST (test_compress)
{
  g_autoptr (PsTrace) t = ps_trace_new ("c");
  gint64 dims[2] = { 2, 4 };
  ps_trace_set_mesh (t, 2, dims, PS_TRACE_ORDER_ARANGE, NULL);
  const PsTraceHeader *h = ps_trace_get_header (t);
  PsTraceGroups g;
  /* axes 1 then 0: groups of all 8 in column-major order */
  int64_t all_t[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };
  ps_lower_compress_groups (h, 1, 8, all_t, &g);
  g_autofree char *s1 = ps_trace_groups_to_string (&g);
  ck_assert_str_eq (s1, "axes:1,0");
  int64_t ident[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
  ps_lower_compress_groups (h, 1, 8, ident, &g);
  ck_assert_int_eq (g.form, PS_TRACE_GROUPS_ALL);
  /* group order does not matter */
  int64_t swapped[8] = { 4, 5, 6, 7, 0, 1, 2, 3 };
  ps_lower_compress_groups (h, 2, 4, swapped, &g);
  g_autofree char *s2 = ps_trace_groups_to_string (&g);
  ck_assert_str_eq (s2, "axes:1");

  PsTracePairs p;
  int64_t halo[12] = { 0, 1, 1, 2, 2, 3, 4, 5, 5, 6, 6, 7 };
  ps_lower_compress_pairs (h, 6, halo, &p);
  g_autofree char *p1 = ps_trace_pairs_to_string (&p);
  ck_assert_str_eq (p1, "shift:1:1");
  int64_t up[8] = { 4, 0, 5, 1, 6, 2, 7, 3 };
  ps_lower_compress_pairs (h, 4, up, &p);
  g_autofree char *p2 = ps_trace_pairs_to_string (&p);
  ck_assert_str_eq (p2, "shift:0:-1");
  int64_t odd[4] = { 0, 5, 5, 0 };
  ps_lower_compress_pairs (h, 2, odd, &p);
  g_autofree char *p3 = ps_trace_pairs_to_string (&p);
  ck_assert_str_eq (p3, "{{0,5},{5,0}}");
  ps_trace_pairs_clear (&p);
}
END_TEST

START_TEST (test_lower_errors)
{
  g_autoptr (PsModule) m = parse (spmd_hlo);
  PsLowerOptions o;
  mesh_2x4 (&o);
  mesh_2x4_m.dims[1] = 2;
  GError *error = NULL;
  ck_assert_ptr_null (ps_lower_module (m, &o, &error));
  ck_assert_msg (g_error_matches (error, PS_ERROR, PS_ERROR_OPTION), "%s", error->message);
  ck_assert (strstr (error->message, "the mesh holds 4 devices but the program runs on 8"));
  g_clear_error (&error);

  /* groups that leave devices out cannot be replayed */
  g_autoptr (PsModule) part = parse (
    "HloModule part, num_partitions=8\n" ADD_COMP
    "ENTRY e {\n  a = f32[4] parameter(0)\n"
    "  ROOT ar = f32[4] all-reduce(a), replica_groups={{0,1},{2,3}}, to_apply=add\n}\n");
  ck_assert_ptr_null (ps_lower_module (part, NULL, &error));
  ck_assert_msg (strstr (error->message, "do not cover the 8 devices"), "%s", error->message);
  g_clear_error (&error);
}
END_TEST

static Suite *
lower_suite (void)
{
  Suite *s = suite_create ("lower");
  ps_check_case (s, "lowering_to_traces", 0,
                 PS_CHECK_TESTS (test_lower_collectives,
                                 test_lower_ragged_dot_and_dynamic_ops,
                                 test_lower_default_mesh, test_lower_async,
                                 test_lower_while, test_lower_conv,
                                 test_lower_conv_dilated_and_weight_grad,
                                 test_compress, test_lower_errors));
  return s;
}

int
main (void)
{
  return ps_check_run (lower_suite (), CK_FORK_GETENV);
}

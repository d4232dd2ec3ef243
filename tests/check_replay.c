/* The replay: merged compute, collective synchronisation, async overlap,
 * cache against no cache, and the errors a user can cause. Every test runs
 * in its own process (Check's fork mode): SimGrid allows one engine each. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/compute.h"
#include "sim/replay.h"
#include "tests/suite_main.h"

static PsTraceCompute
matmul (guint64 m, guint64 k, guint64 n)
{
  PsTraceCompute c = { 0 };
  c.op = PS_TRACE_OP_MATMUL;
  c.dtype = PS_TRACE_BF16;
  c.has_mxu = TRUE;
  c.mxu_batch = 1;
  c.mxu_m = m;
  c.mxu_k = k;
  c.mxu_n = n;
  c.flops = 2 * m * k * n;
  c.read_bytes = 2 * (m * k + k * n);
  c.write_bytes = 2 * m * n;
  return c;
}

/* A collective of `bytes` over mesh axis `axis`, or over both axes when
 * axis < 0. */
static PsTraceCollective
collective (PsTraceCollectiveKind kind, guint64 bytes, int axis, guint64 async_id)
{
  PsTraceCollective c = { 0 };
  c.kind = kind;
  c.dtype = PS_TRACE_BF16;
  c.in_bytes = c.out_bytes = bytes;
  c.groups.form = PS_TRACE_GROUPS_AXES;
  c.groups.n_axes = axis < 0 ? 2 : 1;
  c.groups.axes[0] = axis < 0 ? 0 : (guint) axis;
  if (axis < 0)
    c.groups.axes[1] = 1;
  c.async_id = async_id;
  return c;
}

static PsTraceCollective
all_reduce (guint64 bytes, guint axis, guint64 async_id)
{
  return collective (PS_TRACE_ALL_REDUCE, bytes, (int) axis, async_id);
}

static PsTrace *
new_trace (gint64 a, gint64 b)
{
  PsTrace *t = ps_trace_new ("test");
  gint64 dims[2] = { a, b };
  ps_trace_set_mesh (t, 2, dims, PS_TRACE_ORDER_ARANGE, NULL);
  ps_trace_header (t)->totals.peak_bytes = 1 << 30;
  return t;
}

typedef struct {
  PsHardware *hw;
  PsSlice *slice;
  PsPlatform *platform;
} Setup;

static Setup
setup (const char *slice)
{
  Setup s;
  s.hw = ps_hardware_default ();
  s.slice = ps_slice_new (slice, PS_WRAP_AUTO, 2, NULL);
  s.platform = ps_platform_new (s.slice, s.hw, NULL);
  return s;
}

static PsReplayResult *
replay (Setup *s, PsTrace *t, gboolean no_cache, GError **error)
{
  int tl[2] = { 0, 1 };
  PsReplayOptions opt = { s->hw, s->platform, no_cache, tl, 2 };
  return ps_replay_trace (t, &opt, error);
}

static double
op_time (const PsHardware *hw, const PsTraceCompute *c)
{
  PsComputeOp op = ps_compute_op_from_trace (c);
  return ps_compute_op (hw, &op).time_s;
}

START_TEST (test_compute_only)
{
  Setup s = setup ("v3-32");
  g_autoptr (PsTrace) t = new_trace (4, 8);
  PsTraceCompute a = matmul (1024, 1024, 1024), b = matmul (4096, 128, 256);
  ps_trace_add_compute (t, "a", &a);
  ps_trace_add_compute (t, "b", &b);
  ps_trace_add_compute (t, "a2", &a);
  GError *error = NULL;
  g_autoptr (PsReplayResult) r = replay (&s, t, FALSE, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  double want = 2 * op_time (s.hw, &a) + op_time (s.hw, &b);
  ck_assert_double_eq_tol (r->step_time_s, want, want * 1e-12);
  ck_assert_int_eq (r->n_compute_segments, 1);
  ck_assert_double_eq_tol (r->compute_s[31], want, want * 1e-12);
  ck_assert_double_eq_tol (r->exposed_s[5], 0, 1e-15);
  double flops = 2.0 * a.flops + b.flops;
  ck_assert_double_eq_tol (r->mxu_utilization,
                           flops / (ps_hardware_peak_flops_per_core (s.hw) * want), 1e-9);
}
END_TEST

START_TEST (test_sync_collective)
{
  Setup s = setup ("v3-32");
  g_autoptr (PsTrace) t = new_trace (4, 8);
  PsTraceCompute a = matmul (2048, 2048, 2048);
  PsTraceCollective c = all_reduce (8 << 20, 1, 0);
  ps_trace_add_compute (t, "a", &a);
  ps_trace_add_collective (t, "ar", &c);
  ps_trace_add_compute (t, "b", &a);
  g_autoptr (PsReplayResult) r = replay (&s, t, FALSE, NULL);
  ck_assert_ptr_nonnull (r);
  double compute = 2 * op_time (s.hw, &a);
  ck_assert_int_eq (r->n_compute_segments, 2);
  /* A synchronous collective is fully exposed, and it is all the rest. */
  ck_assert (r->comm_s[0] > 0);
  ck_assert_double_eq_tol (r->exposed_s[0], r->comm_s[0], 1e-12);
  ck_assert_double_eq_tol (r->step_time_s, compute + r->comm_s[0], 1e-12);
  ck_assert_double_eq_tol (r->idle_s[7], 0, 1e-12);
  /* The group of 8 devices along mesh axis 1 is devices 8i..8i+7, the 4
   * chips of column x = i (chips are numbered x * chips_y + y): bytes on
   * the y links, none on the x links. */
  double x_bytes = 0, y_bytes = 0;
  for (int l = 0; l < s.platform->n_links; l++)
    {
      int dir = l % PS_LINKS_PER_CHIP;
      if (dir == PS_LINK_X_PLUS || dir == PS_LINK_X_MINUS)
        x_bytes += r->link_bytes[l];
      else if (dir == PS_LINK_Y_PLUS || dir == PS_LINK_Y_MINUS)
        y_bytes += r->link_bytes[l];
    }
  ck_assert (y_bytes > 0);
  ck_assert_double_eq (x_bytes, 0);
  gsize len;
  g_autofree char *csv = ps_replay_result_links_csv (r, &len);
  ck_assert (g_str_has_prefix (csv, "link,kind,src_x,src_y,dst_x,dst_y,bytes,busy_s,utilization\n"));
  ck_assert_ptr_nonnull (r->timeline);
  ck_assert_uint_ge (ps_timeline_n_events (r->timeline), 3);
}
END_TEST

START_TEST (test_async_overlap)
{
  Setup s = setup ("v3-32");
  g_autoptr (PsTrace) t = new_trace (4, 8);
  PsTraceCompute big = matmul (8192, 8192, 8192);
  PsTraceCollective c = all_reduce (1 << 20, 1, 7);
  ps_trace_add_collective (t, "ar", &c);
  ps_trace_add_compute (t, "big", &big);
  ps_trace_add_done (t, 7);
  g_autoptr (PsReplayResult) r = replay (&s, t, FALSE, NULL);
  ck_assert_ptr_nonnull (r);
  double compute = op_time (s.hw, &big);
  /* 1 MiB all-reduce is far shorter than the 8k matmul: hidden. */
  ck_assert (r->comm_s[3] > 0 && r->comm_s[3] < compute);
  ck_assert_double_eq_tol (r->exposed_s[3], 0, 1e-15);
  ck_assert_double_eq_tol (r->step_time_s, compute, compute * 1e-12);
}
END_TEST

static double
step_time_no_cache_in_child (Setup *s, PsTrace *t)
{
  int fds[2];
  ck_assert_int_eq (pipe (fds), 0);
  pid_t pid = fork ();
  if (pid == 0)
    {
      PsReplayResult *r = replay (s, t, TRUE, NULL);
      double v = r ? r->step_time_s : -1;
      ssize_t w = write (fds[1], &v, sizeof v);
      _exit (w == sizeof v ? 0 : 1);
    }
  double v = -2;
  ck_assert_int_eq (read (fds[0], &v, sizeof v), sizeof v);
  int status;
  waitpid (pid, &status, 0);
  close (fds[0]);
  close (fds[1]);
  return v;
}

/* All-to-all over all 32 devices of v3-32 (4 x 4 chips, 2 cores each). The
 * default routes it straight along each dimension: the middle x link of a
 * row carries 2 x 2 chip pairs x 2 x 8 cores x D/32 = 2 D
 * (doc/collectives.md). */
static PsTraceCollective
all_to_all (guint64 bytes, guint64 async_id)
{
  return collective (PS_TRACE_ALL_TO_ALL, bytes, -1, async_id);
}

START_TEST (test_all_to_all)
{
  /* _i: 0 the default on the mesh; 1 torus2d-wrap-a2a on a 4 x 4 torus
   * (--wrap on), where each row's cut has two links: half the load; 2 two
   * overlapping all-to-alls, which share every loaded link */
  Setup s = setup ("v3-32");
  if (_i == 1)
    {
      ps_platform_free (s.platform);
      ps_slice_free (s.slice);
      s.slice = ps_slice_new ("v3-32", PS_WRAP_ON, 2, NULL);
      s.platform = ps_platform_new (s.slice, s.hw, NULL);
    }
  g_autoptr (PsTrace) t = new_trace (4, 8);
  double D = 8 << 20;
  PsTraceCollective a = all_to_all ((guint64) D, _i == 2 ? 1 : 0);
  ps_trace_add_collective (t, "a2a", &a);
  if (_i == 2)
    {
      PsTraceCollective b = all_to_all ((guint64) D, 2);
      ps_trace_add_collective (t, "a2a", &b);
      ps_trace_add_done (t, 1);
      ps_trace_add_done (t, 2);
    }
  int tl[2] = { 0, 1 };
  PsReplayOptions opt = { s.hw, s.platform, FALSE, tl, 2,
                          _i == 1 ? PS_COLL_TORUS2D_WRAP_A2A : PS_COLL_TORUS2D };
  GError *error = NULL;
  g_autoptr (PsReplayResult) r = ps_replay_trace (t, &opt, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  double B = s.hw->ici_link_bw_bytes_per_s, alpha = s.hw->ici_hop_latency_s;
  double L = s.hw->collective_launch_overhead_s;
  double want = _i == 1 ? L + D / B + 4 * alpha
                : L + (_i == 2 ? 2 : 1) * 2 * D / B + 6 * alpha;
  ck_assert_msg (fabs (r->step_time_s - want) / want < 0.02, "case %d: step %g s, closed form %g s",
                 _i, r->step_time_s, want);
}
END_TEST

START_TEST (test_cache_matches_no_cache)
{
  Setup s = setup ("v3-32");
  g_autoptr (PsTrace) t = new_trace (4, 8);
  PsTraceCompute a = matmul (1024, 2048, 1024);
  for (int i = 0; i < 6; i++)
    {
      PsTraceCollective c = all_reduce ((guint64) (1 + i % 2) << 22, (guint) (i % 2), i % 3 == 0 ? 0 : (guint64) i);
      ps_trace_add_collective (t, "ar", &c);
      ps_trace_add_compute (t, "a", &a);
      if (c.async_id)
        ps_trace_add_done (t, c.async_id);
      ps_trace_add_compute (t, "b", &a);
    }
  double no_cache = step_time_no_cache_in_child (&s, t);
  g_autoptr (PsReplayResult) r = replay (&s, t, FALSE, NULL);
  ck_assert_ptr_nonnull (r);
  ck_assert_int_eq (r->n_unique_collectives, 2);
  ck_assert_msg (fabs (r->step_time_s - no_cache) <= 1e-9 * r->step_time_s,
                 "cache %.12g s, no cache %.12g s", r->step_time_s, no_cache);
}
END_TEST

START_TEST (test_cache_sees_overlapping_collectives)
{
  /* Collectives in flight at the same time share links with the cache on
   * too (sim/replay.c, "contention"), and cache and no cache agree: two
   * all-reduces of the same groups started together; an all-reduce and an
   * all-gather along the other axis started one matmul apart, each later
   * overlapped by another; a collective over other links in between. */
  Setup s = setup ("v3-32");
  g_autoptr (PsTrace) t = new_trace (4, 8);
  g_autoptr (PsTrace) alone = new_trace (4, 8);
  PsTraceCollective c1 = all_reduce (32 << 20, 1, 1), c2 = all_reduce (32 << 20, 1, 2);
  ps_trace_add_collective (t, "ar1", &c1);
  ps_trace_add_collective (t, "ar2", &c2);
  ps_trace_add_done (t, 1);
  ps_trace_add_done (t, 2);
  PsTraceCompute a = matmul (2048, 2048, 1024);
  for (guint64 k = 0; k < 3; k++)
    {
      PsTraceCollective x = all_reduce (16 << 20, 0, 10 + 3 * k);
      PsTraceCollective y = all_reduce (8 << 20, 1, 11 + 3 * k);
      y.kind = PS_TRACE_ALL_GATHER;
      y.in_bytes = y.out_bytes / 8;
      PsTraceCollective z = all_reduce (4 << 20, 0, 12 + 3 * k);
      ps_trace_add_collective (t, "x", &x);
      ps_trace_add_compute (t, "a", &a);
      ps_trace_add_collective (t, "y", &y);
      ps_trace_add_compute (t, "a", &a);
      ps_trace_add_done (t, x.async_id);
      ps_trace_add_collective (t, "z", &z);
      ps_trace_add_done (t, y.async_id);
      ps_trace_add_done (t, z.async_id);
    }
  PsTraceCollective c0 = all_reduce (32 << 20, 1, 0);
  ps_trace_add_collective (alone, "ar", &c0);
  double no_cache = step_time_no_cache_in_child (&s, t);
  GError *error = NULL;
  g_autoptr (PsReplayResult) r = replay (&s, t, FALSE, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "?");
  ck_assert_msg (fabs (r->step_time_s - no_cache) <= 1e-9 * no_cache,
                 "cache %.12g s, no cache %.12g s", r->step_time_s, no_cache);
  /* the first two share their rings: together well above one alone */
  double one = step_time_no_cache_in_child (&s, alone);
  ck_assert_msg (r->collectives->len > 0 && r->step_time_s > 1.5 * one,
                 "step %g s, one all-reduce alone %g s", r->step_time_s, one);
}
END_TEST

/* Chained starts (sim/replay.c, cluster_durations): y overlaps x, which it
 * slows; after x's done and a matmul, z starts while y is still in flight
 * on y's links. z's offset in the cluster follows x's contended end, which
 * the first pass does not know yet. Chained to x, the first simulation
 * settles the cluster: the second pass finds its offsets in the cache and
 * the third confirms them (3 passes, the fewest a step with a new cluster
 * takes; 5 when z was simulated at its offsets). Cache and no cache
 * agree. */
START_TEST (test_chained_starts)
{
  Setup s = setup ("v3-32");
  g_autoptr (PsTrace) t = new_trace (4, 8);
  PsTraceCompute a = matmul (2048, 2048, 1024);
  for (guint64 k = 0; k < 2; k++)
    {
      PsTraceCollective x = all_reduce (32 << 20, 1, 10 + 3 * k);
      PsTraceCollective y = all_reduce (64 << 20, 1, 11 + 3 * k);
      PsTraceCollective z = all_reduce (16 << 20, 1, 12 + 3 * k);
      ps_trace_add_collective (t, "x", &x);
      ps_trace_add_collective (t, "y", &y);
      ps_trace_add_done (t, x.async_id);
      ps_trace_add_compute (t, "a", &a);
      ps_trace_add_collective (t, "z", &z);
      ps_trace_add_done (t, y.async_id);
      ps_trace_add_done (t, z.async_id);
      ps_trace_add_compute (t, "a", &a);
    }
  double no_cache = step_time_no_cache_in_child (&s, t);
  GError *error = NULL;
  g_autoptr (PsReplayResult) r = replay (&s, t, FALSE, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "?");
  ck_assert_msg (fabs (r->step_time_s - no_cache) <= 1e-9 * no_cache,
                 "cache %.12g s, no cache %.12g s", r->step_time_s, no_cache);
  ck_assert_msg (r->n_overlapping_collectives == 6, "%" G_GUINT64_FORMAT " overlapping",
                 r->n_overlapping_collectives);
  ck_assert_msg (r->contention_passes == 3, "%d passes", r->contention_passes);
}
END_TEST

/* A step with loops, written with loop lines or unrolled: an all-reduce
 * over explicit groups of unequal reach leaves the devices out of step
 * before the first loop; its body runs compute, a synchronous all-reduce
 * along one mesh axis and an async one along the other, and a nested loop;
 * a second loop never runs. */
static void
add_body (PsTrace *t, gboolean loops, int inner_trips)
{
  PsTraceCompute a = matmul (1024, 2048, 1024), b = matmul (512, 512, 512);
  PsTraceCollective s1 = all_reduce (4 << 20, 1, 0), s0 = all_reduce (1 << 20, 0, 5);
  ps_trace_add_compute (t, "a", &a);
  ps_trace_add_collective (t, "s1", &s1);
  ps_trace_add_collective (t, "s0", &s0);
  ps_trace_add_compute (t, "b", &b);
  ps_trace_add_done (t, 5);
  if (loops)
    ps_trace_add_loop (t, "inner", (guint64) inner_trips);
  for (int k = 0; k < (loops ? 1 : inner_trips); k++)
    {
      PsTraceCollective i1 = all_reduce (64 << 10, 1, 0);
      ps_trace_add_compute (t, "c", &b);
      ps_trace_add_collective (t, "i1", &i1);
    }
  if (loops)
    ps_trace_add_end_loop (t);
}

static PsTrace *
loop_trace (gboolean loops, int trips)
{
  PsTrace *t = new_trace (4, 8);
  /* groups {0,1} (one chip) and {2,17} (far apart), then pairs of the rest */
  guint32 ids[32] = { 0, 1, 2, 17 };
  int n = 4;
  for (guint32 d = 3; d < 32; d++)
    if (d != 17)
      ids[n++] = d;
  PsTraceCollective skew = { .kind = PS_TRACE_ALL_REDUCE, .dtype = PS_TRACE_BF16,
                             .in_bytes = 16 << 20, .out_bytes = 16 << 20,
                             .groups = { .form = PS_TRACE_GROUPS_LIST, .n_groups = 16,
                                         .group_size = 2, .devices = ids } };
  ps_trace_add_collective (t, "skew", &skew);
  if (loops)
    ps_trace_add_loop (t, "layers", (guint64) trips);
  for (int k = 0; k < (loops ? 1 : trips); k++)
    add_body (t, loops, 3);
  if (loops)
    {
      ps_trace_add_end_loop (t);
      ps_trace_add_loop (t, "never", 0);
      add_body (t, loops, 3);
      ps_trace_add_end_loop (t);
    }
  PsTraceCompute a = matmul (256, 256, 256);
  ps_trace_add_compute (t, "tail", &a);
  return t;
}

static double
sum_of (const double *v, int n)
{
  double s = 0;
  for (int i = 0; i < n; i++)
    s += v[i];
  return s;
}

/* What the loop test compares, passed from a child process (one SimGrid
 * engine per process). */
typedef struct {
  double step, compute[32], comm[32], exposed[32], flops, link_bytes;
  guint64 n_compute, n_coll, n_segments, n_unique, n_iter, n_simulated, n_spans;
  guint64 count[8];
  double total[8];
} Summary;

static void
summarize (const PsReplayResult *r, const Setup *s, Summary *o)
{
  memset (o, 0, sizeof *o);
  o->step = r->step_time_s;
  for (int d = 0; d < 32; d++)
    {
      o->compute[d] = r->compute_s[d];
      o->comm[d] = r->comm_s[d];
      o->exposed[d] = r->exposed_s[d];
    }
  o->flops = r->flops_per_device;
  o->link_bytes = sum_of (r->link_bytes, s->platform->n_links);
  o->n_compute = r->n_compute_events;
  o->n_coll = r->n_collectives;
  o->n_segments = r->n_compute_segments;
  o->n_unique = r->n_unique_collectives;
  o->n_iter = r->n_loop_iterations;
  o->n_simulated = r->n_iterations_simulated;
  o->n_spans = r->timeline ? ps_timeline_n_events (r->timeline) : 0;
  for (guint i = 0; i < r->collectives->len && i < 8; i++)
    {
      o->count[i] = g_array_index (r->collectives, PsCollectiveStat, i).count;
      o->total[i] = g_array_index (r->collectives, PsCollectiveStat, i).total_s;
    }
}

static Summary
summary_in_child (Setup *s, PsTrace *t, gboolean no_cache)
{
  int fds[2];
  ck_assert_int_eq (pipe (fds), 0);
  pid_t pid = fork ();
  if (pid == 0)
    {
      Summary o = { .step = -1 };
      PsReplayResult *r = replay (s, t, no_cache, NULL);
      if (r)
        summarize (r, s, &o);
      ssize_t w = write (fds[1], &o, sizeof o);
      _exit (w == sizeof o ? 0 : 1);
    }
  Summary o;
  ck_assert_int_eq (read (fds[0], &o, sizeof o), sizeof o);
  int status;
  waitpid (pid, &status, 0);
  close (fds[0]);
  close (fds[1]);
  ck_assert (o.step > 0);
  return o;
}

/* Loops replay as their unrolled form: step time, per-device times, counts,
 * per-collective totals, link bytes and timeline spans; only a few
 * iterations are simulated (the out-of-step first one and the one that
 * shows the loop repeats). */
START_TEST (test_loops_match_unrolled)
{
  Setup s = setup ("v3-32");
  g_autoptr (PsTrace) lt = loop_trace (TRUE, 7), ut = loop_trace (FALSE, 7);
  Summary l = summary_in_child (&s, lt, FALSE), u = summary_in_child (&s, ut, FALSE);
  double tol = 1e-9 * u.step;
  ck_assert_msg (fabs (l.step - u.step) <= tol, "loop %.12g s, unrolled %.12g s", l.step, u.step);
  for (int d = 0; d < 32; d++)
    {
      ck_assert_double_eq_tol (l.compute[d], u.compute[d], tol);
      ck_assert_double_eq_tol (l.comm[d], u.comm[d], tol);
      ck_assert_double_eq_tol (l.exposed[d], u.exposed[d], tol);
    }
  ck_assert_uint_eq (l.n_compute, u.n_compute);
  ck_assert_uint_eq (l.n_coll, u.n_coll);
  ck_assert_uint_eq (l.n_coll, 1 + 7 * (2 + 3));
  ck_assert_uint_eq (l.n_segments, u.n_segments);
  ck_assert_uint_eq (l.n_unique, u.n_unique);
  ck_assert_double_eq_tol (l.flops, u.flops, 1);
  ck_assert_double_eq_tol (l.link_bytes, u.link_bytes, 1);
  for (int i = 0; i < 8; i++)
    {
      ck_assert_uint_eq (l.count[i], u.count[i]);
      ck_assert_double_eq_tol (l.total[i], u.total[i], tol);
    }
  ck_assert_uint_eq (l.n_spans, u.n_spans);
  /* 7 outer and 21 inner iterations; simulated: 2 outer (the first starts
   * out of step), each with one inner that repeats */
  ck_assert_uint_eq (l.n_iter, 7 + 21);
  ck_assert_uint_eq (l.n_simulated, 2 + 2);
  ck_assert_uint_eq (u.n_iter, 0);
  /* and without the cache, every iteration on the shared network */
  Summary ln = summary_in_child (&s, lt, TRUE), un = summary_in_child (&s, ut, TRUE);
  ck_assert_msg (fabs (ln.step - un.step) <= 1e-9 * un.step, "no cache: loop %.12g s, "
                 "unrolled %.12g s", ln.step, un.step);
  ck_assert_uint_eq (ln.n_simulated, ln.n_iter);
  ck_assert_uint_eq (ln.n_coll, un.n_coll);
}
END_TEST

/* Overlapping collectives inside a loop: with the cache on, the runs of a
 * loop iteration that overlap share links as on the network without the
 * cache, and the loop agrees with its unrolled form. */
static PsTrace *
overlap_loop_trace (gboolean loops, int trips)
{
  PsTrace *t = new_trace (4, 8);
  PsTraceCompute a = matmul (1024, 2048, 1024);
  if (loops)
    ps_trace_add_loop (t, "layers", (guint64) trips);
  for (int k = 0; k < (loops ? 1 : trips); k++)
    {
      PsTraceCollective x = all_reduce (8 << 20, 1, 1), y = all_reduce (8 << 20, 1, 2);
      PsTraceCollective z = all_reduce (2 << 20, 0, 3);
      ps_trace_add_collective (t, "x", &x);
      ps_trace_add_collective (t, "y", &y);
      ps_trace_add_compute (t, "a", &a);
      ps_trace_add_collective (t, "z", &z);
      ps_trace_add_done (t, 1);
      ps_trace_add_done (t, 2);
      ps_trace_add_done (t, 3);
    }
  if (loops)
    ps_trace_add_end_loop (t);
  return t;
}

START_TEST (test_loop_overlapping_collectives)
{
  Setup s = setup ("v3-32");
  g_autoptr (PsTrace) lt = overlap_loop_trace (TRUE, 6), ut = overlap_loop_trace (FALSE, 6);
  Summary l = summary_in_child (&s, lt, FALSE), ln = summary_in_child (&s, lt, TRUE);
  Summary u = summary_in_child (&s, ut, FALSE);
  ck_assert (l.step > 0 && ln.step > 0 && u.step > 0);
  ck_assert_msg (fabs (l.step - ln.step) <= 1e-9 * ln.step, "loop: cache %.12g s, no cache "
                 "%.12g s", l.step, ln.step);
  ck_assert_msg (fabs (l.step - u.step) <= 1e-9 * u.step, "cache: loop %.12g s, unrolled "
                 "%.12g s", l.step, u.step);
  ck_assert_uint_eq (l.n_coll, 18);
  ck_assert_uint_eq (l.n_coll, ln.n_coll);
  for (int i = 0; i < 8; i++)
    ck_assert_msg (fabs (l.total[i] - ln.total[i]) <= 1e-9 * ln.total[i], "collective %d: "
                   "cache %.12g s, no cache %.12g s", i, l.total[i], ln.total[i]);
}
END_TEST

START_TEST (test_errors)
{
  Setup s = setup ("v3-8");
  GError *error = NULL;
  g_autoptr (PsTrace) big = new_trace (4, 8);
  ck_assert_ptr_null (replay (&s, big, FALSE, &error));
  ck_assert_msg (strstr (error->message, "32 devices, more than the 8 cores of slice v3-8"),
                 "%s", error->message);
  g_clear_error (&error);

  g_autoptr (PsTrace) fat = new_trace (2, 4);
  ps_trace_header (fat)->totals.peak_bytes = (guint64) 20 << 30;
  PsTraceCompute a = matmul (128, 128, 128);
  ps_trace_add_compute (fat, "a", &a);
  ck_assert_ptr_null (replay (&s, fat, FALSE, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_NO_FIT));
  ck_assert_msg (strstr (error->message, "20.00 GiB") && strstr (error->message, "16.00 GiB"),
                 "%s", error->message);
  g_clear_error (&error);
}
END_TEST

START_TEST (test_nonpod2d_must_match_slice)
{
  Setup s = setup ("v3-32");
  g_autoptr (PsTrace) t = ps_trace_new ("np");
  gint64 dims[2] = { 8, 4 };
  ps_trace_set_mesh (t, 2, dims, PS_TRACE_ORDER_NONPOD2D, NULL);
  PsTraceHeader *h = ps_trace_header (t);
  h->mesh.physical[0] = 8;
  h->mesh.physical[1] = 2;
  h->mesh.physical[2] = 2;
  PsTraceCompute a = matmul (128, 128, 128);
  ps_trace_add_compute (t, "a", &a);
  GError *error = NULL;
  ck_assert_ptr_null (replay (&s, t, FALSE, &error));
  ck_assert_msg (strstr (error->message, "8x2x2 physical mesh, slice v3-32 is 4x4x2"), "%s",
                 error->message);
  g_clear_error (&error);
}
END_TEST

static Suite *
replay_suite (void)
{
  Suite *s = suite_create ("replay");
  TCase *tc = ps_check_case (s, "replay_timing", 120,
                             PS_CHECK_TESTS (test_compute_only,
                                             test_sync_collective,
                                             test_async_overlap,
                                             test_cache_matches_no_cache,
                                             test_cache_sees_overlapping_collectives,
                                             test_chained_starts,
                                             test_loops_match_unrolled,
                                             test_loop_overlapping_collectives,
                                             test_errors,
                                             test_nonpod2d_must_match_slice));
  tcase_add_loop_test (tc, test_all_to_all, 0, 3);
  return s;
}

int
main (void)
{
  return ps_check_run (replay_suite (), CK_FORK);
}

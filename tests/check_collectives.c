/* Collectives on the SimGrid platform against their closed forms
 * (doc/collectives.md). Every test builds its own SimGrid engine, which
 * SimGrid allows once per process: the suite relies on Check's fork mode. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <string.h>

#include "sim/collectives.h"
#include "sim/compute.h"
#include "sim/replay.h"
#include "tests/suite_main.h"

#define B_ICI 82e9
#define B_ON 82e9
#define ALPHA 1e-6
#define ALPHA_ON 1e-6
#define LAUNCH 1e-6

static PsHardware
test_hw_onchip (double onchip_bw)
{
  PsHardware hw = { 0 };
  hw.tensorcores_per_chip = 2;
  hw.ici_link_bw_bytes_per_s = B_ICI;
  hw.ici_hop_latency_s = ALPHA;
  hw.onchip_bw_bytes_per_s = onchip_bw;
  hw.onchip_latency_s = ALPHA_ON;
  hw.collective_launch_overhead_s = LAUNCH;
  return hw;
}

static PsHardware
test_hw (void)
{
  return test_hw_onchip (B_ON);
}

typedef struct {
  PsSlice *slice;
  PsPlatform *platform;
  PsSgNet *net;
} Fixture;

static Fixture
setup_onchip (const char *slice_name, PsWrapMode wrap, double onchip_bw)
{
  PsHardware hw = test_hw_onchip (onchip_bw);
  Fixture f;
  f.slice = ps_slice_new (slice_name, wrap, 2, NULL);
  f.platform = ps_platform_new (f.slice, &hw, NULL);
  f.net = ps_sgnet_new (f.platform, NULL);
  ck_assert_ptr_nonnull (f.net);
  return f;
}

static Fixture
setup (const char *slice_name, PsWrapMode wrap)
{
  return setup_onchip (slice_name, wrap, B_ON);
}

/* The 64 cores of the row y = 0 (32 chips along x), group-major. */
static int *
row_cores (const PsSlice *s, int y)
{
  int *cores = g_new (int, s->chips_x * 2);
  for (int x = 0; x < s->chips_x; x++)
    for (int c = 0; c < 2; c++)
      cores[x * 2 + c] = ps_slice_core_index (s, x, y, c);
  return cores;
}

static double
simulate_one (Fixture *f, PsCollPlan *plan)
{
  double *d[1];
  double t = ps_coll_simulate (f->net, &plan, 1, d);
  g_free (d[0]);
  return t;
}

/* Closed form of the ring all-reduce over n chips x 2 cores (per device D):
 * launch + on-chip reduce-scatter + bidirectional ring all-reduce of the
 * chip's D + on-chip all-gather. `hop_factor` is the number of flows sharing
 * each directed link and the hops per step (1 with wrap links, 2 on a mesh,
 * where the zig-zag ring sends every link's two ring orientations over it). */
static double
ring_all_reduce_closed_form (int n, double D, double sharing, double hops)
{
  double onchip = (D / 2) / B_ON + ALPHA_ON;
  double ring = 2.0 * (n - 1) / n * (D / 2) / (B_ICI / sharing) + 2 * (n - 1) * hops * ALPHA;
  return LAUNCH + 2 * onchip + ring;
}

START_TEST (test_ring_all_reduce_wrapped)
{
  Fixture f = setup ("v3-2048", PS_WRAP_AUTO);
  g_autofree int *cores = row_cores (f.slice, 0);
  double D = 64.0 * 1024 * 1024;
  g_autoptr (PsCollPlan) plan = ps_coll_plan_new (f.platform, PS_COLL_DIM_BY_DIM, PS_TRACE_ALL_REDUCE, D, cores, 1,
                                                  64, LAUNCH, NULL);
  ck_assert_ptr_nonnull (plan);
  double t = simulate_one (&f, plan);
  double want = ring_all_reduce_closed_form (32, D, 1, 1);
  ck_assert_msg (fabs (t - want) / want < 0.02, "simulated %g s, closed form %g s", t, want);
}
END_TEST

START_TEST (test_ring_all_reduce_no_wrap)
{
  Fixture f = setup ("v3-2048", PS_WRAP_OFF);
  g_autofree int *cores = row_cores (f.slice, 0);
  double D = 64.0 * 1024 * 1024;
  g_autoptr (PsCollPlan) plan = ps_coll_plan_new (f.platform, PS_COLL_DIM_BY_DIM, PS_TRACE_ALL_REDUCE, D, cores, 1,
                                                  64, LAUNCH, NULL);
  double t = simulate_one (&f, plan);
  double want = ring_all_reduce_closed_form (32, D, 2, 2);
  double wrapped = ring_all_reduce_closed_form (32, D, 1, 1);
  ck_assert_msg (fabs (t - want) / want < 0.02, "simulated %g s, closed form %g s", t, want);
  /* The ring part is about twice as slow without wrap links. */
  ck_assert (t > 1.4 * wrapped);
}
END_TEST

START_TEST (test_sharing_links)
{
  Fixture f = setup ("v3-2048", PS_WRAP_AUTO);
  g_autofree int *cores = row_cores (f.slice, 0);
  double D = 16.0 * 1024 * 1024;
  g_autoptr (PsCollPlan) a = ps_coll_plan_new (f.platform, PS_COLL_DIM_BY_DIM, PS_TRACE_ALL_REDUCE, D, cores, 1, 64,
                                               LAUNCH, NULL);
  g_autoptr (PsCollPlan) b = ps_coll_plan_new (f.platform, PS_COLL_DIM_BY_DIM, PS_TRACE_ALL_REDUCE, D / 2, cores, 1, 64,
                                               LAUNCH, NULL);
  double ta = simulate_one (&f, a);
  double tb = simulate_one (&f, b);
  PsCollPlan *both[2] = { a, b };
  double *d[2];
  double together = ps_coll_simulate (f.net, both, 2, d);
  ck_assert_msg (together > MAX (ta, tb) * 1.2, "together %g, apart %g and %g", together, ta, tb);
  ck_assert (together <= (ta + tb) * 1.01);
  g_free (d[0]);
  g_free (d[1]);
  /* Another row uses other links: no slowdown. */
  g_autofree int *other = row_cores (f.slice, 5);
  g_autoptr (PsCollPlan) c = ps_coll_plan_new (f.platform, PS_COLL_DIM_BY_DIM, PS_TRACE_ALL_REDUCE, D, other, 1, 64,
                                               LAUNCH, NULL);
  PsCollPlan *apart[2] = { a, c };
  double t2 = ps_coll_simulate (f.net, apart, 2, d);
  ck_assert_double_eq_tol (t2, ta, ta * 1e-6);
  g_free (d[0]);
  g_free (d[1]);
}
END_TEST

START_TEST (test_all_to_all_bisection)
{
  Fixture f = setup ("v3-2048", PS_WRAP_AUTO);
  int n = ps_slice_n_cores (f.slice);
  g_autofree int *cores = g_new (int, n);
  for (int i = 0; i < n; i++)
    cores[i] = i;
  double D = 8.0 * 1024 * 1024;
  g_autoptr (PsCollPlan) plan = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D_WRAP_A2A, PS_TRACE_ALL_TO_ALL, D,
                                                  cores, 1, n, LAUNCH, NULL);
  double t = simulate_one (&f, plan);
  /* Routed the shorter way round: half the devices send D/n to each device
   * of the other half; that crosses the x bisection over 32 rows x 2 links
   * (middle and wrap) per direction. */
  double crossing = (n / 2.0) * (n / 2.0) * (D / n);
  double bound = crossing / (64 * B_ICI);
  ck_assert_msg (t >= bound, "all-to-all %g s beats the bisection bound %g s", t, bound);
  ck_assert_msg (t <= 1.05 * bound + 64 * ALPHA, "all-to-all %g s, bisection bound %g s", t,
                 bound);
  double lower = ps_coll_plan_time_bound (plan);
  ck_assert_msg (lower <= t * (1 + 1e-12) && lower >= 0.5 * t, "all-to-all %g s, time bound %g s", t, lower);
}
END_TEST

START_TEST (test_plans)
{
  PsHardware hw = test_hw ();
  g_autoptr (PsSlice) s = ps_slice_new ("v3-32", PS_WRAP_AUTO, 2, NULL);
  g_autoptr (PsPlatform) p = ps_platform_new (s, &hw, NULL);
  int all[32];
  for (int i = 0; i < 32; i++)
    all[i] = i;
  g_autoptr (PsCollPlan) ar = ps_coll_plan_new (p, PS_COLL_DIM_BY_DIM, PS_TRACE_ALL_REDUCE, 1e6, all, 1, 32, 0, NULL);
  /* 4x4 chips x 2 cores: on-chip RS, ring x RS, ring y AR, ring x AG, on-chip AG. */
  GPtrArray *ph = ar->groups[0].phases;
  ck_assert_int_eq (ph->len, 5);
  ck_assert_str_eq (((PsPhase *) ph->pdata[0])->label, "onchip-rs");
  ck_assert_str_eq (((PsPhase *) ph->pdata[2])->label, "ring-y-ar");
  /* A mesh ring of 4 zig-zags: steps of at most two hops. */
  PsPhase *rx = ph->pdata[1];
  ck_assert_double_eq_tol (rx->latency_s, 3 * 2 * 1e-6, 1e-12);
  /* A core in two groups is an error. */
  int dup[4] = { 0, 1, 1, 2 };
  GError *error = NULL;
  ck_assert_ptr_null (ps_coll_plan_new (p, PS_COLL_DIM_BY_DIM, PS_TRACE_ALL_REDUCE, 1e6, dup, 2, 2, 0, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_INVALID));
  g_clear_error (&error);
  /* Bus bandwidth: NCCL's factors. */
  double alg, bus;
  ps_coll_bandwidths (PS_TRACE_ALL_REDUCE, 1e9, 4, 1.0, &alg, &bus);
  ck_assert_double_eq_tol (alg, 1e9, 1);
  ck_assert_double_eq_tol (bus, 1.5e9, 1);
}
END_TEST


/* ---- PS_COLL_TORUS2D (doc/collectives.md "The default: torus2d") ------- */

#define MIB (1024.0 * 1024.0)

static double
simulate_alg (Fixture *f, PsCollAlgorithm alg, PsTraceCollectiveKind kind, double D,
              const int *cores, int n_groups, int size)
{
  g_autoptr (PsCollPlan) plan = ps_coll_plan_new (f->platform, alg, kind, D, cores, n_groups, size,
                                                  LAUNCH, NULL);
  ck_assert_ptr_nonnull (plan);
  return simulate_one (f, plan);
}

static void
assert_close (double t, double want, const char *what)
{
  ck_assert_msg (fabs (t - want) / want < 0.02, "%s: simulated %g s, closed form %g s", what, t,
                 want);
}

/* Steps of a ring collective over m members and the bytes each ring edge
 * carries per direction, for a per-member buffer D. */
static int
ring_steps (PsTraceCollectiveKind kind, int m)
{
  return kind == PS_TRACE_ALL_REDUCE ? 2 * (m - 1) : m - 1;
}

static double
edge_bytes (PsTraceCollectiveKind kind, int m, double D)
{
  return ring_steps (kind, m) / (double) m * D / 2;
}

/* One row of chips along y (fixed x), both cores: interleaved on a wrapped
 * dimension, folded (core 0 out, core 1 back) on a mesh; group-major. */
static int *
y_rows (const PsSlice *s, gboolean folded)
{
  int n = s->chips_y, m = 2 * n;
  int *cores = g_new (int, s->chips_x * m);
  for (int x = 0; x < s->chips_x; x++)
    for (int y = 0; y < n; y++)
      for (int c = 0; c < 2; c++)
        {
          int pos = folded ? (c == 0 ? y : m - 1 - y) : 2 * y + c;
          cores[x * m + pos] = ps_slice_core_index (s, x, y, c);
        }
  return cores;
}

/* 1-D groups, interleaved ring through both cores on a wrapped dimension:
 * every directed link, ICI or on-chip, carries one ring edge. */
START_TEST (test_torus2d_1d_interleaved)
{
  static const PsTraceCollectiveKind kinds[] = {
    PS_TRACE_REDUCE_SCATTER, PS_TRACE_ALL_GATHER, PS_TRACE_ALL_REDUCE
  };
  PsTraceCollectiveKind kind = kinds[_i];
  Fixture f = setup ("v3-2048", PS_WRAP_AUTO);
  g_autofree int *cores = y_rows (f.slice, FALSE);
  double D = 64 * MIB;
  int m = 64;
  double t = simulate_alg (&f, PS_COLL_TORUS2D, kind, D, cores, 32, m);
  double want = LAUNCH + ring_steps (kind, m) * MAX (ALPHA, ALPHA_ON)
                + edge_bytes (kind, m, D) / MIN (B_ICI, B_ON);
  assert_close (t, want, ps_trace_collective_kind_name (kind));
  /* About twice as fast as the on-chip steps first and last around one
   * ring of chips (D/2/B_c + (n-1)/n D/(2B) against (m-1)/m D/(2B)). */
  double old = simulate_alg (&f, PS_COLL_DIM_BY_DIM, kind, D, cores, 32, m);
  ck_assert_msg (t < 0.6 * old, "torus2d %g s, dim-by-dim %g s", t, old);
}
END_TEST

/* 1-D groups on a mesh, folded ring: each directed ICI link carries two
 * ring edges (one of each orientation), the on-chip links of the two end
 * chips one each. */
START_TEST (test_torus2d_1d_folded_mesh)
{
  static const double onchip[] = { B_ON, B_ICI / 4 };
  Fixture f = setup_onchip ("v3-512", PS_WRAP_AUTO, onchip[_i]);
  g_autofree int *cores = y_rows (f.slice, TRUE);
  double D = 32 * MIB;
  int m = 32;
  double t = simulate_alg (&f, PS_COLL_TORUS2D, PS_TRACE_ALL_REDUCE, D, cores, 16, m);
  double e = edge_bytes (PS_TRACE_ALL_REDUCE, m, D);
  double want = LAUNCH + ring_steps (PS_TRACE_ALL_REDUCE, m) * MAX (ALPHA, ALPHA_ON)
                + MAX (2 * e / B_ICI, e / onchip[_i]);
  assert_close (t, want, "folded all-reduce");
}
END_TEST

/* A ring in listed order without wrap links (Lingvo's zig-zag, one core per
 * chip): steps of two hops, two ring edges on every directed link. */
START_TEST (test_ring_zigzag_listed)
{
  Fixture f = setup ("v3-512", PS_WRAP_AUTO);
  int n = f.slice->chips_x;
  g_autofree int *cores = g_new (int, n);
  for (int i = 0; i < n; i++)
    cores[i] = ps_slice_core_index (f.slice, 2 * i < n ? 2 * i : (n - i) * 2 - 1, 3, 0);
  double D = 16 * MIB;
  double t = simulate_alg (&f, PS_COLL_RING, PS_TRACE_ALL_GATHER, D, cores, 1, n);
  double want = LAUNCH + ring_steps (PS_TRACE_ALL_GATHER, n) * 2 * ALPHA
                + 2 * edge_bytes (PS_TRACE_ALL_GATHER, n, D) / B_ICI;
  assert_close (t, want, "zig-zag all-gather");
}
END_TEST

/* Closed form of the 2-D algorithm on an nx x ny group with both cores of
 * every chip, wrapped in both dimensions (doc/collectives.md). */
static double
torus2d_closed_form (PsTraceCollectiveKind kind, int nx, int ny, double D, double onchip_bw)
{
  double h = D / 2;
  int mx = 2 * nx, my = 2 * ny;
  double ax = edge_bytes (PS_TRACE_REDUCE_SCATTER, mx, h);
  double ay = edge_bytes (PS_TRACE_REDUCE_SCATTER, my, h);
  double stage1 = MAX (MAX (ax, ay) / B_ICI, (ax + ay) / onchip_bw)
                  + MAX (mx - 1, my - 1) * MAX (ALPHA, ALPHA_ON);
  /* second stage: two per-core rings share every link */
  PsTraceCollectiveKind k2 = kind == PS_TRACE_ALL_REDUCE ? PS_TRACE_ALL_REDUCE
                                                          : PS_TRACE_REDUCE_SCATTER;
  double bx = 2 * edge_bytes (k2, nx, h / my), by = 2 * edge_bytes (k2, ny, h / mx);
  double stage2 = MAX (bx, by) / B_ICI + MAX (ring_steps (k2, nx), ring_steps (k2, ny)) * ALPHA;
  return LAUNCH + (kind == PS_TRACE_ALL_REDUCE ? 2 : 1) * stage1 + stage2;
}

START_TEST (test_torus2d_2d_wrapped)
{
  static const PsTraceCollectiveKind kinds[] = {
    PS_TRACE_REDUCE_SCATTER, PS_TRACE_ALL_GATHER, PS_TRACE_ALL_REDUCE
  };
  static const double onchip[] = { B_ON, 2 * B_ICI };
  PsTraceCollectiveKind kind = kinds[_i % 3];
  double bc = onchip[_i / 3];
  Fixture f = setup_onchip ("v3-32", PS_WRAP_ON, bc);
  int n = ps_slice_n_cores (f.slice);
  g_autofree int *cores = g_new (int, n);
  for (int i = 0; i < n; i++)
    cores[i] = i;
  double D = 64 * MIB;
  double t = simulate_alg (&f, PS_COLL_TORUS2D, kind, D, cores, 1, n);
  assert_close (t, torus2d_closed_form (kind, 4, 4, D, bc), ps_trace_collective_kind_name (kind));
}
END_TEST

/* The whole pod (32 x 32 chips, both wrapped): the 2-D algorithm against
 * the same closed form, and against one dimension at a time. */
START_TEST (test_torus2d_pod)
{
  Fixture f = setup ("v3-2048", PS_WRAP_AUTO);
  int n = ps_slice_n_cores (f.slice);
  g_autofree int *cores = g_new (int, n);
  for (int i = 0; i < n; i++)
    cores[i] = i;
  double D = 64 * MIB;
  double t = simulate_alg (&f, PS_COLL_TORUS2D, PS_TRACE_REDUCE_SCATTER, D, cores, 1, n);
  assert_close (t, torus2d_closed_form (PS_TRACE_REDUCE_SCATTER, 32, 32, D, B_ON), "pod");
}
END_TEST

/* On a mesh the first stage's rings fold (two ring edges per directed ICI
 * link; on-chip links used only by the end chips, A's and B's at a corner)
 * and the second stage's zig-zag (two edges per link per ring, two-hop
 * steps). */
START_TEST (test_torus2d_2d_mesh)
{
  Fixture f = setup ("v3-32", PS_WRAP_AUTO);
  int n = ps_slice_n_cores (f.slice);
  g_autofree int *cores = g_new (int, n);
  for (int i = 0; i < n; i++)
    cores[i] = i;
  double D = 64 * MIB, h = D / 2;
  double t = simulate_alg (&f, PS_COLL_TORUS2D, PS_TRACE_REDUCE_SCATTER, D, cores, 1, n);
  double a = edge_bytes (PS_TRACE_REDUCE_SCATTER, 8, h);
  double stage1 = MAX (2 * a / B_ICI, 2 * a / B_ON) + 7 * MAX (ALPHA, ALPHA_ON);
  double b = edge_bytes (PS_TRACE_REDUCE_SCATTER, 4, h / 8);
  double stage2 = 2 * 2 * b / B_ICI + 3 * 2 * ALPHA;
  assert_close (t, LAUNCH + stage1 + stage2, "mesh reduce-scatter");
}
END_TEST

/* A plan whose links are never shared is computed without SimGrid: the
 * same durations as the SimGrid run (pod rows, the whole pod in 2-D, a
 * folded mesh row); shared links (two rings per row) keep SimGrid. */
/* One all-to-all of D per device over every core of the fixture's slice. */
static PsCollPlan *
all_cores_a2a (Fixture *f, PsCollAlgorithm alg, double D)
{
  int n = ps_slice_n_cores (f->slice);
  g_autofree int *cores = g_new (int, n);
  for (int i = 0; i < n; i++)
    cores[i] = i;
  PsCollPlan *plan = ps_coll_plan_new (f->platform, alg, PS_TRACE_ALL_TO_ALL, D, cores, 1, n, LAUNCH,
                                       NULL);
  ck_assert_ptr_nonnull (plan);
  return plan;
}

/* The default all-to-all: one-shot, routed in dimension order straight
 * along each dimension (no wrap link). On X x Y chips with c cores each the
 * middle x link of a row carries (X/2)^2 chip pairs x c (sources) x c Y
 * (targets in the column) x D/m, = X c D / 4, and the middle y link
 * Y c D / 4 (doc/collectives.md, "All-to-all"). */
static double
a2a_mesh_closed_form (int X, int Y, int c, double D)
{
  double m = (double) c * X * Y, piece = D / m;
  double lx = (X / 2) * (double) (X - X / 2) * c * c * Y * piece;
  double ly = (Y / 2) * (double) (Y - Y / 2) * c * c * X * piece;
  double bw = MAX (MAX (lx, ly) / B_ICI, piece / B_ON);
  return LAUNCH + bw + (X - 1 + Y - 1) * ALPHA;
}

START_TEST (test_all_to_all_mesh_routed)
{
  static const char *const slices[] = { "v3-32", "v3-64", "v3-512", "v3-2048", "v3-2048" };
  Fixture f = setup (slices[_i], _i == 4 ? PS_WRAP_OFF : PS_WRAP_AUTO);
  double D = 32e6;
  g_autoptr (PsCollPlan) plan = all_cores_a2a (&f, PS_COLL_TORUS2D, D);
  ck_assert (plan->exclusive_links);
  double t = simulate_one (&f, plan);
  char what[64];
  g_snprintf (what, sizeof what, "all-to-all on %s%s", slices[_i], _i == 4 ? " --wrap off" : "");
  assert_close (t, a2a_mesh_closed_form (f.slice->chips_x, f.slice->chips_y, 2, D), what);
  /* SimGrid gives the same as the direct computation */
  plan->use_network = TRUE;
  double network = simulate_one (&f, plan);
  ck_assert_msg (fabs (network - t) <= 1e-9 * t, "SimGrid %g, direct %g", network, t);
  /* the dim-by-dim and ring algorithms run the same all-to-all */
  g_autoptr (PsCollPlan) other = all_cores_a2a (&f, PS_COLL_RING, D);
  ck_assert_double_eq_tol (simulate_one (&f, other), t, 1e-12);
}
END_TEST

/* The staged all-to-all (torus2d-staged-a2a, doc/collectives.md "Staged"):
 * along x within every row, then along y within every column, each stage
 * routed straight. Its x links carry the one-shot's x load, its y links the
 * one-shot's y load, but one after the other:
 * T = L + max(load_x / B, Y D/m / B_c) + (X-1) alpha + load_y / B + (Y-1) alpha. */
static double
a2a_staged_closed_form (int X, int Y, int c, double D)
{
  double m = (double) c * X * Y, piece = D / m;
  double lx = (X / 2) * (double) (X - X / 2) * c * c * Y * piece;
  double ly = (Y / 2) * (double) (Y - Y / 2) * c * c * X * piece;
  double stage1 = MAX (lx / B_ICI, c == 2 ? Y * piece / B_ON : 0) + (X - 1) * ALPHA;
  double stage2 = ly / B_ICI + (Y - 1) * ALPHA;
  return LAUNCH + stage1 + stage2;
}

START_TEST (test_all_to_all_staged)
{
  static const char *const slices[] = { "v3-32", "v3-64", "v3-512", "v3-2048", "v3-2048" };
  Fixture f = setup (slices[_i], _i == 4 ? PS_WRAP_OFF : PS_WRAP_AUTO);
  double D = 32e6;
  g_autoptr (PsCollPlan) plan = all_cores_a2a (&f, PS_COLL_TORUS2D_STAGED_A2A, D);
  ck_assert_uint_eq (plan->groups[0].phases->len, 2);
  double t = simulate_one (&f, plan);
  int X = f.slice->chips_x, Y = f.slice->chips_y;
  char what[64];
  g_snprintf (what, sizeof what, "staged all-to-all on %s%s", slices[_i],
              _i == 4 ? " --wrap off" : "");
  assert_close (t, a2a_staged_closed_form (X, Y, 2, D), what);
  plan->use_network = TRUE;
  double network = simulate_one (&f, plan);
  ck_assert_msg (fabs (network - t) <= 1e-9 * t, "SimGrid %g, direct %g", network, t);
  /* both stages together carry what the one-shot carries, link by link */
  g_autoptr (PsCollPlan) oneshot = all_cores_a2a (&f, PS_COLL_TORUS2D, D);
  for (int l = 0; l < f.platform->n_links; l++)
    if (l % PS_LINKS_PER_CHIP != PS_LINK_ONCHIP_FROM_CORE0
        && l % PS_LINKS_PER_CHIP != PS_LINK_ONCHIP_FROM_CORE1)
      ck_assert_double_eq_tol (plan->link_bytes[l], oneshot->link_bytes[l], 1e-6 * D);
  /* square grids: the stages take twice the one-shot's bandwidth term */
  if (X == Y)
    ck_assert (t > 1.9 * (simulate_one (&f, oneshot) - (X + Y) * ALPHA));
}
END_TEST

/* Groups the staged all-to-all does not stage: a 1-D group (one row of
 * chips) and a group that is not a product set run the one-shot exchange;
 * a product sub-grid of one core per chip is staged with its own closed
 * form (c = 1, the 4 x 4 chips of cores 0 of a v3-128's lower-left corner). */
START_TEST (test_all_to_all_staged_groups)
{
  Fixture f = setup ("v3-128", PS_WRAP_AUTO);
  const PsSlice *s = f.slice;
  double D = 8e6;
  g_autofree int *row = row_cores (s, 0);
  int n_row = s->chips_x * 2;
  g_autoptr (PsCollPlan) a = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D_STAGED_A2A,
                                               PS_TRACE_ALL_TO_ALL, D, row, 1, n_row, LAUNCH, NULL);
  g_autoptr (PsCollPlan) b = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D, PS_TRACE_ALL_TO_ALL, D,
                                               row, 1, n_row, LAUNCH, NULL);
  ck_assert_uint_eq (a->groups[0].phases->len, 1);
  ck_assert_double_eq_tol (simulate_one (&f, a), simulate_one (&f, b), 1e-12);
  /* an L of three chips is no product set */
  int ell[6] = { ps_slice_core_index (s, 0, 0, 0), ps_slice_core_index (s, 0, 0, 1),
                 ps_slice_core_index (s, 1, 0, 0), ps_slice_core_index (s, 1, 0, 1),
                 ps_slice_core_index (s, 0, 1, 0), ps_slice_core_index (s, 0, 1, 1) };
  g_autoptr (PsCollPlan) c = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D_STAGED_A2A,
                                               PS_TRACE_ALL_TO_ALL, D, ell, 1, 6, LAUNCH, NULL);
  g_autoptr (PsCollPlan) d = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D, PS_TRACE_ALL_TO_ALL, D,
                                               ell, 1, 6, LAUNCH, NULL);
  ck_assert_uint_eq (c->groups[0].phases->len, 1);
  ck_assert_double_eq_tol (simulate_one (&f, c), simulate_one (&f, d), 1e-12);
  int sub[16];
  for (int x = 0; x < 4; x++)
    for (int y = 0; y < 4; y++)
      sub[x * 4 + y] = ps_slice_core_index (s, x, y, 0);
  g_autoptr (PsCollPlan) e = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D_STAGED_A2A,
                                               PS_TRACE_ALL_TO_ALL, D, sub, 1, 16, LAUNCH, NULL);
  ck_assert_uint_eq (e->groups[0].phases->len, 2);
  assert_close (simulate_one (&f, e), a2a_staged_closed_form (4, 4, 1, D),
                "staged all-to-all on a 4 x 4 sub-grid, one core per chip");
}
END_TEST

/* Contention inside the all-to-all: the plan merges each link's load into
 * one transfer, which assumes every link drains its load at full rate. Run
 * instead every (source, target) pair as its own multi-hop transfer on
 * SimGrid, where max-min sharing throttles a pair by the most loaded link
 * on its route, and the all-to-all still ends when the most loaded link
 * has carried its load: the merged plan's time, within 2 %. */
START_TEST (test_all_to_all_pairs_on_simgrid)
{
  Fixture f = setup (_i == 0 ? "v3-32" : "v3-64", PS_WRAP_AUTO);
  int n = ps_slice_n_cores (f.slice);
  double D = 32e6;
  g_autoptr (PsCollPlan) plan = all_cores_a2a (&f, PS_COLL_TORUS2D, D);
  double merged = simulate_one (&f, plan);
  PsPhase *ph = plan->groups[0].phases->pdata[0];
  g_array_set_size (ph->flows, 0);
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (a != b)
        {
          PsFlow fl = { a, b, D / n };
          g_array_append_val (ph->flows, fl);
        }
  plan->use_network = TRUE;
  double pairs = simulate_one (&f, plan);
  assert_close (pairs, merged, "all-to-all pair by pair");
}
END_TEST

START_TEST (test_exclusive_links_direct)
{
  Fixture f = setup (_i == 2 ? "v3-512" : "v3-2048", PS_WRAP_AUTO);
  int n = ps_slice_n_cores (f.slice);
  g_autofree int *all = g_new (int, n);
  for (int i = 0; i < n; i++)
    all[i] = i;
  g_autofree int *rows = y_rows (f.slice, _i == 2);
  const int *cores = _i == 1 ? all : rows;
  int groups = _i == 1 ? 1 : f.slice->chips_x, size = _i == 1 ? n : 2 * f.slice->chips_y;
  PsTraceCollectiveKind kind = _i == 1 ? PS_TRACE_ALL_REDUCE : PS_TRACE_REDUCE_SCATTER;
  g_autoptr (PsCollPlan) plan = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D, kind, 48 * MIB,
                                                  cores, groups, size, LAUNCH, NULL);
  ck_assert (plan->exclusive_links);
  double *d1[1], *d2[1];
  double direct = ps_coll_simulate (f.net, &plan, 1, d1);
  plan->use_network = TRUE;
  double network = ps_coll_simulate (f.net, &plan, 1, d2);
  ck_assert_msg (fabs (direct - network) <= 1e-12 * network, "direct %.17g, SimGrid %.17g",
                 direct, network);
  /* autoshard's closed form: the direct figure, without SimGrid */
  double bound = ps_coll_plan_time_bound (plan);
  ck_assert_msg (fabs (bound - direct) <= 1e-12 * direct, "time bound %.17g, direct %.17g", bound, direct);
  for (int g = 0; g < plan->n_groups; g++)
    ck_assert_msg (fabs (d1[0][g] - d2[0][g]) <= 1e-12 * d2[0][g], "group %d", g);
  g_free (d1[0]);
  g_free (d2[0]);
  /* one core per chip along x: the two cores' rings share every link */
  const PsSlice *s = f.slice;
  g_autofree int *x = g_new (int, n);
  for (int y = 0, k = 0; y < s->chips_y; y++)
    for (int c = 0; c < 2; c++)
      for (int i = 0; i < s->chips_x; i++)
        x[k++] = ps_slice_core_index (s, i, y, c);
  g_autoptr (PsCollPlan) shared = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D,
                                                    PS_TRACE_ALL_GATHER, MIB, x, 2 * s->chips_y,
                                                    s->chips_x, LAUNCH, NULL);
  ck_assert (!shared->exclusive_links);
  /* shared links: a lower bound of what SimGrid's sharing gives */
  double lower = ps_coll_plan_time_bound (shared), sim = simulate_one (&f, shared);
  ck_assert_msg (lower > LAUNCH && lower <= sim * (1 + 1e-12), "time bound %.17g, SimGrid %.17g", lower, sim);
}
END_TEST

/* ---- Contention between overlapping collectives: a packet-level check --- */

/* Where collectives overlap, no closed form gives their times: each link
 * is shared by transfers of several collectives, which start, finish and
 * move to their next phase at different times. The argument that checks
 * the simulation here is packet-level: a link sends one packet at a time
 * and takes turns (round robin) among the transfers that have bytes left
 * on it. For transfers of one hop, such a link gives each of its k active
 * transfers 1/k of its rate, up to a packet, which is what max-min sharing
 * gives them in SimGrid; the groups' phases, launch and latency then
 * decide when each transfer joins a link. The event loop below runs that
 * argument independently of SimGrid and of the plans' merging: any error
 * in how ps_coll_simulate_at() (the replay's contention passes) starts
 * overlapping groups, waits for phases or shares links shows up as a
 * difference. It needs one-hop transfers, which every plan used below has
 * (asserted). */

#define PACKET_BYTES 4096.0

typedef struct {
  int link, plan, group;
  double left;
} PkTransfer;

typedef struct {
  int plan, group;
  guint phase;        /* the phase running, or the next to start */
  double start_at;    /* when `phase` starts (its transfers join links) */
  int active;         /* transfers of the running phase with bytes left; -1: not started */
  gboolean done;
  double end;
} PkGroup;

typedef struct {
  GArray *queue;      /* indices into the transfer array, round-robin order */
  guint next;         /* position of the transfer to serve next */
  int serving;        /* transfer whose packet is on the link, or -1 */
  double packet, busy_until;
} PkLink;

static void
pk_link_serve (PkLink *lk, GArray *tr, double now, double bw)
{
  lk->serving = -1;
  for (guint k = 0; k < lk->queue->len && lk->serving < 0; k++)
    {
      guint pos = (lk->next + k) % lk->queue->len;
      int t = g_array_index (lk->queue, int, pos);
      PkTransfer *x = &g_array_index (tr, PkTransfer, t);
      if (x->left > 0)
        {
          lk->serving = t;
          lk->packet = MIN (PACKET_BYTES, x->left);
          lk->busy_until = now + lk->packet / bw;
          lk->next = pos + 1;
        }
    }
}

/* Per-group durations, measured from each group's own start, of the plans
 * started at offsets[i] (one per plan), under round-robin packets. */
static double **
packet_level (const PsPlatform *p, PsCollPlan *const *plans, int n_plans, const double *offsets)
{
  g_autofree int *route = g_new (int, ps_platform_max_route_links (p));
  g_autoptr (GArray) tr = g_array_new (FALSE, FALSE, sizeof (PkTransfer));
  g_autoptr (GArray) groups = g_array_new (FALSE, FALSE, sizeof (PkGroup));
  PkLink *links = g_new0 (PkLink, p->n_links);
  for (int l = 0; l < p->n_links; l++)
    {
      links[l].queue = g_array_new (FALSE, FALSE, sizeof (int));
      links[l].serving = -1;
    }
  double **out = g_new (double *, n_plans);
  for (int i = 0; i < n_plans; i++)
    {
      out[i] = g_new0 (double, plans[i]->n_groups);
      for (int g = 0; g < plans[i]->n_groups; g++)
        {
          PkGroup gr = { i, g, 0, offsets[i] + plans[i]->launch_s, -1, FALSE, 0 };
          g_array_append_val (groups, gr);
        }
    }
  guint left_groups = groups->len;
  while (left_groups > 0)
    {
      /* the earliest event: a phase starting, or a packet arriving */
      double now = G_MAXDOUBLE;
      int ev_group = -1, ev_link = -1;
      for (guint k = 0; k < groups->len; k++)
        {
          PkGroup *gr = &g_array_index (groups, PkGroup, k);
          if (!gr->done && gr->active < 0 && gr->start_at < now)
            {
              now = gr->start_at;
              ev_group = (int) k;
            }
        }
      for (int l = 0; l < p->n_links; l++)
        if (links[l].serving >= 0 && links[l].busy_until < now)
          {
            now = links[l].busy_until;
            ev_link = l;
            ev_group = -1;
          }
      ck_assert (ev_group >= 0 || ev_link >= 0);
      if (ev_group >= 0)
        {
          PkGroup *gr = &g_array_index (groups, PkGroup, ev_group);
          const PsCollPlan *plan = plans[gr->plan];
          GPtrArray *phases = plan->groups[gr->group].phases;
          const PsPhase *ph = phases->pdata[gr->phase];
          gr->active = 0;
          for (guint f = 0; f < ph->flows->len; f++)
            {
              const PsFlow *fl = &g_array_index (ph->flows, PsFlow, f);
              ck_assert_int_eq (ps_platform_route (p, fl->src_core, fl->dst_core, route, NULL), 1);
              /* SimGrid moves round(bytes) */
              PkTransfer x = { route[0], gr->plan, ev_group, round (fl->bytes) };
              if (x.left <= 0)
                continue;
              int t = (int) tr->len;
              g_array_append_val (tr, x);
              g_array_append_val (links[x.link].queue, t);
              gr->active++;
              if (links[x.link].serving < 0)
                pk_link_serve (&links[x.link], tr, now, ps_platform_link_bw (p, x.link));
            }
          if (gr->active > 0)
            continue;
          /* a phase without transfers: only its latency (ends below) */
          gr->active = 1;
        }
      int finished_group = ev_group;
      if (ev_link >= 0)
        {
          PkLink *lk = &links[ev_link];
          PkTransfer *x = &g_array_index (tr, PkTransfer, lk->serving);
          x->left -= lk->packet;
          finished_group = x->left <= 0 ? x->group : -1;
          pk_link_serve (lk, tr, now, ps_platform_link_bw (p, ev_link));
        }
      if (finished_group < 0)
        continue;
      PkGroup *gr = &g_array_index (groups, PkGroup, finished_group);
      if (--gr->active > 0)
        continue;
      const PsCollPlan *plan = plans[gr->plan];
      GPtrArray *phases = plan->groups[gr->group].phases;
      double end = now + ((const PsPhase *) phases->pdata[gr->phase])->latency_s;
      gr->active = -1;
      if (++gr->phase < phases->len)
        gr->start_at = end;
      else
        {
          gr->done = TRUE;
          out[gr->plan][gr->group] = end - offsets[gr->plan];
          left_groups--;
        }
    }
  for (int l = 0; l < p->n_links; l++)
    g_array_unref (links[l].queue);
  g_free (links);
  return out;
}

/* Rows along x (fixed y), both cores, folded as on a mesh: core 0 out along
 * the row, core 1 back; group-major. Every ring edge is one hop. */
static int *
x_rows_folded (const PsSlice *s)
{
  int n = s->chips_x, m = 2 * n;
  int *cores = g_new (int, s->chips_y * m);
  for (int y = 0; y < s->chips_y; y++)
    for (int x = 0; x < n; x++)
      for (int c = 0; c < 2; c++)
        cores[y * m + (c == 0 ? x : m - 1 - x)] = ps_slice_core_index (s, x, y, c);
  return cores;
}

/* Overlapping collectives whose transfers share links, started at
 * different times, against the packet-level argument above: 0, on v3-32
 * (4 x 4 mesh), an all-reduce over every row (along x) and, 100 us later,
 * an all-to-all over all cores, whose middle x links the rows' rings also
 * load; 1, on v3-64 (4 x 8 mesh), a reduce-scatter over the rows along y,
 * an all-to-all 40 us later and an all-gather over the rows along x 60
 * us later: every link carries transfers of two or three collectives for
 * part of the time. */
START_TEST (test_overlap_packet_level)
{
  Fixture f = setup (_i == 0 ? "v3-32" : "v3-64", PS_WRAP_AUTO);
  const PsSlice *s = f.slice;
  int n = ps_slice_n_cores (s);
  g_autofree int *all = g_new (int, n);
  for (int i = 0; i < n; i++)
    all[i] = i;
  g_autofree int *xr = x_rows_folded (s);
  g_autofree int *yr = y_rows (s, TRUE);
  PsCollPlan *plans[3];
  double offsets[3];
  int n_plans;
  if (_i == 0)
    {
      plans[0] = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D, PS_TRACE_ALL_REDUCE, 8e6, xr,
                                   s->chips_y, 2 * s->chips_x, LAUNCH, NULL);
      plans[1] = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D, PS_TRACE_ALL_TO_ALL, 4e6, all, 1,
                                   n, LAUNCH, NULL);
      offsets[0] = 0;
      offsets[1] = 100e-6;
      n_plans = 2;
    }
  else
    {
      plans[0] = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D, PS_TRACE_REDUCE_SCATTER, 16e6, yr,
                                   s->chips_x, 2 * s->chips_y, LAUNCH, NULL);
      plans[1] = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D, PS_TRACE_ALL_TO_ALL, 4e6, all, 1,
                                   n, LAUNCH, NULL);
      plans[2] = ps_coll_plan_new (f.platform, PS_COLL_TORUS2D, PS_TRACE_ALL_GATHER, 8e6, xr,
                                   s->chips_y, 2 * s->chips_x, LAUNCH, NULL);
      offsets[0] = 0;
      offsets[1] = 40e-6;
      offsets[2] = 60e-6;
      n_plans = 3;
    }
  /* every group of a plan starts at the plan's offset */
  double *start[3] = { NULL, NULL, NULL };
  for (int i = 0; i < n_plans; i++)
    {
      ck_assert_ptr_nonnull (plans[i]);
      start[i] = g_new (double, plans[i]->n_groups);
      for (int g = 0; g < plans[i]->n_groups; g++)
        start[i][g] = offsets[i];
    }
  double *sim[3];
  double end = ps_coll_simulate_at (f.net, plans, n_plans, (const double *const *) start, sim);
  double **pk = packet_level (f.platform, plans, n_plans, offsets);
  double pk_end = 0;
  for (int i = 0; i < n_plans; i++)
    {
      double *a[1];
      ps_coll_simulate (f.net, &plans[i], 1, a);
      double alone = 0, overlapping = 0;
      for (int g = 0; g < plans[i]->n_groups; g++)
        {
          char what[64];
          g_snprintf (what, sizeof what, "collective %d, group %d", i, g);
          ck_assert_msg (fabs (sim[i][g] - pk[i][g]) / pk[i][g] < 0.02,
                         "%s: simulated %g s, packet level %g s", what, sim[i][g], pk[i][g]);
          pk_end = MAX (pk_end, offsets[i] + pk[i][g]);
          alone = MAX (alone, a[0][g]);
          overlapping = MAX (overlapping, sim[i][g]);
        }
      /* the links are shared: each is slower than alone */
      ck_assert_msg (overlapping > 1.05 * alone, "collective %d: %g s overlapping, %g s alone", i,
                     overlapping, alone);
      g_free (a[0]);
      g_free (sim[i]);
      g_free (pk[i]);
      g_free (start[i]);
      ps_coll_plan_free (plans[i]);
    }
  g_free (pk);
  ck_assert_msg (fabs (end - pk_end) / pk_end < 0.02, "last end: simulated %g s, packet level %g s",
                 end, pk_end);
}
END_TEST

/* The same argument for the replay itself: a trace starts an asynchronous
 * all-reduce over the x rows (folded, as the LIST of device ids gives
 * them), runs a matmul, then starts an all-to-all over all devices and
 * waits for both; the replay (its contention passes, cache on) must end
 * the step when the packet-level loop, with the all-to-all starting one
 * matmul later, ends the last of them. No engine of the fixture here: the
 * replay makes its own, and SimGrid allows one per process. */
START_TEST (test_replay_overlap_packet_level)
{
  g_autofree PsHardware *hw = ps_hardware_default ();
  g_autoptr (PsSlice) s = ps_slice_new ("v3-32", PS_WRAP_AUTO, 2, NULL);
  g_autoptr (PsPlatform) p = ps_platform_new (s, hw, NULL);
  int n = ps_slice_n_cores (s);
  g_autofree int *xr = x_rows_folded (s);
  g_autofree guint32 *ids = g_new (guint32, n);
  for (int i = 0; i < n; i++)
    ids[i] = (guint32) xr[i]; /* device d is core d (the default assignment) */
  g_autoptr (PsTrace) t = ps_trace_new ("overlap");
  gint64 dims[2] = { 4, 8 };
  ps_trace_set_mesh (t, 2, dims, PS_TRACE_ORDER_ARANGE, NULL);
  ps_trace_header (t)->totals.peak_bytes = 1 << 30;
  double ar_bytes = 8e6, a2a_bytes = 4e6;
  PsTraceCollective ar = { .kind = PS_TRACE_ALL_REDUCE, .dtype = PS_TRACE_BF16,
                           .in_bytes = (guint64) ar_bytes, .out_bytes = (guint64) ar_bytes,
                           .groups = { .form = PS_TRACE_GROUPS_LIST,
                                       .n_groups = (guint64) s->chips_y,
                                       .group_size = (guint64) (2 * s->chips_x),
                                       .devices = ids },
                           .async_id = 1 };
  PsTraceCollective a2a = { .kind = PS_TRACE_ALL_TO_ALL, .dtype = PS_TRACE_BF16,
                            .in_bytes = (guint64) a2a_bytes, .out_bytes = (guint64) a2a_bytes,
                            .groups = { .form = PS_TRACE_GROUPS_ALL },
                            .async_id = 2 };
  /* a bf16 [1024, 2048] x [2048, 1024] matmul */
  PsTraceCompute mm = { .op = PS_TRACE_OP_MATMUL, .dtype = PS_TRACE_BF16, .has_mxu = TRUE,
                        .mxu_batch = 1, .mxu_m = 1024, .mxu_k = 2048, .mxu_n = 1024,
                        .flops = 2ULL * 1024 * 2048 * 1024,
                        .read_bytes = 2ULL * (1024 * 2048 + 2048 * 1024),
                        .write_bytes = 2ULL * 1024 * 1024 };
  ps_trace_add_collective (t, "ar", &ar);
  ps_trace_add_compute (t, "mm", &mm);
  ps_trace_add_collective (t, "a2a", &a2a);
  ps_trace_add_done (t, 1);
  ps_trace_add_done (t, 2);
  PsComputeOp op = ps_compute_op_from_trace (&mm);
  double compute = ps_compute_op (hw, &op).time_s;
  PsReplayOptions opt = { hw, p, FALSE, NULL, 0, PS_COLL_TORUS2D, NULL, NULL };
  GError *error = NULL;
  g_autoptr (PsReplayResult) r = ps_replay_trace (t, &opt, &error);
  ck_assert_msg (r != NULL, "%s", error ? error->message : "");
  /* the plans the replay makes of them, and the packet-level loop */
  g_autofree int *all = g_new (int, n);
  for (int i = 0; i < n; i++)
    all[i] = i;
  PsCollPlan *plans[2];
  plans[0] = ps_coll_plan_new (p, PS_COLL_TORUS2D, PS_TRACE_ALL_REDUCE, ar_bytes, xr, s->chips_y,
                               2 * s->chips_x, hw->collective_launch_overhead_s, NULL);
  plans[1] = ps_coll_plan_new (p, PS_COLL_TORUS2D, PS_TRACE_ALL_TO_ALL, a2a_bytes, all, 1, n,
                               hw->collective_launch_overhead_s, NULL);
  double offsets[2] = { 0, compute };
  double **pk = packet_level (p, plans, 2, offsets);
  double end = compute;
  for (int i = 0; i < 2; i++)
    {
      for (int g = 0; g < plans[i]->n_groups; g++)
        end = MAX (end, offsets[i] + pk[i][g]);
      g_free (pk[i]);
      ps_coll_plan_free (plans[i]);
    }
  g_free (pk);
  ck_assert_msg (compute < end - 20e-6, "the matmul (%g s) hides the collectives", compute);
  ck_assert_msg (fabs (r->step_time_s - end) / end < 0.02, "replayed step %g s, packet level %g s",
                 r->step_time_s, end);
}
END_TEST

START_TEST (test_algorithm_names)
{
  PsCollAlgorithm a;
  GError *error = NULL;
  for (int i = 0; i < PS_COLL_ALGORITHM_COUNT; i++)
    {
      ck_assert (ps_coll_algorithm_parse (ps_coll_algorithm_name (i), "--collectives", &a, NULL));
      ck_assert_int_eq (a, i);
    }
  ck_assert (!ps_coll_algorithm_parse ("rings", "--collectives", &a, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_OPTION));
  ck_assert (strstr (error->message, "--collectives") && strstr (error->message, "torus2d"));
  g_clear_error (&error);
}
END_TEST

static Suite *
collectives_suite (void)
{
  Suite *s = suite_create ("collectives");
  TCase *tc = ps_check_case (s, "collective_plans_and_times", 120,
                             PS_CHECK_TESTS (test_plans,
                                             test_ring_all_reduce_wrapped,
                                             test_ring_all_reduce_no_wrap,
                                             test_sharing_links,
                                             test_all_to_all_bisection,
                                             test_all_to_all_staged_groups,
                                             test_ring_zigzag_listed,
                                             test_torus2d_pod,
                                             test_torus2d_2d_mesh,
                                             test_algorithm_names,
                                             test_replay_overlap_packet_level));
  tcase_add_loop_test (tc, test_all_to_all_mesh_routed, 0, 5);
  tcase_add_loop_test (tc, test_all_to_all_pairs_on_simgrid, 0, 2);
  tcase_add_loop_test (tc, test_all_to_all_staged, 0, 5);
  tcase_add_loop_test (tc, test_torus2d_1d_interleaved, 0, 3);
  tcase_add_loop_test (tc, test_torus2d_1d_folded_mesh, 0, 2);
  tcase_add_loop_test (tc, test_torus2d_2d_wrapped, 0, 6);
  tcase_add_loop_test (tc, test_exclusive_links_direct, 0, 3);
  tcase_add_loop_test (tc, test_overlap_packet_level, 0, 2);
  return s;
}

int
main (void)
{
  return ps_check_run (collectives_suite (), CK_FORK);
}

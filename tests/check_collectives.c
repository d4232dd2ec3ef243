/* Collectives on the SimGrid platform against their closed forms
 * (doc/collectives.md). Every test builds its own SimGrid engine, which
 * SimGrid allows once per process: the suite relies on Check's fork mode. */
#include "config.h"

#include <check.h>
#include <math.h>

#include "sim/collectives.h"

#define B_ICI 82e9
#define B_ON 82e9
#define ALPHA 1e-6
#define ALPHA_ON 1e-6
#define LAUNCH 1e-6

static PsHardware
test_hw (void)
{
  PsHardware hw = { 0 };
  hw.tensorcores_per_chip = 2;
  hw.ici_link_bw_bytes_per_s = B_ICI;
  hw.ici_hop_latency_s = ALPHA;
  hw.onchip_bw_bytes_per_s = B_ON;
  hw.onchip_latency_s = ALPHA_ON;
  hw.collective_launch_overhead_s = LAUNCH;
  return hw;
}

typedef struct {
  PsSlice *slice;
  PsPlatform *platform;
  PsSgNet *net;
} Fixture;

static Fixture
setup (const char *slice_name, PsWrapMode wrap)
{
  PsHardware hw = test_hw ();
  Fixture f;
  f.slice = ps_slice_new (slice_name, wrap, 2, NULL);
  f.platform = ps_platform_new (f.slice, &hw, NULL);
  f.net = ps_sgnet_new (f.platform, NULL);
  ck_assert_ptr_nonnull (f.net);
  return f;
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
  g_autoptr (PsCollPlan) plan = ps_coll_plan_new (f.platform, PS_TRACE_ALL_REDUCE, D, cores, 1,
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
  g_autoptr (PsCollPlan) plan = ps_coll_plan_new (f.platform, PS_TRACE_ALL_REDUCE, D, cores, 1,
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
  g_autoptr (PsCollPlan) a = ps_coll_plan_new (f.platform, PS_TRACE_ALL_REDUCE, D, cores, 1, 64,
                                               LAUNCH, NULL);
  g_autoptr (PsCollPlan) b = ps_coll_plan_new (f.platform, PS_TRACE_ALL_REDUCE, D / 2, cores, 1, 64,
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
  g_autoptr (PsCollPlan) c = ps_coll_plan_new (f.platform, PS_TRACE_ALL_REDUCE, D, other, 1, 64,
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
  g_autoptr (PsCollPlan) plan = ps_coll_plan_new (f.platform, PS_TRACE_ALL_TO_ALL, D, cores, 1, n,
                                                  LAUNCH, NULL);
  double t = simulate_one (&f, plan);
  /* Half the devices send D/n to each device of the other half; that
   * crosses the x bisection over 32 rows x 2 links (middle and wrap) per
   * direction. */
  double crossing = (n / 2.0) * (n / 2.0) * (D / n);
  double bound = crossing / (64 * B_ICI);
  ck_assert_msg (t >= bound, "all-to-all %g s beats the bisection bound %g s", t, bound);
  ck_assert_msg (t <= 1.05 * bound + 64 * ALPHA, "all-to-all %g s, bisection bound %g s", t,
                 bound);
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
  g_autoptr (PsCollPlan) ar = ps_coll_plan_new (p, PS_TRACE_ALL_REDUCE, 1e6, all, 1, 32, 0, NULL);
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
  ck_assert_ptr_null (ps_coll_plan_new (p, PS_TRACE_ALL_REDUCE, 1e6, dup, 2, 2, 0, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_INVALID));
  g_clear_error (&error);
  /* Bus bandwidth: NCCL's factors. */
  double alg, bus;
  ps_coll_bandwidths (PS_TRACE_ALL_REDUCE, 1e9, 4, 1.0, &alg, &bus);
  ck_assert_double_eq_tol (alg, 1e9, 1);
  ck_assert_double_eq_tol (bus, 1.5e9, 1);
}
END_TEST

static Suite *
collectives_suite (void)
{
  Suite *s = suite_create ("collectives");
  TCase *tc = tcase_create ("core");
  tcase_set_timeout (tc, 120);
  tcase_add_test (tc, test_plans);
  tcase_add_test (tc, test_ring_all_reduce_wrapped);
  tcase_add_test (tc, test_ring_all_reduce_no_wrap);
  tcase_add_test (tc, test_sharing_links);
  tcase_add_test (tc, test_all_to_all_bisection);
  suite_add_tcase (s, tc);
  return s;
}

int
main (void)
{
  SRunner *sr = srunner_create (collectives_suite ());
  srunner_set_fork_status (sr, CK_FORK);
  srunner_run_all (sr, CK_NORMAL);
  int failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? 0 : 1;
}

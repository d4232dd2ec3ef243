/* podsim autoshard's chain DP (driver/autoshard_dp.h) against enumeration
 * of every combination, on costs whose optimum is known that way: random
 * per-variable and neighbour-pair terms (where the DP must be exact), a
 * peak limit (the Lagrangian ladder must find a combination that fits),
 * and a cost with a non-neighbour interaction (the DP's answer is then
 * only a model's, which the caller measures). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/suite_main.h"
#include "driver/autoshard_dp.h"

#define NV 5
#define NK 4

typedef struct {
  double unary[NV][NK], pair[NV][NK][NK], peak[NV][NK];
  double far;          /* a term between variables 0 and NV-1 (not neighbours) */
  int n_calls;
} Model;

static double
model_step (const Model *m, const int *x)
{
  double c = 1.0;
  for (int i = 0; i < NV; i++)
    c += m->unary[i][x[i]];
  for (int i = 0; i + 1 < NV; i++)
    c += m->pair[i][x[i]][x[i + 1]];
  if (x[0] == 1 && x[NV - 1] == 1)
    c += m->far;
  return c;
}

static double
model_peak (const Model *m, const int *x)
{
  double p = 100;
  for (int i = 0; i < NV; i++)
    p += m->peak[i][x[i]];
  return p;
}

static gboolean
eval (const int *x, PsDpCost *out, gpointer user)
{
  Model *m = user;
  m->n_calls++;
  out->ran = TRUE;
  out->step_s = model_step (m, x);
  out->peak_bytes = model_peak (m, x);
  return TRUE;
}

/* The cheapest combination by enumeration, under the limit. */
static double
enumerate (const Model *m, double limit, int *best)
{
  int x[NV] = { 0 };
  double b = G_MAXDOUBLE;
  for (;;)
    {
      double c = model_step (m, x);
      if (model_peak (m, x) <= limit && c < b)
        {
          b = c;
          memcpy (best, x, sizeof x);
        }
      int i = 0;
      while (i < NV && ++x[i] == NK)
        x[i++] = 0;
      if (i == NV)
        break;
    }
  return b;
}

static void
random_model (Model *m, GRand *r)
{
  memset (m, 0, sizeof *m);
  for (int i = 0; i < NV; i++)
    for (int k = 0; k < NK; k++)
      {
        m->unary[i][k] = k == 0 ? 0 : g_rand_double_range (r, -0.2, 0.1);
        m->peak[i][k] = k == 0 ? 0 : -g_rand_double_range (r, 0, 20);
        for (int l = 0; l < NK; l++)
          m->pair[i][k][l] = k == 0 || l == 0 ? 0 : g_rand_double_range (r, -0.1, 0.15);
      }
}

static const int n_cands[NV] = { NK, NK, NK, NK, NK };
static const int order[NV] = { 0, 1, 2, 3, 4 };

static double
solve_best (Model *m, double limit, int width, int *x)
{
  PsDpProblem pb = { NV, n_cands, order, NV, width, limit };
  int base[NV] = { 0 };
  g_autoptr (GPtrArray) sols = g_ptr_array_new_with_free_func (g_free);
  PsDpStats st;
  ck_assert_int_gt (ps_autoshard_dp_solve (&pb, base, eval, m, sols, &st), 0);
  ck_assert_int_eq (st.n_measured, m->n_calls);
  /* The caller measures each solution and keeps the best that fits. */
  double b = G_MAXDOUBLE;
  for (guint j = 0; j < sols->len; j++)
    {
      const int *s = sols->pdata[j];
      if (model_peak (m, s) <= limit && model_step (m, s) < b)
        {
          b = model_step (m, s);
          memcpy (x, s, sizeof (int) * NV);
        }
    }
  return b;
}

START_TEST (test_dp_exact_on_chain_costs)
{
  GRand *r = g_rand_new_with_seed (28);
  for (int trial = 0; trial < 200; trial++)
    {
      Model m;
      random_model (&m, r);
      int want[NV], got[NV];
      double best = enumerate (&m, G_MAXDOUBLE, want);
      /* width NK-1: every candidate kept, the model is the cost itself */
      double found = solve_best (&m, G_MAXDOUBLE, NK - 1, got);
      ck_assert_msg (fabs (found - best) < 1e-9, "trial %d: dp %g, enumeration %g", trial, found, best);
      /* 1 + (NK-1) unary + (NK-1)^2 per pair: far fewer than NK^NV */
      ck_assert_int_eq (m.n_calls, 1 + NV * (NK - 1) + (NV - 1) * (NK - 1) * (NK - 1));
    }
  g_rand_free (r);
}
END_TEST

START_TEST (test_dp_meets_the_peak_limit)
{
  GRand *r = g_rand_new_with_seed (2028);
  int exact = 0, n = 0;
  for (int trial = 0; trial < 200; trial++)
    {
      Model m;
      random_model (&m, r);
      int want[NV], got[NV];
      double limit = 100 - 30;   /* most combinations moving few variables do not fit */
      double best = enumerate (&m, limit, want);
      if (best == G_MAXDOUBLE)
        continue;
      n++;
      double found = solve_best (&m, limit, NK - 1, got);
      /* Lagrangian relaxation finds a combination that fits, not always
       * the constrained optimum (the duality gap). */
      ck_assert_msg (found < G_MAXDOUBLE, "trial %d: nothing that fits", trial);
      ck_assert (found >= best - 1e-9);
      exact += fabs (found - best) < 1e-9;
    }
  ck_assert_int_gt (n, 100);
  if (g_getenv ("PS_DP_PRINT"))
    fprintf (stderr, "peak limit: %d of %d exact\n", exact, n);
  /* measured (PS_DP_PRINT=1 CK_FORK=no tests/check_autoshard_dp): 190 of
   * the 200 found the constrained optimum exactly */
  ck_assert_int_ge (exact, 9 * n / 10);
  g_rand_free (r);
}
END_TEST

START_TEST (test_dp_width_prunes)
{
  GRand *r = g_rand_new_with_seed (7);
  Model m;
  random_model (&m, r);
  int got[NV];
  double found = solve_best (&m, G_MAXDOUBLE, 2, got);
  ck_assert (found < G_MAXDOUBLE);
  /* width 2: 2 kept per variable, 4 pair measurements per neighbour pair */
  ck_assert_int_eq (m.n_calls, 1 + NV * (NK - 1) + (NV - 1) * 2 * 2);
  g_rand_free (r);
}
END_TEST

START_TEST (test_dp_chain_recursion)
{
  /* Three variables of 2 values; the pair terms forbid (1,1) between 0
   * and 1 and make (1,1) between 1 and 2 pay. */
  int nk[3] = { 2, 2, 2 };
  double u0[2] = { 0, -1 }, u1[2] = { 0, -1 }, u2[2] = { 0, -0.5 };
  double p0[4] = { 0, 0, 0, G_MAXDOUBLE }, p1[4] = { 0, 0, 0, -2 };
  double *u[3] = { u0, u1, u2 }, *p[2] = { p0, p1 };
  int x[3];
  double c = ps_autoshard_dp_chain (3, nk, u, p, x);
  ck_assert (fabs (c - (-3.5)) < 1e-12);
  ck_assert_int_eq (x[0], 0);
  ck_assert_int_eq (x[1], 1);
  ck_assert_int_eq (x[2], 1);
}
END_TEST

START_TEST (test_dp_far_interaction_is_a_model)
{
  /* A large bonus for x0 = x4 = 1, which no neighbour pair sees: the DP's
   * answer is exact for its model, and the enumeration can do better. */
  Model m;
  memset (&m, 0, sizeof m);
  for (int i = 0; i < NV; i++)
    m.unary[i][1] = 0.05;
  m.far = -1;
  int want[NV], got[NV];
  double best = enumerate (&m, G_MAXDOUBLE, want);
  double found = solve_best (&m, G_MAXDOUBLE, NK - 1, got);
  ck_assert (fabs (best - (1 - 1 + 0.1)) < 1e-12);
  ck_assert (fabs (found - 1) < 1e-12);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("autoshard_dp");
  ps_check_case (s, "dp", 0,
                 PS_CHECK_TESTS (test_dp_exact_on_chain_costs,
                                 test_dp_meets_the_peak_limit,
                                 test_dp_width_prunes, test_dp_chain_recursion,
                                 test_dp_far_interaction_is_a_model));
  return ps_check_run (s, CK_FORK_GETENV);
}

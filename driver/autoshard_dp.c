/* podsim autoshard's chain dynamic program: driver/autoshard_dp.h says
 * what and why. */
#include "driver/autoshard_dp.h"

#include <math.h>
#include <string.h>

double
ps_autoshard_dp_chain (int m, const int *nk, double *const *unary, double *const *pair, int *x)
{
  if (m <= 0)
    return 0;
  /* best[i][k]: the cheapest cost of variables 0..i with x_i = k; from[i][k]
   * the x_{i-1} it came from. */
  g_autofree double **best = g_new0 (double *, m);
  g_autofree int **from = g_new0 (int *, m);
  for (int i = 0; i < m; i++)
    {
      best[i] = g_new (double, nk[i]);
      from[i] = g_new0 (int, nk[i]);
      for (int k = 0; k < nk[i]; k++)
        {
          double u = unary[i][k];
          best[i][k] = G_MAXDOUBLE;
          if (u == G_MAXDOUBLE)
            continue;
          if (i == 0)
            {
              best[i][k] = u;
              continue;
            }
          for (int j = 0; j < nk[i - 1]; j++)
            {
              double p = pair[i - 1][j * nk[i] + k];
              if (best[i - 1][j] == G_MAXDOUBLE || p == G_MAXDOUBLE)
                continue;
              double c = best[i - 1][j] + p + u;
              if (c < best[i][k])
                {
                  best[i][k] = c;
                  from[i][k] = j;
                }
            }
        }
    }
  int k = -1;
  for (int j = 0; j < nk[m - 1]; j++)
    if (best[m - 1][j] != G_MAXDOUBLE && (k < 0 || best[m - 1][j] < best[m - 1][k]))
      k = j;
  double total = k < 0 ? G_MAXDOUBLE : best[m - 1][k];
  for (int i = m - 1; i >= 0 && k >= 0; i--)
    {
      x[i] = k;
      k = i > 0 ? from[i][k] : -1;
    }
  for (int i = 0; i < m; i++)
    {
      g_free (best[i]);
      g_free (from[i]);
    }
  return total;
}

typedef struct {
  int k;
  double v;
} Ranked;

static gint
ranked_cmp (gconstpointer a, gconstpointer b)
{
  const Ranked *x = a, *y = b;
  return x->v != y->v ? (x->v < y->v ? -1 : 1) : x->k - y->k;
}

/* The base's cost, then whether this variable's candidate k is kept. */
static void
keep_best (const double *step, const double *peak, const gboolean *ok, int n, int base, int width, gboolean *kept)
{
  g_autofree Ranked *r = g_new (Ranked, n);
  for (int pass = 0; pass < 2; pass++)
    {
      int m = 0;
      for (int k = 0; k < n; k++)
        if (k != base && ok[k])
          r[m++] = (Ranked) { k, pass == 0 ? step[k] : peak[k] };
      qsort (r, (size_t) m, sizeof *r, (int (*) (const void *, const void *)) ranked_cmp);
      /* half the width by step, the rest by peak (the ones not yet kept) */
      int want = pass == 0 ? (width + 1) / 2 : width, have = 0;
      for (int k = 0; k < n; k++)
        have += kept[k] && k != base;
      for (int j = 0; j < m && have < want; j++)
        if (!kept[r[j].k])
          {
            kept[r[j].k] = TRUE;
            have++;
          }
    }
  kept[base] = TRUE;
}

int
ps_autoshard_dp_solve (const PsDpProblem *pb, const int *base, PsDpEval eval, gpointer user,
                       GPtrArray *solutions, PsDpStats *stats)
{
  PsDpStats dummy;
  if (!stats)
    stats = &dummy;
  memset (stats, 0, sizeof *stats);
  int n = pb->n, m = pb->n_order, width = pb->width > 0 ? pb->width : 4;
  g_autofree int *trial = g_memdup2 (base, sizeof (int) * (gsize) MAX (n, 1));
  PsDpCost c0;
  stats->n_measured++;
  if (!eval (trial, &c0, user))
    stats->stopped = TRUE;
  if (!c0.ran || m == 0)
    return 0;
  /* Unary terms: the base with one variable moved. */
  g_autofree double **s1 = g_new0 (double *, m), **p1 = g_new0 (double *, m);
  g_autofree gboolean **ok1 = g_new0 (gboolean *, m), **kept = g_new0 (gboolean *, m);
  for (int i = 0; i < m; i++)
    {
      int v = pb->order[i], nc = pb->n_cands[v];
      s1[i] = g_new0 (double, nc);
      p1[i] = g_new0 (double, nc);
      ok1[i] = g_new0 (gboolean, nc);
      kept[i] = g_new0 (gboolean, nc);
      ok1[i][base[v]] = TRUE;
      for (int k = 0; k < nc && !stats->stopped; k++)
        {
          if (k == base[v])
            continue;
          PsDpCost c;
          trial[v] = k;
          stats->n_measured++;
          if (!eval (trial, &c, user))
            stats->stopped = TRUE;
          trial[v] = base[v];
          if (!c.ran)
            continue;
          ok1[i][k] = TRUE;
          s1[i][k] = c.step_s - c0.step_s;
          p1[i][k] = c.peak_bytes - c0.peak_bytes;
        }
      keep_best (s1[i], p1[i], ok1[i], nc, base[v], width, kept[i]);
    }
  /* The model over the kept values only: index j of variable i is its
   * j-th kept candidate. */
  g_autofree int *nk = g_new0 (int, m);
  g_autofree int **val = g_new0 (int *, m);
  for (int i = 0; i < m; i++)
    {
      int nc = pb->n_cands[pb->order[i]];
      val[i] = g_new0 (int, nc);
      for (int k = 0; k < nc; k++)
        if (kept[i][k])
          val[i][nk[i]++] = k;
    }
  /* Pair terms between neighbours of the chain: the base with both moved. */
  g_autofree double **s2 = g_new0 (double *, m), **p2 = g_new0 (double *, m);
  for (int i = 0; i + 1 < m; i++)
    {
      int v = pb->order[i], w = pb->order[i + 1];
      s2[i] = g_new0 (double, (gsize) nk[i] * nk[i + 1]);
      p2[i] = g_new0 (double, (gsize) nk[i] * nk[i + 1]);
      for (int a = 0; a < nk[i]; a++)
        for (int b = 0; b < nk[i + 1]; b++)
          {
            int ka = val[i][a], kb = val[i + 1][b], at = a * nk[i + 1] + b;
            if (ka == base[v] || kb == base[w])
              continue;   /* one of them at the base: its unary term alone */
            if (stats->stopped)
              {
                s2[i][at] = p2[i][at] = G_MAXDOUBLE;   /* not measured: not chosen */
                continue;
              }
            PsDpCost c;
            trial[v] = ka;
            trial[w] = kb;
            stats->n_measured++;
            stats->n_pairs++;
            if (!eval (trial, &c, user))
              stats->stopped = TRUE;
            trial[v] = base[v];
            trial[w] = base[w];
            if (!c.ran)
              {
                s2[i][at] = p2[i][at] = G_MAXDOUBLE;
                continue;
              }
            s2[i][at] = c.step_s - c0.step_s - s1[i][ka] - s1[i + 1][kb];
            p2[i][at] = c.peak_bytes - c0.peak_bytes - p1[i][ka] - p1[i + 1][kb];
          }
    }
  /* Lagrangian relaxation of the peak limit: lambda (seconds per byte)
   * from 0 up a geometric ladder until the predicted peak fits, and two
   * rungs beyond it (the prediction is a model: a margin). */
  g_autofree double **u = g_new0 (double *, m), **pr = g_new0 (double *, m);
  for (int i = 0; i < m; i++)
    u[i] = g_new0 (double, nk[i]);
  for (int i = 0; i + 1 < m; i++)
    pr[i] = g_new0 (double, (gsize) nk[i] * nk[i + 1]);
  g_autofree int *x = g_new0 (int, m);
  double scale = MAX (c0.step_s, 1e-9) / MAX (c0.peak_bytes, 1.0);
  int found = 0, beyond = -1;
  for (int rung = -1; rung < 60 && beyond < 2; rung++)
    {
      double lambda = rung < 0 ? 0 : scale * 1e-3 * pow (2, rung);
      for (int i = 0; i < m; i++)
        for (int a = 0; a < nk[i]; a++)
          u[i][a] = s1[i][val[i][a]] + lambda * p1[i][val[i][a]];
      for (int i = 0; i + 1 < m; i++)
        for (int at = 0; at < nk[i] * nk[i + 1]; at++)
          pr[i][at] = s2[i][at] == G_MAXDOUBLE ? G_MAXDOUBLE : s2[i][at] + lambda * p2[i][at];
      stats->n_lambdas++;
      if (ps_autoshard_dp_chain (m, nk, u, pr, x) == G_MAXDOUBLE)
        break;
      double peak = c0.peak_bytes;
      for (int i = 0; i < m; i++)
        peak += p1[i][val[i][x[i]]];
      for (int i = 0; i + 1 < m; i++)
        {
          double p = p2[i][x[i] * nk[i + 1] + x[i + 1]];
          peak += p == G_MAXDOUBLE ? 0 : p;
        }
      if (beyond >= 0 || peak <= pb->limit_bytes)
        beyond++;
      int *sol = g_memdup2 (base, sizeof (int) * (gsize) MAX (n, 1));
      for (int i = 0; i < m; i++)
        sol[pb->order[i]] = val[i][x[i]];
      gboolean fresh = TRUE;
      for (guint j = 0; j < solutions->len && fresh; j++)
        fresh = memcmp (solutions->pdata[j], sol, sizeof (int) * (gsize) n) != 0;
      if (fresh)
        {
          g_ptr_array_add (solutions, sol);
          found++;
        }
      else
        g_free (sol);
    }
  for (int i = 0; i < m; i++)
    {
      g_free (s1[i]);
      g_free (p1[i]);
      g_free (ok1[i]);
      g_free (kept[i]);
      g_free (val[i]);
      g_free (u[i]);
      if (i + 1 < m)
        {
          g_free (s2[i]);
          g_free (p2[i]);
          g_free (pr[i]);
        }
    }
  return found;
}

/* The pipelining report: see pipelining.h. */
#include "config.h"

#include "cli/pipelining.h"

#include <string.h>

#include "topology/platform.h"

void
ps_pipelining_report_free (PsPipeliningReport *rep)
{
  if (!rep)
    return;
  g_free (rep->bubble_s);
  g_free (rep->where);
  if (rep->permutes)
    {
      for (guint i = 0; i < rep->permutes->len; i++)
        g_free (g_array_index (rep->permutes, PsPermuteHops, i).pairs);
      g_array_unref (rep->permutes);
    }
  g_free (rep);
}

/* Is stage k on no microbatch in forward iteration i? */
static gboolean
bubble (int k, int i, int m)
{
  return i < k || i >= k + m;
}

/* ICI links between two cores (on-chip hops do not count). */
static int
ici_hops (const PsPlatform *pf, int src, int dst, int *links)
{
  int n = ps_platform_route (pf, src, dst, links, NULL), hops = 0;
  for (int i = 0; i < n; i++)
    hops += strcmp (ps_platform_link_kind (pf, links[i]), "ici") == 0;
  return hops;
}

/* Every collective-permute of the trace, grouped by its pairs. */
static GArray *
permute_hops (const PsDriverResult *r)
{
  GArray *out = g_array_new (FALSE, TRUE, sizeof (PsPermuteHops));
  const PsTrace *t = r->trace;
  const PsTraceHeader *h = ps_trace_get_header (t);
  g_autofree int *links = g_new (int, ps_platform_max_route_links (r->platform) + 1);
  guint64 runs[PS_TRACE_MAX_LOOP_DEPTH + 1] = { 1 };
  int depth = 0;
  for (guint64 i = 0; i < ps_trace_n_events (t); i++)
    {
      const PsTraceEvent *e = ps_trace_get_event (t, i);
      if (e->kind == PS_TRACE_EVENT_LOOP)
        {
          depth++;
          runs[depth] = runs[depth - 1] * e->trips;
          continue;
        }
      if (e->kind == PS_TRACE_EVENT_END_LOOP)
        {
          depth--;
          continue;
        }
      if (e->kind != PS_TRACE_EVENT_COLLECTIVE || e->collective.kind != PS_TRACE_COLLECTIVE_PERMUTE)
        continue;
      g_autofree char *form = ps_trace_pairs_to_string (&e->collective.pairs);
      PsPermuteHops *ph = NULL;
      for (guint k = 0; k < out->len && !ph; k++)
        if (strcmp (g_array_index (out, PsPermuteHops, k).pairs, form) == 0)
          ph = &g_array_index (out, PsPermuteHops, k);
      if (ph)
        {
          ph->runs += runs[depth];
          continue;
        }
      PsPermuteHops n = { g_strdup (form), runs[depth], 0, G_MAXINT, 0, 0 };
      g_autofree guint32 *pairs = ps_trace_pairs_expand (&e->collective.pairs, h, &n.n_pairs);
      double sum = 0;
      for (guint64 p = 0; p < n.n_pairs; p++)
        {
          int src = r->sim->core_of_device[pairs[2 * p]], dst = r->sim->core_of_device[pairs[2 * p + 1]];
          int hops = ici_hops (r->platform, src, dst, links);
          n.min_hops = MIN (n.min_hops, hops);
          n.max_hops = MAX (n.max_hops, hops);
          sum += hops;
        }
      if (n.n_pairs == 0)
        n.min_hops = 0;
      n.mean_hops = n.n_pairs ? sum / (double) n.n_pairs : 0;
      g_array_append_val (out, n);
    }
  return out;
}

PsPipeliningReport *
ps_pipelining_report (int stages, int microbatches, const PsDriverResult *r)
{
  if (stages <= 1 || !r->sim || !r->sim->loops)
    return NULL;
  int K = stages, M = microbatches, T = M + K - 1;
  /* the pipeline's loops: forward, then backward, of T iterations */
  const PsLoopStat *fwd = NULL, *bwd = NULL;
  for (guint i = 0; i < r->sim->loops->len; i++)
    {
      const PsLoopStat *l = &g_array_index (r->sim->loops, PsLoopStat, i);
      if (l->trips != (guint64) T)
        continue;
      if (!fwd)
        fwd = l;
      else if (!bwd)
        bwd = l;
    }
  if (!fwd)
    return NULL;
  PsPipeliningReport *rep = g_new0 (PsPipeliningReport, 1);
  rep->stages = K;
  rep->microbatches = M;
  rep->iterations = T;
  rep->formula = (double) (K - 1) / (double) T;
  rep->bubble_s = g_new0 (double, K);
  rep->peak_hbm_bytes = (double) r->peak_hbm_bytes;
  GString *where = g_string_new (NULL);
  const PsLoopStat *loops[2] = { fwd, bwd };
  for (int k = 0; k < K; k++)
    {
      g_string_append_printf (where, "  stage %d:", k);
      gboolean any = FALSE;
      for (int L = 0; L < 2 && loops[L]; L++)
        {
          const PsLoopStat *l = loops[L];
          /* backward iteration j undoes forward iteration T - 1 - j */
          double run_start = -1, prev = l->start_s;
          for (int j = 0; j <= T; j++)
            {
              gboolean b = j < T && bubble (k, L == 0 ? j : T - 1 - j, M);
              double end = j < T ? l->iteration_end_s[j] : prev;
              if (b)
                {
                  rep->bubble_s[k] += end - prev;
                  if (run_start < 0)
                    run_start = prev;
                }
              else if (run_start >= 0)
                {
                  g_autofree char *from = ps_format_seconds (run_start);
                  g_autofree char *to = ps_format_seconds (prev);
                  g_string_append_printf (where, "%s %s %s-%s", L == 0 && !any ? "" : ",",
                                          L == 0 ? "fwd" : "bwd", from, to);
                  any = TRUE;
                  run_start = -1;
                }
              prev = end;
            }
        }
      g_string_append_c (where, '\n');
    }
  rep->where = g_string_free (where, FALSE);
  for (int L = 0; L < 2 && loops[L]; L++)
    rep->loops_s += loops[L]->iteration_end_s[T - 1] - loops[L]->start_s;
  double worst = 0;
  for (int k = 0; k < K; k++)
    worst = MAX (worst, rep->bubble_s[k]);
  rep->idle_loops = rep->loops_s > 0 ? worst / rep->loops_s : 0;
  rep->idle_step = r->sim->step_time_s > 0 ? worst / r->sim->step_time_s : 0;
  rep->permutes = permute_hops (r);
  return rep;
}

char *
ps_pipelining_report_text (const PsPipeliningReport *rep)
{
  GString *s = g_string_new (NULL);
  g_autofree char *peak = ps_format_bytes (rep->peak_hbm_bytes);
  g_autofree char *loops = ps_format_seconds (rep->loops_s);
  g_string_append_printf (s, "pipeline     %d stages x %d microbatches: %d iterations a loop; "
                          "bubble (K-1)/(M+K-1) = %.1f %%, simulated %.1f %% of the pipeline "
                          "loops (%s), %.1f %% of the step\n", rep->stages, rep->microbatches,
                          rep->iterations, 100 * rep->formula, 100 * rep->idle_loops, loops,
                          100 * rep->idle_step);
  g_string_append_printf (s, "memory/stage %s per core (every stage runs the same program)\n", peak);
  g_string_append (s, "bubble at    (a stage's iterations on no microbatch, from the step's start)\n");
  g_string_append (s, rep->where);
  for (guint i = 0; i < rep->permutes->len; i++)
    {
      const PsPermuteHops *p = &g_array_index (rep->permutes, PsPermuteHops, i);
      g_string_append_printf (s, "permute      %s: %" G_GUINT64_FORMAT " x a step, %" G_GUINT64_FORMAT
                              " transfers of %d-%d hops (mean %.2f)\n", p->pairs, p->runs,
                              p->n_pairs, p->min_hops, p->max_hops, p->mean_hops);
    }
  return g_string_free (s, FALSE);
}

void
ps_pipelining_report_json (const PsPipeliningReport *rep, JsonBuilder *b)
{
  json_builder_set_member_name (b, "pipeline");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "stages");
  json_builder_add_int_value (b, rep->stages);
  json_builder_set_member_name (b, "microbatches");
  json_builder_add_int_value (b, rep->microbatches);
  json_builder_set_member_name (b, "bubble_formula");
  json_builder_add_double_value (b, rep->formula);
  json_builder_set_member_name (b, "bubble_fraction_of_loops");
  json_builder_add_double_value (b, rep->idle_loops);
  json_builder_set_member_name (b, "bubble_fraction_of_step");
  json_builder_add_double_value (b, rep->idle_step);
  json_builder_set_member_name (b, "pipeline_loops_s");
  json_builder_add_double_value (b, rep->loops_s);
  json_builder_set_member_name (b, "stage_bubble_s");
  json_builder_begin_array (b);
  for (int k = 0; k < rep->stages; k++)
    json_builder_add_double_value (b, rep->bubble_s[k]);
  json_builder_end_array (b);
  json_builder_set_member_name (b, "permutes");
  json_builder_begin_array (b);
  for (guint i = 0; i < rep->permutes->len; i++)
    {
      const PsPermuteHops *p = &g_array_index (rep->permutes, PsPermuteHops, i);
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "pairs");
      json_builder_add_string_value (b, p->pairs);
      json_builder_set_member_name (b, "count");
      json_builder_add_int_value (b, (gint64) p->runs);
      json_builder_set_member_name (b, "transfers");
      json_builder_add_int_value (b, (gint64) p->n_pairs);
      json_builder_set_member_name (b, "min_hops");
      json_builder_add_int_value (b, p->min_hops);
      json_builder_set_member_name (b, "max_hops");
      json_builder_add_int_value (b, p->max_hops);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_end_object (b);
}

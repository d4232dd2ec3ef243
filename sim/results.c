/* Replay results and their printers; see results.h. */
#include "config.h"

#include <json-glib/json-glib.h>
#include <math.h>

#include "common/json_out.h"
#include "sim/results.h"

void
ps_replay_result_free (PsReplayResult *r)
{
  if (!r)
    return;
  g_free (r->program);
  g_free (r->core_of_device);
  g_free (r->compute_s);
  g_free (r->comm_s);
  g_free (r->exposed_s);
  g_free (r->idle_s);
  g_free (r->link_bytes);
  if (r->timeline)
    ps_timeline_free (r->timeline);
  if (r->collectives)
    {
      for (guint i = 0; i < r->collectives->len; i++)
        g_free (g_array_index (r->collectives, PsCollectiveStat, i).name);
      g_array_unref (r->collectives);
    }
  if (r->loops)
    {
      for (guint i = 0; i < r->loops->len; i++)
        {
          PsLoopStat *l = &g_array_index (r->loops, PsLoopStat, i);
          g_free (l->name);
          g_free (l->iteration_end_s);
        }
      g_array_unref (r->loops);
    }
  g_free (r);
}

static int
cmp_total_desc (gconstpointer a, gconstpointer b)
{
  const PsCollectiveStat *x = *(PsCollectiveStat *const *) a, *y = *(PsCollectiveStat *const *) b;
  /* Cache on and off agree to rounding only: treat near-equal times as ties
   * so both modes list the same collectives. */
  if (fabs (x->total_s - y->total_s) > 1e-9 * MAX (fabs (x->total_s), fabs (y->total_s)))
    return x->total_s < y->total_s ? 1 : -1;
  return g_strcmp0 (x->name, y->name);
}

char *
ps_replay_result_top_collectives_text (const PsReplayResult *r, int n)
{
  GString *out = g_string_new (NULL);
  g_autoptr (GPtrArray) top = ps_replay_result_top_collectives (r, n);
  if (top->len == 0)
    return g_string_free (out, FALSE);
  g_string_append_printf (out, "most expensive collectives (total per step, count x per call):\n");
  for (guint i = 0; i < top->len; i++)
    {
      const PsCollectiveStat *cs = top->pdata[i];
      g_autofree char *tot = ps_format_seconds (cs->total_s);
      g_autofree char *each = ps_format_seconds (cs->count ? cs->total_s / (double) cs->count : 0);
      g_autofree char *bytes = ps_format_bytes (cs->bytes);
      g_string_append_printf (out, "  %-10s %4" G_GUINT64_FORMAT " x %-10s %-18s %10s per device, "
                              "%d group%s of %d  (%s)\n", tot, cs->count, each, cs->kind, bytes,
                              cs->n_groups, cs->n_groups == 1 ? "" : "s", cs->group_size, cs->name);
    }
  return g_string_free (out, FALSE);
}

GPtrArray *
ps_replay_result_top_collectives (const PsReplayResult *r, int n)
{
  GPtrArray *all = g_ptr_array_new ();
  if (r->collectives)
    for (guint i = 0; i < r->collectives->len; i++)
      {
        PsCollectiveStat *cs = &g_array_index (r->collectives, PsCollectiveStat, i);
        if (cs->count > 0)
          g_ptr_array_add (all, cs);
      }
  g_ptr_array_sort (all, cmp_total_desc);
  if ((int) all->len > n)
    g_ptr_array_set_size (all, n);
  return all;
}

void
ps_replay_result_means (const PsReplayResult *r, double *compute_s, double *comm_s,
                        double *exposed_s, double *idle_s)
{
  double a = 0, b = 0, c = 0, d = 0;
  for (int i = 0; i < r->n_devices; i++)
    {
      a += r->compute_s[i];
      b += r->comm_s[i];
      c += r->exposed_s[i];
      d += r->idle_s[i];
    }
  int n = r->n_devices > 0 ? r->n_devices : 1;
  *compute_s = a / n;
  *comm_s = b / n;
  *exposed_s = c / n;
  *idle_s = d / n;
}

/* Busiest present ICI link: its id and utilization. */
static int
busiest_link (const PsReplayResult *r, double *util)
{
  const PsPlatform *p = r->platform;
  int best = -1;
  double best_u = 0;
  for (int l = 0; l < p->n_links; l++)
    {
      if (!ps_platform_link_present (p, l) || r->link_bytes[l] <= 0)
        continue;
      double u = r->step_time_s > 0
                   ? r->link_bytes[l] / (ps_platform_link_bw (p, l) * r->step_time_s) : 0;
      if (best < 0 || u > best_u)
        {
          best = l;
          best_u = u;
        }
    }
  *util = best_u;
  return best;
}

static double
total_ici_bytes (const PsReplayResult *r)
{
  double t = 0;
  for (int l = 0; l < r->platform->n_links; l++)
    if (g_strcmp0 (ps_platform_link_kind (r->platform, l), "ici") == 0)
      t += r->link_bytes[l];
  return t;
}

void
ps_replay_json_slice (JsonBuilder *b, const PsSlice *s)
{
  ps_json_str (b, "slice", s->name);
  ps_json_int (b, "chips_x", s->chips_x);
  ps_json_int (b, "chips_y", s->chips_y);
  ps_json_bool (b, "wrap_x", s->wrap_x);
  ps_json_bool (b, "wrap_y", s->wrap_y);
}

char *
ps_replay_result_to_json (const PsReplayResult *r)
{
  const PsSlice *s = &r->platform->slice;
  double mc, mm, me, mi;
  ps_replay_result_means (r, &mc, &mm, &me, &mi);
  double util;
  int busiest = busiest_link (r, &util);
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
#define INT(key, v) (json_builder_set_member_name (b, key), json_builder_add_int_value (b, v))
#define DBL(key, v) (json_builder_set_member_name (b, key), json_builder_add_double_value (b, v))
#define STR(key, v) (json_builder_set_member_name (b, key), json_builder_add_string_value (b, v))
#define BOOL(key, v) (json_builder_set_member_name (b, key), json_builder_add_boolean_value (b, v))
  ps_json_str (b, "program", r->program);
  ps_replay_json_slice (b, s);
  ps_json_int (b, "devices", r->n_devices);
  ps_json_bool (b, "cache", r->cache);
  ps_json_dbl (b, "step_time_s", r->step_time_s);
  ps_json_dbl (b, "compute_s", mc);
  ps_json_dbl (b, "communication_s", mm);
  ps_json_dbl (b, "exposed_communication_s", me);
  ps_json_dbl (b, "idle_s", mi);
  ps_json_dbl (b, "flops_per_device", r->flops_per_device);
  ps_json_dbl (b, "peak_flops_per_core", r->peak_flops_per_core);
  ps_json_dbl (b, "mxu_utilization", r->mxu_utilization);
  ps_json_dbl (b, "peak_hbm_bytes", r->peak_hbm_bytes);
  ps_json_dbl (b, "hbm_capacity_bytes", r->hbm_capacity_bytes);
  ps_json_int (b, "compute_events", (gint64) r->n_compute_events);
  ps_json_int (b, "compute_executions", (gint64) r->n_compute_segments);
  ps_json_int (b, "collectives", (gint64) r->n_collectives);
  ps_json_int (b, "distinct_collectives", (gint64) r->n_unique_collectives);
  ps_json_int (b, "overlapping_collectives", (gint64) r->n_overlapping_collectives);
  ps_json_int (b, "replay_passes", r->contention_passes);
  ps_json_int (b, "loop_iterations", (gint64) r->n_loop_iterations);
  ps_json_int (b, "iterations_simulated", (gint64) r->n_iterations_simulated);
  ps_json_dbl (b, "ici_bytes", total_ici_bytes (r));
  if (busiest >= 0)
    {
      g_autofree char *name = ps_platform_link_name (r->platform, busiest);
      ps_json_str (b, "busiest_link", name);
      ps_json_dbl (b, "busiest_link_utilization", util);
    }
  json_builder_set_member_name (b, "per_device");
  json_builder_begin_array (b);
  for (int d = 0; d < r->n_devices; d++)
    {
      json_builder_begin_object (b);
      ps_json_int (b, "device", d);
      ps_json_int (b, "core", r->core_of_device[d]);
      ps_json_dbl (b, "compute_s", r->compute_s[d]);
      ps_json_dbl (b, "communication_s", r->comm_s[d]);
      ps_json_dbl (b, "exposed_communication_s", r->exposed_s[d]);
      ps_json_dbl (b, "idle_s", r->idle_s[d]);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  /* Distinct collectives, most expensive first. */
  json_builder_set_member_name (b, "collectives");
  json_builder_begin_array (b);
  g_autoptr (GPtrArray) top = ps_replay_result_top_collectives (r, G_MAXINT);
  for (guint i = 0; i < top->len; i++)
    {
      const PsCollectiveStat *cs = top->pdata[i];
      json_builder_begin_object (b);
      ps_json_str (b, "name", cs->name);
      ps_json_str (b, "kind", cs->kind);
      ps_json_dbl (b, "bytes", cs->bytes);
      ps_json_int (b, "groups", cs->n_groups);
      ps_json_int (b, "group_size", cs->group_size);
      ps_json_int (b, "count", (gint64) cs->count);
      ps_json_dbl (b, "total_s", cs->total_s);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  return ps_json_finish (b, FALSE);
}

char *
ps_replay_result_to_text (const PsReplayResult *r)
{
  const PsSlice *s = &r->platform->slice;
  double mc, mm, me, mi;
  ps_replay_result_means (r, &mc, &mm, &me, &mi);
  GString *out = g_string_new (NULL);
  g_autofree char *step = ps_format_seconds (r->step_time_s);
  g_autofree char *c = ps_format_seconds (mc), *m = ps_format_seconds (mm);
  g_autofree char *e = ps_format_seconds (me), *i = ps_format_seconds (mi);
  g_autofree char *peak = ps_format_bytes (r->peak_hbm_bytes);
  g_autofree char *cap = ps_format_bytes (r->hbm_capacity_bytes);
  g_autofree char *ici = ps_format_bytes (total_ici_bytes (r));
  g_string_append_printf (out, "program %s on %s (%dx%d chips, wrap %s%s%s), %d devices%s\n",
                          r->program, s->name, s->chips_x, s->chips_y, s->wrap_x ? "x" : "",
                          s->wrap_y ? "y" : "", s->wrap_x || s->wrap_y ? "" : "none",
                          r->n_devices, r->cache ? "" : ", no collective cache");
  g_string_append_printf (out, "step time:               %s\n", step);
  g_string_append_printf (out, "per core (mean):         compute %s, communication %s, exposed "
                          "communication %s, idle %s\n", c, m, e, i);
  g_string_append_printf (out, "MXU utilization:         %.1f %%\n", 100 * r->mxu_utilization);
  g_string_append_printf (out, "peak HBM per core:       %s of %s (%.1f %%)\n", peak, cap,
                          r->hbm_capacity_bytes > 0
                            ? 100 * r->peak_hbm_bytes / r->hbm_capacity_bytes : 0);
  g_string_append_printf (out, "events:                  %" G_GUINT64_FORMAT " compute in %"
                          G_GUINT64_FORMAT " executions, %" G_GUINT64_FORMAT
                          " collectives (%" G_GUINT64_FORMAT " distinct)\n",
                          r->n_compute_events, r->n_compute_segments, r->n_collectives,
                          r->n_unique_collectives);
  if (r->n_overlapping_collectives > 0)
    g_string_append_printf (out, "overlapping collectives: %" G_GUINT64_FORMAT
                            " sharing links while in flight (replayed in %d passes)\n",
                            r->n_overlapping_collectives, r->contention_passes);
  if (r->n_loop_iterations > 0)
    g_string_append_printf (out, "loops:                   %" G_GUINT64_FORMAT " iterations, %"
                            G_GUINT64_FORMAT " simulated (the others repeat one exactly)\n",
                            r->n_loop_iterations, r->n_iterations_simulated);
  double util;
  int busiest = busiest_link (r, &util);
  if (busiest >= 0)
    {
      g_autofree char *name = ps_platform_link_name (r->platform, busiest);
      g_string_append_printf (out, "ICI traffic:             %s; busiest link %s at %.1f %%\n",
                              ici, name, 100 * util);
    }
  else
    g_string_append_printf (out, "ICI traffic:             none\n");
  g_autofree char *top = ps_replay_result_top_collectives_text (r, 5);
  g_string_append (out, top);
  return g_string_free (out, FALSE);
}

char *
ps_replay_result_links_csv (const PsReplayResult *r, gsize *len_out)
{
  const PsPlatform *p = r->platform;
  GString *out = g_string_new ("link,kind,src_x,src_y,dst_x,dst_y,bytes,busy_s,utilization\n");
  for (int l = 0; l < p->n_links; l++)
    {
      if (!ps_platform_link_present (p, l))
        continue;
      int sc, dc;
      ps_platform_link_chips (p, l, &sc, &dc);
      g_autofree char *name = ps_platform_link_name (p, l);
      double busy = r->link_bytes[l] / ps_platform_link_bw (p, l);
      double util = r->step_time_s > 0 ? busy / r->step_time_s : 0;
      g_string_append_printf (out, "%s,%s,%d,%d,%d,%d,%.0f,%.9g,%.6f\n", name,
                              ps_platform_link_kind (p, l), sc / p->slice.chips_y,
                              sc % p->slice.chips_y, dc / p->slice.chips_y, dc % p->slice.chips_y,
                              r->link_bytes[l], busy, util);
    }
  if (len_out)
    *len_out = out->len;
  return g_string_free (out, FALSE);
}

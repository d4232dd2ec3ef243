/* The HTML report of a run: see report.h. */
#include "config.h"

#include "cli/report.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <string.h>

#include "cli/picture.h"
#include "common/error.h"
#include "common/output.h"

char *
ps_report_inline_svg (const char *svg, const char *prefix)
{
  const char *start = strstr (svg, "<svg");
  if (!start)
    return g_strdup ("");
  GString *out = g_string_new (NULL);
  for (const char *p = start; *p;)
    {
      /* id="x" -> id="PREFIX-x"; href="#x" and url(#x) likewise. */
      if (g_str_has_prefix (p, "id=\""))
        {
          g_string_append_printf (out, "id=\"%s-", prefix);
          p += 4;
        }
      else if (g_str_has_prefix (p, "href=\"#"))
        {
          g_string_append_printf (out, "href=\"#%s-", prefix);
          p += 7;
        }
      else if (g_str_has_prefix (p, "url(#"))
        {
          g_string_append_printf (out, "url(#%s-", prefix);
          p += 5;
        }
      else if (p == start)
        {
          /* Points as pixels, so the picture keeps its rendered size; a
           * wide picture shrinks to the page (style below). */
          const char *end = strchr (p, '>');
          g_autofree char *head = g_strndup (p, end ? (gsize) (end - p) : strlen (p));
          GRegex *re = g_regex_new ("(width|height)=\"([0-9.]+)pt\"", 0, 0, NULL);
          g_autofree char *fixed = g_regex_replace (re, head, -1, 0, "\\1=\"\\2\"", 0, NULL);
          g_regex_unref (re);
          g_string_append (out, fixed);
          g_string_append_printf (out, " class=\"%s\" style=\"max-width:100%%;height:auto\"", prefix);
          p += strlen (head);
        }
      else
        g_string_append_c (out, *p++);
    }
  return g_string_free (out, FALSE);
}

static void
esc (GString *out, const char *s)
{
  g_autofree char *e = g_markup_escape_text (s ? s : "", -1);
  g_string_append (out, e);
}

static void
row (GString *out, const char *key, const char *value)
{
  g_string_append (out, "<tr><th>");
  esc (out, key);
  g_string_append (out, "</th><td>");
  esc (out, value);
  g_string_append (out, "</td></tr>\n");
}

static const char *style =
  "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}"
  "h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}"
  "table{border-collapse:collapse}th,td{padding:3px 10px;text-align:left;border-bottom:1px solid #eee}"
  "td.n{text-align:right;font-variant-numeric:tabular-nums}"
  "pre{background:#f6f6f6;padding:10px;overflow-x:auto;font-size:0.85em}"
  /* A large slice's link map is as tall as it is wide: it keeps its shape
   * and fits the window's height, not only the page's width. */
  "svg.links{max-height:85vh;width:auto}"
  /* The memory breakdown's long lines (instruction names, shapes) wrap
   * instead of making the block scroll sideways. */
  "pre.memory{white-space:pre-wrap;overflow-wrap:anywhere;overflow-x:visible}"
  ".note{color:#666;font-size:0.9em}";

/* The simulated step: its figures, breakdown, collectives and links. */
static void
append_step (GString *h, const PsReportInput *in, const PsBreakdownRow *bp, double comm, const char *svg_bars,
             const char *svg_links)
{
  const PsDriverResult *r = in->result;
  const PsReplayResult *s = r->sim;
  const PsModelFamily *f = ps_params_family (in->params);
  PsBreakdownRow b = *bp;
  g_string_append (h, "<h2>The step</h2>\n<table>\n");
  g_autofree char *step = ps_format_seconds (s->step_time_s);
  row (h, "step time", step);
  g_autofree char *tput = g_strdup_printf ("%.0f %s/s", r->items_per_s, f->item_unit);
  row (h, "throughput", tput);
  if (in->published > 0)
    {
      g_autofree char *pub = g_strdup_printf ("%.0f %s/s (simulated/published %.2f)", in->published, f->item_unit,
                                              r->items_per_s / in->published);
      row (h, "published", pub);
    }
  g_autofree char *mxu = g_strdup_printf ("%.1f %%", 100 * s->mxu_utilization);
  row (h, "MXU utilization", mxu);
  if (r->info.model_flops > 0)
    {
      g_autofree char *mfu = g_strdup_printf ("%.1f %%", 100 * r->model_flops_utilization);
      row (h, "model FLOPs utilization", mfu);
    }
  g_autofree char *peak = ps_format_bytes ((double) r->peak_hbm_bytes);
  g_autofree char *cap = ps_format_bytes ((double) in->hw->hbm_bytes_per_core);
  g_autofree char *hbm = g_strdup_printf ("%s per core of %s", peak, cap);
  row (h, "peak HBM", hbm);
  g_autofree char *c1 = ps_format_seconds (b.compute_s), *c2 = ps_format_seconds (comm);
  g_autofree char *c3 = ps_format_seconds (b.exposed_s), *c4 = ps_format_seconds (b.idle_s);
  g_autofree char *per = g_strdup_printf ("compute %s, communication %s (exposed %s), idle %s", c1, c2, c3, c4);
  row (h, "time per core", per);
  if (b.exposed_s > comm * (1 + 1e-9))
    row (h, "", "exposed > communication: exposed also counts waiting at a collective for slower cores, "
                "which communication, timed from the last core's arrival, does not");
  /* The MoE and pipeline figures the terminal prints (cli/cmd_run.c). */
  if (r->n_alltoall > 0)
    {
      g_autofree char *t = ps_format_seconds (r->alltoall_s);
      g_autofree char *a2a = g_strdup_printf ("%s, %.1f %% of the step (%" G_GUINT64_FORMAT " in the step)", t,
                                              100 * r->alltoall_s / s->step_time_s, r->n_alltoall);
      row (h, "all-to-all", a2a);
    }
  for (int g = 0; g < r->n_op_groups; g++)
    {
      g_autofree char *t = ps_format_seconds (r->op_group_s[g]);
      g_autofree char *key = g_strdup_printf ("by op_name: %s", f->op_groups[g].label);
      g_autofree char *v = g_strdup_printf ("%s (%.1f %% of the step)", t, 100 * r->op_group_s[g] / s->step_time_s);
      row (h, key, v);
    }
  if (r->info.params > 0)
    {
      g_autofree char *pa = g_strdup_printf ("%.3g", r->info.params);
      row (h, "parameters", pa);
    }
  g_autofree char *ann = g_strdup_printf ("%d", r->info.n_annotations);
  row (h, "annotated tensors", ann);
  g_autofree char *tr = g_strdup_printf ("%" G_GUINT64_FORMAT " compute events, %" G_GUINT64_FORMAT
                                         " collectives (%" G_GUINT64_FORMAT " distinct)", s->n_compute_events,
                                         s->n_collectives, s->n_unique_collectives);
  row (h, "trace", tr);
  g_string_append (h, "</table>\n");
  if (in->pipelining)
    {
      g_string_append (h, "<h2>Pipeline</h2>\n<pre>");
      esc (h, in->pipelining);
      g_string_append (h, "</pre>\n");
    }
  g_string_append_printf (h, "<p>%s</p>\n", svg_bars);

  g_string_append (h, "<h2>Most expensive collectives</h2>\n<table>\n<tr><th>collective</th><th>kind</th>"
                      "<th>bytes per device</th><th>groups &times; size</th><th>count</th><th>total per step</th></tr>\n");
  g_autoptr (GPtrArray) top = ps_replay_result_top_collectives (s, 10);
  for (guint i = 0; i < top->len; i++)
    {
      const PsCollectiveStat *cs = top->pdata[i];
      g_autofree char *by = ps_format_bytes (cs->bytes);
      g_autofree char *tt = ps_format_seconds (cs->total_s);
      g_string_append (h, "<tr><td>");
      esc (h, cs->name);
      g_string_append (h, "</td><td>");
      esc (h, cs->kind);
      g_string_append_printf (h, "</td><td class=\"n\">%s</td><td class=\"n\">%d &times; %d</td>"
                              "<td class=\"n\">%" G_GUINT64_FORMAT "</td><td class=\"n\">%s</td></tr>\n",
                              by, cs->n_groups, cs->group_size, cs->count, tt);
    }
  g_string_append (h, "</table>\n");

  g_string_append (h, "<h2>ICI links</h2>\n<p class=\"note\">Each arrow is one direction of a link, colored by "
                      "the share of the step it was busy; gray arrows carried nothing.</p>\n");
  g_string_append_printf (h, "<p>%s</p>\n", svg_links);

}

gboolean
ps_report_write (const char *dir, const PsReportInput *in, GError **error)
{
  const PsDriverResult *r = in->result;
  const PsReplayResult *s = r->sim;
  g_return_val_if_fail (in->no_fit != NULL || (s != NULL && s->timeline != NULL), FALSE);
  const PsModelFamily *f = ps_params_family (in->params);
  const char *slice = ps_params_str (in->params, "slice");

  /* Pictures first: what can fail runs before anything is written. */
  g_autoptr (GString) links = g_string_new (NULL), bars = g_string_new (NULL);
  g_autofree char *t1 = g_strdup_printf ("%s on %s: ICI link utilization over one step", in->name, slice);
  PsBreakdownRow b = { in->name, 0, 0, 0, 0 };
  double comm = 0;
  g_autofree char *t2 = g_strdup_printf ("%s: where the step goes (per core)", in->name);
  if (s)
    {
      ps_replay_result_means (s, &b.compute_s, &comm, &b.exposed_s, &b.idle_s);
      b.published_step_s = in->published > 0 ? r->info.items_per_step / in->published : 0;
      if (!ps_picture_links (r->platform, s->link_bytes, s->step_time_s, t1, PS_PICTURE_SVG, links, error)
          || !ps_picture_breakdown (&b, 1, t2, PS_PICTURE_SVG, bars, error))
        return FALSE;
    }
  g_autofree char *svg_links = ps_report_inline_svg (links->str, "links");
  g_autofree char *svg_bars = ps_report_inline_svg (bars->str, "bars");

  GString *h = g_string_new ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>");
  esc (h, in->name);
  g_string_append_printf (h, " - podsim</title>\n<style>%s</style></head>\n<body>\n<h1>", style);
  esc (h, in->name);
  g_string_append (h, "</h1>\n<p class=\"note\">");
  esc (h, f->summary);
  g_string_append (h, "; simulated by podsim " PACKAGE_VERSION " on ");
  esc (h, slice);
  g_string_append (h, ".</p>\n");
  if (in->command)
    {
      g_string_append (h, "<pre>");
      esc (h, in->command);
      g_string_append (h, "</pre>\n");
    }

  if (!s)
    {
      /* Nothing ran past the memory check: the page is what it found. */
      g_autofree char *peak = ps_format_bytes ((double) r->peak_hbm_bytes);
      g_autofree char *cap = ps_format_bytes ((double) in->hw->hbm_bytes_per_core);
      g_string_append (h, "<h2>Does not fit</h2>\n<table>\n");
      g_autofree char *hbm = g_strdup_printf ("%s per core of %s", peak, cap);
      row (h, "peak HBM", hbm);
      g_string_append (h, "</table>\n<p>");
      esc (h, in->no_fit);
      g_string_append (h, "</p>\n");
    }
  else
    append_step (h, in, &b, comm, svg_bars, svg_links);

  if (r->memory_text)
    {
      g_string_append (h, "<h2>Memory</h2>\n<pre class=\"memory\">");
      esc (h, r->memory_text);
      g_string_append (h, "</pre>\n");
    }

  g_string_append (h, "<h2>Stages</h2>\n<table>\n");
  for (int i = 0; i < PS_STAGE_COUNT; i++)
    {
      g_autofree char *v = g_strdup_printf ("%.2f s", r->stage_s[i]);
      row (h, ps_stage_name (i), v);
    }
  g_string_append (h, "</table>\n");

  g_autofree char *config = ps_params_print (in->params, in->name);
  g_string_append (h, "<h2>Configuration</h2>\n<p><a href=\"config.ini\">config.ini</a>: "
                      "<code>podsim run --config config.ini</code> runs it again.</p>\n<pre>");
  esc (h, config);
  g_string_append (h, "</pre>\n");
  if (s)
    g_string_append (h, "<h2>Timeline</h2>\n<p><a href=\"timeline.json\">timeline.json</a>: the first "
                        "two cores' compute and collectives (Chrome trace-event format); open it in "
                        "<code>https://ui.perfetto.dev</code> or <code>chrome://tracing</code>.</p>\n");
  g_string_append (h, "</body></html>\n");

  /* Staged beside DIR: the report appears complete or not at all. */
  g_autoptr (PsOutputDir) out = ps_output_dir_begin (dir, error);
  if (!out)
    {
      g_string_free (h, TRUE);
      g_prefix_error (error, "--report: ");
      return FALSE;
    }
  g_autofree char *index = ps_output_dir_file (out, "index.html");
  g_autofree char *cfg = ps_output_dir_file (out, "config.ini");
  g_autofree char *tl = ps_output_dir_file (out, "timeline.json");
  gboolean ok = (!s || ps_timeline_write (s->timeline, tl, error))
                && ps_write_file_atomic (cfg, config, strlen (config), error)
                && ps_write_file_atomic (index, h->str, h->len, error)
                && ps_output_dir_commit (out, error);
  g_string_free (h, TRUE);
  if (!ok && error && *error)
    {
      /* Name the report, not its staging directory. */
      ps_output_dir_name_error (out, *error);
      g_prefix_error (error, "--report: ");
    }
  return ok;
}

/* podsim tables: regenerate the GSPMD paper's tables from the published model
 * configs, simulated, next to the published figures. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/target_options.h"
#include "cli/picture.h"
#include "cli/tables.h"
#include <json-glib/json-glib.h>

#include "common/error.h"
#include "models/family.h"
#include "partitioner/analysis/schedule.h"
#include "sim/collectives.h"
#include "topology/hardware.h"

typedef struct {
  double step_time_s, tokens_per_s, mxu_utilization, peak_hbm_bytes;
  double compute_s, exposed_s, idle_s, items_per_step;
  double alltoall_share, gating_share, dispatch_combine_share;   /* moe */
} Row;

/* A row's figures and the members of the run's JSON they come from. */
static const PsStudyJsonField row_members[] = {
  PS_STUDY_JSON_FIELD ("step_time_s", Row, step_time_s),
  PS_STUDY_JSON_FIELD ("throughput_per_s", Row, tokens_per_s),
  PS_STUDY_JSON_FIELD ("mxu_utilization", Row, mxu_utilization),
  PS_STUDY_JSON_FIELD ("peak_hbm_bytes", Row, peak_hbm_bytes),
  PS_STUDY_JSON_FIELD ("compute_s", Row, compute_s),
  PS_STUDY_JSON_FIELD ("exposed_communication_s", Row, exposed_s),
  PS_STUDY_JSON_FIELD ("idle_s", Row, idle_s),
  PS_STUDY_JSON_FIELD ("alltoall_share", Row, alltoall_share),
  PS_STUDY_JSON_FIELD ("gating_share", Row, gating_share),
  PS_STUDY_JSON_FIELD ("dispatch_combine_share", Row, dispatch_combine_share),
};

static gboolean
run_row (const char *preset, const PsTablesOptions *ro, Row *row, GError **error)
{
  const char *args[] = { "--preset", preset, NULL };
  g_autoptr (JsonParser) parser = ps_tables_run (args, ro, error);
  if (!parser)
    return FALSE;
  ps_study_json_read (json_node_get_object (json_parser_get_root (parser)), row_members,
                      G_N_ELEMENTS (row_members), row);
  return TRUE;
}

/* The devices of a preset's mesh (0 for a family without a `mesh` key). */
static int64_t
preset_cores (const PsParams *p)
{
  const PsParamSpec *m = ps_model_family_find_spec (ps_params_family (p), "mesh");
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  /* an unset mesh (moe's 1-D layout): every core, as without the key */
  return m && m->type == PS_PARAM_MESH && ps_params_mesh (p, "mesh", dims) > 0 ? ps_params_mesh_size (p, "mesh") : 0;
}

/* The devices of a preset: its mesh's, or its slice's for a family whose
 * mesh is every core (moe); 0 when unknown. */
static int64_t
preset_devices (const PsParams *p)
{
  int64_t n = preset_cores (p);
  if (n > 0)
    return n;
  int cores = 0;
  if (sscanf (ps_params_str (p, "slice"), "v3-%d", &cores) == 1 && cores > 0)
    return cores;
  return 0;
}

/* A Transformer's layers: `layers`, or an encoder-decoder's both stacks
 * (GShard's L counts both, doc/models.md). */
static int64_t
preset_layers (const PsParams *p)
{
  if (ps_model_family_find_spec (ps_params_family (p), "layers"))
    return ps_params_int (p, "layers");
  return ps_params_int (p, "enc_layers") + ps_params_int (p, "dec_layers");
}

/* Smaller runs first: by the mesh's device count, then by name. */
static int
cmp_rows (gconstpointer a, gconstpointer b)
{
  const char *x = *(const char *const *) a, *y = *(const char *const *) b;
  g_autoptr (PsParams) p = ps_model_preset_load (x, NULL);
  g_autoptr (PsParams) q = ps_model_preset_load (y, NULL);
  int64_t cx = preset_devices (p), cy = preset_devices (q);
  if (cx != cy)
    return cx < cy ? -1 : 1;
  return strcmp (x, y);
}

/* The presets of published runs that belong to `table`, smaller runs
 * first. transfer container. */
static GPtrArray *
table_presets (const char *table)
{
  GPtrArray *names = g_ptr_array_new ();
  for (const PsModelPreset *pr = ps_model_presets (); pr->name; pr++)
    {
      g_autoptr (PsParams) p = ps_model_preset_load (pr->name, NULL);
      const char *t = NULL;
      ps_params_published (p, &t, NULL);
      if (g_strcmp0 (t, table) == 0)
        g_ptr_array_add (names, (gpointer) pr->name);
    }
  g_ptr_array_sort (names, cmp_rows);
  return names;
}

/* The table names of every published preset, comma-separated. transfer full. */
static char *
known_tables (void)
{
  GString *out = g_string_new (NULL);
  for (const PsModelPreset *pr = ps_model_presets (); pr->name; pr++)
    {
      g_autoptr (PsParams) p = ps_model_preset_load (pr->name, NULL);
      const char *t = NULL;
      ps_params_published (p, &t, NULL);
      if (t)
        {
          g_autofree char *needle = g_strdup_printf (", %s,", t);
          g_autofree char *hay = g_strdup_printf (", %s,", out->str);
          if (!strstr (hay, needle))
            g_string_append_printf (out, "%s%s", out->len ? ", " : "", t);
        }
    }
  return g_string_free (out, FALSE);
}

/* The moe table's row: GShard's published runs (throughput) and the GSPMD
 * paper's series (step times of unknown configurations, compared as a
 * trend against the series' smallest run). */
typedef struct {
  const char *name;
  int64_t experts, layers, cores;
  Row row;
  double published_steps_per_s;   /* 0: none */
  double ratio;                   /* simulated / published throughput; 0: none */
  const char *series;             /* NULL: none */
  double published_step_s;        /* a series' published step time; 0: none */
  double step_vs_base, published_vs_base;  /* 0: none */
} MoeRow;

/* A number, or "" (CSV) / "-" (text, Markdown) when there is none. */
static char *
moe_field (double v, const char *fmt, gboolean csv)
{
  if (v <= 0)
    return g_strdup (csv ? "" : "-");
  char buf[64];
  g_snprintf (buf, sizeof buf, fmt, v);
  return g_strdup (buf);
}

static void
moe_trend (MoeRow *rows, int n)
{
  for (int i = 0; i < n; i++)
    {
      if (!rows[i].series)
        continue;
      const MoeRow *base = NULL;
      for (int j = 0; j < n && !base; j++)
        if (g_strcmp0 (rows[j].series, rows[i].series) == 0)
          base = &rows[j];            /* rows are sorted: the smallest first */
      rows[i].step_vs_base = rows[i].row.step_time_s / base->row.step_time_s;
      if (rows[i].published_step_s > 0 && base->published_step_s > 0)
        rows[i].published_vs_base = rows[i].published_step_s / base->published_step_s;
    }
}

static void
print_moe_table (const MoeRow *rows, int n, gboolean csv, gboolean markdown)
{
  if (csv)
    puts ("name,experts,layers,cores,step_time_s,steps_per_s,tokens_per_s,alltoall_share,gating_share,"
          "dispatch_combine_share,mxu_utilization,peak_hbm_gib,published_steps_per_s,ratio,series,"
          "step_vs_series_base,published_step_vs_series_base");
  else if (markdown)
    {
      puts ("| name | experts | layers | cores | step time (s) | steps/s | tokens/s | AllToAll | gating | "
            "dispatch/combine | MXU util | peak HBM/core | published steps/s | simulated/published | "
            "step vs series base | published step vs series base |");
      puts ("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    }
  else
    printf ("%-14s %7s %6s %5s %8s %7s %10s %8s %7s %9s %8s %10s %9s %6s %7s %7s\n", "name", "experts", "layers",
            "cores", "step (s)", "steps/s", "tokens/s", "AllToAll", "gating", "disp/comb", "MXU util", "peak HBM",
            "published", "ratio", "vs base", "pub vs");
  for (int i = 0; i < n; i++)
    {
      const MoeRow *m = &rows[i];
      const Row *r = &m->row;
      double gib = r->peak_hbm_bytes / (1024.0 * 1024.0 * 1024.0);
      g_autofree char *pub = moe_field (m->published_steps_per_s, csv ? "%.4f" : "%.2f", csv);
      g_autofree char *ratio = moe_field (m->ratio, csv ? "%.4f" : "%.2f", csv);
      g_autofree char *vs = moe_field (m->step_vs_base, csv ? "%.4f" : "%.2f", csv);
      g_autofree char *pvs = moe_field (m->published_vs_base, csv ? "%.4f" : "%.2f", csv);
      if (csv)
        printf ("%s,%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT ",%.6f,%.4f,%.1f,%.4f,%.4f,%.4f,"
                "%.4f,%.3f,%s,%s,%s,%s,%s\n", m->name, m->experts, m->layers, m->cores, r->step_time_s,
                1 / r->step_time_s, r->tokens_per_s, r->alltoall_share, r->gating_share, r->dispatch_combine_share,
                r->mxu_utilization, gib, pub, ratio, m->series ? m->series : "", vs, pvs);
      else if (markdown)
        printf ("| %s | %" G_GINT64_FORMAT " | %" G_GINT64_FORMAT " | %" G_GINT64_FORMAT " | %.3f | %.2f | %.0f | "
                "%.1f %% | %.1f %% | %.1f %% | %.1f %% | %.2f GiB | %s | %s | %s | %s |\n", m->name, m->experts,
                m->layers, m->cores, r->step_time_s, 1 / r->step_time_s, r->tokens_per_s, 100 * r->alltoall_share,
                100 * r->gating_share, 100 * r->dispatch_combine_share, 100 * r->mxu_utilization, gib, pub, ratio,
                vs, pvs);
      else
        printf ("%-14s %7" G_GINT64_FORMAT " %6" G_GINT64_FORMAT " %5" G_GINT64_FORMAT " %8.3f %7.2f %10.0f %7.1f%% "
                "%6.1f%% %8.1f%% %7.1f%% %6.2f GiB %9s %6s %7s %7s\n", m->name, m->experts, m->layers, m->cores,
                r->step_time_s, 1 / r->step_time_s, r->tokens_per_s, 100 * r->alltoall_share,
                100 * r->gating_share, 100 * r->dispatch_combine_share, 100 * r->mxu_utilization, gib, pub, ratio,
                vs, pvs);
    }
}

static int
print_table (GPtrArray *names, gboolean csv, gboolean markdown, const PsTablesOptions *ro, const char *only,
             const char *table, const char *plot_path, const char *scaling_path)
{
  GError *error = NULL;
  PsPictureFormat plot_f = PS_PICTURE_PNG, scaling_f = PS_PICTURE_PNG;
  if ((plot_path && !ps_picture_format_for (plot_path, "--plot", &plot_f, &error))
      || (scaling_path && !ps_picture_format_for (scaling_path, "--scaling", &scaling_f, &error)))
    return ps_cli_fail (error);
  g_autoptr (GArray) bars = g_array_new (FALSE, TRUE, sizeof (PsBreakdownRow));
  g_autoptr (GArray) points = g_array_new (FALSE, TRUE, sizeof (PsScalingPoint));
  const char *unit = "items";
  g_autoptr (PsHardware) hw = ps_hardware_load_or_default (ro->hw, &error);
  if (!hw)
    return ps_cli_fail (error);
  /* Simulate every row before printing, so a failure leaves no half table. */
  GPtrArray *rows = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GArray) moe_rows = g_array_new (FALSE, TRUE, sizeof (MoeRow));
  gboolean moe = FALSE;
  for (guint i = 0; i < names->len; i++)
    {
      const char *name = names->pdata[i];
      if (only && g_ascii_strcasecmp (only, name) != 0)
        continue;
      g_autoptr (PsParams) p = ps_model_preset_load (name, &error);
      if (!p)
        return g_ptr_array_free (rows, TRUE), ps_cli_fail (error);
      double published = ps_params_published (p, NULL, NULL);
      unit = ps_params_family (p)->item_unit;
      /* The moe table holds the decoder-only LMs (moe family) and GShard's
       * encoder-decoders (encdec). */
      moe = g_strcmp0 (table, "moe") == 0;
      int64_t cores = preset_devices (p);
      g_autofree char *mesh = preset_cores (p) ? ps_params_text (p, "mesh") : g_strdup ("");
      ps_progress (ro->progress, NULL);
      ps_progress (ro->progress, "podsim tables: %s ...", name);
      /* SimGrid allows one engine per process: each row runs in a child
       * `podsim run --json`, which is also exactly what a user can rerun. */
      Row row = { 0 };
      if (!run_row (name, ro, &row, &error))
        {
          ps_progress (ro->progress, NULL);
          g_prefix_error (&error, "%s: ", name);
          g_ptr_array_free (rows, TRUE);
          return ps_cli_fail (error);
        }
      double ratio = row.tokens_per_s / published;
      /* The names live as long as the compiled-in preset table. */
      PsBreakdownRow bar = { name, row.compute_s, row.exposed_s, row.idle_s,
                             row.tokens_per_s > 0 && published > 0 ? row.step_time_s * row.tokens_per_s / published
                                                                   : 0 };
      g_array_append_val (bars, bar);
      PsScalingPoint pt = { name, (double) cores, row.tokens_per_s, published, row.mxu_utilization };
      g_array_append_val (points, pt);
      if (moe)
        {
          MoeRow m = { name, ps_params_int (p, "experts"), preset_layers (p), preset_devices (p), row,
                       0, 0, NULL, 0, 0, 0 };
          double items = row.step_time_s * row.tokens_per_s;
          m.published_step_s = ps_params_published_step (p, &m.series);
          /* p is freed with this iteration: keep the series' name. */
          m.series = m.series ? g_intern_string (m.series) : NULL;
          if (published > 0 && items > 0)
            {
              m.published_steps_per_s = published / items;
              m.ratio = ratio;
            }
          else if (m.published_step_s > 0)
            m.published_steps_per_s = 1 / m.published_step_s;
          g_array_append_val (moe_rows, m);
          continue;
        }
      double gib = row.peak_hbm_bytes / (1024.0 * 1024.0 * 1024.0);
      char *line;
      if (csv)
        line = g_strdup_printf ("%s,%" G_GINT64_FORMAT ",%s,%.6f,%.1f,%.4f,%.3f,%.0f,%.4f",
                                name, cores, mesh, row.step_time_s, row.tokens_per_s,
                                row.mxu_utilization, gib, published, ratio);
      else if (markdown)
        line = g_strdup_printf ("| %s | %" G_GINT64_FORMAT " | %s | %.3f | %.0f | %.1f %% | %.2f GiB | %.0f | %.2f |",
                                name, cores, mesh, row.step_time_s, row.tokens_per_s,
                                100 * row.mxu_utilization, gib, published, ratio);
      else
        line = g_strdup_printf ("%-18s %6" G_GINT64_FORMAT " %7s %10.3f %12.0f %8.1f%% %9.2f GiB %12.0f %8.2f",
                                name, cores, mesh, row.step_time_s, row.tokens_per_s,
                                100 * row.mxu_utilization, gib, published, ratio);
      g_ptr_array_add (rows, line);
    }
  ps_progress (ro->progress, NULL);
  if (rows->len == 0 && moe_rows->len == 0)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--only: unknown preset '%s'", only);
      g_ptr_array_free (rows, TRUE);
      return ps_cli_fail (error);
    }
  g_autoptr (GString) plot = g_string_new (NULL), scaling = g_string_new (NULL);
  g_autofree char *title1 = g_strdup_printf ("podsim tables %s: where each step goes, simulated vs published", table);
  g_autofree char *title2 = g_strdup_printf ("podsim tables %s: scaling", table);
  if ((plot_path && !ps_picture_breakdown ((PsBreakdownRow *) bars->data, (int) bars->len, title1, plot_f, plot,
                                           &error))
      || (scaling_path && !ps_picture_scaling ((PsScalingPoint *) points->data, (int) points->len, unit, title2,
                                               scaling_f, scaling, &error))
      || (plot_path && !ps_picture_save (plot_path, plot, &error))
      || (scaling_path && !ps_picture_save (scaling_path, scaling, &error)))
    {
      g_ptr_array_free (rows, TRUE);
      return ps_cli_fail (error);
    }
  if (moe)
    {
      moe_trend ((MoeRow *) moe_rows->data, (int) moe_rows->len);
      print_moe_table ((MoeRow *) moe_rows->data, (int) moe_rows->len, csv, markdown);
    }
  else if (csv)
    puts ("name,cores,mesh,step_time_s,tokens_per_s,mxu_utilization,peak_hbm_gib,published_tokens_per_s,ratio");
  else if (markdown)
    {
      puts ("| name | cores | mesh | step time (s) | tokens/s | MXU util | peak HBM/core | published tokens/s | simulated/published |");
      puts ("|---|---|---|---|---|---|---|---|---|");
    }
  else
    printf ("%-18s %6s %7s %10s %12s %9s %13s %12s %8s\n", "name", "cores", "mesh", "step (s)",
            "tokens/s", "MXU util", "peak HBM", "published", "ratio");
  for (guint i = 0; i < rows->len; i++)
    puts (rows->pdata[i]);
  g_ptr_array_free (rows, TRUE);
  return 0;
}

int
ps_cmd_tables (int argc, char **argv)
{
  gboolean opt_csv = FALSE, opt_md = FALSE, opt_quiet = FALSE;
  g_autofree char *opt_only = NULL, *opt_plot = NULL, *opt_scaling = NULL;
  /* Applied to every row: each row's `podsim run` gets the options given. */
  static const char *const target_keys[] = { "hw", "collectives", "schedule", "buffer_tiling", NULL };
  g_autoptr (PsTargetOptions) to = ps_target_options_new (target_keys);
  GOptionEntry entries[] = {
    { "csv", 0, 0, G_OPTION_ARG_NONE, &opt_csv, "Comma-separated values", NULL },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &opt_quiet, "No progress on stderr (shown on a terminal: the row being run)", NULL },
    { "markdown", 0, 0, G_OPTION_ARG_NONE, &opt_md, "A Markdown table (doc/validation.md)", NULL },
    { "only", 0, 0, G_OPTION_ARG_STRING, &opt_only, "Only this preset", "NAME" },
    { "plot", 0, 0, G_OPTION_ARG_FILENAME, &opt_plot,
      "Draw each row's step (compute, exposed communication, idle) next to the published step", "FILE.png|svg" },
    { "scaling", 0, 0, G_OPTION_ARG_FILENAME, &opt_scaling,
      "Draw throughput and MXU utilization against cores, simulated and published", "FILE.png|svg" },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("TABLE - a table of runs, simulated");
  g_option_context_set_main_group (ctx, ps_target_options_group (to, entries));
  g_option_context_set_description (ctx,
    "A table of published runs: one row per preset whose [published] table is TABLE\n"
    "(dense: the GSPMD paper's dense Transformer runs, ../shared/reference/published.tsv):\n"
    "simulated step time, throughput, MXU utilization and peak HBM per core next\n"
    "to the published throughput.\n"
    "moe: GShard's MoE runs (Table 3 of arXiv 2006.16668; the GShard* encoder-decoder\n"
    "presets, layers counting both stacks) and the GSPMD paper's MoE series (decoder-only\n"
    "LMs): experts, layers, steps/s, the AllToAll, gating and dispatch/combine\n"
    "shares of the step next to the published steps/s, and for a series (rows with\n"
    "[published] series) each row's step time relative to the series' smallest run,\n"
    "simulated and published.\n"
    "pipeline: one dense model on v3-32, 2D sharding against every pipelined\n"
    "configuration (stages x in-layer sharding x microbatches, remat on/off) that\n"
    "fits in HBM: step time, bubble, peak HBM, ratio to the best 2D row.\n"
    "bubble: a Transformer with one pipeline stage per core, stages K in {1, 2, 4, 8}\n"
    "and microbatches M in {1, 4, 32}: relative throughput, the bubble formula\n"
    "(K - 1) / (M + K - 1) and the simulated idle fraction.\n"
    "spatial: the 3D U-Net (Unet3d128) over 1, 2, 4, 8 and 16 spatial partitions of a\n"
    "128^3 image (speedup next to the GSPMD paper's 15.7x at 16) and a 256^3 image on\n"
    "one core and over 32 partitions at batches 1 to 32 (FLOPS utilization relative\n"
    "to the 1-partition row, next to the paper's 2x).\n"
    "speech: the Conformer (ConformerL) from 8 to 2048 cores at 8 utterances per core\n"
    "(weak scaling) and at a global batch of 256 (strong scaling): throughput, FLOPS\n"
    "utilization and scaling efficiency.\n"
    "Each row is a child 'podsim run --json'; --hw, --collectives, --schedule and\n"
    "--buffer-tiling apply to every row (the peak HBM of rows whose buffers have small\n"
    "minor dims, and whether they fit, depend on --buffer-tiling; doc/compute-model.md).\n"
    "See doc/validation.md.\n");
  if (!ps_cli_parse (ctx, &argc, &argv))
    return PS_EXIT_USAGE;
  GError *error = NULL;
  g_autofree char *presets = known_tables ();
  g_autofree char *known = g_strdup_printf ("%s, pipeline, bubble, spatial, speech", presets);
  static const char *const studies[] = { "pipeline", "bubble", "spatial", "speech", NULL };
  gboolean study = argc == 2 && g_strv_contains (studies, argv[1]);
  g_autoptr (GPtrArray) names = argc == 2 && !study ? table_presets (argv[1]) : NULL;
  if (argc != 2 || (!study && names->len == 0))
    {
      if (argc < 2)
        g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "missing table name (known: %s)", known);
      else
        g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "unknown table '%s' (known: %s)", argv[1], known);
      return ps_cli_fail (error);
    }
  if (opt_csv && opt_md)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--csv and --markdown exclude each other");
      return ps_cli_fail (error);
    }
  /* Checked here once (the hardware file read), so that a bad value is one
   * error, not one per row. */
  g_autoptr (PsTarget) target = ps_target_options_target (to, FALSE, &error);
  if (!target)
    return ps_cli_fail (error);
  PsTablesOptions ro = { ps_target_options_given (to, "hw") ? ps_target_options_str (to, "hw") : NULL,
                         ps_target_options_given (to, "collectives") ? ps_target_options_str (to, "collectives") : NULL,
                         ps_target_options_given (to, "schedule") ? ps_target_options_str (to, "schedule") : NULL,
                         ps_target_options_given (to, "buffer_tiling") ? ps_target_options_str (to, "buffer_tiling") : NULL,
                         ps_progress_on (opt_quiet) };
  if (study && (opt_plot || opt_scaling || opt_only))
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--plot, --scaling and --only are for tables of "
                   "published runs (%s)", presets);
      return ps_cli_fail (error);
    }
  if (strcmp (argv[1], "pipeline") == 0)
    return ps_tables_pipeline (opt_csv, opt_md, &ro);
  if (strcmp (argv[1], "bubble") == 0)
    return ps_tables_bubble (opt_csv, opt_md, &ro);
  if (strcmp (argv[1], "spatial") == 0)
    return ps_tables_spatial (opt_csv, opt_md, &ro);
  if (strcmp (argv[1], "speech") == 0)
    return ps_tables_speech (opt_csv, opt_md, &ro);
  return print_table (names, opt_csv, opt_md, &ro, opt_only, argv[1], opt_plot, opt_scaling);
}

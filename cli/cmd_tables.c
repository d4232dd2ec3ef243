/* podsim tables: regenerate the GSPMD paper's tables from the published model
 * configs, simulated, next to the published figures. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/tables.h"
#include <json-glib/json-glib.h>

#include "common/error.h"
#include "models/dense_lm.h"
#include "sim/collectives.h"
#include "topology/hardware.h"

typedef struct {
  double step_time_s, tokens_per_s, mxu_utilization, peak_hbm_bytes;
} Row;

double
ps_tables_member_double (JsonObject *o, const char *name)
{
  return json_object_has_member (o, name) ? json_object_get_double_member (o, name) : 0;
}

static gboolean
run_row (const char *preset, const PsTablesOptions *ro, Row *row, GError **error)
{
  const char *args[] = { "--preset", preset, NULL };
  g_autoptr (JsonParser) parser = ps_tables_run (args, ro, error);
  if (!parser)
    return FALSE;
  JsonObject *o = json_node_get_object (json_parser_get_root (parser));
  row->step_time_s = ps_tables_member_double (o, "step_time_s");
  row->tokens_per_s = ps_tables_member_double (o, "tokens_per_s");
  row->mxu_utilization = ps_tables_member_double (o, "mxu_utilization");
  row->peak_hbm_bytes = (double) json_object_get_int_member (o, "peak_hbm_bytes");
  return TRUE;
}

JsonParser *
ps_tables_run (const char *const *args, const PsTablesOptions *ro, GError **error)
{
  GPtrArray *argv = g_ptr_array_new ();
  g_ptr_array_add (argv, "/proc/self/exe");
  g_ptr_array_add (argv, "run");
  for (int i = 0; args[i]; i++)
    g_ptr_array_add (argv, (gpointer) args[i]);
  g_ptr_array_add (argv, "--json");
  g_ptr_array_add (argv, "-q");
  if (ro->hw)
    {
      g_ptr_array_add (argv, "--hw");
      g_ptr_array_add (argv, (gpointer) ro->hw);
    }
  if (ro->collectives)
    {
      g_ptr_array_add (argv, "--collectives");
      g_ptr_array_add (argv, (gpointer) ro->collectives);
    }
  g_ptr_array_add (argv, NULL);
  g_autofree char *out = NULL, *err = NULL;
  int status = 0;
  gboolean spawned = g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                                   &out, &err, &status, error);
  g_ptr_array_free (argv, TRUE);
  if (!spawned)
    return NULL;
  if (!g_spawn_check_wait_status (status, NULL))
    {
      g_strstrip (err);
      const char *msg = g_str_has_prefix (err, "podsim: ") ? err + 8 : err;
      g_set_error (error, PS_ERROR,
                   g_str_has_prefix (msg, "the model does not fit") ? PS_ERROR_NO_FIT : PS_ERROR_INVALID,
                   "%s", *msg ? msg : "podsim run failed");
      return NULL;
    }
  JsonParser *parser = json_parser_new ();
  if (!json_parser_load_from_data (parser, out, -1, error))
    {
      g_object_unref (parser);
      return NULL;
    }
  return parser;
}

static int
dense_table (gboolean csv, gboolean markdown, const PsTablesOptions *ro, const char *only)
{
  GError *error = NULL;
  g_autoptr (PsHardware) hw = ps_hardware_load_or_default (ro->hw, &error);
  if (!hw)
    return ps_cli_fail (error);
  const char *const *names = ps_dense_lm_preset_names ();
  /* Simulate every row before printing, so a failure leaves no half table. */
  GPtrArray *rows = g_ptr_array_new_with_free_func (g_free);
  for (int i = 0; names[i]; i++)
    {
      if (only && g_ascii_strcasecmp (only, names[i]) != 0)
        continue;
      PsDenseLmConfig cfg;
      if (!ps_dense_lm_preset (names[i], &cfg, &error))
        return g_ptr_array_free (rows, TRUE), ps_cli_fail (error);
      if (isatty (2))
        fprintf (stderr, "\r\033[Kpodsim tables: %s ...", names[i]);
      /* SimGrid allows one engine per process: each row runs in a child
       * `podsim run --json`, which is also exactly what a user can rerun. */
      Row row;
      if (!run_row (names[i], ro, &row, &error))
        {
          if (isatty (2))
            fputs ("\r\033[K", stderr);
          g_prefix_error (&error, "%s: ", names[i]);
          g_ptr_array_free (rows, TRUE);
          return ps_cli_fail (error);
        }
      double ratio = row.tokens_per_s / cfg.published_tokens_per_s;
      double gib = row.peak_hbm_bytes / (1024.0 * 1024.0 * 1024.0);
      char *line;
      g_autofree char *mesh = g_strdup_printf ("%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, cfg.mesh[0], cfg.mesh[1]);
      if (csv)
        line = g_strdup_printf ("%s,%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                                ",%.6f,%.1f,%.4f,%.3f,%.0f,%.4f",
                                names[i], cfg.mesh[0] * cfg.mesh[1], cfg.mesh[0], cfg.mesh[1],
                                row.step_time_s, row.tokens_per_s, row.mxu_utilization, gib,
                                cfg.published_tokens_per_s, ratio);
      else if (markdown)
        line = g_strdup_printf ("| %s | %" G_GINT64_FORMAT " | %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                                " | %.3f | %.0f | %.1f %% | %.2f GiB | %.0f | %.2f |",
                                names[i], cfg.mesh[0] * cfg.mesh[1], cfg.mesh[0], cfg.mesh[1],
                                row.step_time_s, row.tokens_per_s, 100 * row.mxu_utilization, gib,
                                cfg.published_tokens_per_s, ratio);
      else
        line = g_strdup_printf ("%-18s %6" G_GINT64_FORMAT " %7s %10.3f %12.0f %8.1f%% %9.2f GiB %12.0f %8.2f",
                                names[i], cfg.mesh[0] * cfg.mesh[1], mesh,
                                row.step_time_s, row.tokens_per_s, 100 * row.mxu_utilization, gib,
                                cfg.published_tokens_per_s, ratio);
      g_ptr_array_add (rows, line);
    }
  if (isatty (2))
    fputs ("\r\033[K", stderr);
  if (rows->len == 0)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--only: unknown preset '%s'", only);
      g_ptr_array_free (rows, TRUE);
      return ps_cli_fail (error);
    }
  if (csv)
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
  gboolean opt_csv = FALSE, opt_md = FALSE;
  g_autofree char *opt_hw = NULL, *opt_only = NULL, *opt_coll = NULL;
  GOptionEntry entries[] = {
    { "csv", 0, 0, G_OPTION_ARG_NONE, &opt_csv, "Comma-separated values", NULL },
    { "markdown", 0, 0, G_OPTION_ARG_NONE, &opt_md, "A Markdown table (doc/validation.md)", NULL },
    { "hw", 0, 0, G_OPTION_ARG_FILENAME, &opt_hw, "Hardware file (default: bundled TPU v3)", "FILE" },
    { "only", 0, 0, G_OPTION_ARG_STRING, &opt_only, "Only this preset", "NAME" },
    { "collectives", 0, 0, G_OPTION_ARG_STRING, &opt_coll,
      "Collective algorithm for every row (podsim run --collectives)", "NAME" },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("dense|pipeline|bubble - the paper's tables");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_description (ctx,
    "dense: one row per published dense Transformer run (../shared/reference/published.tsv,\n"
    "compiled into podsim): simulated step time, tokens/s, MXU utilization and peak\n"
    "HBM per core next to the published tokens/s.\n"
    "pipeline: one dense model on v3-32, 2D sharding against every pipelined\n"
    "configuration (stages x in-layer sharding x microbatches, remat on/off) that\n"
    "fits in HBM: step time, bubble, peak HBM, ratio to the best 2D row.\n"
    "bubble: a Transformer with one pipeline stage per core, stages K in {1, 2, 4, 8}\n"
    "and microbatches M in {1, 4, 32}: relative throughput, the bubble formula\n"
    "(K - 1) / (M + K - 1) and the simulated idle fraction.\n"
    "Each row is a child `podsim run --json`. See doc/validation.md.\n");
  if (!ps_cli_parse (ctx, &argc, &argv))
    return PS_EXIT_USAGE;
  GError *error = NULL;
  if (argc != 2 || (strcmp (argv[1], "dense") != 0 && strcmp (argv[1], "pipeline") != 0
                    && strcmp (argv[1], "bubble") != 0))
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION,
                   argc < 2 ? "missing table name (known: dense, pipeline, bubble)"
                            : "unknown table '%s' (known: dense, pipeline, bubble)",
                   argc < 2 ? "" : argv[1]);
      return ps_cli_fail (error);
    }
  if (opt_csv && opt_md)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--csv and --markdown exclude each other");
      return ps_cli_fail (error);
    }
  PsCollAlgorithm coll;
  if (opt_coll && !ps_coll_algorithm_parse (opt_coll, "--collectives", &coll, &error))
    return ps_cli_fail (error);
  PsTablesOptions ro = { opt_hw, opt_coll };
  if (strcmp (argv[1], "pipeline") == 0)
    return ps_tables_pipeline (opt_csv, opt_md, &ro);
  if (strcmp (argv[1], "bubble") == 0)
    return ps_tables_bubble (opt_csv, opt_md, &ro);
  return dense_table (opt_csv, opt_md, &ro, opt_only);
}

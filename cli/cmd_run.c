/* podsim run: build a model's training step, propagate, partition, lower and
 * simulate it on a slice, and print where the step's time goes. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <json-glib/json-glib.h>

#include "cli/commands.h"
#include "cli/picture.h"
#include "driver/driver.h"
#include "cli/pipelining.h"
#include "cli/report.h"
#include "common/error.h"
#include "cli/model_options.h"
#include "models/family.h"

typedef struct {
  char *timeline, *links, *dump_hlo, *dump_spmd, *dump_trace, *picture, *plot, *report;
  char *command;             /* the command line, for the report */
  gboolean json, stats, quiet, print_config, memory_only;
} RunOptions;

/* The pipelining report of a run, when its family pipelines (a
 * `pipeline_stages` key above 1). transfer full. */
static PsPipeliningReport *
pipelining (const PsParams *p, const PsDriverResult *r)
{
  const PsModelFamily *f = ps_params_family (p);
  const PsParamSpec *k = ps_model_family_find_spec (f, "pipeline_stages");
  const PsParamSpec *m = ps_model_family_find_spec (f, "microbatches");
  if (!k || !m || k->type != PS_PARAM_INT || m->type != PS_PARAM_INT)
    return NULL;
  return ps_pipelining_report ((int) ps_params_int (p, "pipeline_stages"), (int) ps_params_int (p, "microbatches"),
                               r);
}

/* The generic description of a section: "key=value, ...". */
static char *
describe_section (const PsParams *p, const char *section)
{
  const PsModelFamily *f = ps_params_family (p);
  GString *out = g_string_new (NULL);
  for (int i = 0; i < ps_model_family_n_specs (f); i++)
    {
      const PsParamSpec *s = ps_model_family_spec (f, i);
      if (strcmp (s->section, section) != 0)
        continue;
      g_autofree char *v = ps_params_text (p, s->key);
      g_string_append_printf (out, "%s%s=%s", out->len ? ", " : "", s->key, v);
    }
  return g_string_free (out, FALSE);
}

static void
print_text (const PsParams *p, const char *name, double published, const PsDriverResult *r,
            const PsHardware *hw, gboolean stats)
{
  const PsModelFamily *f = ps_params_family (p);
  const PsReplayResult *s = r->sim;
  double compute, comm, exposed, idle;
  ps_replay_result_means (s, &compute, &comm, &exposed, &idle);
  g_autofree char *step = ps_format_seconds (s->step_time_s);
  g_autofree char *peak = ps_format_bytes ((double) r->peak_hbm_bytes);
  g_autofree char *cap = ps_format_bytes ((double) hw->hbm_bytes_per_core);
  g_autofree char *c1 = ps_format_seconds (compute), *c2 = ps_format_seconds (comm);
  g_autofree char *c3 = ps_format_seconds (exposed), *c4 = ps_format_seconds (idle);
  g_autofree char *model = f->describe_model ? f->describe_model (p, &r->info) : describe_section (p, "model");
  g_autofree char *par = f->describe_parallelism ? f->describe_parallelism (p, &r->info)
                                                 : describe_section (p, "parallelism");
  printf ("model        %s: %s", name, model);
  if (r->info.params > 0)
    printf (", %.3g parameters", r->info.params);
  printf ("\n");
  printf ("parallelism  %s; %d annotated tensors\n", par, r->info.n_annotations);
  printf ("step time    %s\n", step);
  g_autofree char *unit = g_strdup_printf ("%s/s", f->item_unit);
  printf ("%-12s %.0f", unit, r->items_per_s);
  if (published > 0)
    printf ("   (published %.0f, simulated/published %.2f)", published, r->items_per_s / published);
  printf ("\n");
  printf ("MXU util     %.1f %% (executed FLOPs incl. remat)", 100 * s->mxu_utilization);
  if (r->info.model_flops > 0)
    printf (", model FLOPs utilization %.1f %%", 100 * r->model_flops_utilization);
  printf ("\n");
  printf ("peak HBM     %s per core of %s (%.0f %%)\n", peak, cap,
          100.0 * (double) r->peak_hbm_bytes / (double) hw->hbm_bytes_per_core);
  printf ("time/core    compute %s, communication %s, exposed communication %s, idle %s\n",
          c1, c2, c3, c4);
  if (exposed > comm * (1 + 1e-9))
    /* Not a bug (sim/replay.c dev_done, doc/simulator.md): communication
     * runs from the group's last arrival, exposed time from this core's own,
     * so waiting for a slower peer (a pipeline stage's input, a skewed
     * group) is exposed without being communication. */
    printf ("             (exposed > communication: exposed also counts waiting at a collective for slower "
            "cores, which communication, timed from the last core's arrival, does not)\n");
  printf ("schedule     %s: %d collectives overlapped with compute", ps_schedule_policy_name (r->schedule),
          r->n_async);
  if (r->n_reverted > 0)
    printf (" (%d more kept synchronous to stay within HBM)", r->n_reverted);
  printf ("\n");
  printf ("trace        %" G_GUINT64_FORMAT " compute events, %" G_GUINT64_FORMAT " collectives (%"
          G_GUINT64_FORMAT " distinct); %" G_GINT64_FORMAT " SPMD instructions, %" G_GINT64_FORMAT
          " replicate-then-slice fallbacks\n",
          s->n_compute_events, s->n_collectives, s->n_unique_collectives, r->n_instructions_spmd,
          r->n_fallbacks);
  if (r->n_alltoall > 0)
    {
      g_autofree char *t = ps_format_seconds (r->alltoall_s);
      printf ("AllToAll     %s, %.1f %% of the step (%" G_GUINT64_FORMAT " in the step)\n", t,
              100 * r->alltoall_s / s->step_time_s, r->n_alltoall);
    }
  /* A family's op groups that the program has none of (an encoder-decoder
   * without MoE FFNs) are not worth a line. */
  double grouped_s = 0;
  for (int g = 0; g < r->n_op_groups; g++)
    grouped_s += r->op_group_s[g];
  for (int g = 0; grouped_s > 0 && g < r->n_op_groups; g++)
    {
      g_autofree char *t = ps_format_seconds (r->op_group_s[g]);
      printf ("%s%s %s (%.1f %%)%s", g ? ", " : "by op_name   ", f->op_groups[g].label, t,
              100 * r->op_group_s[g] / s->step_time_s, g + 1 < r->n_op_groups ? "" : "\n");
    }
  g_autofree char *top = ps_replay_result_top_collectives_text (s, 5);
  fputs (top, stdout);
  g_autoptr (PsPipeliningReport) pipe = pipelining (p, r);
  if (pipe)
    {
      g_autofree char *pt = ps_pipelining_report_text (pipe);
      fputs (pt, stdout);
    }
  if (r->memory_text)
    printf ("memory       %s\n", r->memory_text);
  if (stats)
    for (int i = 0; i < PS_STAGE_COUNT; i++)
      {
        g_autofree char *rss = ps_format_bytes (r->stage_peak_rss_bytes[i]);
        printf ("stage        %-10s %8.2f s   CPU %6.2f s   peak RSS %s\n", ps_stage_name (i),
                r->stage_s[i], r->stage_cpu_s[i], rss);
      }
}

static void
add_member_string (JsonBuilder *b, const char *name, const char *value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_string_value (b, value);
}

static void
add_member_double (JsonBuilder *b, const char *name, double value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_double_value (b, value);
}

static void
add_member_int (JsonBuilder *b, const char *name, gint64 value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_int_value (b, value);
}

/* Every parameter, by section, as the model file writes it. */
static void
add_config (JsonBuilder *b, const PsParams *p)
{
  static const char *sections[] = { "model", "parallelism", "slice", "options" };
  const PsModelFamily *f = ps_params_family (p);
  json_builder_set_member_name (b, "config");
  json_builder_begin_object (b);
  for (gsize k = 0; k < G_N_ELEMENTS (sections); k++)
    {
      json_builder_set_member_name (b, sections[k]);
      json_builder_begin_object (b);
      if (k == 0)
        add_member_string (b, "family", f->name);
      for (int i = 0; i < ps_model_family_n_specs (f); i++)
        {
          const PsParamSpec *s = ps_model_family_spec (f, i);
          if (strcmp (s->section, sections[k]) != 0)
            continue;
          g_autofree char *v = ps_params_text (p, s->key);
          add_member_string (b, s->key, v);
        }
      json_builder_end_object (b);
    }
  json_builder_end_object (b);
}

/* The run as one JSON object. Without a replay (memory only, or a program
 * that does not fit) the timing members are left out; `error` says why a
 * run that does not fit stopped. */
static char *
to_json (const PsParams *p, const char *name, double published, const PsDriverResult *r,
         const PsHardware *hw, const char *error, gboolean stats)
{
  const PsModelFamily *f = ps_params_family (p);
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  add_member_string (b, "model", name);
  add_member_string (b, "family", f->name);
  add_member_double (b, "parameters", r->info.params);
  int64_t cores = 1;
  for (guint i = 0; i < r->info.mesh.rank; i++)
    cores *= r->info.mesh.dims[i];
  add_member_int (b, "cores", cores);
  add_member_string (b, "slice", ps_params_str (p, "slice"));
  GString *mesh = g_string_new (NULL);
  for (guint i = 0; i < r->info.mesh.rank; i++)
    g_string_append_printf (mesh, "%s%" G_GINT64_FORMAT, i ? "x" : "", r->info.mesh.dims[i]);
  add_member_string (b, "mesh", mesh->str);
  g_string_free (mesh, TRUE);
  add_member_int (b, "annotations", r->info.n_annotations);
  json_builder_set_member_name (b, "fits");
  json_builder_add_boolean_value (b, r->fits);
  add_member_int (b, "peak_hbm_bytes", (gint64) r->peak_hbm_bytes);
  add_member_int (b, "hbm_capacity_bytes", (gint64) hw->hbm_bytes_per_core);
  if (error)
    add_member_string (b, "error", error);
  if (r->sim)
    {
      add_member_double (b, "step_time_s", r->sim->step_time_s);
      add_member_string (b, "throughput_unit", f->item_unit);
      add_member_double (b, "throughput_per_s", r->items_per_s);
      add_member_double (b, "published_throughput_per_s", published);
      if (strcmp (f->item_unit, "tokens") == 0)
        {
          add_member_double (b, "tokens_per_s", r->items_per_s);
          add_member_double (b, "published_tokens_per_s", published);
        }
      add_member_string (b, "schedule", ps_schedule_policy_name (r->schedule));
      add_member_int (b, "async_collectives", r->n_async);
      add_member_double (b, "mxu_utilization", r->sim->mxu_utilization);
      add_member_double (b, "model_flops_utilization", r->model_flops_utilization);
      double compute, comm, exposed, idle;
      ps_replay_result_means (r->sim, &compute, &comm, &exposed, &idle);
      add_member_double (b, "compute_s", compute);
      add_member_double (b, "communication_s", comm);
      add_member_double (b, "exposed_communication_s", exposed);
      add_member_double (b, "idle_s", idle);
      double step = r->sim->step_time_s;
      add_member_double (b, "alltoall_s", r->alltoall_s);
      add_member_double (b, "alltoall_share", step > 0 ? r->alltoall_s / step : 0);
      for (int g = 0; g < r->n_op_groups; g++)
        {
          g_autofree char *k1 = g_strdup_printf ("%s_s", f->op_groups[g].key);
          g_autofree char *k2 = g_strdup_printf ("%s_share", f->op_groups[g].key);
          add_member_double (b, k1, r->op_group_s[g]);
          add_member_double (b, k2, step > 0 ? r->op_group_s[g] / step : 0);
        }
      json_builder_set_member_name (b, "top_collectives");
      json_builder_begin_array (b);
      g_autoptr (GPtrArray) top = ps_replay_result_top_collectives (r->sim, 5);
      for (guint i = 0; i < top->len; i++)
        {
          const PsCollectiveStat *cs = top->pdata[i];
          json_builder_begin_object (b);
          add_member_string (b, "name", cs->name);
          add_member_string (b, "kind", cs->kind);
          add_member_double (b, "bytes", cs->bytes);
          add_member_int (b, "count", (gint64) cs->count);
          add_member_double (b, "total_s", cs->total_s);
          json_builder_end_object (b);
        }
      json_builder_end_array (b);
      g_autoptr (PsPipeliningReport) pipe = pipelining (p, r);
      if (pipe)
        ps_pipelining_report_json (pipe, b);
    }
  /* Wall times differ from run to run: only asked for, so that identical
   * runs print identical results. */
  if (stats)
    {
      json_builder_set_member_name (b, "stages_s");
      json_builder_begin_object (b);
      for (int i = 0; i < PS_STAGE_COUNT; i++)
        add_member_double (b, ps_stage_name (i), r->stage_s[i]);
      json_builder_end_object (b);
    }
  add_config (b, p);
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  return json_generator_to_data (gen, NULL);
}

/* --memory-only's text: the peak, whether it fits, the largest holders. */
static void
print_memory (const PsDriverResult *r, const PsHardware *hw)
{
  g_autofree char *peak = ps_format_bytes ((double) r->peak_hbm_bytes);
  g_autofree char *cap = ps_format_bytes ((double) hw->hbm_bytes_per_core);
  printf ("peak HBM     %s per core of %s (%.0f %%): %s\n", peak, cap,
          100.0 * (double) r->peak_hbm_bytes / (double) hw->hbm_bytes_per_core, r->fits ? "fits" : "does not fit");
  if (r->memory_text)
    printf ("memory       %s\n", r->memory_text);
}

static int
run (RunOptions *o, PsModelOptions *mo, int argc, char **argv)
{
  GError *error = NULL;
  g_autoptr (PsParams) p = ps_model_options_params_argv (mo, argc, argv, &error);
  if (!p)
    return ps_cli_fail (error);
  double published = 0;
  g_autofree char *name = ps_model_options_name (mo, p, &published);
  /* Printed before the cross-checks, so a template can be written for a
   * run that still lacks something (an HLO file's name); each value has
   * been checked on its own already. */
  if (o->print_config)
    {
      g_autofree char *comment = g_strdup_printf ("%s (podsim run --config FILE.ini runs it)", name);
      g_autofree char *text = ps_params_print (p, comment);
      fputs (text, stdout);
      return 0;
    }
  g_autoptr (PsTarget) target = ps_target_from_params (p, &error);
  if (!target)
    return ps_cli_fail (error);
  const PsHardware *hw = target->hw;
  int tl_devices[2] = { 0, 1 };
  PsDriverFamily fb = { p, target };
  PsDriverOptions dopts;
  ps_driver_options_init_family (&dopts, &fb, name);
  dopts.stop_after = o->memory_only ? PS_STAGE_MEMORY : PS_STAGE_SIMULATE;
  dopts.dump_hlo = o->dump_hlo;
  dopts.dump_spmd = o->dump_spmd;
  dopts.dump_trace = o->dump_trace;
  dopts.progress = ps_progress_on (o->quiet);
  dopts.timeline_devices = o->timeline || o->report ? tl_devices : NULL;
  dopts.n_timeline_devices = o->timeline || o->report ? 2 : 0;
  g_autoptr (PsDriverResult) r = ps_driver_run (&dopts, NULL, &error);
  if (!r)
    return ps_cli_fail (error);
  if (!r->fits)
    {
      /* With --json the figures of the memory check are still printed, so
       * sweeps and searches can say by how much it did not fit. */
      ps_driver_no_fit_error (r, hw, &error);
      if (o->json)
        {
          g_autofree char *j = to_json (p, name, published, r, hw, error->message, o->stats);
          printf ("%s\n", j);
        }
      else if (o->memory_only)
        {
          /* What --memory-only is asked for matters most when it does not
           * fit: which tensors take the memory. */
          print_memory (r, hw);
        }
      if (o->report)
        {
          PsReportInput ri = { name, p, published, r, hw, o->command, error->message };
          GError *report_error = NULL;
          if (!ps_report_write (o->report, &ri, &report_error))
            {
              g_clear_error (&error);
              return ps_cli_fail (report_error);
            }
        }
      return ps_cli_fail (error);
    }
  if (o->memory_only)
    {
      if (o->json)
        {
          g_autofree char *j = to_json (p, name, published, r, hw, NULL, o->stats);
          printf ("%s\n", j);
        }
      else
        print_memory (r, hw);
      return 0;
    }
  g_autofree char *links_csv = NULL;
  gsize links_len = 0;
  if (o->links)
    links_csv = ps_replay_result_links_csv (r->sim, &links_len);
  g_autoptr (GString) picture = g_string_new (NULL), plot = g_string_new (NULL);
  if (o->picture)
    {
      PsPictureFormat pf;
      g_autofree char *title = g_strdup_printf ("%s on %s: ICI link utilization over one step", name,
                                                ps_params_str (p, "slice"));
      if (!ps_picture_format_for (o->picture, "--picture", &pf, &error)
          || !ps_picture_links (r->platform, r->sim->link_bytes, r->sim->step_time_s, title, pf, picture, &error))
        return ps_cli_fail (error);
    }
  if (o->plot)
    {
      PsPictureFormat pf;
      PsBreakdownRow row = { name, 0, 0, 0, 0 };
      double comm;
      ps_replay_result_means (r->sim, &row.compute_s, &comm, &row.exposed_s, &row.idle_s);
      row.published_step_s = published > 0 ? r->info.items_per_step / published : 0;
      g_autofree char *title = g_strdup_printf ("%s on %s: where the step goes", name, ps_params_str (p, "slice"));
      if (!ps_picture_format_for (o->plot, "--plot", &pf, &error)
          || !ps_picture_breakdown (&row, 1, title, pf, plot, &error))
        return ps_cli_fail (error);
    }
  if (o->report)
    {
      g_autoptr (PsPipeliningReport) pipe = pipelining (p, r);
      g_autofree char *pipe_text = pipe ? ps_pipelining_report_text (pipe) : NULL;
      PsReportInput ri = { name, p, published, r, hw, o->command, NULL, pipe_text };
      if (!ps_report_write (o->report, &ri, &error))
        return ps_cli_fail (error);
    }
  if (o->picture && !ps_picture_save (o->picture, picture, &error))
    return ps_cli_fail (error);
  if (o->plot && !ps_picture_save (o->plot, plot, &error))
    return ps_cli_fail (error);
  if (o->timeline && !ps_timeline_write (r->sim->timeline, o->timeline, &error))
    return ps_cli_fail (error);
  if (o->links && !ps_write_file_atomic (o->links, links_csv, links_len, &error))
    return ps_cli_fail (error);
  if (o->json)
    {
      g_autofree char *j = to_json (p, name, published, r, hw, NULL, o->stats);
      printf ("%s\n", j);
    }
  else
    print_text (p, name, published, r, hw, o->stats);
  return 0;
}

int
ps_cmd_run (int argc, char **argv)
{
  RunOptions o = { 0 };
  GOptionEntry entries[] = {
    { "print-config", 0, 0, G_OPTION_ARG_NONE, &o.print_config,
      "Write the run's model file to standard output instead of running it (values are checked one by one, not against each other)", NULL },
    { "json", 0, 0, G_OPTION_ARG_NONE, &o.json, "Print one JSON object (also when it does not fit: fits false)", NULL },
    { "memory-only", 0, 0, G_OPTION_ARG_NONE, &o.memory_only,
      "Stop after the memory check: the per-core peak HBM and whether it fits", NULL },
    { "timeline", 0, 0, G_OPTION_ARG_FILENAME, &o.timeline, "Write a Chrome trace-event timeline of cores 0 and 1", "OUT.json" },
    { "links", 0, 0, G_OPTION_ARG_FILENAME, &o.links, "Write per-link bytes and utilization", "OUT.csv" },
    { "picture", 0, 0, G_OPTION_ARG_FILENAME, &o.picture,
      "Draw the slice with every ICI link colored by its utilization over the step", "FILE.png|svg" },
    { "report", 0, 0, G_OPTION_ARG_FILENAME, &o.report,
      "Write DIR/index.html: the run as one self-contained page (figures, pictures, collectives, "
      "configuration) with DIR/config.ini and DIR/timeline.json", "DIR" },
    { "plot", 0, 0, G_OPTION_ARG_FILENAME, &o.plot,
      "Draw the step's breakdown (compute, exposed communication, idle) next to the published step", "FILE.png|svg" },
    { "dump-hlo", 0, 0, G_OPTION_ARG_FILENAME, &o.dump_hlo, "Write the annotated single-device program (HLO text)", "OUT.hlo" },
    { "dump-spmd", 0, 0, G_OPTION_ARG_FILENAME, &o.dump_spmd, "Write the partitioned SPMD program (HLO text)", "OUT.hlo" },
    { "trace", 0, 0, G_OPTION_ARG_FILENAME, &o.dump_trace, "Write the step trace (replay it with podsim simulate)", "OUT.pst.gz" },
    { "stats", 0, 0, G_OPTION_ARG_NONE, &o.stats, "Print each stage's wall time and peak memory (with --json: a stages_s object)", NULL },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &o.quiet, "No progress display on stderr", NULL },
    { NULL }
  };
  GString *cmd = g_string_new ("podsim run");
  for (int i = 1; i < argc; i++)
    {
      g_autofree char *q = g_shell_quote (argv[i]);
      g_string_append_printf (cmd, " %s", strpbrk (argv[i], " '\"$\\;&|<>*?()") ? q : argv[i]);
    }
  o.command = g_string_free (cmd, FALSE);
  g_autoptr (PsModelOptions) mo = ps_model_options_new (argc, argv, entries, NULL);
  g_autoptr (GOptionContext) ctx = g_option_context_new ("[FAMILY | FILE.hlo] - simulate a training step");
  g_option_context_set_main_group (ctx, ps_model_options_group (mo));
  GString *desc = g_string_new ("FAMILY is one of the model families (default dense):\n");
  for (const PsModelFamily *const *f = ps_model_families (); *f; f++)
    g_string_append_printf (desc, "  %-10s %s (%s)\n", (*f)->name, (*f)->summary, (*f)->doc);
  g_string_append (desc,
    "A FILE (a word with a '.' or '/') is an HLO module to run: podsim run FILE.hlo\n"
    "--slice S [--mesh AxB] [--shard NAME=SHARDING]... ('podsim run FILE.hlo --help').\n"
    "The options above are those of the family named on the command line (or of\n"
    "the --preset or --config file); 'podsim run FAMILY --help' lists another's.\n"
    "Every option overrides the preset or file. A run that differs from every\n"
    "published row in some setting is named 'BASE modified (settings)' and shows no\n"
    "published figure; one that equals a published row, however it was spelled, is\n"
    "compared with it. Presets:");
  for (const PsModelPreset *pr = ps_model_presets (); pr->name; pr++)
    g_string_append_printf (desc, " %s", pr->name);
  g_string_append (desc, ".\nExample: podsim run --preset DenseLm128B32x32\n"
                         "Model files and families: doc/models.md; the simulator: doc/simulator.md.\n");
  g_option_context_set_description (ctx, desc->str);
  g_string_free (desc, TRUE);
  int rc = PS_EXIT_USAGE;
  if (ps_cli_parse (ctx, &argc, &argv))
    rc = run (&o, mo, argc, argv);
  g_free (o.timeline);
  g_free (o.links);
  g_free (o.dump_hlo);
  g_free (o.dump_spmd);
  g_free (o.dump_trace);
  g_free (o.picture);
  g_free (o.plot);
  g_free (o.report);
  g_free (o.command);
  return rc;
}

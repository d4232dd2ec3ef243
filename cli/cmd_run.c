/* podsim run: build a model's training step, propagate, partition, lower and
 * simulate it on a slice, and print where the step's time goes. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <json-glib/json-glib.h>

#include "cli/commands.h"
#include "cli/pipeline.h"
#include "cli/pipelining.h"
#include "common/error.h"
#include "models/dense_lm.h"

typedef struct {
  char *preset, *slice, *mesh, *order, *sharding, *optimizer, *hw, *wrap;
  char *timeline, *links, *dump_hlo, *dump_spmd, *dump_trace, *collectives;
  gint layers, microbatches, rel_buckets, stages;
  gint64 model_dim, ffn_dim, heads, head_dim, vocab, seq_len, batch;
  gboolean remat, no_remat, json, no_cache, stats, wus, quiet, async, gated, no_gated, unroll, idle;
  gint64 windowed;  /* --windowed-einsum BYTES; < 0: off */
} RunOptions;

/* An option not given keeps this value; 0 or a negative count given on the
 * command line reaches ps_dense_lm_check, which refuses it. */
#define UNSET G_MININT

/* The dense LM's mesh is 2-D. */
static gboolean
parse_mesh (const char *text, int64_t *mesh, GError **error)
{
  PsTraceMesh m = { 0 };
  if (!ps_trace_mesh_parse_dims (text, "--mesh", &m, error))
    return FALSE;
  if (m.rank != 2)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--mesh: '%s' is not AxB (e.g. 32x64)", text);
      return FALSE;
    }
  mesh[0] = m.dims[0];
  mesh[1] = m.dims[1];
  return TRUE;
}

/* Applies the command-line overrides to a preset or the defaults. The
 * physical shape Lingvo's non-pod order needs is the slice's (chips x, chips
 * y, cores per chip), whatever slice the options chose. The run keeps the
 * preset's name and published figure only while it equals a published row;
 * otherwise *name says what was modified (transfer full). */
static gboolean
make_config (RunOptions *o, const char *model, const PsHardware *hw, PsDenseLmConfig *cfg,
             char **name, GError **error)
{
  if (model && strcmp (model, "dense") != 0 && strcmp (model, "dense_lm") != 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "unknown model '%s' (known: dense)", model);
      return FALSE;
    }
  if (o->preset)
    {
      if (!ps_dense_lm_preset (o->preset, cfg, error))
        return FALSE;
    }
  else
    ps_dense_lm_config_small (cfg);
  if (o->layers != UNSET)
    cfg->layers = o->layers;
  if (o->model_dim != UNSET)
    cfg->model_dim = o->model_dim;
  if (o->ffn_dim != UNSET)
    cfg->ffn_dim = o->ffn_dim;
  if (o->heads != UNSET)
    cfg->heads = o->heads;
  if (o->head_dim != UNSET)
    cfg->head_dim = o->head_dim;
  if (o->vocab != UNSET)
    cfg->vocab = o->vocab;
  if (o->rel_buckets != UNSET)
    cfg->rel_buckets = o->rel_buckets;
  if (o->seq_len != UNSET)
    cfg->seq_len = o->seq_len;
  if (o->batch != UNSET)
    cfg->global_batch = o->batch;
  if (o->microbatches != UNSET)
    cfg->microbatches = o->microbatches;
  if (o->remat && o->no_remat)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--remat and --no-remat contradict each other");
      return FALSE;
    }
  if (o->gated && o->no_gated)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--gated-gelu and --no-gated-gelu contradict each other");
      return FALSE;
    }
  if (o->gated)
    cfg->gated_gelu = TRUE;
  if (o->no_gated)
    cfg->gated_gelu = FALSE;
  if (o->remat)
    cfg->remat = TRUE;
  if (o->no_remat)
    cfg->remat = FALSE;
  if (o->wus)
    cfg->weight_update_sharding = TRUE;
  if (o->unroll)
    cfg->unroll = TRUE;
  if (o->stages)
    cfg->pipeline_stages = o->stages;
  if (o->optimizer && !ps_optimizer_from_name (o->optimizer, &cfg->optimizer))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--optimizer: '%s' is not adafactor or adam",
                   o->optimizer);
      return FALSE;
    }
  if (o->sharding && !ps_sharding_preset_from_name (o->sharding, &cfg->sharding))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--sharding: '%s' is not 2d, 1d or dp", o->sharding);
      return FALSE;
    }
  if (o->slice)
    cfg->slice = o->slice;
  if (o->mesh && !parse_mesh (o->mesh, cfg->mesh, error))
    return FALSE;
  if (o->order)
    {
      if (strcmp (o->order, "arange") != 0 && strcmp (o->order, "arange_T") != 0
          && strcmp (o->order, "nonpod2d") != 0)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                       "--device-order: '%s' is not arange, arange_T or nonpod2d", o->order);
          return FALSE;
        }
      cfg->device_order = o->order;
    }
  g_autoptr (PsSlice) slice = ps_slice_new (cfg->slice, PS_WRAP_AUTO, hw->tensorcores_per_chip, error);
  if (!slice)
    return FALSE;
  cfg->physical[0] = slice->chips_x;
  cfg->physical[1] = slice->chips_y;
  cfg->physical[2] = slice->cores_per_chip;
  if (!ps_dense_lm_check (cfg, error))
    return FALSE;
  const char *published = ps_dense_lm_published_match (cfg);
  if (published)
    {
      PsDenseLmConfig row;
      ps_dense_lm_preset (published, &row, NULL);
      *name = g_strdup (row.name);
      cfg->published_tokens_per_s = row.published_tokens_per_s;
    }
  else
    {
      cfg->published_tokens_per_s = 0;
      if (o->preset)
        {
          PsDenseLmConfig base;
          ps_dense_lm_preset (o->preset, &base, NULL);
          g_autofree char *diff = ps_dense_lm_config_diff (cfg, &base);
          *name = g_strdup_printf ("%s modified (%s)", base.name, diff);
        }
      else
        *name = g_strdup ("dense");
    }
  cfg->name = *name;
  return TRUE;
}

static void
print_text (const PsDenseLmConfig *cfg, const PsPipelineResult *r, const PsHardware *hw,
            gboolean stats)
{
  const PsReplayResult *s = r->sim;
  double compute, comm, exposed, idle;
  ps_replay_result_means (s, &compute, &comm, &exposed, &idle);
  g_autofree char *step = ps_format_seconds (s->step_time_s);
  g_autofree char *peak = ps_format_bytes ((double) r->peak_hbm_bytes);
  g_autofree char *cap = ps_format_bytes ((double) hw->hbm_bytes_per_core);
  g_autofree char *c1 = ps_format_seconds (compute), *c2 = ps_format_seconds (comm);
  g_autofree char *c3 = ps_format_seconds (exposed), *c4 = ps_format_seconds (idle);
  printf ("model        %s: %d layers, M=%" G_GINT64_FORMAT " H=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT
          " D=%" G_GINT64_FORMAT ", S=%" G_GINT64_FORMAT ", batch %" G_GINT64_FORMAT "%s, %.3g parameters\n",
          cfg->name, cfg->layers, cfg->model_dim, cfg->ffn_dim, cfg->heads, cfg->head_dim, cfg->seq_len,
          cfg->global_batch, cfg->gated_gelu ? ", gated GELU" : "", r->info.params);
  g_autofree char *ann = cfg->unroll
    ? g_strdup_printf ("%d annotated tensors (%.1f per layer)", r->info.n_annotations,
                       (double) r->info.n_annotations / cfg->layers)
    : g_strdup_printf ("layers as a loop, %d annotated tensors (written once for the loop)",
                       r->info.n_annotations);
  g_autofree char *mesh = cfg->pipeline_stages > 1
    ? g_strdup_printf ("%d-stage pipeline x %s in-layer sharding on mesh %" G_GINT64_FORMAT "x%"
                       G_GINT64_FORMAT " (%" G_GINT64_FORMAT " devices)", cfg->pipeline_stages,
                       ps_sharding_preset_name (cfg->sharding), cfg->mesh[0], cfg->mesh[1],
                       ps_dense_lm_n_devices (cfg))
    : g_strdup_printf ("%s sharding on mesh %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " (%s)",
                       ps_sharding_preset_name (cfg->sharding), cfg->mesh[0], cfg->mesh[1],
                       cfg->device_order);
  printf ("parallelism  %s, slice %s; %s, remat %s, %d microbatch%s; %s\n", mesh, cfg->slice,
          ps_optimizer_name (cfg->optimizer), cfg->remat ? "on" : "off", cfg->microbatches,
          cfg->microbatches == 1 ? "" : "es", ann);
  printf ("step time    %s\n", step);
  printf ("tokens/s     %.0f", r->tokens_per_s);
  if (cfg->published_tokens_per_s > 0)
    printf ("   (published %.0f, simulated/published %.2f)", cfg->published_tokens_per_s,
            r->tokens_per_s / cfg->published_tokens_per_s);
  printf ("\n");
  printf ("MXU util     %.1f %% (executed FLOPs incl. remat), model FLOPs utilization %.1f %%\n",
          100 * s->mxu_utilization, 100 * r->model_flops_utilization);
  printf ("peak HBM     %s per core of %s (%.0f %%)\n", peak, cap,
          100.0 * (double) r->peak_hbm_bytes / (double) hw->hbm_bytes_per_core);
  printf ("time/core    compute %s, communication %s, exposed communication %s, idle %s\n",
          c1, c2, c3, c4);
  printf ("trace        %" G_GUINT64_FORMAT " compute events, %" G_GUINT64_FORMAT " collectives (%"
          G_GUINT64_FORMAT " distinct); %" G_GINT64_FORMAT " SPMD instructions, %" G_GINT64_FORMAT
          " replicate-then-slice fallbacks\n",
          s->n_compute_events, s->n_collectives, s->n_unique_collectives, r->n_instructions_spmd,
          r->n_fallbacks);
  g_autofree char *top = ps_replay_result_top_collectives_text (s, 5);
  fputs (top, stdout);
  g_autoptr (PsPipeliningReport) pipe = ps_pipelining_report (cfg, r);
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

static char *
to_json (const PsDenseLmConfig *cfg, const PsPipelineResult *r, const PsHardware *hw)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "model");
  json_builder_add_string_value (b, cfg->name);
  json_builder_set_member_name (b, "layers");
  json_builder_add_int_value (b, cfg->layers);
  json_builder_set_member_name (b, "parameters");
  json_builder_add_double_value (b, r->info.params);
  json_builder_set_member_name (b, "cores");
  json_builder_add_int_value (b, cfg->mesh[0] * cfg->mesh[1]);
  json_builder_set_member_name (b, "slice");
  json_builder_add_string_value (b, cfg->slice);
  json_builder_set_member_name (b, "mesh");
  g_autofree char *mesh = g_strdup_printf ("%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, cfg->mesh[0], cfg->mesh[1]);
  json_builder_add_string_value (b, mesh);
  json_builder_set_member_name (b, "sharding");
  json_builder_add_string_value (b, ps_sharding_preset_name (cfg->sharding));
  json_builder_set_member_name (b, "annotations");
  json_builder_add_int_value (b, r->info.n_annotations);
  json_builder_set_member_name (b, "step_time_s");
  json_builder_add_double_value (b, r->sim->step_time_s);
  json_builder_set_member_name (b, "tokens_per_s");
  json_builder_add_double_value (b, r->tokens_per_s);
  json_builder_set_member_name (b, "published_tokens_per_s");
  json_builder_add_double_value (b, cfg->published_tokens_per_s);
  json_builder_set_member_name (b, "mxu_utilization");
  json_builder_add_double_value (b, r->sim->mxu_utilization);
  json_builder_set_member_name (b, "model_flops_utilization");
  json_builder_add_double_value (b, r->model_flops_utilization);
  json_builder_set_member_name (b, "peak_hbm_bytes");
  json_builder_add_int_value (b, (gint64) r->peak_hbm_bytes);
  json_builder_set_member_name (b, "hbm_capacity_bytes");
  json_builder_add_int_value (b, (gint64) hw->hbm_bytes_per_core);
  double compute, comm, exposed, idle;
  ps_replay_result_means (r->sim, &compute, &comm, &exposed, &idle);
  json_builder_set_member_name (b, "compute_s");
  json_builder_add_double_value (b, compute);
  json_builder_set_member_name (b, "communication_s");
  json_builder_add_double_value (b, comm);
  json_builder_set_member_name (b, "exposed_communication_s");
  json_builder_add_double_value (b, exposed);
  json_builder_set_member_name (b, "idle_s");
  json_builder_add_double_value (b, idle);
  json_builder_set_member_name (b, "top_collectives");
  json_builder_begin_array (b);
  g_autoptr (GPtrArray) top = ps_replay_result_top_collectives (r->sim, 5);
  for (guint i = 0; i < top->len; i++)
    {
      const PsCollectiveStat *cs = top->pdata[i];
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "name");
      json_builder_add_string_value (b, cs->name);
      json_builder_set_member_name (b, "kind");
      json_builder_add_string_value (b, cs->kind);
      json_builder_set_member_name (b, "bytes");
      json_builder_add_double_value (b, cs->bytes);
      json_builder_set_member_name (b, "count");
      json_builder_add_int_value (b, (gint64) cs->count);
      json_builder_set_member_name (b, "total_s");
      json_builder_add_double_value (b, cs->total_s);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  g_autoptr (PsPipeliningReport) pipe = ps_pipelining_report (cfg, r);
  if (pipe)
    ps_pipelining_report_json (pipe, b);
  json_builder_set_member_name (b, "stages_s");
  json_builder_begin_object (b);
  for (int i = 0; i < PS_STAGE_COUNT; i++)
    {
      json_builder_set_member_name (b, ps_stage_name (i));
      json_builder_add_double_value (b, r->stage_s[i]);
    }
  json_builder_end_object (b);
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  return json_generator_to_data (gen, NULL);
}

static int
run (RunOptions *o, int argc, char **argv)
{
  GError *error = NULL;
  if (argc > 2)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "expected at most one MODEL (see 'podsim run --help')");
      return ps_cli_fail (error);
    }
  PsWrapMode wrap = PS_WRAP_AUTO;
  if (o->wrap && !ps_wrap_mode_parse (o->wrap, &wrap, &error))
    return ps_cli_fail (error);
  PsCollAlgorithm coll = PS_COLL_TORUS2D;
  if (o->collectives && !ps_coll_algorithm_parse (o->collectives, "--collectives", &coll, &error))
    return ps_cli_fail (error);
  g_autoptr (PsHardware) hw = ps_hardware_load_or_default (o->hw, &error);
  if (!hw)
    return ps_cli_fail (error);
  PsDenseLmConfig cfg;
  g_autofree char *name = NULL;
  if (!make_config (o, argc == 2 ? argv[1] : NULL, hw, &cfg, &name, &error))
    return ps_cli_fail (error);
  int tl_devices[2] = { 0, 1 };
  PsPipelineOptions popts = { hw, NULL, wrap, o->no_cache, o->async, !o->quiet && isatty (2),
                              o->timeline ? tl_devices : NULL, o->timeline ? 2 : 0,
                              o->dump_hlo, o->dump_spmd, o->dump_trace,
                              o->windowed >= 0, o->windowed, coll, o->idle };
  g_autoptr (PsPipelineResult) r = ps_pipeline_run (&cfg, &popts, &error);
  if (!r)
    return ps_cli_fail (error);
  g_autofree char *links_csv = NULL;
  gsize links_len = 0;
  if (o->links)
    links_csv = ps_replay_result_links_csv (r->sim, &links_len);
  if (o->timeline && !ps_timeline_write (r->sim->timeline, o->timeline, &error))
    return ps_cli_fail (error);
  if (o->links && !ps_write_file_atomic (o->links, links_csv, links_len, &error))
    return ps_cli_fail (error);
  if (o->json)
    {
      g_autofree char *j = to_json (&cfg, r, hw);
      printf ("%s\n", j);
    }
  else
    print_text (&cfg, r, hw, o->stats);
  return 0;
}

int
ps_cmd_run (int argc, char **argv)
{
  RunOptions o = { 0 };
  o.windowed = -1;
  o.layers = o.rel_buckets = o.microbatches = UNSET;
  o.model_dim = o.ffn_dim = o.heads = o.head_dim = o.vocab = o.seq_len = o.batch = UNSET;
  GOptionEntry entries[] = {
    { "preset", 0, 0, G_OPTION_ARG_STRING, &o.preset, "A published config (DenseLm128B8x8, DenseLm128B16x16, DenseLm128B32x32, DenseLm175B32x32)", "NAME" },
    { "slice", 0, 0, G_OPTION_ARG_STRING, &o.slice, "Pod slice (v3-8 .. v3-2048)", "SLICE" },
    { "mesh", 0, 0, G_OPTION_ARG_STRING, &o.mesh, "Logical device mesh, e.g. 32x64", "AxB" },
    { "device-order", 0, 0, G_OPTION_ARG_STRING, &o.order, "Mesh device order: arange, arange_T, nonpod2d", "ORDER" },
    { "sharding", 0, 0, G_OPTION_ARG_STRING, &o.sharding, "Sharding preset: 2d (default), 1d, dp", "PRESET" },
    { "weight-update-sharding", 0, 0, G_OPTION_ARG_NONE, &o.wus, "Shard optimizer state over the data-parallel axis", NULL },
    { "layers", 0, 0, G_OPTION_ARG_INT, &o.layers, "Transformer layers", "N" },
    { "model-dim", 0, 0, G_OPTION_ARG_INT64, &o.model_dim, "Model dim M", "N" },
    { "ffn-dim", 0, 0, G_OPTION_ARG_INT64, &o.ffn_dim, "Feed-forward dim H", "N" },
    { "heads", 0, 0, G_OPTION_ARG_INT64, &o.heads, "Attention heads N", "N" },
    { "head-dim", 0, 0, G_OPTION_ARG_INT64, &o.head_dim, "Attention head dim D (128 in every published run)", "N" },
    { "vocab", 0, 0, G_OPTION_ARG_INT64, &o.vocab, "Vocabulary size (32000 in every published run)", "N" },
    { "rel-buckets", 0, 0, G_OPTION_ARG_INT, &o.rel_buckets, "Relative-position buckets (32 in every published run)", "N" },
    { "seq-len", 0, 0, G_OPTION_ARG_INT64, &o.seq_len, "Sequence length S", "N" },
    { "batch", 0, 0, G_OPTION_ARG_INT64, &o.batch, "Global batch (sequences per step)", "N" },
    { "microbatches", 0, 0, G_OPTION_ARG_INT, &o.microbatches, "Gradient accumulation steps", "N" },
    { "gated-gelu", 0, 0, G_OPTION_ARG_NONE, &o.gated, "Gated GELU feed-forward (the DenseLm128B presets)", NULL },
    { "no-gated-gelu", 0, 0, G_OPTION_ARG_NONE, &o.no_gated, "ReLU feed-forward, no gate (DenseLm175B32x32)", NULL },
    { "optimizer", 0, 0, G_OPTION_ARG_STRING, &o.optimizer, "adafactor (default) or adam", "NAME" },
    { "remat", 0, 0, G_OPTION_ARG_NONE, &o.remat, "Recompute each layer's forward in backward (default)", NULL },
    { "no-remat", 0, 0, G_OPTION_ARG_NONE, &o.no_remat, "Keep all activations", NULL },
    { "pipeline-stages", 0, 0, G_OPTION_ARG_INT, &o.stages,
      "Pipeline the layers over K stages (GSPMD's vectorized stages; --microbatches are "
      "its microbatches, --mesh the in-layer mesh of one stage)", "K" },
    { "idle-cores", 0, 0, G_OPTION_ARG_NONE, &o.idle,
      "Let the program use fewer devices than the slice has cores (device d on core d; the "
      "rest idle)", NULL },
    { "unroll", 0, 0, G_OPTION_ARG_NONE, &o.unroll,
      "Write the layers one after the other (default: one loop over weights stacked by layer)", NULL },
    { "hw", 0, 0, G_OPTION_ARG_FILENAME, &o.hw, "Hardware file (default: bundled TPU v3)", "FILE" },
    { "wrap", 0, 0, G_OPTION_ARG_STRING, &o.wrap, "Wrap links: auto (default), on, off", "MODE" },
    { "no-cache", 0, 0, G_OPTION_ARG_NONE, &o.no_cache, "Simulate every collective instead of replaying cached ones", NULL },
    { "collectives", 0, 0, G_OPTION_ARG_STRING, &o.collectives, "Collective algorithms: torus2d (default), dim-by-dim, ring (doc/collectives.md)", "NAME" },
    { "async-collectives", 0, 0, G_OPTION_ARG_NONE, &o.async,
      "What if collectives overlapped compute: lower them as start/done pairs (default: synchronous)", NULL },
    { "windowed-einsum", 0, 0, G_OPTION_ARG_INT64, &o.windowed,
      "Partition dots whose operand would be all-gathered to more than BYTES per device as "
      "windowed einsums (collective-permute ring overlapping the dots; 0: all such dots; "
      "default: off)", "BYTES" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &o.json, "Print one JSON object", NULL },
    { "timeline", 0, 0, G_OPTION_ARG_FILENAME, &o.timeline, "Write a Chrome trace-event timeline of cores 0 and 1", "OUT.json" },
    { "links", 0, 0, G_OPTION_ARG_FILENAME, &o.links, "Write per-link bytes and utilization", "OUT.csv" },
    { "dump-hlo", 0, 0, G_OPTION_ARG_FILENAME, &o.dump_hlo, "Write the annotated single-device program (HLO text)", "OUT.hlo" },
    { "dump-spmd", 0, 0, G_OPTION_ARG_FILENAME, &o.dump_spmd, "Write the partitioned SPMD program (HLO text)", "OUT.hlo" },
    { "trace", 0, 0, G_OPTION_ARG_FILENAME, &o.dump_trace, "Write the step trace (replay it with podsim simulate)", "OUT.pst.gz" },
    { "stats", 0, 0, G_OPTION_ARG_NONE, &o.stats, "Print each stage's wall time and peak memory", NULL },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &o.quiet, "No progress display on stderr", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("[MODEL] - simulate a model's training step");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_description (ctx,
    "MODEL is 'dense' (the dense Transformer LM of the GSPMD paper; the default).\n"
    "Without --preset a small dense model on v3-8 is used; every option overrides\n"
    "the preset. A run that differs from every published row in some setting is\n"
    "named 'PRESET modified (settings)' and shows no published figure; one that\n"
    "equals a published row, however it was spelled, is compared with it.\n"
    "Example: podsim run --preset DenseLm128B32x32\n"
    "The model and presets: doc/models.md; the simulator: doc/simulator.md.\n");
  int rc = PS_EXIT_USAGE;
  if (ps_cli_parse (ctx, &argc, &argv))
    rc = run (&o, argc, argv);
  g_free (o.preset);
  g_free (o.slice);
  g_free (o.mesh);
  g_free (o.order);
  g_free (o.sharding);
  g_free (o.optimizer);
  g_free (o.hw);
  g_free (o.wrap);
  g_free (o.collectives);
  g_free (o.timeline);
  g_free (o.links);
  g_free (o.dump_hlo);
  g_free (o.dump_spmd);
  g_free (o.dump_trace);
  return rc;
}

/* podsim tables pipeline|bubble: GSPMD pipelining against 2D sharding, and
 * the bubble of a pipeline with one stage per core (doc/validation.md). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/tables.h"
#include "common/error.h"
#include "models/dense_lm.h"

/* The pipeline table's model: the published dense family's layer (D = 128,
 * H = 8 M, gated GELU, S = 1024, vocabulary 32000) at M = 4096 and 32
 * layers (15.6e9 parameters), batch 64, on v3-32. The paper's own pipeline
 * model is not in our references. 32 cores let K in {2, 4, 8} stages take
 * 16, 8 or 4 cores each, so every in-layer split from 1 to 16 shards has a
 * row, and the 2D rows fit with remat; the table runs in minutes. */
static const char *const model_args[] = {
  "--slice", "v3-32", "--layers", "32", "--model-dim", "4096", "--ffn-dim", "32768",
  "--heads", "32", "--head-dim", "128", "--vocab", "32000", "--rel-buckets", "32",
  "--seq-len", "1024", "--batch", "64", "--gated-gelu", NULL
};
#define MODEL_CORES 32

typedef struct {
  int stages;             /* 1: 2D sharding, no pipeline */
  const char *sharding;   /* in-layer: 2d or 1d */
  int64_t mesh[2];
  int microbatches;
  gboolean remat;
  gboolean fits;
  double step_s, tokens_per_s, peak_bytes;
  double formula, idle_loops, idle_step;
} Config;

/* The config as `podsim run` would make it, checked the same way. */
static gboolean
valid (const Config *c, int layers, int64_t model_dim, int64_t ffn, int64_t heads, int64_t batch)
{
  PsDenseLmConfig d;
  ps_dense_lm_config_small (&d);
  d.layers = layers;
  d.model_dim = model_dim;
  d.ffn_dim = ffn;
  d.heads = heads;
  d.head_dim = 128;
  d.vocab = 32000;
  d.global_batch = batch;
  d.mesh[0] = c->mesh[0];
  d.mesh[1] = c->mesh[1];
  d.microbatches = c->microbatches;
  d.pipeline_stages = c->stages > 1 ? c->stages : 0;
  d.sharding = strcmp (c->sharding, "1d") == 0 ? PS_SHARDING_1D : PS_SHARDING_2D;
  return ps_dense_lm_check (&d, NULL);
}

/* Runs one config (model args + its own); FALSE on an error other than
 * not fitting. */
static gboolean
run_config (const char *const *base, Config *c, const PsTablesOptions *o, GError **error)
{
  g_autoptr (GPtrArray) args = g_ptr_array_new_with_free_func (g_free);
  for (int i = 0; base[i]; i++)
    g_ptr_array_add (args, g_strdup (base[i]));
  g_ptr_array_add (args, g_strdup ("--mesh"));
  g_ptr_array_add (args, g_strdup_printf ("%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, c->mesh[0], c->mesh[1]));
  g_ptr_array_add (args, g_strdup ("--sharding"));
  g_ptr_array_add (args, g_strdup (c->sharding));
  g_ptr_array_add (args, g_strdup ("--microbatches"));
  g_ptr_array_add (args, g_strdup_printf ("%d", c->microbatches));
  g_ptr_array_add (args, g_strdup (c->remat ? "--remat" : "--no-remat"));
  if (c->stages > 1)
    {
      g_ptr_array_add (args, g_strdup ("--pipeline-stages"));
      g_ptr_array_add (args, g_strdup_printf ("%d", c->stages));
    }
  if (c->stages * c->mesh[0] * c->mesh[1] < MODEL_CORES || base != model_args)
    g_ptr_array_add (args, g_strdup ("--idle-cores"));
  g_ptr_array_add (args, NULL);
  GError *local = NULL;
  g_autoptr (JsonParser) parser = ps_tables_run ((const char *const *) args->pdata, o, &local);
  c->formula = c->stages > 1 ? (double) (c->stages - 1) / (double) (c->microbatches + c->stages - 1) : 0;
  if (!parser)
    {
      if (!g_error_matches (local, PS_ERROR, PS_ERROR_NO_FIT))
        {
          g_propagate_error (error, local);
          return FALSE;
        }
      c->fits = FALSE;
      c->peak_bytes = ps_tables_peak_of_message (local->message);
      g_error_free (local);
      return TRUE;
    }
  JsonObject *r = json_node_get_object (json_parser_get_root (parser));
  c->fits = TRUE;
  c->step_s = ps_study_json_double (r, "step_time_s");
  c->tokens_per_s = ps_study_json_double (r, "tokens_per_s");
  c->peak_bytes = ps_study_json_double (r, "peak_hbm_bytes");
  if (json_object_has_member (r, "pipeline"))
    {
      JsonObject *p = json_object_get_object_member (r, "pipeline");
      c->idle_loops = ps_study_json_double (p, "bubble_fraction_of_loops");
      c->idle_step = ps_study_json_double (p, "bubble_fraction_of_step");
    }
  return TRUE;
}

static void
progress (gboolean on, int i, int n, const Config *c)
{
  ps_progress (on, NULL);
  ps_progress (on, "podsim tables: %d/%d: %d stage%s, %s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
           ", %d microbatch%s, remat %s ...", i + 1, n, c->stages, c->stages == 1 ? "" : "s",
           c->sharding, c->mesh[0], c->mesh[1], c->microbatches, c->microbatches == 1 ? "" : "es",
           c->remat ? "on" : "off");
}

static void
progress_done (gboolean on)
{
  ps_progress (on, NULL);
}

static int
by_step (gconstpointer a, gconstpointer b)
{
  const Config *x = a, *y = b;
  if (x->fits != y->fits)
    return x->fits ? -1 : 1;
  return x->step_s < y->step_s ? -1 : x->step_s > y->step_s;
}

static char *
config_name (const Config *c)
{
  if (c->stages == 1)
    return g_strdup_printf ("2D %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, c->mesh[0], c->mesh[1]);
  return g_strdup_printf ("%d stages x %s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, c->stages,
                          c->sharding, c->mesh[0], c->mesh[1]);
}

int
ps_tables_pipeline (gboolean csv, gboolean markdown, const PsTablesOptions *o)
{
  GError *error = NULL;
  GArray *cfgs = g_array_new (FALSE, TRUE, sizeof (Config));
  /* 2D: every mesh of the 32 cores, the batch in one microbatch */
  for (int64_t a = 1; a <= MODEL_CORES; a *= 2)
    for (int remat = 1; remat >= 0; remat--)
      {
        Config c = { 1, "2d", { a, MODEL_CORES / a }, 1, remat };
        if (valid (&c, 32, 4096, 32768, 32, 64))
          g_array_append_val (cfgs, c);
      }
  /* pipelines: K stages x in-layer mesh a x b (a the data axis), both
   * in-layer shardings, 4 .. 32 microbatches */
  static const int stages[] = { 2, 4, 8 }, micro[] = { 4, 8, 16, 32 };
  static const char *const sh[] = { "2d", "1d" };
  for (int k = 0; k < 3; k++)
    for (int s = 0; s < 2; s++)
      for (int64_t a = 1; a <= MODEL_CORES / stages[k]; a *= 2)
        for (int m = 0; m < 4; m++)
          for (int remat = 1; remat >= 0; remat--)
            {
              Config c = { stages[k], sh[s], { a, MODEL_CORES / stages[k] / a }, micro[m], remat };
              if (valid (&c, 32, 4096, 32768, 32, 64))
                g_array_append_val (cfgs, c);
            }
  for (guint i = 0; i < cfgs->len; i++)
    {
      Config *c = &g_array_index (cfgs, Config, i);
      progress (o->progress, (int) i, (int) cfgs->len, c);
      if (!run_config (model_args, c, o, &error))
        {
          progress_done (o->progress);
          g_autofree char *name = config_name (c);
          g_prefix_error (&error, "%s, %d microbatches: ", name, c->microbatches);
          g_array_unref (cfgs);
          return ps_cli_fail (error);
        }
    }
  progress_done (o->progress);
  g_array_sort (cfgs, by_step);
  /* the reference: the fastest 2D row */
  double ref = 0;
  const Config *best_pipe = NULL;
  int n_fit = 0, n_pipe_fit = 0, n_pipe = 0;
  double min_nofit = 0, max_nofit = 0;
  for (guint i = 0; i < cfgs->len; i++)
    {
      const Config *c = &g_array_index (cfgs, Config, i);
      n_pipe += c->stages > 1;
      if (!c->fits)
        {
          min_nofit = min_nofit == 0 ? c->peak_bytes : MIN (min_nofit, c->peak_bytes);
          max_nofit = MAX (max_nofit, c->peak_bytes);
          continue;
        }
      n_fit++;
      if (c->stages == 1 && ref == 0)
        ref = c->step_s;
      if (c->stages > 1)
        {
          n_pipe_fit++;
          if (!best_pipe)
            best_pipe = c;
        }
    }
  const double gib = 1024.0 * 1024.0 * 1024.0;
  if (csv)
    puts ("stages,in_layer_sharding,mesh,microbatches,remat,fits,step_time_s,tokens_per_s,"
          "bubble_formula,bubble_simulated_of_loops,bubble_simulated_of_step,peak_hbm_gib,ratio_to_2d");
  else if (markdown)
    {
      puts ("| configuration | microbatches | remat | step time (s) | tokens/s | bubble (K-1)/(M+K-1) "
            "| bubble simulated (of loops / of step) | peak HBM/core | step / best 2D |");
      puts ("|---|---|---|---|---|---|---|---|---|");
    }
  else
    printf ("%-22s %5s %5s %10s %9s %8s %15s %10s %8s\n", "configuration", "M", "remat", "step (s)",
            "tokens/s", "formula", "simulated", "peak HBM", "vs 2D");
  for (guint i = 0; i < cfgs->len; i++)
    {
      const Config *c = &g_array_index (cfgs, Config, i);
      g_autofree char *name = config_name (c);
      double ratio = ref > 0 && c->fits ? c->step_s / ref : 0;
      if (csv)
        {
          printf ("%d,%s,%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT ",%d,%d,%d,", c->stages, c->sharding,
                  c->mesh[0], c->mesh[1], c->microbatches, c->remat, c->fits);
          if (c->fits)
            printf ("%.6f,%.1f,%.4f,%.4f,%.4f,%.3f,%.4f\n", c->step_s, c->tokens_per_s, c->formula,
                    c->idle_loops, c->idle_step, c->peak_bytes / gib, ratio);
          else
            printf (",,%.4f,,,%.3f,\n", c->formula, c->peak_bytes / gib);
          continue;
        }
      if (!c->fits)
        continue;
      if (markdown)
        printf ("| %s | %d | %s | %.3f | %.0f | %.1f %% | %.1f %% / %.1f %% | %.2f GiB | %.2f |\n", name,
                c->microbatches, c->remat ? "on" : "off", c->step_s, c->tokens_per_s, 100 * c->formula,
                100 * c->idle_loops, 100 * c->idle_step, c->peak_bytes / gib, ratio);
      else
        printf ("%-22s %5d %5s %10.3f %9.0f %7.1f%% %6.1f%% /%5.1f%% %6.2f GiB %8.2f\n", name,
                c->microbatches, c->remat ? "on" : "off", c->step_s, c->tokens_per_s, 100 * c->formula,
                100 * c->idle_loops, 100 * c->idle_step, c->peak_bytes / gib, ratio);
    }
  if (!csv)
    {
      const char *pre = markdown ? "\n" : "";
      printf ("%s%d of %u configurations fit in HBM (%d of %d pipelined); the others need %.1f to "
              "%.1f GiB per core.\n", pre, n_fit, cfgs->len, n_pipe_fit, n_pipe, min_nofit / gib,
              max_nofit / gib);
      if (best_pipe && ref > 0)
        {
          g_autofree char *bp = config_name (best_pipe);
          printf ("%sBest pipeline: %s, %d microbatches, remat %s: %.0f %% %s than the best 2D "
                  "sharding (the GSPMD paper: its best pipeline, 4 stages x 4 in-layer shards, is "
                  "24 %% slower than 2D on its model).\n", pre, bp, best_pipe->microbatches,
                  best_pipe->remat ? "on" : "off", 100 * fabs (best_pipe->step_s / ref - 1),
                  best_pipe->step_s >= ref ? "slower" : "faster");
        }
    }
  g_array_unref (cfgs);
  return 0;
}

/* The bubble table's Transformer: 8 layers of M = 1024 (H = 4096, 8 heads
 * of 128, gated GELU), S = 256, batch 32, one stage per core of v3-8 (the
 * other cores idle), so K = 8 stages hold one layer each. */
static const char *const bubble_args[] = {
  "--slice", "v3-8", "--layers", "8", "--model-dim", "1024", "--ffn-dim", "4096",
  "--heads", "8", "--head-dim", "128", "--vocab", "32000", "--rel-buckets", "32",
  "--seq-len", "256", "--batch", "32", "--gated-gelu", NULL
};

int
ps_tables_bubble (gboolean csv, gboolean markdown, const PsTablesOptions *o)
{
  GError *error = NULL;
  static const int stages[] = { 1, 2, 4, 8 }, micro[] = { 1, 4, 32 };
  Config rows[12];
  int n = 0;
  for (int k = 0; k < 4; k++)
    for (int m = 0; m < 3; m++)
      {
        Config c = { stages[k], "2d", { 1, 1 }, micro[m], TRUE };
        rows[n] = c;
        progress (o->progress, n, 12, &rows[n]);
        if (!run_config (bubble_args, &rows[n], o, &error))
          {
            progress_done (o->progress);
            g_prefix_error (&error, "%d stages, %d microbatches: ", c.stages, c.microbatches);
            return ps_cli_fail (error);
          }
        n++;
      }
  progress_done (o->progress);
  /* against K times one core's throughput with the whole batch at once */
  const Config *one = &rows[0];
  if (!one->fits)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_NO_FIT, "the one-core row does not fit in HBM");
      return ps_cli_fail (error);
    }
  const double gib = 1024.0 * 1024.0 * 1024.0;
  if (csv)
    puts ("stages,microbatches,cores,fits,step_time_s,tokens_per_s,relative_throughput,bubble_formula,"
          "idle_simulated_of_loops,idle_simulated_of_step,peak_hbm_gib");
  else if (markdown)
    {
      puts ("| stages K | microbatches M | step time (s) | tokens/s | relative throughput | "
            "1 - (K-1)/(M+K-1) | (K-1)/(M+K-1) | simulated idle (of loops / of step) | peak HBM/core |");
      puts ("|---|---|---|---|---|---|---|---|---|");
    }
  else
    printf ("%6s %6s %10s %10s %10s %9s %8s %17s %10s\n", "K", "M", "step (s)", "tokens/s", "relative",
            "1-formula", "formula", "simulated idle", "peak HBM");
  for (int i = 0; i < n; i++)
    {
      const Config *c = &rows[i];
      double rel = c->fits ? c->tokens_per_s / ((double) c->stages * one->tokens_per_s) : 0;
      double peak = c->peak_bytes / gib;
      if (csv && c->fits)
        printf ("%d,%d,%d,1,%.6f,%.1f,%.4f,%.4f,%.4f,%.4f,%.3f\n", c->stages, c->microbatches,
                c->stages, c->step_s, c->tokens_per_s, rel, c->formula, c->idle_loops, c->idle_step, peak);
      else if (csv)
        printf ("%d,%d,%d,0,,,,%.4f,,,%.3f\n", c->stages, c->microbatches, c->stages, c->formula, peak);
      else if (markdown && c->fits)
        printf ("| %d | %d | %.4f | %.0f | %.3f | %.3f | %.1f %% | %.1f %% / %.1f %% | %.2f GiB |\n",
                c->stages, c->microbatches, c->step_s, c->tokens_per_s, rel, 1 - c->formula,
                100 * c->formula, 100 * c->idle_loops, 100 * c->idle_step, peak);
      else if (markdown)
        printf ("| %d | %d | does not fit | | | %.3f | %.1f %% | | %.2f GiB |\n", c->stages,
                c->microbatches, 1 - c->formula, 100 * c->formula, peak);
      else if (c->fits)
        printf ("%6d %6d %10.4f %10.0f %10.3f %9.3f %7.1f%% %7.1f%% /%5.1f%% %6.2f GiB\n", c->stages,
                c->microbatches, c->step_s, c->tokens_per_s, rel, 1 - c->formula, 100 * c->formula,
                100 * c->idle_loops, 100 * c->idle_step, peak);
      else
        printf ("%6d %6d %10s %10s %10s %9.3f %7.1f%% %17s %6.2f GiB\n", c->stages, c->microbatches,
                "no fit", "", "", 1 - c->formula, 100 * c->formula, "", peak);
    }
  return 0;
}

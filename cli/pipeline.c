/* The end-to-end pipeline: see pipeline.h. */
#include "config.h"

#include "cli/pipeline.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "partitioner/analysis/cost.h"
#include "partitioner/ir/cse.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/analysis/lower.h"
#include "partitioner/analysis/memory.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/spmd/spmd.h"
#include "sim/replay.h"
#include "topology/platform.h"

static const char *stage_names[PS_STAGE_COUNT] = {
  "build", "propagate", "partition", "memory", "lower", "simulate"
};

const char *
ps_stage_name (PsStage s)
{
  return stage_names[s];
}

void
ps_pipeline_result_free (PsPipelineResult *r)
{
  if (!r)
    return;
  g_free (r->memory_text);
  if (r->trace)
    ps_trace_free (r->trace);
  if (r->sim)
    ps_replay_result_free (r->sim);
  if (r->platform)
    ps_platform_free (r->platform);
  g_free (r);
}

PsTraceDeviceOrder
ps_pipeline_device_order (const char *name)
{
  if (strcmp (name, "arange_T") == 0)
    return PS_TRACE_ORDER_ARANGE_T;
  if (strcmp (name, "nonpod2d") == 0)
    return PS_TRACE_ORDER_NONPOD2D;
  return PS_TRACE_ORDER_ARANGE;
}

/* The process's peak resident set since the last reset, from /proc (Linux);
 * 0 when unavailable. Resetting lets each stage report its own peak. */
static double
peak_rss_bytes (void)
{
  g_autofree char *status = NULL;
  if (!g_file_get_contents ("/proc/self/status", &status, NULL, NULL))
    return 0;
  const char *p = strstr (status, "VmHWM:");
  if (!p)
    return 0;
  return g_ascii_strtod (p + 6, NULL) * 1024.0;
}

static void
reset_peak_rss (void)
{
  FILE *f = fopen ("/proc/self/clear_refs", "w");
  if (f)
    {
      fputs ("5", f);
      fclose (f);
    }
}

typedef struct {
  const PsPipelineOptions *opts;
  PsPipelineResult *r;
  gint64 t0;
  double cpu0;
  PsStage stage;
} Clock;

/* User + system CPU seconds of the process so far. */
static double
cpu_seconds (void)
{
  struct rusage u;
  if (getrusage (RUSAGE_SELF, &u) != 0)
    return 0;
  return (double) u.ru_utime.tv_sec + (double) u.ru_utime.tv_usec / 1e6
         + (double) u.ru_stime.tv_sec + (double) u.ru_stime.tv_usec / 1e6;
}

static void
stage_begin (Clock *c, PsStage s)
{
  c->stage = s;
  reset_peak_rss ();
  c->t0 = g_get_monotonic_time ();
  c->cpu0 = cpu_seconds ();
  if (c->opts->progress)
    {
      fprintf (stderr, "\r\033[Kpodsim: %s ...", stage_names[s]);
      fflush (stderr);
    }
}

static void
stage_end (Clock *c)
{
  c->r->stage_s[c->stage] = (double) (g_get_monotonic_time () - c->t0) / 1e6;
  c->r->stage_cpu_s[c->stage] = cpu_seconds () - c->cpu0;
  c->r->stage_peak_rss_bytes[c->stage] = peak_rss_bytes ();
  if (c->opts->progress)
    {
      fprintf (stderr, "\r\033[Kpodsim: %s done in %.1f s", stage_names[c->stage],
               c->r->stage_s[c->stage]);
      fflush (stderr);
    }
}

static gboolean
fail_stage (Clock *c, GError **error, GError *local)
{
  if (c->opts->progress)
    fputs ("\r\033[K", stderr);
  if (local->domain == PS_ERROR && (local->code == PS_ERROR_OPTION || local->code == PS_ERROR_NO_FIT))
    g_propagate_error (error, local);
  else
    {
      g_set_error (error, local->domain, local->code, "%s: %s", stage_names[c->stage], local->message);
      g_error_free (local);
    }
  return FALSE;
}

static gboolean
dump_module (const PsModule *m, const char *path, GError **error)
{
  g_autofree char *text = ps_hlo_print (m, NULL);
  return ps_write_file_atomic (path, text, strlen (text), error);
}

PsPipelineResult *
ps_pipeline_run (const PsDenseLmConfig *cfg, const PsPipelineOptions *opts, GError **error)
{
  g_autoptr (PsPipelineResult) r = g_new0 (PsPipelineResult, 1);
  Clock clk = { opts, r, 0, 0, PS_STAGE_BUILD };
  GError *local = NULL;
  const char *slice_name = opts->slice ? opts->slice : cfg->slice;
  if (!slice_name)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--slice is required for a custom model");
      return NULL;
    }
  g_autoptr (PsSlice) slice = ps_slice_new (slice_name, opts->wrap, opts->hw->tensorcores_per_chip, error);
  if (!slice)
    return NULL;
  int64_t n_devices = ps_dense_lm_n_devices (cfg);
  int cores = ps_slice_n_cores (slice);
  if (n_devices > cores || (n_devices < cores && !opts->idle_cores))
    {
      g_autofree char *what = cfg->pipeline_stages > 1
        ? g_strdup_printf ("--pipeline-stages %d x --mesh %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT,
                           cfg->pipeline_stages, cfg->mesh[0], cfg->mesh[1])
        : g_strdup_printf ("--mesh %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, cfg->mesh[0], cfg->mesh[1]);
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s has %" G_GINT64_FORMAT
                   " devices but slice %s has %d cores%s", what, n_devices, slice_name, cores,
                   n_devices < cores ? " (--idle-cores leaves the rest idle)" : "");
      return NULL;
    }

  stage_begin (&clk, PS_STAGE_BUILD);
  g_autoptr (PsModule) m = ps_dense_lm_build (cfg, &r->info, &local);
  if (!m)
    return fail_stage (&clk, error, local), NULL;
  stage_end (&clk);
  if (opts->dump_hlo && !dump_module (m, opts->dump_hlo, error))
    return NULL;

  stage_begin (&clk, PS_STAGE_PROPAGATE);
  PsPropagateOptions popts;
  ps_propagate_options_init (&popts);
  if (!ps_propagate (m, &popts, &local))
    return fail_stage (&clk, error, local), NULL;
  stage_end (&clk);

  stage_begin (&clk, PS_STAGE_PARTITION);
  PsSpmdOptions sopts;
  ps_spmd_options_init (&sopts);
  PsSpmdReport report;
  ps_spmd_report_init (&report);
  sopts.report = &report;
  if (opts->windowed_einsum)
    sopts.windowed_einsum_threshold_bytes = opts->windowed_einsum_threshold_bytes;
  g_autoptr (PsModule) spmd = ps_spmd_partition (m, n_devices, &sopts, &local);
  r->n_fallbacks = report.n_fallbacks;
  r->n_cse_removed = report.n_cse_removed;
  ps_spmd_report_clear (&report);
  if (!spmd)
    return fail_stage (&clk, error, local), NULL;
  r->n_instructions_spmd = spmd->entry->instrs->len;
  if (opts->dump_spmd && !dump_module (spmd, opts->dump_spmd, error))
    return NULL;
  g_clear_pointer (&m, ps_module_free);
  stage_end (&clk);

  stage_begin (&clk, PS_STAGE_MEMORY);
  PsCostOptions copts;
  ps_cost_options_init (&copts);
  g_autoptr (PsCostAnalysis) cost = ps_cost_analyze (spmd, &copts, &local);
  if (!cost)
    return fail_stage (&clk, error, local), NULL;
  g_autoptr (PsMemoryReport) mem = ps_memory_analyze (spmd, cost, &local);
  if (!mem)
    return fail_stage (&clk, error, local), NULL;
  r->peak_hbm_bytes = mem->peak_bytes;
  r->memory_text = ps_memory_report_to_string (mem, 5);
  stage_end (&clk);
  if ((double) mem->peak_bytes > (double) opts->hw->hbm_bytes_per_core)
    {
      if (opts->progress)
        fputs ("\r\033[K", stderr);
      g_autofree char *peak = ps_format_bytes ((double) mem->peak_bytes);
      g_autofree char *cap = ps_format_bytes ((double) opts->hw->hbm_bytes_per_core);
      g_set_error (error, PS_ERROR, PS_ERROR_NO_FIT,
                   "the model does not fit: per-core peak %s exceeds the HBM capacity of %s "
                   "(try %smore --microbatches or a larger slice)", peak, cap,
                   cfg->remat ? "" : "--remat, ");
      return NULL;
    }

  stage_begin (&clk, PS_STAGE_LOWER);
  PsLowerOptions lopts;
  ps_lower_options_init (&lopts);
  lopts.program = cfg->name;
  lopts.n_devices = n_devices;
  g_autofree guint32 *mesh_ids = NULL;
  if (cfg->pipeline_stages > 1)
    {
      /* [stages, in-layer mesh], in the order the model built it */
      int rank;
      int64_t dims[3];
      g_autofree int64_t *ids = ps_dense_lm_program_mesh (cfg, &rank, dims, &local);
      if (!ids)
        return fail_stage (&clk, error, local), NULL;
      lopts.mesh_rank = (guint) rank;
      mesh_ids = g_new (guint32, n_devices);
      for (int i = 0; i < rank; i++)
        lopts.mesh_dims[i] = dims[i];
      for (int64_t i = 0; i < n_devices; i++)
        mesh_ids[i] = (guint32) ids[i];
      lopts.mesh_order = PS_TRACE_ORDER_LIST;
      lopts.mesh_devices = mesh_ids;
    }
  else
    {
      lopts.mesh_rank = 2;
      lopts.mesh_dims[0] = cfg->mesh[0];
      lopts.mesh_dims[1] = cfg->mesh[1];
      lopts.mesh_order = ps_pipeline_device_order (cfg->device_order);
      for (int i = 0; i < 3; i++)
        lopts.mesh_physical[i] = cfg->physical[i];
    }
  lopts.slice = slice_name;
  lopts.async_collectives = opts->async_collectives;
  r->trace = ps_lower_module (spmd, &lopts, &local);
  if (!r->trace)
    return fail_stage (&clk, error, local), NULL;
  if (opts->dump_trace && !ps_trace_write (r->trace, opts->dump_trace, &local))
    return fail_stage (&clk, error, local), NULL;
  g_clear_pointer (&spmd, ps_module_free);
  g_clear_pointer (&cost, ps_cost_analysis_free);
  g_clear_pointer (&mem, ps_memory_report_free);
  stage_end (&clk);

  stage_begin (&clk, PS_STAGE_SIMULATE);
  r->platform = ps_platform_new (slice, opts->hw, &local);
  if (!r->platform)
    return fail_stage (&clk, error, local), NULL;
  PsReplayOptions ropts = { opts->hw, r->platform, opts->no_cache, opts->timeline_devices,
                            opts->n_timeline_devices, opts->collectives };
  r->sim = ps_replay_trace (r->trace, &ropts, &local);
  if (!r->sim)
    return fail_stage (&clk, error, local), NULL;
  stage_end (&clk);
  if (opts->progress)
    fputs ("\r\033[K", stderr);

  double step = r->sim->step_time_s;
  r->tokens_per_s = step > 0 ? (double) r->info.tokens_per_step / step : 0;
  double peak = ps_hardware_peak_flops_per_core (opts->hw) * (double) n_devices;
  r->model_flops_utilization = step > 0 ? r->info.model_flops / (peak * step) : 0;
  return g_steal_pointer (&r);
}

/* The end-to-end pipeline: see pipeline.h. */
#include "config.h"

#include "cli/pipeline.h"
#include "cli/commands.h"
#include "cli/op_times.h"

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
  g_free (r->largest_temp);
  g_free (r->info.mesh.devices);
  if (r->trace)
    ps_trace_free (r->trace);
  if (r->sim)
    ps_replay_result_free (r->sim);
  if (r->platform)
    ps_platform_free (r->platform);
  g_free (r);
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

/* From the replay thread; the main thread only waits for it meanwhile. */
static void
replay_progress (const char *text, gpointer data)
{
  (void) data;
  ps_cli_progress (TRUE, "podsim: simulate: %s", text);
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

/* The annotated module as the build made it. When propagation may choose
 * the entry's shardings, the header says so, so that `podsim run DUMP.hlo`
 * propagates as this run does. */
static gboolean
dump_annotated (PsModule *m, gboolean propagate_entry, const char *path, GError **error)
{
  if (!propagate_entry || m->n_prop_to_output > 0 || m->n_prop_to_params > 0)
    return dump_module (m, path, error);
  gboolean yes = TRUE;
  m->n_prop_to_output = m->n_prop_to_params = 1;
  m->prop_to_output = m->prop_to_params = &yes;
  gboolean ok = dump_module (m, path, error);
  m->n_prop_to_output = m->n_prop_to_params = 0;
  m->prop_to_output = m->prop_to_params = NULL;
  return ok;
}

void
ps_pipeline_no_fit_error (const PsPipelineResult *r, const PsHardware *hw, GError **error)
{
  g_autofree char *peak = ps_format_bytes ((double) r->peak_hbm_bytes);
  g_autofree char *cap = ps_format_bytes ((double) hw->hbm_bytes_per_core);
  g_autofree char *params = ps_format_bytes ((double) r->parameter_bytes);
  g_autofree char *temps = ps_format_bytes ((double) r->temp_peak_bytes);
  double over = (double) r->peak_hbm_bytes - (double) hw->hbm_bytes_per_core;
  g_autofree char *excess = ps_format_bytes (over > 0 ? over : 0);
  /* What would help follows from where the peak's bytes are: parameters
   * (weights, optimizer state) only shrink by spreading them over more
   * cores; temporaries (activations, gradients, their accumulators) by
   * smaller microbatches, rematerialization or more cores. */
  g_autofree char *advice = NULL;
  if ((double) r->parameter_bytes >= (double) hw->hbm_bytes_per_core)
    advice = g_strdup_printf ("the parameters alone take %s: only spreading the weights and "
                              "optimizer state over more cores helps (a larger slice, or "
                              "sharding them over more mesh axes); microbatches and remat "
                              "shrink temporaries only", params);
  else
    {
      g_autofree char *big = ps_format_bytes ((double) r->largest_temp_bytes);
      g_autofree char *largest = r->largest_temp
                                 ? g_strdup_printf ("; the largest is %s, %s", r->largest_temp, big)
                                 : g_strdup ("");
      advice = g_strdup_printf ("parameters %s, temporaries %s at the peak%s: the temporaries "
                                "must shrink by %s (more --microbatches or --remat where the "
                                "model has them shrink activations; more cores shrink both)",
                                params, temps, largest, excess);
    }
  g_set_error (error, PS_ERROR, PS_ERROR_NO_FIT,
               "the model does not fit: per-core peak %s exceeds the HBM capacity of %s "
               "(%s)", peak, cap, advice);
}

/* The replay runs in a thread of its own. SimGrid walks lists of its
 * objects for every finished transfer; allocated in the heap the earlier
 * stages left fragmented, those walks miss the cache: the replay of
 * MoE2048E36L's trace took 2.5 s CPU in `podsim simulate` and 7 to 10 s in
 * `podsim run`, and 9.6 s after 8 million small blocks were freed in a
 * test program, 2.5 s when run in a new thread (glibc gives a new thread a
 * fresh malloc arena). The result is the same. */
typedef struct {
  const PsTrace *trace;
  const PsReplayOptions *opts;
  PsReplayResult *result;
  GError *error;
} ReplayJob;

static gpointer
replay_thread (gpointer data)
{
  ReplayJob *j = data;
  j->result = ps_replay_trace (j->trace, j->opts, &j->error);
  return NULL;
}

PsPipelineResult *
ps_pipeline_run (PsPipelineBuildFn build, gpointer data, const PsPipelineOptions *opts,
                 GError **error)
{
  g_autoptr (PsPipelineResult) r = g_new0 (PsPipelineResult, 1);
  Clock clk = { opts, r, 0, 0, PS_STAGE_BUILD };
  GError *local = NULL;
  const char *slice_name = opts->slice;
  g_autoptr (PsSlice) slice = ps_slice_new (slice_name, opts->wrap, opts->hw->tensorcores_per_chip, error);
  if (!slice)
    return NULL;

  stage_begin (&clk, PS_STAGE_BUILD);
  g_autoptr (PsModule) m = build (data, &r->info, &local);
  if (!m)
    return fail_stage (&clk, error, local), NULL;
  stage_end (&clk);
  int64_t n_devices = 1;
  for (guint i = 0; i < r->info.mesh.rank; i++)
    n_devices *= r->info.mesh.dims[i];
  int cores = ps_slice_n_cores (slice);
  if (n_devices > cores || (n_devices < cores && !opts->idle_cores && !r->info.uses_first_cores))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "the program's mesh has %" G_GINT64_FORMAT
                   " devices but slice %s has %d cores%s", n_devices, slice_name, cores,
                   n_devices < cores ? " (--idle-cores leaves the rest idle)" : "");
      return NULL;
    }
  if (opts->dump_hlo && !dump_annotated (m, !r->info.keep_entry_shardings, opts->dump_hlo, error))
    return NULL;

  stage_begin (&clk, PS_STAGE_PROPAGATE);
  PsPropagateOptions popts;
  if (r->info.keep_entry_shardings)
    ps_cli_propagate_options (&popts, m, FALSE, FALSE);
  else
    ps_propagate_options_init (&popts);
  if (!r->info.already_partitioned && !ps_propagate (m, &popts, &local))
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
  /* A per-device program from a file is lowered as it is. */
  g_autoptr (PsModule) spmd = r->info.already_partitioned ? g_steal_pointer (&m)
                              : ps_spmd_partition (m, n_devices, &sopts, &local);
  r->n_fallbacks = report.n_fallbacks;
  r->n_cse_removed = report.n_cse_removed;
  ps_spmd_report_clear (&report);
  if (!spmd)
    return fail_stage (&clk, error, local), NULL;
  r->n_instructions_spmd = spmd->entry->instrs->len;
  /* Instruction -> op_name, while the partitioned module is alive. */
  g_autoptr (GHashTable) op_names = opts->op_groups ? ps_op_names_table (spmd) : NULL;
  if (opts->dump_spmd && !dump_module (spmd, opts->dump_spmd, error))
    return NULL;
  g_clear_pointer (&m, ps_module_free);
  stage_end (&clk);

  stage_begin (&clk, PS_STAGE_MEMORY);
  PsCostOptions copts;
  ps_cost_options_init (&copts);
  copts.default_trip_count = r->info.default_trip_count;
  copts.fusion = opts->fusion;
  g_autoptr (PsCostAnalysis) cost = ps_cost_analyze (spmd, &copts, &local);
  if (!cost)
    return fail_stage (&clk, error, local), NULL;
  PsScheduleOptions schopts = { opts->async_collectives ? PS_SCHEDULE_EAGER : opts->schedule,
                                opts->hw->hbm_bytes_per_core };
  g_autoptr (PsSchedule) sched = ps_schedule_module (spmd, cost, &schopts, &local);
  if (!sched)
    return fail_stage (&clk, error, local), NULL;
  r->schedule = sched->policy;
  r->n_async = sched->n_async;
  r->n_reverted = sched->n_reverted;
  const PsMemoryReport *mem = sched->memory;
  r->peak_hbm_bytes = mem->peak_bytes;
  r->memory_text = ps_memory_report_to_string (mem, 5);
  r->parameter_bytes = mem->parameter_bytes;
  r->temp_peak_bytes = mem->temp_peak_bytes;
  for (guint i = 0; i < mem->holders->len && !r->largest_temp; i++)
    {
      const PsMemoryHolder *h = &g_array_index (mem->holders, PsMemoryHolder, i);
      if (h->instr && h->instr->opcode != PS_OP_PARAMETER)
        {
          r->largest_temp = g_strdup (h->instr->name);
          r->largest_temp_bytes = h->bytes;
        }
    }
  stage_end (&clk);
  r->fits = (double) mem->peak_bytes <= (double) opts->hw->hbm_bytes_per_core;
  if (!r->fits || opts->memory_only)
    {
      if (opts->progress)
        fputs ("\r\033[K", stderr);
      return g_steal_pointer (&r);
    }

  stage_begin (&clk, PS_STAGE_LOWER);
  PsLowerOptions lopts;
  ps_lower_options_init (&lopts);
  lopts.default_trip_count = r->info.default_trip_count;
  lopts.program = opts->program;
  lopts.n_devices = n_devices;
  lopts.mesh_rank = r->info.mesh.rank;
  for (guint i = 0; i < r->info.mesh.rank; i++)
    lopts.mesh_dims[i] = r->info.mesh.dims[i];
  lopts.mesh_order = r->info.mesh.order;
  lopts.mesh_devices = r->info.mesh.devices;
  for (int i = 0; i < 3; i++)
    lopts.mesh_physical[i] = r->info.mesh.physical[i];
  lopts.slice = slice_name;
  lopts.schedule = sched;
  lopts.fusion = opts->fusion;
  r->trace = ps_lower_module (spmd, &lopts, &local);
  if (!r->trace)
    return fail_stage (&clk, error, local), NULL;
  if (opts->dump_trace && !ps_trace_write (r->trace, opts->dump_trace, &local))
    return fail_stage (&clk, error, local), NULL;
  g_clear_pointer (&sched, ps_schedule_free);
  g_clear_pointer (&spmd, ps_module_free);
  g_clear_pointer (&cost, ps_cost_analysis_free);
  stage_end (&clk);

  stage_begin (&clk, PS_STAGE_SIMULATE);
  r->platform = ps_platform_new (slice, opts->hw, &local);
  if (!r->platform)
    return fail_stage (&clk, error, local), NULL;
  PsReplayOptions ropts = { opts->hw, r->platform, opts->no_cache, opts->timeline_devices,
                            opts->n_timeline_devices, opts->collectives,
                            opts->progress ? replay_progress : NULL, NULL };
  ReplayJob job = { r->trace, &ropts, NULL, NULL };
  g_thread_join (g_thread_new ("replay", replay_thread, &job));
  r->sim = job.result;
  if (!r->sim)
    return fail_stage (&clk, error, job.error), NULL;
  stage_end (&clk);
  if (opts->progress)
    fputs ("\r\033[K", stderr);

  for (int g = 0; opts->op_groups && g < PS_PIPELINE_MAX_OP_GROUPS && opts->op_groups[g].key; g++)
    {
      r->op_group_s[g] = ps_op_times_compute (r->trace, opts->hw, op_names, opts->op_groups[g].prefixes);
      r->n_op_groups = g + 1;
    }
  for (guint i = 0; i < r->sim->collectives->len; i++)
    {
      const PsCollectiveStat *cs = &g_array_index (r->sim->collectives, PsCollectiveStat, i);
      if (strcmp (cs->kind, "all-to-all") == 0)
        {
          r->alltoall_s += cs->total_s;
          r->n_alltoall += cs->count;
        }
    }
  double step = r->sim->step_time_s;
  r->items_per_s = step > 0 ? r->info.items_per_step / step : 0;
  double peak = ps_hardware_peak_flops_per_core (opts->hw) * (double) n_devices;
  r->model_flops_utilization = step > 0 ? r->info.model_flops / (peak * step) : 0;
  return g_steal_pointer (&r);
}

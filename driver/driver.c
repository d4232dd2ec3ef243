/* The stage sequence: see driver.h. */
#include "config.h"

#include "driver/driver.h"
#include "driver/op_times.h"

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
ps_driver_options_init (PsDriverOptions *o)
{
  memset (o, 0, sizeof *o);
  o->stop_after = PS_STAGE_SIMULATE;
}

void
ps_driver_result_free (PsDriverResult *r)
{
  if (!r)
    return;
  g_free (r->memory_text);
  g_free (r->cost_text);
  g_free (r->largest_temp);
  g_free (r->info.mesh.devices);
  if (r->module)
    ps_module_free (r->module);
  if (r->spmd)
    ps_module_free (r->spmd);
  ps_spmd_report_clear (&r->spmd_report);
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
  const PsDriverOptions *opts;
  PsDriverResult *r;
  gint64 t0;
  double cpu0;
  PsStage stage;
  PsStage *failed;
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
  ps_progress (TRUE, "podsim: simulate: %s", text);
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

static void
end_progress (Clock *c)
{
  if (c->opts->progress)
    fputs ("\r\033[K", stderr);
}

static gboolean
fail_stage (Clock *c, GError **error, GError *local)
{
  end_progress (c);
  if (c->failed)
    *c->failed = c->stage;
  if (!c->opts->name_stage_in_errors
      || (local->domain == PS_ERROR && (local->code == PS_ERROR_OPTION || local->code == PS_ERROR_NO_FIT)))
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
ps_driver_no_fit_error (const PsDriverResult *r, const PsHardware *hw, GError **error)
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

PsModule *
ps_driver_build_family (gpointer family, PsModelInfo *info, GError **error)
{
  const PsDriverFamily *b = family;
  const PsModelFamily *f = ps_params_family (b->params);
  if (f->check && !f->check (b->params, &b->target->model, error))
    return NULL;
  return f->build (b->params, &b->target->model, info, error);
}

void
ps_driver_options_init_family (PsDriverOptions *o, PsDriverFamily *family, const char *program)
{
  ps_driver_options_init (o);
  o->build = ps_driver_build_family;
  o->build_data = family;
  o->program = program;
  o->target = family->target;
  o->name_stage_in_errors = TRUE;
  o->op_groups = ps_params_family (family->params)->op_groups;
}

/* ---- the stages ------------------------------------------------------------------- */

void
ps_driver_propagate_options (PsPropagateOptions *o, const PsModule *m, gboolean to_output,
                             gboolean to_parameters)
{
  static const gboolean yes = TRUE, no = FALSE;
  ps_propagate_options_init (o);
  o->n_to_output = 1;
  o->to_output = to_output ? &yes : &no;
  if (!to_output && m->n_prop_to_output > 0)
    {
      o->n_to_output = m->n_prop_to_output;
      o->to_output = m->prop_to_output;
    }
  o->n_to_parameters = 1;
  o->to_parameters = to_parameters ? &yes : &no;
  if (!to_parameters && m->n_prop_to_params > 0)
    {
      o->n_to_parameters = m->n_prop_to_params;
      o->to_parameters = m->prop_to_params;
    }
}

gboolean
ps_driver_propagate (PsModule *m, gboolean keep_entry, gboolean to_output, gboolean to_parameters,
                     GError **error)
{
  PsPropagateOptions popts;
  if (keep_entry)
    ps_driver_propagate_options (&popts, m, to_output, to_parameters);
  else
    ps_propagate_options_init (&popts);
  return ps_propagate (m, &popts, error);
}

PsModule *
ps_driver_partition (const PsModule *m, int64_t n_devices, const PsSpmdOptions *opts, GError **error)
{
  return ps_spmd_partition (m, n_devices, opts, error);
}

PsSchedule *
ps_driver_schedule (const PsModule *spmd, PsSchedulePolicy policy, uint64_t hbm_budget_bytes,
                    PsFusionMode fusion, PsTilingMode tiling, int64_t default_trip_count,
                    PsCostAnalysis **cost_out, GError **error)
{
  PsCostOptions copts;
  ps_cost_options_init (&copts);
  copts.default_trip_count = default_trip_count;
  copts.fusion = fusion;
  copts.tiling = tiling;
  g_autoptr (PsCostAnalysis) cost = ps_cost_analyze (spmd, &copts, error);
  if (!cost)
    return NULL;
  PsScheduleOptions schopts = { policy, hbm_budget_bytes };
  PsSchedule *sched = ps_schedule_module (spmd, cost, &schopts, error);
  if (sched && cost_out)
    *cost_out = g_steal_pointer (&cost);
  return sched;
}

static void
lower_options (PsLowerOptions *lopts, const PsSchedule *schedule, const PsTraceMesh *mesh, int64_t n_devices,
               const char *program, const char *slice, PsFusionMode fusion, PsTilingMode tiling,
               int64_t default_trip_count)
{
  ps_lower_options_init (lopts);
  lopts->default_trip_count = default_trip_count;
  lopts->fusion = fusion;
  lopts->tiling = tiling;
  lopts->program = program;
  lopts->n_devices = n_devices;
  lopts->mesh = mesh;
  lopts->slice = slice;
  lopts->schedule = schedule;
}

PsTrace *
ps_driver_lower (const PsModule *spmd, const PsSchedule *schedule, const PsTraceMesh *mesh,
                 int64_t n_devices, const char *program, const char *slice, PsFusionMode fusion,
                 PsTilingMode tiling, int64_t default_trip_count, GError **error)
{
  PsLowerOptions lopts;
  /* With a schedule the memory events are its analysis's, tiled as that
   * was made; without one the lowering's own memory analysis sizes the
   * buffers, and it must size them as asked, not always `best`. */
  lower_options (&lopts, schedule, mesh, n_devices, program, slice, fusion, tiling,
                 default_trip_count);
  return ps_lower_module (spmd, &lopts, error);
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

PsReplayResult *
ps_driver_simulate (const PsTrace *trace, const PsReplayOptions *opts, GError **error)
{
  ReplayJob job = { trace, opts, NULL, NULL };
  g_thread_join (g_thread_new ("replay", replay_thread, &job));
  if (!job.result)
    g_propagate_error (error, job.error);
  return job.result;
}

/* ---- the sequence ----------------------------------------------------------------- */

/* What ps_driver_run computes after the replay: the family's parts of the
 * step, the all-to-all time, throughput and utilization. */
static void
summarize (PsDriverResult *r, const PsDriverOptions *opts, GHashTable *op_names)
{
  for (int g = 0; opts->op_groups && g < PS_DRIVER_MAX_OP_GROUPS && opts->op_groups[g].key; g++)
    {
      r->op_group_s[g] = ps_op_times_compute (r->trace, opts->target->hw, op_names, opts->op_groups[g].prefixes);
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
  double peak = ps_hardware_peak_flops_per_core (opts->target->hw) * (double) r->n_devices;
  r->model_flops_utilization = step > 0 ? r->info.model_flops / (peak * step) : 0;
}

/* The partition the next ps_driver_run of this process starts from. */
static PsDriverResult *resume_next;

void
ps_driver_resume_next (PsDriverResult *partitioned)
{
  g_return_if_fail (partitioned == NULL || partitioned->spmd != NULL);
  g_clear_pointer (&resume_next, ps_driver_result_free);
  resume_next = partitioned;
}

PsDriverResult *
ps_driver_run (const PsDriverOptions *opts, PsStage *failed, GError **error)
{
  g_return_val_if_fail ((opts->build != NULL) != (opts->module != NULL), NULL);
  const PsTarget *target = opts->target;
  g_return_val_if_fail ((target && target->hw) || opts->stop_after < PS_STAGE_MEMORY, NULL);
  const PsSlice *slice = target ? target->slice : NULL;
  g_autoptr (PsDriverResult) r = g_new0 (PsDriverResult, 1);
  ps_spmd_report_init (&r->spmd_report);
  Clock clk = { opts, r, 0, 0, PS_STAGE_BUILD, failed };
  GError *local = NULL;

  /* A run resumed from another's partition (ps_driver_resume_next)
   * starts after the partition stage with that run's program. */
  g_autoptr (PsDriverResult) resumed = g_steal_pointer (&resume_next);
  g_autoptr (PsModule) built = NULL;
  PsModule *m = opts->module;
  if (resumed)
    {
      r->info = resumed->info;
      memset (&resumed->info, 0, sizeof resumed->info);
      ps_spmd_report_clear (&r->spmd_report);
      r->spmd_report = resumed->spmd_report;
      memset (&resumed->spmd_report, 0, sizeof resumed->spmd_report);
    }
  else
    {
      stage_begin (&clk, PS_STAGE_BUILD);
      if (opts->build)
        {
          m = built = opts->build (opts->build_data, &r->info, &local);
          if (!m)
            return fail_stage (&clk, error, local), NULL;
        }
      else
        r->info.keep_entry_shardings = TRUE;
      stage_end (&clk);
    }
  int64_t n_devices = opts->n_devices;
  if (opts->build)
    {
      n_devices = 1;
      for (guint i = 0; i < r->info.mesh.rank; i++)
        n_devices *= r->info.mesh.dims[i];
    }
  r->n_devices = n_devices;
  if (slice)
    {
      int cores = ps_slice_n_cores (slice);
      if (n_devices > cores || (n_devices < cores && !target->idle_cores && !r->info.uses_first_cores))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "the program's mesh has %" G_GINT64_FORMAT
                       " devices but slice %s has %d cores%s", n_devices, slice->name, cores,
                       n_devices < cores ? " (--idle-cores leaves the rest idle)" : "");
          if (failed)
            *failed = PS_STAGE_BUILD;
          end_progress (&clk);
          return NULL;
        }
    }
  if (!resumed && opts->dump_hlo && !dump_annotated (m, !r->info.keep_entry_shardings, opts->dump_hlo, error))
    return NULL;

  int64_t trips = opts->build ? r->info.default_trip_count : opts->default_trip_count;
  /* A per-device program from a file is lowered as it is. */
  gboolean partitioned = opts->build ? r->info.already_partitioned : opts->partitioned;
  if (!resumed && !opts->skip_propagate && !partitioned)
    {
      stage_begin (&clk, PS_STAGE_PROPAGATE);
      if (!ps_driver_propagate (m, r->info.keep_entry_shardings, opts->to_output, opts->to_parameters,
                                &local))
        return fail_stage (&clk, error, local), NULL;
      stage_end (&clk);
    }
  if (opts->stop_after < PS_STAGE_PARTITION)
    {
      end_progress (&clk);
      if (opts->keep_module)
        r->module = built ? g_steal_pointer (&built) : NULL;
      return g_steal_pointer (&r);
    }

  stage_begin (&clk, PS_STAGE_PARTITION);
  PsSpmdOptions sopts;
  if (opts->spmd)
    sopts = *opts->spmd;
  else
    ps_spmd_options_init (&sopts);
  sopts.report = &r->spmd_report;
  if (target && target->windowed_einsum >= 0)
    sopts.windowed_einsum_threshold_bytes = target->windowed_einsum;
  /* A per-device module given as input stays the caller's: `spmd` owns
   * what this run made, `prog` is what the later stages read. */
  g_autoptr (PsModule) spmd = resumed ? g_steal_pointer (&resumed->spmd)
                              : !partitioned ? ps_driver_partition (m, n_devices, &sopts, &local)
                              : built ? g_steal_pointer (&built) : NULL;
  const PsModule *prog = partitioned && !spmd ? m : spmd;
  r->n_fallbacks = r->spmd_report.n_fallbacks;
  r->n_cse_removed = r->spmd_report.n_cse_removed;
  if (!prog)
    return fail_stage (&clk, error, local), NULL;
  r->n_instructions_spmd = prog->entry->instrs->len;
  /* Instruction -> op_name, while the partitioned module is alive. */
  g_autoptr (GHashTable) op_names = opts->op_groups ? ps_op_names_table (prog) : NULL;
  if (opts->dump_spmd && !dump_module (prog, opts->dump_spmd, error))
    {
      end_progress (&clk);
      return NULL;
    }
  /* The single-device module is not needed past here: a large build frees
   * its memory before the memory stage's peak. */
  if (opts->keep_module)
    r->module = built ? g_steal_pointer (&built) : NULL;
  else
    g_clear_pointer (&built, ps_module_free);
  stage_end (&clk);
  if (opts->stop_after < PS_STAGE_MEMORY)
    {
      end_progress (&clk);
      if (opts->keep_spmd)
        r->spmd = g_steal_pointer (&spmd);
      return g_steal_pointer (&r);
    }

  stage_begin (&clk, PS_STAGE_MEMORY);
  g_autoptr (PsCostAnalysis) cost = NULL;
  const PsHardware *hw = target->hw;
  g_autoptr (PsSchedule) sched = ps_driver_schedule (prog, target->schedule, hw->hbm_bytes_per_core,
                                                     target->fusion, target->tiling, trips, &cost, &local);
  if (!sched)
    return fail_stage (&clk, error, local), NULL;
  if (opts->keep_cost_text)
    r->cost_text = ps_cost_report (cost);
  r->schedule = sched->policy;
  r->n_async = sched->n_async;
  r->n_reverted = sched->n_reverted;
  const PsMemoryReport *mem = sched->memory;
  r->peak_hbm_bytes = mem->peak_bytes;
  r->memory_text = ps_memory_report_to_string (mem, opts->memory_holders > 0 ? opts->memory_holders : 5);
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
  r->fits = (double) mem->peak_bytes <= (double) hw->hbm_bytes_per_core;
  if ((!r->fits && !opts->lower_past_no_fit) || opts->stop_after < PS_STAGE_LOWER)
    {
      end_progress (&clk);
      g_clear_pointer (&sched, ps_schedule_free);
      if (opts->keep_spmd)
        r->spmd = g_steal_pointer (&spmd);
      return g_steal_pointer (&r);
    }

  stage_begin (&clk, PS_STAGE_LOWER);
  PsLowerOptions lopts;
  lower_options (&lopts, sched, opts->build ? &r->info.mesh : opts->mesh, n_devices, opts->program,
                 slice ? slice->name : NULL, target->fusion, target->tiling, trips);
  lopts.unroll_loops = opts->unroll_loops;
  lopts.memory_events = !opts->no_memory_events;
  r->trace = ps_lower_module (prog, &lopts, &local);
  if (!r->trace)
    return fail_stage (&clk, error, local), NULL;
  if (opts->dump_trace && !ps_trace_write (r->trace, opts->dump_trace, &local))
    return fail_stage (&clk, error, local), NULL;
  g_clear_pointer (&sched, ps_schedule_free);
  if (opts->keep_spmd)
    r->spmd = g_steal_pointer (&spmd);
  else
    g_clear_pointer (&spmd, ps_module_free);
  g_clear_pointer (&cost, ps_cost_analysis_free);
  stage_end (&clk);
  if (opts->stop_after < PS_STAGE_SIMULATE)
    {
      end_progress (&clk);
      return g_steal_pointer (&r);
    }

  stage_begin (&clk, PS_STAGE_SIMULATE);
  g_return_val_if_fail (slice != NULL, NULL);
  r->platform = ps_platform_new (slice, hw, &local);
  if (!r->platform)
    return fail_stage (&clk, error, local), NULL;
  PsReplayOptions ropts = { hw, r->platform, !target->cache, opts->timeline_devices, opts->n_timeline_devices,
                            target->collectives, opts->progress ? replay_progress : NULL, NULL };
  r->sim = ps_driver_simulate (r->trace, &ropts, &local);
  if (!r->sim)
    return fail_stage (&clk, error, local), NULL;
  stage_end (&clk);
  end_progress (&clk);
  summarize (r, opts, op_names);
  return g_steal_pointer (&r);
}

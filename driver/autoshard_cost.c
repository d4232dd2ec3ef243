/* podsim autoshard's cheap cost (driver/autoshard.h): the pipeline run in
 * this process up to the lowered trace, which is then costed with the
 * replay's own models but without SimGrid, so that thousands of
 * candidates can be ranked where the full run (one child process each,
 * SimGrid runs one engine per process) costs each several times more. */
#include "driver/autoshard.h"

#include <string.h>

#include "common/error.h"
#include "driver/driver.h"
#include "driver/target.h"
#include "sim/collectives.h"
#include "sim/compute.h"
#include "topology/platform.h"
#include "topology/slice.h"

struct PsAutoshardCost {
  PsParams *params;          /* the search's, copied */
  PsTarget *target;
  PsPlatform *platform;
  PsDeviceAssignment *assignment;
  GHashTable *coll_s;        /* "kind|bytes|groups" -> double* seconds */
  int n_runs;
  gboolean past_no_fit;      /* the step also of a program that does not fit */
};

void
ps_autoshard_cost_free (PsAutoshardCost *c)
{
  if (!c)
    return;
  if (c->params)
    ps_params_free (c->params);
  if (c->target)
    ps_target_free (c->target);
  if (c->platform)
    ps_platform_free (c->platform);
  if (c->assignment)
    ps_device_assignment_free (c->assignment);
  if (c->coll_s)
    g_hash_table_unref (c->coll_s);
  g_free (c);
}

PsAutoshardCost *
ps_autoshard_cost_new (const PsParams *p, GError **error)
{
  g_autoptr (PsAutoshardCost) c = g_new0 (PsAutoshardCost, 1);
  c->params = ps_params_copy (p);
  c->coll_s = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  if (!(c->target = ps_target_from_params (c->params, error)))
    return NULL;
  if (!c->target->slice)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--slice: autoshard needs a slice to cost collectives on");
      return NULL;
    }
  if (!(c->platform = ps_platform_new (c->target->slice, c->target->hw, error)))
    return NULL;
  return g_steal_pointer (&c);
}

/* One collective's closed-form time on the slice, memoized: the same
 * collective recurs in every layer and in most candidates. */
static gboolean
collective_s (PsAutoshardCost *c, const PsTraceHeader *h, const PsTraceCollective *ev, double *out,
              GError **error)
{
  char *key = ps_coll_trace_key (ev);
  double *hit = g_hash_table_lookup (c->coll_s, key);
  if (hit)
    {
      g_free (key);
      *out = *hit;
      return TRUE;
    }
  if (!c->assignment || c->assignment->n_devices != (int) h->n_devices)
    {
      g_clear_pointer (&c->assignment, ps_device_assignment_free);
      if (!(c->assignment = ps_device_assignment_default (c->target->slice, (int) h->n_devices, error)))
        {
          g_free (key);
          return FALSE;
        }
    }
  g_autoptr (PsCollPlan) plan = ps_coll_plan_for_trace (c->platform, c->target->collectives, h, ev,
                                                        c->assignment->core_of_device,
                                                        c->target->hw->collective_launch_overhead_s, error);
  if (!plan)
    {
      g_free (key);
      return FALSE;
    }
  *out = ps_coll_plan_time_bound (plan);
  g_hash_table_insert (c->coll_s, key, g_memdup2 (out, sizeof *out));
  return TRUE;
}

/* Compute and communication seconds per core of one step: every event
 * costed on its own, loops counted by their trips, nothing overlapped
 * (XLA's default schedule runs collectives synchronously; with
 * --async-collectives this is an upper bound). */
static gboolean
trace_cost (PsAutoshardCost *c, const PsTrace *trace, PsAutoshardEstimate *e, GError **error)
{
  const PsTraceHeader *h = ps_trace_get_header (trace);
  double mult[PS_TRACE_MAX_LOOP_DEPTH + 1] = { 1 };
  int depth = 0;
  guint64 n = ps_trace_n_events (trace);
  for (guint64 i = 0; i < n; i++)
    {
      const PsTraceEvent *ev = ps_trace_get_event (trace, i);
      if (ev->kind == PS_TRACE_EVENT_LOOP && depth < PS_TRACE_MAX_LOOP_DEPTH)
        {
          depth++;
          mult[depth] = mult[depth - 1] * (double) ev->trips;
        }
      else if (ev->kind == PS_TRACE_EVENT_END_LOOP && depth > 0)
        depth--;
      else if (ev->kind == PS_TRACE_EVENT_COMPUTE)
        {
          PsComputeOp op = ps_compute_op_from_trace (&ev->compute);
          e->compute_s += mult[depth] * ps_compute_op (c->target->hw, &op).time_s;
        }
      else if (ev->kind == PS_TRACE_EVENT_COLLECTIVE)
        {
          double t;
          if (!collective_s (c, h, &ev->collective, &t, error))
            return FALSE;
          e->communication_s += mult[depth] * t;
        }
    }
  e->step_time_s = e->compute_s + e->communication_s;
  return TRUE;
}

static gboolean
estimate (PsAutoshardCost *c, const char *shard, PsAutoshardEstimate *e, GError **error)
{
  g_autoptr (PsParams) q = ps_params_copy (c->params);
  if (!ps_params_set (q, "shard", shard, "autoshard", error))
    return FALSE;
  PsDriverFamily fb = { q, c->target };
  PsDriverOptions d;
  ps_driver_options_init (&d);
  d.build = ps_driver_build_family;
  d.build_data = &fb;
  d.target = c->target;
  d.stop_after = PS_STAGE_LOWER;
  d.name_stage_in_errors = TRUE;
  d.lower_past_no_fit = c->past_no_fit;
  c->n_runs++;
  g_autoptr (PsDriverResult) r = ps_driver_run (&d, NULL, error);
  if (!r)
    return FALSE;
  e->fits = r->fits;
  e->peak_hbm_bytes = r->peak_hbm_bytes;
  return (!r->fits && !c->past_no_fit) || (r->trace && trace_cost (c, r->trace, e, error));
}

gboolean
ps_autoshard_cost_estimate (PsAutoshardCost *c, const char *shard, PsAutoshardEstimate *e)
{
  memset (e, 0, sizeof *e);
  GError *error = NULL;
  e->ran = estimate (c, shard, e, &error);
  if (!e->ran)
    e->why = g_strdup (error ? error->message : "did not lower");
  g_clear_error (&error);
  return e->ran;
}

void
ps_autoshard_cost_set_past_no_fit (PsAutoshardCost *c, gboolean on)
{
  c->past_no_fit = on;
}

guint64
ps_autoshard_cost_hbm_bytes (const PsAutoshardCost *c)
{
  return c->target->hw->hbm_bytes_per_core;
}

int
ps_autoshard_cost_n_runs (const PsAutoshardCost *c)
{
  return c->n_runs;
}

/* Trace replay on SimGrid; see replay.h. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "sim/collectives.h"
#include "sim/compute.h"
#include "sim/replay.h"
#include "sim/sgnet.h"

/* ---- the compiled SPMD program, shared by every actor ------------------ */

typedef enum { OP_SEGMENT, OP_START, OP_DONE, OP_LOOP, OP_END_LOOP } OpKind;

typedef struct {
  OpKind kind;
  int occ;        /* START, DONE: collective occurrence; LOOP: the first
                   * occurrence of its body */
  double dur_s;   /* SEGMENT */
  char *name;     /* SEGMENT: label for the timeline */
  guint64 trips;  /* LOOP */
  int match;      /* LOOP: its END_LOOP; END_LOOP: its LOOP */
  int end_occ;    /* LOOP: one past the last occurrence of its body */
} Op;

typedef struct {
  int plan;
  char *name;
  guint64 runs;   /* times one step runs it (product of enclosing trips) */
} Occurrence;

/* Where a device (or the lock-step replay) is in the loops: the iteration
 * of each enclosing loop, outermost first. */
typedef struct {
  int depth;
  int begin[PS_TRACE_MAX_LOOP_DEPTH + 1];   /* op index of the LOOP */
  guint64 iter[PS_TRACE_MAX_LOOP_DEPTH + 1];
} LoopPos;

typedef struct {
  const PsReplayOptions *opt;
  const char *path;
  char *program;
  int n_devices;
  int *core_of_device;
  GArray *ops;             /* Op */
  GArray *occs;            /* Occurrence */
  GPtrArray *plans;        /* PsCollPlan* */
  GPtrArray *plan_members; /* int[n_groups]: devices per group */
  GArray *plan_total;      /* int: devices in any group of the plan */
  GHashTable *plan_by_key; /* key -> index + 1 */
  GHashTable *occ_by_async;/* async id -> occurrence + 1 */
  gboolean in_segment;
  int segment_ops;
  double peak_mem_bytes;
  double flops;
  guint64 n_compute, n_segments, n_collectives;
  /* While reading: open loops (op indices) and the runs of what is read. */
  int depth;
  int open_loop[PS_TRACE_MAX_LOOP_DEPTH + 1];
  guint64 mult[PS_TRACE_MAX_LOOP_DEPTH + 1];
  guint64 n_loop_iterations;    /* iterations of every loop in one step */
} Program;

static void
program_clear (Program *p)
{
  if (p->ops)
    {
      for (guint i = 0; i < p->ops->len; i++)
        g_free (g_array_index (p->ops, Op, i).name);
      g_array_unref (p->ops);
    }
  if (p->occs)
    {
      for (guint i = 0; i < p->occs->len; i++)
        g_free (g_array_index (p->occs, Occurrence, i).name);
      g_array_unref (p->occs);
    }
  if (p->plans)
    g_ptr_array_unref (p->plans);
  if (p->plan_members)
    g_ptr_array_unref (p->plan_members);
  if (p->plan_total)
    g_array_unref (p->plan_total);
  if (p->plan_by_key)
    g_hash_table_unref (p->plan_by_key);
  if (p->occ_by_async)
    g_hash_table_unref (p->occ_by_async);
  g_free (p->core_of_device);
  g_free (p->program);
}

static gboolean
program_begin (Program *p, const char *path, const PsTraceHeader *h, const PsReplayOptions *opt,
               GError **error)
{
  const PsSlice *s = &opt->platform->slice;
  int cores = ps_slice_n_cores (s);
  memset (p, 0, sizeof *p);
  p->opt = opt;
  p->path = path;
  p->program = g_strdup (h->program ? h->program : "");
  if (h->n_devices > (guint64) cores)
    {
      ps_set_error_at (error, PS_ERROR_INVALID, path, 0, 0,
                       "the trace's mesh has %" G_GUINT64_FORMAT " devices, more than the %d "
                       "cores of slice %s (%dx%d chips)", h->n_devices, cores, s->name,
                       s->chips_x, s->chips_y);
      return FALSE;
    }
  if (h->mesh.order == PS_TRACE_ORDER_NONPOD2D
      && (h->mesh.physical[0] != s->chips_x || h->mesh.physical[1] != s->chips_y
          || h->mesh.physical[2] != s->cores_per_chip))
    {
      ps_set_error_at (error, PS_ERROR_INVALID, path, 0, 0,
                       "the trace's nonpod2d mesh assumes a %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                       "x%" G_GINT64_FORMAT " physical mesh, slice %s is %dx%dx%d",
                       h->mesh.physical[0], h->mesh.physical[1], h->mesh.physical[2], s->name,
                       s->chips_x, s->chips_y, s->cores_per_chip);
      return FALSE;
    }
  g_autoptr (PsDeviceAssignment) a = ps_device_assignment_default (s, (int) h->n_devices, error);
  if (!a)
    return FALSE;
  p->n_devices = a->n_devices;
  p->core_of_device = g_steal_pointer (&a->core_of_device);
  p->ops = g_array_new (FALSE, TRUE, sizeof (Op));
  p->occs = g_array_new (FALSE, TRUE, sizeof (Occurrence));
  p->plans = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_coll_plan_free);
  p->plan_members = g_ptr_array_new_with_free_func (g_free);
  p->plan_total = g_array_new (FALSE, TRUE, sizeof (int));
  p->plan_by_key = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  p->occ_by_async = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  p->peak_mem_bytes = (double) h->totals.peak_bytes;
  p->mult[0] = 1;
  return TRUE;
}

static int
plan_for (Program *p, const PsTraceHeader *h, const PsTraceCollective *c, GError **error)
{
  char *key = ps_coll_trace_key (c);
  gpointer hit = g_hash_table_lookup (p->plan_by_key, key);
  if (hit)
    {
      g_free (key);
      return GPOINTER_TO_INT (hit) - 1;
    }
  PsCollPlan *plan = ps_coll_plan_for_trace (p->opt->platform, p->opt->collectives, h, c, p->core_of_device,
                                             p->opt->hw->collective_launch_overhead_s, error);
  if (!plan)
    {
      g_free (key);
      return -1;
    }
  int *members = g_new0 (int, plan->n_groups);
  int total = 0;
  for (int d = 0; d < p->n_devices; d++)
    {
      int g = plan->group_of_core[p->core_of_device[d]];
      if (g >= 0)
        {
          members[g]++;
          total++;
        }
    }
  g_array_append_val (p->plan_total, total);
  g_ptr_array_add (p->plans, plan);
  g_ptr_array_add (p->plan_members, members);
  g_hash_table_insert (p->plan_by_key, key, GINT_TO_POINTER (p->plans->len));
  return (int) p->plans->len - 1;
}

static gboolean
program_add (Program *p, const PsTraceHeader *h, const PsTraceEvent *ev, guint64 line,
             GError **error)
{
  /* the reader checked that these products fit 64 bits */
  guint64 runs = p->mult[p->depth];
  switch (ev->kind)
    {
    case PS_TRACE_EVENT_COMPUTE:
      {
        PsComputeOp op = ps_compute_op_from_trace (&ev->compute);
        PsComputeCost cost = ps_compute_op (p->opt->hw, &op);
        if (!p->in_segment)
          {
            Op o = { OP_SEGMENT, -1, 0, g_strdup (ev->name ? ev->name : "compute"), 0, 0, 0 };
            g_array_append_val (p->ops, o);
            p->in_segment = TRUE;
            p->segment_ops = 0;
            p->n_segments += runs;
          }
        Op *seg = &g_array_index (p->ops, Op, p->ops->len - 1);
        seg->dur_s += cost.time_s;
        p->segment_ops++;
        p->flops += (double) ev->compute.flops * (double) runs;
        p->n_compute += runs;
        return TRUE;
      }
    case PS_TRACE_EVENT_LOOP:
      {
        /* Bounded before the per-iteration times are allocated. */
        if (ev->trips > PS_MAX_LOOP_TRIPS)
          {
            ps_set_error_at (error, PS_ERROR_LIMIT, p->path, (int) line, 0, "loop %s has %" G_GUINT64_FORMAT
                             " trips, more than the %" G_GUINT64_FORMAT " podsim simulates (doc/robustness.md)",
                             ev->name ? ev->name : "loop", ev->trips, PS_MAX_LOOP_TRIPS);
            return FALSE;
          }
        /* compute before and after a loop boundary are separate segments */
        p->in_segment = FALSE;
        Op o = { OP_LOOP, (int) p->occs->len, 0, g_strdup (ev->name ? ev->name : "loop"),
                 ev->trips, -1, -1 };
        g_array_append_val (p->ops, o);
        p->depth++;
        p->open_loop[p->depth] = (int) p->ops->len - 1;
        p->mult[p->depth] = runs * ev->trips;
        p->n_loop_iterations += runs * ev->trips;
        return TRUE;
      }
    case PS_TRACE_EVENT_END_LOOP:
      {
        p->in_segment = FALSE;
        int begin = p->open_loop[p->depth--];
        Op o = { OP_END_LOOP, -1, 0, NULL, 0, begin, -1 };
        g_array_append_val (p->ops, o);
        Op *lp = &g_array_index (p->ops, Op, begin);
        lp->match = (int) p->ops->len - 1;
        lp->end_occ = (int) p->occs->len;
        return TRUE;
      }
    case PS_TRACE_EVENT_COLLECTIVE:
      {
        GError *local = NULL;
        int plan = plan_for (p, h, &ev->collective, &local);
        if (plan < 0)
          {
            ps_set_error_at (error, local->code, p->path, (int) line, 0, "%s", local->message);
            g_error_free (local);
            return FALSE;
          }
        p->in_segment = FALSE;
        Occurrence oc = { plan, g_strdup (ev->name ? ev->name
                                          : ps_trace_collective_kind_name (ev->collective.kind)),
                          runs };
        g_array_append_val (p->occs, oc);
        int occ = (int) p->occs->len - 1;
        Op start = { OP_START, occ, 0, NULL, 0, 0, 0 };
        g_array_append_val (p->ops, start);
        if (ev->collective.async_id == 0)
          {
            Op done = { OP_DONE, occ, 0, NULL, 0, 0, 0 };
            g_array_append_val (p->ops, done);
          }
        else
          {
            gint64 *id = g_new (gint64, 1);
            *id = (gint64) ev->collective.async_id;
            g_hash_table_insert (p->occ_by_async, id, GINT_TO_POINTER (occ + 1));
          }
        p->n_collectives += runs;
        return TRUE;
      }
    case PS_TRACE_EVENT_DONE:
      {
        gint64 id = (gint64) ev->async_id;
        int occ = GPOINTER_TO_INT (g_hash_table_lookup (p->occ_by_async, &id)) - 1;
        if (occ < 0)
          {
            ps_set_error_at (error, PS_ERROR_INVALID, p->path, (int) line, 0,
                             "done of async id %" G_GINT64_FORMAT " that never started", id);
            return FALSE;
          }
        g_hash_table_remove (p->occ_by_async, &id);
        p->in_segment = FALSE;
        Op done = { OP_DONE, occ, 0, NULL, 0, 0, 0 };
        g_array_append_val (p->ops, done);
        return TRUE;
      }
    case PS_TRACE_EVENT_MEMORY:
      p->peak_mem_bytes = MAX (p->peak_mem_bytes, (double) ev->live_bytes);
      return TRUE;
    default:
      break;
    }
  return TRUE;
}

/* ---- the run ------------------------------------------------------------- */

/* What set a device's clock (see "chained starts" in contention_update):
 * the completion of group g of run `key` (a run_key) at `end`, plus the
 * compute since; key NULL when no completion did. */
typedef struct {
  gpointer key;
  int g;
  double end;
  int plan;          /* the plan of key's occurrence (for device classes) */
} Dep;

typedef struct {
  double max_arrival;
  int arrived;
  gboolean done;
  double completion;
  GArray *waiters;   /* device ids blocked at DONE */
  Dep dep;           /* the last member to arrive's, its end moved by its
                      * compute to the arrival (dep.end = arrival - compute) */
} Inst;

typedef struct {
  double start_s, dur_s;
  const char *name;
  const char *category;
} Span;

struct Replay;

typedef struct {
  struct Replay *rp;
  int dev, core;
  int idx;           /* in Replay.devs */
  double local_s;
  Dep dep;           /* with the cache: what set local_s */
  PsSgSem *sem;
  double compute_s, comm_s, exposed_s;
  GArray *spans;     /* Span, or NULL when not on the timeline */
  LoopPos pos;       /* without the cache: where this device is */
} Dev;

/* A collective occurrence runs once per iteration of its loops. Members of
 * a group are never two runs apart (a member passes run k's done only once
 * every member arrived at run k, which each did after its run k - 1), so
 * two records per occurrence suffice, by the parity of the run. */
typedef struct Replay {
  Program *prog;
  PsSgNet *net;
  gboolean cache;
  double **group_dur; /* per plan, per group */
  Inst **insts;       /* per occurrence and parity: array of n_groups, lazily */
  int *occ_passed;    /* per occurrence and parity: devices past its DONE */
  double *occ_dur;    /* per occurrence and parity: longest any group took
                       * in this run (arrival of its last member to completion) */
  double *occ_total;  /* per occurrence: summed over its runs */
  guint64 *occ_runs;  /* per occurrence: runs completed */
  double max_completion; /* latest completion of a collective so far */
  guint64 iterations_simulated;
  gboolean hung;      /* a member never arrived (cannot happen in SPMD) */
  Dev *devs;
  int n_devs;         /* entries of devs: every device, or one per class */
  int *dev_of;        /* per device: its entry in devs */
  /* With device classes (see "device classes" below), per plan: the group
   * class of each entry of devs (-1: no part), the classes in each group
   * class, the entries taking part; NULL when every device is replayed. */
  int **cls_group, **cls_members, *cls_total;
  int **cls_real;     /* per plan, per group class: one of its groups */
  int **cls_of_group; /* per plan, per group: its group class */
  int **group_devs;   /* per plan: devices of group g at group_first[plan][g],
                       * ascending; lazily (see record_classes) */
  int **group_first;
  int *run_of;        /* per occurrence and parity: which run of the occurrence
                       * the records hold (counted from 0 as runs begin) */
  int *runs_begun;    /* per occurrence */
  struct Contention *contention; /* with the cache: see "contention" below */
  double t0;          /* the step's start */
  GArray *loops;      /* PsLoopStat of the outermost loops */
} Replay;

static double contention_duration (Replay *rp, int occ, int run, int plan, int g);
static void record_classes (Replay *rp, int occ, int run, int plan, int cg, const Inst *in);
static void contention_record (Replay *rp, int occ, int run, int g, double start, double dur,
                               const Dep *dep);
static gpointer run_key (int occ, int run);

typedef struct {
  Replay *rp;
  int occ, group, parity;
} Helper;

/* Parity of the run of an occurrence at loop position pos (the runs count
 * the iterations of the enclosing loops, innermost fastest). */
static int
run_parity (const Program *p, const LoopPos *pos)
{
  guint64 par = 0;
  for (int d = 1; d <= pos->depth; d++)
    {
      guint64 trips = g_array_index (p->ops, Op, pos->begin[d]).trips;
      par = ((par * (trips & 1)) + (pos->iter[d] & 1)) & 1;
    }
  return (int) par;
}

static Inst *
inst_get (Replay *rp, int occ, int parity, int g)
{
  int k = 2 * occ + parity;
  if (!rp->insts[k])
    {
      const PsCollPlan *plan = rp->prog->plans->pdata[g_array_index (rp->prog->occs, Occurrence, occ).plan];
      rp->insts[k] = g_new0 (Inst, plan->n_groups);
      rp->run_of[k] = rp->runs_begun[occ]++;
    }
  return &rp->insts[k][g];
}

/* Marks a group's collective complete and wakes its waiting members. The
 * waiter list is detached first: a woken actor may run before we return. */
static void
inst_complete (Replay *rp, Inst *in, double completion)
{
  in->completion = completion;
  in->done = TRUE;
  rp->max_completion = MAX (rp->max_completion, completion);
  GArray *w = in->waiters;
  in->waiters = NULL;
  if (!w)
    return;
  g_autofree PsSgSem **sems = g_new (PsSgSem *, w->len + 1);
  guint n = w->len;
  for (guint i = 0; i < n; i++)
    sems[i] = g_array_index (w, PsSgSem *, i);
  g_array_unref (w);
  for (guint i = 0; i < n; i++)
    ps_sgnet_sem_release (sems[i]);
}

static void
helper_actor (void *data)
{
  Helper *h = data;
  Replay *rp = h->rp;
  const PsCollPlan *plan = rp->prog->plans->pdata[g_array_index (rp->prog->occs, Occurrence, h->occ).plan];
  ps_coll_run_group (rp->net, plan, h->group);
  Inst *in = inst_get (rp, h->occ, h->parity, h->group);
  g_free (h);
  inst_complete (rp, in, ps_sgnet_clock ());
}

/* A compute segment on device d. */
static void
dev_segment (Dev *d, const Op *op)
{
  if (d->spans)
    {
      Span s = { d->local_s, op->dur_s, op->name, "compute" };
      g_array_append_val (d->spans, s);
    }
  d->local_s += op->dur_s;
  d->compute_s += op->dur_s;
}

/* Device d arrives at the start of a collective: with the cache, the last
 * member's arrival completes it (its group's duration after the latest
 * arrival); without, it starts a helper actor that runs the flows. */
static void
dev_start (Dev *d, const Op *op, Inst *in, int g, int n_members, int parity)
{
  Replay *rp = d->rp;
  const Occurrence *oc = &g_array_index (rp->prog->occs, Occurrence, op->occ);
  if (!rp->cache)
    ps_sgnet_sleep (d->local_s - ps_sgnet_clock ());
  if (in->arrived == 0 || d->local_s >= in->max_arrival)
    {
      in->dep = d->dep;
      in->dep.end = d->dep.key ? d->dep.end : d->local_s;
    }
  in->max_arrival = MAX (in->max_arrival, d->local_s);
  if (++in->arrived == n_members)
    {
      if (rp->cache)
        {
          int run = rp->run_of[2 * op->occ + parity];
          int real = rp->cls_group ? rp->cls_real[oc->plan][g] : g;
          double dur = contention_duration (rp, op->occ, run, oc->plan, real);
          if (rp->cls_group)
            record_classes (rp, op->occ, run, oc->plan, g, in);
          else
            contention_record (rp, op->occ, run, g, in->max_arrival, dur, &in->dep);
          inst_complete (rp, in, in->max_arrival + dur);
        }
      else
        {
          Helper *h = g_new (Helper, 1);
          *h = (Helper) { rp, op->occ, g, parity };
          ps_sgnet_spawn (rp->net, d->core, "collective", helper_actor, h);
        }
    }
}

/* Device d waits for a completed collective: communication time, exposed
 * time, timeline span; the last device through frees the run's group
 * records and adds the run to the occurrence's totals. */
static void
dev_done (Dev *d, const Op *op, const Inst *in, int parity)
{
  Replay *rp = d->rp;
  Program *p = rp->prog;
  const Occurrence *oc = &g_array_index (p->occs, Occurrence, op->occ);
  int k = 2 * op->occ + parity;
  double start = in->max_arrival, end = in->completion;
  d->comm_s += end - start;
  rp->occ_dur[k] = MAX (rp->occ_dur[k], end - start);
  if (end > d->local_s)
    {
      d->exposed_s += end - d->local_s;
      d->local_s = end;
      if (rp->contention)
        {
          const PsCollPlan *plan = p->plans->pdata[oc->plan];
          d->dep = (Dep) { run_key (op->occ, rp->run_of[k]), plan->group_of_core[d->core], end,
                           oc->plan };
        }
    }
  if (d->spans)
    {
      Span s = { start, end - start, oc->name, "collective" };
      g_array_append_val (d->spans, s);
    }
  int total = rp->cls_group ? rp->cls_total[oc->plan] : g_array_index (p->plan_total, int, oc->plan);
  if (++rp->occ_passed[k] == total)
    {
      g_free (rp->insts[k]);
      rp->insts[k] = NULL;
      rp->occ_passed[k] = 0;
      rp->occ_total[op->occ] += rp->occ_dur[k];
      rp->occ_runs[op->occ]++;
      rp->occ_dur[k] = 0;
    }
}

/* The group of device d in the op's collective, or -1 when d takes no part;
 * *members receives the group's size. */
static int
dev_group (const Dev *d, const Op *op, int *members)
{
  const Program *p = d->rp->prog;
  const Occurrence *oc = &g_array_index (p->occs, Occurrence, op->occ);
  const PsCollPlan *plan = p->plans->pdata[oc->plan];
  const Replay *rp = d->rp;
  if (rp->cls_group)
    {
      int cg = rp->cls_group[oc->plan][d->idx];
      if (cg >= 0)
        *members = rp->cls_members[oc->plan][cg];
      return cg;
    }
  int g = plan->group_of_core[d->core];
  if (g >= 0)
    *members = ((const int *) p->plan_members->pdata[oc->plan])[g];
  return g;
}

/* Runs op (a segment, start or done) on device d as far as it can alone: a
 * compute segment, or its arrival at a collective's start. Returns the
 * group's record when op is a done that d takes part in (the caller waits
 * for its completion, then calls dev_done), NULL otherwise. */
static Inst *
dev_step (Dev *d, const Op *op, int parity)
{
  if (op->kind == OP_SEGMENT)
    {
      dev_segment (d, op);
      return NULL;
    }
  int members = 0, g = dev_group (d, op, &members);
  if (g < 0)
    return NULL;
  Inst *in = inst_get (d->rp, op->occ, parity, g);
  if (op->kind == OP_START)
    {
      dev_start (d, op, in, g, members, parity);
      return NULL;
    }
  return in;
}

/* Without the cache: one actor per device, collectives as flows on the
 * shared network; a member waits on its semaphore until its group's helper
 * actor completes the collective. Every loop iteration is simulated. */
static void
device_actor (void *data)
{
  Dev *d = data;
  Program *p = d->rp->prog;
  LoopPos *pos = &d->pos;
  for (guint i = 0; i < p->ops->len; i++)
    {
      const Op *op = &g_array_index (p->ops, Op, i);
      /* device 0 records the outermost loops' iterations for reports */
      gboolean rec = d->dev == 0 && pos->depth == (op->kind == OP_LOOP ? 0 : 1);
      if (op->kind == OP_LOOP)
        {
          if (op->trips == 0)
            i = (guint) op->match;
          else
            {
              pos->depth++;
              pos->begin[pos->depth] = (int) i;
              pos->iter[pos->depth] = 0;
              if (rec)
                {
                  PsLoopStat st = { g_strdup (op->name), op->trips, d->local_s - d->rp->t0,
                                    g_new0 (double, op->trips) };
                  g_array_append_val (d->rp->loops, st);
                }
            }
          continue;
        }
      if (op->kind == OP_END_LOOP)
        {
          const Op *lp = &g_array_index (p->ops, Op, op->match);
          if (rec)
            {
              PsLoopStat *st = &g_array_index (d->rp->loops, PsLoopStat, d->rp->loops->len - 1);
              st->iteration_end_s[pos->iter[pos->depth]] = d->local_s - d->rp->t0;
            }
          if (++pos->iter[pos->depth] < lp->trips)
            i = (guint) op->match;
          else
            pos->depth--;
          continue;
        }
      int parity = run_parity (p, pos);
      Inst *in = dev_step (d, op, parity);
      if (!in)
        continue;
      if (!in->done)
        {
          if (!in->waiters)
            in->waiters = g_array_new (FALSE, FALSE, sizeof (PsSgSem *));
          g_array_append_val (in->waiters, d->sem);
          ps_sgnet_sem_acquire (d->sem);
        }
      dev_done (d, op, in, parity);
    }
}

static void run_cached_ops (Replay *rp, int begin, int end, LoopPos *pos);

/* What one iteration of a loop added, to repeat it without simulating. */
typedef struct {
  double *start_s, *compute_s, *comm_s, *exposed_s; /* per device, at its start */
  guint *spans;                                     /* per device: spans before it */
  double *occ_total;                                /* per body occurrence */
  guint64 *occ_runs;
} IterMark;

static void
iter_mark (Replay *rp, const Op *lp, IterMark *m)
{
  for (int d = 0; d < rp->n_devs; d++)
    {
      Dev *dv = &rp->devs[d];
      m->start_s[d] = dv->local_s;
      m->compute_s[d] = dv->compute_s;
      m->comm_s[d] = dv->comm_s;
      m->exposed_s[d] = dv->exposed_s;
      m->spans[d] = dv->spans ? dv->spans->len : 0;
    }
  for (int o = lp->occ; o < lp->end_occ; o++)
    {
      m->occ_total[o - lp->occ] = rp->occ_total[o];
      m->occ_runs[o - lp->occ] = rp->occ_runs[o];
    }
}

/* After an iteration that started at m: when every device advanced by the
 * same time and no collective is still in flight, the next iteration
 * starts in the same state shifted in time (the replay depends only on
 * the devices' clocks relative to each other), and so does every later
 * one: the remaining `rest` iterations are added without simulating them.
 * Returns whether it could. */
static gboolean
iter_repeat (Replay *rp, const Op *lp, const IterMark *m, guint64 rest)
{
  int n = rp->n_devs;
  double c = rp->devs[0].local_s - m->start_s[0], first_end = rp->devs[0].local_s;
  for (int d = 0; d < n; d++)
    {
      double adv = rp->devs[d].local_s - m->start_s[d];
      /* clocks of a few seconds: differences at the rounding level */
      if (fabs (adv - c) > 1e-12 * (1.0 + fabs (rp->devs[d].local_s)))
        return FALSE;
      first_end = MIN (first_end, rp->devs[d].local_s);
    }
  if (rp->max_completion > first_end + 1e-12 * (1.0 + fabs (first_end)))
    return FALSE;
  double r = (double) rest;
  for (int d = 0; d < n; d++)
    {
      Dev *dv = &rp->devs[d];
      if (dv->spans)
        {
          guint a = m->spans[d], b = dv->spans->len;
          for (guint64 k = 1; k <= rest; k++)
            for (guint i = a; i < b; i++)
              {
                Span s = g_array_index (dv->spans, Span, i);
                s.start_s += c * (double) k;
                g_array_append_val (dv->spans, s);
              }
        }
      dv->local_s += c * r;
      dv->dep.key = NULL;
      dv->compute_s += (dv->compute_s - m->compute_s[d]) * r;
      dv->comm_s += (dv->comm_s - m->comm_s[d]) * r;
      dv->exposed_s += (dv->exposed_s - m->exposed_s[d]) * r;
    }
  for (int o = lp->occ; o < lp->end_occ; o++)
    {
      rp->occ_total[o] += (rp->occ_total[o] - m->occ_total[o - lp->occ]) * r;
      rp->occ_runs[o] += (rp->occ_runs[o] - m->occ_runs[o - lp->occ]) * rest;
    }
  rp->max_completion += c * r;
  return TRUE;
}

/* A loop in the lock-step replay: iterations are simulated until one
 * repeats exactly (usually the first), the rest are added in one go. */
static void
run_cached_loop (Replay *rp, int at, LoopPos *pos)
{
  const Op *lp = &g_array_index (rp->prog->ops, Op, at);
  if (lp->trips == 0)
    return;
  int n = rp->n_devs, n_occ = lp->end_occ - lp->occ;
  IterMark m = {
    g_new (double, n), g_new (double, n), g_new (double, n), g_new (double, n),
    g_new (guint, n), g_new (double, n_occ + 1), g_new (guint64, n_occ + 1)
  };
  pos->depth++;
  pos->begin[pos->depth] = at;
  /* the outermost loops' iteration ends, for reports */
  PsLoopStat st = { 0 };
  gboolean outer = pos->depth == 1;
  if (outer)
    {
      st.name = g_strdup (lp->name);
      st.trips = lp->trips;
      st.iteration_end_s = g_new0 (double, lp->trips);
      st.start_s = G_MAXDOUBLE;
      for (int d = 0; d < n; d++)
        st.start_s = MIN (st.start_s, rp->devs[d].local_s - rp->t0);
    }
  for (guint64 k = 0; k < lp->trips && !rp->hung; k++)
    {
      pos->iter[pos->depth] = k;
      iter_mark (rp, lp, &m);
      run_cached_ops (rp, at + 1, lp->match, pos);
      rp->iterations_simulated++;
      if (outer)
        {
          double end = 0;
          for (int d = 0; d < n; d++)
            end = MAX (end, rp->devs[d].local_s - rp->t0);
          st.iteration_end_s[k] = end;
        }
      if (k + 1 < lp->trips && !rp->hung)
        {
          double c = rp->devs[0].local_s - m.start_s[0];
          if (iter_repeat (rp, lp, &m, lp->trips - k - 1))
            {
              for (guint64 j = k + 1; outer && j < lp->trips; j++)
                st.iteration_end_s[j] = st.iteration_end_s[k] + c * (double) (j - k);
              break;
            }
        }
    }
  pos->depth--;
  if (outer)
    g_array_append_val (rp->loops, st);
  g_free (m.start_s);
  g_free (m.compute_s);
  g_free (m.comm_s);
  g_free (m.exposed_s);
  g_free (m.spans);
  g_free (m.occ_total);
  g_free (m.occ_runs);
}

/* With the cache, time lives in each device's own clock and a collective
 * completes when its last member arrives, so no actor is needed: every
 * device runs the same op list, and going through it op by op for all
 * devices in turn has every member of a collective arrive before any
 * member waits for it (a start always precedes its done). Same numbers as
 * actors that yield until their group has assembled, without a context
 * switch per device and op. */
static void
run_cached_ops (Replay *rp, int begin, int end, LoopPos *pos)
{
  Program *p = rp->prog;
  for (int i = begin; i < end && !rp->hung; i++)
    {
      const Op *op = &g_array_index (p->ops, Op, i);
      if (op->kind == OP_LOOP)
        {
          run_cached_loop (rp, i, pos);
          i = op->match;
          continue;
        }
      int parity = run_parity (p, pos);
      for (int dv = 0; dv < rp->n_devs; dv++)
        {
          Dev *d = &rp->devs[dv];
          Inst *in = dev_step (d, op, parity);
          if (!in)
            continue;
          if (!in->done)
            {
              rp->hung = TRUE;
              break;
            }
          dev_done (d, op, in, parity);
        }
    }
}

static void
replay_cached (Replay *rp)
{
  LoopPos pos = { 0 };
  run_cached_ops (rp, 0, (int) rp->prog->ops->len, &pos);
}

/* ---- contention with the cache ------------------------------------------
 *
 * With the cache a collective takes the duration it had alone on the idle
 * network. Collectives that are in flight at the same time and cross a
 * common link slow each other down; the no-cache replay sees that because
 * it runs every transfer on one shared network. To see it with the cache
 * too, the replay runs in passes:
 *
 *   1. a pass replays the step with the durations known so far and records
 *      when each group of each run of each collective occurrence started
 *      and ended (a run: one iteration of the loops around it);
 *   2. runs whose intervals overlap and whose plans share a link are joined
 *      (transitively) into clusters;
 *   3. each cluster is simulated on SimGrid as it ran, every group of every
 *      member starting at its recorded offset from the cluster's first
 *      start, and the measured per-group durations replace the cached ones
 *      for those runs; results are cached by the cluster's members (plans)
 *      and offsets (to 1 ps), so the same overlap repeated in every layer
 *      is simulated once;
 *   4. if the clusters (members and offsets) differ from those behind the
 *      durations the pass used, another pass follows.
 *
 * At the fixed point every run's duration is what the shared network gives
 * it together with everything that overlapped it, and runs in different
 * clusters share no link while in flight: the no-cache replay's numbers. A
 * step without overlapping collectives takes one pass. Loop iterations the
 * replay does not simulate (they repeat a simulated one exactly) repeat its
 * overlaps too. */

/* A pass that simulates no new cluster only moves durations already
 * known; 16 of those in a row mean the passes cycle. Every other pass adds
 * a cluster to the cache, and CONTENTION_MAX_PASSES bounds those. */
#define CONTENTION_MAX_STALLED 16
#define CONTENTION_MAX_PASSES 4096

typedef struct {
  int occ, run;
  double start, end;
  double *gstart;        /* per group */
  Dep *gdep;             /* per group: what its start followed */
} OccSpan;

typedef struct {
  int occ, run;
} OccRun;

typedef struct Contention {
  GHashTable *spans;     /* (occ, run) -> OccSpan*, this pass */
  GHashTable *override;  /* (occ, run) -> per-group durations */
  GArray *override_runs; /* OccRun: the keys of override, as inserted */
  guint64 **plan_links;  /* per plan: bitset of the links it uses, lazily */
  int n_words;
  GHashTable *cache;     /* cluster key -> double* (members' groups in order) */
  char *keys;            /* the clusters behind `override` */
  int passes;
  int n_overlapping;     /* runs in clusters at the fixed point */
  int stalled;           /* passes in a row that simulated no new cluster */
  guint n_simulated;     /* clusters simulated on SimGrid */
} Contention;

static gpointer
run_key (int occ, int run)
{
  return GSIZE_TO_POINTER (((gsize) occ << 24) ^ (gsize) run ^ ((gsize) 1 << 62));
}

/* GLib's direct hash keeps the low 32 bits of a pointer, which drops all
 * but the low 8 bits of the occurrence from a run key: with 200,000
 * occurrences (tests/gen_trace's 1 M-event trace) the tables degenerated
 * into long chains and their lookups took 40% of the replay. */
static guint
run_key_hash (gconstpointer key)
{
  guint64 v = (guint64) GPOINTER_TO_SIZE (key);
  v ^= v >> 33;
  v *= G_GUINT64_CONSTANT (0xff51afd7ed558ccd);
  v ^= v >> 33;
  return (guint) v;
}

static void
span_free (gpointer data)
{
  OccSpan *s = data;
  g_free (s->gstart);
  g_free (s->gdep);
  g_free (s);
}

static Contention *
contention_new (const Program *p, const PsPlatform *pf)
{
  Contention *c = g_new0 (Contention, 1);
  c->spans = g_hash_table_new_full (run_key_hash, NULL, NULL, span_free);
  c->override = g_hash_table_new_full (run_key_hash, NULL, NULL, g_free);
  c->override_runs = g_array_new (FALSE, FALSE, sizeof (OccRun));
  c->plan_links = g_new0 (guint64 *, p->plans->len + 1);
  c->n_words = (pf->n_links + 63) / 64;
  c->cache = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  c->keys = g_strdup ("");
  return c;
}

static void
contention_free (Contention *c, guint n_plans)
{
  if (!c)
    return;
  g_hash_table_unref (c->spans);
  g_hash_table_unref (c->override);
  g_array_unref (c->override_runs);
  for (guint i = 0; i < n_plans; i++)
    g_free (c->plan_links[i]);
  g_free (c->plan_links);
  g_hash_table_unref (c->cache);
  g_free (c->keys);
  g_free (c);
}

static double
contention_duration (Replay *rp, int occ, int run, int plan, int g)
{
  const double *o = rp->contention ? g_hash_table_lookup (rp->contention->override,
                                                          run_key (occ, run)) : NULL;
  return o ? o[g] : rp->group_dur[plan][g];
}

static void
contention_record (Replay *rp, int occ, int run, int g, double start, double dur, const Dep *dep)
{
  Contention *c = rp->contention;
  if (!c)
    return;
  OccSpan *s = g_hash_table_lookup (c->spans, run_key (occ, run));
  if (!s)
    {
      const Occurrence *oc = &g_array_index (rp->prog->occs, Occurrence, occ);
      const PsCollPlan *plan = rp->prog->plans->pdata[oc->plan];
      s = g_new0 (OccSpan, 1);
      s->occ = occ;
      s->run = run;
      s->gstart = g_new (double, plan->n_groups);
      s->gdep = g_new0 (Dep, plan->n_groups);
      for (int i = 0; i < plan->n_groups; i++)
        s->gstart[i] = start;
      s->start = start;
      s->end = start + dur;
      g_hash_table_insert (c->spans, run_key (occ, run), s);
    }
  s->gstart[g] = start;
  s->gdep[g] = *dep;
  s->start = MIN (s->start, start);
  s->end = MAX (s->end, start + dur);
}

static int
plan_of (const Replay *rp, int occ)
{
  return g_array_index (rp->prog->occs, Occurrence, occ).plan;
}

static const guint64 *
plan_links (Replay *rp, int plan)
{
  Contention *c = rp->contention;
  if (!c->plan_links[plan])
    {
      const PsCollPlan *pl = rp->prog->plans->pdata[plan];
      guint64 *bits = g_new0 (guint64, c->n_words);
      for (int l = 0; l < pl->platform->n_links; l++)
        if (pl->link_bytes[l] > 0)
          bits[l / 64] |= G_GUINT64_CONSTANT (1) << (l % 64);
      c->plan_links[plan] = bits;
    }
  return c->plan_links[plan];
}

static gboolean
links_meet (Replay *rp, int plan_a, int plan_b)
{
  const guint64 *a = plan_links (rp, plan_a), *b = plan_links (rp, plan_b);
  for (int w = 0; w < rp->contention->n_words; w++)
    if (a[w] & b[w])
      return TRUE;
  return FALSE;
}

static int
uf_find (int *parent, int i)
{
  while (parent[i] != i)
    i = parent[i] = parent[parent[i]];
  return i;
}

static int
cmp_span (gconstpointer a, gconstpointer b)
{
  const OccSpan *x = *(OccSpan *const *) a, *y = *(OccSpan *const *) b;
  if (x->start != y->start)
    return x->start < y->start ? -1 : 1;
  if (x->occ != y->occ)
    return x->occ < y->occ ? -1 : 1;
  return (x->run > y->run) - (x->run < y->run);
}

/* Appends v in decimal, as "%" G_GINT64_FORMAT would: the cluster and
 * class keys are built for every cluster of every pass, and printf's
 * format parsing took a fifth of the 30B async replay (issue 26). */
static void
append_int (GString *k, gint64 v)
{
  char buf[24];
  int n = 0;
  guint64 u = v < 0 ? -(guint64) v : (guint64) v;
  do
    buf[n++] = (char) ('0' + u % 10);
  while ((u /= 10) > 0);
  if (v < 0)
    g_string_append_c (k, '-');
  while (n > 0)
    g_string_append_c (k, buf[--n]);
}

/* The key of a cluster (members in start order): per member its plan and
 * its groups' offsets from the cluster's first start, in ps. */
static char *
cluster_key (Replay *rp, OccSpan *const *mm, int n)
{
  double origin = mm[0]->start;
  GString *k = g_string_new (NULL);
  for (int i = 0; i < n; i++)
    {
      const PsCollPlan *pl = rp->prog->plans->pdata[plan_of (rp, mm[i]->occ)];
      const double *gs = mm[i]->gstart;
      append_int (k, plan_of (rp, mm[i]->occ));
      g_string_append_c (k, ':');
      gboolean same = TRUE;
      for (int g = 1; g < pl->n_groups; g++)
        same = same && gs[g] == gs[0];
      for (int g = 0; g < (same ? 1 : pl->n_groups); g++)
        {
          if (g || same)
            g_string_append_c (k, g ? ',' : '=');
          append_int (k, (gint64) llround ((gs[g] - origin) * 1e12));
        }
      g_string_append_c (k, ';');
    }
  return g_string_free (k, FALSE);
}

/* A cluster's durations for `key`: simulated at its offsets, or chained
 * (see cluster_durations) from a pass that had those offsets. */
static const double *
cache_lookup (Contention *c, const char *key)
{
  const double *d = g_hash_table_lookup (c->cache, key);
  if (!d)
    {
      g_autofree char *held = g_strconcat ("~", key, NULL);
      d = g_hash_table_lookup (c->cache, held);
    }
  return d;
}

/* Per-group durations of a cluster's members, concatenated, from the cache
 * or simulated. transfer none (owned by the cache); takes `key`.
 *
 * Chained starts: a group whose start followed (through the compute of its
 * last member to arrive) the end of a group of an earlier member is
 * simulated as starting that long after that group really ends on the
 * contended network, not at the offset this pass gave it. A pass replays
 * with the durations of the previous one, so a member after a contended
 * one started at an offset computed from that member's idle (or older)
 * duration; simulated at that offset, the cluster came back with other
 * durations, hence other offsets in the next pass, and was simulated again
 * (two or three times per cluster: issue 26's 30B model). Chained, one
 * simulation gives the offsets the next pass replays; its durations are
 * cached under the key of those offsets (as cluster_key() makes it from the
 * simulated starts), which that pass then finds. When the next pass's
 * offsets differ anyway (another member became the last to arrive, or the
 * dependency went through a collective outside the cluster), the cluster
 * is simulated again as before: the fixed point is the same. */
static const double *
cluster_durations (Replay *rp, OccSpan *const *mm, int n, char *key)
{
  Contention *c = rp->contention;
  const double *hit = cache_lookup (c, key);
  if (hit)
    {
      g_free (key);
      return hit;
    }
  double origin = mm[0]->start;
  g_autofree PsCollPlan **plans = g_new (PsCollPlan *, n);
  g_autofree double **offsets = g_new (double *, n);
  g_autofree double **durs = g_new (double *, n);
  g_autofree double **starts = g_new (double *, n);
  g_autofree PsCollChain **chain = g_new (PsCollChain *, n);
  g_autofree int *first = g_new (int, n + 1);
  gboolean chained = FALSE;
  int total = 0;
  for (int i = 0; i < n; i++)
    {
      plans[i] = rp->prog->plans->pdata[plan_of (rp, mm[i]->occ)];
      offsets[i] = g_new (double, plans[i]->n_groups);
      chain[i] = g_new (PsCollChain, plans[i]->n_groups);
      for (int g = 0; g < plans[i]->n_groups; g++)
        {
          offsets[i][g] = mm[i]->gstart[g] - origin;
          chain[i][g] = (PsCollChain) { -1, -1, 0 };
          const Dep *dp = &mm[i]->gdep[g];
          if (!dp->key)
            continue;
          /* members are in start order: a predecessor that ended before
           * this group started is earlier */
          for (int m = 0; m < i; m++)
            if (run_key (mm[m]->occ, mm[m]->run) == dp->key)
              {
                chain[i][g] = (PsCollChain) { m, dp->g, mm[i]->gstart[g] - dp->end };
                chained = TRUE;
                break;
              }
        }
      first[i] = total;
      total += plans[i]->n_groups;
    }
  c->n_simulated++;
  ps_coll_simulate_chained (rp->net, plans, n, (const double *const *) offsets,
                            chained ? (const PsCollChain *const *) chain : NULL, durs, starts);
  double *all = g_new (double, total);
  for (int i = 0; i < n; i++)
    memcpy (all + first[i], durs[i], sizeof (double) * (gsize) plans[i]->n_groups);
  if (chained)
    {
      /* the members as the simulation started them, in start order */
      g_autofree OccSpan *sim = g_new0 (OccSpan, n);
      g_autofree OccSpan **order = g_new (OccSpan *, n);
      for (int i = 0; i < n; i++)
        {
          sim[i] = *mm[i];
          sim[i].gstart = g_new (double, plans[i]->n_groups);
          sim[i].start = G_MAXDOUBLE;
          for (int g = 0; g < plans[i]->n_groups; g++)
            {
              sim[i].gstart[g] = origin + starts[i][g];
              sim[i].start = MIN (sim[i].start, sim[i].gstart[g]);
            }
          /* `end` orders nothing; `run` tells the copy's member apart */
          sim[i].end = (double) i;
          order[i] = &sim[i];
        }
      qsort (order, (size_t) n, sizeof (OccSpan *), cmp_span);
      char *sim_key = cluster_key (rp, order, n);
      if (!g_hash_table_contains (c->cache, sim_key))
        {
          double *sorted = g_new (double, total);
          for (int i = 0, k = 0; i < n; i++)
            {
              int m = (int) order[i]->end;
              memcpy (sorted + k, all + first[m], sizeof (double) * (gsize) plans[m]->n_groups);
              k += plans[m]->n_groups;
            }
          g_hash_table_insert (c->cache, sim_key, sorted);
        }
      else
        g_free (sim_key);
      for (int i = 0; i < n; i++)
        g_free (sim[i].gstart);
      /* the pass's key holds what this pass applies; "~" keeps it from
       * ever matching a pass's key (it was not simulated at those offsets) */
      char *held = g_strconcat ("~", key, NULL);
      g_free (key);
      key = held;
    }
  g_hash_table_insert (c->cache, key, all);
  for (int i = 0; i < n; i++)
    {
      g_free (durs[i]);
      g_free (starts[i]);
      g_free (offsets[i]);
      g_free (chain[i]);
    }
  return all;
}

/* The earliest time from which the durations d (per member, per group,
 * concatenated; NULL: the idle ones) would change this pass's replay: the
 * first group whose duration differs ends no earlier than its start plus
 * the smaller of the two. G_MAXDOUBLE when nothing differs. */
static double
change_horizon (Replay *rp, OccSpan *const *mm, int n, const double *d)
{
  double h = G_MAXDOUBLE;
  for (int i = 0, j = 0; i < n; i++)
    {
      int plan = plan_of (rp, mm[i]->occ);
      int ng = ((const PsCollPlan *) rp->prog->plans->pdata[plan])->n_groups;
      for (int g = 0; g < ng; g++)
        {
          double used = contention_duration (rp, mm[i]->occ, mm[i]->run, plan, g);
          double now = d ? d[j + g] : rp->group_dur[plan][g];
          if (now != used)
            h = MIN (h, mm[i]->gstart[g] + MIN (now, used));
        }
      j += ng;
    }
  return h;
}

/* This pass's runs in start order. */
static GPtrArray *
spans_by_start (Contention *c)
{
  GPtrArray *spans = g_ptr_array_sized_new (g_hash_table_size (c->spans));
  GHashTableIter it;
  gpointer v;
  g_hash_table_iter_init (&it, c->spans);
  while (g_hash_table_iter_next (&it, NULL, &v))
    g_ptr_array_add (spans, v);
  g_ptr_array_sort (spans, cmp_span);
  return spans;
}

/* Sweeps `spans` (in start order) for runs that overlap in time on a
 * common link and joins every such pair in `parent` (a union-find over
 * the spans' indices). */
static void
overlap_sweep (Replay *rp, GPtrArray *spans, int *parent)
{
  /* `active` holds the runs not yet ended */
  g_autoptr (GArray) active = g_array_new (FALSE, FALSE, sizeof (int));
  for (int i = 0; i < (int) spans->len; i++)
    {
      const OccSpan *si = spans->pdata[i];
      for (guint a = 0; a < active->len;)
        {
          int j = g_array_index (active, int, a);
          const OccSpan *sj = spans->pdata[j];
          if (sj->end <= si->start)
            g_array_remove_index_fast (active, a);
          else
            {
              if (links_meet (rp, plan_of (rp, si->occ), plan_of (rp, sj->occ)))
                parent[uf_find (parent, i)] = uf_find (parent, j);
              a++;
            }
        }
      g_array_append_val (active, i);
    }
}

/* Sets run s's durations for the next pass to d (taken). */
static void
override_put (Contention *c, GHashTable *next, const OccSpan *s, double *d)
{
  OccRun r = { s->occ, s->run };
  g_hash_table_insert (next, run_key (s->occ, s->run), d);
  g_array_append_val (c->override_runs, r);
}

/* After a pass: finds the clusters of overlapping runs, sets their
 * durations for the next pass, and says whether another pass is needed
 * (the clusters differ from those behind the durations just used). */
static gboolean
contention_update (Replay *rp)
{
  Contention *c = rp->contention;
  c->passes++;
  g_autoptr (GPtrArray) spans = spans_by_start (c);
  int m = (int) spans->len;
  g_autofree int *parent = g_new (int, m + 1);
  for (int i = 0; i < m; i++)
    parent[i] = i;
  overlap_sweep (rp, spans, parent);
  /* members of each cluster, in start order */
  g_autoptr (GHashTable) by_root = g_hash_table_new_full (NULL, NULL, NULL,
                                                          (GDestroyNotify) g_ptr_array_unref);
  g_autoptr (GArray) roots = g_array_new (FALSE, FALSE, sizeof (int));
  for (int i = 0; i < m; i++)
    {
      int r = uf_find (parent, i);
      GPtrArray *mem = g_hash_table_lookup (by_root, GINT_TO_POINTER (r + 1));
      if (!mem)
        {
          mem = g_ptr_array_new ();
          g_hash_table_insert (by_root, GINT_TO_POINTER (r + 1), mem);
          g_array_append_val (roots, r);
        }
      g_ptr_array_add (mem, spans->pdata[i]);
    }
  /* Clusters in the order of their first start. A cluster's offsets depend
   * only on what happened before it, so a duration that changes now moves
   * everything after its earliest possible end. Simulating a new cluster
   * that starts after that horizon would use offsets the next pass changes
   * anyway (replaying every layer's overlaps once per pass while a change
   * ripples through the step, the 30B async replay's 662 s, issue 26), so
   * such a cluster keeps the durations it had and waits for a later pass.
   * Clusters found in the cache cost nothing and always apply. The fixed
   * point is the same: the step is only accepted when every cluster's
   * durations are the simulated ones for the offsets it ran with. */
  int n_cl = 0;
  g_autofree OccSpan *const **cl_mm = g_new (OccSpan *const *, roots->len + 1);
  g_autofree int *cl_n = g_new (int, roots->len + 1);
  g_autofree char **cl_key = g_new (char *, roots->len + 1);
  g_autofree const double **cl_d = g_new (const double *, roots->len + 1);
  g_autoptr (GHashTable) in_cluster = g_hash_table_new (run_key_hash, NULL);
  for (guint r = 0; r < roots->len; r++)
    {
      GPtrArray *mem = g_hash_table_lookup (by_root,
                                            GINT_TO_POINTER (g_array_index (roots, int, r) + 1));
      if (mem->len < 2)
        continue;
      cl_mm[n_cl] = (OccSpan *const *) mem->pdata;
      cl_n[n_cl] = (int) mem->len;
      cl_key[n_cl] = cluster_key (rp, cl_mm[n_cl], cl_n[n_cl]);
      cl_d[n_cl] = cache_lookup (c, cl_key[n_cl]);
      for (guint i = 0; i < mem->len; i++)
        g_hash_table_add (in_cluster, run_key (cl_mm[n_cl][i]->occ, cl_mm[n_cl][i]->run));
      n_cl++;
    }
  double horizon = G_MAXDOUBLE;
  for (int k = 0; k < n_cl; k++)
    if (cl_d[k])
      horizon = MIN (horizon, change_horizon (rp, cl_mm[k], cl_n[k], cl_d[k]));
  /* runs that overlapped nothing this pass fall back to their idle durations */
  GHashTableIter oit;
  gpointer okey;
  g_hash_table_iter_init (&oit, c->override);
  while (g_hash_table_iter_next (&oit, &okey, NULL))
    {
      OccSpan *sp = g_hash_table_lookup (c->spans, okey);
      if (sp && !g_hash_table_contains (in_cluster, okey))
        horizon = MIN (horizon, change_horizon (rp, &sp, 1, NULL));
    }
  GString *keys = g_string_new (NULL);
  g_autoptr (GHashTable) next = g_hash_table_new_full (run_key_hash, NULL, NULL, g_free);
  g_array_set_size (c->override_runs, 0);
  int overlapping = 0;
  gboolean deferred = FALSE, simulated = FALSE;
  for (int k = 0; k < n_cl; k++)
    {
      OccSpan *const *mm = cl_mm[k];
      int n = cl_n[k];
      /* an earlier cluster of this pass may have simulated the same key
       * (the same overlap in the next layer) */
      const double *d = cl_d[k] ? cl_d[k] : cache_lookup (c, cl_key[k]);
      if (d && !cl_d[k])
        horizon = MIN (horizon, change_horizon (rp, mm, n, d));
      for (int i = 0; i < n; i++)
        {
          append_int (keys, mm[i]->occ);
          g_string_append_c (keys, '.');
          append_int (keys, mm[i]->run);
          g_string_append_c (keys, ',');
        }
      if (!d && simulated && mm[0]->start >= horizon)
        {
          /* keep what this pass used; "?" matches no key, so another pass follows */
          g_string_append (keys, "?|");
          g_free (cl_key[k]);
          for (int i = 0; i < n; i++)
            {
              const double *o = g_hash_table_lookup (c->override,
                                                     run_key (mm[i]->occ, mm[i]->run));
              int ng = ((const PsCollPlan *) rp->prog->plans->pdata[plan_of (rp, mm[i]->occ)])->n_groups;
              if (o)
                override_put (c, next, mm[i], g_memdup2 (o, sizeof (double) * (gsize) ng));
            }
          deferred = TRUE;
          overlapping += n;
          continue;
        }
      g_string_append_printf (keys, "%s|", cl_key[k]);
      if (!d)
        {
          d = cluster_durations (rp, mm, n, cl_key[k]);
          simulated = TRUE;
          horizon = MIN (horizon, change_horizon (rp, mm, n, d));
        }
      else
        g_free (cl_key[k]);
      for (int i = 0, j = 0; i < n; i++)
        {
          int ng = ((const PsCollPlan *) rp->prog->plans->pdata[plan_of (rp, mm[i]->occ)])->n_groups;
          override_put (c, next, mm[i], g_memdup2 (d + j, sizeof (double) * (gsize) ng));
          j += ng;
        }
      overlapping += n;
    }
  if (simulated)
    c->stalled = 0;
  else
    c->stalled++;
  gboolean changed = deferred || strcmp (keys->str, c->keys) != 0;
  g_hash_table_unref (c->override);
  c->override = g_steal_pointer (&next);
  g_free (c->keys);
  c->keys = g_string_free (keys, FALSE);
  c->n_overlapping = overlapping;
  return changed;
}

/* ---- device classes ------------------------------------------------------
 *
 * Every device runs the same op list, so two devices can only come apart
 * through their collectives: a group's completion is its members' latest
 * arrival plus the group's duration. Devices are split into classes by
 * colour refinement (as in graph isomorphism tests): at first one class
 * (timeline devices each alone, their spans are their own); then, per
 * plan, a group's signature is its idle duration and the set of classes
 * among its members, and a device's new class is its old one with the
 * signature of its group in every plan; until no class splits. Members of
 * a class then start every collective at the same time and wait the same
 * duration (induction over the ops), so one device per class is replayed,
 * a group class standing for all the groups of its signature: a step on a
 * full torus, where every group of a plan takes the same time, replays one
 * device instead of 2048. Results are copied to every member.
 *
 * With contention, a pass replays with the durations the previous one set
 * for its clustered runs, and groups of one idle signature may get
 * different ones: before each pass the classes are found again, a group's
 * signature being all its durations of that pass (durations_colour), so
 * the induction holds per pass. record_classes gives the clusters what the
 * per-device replay would record, so every pass, cluster and result is
 * that of the per-device replay (PODSIM_REPLAY_CLASSES=off forces it;
 * tests/replay_classes.sh compares both, also on a trace whose classes
 * split in its contention passes). */

static void
classes_free (Replay *rp)
{
  int n_plans = (int) rp->prog->plans->len;
  if (!rp->cls_group)
    return;
  for (int i = 0; i < n_plans; i++)
    {
      g_free (rp->cls_group[i]);
      g_free (rp->cls_members[i]);
      g_free (rp->cls_real[i]);
      g_free (rp->cls_of_group[i]);
    }
  g_clear_pointer (&rp->cls_real, g_free);
  g_clear_pointer (&rp->cls_of_group, g_free);
  g_clear_pointer (&rp->cls_group, g_free);
  g_clear_pointer (&rp->cls_members, g_free);
  g_clear_pointer (&rp->cls_total, g_free);
}

static int
cmp_int (gconstpointer a, gconstpointer b)
{
  int x = *(const int *) a, y = *(const int *) b;
  return (x > y) - (x < y);
}

/* Per plan, per group: an id of the durations the group takes in this
 * pass, its idle one and those of every run the contention sets
 * (Contention.override): groups of one id take the same time in every run. */
static int **
durations_colour (Replay *rp)
{
  const Program *p = rp->prog;
  int n_plans = (int) p->plans->len;
  g_autofree GArray **runs = g_new0 (GArray *, n_plans + 1);
  Contention *c = rp->contention;
  for (guint k = 0; c && k < c->override_runs->len; k++)
    {
      const OccRun *r = &g_array_index (c->override_runs, OccRun, k);
      int pl = plan_of (rp, r->occ);
      if (!runs[pl])
        runs[pl] = g_array_new (FALSE, FALSE, sizeof (const double *));
      const double *o = g_hash_table_lookup (c->override, run_key (r->occ, r->run));
      g_array_append_val (runs[pl], o);
    }
  int **colour = g_new0 (int *, n_plans + 1);
  for (int i = 0; i < n_plans; i++)
    {
      const PsCollPlan *plan = p->plans->pdata[i];
      colour[i] = g_new (int, plan->n_groups);
      guint n_runs = runs[i] ? runs[i]->len : 0;
      g_autoptr (GHashTable) ids = g_hash_table_new_full (g_bytes_hash, g_bytes_equal,
                                                          (GDestroyNotify) g_bytes_unref, NULL);
      g_autofree double *v = g_new (double, n_runs + 1);
      for (int g = 0; g < plan->n_groups; g++)
        {
          v[0] = rp->group_dur[i][g];
          for (guint k = 0; k < n_runs; k++)
            v[k + 1] = g_array_index (runs[i], const double *, k)[g];
          GBytes *b = g_bytes_new (v, sizeof (double) * (n_runs + 1));
          gpointer hit = g_hash_table_lookup (ids, b);
          if (!hit)
            {
              hit = GINT_TO_POINTER (g_hash_table_size (ids) + 1);
              g_hash_table_insert (ids, b, hit);
            }
          else
            g_bytes_unref (b);
          colour[i][g] = GPOINTER_TO_INT (hit) - 1;
        }
      if (runs[i])
        g_array_unref (runs[i]);
    }
  return colour;
}

/* What the per-device replay records for the runs of a contention pass,
 * from a replay by classes: when group class cg of (occ, run) completes,
 * every group of the class started at its members' latest arrival. What
 * that start followed (Dep, see "chained starts") is per device: the last
 * member device, in device order, to arrive at the latest arrival, as
 * dev_start keeps it, with its own group in the plan it waited for. */
static void
record_classes (Replay *rp, int occ, int run, int plan, int cg, const Inst *in)
{
  if (!rp->contention)
    return;
  const Program *p = rp->prog;
  const PsCollPlan *pl = p->plans->pdata[plan];
  if (!rp->group_devs[plan])
    {
      const int *members = p->plan_members->pdata[plan];
      int *first = g_new (int, pl->n_groups + 1), *fill = g_new0 (int, pl->n_groups + 1);
      first[0] = 0;
      for (int g = 0; g < pl->n_groups; g++)
        first[g + 1] = first[g] + members[g];
      int *devs = g_new (int, first[pl->n_groups] + 1);
      for (int d = 0; d < p->n_devices; d++)
        {
          int g = pl->group_of_core[p->core_of_device[d]];
          if (g >= 0)
            devs[first[g] + fill[g]++] = d;
        }
      g_free (fill);
      rp->group_devs[plan] = devs;
      rp->group_first[plan] = first;
    }
  const int *devs = rp->group_devs[plan], *first = rp->group_first[plan];
  for (int g = 0; g < pl->n_groups; g++)
    {
      if (rp->cls_of_group[plan][g] != cg)
        continue;
      Dep dep = { 0 };
      for (int m = first[g + 1] - 1; m >= first[g]; m--)
        {
          const Dev *dv = &rp->devs[rp->dev_of[devs[m]]];
          if (dv->local_s != in->max_arrival)
            continue;
          dep = dv->dep;
          if (dep.key)
            dep.g = ((const PsCollPlan *) p->plans->pdata[dep.plan])->group_of_core[p->core_of_device[devs[m]]];
          else
            dep.end = dv->local_s;
          break;
        }
      contention_record (rp, occ, run, g, in->max_arrival,
                         contention_duration (rp, occ, run, plan, g), &dep);
    }
}

/* The class of each device (ids in order of first device); returns the
 * number of classes. Fills rp->cls_* for the class representatives (the
 * first device of each class, in class order). */
static int
classes_find (Replay *rp, int *cls)
{
  const Program *p = rp->prog;
  const PsReplayOptions *opt = p->opt;
  int n = p->n_devices, n_plans = (int) p->plans->len;
  int n_cls = 1;
  memset (cls, 0, sizeof (int) * (gsize) n);
  for (int k = 0; k < opt->n_timeline_devices; k++)
    {
      int d = opt->timeline_devices[k];
      if (d >= 0 && d < n && cls[d] == 0)
        cls[d] = n_cls++;
    }
  int **gsig = g_new0 (int *, n_plans + 1);
  for (int i = 0; i < n_plans; i++)
    gsig[i] = g_new (int, ((const PsCollPlan *) p->plans->pdata[i])->n_groups);
  int **colour = durations_colour (rp);
  int *next = g_new (int, n);
  for (;;)
    {
      /* renumber in order of first device so ids do not depend on history */
      for (int i = 0; i < n_plans; i++)
        {
          const PsCollPlan *plan = p->plans->pdata[i];
          GPtrArray *col = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
          for (int g = 0; g < plan->n_groups; g++)
            g_ptr_array_add (col, g_array_new (FALSE, FALSE, sizeof (int)));
          for (int d = 0; d < n; d++)
            {
              int g = plan->group_of_core[p->core_of_device[d]];
              if (g >= 0)
                g_array_append_val (col->pdata[g], cls[d]);
            }
          GHashTable *ids = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
          for (int g = 0; g < plan->n_groups; g++)
            {
              GArray *c = col->pdata[g];
              g_array_sort (c, cmp_int);
              GString *k = g_string_new (NULL);
              append_int (k, colour[i][g]);
              g_string_append_c (k, ':');
              for (guint j = 0; j < c->len; j++)
                if (j == 0 || g_array_index (c, int, j) != g_array_index (c, int, j - 1))
                  {
                    append_int (k, g_array_index (c, int, j));
                    g_string_append_c (k, ',');
                  }
              gpointer hit = g_hash_table_lookup (ids, k->str);
              if (!hit)
                {
                  hit = GINT_TO_POINTER (g_hash_table_size (ids) + 1);
                  g_hash_table_insert (ids, g_strdup (k->str), hit);
                }
              gsig[i][g] = GPOINTER_TO_INT (hit) - 1;
              g_string_free (k, TRUE);
            }
          g_hash_table_unref (ids);
          g_ptr_array_unref (col);
        }
      GHashTable *ids = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
      for (int d = 0; d < n; d++)
        {
          GString *k = g_string_new (NULL);
          append_int (k, cls[d]);
          for (int i = 0; i < n_plans; i++)
            {
              const PsCollPlan *plan = p->plans->pdata[i];
              int g = plan->group_of_core[p->core_of_device[d]];
              g_string_append_c (k, ',');
              append_int (k, g >= 0 ? gsig[i][g] : -1);
            }
          gpointer hit = g_hash_table_lookup (ids, k->str);
          if (!hit)
            {
              hit = GINT_TO_POINTER (g_hash_table_size (ids) + 1);
              g_hash_table_insert (ids, g_string_free (k, FALSE), hit);
            }
          else
            g_string_free (k, TRUE);
          next[d] = GPOINTER_TO_INT (hit) - 1;
        }
      int n_next = (int) g_hash_table_size (ids);
      g_hash_table_unref (ids);
      memcpy (cls, next, sizeof (int) * (gsize) n);
      /* a refinement never merges classes: same count, same partition */
      if (n_next == n_cls)
        break;
      n_cls = n_next;
    }
  /* the group signatures above were computed from this partition */
  int *rep = g_new (int, n_cls);
  for (int c = 0; c < n_cls; c++)
    rep[c] = -1;
  for (int d = 0; d < n; d++)
    if (rep[cls[d]] < 0)
      rep[cls[d]] = d;
  rp->cls_group = g_new0 (int *, n_plans + 1);
  rp->cls_members = g_new0 (int *, n_plans + 1);
  rp->cls_total = g_new0 (int, n_plans + 1);
  rp->cls_real = g_new0 (int *, n_plans + 1);
  for (int i = 0; i < n_plans; i++)
    {
      const PsCollPlan *plan = p->plans->pdata[i];
      rp->cls_group[i] = g_new (int, n_cls);
      rp->cls_members[i] = g_new0 (int, plan->n_groups);
      rp->cls_real[i] = g_new (int, plan->n_groups);
      for (int c = 0; c < n_cls; c++)
        {
          int g = plan->group_of_core[p->core_of_device[rep[c]]];
          int cg = g >= 0 ? gsig[i][g] : -1;
          rp->cls_group[i][c] = cg;
          if (cg >= 0)
            {
              rp->cls_real[i][cg] = g;
              rp->cls_members[i][cg]++;
              rp->cls_total[i]++;
            }
        }
      g_free (colour[i]);
    }
  rp->cls_of_group = gsig;
  g_free (colour);
  g_free (next);
  g_free (rep);
  return n_cls;
}

/* Back to the step's start for another pass. */
static void
pass_reset (Replay *rp, double t0)
{
  Program *p = rp->prog;
  for (int d = 0; d < rp->n_devs; d++)
    {
      Dev *dv = &rp->devs[d];
      dv->local_s = t0;
      dv->dep.key = NULL;
      dv->compute_s = dv->comm_s = dv->exposed_s = 0;
      if (dv->spans)
        g_array_set_size (dv->spans, 0);
    }
  for (guint i = 0; i < 2 * p->occs->len; i++)
    {
      g_free (rp->insts[i]);
      rp->insts[i] = NULL;
      rp->occ_passed[i] = 0;
      rp->occ_dur[i] = 0;
    }
  for (guint i = 0; i < p->occs->len; i++)
    {
      rp->occ_total[i] = 0;
      rp->occ_runs[i] = 0;
      rp->runs_begun[i] = 0;
    }
  rp->max_completion = 0;
  rp->iterations_simulated = 0;
  for (guint i = 0; i < rp->loops->len; i++)
    {
      PsLoopStat *l = &g_array_index (rp->loops, PsLoopStat, i);
      g_free (l->name);
      g_free (l->iteration_end_s);
    }
  g_array_set_size (rp->loops, 0);
  g_hash_table_remove_all (rp->contention->spans);
}

/* The cached replay in passes until overlapping collectives' durations are
 * consistent with when they overlap (see "contention" above). */
static void
replay_progress (Replay *rp, const char *fmt, ...) G_GNUC_PRINTF (2, 3);

static void
replay_progress (Replay *rp, const char *fmt, ...)
{
  const PsReplayOptions *opt = rp->prog->opt;
  if (!opt->progress)
    return;
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *text = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  opt->progress (text, opt->progress_data);
}

/* The entries of rp->devs: one per class (rp->cls_group set, `cls` the
 * class of each device) or one per device. */
static void
devs_init (Replay *rp, const int *cls, double t0)
{
  const Program *p = rp->prog;
  const PsReplayOptions *opt = p->opt;
  for (int d = 0; d < rp->n_devs; d++)
    if (rp->devs[d].spans)
      g_array_unref (rp->devs[d].spans);
  memset (rp->devs, 0, sizeof (Dev) * (gsize) p->n_devices);
  rp->n_devs = 0;
  for (int d = 0; d < p->n_devices; d++)
    {
      if (cls && cls[d] < rp->n_devs)
        {
          rp->dev_of[d] = cls[d];
          continue;
        }
      Dev *dv = &rp->devs[rp->n_devs];
      rp->dev_of[d] = dv->idx = rp->n_devs++;
      dv->rp = rp;
      dv->dev = d;
      dv->core = p->core_of_device[d];
      dv->local_s = t0;
      for (int k = 0; k < opt->n_timeline_devices; k++)
        if (opt->timeline_devices[k] == d)
          dv->spans = g_array_new (FALSE, FALSE, sizeof (Span));
    }
}

/* `cls` (NULL: every device on its own) receives the classes of each
 * pass: they follow the durations the previous pass set. */
static void
replay_with_contention (Replay *rp, int *cls, double t0)
{
  gboolean debug = g_getenv ("PODSIM_REPLAY_CLASSES_DEBUG") != NULL;
  for (;;)
    {
      replay_progress (rp, "replay pass %d, %u overlapping clusters simulated",
                       rp->contention->passes + 1, rp->contention->n_simulated);
      replay_cached (rp);
      if (rp->hung || !contention_update (rp)
          || rp->contention->stalled >= CONTENTION_MAX_STALLED
          || rp->contention->passes >= CONTENTION_MAX_PASSES)
        break;
      pass_reset (rp, t0);
      if (cls)
        {
          classes_free (rp);
          int n_cls = classes_find (rp, cls);
          if (debug)
            g_printerr ("replay: pass %d: %d classes of %d devices\n",
                        rp->contention->passes + 1, n_cls, rp->prog->n_devices);
          devs_init (rp, cls, t0);
        }
    }
}

static PsTimeline *
build_timeline (Replay *rp, const PsPlatform *pf)
{
  PsTimeline *tl = ps_timeline_new ();
  for (int d = 0; d < rp->n_devs; d++)
    {
      Dev *dv = &rp->devs[d];
      if (!dv->spans)
        continue;
      int x, y, c;
      ps_slice_core_coords (&pf->slice, dv->core, &x, &y, &c);
      int pid = ps_slice_chip_index (&pf->slice, x, y);
      g_autofree char *pname = g_strdup_printf ("chip x%d y%d", x, y);
      g_autofree char *tname = g_strdup_printf ("core %d (device %d)", c, dv->dev);
      ps_timeline_set_process_name (tl, pid, pname);
      ps_timeline_set_thread_name (tl, pid, c, tname);
      for (guint i = 0; i < dv->spans->len; i++)
        {
          Span *s = &g_array_index (dv->spans, Span, i);
          ps_timeline_add_complete (tl, pid, c, s->name, s->category, s->start_s, s->dur_s, NULL);
        }
    }
  return tl;
}

static PsReplayResult *
run (Program *p, GError **error)
{
  const PsReplayOptions *opt = p->opt;
  const PsPlatform *pf = opt->platform;
  double capacity = (double) opt->hw->hbm_bytes_per_core;
  if (p->peak_mem_bytes > capacity)
    {
      g_autofree char *peak = ps_format_bytes (p->peak_mem_bytes);
      g_autofree char *cap = ps_format_bytes (capacity);
      ps_set_error_at (error, PS_ERROR_NO_FIT, p->path, 0, 0,
                       "does not fit: peak HBM %s per core exceeds the %s capacity of a %s core",
                       peak, cap, opt->hw->name ? opt->hw->name : "TensorCore");
      return NULL;
    }
  Replay rp = { 0 };
  rp.prog = p;
  rp.cache = !opt->no_cache;
  int n_plans = (int) p->plans->len;
  rp.group_dur = g_new0 (double *, n_plans + 1);
  PsSgNet *net = ps_sgnet_new (pf, error);
  if (!net)
    {
      g_free (rp.group_dur);
      return NULL;
    }
  rp.net = net;
  /* The cache: every distinct collective once, alone, on the idle network. */
  if (rp.cache)
    for (int i = 0; i < n_plans; i++)
      {
        PsCollPlan *plan = p->plans->pdata[i];
        replay_progress (&rp, "collective %d/%d on the idle network", i + 1, n_plans);
        ps_coll_simulate (net, &plan, 1, &rp.group_dur[i]);
      }
  rp.insts = g_new0 (Inst *, 2 * p->occs->len + 1);
  rp.occ_passed = g_new0 (int, 2 * p->occs->len + 1);
  rp.occ_dur = g_new0 (double, 2 * p->occs->len + 1);
  rp.occ_total = g_new0 (double, p->occs->len + 1);
  rp.occ_runs = g_new0 (guint64, p->occs->len + 1);
  rp.run_of = g_new0 (int, 2 * p->occs->len + 1);
  rp.runs_begun = g_new0 (int, p->occs->len + 1);
  if (rp.cache)
    rp.contention = contention_new (p, pf);
  rp.devs = g_new0 (Dev, p->n_devices);
  rp.group_devs = g_new0 (int *, n_plans + 1);
  rp.group_first = g_new0 (int *, n_plans + 1);
  rp.dev_of = g_new (int, p->n_devices);
  double t0 = ps_sgnet_clock ();
  rp.t0 = t0;
  rp.loops = g_array_new (FALSE, TRUE, sizeof (PsLoopStat));
  const char *cls_env = g_getenv ("PODSIM_REPLAY_CLASSES");
  gboolean classes = rp.cache && !(cls_env && g_ascii_strcasecmp (cls_env, "off") == 0);
  g_autofree int *cls = classes ? g_new (int, p->n_devices) : NULL;
  if (classes)
    {
      int n_cls = classes_find (&rp, cls);
      if (g_getenv ("PODSIM_REPLAY_CLASSES_DEBUG"))
        g_printerr ("replay: %d classes of %d devices\n", n_cls, p->n_devices);
    }
  devs_init (&rp, cls, t0);
  if (!rp.cache)
    for (int d = 0; d < p->n_devices; d++)
      {
        Dev *dv = &rp.devs[d];
        dv->sem = ps_sgnet_sem_new (0);
        char name[32];
        g_snprintf (name, sizeof name, "device%d", d);
        ps_sgnet_spawn (net, dv->core, name, device_actor, dv);
      }
  if (rp.cache)
    replay_with_contention (&rp, cls, t0);
  else
    ps_sgnet_run (net);
  if (rp.hung)
    g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                 "%s: the replay hung: a collective's group never assembled", p->path);

  PsReplayResult *r = g_new0 (PsReplayResult, 1);
  r->platform = pf;
  r->program = g_strdup (p->program);
  r->cache = rp.cache;
  r->n_devices = p->n_devices;
  r->core_of_device = g_memdup2 (p->core_of_device, sizeof (int) * (gsize) p->n_devices);
  r->compute_s = g_new0 (double, p->n_devices);
  r->comm_s = g_new0 (double, p->n_devices);
  r->exposed_s = g_new0 (double, p->n_devices);
  r->idle_s = g_new0 (double, p->n_devices);
  double step = 0;
  for (int d = 0; d < rp.n_devs; d++)
    step = MAX (step, rp.devs[d].local_s - t0);
  r->step_time_s = step;
  for (int d = 0; d < p->n_devices; d++)
    {
      Dev *dv = &rp.devs[rp.dev_of[d]];
      r->compute_s[d] = dv->compute_s;
      r->comm_s[d] = dv->comm_s;
      r->exposed_s[d] = dv->exposed_s;
      r->idle_s[d] = MAX (0.0, step - dv->compute_s - dv->exposed_s);
    }
  for (int d = 0; d < rp.n_devs; d++)
    if (rp.devs[d].sem)
      ps_sgnet_sem_free (rp.devs[d].sem);
  r->flops_per_device = p->flops;
  r->peak_flops_per_core = ps_hardware_peak_flops_per_core (opt->hw);
  r->mxu_utilization = step > 0 ? p->flops / (r->peak_flops_per_core * step) : 0;
  r->peak_hbm_bytes = p->peak_mem_bytes;
  r->hbm_capacity_bytes = capacity;
  r->n_compute_events = p->n_compute;
  r->n_compute_segments = p->n_segments;
  r->n_collectives = p->n_collectives;
  r->n_unique_collectives = p->plans->len;
  if (rp.contention)
    {
      r->n_overlapping_collectives = (guint64) rp.contention->n_overlapping;
      r->contention_passes = rp.contention->passes;
    }
  r->n_loop_iterations = p->n_loop_iterations;
  r->n_iterations_simulated = rp.cache ? rp.iterations_simulated : p->n_loop_iterations;
  r->link_bytes = g_new0 (double, pf->n_links);
  for (guint i = 0; i < p->occs->len; i++)
    {
      const Occurrence *oc = &g_array_index (p->occs, Occurrence, i);
      const PsCollPlan *plan = p->plans->pdata[oc->plan];
      for (int l = 0; l < pf->n_links; l++)
        r->link_bytes[l] += plan->link_bytes[l] * (double) oc->runs;
    }
  /* Per distinct collective: how often it ran and how long it took, so
   * reports can name the most expensive ones. */
  r->collectives = g_array_sized_new (FALSE, TRUE, sizeof (PsCollectiveStat), n_plans);
  g_array_set_size (r->collectives, n_plans);
  for (guint i = 0; i < p->occs->len; i++)
    {
      const Occurrence *oc = &g_array_index (p->occs, Occurrence, i);
      const PsCollPlan *plan = p->plans->pdata[oc->plan];
      PsCollectiveStat *cs = &g_array_index (r->collectives, PsCollectiveStat, oc->plan);
      if (cs->count == 0)
        {
          cs->name = g_strdup (oc->name ? oc->name : "");
          cs->kind = ps_trace_collective_kind_name (plan->kind);
          cs->bytes = plan->bytes;
          cs->n_groups = plan->n_groups;
          cs->group_size = plan->group_size;
        }
      cs->count += rp.occ_runs[i];
      cs->total_s += rp.occ_total[i];
    }
  r->loops = g_steal_pointer (&rp.loops);
  if (opt->n_timeline_devices > 0)
    r->timeline = build_timeline (&rp, pf);
  for (int d = 0; d < rp.n_devs; d++)
    if (rp.devs[d].spans)
      g_array_unref (rp.devs[d].spans);
  classes_free (&rp);
  g_free (rp.dev_of);
  for (guint i = 0; i < 2 * p->occs->len; i++)
    g_free (rp.insts[i]);
  g_free (rp.insts);
  g_free (rp.occ_passed);
  g_free (rp.occ_dur);
  g_free (rp.occ_total);
  g_free (rp.occ_runs);
  g_free (rp.run_of);
  g_free (rp.runs_begun);
  contention_free (rp.contention, p->plans->len);
  for (int i = 0; i < n_plans; i++)
    {
      g_free (rp.group_dur[i]);
      g_free (rp.group_devs[i]);
      g_free (rp.group_first[i]);
    }
  g_free (rp.group_devs);
  g_free (rp.group_first);
  g_free (rp.group_dur);
  g_free (rp.devs);
  ps_sgnet_free (net);
  if (rp.hung)
    {
      ps_replay_result_free (r);
      return NULL;
    }
  return r;
}

PsReplayResult *
ps_replay_file (const char *path, const PsReplayOptions *opt, GError **error)
{
  g_autoptr (PsTraceReader) reader = ps_trace_reader_open (path, error);
  if (!reader)
    return NULL;
  const PsTraceHeader *h = ps_trace_reader_header (reader);
  Program p;
  if (!program_begin (&p, path, h, opt, error))
    {
      program_clear (&p);
      return NULL;
    }
  for (;;)
    {
      const PsTraceEvent *ev;
      if (!ps_trace_reader_next (reader, &ev, error))
        {
          program_clear (&p);
          return NULL;
        }
      if (!ev)
        break;
      if (!program_add (&p, h, ev, ps_trace_reader_line (reader), error))
        {
          program_clear (&p);
          return NULL;
        }
    }
  PsReplayResult *r = run (&p, error);
  program_clear (&p);
  return r;
}

PsReplayResult *
ps_replay_trace (const PsTrace *trace, const PsReplayOptions *opt, GError **error)
{
  if (!ps_trace_validate (trace, error))
    return NULL;
  const PsTraceHeader *h = ps_trace_get_header (trace);
  Program p;
  if (!program_begin (&p, "<trace>", h, opt, error))
    {
      program_clear (&p);
      return NULL;
    }
  for (guint64 i = 0; i < ps_trace_n_events (trace); i++)
    if (!program_add (&p, h, ps_trace_get_event (trace, i), i + 1, error))
      {
        program_clear (&p);
        return NULL;
      }
  PsReplayResult *r = run (&p, error);
  program_clear (&p);
  return r;
}

const PsParamSpec ps_replay_param_cache = {
  .section = "options", .key = "cache", .type = PS_PARAM_BOOL, .def = "true",
  .doc = "Replay identical collectives on an idle network from a cache (false: simulate each)"
};

/* The driver: the one stage sequence every command runs a program
 * through. A training step is built (a model family's build function) or
 * read (an HLO file), then
 *
 *   build -> propagate -> partition -> schedule + memory -> lower -> simulate
 *
 * `podsim run` runs every stage; `podsim partition` stops after lowering
 * (--trace) or the memory stage (--memory); `podsim verify` and the
 * partitioner's conformance harness stop after partitioning. Because they
 * all run the same sequence, one module gives one trace and one peak,
 * whichever command asks: the memory stage is the memory analysis of the
 * schedule the lower stage writes into the trace (partitioner/analysis/
 * schedule.h), as in XLA, where the scheduler's order decides both.
 *
 * Two levels of use:
 *   - ps_driver_run() runs the sequence from the build up to
 *     PsDriverOptions.stop_after, times each stage and keeps what the
 *     caller asked for (the modules, the trace, the replay);
 *   - the stage entry points (ps_driver_propagate() ... ps_driver_simulate())
 *     run one stage each, for callers that hold a module already, and are
 *     what ps_driver_run() calls.
 *
 * Ownership: PsDriverResult is transfer full (ps_driver_result_free); the
 * options, hardware, build data and an input module are borrowed.
 */
#ifndef PS_DRIVER_DRIVER_H
#define PS_DRIVER_DRIVER_H

#include <glib.h>

#include "driver/target.h"
#include "models/family.h"
#include "partitioner/analysis/cost.h"
#include "partitioner/analysis/schedule.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/spmd/spmd.h"
#include "sim/collectives.h"
#include "sim/replay.h"
#include "sim/results.h"
#include "topology/hardware.h"
#include "topology/platform.h"
#include "topology/slice.h"
#include "traces/trace.h"

/* The timed stages, in order. The schedule is timed with memory: the
 * memory analysis is the schedule's (one pass decides both). */
typedef enum {
  PS_STAGE_BUILD, PS_STAGE_PROPAGATE, PS_STAGE_PARTITION, PS_STAGE_MEMORY,
  PS_STAGE_LOWER, PS_STAGE_SIMULATE, PS_STAGE_COUNT
} PsStage;

/* "build", "propagate", "partition", "memory", "lower", "simulate". */
const char *ps_stage_name (PsStage s);

/* The build stage: the annotated single-device module and what it is
 * (its mesh for lowering, its parameter and FLOP counts). transfer full. */
typedef PsModule *(*PsDriverBuildFn) (gpointer data, PsModelInfo *info, GError **error);

#define PS_DRIVER_MAX_OP_GROUPS 8

typedef struct {
  /* The input: a build function, or a module read from a file (borrowed;
   * propagation writes its shardings into it). With a module, the entry's
   * written shardings are kept unless to_output / to_parameters or the
   * module header allow propagation to change them (XLA's default for a
   * module from a file); a build says so itself (PsModelInfo). */
  PsDriverBuildFn build;
  gpointer build_data;
  PsModule *module;
  gboolean to_output, to_parameters;
  gboolean skip_propagate;       /* the module's shardings are complete already */
  int64_t n_devices;             /* module input: devices to partition for; a
                                  * build's comes from its mesh */
  int64_t default_trip_count;    /* module input: iterations of a while loop whose
                                  * trip count cannot be found (0: an error); a
                                  * build's comes from its PsModelInfo */
  /* Module input already per device (a partitioner's output, `podsim
   * trace lower`): propagation and partitioning are skipped and the module
   * is scheduled and lowered as it is; a build says so itself
   * (PsModelInfo.already_partitioned). */
  gboolean partitioned;
  /* Module input: the logical mesh the trace is written over (borrowed;
   * NULL: one axis of n_devices); a build's comes from its PsModelInfo. */
  const PsTraceMesh *mesh;
  /* How the lower stage writes the trace: each while loop's events
   * repeated trip-count times instead of a loop (format version 1), and
   * without live-bytes watermarks. */
  gboolean unroll_loops, no_memory_events;

  PsStage stop_after;            /* the last stage to run (PS_STAGE_SIMULATE: all) */
  const char *program;           /* the run's name, written to the trace */

  /* What the program runs on (driver/target.h; borrowed): its hardware is
   * needed from the memory stage on (its HBM is the schedule's budget), its
   * slice from the simulate stage, and when there is one, the program's
   * devices are checked against its cores. Its schedule, collective
   * algorithms, cache and windowed_einsum apply. */
  const PsTarget *target;

  /* The partitioner's options (borrowed, may be NULL: defaults); the driver
   * sets its report, and the target's windowed_einsum when that is on. */
  const PsSpmdOptions *spmd;

  /* A program that does not fit in HBM stops after the memory stage
   * (fits FALSE) unless lower_past_no_fit. */
  gboolean lower_past_no_fit;
  int memory_holders;            /* largest holders in memory_text (0: 5) */

  /* What to keep or write on the way. */
  gboolean keep_module;          /* result->module: the propagated module */
  gboolean keep_spmd;            /* result->spmd: the partitioned program */
  gboolean keep_cost_text;       /* result->cost_text: FLOPs and bytes per fusion */
  const char *dump_hlo;          /* write the annotated single-device module here */
  const char *dump_spmd;         /* write the partitioned program here */
  const char *dump_trace;        /* write the step trace here */
  /* Errors of a stage start with its name ("propagate: ..."), except
   * option and no-fit errors, which name what to change. */
  gboolean name_stage_in_errors;
  gboolean progress;             /* live progress line on stderr */
  const int *timeline_devices;
  int n_timeline_devices;
  /* Parts of the step to time by op_name (the family's op_groups, NULL-key
   * terminated; may be NULL): PsDriverResult.op_group_s. */
  const PsOpGroup *op_groups;
} PsDriverOptions;

/* Zero options, then stop_after PS_STAGE_SIMULATE. */
void ps_driver_options_init (PsDriverOptions *o);

typedef struct {
  PsModelInfo info;
  int64_t n_devices;
  double stage_s[PS_STAGE_COUNT];
  double stage_cpu_s[PS_STAGE_COUNT];          /* user + system CPU time: on a
                                                * shared machine, the figure
                                                * that does not depend on load */
  double stage_peak_rss_bytes[PS_STAGE_COUNT]; /* process high-water mark during the stage */
  PsModule *module;           /* keep_module: the propagated module */
  PsModule *spmd;             /* keep_spmd: the partitioned program */
  PsSpmdReport spmd_report;   /* collectives emitted, fallbacks by opcode */
  gint64 n_instructions_spmd;
  gint64 n_fallbacks;
  gint64 n_cse_removed;       /* instructions CSE/DCE removed after partitioning */
  guint64 peak_hbm_bytes;     /* memory analysis of the SPMD program, scheduled */
  gboolean fits;              /* peak_hbm_bytes <= the core's HBM; when not,
                               * the stages after memory did not run */
  PsSchedulePolicy schedule;  /* the policy used */
  int n_async;                /* collectives the schedule runs asynchronously */
  int n_reverted;             /* ... made synchronous to fit the HBM budget */
  char *memory_text;          /* its report, largest holders */
  char *cost_text;            /* keep_cost_text: the cost analysis the schedule
                               * was made from, per fusion (ps_cost_report) */
  /* The peak's breakdown, for the no-fit advice: parameters (weights,
   * optimizer state, inputs: live throughout), temporaries, and the
   * largest temporary buffer (its instruction's name, owned). */
  guint64 parameter_bytes, temp_peak_bytes, largest_temp_bytes;
  char *largest_temp;
  PsTrace *trace;             /* the lowered trace */
  PsPlatform *platform;       /* the slice's platform; sim points at it */
  PsReplayResult *sim;        /* the replay */
  double items_per_s;         /* throughput in the model's item unit (tokens/s) */
  double model_flops_utilization; /* model FLOPs / (peak x cores x step) */
  /* Compute seconds per core of each of opts->op_groups (driver/op_times.h),
   * and the time of every all-to-all (summed over occurrences, slowest
   * group: all of it is on the step's path unless collectives overlap). */
  double op_group_s[PS_DRIVER_MAX_OP_GROUPS];
  int n_op_groups;
  double alltoall_s;
  guint64 n_alltoall;
} PsDriverResult;

void ps_driver_result_free (PsDriverResult *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsDriverResult, ps_driver_result_free)

/* Runs the stages up to opts->stop_after. A program that does not fit in
 * HBM is a result with fits FALSE (no trace, no replay) unless
 * lower_past_no_fit; ps_driver_no_fit_error says why. Errors: the
 * build's (PS_ERROR_OPTION) or whatever stage failed (named with
 * name_stage_in_errors); *failed (may be NULL) gets that stage. */
PsDriverResult *ps_driver_run (const PsDriverOptions *opts, PsStage *failed, GError **error);

/* Work shared between runs of one process's forks (podsim search's batch
 * worker): `partitioned` is a result of ps_driver_run with stop_after
 * PS_STAGE_PARTITION and keep_spmd; the next ps_driver_run of this process
 * (typically in a fork of it, one per run) starts after the partition
 * stage from it: build, propagation and partitioning are not run again, and
 * the build's PsModelInfo and the partitioner's report are its. The caller
 * guarantees that the next run's options and target differ from the
 * partitioned run's only in what the stages after partitioning read (the
 * target's schedule, async_collectives, fusion, collectives and cache);
 * `--dump-hlo` is not written. transfer full; NULL cancels. */
void ps_driver_resume_next (PsDriverResult *partitioned);

/* PS_ERROR_NO_FIT naming the peak and the capacity, for a result that
 * does not fit. */
void ps_driver_no_fit_error (const PsDriverResult *r, const PsHardware *hw, GError **error);

/* The build stage of a model family: f->build of p for the target's slice
 * (after f->check), as PsDriverOptions.build with PsDriverFamily as data. */
typedef struct {
  const PsParams *params;
  const PsTarget *target;
} PsDriverFamily;
PsModule *ps_driver_build_family (gpointer family, PsModelInfo *info, GError **error);

/* Options that run a model family's program as `podsim run` does: built
 * through FAMILY, on its target, with the family's op groups and the stage
 * named in errors; the rest as ps_driver_options_init. A run that resumes
 * from another's partition (ps_driver_resume_next) must start from the same
 * options, so `run` and search's share groups both take them from here.
 * FAMILY and PROGRAM must outlive the run (transfer none). */
void ps_driver_options_init_family (PsDriverOptions *o, PsDriverFamily *family, const char *program);

/* ---- the stage entry points ----------------------------------------------------- */

/* Propagation options: may propagation change the entry root's and
 * parameters' shardings? For a built module (keep_entry FALSE): yes. For
 * a module read from a file: yes where the flag says so; otherwise what
 * the module header says (allow_spmd_sharding_propagation_to_output /
 * _parameters); otherwise no, as XLA's default, so written entry shardings
 * are kept. `m` must outlive `o`. */
void ps_driver_propagate_options (PsPropagateOptions *o, const PsModule *m, gboolean to_output,
                                  gboolean to_parameters);

/* Completes the sharding of every instruction of m (in place), with
 * ps_driver_propagate_options when keep_entry. */
gboolean ps_driver_propagate (PsModule *m, gboolean keep_entry, gboolean to_output,
                              gboolean to_parameters, GError **error);

/* The SPMD program for n_devices (opts NULL: defaults). transfer full. */
PsModule *ps_driver_partition (const PsModule *m, int64_t n_devices, const PsSpmdOptions *opts,
                               GError **error);

/* The schedule of an SPMD program under `policy` with a per-device HBM
 * budget (0: none), its memory analysis included (PsSchedule.memory);
 * *cost (may be NULL) gets the cost analysis it was made from, which the
 * schedule's fusions refer to (transfer full). transfer full. */
PsSchedule *ps_driver_schedule (const PsModule *spmd, PsSchedulePolicy policy, uint64_t hbm_budget_bytes,
                                PsFusionMode fusion, PsTilingMode tiling, int64_t default_trip_count,
                                PsCostAnalysis **cost, GError **error);

/* The step trace of an SPMD program in the schedule's order (NULL: post
 * order, collectives synchronous), over `mesh` (NULL: 1-D), named
 * `program` (NULL: the module's name), with the slice hint `slice` (may
 * be NULL), its fusions and trip counts as the schedule's cost analysis
 * had them. The memory events: the schedule's analysis (sized with the
 * tiling it was made with) or, without a schedule, one sized with
 * `tiling`. transfer full. */
PsTrace *ps_driver_lower (const PsModule *spmd, const PsSchedule *schedule, const PsTraceMesh *mesh,
                          int64_t n_devices, const char *program, const char *slice, PsFusionMode fusion,
                          PsTilingMode tiling, int64_t default_trip_count, GError **error);

/* Replays a trace (ps_replay_trace) in a thread of its own: see driver.c
 * for why. transfer full. */
PsReplayResult *ps_driver_simulate (const PsTrace *trace, const PsReplayOptions *opts, GError **error);

#endif

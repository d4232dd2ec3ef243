/* The end-to-end pipeline behind `podsim run`: build a training step (a
 * model family's build function, or an HLO file read and annotated),
 * propagate, partition, analyse memory, lower to a step trace and replay it
 * on a slice. Each stage's wall time and memory are recorded so benchmarks
 * can print them.
 *
 * Ownership: PsPipelineResult is transfer full (ps_pipeline_result_free);
 * the options, hardware and build data are borrowed.
 */
#ifndef PS_CLI_PIPELINE_H
#define PS_CLI_PIPELINE_H

#include <glib.h>

#include "models/family.h"
#include "partitioner/analysis/schedule.h"
#include "sim/collectives.h"
#include "sim/results.h"
#include "topology/hardware.h"
#include "topology/platform.h"
#include "topology/slice.h"
#include "traces/trace.h"

typedef enum {
  PS_STAGE_BUILD, PS_STAGE_PROPAGATE, PS_STAGE_PARTITION, PS_STAGE_MEMORY,
  PS_STAGE_LOWER, PS_STAGE_SIMULATE, PS_STAGE_COUNT
} PsStage;

const char *ps_stage_name (PsStage s);

typedef struct {
  const char *program;        /* the run's name, written to the trace */
  const PsHardware *hw;
  const char *slice;
  PsWrapMode wrap;
  gboolean no_cache;
  gboolean async_collectives; /* lower collectives as start/done pairs that overlap compute */
  gboolean progress;          /* live progress line on stderr */
  const int *timeline_devices;
  int n_timeline_devices;
  const char *dump_hlo;       /* write the annotated single-device module here */
  const char *dump_spmd;      /* write the partitioned program here */
  const char *dump_trace;     /* write the step trace here */
  /* Partition dots whose gathered operand exceeds the threshold as windowed
   * einsums (PsSpmdOptions.windowed_einsum_threshold_bytes); off unless set. */
  gboolean windowed_einsum;
  gint64 windowed_einsum_threshold_bytes;
  /* Stop after the memory stage (podsim search's exact memory check):
   * no trace, no replay. */
  gboolean memory_only;
  PsCollAlgorithm collectives;   /* default (0): PS_COLL_TORUS2D */
  PsSchedulePolicy schedule;     /* default (0): PS_SCHEDULE_XLA; async_collectives: eager */
  PsFusionMode fusion;           /* default (0): PS_FUSION_MODE_XLA (partitioner/analysis/fusion.h) */
  gboolean idle_cores;        /* the program may use fewer devices than the
                               * slice has cores (device d on core d); the
                               * rest idle */
  /* Parts of the step to time by op_name (the family's op_groups, NULL-key
   * terminated; may be NULL): PsPipelineResult.op_group_s. */
  const PsOpGroup *op_groups;
} PsPipelineOptions;

#define PS_PIPELINE_MAX_OP_GROUPS 8

typedef struct {
  PsModelInfo info;
  double stage_s[PS_STAGE_COUNT];
  double stage_cpu_s[PS_STAGE_COUNT];          /* user + system CPU time: on a
                                                * shared machine, the figure
                                                * that does not depend on load */
  double stage_peak_rss_bytes[PS_STAGE_COUNT]; /* process high-water mark during the stage */
  gint64 n_instructions_spmd;
  gint64 n_fallbacks;
  gint64 n_cse_removed;        /* instructions CSE/DCE removed after partitioning */
  guint64 peak_hbm_bytes;     /* memory analysis of the SPMD program, scheduled */
  gboolean fits;              /* peak_hbm_bytes <= the core's HBM; when not,
                               * the stages after memory did not run */
  PsSchedulePolicy schedule;  /* the policy used */
  int n_async;                /* collectives the schedule runs asynchronously */
  int n_reverted;             /* ... made synchronous to fit the HBM budget */
  char *memory_text;          /* its report, largest holders */
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
  /* Compute seconds per core of each of opts->op_groups (cli/op_times.h),
   * and the time of every all-to-all (summed over occurrences, slowest
   * group: all of it is on the step's path unless collectives overlap). */
  double op_group_s[PS_PIPELINE_MAX_OP_GROUPS];
  int n_op_groups;
  double alltoall_s;
  guint64 n_alltoall;
} PsPipelineResult;

void ps_pipeline_result_free (PsPipelineResult *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsPipelineResult, ps_pipeline_result_free)

/* The build stage: the annotated single-device module and what it is
 * (its mesh for lowering, its parameter and FLOP counts). transfer full. */
typedef PsModule *(*PsPipelineBuildFn) (gpointer data, PsModelInfo *info, GError **error);

/* Runs every stage. A program that does not fit in HBM is a result with
 * fits FALSE (trace and sim NULL); ps_pipeline_no_fit_error says why.
 * Errors: the build's (PS_ERROR_OPTION) or whatever stage failed, prefixed
 * with the stage name. */
PsPipelineResult *ps_pipeline_run (PsPipelineBuildFn build, gpointer data,
                                   const PsPipelineOptions *opts, GError **error);

/* PS_ERROR_NO_FIT naming the peak and the capacity, for a result that
 * does not fit. */
void ps_pipeline_no_fit_error (const PsPipelineResult *r, const PsHardware *hw, GError **error);

#endif

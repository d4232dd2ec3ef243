/* The end-to-end pipeline behind `podsim run` and `podsim tables`: build a
 * model's training step, propagate, partition, analyse memory, lower to a
 * step trace and replay it on a slice. Each stage's wall time and memory are
 * recorded so benchmarks can print them.
 *
 * Ownership: PsPipelineResult is transfer full (ps_pipeline_result_free);
 * the config and hardware are borrowed.
 */
#ifndef PS_CLI_PIPELINE_H
#define PS_CLI_PIPELINE_H

#include <glib.h>

#include "models/dense_lm.h"
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
  const PsHardware *hw;
  const char *slice;          /* NULL: the config's slice */
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
  PsCollAlgorithm collectives;   /* default (0): PS_COLL_TORUS2D */
  gboolean idle_cores;        /* the program may use fewer devices than the
                               * slice has cores (device d on core d); the
                               * rest idle */
} PsPipelineOptions;

typedef struct {
  PsDenseLmInfo info;
  double stage_s[PS_STAGE_COUNT];
  double stage_cpu_s[PS_STAGE_COUNT];          /* user + system CPU time: on a
                                                * shared machine, the figure
                                                * that does not depend on load */
  double stage_peak_rss_bytes[PS_STAGE_COUNT]; /* process high-water mark during the stage */
  gint64 n_instructions_spmd;
  gint64 n_fallbacks;
  gint64 n_cse_removed;        /* instructions CSE/DCE removed after partitioning */
  guint64 peak_hbm_bytes;     /* memory analysis of the SPMD program */
  char *memory_text;          /* its report, largest holders */
  PsTrace *trace;             /* the lowered trace */
  PsPlatform *platform;       /* the slice's platform; sim points at it */
  PsReplayResult *sim;        /* the replay */
  double tokens_per_s;
  double model_flops_utilization; /* model FLOPs / (peak x cores x step) */
} PsPipelineResult;

void ps_pipeline_result_free (PsPipelineResult *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsPipelineResult, ps_pipeline_result_free)

/* Runs every stage. Errors: the config's (PS_ERROR_OPTION), a program that
 * does not fit in HBM (PS_ERROR_NO_FIT naming the peak and the capacity),
 * or whatever stage failed, prefixed with the stage name. */
PsPipelineResult *ps_pipeline_run (const PsDenseLmConfig *cfg, const PsPipelineOptions *opts,
                                   GError **error);

/* The mesh dims/order of a config as lowering options want them. */
PsTraceDeviceOrder ps_pipeline_device_order (const char *name);

#endif

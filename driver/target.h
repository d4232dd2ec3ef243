/* The target: what a step runs on and how the simulator models it, typed
 * and built once per command: the hardware file, the slice (with its wrap
 * links), the collective algorithms, the schedule policy, the collective
 * cache and whether the program may leave cores idle. run, search and
 * sweep build it from a run's parameters; simulate, bench, tables and
 * partition from their command-line options (cli/target_options.h, a
 * store of the same specs); the driver (driver.h) reads everything from
 * it.
 *
 * The options behind it are declared by the modules that read them
 * (common/params.h specs: slice and wrap in topology/slice.h, hw in
 * topology/hardware.h, collectives and cache in sim/, schedule and
 * async_collectives in partitioner/analysis/schedule.h, fusion in
 * partitioner/analysis/fusion.h, windowed_einsum in
 * partitioner/spmd/spmd.h, idle_cores here); ps_target_specs() lists them
 * in model-file order and ps_target_init() hands the list to the model
 * families (models/family.h) as every family's [slice] and [options]
 * sections, so model-file keys, `--set`, `--help` and `podsim search`
 * axes all come from those declarations.
 *
 * Ownership: PsTarget is transfer full (ps_target_free); specs are static.
 */
#ifndef PS_DRIVER_TARGET_H
#define PS_DRIVER_TARGET_H

#include <glib.h>

#include "common/params.h"
#include "models/family.h"
#include "partitioner/analysis/fusion.h"
#include "partitioner/analysis/tiling.h"
#include "partitioner/analysis/schedule.h"
#include "sim/collectives.h"
#include "topology/hardware.h"
#include "topology/slice.h"

typedef struct {
  PsHardware *hw;                /* owned */
  PsSlice *slice;                /* owned; NULL: no slice (podsim partition) */
  PsWrapMode wrap;
  PsCollAlgorithm collectives;
  PsSchedulePolicy schedule;     /* async_collectives already applied (eager) */
  PsFusionMode fusion;           /* the cost analysis's fusion rules */
  PsTilingMode tiling;           /* buffer sizes (partitioner/analysis/tiling.h) */
  gboolean async_collectives;    /* as set: reports say which option chose eager */
  gboolean cache;                /* replay identical collectives from a cache */
  gboolean idle_cores;           /* the program may use fewer devices than the slice has cores */
  gint64 windowed_einsum;        /* PsSpmdOptions.windowed_einsum_threshold_bytes; < 0 off */
  PsModelTarget model;           /* what a family builds for (zero without a slice) */
} PsTarget;

/* [options] idle_cores (read by the driver and the families' checks). */
extern const PsParamSpec ps_target_param_idle_cores;
/* [options] max_layer_copies (read by the families' checks:
 * ps_params_check_layer_copies). */
extern const PsParamSpec ps_target_param_max_layer_copies;

/* The target's specs in model-file order; *n gets their count. */
const PsParamSpec *const *ps_target_specs (int *n);

/* Registers ps_target_specs() as the families' common specs. Call once
 * before any model parameters are made (podsim's main, test fixtures). */
void ps_target_init (void);

/* The target a run's parameters name. Errors name the option or the file
 * position the bad value came from. transfer full. */
PsTarget *ps_target_from_params (const PsParams *p, GError **error);

/* The same from a store of the target's specs (cli/target_options.h);
 * without a slice when with_slice is FALSE. */
PsTarget *ps_target_from_store (const PsParamStore *st, gboolean with_slice, GError **error);

void ps_target_free (PsTarget *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsTarget, ps_target_free)

#endif

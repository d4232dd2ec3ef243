/* The target and the registry of its options: see target.h. */
#include "config.h"

#include "driver/target.h"

#include <string.h>

#include "common/error.h"
#include "partitioner/analysis/fusion.h"
#include "partitioner/analysis/tiling.h"
#include "partitioner/spmd/spmd.h"
#include "sim/replay.h"

const PsParamSpec ps_target_param_idle_cores = {
  .section = "options", .key = "idle_cores", .type = PS_PARAM_BOOL, .def = "false",
  .doc = "Let the program use fewer devices than the slice has cores (device d on core d; the rest idle)"
};

/* The product of the options that multiply the program (the layers written
 * out, --unroll, times the microbatches written out,
 * --unroll-microbatches), checked by the families before building: each
 * option is bounded alone, but together they made programs that took hours
 * to build, and 1024 unrolled layers alone still take minutes, growing
 * faster than the copies (doc/robustness.md has the measurements behind
 * 256: 38 s of CPU for the small model, 1024 several minutes). */
const PsParamSpec ps_target_param_max_layer_copies = {
  .section = "options", .key = "max_layer_copies", .type = PS_PARAM_INT, .def = "256",
  .doc = "Refuse a program of more layer copies than this (layers written out x microbatches; "
         "doc/robustness.md): raise it to build a larger one anyway",
  .min = 1, .max = 1 << 24
};

/* Model-file order: [slice], then [options]. */
static const PsParamSpec *const target_specs[] = {
  &ps_slice_param_slice,
  &ps_slice_param_wrap,
  &ps_hardware_param_hw,
  &ps_schedule_param_policy,
  &ps_fusion_param_mode,
  &ps_tiling_param_mode,
  &ps_schedule_param_async,
  &ps_spmd_param_windowed_einsum,
  &ps_coll_param_algorithm,
  &ps_target_param_idle_cores,
  &ps_target_param_max_layer_copies,
  &ps_replay_param_cache,
};

const PsParamSpec *const *
ps_target_specs (int *n)
{
  *n = (int) G_N_ELEMENTS (target_specs);
  return target_specs;
}

void
ps_target_init (void)
{
  ps_model_family_set_common_specs (target_specs, (int) G_N_ELEMENTS (target_specs));
}

void
ps_target_free (PsTarget *t)
{
  if (!t)
    return;
  if (t->hw)
    ps_hardware_free (t->hw);
  if (t->slice)
    ps_slice_free (t->slice);
  g_free (t);
}

/* The slice and what a family builds for. */
static gboolean
set_slice (PsTarget *t, const char *name, GError **error)
{
  t->slice = ps_slice_new (name, t->wrap, t->hw->tensorcores_per_chip, error);
  if (!t->slice)
    return FALSE;
  t->model.n_cores = ps_slice_n_cores (t->slice);
  t->model.physical[0] = t->slice->chips_x;
  t->model.physical[1] = t->slice->chips_y;
  t->model.physical[2] = t->slice->cores_per_chip;
  return TRUE;
}

static int
key (const PsParamStore *st, const char *name)
{
  int i = ps_param_store_find (st, name);
  g_assert (i >= 0);
  return i;
}

PsTarget *
ps_target_from_store (const PsParamStore *st, gboolean with_slice, GError **error)
{
  g_autoptr (PsTarget) t = g_new0 (PsTarget, 1);
  const char *hw_path = ps_param_store_str (st, key (st, "hw"));
  t->hw = ps_hardware_load_or_default (*hw_path ? hw_path : NULL, error);
  if (!t->hw)
    return NULL;
  /* Choices were checked as they were set: these parse. */
  ps_wrap_mode_parse (ps_param_store_str (st, key (st, "wrap")), &t->wrap, NULL);
  ps_coll_algorithm_parse (ps_param_store_str (st, key (st, "collectives")), "--collectives", &t->collectives, NULL);
  ps_schedule_policy_parse (ps_param_store_str (st, key (st, "schedule")), "--schedule", &t->schedule, NULL);
  ps_fusion_mode_parse (ps_param_store_str (st, key (st, "fusion")), "--fusion", &t->fusion, NULL);
  ps_tiling_mode_parse (ps_param_store_str (st, key (st, "buffer_tiling")), "--buffer-tiling", &t->tiling, NULL);
  t->async_collectives = ps_param_store_bool (st, key (st, "async_collectives"));
  if (t->async_collectives)
    t->schedule = PS_SCHEDULE_EAGER;
  t->cache = ps_param_store_bool (st, key (st, "cache"));
  t->idle_cores = ps_param_store_bool (st, key (st, "idle_cores"));
  t->windowed_einsum = ps_param_store_int (st, key (st, "windowed_einsum"));
  GError *local = NULL;
  int k = key (st, "slice");
  if (with_slice && !set_slice (t, ps_param_store_str (st, k), &local))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: %s", ps_param_store_where (st, k), local->message);
      g_error_free (local);
      return NULL;
    }
  return g_steal_pointer (&t);
}

PsTarget *
ps_target_from_params (const PsParams *p, GError **error)
{
  return ps_target_from_store (ps_params_store (p), TRUE, error);
}

/* podsim bench matmul: the compute model's answer for one matmul on one
 * TensorCore, so a user can see what padding, precision and size do to the
 * MXU before looking at a whole step. Keys of --json: doc/compute-model.md. */
#include "config.h"

#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/target_options.h"
#include "common/error.h"
#include "common/json_out.h"
#include "sim/compute.h"
#include "topology/hardware.h"

static char *
to_json (const PsHardware *hw, const PsComputeOp *op, const PsComputeCost *c)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
#define INT(key, v) (json_builder_set_member_name (b, key), json_builder_add_int_value (b, v))
#define DBL(key, v) (json_builder_set_member_name (b, key), json_builder_add_double_value (b, v))
#define STR(key, v) (json_builder_set_member_name (b, key), json_builder_add_string_value (b, v))
  ps_json_int (b, "batch", op->batch);
  ps_json_int (b, "m", op->m);
  ps_json_int (b, "k", op->k);
  ps_json_int (b, "n", op->n);
  ps_bench_json_target (b, hw, op);
  ps_bench_json_passes (b, op, c);
  ps_json_str (b, "mapping_asked", ps_dot_mapping_name (op->dot_mapping));
  ps_json_str (b, "mapping", c->dot_on_vector ? "vector" : "mxu");
  ps_json_bool (b, "strength_reduced", c->dot_strength_reduced);
  ps_json_dbl (b, "mxu_mapping_cycles", c->dot_mxu_cycles);
  ps_json_dbl (b, "vector_mapping_ops", c->dot_vector_ops);
  ps_bench_json_cycles (b, c);
  return ps_json_finish (b, TRUE);
}

static void
print_text (const PsHardware *hw, const PsComputeOp *op, const PsComputeCost *c)
{
  g_autofree char *time = ps_format_seconds (c->time_s);
  g_autofree char *bytes = ps_format_bytes (op->hbm_bytes);
  if (op->batch > 1)
    printf ("matmul %" G_GINT64_FORMAT " x [%" G_GINT64_FORMAT " x %" G_GINT64_FORMAT
            " x %" G_GINT64_FORMAT "]",
            op->batch, op->m, op->k, op->n);
  else
    printf ("matmul %" G_GINT64_FORMAT " x %" G_GINT64_FORMAT " x %" G_GINT64_FORMAT,
            op->m, op->k, op->n);
  printf (" (M x K x N), %s, precision %s, on one %s TensorCore\n",
          ps_compute_dtype_name (op->dtype), ps_precision_name (op->precision), hw->name);
  printf ("  cycles           %.0f (mxu %.0f, vector %.0f, hbm %.0f, overhead %.0f)\n",
          c->cycles, c->mxu_cycles, c->vector_cycles, c->hbm_cycles, c->overhead_cycles);
  printf ("  time             %s\n", time);
  printf ("  bound by         %s\n", ps_compute_bound_name (c->bound));
  if (c->dot_on_vector)
    printf ("  runs on          the vector unit as multiply + reduce (%s; %.0f vector ops;"
            " on the MXU: %.0f cycles)\n",
            c->dot_strength_reduced ? "XLA's dot strength reduction"
            : op->dot_mapping == PS_DOT_MAPPING_VECTOR ? "as asked" : "cheaper than the MXU",
            c->dot_vector_ops, c->dot_mxu_cycles);
  else
    printf ("  MXU work         %" G_GINT64_FORMAT " weight-tile passes of %dx%d over %d MXUs"
            " (%s stationary, %" G_GINT64_FORMAT " rows streamed each, %" G_GINT64_FORMAT
            " bf16 pass%s)\n",
            c->tile_passes, hw->mxu_rows, hw->mxu_cols, hw->mxus_per_core,
            c->lhs_stationary ? "LHS" : "RHS", c->stream_rows, c->mxu_passes,
            c->mxu_passes == 1 ? "" : "es");
  printf ("  HBM traffic      %s\n", bytes);
  printf ("  useful FLOPs     %.6g\n", c->flops);
  printf ("  achieved         %.2f TFLOP/s of %.2f TFLOP/s peak\n",
          c->time_s > 0 ? c->flops / c->time_s / 1e12 : 0.0,
          ps_hardware_peak_flops_per_core (hw) / 1e12);
  printf ("  MXU utilization  %.2f %%\n", 100.0 * c->mxu_utilization);
}

int
ps_cmd_bench_matmul (int argc, char **argv)
{
  char *opt_dtype = NULL, *opt_precision = NULL, *opt_batch = NULL, *opt_mapping = NULL;
  gboolean opt_json = FALSE;
  GOptionEntry entries[] = {
    { "dtype", 0, 0, G_OPTION_ARG_STRING, &opt_dtype, "operand type: bf16 (default) or f32", "TYPE" },
    { "precision", 0, 0, G_OPTION_ARG_STRING, &opt_precision,
      "f32 matmul precision: default (1 bf16 pass), high (3) or highest (6)", "P" },
    { "batch", 0, 0, G_OPTION_ARG_STRING, &opt_batch, "batch dimension (default 1)", "B" },
    { "mapping", 0, 0, G_OPTION_ARG_STRING, &opt_mapping,
      "auto (default: XLA's dot strength reduction, else the cheaper unit), mxu or vector", "M" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &opt_json, "print one JSON object (keys in doc/compute-model.md)", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("M K N");
  g_option_context_set_summary (ctx,
    "Time one matrix multiplication out[M,N] = lhs[M,K] x rhs[K,N] on one\n"
    "TensorCore with podsim's compute model: cycles, time, MXU utilization\n"
    "and which unit (mxu, vector, hbm, overhead) bounds it.");
  g_autoptr (PsTargetOptions) to = NULL;
  int status;
  gboolean parsed = ps_bench_parse (ctx, entries, 3, "bench matmul takes three sizes M K N",
                                    &argc, &argv, &to, &status);
  g_autofree char *dtype_s = opt_dtype, *precision_s = opt_precision,
                  *batch_s = opt_batch, *mapping_s = opt_mapping;
  if (!parsed)
    return status;

  GError *error = NULL;
  gint64 m = 0, k = 0, n = 0, batch = 1;
  PsComputeDtype dtype;
  PsMxuPrecision precision;
  if (!ps_bench_size (argv[1], strlen (argv[1]), "M", &m, &error)
      || !ps_bench_size (argv[2], strlen (argv[2]), "K", &k, &error)
      || !ps_bench_size (argv[3], strlen (argv[3]), "N", &n, &error)
      || (batch_s && !ps_bench_size (batch_s, strlen (batch_s), "--batch", &batch, &error))
      || !ps_bench_compute_type (dtype_s, precision_s, &dtype, &precision, &error))
    return ps_cli_fail (error);
  PsDotMapping mapping = PS_DOT_MAPPING_AUTO;
  if (mapping_s && !ps_dot_mapping_parse (mapping_s, &mapping))
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION,
                   "--mapping '%s' is not auto, mxu or vector", mapping_s);
      return ps_cli_fail (error);
    }
  g_autoptr (PsTarget) target = ps_target_options_target (to, FALSE, &error);
  if (!target)
    return ps_cli_fail (error);
  const PsHardware *hw = target->hw;

  PsComputeOp op = ps_compute_matmul_op (batch, m, k, n, dtype, precision);
  op.dot_mapping = mapping;
  PsComputeCost cost = ps_compute_op (hw, &op);
  if (opt_json)
    {
      g_autofree char *json = to_json (hw, &op, &cost);
      printf ("%s\n", json);
    }
  else
    print_text (hw, &op, &cost);
  return 0;
}

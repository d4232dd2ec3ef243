/* podsim bench: dispatches to the micro-benchmarks of the machine model. */
#include "config.h"

#include "cli/commands.h"
#include "cli/bench.h"
#include "common/error.h"
#include "common/json_out.h"

static const PsCommand benchmarks[] = {
  { "collective", "time one collective on a slice", ps_cmd_bench_collective },
  { "matmul", "time one matrix multiplication on one core", ps_cmd_bench_matmul },
  { "conv", "time one convolution on one core", ps_cmd_bench_conv },
};

int
ps_cmd_bench (int argc, char **argv)
{
  static const PsCommandGroup group = {
    "podsim bench", "Usage: podsim bench collective|matmul|conv [OPTIONS]\n",
    "Run 'podsim bench COMMAND --help' for a benchmark's options.\n",
    benchmarks, G_N_ELEMENTS (benchmarks)
  };
  return ps_cli_dispatch (&group, argc, argv);
}

gboolean
ps_bench_size (const char *text, gsize len, const char *what, gint64 *out, GError **error)
{
  g_autofree char *t = g_strndup (text, len);
  guint64 v = 0;
  if (!g_ascii_string_to_unsigned (t, 10, 1, G_GUINT64_CONSTANT (1) << 40, &v, NULL))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "%s '%s' is not a whole number between 1 and 2^40", what, t);
      return FALSE;
    }
  *out = (gint64) v;
  return TRUE;
}

gboolean
ps_bench_compute_type (const char *dtype, const char *precision, PsComputeDtype *dtype_out,
                       PsMxuPrecision *precision_out, GError **error)
{
  *dtype_out = PS_COMPUTE_BF16;
  if (dtype && !ps_compute_dtype_parse (dtype, dtype_out))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--dtype '%s' is not bf16 or f32", dtype);
      return FALSE;
    }
  *precision_out = PS_MXU_PRECISION_DEFAULT;
  if (precision && !ps_precision_parse (precision, precision_out))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "--precision '%s' is not default, high or highest", precision);
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_bench_parse (GOptionContext *ctx, const GOptionEntry *entries, int n_args, const char *takes,
                int *argc, char ***argv, PsTargetOptions **to_out, int *status)
{
  static const char *const target_keys[] = { "hw", NULL };
  g_autoptr (PsTargetOptions) to = ps_target_options_new (target_keys);
  g_option_context_set_main_group (ctx, ps_target_options_group (to, entries));
  *status = PS_EXIT_USAGE;
  if (!ps_cli_parse (ctx, argc, argv))
    return FALSE;
  if (*argc != n_args + 1)
    {
      GError *error = NULL;
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "%s, got %d argument%s (see '%s --help')",
                   takes, *argc - 1, *argc == 2 ? "" : "s", g_get_prgname ());
      *status = ps_cli_fail (error);
      return FALSE;
    }
  *to_out = g_steal_pointer (&to);
  *status = 0;
  return TRUE;
}

void
ps_bench_json_target (JsonBuilder *b, const PsHardware *hw, const PsComputeOp *op)
{
  ps_json_str (b, "dtype", ps_compute_dtype_name (op->dtype));
  ps_json_str (b, "precision", ps_precision_name (op->precision));
  ps_json_str (b, "hardware", hw->name);
  ps_json_dbl (b, "clock_hz", hw->clock_hz);
  ps_json_dbl (b, "peak_flops_per_s", ps_hardware_peak_flops_per_core (hw));
}

void
ps_bench_json_passes (JsonBuilder *b, const PsComputeOp *op, const PsComputeCost *c)
{
  ps_json_dbl (b, "flops", c->flops);
  ps_json_dbl (b, "hbm_bytes", op->hbm_bytes);
  ps_json_int (b, "mxu_passes", c->mxu_passes);
  ps_json_int (b, "tile_passes", c->tile_passes);
  ps_json_int (b, "stream_rows", c->stream_rows);
  ps_json_str (b, "stationary", c->lhs_stationary ? "lhs" : "rhs");
}

void
ps_bench_json_cycles (JsonBuilder *b, const PsComputeCost *c)
{
  ps_json_dbl (b, "mxu_cycles", c->mxu_cycles);
  ps_json_dbl (b, "vector_cycles", c->vector_cycles);
  ps_json_dbl (b, "hbm_cycles", c->hbm_cycles);
  ps_json_dbl (b, "overhead_cycles", c->overhead_cycles);
  ps_json_dbl (b, "cycles", c->cycles);
  ps_json_dbl (b, "time_s", c->time_s);
  ps_json_str (b, "bound", ps_compute_bound_name (c->bound));
  ps_json_dbl (b, "achieved_flops_per_s", c->time_s > 0 ? c->flops / c->time_s : 0);
  ps_json_dbl (b, "mxu_utilization", c->mxu_utilization);
}

/* podsim bench: dispatches to the micro-benchmarks of the machine model. */
#include "config.h"

#include "cli/commands.h"
#include "cli/bench.h"
#include "common/error.h"

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

/* podsim bench conv: the compute model's answer for one convolution on one
 * TensorCore: how its window and feature depths meet the systolic array,
 * what padding the depths to the array wastes, and what bounds it. Keys of
 * --json: doc/compute-model.md. */
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

#define MAX_SPATIAL 8

typedef struct {
  gint64 batch, cin, cout, groups;
  int n;                                /* spatial dims */
  gint64 in[MAX_SPATIAL], kernel[MAX_SPATIAL], stride[MAX_SPATIAL];
  gint64 pad_lo[MAX_SPATIAL], out[MAX_SPATIAL];
  gboolean same;
  gint64 window, m;                     /* kernel positions; batch x output positions */
  double flops;                         /* 2 x multiply-adds that meet real input */
} Conv;

/* "128x128x128" into v (n entries, or 1 entry repeated when `fill` > 0). */
static gboolean
parse_dims (const char *text, const char *what, int fill, gint64 *v, int *n, GError **error)
{
  g_auto (GStrv) parts = g_strsplit (text, "x", -1);
  int k = (int) g_strv_length (parts);
  if (k < 1 || k > MAX_SPATIAL || (fill > 0 && k != 1 && k != fill))
    {
      if (fill > 0)
        g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s '%s' needs 1 or %d sizes joined by 'x'",
                     what, text, fill);
      else
        g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s '%s' needs 1 to %d sizes joined by 'x'",
                     what, text, MAX_SPATIAL);
      return FALSE;
    }
  for (int i = 0; i < k; i++)
    if (!ps_bench_size (parts[i], strlen (parts[i]), what, &v[i], error))
      return FALSE;
  if (fill > 0)
    for (int i = k; i < fill; i++)
      v[i] = v[0];
  if (n)
    *n = k;
  return TRUE;
}

/* Window positions along one dim that meet a real input element. */
static gint64
valid_pairs (gint64 in, gint64 out, gint64 k, gint64 stride, gint64 pad_lo)
{
  gint64 n = 0;
  for (gint64 o = 0; o < out; o++)
    for (gint64 w = 0; w < k; w++)
      {
        gint64 pos = o * stride + w - pad_lo;
        n += pos >= 0 && pos < in;
      }
  return n;
}

static gboolean
shape_conv (Conv *c, GError **error)
{
  if (c->cin % c->groups != 0 || c->cout % c->groups != 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "--groups %" G_GINT64_FORMAT " does not divide the features %" G_GINT64_FORMAT
                   " -> %" G_GINT64_FORMAT, c->groups, c->cin, c->cout);
      return FALSE;
    }
  c->window = 1;
  c->m = c->batch;
  double pairs = 1;
  for (int i = 0; i < c->n; i++)
    {
      gint64 in = c->in[i], k = c->kernel[i], s = c->stride[i];
      if (c->same)
        {
          c->out[i] = (in + s - 1) / s;
          gint64 total = MAX ((c->out[i] - 1) * s + k - in, 0);
          c->pad_lo[i] = total / 2;
        }
      else
        {
          if (k > in)
            {
              g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                           "--kernel %" G_GINT64_FORMAT " is larger than spatial dim %d (%" G_GINT64_FORMAT
                           ") with --padding valid", k, i, in);
              return FALSE;
            }
          c->out[i] = (in - k) / s + 1;
          c->pad_lo[i] = 0;
        }
      c->window *= k;
      c->m *= c->out[i];
      pairs *= (double) valid_pairs (in, c->out[i], k, s, c->pad_lo[i]);
    }
  if (c->window > (G_GINT64_CONSTANT (1) << 40) || c->m > (G_GINT64_CONSTANT (1) << 40))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "the convolution is too large (over 2^40 "
                   "window positions or output rows)");
      return FALSE;
    }
  c->flops = 2.0 * (double) c->batch * pairs * (double) (c->cin / c->groups) * (double) c->cout;
  return TRUE;
}

static void
dims_text (GString *s, int n, const gint64 *v)
{
  for (int i = 0; i < n; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? "x" : "", v[i]);
}

static char *
to_json (const PsHardware *hw, const Conv *cv, const PsComputeOp *op, const PsComputeCost *c,
         const PsComputeCost *pos, const PsComputeCost *pack, const PsComputeCost *vec)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
#define INT(key, v) (json_builder_set_member_name (b, key), json_builder_add_int_value (b, v))
#define DBL(key, v) (json_builder_set_member_name (b, key), json_builder_add_double_value (b, v))
#define STR(key, v) (json_builder_set_member_name (b, key), json_builder_add_string_value (b, v))
  ps_json_int (b, "batch", cv->batch);
  ps_json_int_array (b, "spatial", cv->n, cv->in);
  ps_json_int (b, "in_features", cv->cin);
  ps_json_int (b, "out_features", cv->cout);
  ps_json_int_array (b, "kernel", cv->n, cv->kernel);
  ps_json_int_array (b, "stride", cv->n, cv->stride);
  ps_json_str (b, "padding", cv->same ? "same" : "valid");
  ps_json_int (b, "groups", cv->groups);
  ps_json_int_array (b, "output_spatial", cv->n, cv->out);
  ps_json_int (b, "window", op->window);
  ps_json_int (b, "m", op->m);
  ps_json_int (b, "k", op->k);
  ps_json_int (b, "n", op->n);
  ps_bench_json_target (b, hw, op);
  ps_json_str (b, "mapping_asked", ps_conv_mapping_name (op->mapping));
  ps_json_str (b, "mapping", ps_conv_mapping_name (c->conv_mapping));
  ps_json_dbl (b, "positions_mxu_cycles", pos->mxu_cycles);
  ps_json_dbl (b, "packed_mxu_cycles", pack->mxu_cycles);
  ps_json_dbl (b, "vector_mapping_cycles", vec->vector_cycles);
  ps_json_dbl (b, "array_fill", c->array_fill);
  ps_json_dbl (b, "relayout_ops", c->relayout_ops);
  ps_bench_json_passes (b, op, c);
  ps_bench_json_cycles (b, c);
  return ps_json_finish (b, TRUE);
}

static gint64
round_up (gint64 v, gint64 to)
{
  return (v + to - 1) / to * to;
}

static void
print_text (const PsHardware *hw, const Conv *cv, const PsComputeOp *op, const PsComputeCost *c,
            const PsComputeCost *pos, const PsComputeCost *pack, const PsComputeCost *vec)
{
  g_autoptr (GString) in = g_string_new (NULL), k = g_string_new (NULL), s = g_string_new (NULL),
                      out = g_string_new (NULL);
  dims_text (in, cv->n, cv->in);
  dims_text (k, cv->n, cv->kernel);
  dims_text (s, cv->n, cv->stride);
  dims_text (out, cv->n, cv->out);
  g_autofree char *time = ps_format_seconds (c->time_s);
  g_autofree char *bytes = ps_format_bytes (op->hbm_bytes);
  printf ("conv [%" G_GINT64_FORMAT ", %s, %" G_GINT64_FORMAT "] -> [%" G_GINT64_FORMAT
          ", %s, %" G_GINT64_FORMAT "], kernel %s, stride %s, %s padding", cv->batch, in->str,
          cv->cin, cv->batch, out->str, cv->cout, k->str, s->str, cv->same ? "same" : "valid");
  if (cv->groups > 1)
    printf (", %" G_GINT64_FORMAT " groups", cv->groups);
  printf (", %s, precision %s, on one %s TensorCore\n", ps_compute_dtype_name (op->dtype),
          ps_precision_name (op->precision), hw->name);
  printf ("  as MXU work      %" G_GINT64_FORMAT " window position%s x [M %" G_GINT64_FORMAT
          " (batch x output positions) x K %" G_GINT64_FORMAT " (input features) x N %"
          G_GINT64_FORMAT " (output features)]", op->window, op->window == 1 ? "" : "s", op->m,
          op->k, op->n);
  if (op->batch > 1)
    printf (" per group, %" G_GINT64_FORMAT " groups", op->batch);
  printf ("\n");
  gint64 rows = hw->mxu_rows;
  printf ("  mapping          %s%s: ", ps_conv_mapping_name (c->conv_mapping),
          op->mapping == PS_CONV_MAPPING_AUTO ? " (the cheapest)" : " (as asked)");
  gint64 kp = ps_compute_conv_packed_k (hw, op->k);
  if (c->conv_mapping == PS_CONV_MAPPING_VECTOR)
    printf ("every multiply-add on the vector unit, 2 ops each\n");
  else if (c->conv_mapping == PS_CONV_MAPPING_PACKED)
    printf ("%" G_GINT64_FORMAT " positions x %" G_GINT64_FORMAT " features (padded to %"
            G_GINT64_FORMAT ") = %" G_GINT64_FORMAT " contracted at once, padded to %"
            G_GINT64_FORMAT "\n", op->window, op->k, kp, op->window * kp,
            round_up (op->window * kp, rows));
  else
    printf ("one weight-tile set per window position, %" G_GINT64_FORMAT " features padded to %"
            G_GINT64_FORMAT " each\n", op->k, round_up (op->k, rows));
  printf ("  cycles of        positions %.0f (mxu), packed %.0f (mxu), vector %.0f (vector unit)\n",
          pos->mxu_cycles, pack->mxu_cycles, vec->vector_cycles);
  printf ("  cycles           %.0f (mxu %.0f, vector %.0f, hbm %.0f, overhead %.0f)\n",
          c->cycles, c->mxu_cycles, c->vector_cycles, c->hbm_cycles, c->overhead_cycles);
  printf ("  time             %s\n", time);
  printf ("  bound by         %s\n", ps_compute_bound_name (c->bound));
  if (c->conv_mapping != PS_CONV_MAPPING_VECTOR)
    {
      printf ("  MXU work         %" G_GINT64_FORMAT " weight-tile passes of %dx%d over %d MXUs"
              " (%s stationary, %" G_GINT64_FORMAT " rows streamed each, %" G_GINT64_FORMAT
              " bf16 pass%s)\n",
              c->tile_passes, hw->mxu_rows, hw->mxu_cols, hw->mxus_per_core,
              c->lhs_stationary ? "LHS" : "RHS", c->stream_rows, c->mxu_passes,
              c->mxu_passes == 1 ? "" : "es");
      printf ("  array fill       %.2f %% of the weight-tile slots hold real weights (padding waste %.2f %%)\n",
              100.0 * c->array_fill, 100.0 * (1 - c->array_fill));
    }
  if (c->conv_mapping == PS_CONV_MAPPING_PACKED)
    printf ("  relayout         %.6g vector ops assembling the packed rows\n", c->relayout_ops);
  printf ("  HBM traffic      %s\n", bytes);
  printf ("  useful FLOPs     %.6g\n", c->flops);
  printf ("  achieved         %.2f TFLOP/s of %.2f TFLOP/s peak\n",
          c->time_s > 0 ? c->flops / c->time_s / 1e12 : 0.0,
          ps_hardware_peak_flops_per_core (hw) / 1e12);
  printf ("  MXU utilization  %.2f %%\n", 100.0 * c->mxu_utilization);
}

int
ps_cmd_bench_conv (int argc, char **argv)
{
  char *opt_dtype = NULL, *opt_precision = NULL, *opt_kernel = NULL,
       *opt_stride = NULL, *opt_padding = NULL, *opt_groups = NULL, *opt_mapping = NULL;
  gboolean opt_json = FALSE;
  GOptionEntry entries[] = {
    { "kernel", 0, 0, G_OPTION_ARG_STRING, &opt_kernel,
      "kernel window, one size for every spatial dim or one per dim (default 3)", "KxKxK" },
    { "stride", 0, 0, G_OPTION_ARG_STRING, &opt_stride, "window stride, one or one per dim (default 1)", "S" },
    { "padding", 0, 0, G_OPTION_ARG_STRING, &opt_padding,
      "same (default: output = input / stride) or valid (no padding)", "P" },
    { "groups", 0, 0, G_OPTION_ARG_STRING, &opt_groups,
      "feature groups (default 1; the input features for a depthwise conv)", "G" },
    { "mapping", 0, 0, G_OPTION_ARG_STRING, &opt_mapping,
      "how the convolution meets the hardware: auto (default, the cheapest), positions, packed (MXU) or vector", "M" },
    { "dtype", 0, 0, G_OPTION_ARG_STRING, &opt_dtype, "operand type: bf16 (default) or f32", "TYPE" },
    { "precision", 0, 0, G_OPTION_ARG_STRING, &opt_precision,
      "f32 precision: default (1 bf16 pass), high (3) or highest (6)", "P" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &opt_json, "print one JSON object (keys in doc/compute-model.md)", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("BATCH SPATIAL CIN COUT");
  g_option_context_set_summary (ctx,
    "Time one convolution of a [BATCH, SPATIAL..., CIN] input into COUT features\n"
    "(SPATIAL as 128x128x128) on one TensorCore with podsim's compute model:\n"
    "how the window and the feature depths meet the MXU, what padding the depths\n"
    "to the array wastes, cycles, time, MXU utilization and the bound.");
  g_autoptr (PsTargetOptions) to = NULL;
  int status;
  gboolean parsed = ps_bench_parse (ctx, entries, 4, "bench conv takes BATCH SPATIAL CIN COUT",
                                    &argc, &argv, &to, &status);
  g_autofree char *dtype_s = opt_dtype, *precision_s = opt_precision,
                  *kernel_s = opt_kernel, *stride_s = opt_stride, *padding_s = opt_padding,
                  *groups_s = opt_groups, *mapping_s = opt_mapping;
  if (!parsed)
    return status;

  GError *error = NULL;
  Conv cv = { 0 };
  cv.groups = 1;
  cv.same = TRUE;
  if (!ps_bench_size (argv[1], strlen (argv[1]), "BATCH", &cv.batch, &error)
      || !parse_dims (argv[2], "SPATIAL", 0, cv.in, &cv.n, &error)
      || !ps_bench_size (argv[3], strlen (argv[3]), "CIN", &cv.cin, &error)
      || !ps_bench_size (argv[4], strlen (argv[4]), "COUT", &cv.cout, &error)
      || !parse_dims (kernel_s ? kernel_s : "3", "--kernel", cv.n, cv.kernel, NULL, &error)
      || !parse_dims (stride_s ? stride_s : "1", "--stride", cv.n, cv.stride, NULL, &error)
      || (groups_s && !ps_bench_size (groups_s, strlen (groups_s), "--groups", &cv.groups, &error)))
    return ps_cli_fail (error);
  if (padding_s && strcmp (padding_s, "same") != 0 && strcmp (padding_s, "valid") != 0)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--padding '%s' is not same or valid", padding_s);
      return ps_cli_fail (error);
    }
  cv.same = !padding_s || strcmp (padding_s, "same") == 0;
  PsComputeDtype dtype;
  PsMxuPrecision precision;
  if (!ps_bench_compute_type (dtype_s, precision_s, &dtype, &precision, &error))
    return ps_cli_fail (error);
  PsConvMapping mapping = PS_CONV_MAPPING_AUTO;
  if (mapping_s && !ps_conv_mapping_parse (mapping_s, &mapping))
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION,
                   "--mapping '%s' is not auto, positions, packed or vector", mapping_s);
      return ps_cli_fail (error);
    }
  if (!shape_conv (&cv, &error))
    return ps_cli_fail (error);
  g_autoptr (PsTarget) target = ps_target_options_target (to, FALSE, &error);
  if (!target)
    return ps_cli_fail (error);
  const PsHardware *hw = target->hw;

  gint64 in_elems = cv.batch * cv.cin;
  for (int i = 0; i < cv.n; i++)
    in_elems *= cv.in[i];
  PsComputeOp op = ps_compute_conv_op (cv.groups, cv.m, cv.window, cv.cin / cv.groups,
                                       cv.cout / cv.groups, in_elems, dtype, precision);
  op.flops = cv.flops;
  PsComputeOp forced = op;
  forced.mapping = PS_CONV_MAPPING_POSITIONS;
  PsComputeCost pos = ps_compute_op (hw, &forced);
  forced.mapping = PS_CONV_MAPPING_PACKED;
  PsComputeCost pack = ps_compute_op (hw, &forced);
  forced.mapping = PS_CONV_MAPPING_VECTOR;
  PsComputeCost vec = ps_compute_op (hw, &forced);
  op.mapping = mapping;
  PsComputeCost cost = ps_compute_op (hw, &op);
  if (opt_json)
    {
      g_autofree char *json = to_json (hw, &cv, &op, &cost, &pos, &pack, &vec);
      printf ("%s\n", json);
    }
  else
    print_text (hw, &cv, &op, &cost, &pos, &pack, &vec);
  return 0;
}

/* The compute cost model. See sim/compute.h and doc/compute-model.md. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "sim/compute.h"

static gint64
clamp0 (gint64 v)
{
  return v < 0 ? 0 : v;
}

/* Cycles of one MXU-array orientation: `tiles` stationary weight tiles per
 * pass, `stream` rows streamed through each. Counts are doubles: with dims
 * up to 2^40 a tile count can pass 2^63, and a double only rounds where a
 * gint64 would overflow. */
static double
orientation_cycles (const PsHardware *hw, double tiles, gint64 stream, int passes,
                    double *tile_passes_out)
{
  double total = tiles * passes;
  double per_mxu = ceil (total / hw->mxus_per_core);
  double load = hw->mxu_weight_load_cycles;
  double fill = hw->mxu_fill_drain_cycles;
  double per_tile;
  double exposed_load;
  if (hw->mxu_weight_double_buffered)
    {
      /* The next tile shifts in while the current one streams, so a tile
       * costs the longer of the two; only the very first load is exposed. */
      per_tile = MAX ((double) stream, load) + fill;
      exposed_load = load;
    }
  else
    {
      per_tile = (double) stream + load + fill;
      exposed_load = 0;
    }
  *tile_passes_out = total;
  return per_mxu * per_tile + exposed_load;
}

static double
tiles_of (gint64 extent, int size)
{
  return ceil ((double) extent / size);
}

static gint64
to_count (double v)
{
  return v >= 9.2e18 ? G_MAXINT64 : (gint64) v;
}

double
ps_compute_mxu_cycles (const PsHardware *hw, gint64 batch, gint64 m, gint64 k, gint64 n,
                       int passes, gint64 *tile_passes_out, gint64 *stream_rows_out,
                       gboolean *lhs_stationary_out, double *array_fill_out)
{
  g_return_val_if_fail (hw != NULL, 0);
  batch = clamp0 (batch);
  m = clamp0 (m);
  k = clamp0 (k);
  n = clamp0 (n);
  double tile_passes = 0;
  gint64 stream = 0;
  gboolean lhs = FALSE;
  double cycles = 0, fill = 1;
  if (batch > 0 && m > 0 && k > 0 && n > 0 && passes > 0)
    {
      double kt = tiles_of (k, hw->mxu_rows);
      double slots = (double) hw->mxu_rows * hw->mxu_cols;
      /* RHS stationary: K x N weight tiles, the M rows of the LHS stream. */
      double tp_rhs = 0, t_rhs = (double) batch * kt * tiles_of (n, hw->mxu_cols);
      double c_rhs = orientation_cycles (hw, t_rhs, m, passes, &tp_rhs);
      /* LHS stationary (out^T = rhs^T lhs^T): K x M tiles, N columns stream. */
      double tp_lhs = 0, t_lhs = (double) batch * kt * tiles_of (m, hw->mxu_cols);
      double c_lhs = orientation_cycles (hw, t_lhs, n, passes, &tp_lhs);
      if (c_lhs < c_rhs)
        {
          cycles = c_lhs;
          tile_passes = tp_lhs;
          stream = n;
          lhs = TRUE;
          fill = (double) batch * (double) k * (double) m / (t_lhs * slots);
        }
      else
        {
          cycles = c_rhs;
          tile_passes = tp_rhs;
          stream = m;
          fill = (double) batch * (double) k * (double) n / (t_rhs * slots);
        }
    }
  if (tile_passes_out)
    *tile_passes_out = to_count (tile_passes);
  if (stream_rows_out)
    *stream_rows_out = stream;
  if (lhs_stationary_out)
    *lhs_stationary_out = lhs;
  if (array_fill_out)
    *array_fill_out = fill;
  return cycles;
}

/* Features of one window position in the packed contraction: padded to the
 * sublane count (the second-minor tile dim of TPU arrays; the Cloud TPU
 * performance guide's alternative padding rule for convolutions asks for
 * feature dims that are multiples of 8). */
gint64
ps_compute_conv_packed_k (const PsHardware *hw, gint64 k)
{
  gint64 g = MAX (hw->vector_sublanes, 1);
  return (clamp0 (k) + g - 1) / g * g;
}

/* The MXU part of a convolution: the cheapest of (or the asked) mapping of
 * its window onto the hardware. POSITIONS iterates over the window
 * positions, each a tile set of k x n weights streaming the m rows (k and n
 * padded to the array per position). PACKED contracts over window x k at
 * once (each position's k padded to the sublanes, the whole padded to the
 * array once), which needs the streamed rows assembled from the window's
 * positions: one vector op per element, window x k x m per group. VECTOR
 * does the multiply-adds on the vector unit (2 ops each), what a
 * depthwise convolution's 1 x 1 weight tiles leave as the sane choice.
 * "Cheapest" compares the busier of the MXU and the vector unit. */
static void
conv_mxu (const PsHardware *hw, const PsComputeOp *op, int passes, double other_vector_cycles,
          PsComputeCost *c)
{
  double per_cycle = (double) hw->vector_lanes * hw->vector_sublanes * hw->vector_alus;
  double w = (double) op->window;
  double g = (double) clamp0 (op->batch), m = (double) clamp0 (op->m), k = (double) clamp0 (op->k);
  gint64 tp[3] = { 0 }, sr[3] = { 0 };
  gboolean lhs[3] = { FALSE };
  double fill[3] = { 1, 1, 0 }, cyc[3] = { 0 }, extra[3] = { 0 }, busy[3];
  cyc[0] = ps_compute_mxu_cycles (hw, op->batch * op->window, op->m, op->k, op->n, passes,
                                  &tp[0], &sr[0], &lhs[0], &fill[0]);
  gint64 kp = ps_compute_conv_packed_k (hw, op->k);
  cyc[1] = ps_compute_mxu_cycles (hw, op->batch, op->m, kp * op->window, op->n, passes,
                                  &tp[1], &sr[1], &lhs[1], &fill[1]);
  if (kp > 0)
    fill[1] *= (double) op->k / (double) kp;
  extra[1] = op->window > 1 ? g * m * w * k : 0;
  extra[2] = 2 * g * m * w * k * (double) clamp0 (op->n);
  for (int i = 0; i < 3; i++)
    busy[i] = MAX (cyc[i], other_vector_cycles + ceil (extra[i] / per_cycle));
  int pick = 0;
  switch (op->mapping)
    {
    case PS_CONV_MAPPING_POSITIONS: pick = 0; break;
    case PS_CONV_MAPPING_PACKED: pick = 1; break;
    case PS_CONV_MAPPING_VECTOR: pick = 2; break;
    default:
      for (int i = 1; i < 3; i++)
        if (busy[i] < busy[pick])
          pick = i;
      break;
    }
  static const PsConvMapping kinds[3] = { PS_CONV_MAPPING_POSITIONS, PS_CONV_MAPPING_PACKED,
                                          PS_CONV_MAPPING_VECTOR };
  c->conv_mapping = kinds[pick];
  c->mxu_cycles = cyc[pick];
  c->tile_passes = tp[pick];
  c->stream_rows = sr[pick];
  c->lhs_stationary = lhs[pick];
  c->array_fill = fill[pick];
  c->relayout_ops = extra[pick];
  if (pick == 2)
    c->mxu_passes = 0;
}

PsComputeCost
ps_compute_op (const PsHardware *hw, const PsComputeOp *op)
{
  PsComputeCost c = { 0 };
  g_return_val_if_fail (hw != NULL && op != NULL, c);
  double clock = hw->clock_hz;

  double vector_ops = MAX (op->vector_ops, 0.0)
                      + MAX (op->transcendentals, 0.0) * hw->vector_transcendental_ops;
  double per_cycle = (double) hw->vector_lanes * hw->vector_sublanes * hw->vector_alus;
  c.array_fill = 1;
  if (op->has_mxu)
    {
      int passes = ps_hardware_mxu_passes (hw, op->dtype == PS_COMPUTE_F32, op->precision);
      c.mxu_passes = passes;
      if (op->window >= 1)
        conv_mxu (hw, op, passes, ceil (vector_ops / per_cycle), &c);
      else
        {
          c.mxu_cycles = ps_compute_mxu_cycles (hw, op->batch, op->m, op->k, op->n, passes,
                                                &c.tile_passes, &c.stream_rows,
                                                &c.lhs_stationary, &c.array_fill);
          c.dot_mxu_cycles = c.mxu_cycles;
          c.dot_vector_ops = ps_compute_dot_vector_ops (hw, op->batch, op->m, op->k, op->n);
          c.dot_strength_reduced = ps_compute_dot_strength_reduced (op->m, op->k, op->n);
          /* XLA's simplifier rewrites vector dots whatever they cost; for the
           * other shapes the TPU compiler's choice is not public: the
           * cheaper unit, as for convolutions (doc/compute-model.md). */
          double on_mxu = MAX (c.mxu_cycles, ceil (vector_ops / per_cycle));
          double on_vector = ceil ((vector_ops + c.dot_vector_ops) / per_cycle);
          gboolean vec = op->dot_mapping == PS_DOT_MAPPING_VECTOR
                         || (op->dot_mapping == PS_DOT_MAPPING_AUTO
                             && op->m > 0 && op->k > 0 && op->n > 0 && op->batch > 0
                             && (c.dot_strength_reduced || on_vector < on_mxu));
          if (vec)
            {
              c.dot_on_vector = TRUE;
              c.relayout_ops = c.dot_vector_ops;
              c.mxu_cycles = 0;
              c.mxu_passes = 0;
              c.tile_passes = 0;
              c.stream_rows = 0;
            }
        }
    }
  c.vector_cycles = ceil ((vector_ops + c.relayout_ops) / per_cycle);

  if (!op->fused)
    {
      c.hbm_cycles = MAX (op->hbm_bytes, 0.0) / hw->hbm_bw_bytes_per_s * clock;
      c.overhead_cycles = hw->per_op_overhead_s * clock;
    }

  double busy = MAX (c.mxu_cycles, MAX (c.vector_cycles, c.hbm_cycles));
  /* Ties go to the unit listed first: the MXU, then the vector unit. */
  if (busy == c.mxu_cycles && busy > 0)
    c.bound = PS_BOUND_MXU;
  else if (busy == c.vector_cycles && busy > 0)
    c.bound = PS_BOUND_VECTOR;
  else if (busy == c.hbm_cycles && busy > 0)
    c.bound = PS_BOUND_HBM;
  else
    c.bound = PS_BOUND_OVERHEAD;
  if (c.overhead_cycles > busy)
    c.bound = PS_BOUND_OVERHEAD;

  c.cycles = busy + c.overhead_cycles;
  c.time_s = c.cycles / clock;
  c.flops = MAX (op->flops, 0.0);
  if (c.time_s > 0)
    c.mxu_utilization = c.flops / (ps_hardware_peak_flops_per_core (hw) * c.time_s);
  return c;
}

int
ps_compute_dtype_size_bytes (PsComputeDtype dtype)
{
  return dtype == PS_COMPUTE_F32 ? 4 : 2;
}

const char *
ps_compute_dtype_name (PsComputeDtype dtype)
{
  return dtype == PS_COMPUTE_F32 ? "f32" : "bf16";
}

gboolean
ps_compute_dtype_parse (const char *name, PsComputeDtype *out)
{
  if (g_ascii_strcasecmp (name, "bf16") == 0)
    *out = PS_COMPUTE_BF16;
  else if (g_ascii_strcasecmp (name, "f32") == 0)
    *out = PS_COMPUTE_F32;
  else
    return FALSE;
  return TRUE;
}

const char *
ps_compute_bound_name (PsComputeBound bound)
{
  switch (bound)
    {
    case PS_BOUND_MXU:
      return "mxu";
    case PS_BOUND_VECTOR:
      return "vector";
    case PS_BOUND_HBM:
      return "hbm";
    case PS_BOUND_OVERHEAD:
      return "overhead";
    }
  return "?";
}

double
ps_compute_dot_vector_ops (const PsHardware *hw, gint64 batch, gint64 m, gint64 k, gint64 n)
{
  g_return_val_if_fail (hw != NULL, 0);
  double b = (double) clamp0 (batch), dm = (double) clamp0 (m), dk = (double) clamp0 (k),
         dn = (double) clamp0 (n);
  if (b == 0 || dm == 0 || dk == 0 || dn == 0)
    return 0;
  double lanes = MAX (hw->vector_lanes, 1);
  double tree = log2 ((double) hw->vector_lanes * MAX (hw->vector_sublanes, 1));
  /* No contracting dim: a broadcast multiply, one op per output. */
  double per_mac = dk == 1 ? 1 : 2;
  /* Layout 1: the larger free dim runs along the lanes (padded to them);
   * each step of k is a multiply-add of whole registers, so the reduction
   * over k needs no cross-lane work. */
  double big = MAX (dm, dn), small = MIN (dm, dn);
  double free_minor = per_mac * b * dk * small * ceil (big / lanes) * lanes;
  if (dk == 1)
    return free_minor;
  /* Layout 2: k along the lanes (padded), then a tree across one register
   * per output, as a reduce does. The compiler takes the cheaper. */
  double k_minor = per_mac * b * dm * dn * ceil (dk / lanes) * lanes + b * dm * dn * tree;
  return MIN (free_minor, k_minor);
}

gboolean
ps_compute_dot_strength_reduced (gint64 m, gint64 k, gint64 n)
{
  return m == 1 || n == 1 || k == 1;
}

const char *
ps_dot_mapping_name (PsDotMapping m)
{
  static const char *const names[] = { "auto", "mxu", "vector" };
  return m >= PS_DOT_MAPPING_AUTO && m <= PS_DOT_MAPPING_VECTOR ? names[m] : "auto";
}

gboolean
ps_dot_mapping_parse (const char *name, PsDotMapping *out)
{
  for (int i = PS_DOT_MAPPING_AUTO; i <= PS_DOT_MAPPING_VECTOR; i++)
    if (g_ascii_strcasecmp (name, ps_dot_mapping_name ((PsDotMapping) i)) == 0)
      {
        *out = (PsDotMapping) i;
        return TRUE;
      }
  return FALSE;
}

PsComputeOp
ps_compute_matmul_op (gint64 batch, gint64 m, gint64 k, gint64 n, PsComputeDtype dtype,
                      PsMxuPrecision precision)
{
  PsComputeOp op = { 0 };
  op.has_mxu = TRUE;
  op.batch = clamp0 (batch);
  op.m = clamp0 (m);
  op.k = clamp0 (k);
  op.n = clamp0 (n);
  op.dtype = dtype;
  op.precision = precision;
  double b = (double) op.batch;
  /* An empty result needs no operand: XLA removes such a dot. */
  if (op.batch == 0 || op.m == 0 || op.k == 0 || op.n == 0)
    return op;
  op.flops = 2.0 * b * (double) op.m * (double) op.k * (double) op.n;
  op.hbm_bytes = b * ((double) op.m * op.k + (double) op.k * op.n + (double) op.m * op.n)
                 * ps_compute_dtype_size_bytes (dtype);
  return op;
}

PsComputeOp
ps_compute_conv_op (gint64 groups, gint64 m, gint64 window, gint64 k, gint64 n,
                    gint64 input_elements, PsComputeDtype dtype, PsMxuPrecision precision)
{
  PsComputeOp op = ps_compute_matmul_op (groups, m, k, n, dtype, precision);
  op.window = clamp0 (window);
  if (op.flops == 0 || op.window == 0)
    {
      op.flops = 0;
      op.hbm_bytes = 0;
      return op;
    }
  double g = (double) op.batch, w = (double) op.window;
  op.flops *= w;
  op.hbm_bytes = ((double) clamp0 (input_elements) + g * w * (double) op.k * op.n
                  + g * (double) op.m * op.n)
                 * ps_compute_dtype_size_bytes (dtype);
  return op;
}

const char *
ps_conv_mapping_name (PsConvMapping m)
{
  static const char *const names[] = { "auto", "positions", "packed", "vector" };
  return m >= PS_CONV_MAPPING_AUTO && m <= PS_CONV_MAPPING_VECTOR ? names[m] : "auto";
}

gboolean
ps_conv_mapping_parse (const char *name, PsConvMapping *out)
{
  for (int i = PS_CONV_MAPPING_AUTO; i <= PS_CONV_MAPPING_VECTOR; i++)
    if (g_ascii_strcasecmp (name, ps_conv_mapping_name ((PsConvMapping) i)) == 0)
      {
        *out = (PsConvMapping) i;
        return TRUE;
      }
  return FALSE;
}

PsComputeOp
ps_compute_elementwise_op (gint64 elements, int n_inputs, double ops_per_element,
                           double transcendentals_per_element, PsComputeDtype dtype)
{
  PsComputeOp op = { 0 };
  double e = (double) clamp0 (elements);
  op.dtype = dtype;
  op.vector_ops = e * MAX (ops_per_element, 0.0);
  op.transcendentals = e * MAX (transcendentals_per_element, 0.0);
  /* HloCostAnalysis counts one FLOP per elementwise operation. */
  op.flops = op.vector_ops + op.transcendentals;
  op.hbm_bytes = e * (MAX (n_inputs, 0) + 1) * ps_compute_dtype_size_bytes (dtype);
  return op;
}

PsComputeOp
ps_compute_reduce_op (const PsHardware *hw, gint64 in_elements, gint64 out_elements,
                      PsComputeDtype dtype)
{
  PsComputeOp op = { 0 };
  g_return_val_if_fail (hw != NULL, op);
  double in = (double) clamp0 (in_elements);
  double out = (double) clamp0 (out_elements);
  op.dtype = dtype;
  /* Partial sums accumulate elementwise in vector registers; each output
   * then needs a log2-depth tree across the lanes and sublanes of one
   * register. */
  double tree = log2 ((double) hw->vector_lanes * hw->vector_sublanes);
  op.vector_ops = in + out * tree;
  op.flops = in;
  op.hbm_bytes = (in + out) * ps_compute_dtype_size_bytes (dtype);
  return op;
}

PsComputeOp
ps_compute_op_from_trace (const PsTraceCompute *ev)
{
  PsComputeOp op = { 0 };
  g_return_val_if_fail (ev != NULL, op);
  op.has_mxu = ev->has_mxu;
  op.batch = (gint64) MIN (ev->mxu_batch, (guint64) G_MAXINT64);
  op.m = (gint64) MIN (ev->mxu_m, (guint64) G_MAXINT64);
  op.k = (gint64) MIN (ev->mxu_k, (guint64) G_MAXINT64);
  op.n = (gint64) MIN (ev->mxu_n, (guint64) G_MAXINT64);
  if (ev->op == PS_TRACE_OP_CONV)
    op.window = MAX ((gint64) MIN (ev->mxu_window, (guint64) G_MAXINT64), 1);
  op.dtype = (ev->dtype == PS_TRACE_F32 || ev->dtype == PS_TRACE_F64) ? PS_COMPUTE_F32
                                                                       : PS_COMPUTE_BF16;
  switch (ev->precision)
    {
    case PS_TRACE_PRECISION_HIGH:
      op.precision = PS_MXU_PRECISION_HIGH;
      break;
    case PS_TRACE_PRECISION_HIGHEST:
      op.precision = PS_MXU_PRECISION_HIGHEST;
      break;
    default:
      op.precision = PS_MXU_PRECISION_DEFAULT;
      break;
    }
  op.flops = (double) ev->flops;
  op.hbm_bytes = (double) ev->read_bytes + (double) ev->write_bytes;
  op.vector_ops = (double) ev->vector_ops;
  return op;
}

/* Tests of the compute cost model (sim/compute.c). They assert on the
 * model's numbers only, never on wall-clock time. */
#include "config.h"

#include <check.h>
#include <math.h>

#include "sim/compute.h"
#include "tests/suite_main.h"

static PsHardware *hw;

static void
setup (void)
{
  hw = ps_hardware_default ();
}

static void
teardown (void)
{
  ps_hardware_free (hw);
  hw = NULL;
}

static PsComputeCost
matmul (gint64 m, gint64 k, gint64 n, PsComputeDtype dtype, PsMxuPrecision precision)
{
  PsComputeOp op = ps_compute_matmul_op (1, m, k, n, dtype, precision);
  return ps_compute_op (hw, &op);
}

START_TEST (test_large_matmul_near_peak)
{
  PsComputeCost c = matmul (8192, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert_int_eq (c.bound, PS_BOUND_MXU);
  ck_assert_double_ge (c.mxu_utilization, 0.95);
  ck_assert_double_le (c.mxu_utilization, 1.0);
  ck_assert_double_eq_tol (c.flops, 2.0 * 8192.0 * 8192.0 * 8192.0, 1.0);
  /* 64 x 64 weight tiles over 2 MXUs, each streaming 8192 rows plus 256
   * cycles of fill and drain, plus the first tile's load. */
  ck_assert_int_eq (c.tile_passes, 4096);
  ck_assert_double_eq_tol (c.mxu_cycles, 2048.0 * (8192 + 256) + 128, 0.5);
  ck_assert_double_eq_tol (c.time_s, c.cycles / hw->clock_hz, 1e-15);
}
END_TEST

/* One element past the array size pads that dim to two tiles. */
START_TEST (test_dim_129_loses_half)
{
  PsComputeCost big = matmul (8192, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  const gint64 dims128[3][3] = { { 128, 8192, 8192 }, { 8192, 128, 8192 }, { 8192, 8192, 128 } };
  for (int d = 0; d < 3; d++)
    {
      gint64 a[3] = { dims128[d][0], dims128[d][1], dims128[d][2] };
      PsComputeCost c128 = matmul (a[0], a[1], a[2], PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
      a[d] = 129;
      PsComputeCost c129 = matmul (a[0], a[1], a[2], PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
      /* The MXU does twice the tile passes for 1/128 more useful work. */
      ck_assert_int_eq (c129.tile_passes, 2 * c128.tile_passes);
      ck_assert_double_eq_tol (c129.mxu_cycles / c128.mxu_cycles, 2.0, 0.01);
      double ratio = c129.mxu_utilization / big.mxu_utilization;
      ck_assert_msg (ratio > 0.45 && ratio < 0.55, "dim %d: utilization ratio %g", d, ratio);
      ck_assert_int_eq (c129.bound, PS_BOUND_MXU);
    }
}
END_TEST

START_TEST (test_f32_precision_passes)
{
  PsComputeCost bf16 = matmul (8192, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  PsComputeCost f32d = matmul (8192, 8192, 8192, PS_COMPUTE_F32, PS_MXU_PRECISION_DEFAULT);
  PsComputeCost high = matmul (8192, 8192, 8192, PS_COMPUTE_F32, PS_MXU_PRECISION_HIGH);
  PsComputeCost highest = matmul (8192, 8192, 8192, PS_COMPUTE_F32, PS_MXU_PRECISION_HIGHEST);
  /* Precision has no effect on bf16 operands. */
  PsComputeCost bf16h = matmul (8192, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_HIGHEST);
  ck_assert_double_eq_tol (f32d.time_s / bf16.time_s, 1.0, 0.001);
  ck_assert_double_eq_tol (high.time_s / bf16.time_s, 3.0, 0.01);
  ck_assert_double_eq_tol (highest.time_s / bf16.time_s, 6.0, 0.01);
  ck_assert_double_eq_tol (bf16h.time_s, bf16.time_s, 1e-12);
  ck_assert_int_eq (highest.mxu_passes, 6);
  ck_assert_int_eq (high.mxu_passes, 3);
  /* Useful FLOPs do not count the extra passes. */
  ck_assert_double_eq_tol (highest.flops, bf16.flops, 1.0);
}
END_TEST

START_TEST (test_small_matmul_overhead_bound)
{
  /* On the MXU (the auto mapping strength-reduces a 1 x 1 x 1 dot) */
  PsComputeOp op = ps_compute_matmul_op (1, 1, 1, 1, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  op.dot_mapping = PS_DOT_MAPPING_MXU;
  PsComputeCost tiny = ps_compute_op (hw, &op);
  PsComputeCost small = matmul (128, 128, 128, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert_int_eq (tiny.bound, PS_BOUND_OVERHEAD);
  ck_assert_int_eq (small.bound, PS_BOUND_OVERHEAD);
  /* Both occupy one full tile pass: padding makes them cost the same. */
  ck_assert_double_eq_tol (tiny.time_s, small.time_s, 1e-15);
  PsComputeCost reduced = matmul (1, 1, 1, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert (reduced.dot_on_vector);
  ck_assert_int_eq (reduced.bound, PS_BOUND_OVERHEAD);
  ck_assert_double_ge (tiny.time_s, hw->per_op_overhead_s);
  ck_assert_double_lt (small.mxu_utilization, 0.1);
  /* Utilization grows with size. */
  double last = 0;
  for (gint64 s = 128; s <= 8192; s *= 2)
    {
      PsComputeCost c = matmul (s, s, s, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
      ck_assert_msg (c.mxu_utilization > last, "size %" G_GINT64_FORMAT, s);
      last = c.mxu_utilization;
    }
}
END_TEST

START_TEST (test_zero_and_negative_dims)
{
  PsComputeCost c = matmul (0, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert_double_eq (c.mxu_cycles, 0);
  ck_assert_double_eq (c.hbm_cycles, 0);
  ck_assert_int_eq (c.bound, PS_BOUND_OVERHEAD);
  c = matmul (-5, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert_double_eq (c.mxu_cycles, 0);
  ck_assert_double_eq (c.flops, 0);
}
END_TEST

/* The CLI accepts dims up to 2^40: counts must not overflow (UBSan would
 * abort on a signed overflow) and stay finite. */
START_TEST (test_huge_dims)
{
  gint64 big = G_GINT64_CONSTANT (1) << 40;
  PsComputeOp op = ps_compute_matmul_op (big, big, big, big, PS_COMPUTE_F32, PS_MXU_PRECISION_HIGHEST);
  PsComputeCost c = ps_compute_op (hw, &op);
  ck_assert (isfinite (c.time_s) && c.time_s > 0);
  ck_assert_int_eq (c.tile_passes, G_MAXINT64);
  ck_assert_int_eq (c.bound, PS_BOUND_MXU);
}
END_TEST

START_TEST (test_orientation_is_cheaper_operand)
{
  /* A skinny LHS stays in the array; the long RHS streams. */
  PsComputeCost c = matmul (128, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert (c.lhs_stationary);
  ck_assert_int_eq (c.stream_rows, 8192);
  PsComputeCost d = matmul (8192, 8192, 128, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert (!d.lhs_stationary);
  ck_assert_double_eq_tol (c.mxu_cycles, d.mxu_cycles, 0.5);
}
END_TEST

START_TEST (test_batch_multiplies_tiles)
{
  PsComputeOp one = ps_compute_matmul_op (1, 1024, 1024, 1024, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  PsComputeOp four = ps_compute_matmul_op (4, 1024, 1024, 1024, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  PsComputeCost c1 = ps_compute_op (hw, &one);
  PsComputeCost c4 = ps_compute_op (hw, &four);
  ck_assert_int_eq (c4.tile_passes, 4 * c1.tile_passes);
  ck_assert_double_eq_tol (c4.flops, 4 * c1.flops, 1.0);
}
END_TEST

START_TEST (test_weight_load_without_double_buffering)
{
  g_autoptr (PsHardware) single = ps_hardware_copy (hw);
  single->mxu_weight_double_buffered = FALSE;
  PsComputeOp op = ps_compute_matmul_op (1, 8192, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  PsComputeCost db = ps_compute_op (hw, &op);
  PsComputeCost sb = ps_compute_op (single, &op);
  ck_assert_double_eq_tol (sb.mxu_cycles, 2048.0 * (8192 + 128 + 256), 0.5);
  ck_assert_double_gt (sb.mxu_cycles, db.mxu_cycles);
  /* Short streams are load-bound when double-buffered: with fill and drain
   * set to 0, 4096 RHS tiles streaming 8 rows each cost 128 load cycles per
   * tile, exactly what the LHS orientation costs streaming 8192 rows through
   * 64 tiles. */
  PsComputeOp short_op = ps_compute_matmul_op (1, 8, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  hw->mxu_fill_drain_cycles = 0;
  PsComputeCost s = ps_compute_op (hw, &short_op);
  ck_assert_double_eq_tol (s.mxu_cycles, 2048.0 * 128 + 128, 0.5);
}
END_TEST

START_TEST (test_hbm_bound_elementwise)
{
  /* An f32 add of two 64 Mi-element arrays: 768 MiB of traffic. */
  gint64 e = 8192LL * 8192;
  PsComputeOp op = ps_compute_elementwise_op (e, 2, 1, 0, PS_COMPUTE_F32);
  PsComputeCost c = ps_compute_op (hw, &op);
  ck_assert_int_eq (c.bound, PS_BOUND_HBM);
  ck_assert_double_eq_tol (c.hbm_cycles, 3.0 * e * 4 / hw->hbm_bw_bytes_per_s * hw->clock_hz, 1.0);
  ck_assert_double_eq_tol (c.vector_cycles, ceil (e / 2048.0), 0.5);
  ck_assert_double_eq (c.mxu_cycles, 0);
}
END_TEST

START_TEST (test_fused_pays_vector_only)
{
  gint64 e = 8192LL * 8192;
  PsComputeOp op = ps_compute_elementwise_op (e, 1, 1, 1, PS_COMPUTE_F32);
  op.fused = TRUE;
  PsComputeCost c = ps_compute_op (hw, &op);
  ck_assert_double_eq (c.hbm_cycles, 0);
  ck_assert_double_eq (c.overhead_cycles, 0);
  ck_assert_int_eq (c.bound, PS_BOUND_VECTOR);
  /* One op plus one transcendental (4 ops) per element over 2048 ALU slots. */
  ck_assert_double_eq_tol (c.vector_cycles, ceil (e * 5.0 / 2048.0), 0.5);
}
END_TEST

START_TEST (test_vector_bound_transcendentals)
{
  /* Many transcendentals per byte: the vector unit, not HBM, limits. */
  PsComputeOp op = ps_compute_elementwise_op (1 << 24, 1, 10, 10, PS_COMPUTE_BF16);
  PsComputeCost c = ps_compute_op (hw, &op);
  ck_assert_int_eq (c.bound, PS_BOUND_VECTOR);
  ck_assert_double_gt (c.vector_cycles, c.hbm_cycles);
}
END_TEST

START_TEST (test_matmul_with_fused_epilogue)
{
  /* A GELU-like epilogue on a large matmul hides under the MXU time. */
  PsComputeOp op = ps_compute_matmul_op (1, 8192, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  PsComputeCost plain = ps_compute_op (hw, &op);
  op.vector_ops = 8.0 * 8192 * 8192;
  op.transcendentals = 8192.0 * 8192;
  PsComputeCost fused = ps_compute_op (hw, &op);
  ck_assert_double_eq_tol (fused.time_s, plain.time_s, 1e-12);
  ck_assert_double_gt (fused.vector_cycles, 0);
}
END_TEST

START_TEST (test_reduce)
{
  PsComputeOp op = ps_compute_reduce_op (hw, 1 << 20, 1024, PS_COMPUTE_F32);
  ck_assert_double_eq_tol (op.vector_ops, (1 << 20) + 1024 * 10.0, 0.5);
  ck_assert_double_eq_tol (op.hbm_bytes, ((1 << 20) + 1024) * 4.0, 0.5);
}
END_TEST

/* The degenerate dot: 4M x 8 x 2 streams 4M rows through one
 * mostly empty weight tile on the MXU; as multiply + reduce on the vector
 * unit (m in the lanes, k accumulated across registers) it costs
 * 2 x 4M x 8 x 2 / 2048 = 65,536 cycles and is HBM-bound (80 MiB). */
START_TEST (test_degenerate_dot_on_vector_unit)
{
  PsComputeCost c = matmul (4194304, 8, 2, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert (c.dot_on_vector);
  ck_assert (!c.dot_strength_reduced);
  ck_assert_double_eq (c.mxu_cycles, 0);
  ck_assert_double_eq_tol (c.dot_mxu_cycles, 4194304.0 + 256 + 128, 0.5);
  ck_assert_double_eq_tol (c.dot_vector_ops, 2.0 * 4194304 * 8 * 2, 0.5);
  ck_assert_double_eq_tol (c.vector_cycles, 65536, 0.5);
  double hbm = (4194304.0 * 8 + 16 + 4194304.0 * 2) * 2;
  ck_assert_double_eq_tol (c.hbm_cycles, hbm / hw->hbm_bw_bytes_per_s * hw->clock_hz, 1e-3);
  ck_assert_int_eq (c.bound, PS_BOUND_HBM);
  /* within 2x of the HBM bound (the criterion) */
  ck_assert_double_le (c.time_s, 2 * hbm / hw->hbm_bw_bytes_per_s);
  /* asked to stay on the MXU: the old cost */
  PsComputeOp op = ps_compute_matmul_op (1, 4194304, 8, 2, PS_COMPUTE_BF16,
                                         PS_MXU_PRECISION_DEFAULT);
  op.dot_mapping = PS_DOT_MAPPING_MXU;
  PsComputeCost m = ps_compute_op (hw, &op);
  ck_assert (!m.dot_on_vector);
  ck_assert_double_eq_tol (m.mxu_cycles, c.dot_mxu_cycles, 0.5);
  ck_assert_int_eq (m.bound, PS_BOUND_MXU);
}
END_TEST

/* XLA's algebraic simplifier rewrites a dot with a vector operand (m or n
 * 1) or no contracting dim (k 1) whatever the MXU would cost; the
 * vector-form closed form pads the lane dim to 128. */
START_TEST (test_dot_strength_reduction_rules)
{
  ck_assert (ps_compute_dot_strength_reduced (1, 4096, 4096));
  ck_assert (ps_compute_dot_strength_reduced (4096, 4096, 1));
  ck_assert (ps_compute_dot_strength_reduced (4096, 1, 4096));
  ck_assert (!ps_compute_dot_strength_reduced (2, 2, 2));
  /* matrix-vector: n = 1, 2 ops per MAC, m in the lanes */
  PsComputeCost mv = matmul (8192, 8192, 1, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert (mv.dot_on_vector && mv.dot_strength_reduced);
  ck_assert_double_eq_tol (mv.dot_vector_ops, 2.0 * 8192 * 8192, 0.5);
  /* outer product (k = 1): one multiply per output */
  ck_assert_double_eq_tol (ps_compute_dot_vector_ops (hw, 1, 1000, 1, 300), 300.0 * 1024, 0.5);
  /* free dims of 8 and 2: the lanes are padded to 128 (k in the lanes is
   * cheaper: 2 x 16 x 128 + 16 x 10 tree) */
  ck_assert_double_eq_tol (ps_compute_dot_vector_ops (hw, 1, 8, 100, 2),
                           MIN (2.0 * 100 * 2 * 128, 2.0 * 16 * 128 + 16 * 10), 0.5);
  ck_assert_double_eq_tol (ps_compute_dot_vector_ops (hw, 3, 8, 1000, 2),
                           3 * (2.0 * 16 * 1024 + 16 * 10), 0.5);
  /* large matmuls stay on the MXU */
  PsComputeCost big = matmul (8192, 8192, 8192, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert (!big.dot_on_vector);
  PsComputeCost small = matmul (128, 128, 128, PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert (!small.dot_on_vector);
  PsDotMapping dm;
  ck_assert (ps_dot_mapping_parse ("vector", &dm) && dm == PS_DOT_MAPPING_VECTOR);
  ck_assert (!ps_dot_mapping_parse ("gpu", &dm));
  ck_assert_str_eq (ps_dot_mapping_name (PS_DOT_MAPPING_MXU), "mxu");
}
END_TEST

START_TEST (test_what_if_hardware)
{
  g_autoptr (PsHardware) fast = ps_hardware_copy (hw);
  fast->hbm_bw_bytes_per_s *= 2;
  gint64 e = 8192LL * 8192;
  PsComputeOp op = ps_compute_elementwise_op (e, 2, 1, 0, PS_COMPUTE_F32);
  PsComputeCost a = ps_compute_op (hw, &op);
  PsComputeCost b = ps_compute_op (fast, &op);
  ck_assert_double_eq_tol (b.hbm_cycles * 2, a.hbm_cycles, 1.0);
}
END_TEST

START_TEST (test_from_trace)
{
  PsTraceCompute ev = { 0 };
  ev.op = PS_TRACE_OP_MATMUL;
  ev.dtype = PS_TRACE_F32;
  ev.precision = PS_TRACE_PRECISION_HIGHEST;
  ev.has_mxu = TRUE;
  ev.mxu_batch = 2;
  ev.mxu_m = 256;
  ev.mxu_k = 512;
  ev.mxu_n = 1024;
  ev.flops = 2ULL * 2 * 256 * 512 * 1024;
  ev.read_bytes = 1000;
  ev.write_bytes = 24;
  ev.vector_ops = 77;
  PsComputeOp op = ps_compute_op_from_trace (&ev);
  ck_assert (op.has_mxu);
  ck_assert_int_eq (op.dtype, PS_COMPUTE_F32);
  ck_assert_int_eq (op.precision, PS_MXU_PRECISION_HIGHEST);
  ck_assert_int_eq (op.batch, 2);
  ck_assert_int_eq (op.n, 1024);
  ck_assert_double_eq (op.hbm_bytes, 1024);
  ck_assert_double_eq (op.vector_ops, 77);
  ck_assert_double_eq (op.flops, (double) ev.flops);
  ev.dtype = PS_TRACE_BF16;
  op = ps_compute_op_from_trace (&ev);
  ck_assert_int_eq (op.dtype, PS_COMPUTE_BF16);
  ck_assert_int_eq (op.window, 0);
  ev.op = PS_TRACE_OP_CONV;
  ev.mxu_window = 27;
  op = ps_compute_op_from_trace (&ev);
  ck_assert_int_eq (op.window, 27);
}
END_TEST

/* A 3x3x3 convolution of 32 into 32 features over 128^3 positions (M =
 * 2^21 rows). Positions: 27 weight tiles (32 x 32 real weights padded to
 * 128 x 128 each), 14 per MXU, each streaming 2^21 rows plus 256 cycles of
 * fill and drain, plus the first load. Packed: 27 x 32 = 864 contracted
 * at once, ceil(864/128) = 7 tiles, 4 per MXU; its rows are assembled by
 * 2^21 x 864 vector ops (884736 cycles at 2048 per cycle). */
START_TEST (test_conv_small_features)
{
  const double m = 2097152;
  PsComputeOp op = ps_compute_conv_op (1, (gint64) m, 27, 32, 32, (gint64) m * 32,
                                       PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  ck_assert_double_eq (op.flops, 2.0 * m * 27 * 32 * 32);
  ck_assert_double_eq (op.hbm_bytes, (m * 32 + 27.0 * 32 * 32 + m * 32) * 2);
  op.mapping = PS_CONV_MAPPING_POSITIONS;
  PsComputeCost pos = ps_compute_op (hw, &op);
  ck_assert_int_eq (pos.tile_passes, 27);
  ck_assert_double_eq_tol (pos.mxu_cycles, 14 * (m + 256) + 128, 0.5);
  ck_assert_double_eq_tol (pos.array_fill, 1.0 / 16, 1e-12);
  ck_assert_int_eq (pos.conv_mapping, PS_CONV_MAPPING_POSITIONS);
  ck_assert_double_eq (pos.relayout_ops, 0);
  op.mapping = PS_CONV_MAPPING_PACKED;
  PsComputeCost pack = ps_compute_op (hw, &op);
  ck_assert_int_eq (pack.tile_passes, 7);
  ck_assert_double_eq_tol (pack.mxu_cycles, 4 * (m + 256) + 128, 0.5);
  ck_assert_double_eq_tol (pack.array_fill, 864.0 * 32 / (7 * 128 * 128), 1e-12);
  ck_assert_double_eq (pack.relayout_ops, m * 864);
  ck_assert_double_eq (pack.vector_cycles, m * 864 / 2048);
  ck_assert_int_eq (pack.conv_mapping, PS_CONV_MAPPING_PACKED);
  /* auto takes the cheaper: packed. */
  op.mapping = PS_CONV_MAPPING_AUTO;
  PsComputeCost c = ps_compute_op (hw, &op);
  ck_assert_int_eq (c.conv_mapping, PS_CONV_MAPPING_PACKED);
  ck_assert_double_eq (c.mxu_cycles, pack.mxu_cycles);
  ck_assert_int_eq (c.bound, PS_BOUND_MXU);
  ck_assert_double_eq_tol (c.mxu_utilization, op.flops / (61.6e12 * c.time_s), 1e-3);
}
END_TEST

/* Features that fill the array: both mappings need the same tiles (27 x 2
 * x 2 = 108 = ceil(6912/128) x 2); the tie goes to positions, which needs
 * no relayout. A 1-position window is a plain matmul. */
START_TEST (test_conv_full_features_and_plain_matmul)
{
  PsComputeOp op = ps_compute_conv_op (1, 4096, 27, 256, 256, 4096 * 256, PS_COMPUTE_BF16,
                                       PS_MXU_PRECISION_DEFAULT);
  PsComputeCost c = ps_compute_op (hw, &op);
  ck_assert_int_eq (c.conv_mapping, PS_CONV_MAPPING_POSITIONS);
  ck_assert_int_eq (c.tile_passes, 108);
  ck_assert_double_eq_tol (c.array_fill, 1.0, 1e-12);
  ck_assert_double_eq_tol (c.mxu_cycles, 54 * (4096 + 256) + 128, 0.5);
  PsComputeOp one = ps_compute_conv_op (2, 1000, 1, 300, 200, 2000 * 300, PS_COMPUTE_F32,
                                        PS_MXU_PRECISION_HIGH);
  PsComputeOp mm = ps_compute_matmul_op (2, 1000, 300, 200, PS_COMPUTE_F32, PS_MXU_PRECISION_HIGH);
  PsComputeCost a = ps_compute_op (hw, &one), b = ps_compute_op (hw, &mm);
  ck_assert_double_eq (a.mxu_cycles, b.mxu_cycles);
  ck_assert_double_eq (one.flops, mm.flops);
  /* Groups multiply the tile sets: depthwise 64 groups of 1 x 1 features;
   * packed, each position's one feature takes 8 rows (the sublanes):
   * 31 x 8 = 248 rows, 2 tiles per group. */
  PsComputeOp dw = ps_compute_conv_op (64, 1000, 31, 1, 1, 1000 * 64, PS_COMPUTE_BF16,
                                       PS_MXU_PRECISION_DEFAULT);
  dw.mapping = PS_CONV_MAPPING_POSITIONS;
  ck_assert_int_eq (ps_compute_op (hw, &dw).tile_passes, 64 * 31);
  dw.mapping = PS_CONV_MAPPING_PACKED;
  PsComputeCost dwc = ps_compute_op (hw, &dw);
  ck_assert_int_eq (dwc.tile_passes, 64 * 2);
  ck_assert_double_eq_tol (dwc.array_fill, 31.0 / (2 * 128 * 128), 1e-12);
  /* The cheapest is the vector unit: 2 ops per multiply-add, 64 x 1000 x
   * 31 of them, 2048 ops per cycle. */
  dw.mapping = PS_CONV_MAPPING_AUTO;
  dwc = ps_compute_op (hw, &dw);
  ck_assert_int_eq (dwc.conv_mapping, PS_CONV_MAPPING_VECTOR);
  ck_assert_double_eq (dwc.mxu_cycles, 0);
  ck_assert_double_eq (dwc.vector_cycles, ceil (2.0 * 64 * 1000 * 31 / 2048));
  /* ResNet's first layer: 7 x 7 positions of 3 features (padded to 8) =
   * 392 rows, 4 tiles; space-to-depth's 4 x 4 of 12 (padded to 16) = 256,
   * 2 tiles over the same 112 x 112 outputs. */
  PsComputeOp r1 = ps_compute_conv_op (1, 128 * 112 * 112, 49, 3, 64, 128 * 224 * 224 * 3,
                                       PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  PsComputeOp r2 = ps_compute_conv_op (1, 128 * 112 * 112, 16, 12, 64, 128 * 112 * 112 * 12,
                                       PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
  PsComputeCost c1 = ps_compute_op (hw, &r1), c2 = ps_compute_op (hw, &r2);
  ck_assert (c1.conv_mapping == PS_CONV_MAPPING_PACKED && c2.conv_mapping == PS_CONV_MAPPING_PACKED);
  ck_assert_int_eq (c1.tile_passes, 4);
  ck_assert_int_eq (c2.tile_passes, 2);
  ck_assert_int_eq (ps_compute_conv_packed_k (hw, 3), 8);
  ck_assert_int_eq (ps_compute_conv_packed_k (hw, 16), 16);
  PsConvMapping mp;
  ck_assert (ps_conv_mapping_parse ("Packed", &mp) && mp == PS_CONV_MAPPING_PACKED);
  ck_assert (!ps_conv_mapping_parse ("im2col", &mp));
  ck_assert_str_eq (ps_conv_mapping_name (PS_CONV_MAPPING_POSITIONS), "positions");
}
END_TEST

START_TEST (test_names)
{
  PsComputeDtype d;
  ck_assert (ps_compute_dtype_parse ("bf16", &d) && d == PS_COMPUTE_BF16);
  ck_assert (ps_compute_dtype_parse ("F32", &d) && d == PS_COMPUTE_F32);
  ck_assert (!ps_compute_dtype_parse ("f16", &d));
  ck_assert_str_eq (ps_compute_bound_name (PS_BOUND_HBM), "hbm");
  ck_assert_str_eq (ps_compute_dtype_name (PS_COMPUTE_F32), "f32");
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("compute");
  TCase *tc = ps_check_case (s, "model", 0,
                             PS_CHECK_TESTS (test_large_matmul_near_peak,
                                             test_dim_129_loses_half,
                                             test_f32_precision_passes,
                                             test_small_matmul_overhead_bound,
                                             test_zero_and_negative_dims,
                                             test_huge_dims,
                                             test_orientation_is_cheaper_operand,
                                             test_batch_multiplies_tiles,
                                             test_weight_load_without_double_buffering,
                                             test_hbm_bound_elementwise,
                                             test_fused_pays_vector_only,
                                             test_vector_bound_transcendentals,
                                             test_matmul_with_fused_epilogue,
                                             test_reduce,
                                             test_degenerate_dot_on_vector_unit,
                                             test_dot_strength_reduction_rules,
                                             test_what_if_hardware,
                                             test_from_trace,
                                             test_conv_small_features,
                                             test_conv_full_features_and_plain_matmul,
                                             test_names));
  tcase_add_checked_fixture (tc, setup, teardown);
  return ps_check_run (s, CK_FORK_GETENV);
}

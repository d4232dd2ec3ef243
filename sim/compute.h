/* The compute cost model: how long one fused op takes on one TensorCore.
 *
 * time = max(MXU cycles, vector-unit cycles, HBM cycles) / clock + per-op
 * overhead, from the constants of a PsHardware (topology/hardware.h).
 *
 *  - MXU: a rows x cols weight-stationary systolic array. The stationary
 *    operand (K x N, dims padded up to the array) is cut into tiles; each tile
 *    is loaded (hidden behind the previous tile when the hardware double
 *    buffers), and the other operand's rows stream through it, paying fill and
 *    drain once per tile pass. The MXUs of a core work on different tiles. The
 *    model lets the compiler pick which operand stays stationary (the cheaper
 *    one), as XLA picks layouts. f32 operands cost 1/3/6 bf16 passes.
 *  - Vector unit: lanes x sublanes x ALUs element operations per cycle; a
 *    transcendental costs hw->vector_transcendental_ops operations.
 *  - HBM: bytes read + written over the core's HBM bandwidth. An op marked
 *    `fused` was fused into its producer by the lowering: it pays neither HBM
 *    traffic nor the per-op overhead, only its vector work.
 *
 * doc/compute-model.md gives the formulas and a worked example.
 *
 * Usage:
 *   PsComputeOp op = ps_compute_matmul_op (1, 8192, 8192, 8192,
 *                                          PS_COMPUTE_BF16, PS_MXU_PRECISION_DEFAULT);
 *   PsComputeCost c = ps_compute_op (hw, &op);
 *   printf ("%g s, %s-bound\n", c.time_s, ps_compute_bound_name (c.bound));
 *
 * Everything here is plain values: nothing to free.
 */
#ifndef PS_SIM_COMPUTE_H
#define PS_SIM_COMPUTE_H

#include <glib.h>

#include "topology/hardware.h"
#include "traces/trace.h"

G_BEGIN_DECLS

/* Operand element type as the MXU sees it. Anything narrower than 32 bits
 * goes through the MXU in one pass, like bf16. */
typedef enum {
  PS_COMPUTE_BF16,
  PS_COMPUTE_F32,
} PsComputeDtype;

/* How a convolution's window meets the systolic array (doc/compute-model.md,
 * "Convolutions"). */
typedef enum {
  PS_CONV_MAPPING_AUTO,       /* the cheapest, as the compiler would pick */
  PS_CONV_MAPPING_POSITIONS,  /* one weight-tile set per window position, features padded per position */
  PS_CONV_MAPPING_PACKED,     /* window positions x features as one contraction, padded once */
  PS_CONV_MAPPING_VECTOR,     /* multiply-adds on the vector unit (depthwise convolutions) */
} PsConvMapping;

/* Where a matmul (a dot; not a convolution) runs (doc/compute-model.md,
 * "Degenerate dots"). */
typedef enum {
  PS_DOT_MAPPING_AUTO,    /* XLA's strength reduction, else the cheaper unit */
  PS_DOT_MAPPING_MXU,     /* on the systolic array whatever its shape */
  PS_DOT_MAPPING_VECTOR,  /* multiply + reduce on the vector unit */
} PsDotMapping;

typedef struct {
  /* Matmul part: out[batch, m, n] = sum_k lhs[batch, m, k] * rhs[batch, k, n].
   * has_mxu FALSE for ops that do not use the MXU. A convolution adds a
   * window: out[batch, m, n] = sum_w sum_k lhs_w[batch, m, k] * rhs[batch, w, k, n]
   * with k the input features per group, m batch x output positions, n the
   * output features per group, batch the groups. */
  gboolean has_mxu;
  gint64 batch, m, k, n;
  gint64 window;               /* convolution: kernel window positions (>= 1); 0: not a convolution */
  PsConvMapping mapping;       /* convolution: AUTO unless asked otherwise */
  PsDotMapping dot_mapping;    /* matmul (window 0): AUTO unless asked otherwise */
  PsComputeDtype dtype;
  PsMxuPrecision precision;       /* only matters for f32 operands */

  double flops;                /* useful FLOPs (for utilization), 2*b*m*k*n for a matmul */
  double hbm_bytes;            /* HBM bytes read + written */
  double vector_ops;           /* element operations on the vector unit (incl. a fused epilogue) */
  double transcendentals;      /* exp/log/tanh/rsqrt evaluations on the vector unit */
  gboolean fused;              /* fused into its producer: no HBM traffic, no overhead */
} PsComputeOp;

typedef enum {
  PS_BOUND_MXU,
  PS_BOUND_VECTOR,
  PS_BOUND_HBM,
  PS_BOUND_OVERHEAD,           /* the per-op overhead exceeds every unit's time */
} PsComputeBound;

typedef struct {
  double mxu_cycles;
  double vector_cycles;
  double hbm_cycles;
  double overhead_cycles;
  double cycles;               /* max(mxu, vector, hbm) + overhead */
  double time_s;               /* cycles / clock */
  PsComputeBound bound;
  double flops;                /* useful FLOPs, as given */
  double mxu_utilization;      /* flops / (peak bf16 FLOP/s x time); 0 when time is 0 */

  /* MXU details (0 without MXU work). */
  gint64 mxu_passes;           /* bf16 passes per tile (1, or f32 pass count) */
  gint64 tile_passes;          /* weight-tile passes over all MXUs of the core */
  gint64 stream_rows;          /* rows streamed through each tile */
  gboolean lhs_stationary;     /* the model kept the LHS in the array (transposed) */
  /* Real weights per weight-tile slot (1 when no dim is padded to the
   * array): the padding waste is 1 - array_fill. */
  double array_fill;
  /* Convolutions: the mapping taken (POSITIONS, PACKED or VECTOR); vector
   * ops spent assembling packed rows or doing the multiply-adds (included
   * in vector_cycles). */
  PsConvMapping conv_mapping;
  double relayout_ops;
  /* Matmuls: TRUE when the dot runs as multiply + reduce on the vector unit
   * (mxu_cycles then 0); the MXU cycles it would have cost on the array and
   * the vector ops of the multiply-reduce form, whichever was taken. */
  gboolean dot_on_vector;
  gboolean dot_strength_reduced;  /* XLA's algebraic simplifier rewrites it (m, n or k is 1) */
  double dot_mxu_cycles;
  double dot_vector_ops;
} PsComputeCost;

/* Cost of one op on one TensorCore. Never fails; negative counts are
 * treated as zero. */
PsComputeCost ps_compute_op (const PsHardware *hw, const PsComputeOp *op);

/* MXU cycles of a matmul alone (the MXU term of ps_compute_op for a
 * matmul); *array_fill_out (may be NULL) as PsComputeCost.array_fill. */
double ps_compute_mxu_cycles (const PsHardware *hw, gint64 batch, gint64 m, gint64 k,
                              gint64 n, int passes, gint64 *tile_passes_out,
                              gint64 *stream_rows_out, gboolean *lhs_stationary_out,
                              double *array_fill_out);

/* Vector ops of a matmul done as multiply + reduce on the vector unit
 * (the strength-reduced form): 2 per multiply-add over the layout's padded
 * tiles, the largest of m, k, n in the lanes and the next in the sublanes,
 * plus a cross-lane tree per output when k is the lane dim. */
double ps_compute_dot_vector_ops (const PsHardware *hw, gint64 batch, gint64 m, gint64 k,
                                  gint64 n);
/* TRUE when XLA's algebraic simplifier rewrites the dot as multiply (+
 * reduce): an operand with only batch and contracting dims (m or n is 1
 * once size-1 dims are removed) or no contracting dim (k is 1). */
gboolean ps_compute_dot_strength_reduced (gint64 m, gint64 k, gint64 n);
const char *ps_dot_mapping_name (PsDotMapping m);           /* "auto", "mxu", "vector" */
gboolean ps_dot_mapping_parse (const char *name, PsDotMapping *out);

/* A plain matmul: flops 2*b*m*k*n, HBM bytes = both operands read + result
 * written, all in `dtype`. */
PsComputeOp ps_compute_matmul_op (gint64 batch, gint64 m, gint64 k, gint64 n,
                                  PsComputeDtype dtype, PsMxuPrecision precision);

/* A convolution of `groups` groups as the MXU sees it: `window` kernel
 * positions, `m` = batch x output positions, `k` input and `n` output
 * features per group. flops = 2 x groups x m x window x k x n (every
 * window position counted, padding included); HBM bytes = input_elements +
 * window x k x n x groups (the kernel) + m x n x groups (the output), in
 * `dtype`. */
PsComputeOp ps_compute_conv_op (gint64 groups, gint64 m, gint64 window, gint64 k, gint64 n,
                                gint64 input_elements, PsComputeDtype dtype,
                                PsMxuPrecision precision);
/* The features of one window position as the packed mapping lays them
 * out: k padded to the hardware's sublanes. */
gint64 ps_compute_conv_packed_k (const PsHardware *hw, gint64 k);
const char *ps_conv_mapping_name (PsConvMapping m);          /* "auto", "positions", "packed", "vector" */
gboolean ps_conv_mapping_parse (const char *name, PsConvMapping *out);

/* An elementwise op over `elements` outputs reading `n_inputs` arrays of the
 * same size, costing `ops_per_element` vector operations and
 * `transcendentals_per_element` transcendentals per element. */
PsComputeOp ps_compute_elementwise_op (gint64 elements, int n_inputs, double ops_per_element,
                                       double transcendentals_per_element,
                                       PsComputeDtype dtype);

/* A reduction of `in_elements` to `out_elements`: one add per input element
 * plus a cross-lane and cross-sublane tree per output element. */
PsComputeOp ps_compute_reduce_op (const PsHardware *hw, gint64 in_elements,
                                  gint64 out_elements, PsComputeDtype dtype);

/* The compute event of a step trace as a PsComputeOp (f32 and f64 operands
 * take the f32 pass count, everything else one pass). */
PsComputeOp ps_compute_op_from_trace (const PsTraceCompute *ev);

int ps_compute_dtype_size_bytes (PsComputeDtype dtype);
const char *ps_compute_dtype_name (PsComputeDtype dtype);     /* "bf16", "f32" */
gboolean ps_compute_dtype_parse (const char *name, PsComputeDtype *out);
const char *ps_compute_bound_name (PsComputeBound bound);     /* "mxu", "vector", "hbm", "overhead" */

G_END_DECLS

#endif

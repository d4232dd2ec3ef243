/* Hardware files: every constant of the machine model, loaded from a GKeyFile
 * .ini so that a user can ask "what if the links were twice as fast?" by
 * copying the bundled file, editing one value and passing `--hw FILE`.
 *
 * The bundled TPU v3 file (topology/tpu-v3.ini) is compiled into the binary,
 * so podsim works from any directory and when installed; it is also installed
 * under $(pkgdatadir) as a starting point for what-if files. Every value in it
 * names its published source; see doc/hardware.md.
 *
 * Usage:
 *   g_autoptr (PsHardware) hw = ps_hardware_load_or_default (opt_hw, &error);
 *   if (!hw) return ps_cli_fail (error);
 *   double peak = ps_hardware_peak_flops_per_core (hw);
 *
 * The loader is strict: a missing key, a value that is not a number, a
 * negative or zero size/bandwidth, or an unknown section or key (a typo must
 * not silently fall back to a default) is a PS_ERROR_PARSE error whose message
 * starts with "FILE:LINE: " or, where the line is unknown,
 * "FILE: key [section] name: ".
 *
 * All quantities are SI units named in the field (bytes, seconds, Hz,
 * bytes per second). Bandwidths of links are per direction.
 */
#ifndef PS_TOPOLOGY_HARDWARE_H
#define PS_TOPOLOGY_HARDWARE_H

#include <glib.h>
#include "common/params.h"

G_BEGIN_DECLS

/* Matmul precision for f32 operands on a bf16 MXU (XLA's PrecisionConfig). */
typedef enum {
  PS_MXU_PRECISION_DEFAULT = 0,
  PS_MXU_PRECISION_HIGH,
  PS_MXU_PRECISION_HIGHEST,
} PsMxuPrecision;

typedef struct {
  char *name;                     /* [chip] name, e.g. "TPU v3" */

  /* [chip] */
  double clock_hz;                /* TensorCore clock */
  int tensorcores_per_chip;       /* each is a separate XLA device */

  /* [mxu] */
  int mxus_per_core;
  int mxu_rows;                   /* systolic array height (K side of a weight tile) */
  int mxu_cols;                   /* systolic array width (N side of a weight tile) */
  int mxu_weight_load_cycles;     /* cycles to shift one weight tile into an MXU */
  gboolean mxu_weight_double_buffered; /* next tile loads while the current one streams */
  int mxu_fill_drain_cycles;      /* pipeline latency per tile pass (fill + drain) */
  int f32_passes[3];              /* bf16 passes per f32 matmul, by PsMxuPrecision */

  /* [vector] */
  int vector_lanes;
  int vector_sublanes;
  int vector_alus;                /* ALUs per lane x sublane slot */
  int vector_transcendental_ops;  /* ALU ops one exp/log/tanh/rsqrt costs */
  guint64 vmem_bytes;             /* on-core vector memory */

  /* [memory] */
  guint64 hbm_bytes_per_core;
  double hbm_bw_bytes_per_s;      /* per core */

  /* [ici] */
  int ici_links_per_chip;         /* ports of the 2D torus: +X, -X, +Y, -Y */
  double ici_link_bw_bytes_per_s; /* per link, per direction */
  double ici_hop_latency_s;       /* per chip-to-chip hop */

  /* [onchip]: the path between the TensorCores of one chip */
  double onchip_bw_bytes_per_s;   /* per direction */
  double onchip_latency_s;

  /* [overhead] */
  double per_op_overhead_s;       /* fixed cost of launching one fused op */
  double collective_launch_overhead_s; /* fixed cost of starting one collective */
} PsHardware;

/* Parses a hardware file. `display_name` is used in error messages.
 * Returns NULL with a PS_ERROR_PARSE (or PS_ERROR_IO) error. transfer full. */
PsHardware *ps_hardware_load (const char *path, GError **error);
PsHardware *ps_hardware_load_data (const char *text, gsize len,
                                   const char *display_name, GError **error);

/* The bundled TPU v3 model (parsed from the embedded copy of tpu-v3.ini).
 * Never fails. transfer full. */
PsHardware *ps_hardware_default (void);

/* The option naming the hardware file ([slice] hw; common/params.h). */
extern const PsParamSpec ps_hardware_param_hw;

/* `path` NULL means the bundled default; otherwise ps_hardware_load().
 * transfer full. */
PsHardware *ps_hardware_load_or_default (const char *path, GError **error);

/* The text of the bundled topology/tpu-v3.ini. transfer none. */
const char *ps_hardware_default_text (void);

PsHardware *ps_hardware_copy (const PsHardware *hw);
void ps_hardware_free (PsHardware *hw);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsHardware, ps_hardware_free)

/* Peak dense bf16 FLOP/s of one TensorCore: 2 x MXUs x rows x cols x clock. */
double ps_hardware_peak_flops_per_core (const PsHardware *hw);

/* Number of bf16 MXU passes a matmul needs: 1 for bf16 operands, the
 * precision's pass count for f32 operands. */
int ps_hardware_mxu_passes (const PsHardware *hw, gboolean f32_operands,
                            PsMxuPrecision precision);

/* "default" / "high" / "highest" <-> PsMxuPrecision. parse returns FALSE on an
 * unknown name. */
const char *ps_precision_name (PsMxuPrecision precision);
gboolean ps_precision_parse (const char *name, PsMxuPrecision *out);

G_END_DECLS

#endif

/* Buffer tiling: the HBM bytes an array takes once the TPU compiler has
 * laid it out in tiles. The memory analysis (memory.h) sizes every buffer
 * with it, and the cost analysis counts a kernel's HBM traffic in the
 * same tiled bytes (PsCostOptions.tiling).
 *
 * Model (doc/compute-model.md, "Buffer tiling"): Cloud TPU arrays are
 * tiled, which pads one dimension to a multiple of 8 and a different one
 * to a multiple of 128, XLA choosing the layout by heuristics (Cloud TPU
 * performance guide, "Consequences of tiling"). The 8 is for 32-bit
 * elements: narrower ones pack 32/bits to a sublane, as the (8,128)(2,1)
 * tiles of bf16 in XLA's tiled-layout notation (xla/tiled_layout.md), so
 * 16 rows for 16-bit and 32 for 8-bit and narrower types. A rank-1 array
 * is tiled linearly (rows x 128 elements a tile); scalars are not padded.
 * Which two dims XLA's TPU layout assignment makes minor is not public:
 *   - PS_TILING_BEST (default): the pair that pads least, the best layout
 *     assignment could do (a lower bound on the padded size);
 *   - PS_TILING_MINOR: the last two dims as written (row-major), what a
 *     layout assignment that never moved a dim would give;
 *   - PS_TILING_NONE: dense bytes (podsim before issue 21's tiling).
 * Nothing to free.
 */
#ifndef PS_PARTITIONER_TILING_H
#define PS_PARTITIONER_TILING_H

#include <glib.h>
#include <stdint.h>

#include "common/params.h"
#include "partitioner/ir/shape.h"

G_BEGIN_DECLS

typedef enum {
  PS_TILING_BEST = 0,
  PS_TILING_MINOR,
  PS_TILING_NONE,
} PsTilingMode;

/* The lane tile (minor dim) and the sublane tile of 32-bit elements. */
#define PS_TILING_LANES 128
#define PS_TILING_SUBLANES 8

const char *ps_tiling_mode_name (PsTilingMode m);             /* "best", "minor", "none" */
/* `--buffer-tiling`, the model files' [options] buffer_tiling. */
extern const PsParamSpec ps_tiling_param_mode;
gboolean ps_tiling_mode_parse (const char *name, const char *what, PsTilingMode *out,
                               GError **error);

/* Rows of one tile for elements of `t`: 8 for 32 and 64 bits, 16 for 16,
 * 32 for 8 bits and fewer. */
int64_t ps_tiling_sublanes (PsElemType t);

/* Bytes of `s` (tuples: the sum of their leaves) laid out in tiles. */
int64_t ps_tiling_bytes (const PsShape *s, PsTilingMode mode);

G_END_DECLS

#endif

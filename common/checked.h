/* Overflow-checked arithmetic and the size limits podsim enforces on what it
 * reads (doc/robustness.md).
 *
 * Every size read from input or computed from read sizes (array shapes,
 * constants, trace totals, hardware values, command-line counts) goes
 * through these helpers, so a hostile file is rejected with a located error
 * before anything is allocated, instead of wrapping around or allocating
 * terabytes. Each returns FALSE when the exact result does not fit (or is
 * over the limit); *out is then left unchanged.
 *
 * common/ is the lowest floor: GLib only.
 */
#ifndef PS_COMMON_CHECKED_H
#define PS_COMMON_CHECKED_H

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

/* Elements of one array, or of all leaves of a tuple together: 2^40
 * (4 TiB of f32). A v3-2048 pod holds 2^45 bytes of HBM in all, so no array
 * a pod can hold is refused; every byte size of a valid shape fits in an
 * int64 with room for sums. */
#define PS_MAX_ELEMENTS (INT64_C (1) << 40)
/* Nesting depth of recursive text forms (tuple shapes, tuple shardings,
 * constant braces) and of the call graph (computations calling computations). */
#define PS_MAX_NESTING 64
/* Dimensions of one array. XLA has no fixed limit; its tests use at most 8. */
#define PS_MAX_RANK 32
/* Input sizes: HLO text (and other whole-file text inputs) and hardware files. */
#define PS_MAX_TEXT_BYTES (G_GUINT64_CONSTANT (256) << 20)
#define PS_MAX_HW_FILE_BYTES (G_GUINT64_CONSTANT (1) << 20)
/* Model files (--config) and sweep grids (--grid): 1 MiB, a thousand times
 * the largest preset. */
#define PS_MAX_CONFIG_BYTES (G_GUINT64_CONSTANT (1) << 20)
/* Logical devices of a partitioned program (partition, trace lower, run's
 * mesh, a sharding's tile assignment): 2^16, 32 times a v3-2048 pod's
 * cores. verify, which runs every device, allows fewer (verify.h). */
#define PS_MAX_DEVICES 65536
/* Trips of one loop that podsim simulates (a step trace's loop, an HLO
 * while's trip count): 2^20. A training step's loops run over layers,
 * microbatches and pipeline ticks, thousands at most; the replay keeps one
 * time per iteration of the outermost loops (8 bytes a trip), so a larger
 * count would allocate without a useful bound. */
#define PS_MAX_LOOP_TRIPS (G_GUINT64_CONSTANT (1) << 20)

gboolean ps_checked_add_i64 (int64_t a, int64_t b, int64_t *out);
gboolean ps_checked_mul_i64 (int64_t a, int64_t b, int64_t *out);
gboolean ps_checked_add_u64 (uint64_t a, uint64_t b, uint64_t *out);
gboolean ps_checked_mul_u64 (uint64_t a, uint64_t b, uint64_t *out);

/* The product of n non-negative dims into *out when it is at most `limit`
 * (any negative dim, an overflow or a product over `limit` gives FALSE). */
gboolean ps_checked_product (int n, const int64_t *dims, int64_t limit, int64_t *out);

/* Reads a whole text file (or standard input for "-", named <stdin>) of at
 * most max_bytes into *out (NUL-terminated, transfer full). Stops at once, with
 * a PS_ERROR_PARSE error naming the file, at the first NUL byte (not a text
 * file: /dev/zero fails after one block) or when the file grows past
 * max_bytes; PS_ERROR_IO when it cannot be read. */
gboolean ps_read_text_file (const char *path, guint64 max_bytes, char **out, gsize *len,
                            GError **error);

/* JSON Lines inputs (conformance files, study rows): json-glib's parser recurses once
 * per nesting level, so 300,000 '[' overflowed the stack. FALSE with a
 * located error when `line` (line line_no of file) nests deeper than
 * PS_MAX_NESTING; call it before parsing the line. */
gboolean ps_json_depth_ok (const char *line, const char *file, int line_no, GError **error);

G_END_DECLS

#endif

/* Integer helpers for N-dimensional arrays in row-major order: products of
 * dims, division rounded up or down, strides, the index odometer and the
 * numpy-style transpose. One copy for every floor (shapes, tile
 * assignments, meshes, literals).
 *
 * No overflow checks: callers pass dims that a reader already bounded.
 */
#ifndef PS_COMMON_NDINDEX_H
#define PS_COMMON_NDINDEX_H

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

/* Product of n values (1 for n = 0). */
int64_t ps_product (int n, const int64_t *v);

/* a / b rounded towards minus infinity / plus infinity (b != 0). */
int64_t ps_floor_div (int64_t a, int64_t b);
int64_t ps_ceil_div (int64_t a, int64_t b);

/* Row-major strides of dims: out[rank - 1] = 1, out[d] = out[d + 1] *
 * dims[d + 1]. */
void ps_row_major_strides (int rank, const int64_t *dims, int64_t *out);

/* The odometer: advances idx (rank entries, idx[d] < dims[d]) to the next
 * index in row-major order (last dim fastest). FALSE, with idx back at all
 * zeros, after the last index. Loop:
 *   memset (idx, 0, ...); do { ... } while (ps_index_next (rank, dims, idx));
 * (rank 0 visits the single element once). Inline: it runs once per
 * element in the interpreter's and propagation's inner loops. */
static inline gboolean
ps_index_next (int rank, const int64_t *dims, int64_t *idx)
{
  for (int d = rank - 1; d >= 0; d--)
    {
      if (++idx[d] < dims[d])
        return TRUE;
      idx[d] = 0;
    }
  return FALSE;
}

/* Transposes a row-major array of `dims` numpy style: output dim j is
 * input dim perm[j]. Returns the new array (n entries, transfer full). */
int64_t *ps_transpose_row_major (const int64_t *in, int rank, const int64_t *dims,
                                 const int64_t *perm);

/* A shape as users write it, "32x64" or "4x4x8": 1 .. max_rank dims of at
 * least 1 whose product is at most max_product. Fills dims and *rank;
 * FALSE (nothing said: callers word the error for their option) when the
 * text is not such a shape. The one dims parser of meshes on the command
 * line, in model files and in trace options. */
gboolean ps_parse_shape (const char *text, int max_rank, uint64_t max_product, int64_t *dims, int *rank);

G_END_DECLS

#endif

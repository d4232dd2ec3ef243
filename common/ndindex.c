/* N-dimensional index helpers: see ndindex.h. */
#include "config.h"

#include "common/ndindex.h"

#include <string.h>

/* Largest rank the transpose keeps on the stack. */
#define TRANSPOSE_MAX_RANK 64

int64_t
ps_product (int n, const int64_t *v)
{
  int64_t p = 1;
  for (int i = 0; i < n; i++)
    p *= v[i];
  return p;
}

int64_t
ps_floor_div (int64_t a, int64_t b)
{
  g_return_val_if_fail (b != 0, 0);
  int64_t q = a / b;
  if (a % b != 0 && (a < 0) != (b < 0))
    q--;
  return q;
}

int64_t
ps_ceil_div (int64_t a, int64_t b)
{
  return -ps_floor_div (-a, b);
}

void
ps_row_major_strides (int rank, const int64_t *dims, int64_t *out)
{
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--)
    {
      out[d] = s;
      s *= dims[d];
    }
}

/* Propagation transposes 2048-device tile assignments many thousands of
 * times, so size-1 dims are dropped and output dims that are also adjacent
 * in the input are fused first; the innermost run is then a plain strided
 * (often contiguous) copy. */
static void
transpose_into (const int64_t *in, int64_t *out, int n, const int64_t *dims, const int64_t *perm)
{
  int64_t in_strides[TRANSPOSE_MAX_RANK];
  int64_t sz[TRANSPOSE_MAX_RANK], st[TRANSPOSE_MAX_RANK];
  int64_t idx[TRANSPOSE_MAX_RANK] = { 0 };
  g_assert (n <= TRANSPOSE_MAX_RANK);
  ps_row_major_strides (n, dims, in_strides);
  int m = 0;
  for (int j = 0; j < n; j++)
    {
      int64_t d = dims[perm[j]], s = in_strides[perm[j]];
      if (d == 1)
        continue;
      if (m > 0 && st[m - 1] == s * d)
        {
          sz[m - 1] *= d;
          st[m - 1] = s;
        }
      else
        {
          sz[m] = d;
          st[m] = s;
          m++;
        }
    }
  if (m == 0)
    {
      out[0] = in[0];
      return;
    }
  int64_t len = sz[m - 1], step = st[m - 1];
  int64_t src = 0, k = 0;
  for (;;)
    {
      if (step == 1)
        memcpy (out + k, in + src, (gsize) len * sizeof (int64_t));
      else
        for (int64_t t = 0; t < len; t++)
          out[k + t] = in[src + t * step];
      k += len;
      int j = m - 2;
      for (; j >= 0; j--)
        {
          idx[j]++;
          src += st[j];
          if (idx[j] < sz[j])
            break;
          src -= st[j] * sz[j];
          idx[j] = 0;
        }
      if (j < 0)
        break;
    }
}

int64_t *
ps_transpose_row_major (const int64_t *in, int rank, const int64_t *dims, const int64_t *perm)
{
  int64_t total = ps_product (rank, dims);
  int64_t *out = g_new (int64_t, MAX (total, 1));
  if (total > 0)
    transpose_into (in, out, rank, dims, perm);
  return out;
}

gboolean
ps_parse_shape (const char *text, int max_rank, uint64_t max_product, int64_t *dims, int *rank)
{
  g_auto (GStrv) parts = g_strsplit (text, "x", -1);
  int n = (int) g_strv_length (parts);
  if (n < 1 || n > max_rank)
    return FALSE;
  uint64_t total = 1;
  for (int i = 0; i < n; i++)
    {
      guint64 v;
      if (!g_ascii_string_to_unsigned (parts[i], 10, 1, max_product, &v, NULL))
        return FALSE;
      total *= v;
      if (total > max_product)
        return FALSE;
      dims[i] = (int64_t) v;
    }
  *rank = n;
  return TRUE;
}

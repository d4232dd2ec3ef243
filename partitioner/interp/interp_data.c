/* Data-movement ops of the interpreter: broadcast, reshape, transpose, slice,
 * dynamic-slice, dynamic-update-slice, pad, concatenate, reverse, iota,
 * bitcast-convert, gather, scatter and sort. They move elements without
 * arithmetic (scatter's combiner and sort's comparator excepted), so they
 * work on every element type alike. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "common/float16.h"
#include "common/ndindex.h"
#include "partitioner/interp/interp_private.h"

gboolean
ip_is_data_op (PsOpcode op)
{
  switch (op)
    {
    case PS_OP_BROADCAST: case PS_OP_RESHAPE: case PS_OP_BITCAST: case PS_OP_TRANSPOSE:
    case PS_OP_SLICE: case PS_OP_DYNAMIC_SLICE: case PS_OP_DYNAMIC_UPDATE_SLICE:
    case PS_OP_PAD: case PS_OP_CONCATENATE: case PS_OP_REVERSE: case PS_OP_IOTA:
    case PS_OP_BITCAST_CONVERT: case PS_OP_GATHER: case PS_OP_SCATTER: case PS_OP_SORT:
      return TRUE;
    default:
      return FALSE;
    }
}

#define FAIL(...) do { ip_fail (error, PS_ERROR_INVALID, ins, __VA_ARGS__); goto fail; } while (0)

static gboolean
is_array (const PsValue *v)
{
  return v->shape->etype != PS_TUPLE;
}

/* ---- simple movement ------------------------------------------------------- */

/* Broadcast, transpose, slice and reverse read, for each index idx of the
 * result, the operand element at offset + sum_d idx[d] * coef[d] (one coef a
 * result dim; a coefficient is 0 where the result repeats the operand, an
 * operand stride or its negative elsewhere). Copies those elements into OUT. */
static void
copy_affine (PsValue *out, const PsValue *a, int64_t offset, const int64_t *coef)
{
  int rank = out->shape->rank;
  int64_t *idx = g_new0 (int64_t, rank + 1);
  for (int64_t e = 0; e < out->n; e++)
    {
      int64_t si = offset;
      for (int d = 0; d < rank; d++)
        si += idx[d] * coef[d];
      ps_value_copy_elem (out, e, a, si);
      ps_index_next (rank, out->shape->dims, idx);
    }
  g_free (idx);
}

static PsValue *
op_broadcast (const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *a = ops[0];
  PsValue *out = ps_value_new (ins->shape);
  int rank = out->shape->rank;
  int64_t *coef = g_new0 (int64_t, rank + 1);
  int64_t *sst = ps_shape_strides (a->shape);
  if (a->shape->rank != ins->dimensions.n || a->shape->etype != out->shape->etype)
    FAIL ("operand rank %d does not match dimensions={} (%d entries)", a->shape->rank,
          ins->dimensions.n);
  for (int k = 0; k < ins->dimensions.n; k++)
    {
      int64_t d = ins->dimensions.v[k];
      if (d < 0 || d >= rank || out->shape->dims[d] != a->shape->dims[k])
        FAIL ("operand dim %d does not map onto result dim %" G_GINT64_FORMAT, k, d);
      coef[d] += sst[k];
    }
  copy_affine (out, a, 0, coef);
  g_free (coef);
  g_free (sst);
  return out;
fail:
  g_free (coef);
  g_free (sst);
  ps_value_free (out);
  return NULL;
}

static PsValue *
op_transpose (const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *a = ops[0];
  PsValue *out = ps_value_new (ins->shape);
  int rank = out->shape->rank;
  int64_t *coef = g_new0 (int64_t, rank + 1);
  int64_t *sst = ps_shape_strides (a->shape);
  if (a->shape->rank != rank || ins->dimensions.n != rank)
    FAIL ("permutation does not match the rank");
  for (int i = 0; i < rank; i++)
    {
      int64_t p = ins->dimensions.v[i];
      if (p < 0 || p >= rank || a->shape->dims[p] != out->shape->dims[i])
        FAIL ("bad permutation entry %" G_GINT64_FORMAT, p);
      coef[i] = sst[p];
    }
  copy_affine (out, a, 0, coef);
  g_free (coef);
  g_free (sst);
  return out;
fail:
  g_free (coef);
  g_free (sst);
  ps_value_free (out);
  return NULL;
}

static PsValue *
op_slice (const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *a = ops[0];
  PsValue *out = ps_value_new (ins->shape);
  int rank = out->shape->rank;
  int64_t *coef = g_new0 (int64_t, rank + 1);
  int64_t offset = 0;
  int64_t *sst = ps_shape_strides (a->shape);
  if (a->shape->rank != rank || ins->slice_starts.n != rank)
    FAIL ("slice={} does not match the rank");
  for (int d = 0; d < rank; d++)
    {
      int64_t st = ins->slice_strides.n == rank ? ins->slice_strides.v[d] : 1;
      int64_t s0 = ins->slice_starts.v[d];
      if (s0 < 0 || st < 1
          || (out->shape->dims[d] > 0 && s0 + (out->shape->dims[d] - 1) * st >= a->shape->dims[d]))
        FAIL ("slice is out of bounds in dim %d", d);
      coef[d] = st * sst[d];
      offset += s0 * sst[d];
    }
  copy_affine (out, a, offset, coef);
  g_free (coef);
  g_free (sst);
  return out;
fail:
  g_free (coef);
  g_free (sst);
  ps_value_free (out);
  return NULL;
}

/* Start indices of dynamic-slice/-update-slice, clamped so that a window of
 * `sizes` stays inside `dims` (XLA's semantics). */
static gboolean
dynamic_starts (const PsInstr *ins, PsValue **ops, int first, int rank, const int64_t *dims,
                const int64_t *sizes, int64_t *starts, GError **error)
{
  int n_idx = ins->n_operands - first;
  for (int d = 0; d < rank; d++)
    {
      int64_t s;
      if (n_idx == rank)
        {
          const PsValue *v = ops[first + d];
          if (!v->i || v->n != 1)
            {
              ip_fail (error, PS_ERROR_INVALID, ins, "start index %d is not an integer scalar", d);
              return FALSE;
            }
          s = v->shape->etype == PS_U64 && v->i[0] < 0 ? INT64_MAX : v->i[0];
        }
      else if (n_idx == 1 && ops[first]->i && ops[first]->n == rank)
        s = ops[first]->i[d];
      else
        {
          ip_fail (error, PS_ERROR_INVALID, ins, "needs %d start indices", rank);
          return FALSE;
        }
      if (sizes[d] > dims[d] || sizes[d] < 0)
        {
          ip_fail (error, PS_ERROR_INVALID, ins, "window %" G_GINT64_FORMAT
                   " is larger than dim %d (%" G_GINT64_FORMAT ")", sizes[d], d, dims[d]);
          return FALSE;
        }
      starts[d] = CLAMP (s, 0, dims[d] - sizes[d]);
    }
  return TRUE;
}

static PsValue *
op_dynamic_slice (const PsInstr *ins, PsValue **ops, gboolean update, GError **error)
{
  const PsValue *a = ops[0];
  const PsValue *u = update ? ops[1] : NULL;
  int rank = a->shape->rank;
  PsValue *out = update ? ps_value_copy (a) : ps_value_new (ins->shape);
  const PsValue *win = update ? u : out;
  int64_t *starts = g_new0 (int64_t, rank + 1);
  int64_t *idx = g_new0 (int64_t, rank + 1);
  int64_t *ast = ps_shape_strides (a->shape);
  if (win->shape->rank != rank || win->shape->etype != a->shape->etype
      || (update && !ps_shape_equal (out->shape, ins->shape)))
    FAIL ("operand and %s do not fit", update ? "update" : "result");
  if (!dynamic_starts (ins, ops, update ? 2 : 1, rank, a->shape->dims, win->shape->dims, starts,
                       error))
    goto fail;
  for (int64_t e = 0; e < win->n; e++)
    {
      int64_t ai = 0;
      for (int d = 0; d < rank; d++)
        ai += (starts[d] + idx[d]) * ast[d];
      if (update)
        ps_value_copy_elem (out, ai, u, e);
      else
        ps_value_copy_elem (out, e, a, ai);
      ps_index_next (rank, win->shape->dims, idx);
    }
  g_free (starts);
  g_free (idx);
  g_free (ast);
  return out;
fail:
  g_free (starts);
  g_free (idx);
  g_free (ast);
  ps_value_free (out);
  return NULL;
}

static PsValue *
op_pad (const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *a = ops[0], *pv = ops[1];
  PsValue *out = ps_value_new (ins->shape);
  int rank = out->shape->rank;
  int64_t *idx = g_new0 (int64_t, rank + 1);
  int64_t *ast = ps_shape_strides (a->shape);
  if (a->shape->rank != rank || ins->n_pad != rank || pv->n != 1
      || pv->shape->etype != a->shape->etype)
    FAIL ("padding does not match the operand");
  for (int d = 0; d < rank; d++)
    {
      const PsPadDim *p = &ins->padding[d];
      int64_t n = a->shape->dims[d];
      int64_t want = p->lo + p->hi + n + (n > 0 ? (n - 1) * p->interior : 0);
      if (p->interior < 0 || want != out->shape->dims[d])
        FAIL ("padded dim %d should be %" G_GINT64_FORMAT, d, want);
    }
  for (int64_t e = 0; e < out->n; e++)
    {
      int64_t ai = 0;
      gboolean in = TRUE;
      for (int d = 0; d < rank && in; d++)
        {
          const PsPadDim *p = &ins->padding[d];
          int64_t q = idx[d] - p->lo;
          if (q < 0 || q % (p->interior + 1) != 0)
            in = FALSE;
          else
            {
              q /= p->interior + 1;
              if (q >= a->shape->dims[d])
                in = FALSE;
              ai += q * ast[d];
            }
        }
      if (in)
        ps_value_copy_elem (out, e, a, ai);
      else
        ps_value_copy_elem (out, e, pv, 0);
      ps_index_next (rank, out->shape->dims, idx);
    }
  g_free (idx);
  g_free (ast);
  return out;
fail:
  g_free (idx);
  g_free (ast);
  ps_value_free (out);
  return NULL;
}

static PsValue *
op_concatenate (const PsInstr *ins, PsValue **ops, GError **error)
{
  PsValue *out = ps_value_new (ins->shape);
  int rank = out->shape->rank;
  int64_t dim = ins->dimensions.n ? ins->dimensions.v[0] : -1;
  int64_t *idx = g_new0 (int64_t, rank + 1);
  int64_t *ost = ps_shape_strides (out->shape);
  int64_t off = 0;
  if (dim < 0 || dim >= rank)
    FAIL ("bad concatenate dimension");
  for (int k = 0; k < ins->n_operands; k++)
    {
      const PsValue *a = ops[k];
      if (!is_array (a) || a->shape->rank != rank || a->shape->etype != out->shape->etype)
        FAIL ("operand %d does not fit", k);
      for (int d = 0; d < rank; d++)
        if (d != dim && a->shape->dims[d] != out->shape->dims[d])
          FAIL ("operand %d does not fit in dim %d", k, d);
      if (off + a->shape->dims[dim] > out->shape->dims[dim])
        FAIL ("operands are longer than the result");
      memset (idx, 0, sizeof (int64_t) * (rank + 1));
      for (int64_t e = 0; e < a->n; e++)
        {
          int64_t oi = 0;
          for (int d = 0; d < rank; d++)
            oi += (idx[d] + (d == dim ? off : 0)) * ost[d];
          ps_value_copy_elem (out, oi, a, e);
          ps_index_next (rank, a->shape->dims, idx);
        }
      off += a->shape->dims[dim];
    }
  if (off != out->shape->dims[dim])
    FAIL ("operands are shorter than the result");
  g_free (idx);
  g_free (ost);
  return out;
fail:
  g_free (idx);
  g_free (ost);
  ps_value_free (out);
  return NULL;
}

static PsValue *
op_reverse (const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *a = ops[0];
  PsValue *out = ps_value_new (ins->shape);
  int rank = out->shape->rank;
  int64_t *coef = g_new0 (int64_t, rank + 1);
  int64_t offset = 0;
  int64_t *st = ps_shape_strides (a->shape);
  gboolean *rev = g_new0 (gboolean, rank + 1);
  if (!ps_shape_equal (a->shape, out->shape))
    FAIL ("operand and result shapes differ");
  for (int k = 0; k < ins->dimensions.n; k++)
    {
      if (ins->dimensions.v[k] < 0 || ins->dimensions.v[k] >= rank)
        FAIL ("bad dimension");
      rev[ins->dimensions.v[k]] = TRUE;
    }
  for (int d = 0; d < rank; d++)
    {
      coef[d] = rev[d] ? -st[d] : st[d];
      if (rev[d])
        offset += (a->shape->dims[d] - 1) * st[d];
    }
  copy_affine (out, a, offset, coef);
  g_free (coef);
  g_free (st);
  g_free (rev);
  return out;
fail:
  g_free (coef);
  g_free (st);
  g_free (rev);
  ps_value_free (out);
  return NULL;
}

static PsValue *
op_iota (const PsInstr *ins, GError **error)
{
  PsValue *out = ps_value_new (ins->shape);
  int rank = out->shape->rank;
  int64_t dim = ins->iota_dimension;
  int64_t *idx = g_new0 (int64_t, rank + 1);
  if (rank == 0 || dim < 0 || dim >= rank)
    FAIL ("bad iota_dimension %" G_GINT64_FORMAT, dim);
  for (int64_t e = 0; e < out->n; e++)
    {
      if (out->i)
        out->i[e] = idx[dim];
      else
        ps_value_set (out, e, (double) idx[dim]);
      ps_index_next (rank, out->shape->dims, idx);
    }
  g_free (idx);
  return out;
fail:
  g_free (idx);
  ps_value_free (out);
  return NULL;
}

/* ---- bitcast-convert --------------------------------------------------------- */

static void
encode_elem (const PsValue *v, int64_t i, guint8 *dst)
{
  PsElemType t = v->shape->etype;
  switch (t)
    {
    case PS_PRED: case PS_S8: case PS_U8: case PS_S4: case PS_U4: case PS_S2: case PS_U2:
    case PS_S1: case PS_U1:
      dst[0] = (guint8) v->i[i];
      break;
    case PS_F8E4M3FN: case PS_F8E5M2: case PS_F8E4M3: case PS_F8E3M4: case PS_F8E4M3FNUZ:
    case PS_F8E5M2FNUZ: case PS_F8E4M3B11FNUZ: case PS_F4E2M1FN: case PS_F8E8M0FNU:
      dst[0] = ps_etype_minifloat_encode (t, v->f[i]);
      break;
    case PS_S16: case PS_U16: { uint16_t x = (uint16_t) v->i[i]; memcpy (dst, &x, 2); break; }
    case PS_S32: case PS_U32: { uint32_t x = (uint32_t) v->i[i]; memcpy (dst, &x, 4); break; }
    case PS_S64: case PS_U64: memcpy (dst, &v->i[i], 8); break;
    case PS_BF16: { uint16_t x = ps_f32_to_bf16 ((float) v->f[i]); memcpy (dst, &x, 2); break; }
    case PS_F16: { uint16_t x = ps_f32_to_f16 ((float) v->f[i]); memcpy (dst, &x, 2); break; }
    case PS_F32: { float x = (float) v->f[i]; memcpy (dst, &x, 4); break; }
    case PS_F64: memcpy (dst, &v->f[i], 8); break;
    case PS_C64:
      {
        float x[2] = { (float) v->c[2 * i], (float) v->c[2 * i + 1] };
        memcpy (dst, x, 8);
        break;
      }
    case PS_C128: memcpy (dst, &v->c[2 * i], 16); break;
    default: break;
    }
}

static void
decode_elem (PsValue *v, int64_t i, const guint8 *src)
{
  PsElemType t = v->shape->etype;
  switch (t)
    {
    case PS_PRED: v->i[i] = src[0] != 0; break;
    case PS_S8: v->i[i] = (int8_t) src[0]; break;
    case PS_S4: case PS_S2: case PS_S1:
      {
        /* sign-extend the low bits */
        int sh = 8 - ps_etype_bits (t);
        v->i[i] = (int8_t) (uint8_t) (src[0] << sh) >> sh;
        break;
      }
    case PS_U4: case PS_U2: case PS_U1: v->i[i] = src[0] & ((1 << ps_etype_bits (t)) - 1); break;
    case PS_F4E2M1FN: v->f[i] = ps_etype_minifloat_decode (t, src[0] & 0xf); break;
    case PS_F8E4M3FN: case PS_F8E5M2: case PS_F8E4M3: case PS_F8E3M4: case PS_F8E4M3FNUZ:
    case PS_F8E5M2FNUZ: case PS_F8E4M3B11FNUZ: case PS_F8E8M0FNU:
      v->f[i] = ps_etype_minifloat_decode (t, src[0]);
      break;
    case PS_U8: v->i[i] = src[0]; break;
    case PS_S16: { int16_t x; memcpy (&x, src, 2); v->i[i] = x; break; }
    case PS_U16: { uint16_t x; memcpy (&x, src, 2); v->i[i] = x; break; }
    case PS_S32: { int32_t x; memcpy (&x, src, 4); v->i[i] = x; break; }
    case PS_U32: { uint32_t x; memcpy (&x, src, 4); v->i[i] = x; break; }
    case PS_S64: case PS_U64: memcpy (&v->i[i], src, 8); break;
    case PS_BF16: { uint16_t x; memcpy (&x, src, 2); v->f[i] = ps_bf16_to_f32 (x); break; }
    case PS_F16: { uint16_t x; memcpy (&x, src, 2); v->f[i] = ps_f16_to_f32 (x); break; }
    case PS_F32: { float x; memcpy (&x, src, 4); v->f[i] = x; break; }
    case PS_F64: memcpy (&v->f[i], src, 8); break;
    case PS_C64:
      {
        float x[2];
        memcpy (x, src, 8);
        v->c[2 * i] = x[0];
        v->c[2 * i + 1] = x[1];
        break;
      }
    case PS_C128: memcpy (&v->c[2 * i], src, 16); break;
    default: break;
    }
}

void
ip_bitcast_elem (PsValue *dst, int64_t di, const PsValue *src, int64_t si)
{
  guint8 buf[16] = { 0 };
  encode_elem (src, si, buf);
  decode_elem (dst, di, buf);
}

static PsValue *
op_bitcast_convert (const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *a = ops[0];
  PsValue *out = ps_value_new (ins->shape);
  int sa = ps_etype_size_bytes (a->shape->etype), so = ps_etype_size_bytes (out->shape->etype);
  guint8 *buf = NULL;
  if (!is_array (a) || sa <= 0 || so <= 0 || a->n * sa != out->n * so)
    FAIL ("operand and result sizes differ");
  /* Little-endian bytes, as XLA's CPU backend lays them out: the minor dim
   * that appears or disappears holds the pieces in that order. */
  buf = g_malloc0 (MAX (1, a->n * sa));
  for (int64_t i = 0; i < a->n; i++)
    encode_elem (a, i, buf + i * sa);
  for (int64_t i = 0; i < out->n; i++)
    decode_elem (out, i, buf + i * so);
  g_free (buf);
  return out;
fail:
  ps_value_free (out);
  return NULL;
}

/* ---- gather and scatter ------------------------------------------------------ */

/* Reads one start index from the indices array at batch position `bidx`
 * (indices dims other than index_vector_dim) and vector component k. */
static int64_t
index_at (const PsValue *indices, int64_t ivd, const int64_t *bidx, int k, const int64_t *ist)
{
  int rank = indices->shape->rank;
  int64_t off = 0;
  int b = 0;
  for (int d = 0; d < rank; d++)
    {
      if (d == ivd)
        off += k * ist[d];
      else
        off += bidx[b++] * ist[d];
    }
  int64_t v = indices->i[off];
  if (indices->shape->etype == PS_U64 && v < 0)
    return INT64_MAX;
  return v;
}

static PsValue *
op_gather (const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *a = ops[0], *ind = ops[1];
  const PsGatherDims *g = &ins->gather;
  PsValue *out = ps_value_new (ins->shape);
  int orank = out->shape->rank, arank = a->shape->rank, irank = ind->shape->rank;
  int64_t *oidx = g_new0 (int64_t, orank + 1);
  int64_t *bidx = g_new0 (int64_t, irank + 1);
  int64_t *start = g_new0 (int64_t, arank + 1);
  int64_t *ast = ps_shape_strides (a->shape);
  int64_t *ist = ps_shape_strides (ind->shape);
  int *offset_to_operand = g_new0 (int, orank + 1);
  gboolean *is_offset = g_new0 (gboolean, orank + 1);
  if (ind->n > 0 && !ind->i)
    FAIL ("indices must be integers");
  if (g->slice_sizes.n != arank || g->index_vector_dim < 0 || g->index_vector_dim > irank)
    FAIL ("slice_sizes/index_vector_dim do not fit the operand");
  int64_t nvec = g->index_vector_dim < irank ? ind->shape->dims[g->index_vector_dim] : 1;
  if (nvec != g->start_index_map.n)
    FAIL ("start_index_map has %d entries, the index vector %" G_GINT64_FORMAT, g->start_index_map.n, nvec);
  /* Offset dims of the result map, in order, to the operand dims that are
   * neither collapsed nor batching. */
  {
    int od = 0;
    for (int d = 0; d < arank; d++)
      if (!ps_ints_contains (&g->collapsed_slice_dims, d)
          && !ps_ints_contains (&g->operand_batching_dims, d))
        {
          if (od >= g->offset_dims.n)
            FAIL ("offset_dims do not cover the operand's window dims");
          int64_t o = g->offset_dims.v[od++];
          if (o < 0 || o >= orank)
            FAIL ("bad offset dim");
          is_offset[o] = TRUE;
          offset_to_operand[o] = d;
        }
    if (od != g->offset_dims.n)
      FAIL ("offset_dims do not match the operand's window dims");
    if (orank - od != irank - (g->index_vector_dim < irank ? 1 : 0))
      FAIL ("result rank does not match the indices' batch dims");
  }
  for (int k = 0; k < g->start_index_map.n; k++)
    if (g->start_index_map.v[k] < 0 || g->start_index_map.v[k] >= arank)
      FAIL ("bad start_index_map");
  for (int d = 0; d < arank; d++)
    if (g->slice_sizes.v[d] < 0 || g->slice_sizes.v[d] > a->shape->dims[d])
      FAIL ("slice size %" G_GINT64_FORMAT " does not fit operand dim %d", g->slice_sizes.v[d], d);
  for (int k = 0; k < g->operand_batching_dims.n; k++)
    if (g->operand_batching_dims.v[k] < 0 || g->operand_batching_dims.v[k] >= arank
        || k >= g->start_indices_batching_dims.n)
      FAIL ("bad batching dims");
  {
    /* Result batch dims must match the indices' dims, offset dims the slice. */
    int b = 0;
    for (int d = 0; d < orank; d++)
      {
        if (is_offset[d])
          {
            if (out->shape->dims[d] > g->slice_sizes.v[offset_to_operand[d]])
              FAIL ("offset dim %d is larger than its slice", d);
            continue;
          }
        if (b == g->index_vector_dim)
          b++;
        if (b >= irank || out->shape->dims[d] != ind->shape->dims[b])
          FAIL ("batch dim %d does not match the indices", d);
        b++;
      }
  }
  for (int64_t e = 0; e < out->n; e++)
    {
      int b = 0;
      for (int d = 0; d < orank; d++)
        if (!is_offset[d])
          bidx[b++] = oidx[d];
      memset (start, 0, sizeof (int64_t) * (arank + 1));
      for (int k = 0; k < g->start_index_map.n; k++)
        start[g->start_index_map.v[k]] = index_at (ind, g->index_vector_dim, bidx, k, ist);
      for (int k = 0; k < g->operand_batching_dims.n && k < g->start_indices_batching_dims.n; k++)
        {
          /* The batch position along indices dim j (j counted among the
           * non-index-vector dims). */
          int64_t j = g->start_indices_batching_dims.v[k];
          int64_t pos = j < g->index_vector_dim ? j : j - 1;
          start[g->operand_batching_dims.v[k]] = bidx[pos];
        }
      int64_t ai = 0;
      for (int d = 0; d < arank; d++)
        {
          int64_t s = CLAMP (start[d], 0, a->shape->dims[d] - g->slice_sizes.v[d]);
          if (ps_ints_contains (&g->operand_batching_dims, d))
            s = start[d];
          ai += s * ast[d];
        }
      for (int d = 0; d < orank; d++)
        if (is_offset[d])
          ai += oidx[d] * ast[offset_to_operand[d]];
      if (ai < 0 || ai >= a->n)
        FAIL ("gather read out of bounds");
      ps_value_copy_elem (out, e, a, ai);
      ps_index_next (orank, out->shape->dims, oidx);
    }
  goto done;
fail:
  g_clear_pointer (&out, ps_value_free);
done:
  g_free (oidx);
  g_free (bidx);
  g_free (start);
  g_free (ast);
  g_free (ist);
  g_free (offset_to_operand);
  g_free (is_offset);
  return out;
}

static PsValue *
op_scatter (IpCtx *ctx, const PsInstr *ins, PsValue **ops, int64_t device, GError **error)
{
  const PsScatterDims *s = &ins->scatter;
  int nops = ins->n_operands;
  if (nops < 3 || nops % 2 == 0)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "scatter needs N operands, indices, N updates");
      return NULL;
    }
  int nv = (nops - 1) / 2;
  const PsValue *ind = ops[nv];
  const PsValue *upd0 = ops[nv + 1];
  const PsValue *a0 = ops[0];
  int arank = a0->shape->rank, urank = upd0->shape->rank, irank = ind->shape->rank;
  PsValue **res = g_new0 (PsValue *, nv);
  for (int k = 0; k < nv; k++)
    res[k] = ps_value_copy (ops[k]);
  int64_t *uidx = g_new0 (int64_t, urank + 1);
  int64_t *bidx = g_new0 (int64_t, irank + 1);
  int64_t *start = g_new0 (int64_t, arank + 1);
  int64_t *aidx = g_new0 (int64_t, arank + 1);
  int64_t *ast = ps_shape_strides (a0->shape);
  int64_t *ist = ps_shape_strides (ind->shape);
  int *window_to_operand = g_new0 (int, urank + 1);
  gboolean *is_window = g_new0 (gboolean, urank + 1);
  int64_t *wsize = g_new0 (int64_t, arank + 1);
  PsValue *out = NULL;
  PsValue **cargs = g_new0 (PsValue *, 2 * nv);
  PsShape *scalar = NULL;

  if (ind->n > 0 && !ind->i)
    FAIL ("indices must be integers");
  if (ins->n_called < 1)
    FAIL ("scatter needs a combiner computation");
  if (s->index_vector_dim < 0 || s->index_vector_dim > irank)
    FAIL ("bad index_vector_dim");
  for (int k = 0; k < nv; k++)
    if (!ip_same_dims (ops[k]->shape, a0->shape) || !ip_same_dims (ops[nv + 1 + k]->shape, upd0->shape))
      FAIL ("scatter operands (or updates) differ in shape");
  {
    int64_t nvec = s->index_vector_dim < irank ? ind->shape->dims[s->index_vector_dim] : 1;
    if (nvec != s->scatter_dims_to_operand_dims.n)
      FAIL ("scatter_dims_to_operand_dims does not match the index vector");
    for (int k = 0; k < s->scatter_dims_to_operand_dims.n; k++)
      if (s->scatter_dims_to_operand_dims.v[k] < 0 || s->scatter_dims_to_operand_dims.v[k] >= arank)
        FAIL ("bad scatter_dims_to_operand_dims");
    int wd = 0;
    for (int d = 0; d < arank; d++)
      {
        wsize[d] = 1;
        if (!ps_ints_contains (&s->inserted_window_dims, d)
            && !ps_ints_contains (&s->input_batching_dims, d))
          {
            if (wd >= s->update_window_dims.n)
              FAIL ("update_window_dims do not cover the operand's window dims");
            int64_t u = s->update_window_dims.v[wd++];
            if (u < 0 || u >= urank)
              FAIL ("bad update window dim");
            is_window[u] = TRUE;
            window_to_operand[u] = d;
            wsize[d] = upd0->shape->dims[u];
          }
      }
    if (wd != s->update_window_dims.n)
      FAIL ("update_window_dims do not match the operand's window dims");
    if (urank - wd != irank - (s->index_vector_dim < irank ? 1 : 0))
      FAIL ("updates rank does not match the indices' batch dims");
  }
  {
    int b = 0;
    for (int d = 0; d < urank; d++)
      {
        if (is_window[d])
          {
            if (upd0->shape->dims[d] > a0->shape->dims[window_to_operand[d]])
              FAIL ("update window dim %d is larger than the operand", d);
            continue;
          }
        if (b == s->index_vector_dim)
          b++;
        if (b >= irank || upd0->shape->dims[d] != ind->shape->dims[b])
          FAIL ("update scatter dim %d does not match the indices", d);
        b++;
      }
    for (int k = 0; k < s->input_batching_dims.n; k++)
      if (s->input_batching_dims.v[k] < 0 || s->input_batching_dims.v[k] >= arank
          || k >= s->scatter_indices_batching_dims.n)
        FAIL ("bad batching dims");
  }
  scalar = ps_shape_new_scalar (a0->shape->etype);
  for (int k = 0; k < 2 * nv; k++)
    {
      /* the combiner's k-th parameter has its input's element type (a
       * scatter of several inputs may mix them) */
      g_autoptr (PsShape) sk = ps_shape_new_scalar (ops[k % nv]->shape->etype);
      cargs[k] = ps_value_new (sk);
    }
  IpReducer red;
  ip_reducer_init (&red, ctx, ins->called[0], device, a0->shape->etype);
  if (!ip_charge (ctx, ins, upd0->n * (red.fast_op == PS_OP_COUNT ? ins->called[0]->instrs->len : 1), error))
    {
      ip_reducer_clear (&red);
      goto fail;
    }
  for (int64_t e = 0; e < upd0->n; e++)
    {
      int b = 0;
      for (int d = 0; d < urank; d++)
        if (!is_window[d])
          bidx[b++] = uidx[d];
      memset (start, 0, sizeof (int64_t) * (arank + 1));
      for (int k = 0; k < s->scatter_dims_to_operand_dims.n; k++)
        start[s->scatter_dims_to_operand_dims.v[k]] = index_at (ind, s->index_vector_dim, bidx, k, ist);
      for (int k = 0; k < s->input_batching_dims.n && k < s->scatter_indices_batching_dims.n; k++)
        {
          int64_t j = s->scatter_indices_batching_dims.v[k];
          int64_t pos = j < s->index_vector_dim ? j : j - 1;
          start[s->input_batching_dims.v[k]] = bidx[pos];
        }
      /* A window that does not fit entirely is skipped (XLA's semantics for
       * out-of-bounds scatter indices). */
      gboolean fits = TRUE;
      for (int d = 0; d < arank; d++)
        if (start[d] < 0 || start[d] + wsize[d] > a0->shape->dims[d])
          fits = FALSE;
      if (fits)
        {
          memcpy (aidx, start, sizeof (int64_t) * arank);
          for (int d = 0; d < urank; d++)
            if (is_window[d])
              aidx[window_to_operand[d]] += uidx[d];
          int64_t ai = 0;
          for (int d = 0; d < arank; d++)
            ai += aidx[d] * ast[d];
          if (nv == 1)
            {
              if (!ip_reducer_apply (&red, res[0], ai, ops[2], e, res[0], ai, error))
                {
                  ip_reducer_clear (&red);
                  goto fail;
                }
            }
          else
            {
              for (int k = 0; k < nv; k++)
                {
                  ps_value_copy_elem (cargs[k], 0, res[k], ai);
                  ps_value_copy_elem (cargs[nv + k], 0, ops[nv + 1 + k], e);
                }
              PsValue *r = ip_call (ctx, ins->called[0], device, 2 * nv, cargs, error);
              if (!r)
                {
                  ip_reducer_clear (&red);
                  goto fail;
                }
              if (r->n_elems != nv)
                {
                  ps_value_free (r);
                  ip_reducer_clear (&red);
                  FAIL ("combiner must return a %d-tuple", nv);
                }
              for (int k = 0; k < nv; k++)
                ps_value_copy_elem (res[k], ai, r->elems[k], 0);
              ps_value_free (r);
            }
        }
      ps_index_next (urank, upd0->shape->dims, uidx);
    }
  ip_reducer_clear (&red);
  if (nv == 1)
    {
      out = res[0];
      res[0] = NULL;
    }
  else
    {
      out = ps_value_new_tuple (nv, res);
      memset (res, 0, sizeof (PsValue *) * nv);
    }
fail:
  for (int k = 0; k < nv; k++)
    ps_value_free (res[k]);
  for (int k = 0; k < 2 * nv; k++)
    ps_value_free (cargs[k]);
  g_free (cargs);
  g_free (res);
  if (scalar)
    ps_shape_free (scalar);
  g_free (uidx);
  g_free (bidx);
  g_free (start);
  g_free (aidx);
  g_free (ast);
  g_free (ist);
  g_free (window_to_operand);
  g_free (is_window);
  g_free (wsize);
  return out;
}

/* ---- sort ---------------------------------------------------------------------- */

typedef struct {
  IpCtx *ctx;
  const PsInstr *ins;
  int64_t device;
  PsValue **ops;
  int nops;
  PsValue **args;       /* 2 * nops scalars */
  GError **error;
  gboolean failed;
  /* Fast path: comparator is compare(p0, p1) with a direction. */
  PsCompareDir fast_dir;
  gboolean fast_total;
} SortCtx;

/* Is element x strictly before element y? */
static gboolean
sort_less (SortCtx *sc, int64_t x, int64_t y)
{
  if (sc->failed)
    return FALSE;
  const PsValue *k = sc->ops[0];
  if (sc->fast_dir != PS_CMP_NONE && !k->c)
    {
      double a, b;
      if (k->f)
        {
          a = k->f[x];
          b = k->f[y];
          if (sc->fast_total || isnan (a) || isnan (b))
            {
              /* Total order keeps NaN sorting deterministic. */
              int64_t ka, kb;
              memcpy (&ka, &a, 8);
              memcpy (&kb, &b, 8);
              ka = ka < 0 ? (int64_t) (INT64_MIN - (uint64_t) ka) - 1 : ka;
              kb = kb < 0 ? (int64_t) (INT64_MIN - (uint64_t) kb) - 1 : kb;
              return sc->fast_dir == PS_CMP_LT ? ka < kb : ka > kb;
            }
          return sc->fast_dir == PS_CMP_LT ? a < b : a > b;
        }
      int64_t ia = k->i[x], ib = k->i[y];
      if (k->shape->etype == PS_U64)
        return sc->fast_dir == PS_CMP_LT ? (uint64_t) ia < (uint64_t) ib : (uint64_t) ia > (uint64_t) ib;
      return sc->fast_dir == PS_CMP_LT ? ia < ib : ia > ib;
    }
  for (int k2 = 0; k2 < sc->nops; k2++)
    {
      ps_value_copy_elem (sc->args[2 * k2], 0, sc->ops[k2], x);
      ps_value_copy_elem (sc->args[2 * k2 + 1], 0, sc->ops[k2], y);
    }
  const PsComputation *c = sc->ins->called[0];
  if (!ip_charge (sc->ctx, sc->ins, c->instrs->len, sc->error))
    {
      sc->failed = TRUE;
      return FALSE;
    }
  PsValue *owned = NULL;
  const PsValue *r = ip_call_fast (sc->ctx, c, sc->device, 2 * sc->nops, sc->args, &owned,
                                   sc->error);
  if (!r)
    {
      sc->failed = TRUE;
      return FALSE;
    }
  gboolean less = r->i && r->n == 1 && r->i[0];
  ps_value_free (owned);
  return less;
}

static void
merge_sort (SortCtx *sc, int64_t *v, int64_t *tmp, int64_t n)
{
  if (n < 2 || sc->failed)
    return;
  int64_t h = n / 2;
  merge_sort (sc, v, tmp, h);
  merge_sort (sc, v + h, tmp, n - h);
  int64_t i = 0, j = h, k = 0;
  while (i < h && j < n)
    {
      /* Take from the right only when strictly less: stable. */
      if (sort_less (sc, v[j], v[i]))
        tmp[k++] = v[j++];
      else
        tmp[k++] = v[i++];
    }
  while (i < h)
    tmp[k++] = v[i++];
  while (j < n)
    tmp[k++] = v[j++];
  memcpy (v, tmp, sizeof (int64_t) * n);
}

static PsValue *
op_sort (IpCtx *ctx, const PsInstr *ins, PsValue **ops, int64_t device, GError **error)
{
  int nops = ins->n_operands;
  const PsValue *a0 = ops[0];
  int rank = a0->shape->rank;
  int64_t dim = ins->dimensions.n ? ins->dimensions.v[0] : rank - 1;
  if (nops < 1 || ins->n_called < 1 || dim < 0 || dim >= rank)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "sort needs operands, a comparator and a dimension");
      return NULL;
    }
  for (int k = 0; k < nops; k++)
    if (!is_array (ops[k]) || ops[k]->shape->rank != rank || ops[k]->n != a0->n)
      {
        ip_fail (error, PS_ERROR_INVALID, ins, "sort operands differ in shape");
        return NULL;
      }
  SortCtx sc = { ctx, ins, device, ops, nops, g_new0 (PsValue *, 2 * nops), error, FALSE,
                 PS_CMP_NONE, FALSE };
  for (int k = 0; k < nops; k++)
    {
      PsShape *s = ps_shape_new_scalar (ops[k]->shape->etype);
      sc.args[2 * k] = ps_value_new (s);
      sc.args[2 * k + 1] = ps_value_new (s);
      ps_shape_free (s);
    }
  const PsComputation *cmp = ins->called[0];
  const PsInstr *root = cmp->root;
  if (root && root->opcode == PS_OP_COMPARE && root->n_operands == 2
      && root->operands[0]->opcode == PS_OP_PARAMETER && root->operands[1]->opcode == PS_OP_PARAMETER
      && root->operands[0]->parameter_number == 0 && root->operands[1]->parameter_number == 1
      && (root->comparison == PS_CMP_LT || root->comparison == PS_CMP_GT))
    {
      sc.fast_dir = root->comparison;
      sc.fast_total = root->compare_type && strcmp (root->compare_type, "TOTALORDER") == 0;
    }
  int64_t len = a0->shape->dims[dim];
  int64_t *st = ps_shape_strides (a0->shape);
  int64_t stride = st[dim];
  int64_t outer = len ? a0->n / len : 0;
  int64_t *perm = g_new0 (int64_t, MAX (1, len));
  int64_t *tmp = g_new0 (int64_t, MAX (1, len));
  PsValue **res = g_new0 (PsValue *, nops);
  for (int k = 0; k < nops; k++)
    res[k] = ps_value_copy (ops[k]);
  int64_t *idx = g_new0 (int64_t, rank + 1);
  PsShape *rdims = ps_shape_copy (a0->shape);
  rdims->dims[dim] = 1;
  gboolean ok = ip_charge (ctx, ins, a0->n * 8, error);
  for (int64_t o = 0; o < outer && ok; o++)
    {
      int64_t base = 0;
      for (int d = 0; d < rank; d++)
        base += idx[d] * st[d];
      for (int64_t j = 0; j < len; j++)
        perm[j] = base + j * stride;
      merge_sort (&sc, perm, tmp, len);
      if (sc.failed)
        {
          ok = FALSE;
          break;
        }
      for (int k = 0; k < nops; k++)
        for (int64_t j = 0; j < len; j++)
          ps_value_copy_elem (res[k], base + j * stride, ops[k], perm[j]);
      ps_index_next (rank, rdims->dims, idx);
    }
  PsValue *out = NULL;
  if (ok)
    {
      if (ins->shape->etype == PS_TUPLE)
        {
          out = ps_value_new_tuple (nops, res);
          memset (res, 0, sizeof (PsValue *) * nops);
        }
      else
        {
          out = res[0];
          res[0] = NULL;
        }
    }
  for (int k = 0; k < nops; k++)
    ps_value_free (res[k]);
  for (int k = 0; k < 2 * nops; k++)
    ps_value_free (sc.args[k]);
  g_free (sc.args);
  g_free (res);
  g_free (perm);
  g_free (tmp);
  g_free (st);
  g_free (idx);
  ps_shape_free (rdims);
  return out;
}

/* ---- dispatch ---------------------------------------------------------------------- */

PsValue *
ip_data_op (IpCtx *ctx, const PsInstr *ins, PsValue **ops, int64_t device,
            GError **error)
{
  int no = ins->n_operands;
  if (ins->opcode != PS_OP_IOTA && (no < 1 || !is_array (ops[0])))
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "needs an array operand");
      return NULL;
    }
  if (ins->shape->etype == PS_TUPLE && ins->opcode != PS_OP_SORT && ins->opcode != PS_OP_SCATTER)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "tuple result not supported here");
      return NULL;
    }
  switch (ins->opcode)
    {
    case PS_OP_BROADCAST:
      return op_broadcast (ins, ops, error);
    case PS_OP_RESHAPE:
    case PS_OP_BITCAST:
      if (ops[0]->n != ps_shape_elements (ins->shape) || ops[0]->shape->etype != ins->shape->etype)
        {
          ip_fail (error, PS_ERROR_INVALID, ins, "element count or type changes");
          return NULL;
        }
      else
        {
          PsValue *v = ps_value_copy (ops[0]);
          ps_shape_free (v->shape);
          v->shape = ps_shape_copy (ins->shape);
          return v;
        }
    case PS_OP_TRANSPOSE:
      return op_transpose (ins, ops, error);
    case PS_OP_SLICE:
      return op_slice (ins, ops, error);
    case PS_OP_DYNAMIC_SLICE:
      return op_dynamic_slice (ins, ops, FALSE, error);
    case PS_OP_DYNAMIC_UPDATE_SLICE:
      if (no < 2)
        break;
      return op_dynamic_slice (ins, ops, TRUE, error);
    case PS_OP_PAD:
      if (no != 2)
        break;
      return op_pad (ins, ops, error);
    case PS_OP_CONCATENATE:
      return op_concatenate (ins, ops, error);
    case PS_OP_REVERSE:
      return op_reverse (ins, ops, error);
    case PS_OP_IOTA:
      return op_iota (ins, error);
    case PS_OP_BITCAST_CONVERT:
      return op_bitcast_convert (ins, ops, error);
    case PS_OP_GATHER:
      if (no != 2)
        break;
      return op_gather (ins, ops, error);
    case PS_OP_SCATTER:
      return op_scatter (ctx, ins, ops, device, error);
    case PS_OP_SORT:
      return op_sort (ctx, ins, ops, device, error);
    default:
      break;
    }
  ip_fail (error, PS_ERROR_INVALID, ins, "wrong operands");
  return NULL;
}

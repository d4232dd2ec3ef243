/* Element types and shapes: see shape.h. */
#include "config.h"

#include <string.h>

#include "common/float16.h"
#include "common/ndindex.h"
#include "partitioner/ir/shape.h"

/* ---- element types ------------------------------------------------------ */

static const char *const etype_names[PS_ETYPE_COUNT] = {
  [PS_PRED] = "pred", [PS_S8] = "s8", [PS_S16] = "s16", [PS_S32] = "s32",
  [PS_S64] = "s64", [PS_U8] = "u8", [PS_U16] = "u16", [PS_U32] = "u32",
  [PS_U64] = "u64", [PS_F16] = "f16", [PS_BF16] = "bf16", [PS_F32] = "f32",
  [PS_F64] = "f64", [PS_C64] = "c64", [PS_C128] = "c128", [PS_TOKEN] = "token",
  [PS_TUPLE] = "tuple", [PS_S4] = "s4", [PS_U4] = "u4", [PS_F8E4M3FN] = "f8e4m3fn",
  [PS_F8E5M2] = "f8e5m2", [PS_S1] = "s1", [PS_U1] = "u1", [PS_S2] = "s2", [PS_U2] = "u2",
  [PS_F8E4M3] = "f8e4m3", [PS_F8E3M4] = "f8e3m4", [PS_F8E4M3FNUZ] = "f8e4m3fnuz",
  [PS_F8E5M2FNUZ] = "f8e5m2fnuz", [PS_F8E4M3B11FNUZ] = "f8e4m3b11fnuz",
  [PS_F4E2M1FN] = "f4e2m1fn", [PS_F8E8M0FNU] = "f8e8m0fnu",
};

static const int etype_sizes[PS_ETYPE_COUNT] = {
  [PS_PRED] = 1, [PS_S8] = 1, [PS_S16] = 2, [PS_S32] = 4, [PS_S64] = 8,
  [PS_U8] = 1, [PS_U16] = 2, [PS_U32] = 4, [PS_U64] = 8, [PS_F16] = 2,
  [PS_BF16] = 2, [PS_F32] = 4, [PS_F64] = 8, [PS_C64] = 8, [PS_C128] = 16,
  [PS_TOKEN] = 0, [PS_TUPLE] = 0, [PS_S4] = 1, [PS_U4] = 1, [PS_F8E4M3FN] = 1, [PS_F8E5M2] = 1,
  [PS_S1] = 1, [PS_U1] = 1, [PS_S2] = 1, [PS_U2] = 1, [PS_F8E4M3] = 1, [PS_F8E3M4] = 1,
  [PS_F8E4M3FNUZ] = 1, [PS_F8E5M2FNUZ] = 1, [PS_F8E4M3B11FNUZ] = 1, [PS_F4E2M1FN] = 1,
  [PS_F8E8M0FNU] = 1,
};

/* The narrow floats as ml_dtypes defines them (its README, include/float8.h
 * and include/mxfloat.h: exponent, mantissa, bias, special values), which
 * is what XLA computes with. */
static const PsMinifloat minifloats[PS_ETYPE_COUNT] = {
  [PS_F8E4M3FN] = { 4, 3, 7, PS_MF_FN },
  [PS_F8E5M2] = { 5, 2, 15, PS_MF_IEEE },
  [PS_F8E4M3] = { 4, 3, 7, PS_MF_IEEE },
  [PS_F8E3M4] = { 3, 4, 3, PS_MF_IEEE },
  [PS_F8E4M3FNUZ] = { 4, 3, 8, PS_MF_FNUZ },
  [PS_F8E5M2FNUZ] = { 5, 2, 16, PS_MF_FNUZ },
  [PS_F8E4M3B11FNUZ] = { 4, 3, 11, PS_MF_FNUZ },
  [PS_F4E2M1FN] = { 2, 1, 1, PS_MF_FINITE },
  [PS_F8E8M0FNU] = { 8, 0, 127, PS_MF_UNSIGNED },
};

const char *
ps_etype_name (PsElemType t)
{
  g_return_val_if_fail ((int) t >= 0 && t < PS_ETYPE_COUNT, "?");
  return etype_names[t];
}

gboolean
ps_etype_from_name (const char *s, gsize len, PsElemType *out)
{
  /* "tuple" is a marker, never written as an element type. */
  for (int t = 0; t < PS_TUPLE; t++)
    {
      const char *n = etype_names[t];
      if (strlen (n) == len && memcmp (n, s, len) == 0)
        {
          *out = (PsElemType) t;
          return TRUE;
        }
    }
  return FALSE;
}

int
ps_etype_size_bytes (PsElemType t)
{
  g_return_val_if_fail ((int) t >= 0 && t < PS_ETYPE_COUNT, 0);
  return etype_sizes[t];
}

gboolean
ps_etype_is_float (PsElemType t)
{
  return t == PS_F16 || t == PS_BF16 || t == PS_F32 || t == PS_F64 || ps_etype_minifloat (t);
}

const PsMinifloat *
ps_etype_minifloat (PsElemType t)
{
  if ((int) t < 0 || t >= PS_ETYPE_COUNT || minifloats[t].ebits == 0)
    return NULL;
  return &minifloats[t];
}

uint8_t
ps_etype_minifloat_encode (PsElemType t, double v)
{
  const PsMinifloat *f = ps_etype_minifloat (t);
  g_return_val_if_fail (f != NULL, 0);
  return ps_minifloat_encode (f, (float) v);
}

double
ps_etype_minifloat_decode (PsElemType t, uint8_t code)
{
  const PsMinifloat *f = ps_etype_minifloat (t);
  g_return_val_if_fail (f != NULL, 0);
  return ps_minifloat_decode (f, code);
}

int
ps_etype_bits (PsElemType t)
{
  switch (t)
    {
    case PS_S1: case PS_U1: return 1;
    case PS_S2: case PS_U2: return 2;
    case PS_S4: case PS_U4: case PS_F4E2M1FN: return 4;
    default: return 8 * ps_etype_size_bytes (t);
    }
}

void
ps_etype_int_range (PsElemType t, int64_t *lo, uint64_t *hi)
{
  int bits = ps_etype_bits (t);
  if (t == PS_PRED)
    *lo = 0, *hi = 1;
  else if (ps_etype_is_signed (t))
    *lo = bits == 64 ? INT64_MIN : -((int64_t) 1 << (bits - 1)),
    *hi = bits == 64 ? (uint64_t) INT64_MAX : ((uint64_t) 1 << (bits - 1)) - 1;
  else
    *lo = 0, *hi = bits == 64 ? UINT64_MAX : ((uint64_t) 1 << bits) - 1;
}

gboolean
ps_etype_is_complex (PsElemType t)
{
  return t == PS_C64 || t == PS_C128;
}

gboolean
ps_etype_is_integral (PsElemType t)
{
  return (t >= PS_S8 && t <= PS_U64) || t == PS_S4 || t == PS_U4 || t == PS_S1 || t == PS_U1
         || t == PS_S2 || t == PS_U2;
}

gboolean
ps_etype_is_signed (PsElemType t)
{
  return (t >= PS_S8 && t <= PS_S64) || t == PS_S4 || t == PS_S1 || t == PS_S2
         || (ps_etype_is_float (t) && t != PS_F8E8M0FNU) || ps_etype_is_complex (t);
}

/* ---- shapes ------------------------------------------------------------- */

PsShape *
ps_shape_new_array (PsElemType t, int rank, const int64_t *dims)
{
  g_return_val_if_fail (t != PS_TUPLE && rank >= 0, NULL);
  PsShape *s = g_new0 (PsShape, 1);
  s->etype = t;
  s->rank = rank;
  if (rank > 0)
    s->dims = g_memdup2 (dims, sizeof (int64_t) * (gsize) rank);
  s->layout_n = -1;
  return s;
}

PsShape *
ps_shape_new_scalar (PsElemType t)
{
  return ps_shape_new_array (t, 0, NULL);
}

PsShape *
ps_shape_new_tuple (int n, PsShape *const *elems)
{
  PsShape *s = g_new0 (PsShape, 1);
  s->etype = PS_TUPLE;
  s->layout_n = -1;
  s->n_elems = n;
  if (n > 0)
    {
      s->elems = g_new0 (PsShape *, n);
      for (int i = 0; i < n; i++)
        s->elems[i] = ps_shape_copy (elems[i]);
    }
  return s;
}

PsShape *
ps_shape_copy (const PsShape *s)
{
  if (!s)
    return NULL;
  PsShape *c = g_new0 (PsShape, 1);
  c->etype = s->etype;
  c->rank = s->rank;
  if (s->rank > 0)
    c->dims = g_memdup2 (s->dims, sizeof (int64_t) * (gsize) s->rank);
  if (s->dynamic && s->rank > 0)
    c->dynamic = g_memdup2 (s->dynamic, sizeof (gboolean) * (gsize) s->rank);
  c->layout_n = s->layout_n;
  if (s->layout_n > 0)
    c->layout = g_memdup2 (s->layout, sizeof (int64_t) * (gsize) s->layout_n);
  c->layout_extra = g_strdup (s->layout_extra);
  c->n_elems = s->n_elems;
  if (s->n_elems > 0)
    {
      c->elems = g_new0 (PsShape *, s->n_elems);
      for (int i = 0; i < s->n_elems; i++)
        c->elems[i] = ps_shape_copy (s->elems[i]);
    }
  return c;
}

void
ps_shape_free (PsShape *s)
{
  if (!s)
    return;
  g_free (s->dims);
  g_free (s->dynamic);
  g_free (s->layout);
  g_free (s->layout_extra);
  for (int i = 0; i < s->n_elems; i++)
    ps_shape_free (s->elems[i]);
  g_free (s->elems);
  g_free (s);
}

gboolean
ps_shape_is_tuple (const PsShape *s)
{
  return s && s->etype == PS_TUPLE;
}

gboolean
ps_shape_is_array (const PsShape *s)
{
  return s && s->etype != PS_TUPLE;
}

gboolean
ps_shape_equal (const PsShape *a, const PsShape *b)
{
  if (a == b)
    return TRUE;
  if (!a || !b || a->etype != b->etype)
    return FALSE;
  if (a->etype == PS_TUPLE)
    {
      if (a->n_elems != b->n_elems)
        return FALSE;
      for (int i = 0; i < a->n_elems; i++)
        if (!ps_shape_equal (a->elems[i], b->elems[i]))
          return FALSE;
      return TRUE;
    }
  return ps_shape_same_dims (a, b);
}

gboolean
ps_shape_same_dims (const PsShape *a, const PsShape *b)
{
  if (a->rank != b->rank)
    return FALSE;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i])
      return FALSE;
  return TRUE;
}

int64_t
ps_shape_elements (const PsShape *s)
{
  g_return_val_if_fail (s != NULL, 0);
  if (s->etype == PS_TUPLE)
    return 0;
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++)
    n *= s->dims[i];
  return n;
}

int64_t
ps_shape_bytes (const PsShape *s)
{
  g_return_val_if_fail (s != NULL, 0);
  if (s->etype == PS_TUPLE)
    {
      int64_t b = 0;
      for (int i = 0; i < s->n_elems; i++)
        b += ps_shape_bytes (s->elems[i]);
      return b;
    }
  /* The sub-byte types (s4, u4, f4e2m1fn two to a byte, s2 and u2 four,
   * s1 and u1 eight) are packed in the compiled program's buffers, as
   * XLA's compilers make them: SubByteNormalization(SET_ELEMENT_SIZE)
   * sets element_size_in_bits to the type's bit width, and
   * ShapeUtil::ByteSizeOfElements is then ceil(elements x bits / 8)
   * (xla/hlo/transforms/simplifiers/sub_byte_normalization.h,
   * xla/shape_util.cc). Values are still stored a byte each (ir.h). */
  int bits = ps_etype_bits (s->etype);
  if (bits < 8)
    return (ps_shape_elements (s) * bits + 7) / 8;
  return ps_shape_elements (s) * ps_etype_size_bytes (s->etype);
}

int64_t
ps_shape_leaf_elements (const PsShape *s)
{
  g_return_val_if_fail (s != NULL, 0);
  if (s->etype != PS_TUPLE)
    return ps_shape_elements (s);
  int64_t n = 0;
  for (int i = 0; i < s->n_elems; i++)
    n += ps_shape_leaf_elements (s->elems[i]);
  return n;
}

static gboolean
within_limits (const PsShape *s, int depth, int64_t *elements)
{
  if (s->etype != PS_TUPLE)
    return s->rank <= PS_MAX_RANK
           && ps_checked_product (s->rank, s->dims, PS_MAX_ELEMENTS, elements);
  if (depth >= PS_MAX_NESTING)
    return FALSE;
  int64_t sum = 0;
  for (int i = 0; i < s->n_elems; i++)
    {
      int64_t e;
      /* Each term is at most the limit, so the sum cannot overflow. */
      if (!within_limits (s->elems[i], depth + 1, &e) || (sum += e) > PS_MAX_ELEMENTS)
        return FALSE;
    }
  *elements = sum;
  return TRUE;
}

gboolean
ps_shape_within_limits (const PsShape *s)
{
  g_return_val_if_fail (s != NULL, FALSE);
  int64_t n;
  return within_limits (s, 0, &n);
}

int
ps_shape_leaf_count (const PsShape *s)
{
  g_return_val_if_fail (s != NULL, 0);
  if (s->etype != PS_TUPLE)
    return 1;
  int n = 0;
  for (int i = 0; i < s->n_elems; i++)
    n += ps_shape_leaf_count (s->elems[i]);
  return n;
}

static void
collect_leaves (const PsShape *s, GPtrArray *out)
{
  if (s->etype != PS_TUPLE)
    {
      g_ptr_array_add (out, (gpointer) s);
      return;
    }
  for (int i = 0; i < s->n_elems; i++)
    collect_leaves (s->elems[i], out);
}

GPtrArray *
ps_shape_leaves (const PsShape *s)
{
  GPtrArray *out = g_ptr_array_new ();
  if (s)
    collect_leaves (s, out);
  return out;
}

void
ps_shape_append (GString *out, const PsShape *s, gboolean with_layout)
{
  if (s->etype == PS_TUPLE)
    {
      g_string_append_c (out, '(');
      for (int i = 0; i < s->n_elems; i++)
        {
          if (i > 0)
            g_string_append (out, ", ");
          ps_shape_append (out, s->elems[i], with_layout);
        }
      g_string_append_c (out, ')');
      return;
    }
  g_string_append (out, ps_etype_name (s->etype));
  g_string_append_c (out, '[');
  for (int i = 0; i < s->rank; i++)
    {
      if (i > 0)
        g_string_append_c (out, ',');
      if (s->dynamic && s->dynamic[i] == PS_DIM_UNBOUNDED)
        {
          g_string_append_c (out, '?');
          continue;
        }
      if (s->dynamic && s->dynamic[i])
        g_string_append (out, "<=");
      g_string_append_printf (out, "%" G_GINT64_FORMAT, s->dims[i]);
    }
  g_string_append_c (out, ']');
  if (with_layout && s->layout_n >= 0)
    {
      g_string_append_c (out, '{');
      for (int i = 0; i < s->layout_n; i++)
        {
          if (i > 0)
            g_string_append_c (out, ',');
          g_string_append_printf (out, "%" G_GINT64_FORMAT, s->layout[i]);
        }
      if (s->layout_extra)
        {
          g_string_append_c (out, ':');
          g_string_append (out, s->layout_extra);
        }
      g_string_append_c (out, '}');
    }
}

char *
ps_shape_to_string (const PsShape *s, gboolean with_layout)
{
  GString *out = g_string_new (NULL);
  ps_shape_append (out, s, with_layout);
  return g_string_free (out, FALSE);
}

/* ---- comparisons and strides --------------------------------------------- */

static gboolean
same_i64 (const int64_t *a, const int64_t *b, int64_t n)
{
  return n <= 0 || memcmp (a, b, sizeof (int64_t) * (gsize) n) == 0;
}

gboolean
ps_shape_identical (const PsShape *a, const PsShape *b)
{
  if (a == b)
    return TRUE;
  if (!a || !b || a->etype != b->etype || a->layout_n != b->layout_n
      || g_strcmp0 (a->layout_extra, b->layout_extra) != 0)
    return FALSE;
  if (a->etype == PS_TUPLE)
    {
      if (a->n_elems != b->n_elems)
        return FALSE;
      for (int i = 0; i < a->n_elems; i++)
        if (!ps_shape_identical (a->elems[i], b->elems[i]))
          return FALSE;
      return TRUE;
    }
  if (a->rank != b->rank || !same_i64 (a->dims, b->dims, a->rank)
      || !same_i64 (a->layout, b->layout, a->layout_n) || (a->dynamic == NULL) != (b->dynamic == NULL))
    return FALSE;
  for (int i = 0; a->dynamic && i < a->rank; i++)
    if (a->dynamic[i] != b->dynamic[i])
      return FALSE;
  return TRUE;
}

gboolean
ps_shape_has_unbounded (const PsShape *s)
{
  if (!s)
    return FALSE;
  if (s->etype == PS_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (ps_shape_has_unbounded (s->elems[i]))
          return TRUE;
      return FALSE;
    }
  for (int i = 0; s->dynamic && i < s->rank; i++)
    if (s->dynamic[i] == PS_DIM_UNBOUNDED)
      return TRUE;
  return FALSE;
}

int64_t *
ps_shape_strides (const PsShape *s)
{
  int64_t *st = g_new0 (int64_t, MAX (1, s->rank));
  ps_row_major_strides (s->rank, s->dims, st);
  return st;
}


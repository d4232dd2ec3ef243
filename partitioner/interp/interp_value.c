/* Values of the reference interpreter and the float rounding helpers. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "common/float16.h"
#include "partitioner/interp/interp_private.h"

int64_t
ip_wrap_int (PsElemType t, int64_t v)
{
  switch (t)
    {
    case PS_PRED: return v != 0;
    case PS_S8: return (int8_t) v;
    case PS_S16: return (int16_t) v;
    case PS_S32: return (int32_t) v;
    case PS_U8: return (uint8_t) v;
    case PS_U16: return (uint16_t) v;
    case PS_U32: return (uint32_t) v;
    default: return v;
    }
}

/* Conversion of a double to an integer type saturates and maps NaN to 0, as
 * XLA's convert does on CPU/TPU. */
static int64_t
double_to_int (PsElemType t, double x)
{
  if (t == PS_PRED)
    return x != 0;
  if (isnan (x))
    return 0;
  double lo, hi;
  switch (t)
    {
    case PS_S4: case PS_U4: case PS_S2: case PS_U2: case PS_S1: case PS_U1:
      {
        int64_t l;
        uint64_t h;
        ps_etype_int_range (t, &l, &h);
        lo = (double) l, hi = (double) h;
        break;
      }
    case PS_S8: lo = -128; hi = 127; break;
    case PS_S16: lo = -32768; hi = 32767; break;
    case PS_S32: lo = -2147483648.0; hi = 2147483647.0; break;
    case PS_U8: lo = 0; hi = 255; break;
    case PS_U16: lo = 0; hi = 65535; break;
    case PS_U32: lo = 0; hi = 4294967295.0; break;
    case PS_U64:
      if (x <= 0)
        return 0;
      if (x >= 18446744073709551616.0)
        return (int64_t) UINT64_MAX;
      return (int64_t) (uint64_t) x;
    default:
      if (x <= -9223372036854775808.0)
        return INT64_MIN;
      if (x >= 9223372036854775808.0)
        return INT64_MAX;
      return (int64_t) x;
    }
  if (x <= lo)
    return (int64_t) lo;
  if (x >= hi)
    return (int64_t) hi;
  return (int64_t) x;
}

double
ps_etype_round (PsElemType t, double x)
{
  switch (t)
    {
    case PS_F64: return x;
    case PS_F32: case PS_C64: return (double) (float) x;
    case PS_BF16: return ps_bf16_to_f32 (ps_f32_to_bf16 ((float) x));
    case PS_F16: return ps_f16_to_f32 (ps_f32_to_f16 ((float) x));
    case PS_C128: return x;
    default:
      if (ps_etype_minifloat (t))
        return ps_etype_minifloat_decode (t, ps_etype_minifloat_encode (t, x));
      return (double) double_to_int (t, x);
    }
}

/* ---- values -------------------------------------------------------------- */

static void
value_alloc (PsValue *v)
{
  PsElemType t = v->shape->etype;
  v->n = ps_shape_elements (v->shape);
  if (v->n <= 0 || t == PS_TOKEN)
    {
      v->n = t == PS_TOKEN ? 0 : v->n;
      return;
    }
  if (ps_etype_is_float (t))
    v->f = g_new0 (double, v->n);
  else if (ps_etype_is_complex (t))
    v->c = g_new0 (double, 2 * v->n);
  else
    v->i = g_new0 (int64_t, v->n);
}

PsValue *
ps_value_new (const PsShape *shape)
{
  g_return_val_if_fail (shape != NULL, NULL);
  PsValue *v = g_new0 (PsValue, 1);
  v->shape = ps_shape_copy (shape);
  if (shape->etype == PS_TUPLE)
    {
      v->n_elems = shape->n_elems;
      v->elems = g_new0 (PsValue *, MAX (1, shape->n_elems));
      for (int k = 0; k < shape->n_elems; k++)
        v->elems[k] = ps_value_new (shape->elems[k]);
      return v;
    }
  value_alloc (v);
  return v;
}

PsValue *
ps_value_new_from_doubles (PsElemType t, int rank, const int64_t *dims, const double *data)
{
  PsShape *s = ps_shape_new_array (t, rank, dims);
  PsValue *v = ps_value_new (s);
  ps_shape_free (s);
  if (data)
    for (int64_t i = 0; i < v->n; i++)
      ps_value_set (v, i, data[i]);
  return v;
}

PsValue *
ps_value_new_tuple (int n, PsValue **elems)
{
  PsValue *v = g_new0 (PsValue, 1);
  PsShape **shapes = g_new0 (PsShape *, MAX (1, n));
  for (int k = 0; k < n; k++)
    shapes[k] = elems[k]->shape;
  v->shape = ps_shape_new_tuple (n, shapes);
  g_free (shapes);
  v->n_elems = n;
  v->elems = g_new0 (PsValue *, MAX (1, n));
  for (int k = 0; k < n; k++)
    v->elems[k] = elems[k];
  return v;
}

PsValue *
ps_value_copy (const PsValue *v)
{
  if (!v)
    return NULL;
  PsValue *c = g_new0 (PsValue, 1);
  c->shape = ps_shape_copy (v->shape);
  if (v->shape->etype == PS_TUPLE)
    {
      c->n_elems = v->n_elems;
      c->elems = g_new0 (PsValue *, MAX (1, v->n_elems));
      for (int k = 0; k < v->n_elems; k++)
        c->elems[k] = ps_value_copy (v->elems[k]);
      return c;
    }
  c->n = v->n;
  if (v->f)
    c->f = g_memdup2 (v->f, sizeof (double) * v->n);
  if (v->i)
    c->i = g_memdup2 (v->i, sizeof (int64_t) * v->n);
  if (v->c)
    c->c = g_memdup2 (v->c, sizeof (double) * 2 * v->n);
  return c;
}

void
ps_value_free (PsValue *v)
{
  if (!v)
    return;
  for (int k = 0; k < v->n_elems; k++)
    ps_value_free (v->elems[k]);
  g_free (v->elems);
  g_free (v->f);
  g_free (v->i);
  g_free (v->c);
  ps_shape_free (v->shape);
  g_free (v);
}

static double
literal_get (const PsLiteral *l, int64_t i, double *im)
{
  const void *d = l->data;
  *im = 0;
  switch (l->etype)
    {
    case PS_PRED: return ((const uint8_t *) d)[i] != 0;
    case PS_S8: case PS_S4: case PS_S2: case PS_S1: return ((const int8_t *) d)[i];
    case PS_U4: case PS_U2: case PS_U1: return ((const uint8_t *) d)[i];
    case PS_F8E4M3FN: case PS_F8E5M2: case PS_F8E4M3: case PS_F8E3M4: case PS_F8E4M3FNUZ:
    case PS_F8E5M2FNUZ: case PS_F8E4M3B11FNUZ: case PS_F4E2M1FN: case PS_F8E8M0FNU:
      return ps_etype_minifloat_decode (l->etype, ((const uint8_t *) d)[i]);
    case PS_S16: return ((const int16_t *) d)[i];
    case PS_S32: return ((const int32_t *) d)[i];
    case PS_U8: return ((const uint8_t *) d)[i];
    case PS_U16: return ((const uint16_t *) d)[i];
    case PS_U32: return ((const uint32_t *) d)[i];
    case PS_F16: return ps_f16_to_f32 (((const uint16_t *) d)[i]);
    case PS_BF16: return ps_bf16_to_f32 (((const uint16_t *) d)[i]);
    case PS_F32: return ((const float *) d)[i];
    case PS_F64: return ((const double *) d)[i];
    case PS_C64:
      *im = ((const float *) d)[2 * i + 1];
      return ((const float *) d)[2 * i];
    case PS_C128:
      *im = ((const double *) d)[2 * i + 1];
      return ((const double *) d)[2 * i];
    default: return 0;
    }
}

PsValue *
ps_value_from_literal (const PsShape *shape, const PsLiteral *lit, GError **error)
{
  if (!shape || shape->etype == PS_TUPLE || !lit)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED,
                   "constant: only array literals are supported");
      return NULL;
    }
  PsValue *v = ps_value_new (shape);
  /* A one-element literal fills the whole array (a splat). */
  if (lit->n != v->n && lit->n != 1)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                   "constant has %" G_GINT64_FORMAT " elements, its shape %" G_GINT64_FORMAT,
                   lit->n, v->n);
      ps_value_free (v);
      return NULL;
    }
  for (int64_t i = 0; i < v->n; i++)
    {
      double im;
      int64_t src = lit->n == 1 ? 0 : i;
      /* 64-bit integers do not fit a double exactly: copy them directly. */
      if (v->i && (lit->etype == PS_S64 || lit->etype == PS_U64))
        {
          v->i[i] = ip_wrap_int (shape->etype, ((const int64_t *) lit->data)[src]);
          continue;
        }
      double re = literal_get (lit, src, &im);
      if (v->c)
        {
          v->c[2 * i] = ps_etype_round (shape->etype, re);
          v->c[2 * i + 1] = ps_etype_round (shape->etype, im);
        }
      else
        ps_value_set (v, i, re);
    }
  return v;
}

double
ps_value_get (const PsValue *v, int64_t i)
{
  if (v->f)
    return v->f[i];
  if (v->c)
    return v->c[2 * i];
  if (v->i)
    {
      if (v->shape->etype == PS_U64)
        return (double) (uint64_t) v->i[i];
      return (double) v->i[i];
    }
  return 0;
}

void
ps_value_set (PsValue *v, int64_t i, double x)
{
  PsElemType t = v->shape->etype;
  if (v->f)
    v->f[i] = ps_etype_round (t, x);
  else if (v->c)
    {
      v->c[2 * i] = ps_etype_round (t, x);
      v->c[2 * i + 1] = 0;
    }
  else if (v->i)
    v->i[i] = double_to_int (t, x);
}

gboolean
ps_value_equal (const PsValue *a, const PsValue *b)
{
  if (!ps_shape_equal (a->shape, b->shape))
    return FALSE;
  if (a->shape->etype == PS_TUPLE)
    {
      for (int k = 0; k < a->n_elems; k++)
        if (!ps_value_equal (a->elems[k], b->elems[k]))
          return FALSE;
      return TRUE;
    }
  if (a->i)
    return memcmp (a->i, b->i, sizeof (int64_t) * a->n) == 0;
  if (a->f)
    return memcmp (a->f, b->f, sizeof (double) * a->n) == 0;
  if (a->c)
    return memcmp (a->c, b->c, sizeof (double) * 2 * a->n) == 0;
  return TRUE;
}

void
ps_value_append_elem (GString *out, const PsValue *v, int64_t i)
{
  if (v->i)
    {
      if (v->shape->etype == PS_PRED)
        g_string_append (out, v->i[i] ? "true" : "false");
      else if (v->shape->etype == PS_U64)
        g_string_append_printf (out, "%" G_GUINT64_FORMAT, (guint64) v->i[i]);
      else
        g_string_append_printf (out, "%" G_GINT64_FORMAT, v->i[i]);
    }
  else if (v->f)
    g_string_append_printf (out, "%.9g", v->f[i]);
  else if (v->c)
    g_string_append_printf (out, "(%.9g, %.9g)", v->c[2 * i], v->c[2 * i + 1]);
}

static void
append_value (GString *out, const PsValue *v, int64_t max_elems)
{
  if (v->shape->etype == PS_TUPLE)
    {
      g_string_append_c (out, '(');
      for (int k = 0; k < v->n_elems; k++)
        {
          if (k)
            g_string_append (out, ", ");
          append_value (out, v->elems[k], max_elems);
        }
      g_string_append_c (out, ')');
      return;
    }
  ps_shape_append (out, v->shape, FALSE);
  g_string_append_c (out, ' ');
  int rank = v->shape->rank;
  if (rank == 0)
    {
      if (v->n > 0)
        ps_value_append_elem (out, v, 0);
      return;
    }
  /* Nested braces: open a brace for every dim whose index just became 0. */
  int64_t idx[64] = { 0 };
  if (rank > 64 || v->n == 0)
    {
      g_string_append (out, "{}");
      return;
    }
  for (int64_t i = 0; i < v->n; i++)
    {
      if (max_elems > 0 && i >= max_elems)
        {
          g_string_append (out, ", ...");
          break;
        }
      int opened = 0;
      for (int d = rank - 1; d >= 0 && idx[d] == 0; d--)
        opened++;
      if (i > 0)
        g_string_append (out, ", ");
      for (int k = 0; k < opened; k++)
        g_string_append_c (out, '{');
      ps_value_append_elem (out, v, i);
      int closed = 0;
      for (int d = rank - 1; d >= 0; d--)
        {
          if (++idx[d] < v->shape->dims[d])
            break;
          idx[d] = 0;
          closed++;
        }
      for (int k = 0; k < closed; k++)
        g_string_append_c (out, '}');
      if (closed == rank)
        return;
    }
  /* Truncated: close what is still open. */
  for (int d = 0; d < rank; d++)
    g_string_append_c (out, '}');
}

char *
ps_value_to_string (const PsValue *v, int64_t max_elems)
{
  GString *out = g_string_new (NULL);
  append_value (out, v, max_elems);
  return g_string_free (out, FALSE);
}

void
ps_value_copy_elem (PsValue *dst, int64_t di, const PsValue *src, int64_t si)
{
  if (dst->f && src->f)
    dst->f[di] = src->f[si];
  else if (dst->i && src->i)
    dst->i[di] = src->i[si];
  else if (dst->c && src->c)
    {
      dst->c[2 * di] = src->c[2 * si];
      dst->c[2 * di + 1] = src->c[2 * si + 1];
    }
  else
    ps_value_set (dst, di, ps_value_get (src, si));
}

gboolean
ip_same_dims (const PsShape *a, const PsShape *b)
{
  return a->etype != PS_TUPLE && b->etype != PS_TUPLE && ps_shape_same_dims (a, b);
}

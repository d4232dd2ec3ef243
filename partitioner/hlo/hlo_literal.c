/* Constant values and small attribute forms shared by the HLO reader and
 * printer (hlo_private.h). Floats print with enough digits to reparse to
 * the same bits, so printing is a fixed point. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/float16.h"
#include "partitioner/hlo/hlo_private.h"

static gboolean
parse_double (const char *tok, gsize len, double *out)
{
  char buf[128];
  if (len == 0 || len >= sizeof buf)
    return FALSE;
  memcpy (buf, tok, len);
  buf[len] = 0;
  char *end = NULL;
  errno = 0;
  double v = g_ascii_strtod (buf, &end);
  if (end != buf + len)
    return FALSE;
  *out = v;
  return TRUE;
}

static gboolean
parse_signed (const char *tok, gsize len, int64_t *out)
{
  char buf[64];
  if (len == 0 || len >= sizeof buf)
    return FALSE;
  memcpy (buf, tok, len);
  buf[len] = 0;
  char *end = NULL;
  errno = 0;
  gint64 v = g_ascii_strtoll (buf, &end, 10);
  if (end != buf + len || errno != 0)
    return FALSE;
  *out = v;
  return TRUE;
}

static gboolean
parse_unsigned (const char *tok, gsize len, uint64_t *out)
{
  char buf[64];
  if (len == 0 || len >= sizeof buf || tok[0] == '-')
    return FALSE;
  memcpy (buf, tok, len);
  buf[len] = 0;
  char *end = NULL;
  errno = 0;
  guint64 v = g_ascii_strtoull (buf, &end, 10);
  if (end != buf + len || errno != 0)
    return FALSE;
  *out = v;
  return TRUE;
}

gboolean
hl_literal_store (PsLiteral *lit, int64_t i, const char *tok, gsize len,
                  const char *im, gsize im_len, char **why)
{
  g_return_val_if_fail (i >= 0 && i < lit->n, FALSE);
  PsElemType t = lit->etype;
  char *data = lit->data;
  int64_t sv = 0;
  uint64_t uv = 0;
  double dv = 0;
  if (ps_etype_is_complex (t) != (im != NULL))
    {
      *why = g_strdup_printf (ps_etype_is_complex (t) ? "%s value must be written (re, im)"
                                                      : "%s value cannot be complex",
                              ps_etype_name (t));
      return FALSE;
    }
  switch (t)
    {
    case PS_PRED:
      if (len == 4 && memcmp (tok, "true", 4) == 0)
        sv = 1;
      else if (len == 5 && memcmp (tok, "false", 5) == 0)
        sv = 0;
      else if (!parse_signed (tok, len, &sv) || (sv != 0 && sv != 1))
        goto bad;
      ((uint8_t *) data)[i] = (uint8_t) sv;
      return TRUE;
    case PS_S1: case PS_S2: case PS_S4: case PS_S8: case PS_S16: case PS_S32: case PS_S64:
      {
        if (!parse_signed (tok, len, &sv))
          goto bad;
        int bits = ps_etype_bits (t);
        if (bits < 64 && (sv < -(INT64_C (1) << (bits - 1)) || sv >= (INT64_C (1) << (bits - 1))))
          goto range;
        if (bits <= 8) ((int8_t *) data)[i] = (int8_t) sv;
        else if (t == PS_S16) ((int16_t *) data)[i] = (int16_t) sv;
        else if (t == PS_S32) ((int32_t *) data)[i] = (int32_t) sv;
        else ((int64_t *) data)[i] = sv;
        return TRUE;
      }
    case PS_U1: case PS_U2: case PS_U4: case PS_U8: case PS_U16: case PS_U32: case PS_U64:
      {
        if (!parse_unsigned (tok, len, &uv))
          {
            if (parse_signed (tok, len, &sv))
              goto range;
            goto bad;
          }
        int bits = ps_etype_bits (t);
        if (bits < 64 && uv >= (UINT64_C (1) << bits))
          goto range;
        if (bits <= 8) ((uint8_t *) data)[i] = (uint8_t) uv;
        else if (t == PS_U16) ((uint16_t *) data)[i] = (uint16_t) uv;
        else if (t == PS_U32) ((uint32_t *) data)[i] = (uint32_t) uv;
        else ((uint64_t *) data)[i] = uv;
        return TRUE;
      }
    case PS_F16: case PS_BF16: case PS_F32: case PS_F64: case PS_F8E4M3FN: case PS_F8E5M2:
    case PS_F8E4M3: case PS_F8E3M4: case PS_F8E4M3FNUZ: case PS_F8E5M2FNUZ: case PS_F8E4M3B11FNUZ:
    case PS_F4E2M1FN: case PS_F8E8M0FNU:
      if (!parse_double (tok, len, &dv))
        goto bad;
      if (ps_etype_minifloat (t)) ((uint8_t *) data)[i] = ps_etype_minifloat_encode (t, dv);
      else if (t == PS_F16) ((uint16_t *) data)[i] = ps_f32_to_f16 ((float) dv);
      else if (t == PS_BF16) ((uint16_t *) data)[i] = ps_f32_to_bf16 ((float) dv);
      else if (t == PS_F32) ((float *) data)[i] = (float) dv;
      else ((double *) data)[i] = dv;
      return TRUE;
    case PS_C64: case PS_C128:
      {
        double re, imv;
        if (!parse_double (tok, len, &re) || !parse_double (im, im_len, &imv))
          goto bad;
        if (t == PS_C64)
          {
            ((float *) data)[2 * i] = (float) re;
            ((float *) data)[2 * i + 1] = (float) imv;
          }
        else
          {
            ((double *) data)[2 * i] = re;
            ((double *) data)[2 * i + 1] = imv;
          }
        return TRUE;
      }
    default:
      *why = g_strdup_printf ("%s has no constant values", ps_etype_name (t));
      return FALSE;
    }
bad:
  *why = g_strdup_printf ("'%.*s' is not a %s value", (int) MIN (len, 40), tok, ps_etype_name (t));
  return FALSE;
range:
  *why = g_strdup_printf ("%.*s is out of range for %s", (int) MIN (len, 40), tok, ps_etype_name (t));
  return FALSE;
}

/* The shortest decimal form that reads back to the same value of the
 * element type, so constants print as 1e-06 rather than 9.99999997e-07. */
static gboolean
reads_back (const char *buf, double v, PsElemType t)
{
  double r = g_ascii_strtod (buf, NULL);
  if (ps_etype_minifloat (t))
    return ps_etype_minifloat_encode (t, r) == ps_etype_minifloat_encode (t, v);
  switch (t)
    {
    case PS_BF16: return ps_f32_to_bf16 ((float) r) == ps_f32_to_bf16 ((float) v);
    case PS_F16: return ps_f32_to_f16 ((float) r) == ps_f32_to_f16 ((float) v);
    case PS_F32: case PS_C64: return (float) r == (float) v;
    default: return r == v;
    }
}

static void
append_double (GString *out, double v, PsElemType t)
{
  if (isnan (v))
    {
      g_string_append (out, "nan");
      return;
    }
  if (isinf (v))
    {
      g_string_append (out, v < 0 ? "-inf" : "inf");
      return;
    }
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  if (v == floor (v) && fabs (v) < 1e15)
    {
      /* Whole numbers read better in full (65504, not 6.55e+04). */
      g_ascii_formatd (buf, sizeof buf, "%.0f", v);
      g_string_append (out, strcmp (buf, "-0") == 0 ? "-0" : buf);
      return;
    }
  for (int digits = 1; digits <= 17; digits++)
    {
      char fmt[8];
      g_snprintf (fmt, sizeof fmt, "%%.%dg", digits);
      g_ascii_formatd (buf, sizeof buf, fmt, v);
      if (reads_back (buf, v, t))
        break;
    }
  g_string_append (out, buf);
}

void
hl_literal_append_elem (GString *out, const PsLiteral *lit, int64_t i)
{
  const char *data = lit->data;
  switch (lit->etype)
    {
    case PS_PRED: g_string_append (out, ((const uint8_t *) data)[i] ? "true" : "false"); break;
    case PS_S8: case PS_S4: case PS_S2: case PS_S1: g_string_append_printf (out, "%d", ((const int8_t *) data)[i]); break;
    case PS_U4: case PS_U2: case PS_U1: g_string_append_printf (out, "%u", ((const uint8_t *) data)[i]); break;
    case PS_F8E4M3FN: case PS_F8E5M2: case PS_F8E4M3: case PS_F8E3M4: case PS_F8E4M3FNUZ:
    case PS_F8E5M2FNUZ: case PS_F8E4M3B11FNUZ: case PS_F4E2M1FN: case PS_F8E8M0FNU:
      append_double (out, ps_etype_minifloat_decode (lit->etype, ((const uint8_t *) data)[i]), lit->etype);
      break;
    case PS_S16: g_string_append_printf (out, "%d", ((const int16_t *) data)[i]); break;
    case PS_S32: g_string_append_printf (out, "%d", ((const int32_t *) data)[i]); break;
    case PS_S64: g_string_append_printf (out, "%" G_GINT64_FORMAT, ((const int64_t *) data)[i]); break;
    case PS_U8: g_string_append_printf (out, "%u", ((const uint8_t *) data)[i]); break;
    case PS_U16: g_string_append_printf (out, "%u", ((const uint16_t *) data)[i]); break;
    case PS_U32: g_string_append_printf (out, "%u", ((const uint32_t *) data)[i]); break;
    case PS_U64: g_string_append_printf (out, "%" G_GUINT64_FORMAT, ((const uint64_t *) data)[i]); break;
    case PS_F16: append_double (out, ps_f16_to_f32 (((const uint16_t *) data)[i]), PS_F16); break;
    case PS_BF16: append_double (out, ps_bf16_to_f32 (((const uint16_t *) data)[i]), PS_BF16); break;
    case PS_F32: append_double (out, ((const float *) data)[i], PS_F32); break;
    case PS_F64: append_double (out, ((const double *) data)[i], PS_F64); break;
    case PS_C64:
      g_string_append_c (out, '(');
      append_double (out, ((const float *) data)[2 * i], PS_C64);
      g_string_append (out, ", ");
      append_double (out, ((const float *) data)[2 * i + 1], PS_C64);
      g_string_append_c (out, ')');
      break;
    case PS_C128:
      g_string_append_c (out, '(');
      append_double (out, ((const double *) data)[2 * i], PS_C128);
      g_string_append (out, ", ");
      append_double (out, ((const double *) data)[2 * i + 1], PS_C128);
      g_string_append_c (out, ')');
      break;
    default:
      break;
    }
}

static void
append_nested (GString *out, const PsLiteral *lit, const PsShape *shape, int dim, int64_t *next)
{
  g_string_append_c (out, '{');
  for (int64_t k = 0; k < shape->dims[dim]; k++)
    {
      if (k > 0)
        g_string_append (out, ", ");
      if (dim + 1 < shape->rank)
        append_nested (out, lit, shape, dim + 1, next);
      else
        hl_literal_append_elem (out, lit, (*next)++);
    }
  g_string_append_c (out, '}');
}

void
hl_literal_append (GString *out, const PsLiteral *lit, const PsShape *shape)
{
  if (!lit)
    return;
  if (lit->splat && lit->n > 0)
    {
      hl_literal_append_elem (out, lit, 0);
      return;
    }
  if (!shape || shape->etype == PS_TUPLE || shape->rank == 0 || ps_shape_elements (shape) != lit->n)
    {
      /* A shape that does not match (hand-built IR): print a flat list. */
      if (lit->n == 1 && (!shape || shape->rank == 0))
        {
          hl_literal_append_elem (out, lit, 0);
          return;
        }
      g_string_append_c (out, '{');
      for (int64_t i = 0; i < lit->n; i++)
        {
          if (i > 0)
            g_string_append (out, ", ");
          hl_literal_append_elem (out, lit, i);
        }
      g_string_append_c (out, '}');
      return;
    }
  int64_t next = 0;
  append_nested (out, lit, shape, 0, &next);
}

void
hl_conv_dims_append (GString *out, const PsConvDims *d)
{
  int n = d->n_spatial;
  /* Each side is a permutation: place the labels at their dims. */
  char lhs[32], ker[32], res[32];
  int r = n + 2;
  if (r > 31)
    return;
  memset (lhs, '?', (gsize) r);
  memset (ker, '?', (gsize) r);
  memset (res, '?', (gsize) r);
  lhs[r] = ker[r] = res[r] = 0;
#define PUT(arr, pos, ch) do { if ((pos) >= 0 && (pos) < r) (arr)[(pos)] = (ch); } while (0)
  PUT (lhs, d->in_batch, 'b');
  PUT (lhs, d->in_feature, 'f');
  PUT (ker, d->k_in_feature, 'i');
  PUT (ker, d->k_out_feature, 'o');
  PUT (res, d->out_batch, 'b');
  PUT (res, d->out_feature, 'f');
  for (int s = 0; s < n; s++)
    {
      char ch = (char) (s < 10 ? '0' + s : 'a' + s - 10);
      PUT (lhs, d->in_spatial[s], ch);
      PUT (ker, d->k_spatial[s], ch);
      PUT (res, d->out_spatial[s], ch);
    }
#undef PUT
  g_string_append_printf (out, "%s_%s->%s", lhs, ker, res);
}

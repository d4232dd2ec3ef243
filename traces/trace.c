/* Step-trace types: names, mesh device orders, compact replica groups and
 * permute pairs (parse, expand, check), the in-memory trace. The text form
 * lives in trace_writer.c and trace_reader.c. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "traces/trace-private.h"

/* ---- names ------------------------------------------------------------------ */

static const struct { const char *name; int size; } dtypes[PS_TRACE_DTYPE_COUNT] = {
  [PS_TRACE_PRED] = { "pred", 1 }, [PS_TRACE_S8] = { "s8", 1 },
  [PS_TRACE_S16] = { "s16", 2 },   [PS_TRACE_S32] = { "s32", 4 },
  [PS_TRACE_S64] = { "s64", 8 },   [PS_TRACE_U8] = { "u8", 1 },
  [PS_TRACE_U16] = { "u16", 2 },   [PS_TRACE_U32] = { "u32", 4 },
  [PS_TRACE_U64] = { "u64", 8 },   [PS_TRACE_F16] = { "f16", 2 },
  [PS_TRACE_BF16] = { "bf16", 2 }, [PS_TRACE_F32] = { "f32", 4 },
  [PS_TRACE_F64] = { "f64", 8 },   [PS_TRACE_C64] = { "c64", 8 },
  [PS_TRACE_C128] = { "c128", 16 },
};

const char *
ps_trace_dtype_name (PsTraceDtype t)
{
  g_return_val_if_fail ((unsigned) t < PS_TRACE_DTYPE_COUNT, "?");
  return dtypes[t].name;
}

gboolean
ps_trace_dtype_from_name (const char *name, PsTraceDtype *out)
{
  for (int i = 0; i < PS_TRACE_DTYPE_COUNT; i++)
    if (strcmp (name, dtypes[i].name) == 0)
      {
        *out = (PsTraceDtype) i;
        return TRUE;
      }
  return FALSE;
}

int
ps_trace_dtype_size_bytes (PsTraceDtype t)
{
  g_return_val_if_fail ((unsigned) t < PS_TRACE_DTYPE_COUNT, 0);
  return dtypes[t].size;
}

static const char *const op_kind_names[PS_TRACE_OP_COUNT] = {
  "matmul", "conv", "elementwise", "reduce", "data-movement", "other",
};

const char *
ps_trace_op_kind_name (PsTraceOpKind k)
{
  g_return_val_if_fail ((unsigned) k < PS_TRACE_OP_COUNT, "?");
  return op_kind_names[k];
}

const char *
ps_trace_precision_name (PsTracePrecision p)
{
  switch (p)
    {
    case PS_TRACE_PRECISION_DEFAULT: return "default";
    case PS_TRACE_PRECISION_HIGH: return "high";
    case PS_TRACE_PRECISION_HIGHEST: return "highest";
    }
  return "?";
}

static const char *const collective_names[PS_TRACE_COLLECTIVE_COUNT] = {
  "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
};

const char *
ps_trace_collective_kind_name (PsTraceCollectiveKind k)
{
  g_return_val_if_fail ((unsigned) k < PS_TRACE_COLLECTIVE_COUNT, "?");
  return collective_names[k];
}

void
ps_trace_append_name (GString *out, const char *name)
{
  for (const unsigned char *p = (const unsigned char *) name; *p; p++)
    {
      if (*p > 0x20 && *p < 0x7f && *p != '%')
        g_string_append_c (out, (char) *p);
      else
        g_string_append_printf (out, "%%%02X", *p);
    }
}

gboolean
ps_trace_decode_name (char *name)
{
  char *w = name;
  for (const char *r = name; *r; r++)
    {
      if (*r != '%')
        {
          *w++ = *r;
          continue;
        }
      if (!g_ascii_isxdigit (r[1]) || !g_ascii_isxdigit (r[2]))
        return FALSE;
      int v = g_ascii_xdigit_value (r[1]) * 16 + g_ascii_xdigit_value (r[2]);
      if (v == 0)
        return FALSE;
      *w++ = (char) v;
      r += 2;
    }
  *w = '\0';
  return TRUE;
}

/* ---- mesh -------------------------------------------------------------------- */

static guint64
product (const gint64 *dims, guint n)
{
  guint64 p = 1;
  for (guint i = 0; i < n; i++)
    p *= (guint64) dims[i];
  return p;
}

/* Lingvo's non-pod 2-D mesh: a ring over the (y, core) plane of each row of
 * chips, then rows in zig-zag order, because slices smaller than a pod have
 * no wrap links and a zig-zag ring avoids the long way back. */
static void
nonpod2d_ids (const PsTraceMesh *m, guint32 *ids)
{
  gint64 px = m->physical[0], py = m->physical[1], pc = m->physical[2];
  guint64 n = (guint64) (px * py * pc);
  g_autofree guint32 *flat = g_new (guint32, n);
  /* transpose [x, y, c] -> [x, c, y], reverse y for core 1 */
  guint64 k = 0;
  for (gint64 x = 0; x < px; x++)
    for (gint64 c = 0; c < pc; c++)
      for (gint64 y = 0; y < py; y++)
        {
          gint64 yy = c == 1 ? py - 1 - y : y;
          flat[k++] = (guint32) (x * py * pc + yy * pc + c);
        }
  gint64 d0 = m->dims[0], d1 = m->dims[1];
  for (gint64 i = 0; i < d0; i++)
    {
      gint64 zi = 2 * i < d0 ? 2 * i : (d0 - i) * 2 - 1;
      memcpy (ids + i * d1, flat + zi * d1, (gsize) d1 * sizeof (guint32));
    }
}

guint32 *
ps_trace_mesh_device_ids (const PsTraceMesh *mesh, guint64 *n_out)
{
  guint64 n = product (mesh->dims, mesh->rank);
  guint32 *ids = g_new (guint32, n ? n : 1);
  switch (mesh->order)
    {
    case PS_TRACE_ORDER_ARANGE:
      for (guint64 i = 0; i < n; i++)
        ids[i] = (guint32) i;
      break;
    case PS_TRACE_ORDER_ARANGE_T:
      for (guint64 i = 0; i < n; i++)
        {
          /* coordinates of position i (row-major); axis 0 is the fastest
           * varying one in the transposed arange */
          guint64 rem = i, id = 0, stride = 1;
          guint64 coord[PS_TRACE_MAX_RANK];
          for (int a = (int) mesh->rank - 1; a >= 0; a--)
            {
              coord[a] = rem % (guint64) mesh->dims[a];
              rem /= (guint64) mesh->dims[a];
            }
          for (guint a = 0; a < mesh->rank; a++)
            {
              id += coord[a] * stride;
              stride *= (guint64) mesh->dims[a];
            }
          ids[i] = (guint32) id;
        }
      break;
    case PS_TRACE_ORDER_NONPOD2D:
      nonpod2d_ids (mesh, ids);
      break;
    case PS_TRACE_ORDER_LIST:
      memcpy (ids, mesh->devices, n * sizeof (guint32));
      break;
    }
  if (n_out)
    *n_out = n;
  return ids;
}

char *
ps_trace_order_to_string (const PsTraceMesh *mesh)
{
  switch (mesh->order)
    {
    case PS_TRACE_ORDER_ARANGE: return g_strdup ("arange");
    case PS_TRACE_ORDER_ARANGE_T: return g_strdup ("arange_T");
    case PS_TRACE_ORDER_NONPOD2D:
      return g_strdup_printf ("nonpod2d:%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                              "x%" G_GINT64_FORMAT, mesh->physical[0],
                              mesh->physical[1], mesh->physical[2]);
    case PS_TRACE_ORDER_LIST:
      {
        GString *s = g_string_new ("list:");
        guint64 n = product (mesh->dims, mesh->rank);
        for (guint64 i = 0; i < n; i++)
          g_string_append_printf (s, i ? ",%u" : "%u", mesh->devices[i]);
        return g_string_free (s, FALSE);
      }
    }
  return g_strdup ("?");
}

/* ---- small scanner for the compact forms ---------------------------------------- */

typedef struct {
  const char *text;
  const char *p;
  char *why;
  gsize why_offset;
} Scan;

static gboolean
scan_fail (Scan *s, const char *fmt, ...) G_GNUC_PRINTF (2, 3);

static gboolean
scan_fail (Scan *s, const char *fmt, ...)
{
  if (!s->why)
    {
      va_list ap;
      va_start (ap, fmt);
      s->why = g_strdup_vprintf (fmt, ap);
      va_end (ap);
      s->why_offset = (gsize) (s->p - s->text);
    }
  return FALSE;
}

static gboolean
scan_char (Scan *s, char c)
{
  if (*s->p != c)
    return scan_fail (s, "expected '%c'", c);
  s->p++;
  return TRUE;
}

static gboolean
scan_int (Scan *s, gboolean allow_sign, gint64 max, gint64 *out)
{
  const char *start = s->p;
  gboolean neg = FALSE;
  if (allow_sign && (*s->p == '-' || *s->p == '+'))
    neg = *s->p++ == '-';
  if (!g_ascii_isdigit (*s->p))
    {
      s->p = start;
      return scan_fail (s, "expected a number");
    }
  guint64 v = 0;
  while (g_ascii_isdigit (*s->p))
    {
      v = v * 10 + (guint64) (*s->p - '0');
      s->p++;
      if (v > (guint64) max)
        {
          s->p = start;
          return scan_fail (s, "number too large");
        }
    }
  *out = neg ? -(gint64) v : (gint64) v;
  return TRUE;
}

/* "{a,b,...}" lists of non-negative ids; appends to `out`, returns count. */
static gboolean
scan_id_list (Scan *s, GArray *out, guint64 *count)
{
  *count = 0;
  if (!scan_char (s, '{'))
    return FALSE;
  if (*s->p == '}')
    {
      s->p++;
      return TRUE;
    }
  for (;;)
    {
      gint64 v;
      if (!scan_int (s, FALSE, G_MAXUINT32, &v))
        return FALSE;
      guint32 id = (guint32) v;
      g_array_append_val (out, id);
      (*count)++;
      if (*s->p == ',')
        {
          s->p++;
          continue;
        }
      return scan_char (s, '}');
    }
}

static gboolean
scan_list_of_lists (Scan *s, GArray *ids, guint64 *n_lists, guint64 *list_size,
                    gboolean equal_sizes)
{
  *n_lists = 0;
  *list_size = 0;
  if (!scan_char (s, '{'))
    return FALSE;
  if (*s->p == '}')
    return scan_fail (s, "empty list");
  for (;;)
    {
      const char *start = s->p;
      guint64 n;
      if (!scan_id_list (s, ids, &n))
        return FALSE;
      if (*n_lists == 0)
        *list_size = n;
      else if (equal_sizes && n != *list_size)
        {
          s->p = start;
          return scan_fail (s, "group of %" G_GUINT64_FORMAT " devices where the first "
                            "has %" G_GUINT64_FORMAT " (groups must have equal sizes)",
                            n, *list_size);
        }
      (*n_lists)++;
      if (*s->p == ',')
        {
          s->p++;
          continue;
        }
      return scan_char (s, '}');
    }
}

static gboolean
scan_dims (Scan *s, char open, char close, gint64 *dims, guint *rank)
{
  *rank = 0;
  if (!scan_char (s, open))
    return FALSE;
  for (;;)
    {
      if (*rank == PS_TRACE_MAX_RANK)
        return scan_fail (s, "more than %d dimensions", PS_TRACE_MAX_RANK);
      gint64 v;
      if (!scan_int (s, FALSE, G_MAXUINT32, &v))
        return FALSE;
      dims[(*rank)++] = v;
      if (*s->p == ',')
        {
          s->p++;
          continue;
        }
      return scan_char (s, close);
    }
}

static gboolean
scan_end (Scan *s)
{
  if (*s->p)
    return scan_fail (s, "unexpected '%c'", *s->p);
  return TRUE;
}

static gboolean
finish_scan (Scan *s, gboolean ok, char **why, gsize *why_offset)
{
  if (!ok)
    {
      *why = s->why ? s->why : g_strdup ("malformed");
      *why_offset = s->why_offset;
    }
  return ok;
}

gboolean
ps_trace_parse_groups (const char *text, PsTraceGroups *out, char **why,
                       gsize *why_offset)
{
  Scan s = { text, text, NULL, 0 };
  gboolean ok = FALSE;
  memset (out, 0, sizeof *out);
  if (strcmp (text, "all") == 0)
    {
      out->form = PS_TRACE_GROUPS_ALL;
      return TRUE;
    }
  if (g_str_has_prefix (text, "axes:"))
    {
      out->form = PS_TRACE_GROUPS_AXES;
      s.p += 5;
      for (;;)
        {
          gint64 v;
          if (out->n_axes == PS_TRACE_MAX_RANK)
            {
              scan_fail (&s, "more than %d axes", PS_TRACE_MAX_RANK);
              break;
            }
          if (!scan_int (&s, FALSE, PS_TRACE_MAX_RANK, &v))
            break;
          out->axes[out->n_axes++] = (guint) v;
          if (*s.p == ',')
            {
              s.p++;
              continue;
            }
          ok = scan_end (&s);
          break;
        }
      return finish_scan (&s, ok, why, why_offset);
    }
  if (*text == '[')
    {
      out->form = PS_TRACE_GROUPS_IOTA;
      gint64 shape[PS_TRACE_MAX_RANK];
      guint shape_rank;
      if (!scan_dims (&s, '[', ']', shape, &shape_rank))
        return finish_scan (&s, FALSE, why, why_offset);
      if (shape_rank != 2)
        {
          s.p = text;
          scan_fail (&s, "iota groups need a [groups,size] shape");
          return finish_scan (&s, FALSE, why, why_offset);
        }
      out->n_groups = (guint64) shape[0];
      out->group_size = (guint64) shape[1];
      if (!scan_char (&s, '<') || !scan_char (&s, '=')
          || !scan_dims (&s, '[', ']', out->iota_dims, &out->iota_rank))
        return finish_scan (&s, FALSE, why, why_offset);
      for (guint i = 0; i < out->iota_rank; i++)
        out->iota_perm[i] = i;
      if (*s.p == 'T')
        {
          s.p++;
          gint64 perm[PS_TRACE_MAX_RANK];
          guint prank;
          const char *at = s.p;
          if (!scan_dims (&s, '(', ')', perm, &prank))
            return finish_scan (&s, FALSE, why, why_offset);
          guint seen = 0;
          for (guint i = 0; i < prank; i++)
            {
              if (perm[i] >= (gint64) out->iota_rank || (seen & (1u << perm[i])))
                break;
              seen |= 1u << perm[i];
              out->iota_perm[i] = (guint) perm[i];
            }
          if (prank != out->iota_rank || seen != (1u << prank) - 1)
            {
              s.p = at;
              scan_fail (&s, "T(...) is not a permutation of the %u reshape dims",
                         out->iota_rank);
              return finish_scan (&s, FALSE, why, why_offset);
            }
        }
      return finish_scan (&s, scan_end (&s), why, why_offset);
    }
  if (*text == '{')
    {
      out->form = PS_TRACE_GROUPS_LIST;
      GArray *ids = g_array_new (FALSE, FALSE, sizeof (guint32));
      ok = scan_list_of_lists (&s, ids, &out->n_groups, &out->group_size, TRUE)
           && scan_end (&s);
      if (ok && out->group_size == 0)
        {
          s.p = text;
          ok = scan_fail (&s, "empty replica group");
        }
      out->devices = (guint32 *) g_array_free (ids, !ok);
      return finish_scan (&s, ok, why, why_offset);
    }
  scan_fail (&s, "expected replica groups: all, axes:A,..., [G,S]<=[dims]T(perm) "
             "or {{ids},...}");
  return finish_scan (&s, FALSE, why, why_offset);
}

gboolean
ps_trace_parse_pairs (const char *text, PsTracePairs *out, char **why,
                      gsize *why_offset)
{
  Scan s = { text, text, NULL, 0 };
  gboolean ok = FALSE;
  memset (out, 0, sizeof *out);
  if (g_str_has_prefix (text, "shift:"))
    {
      gint64 axis, offset;
      out->form = PS_TRACE_PAIRS_SHIFT;
      s.p += 6;
      ok = scan_int (&s, FALSE, PS_TRACE_MAX_RANK, &axis) && scan_char (&s, ':')
           && scan_int (&s, TRUE, G_MAXINT32, &offset);
      if (ok && strcmp (s.p, ":wrap") == 0)
        {
          out->wrap = TRUE;
          s.p += 5;
        }
      ok = ok && scan_end (&s);
      out->axis = ok ? (guint) axis : 0;
      out->offset = ok ? offset : 0;
      return finish_scan (&s, ok, why, why_offset);
    }
  if (*text == '{')
    {
      out->form = PS_TRACE_PAIRS_LIST;
      GArray *ids = g_array_new (FALSE, FALSE, sizeof (guint32));
      guint64 n, size;
      ok = scan_list_of_lists (&s, ids, &n, &size, TRUE) && scan_end (&s);
      if (ok && size != 2)
        {
          s.p = text;
          ok = scan_fail (&s, "source-target pairs must have 2 ids each");
        }
      out->n_pairs = n;
      out->pairs = (guint32 *) g_array_free (ids, !ok);
      return finish_scan (&s, ok, why, why_offset);
    }
  scan_fail (&s, "expected permute pairs: shift:AXIS:OFFSET[:wrap] or {{src,dst},...}");
  return finish_scan (&s, FALSE, why, why_offset);
}

gboolean
ps_trace_parse_order (const char *text, PsTraceMesh *mesh, char **why,
                      gsize *why_offset)
{
  Scan s = { text, text, NULL, 0 };
  g_clear_pointer (&mesh->devices, g_free);
  if (strcmp (text, "arange") == 0)
    mesh->order = PS_TRACE_ORDER_ARANGE;
  else if (strcmp (text, "arange_T") == 0)
    mesh->order = PS_TRACE_ORDER_ARANGE_T;
  else if (g_str_has_prefix (text, "nonpod2d:"))
    {
      mesh->order = PS_TRACE_ORDER_NONPOD2D;
      s.p += 9;
      for (int i = 0; i < 3; i++)
        if ((i > 0 && !scan_char (&s, 'x'))
            || !scan_int (&s, FALSE, G_MAXUINT32, &mesh->physical[i]))
          return finish_scan (&s, FALSE, why, why_offset);
      return finish_scan (&s, scan_end (&s), why, why_offset);
    }
  else if (g_str_has_prefix (text, "list:"))
    {
      GArray *ids = g_array_new (FALSE, FALSE, sizeof (guint32));
      gboolean ok = TRUE;
      mesh->order = PS_TRACE_ORDER_LIST;
      s.p += 5;
      for (;;)
        {
          gint64 v;
          if (!(ok = scan_int (&s, FALSE, G_MAXUINT32, &v)))
            break;
          guint32 id = (guint32) v;
          g_array_append_val (ids, id);
          if (*s.p != ',')
            break;
          s.p++;
        }
      ok = ok && scan_end (&s);
      mesh->devices = (guint32 *) g_array_free (ids, !ok);
      return finish_scan (&s, ok, why, why_offset);
    }
  else
    {
      scan_fail (&s, "unknown device order '%s' (expected arange, arange_T, "
                 "nonpod2d:XxYxC or list:ids)", text);
      return finish_scan (&s, FALSE, why, why_offset);
    }
  return TRUE;
}

static gboolean
public_parse (gboolean ok, const char *text, char *why, gsize at, GError **error)
{
  if (!ok)
    {
      ps_set_error_at (error, PS_ERROR_PARSE, text, 1, (int) at + 1, "%s", why);
      g_free (why);
    }
  return ok;
}

gboolean
ps_trace_groups_parse (const char *text, PsTraceGroups *out, GError **error)
{
  char *why = NULL;
  gsize at = 0;
  gboolean ok = ps_trace_parse_groups (text, out, &why, &at);
  return public_parse (ok, text, why, at, error);
}

gboolean
ps_trace_pairs_parse (const char *text, PsTracePairs *out, GError **error)
{
  char *why = NULL;
  gsize at = 0;
  gboolean ok = ps_trace_parse_pairs (text, out, &why, &at);
  return public_parse (ok, text, why, at, error);
}

void
ps_trace_groups_clear (PsTraceGroups *g)
{
  g_clear_pointer (&g->devices, g_free);
}

void
ps_trace_pairs_clear (PsTracePairs *p)
{
  g_clear_pointer (&p->pairs, g_free);
}

/* ---- checks ---------------------------------------------------------------------- */

char *
ps_trace_check_header (const PsTraceHeader *h)
{
  const PsTraceMesh *m = &h->mesh;
  if (m->rank < 1 || m->rank > PS_TRACE_MAX_RANK)
    return g_strdup_printf ("mesh rank %u outside 1..%d", m->rank, PS_TRACE_MAX_RANK);
  guint64 n = 1;
  for (guint i = 0; i < m->rank; i++)
    {
      if (m->dims[i] < 1 || m->dims[i] > PS_TRACE_MAX_DEVICES)
        return g_strdup_printf ("mesh dimension %u is %" G_GINT64_FORMAT, i, m->dims[i]);
      n *= (guint64) m->dims[i];
      if (n > PS_TRACE_MAX_DEVICES)
        return g_strdup_printf ("mesh has more than %u devices", PS_TRACE_MAX_DEVICES);
    }
  if (n != h->n_devices)
    return g_strdup_printf ("mesh has %" G_GUINT64_FORMAT " devices but the header "
                            "says %" G_GUINT64_FORMAT, n, h->n_devices);
  if (m->order == PS_TRACE_ORDER_NONPOD2D)
    {
      if (m->rank != 2)
        return g_strdup ("order nonpod2d needs a 2-D mesh");
      if (m->physical[2] != 2)
        return g_strdup ("order nonpod2d needs 2 cores per chip (XxYx2)");
      if (m->physical[0] < 1 || m->physical[1] < 1
          || (guint64) (m->physical[0] * m->physical[1] * m->physical[2]) != n)
        return g_strdup_printf ("nonpod2d physical shape %" G_GINT64_FORMAT "x%"
                                G_GINT64_FORMAT "x%" G_GINT64_FORMAT " does not hold the "
                                "%" G_GUINT64_FORMAT " devices", m->physical[0],
                                m->physical[1], m->physical[2], n);
    }
  if (m->order == PS_TRACE_ORDER_LIST)
    {
      if (!m->devices)
        return g_strdup ("order list without devices");
      g_autofree guint8 *seen = g_new0 (guint8, n);
      /* the reader gives at most as many ids as it read; count them there */
      for (guint64 i = 0; i < n; i++)
        {
          if (m->devices[i] >= n)
            return g_strdup_printf ("device %u in the mesh order is not below %"
                                    G_GUINT64_FORMAT, m->devices[i], n);
          if (seen[m->devices[i]]++)
            return g_strdup_printf ("device %u appears twice in the mesh order",
                                    m->devices[i]);
        }
    }
  return NULL;
}

static char *
check_cover (const guint32 *ids, guint64 count, guint64 n_devices, const char *what)
{
  if (count != n_devices)
    return g_strdup_printf ("%s cover %" G_GUINT64_FORMAT " devices, the mesh has %"
                            G_GUINT64_FORMAT, what, count, n_devices);
  g_autofree guint8 *seen = g_new0 (guint8, n_devices ? n_devices : 1);
  for (guint64 i = 0; i < count; i++)
    {
      if (ids[i] >= n_devices)
        return g_strdup_printf ("device %u in %s is not below the %" G_GUINT64_FORMAT
                                " devices of the mesh", ids[i], what, n_devices);
      if (seen[ids[i]]++)
        return g_strdup_printf ("device %u appears twice in %s", ids[i], what);
    }
  return NULL;
}

char *
ps_trace_groups_resolve (PsTraceGroups *g, const PsTraceHeader *h)
{
  const PsTraceMesh *m = &h->mesh;
  switch (g->form)
    {
    case PS_TRACE_GROUPS_ALL:
      g->n_groups = 1;
      g->group_size = h->n_devices;
      return NULL;
    case PS_TRACE_GROUPS_AXES:
      {
        guint seen = 0;
        guint64 size = 1;
        if (g->n_axes == 0)
          return g_strdup ("groups name no mesh axis");
        for (guint i = 0; i < g->n_axes; i++)
          {
            if (g->axes[i] >= m->rank)
              return g_strdup_printf ("groups name mesh axis %u but the mesh has %u "
                                      "axes", g->axes[i], m->rank);
            if (seen & (1u << g->axes[i]))
              return g_strdup_printf ("groups name mesh axis %u twice", g->axes[i]);
            seen |= 1u << g->axes[i];
            size *= (guint64) m->dims[g->axes[i]];
          }
        g->group_size = size;
        g->n_groups = h->n_devices / size;
        return NULL;
      }
    case PS_TRACE_GROUPS_IOTA:
      {
        /* bounded products: huge dims must not wrap around to a match */
        guint64 n = 1;
        for (guint i = 0; i < g->iota_rank; i++)
          {
            if (g->iota_dims[i] < 1 || (guint64) g->iota_dims[i] > h->n_devices)
              return g_strdup_printf ("iota reshape dim %" G_GINT64_FORMAT " does not fit "
                                      "the %" G_GUINT64_FORMAT " devices", g->iota_dims[i],
                                      h->n_devices);
            n *= (guint64) g->iota_dims[i];
            if (n > h->n_devices)
              return g_strdup_printf ("iota reshape dims hold more than the %"
                                      G_GUINT64_FORMAT " devices", h->n_devices);
          }
        if (g->n_groups > h->n_devices || g->group_size > h->n_devices)
          return g_strdup_printf ("iota groups [%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT
                                  "] do not fit the %" G_GUINT64_FORMAT " devices",
                                  g->n_groups, g->group_size, h->n_devices);
        if (g->n_groups * g->group_size != n)
          return g_strdup_printf ("iota groups [%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT
                                  "] do not hold the %" G_GUINT64_FORMAT " ids of their "
                                  "reshape dims", g->n_groups, g->group_size, n);
        if (n != h->n_devices)
          return g_strdup_printf ("iota groups cover %" G_GUINT64_FORMAT " devices, the "
                                  "mesh has %" G_GUINT64_FORMAT, n, h->n_devices);
        if (g->group_size == 0)
          return g_strdup ("empty replica group");
        return NULL;
      }
    case PS_TRACE_GROUPS_LIST:
      if (g->group_size == 0 || !g->devices)
        return g_strdup ("empty replica group");
      return check_cover (g->devices, g->n_groups * g->group_size, h->n_devices,
                          "replica groups");
    }
  return g_strdup ("unknown groups form");
}

char *
ps_trace_check_pairs (const PsTracePairs *p, const PsTraceHeader *h)
{
  const PsTraceMesh *m = &h->mesh;
  if (p->form == PS_TRACE_PAIRS_SHIFT)
    {
      if (p->axis >= m->rank)
        return g_strdup_printf ("shift along mesh axis %u but the mesh has %u axes",
                                p->axis, m->rank);
      if (p->offset == 0 || p->offset >= m->dims[p->axis]
          || -p->offset >= m->dims[p->axis])
        return g_strdup_printf ("shift offset %" G_GINT64_FORMAT " along mesh axis %u "
                                "of size %" G_GINT64_FORMAT " (need 0 < |offset| < size)",
                                p->offset, p->axis, m->dims[p->axis]);
      return NULL;
    }
  if (p->n_pairs > 0 && !p->pairs)
    return g_strdup ("pairs missing");
  g_autofree guint8 *src = g_new0 (guint8, h->n_devices ? h->n_devices : 1);
  g_autofree guint8 *dst = g_new0 (guint8, h->n_devices ? h->n_devices : 1);
  for (guint64 i = 0; i < p->n_pairs; i++)
    {
      guint32 a = p->pairs[2 * i], b = p->pairs[2 * i + 1];
      if (a >= h->n_devices || b >= h->n_devices)
        return g_strdup_printf ("pair {%u,%u} names a device not below the %"
                                G_GUINT64_FORMAT " devices of the mesh", a, b,
                                h->n_devices);
      if (src[a]++)
        return g_strdup_printf ("device %u is the source of two pairs", a);
      if (dst[b]++)
        return g_strdup_printf ("device %u is the target of two pairs", b);
    }
  return NULL;
}

void
ps_trace_checker_init (PsTraceChecker *c, const PsTraceHeader *header)
{
  memset (c, 0, sizeof *c);
  c->header = header;
  c->open_async = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
}

void
ps_trace_checker_clear (PsTraceChecker *c)
{
  g_clear_pointer (&c->open_async, g_hash_table_unref);
}

char *
ps_trace_checker_event (PsTraceChecker *c, const PsTraceEvent *e, const char **key)
{
  *key = NULL;
  c->sums.n_events++;
  switch (e->kind)
    {
    case PS_TRACE_EVENT_COMPUTE:
      {
        const PsTraceCompute *k = &e->compute;
        gboolean mxu_op = k->op == PS_TRACE_OP_MATMUL || k->op == PS_TRACE_OP_CONV;
        c->sums.flops += k->flops;
        c->sums.read_bytes += k->read_bytes;
        c->sums.write_bytes += k->write_bytes;
        if (mxu_op && !k->has_mxu)
          {
            *key = "mxu";
            return g_strdup_printf ("%s event without mxu=BxMxKxN dims",
                                    ps_trace_op_kind_name (k->op));
          }
        if (!mxu_op && k->has_mxu)
          {
            *key = "mxu";
            return g_strdup_printf ("mxu dims on a %s event (only matmul and conv use "
                                    "the MXU)", ps_trace_op_kind_name (k->op));
          }
        if (k->has_mxu && (k->mxu_batch == 0 || k->mxu_m == 0 || k->mxu_k == 0
                           || k->mxu_n == 0))
          {
            *key = "mxu";
            return g_strdup ("mxu dims must be positive");
          }
        return NULL;
      }
    case PS_TRACE_EVENT_COLLECTIVE:
      {
        const PsTraceCollective *k = &e->collective;
        c->sums.collective_bytes += k->in_bytes;
        guint64 g = k->groups.group_size;
        const char *kind = ps_trace_collective_kind_name (k->kind);
        *key = "out_bytes";
        switch (k->kind)
          {
          case PS_TRACE_ALL_GATHER:
            if (k->out_bytes != k->in_bytes * g)
              return g_strdup_printf ("all-gather over groups of %" G_GUINT64_FORMAT
                                      " needs out_bytes = %" G_GUINT64_FORMAT " x in_bytes",
                                      g, g);
            break;
          case PS_TRACE_REDUCE_SCATTER:
            if (k->in_bytes != k->out_bytes * g)
              return g_strdup_printf ("reduce-scatter over groups of %" G_GUINT64_FORMAT
                                      " needs in_bytes = %" G_GUINT64_FORMAT " x out_bytes",
                                      g, g);
            break;
          default:
            if (k->in_bytes != k->out_bytes)
              return g_strdup_printf ("%s needs out_bytes = in_bytes", kind);
            break;
          }
        *key = NULL;
        if (k->async_id != 0)
          {
            if (g_hash_table_contains (c->open_async, &k->async_id))
              {
                *key = "async";
                return g_strdup_printf ("async id %" G_GUINT64_FORMAT " is already in "
                                        "flight", k->async_id);
              }
            gint64 *id = g_new (gint64, 1);
            *id = (gint64) k->async_id;
            g_hash_table_insert (c->open_async, id, GSIZE_TO_POINTER (c->sums.n_events));
          }
        return NULL;
      }
    case PS_TRACE_EVENT_DONE:
      if (!g_hash_table_remove (c->open_async, &e->async_id))
        return g_strdup_printf ("done for async id %" G_GUINT64_FORMAT " that is not in "
                                "flight", e->async_id);
      return NULL;
    case PS_TRACE_EVENT_MEMORY:
      if (e->live_bytes > c->sums.peak_bytes)
        c->sums.peak_bytes = e->live_bytes;
      if (c->header && e->live_bytes > c->header->totals.peak_bytes)
        {
          *key = "live_bytes";
          return g_strdup_printf ("live bytes %" G_GUINT64_FORMAT " above the header's "
                                  "peak_bytes %" G_GUINT64_FORMAT, e->live_bytes,
                                  c->header->totals.peak_bytes);
        }
      return NULL;
    }
  return g_strdup ("unknown event kind");
}

char *
ps_trace_checker_finish (PsTraceChecker *c, gboolean check_totals)
{
  if (g_hash_table_size (c->open_async) > 0)
    {
      /* name the earliest unfinished one, deterministically */
      GHashTableIter it;
      gpointer k, v;
      gint64 id = 0;
      gsize first = G_MAXSIZE;
      g_hash_table_iter_init (&it, c->open_async);
      while (g_hash_table_iter_next (&it, &k, &v))
        if (GPOINTER_TO_SIZE (v) < first)
          {
            first = GPOINTER_TO_SIZE (v);
            id = *(gint64 *) k;
          }
      return g_strdup_printf ("async collective %" G_GINT64_FORMAT " (event %" G_GSIZE_FORMAT
                              ") has no done", id, first);
    }
  if (!check_totals)
    return NULL;
  const PsTraceTotals *t = &c->header->totals, *s = &c->sums;
  struct { const char *name; guint64 header, sum; } f[] = {
    { "events", t->n_events, s->n_events },
    { "flops", t->flops, s->flops },
    { "read_bytes", t->read_bytes, s->read_bytes },
    { "write_bytes", t->write_bytes, s->write_bytes },
    { "collective_bytes", t->collective_bytes, s->collective_bytes },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (f); i++)
    if (f[i].header != f[i].sum)
      return g_strdup_printf ("totals %s=%" G_GUINT64_FORMAT " in the header but the "
                              "events sum to %" G_GUINT64_FORMAT, f[i].name, f[i].header,
                              f[i].sum);
  return NULL;
}

/* ---- expansion ------------------------------------------------------------------- */

guint32 *
ps_trace_groups_expand (const PsTraceGroups *groups, const PsTraceHeader *header,
                        guint64 *n_groups, guint64 *group_size)
{
  guint64 n = header->n_devices;
  guint32 *out = g_new (guint32, n ? n : 1);
  switch (groups->form)
    {
    case PS_TRACE_GROUPS_ALL:
      for (guint64 i = 0; i < n; i++)
        out[i] = (guint32) i;
      *n_groups = 1;
      *group_size = n;
      return out;
    case PS_TRACE_GROUPS_AXES:
      {
        const PsTraceMesh *m = &header->mesh;
        g_autofree guint32 *ids = ps_trace_mesh_device_ids (m, NULL);
        gboolean in_group[PS_TRACE_MAX_RANK] = { FALSE };
        guint64 size = 1;
        for (guint i = 0; i < groups->n_axes; i++)
          {
            in_group[groups->axes[i]] = TRUE;
            size *= (guint64) m->dims[groups->axes[i]];
          }
        guint64 stride[PS_TRACE_MAX_RANK], s = 1;
        for (int a = (int) m->rank - 1; a >= 0; a--)
          {
            stride[a] = s;
            s *= (guint64) m->dims[a];
          }
        /* position = sum over the other axes (row-major: group index) plus
         * sum over the group axes in the listed order (member index) */
        for (guint64 g = 0; g < n / size; g++)
          {
            guint64 base = 0, rem = g;
            for (int a = (int) m->rank - 1; a >= 0; a--)
              if (!in_group[a])
                {
                  base += (rem % (guint64) m->dims[a]) * stride[a];
                  rem /= (guint64) m->dims[a];
                }
            for (guint64 j = 0; j < size; j++)
              {
                guint64 pos = base, r = j;
                for (int i = (int) groups->n_axes - 1; i >= 0; i--)
                  {
                    guint a = groups->axes[i];
                    pos += (r % (guint64) m->dims[a]) * stride[a];
                    r /= (guint64) m->dims[a];
                  }
                out[g * size + j] = ids[pos];
              }
          }
        *n_groups = n / size;
        *group_size = size;
        return out;
      }
    case PS_TRACE_GROUPS_IOTA:
      {
        /* element k of the transposed array: its coordinates in the
         * permuted dims, mapped back to the row-major index of the
         * reshaped arange */
        guint r = groups->iota_rank;
        gint64 pdims[PS_TRACE_MAX_RANK];
        guint64 stride[PS_TRACE_MAX_RANK], s = 1;
        for (int a = (int) r - 1; a >= 0; a--)
          {
            stride[a] = s;
            s *= (guint64) groups->iota_dims[a];
          }
        for (guint i = 0; i < r; i++)
          pdims[i] = groups->iota_dims[groups->iota_perm[i]];
        for (guint64 k = 0; k < n; k++)
          {
            guint64 rem = k, id = 0;
            for (int i = (int) r - 1; i >= 0; i--)
              {
                id += (rem % (guint64) pdims[i]) * stride[groups->iota_perm[i]];
                rem /= (guint64) pdims[i];
              }
            out[k] = (guint32) id;
          }
        *n_groups = groups->n_groups;
        *group_size = groups->group_size;
        return out;
      }
    case PS_TRACE_GROUPS_LIST:
      memcpy (out, groups->devices, n * sizeof (guint32));
      *n_groups = groups->n_groups;
      *group_size = groups->group_size;
      return out;
    }
  *n_groups = 0;
  *group_size = 0;
  return out;
}

static int
cmp_pair (const void *a, const void *b)
{
  const guint32 *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

guint32 *
ps_trace_pairs_expand (const PsTracePairs *pairs, const PsTraceHeader *header,
                       guint64 *n_pairs)
{
  guint64 n = 0;
  guint32 *out;
  if (pairs->form == PS_TRACE_PAIRS_LIST)
    {
      n = pairs->n_pairs;
      out = g_new (guint32, 2 * n + 1);
      memcpy (out, pairs->pairs, 2 * n * sizeof (guint32));
    }
  else
    {
      const PsTraceMesh *m = &header->mesh;
      g_autofree guint32 *ids = ps_trace_mesh_device_ids (m, NULL);
      guint64 stride = 1;
      for (guint a = m->rank - 1; a > pairs->axis; a--)
        stride *= (guint64) m->dims[a];
      gint64 size = m->dims[pairs->axis];
      out = g_new (guint32, 2 * header->n_devices + 1);
      for (guint64 pos = 0; pos < header->n_devices; pos++)
        {
          gint64 c = (gint64) ((pos / stride) % (guint64) size);
          gint64 t = c + pairs->offset;
          if (t < 0 || t >= size)
            {
              if (!pairs->wrap)
                continue;
              t = ((t % size) + size) % size;
            }
          guint64 q = pos + (guint64) (t - c) * stride;
          out[2 * n] = ids[pos];
          out[2 * n + 1] = ids[q];
          n++;
        }
    }
  qsort (out, n, 2 * sizeof (guint32), cmp_pair);
  *n_pairs = n;
  return out;
}

char *
ps_trace_groups_to_string (const PsTraceGroups *g)
{
  GString *s = g_string_new (NULL);
  switch (g->form)
    {
    case PS_TRACE_GROUPS_ALL:
      g_string_append (s, "all");
      break;
    case PS_TRACE_GROUPS_AXES:
      g_string_append (s, "axes:");
      for (guint i = 0; i < g->n_axes; i++)
        g_string_append_printf (s, i ? ",%u" : "%u", g->axes[i]);
      break;
    case PS_TRACE_GROUPS_IOTA:
      {
        gboolean identity = TRUE;
        g_string_append_printf (s, "[%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT "]<=[",
                                g->n_groups, g->group_size);
        for (guint i = 0; i < g->iota_rank; i++)
          {
            g_string_append_printf (s, i ? ",%" G_GINT64_FORMAT : "%" G_GINT64_FORMAT,
                                    g->iota_dims[i]);
            identity = identity && g->iota_perm[i] == i;
          }
        g_string_append_c (s, ']');
        if (!identity)
          {
            g_string_append (s, "T(");
            for (guint i = 0; i < g->iota_rank; i++)
              g_string_append_printf (s, i ? ",%u" : "%u", g->iota_perm[i]);
            g_string_append_c (s, ')');
          }
        break;
      }
    case PS_TRACE_GROUPS_LIST:
      g_string_append_c (s, '{');
      for (guint64 i = 0; i < g->n_groups; i++)
        {
          g_string_append (s, i ? ",{" : "{");
          for (guint64 j = 0; j < g->group_size; j++)
            g_string_append_printf (s, j ? ",%u" : "%u", g->devices[i * g->group_size + j]);
          g_string_append_c (s, '}');
        }
      g_string_append_c (s, '}');
      break;
    }
  return g_string_free (s, FALSE);
}

char *
ps_trace_pairs_to_string (const PsTracePairs *p)
{
  if (p->form == PS_TRACE_PAIRS_SHIFT)
    return g_strdup_printf ("shift:%u:%" G_GINT64_FORMAT "%s", p->axis, p->offset,
                            p->wrap ? ":wrap" : "");
  GString *s = g_string_new ("{");
  for (guint64 i = 0; i < p->n_pairs; i++)
    g_string_append_printf (s, "%s{%u,%u}", i ? "," : "", p->pairs[2 * i],
                            p->pairs[2 * i + 1]);
  g_string_append_c (s, '}');
  return g_string_free (s, FALSE);
}

/* ---- in-memory trace ----------------------------------------------------------------- */

void
ps_trace_event_clear (PsTraceEvent *e)
{
  if (e->kind == PS_TRACE_EVENT_COLLECTIVE)
    {
      g_clear_pointer (&e->collective.groups.devices, g_free);
      g_clear_pointer (&e->collective.pairs.pairs, g_free);
    }
}

void
ps_trace_header_clear (PsTraceHeader *h)
{
  g_clear_pointer (&h->program, g_free);
  g_clear_pointer (&h->slice, g_free);
  g_clear_pointer (&h->mesh.devices, g_free);
}

void
ps_trace_header_copy (PsTraceHeader *dst, const PsTraceHeader *src)
{
  *dst = *src;
  dst->program = g_strdup (src->program);
  dst->slice = g_strdup (src->slice);
  if (src->mesh.devices)
    dst->mesh.devices = g_memdup2 (src->mesh.devices,
                                   product (src->mesh.dims, src->mesh.rank)
                                   * sizeof (guint32));
}

PsTrace *
ps_trace_new (const char *program)
{
  PsTrace *t = g_new0 (PsTrace, 1);
  t->header.version = PS_TRACE_FORMAT_VERSION;
  t->header.program = g_strdup (program ? program : "");
  t->header.n_devices = 1;
  t->header.mesh.rank = 1;
  t->header.mesh.dims[0] = 1;
  t->events = g_array_new (FALSE, TRUE, sizeof (PsTraceEvent));
  t->names = g_string_chunk_new (4096);
  return t;
}

void
ps_trace_free (PsTrace *t)
{
  if (!t)
    return;
  for (guint i = 0; i < t->events->len; i++)
    ps_trace_event_clear (&g_array_index (t->events, PsTraceEvent, i));
  g_array_free (t->events, TRUE);
  g_string_chunk_free (t->names);
  ps_trace_header_clear (&t->header);
  g_free (t);
}

PsTraceHeader *
ps_trace_header (PsTrace *t)
{
  return &t->header;
}

const PsTraceHeader *
ps_trace_get_header (const PsTrace *t)
{
  return &t->header;
}

void
ps_trace_set_slice (PsTrace *t, const char *slice)
{
  g_free (t->header.slice);
  t->header.slice = g_strdup (slice);
}

void
ps_trace_set_mesh (PsTrace *t, guint rank, const gint64 *dims,
                   PsTraceDeviceOrder order, const guint32 *devices)
{
  g_return_if_fail (rank >= 1 && rank <= PS_TRACE_MAX_RANK);
  PsTraceMesh *m = &t->header.mesh;
  g_clear_pointer (&m->devices, g_free);
  m->rank = rank;
  memcpy (m->dims, dims, rank * sizeof (gint64));
  m->order = order;
  t->header.n_devices = product (dims, rank);
  if (order == PS_TRACE_ORDER_LIST && devices)
    m->devices = g_memdup2 (devices, t->header.n_devices * sizeof (guint32));
}

static PsTraceEvent *
append_event (PsTrace *t, PsTraceEventKind kind, const char *name)
{
  PsTraceEvent e = { .kind = kind };
  if (name)
    e.name = g_string_chunk_insert_const (t->names, name);
  g_array_append_val (t->events, e);
  return &g_array_index (t->events, PsTraceEvent, t->events->len - 1);
}

void
ps_trace_add_compute (PsTrace *t, const char *name, const PsTraceCompute *compute)
{
  PsTraceEvent *e = append_event (t, PS_TRACE_EVENT_COMPUTE, name ? name : "");
  e->compute = *compute;
}

void
ps_trace_add_collective (PsTrace *t, const char *name, const PsTraceCollective *c)
{
  PsTraceEvent *e = append_event (t, PS_TRACE_EVENT_COLLECTIVE, name ? name : "");
  e->collective = *c;
  PsTraceCollective *k = &e->collective;
  if (c->kind == PS_TRACE_COLLECTIVE_PERMUTE)
    {
      memset (&k->groups, 0, sizeof k->groups);
      if (c->pairs.form == PS_TRACE_PAIRS_LIST)
        k->pairs.pairs = g_memdup2 (c->pairs.pairs, 2 * c->pairs.n_pairs * sizeof (guint32));
    }
  else
    {
      memset (&k->pairs, 0, sizeof k->pairs);
      if (c->groups.form == PS_TRACE_GROUPS_LIST)
        k->groups.devices = g_memdup2 (c->groups.devices, c->groups.n_groups
                                       * c->groups.group_size * sizeof (guint32));
      else
        k->groups.devices = NULL;
    }
}

void
ps_trace_add_done (PsTrace *t, guint64 async_id)
{
  append_event (t, PS_TRACE_EVENT_DONE, NULL)->async_id = async_id;
}

void
ps_trace_add_memory (PsTrace *t, guint64 live_bytes)
{
  append_event (t, PS_TRACE_EVENT_MEMORY, NULL)->live_bytes = live_bytes;
}

guint64
ps_trace_n_events (const PsTrace *t)
{
  return t->events->len;
}

const PsTraceEvent *
ps_trace_get_event (const PsTrace *t, guint64 index)
{
  g_return_val_if_fail (index < t->events->len, NULL);
  return &g_array_index (t->events, PsTraceEvent, index);
}

/* Runs the checks; fills `sums` when non-NULL. */
static gboolean
validate (const PsTrace *t, gboolean check_totals, PsTraceTotals *sums, GError **error)
{
  const PsTraceHeader *h = &t->header;
  char *why = NULL;
  if (h->version != PS_TRACE_FORMAT_VERSION)
    why = g_strdup_printf ("version %u (this podsim writes version %d)", h->version,
                           PS_TRACE_FORMAT_VERSION);
  else if (!h->program)
    why = g_strdup ("no program name");
  else
    why = ps_trace_check_header (h);
  if (why)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "trace header: %s", why);
      g_free (why);
      return FALSE;
    }
  PsTraceChecker c;
  ps_trace_checker_init (&c, check_totals ? h : NULL);
  for (guint i = 0; i < t->events->len && !why; i++)
    {
      PsTraceEvent e = g_array_index (t->events, PsTraceEvent, i);
      const char *key;
      if (e.kind == PS_TRACE_EVENT_COLLECTIVE)
        {
          if (e.collective.kind == PS_TRACE_COLLECTIVE_PERMUTE)
            why = ps_trace_check_pairs (&e.collective.pairs, h);
          else
            why = ps_trace_groups_resolve (&e.collective.groups, h);
        }
      if (!why && (e.kind == PS_TRACE_EVENT_COMPUTE || e.kind == PS_TRACE_EVENT_COLLECTIVE)
          && (!e.name || strchr (e.name, '\n')))
        why = g_strdup ("bad event name");
      if (!why)
        why = ps_trace_checker_event (&c, &e, &key);
      if (why)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "event %u (%s%s%s): %s", i + 1,
                       e.name ? e.name : (e.kind == PS_TRACE_EVENT_DONE ? "done" : "memory"),
                       "", "", why);
          g_free (why);
          ps_trace_checker_clear (&c);
          return FALSE;
        }
    }
  why = ps_trace_checker_finish (&c, check_totals);
  if (sums)
    *sums = c.sums;
  ps_trace_checker_clear (&c);
  if (why)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "trace: %s", why);
      g_free (why);
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_trace_validate (const PsTrace *t, GError **error)
{
  return validate (t, FALSE, NULL, error);
}

void
ps_trace_update_totals (PsTrace *t)
{
  PsTraceTotals s = { 0 };
  for (guint i = 0; i < t->events->len; i++)
    {
      const PsTraceEvent *e = &g_array_index (t->events, PsTraceEvent, i);
      s.n_events++;
      if (e->kind == PS_TRACE_EVENT_COMPUTE)
        {
          s.flops += e->compute.flops;
          s.read_bytes += e->compute.read_bytes;
          s.write_bytes += e->compute.write_bytes;
        }
      else if (e->kind == PS_TRACE_EVENT_COLLECTIVE)
        s.collective_bytes += e->collective.in_bytes;
      else if (e->kind == PS_TRACE_EVENT_MEMORY && e->live_bytes > s.peak_bytes)
        s.peak_bytes = e->live_bytes;
    }
  s.peak_bytes = MAX (s.peak_bytes, t->header.totals.peak_bytes);
  t->header.totals = s;
}

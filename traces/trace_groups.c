/* Step-trace compact forms: mesh device orders, replica groups and permute
 * pairs, as text (parse, print) and expanded to explicit device lists. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/ndindex.h"
#include "traces/trace_private.h"

/* ---- mesh -------------------------------------------------------------------- */

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
  guint64 n = (guint64) ps_product ((int) mesh->rank, mesh->dims);
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
tr_order_to_string (const PsTraceMesh *mesh)
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
        guint64 n = (guint64) ps_product ((int) mesh->rank, mesh->dims);
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
tr_parse_groups (const char *text, PsTraceGroups *out, char **why,
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
tr_parse_pairs (const char *text, PsTracePairs *out, char **why,
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
  if (strcmp (text, "{}") == 0)
    {
      /* a permute in which nobody sends: legal, and lowering can meet it */
      out->form = PS_TRACE_PAIRS_LIST;
      return TRUE;
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

const PsParamSpec ps_trace_param_mesh = PS_TRACE_PARAM_MESH;

gboolean
ps_trace_mesh_parse_dims (const char *text, const char *what, PsTraceMesh *mesh, GError **error)
{
  int64_t dims[PS_TRACE_MAX_RANK];
  int n = 0;
  gboolean ok = ps_parse_shape (text, PS_TRACE_MAX_RANK, PS_TRACE_MAX_DEVICES, dims, &n);
  if (!ok)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "%s: '%s' is not a mesh shape such as 2x4 (at most %d dims, %u devices)", what, text,
                   PS_TRACE_MAX_RANK, PS_TRACE_MAX_DEVICES);
      return FALSE;
    }
  mesh->rank = (guint) n;
  for (int i = 0; i < n; i++)
    mesh->dims[i] = dims[i];
  return TRUE;
}

gboolean
ps_trace_mesh_set_order (PsTraceMesh *mesh, const char *name, const gint64 *physical)
{
  if (strcmp (name, "arange") == 0)
    mesh->order = PS_TRACE_ORDER_ARANGE;
  else if (strcmp (name, "arange_T") == 0)
    mesh->order = PS_TRACE_ORDER_ARANGE_T;
  else if (strcmp (name, "nonpod2d") == 0)
    {
      mesh->order = PS_TRACE_ORDER_NONPOD2D;
      for (int i = 0; i < 3; i++)
        mesh->physical[i] = physical[i];
    }
  else
    return FALSE;
  return TRUE;
}

gboolean
tr_parse_order (const char *text, PsTraceMesh *mesh, char **why,
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
  gboolean ok = tr_parse_groups (text, out, &why, &at);
  return public_parse (ok, text, why, at, error);
}

gboolean
ps_trace_pairs_parse (const char *text, PsTracePairs *out, GError **error)
{
  char *why = NULL;
  gsize at = 0;
  gboolean ok = tr_parse_pairs (text, out, &why, &at);
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


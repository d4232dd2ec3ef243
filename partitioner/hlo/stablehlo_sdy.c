/* The StableHLO reader's attribute dictionaries ({mhlo.sharding = ...})
 * and Shardy shardings (sdy.mesh, #sdy.sharding<...>), mapped to the HLO
 * sharding of the same meaning. See stablehlo.h and stablehlo_private.h. */
#include "config.h"

#include <string.h>

#include "partitioner/hlo/stablehlo_private.h"

void
sl_mesh_free (gpointer p)
{
  SlMesh *m = p;
  g_ptr_array_unref (m->axes);
  g_array_unref (m->sizes);
  g_free (m);
}

/* sdy.mesh @name = <["x"=2, "y"=4]> (older texts leave out the brackets). */
gboolean
sl_sdy_mesh (Sl *s)
{
  sl_skip_ws (s);
  gsize at = s->pos;
  g_autofree char *name = NULL;
  if (!sl_expect (s, "@", "before the mesh name") || !(name = sl_word (s)) || !sl_expect (s, "=", "after the mesh name")
      || !sl_expect (s, "<", "to open the mesh"))
    return FALSE;
  gboolean br = sl_accept (s, "[");
  SlMesh *m = g_new0 (SlMesh, 1);
  m->axes = g_ptr_array_new_with_free_func (g_free);
  m->sizes = g_array_new (FALSE, FALSE, sizeof (int64_t));
  sl_skip_ws (s);
  if (SL_CUR (s) == '"')
    do
      {
        char *ax = sl_string_lit (s);
        if (!ax)
          break;
        g_ptr_array_add (m->axes, ax);
        g_autofree char *n = sl_expect (s, "=", "after the axis name") ? sl_number (s) : NULL;
        if (!n)
          break;
        int64_t v = g_ascii_strtoll (n, NULL, 10);
        if (v < 1 || v > 65536)
          {
            sl_error (s, at, "mesh axis \"%s\" has size %s (1 to 65536)", ax, n);
            break;
          }
        g_array_append_val (m->sizes, v);
      }
    while (sl_accept (s, ","));
  if (!SL_FAILED (s) && br)
    sl_expect (s, "]", "to close the mesh axes");
  if (!SL_FAILED (s) && sl_accept (s, ","))
    sl_error (s, s->pos, "meshes with device_ids are not read yet (devices in order are)");
  if (!SL_FAILED (s))
    sl_expect (s, ">", "to close the mesh");
  if (SL_FAILED (s))
    {
      sl_mesh_free (m);
      return FALSE;
    }
  g_hash_table_replace (s->meshes, g_steal_pointer (&name), m);
  return TRUE;
}

/* "@mesh, [{"x"}, {}], replicated={"y"}" (the inside of #sdy.sharding<...>)
 * as the HLO sharding of the same meaning: each dimension tiled over its
 * axes (major first), the axes no dimension uses replicated; the devices are
 * the mesh's, so the tile assignment is the mesh transposed to the axes'
 * order of use. transfer full. */
char *
sl_sdy_body (Sl *s)
{
  sl_skip_ws (s);
  gsize at = s->pos;
  g_autofree char *mname = NULL;
  if (!sl_accept (s, "@"))
    {
      sl_error (s, at, "inline meshes in sdy.sharding are not read yet (a named sdy.mesh is)");
      return NULL;
    }
  if (!(mname = sl_word (s)))
    return NULL;
  SlMesh *m = g_hash_table_lookup (s->meshes, mname);
  if (!m)
    {
      sl_error (s, at, "unknown mesh @%s (declare it with sdy.mesh before its use)", mname);
      return NULL;
    }
  guint na = m->axes->len;
  g_autofree int *used = g_new0 (int, na + 1);
  g_autoptr (GArray) order = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GArray) tiles = g_array_new (FALSE, FALSE, sizeof (int64_t));
  if (!sl_expect (s, ",", "after the mesh") || !sl_expect (s, "[", "to open the dimension shardings"))
    return NULL;
  if (!sl_accept (s, "]"))
    {
      do
        {
          int64_t t = 1;
          if (!sl_expect (s, "{", "to open a dimension's axes"))
            return NULL;
          sl_skip_ws (s);
          while (!SL_FAILED (s) && SL_CUR (s) != '}')
            {
              sl_skip_ws (s);
              gsize aat = s->pos;
              if (sl_accept (s, "?"))
                ;
              else
                {
                  g_autofree char *ax = sl_string_lit (s);
                  if (!ax)
                    return NULL;
                  if (SL_CUR (s) == ':')
                    {
                      sl_error (s, aat, "sub-axes (\"%s\":(k)n) are not read yet", ax);
                      return NULL;
                    }
                  guint k = 0;
                  while (k < na && strcmp (g_ptr_array_index (m->axes, k), ax) != 0)
                    k++;
                  if (k == na || used[k])
                    {
                      sl_error (s, aat, k == na ? "mesh @%s has no axis \"%s\"" : "mesh @%s's axis \"%s\" is used twice",
                                mname, ax);
                      return NULL;
                    }
                  used[k] = 1;
                  int ki = (int) k;
                  g_array_append_val (order, ki);
                  t *= g_array_index (m->sizes, int64_t, k);
                }
              if (!sl_accept (s, ","))
                break;
            }
          if (!sl_expect (s, "}", "to close a dimension's axes"))
            return NULL;
          /* a priority, {"x"}p1, does not change the sharding */
          if (SL_CUR (s) == 'p' && s->pos + 1 < s->len && g_ascii_isdigit (s->t[s->pos + 1]))
            for (s->pos++; s->pos < s->len && g_ascii_isdigit (s->t[s->pos]); s->pos++)
              ;
          g_array_append_val (tiles, t);
        }
      while (sl_accept (s, ","));
      if (!sl_expect (s, "]", "to close the dimension shardings"))
        return NULL;
    }
  /* replicated={...} says what is already so; unreduced is another meaning */
  gsize save = s->pos;
  if (sl_accept (s, ","))
    {
      sl_skip_ws (s);
      gsize kat = s->pos;
      g_autofree char *key = sl_word (s);
      if (key && strcmp (key, "replicated") == 0 && sl_expect (s, "=", "after replicated"))
        {
          int depth = 0;
          while (s->pos < s->len && !(s->t[s->pos] == '}' && depth == 1))
            {
              if (s->t[s->pos] == '{')
                depth++;
              s->pos++;
            }
          sl_expect (s, "}", "to close replicated={...}");
        }
      else if (!SL_FAILED (s))
        {
          sl_error (s, kat, "sdy.sharding's '%s' is not read yet", key ? key : "?");
          return NULL;
        }
    }
  else
    s->pos = save;
  if (SL_FAILED (s))
    return NULL;
  int64_t rep = 1, total = 1;
  for (guint k = 0; k < na; k++)
    {
      total *= g_array_index (m->sizes, int64_t, k);
      if (!used[k])
        {
          rep *= g_array_index (m->sizes, int64_t, k);
          int ki = (int) k;
          g_array_append_val (order, ki);
        }
    }
  if (rep == total)
    return g_strdup ("{replicated}");
  GString *g = g_string_new ("{devices=[");
  for (guint d = 0; d < tiles->len; d++)
    g_string_append_printf (g, "%s%" G_GINT64_FORMAT, d ? "," : "", g_array_index (tiles, int64_t, d));
  if (rep > 1)
    g_string_append_printf (g, ",%" G_GINT64_FORMAT, rep);
  g_string_append (g, "]<=[");
  for (guint k = 0; k < na; k++)
    g_string_append_printf (g, "%s%" G_GINT64_FORMAT, k ? "," : "", g_array_index (m->sizes, int64_t, k));
  g_string_append_c (g, ']');
  gboolean identity = TRUE;
  for (guint k = 0; k < na; k++)
    identity = identity && g_array_index (order, int, k) == (int) k;
  if (!identity)
    {
      g_string_append (g, "T(");
      for (guint k = 0; k < na; k++)
        g_string_append_printf (g, "%s%d", k ? "," : "", g_array_index (order, int, k));
      g_string_append_c (g, ')');
    }
  g_string_append (g, rep > 1 ? " last_tile_dim_replicate}" : "}");
  return g_string_free (g, FALSE);
}

/* The value of an sdy.sharding attribute: #sdy.sharding<BODY> or, on an
 * operation's results, #sdy.sharding_per_value<[<BODY>]> (one result). */
static char *
sl_sdy_attr (Sl *s)
{
  sl_skip_ws (s);
  gsize at = s->pos;
  char *r = NULL;
  if (sl_accept (s, "#sdy.sharding_per_value<"))
    {
      if (!sl_expect (s, "[", "to open the per-value shardings") || !sl_expect (s, "<", "to open a sharding")
          || !(r = sl_sdy_body (s)))
        return NULL;
      if (!sl_expect (s, ">", "to close the sharding") || (sl_accept (s, ",") && (sl_error (s, at, "shardings of several "
                                                                                       "results are not read yet"), TRUE))
          || !sl_expect (s, "]", "to close the per-value shardings") || !sl_expect (s, ">", "to close the attribute"))
        {
          g_free (r);
          return NULL;
        }
      return r;
    }
  if (!sl_expect (s, "#sdy.sharding<", "(the Shardy sharding)") || !(r = sl_sdy_body (s)))
    return NULL;
  if (!sl_expect (s, ">", "to close #sdy.sharding<...>"))
    {
      g_free (r);
      return NULL;
    }
  return r;
}

/* {key = value, ...}: the mhlo.sharding or sdy.sharding value (transfer
 * full, or NULL); other entries are skipped. On failure *sharding is NULL:
 * a sharding read before a later error is freed here, because callers that
 * stop at the error cannot tell it was set (the 128-byte leak fuzz_hlo found
 * in a function's second result attributes). */
static gboolean sl_attr_dict_body (Sl *s, char **sharding);

gboolean
sl_attr_dict (Sl *s, char **sharding)
{
  if (sl_attr_dict_body (s, sharding))
    return TRUE;
  g_clear_pointer (sharding, g_free);
  return FALSE;
}

static gboolean
sl_attr_dict_body (Sl *s, char **sharding)
{
  *sharding = NULL;
  if (!sl_accept (s, "{"))
    return TRUE;
  if (sl_accept (s, "}"))
    return TRUE;
  do
    {
      sl_skip_ws (s);
      gsize kat = s->pos;
      g_autofree char *key = sl_word (s);
      if (!key)
        {
          g_autofree char *found = sl_describe (s);
          sl_error (s, kat, "expected an attribute name, found %s", found);
          return FALSE;
        }
      if (!sl_expect (s, "=", "after the attribute name"))
        return FALSE;
      sl_skip_ws (s);
      if (strcmp (key, "sdy.sharding") == 0)
        {
          g_free (*sharding);
          if (!(*sharding = sl_sdy_attr (s)))
            return FALSE;
          continue;
        }
      if (strcmp (key, "mhlo.sharding") == 0)
        {
          g_free (*sharding);
          if (!(*sharding = sl_string_lit (s)))
            return FALSE;
          continue;
        }
      /* any other value is skipped */
      g_autofree char *ignored = sl_raw_value (s);
      if (!ignored)
        return FALSE;
    }
  while (sl_accept (s, ","));
  return sl_expect (s, "}", "to close the attributes");
}

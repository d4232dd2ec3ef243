/* Attribute values of the HLO reader: lists, groups, windows, dim_labels,
 * slices, padding, shardings, metadata (hlo_lexer.h). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "partitioner/hlo/hlo_private.h"
#include "partitioner/hlo/hlo_lexer.h"
#include "partitioner/ir/sharding.h"

/* ---- attribute values --------------------------------------------------- */

gboolean
ps_hlo_int_list (PsHloReader *p, PsInts *out)
{
  if (!ps_hlo_expect (p, '{', "to open a list of integers"))
    return FALSE;
  GArray *v = g_array_new (FALSE, FALSE, sizeof (int64_t));
  if (!ps_hlo_accept (p, '}'))
    {
      do
        {
          int64_t x;
          if (!ps_hlo_int (p, &x, "an integer"))
            break;
          g_array_append_val (v, x);
        }
      while (ps_hlo_accept (p, ','));
      if (!FAILED (p))
        ps_hlo_expect (p, '}', "to close the list");
    }
  if (!FAILED (p))
    ps_ints_set (out, (int) v->len, (const int64_t *) v->data);
  g_array_free (v, TRUE);
  return !FAILED (p);
}

/* {{0,1},{2,3}}: groups; of different sizes only when ragged_ok (they
 * are padded to the largest with -1, ir.h), else of one size (want_size:
 * that size, or 0 for any). */
gboolean
ps_hlo_groups (PsHloReader *p, int *n_groups, int *group_size, int64_t **ids, int want_size)
{
  if (!ps_hlo_expect (p, '{', "to open a list of groups"))
    return FALSE;
  GPtrArray *groups = g_ptr_array_new_with_free_func (g_free);
  GArray *lens = g_array_new (FALSE, FALSE, sizeof (int));
  int size = 0;
  if (!ps_hlo_accept (p, '}'))
    {
      do
        {
          gsize gpos = p->pos;
          PsInts g = { 0 };
          if (!ps_hlo_int_list (p, &g))
            break;
          if (want_size > 0 && g.n != want_size)
            ps_hlo_error (p, gpos, PS_ERROR_PARSE, "expected pairs {source,target}, found a group of %d", g.n);
          else if (groups->len > 0 && (g.n == 0 || g_array_index (lens, int, 0) == 0))
            ps_hlo_error (p, gpos, PS_ERROR_PARSE, "an empty replica group (XLA's verifier refuses them too)");
          for (int k = 0; k < g.n && !FAILED (p); k++)
            if (g.v[k] < 0)
              ps_hlo_error (p, gpos, PS_ERROR_PARSE, "negative device id %" G_GINT64_FORMAT " in a group", g.v[k]);
          size = MAX (size, g.n);
          g_array_append_val (lens, g.n);
          g_ptr_array_add (groups, g.n > 0 ? g_memdup2 (g.v, sizeof (int64_t) * (gsize) g.n) : NULL);
          ps_ints_clear (&g);
        }
      while (!FAILED (p) && ps_hlo_accept (p, ','));
      if (!FAILED (p))
        ps_hlo_expect (p, '}', "to close the list of groups");
    }
  if (!FAILED (p))
    {
      /* Groups of different sizes (XLA takes them for all-reduce only:
       * CheckReplicaGroups in xla/service/hlo_verifier.cc) are padded;
       * ps_module_validate refuses them on other opcodes. */
      int n = (int) groups->len;
      *n_groups = n;
      *group_size = size;
      *ids = n > 0 && size > 0 ? g_new (int64_t, (gsize) n * (gsize) size) : NULL;
      for (int g = 0; g < n && *ids; g++)
        {
          int len = g_array_index (lens, int, g);
          const int64_t *v = g_ptr_array_index (groups, g);
          for (int k = 0; k < size; k++)
            (*ids)[(gsize) g * size + k] = k < len ? v[k] : -1;
        }
    }
  g_ptr_array_free (groups, TRUE);
  g_array_free (lens, TRUE);
  return !FAILED (p);
}

/* [a,b,...] of non-negative ints, at most `max` of them. */
static gboolean
bracket_ints (PsHloReader *p, GArray *out, int max, const char *what)
{
  if (!ps_hlo_expect (p, '[', what))
    return FALSE;
  do
    {
      ps_hlo_skip_ws (p);
      gsize vpos = p->pos;
      int64_t v;
      if (!ps_hlo_int (p, &v, "a size"))
        return FALSE;
      if (v < 0 || (int) out->len >= max)
        {
          ps_hlo_error (p, vpos, PS_ERROR_PARSE, "%s", v < 0 ? "negative size in iota replica groups"
                        : "too many dims in iota replica groups");
          return FALSE;
        }
      g_array_append_val (out, v);
    }
  while (ps_hlo_accept (p, ','));
  return ps_hlo_expect (p, ']', "to close the list");
}

gboolean
ps_hlo_iota_groups (PsHloReader *p, int *n_groups, int *group_size, int64_t **ids)
{
  ps_hlo_skip_ws (p);
  gsize start = p->pos;
  g_autoptr (GArray) gs = g_array_new (FALSE, FALSE, sizeof (int64_t));
  g_autoptr (GArray) dims = g_array_new (FALSE, FALSE, sizeof (int64_t));
  g_autoptr (GArray) perm = g_array_new (FALSE, FALSE, sizeof (int64_t));
  if (!bracket_ints (p, gs, 2, "to open iota replica groups [G,S]"))
    return FALSE;
  ps_hlo_skip_ws (p);
  if (!(CUR (p) == '<' && p->pos + 1 < p->len && p->text[p->pos + 1] == '='))
    {
      g_autofree char *found = ps_hlo_describe (p, p->pos);
      ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "expected '<=' in iota replica groups, found %s", found);
      return FALSE;
    }
  p->pos += 2;
  if (!bracket_ints (p, dims, PS_MAX_RANK, "after '<='"))
    return FALSE;
  ps_hlo_skip_ws (p);
  if (CUR (p) == 'T')
    {
      p->pos++;
      if (!ps_hlo_expect (p, '(', "after T"))
        return FALSE;
      do
        {
          int64_t v;
          if (!ps_hlo_int (p, &v, "a dimension"))
            return FALSE;
          g_array_append_val (perm, v);
        }
      while (ps_hlo_accept (p, ','));
      if (!ps_hlo_expect (p, ')', "to close T(...)"))
        return FALSE;
    }
  int k = (int) dims->len;
  const int64_t *d = (const int64_t *) dims->data;
  int64_t n = 1;
  for (int i = 0; i < k; i++)
    if (!ps_checked_mul_i64 (n, d[i], &n) || n > (1 << 20))
      {
        ps_hlo_error (p, start, PS_ERROR_LIMIT, "iota replica groups over 2^20 devices");
        return FALSE;
      }
  int64_t g = g_array_index (gs, int64_t, 0), s = gs->len > 1 ? g_array_index (gs, int64_t, 1) : 1;
  if (gs->len != 2 || g * s != n || (perm->len > 0 && (int) perm->len != k))
    {
      ps_hlo_error (p, start, PS_ERROR_PARSE, "iota replica groups: [G,S] must hold the %" G_GINT64_FORMAT
                    " ids of the dims after '<=' (and T(...) name each of those dims once)", n);
      return FALSE;
    }
  int64_t t[PS_MAX_RANK];
  gboolean used[PS_MAX_RANK] = { 0 };
  for (int i = 0; i < k; i++)
    {
      t[i] = perm->len > 0 ? g_array_index (perm, int64_t, i) : i;
      if (t[i] < 0 || t[i] >= k || used[t[i]])
        {
          ps_hlo_error (p, start, PS_ERROR_PARSE, "iota replica groups: T(...) is not a permutation of %d dims", k);
          return FALSE;
        }
      used[t[i]] = TRUE;
    }
  /* Element j (row-major over the transposed dims d[t[m]]) is the iota value
   * at the index i with i[t[m]] = j[m]. */
  int64_t *v = g_new (int64_t, n > 0 ? n : 1);
  for (int64_t f = 0; f < n; f++)
    {
      int64_t rest = f, idx[PS_MAX_RANK];
      for (int m = k - 1; m >= 0; m--)
        {
          idx[t[m]] = rest % d[t[m]];
          rest /= d[t[m]];
        }
      int64_t val = 0;
      for (int i = 0; i < k; i++)
        val = val * d[i] + idx[i];
      v[f] = val;
    }
  *n_groups = (int) g;
  *group_size = (int) s;
  *ids = v;
  return TRUE;
}

/* A token of letters, digits and the punctuation of window/padding forms. */
gboolean
ps_hlo_token (PsHloReader *p, const char *extra, gsize *s, gsize *e)
{
  ps_hlo_skip_ws (p);
  *s = p->pos;
  while (p->pos < p->len && (g_ascii_isalnum (p->text[p->pos]) || strchr (extra, p->text[p->pos])))
    p->pos++;
  *e = p->pos;
  if (*e == *s)
    {
      g_autofree char *found = ps_hlo_describe (p, *s);
      ps_hlo_error (p, *s, PS_ERROR_PARSE, "expected a value, found %s", found);
      return FALSE;
    }
  return TRUE;
}

/* Splits "a_bxc_d" into int fields: `per` numbers per entry separated by
 * '_', entries by 'x'. min_per..per numbers allowed per entry (missing ones
 * are 0). Returns the entry count or -1 on error. */
static int
split_fields (PsHloReader *p, gsize s, gsize e, int min_per, int per, int64_t **out)
{
  GArray *v = g_array_new (FALSE, FALSE, sizeof (int64_t));
  int entries = 0;
  gsize i = s;
  while (i < e)
    {
      int got = 0;
      for (;;)
        {
          gsize ns = i;
          if (i < e && p->text[i] == '-')
            i++;
          while (i < e && g_ascii_isdigit (p->text[i]))
            i++;
          if (i == ns || (i == ns + 1 && p->text[ns] == '-'))
            {
              ps_hlo_error (p, ns, PS_ERROR_PARSE, "expected a number in '%.*s'", (int) (e - s), p->text + s);
              g_array_free (v, TRUE);
              return -1;
            }
          int64_t x = g_ascii_strtoll (p->text + ns, NULL, 10);
          g_array_append_val (v, x);
          got++;
          if (i < e && p->text[i] == '_' && got < per)
            {
              i++;
              continue;
            }
          break;
        }
      if (got < min_per)
        {
          ps_hlo_error (p, s, PS_ERROR_PARSE, "expected %d numbers joined by '_' in each entry of '%.*s'",
                min_per, (int) (e - s), p->text + s);
          g_array_free (v, TRUE);
          return -1;
        }
      for (; got < per; got++)
        {
          int64_t zero = 0;
          g_array_append_val (v, zero);
        }
      entries++;
      if (i < e)
        {
          if (p->text[i] != 'x')
            {
              ps_hlo_error (p, i, PS_ERROR_PARSE, "unexpected '%c' in '%.*s'", p->text[i], (int) (e - s), p->text + s);
              g_array_free (v, TRUE);
              return -1;
            }
          i++;
          if (i == e)
            {
              ps_hlo_error (p, i, PS_ERROR_PARSE, "'%.*s' ends with 'x'", (int) (e - s), p->text + s);
              g_array_free (v, TRUE);
              return -1;
            }
        }
    }
  *out = (int64_t *) g_array_free (v, FALSE);
  return entries;
}

gboolean
ps_hlo_window (PsHloReader *p, PsWindow *w)
{
  if (!ps_hlo_expect (p, '{', "to open the window"))
    return FALSE;
  int n = -1;
  gboolean seen_size = FALSE;
  gsize wpos = p->pos;
  PsWindowDim *d = NULL;
  while (!FAILED (p) && !ps_hlo_accept (p, '}'))
    {
      ps_hlo_skip_ws (p);
      gsize kpos = p->pos;
      g_autofree char *key = ps_hlo_name (p, "a window field");
      if (!key || !ps_hlo_expect (p, '=', "after the window field"))
        break;
      gsize s, e;
      if (!ps_hlo_token (p, "_-", &s, &e))
        break;
      int per = strcmp (key, "pad") == 0 ? 2 : 1;
      int64_t *f = NULL;
      int cnt = split_fields (p, s, e, per, per, &f);
      if (cnt < 0)
        break;
      if (n < 0)
        {
          n = cnt;
          d = g_new0 (PsWindowDim, n);
          for (int i = 0; i < n; i++)
            d[i].stride = d[i].base_dilation = d[i].window_dilation = 1;
        }
      if (cnt != n)
        {
          ps_hlo_error (p, s, PS_ERROR_PARSE, "window field '%s' has %d entries, expected %d", key, cnt, n);
          g_free (f);
          break;
        }
      for (int i = 0; i < n; i++)
        {
          if (strcmp (key, "size") == 0)
            d[i].size = f[i], seen_size = TRUE;
          else if (strcmp (key, "stride") == 0)
            d[i].stride = f[i];
          else if (strcmp (key, "pad") == 0)
            d[i].pad_lo = f[2 * i], d[i].pad_hi = f[2 * i + 1];
          else if (strcmp (key, "lhs_dilate") == 0)
            d[i].base_dilation = f[i];
          else if (strcmp (key, "rhs_dilate") == 0)
            d[i].window_dilation = f[i];
          else if (strcmp (key, "rhs_reversal") == 0)
            d[i].reversal = f[i] != 0;
          else
            {
              ps_hlo_error (p, kpos, PS_ERROR_PARSE, "unknown window field '%s'", key);
              break;
            }
        }
      g_free (f);
    }
  if (!FAILED (p) && n > 0 && !seen_size)
    ps_hlo_error (p, wpos, PS_ERROR_PARSE, "window has no size");
  if (FAILED (p))
    {
      g_free (d);
      return FALSE;
    }
  w->n = n < 0 ? 0 : n;
  w->dims = d;
  return TRUE;
}

/* One side of dim_labels: fills batch/feature positions and spatial dims. */
static gboolean
conv_side (PsHloReader *p, gsize s, gsize e, char a, char b, int64_t *pa, int64_t **sp, int *n_spatial)
{
  int rank = (int) (e - s);
  int n = 0;
  for (int i = 0; i < rank; i++)
    if (g_ascii_isdigit (p->text[s + i]))
      n++;
  if (*n_spatial >= 0 && n != *n_spatial)
    {
      ps_hlo_error (p, s, PS_ERROR_PARSE, "dim_labels sides have different numbers of spatial dims");
      return FALSE;
    }
  *n_spatial = n;
  pa[0] = pa[1] = -1;
  *sp = g_new0 (int64_t, MAX (n, 1));
  for (int i = 0; i < n; i++)
    (*sp)[i] = -1;
  for (int i = 0; i < rank; i++)
    {
      char c = p->text[s + i];
      int64_t *slot = NULL;
      if (c == a)
        slot = &pa[0];
      else if (c == b)
        slot = &pa[1];
      else if (g_ascii_isdigit (c) && c - '0' < n)
        slot = &(*sp)[c - '0'];
      if (!slot || *slot >= 0)
        {
          ps_hlo_error (p, s + (gsize) i, PS_ERROR_PARSE, "unexpected '%c' in dim_labels", c);
          return FALSE;
        }
      *slot = i;
    }
  if (pa[0] < 0 || pa[1] < 0)
    {
      ps_hlo_error (p, s, PS_ERROR_PARSE, "dim_labels side '%.*s' lacks '%c' or '%c'", rank, p->text + s, a, b);
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_hlo_dim_labels (PsHloReader *p, PsConvDims *c)
{
  gsize s, e;
  if (!ps_hlo_token (p, "_->", &s, &e))
    return FALSE;
  const char *t = p->text;
  gsize u = s;
  while (u < e && t[u] != '_')
    u++;
  gsize ar = u;
  while (ar + 1 < e && !(t[ar] == '-' && t[ar + 1] == '>'))
    ar++;
  if (u >= e || ar + 1 >= e)
    {
      ps_hlo_error (p, s, PS_ERROR_PARSE, "dim_labels must look like b01f_01io->b01f");
      return FALSE;
    }
  int n = -1;
  int64_t pa[2];
  memset (c, 0, sizeof *c);
  if (!conv_side (p, s, u, 'b', 'f', pa, &c->in_spatial, &n))
    return FALSE;
  c->in_batch = pa[0], c->in_feature = pa[1];
  if (!conv_side (p, u + 1, ar, 'i', 'o', pa, &c->k_spatial, &n))
    return FALSE;
  c->k_in_feature = pa[0], c->k_out_feature = pa[1];
  if (!conv_side (p, ar + 2, e, 'b', 'f', pa, &c->out_spatial, &n))
    return FALSE;
  c->out_batch = pa[0], c->out_feature = pa[1];
  c->n_spatial = n;
  c->present = TRUE;
  return TRUE;
}

gboolean
ps_hlo_slice (PsHloReader *p, PsInstr *in)
{
  if (!ps_hlo_expect (p, '{', "to open the slice"))
    return FALSE;
  GArray *st = g_array_new (FALSE, FALSE, sizeof (int64_t));
  GArray *li = g_array_new (FALSE, FALSE, sizeof (int64_t));
  GArray *sd = g_array_new (FALSE, FALSE, sizeof (int64_t));
  if (!ps_hlo_accept (p, '}'))
    {
      do
        {
          int64_t a, b, c = 1;
          if (!ps_hlo_expect (p, '[', "to open a slice entry [start:limit]") || !ps_hlo_int (p, &a, "a start")
              || !ps_hlo_expect (p, ':', "after the slice start") || !ps_hlo_int (p, &b, "a limit"))
            break;
          if (ps_hlo_accept (p, ':') && !ps_hlo_int (p, &c, "a stride"))
            break;
          if (!ps_hlo_expect (p, ']', "to close the slice entry"))
            break;
          g_array_append_val (st, a);
          g_array_append_val (li, b);
          g_array_append_val (sd, c);
        }
      while (ps_hlo_accept (p, ','));
      if (!FAILED (p))
        ps_hlo_expect (p, '}', "to close the slice");
    }
  if (!FAILED (p))
    {
      ps_ints_set (&in->slice_starts, (int) st->len, (int64_t *) st->data);
      ps_ints_set (&in->slice_limits, (int) li->len, (int64_t *) li->data);
      ps_ints_set (&in->slice_strides, (int) sd->len, (int64_t *) sd->data);
    }
  g_array_free (st, TRUE);
  g_array_free (li, TRUE);
  g_array_free (sd, TRUE);
  return !FAILED (p);
}

gboolean
ps_hlo_precision (PsHloReader *p, PsInstr *in)
{
  if (!ps_hlo_expect (p, '{', "to open the precision list"))
    return FALSE;
  int k = 0;
  if (!ps_hlo_accept (p, '}'))
    {
      do
        {
          gsize pos = p->pos;
          g_autofree char *w = ps_hlo_name (p, "a precision");
          if (!w)
            return FALSE;
          PsPrecision pr;
          /* any case: XLA's StringToPrecision lowercases the name
           * (xla/hlo/ir/hlo_instruction.cc) */
          if (g_ascii_strcasecmp (w, "DEFAULT") == 0)
            pr = PS_PRECISION_DEFAULT;
          else if (g_ascii_strcasecmp (w, "HIGH") == 0)
            pr = PS_PRECISION_HIGH;
          else if (g_ascii_strcasecmp (w, "HIGHEST") == 0)
            pr = PS_PRECISION_HIGHEST;
          else
            {
              ps_hlo_error (p, pos, PS_ERROR_PARSE, "unknown precision '%s' (DEFAULT, HIGH or HIGHEST)", w);
              return FALSE;
            }
          if (k >= 2)
            {
              ps_hlo_error (p, pos, PS_ERROR_PARSE, "operand_precision has more than two entries");
              return FALSE;
            }
          in->precision[k++] = pr;
        }
      while (ps_hlo_accept (p, ','));
      if (!ps_hlo_expect (p, '}', "to close the precision list"))
        return FALSE;
    }
  in->has_precision = TRUE;
  return TRUE;
}

PsComputation *
ps_hlo_computation_ref (PsHloReader *p)
{
  ps_hlo_skip_ws (p);
  gsize pos = p->pos;
  g_autofree char *name = ps_hlo_name (p, "a computation name");
  if (!name)
    return NULL;
  PsComputation *c = ps_module_find_computation (p->m, name);
  if (!c)
    ps_hlo_error (p, pos, PS_ERROR_INVALID, "unknown computation '%s'", name);
  return c;
}

/* When a sharding lacks its closing brace, the balanced scan runs on into
 * the next instructions. Returns the offset (> 0) of a line start before
 * `upto` that reads like an instruction ("[ROOT] name = "), or 0. Sharding
 * items never have spaces around '=', HLO instructions almost always do. */
static gsize
unclosed_before (const char *t, gsize off, gsize upto)
{
  for (gsize i = 0; i < off; i++)
    {
      if (t[i] != '\n')
        continue;
      gsize j = i + 1;
      while (j < upto && (t[j] == ' ' || t[j] == '\t'))
        j++;
      if (j + 5 <= upto && strncmp (t + j, "ROOT ", 5) == 0)
        return j;
      if (j < upto && t[j] == '%')
        j++;
      gsize k = j;
      while (k < upto && ps_hlo_is_ident_char (t[k]))
        k++;
      if (k > j && k + 2 < upto && t[k] == ' ' && t[k + 1] == '=' && t[k + 2] == ' ')
        return j;
    }
  return 0;
}

gboolean
ps_hlo_sharding (PsHloReader *p, PsInstr *in)
{
  ps_hlo_skip_ws (p);
  gsize start = p->pos;
  if (CUR (p) != '{')
    {
      g_autofree char *found = ps_hlo_describe (p, start);
      ps_hlo_error (p, start, PS_ERROR_PARSE, "expected '{' to open the sharding, found %s", found);
      return FALSE;
    }
  if (!ps_hlo_skip_balanced (p))
    return FALSE;
  /* Blank out comments (/ *index=5* /) with spaces so the sharding parser
   * sees plain text and its error offsets still map onto the file. */
  gsize n = p->pos - start;
  char *copy = g_strndup (p->text + start, n);
  for (gsize i = 0; i + 1 < n; i++)
    {
      if (copy[i] == '"')
        {
          for (i++; i < n && copy[i] != '"'; i++)
            if (copy[i] == '\\')
              i++;
          continue;
        }
      if (copy[i] == '/' && copy[i + 1] == '*')
        {
          gsize j = i;
          while (j + 1 < n && !(copy[j] == '*' && copy[j + 1] == '/'))
            copy[j++] = ' ';
          if (j + 1 < n)
            copy[j] = copy[j + 1] = ' ';
          i = j + 1;
        }
      else if (copy[i] == '/' && copy[i + 1] == '/')
        {
          while (i < n && copy[i] != '\n')
            copy[i++] = ' ';
        }
    }
  gsize off = 0;
  GError *e = NULL;
  PsSharding *s = ps_sharding_parse (copy, n, &off, &e);
  g_free (copy);
  if (!s)
    {
      gsize line = unclosed_before (p->text + start, MIN (off, n), n);
      if (line)
        ps_hlo_error (p, start, PS_ERROR_PARSE, "sharding is not closed before the instruction on the next line");
      else
        ps_hlo_error (p, start + MIN (off, n), PS_ERROR_PARSE, "%s", e ? e->message : "malformed sharding");
      g_clear_error (&e);
      return FALSE;
    }
  /* Each sharding is bounded alone; the module's are bounded together. */
  p->sharding_ids += ps_sharding_n_ids (s);
  if (p->sharding_ids > PS_SHARDING_MAX_MODULE_IDS)
    {
      ps_sharding_free (s);
      ps_hlo_error (p, start, PS_ERROR_PARSE, "the module's shardings hold more than %" G_GINT64_FORMAT
                    " device ids together (doc/robustness.md)", PS_SHARDING_MAX_MODULE_IDS);
      return FALSE;
    }
  if (in->sharding)
    ps_sharding_free (in->sharding);
  in->sharding = s;
  return TRUE;
}

gboolean
ps_hlo_metadata (PsHloReader *p, char **out)
{
  ps_hlo_skip_ws (p);
  gsize start = p->pos;
  if (CUR (p) != '{')
    {
      g_autofree char *found = ps_hlo_describe (p, start);
      ps_hlo_error (p, start, PS_ERROR_PARSE, "expected '{' to open metadata, found %s", found);
      return FALSE;
    }
  if (!ps_hlo_skip_balanced (p))
    return FALSE;
  g_free (*out);
  *out = ps_hlo_normalize_raw (p->text + start + 1, p->pos - start - 2);
  return TRUE;
}

gboolean
ps_hlo_comparison (PsHloReader *p, PsInstr *in)
{
  ps_hlo_skip_ws (p);
  gsize pos = p->pos;
  g_autofree char *w = ps_hlo_name (p, "a comparison direction");
  if (!w)
    return FALSE;
  static const char *const dirs[] = { NULL, "EQ", "NE", "LT", "LE", "GT", "GE" };
  for (int i = 1; i < (int) G_N_ELEMENTS (dirs); i++)
    if (strcmp (w, dirs[i]) == 0)
      {
        in->comparison = (PsCompareDir) i;
        return TRUE;
      }
  ps_hlo_error (p, pos, PS_ERROR_PARSE, "unknown comparison direction '%s' (EQ, NE, LT, LE, GT or GE)", w);
  return FALSE;
}

/* ---- instructions ------------------------------------------------------- */

gboolean
ps_hlo_padding (PsHloReader *p, PsInstr *in)
{
  gsize s, e;
  if (!ps_hlo_token (p, "_-", &s, &e))
    return FALSE;
  int64_t *f = NULL;
  int n = split_fields (p, s, e, 2, 3, &f);
  if (n < 0)
    return FALSE;
  g_free (in->padding);
  in->n_pad = n;
  in->padding = g_new0 (PsPadDim, MAX (n, 1));
  for (int i = 0; i < n; i++)
    {
      in->padding[i].lo = f[3 * i];
      in->padding[i].hi = f[3 * i + 1];
      in->padding[i].interior = f[3 * i + 2];
    }
  g_free (f);
  return TRUE;
}


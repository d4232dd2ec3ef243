/* The StableHLO reader's operations with structured dimension numbers:
 * gather, scatter and convolution, mapped to HLO's gather, scatter and
 * convolution with the same dimension numbers (the StableHLO spec,
 * openxla/stablehlo docs/spec.md, defines them as XLA's: offset_dims,
 * collapsed_slice_dims, ... keep their names and meaning). JAX prints
 * gather and scatter in the generic form, "stablehlo.gather"(...) with
 * their attributes as properties <{...}> (older texts: a dictionary {...}
 * after the operands or the region), and convolution in its pretty form
 * (dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {...});
 * all three are read. See stablehlo.h and stablehlo_private.h. */
#include "config.h"

#include <string.h>

#include "partitioner/hlo/stablehlo_private.h"

/* A value as an error message quotes it: on one line (runs of blanks and
 * newlines as one space), at most 60 characters. transfer full. */
static char *
shown (const char *v)
{
  GString *g = g_string_new (NULL);
  for (const char *p = v; *p && g->len < 60; p++)
    if (!g_ascii_isspace (*p))
      g_string_append_c (g, *p);
    else if (g->len && g->str[g->len - 1] != ' ')
      g_string_append_c (g, ' ');
  return g_string_free (g, FALSE);
}

/* key = value, ... up to `close` (consumed) into the table (key -> value
 * text). The keys may be quoted in older texts. */
static gboolean
raw_entries (Sl *s, const char *close, GHashTable *into)
{
  if (sl_accept (s, close))
    return TRUE;
  do
    {
      sl_skip_ws (s);
      gsize kat = s->pos;
      g_autofree char *key = SL_CUR (s) == '"' ? sl_string_lit (s) : sl_word (s);
      if (!key)
        {
          g_autofree char *found = sl_describe (s);
          sl_error (s, kat, "expected an attribute name, found %s", found);
          return FALSE;
        }
      if (!sl_expect (s, "=", "after the attribute name"))
        return FALSE;
      char *v = sl_raw_value (s);
      if (!v)
        return FALSE;
      g_hash_table_replace (into, g_steal_pointer (&key), v);
    }
  while (sl_accept (s, ","));
  return sl_expect (s, close, "to close the attributes");
}

/* The entries of a value's inside, "#stablehlo.gather<k = v, ...>", read
 * by the same rules from a text of its own. */
static gboolean
nested_entries (Sl *s, gsize at, const char *v, const char *prefix, GHashTable *into)
{
  gsize n = strlen (prefix);
  gsize vl = strlen (v);
  if (strncmp (v, prefix, n) != 0 || vl <= n || v[vl - 1] != '>')
    {
      g_autofree char *sv = shown (v);
      sl_error (s, at, "expected %s...>, found '%s'", prefix, sv);
      return FALSE;
    }
  Sl sub = { .t = v + n, .len = vl - n, .file = s->file };
  gboolean ok = raw_entries (&sub, ">", into);
  if (!ok)
    {
      g_autofree char *msg = g_strdup (sub.err->message);
      g_clear_error (&sub.err);
      /* the inner text's own position means nothing to the user */
      const char *what = strstr (msg, ": ");
      sl_error (s, at, "in %s...>: %s", prefix, what ? what + 2 : msg);
    }
  return ok;
}

/* The integers of a value ("[1, 2]", "array<i64: 1, 2>", "dense<[[0, 1]]> :
 * tensor<1x2xi64>", "3 : i64", "[false, true]") into out as "1,2"; the
 * count. A list's type suffix (": tensor<...>") is not read. */
static int
ints_of (const char *v, GString *out)
{
  int n = 0;
  const char *p = v;
  const char *end = p + strlen (p);
  if (g_str_has_prefix (p, "array<"))
    {
      p = strchr (p, ':');
      if (!p)
        return 0;
      p++;
    }
  else if (g_str_has_prefix (v, "dense<"))
    end = strchr (v, '>') ? strchr (v, '>') : end;
  else if (v[0] != '[' && strchr (p, ':'))
    end = strchr (p, ':');
  for (; p < end; p++)
    {
      const char *q = p;
      gboolean neg = *q == '-';
      if (neg)
        q++;
      gboolean word_start = p == v || !(g_ascii_isalnum (p[-1]) || p[-1] == '_');
      if (word_start && g_ascii_isdigit (*q))
        {
          const char *e = q;
          while (e < end && g_ascii_isdigit (*e))
            e++;
          if (e < end && g_ascii_isalpha (*e))
            {
              p = e;
              continue;
            }
          g_string_append_printf (out, "%s%.*s", n ? "," : "", (int) (e - p), p);
          n++;
          p = e - 1;
        }
      else if (word_start && (g_str_has_prefix (p, "true") || g_str_has_prefix (p, "false")))
        {
          g_string_append_printf (out, "%s%d", n ? "," : "", *p == 't');
          n++;
          p += (*p == 't' ? 4 : 5) - 1;
        }
    }
  return n;
}

/* Appends ", hlo_key={ints}" for the value of key, required or not. */
static gboolean
list_attr (Sl *s, gsize at, GHashTable *a, const char *key, const char *hlo_key, gboolean required, GString *rest)
{
  const char *v = g_hash_table_lookup (a, key);
  if (!v)
    {
      if (required)
        sl_error (s, at, "missing attribute %s", key);
      return !required;
    }
  g_autoptr (GString) l = g_string_new (NULL);
  ints_of (v, l);
  if (!required && l->len == 0)
    return TRUE;
  g_string_append_printf (rest, ", %s={%s}", hlo_key, l->str);
  return TRUE;
}

/* ", hlo_key=N" for an integer attribute ("3" or "3 : i64"). */
static gboolean
int_attr (Sl *s, gsize at, GHashTable *a, const char *key, const char *hlo_key, gboolean required,
          const char *dflt, GString *rest)
{
  const char *v = g_hash_table_lookup (a, key);
  g_autoptr (GString) l = g_string_new (NULL);
  if (v && ints_of (v, l) != 1)
    {
      g_autofree char *sv = shown (v);
      sl_error (s, at, "attribute %s is not one integer: '%s'", key, sv);
      return FALSE;
    }
  if (!v && required)
    {
      sl_error (s, at, "missing attribute %s", key);
      return FALSE;
    }
  if (v && (!dflt || strcmp (l->str, dflt) != 0))
    g_string_append_printf (rest, ", %s=%s", hlo_key, l->str);
  return TRUE;
}

/* ", hlo_key=true" when the bool attribute is true. */
static void
flag_attr (GHashTable *a, const char *key, GString *rest)
{
  const char *v = g_hash_table_lookup (a, key);
  if (v && g_str_has_prefix (v, "true"))
    g_string_append_printf (rest, ", %s=true", key);
}

/* [#stablehlo<precision DEFAULT>, ...] or [DEFAULT, ...]: ",
 * operand_precision={..}" unless all are DEFAULT. */
static void
precision_attr (const char *v, GString *rest)
{
  if (!v)
    return;
  g_autoptr (GString) pr = g_string_new (NULL);
  gboolean all_default = TRUE;
  g_auto (GStrv) parts = g_strsplit (v, ",", -1);
  for (int i = 0; parts[i]; i++)
    {
      /* the last word of each element */
      const char *p = parts[i] + strlen (parts[i]);
      while (p > parts[i] && !g_ascii_isalpha (p[-1]))
        p--;
      const char *e = p;
      while (p > parts[i] && g_ascii_isalpha (p[-1]))
        p--;
      if (e == p)
        continue;
      g_string_append_printf (pr, "%s%.*s", pr->len ? "," : "", (int) (e - p), p);
      all_default = all_default && strncmp (p, "DEFAULT", (gsize) (e - p)) == 0 && e - p == 7;
    }
  if (!all_default)
    g_string_append_printf (rest, ", operand_precision={%s}", pr->str);
}

/* "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]" as HLO's "b01f_01io->b01f". */
static char *
dim_labels (Sl *s, gsize at, const char *v)
{
  GString *g = g_string_new (NULL);
  int part = 0, arrows = 0;
  for (const char *p = v; *p; p++)
    {
      if (*p == '[' || *p == ']' || *p == ',' || g_ascii_isspace (*p))
        continue;
      if (*p == 'x' && part == 0)
        {
          g_string_append_c (g, '_');
          part++;
          continue;
        }
      if (*p == '-' && p[1] == '>' && part == 1)
        {
          g_string_append (g, "->");
          part++, arrows++;
          p++;
          continue;
        }
      /* one label per dimension: b, f, i, o or a spatial index below 10 */
      if (!(strchr ("bfio", *p) || g_ascii_isdigit (*p)) || (g_ascii_isdigit (*p) && g_ascii_isdigit (p[1])))
        {
          g_autofree char *sv = shown (v);
          sl_error (s, at, "convolution dimension numbers '%s' are not read (labels b, f, i, o and spatial "
                    "dims 0 to 9)", sv);
          g_string_free (g, TRUE);
          return NULL;
        }
      g_string_append_c (g, *p);
    }
  if (part != 2 || arrows != 1)
    {
      g_autofree char *sv = shown (v);
      sl_error (s, at, "convolution dimension numbers '%s' are not [lhs]x[rhs]->[result]", sv);
      g_string_free (g, TRUE);
      return NULL;
    }
  return g_string_free (g, FALSE);
}

/* The dims of an HLO shape text "f32[3,3,1,1]". */
static int
shape_dims (const char *shape, int64_t *d, int max)
{
  const char *p = shape ? strchr (shape, '[') : NULL;
  int n = 0;
  if (!p || p[1] == ']')
    return 0;
  for (p++; *p && *p != ']' && n < max; p++)
    {
      d[n++] = g_ascii_strtoll (p, (char **) &p, 10);
      if (*p != ',')
        break;
    }
  return n;
}

/* The convolution's HLO attributes from its dimension numbers and window:
 * the window's size is the kernel's spatial dims (HLO writes it, StableHLO
 * takes it from the rhs), each field in the order of the spatial dims. */
static gboolean
conv_rest (Sl *s, gsize at, const char *rhs, GHashTable *a, const char *dnums, GString *rest)
{
  g_autofree char *labels = dim_labels (s, at, dnums);
  if (!labels)
    return FALSE;
  const char *kl = strchr (labels, '_') + 1;
  const char *ke = strstr (kl, "->");
  int nsp = (int) (ke - kl) - 2;
  int64_t kd[32];
  int kr = shape_dims (g_hash_table_lookup (s->shapes, rhs), kd, 32);
  if (nsp < 0 || kr != (int) (ke - kl))
    {
      sl_error (s, at, "convolution kernel labels '%.*s' do not fit the kernel's rank %d", (int) (ke - kl), kl, kr);
      return FALSE;
    }
  GString *w = g_string_new ("window={");
  for (int k = 0; k < nsp; k++)
    {
      const char *pos = memchr (kl, '0' + k, (gsize) (ke - kl));
      if (!pos)
        {
          sl_error (s, at, "convolution kernel labels '%.*s' have no spatial dim %d", (int) (ke - kl), kl, k);
          g_string_free (w, TRUE);
          return FALSE;
        }
      g_string_append_printf (w, "%s%" G_GINT64_FORMAT, k ? "x" : "size=", kd[pos - kl]);
    }
  static const char *const fields[][2] = {
    { "window_strides", "stride" }, { "padding", "pad" }, { "lhs_dilation", "lhs_dilate" },
    { "rhs_dilation", "rhs_dilate" }, { "window_reversal", "rhs_reversal" },
  };
  for (gsize f = 0; f < G_N_ELEMENTS (fields) && nsp > 0; f++)
    {
      const char *v = g_hash_table_lookup (a, fields[f][0]);
      if (!v)
        continue;
      g_autoptr (GString) l = g_string_new (NULL);
      int cnt = ints_of (v, l);
      int per = f == 1 ? 2 : 1;
      g_auto (GStrv) x = g_strsplit (l->str, ",", -1);
      /* a splat dense<0> : tensor<2x2xi64> stands for every entry */
      if (cnt == 1 && nsp * per > 1)
        ;
      else if (cnt != nsp * per)
        {
          sl_error (s, at, "convolution %s has %d entries, expected %d", fields[f][0], cnt, nsp * per);
          g_string_free (w, TRUE);
          return FALSE;
        }
      g_string_append_printf (w, " %s=", fields[f][1]);
      for (int k = 0; k < nsp; k++)
        {
          const char *lo = x[cnt == 1 ? 0 : k * per], *hi = per == 2 ? x[cnt == 1 ? 0 : k * per + 1] : NULL;
          g_string_append_printf (w, "%s%s%s%s", k ? "x" : "", lo, hi ? "_" : "", hi ? hi : "");
        }
    }
  g_string_append_c (w, '}');
  g_string_append_printf (rest, ", %s, dim_labels=%s", w->str, labels);
  g_string_free (w, TRUE);
  return int_attr (s, at, a, "feature_group_count", "feature_group_count", FALSE, "1", rest)
         && int_attr (s, at, a, "batch_group_count", "batch_group_count", FALSE, "1", rest)
         && (precision_attr (g_hash_table_lookup (a, "precision_config"), rest), TRUE);
}

/* The mhlo.sharding entry's value, unquoted (transfer full), or NULL. */
static char *
sharding_of (GHashTable *a)
{
  const char *v = g_hash_table_lookup (a, "mhlo.sharding");
  gsize n = v ? strlen (v) : 0;
  return n >= 2 && v[0] == '"' && v[n - 1] == '"' ? g_strndup (v + 1, n - 2) : NULL;
}

/* "(%a, %b, ...)" of exactly `want` operands into ops ("a, b"); `fmt`
 * says what else was found. */
static gboolean
operand_list (Sl *s, gsize at, const char *fmt, int want, GString *ops)
{
  int n = 0;
  if (!sl_expect (s, "(", "to open the operands") || !sl_operands (s, ops, &n) || !sl_expect (s, ")", "to close the operands"))
    return FALSE;
  if (n != want)
    {
      g_autofree char *msg = g_strdup_printf (fmt, n);
      sl_error (s, at, "%s", msg);
      return FALSE;
    }
  return TRUE;
}

/* The #stablehlo.gather<...> (or scatter) value of `key` read into d. */
static gboolean
dimension_numbers (Sl *s, gsize at, GHashTable *a, const char *key, const char *prefix, GHashTable *d)
{
  const char *dn = g_hash_table_lookup (a, key);
  if (!dn)
    {
      sl_error (s, at, "missing attribute %s", key);
      return FALSE;
    }
  return nested_entries (s, at, dn, prefix, d);
}

/* A dimension-number list of gather or scatter: its name in StableHLO is
 * its name in HLO. */
typedef struct {
  const char *key;
  gboolean required;
} DimsKey;

/* The lists of keys, then index_vector_dim, as HLO attributes. */
static gboolean
dims_lists (Sl *s, gsize at, GHashTable *d, const DimsKey *keys, gsize n, GString *rest)
{
  for (gsize i = 0; i < n; i++)
    if (!list_attr (s, at, d, keys[i].key, keys[i].key, keys[i].required, rest))
      return FALSE;
  return int_attr (s, at, d, "index_vector_dim", "index_vector_dim", TRUE, NULL, rest);
}

gboolean
sl_convolution (Sl *s, gsize at, gboolean generic, GString *rest, char **shape, char **sharding)
{
  g_autoptr (GString) ops = g_string_new (NULL);
  g_autoptr (GHashTable) a = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  if (!operand_list (s, at, "stablehlo.convolution takes 2 operands, got %d", 2, ops))
    return FALSE;
  g_autofree char *dnums = NULL;
  if (generic)
    {
      gboolean props = sl_accept (s, "<{");
      if (!props && !sl_expect (s, "{", "to open the attributes"))
        return FALSE;
      if (!raw_entries (s, props ? "}>" : "}", a))
        return FALSE;
      const char *v = g_hash_table_lookup (a, "dimension_numbers");
      if (!v || !g_str_has_prefix (v, "#stablehlo.conv<"))
        {
          sl_error (s, at, "stablehlo.convolution needs dimension_numbers = #stablehlo.conv<...>");
          return FALSE;
        }
      dnums = g_strndup (v + 16, strlen (v) - 17);
    }
  else
    {
      /* dim_numbers = [..]x[..]->[..], window = {stride = [..], ...} {attrs} */
      if (!sl_expect (s, "dim_numbers", "after the operands") || !sl_expect (s, "=", "after dim_numbers")
          || !(dnums = sl_raw_value (s)))
        return FALSE;
      if (sl_accept (s, ",") && sl_expect (s, "window", "after the dimension numbers") && sl_expect (s, "=", "after window")
          && sl_expect (s, "{", "to open the window"))
        {
          g_autoptr (GHashTable) w = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
          static const char *const pretty[][2] = {
            { "stride", "window_strides" }, { "pad", "padding" }, { "lhs_dilate", "lhs_dilation" },
            { "rhs_dilate", "rhs_dilation" }, { "reverse", "window_reversal" },
          };
          if (!raw_entries (s, "}", w))
            return FALSE;
          for (gsize i = 0; i < G_N_ELEMENTS (pretty); i++)
            {
              char *v = g_hash_table_lookup (w, pretty[i][0]);
              if (v)
                g_hash_table_replace (a, g_strdup (pretty[i][1]), g_strdup (v));
            }
        }
      if (SL_FAILED (s))
        return FALSE;
      if (sl_accept (s, "{") && !raw_entries (s, "}", a))
        return FALSE;
    }
  if (!(*shape = sl_result_type (s)))
    return FALSE;
  g_auto (GStrv) lr = g_strsplit (ops->str, ", ", 2);
  g_string_printf (rest, "convolution(%s)", ops->str);
  *sharding = sharding_of (a);
  return conv_rest (s, at, lr[1], a, dnums, rest);
}

gboolean
sl_gather (Sl *s, gsize at, GString *rest, char **shape, char **sharding)
{
  g_autoptr (GString) ops = g_string_new (NULL);
  g_autoptr (GHashTable) a = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_autoptr (GHashTable) d = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  if (!operand_list (s, at, "stablehlo.gather takes 2 operands, got %d", 2, ops))
    return FALSE;
  gboolean props = sl_accept (s, "<{");
  if (!props && !sl_expect (s, "{", "to open the attributes"))
    return FALSE;
  if (!raw_entries (s, props ? "}>" : "}", a))
    return FALSE;
  static const DimsKey keys[] = {
    { "offset_dims", TRUE }, { "collapsed_slice_dims", TRUE }, { "start_index_map", TRUE },
    { "operand_batching_dims", FALSE }, { "start_indices_batching_dims", FALSE },
  };
  if (!dimension_numbers (s, at, a, "dimension_numbers", "#stablehlo.gather<", d) || !(*shape = sl_result_type (s)))
    return FALSE;
  g_string_printf (rest, "gather(%s)", ops->str);
  *sharding = sharding_of (a);
  gboolean ok = dims_lists (s, at, d, keys, G_N_ELEMENTS (keys), rest)
                && list_attr (s, at, a, "slice_sizes", "slice_sizes", TRUE, rest);
  if (ok)
    flag_attr (a, "indices_are_sorted", rest);
  return ok;
}

/* ": (T, ...) -> R" where R is one type, or "(R1, ..., Rn)" for n results
 * (HLO's tuple shape; each Ri added to types). transfer full. */
static char *
results_type (Sl *s, int n, GPtrArray *types)
{
  if (n == 1)
    return sl_result_type (s);
  if (!sl_expect (s, ":", "before the types") || !sl_expect (s, "(", "to open the operand types"))
    return NULL;
  do
    {
      g_autofree char *t = sl_tensor_type (s);
      if (!t)
        return NULL;
    }
  while (sl_accept (s, ","));
  if (!sl_expect (s, ")", "to close the operand types") || !sl_expect (s, "->", "before the result types")
      || !sl_expect (s, "(", "to open the result types"))
    return NULL;
  char *t = sl_tuple_types (s, n, types);
  if (t && !sl_expect (s, ")", "to close the result types"))
    g_clear_pointer (&t, g_free);
  return t;
}

/* An operation of nres > 1 results: the tuple instruction `name`, and
 * name.k = get-tuple-element (what %name#k refers to). */
static void
emit_results (Sl *s, gsize at, const char *name, const char *tshape, GPtrArray *types, const char *rest,
              const char *sharding)
{
  sl_emit (s, at, name, tshape, rest, sharding);
  for (guint i = 0; i < types->len; i++)
    {
      g_autofree char *en = g_strdup_printf ("%s.%u", name, i);
      g_autofree char *gr = g_strdup_printf ("get-tuple-element(%s), index=%u", name, i);
      sl_emit (s, at, en, g_ptr_array_index (types, i), gr, NULL);
    }
}

/* "stablehlo.scatter"(%in0, ..., %idx, %upd0, ...): n inputs, their
 * indices, n updates; the update region takes the n current values and
 * then the n updates (HLO's order too) and returns n values (a tuple). */
gboolean
sl_scatter (Sl *s, gsize at, const char *name, int nres, GString *rest, char **shape, char **sharding)
{
  g_autoptr (GString) ops = g_string_new (NULL);
  g_autoptr (GHashTable) a = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_autoptr (GHashTable) d = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  int n = 0;
  if (!sl_expect (s, "(", "to open the operands") || !sl_operands (s, ops, &n) || !sl_expect (s, ")", "to close the operands"))
    return FALSE;
  if (n < 3 || n % 2 == 0 || (n - 1) / 2 != nres)
    {
      sl_error (s, at, "stablehlo.scatter of %d operands and %d results: it takes n inputs, their indices and n "
                "updates for n results", n, nres);
      return FALSE;
    }
  /* properties before the region, or (older texts) a dictionary after it */
  if (sl_accept (s, "<{") && !raw_entries (s, "}>", a))
    return FALSE;
  g_autofree char *red = g_strdup_printf ("region_%d", s->n_reducers++);
  if (!sl_expect (s, "(", "to open the update region") || !sl_region (s, red, TRUE, NULL, NULL, NULL, 1)
      || !sl_expect (s, ")", "to close the update region"))
    return FALSE;
  if (sl_accept (s, "{") && !raw_entries (s, "}", a))
    return FALSE;
  static const DimsKey keys[] = {
    { "update_window_dims", TRUE }, { "inserted_window_dims", TRUE }, { "scatter_dims_to_operand_dims", TRUE },
    { "input_batching_dims", FALSE }, { "scatter_indices_batching_dims", FALSE },
  };
  g_autoptr (GPtrArray) types = g_ptr_array_new_with_free_func (g_free);
  if (!dimension_numbers (s, at, a, "scatter_dimension_numbers", "#stablehlo.scatter<", d)
      || !(*shape = results_type (s, nres, types)))
    return FALSE;
  g_string_printf (rest, "scatter(%s)", ops->str);
  *sharding = sharding_of (a);
  if (!dims_lists (s, at, d, keys, G_N_ELEMENTS (keys), rest))
    return FALSE;
  g_string_append_printf (rest, ", to_apply=%s", red);
  flag_attr (a, "indices_are_sorted", rest);
  flag_attr (a, "unique_indices", rest);
  if (nres > 1)
    {
      emit_results (s, at, name, *shape, types, rest->str, *sharding);
      g_clear_pointer (shape, g_free); /* emitted */
    }
  return TRUE;
}

/* "stablehlo.sort"(%a, ...) <{dimension = d, is_stable = B}> ({ ^bb0(%a0:
 * t, %a1: t, %b0: u, %b1: u): ... }): HLO's sort, the comparator's
 * parameters in the same order (each operand's pair), n results. */
gboolean
sl_sort (Sl *s, gsize at, const char *name, int nres, GString *rest, char **shape, char **sharding)
{
  g_autoptr (GString) ops = g_string_new (NULL);
  g_autoptr (GHashTable) a = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  int n = 0;
  if (!sl_expect (s, "(", "to open the operands") || !sl_operands (s, ops, &n) || !sl_expect (s, ")", "to close the operands"))
    return FALSE;
  if (n < 1 || n != nres)
    {
      sl_error (s, at, "stablehlo.sort of %d operands has %d results", n, nres);
      return FALSE;
    }
  if (sl_accept (s, "<{") && !raw_entries (s, "}>", a))
    return FALSE;
  g_autofree char *cmp = g_strdup_printf ("region_%d", s->n_reducers++);
  if (!sl_expect (s, "(", "to open the comparator region") || !sl_region (s, cmp, TRUE, NULL, NULL, NULL, 1)
      || !sl_expect (s, ")", "to close the comparator region"))
    return FALSE;
  if (sl_accept (s, "{") && !raw_entries (s, "}", a))
    return FALSE;
  const char *dim = g_hash_table_lookup (a, "dimension");
  if (!dim || !g_ascii_isdigit (dim[0]))
    {
      sl_error (s, at, "stablehlo.sort needs dimension = N");
      return FALSE;
    }
  g_autoptr (GPtrArray) types = g_ptr_array_new_with_free_func (g_free);
  if (!(*shape = results_type (s, nres, types)))
    return FALSE;
  g_string_printf (rest, "sort(%s), dimensions={%" G_GINT64_FORMAT "}", ops->str, g_ascii_strtoll (dim, NULL, 10));
  flag_attr (a, "is_stable", rest);
  g_string_append_printf (rest, ", to_apply=%s", cmp);
  *sharding = sharding_of (a);
  if (nres > 1)
    {
      emit_results (s, at, name, *shape, types, rest->str, *sharding);
      g_clear_pointer (shape, g_free);
    }
  return TRUE;
}

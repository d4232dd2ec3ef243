/* The StableHLO reader's lexer: blanks, comments and loc(...), tokens,
 * SSA names, tensor types, integer lists, strings, dense<...> literals.
 * See stablehlo.h and stablehlo_private.h. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "common/error.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/stablehlo_private.h"

void G_GNUC_PRINTF (3, 4)
sl_error (Sl *s, gsize off, const char *fmt, ...)
{
  if (s->err)
    return;
  int line, col;
  ps_hlo_offset_line_col (s->t, s->len, off, &line, &col);
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  ps_set_error_at (&s->err, PS_ERROR_PARSE, s->file, line, col, "%s", msg);
}

/* Blanks, // comments, #alias lines and loc(...) locations. */
void
sl_skip_ws (Sl *s)
{
  for (;;)
    {
      while (s->pos < s->len && g_ascii_isspace (s->t[s->pos]))
        s->pos++;
      const char *p = s->t + s->pos;
      gsize left = s->len - s->pos;
      if (left >= 2 && p[0] == '/' && p[1] == '/')
        {
          while (s->pos < s->len && s->t[s->pos] != '\n')
            s->pos++;
          continue;
        }
      if (left >= 4 && memcmp (p, "loc(", 4) == 0)
        {
          int depth = 0;
          for (; s->pos < s->len; s->pos++)
            {
              if (s->t[s->pos] == '"')
                {
                  for (s->pos++; s->pos < s->len && s->t[s->pos] != '"'; s->pos++)
                    if (s->t[s->pos] == '\\')
                      s->pos++;
                }
              else if (s->t[s->pos] == '(')
                depth++;
              else if (s->t[s->pos] == ')' && --depth == 0)
                {
                  s->pos++;
                  break;
                }
            }
          /* an unclosed string or location ends at the end of the text */
          if (s->pos > s->len)
            s->pos = s->len;
          continue;
        }
      return;
    }
}

gboolean
sl_accept (Sl *s, const char *tok)
{
  sl_skip_ws (s);
  gsize n = strlen (tok);
  if (s->pos + n <= s->len && memcmp (s->t + s->pos, tok, n) == 0)
    {
      s->pos += n;
      return TRUE;
    }
  return FALSE;
}

char *
sl_describe (Sl *s)
{
  sl_skip_ws (s);
  if (s->pos >= s->len)
    return g_strdup ("the end of the text");
  gsize e = s->pos;
  while (e < s->len && e - s->pos < 24 && !g_ascii_isspace (s->t[e]))
    e++;
  return g_strdup_printf ("'%.*s'", (int) (e - s->pos), s->t + s->pos);
}

gboolean
sl_expect (Sl *s, const char *tok, const char *why)
{
  if (SL_FAILED (s))
    return FALSE;
  if (sl_accept (s, tok))
    return TRUE;
  g_autofree char *found = sl_describe (s);
  sl_error (s, s->pos, "expected '%s' %s, found %s", tok, why, found);
  return FALSE;
}

static gboolean
sl_ident_char (char c)
{
  return g_ascii_isalnum (c) || c == '_' || c == '.' || c == '$' || c == '-';
}

/* A bare word (op names, keywords). transfer full; NULL at none. */
char *
sl_word (Sl *s)
{
  sl_skip_ws (s);
  gsize b = s->pos;
  while (s->pos < s->len && sl_ident_char (s->t[s->pos]))
    s->pos++;
  return s->pos > b ? g_strndup (s->t + b, s->pos - b) : NULL;
}

/* %name as an HLO name: %0 -> v0, %cst_1 -> cst_1, %arg0 -> arg0. */
char *
sl_ssa (Sl *s, const char *what)
{
  sl_skip_ws (s);
  gsize at = s->pos;
  if (SL_CUR (s) != '%')
    {
      g_autofree char *found = sl_describe (s);
      sl_error (s, at, "expected %s (%%name), found %s", what, found);
      return NULL;
    }
  s->pos++;
  gsize b = s->pos;
  while (s->pos < s->len && (g_ascii_isalnum (s->t[s->pos]) || s->t[s->pos] == '_'))
    s->pos++;
  if (s->pos == b)
    {
      sl_error (s, at, "expected a name after '%%'");
      return NULL;
    }
  /* %0#1, the second result of %0: the get-tuple-element v0.1 */
  gsize e = s->pos;
  if (SL_CUR (s) == '#' && s->pos + 1 < s->len && g_ascii_isdigit (s->t[s->pos + 1]))
    for (s->pos++; s->pos < s->len && g_ascii_isdigit (s->t[s->pos]); s->pos++)
      ;
  char *n = g_strndup (s->t + b, e - b);
  if (s->pos > e)
    {
      char *w = g_strdup_printf ("%s.%.*s", n, (int) (s->pos - e - 1), s->t + e + 1);
      g_free (n);
      n = w;
    }
  if (g_ascii_isdigit (n[0]))
    {
      char *v = g_strconcat ("v", n, NULL);
      g_free (n);
      return v;
    }
  return n;
}

static const char *
sl_etype_of (const char *m)
{
  static const char *const map[][2] = {
    { "f32", "f32" }, { "f16", "f16" }, { "bf16", "bf16" }, { "f64", "f64" }, { "i1", "pred" },
    { "i8", "s8" }, { "i16", "s16" }, { "i32", "s32" }, { "i64", "s64" }, { "ui8", "u8" },
    { "ui16", "u16" }, { "ui32", "u32" }, { "ui64", "u64" }, { "i4", "s4" }, { "ui4", "u4" },
    { "i2", "s2" }, { "ui2", "u2" },
    { "f8E4M3FN", "f8e4m3fn" }, { "f8E5M2", "f8e5m2" }, { "f8E4M3", "f8e4m3" }, { "f8E3M4", "f8e3m4" },
    { "f8E4M3FNUZ", "f8e4m3fnuz" }, { "f8E5M2FNUZ", "f8e5m2fnuz" },
    { "f8E4M3B11FNUZ", "f8e4m3b11fnuz" }, { "f4E2M1FN", "f4e2m1fn" }, { "f8E8M0FNU", "f8e8m0fnu" },
    { "complex<f32>", "c64" },
    { "complex<f64>", "c128" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (map); i++)
    if (strcmp (m, map[i][0]) == 0)
      return map[i][1];
  return NULL;
}

/* tensor<8x16xf32> -> "f32[8,16]". transfer full. */
char *
sl_tensor_type (Sl *s)
{
  sl_skip_ws (s);
  gsize at = s->pos;
  if (!sl_accept (s, "tensor<"))
    {
      g_autofree char *found = sl_describe (s);
      sl_error (s, at, "expected a tensor<...> type, found %s", found);
      return NULL;
    }
  gsize b = s->pos;
  int depth = 1;
  while (s->pos < s->len && depth > 0 && s->t[s->pos] != '\n')
    {
      if (s->t[s->pos] == '<')
        depth++;
      else if (s->t[s->pos] == '>')
        depth--;
      s->pos++;
    }
  if (depth > 0)
    {
      sl_error (s, at, "tensor type is not closed with '>'");
      return NULL;
    }
  g_autofree char *inner = g_strndup (s->t + b, s->pos - 1 - b);
  /* a bounded dynamic dim: tensor<?x4xf32, #stablehlo.bounds<16, ?>> (the
   * StableHLO spec's "bounded dynamic" shapes), HLO's f32[<=16,4] */
  g_auto (GStrv) bounds = NULL;
  char *comma = strchr (inner, ',');
  if (comma)
    {
      const char *enc = comma + 1;
      while (g_ascii_isspace (*enc))
        enc++;
      gsize el = strlen (enc);
      if (!g_str_has_prefix (enc, "#stablehlo.bounds<") || el < 19 || enc[el - 1] != '>')
        {
          sl_error (s, at, "tensor types with an encoding are not read (#stablehlo.bounds<...> is)");
          return NULL;
        }
      g_autofree char *list = g_strndup (enc + 18, el - 19);
      bounds = g_strsplit (list, ",", -1);
      for (int i = 0; bounds[i]; i++)
        g_strstrip (bounds[i]);
      *comma = '\0';
    }
  GString *dims = g_string_new (NULL);
  const char *e = inner;
  guint k = 0;
  for (;; k++)
    {
      const char *x = e;
      while (*x && (g_ascii_isdigit (*x) || *x == '?'))
        x++;
      if (x == e || *x != 'x')
        break;
      const char *bound = bounds && k < g_strv_length (bounds) ? bounds[k] : NULL;
      if (memchr (e, '?', (gsize) (x - e)))
        {
          gboolean unbounded = x - e == 1 && (!bound || strcmp (bound, "?") == 0);
          gboolean ok = x - e == 1 && bound && bound[0] && strspn (bound, "0123456789") == strlen (bound);
          if (!ok && !unbounded)
            {
              g_string_free (dims, TRUE);
              sl_error (s, at, "dynamic dimension '?' needs a bound of digits in #stablehlo.bounds<...> "
                        "or none ('?')");
              return NULL;
            }
          /* no bound: HLO's unbounded dim, read and printed; the stages
           * after reading refuse it (ps_hlo_load) */
          if (unbounded)
            g_string_append_printf (dims, "%s?", dims->len ? "," : "");
          else
            g_string_append_printf (dims, "%s<=%s", dims->len ? "," : "", bound);
        }
      else
        g_string_append_printf (dims, "%s%.*s", dims->len ? "," : "", (int) (x - e), e);
      e = x + 1;
    }
  if (bounds && g_strv_length (bounds) != k)
    {
      g_string_free (dims, TRUE);
      sl_error (s, at, "#stablehlo.bounds<...> gives %u bound(s) for a tensor of rank %u", g_strv_length (bounds), k);
      return NULL;
    }
  const char *et = sl_etype_of (e);
  if (!et)
    {
      g_string_free (dims, TRUE);
      sl_error (s, at, "element type '%.*s' is not read", (int) MIN (strlen (e), 40), e);
      return NULL;
    }
  char *r = g_strdup_printf ("%s[%s]", et, dims->str);
  g_string_free (dims, TRUE);
  return r;
}

/* ": T" or ": (T, ...) -> T" (or "-> (T, ...)"): the result type. */
char *
sl_result_type (Sl *s)
{
  if (!sl_expect (s, ":", "before the types"))
    return NULL;
  sl_skip_ws (s);
  if (SL_CUR (s) != '(')
    {
      /* select writes ": tensor<i1>, tensor<f32>": the last is the result's */
      char *t = sl_tensor_type (s);
      while (t && sl_accept (s, ","))
        {
          g_free (t);
          t = sl_tensor_type (s);
        }
      /* chlo's unary ops write ": T1 -> T2" */
      if (t && sl_accept (s, "->"))
        {
          g_free (t);
          t = sl_tensor_type (s);
        }
      return t;
    }
  s->pos++;
  if (!sl_accept (s, ")"))
    {
      do
        {
          g_autofree char *t = sl_tensor_type (s);
          if (!t)
            return NULL;
        }
      while (sl_accept (s, ","));
      if (!sl_expect (s, ")", "to close the operand types"))
        return NULL;
    }
  if (!sl_expect (s, "->", "before the result type"))
    return NULL;
  return sl_tensor_type (s);
}

/* [1, 0] -> "1,0" (into out). */
gboolean
sl_int_list (Sl *s, GString *out)
{
  if (!sl_expect (s, "[", "to open a list"))
    return FALSE;
  if (sl_accept (s, "]"))
    return TRUE;
  do
    {
      sl_skip_ws (s);
      gsize b = s->pos;
      if (SL_CUR (s) == '-')
        s->pos++;
      while (s->pos < s->len && g_ascii_isdigit (s->t[s->pos]))
        s->pos++;
      if (s->pos == b)
        {
          g_autofree char *found = sl_describe (s);
          sl_error (s, b, "expected a number, found %s", found);
          return FALSE;
        }
      g_string_append_printf (out, "%s%.*s", out->len && out->str[out->len - 1] != '{' ? "," : "",
                              (int) (s->pos - b), s->t + b);
    }
  while (sl_accept (s, ","));
  return sl_expect (s, "]", "to close a list");
}

/* A quoted string's contents. transfer full. */
char *
sl_string_lit (Sl *s)
{
  if (!sl_expect (s, "\"", "to open a string"))
    return NULL;
  GString *g = g_string_new (NULL);
  gsize at = s->pos - 1;
  /* MLIR strings end on their line: a runaway one is an error there, not
   * the rest of the file inside a message */
  while (s->pos < s->len && s->t[s->pos] != '"')
    {
      if (s->t[s->pos] == '\\' && s->pos + 1 < s->len)
        s->pos++;
      if (s->t[s->pos] == '\n')
        {
          g_string_free (g, TRUE);
          sl_error (s, at, "string is not closed on its line");
          return NULL;
        }
      g_string_append_c (g, s->t[s->pos++]);
    }
  if (!sl_expect (s, "\"", "to close a string"))
    {
      g_string_free (g, TRUE);
      return NULL;
    }
  return g_string_free (g, FALSE);
}

/* dense<...>: a scalar (a splat) or nested [...] lists, as HLO's constant
 * text. Booleans and hex floats are refused. */
char *
sl_dense_value (Sl *s)
{
  if (!sl_expect (s, "dense<", "after stablehlo.constant"))
    return NULL;
  GString *g = g_string_new (NULL);
  while (s->pos < s->len && s->t[s->pos] != '>')
    {
      char c = s->t[s->pos++];
      if (c == '[')
        g_string_append_c (g, '{');
      else if (c == ']')
        g_string_append_c (g, '}');
      else if (c == '"')
        {
          g_string_free (g, TRUE);
          sl_error (s, s->pos - 1, "hexadecimal or string constants are not read");
          return NULL;
        }
      else if (!g_ascii_isspace (c))
        g_string_append_c (g, c);
    }
  if (!sl_expect (s, ">", "to close dense<...>"))
    {
      g_string_free (g, TRUE);
      return NULL;
    }
  return g_string_free (g, FALSE);
}

/* ", key = [..]" into out as "a,b" (the list's numbers). */
gboolean
sl_keyed_list (Sl *s, const char *key, GString *out)
{
  return sl_expect (s, ",", key) && sl_expect (s, key, "(KEY = [...])") && sl_expect (s, "=", key) && sl_int_list (s, out);
}

/* One number (dim = 0). transfer full; NULL after an error. */
char *
sl_number (Sl *s)
{
  sl_skip_ws (s);
  gsize b = s->pos;
  while (s->pos < s->len && g_ascii_isdigit (s->t[s->pos]))
    s->pos++;
  if (s->pos == b)
    {
      g_autofree char *found = sl_describe (s);
      sl_error (s, b, "expected a number, found %s", found);
      return NULL;
    }
  return g_strndup (s->t + b, s->pos - b);
}

/* MLIR prints a float that decimal would not round-trip (inf, nan, -inf as
 * JAX's max-reduction init) as its bits, 0xFF800000: rewritten as the
 * decimal or inf/nan HLO's constant text takes, by the element type. */
char *
sl_hex_floats (Sl *s, gsize at, const char *v, const char *shape)
{
  int bits = g_str_has_prefix (shape, "f32[") ? 32 : g_str_has_prefix (shape, "f64[") ? 64
             : g_str_has_prefix (shape, "bf16[") ? 16 : 0;
  GString *g = g_string_new (NULL);
  for (const char *p = v; *p;)
    {
      if (!(p[0] == '0' && (p[1] == 'x' || p[1] == 'X')))
        {
          g_string_append_c (g, *p++);
          continue;
        }
      const char *b = p + 2, *e = b;
      while (g_ascii_isxdigit (*e))
        e++;
      if (bits == 0 || e - b != bits / 4)
        {
          sl_error (s, at, "hexadecimal constant %.*s is not read for %.*s", (int) MIN (e - p, 20), p,
                    (int) (strchr (shape, '[') - shape), shape);
          g_string_free (g, TRUE);
          return NULL;
        }
      guint64 u = g_ascii_strtoull (b, NULL, 16);
      double d;
      if (bits == 64)
        memcpy (&d, &u, sizeof d);
      else
        {
          guint32 w = bits == 32 ? (guint32) u : (guint32) u << 16;
          float f;
          memcpy (&f, &w, sizeof f);
          d = f;
        }
      if (isnan (d))
        g_string_append (g, "nan");
      else if (isinf (d))
        g_string_append (g, d < 0 ? "-inf" : "inf");
      else
        {
          char buf[G_ASCII_DTOSTR_BUF_SIZE];
          g_string_append (g, g_ascii_formatd (buf, sizeof buf, bits == 64 ? "%.17g" : "%.9g", d));
        }
      p = e;
    }
  return g_string_free (g, FALSE);
}

/* The text of one attribute value at the cursor: up to a ',' or a closing
 * bracket at depth 0 (not consumed), strings skipped; the '>' of '->' (a
 * convolution's dimension numbers) closes nothing. transfer full. */
char *
sl_raw_value (Sl *s)
{
  sl_skip_ws (s);
  gsize b = s->pos;
  int depth = 0;
  while (s->pos < s->len)
    {
      char c = s->t[s->pos];
      if (c == '"')
        {
          g_autofree char *ignored = sl_string_lit (s);
          if (!ignored)
            return NULL;
          continue;
        }
      if (c == '>' && s->pos > b && s->t[s->pos - 1] == '-')
        {
          s->pos++;
          continue;
        }
      if (depth == 0 && (c == ',' || c == '}' || c == ']' || c == ')' || c == '>'))
        break;
      if (c == '{' || c == '[' || c == '(' || c == '<')
        depth++;
      else if (c == '}' || c == ']' || c == ')' || c == '>')
        depth--;
      s->pos++;
    }
  gsize e = s->pos;
  while (e > b && g_ascii_isspace (s->t[e - 1]))
    e--;
  return g_strndup (s->t + b, e - b);
}

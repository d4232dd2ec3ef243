/* Lexical primitives and shapes of the HLO reader (hlo_lexer.h). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "partitioner/hlo/hlo_private.h"
#include "partitioner/hlo/hlo_lexer.h"
#include "partitioner/ir/sharding.h"


void G_GNUC_PRINTF (4, 5)
ps_hlo_error (PsHloReader *p, gsize off, PsErrorCode code, const char *fmt, ...)
{
  if (p->err)
    return;
  va_list ap;
  va_start (ap, fmt);
  char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  int line, col;
  ps_text_position (p->text, MIN (off, p->len), &line, &col);
  ps_set_error_at (&p->err, code, p->file, line, col, "%s", msg);
  g_free (msg);
}

#define FAILED(p) ((p)->err != NULL)
#define CUR(p) ((p)->pos < (p)->len ? (p)->text[(p)->pos] : '\0')

void
ps_hlo_position (PsHloReader *p, gsize off, int *line, int *col)
{
  off = MIN (off, p->len);
  if (p->lc_line == 0 || off < p->lc_off)
    {
      p->lc_off = p->lc_line_start = 0;
      p->lc_line = 1;
    }
  for (gsize i = p->lc_off; i < off; i++)
    if (p->text[i] == '\n')
      {
        p->lc_line++;
        p->lc_line_start = i + 1;
      }
  p->lc_off = off;
  *line = p->lc_line;
  *col = (int) (off - p->lc_line_start) + 1;
}

void
ps_hlo_skip_ws (PsHloReader *p)
{
  while (p->pos < p->len)
    {
      char c = p->text[p->pos];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v')
        p->pos++;
      else if (c == '/' && p->pos + 1 < p->len && p->text[p->pos + 1] == '/')
        {
          while (p->pos < p->len && p->text[p->pos] != '\n')
            p->pos++;
        }
      else if (c == '/' && p->pos + 1 < p->len && p->text[p->pos + 1] == '*')
        {
          const char *end = strstr (p->text + p->pos + 2, "*/");
          if (!end)
            {
              ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "unterminated comment");
              p->pos = p->len;
              return;
            }
          p->pos = (gsize) (end - p->text) + 2;
        }
      else
        return;
    }
}

char
ps_hlo_peek (PsHloReader *p)
{
  ps_hlo_skip_ws (p);
  return CUR (p);
}

gboolean
ps_hlo_is_ident_start (char c)
{
  return g_ascii_isalpha (c) || c == '_';
}

gboolean
ps_hlo_is_ident_char (char c)
{
  return g_ascii_isalnum (c) || c == '_' || c == '.' || c == '-';
}

/* A short description of what is at `off`, for "expected X, found Y". */
char *
ps_hlo_describe (PsHloReader *p, gsize off)
{
  if (off >= p->len)
    return g_strdup ("end of input");
  const char *s = p->text + off;
  gsize n = 0;
  if (*s == '%' || ps_hlo_is_ident_start (*s) || g_ascii_isdigit (*s) || *s == '-')
    {
      n = 1;
      while (off + n < p->len && ps_hlo_is_ident_char (s[n]) && n < 40)
        n++;
    }
  else
    n = 1;
  return g_strdup_printf ("'%.*s'", (int) n, s);
}

gboolean
ps_hlo_accept (PsHloReader *p, char c)
{
  if (ps_hlo_peek (p) == c && !FAILED (p))
    {
      p->pos++;
      return TRUE;
    }
  return FALSE;
}

gboolean
ps_hlo_expect (PsHloReader *p, char c, const char *context)
{
  if (ps_hlo_accept (p, c))
    return TRUE;
  if (!FAILED (p))
    {
      g_autofree char *found = ps_hlo_describe (p, p->pos);
      ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "expected '%c' %s, found %s", c, context, found);
    }
  return FALSE;
}

/* An identifier (with an optional leading '%', which is dropped). Returns
 * a new string or NULL with an error naming `what`. */
char *
ps_hlo_name (PsHloReader *p, const char *what)
{
  ps_hlo_skip_ws (p);
  if (FAILED (p))
    return NULL;
  gsize start = p->pos;
  if (CUR (p) == '%')
    p->pos++;
  if (!ps_hlo_is_ident_start (CUR (p)))
    {
      g_autofree char *found = ps_hlo_describe (p, start);
      ps_hlo_error (p, start, PS_ERROR_PARSE, "expected %s, found %s", what, found);
      return NULL;
    }
  gsize s = p->pos;
  while (p->pos < p->len && ps_hlo_is_ident_char (p->text[p->pos]))
    p->pos++;
  return g_strndup (p->text + s, p->pos - s);
}

/* Whether the word at the cursor is exactly `kw` (not a prefix of a name). */
gboolean
ps_hlo_at_keyword (PsHloReader *p, const char *kw)
{
  ps_hlo_skip_ws (p);
  gsize n = strlen (kw);
  return p->pos + n <= p->len && memcmp (p->text + p->pos, kw, n) == 0
         && (p->pos + n == p->len || !ps_hlo_is_ident_char (p->text[p->pos + n]));
}

gboolean
ps_hlo_int (PsHloReader *p, int64_t *out, const char *what)
{
  ps_hlo_skip_ws (p);
  if (FAILED (p))
    return FALSE;
  gsize start = p->pos;
  gsize q = p->pos;
  if (q < p->len && (p->text[q] == '-' || p->text[q] == '+'))
    q++;
  if (q >= p->len || !g_ascii_isdigit (p->text[q]))
    {
      g_autofree char *found = ps_hlo_describe (p, start);
      ps_hlo_error (p, start, PS_ERROR_PARSE, "expected %s, found %s", what, found);
      return FALSE;
    }
  while (q < p->len && g_ascii_isdigit (p->text[q]))
    q++;
  char buf[32];
  if (q - start >= sizeof buf)
    {
      ps_hlo_error (p, start, PS_ERROR_PARSE, "integer too large");
      return FALSE;
    }
  memcpy (buf, p->text + start, q - start);
  buf[q - start] = 0;
  char *end;
  errno = 0;
  *out = g_ascii_strtoll (buf, &end, 10);
  if (errno != 0)
    {
      ps_hlo_error (p, start, PS_ERROR_PARSE, "integer %s out of range", buf);
      return FALSE;
    }
  p->pos = q;
  return TRUE;
}

gboolean
ps_hlo_bool (PsHloReader *p, gboolean *out)
{
  ps_hlo_skip_ws (p);
  if (ps_hlo_at_keyword (p, "true"))
    {
      p->pos += 4;
      *out = TRUE;
      return TRUE;
    }
  if (ps_hlo_at_keyword (p, "false"))
    {
      p->pos += 5;
      *out = FALSE;
      return TRUE;
    }
  g_autofree char *found = ps_hlo_describe (p, p->pos);
  ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "expected true or false, found %s", found);
  return FALSE;
}

/* Skips a string at the cursor; returns its contents as written (escapes
 * kept, so printing them back is exact). */
char *
ps_hlo_string (PsHloReader *p)
{
  ps_hlo_skip_ws (p);
  gsize start = p->pos;
  if (CUR (p) != '"')
    {
      g_autofree char *found = ps_hlo_describe (p, start);
      ps_hlo_error (p, start, PS_ERROR_PARSE, "expected a string, found %s", found);
      return NULL;
    }
  p->pos++;
  while (p->pos < p->len && p->text[p->pos] != '"')
    {
      if (p->text[p->pos] == '\\' && p->pos + 1 < p->len)
        p->pos++;
      else if (p->text[p->pos] == '\n')
        break;
      p->pos++;
    }
  if (CUR (p) != '"')
    {
      ps_hlo_error (p, start, PS_ERROR_PARSE, "unterminated string");
      return NULL;
    }
  p->pos++;
  return g_strndup (p->text + start + 1, p->pos - start - 2);
}

/* Moves past one balanced group starting at the cursor ('{', '(' or '[')
 * that may hold strings and comments. */
gboolean
ps_hlo_skip_balanced (PsHloReader *p)
{
  char stack[256];
  gsize where[256];
  int depth = 0;
  while (p->pos < p->len)
    {
      char c = p->text[p->pos];
      if (c == '/' && p->pos + 1 < p->len && (p->text[p->pos + 1] == '/' || p->text[p->pos + 1] == '*'))
        {
          ps_hlo_skip_ws (p);
          if (FAILED (p))
            return FALSE;
          continue;
        }
      if (c == '"')
        {
          g_autofree char *s = ps_hlo_string (p);
          if (!s)
            return FALSE;
          continue;
        }
      if (c == '{' || c == '(' || c == '[')
        {
          if (depth == (int) G_N_ELEMENTS (stack))
            {
              ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "brackets nested too deeply");
              return FALSE;
            }
          stack[depth] = c == '{' ? '}' : c == '(' ? ')' : ']';
          where[depth++] = p->pos;
        }
      else if (c == '}' || c == ')' || c == ']')
        {
          if (depth == 0 || stack[depth - 1] != c)
            {
              ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "unbalanced '%c'", c);
              return FALSE;
            }
          depth--;
        }
      p->pos++;
      if (depth == 0)
        return TRUE;
    }
  if (depth > 0)
    ps_hlo_error (p, where[depth - 1], PS_ERROR_PARSE, "'%c' is never closed",
          stack[depth - 1] == '}' ? '{' : stack[depth - 1] == ')' ? '(' : '[');
  return FALSE;
}

/* Canonical text of a raw value: comments removed, whitespace runs outside
 * strings collapsed to one space, trimmed. Idempotent. */
char *
ps_hlo_normalize_raw (const char *s, gsize n)
{
  GString *out = g_string_new (NULL);
  gboolean space = FALSE;
  for (gsize i = 0; i < n;)
    {
      char c = s[i];
      if (c == '/' && i + 1 < n && s[i + 1] == '/')
        {
          while (i < n && s[i] != '\n')
            i++;
          space = TRUE;
          continue;
        }
      if (c == '/' && i + 1 < n && s[i + 1] == '*')
        {
          i += 2;
          while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/'))
            i++;
          i += 2;
          space = TRUE;
          continue;
        }
      if (g_ascii_isspace (c))
        {
          space = TRUE;
          i++;
          continue;
        }
      if (space && out->len > 0)
        g_string_append_c (out, ' ');
      space = FALSE;
      if (c == '"')
        {
          gsize j = i + 1;
          while (j < n && s[j] != '"')
            j += (s[j] == '\\' && j + 1 < n) ? 2 : 1;
          j = MIN (j + 1, n);
          g_string_append_len (out, s + i, (gssize) (j - i));
          i = j;
          continue;
        }
      g_string_append_c (out, c);
      i++;
    }
  return g_string_free (out, FALSE);
}

/* An attribute value podsim does not interpret: balanced groups, strings
 * and plain characters up to a top-level ',' or whitespace. */
char *
ps_hlo_raw_value (PsHloReader *p)
{
  ps_hlo_skip_ws (p);
  gsize start = p->pos;
  /* XLA's literal-valued attributes (a custom-call's literal=s32[] 1) are a
   * shape, then the value: kept whole */
  if (CUR (p) != '(' && ps_hlo_at_shape (p))
    {
      PsShape *sh = ps_hlo_shape (p);
      if (!sh)
        return NULL;
      ps_shape_free (sh);
      ps_hlo_skip_ws (p);
    }
  while (p->pos < p->len && !FAILED (p))
    {
      char c = p->text[p->pos];
      if (c == '{' || c == '(' || c == '[')
        ps_hlo_skip_balanced (p);
      else if (c == '"')
        g_free (ps_hlo_string (p));
      else if (c == ',' || c == '}' || c == ')' || c == ']' || g_ascii_isspace (c)
               || (c == '/' && p->pos + 1 < p->len && (p->text[p->pos + 1] == '/' || p->text[p->pos + 1] == '*')))
        break;
      else
        p->pos++;
    }
  if (FAILED (p))
    return NULL;
  if (p->pos == start)
    {
      g_autofree char *found = ps_hlo_describe (p, start);
      ps_hlo_error (p, start, PS_ERROR_PARSE, "expected an attribute value, found %s", found);
      return NULL;
    }
  return ps_hlo_normalize_raw (p->text + start, p->pos - start);
}

/* ---- shapes ------------------------------------------------------------- */

gboolean
ps_hlo_at_shape (PsHloReader *p)
{
  ps_hlo_skip_ws (p);
  if (CUR (p) == '(')
    return TRUE;
  gsize q = p->pos;
  while (q < p->len && g_ascii_isalnum (p->text[q]))
    q++;
  PsElemType t;
  return q > p->pos && q < p->len && p->text[q] == '['
         && ps_etype_from_name (p->text + p->pos, q - p->pos, &t);
}

static PsShape *
shape_at (PsHloReader *p, int depth)
{
  ps_hlo_skip_ws (p);
  if (FAILED (p))
    return NULL;
  gsize start = p->pos;
  if (CUR (p) == '(')
    {
      if (depth >= PS_MAX_NESTING)
        {
          ps_hlo_error (p, start, PS_ERROR_LIMIT, "tuple shape nested more than %d deep "
                        "(doc/robustness.md)", PS_MAX_NESTING);
          return NULL;
        }
      p->pos++;
      GPtrArray *elems = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_shape_free);
      int64_t leaf_elements = 0;
      if (!ps_hlo_accept (p, ')'))
        {
          do
            {
              PsShape *e = shape_at (p, depth + 1);
              if (!e)
                {
                  g_ptr_array_free (elems, TRUE);
                  return NULL;
                }
              g_ptr_array_add (elems, e);
              /* Each leaf is within the limit, so the sum cannot overflow. */
              leaf_elements += ps_shape_leaf_elements (e);
              if (leaf_elements > PS_MAX_ELEMENTS)
                {
                  ps_hlo_error (p, start, PS_ERROR_LIMIT, "tuple shape has more than 2^40 "
                                "elements in all (doc/robustness.md)");
                  g_ptr_array_free (elems, TRUE);
                  return NULL;
                }
            }
          while (ps_hlo_accept (p, ','));
          if (!ps_hlo_expect (p, ')', "to close the tuple shape"))
            {
              g_ptr_array_free (elems, TRUE);
              return NULL;
            }
        }
      PsShape *t = ps_shape_new_tuple ((int) elems->len, (PsShape *const *) elems->pdata);
      g_ptr_array_free (elems, TRUE);
      return t;
    }
  gsize q = p->pos;
  while (q < p->len && g_ascii_isalnum (p->text[q]))
    q++;
  PsElemType et;
  if (q == p->pos || !ps_etype_from_name (p->text + p->pos, q - p->pos, &et))
    {
      g_autofree char *found = ps_hlo_describe (p, start);
      ps_hlo_error (p, start, PS_ERROR_PARSE, "expected a shape, found %s", found);
      return NULL;
    }
  p->pos = q;
  if (CUR (p) != '[')
    {
      ps_hlo_error (p, p->pos, PS_ERROR_PARSE, "expected '[' after element type %s", ps_etype_name (et));
      return NULL;
    }
  p->pos++;
  GArray *dims = g_array_new (FALSE, FALSE, sizeof (int64_t));
  GArray *dyn = g_array_new (FALSE, FALSE, sizeof (gboolean));
  gboolean any_dyn = FALSE;
  if (!ps_hlo_accept (p, ']'))
    {
      do
        {
          ps_hlo_skip_ws (p);
          gboolean d = FALSE;
          if (p->pos + 1 < p->len && p->text[p->pos] == '<' && p->text[p->pos + 1] == '=')
            {
              p->pos += 2;
              d = any_dyn = TRUE;
            }
          gsize dpos = p->pos;
          int64_t v = 0;
          if (CUR (p) == '?')
            {
              /* XLA's unbounded dynamic dim (Shape::kUnboundedSize, printed
               * "?"): read and printed back; the stages after reading
               * refuse it (ps_hlo_load). "<=?" is not a shape. */
              if (d)
                {
                  ps_hlo_error (p, dpos, PS_ERROR_PARSE, "expected a bound after '<=', found '?'");
                  break;
                }
              p->pos++;
              d = PS_DIM_UNBOUNDED;
              any_dyn = TRUE;
            }
          else
            {
              if (!ps_hlo_int (p, &v, "a dimension size"))
                break;
              if (v < 0)
                {
                  ps_hlo_error (p, dpos, PS_ERROR_PARSE, "negative dimension size %" G_GINT64_FORMAT, v);
                  break;
                }
            }
          if (dims->len == PS_MAX_RANK)
            {
              ps_hlo_error (p, dpos, PS_ERROR_LIMIT, "shape has more than %d dimensions "
                            "(doc/robustness.md)", PS_MAX_RANK);
              break;
            }
          g_array_append_val (dims, v);
          g_array_append_val (dyn, d);
        }
      while (ps_hlo_accept (p, ','));
      ps_hlo_expect (p, ']', "to close the dimensions");
    }
  int64_t n_elements;
  if (!FAILED (p)
      && !ps_checked_product ((int) dims->len, (const int64_t *) dims->data, PS_MAX_ELEMENTS,
                              &n_elements))
    ps_hlo_error (p, start, PS_ERROR_LIMIT, "shape %.*s has more than 2^40 elements "
                  "(doc/robustness.md)", (int) MIN (p->pos - start, 80), p->text + start);
  if (FAILED (p))
    {
      g_array_free (dims, TRUE);
      g_array_free (dyn, TRUE);
      return NULL;
    }
  if (et == PS_TOKEN && dims->len > 0)
    {
      ps_hlo_error (p, start, PS_ERROR_PARSE, "token shapes have no dimensions");
      g_array_free (dims, TRUE);
      g_array_free (dyn, TRUE);
      return NULL;
    }
  PsShape *s = ps_shape_new_array (et, (int) dims->len, (const int64_t *) dims->data);
  if (any_dyn)
    s->dynamic = g_memdup2 (dyn->data, sizeof (gboolean) * dyn->len);
  g_array_free (dims, TRUE);
  g_array_free (dyn, TRUE);
  /* A layout follows directly, "f32[8]{0}". A '{' after a space, or one
   * that does not hold minor-to-major numbers, belongs to what follows
   * (a computation body after its signature). */
  if (CUR (p) == '{')
    {
      gsize q2 = p->pos + 1;
      while (q2 < p->len && (p->text[q2] == ' '))
        q2++;
      char c = q2 < p->len ? p->text[q2] : 0;
      if (g_ascii_isdigit (c) || c == ':' || c == '}')
        {
          gsize lpos = p->pos;
          p->pos++;
          GArray *lay = g_array_new (FALSE, FALSE, sizeof (int64_t));
          if (ps_hlo_peek (p) != '}' && ps_hlo_peek (p) != ':')
            {
              do
                {
                  int64_t v;
                  if (!ps_hlo_int (p, &v, "a layout dimension"))
                    break;
                  g_array_append_val (lay, v);
                }
              while (ps_hlo_accept (p, ','));
            }
          if (!FAILED (p) && ps_hlo_accept (p, ':'))
            {
              ps_hlo_skip_ws (p);
              gsize es = p->pos;
              int depth = 0;
              while (p->pos < p->len && (p->text[p->pos] != '}' || depth > 0))
                {
                  char ch = p->text[p->pos];
                  if (ch == '(')
                    depth++;
                  else if (ch == ')')
                    depth--;
                  p->pos++;
                }
              s->layout_extra = ps_hlo_normalize_raw (p->text + es, p->pos - es);
            }
          if (!FAILED (p))
            ps_hlo_expect (p, '}', "to close the layout");
          s->layout_n = (int) lay->len;
          s->layout = lay->len > 0 ? g_memdup2 (lay->data, sizeof (int64_t) * lay->len) : NULL;
          g_array_free (lay, TRUE);
          if (!FAILED (p) && s->layout_n > 0 && s->layout_n != s->rank)
            ps_hlo_error (p, lpos, PS_ERROR_PARSE, "layout lists %d dims but the shape has rank %d",
                  s->layout_n, s->rank);
          if (!FAILED (p) && s->layout_n > 0)
            {
              /* Minor-to-major must be a permutation of the dims. */
              for (int i = 0; i < s->layout_n && !FAILED (p); i++)
                {
                  if (s->layout[i] < 0 || s->layout[i] >= s->rank)
                    ps_hlo_error (p, lpos, PS_ERROR_PARSE, "layout entry %" G_GINT64_FORMAT " out of range for rank %d",
                          s->layout[i], s->rank);
                  for (int j = 0; j < i && !FAILED (p); j++)
                    if (s->layout[j] == s->layout[i])
                      ps_hlo_error (p, lpos, PS_ERROR_PARSE, "layout repeats dimension %" G_GINT64_FORMAT, s->layout[i]);
                }
            }
        }
    }
  if (FAILED (p))
    {
      ps_shape_free (s);
      return NULL;
    }
  return s;
}

PsShape *
ps_hlo_shape (PsHloReader *p)
{
  return shape_at (p, 0);
}


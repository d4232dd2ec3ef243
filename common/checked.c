#include "common/checked.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

/* The four overflow-checked operations differ only in their type and the
 * compiler builtin that does the work; *out is untouched on overflow. */
#define CHECKED_OP(name, type, builtin) \
  gboolean \
  name (type a, type b, type *out) \
  { \
    type r; \
    if (builtin (a, b, &r)) \
      return FALSE; \
    *out = r; \
    return TRUE; \
  }

CHECKED_OP (ps_checked_add_i64, int64_t, __builtin_add_overflow)
CHECKED_OP (ps_checked_mul_i64, int64_t, __builtin_mul_overflow)
CHECKED_OP (ps_checked_add_u64, uint64_t, __builtin_add_overflow)
CHECKED_OP (ps_checked_mul_u64, uint64_t, __builtin_mul_overflow)

#undef CHECKED_OP

gboolean
ps_checked_product (int n, const int64_t *dims, int64_t limit, int64_t *out)
{
  int64_t p = 1;
  gboolean zero = FALSE;
  for (int i = 0; i < n; i++)
    {
      if (dims[i] < 0)
        return FALSE;
      if (dims[i] == 0)
        zero = TRUE;
    }
  /* A zero dim makes the product 0 however large the others are. */
  if (zero)
    {
      *out = 0;
      return TRUE;
    }
  for (int i = 0; i < n; i++)
    if (!ps_checked_mul_i64 (p, dims[i], &p) || p > limit)
      return FALSE;
  *out = p;
  return TRUE;
}

gboolean
ps_read_text_file (const char *path, guint64 max_bytes, char **out, gsize *len,
                   GError **error)
{
  gboolean is_stdin = strcmp (path, "-") == 0;
  const char *name = is_stdin ? "<stdin>" : path;
  FILE *f = is_stdin ? stdin : fopen (path, "rb");
  if (f == NULL)
    {
      int e = errno;
      g_set_error (error, PS_ERROR, PS_ERROR_IO, "%s: cannot open: %s", name, g_strerror (e));
      return FALSE;
    }
  GString *buf = g_string_new (NULL);
  char chunk[65536];
  size_t n;
  gboolean ok = TRUE;
  while ((n = fread (chunk, 1, sizeof chunk, f)) > 0)
    {
      const char *nul = memchr (chunk, '\0', n);
      if (nul != NULL)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_PARSE,
                       "%s: not a text file (NUL byte at offset %" G_GSIZE_FORMAT ")", name,
                       buf->len + (gsize) (nul - chunk));
          ok = FALSE;
          break;
        }
      if ((guint64) buf->len + n > max_bytes)
        {
          g_autofree char *limit = g_format_size_full (max_bytes, G_FORMAT_SIZE_IEC_UNITS);
          g_set_error (error, PS_ERROR, PS_ERROR_PARSE,
                       "%s: larger than %s, the limit for this input (doc/robustness.md)",
                       name, limit);
          ok = FALSE;
          break;
        }
      g_string_append_len (buf, chunk, (gssize) n);
    }
  if (ok && ferror (f))
    {
      int e = errno;
      g_set_error (error, PS_ERROR, PS_ERROR_IO, "%s: read error: %s", name, g_strerror (e));
      ok = FALSE;
    }
  if (!is_stdin)
    fclose (f);
  if (!ok)
    {
      g_string_free (buf, TRUE);
      return FALSE;
    }
  *len = buf->len;
  *out = g_string_free (buf, FALSE);
  return TRUE;
}

gboolean
ps_json_depth_ok (const char *line, const char *file, int line_no, GError **error)
{
  int depth = 0;
  gboolean in_string = FALSE;
  for (const char *c = line; *c; c++)
    {
      if (in_string)
        {
          if (*c == '\\' && c[1])
            c++;
          else if (*c == '"')
            in_string = FALSE;
        }
      else if (*c == '"')
        in_string = TRUE;
      else if (*c == '[' || *c == '{')
        {
          if (++depth > PS_MAX_NESTING)
            {
              ps_set_error_at (error, PS_ERROR_LIMIT, file, line_no, (int) (c - line) + 1,
                               "JSON nested more than %d deep (doc/robustness.md)", PS_MAX_NESTING);
              return FALSE;
            }
        }
      else if (*c == ']' || *c == '}')
        depth--;
    }
  return TRUE;
}

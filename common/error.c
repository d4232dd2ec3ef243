#include "common/error.h"
#include "common/output.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

G_DEFINE_QUARK (podsim-error-quark, ps_error)

void
ps_set_error_at (GError **error, PsErrorCode code, const char *file, int line,
                 int col, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  if (file == NULL)
    file = "<input>";
  if (line <= 0)
    g_set_error (error, PS_ERROR, code, "%s: %s", file, msg);
  else if (col <= 0)
    g_set_error (error, PS_ERROR, code, "%s:%d: %s", file, line, msg);
  else
    g_set_error (error, PS_ERROR, code, "%s:%d:%d: %s", file, line, col, msg);
}

void
ps_text_position (const char *text, gsize offset, int *line, int *col)
{
  int l = 1, c = 1;
  for (gsize i = 0; i < offset && text[i] != '\0'; i++)
    {
      if (text[i] == '\n')
        {
          l++;
          c = 1;
        }
      else
        c++;
    }
  if (line)
    *line = l;
  if (col)
    *col = c;
}

gboolean
ps_parse_bytes (const char *text, const char *what, guint64 *out_bytes,
                GError **error)
{
  static const struct { const char *suffix; double mult; } units[] = {
    { "", 1 }, { "B", 1 },
    { "KiB", 1024.0 }, { "MiB", 1048576.0 }, { "GiB", 1073741824.0 },
    { "TiB", 1099511627776.0 },
    { "k", 1e3 }, { "K", 1e3 }, { "kB", 1e3 }, { "KB", 1e3 },
    { "M", 1e6 }, { "MB", 1e6 }, { "G", 1e9 }, { "GB", 1e9 },
    { "T", 1e12 }, { "TB", 1e12 },
  };
  if (text == NULL || *text == '\0')
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: empty size", what);
      return FALSE;
    }
  char *end = NULL;
  errno = 0;
  double v = g_ascii_strtod (text, &end);
  if (end == text || errno != 0 || !isfinite (v) || v < 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "%s: '%s' is not a size (examples: 4096, 64MiB, 1GB)", what, text);
      return FALSE;
    }
  for (gsize i = 0; i < G_N_ELEMENTS (units); i++)
    if (strcmp (end, units[i].suffix) == 0)
      {
        double b = v * units[i].mult;
        if (b > 1.8e19 || b != floor (b))
          {
            g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                         "%s: '%s' is not a whole number of bytes", what, text);
            return FALSE;
          }
        *out_bytes = (guint64) b;
        return TRUE;
      }
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
               "%s: unknown unit '%s' in '%s' (use B, KiB, MiB, GiB, kB, MB, GB)",
               what, end, text);
  return FALSE;
}

char *
ps_format_bytes (double bytes)
{
  static const char *names[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
  int i = 0;
  double v = bytes;
  while (fabs (v) >= 1024.0 && i < 5)
    {
      v /= 1024.0;
      i++;
    }
  if (i == 0)
    return g_strdup_printf ("%.0f B", v);
  return g_strdup_printf ("%.2f %s", v, names[i]);
}

char *
ps_format_seconds (double s)
{
  double a = fabs (s);
  /* Less than the last digit shown is "0 s", not "0.0 ns" (which reads as a
   * measured value; idle times are means that rounding leaves at 1e-14). */
  if (a < 0.05e-9)
    return g_strdup ("0 s");
  if (a >= 1.0)
    return g_strdup_printf ("%.3f s", s);
  if (a >= 1e-3)
    return g_strdup_printf ("%.3f ms", s * 1e3);
  if (a >= 1e-6)
    return g_strdup_printf ("%.3f us", s * 1e6);
  return g_strdup_printf ("%.1f ns", s * 1e9);
}

gboolean
ps_write_file_atomic (const char *path, const char *data, gsize len,
                      GError **error)
{
  return ps_output_write (path, data, len, error);
}

gboolean
ps_parse_name (const char *text, const char *const *names, int n, const char *option,
               const char *what, int *out, GError **error)
{
  for (int i = 0; i < n; i++)
    if (g_strcmp0 (text, names[i]) == 0)
      {
        *out = i;
        return TRUE;
      }
  GString *known = g_string_new (NULL);
  for (int i = 0; i < n; i++)
    g_string_append_printf (known, "%s%s", i ? ", " : "", names[i]);
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: unknown %s '%s' (%s)", option, what, text ? text : "",
               known->str);
  g_string_free (known, TRUE);
  return FALSE;
}

int64_t
ps_gcd64 (int64_t a, int64_t b)
{
  while (b)
    {
      int64_t t = a % b;
      a = b;
      b = t;
    }
  return a;
}

gboolean
ps_progress_on (gboolean quiet)
{
  if (quiet)
    return FALSE;
  const char *env = g_getenv ("PODSIM_PROGRESS");
  return isatty (2) || (env && strcmp (env, "1") == 0);
}

void
ps_progress (gboolean on, const char *fmt, ...)
{
  /* a terminal redraws the line; a log would fill with every update */
  static gint64 last_us;
  if (!on)
    return;
  if (!fmt)
    {
      fputs ("\r\033[K", stderr);
      fflush (stderr);
      last_us = 0;
      return;
    }
  gint64 now = g_get_monotonic_time ();
  if (last_us && now - last_us < 200000)
    return;
  last_us = now;
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *text = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  fprintf (stderr, "\r\033[K%s", text);
  fflush (stderr);
}

/* Hardware file loader: a strict GKeyFile reader driven by one schema table.
 *
 * GKeyFile reports neither line numbers nor unknown keys, so the text is first
 * scanned line by line: that pass rejects malformed lines, unknown sections,
 * unknown keys and duplicates with FILE:LINE:COL, and remembers the line and column of every
 * key so that value errors found later can point at it too. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "common/error.h"
#include "topology/hardware.h"

/* Generated at build time from topology/tpu-v3.ini (see topology/hardware.mk). */
extern const char ps_hardware_tpu_v3_ini[];

typedef enum {
  FIELD_STRING,
  FIELD_DOUBLE_POS,    /* > 0 */
  FIELD_DOUBLE_NONNEG, /* >= 0 */
  FIELD_INT_POS,       /* integer >= 1 */
  FIELD_INT_NONNEG,    /* integer >= 0 */
  FIELD_BYTES,         /* byte size > 0, suffixes allowed */
  FIELD_BOOL,
} FieldType;

typedef struct {
  const char *section;
  const char *key;
  FieldType type;
  gsize offset;
} Field;

#define F(sec, key, type, member) { sec, key, type, G_STRUCT_OFFSET (PsHardware, member) }

static const Field fields[] = {
  F ("chip", "name", FIELD_STRING, name),
  F ("chip", "clock_hz", FIELD_DOUBLE_POS, clock_hz),
  F ("chip", "tensorcores_per_chip", FIELD_INT_POS, tensorcores_per_chip),
  F ("mxu", "mxus_per_core", FIELD_INT_POS, mxus_per_core),
  F ("mxu", "rows", FIELD_INT_POS, mxu_rows),
  F ("mxu", "cols", FIELD_INT_POS, mxu_cols),
  F ("mxu", "weight_load_cycles", FIELD_INT_NONNEG, mxu_weight_load_cycles),
  F ("mxu", "weight_double_buffered", FIELD_BOOL, mxu_weight_double_buffered),
  F ("mxu", "fill_drain_cycles", FIELD_INT_NONNEG, mxu_fill_drain_cycles),
  F ("mxu", "f32_passes_default", FIELD_INT_POS, f32_passes[PS_MXU_PRECISION_DEFAULT]),
  F ("mxu", "f32_passes_high", FIELD_INT_POS, f32_passes[PS_MXU_PRECISION_HIGH]),
  F ("mxu", "f32_passes_highest", FIELD_INT_POS, f32_passes[PS_MXU_PRECISION_HIGHEST]),
  F ("vector", "lanes", FIELD_INT_POS, vector_lanes),
  F ("vector", "sublanes", FIELD_INT_POS, vector_sublanes),
  F ("vector", "alus", FIELD_INT_POS, vector_alus),
  F ("vector", "transcendental_ops", FIELD_INT_POS, vector_transcendental_ops),
  F ("vector", "vmem_bytes", FIELD_BYTES, vmem_bytes),
  F ("memory", "hbm_bytes_per_core", FIELD_BYTES, hbm_bytes_per_core),
  F ("memory", "hbm_bw_bytes_per_s_per_core", FIELD_DOUBLE_POS, hbm_bw_bytes_per_s),
  F ("ici", "links_per_chip", FIELD_INT_POS, ici_links_per_chip),
  F ("ici", "link_bw_bytes_per_s", FIELD_DOUBLE_POS, ici_link_bw_bytes_per_s),
  F ("ici", "hop_latency_s", FIELD_DOUBLE_NONNEG, ici_hop_latency_s),
  F ("onchip", "bw_bytes_per_s", FIELD_DOUBLE_POS, onchip_bw_bytes_per_s),
  F ("onchip", "latency_s", FIELD_DOUBLE_NONNEG, onchip_latency_s),
  F ("overhead", "per_op_s", FIELD_DOUBLE_NONNEG, per_op_overhead_s),
  F ("overhead", "collective_launch_s", FIELD_DOUBLE_NONNEG, collective_launch_overhead_s),
};

#undef F

static const char *const sections[] = { "chip", "mxu", "vector", "memory", "ici",
                                        "onchip", "overhead" };

static gboolean
is_section (const char *name)
{
  for (gsize i = 0; i < G_N_ELEMENTS (sections); i++)
    if (strcmp (sections[i], name) == 0)
      return TRUE;
  return FALSE;
}

/* A value key, or its "<key>_source" companion. */
static gboolean
is_key (const char *section, const char *key)
{
  for (gsize i = 0; i < G_N_ELEMENTS (fields); i++)
    {
      if (strcmp (fields[i].section, section) != 0)
        continue;
      gsize n = strlen (fields[i].key);
      if (strncmp (fields[i].key, key, n) == 0
          && (key[n] == '\0' || strcmp (key + n, "_source") == 0))
        return TRUE;
    }
  return FALSE;
}

static char *
known_keys (const char *section)
{
  GString *s = g_string_new (NULL);
  for (gsize i = 0; i < G_N_ELEMENTS (fields); i++)
    if (strcmp (fields[i].section, section) == 0)
      g_string_append_printf (s, "%s%s", s->len ? ", " : "", fields[i].key);
  return g_string_free (s, FALSE);
}

static char *
line_key (const char *section, const char *key)
{
  return g_strconcat (section, "\n", key, NULL);
}

/* Where an entry stands: its line and the 1-based column of its value (of
 * the '[' for a section), so that an error points at the text to change. */
typedef struct {
  int line, col;
} LinePos;

static gpointer
line_pos (int line, int col)
{
  LinePos *p = g_new (LinePos, 1);
  p->line = line;
  p->col = col;
  return p;
}

/* The line-level pass. Fills `lines` with "section\nkey" -> LinePos of
 * the value and "section" -> LinePos of the header. */
static gboolean
scan_lines (const char *text, gsize len, const char *file, GHashTable *lines,
            GError **error)
{
  g_autofree char *copy = g_strndup (text, len);
  char **all = g_strsplit (copy, "\n", -1);
  g_autofree char *section = NULL;
  gboolean ok = TRUE;
  for (int i = 0; all[i] && ok; i++)
    {
      int lineno = i + 1;
      /* g_strstrip moves the text to the start: columns count from here. */
      int lead = 0;
      while (g_ascii_isspace (all[i][lead]))
        lead++;
      int col = lead + 1;
      char *line = g_strstrip (all[i]);
      if (*line == '\0' || *line == '#')
        continue;
      if (*line == '[')
        {
          gsize n = strlen (line);
          if (line[n - 1] != ']' || n < 3)
            {
              ps_set_error_at (error, PS_ERROR_PARSE, file, lineno, col,
                               "malformed section header '%s'", line);
              ok = FALSE;
              break;
            }
          g_free (section);
          section = g_strndup (line + 1, n - 2);
          if (!is_section (section))
            {
              g_autofree char *known = g_strjoinv (", ", (char **) sections);
              ps_set_error_at (error, PS_ERROR_PARSE, file, lineno, col,
                               "unknown section [%s] (known: %s)", section, known);
              ok = FALSE;
              break;
            }
          if (g_hash_table_contains (lines, section))
            {
              ps_set_error_at (error, PS_ERROR_PARSE, file, lineno, col,
                               "section [%s] appears twice", section);
              ok = FALSE;
              break;
            }
          g_hash_table_insert (lines, g_strdup (section), line_pos (lineno, col));
          continue;
        }
      char *eq = strchr (line, '=');
      if (eq == NULL)
        {
          ps_set_error_at (error, PS_ERROR_PARSE, file, lineno, col,
                           "expected 'key = value', '[section]' or '# comment', got '%s'",
                           line);
          ok = FALSE;
          break;
        }
      const char *value = eq + 1;
      while (g_ascii_isspace (*value))
        value++;
      int value_col = col + (int) (value - line);
      *eq = '\0';
      const char *key = g_strstrip (line);
      if (section == NULL)
        {
          ps_set_error_at (error, PS_ERROR_PARSE, file, lineno, col,
                           "key '%s' before the first [section]", key);
          ok = FALSE;
          break;
        }
      if (*key == '\0' || !is_key (section, key))
        {
          g_autofree char *known = known_keys (section);
          ps_set_error_at (error, PS_ERROR_PARSE, file, lineno, col,
                           "unknown key '%s' in [%s] (known: %s, each with an optional _source)",
                           key, section, known);
          ok = FALSE;
          break;
        }
      char *lk = line_key (section, key);
      if (g_hash_table_contains (lines, lk))
        {
          ps_set_error_at (error, PS_ERROR_PARSE, file, lineno, col,
                           "key '%s' appears twice in [%s]", key, section);
          g_free (lk);
          ok = FALSE;
          break;
        }
      g_hash_table_insert (lines, lk, line_pos (lineno, value_col));
    }
  g_strfreev (all);
  return ok;
}

/* Sets an error about `field` at its line, or without a line. */
static void G_GNUC_PRINTF (5, 6)
field_error (GError **error, const char *file, GHashTable *lines, const Field *field,
             const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *what = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_autofree char *lk = line_key (field->section, field->key);
  const LinePos *at = g_hash_table_lookup (lines, lk);
  if (at)
    ps_set_error_at (error, PS_ERROR_PARSE, file, at->line, at->col, "[%s] %s: %s", field->section,
                     field->key, what);
  else
    g_set_error (error, PS_ERROR, PS_ERROR_PARSE, "%s: key [%s] %s: %s", file,
                 field->section, field->key, what);
}

/* Bounds beyond the sign, by unit (doc/hardware.md): a value far outside any
 * machine is a typo, and would make simulated times infinite (1e308 s per
 * op, 1e-300 B/s) or device counts overflow. */
static void
field_bounds (const Field *f, double *lo, double *hi)
{
  const char *k = f->key;
  *lo = -INFINITY;
  *hi = INFINITY;
  if (g_str_has_suffix (k, "_hz"))
    *lo = 1e3, *hi = 1e12;
  else if (strstr (k, "bytes_per_s") != NULL)
    *lo = 1e3, *hi = 1e15;
  else if (g_str_has_suffix (k, "_s"))
    *hi = 1.0;
  else if (f->type == FIELD_BYTES)
    *hi = 0x1p50; /* 1 PiB */
  else if (strcmp (k, "tensorcores_per_chip") == 0)
    *hi = 64;
  else if (f->type == FIELD_INT_POS || f->type == FIELD_INT_NONNEG)
    *hi = 1e6;
}

static gboolean
in_bounds (const Field *field, double v, const char *value, const char *file,
           GHashTable *lines, GError **error)
{
  double lo, hi;
  field_bounds (field, &lo, &hi);
  if (v >= lo && v <= hi)
    return TRUE;
  if (lo == -INFINITY)
    field_error (error, file, lines, field, "must be at most %g, got %s", hi, value);
  else
    field_error (error, file, lines, field, "must be between %g and %g, got %s", lo, hi, value);
  return FALSE;
}

static gboolean
parse_field (GKeyFile *kf, const Field *field, PsHardware *hw, const char *file,
             GHashTable *lines, GError **error)
{
  char *base = (char *) hw + field->offset;
  if (!g_key_file_has_key (kf, field->section, field->key, NULL))
    {
      field_error (error, file, lines, field, "missing (every key of the bundled tpu-v3.ini is required)");
      return FALSE;
    }
  if (field->type == FIELD_STRING)
    {
      GError *local = NULL;
      char *s = g_key_file_get_string (kf, field->section, field->key, &local);
      if (!s)
        {
          field_error (error, file, lines, field, "%s", local->message);
          g_error_free (local);
          return FALSE;
        }
      *(char **) base = g_strstrip (s);
      return TRUE;
    }
  g_autofree char *raw = g_key_file_get_value (kf, field->section, field->key, NULL);
  char *value = g_strstrip (raw);
  if (*value == '\0')
    {
      field_error (error, file, lines, field, "empty value");
      return FALSE;
    }
  switch (field->type)
    {
    case FIELD_BOOL:
      if (strcmp (value, "true") == 0)
        *(gboolean *) base = TRUE;
      else if (strcmp (value, "false") == 0)
        *(gboolean *) base = FALSE;
      else
        {
          field_error (error, file, lines, field, "'%s' is not true or false", value);
          return FALSE;
        }
      return TRUE;
    case FIELD_BYTES:
      {
        GError *local = NULL;
        guint64 bytes = 0;
        if (!ps_parse_bytes (value, "size", &bytes, &local))
          {
            field_error (error, file, lines, field, "%s", local->message + strlen ("size: "));
            g_error_free (local);
            return FALSE;
          }
        if (bytes == 0)
          {
            field_error (error, file, lines, field, "must be positive, got %s", value);
            return FALSE;
          }
        if (!in_bounds (field, (double) bytes, value, file, lines, error))
          return FALSE;
        *(guint64 *) base = bytes;
        return TRUE;
      }
    default:
      break;
    }
  char *end = NULL;
  errno = 0;
  double v = g_ascii_strtod (value, &end);
  if (end == value || *end != '\0' || errno != 0 || !isfinite (v))
    {
      field_error (error, file, lines, field, "'%s' is not a number", value);
      return FALSE;
    }
  gboolean integer = field->type == FIELD_INT_POS || field->type == FIELD_INT_NONNEG;
  if (integer && (v != floor (v) || fabs (v) > 1e9))
    {
      field_error (error, file, lines, field, "'%s' is not a whole number up to 1e9", value);
      return FALSE;
    }
  gboolean positive = field->type == FIELD_INT_POS || field->type == FIELD_DOUBLE_POS;
  if (positive ? !(v > 0) : !(v >= 0))
    {
      field_error (error, file, lines, field, "must be %s, got %s",
                   positive ? "positive" : "zero or positive", value);
      return FALSE;
    }
  if (!in_bounds (field, v, value, file, lines, error))
    return FALSE;
  if (integer)
    *(int *) base = (int) v;
  else
    *(double *) base = v;
  return TRUE;
}

PsHardware *
ps_hardware_load_data (const char *text, gsize len, const char *display_name,
                       GError **error)
{
  g_return_val_if_fail (text != NULL, NULL);
  const char *file = display_name ? display_name : "<hardware>";
  if (memchr (text, '\0', len) != NULL || !g_utf8_validate (text, (gssize) len, NULL))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_PARSE,
                   "%s: not a text file (NUL byte or invalid UTF-8)", file);
      return NULL;
    }
  /* Editors on some systems prepend a byte-order mark; it is not content. */
  if (len >= 3 && memcmp (text, "\xef\xbb\xbf", 3) == 0)
    {
      text += 3;
      len -= 3;
    }
  g_autoptr (GHashTable) lines = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  if (!scan_lines (text, len, file, lines, error))
    return NULL;
  g_autoptr (GKeyFile) kf = g_key_file_new ();
  GError *local = NULL;
  if (!g_key_file_load_from_data (kf, text, len, G_KEY_FILE_NONE, &local))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_PARSE, "%s: %s", file, local->message);
      g_error_free (local);
      return NULL;
    }
  for (gsize i = 0; i < G_N_ELEMENTS (sections); i++)
    if (!g_key_file_has_group (kf, sections[i]))
      {
        g_set_error (error, PS_ERROR, PS_ERROR_PARSE, "%s: section [%s]: missing", file,
                     sections[i]);
        return NULL;
      }
  PsHardware *hw = g_new0 (PsHardware, 1);
  for (gsize i = 0; i < G_N_ELEMENTS (fields); i++)
    if (!parse_field (kf, &fields[i], hw, file, lines, error))
      {
        ps_hardware_free (hw);
        return NULL;
      }
  /* Orders that no single key can violate on its own. */
  const Field *passes = NULL;
  for (gsize i = 0; i < G_N_ELEMENTS (fields); i++)
    if (strcmp (fields[i].key, "f32_passes_highest") == 0)
      passes = &fields[i];
  if (hw->f32_passes[PS_MXU_PRECISION_DEFAULT] > hw->f32_passes[PS_MXU_PRECISION_HIGH]
      || hw->f32_passes[PS_MXU_PRECISION_HIGH] > hw->f32_passes[PS_MXU_PRECISION_HIGHEST])
    {
      field_error (error, file, lines, passes,
                   "pass counts must not decrease from default to high to highest");
      ps_hardware_free (hw);
      return NULL;
    }
  return hw;
}

PsHardware *
ps_hardware_load (const char *path, GError **error)
{
  g_return_val_if_fail (path != NULL, NULL);
  g_autofree char *text = NULL;
  gsize len = 0;
  if (!ps_read_text_file (path, PS_MAX_HW_FILE_BYTES, &text, &len, error))
    return NULL;
  return ps_hardware_load_data (text, len, path, error);
}

const char *
ps_hardware_default_text (void)
{
  return ps_hardware_tpu_v3_ini;
}

PsHardware *
ps_hardware_default (void)
{
  GError *error = NULL;
  PsHardware *hw = ps_hardware_load_data (ps_hardware_tpu_v3_ini,
                                          strlen (ps_hardware_tpu_v3_ini),
                                          "tpu-v3.ini (built in)", &error);
  /* The embedded file is checked by tests/check_hardware; failing here is a
   * build defect, not a user error. */
  if (hw == NULL)
    g_error ("bundled hardware file is invalid: %s", error->message);
  return hw;
}

const PsParamSpec ps_hardware_param_hw = {
  .section = "slice", .key = "hw", .type = PS_PARAM_PATH, .def = "",
  .doc = "Hardware file (empty: the bundled TPU v3, topology/tpu-v3.ini)"
};

PsHardware *
ps_hardware_load_or_default (const char *path, GError **error)
{
  return path ? ps_hardware_load (path, error) : ps_hardware_default ();
}

PsHardware *
ps_hardware_copy (const PsHardware *hw)
{
  g_return_val_if_fail (hw != NULL, NULL);
  PsHardware *copy = g_memdup2 (hw, sizeof *hw);
  copy->name = g_strdup (hw->name);
  return copy;
}

void
ps_hardware_free (PsHardware *hw)
{
  if (hw == NULL)
    return;
  g_free (hw->name);
  g_free (hw);
}

double
ps_hardware_peak_flops_per_core (const PsHardware *hw)
{
  return 2.0 * hw->mxus_per_core * hw->mxu_rows * hw->mxu_cols * hw->clock_hz;
}

int
ps_hardware_mxu_passes (const PsHardware *hw, gboolean f32_operands, PsMxuPrecision precision)
{
  g_return_val_if_fail (precision <= PS_MXU_PRECISION_HIGHEST, 1);
  return f32_operands ? hw->f32_passes[precision] : 1;
}

static const char *const precision_names[] = { "default", "high", "highest" };

const char *
ps_precision_name (PsMxuPrecision precision)
{
  g_return_val_if_fail (precision <= PS_MXU_PRECISION_HIGHEST, "?");
  return precision_names[precision];
}

gboolean
ps_precision_parse (const char *name, PsMxuPrecision *out)
{
  for (gsize i = 0; i < G_N_ELEMENTS (precision_names); i++)
    if (g_ascii_strcasecmp (name, precision_names[i]) == 0)
      {
        *out = (PsMxuPrecision) i;
        return TRUE;
      }
  return FALSE;
}

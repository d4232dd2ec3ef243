/* Studies of many configurations: see study.h. */
#include "config.h"

#include "driver/study.h"

#include <json-glib/json-glib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/checked.h"
#include "common/error.h"

struct PsStudy {
  PsParams *base;
  GPtrArray *keys;           /* char*, canonical keys */
  /* The grid, never expanded: configuration id < n_grid takes value
   * (id / stride[k]) % axes[k]->len of key k, so a grid of millions costs
   * its value lists, not an argv or a row per configuration. */
  GPtrArray **axes;          /* per key: char*, as the model file writes them; NULL: no grid */
  guint64 *stride;
  guint64 n_grid;
  GPtrArray *values;         /* configurations after the grid (ps_study_add): char** (n_keys) */
  char *base_path;
};

void
ps_study_row_free (PsStudyRow *r)
{
  if (!r)
    return;
  g_free (r->unit);
  g_free (r->model);
  g_free (r->error);
  g_free (r);
}

PsStudy *
ps_study_new (const PsParams *base, const char *const *keys)
{
  PsStudy *s = g_new0 (PsStudy, 1);
  s->base = ps_params_copy (base);
  s->keys = g_ptr_array_new_with_free_func (g_free);
  for (int i = 0; keys && keys[i]; i++)
    {
      const PsParamSpec *spec = ps_model_family_find_spec (ps_params_family (base), keys[i]);
      g_return_val_if_fail (spec != NULL, s);
      g_ptr_array_add (s->keys, g_strdup (spec->key));
    }
  s->values = g_ptr_array_new_with_free_func ((GDestroyNotify) g_strfreev);
  return s;
}

void
ps_study_free (PsStudy *s)
{
  if (!s)
    return;
  ps_params_free (s->base);
  for (guint k = 0; s->axes && k < s->keys->len; k++)
    g_ptr_array_free (s->axes[k], TRUE);
  g_free (s->axes);
  g_free (s->stride);
  g_ptr_array_free (s->keys, TRUE);
  g_ptr_array_free (s->values, TRUE);
  g_free (s->base_path);
  g_free (s);
}

const PsParams *
ps_study_base (const PsStudy *s)
{
  return s->base;
}

guint
ps_study_n_keys (const PsStudy *s)
{
  return s->keys->len;
}

const char *
ps_study_key (const PsStudy *s, guint k)
{
  return s->keys->pdata[k];
}

guint
ps_study_n_configs (const PsStudy *s)
{
  return (guint) s->n_grid + s->values->len;
}

const char *
ps_study_value (const PsStudy *s, guint id, guint k)
{
  if (id < s->n_grid)
    return s->axes[k]->pdata[(id / s->stride[k]) % s->axes[k]->len];
  return ((char **) s->values->pdata[id - s->n_grid])[k];
}

/* Rows are UTF-8 (a JSONL line that is not cannot be read back by --resume)
 * and so is a child's command line, which GLib converts: a value that is
 * not is refused before anything runs. */
static gboolean
value_is_text (const char *v, const char *where, GError **error)
{
  if (g_utf8_validate (v, -1, NULL))
    return TRUE;
  g_autofree char *shown = g_strescape (v, NULL);
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: '%s' is not UTF-8 text (bytes shown as octal escapes): "
               "a sweep writes its rows and its runs' options as UTF-8", where, shown);
  return FALSE;
}

gboolean
ps_study_add (PsStudy *s, const char *const *values, const char *where, guint *id, GError **error)
{
  g_autoptr (PsParams) p = ps_params_copy (s->base);
  char **v = g_new0 (char *, s->keys->len + 1);
  for (guint k = 0; k < s->keys->len; k++)
    {
      g_autofree char *w = g_strdup_printf ("%s %s", where, (char *) s->keys->pdata[k]);
      if (!value_is_text (values[k], w, error) || !ps_params_set (p, s->keys->pdata[k], values[k], w, error))
        {
          g_strfreev (v);
          return FALSE;
        }
      /* Stored as the model file writes it, so equal settings compare equal. */
      v[k] = ps_params_text (p, s->keys->pdata[k]);
    }
  if (id)
    *id = ps_study_n_configs (s);
  g_ptr_array_add (s->values, v);
  return TRUE;
}

gboolean
ps_study_add_grid (PsStudy *s, GPtrArray *const *values, const char *const *where, guint64 max, GError **error)
{
  guint nk = s->keys->len;
  g_return_val_if_fail (s->axes == NULL && s->values->len == 0, FALSE);
  /* Counted and checked value by value; no combination is made. */
  guint64 n = 1;
  GPtrArray **axes = g_new0 (GPtrArray *, nk + 1);
  for (guint k = 0; k < nk; k++)
    {
      g_autoptr (PsParams) p = ps_params_copy (s->base);
      axes[k] = g_ptr_array_new_full (values[k]->len, g_free);
      for (guint i = 0; i < values[k]->len; i++)
        {
          if (!value_is_text (values[k]->pdata[i], where[k], error)
              || !ps_params_set (p, s->keys->pdata[k], values[k]->pdata[i], where[k], error))
            goto fail;
          /* Stored as the model file writes it, so equal settings compare equal. */
          g_ptr_array_add (axes[k], ps_params_text (p, s->keys->pdata[k]));
        }
      n *= values[k]->len;
      if (n > max)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "more than %" G_GUINT64_FORMAT " combinations", max);
          goto fail;
        }
    }
  if (n > G_MAXUINT)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "more than %u combinations", G_MAXUINT);
      goto fail;
    }
  s->stride = g_new0 (guint64, nk + 1);
  for (int k = (int) nk - 1; k >= 0; k--)
    s->stride[k] = k == (int) nk - 1 ? 1 : s->stride[k + 1] * axes[k + 1]->len;
  s->axes = axes;
  s->n_grid = n;
  return TRUE;
fail:
  for (guint k = 0; k < nk; k++)
    if (axes[k])
      g_ptr_array_free (axes[k], TRUE);
  g_free (axes);
  return FALSE;
}

PsParams *
ps_study_params (const PsStudy *s, guint id)
{
  PsParams *p = ps_params_copy (s->base);
  for (guint k = 0; k < s->keys->len; k++)
    if (!ps_params_set (p, s->keys->pdata[k], ps_study_value (s, id, k), "--set", NULL))
      g_assert_not_reached ();
  return p;
}

const char *
ps_study_write_base (PsStudy *s, const char *dir, const char *name, GError **error)
{
  if (s->base_path)
    return s->base_path;
  g_autofree char *file = g_strdup_printf ("%s.ini", name && *name ? name : "base");
  g_strcanon (file, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-", '_');
  g_autofree char *path = g_build_filename (dir, file, NULL);
  g_autofree char *text = ps_params_print (s->base, "The base configuration of a podsim study; each run "
                                           "sets the varied keys on top");
  if (!ps_write_file_atomic (path, text, strlen (text), error))
    return NULL;
  s->base_path = g_steal_pointer (&path);
  return s->base_path;
}

const char *
ps_study_exe (void)
{
  static char *exe;
  if (!exe)
    {
      exe = g_file_read_link ("/proc/self/exe", NULL);
      if (!exe)
        exe = g_strdup ("/proc/self/exe");
    }
  return exe;
}

char **
ps_study_child_argv (const PsStudy *s, guint id, const char *const *extra)
{
  g_return_val_if_fail (s->base_path != NULL, NULL);
  GPtrArray *a = g_ptr_array_new ();
  g_ptr_array_add (a, g_strdup (ps_study_exe ()));
  g_ptr_array_add (a, g_strdup ("run"));
  g_ptr_array_add (a, g_strdup ("--config"));
  g_ptr_array_add (a, g_strdup (s->base_path));
  for (guint k = 0; k < s->keys->len; k++)
    g_ptr_array_add (a, g_strdup_printf ("--set=%s=%s", (char *) s->keys->pdata[k], ps_study_value (s, id, k)));
  g_ptr_array_add (a, g_strdup ("--json"));
  g_ptr_array_add (a, g_strdup ("-q"));
  for (int i = 0; extra && extra[i]; i++)
    g_ptr_array_add (a, g_strdup (extra[i]));
  g_ptr_array_add (a, NULL);
  return (char **) g_ptr_array_free (a, FALSE);
}

static double
member_double (JsonObject *o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);
  return n && JSON_NODE_HOLDS_VALUE (n) ? json_node_get_double (n) : 0;
}

static char *
member_string (JsonObject *o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);
  return n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING
           ? g_strdup (json_node_get_string (n)) : NULL;
}

/* The last non-empty line of a child's stderr, without "podsim: ". */
static char *
last_error_line (const char *err)
{
  g_auto (GStrv) lines = g_strsplit (err, "\n", -1);
  for (int i = (int) g_strv_length (lines) - 1; i >= 0; i--)
    {
      /* Progress lines end in "\r\033[K": keep what follows the last \r. */
      char *l = strrchr (lines[i], '\r') ? strrchr (lines[i], '\r') + 1 : lines[i];
      if (g_str_has_prefix (l, "\033[K"))
        l += 3;
      g_strstrip (l);
      if (*l)
        return g_strdup (g_str_has_prefix (l, "podsim: ") ? l + 8 : l);
    }
  return NULL;
}

PsStudyRow *
ps_study_row_from_result (const PsPoolResult *r, guint id)
{
  PsStudyRow *row = g_new0 (PsStudyRow, 1);
  row->id = id;
  row->wall_s = r->wall_s;
  g_autoptr (JsonParser) parser = json_parser_new ();
  const char *brace = strchr (r->out, '{');
  if (brace && json_parser_load_from_data (parser, brace, -1, NULL)
      && JSON_NODE_HOLDS_OBJECT (json_parser_get_root (parser)))
    {
      JsonObject *o = json_node_get_object (json_parser_get_root (parser));
      row->ran = TRUE;
      row->fits = json_object_has_member (o, "fits") && json_object_get_boolean_member (o, "fits");
      row->step_time_s = member_double (o, "step_time_s");
      row->throughput_per_s = member_double (o, "throughput_per_s");
      row->mxu_utilization = member_double (o, "mxu_utilization");
      row->model_flops_utilization = member_double (o, "model_flops_utilization");
      row->peak_hbm_bytes = member_double (o, "peak_hbm_bytes");
      row->compute_s = member_double (o, "compute_s");
      row->communication_s = member_double (o, "communication_s");
      row->exposed_communication_s = member_double (o, "exposed_communication_s");
      row->idle_s = member_double (o, "idle_s");
      row->unit = member_string (o, "throughput_unit");
      row->model = member_string (o, "model");
      row->error = member_string (o, "error");
    }
  if (!row->ran || (r->exited && r->exit_status != 0 && !row->error))
    {
      if (!r->exited)
        row->error = g_strdup_printf ("killed by signal %d%s", r->term_signal,
                                      r->term_signal == 9 ? " (out of memory?)" : "");
      else
        {
          row->error = last_error_line (r->err);
          if (!row->error)
            row->error = g_strdup_printf ("exit status %d without a result", r->exit_status);
        }
    }
  return row;
}

/* ---- rows as text --------------------------------------------------------------- */

static const char *const result_columns[] = {
  "model", "fits", "step_time_s", "throughput_per_s", "throughput_unit", "mxu_utilization",
  "model_flops_utilization", "peak_hbm_bytes", "compute_s", "communication_s",
  "exposed_communication_s", "idle_s", "error", NULL
};

void
ps_study_csv_field (GString *out, const char *v)
{
  if (out->len && out->str[out->len - 1] != '\n')
    g_string_append_c (out, ',');
  if (!v)
    return;
  if (strpbrk (v, ",\"\n\r"))
    {
      g_string_append_c (out, '"');
      for (const char *p = v; *p; p++)
        {
          if (*p == '"')
            g_string_append_c (out, '"');
          g_string_append_c (out, *p);
        }
      g_string_append_c (out, '"');
    }
  else
    g_string_append (out, v);
}

char *
ps_study_header (const PsStudy *s, PsStudyFormat f)
{
  if (f == PS_STUDY_JSONL)
    return g_strdup ("");
  GString *out = g_string_new ("id");
  for (guint k = 0; k < s->keys->len; k++)
    ps_study_csv_field (out, s->keys->pdata[k]);
  for (int i = 0; result_columns[i]; i++)
    ps_study_csv_field (out, result_columns[i]);
  g_string_append_c (out, '\n');
  return g_string_free (out, FALSE);
}

static char *
num (double v)
{
  return g_strdup_printf ("%.9g", v);
}

/* A string member, or null. JSON text is UTF-8 and json-glib writes a
 * string's bytes as they are: an error quoting a file name in another
 * encoding would make a line --resume cannot read back (fuzz_rows found
 * it), so invalid bytes become U+FFFD. */
static void
add_text (JsonBuilder *b, const char *v)
{
  if (!v)
    {
      json_builder_add_null_value (b);
      return;
    }
  g_autofree char *valid = g_utf8_make_valid (v, -1);
  json_builder_add_string_value (b, valid);
}

char *
ps_study_format_row (const PsStudy *s, const PsStudyRow *r, PsStudyFormat f)
{
  gboolean sim = r->ran && r->fits && r->step_time_s > 0;
  if (f == PS_STUDY_CSV)
    {
      GString *out = g_string_new (NULL);
      g_string_append_printf (out, "%u", r->id);
      for (guint k = 0; k < s->keys->len; k++)
        ps_study_csv_field (out, ps_study_value (s, r->id, k));
      ps_study_csv_field (out, r->model);
      ps_study_csv_field (out, r->ran ? (r->fits ? "true" : "false") : NULL);
      double v[] = { r->step_time_s, r->throughput_per_s };
      for (gsize i = 0; i < G_N_ELEMENTS (v); i++)
        {
          g_autofree char *t = sim ? num (v[i]) : NULL;
          ps_study_csv_field (out, t);
        }
      ps_study_csv_field (out, sim ? r->unit : NULL);
      double w[] = { r->mxu_utilization, r->model_flops_utilization };
      for (gsize i = 0; i < G_N_ELEMENTS (w); i++)
        {
          g_autofree char *t = sim ? num (w[i]) : NULL;
          ps_study_csv_field (out, t);
        }
      g_autofree char *peak = r->ran ? g_strdup_printf ("%.0f", r->peak_hbm_bytes) : NULL;
      ps_study_csv_field (out, peak);
      double x[] = { r->compute_s, r->communication_s, r->exposed_communication_s, r->idle_s };
      for (gsize i = 0; i < G_N_ELEMENTS (x); i++)
        {
          g_autofree char *t = sim ? num (x[i]) : NULL;
          ps_study_csv_field (out, t);
        }
      ps_study_csv_field (out, r->error);
      g_string_append_c (out, '\n');
      return g_string_free (out, FALSE);
    }
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "id");
  json_builder_add_int_value (b, r->id);
  json_builder_set_member_name (b, "inputs");
  json_builder_begin_object (b);
  for (guint k = 0; k < s->keys->len; k++)
    {
      json_builder_set_member_name (b, s->keys->pdata[k]);
      json_builder_add_string_value (b, ps_study_value (s, r->id, k));
    }
  json_builder_end_object (b);
  struct { const char *name; double v; gboolean when; } d[] = {
    { "step_time_s", r->step_time_s, sim }, { "throughput_per_s", r->throughput_per_s, sim },
    { "mxu_utilization", r->mxu_utilization, sim },
    { "model_flops_utilization", r->model_flops_utilization, sim },
    { "peak_hbm_bytes", r->peak_hbm_bytes, r->ran }, { "compute_s", r->compute_s, sim },
    { "communication_s", r->communication_s, sim },
    { "exposed_communication_s", r->exposed_communication_s, sim }, { "idle_s", r->idle_s, sim },
  };
  json_builder_set_member_name (b, "model");
  add_text (b, r->model);
  json_builder_set_member_name (b, "fits");
  if (r->ran)
    json_builder_add_boolean_value (b, r->fits);
  else
    json_builder_add_null_value (b);
  for (gsize i = 0; i < G_N_ELEMENTS (d); i++)
    {
      json_builder_set_member_name (b, d[i].name);
      if (d[i].when)
        json_builder_add_double_value (b, d[i].v);
      else
        json_builder_add_null_value (b);
      if (i == 1)
        {
          json_builder_set_member_name (b, "throughput_unit");
          add_text (b, sim ? r->unit : NULL);
        }
    }
  json_builder_set_member_name (b, "error");
  add_text (b, r->error);
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  g_autofree char *text = json_generator_to_data (gen, NULL);
  return g_strconcat (text, "\n", NULL);
}

/* The first n CSV fields of a line (quotes as csv_field writes them). */
static char **
csv_split (const char *line, guint n)
{
  GPtrArray *f = g_ptr_array_new ();
  const char *p = line;
  while (f->len < n)
    {
      GString *v = g_string_new (NULL);
      if (*p == '"')
        {
          p++;
          while (*p && !(*p == '"' && p[1] != '"'))
            {
              if (*p == '"')
                p++;
              g_string_append_c (v, *p++);
            }
          if (*p == '"')
            p++;
        }
      else
        while (*p && *p != ',' && *p != '\n')
          g_string_append_c (v, *p++);
      g_ptr_array_add (f, g_string_free (v, FALSE));
      if (*p != ',')
        break;
      p++;
    }
  g_ptr_array_add (f, NULL);
  return (char **) g_ptr_array_free (f, FALSE);
}

/* The error text a sweep records for a child that died without a result
 * from an interruption (a signal that stops runs, or a child's own SIGINT
 * handler exiting): such a row is not a result of its configuration. */
static gboolean
interruption_like (const char *err)
{
  if (g_str_has_prefix (err, "exit status ") && g_str_has_suffix (err, " without a result"))
    return TRUE;
  static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
  for (gsize i = 0; i < G_N_ELEMENTS (sigs); i++)
    {
      g_autofree char *t = g_strdup_printf ("killed by signal %d", sigs[i]);
      if (strcmp (err, t) == 0)
        return TRUE;
    }
  return FALSE;
}

gboolean
ps_study_parse_row (const PsStudy *s, const char *line, PsStudyFormat f, guint *id, char **no_result,
                    GError **error)
{
  guint64 i = G_MAXUINT64;
  g_auto (GStrv) fields = NULL;
  g_autoptr (JsonParser) parser = NULL;
  JsonObject *inputs = NULL;
  const char *err = NULL;
  gboolean ran = FALSE;
  guint n_fields = 1 + s->keys->len + (guint) (G_N_ELEMENTS (result_columns) - 1);
  if (f == PS_STUDY_CSV)
    {
      fields = csv_split (line, n_fields);
      if (g_strv_length (fields) == n_fields)
        {
          g_ascii_string_to_unsigned (fields[0], 10, 0, G_MAXUINT32, &i, NULL);
          ran = *fields[1 + s->keys->len + 1] != '\0';
          err = fields[n_fields - 1];
        }
    }
  else
    {
      /* json-glib recurses per level: a deep row would overflow the stack. */
      if (!ps_json_depth_ok (line, "row", 1, NULL))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_LIMIT, "JSON nested more than %d deep (doc/robustness.md)",
                       PS_MAX_NESTING);
          return FALSE;
        }
      parser = json_parser_new ();
      /* An empty or blank line parses, to no root at all (fuzz_rows). */
      if (json_parser_load_from_data (parser, line, -1, NULL) && json_parser_get_root (parser)
          && JSON_NODE_HOLDS_OBJECT (json_parser_get_root (parser)))
        {
          JsonObject *o = json_node_get_object (json_parser_get_root (parser));
          JsonNode *n = json_object_get_member (o, "id");
          JsonNode *in = json_object_get_member (o, "inputs");
          /* Only an integer id, as the sweep writes it ("0", 0.5 and true are not). */
          if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64
              && json_node_get_int (n) >= 0 && in && JSON_NODE_HOLDS_OBJECT (in))
            {
              i = (guint64) json_node_get_int (n);
              inputs = json_node_get_object (in);
            }
          JsonNode *fits = json_object_get_member (o, "fits");
          ran = fits && JSON_NODE_HOLDS_VALUE (fits) && json_node_get_value_type (fits) == G_TYPE_BOOLEAN;
          JsonNode *e = json_object_get_member (o, "error");
          if (e && JSON_NODE_HOLDS_VALUE (e) && json_node_get_value_type (e) == G_TYPE_STRING)
            err = json_node_get_string (e);
        }
    }
  if (i >= ps_study_n_configs (s))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_PARSE, "not a row of this study");
      return FALSE;
    }
  for (guint k = 0; k < s->keys->len; k++)
    {
      const char *have = NULL;
      if (fields)
        have = fields[1 + k];
      else
        {
          JsonNode *v = json_object_get_member (inputs, s->keys->pdata[k]);
          if (v && JSON_NODE_HOLDS_VALUE (v) && json_node_get_value_type (v) == G_TYPE_STRING)
            have = json_node_get_string (v);
        }
      if (g_strcmp0 (have, ps_study_value (s, (guint) i, k)) != 0)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_PARSE, "row %" G_GUINT64_FORMAT " has %s = %s, this study %s",
                       i, (char *) s->keys->pdata[k], have ? have : "nothing", ps_study_value (s, (guint) i, k));
          return FALSE;
        }
    }
  if (no_result)
    {
      *no_result = NULL;
      if (err && *err && interruption_like (err))
        *no_result = g_strdup_printf ("its error '%s' is an interruption's", err);
      else if (!ran && !(err && *err))
        *no_result = g_strdup ("it has neither a result nor an error");
    }
  *id = (guint) i;
  return TRUE;
}

void
ps_study_progress (const char *what, guint done, guint total, double elapsed_s)
{
  if (!isatty (2))
    return;
  if (done >= total)
    {
      fputs ("\r\033[K", stderr);
      return;
    }
  double rate = elapsed_s > 0 ? done / elapsed_s : 0;
  g_autofree char *eta = rate > 0 ? ps_format_duration ((total - done) / rate) : g_strdup ("?");
  g_autofree char *el = ps_format_duration (elapsed_s);
  fprintf (stderr, "\r\033[K%s: %u/%u done, %.1f/min, %s elapsed, ETA %s", what, done, total,
           rate * 60, el, eta);
  fflush (stderr);
}

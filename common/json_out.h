/* json_out.h: writing one flat JSON object with json-glib, as the --json
 * outputs of simulate, run and the bench commands do.
 *
 * Each of those wrote the same four member macros (a key, then an int, a
 * double, a string or a boolean) and the same five lines that close the
 * object and turn it into text; they live here once.  Header-only (static
 * inline), so common/ gains no link dependency: only the modules that already
 * use json-glib include it.
 *
 *   g_autoptr (JsonBuilder) b = json_builder_new ();
 *   json_builder_begin_object (b);
 *   ps_json_str (b, "slice", "v3-32");
 *   ps_json_dbl (b, "time_s", t);
 *   return ps_json_finish (b, FALSE);
 */
#ifndef PS_COMMON_JSON_OUT_H
#define PS_COMMON_JSON_OUT_H

#include <glib.h>
#include <json-glib/json-glib.h>

static inline void
ps_json_int (JsonBuilder *b, const char *key, gint64 v)
{
  json_builder_set_member_name (b, key);
  json_builder_add_int_value (b, v);
}

static inline void
ps_json_dbl (JsonBuilder *b, const char *key, double v)
{
  json_builder_set_member_name (b, key);
  json_builder_add_double_value (b, v);
}

static inline void
ps_json_str (JsonBuilder *b, const char *key, const char *v)
{
  json_builder_set_member_name (b, key);
  json_builder_add_string_value (b, v);
}

static inline void
ps_json_bool (JsonBuilder *b, const char *key, gboolean v)
{
  json_builder_set_member_name (b, key);
  json_builder_add_boolean_value (b, v);
}

/* KEY: an array of the N integers V. */
static inline void
ps_json_int_array (JsonBuilder *b, const char *key, int n, const gint64 *v)
{
  json_builder_set_member_name (b, key);
  json_builder_begin_array (b);
  for (int i = 0; i < n; i++)
    json_builder_add_int_value (b, v[i]);
  json_builder_end_array (b);
}

/* Ends B's open top-level object and returns the document's text, indented
 * when PRETTY (transfer full). */
static inline char *
ps_json_finish (JsonBuilder *b, gboolean pretty)
{
  json_builder_end_object (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  if (pretty)
    json_generator_set_pretty (gen, TRUE);
  json_generator_set_root (gen, root);
  return json_generator_to_data (gen, NULL);
}

#endif

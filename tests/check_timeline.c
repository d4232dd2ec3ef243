/* Timeline export: the JSON parses, has the trace-event structure Perfetto
 * expects (traceEvents, "X" events in microseconds, name metadata,
 * counters), escapes strings, and is deterministic. */
#include "config.h"

#include <check.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#include "traces/timeline.h"
#include "tests/suite_main.h"

static JsonArray *
parse_events (const char *json, JsonParser *parser)
{
  GError *error = NULL;
  ck_assert_msg (json_parser_load_from_data (parser, json, -1, &error), "%s",
                 error ? error->message : "");
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  ck_assert_str_eq (json_object_get_string_member (root, "displayTimeUnit"), "ms");
  return json_object_get_array_member (root, "traceEvents");
}

START_TEST (test_structure)
{
  g_autoptr (PsTimeline) tl = ps_timeline_new ();
  ps_timeline_set_process_name (tl, 3, "chip 3 (x1,y1)");
  ps_timeline_set_thread_name (tl, 3, 1, "core 1");
  const char *args[] = { "flops", "2.1e9", "quote", "a \"b\"\n\\", NULL };
  ps_timeline_add_complete (tl, 3, 1, "fusion.7", "compute", 2.5e-3, 1.25e-6, args);
  const char *keys[] = { "bytes", "nan" };
  double values[] = { 4096, NAN };
  ps_timeline_add_complete_num (tl, 3, 0, "all-reduce.1", "collective", 1e-3, 2e-3, 2, keys,
                                values);
  ps_timeline_add_counter (tl, 3, "hbm", "live_bytes", 0.0, 1.5e9);
  ck_assert_uint_eq (ps_timeline_n_events (tl), 3);

  g_autofree char *json = ps_timeline_to_json (tl, NULL);
  g_autoptr (JsonParser) parser = json_parser_new ();
  JsonArray *ev = parse_events (json, parser);
  ck_assert_uint_eq (json_array_get_length (ev), 5);
  /* metadata first: process name, then thread name */
  JsonObject *m0 = json_array_get_object_element (ev, 0);
  ck_assert_str_eq (json_object_get_string_member (m0, "ph"), "M");
  ck_assert_str_eq (json_object_get_string_member (m0, "name"), "process_name");
  ck_assert_str_eq (json_object_get_string_member (json_object_get_object_member (m0, "args"),
                                                   "name"), "chip 3 (x1,y1)");
  JsonObject *m1 = json_array_get_object_element (ev, 1);
  ck_assert_str_eq (json_object_get_string_member (m1, "name"), "thread_name");
  ck_assert_int_eq (json_object_get_int_member (m1, "tid"), 1);
  /* then by start time: the counter at 0, the collective at 1 ms, the fusion */
  JsonObject *c = json_array_get_object_element (ev, 2);
  ck_assert_str_eq (json_object_get_string_member (c, "ph"), "C");
  ck_assert (json_object_get_double_member (json_object_get_object_member (c, "args"),
                                            "live_bytes") == 1.5e9);
  JsonObject *x1 = json_array_get_object_element (ev, 3);
  ck_assert_str_eq (json_object_get_string_member (x1, "name"), "all-reduce.1");
  ck_assert (json_object_get_double_member (x1, "ts") == 1000.0);
  ck_assert (json_object_get_double_member (x1, "dur") == 2000.0);
  JsonObject *a1 = json_object_get_object_member (x1, "args");
  ck_assert (json_object_get_double_member (a1, "bytes") == 4096);
  ck_assert (json_object_get_null_member (a1, "nan"));
  JsonObject *x2 = json_array_get_object_element (ev, 4);
  ck_assert_str_eq (json_object_get_string_member (x2, "ph"), "X");
  ck_assert_str_eq (json_object_get_string_member (x2, "cat"), "compute");
  ck_assert_int_eq (json_object_get_int_member (x2, "pid"), 3);
  ck_assert_int_eq (json_object_get_int_member (x2, "tid"), 1);
  ck_assert (json_object_get_double_member (x2, "ts") == 2500.0);
  ck_assert (fabs (json_object_get_double_member (x2, "dur") - 1.25) < 1e-9);
  JsonObject *a2 = json_object_get_object_member (x2, "args");
  ck_assert_str_eq (json_object_get_string_member (a2, "quote"), "a \"b\"\n\\");
}
END_TEST

static char *
build (gboolean reversed)
{
  g_autoptr (PsTimeline) tl = ps_timeline_new ();
  for (int k = 0; k < 20; k++)
    {
      int i = reversed ? 19 - k : k;
      ps_timeline_add_complete (tl, i % 4, i % 2, "op", NULL, (i / 2) * 1e-6, 1e-6, NULL);
      if (i % 4 == 0)
        ps_timeline_set_process_name (tl, i % 4, "chip");
    }
  return ps_timeline_to_json (tl, NULL);
}

START_TEST (test_deterministic)
{
  g_autofree char *a = build (FALSE);
  g_autofree char *b = build (TRUE);
  ck_assert_str_eq (a, b);
  g_autofree char *c = build (FALSE);
  ck_assert_str_eq (a, c);
}
END_TEST

START_TEST (test_write)
{
  g_autoptr (PsTimeline) tl = ps_timeline_new ();
  ps_timeline_add_complete (tl, 0, 0, "x", "c", 0, 1, NULL);
  g_autofree char *dir = g_dir_make_tmp ("check_timeline_XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "t.json", NULL);
  GError *error = NULL;
  ck_assert (ps_timeline_write (tl, path, &error));
  g_autofree char *text = NULL;
  ck_assert (g_file_get_contents (path, &text, NULL, NULL));
  g_autofree char *json = ps_timeline_to_json (tl, NULL);
  ck_assert_str_eq (text, json);
  g_unlink (path);
  /* an unwritable place fails with an error and leaves nothing */
  g_autofree char *bad = g_build_filename (dir, "no", "such", "t.json", NULL);
  ck_assert (!ps_timeline_write (tl, bad, &error));
  ck_assert_ptr_nonnull (error);
  g_clear_error (&error);
  g_rmdir (dir);
}
END_TEST

static Suite *
timeline_suite (void)
{
  Suite *s = suite_create ("timeline");
  ps_check_case (s, "timeline_export", 0,
                 PS_CHECK_TESTS (test_structure, test_deterministic,
                                 test_write));
  return s;
}

int
main (void)
{
  return ps_check_run (timeline_suite (), CK_FORK_GETENV);
}

/* The driver's stage sequence (driver/driver.h): every stop gives what the
 * stages so far made, the trace and the peak come from one schedule
 * whichever command asks, the partitioned program agrees with the original
 * on the interpreter, and a program that does not match the slice is an
 * option error. */
#include "config.h"

#include <check.h>
#include <string.h>

#include "tests/suite_main.h"
#include "common/error.h"
#include "driver/driver.h"
#include "driver/study.h"
#include "models/family.h"
#include "driver/target.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/analysis/memory.h"
#include "partitioner/interp/verify.h"

static const char *mlp =
  "HloModule mlp\n\n"
  "ENTRY main {\n"
  "  x = f32[8,16] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
  "  w = f32[16,32] parameter(1), sharding={devices=[1,4]0,1,2,3}\n"
  "  d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
  "  ROOT r = f32[8,32] negate(d), sharding={devices=[4,1]0,1,2,3}\n"
  "}\n";

static PsModule *
parse (void)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (mlp, strlen (mlp), "mlp.hlo", &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  return m;
}

/* The target of a run's defaults with some keys set. */
static PsTarget *
target_with (const char *const *kv)
{
  int n = 0;
  const PsParamSpec *const *specs = ps_target_specs (&n);
  g_autoptr (PsParamStore) st = ps_param_store_new (specs, n, "test");
  for (int i = 0; kv && kv[i]; i += 2)
    ck_assert (ps_param_store_set (st, ps_param_store_find (st, kv[i]), kv[i + 1], "--test", NULL));
  GError *error = NULL;
  PsTarget *t = ps_target_from_store (st, TRUE, &error);
  ck_assert_msg (t != NULL, "%s", error ? error->message : "");
  return t;
}

static PsDriverResult *
run_to (PsModule *m, const PsTarget *t, PsStage stop, GError **error)
{
  PsDriverOptions o;
  ps_driver_options_init (&o);
  o.module = m;
  o.n_devices = 4;
  o.target = t;
  o.stop_after = stop;
  o.keep_spmd = TRUE;
  return ps_driver_run (&o, NULL, error);
}

START_TEST (test_driver_stops_after_each_stage)
{
  static const char *const idle[] = { "idle_cores", "true", NULL };
  g_autoptr (PsTarget) t = target_with (idle);
  g_autoptr (PsModule) m1 = parse ();
  g_autoptr (PsDriverResult) part = run_to (m1, t, PS_STAGE_PARTITION, NULL);
  ck_assert (part && part->spmd && !part->memory_text && !part->trace);
  ck_assert_int_gt (part->spmd_report.n_collectives, 0);
  g_autoptr (PsModule) m2 = parse ();
  g_autoptr (PsDriverResult) mem = run_to (m2, t, PS_STAGE_MEMORY, NULL);
  ck_assert (mem && mem->memory_text && mem->peak_hbm_bytes > 0 && mem->fits && !mem->trace);
  g_autoptr (PsModule) m3 = parse ();
  g_autoptr (PsDriverResult) low = run_to (m3, t, PS_STAGE_LOWER, NULL);
  ck_assert (low && low->trace && !low->sim);
  g_autoptr (PsModule) m4 = parse ();
  g_autoptr (PsDriverResult) all = run_to (m4, t, PS_STAGE_SIMULATE, NULL);
  ck_assert (all && all->sim && all->sim->step_time_s > 0);
}
END_TEST

/* The peak the memory stage reports is the one the trace carries, and
 * lowering the kept program with the stage entry points gives the trace
 * the sequence wrote: one schedule decides both. */
/* A run resumed from another's partition (what podsim search's share
 * groups do in their forks) gives what a run of its own gives, with a
 * target that differs in what only the later stages read. */
START_TEST (test_driver_resume_from_partition)
{
  static const char *const idle[] = { "idle_cores", "true", NULL };
  static const char *const eager[] = { "idle_cores", "true", "async_collectives", "true", "cache", "false", NULL };
  g_autoptr (PsTarget) t = target_with (idle);
  g_autoptr (PsTarget) te = target_with (eager);
  g_autoptr (PsModule) m1 = parse ();
  PsDriverResult *part = run_to (m1, t, PS_STAGE_PARTITION, NULL);
  ck_assert (part && part->spmd);
  gint64 n_collectives = part->spmd_report.n_collectives;
  ps_driver_resume_next (part);
  g_autoptr (PsModule) m2 = parse ();
  GError *error = NULL;
  /* Up to the trace: SimGrid runs one engine per process. */
  g_autoptr (PsDriverResult) resumed = run_to (m2, te, PS_STAGE_LOWER, &error);
  ck_assert_msg (resumed && resumed->trace, "%s", error ? error->message : "no trace");
  g_autoptr (PsModule) m3 = parse ();
  g_autoptr (PsDriverResult) alone = run_to (m3, te, PS_STAGE_LOWER, &error);
  ck_assert_msg (alone && alone->trace, "%s", error ? error->message : "no trace");
  ck_assert_int_eq (resumed->spmd_report.n_collectives, n_collectives);
  ck_assert_int_eq (resumed->n_instructions_spmd, alone->n_instructions_spmd);
  ck_assert_uint_eq (resumed->peak_hbm_bytes, alone->peak_hbm_bytes);
  ck_assert_int_eq (resumed->schedule, alone->schedule);
  ck_assert_int_eq (resumed->n_async, alone->n_async);
  ck_assert_uint_eq (ps_trace_n_events (resumed->trace), ps_trace_n_events (alone->trace));
  /* Only the next run resumes: the one after runs every stage. */
  g_autoptr (PsModule) m4 = parse ();
  g_autoptr (PsDriverResult) again = run_to (m4, t, PS_STAGE_LOWER, NULL);
  ck_assert (again && again->trace && again->stage_s[PS_STAGE_PROPAGATE] > 0);
  ck_assert (resumed->stage_s[PS_STAGE_PROPAGATE] == 0);
}
END_TEST

START_TEST (test_driver_one_schedule_for_trace_and_peak)
{
  static const char *const idle[] = { "idle_cores", "true", NULL };
  g_autoptr (PsTarget) t = target_with (idle);
  g_autoptr (PsModule) m = parse ();
  g_autoptr (PsDriverResult) r = run_to (m, t, PS_STAGE_LOWER, NULL);
  ck_assert (r && r->trace);
  ck_assert_uint_eq (ps_trace_get_header (r->trace)->totals.peak_bytes, r->peak_hbm_bytes);
  GError *error = NULL;
  g_autoptr (PsSchedule) s = ps_driver_schedule (r->spmd, PS_SCHEDULE_XLA, t->hw->hbm_bytes_per_core, t->fusion, t->tiling, 0, NULL,
                                                 &error);
  ck_assert_msg (s != NULL, "%s", error ? error->message : "");
  ck_assert_uint_eq (s->peak_bytes, r->peak_hbm_bytes);
  g_autoptr (PsTrace) again = ps_driver_lower (r->spmd, s, NULL, 4, NULL, t->slice->name, t->fusion, t->tiling, 0, &error);
  ck_assert (again != NULL);
  gsize n1, n2;
  g_autofree char *a = ps_trace_to_text (r->trace, &n1), *b = ps_trace_to_text (again, &n2);
  ck_assert_str_eq (a, b);
}
END_TEST

/* Lowered without a schedule, the trace's memory events come from the
 * lowering's own memory analysis: it sizes buffers with the tiling asked
 * for (it used `best` whatever was asked), so the trace's peak is that
 * analysis's under each mode, and the dense sizes (`none`) differ from the
 * tiled ones (the local w, f32[16,8], pads its 8 to 128 lanes). */
START_TEST (test_driver_lower_without_schedule_honours_tiling)
{
  g_autoptr (PsModule) m = parse ();
  g_autoptr (PsDriverResult) r = run_to (m, NULL, PS_STAGE_PARTITION, NULL);
  ck_assert (r && r->spmd);
  static const PsTilingMode modes[] = { PS_TILING_BEST, PS_TILING_MINOR, PS_TILING_NONE };
  uint64_t peak[3];
  for (int i = 0; i < 3; i++)
    {
      GError *error = NULL;
      g_autoptr (PsTrace) t = ps_driver_lower (r->spmd, NULL, NULL, 4, NULL, NULL, PS_FUSION_MODE_XLA,
                                               modes[i], 0, &error);
      ck_assert_msg (t != NULL, "%s", error ? error->message : "");
      PsCostOptions co;
      ps_cost_options_init (&co);
      co.tiling = modes[i];
      g_autoptr (PsCostAnalysis) cost = ps_cost_analyze (r->spmd, &co, &error);
      ck_assert (cost != NULL);
      g_autoptr (PsMemoryReport) mem = ps_memory_analyze (r->spmd, cost, &error);
      ck_assert (mem != NULL);
      peak[i] = ps_trace_get_header (t)->totals.peak_bytes;
      ck_assert_uint_eq (peak[i], mem->peak_bytes);
    }
  ck_assert_uint_gt (peak[0], peak[2]);
  ck_assert_uint_ge (peak[1], peak[0]);
}
END_TEST

START_TEST (test_driver_partition_agrees_on_interpreter)
{
  g_autoptr (PsModule) m = parse ();
  g_autoptr (PsDriverResult) r = run_to (m, NULL, PS_STAGE_PARTITION, NULL);
  ck_assert (r && r->spmd);
  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  PsVerifyResult res;
  GError *error = NULL;
  ck_assert_msg (ps_verify_spmd (m, r->spmd, 4, &vo, &res, &error), "%s", error ? error->message : "");
  ck_assert_msg (res.agree, "%s", res.message);
  ps_verify_result_clear (&res);
}
END_TEST

START_TEST (test_driver_devices_must_match_slice)
{
  g_autoptr (PsTarget) t = target_with (NULL);
  g_autoptr (PsModule) m = parse ();
  GError *error = NULL;
  PsStage failed = PS_STAGE_SIMULATE;
  PsDriverOptions o;
  ps_driver_options_init (&o);
  o.module = m;
  o.n_devices = 4;
  o.target = t;
  ck_assert_ptr_null (ps_driver_run (&o, &failed, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_OPTION));
  ck_assert_msg (strstr (error->message, "4 devices but slice v3-8 has 8 cores") != NULL, "%s", error->message);
  ck_assert_int_eq (failed, PS_STAGE_BUILD);
  g_clear_error (&error);
}
END_TEST

/* A row whose error holds bytes that are not UTF-8 (a file name in
 * another encoding) is still a JSON line --resume reads back (fuzz_rows). */
START_TEST (test_study_row_not_utf8_reads_back)
{
  g_autoptr (PsParams) base = ps_params_new (ps_model_family_find ("dense", NULL));
  static const char *const keys[] = { "layers", NULL };
  g_autoptr (PsStudy) s = ps_study_new (base, keys);
  static const char *const v[] = { "2", NULL };
  guint id;
  GError *error = NULL;
  ck_assert (ps_study_add (s, v, "test", &id, &error));
  PsStudyRow r = { .id = id, .error = (char *) "cannot read caf\xe9.ini" };
  g_autofree char *line = ps_study_format_row (s, &r, PS_STUDY_JSONL);
  line[strcspn (line, "\n")] = '\0';
  ck_assert (g_utf8_validate (line, -1, NULL));
  guint back = 99;
  ck_assert_msg (ps_study_parse_row (s, line, PS_STUDY_JSONL, &back, NULL, &error), "%s: %s",
                 error ? error->message : "", line);
  ck_assert_uint_eq (back, id);
  /* A blank line is refused without a GLib CRITICAL (fuzz_rows): json-glib
   * parses it to no root. */
  g_log_set_always_fatal (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  ck_assert (!ps_study_parse_row (s, "", PS_STUDY_JSONL, &back, NULL, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_PARSE));
  g_clear_error (&error);
  ck_assert (!ps_study_parse_row (s, "  ", PS_STUDY_JSONL, &back, NULL, &error));
  g_clear_error (&error);
}
END_TEST

/* A grid is counted, not expanded: ids map to combinations, the first key
 * outermost, values as the model file writes them. */
START_TEST (test_study_grid_counted)
{
  g_autoptr (PsParams) base = ps_params_new (ps_model_family_find ("dense", NULL));
  static const char *const keys[] = { "layers", "mesh", "microbatches", NULL };
  g_autoptr (PsStudy) s = ps_study_new (base, keys);
  static const char *const where[] = { "a", "b", "c", NULL };
  GPtrArray *values[3];
  const char *const lists[3][4] = { { "1", "2", "3", NULL }, { "2x4", "4x2", NULL }, { "1", "02", "4", "8" } };
  for (int k = 0; k < 3; k++)
    {
      values[k] = g_ptr_array_new ();
      for (int i = 0; i < 4 && lists[k][i]; i++)
        g_ptr_array_add (values[k], (gpointer) lists[k][i]);
    }
  GError *error = NULL;
  ck_assert (ps_study_add_grid (s, values, where, 1000, &error));
  ck_assert_uint_eq (ps_study_n_configs (s), 24);
  guint id = 0;
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 4; c++, id++)
        {
          ck_assert_str_eq (ps_study_value (s, id, 0), lists[0][a]);
          ck_assert_str_eq (ps_study_value (s, id, 1), lists[1][b]);
          ck_assert_str_eq (ps_study_value (s, id, 2), c == 1 ? "2" : lists[2][c]);
        }
  /* Configurations added after the grid follow it. */
  static const char *const v[] = { "5", "8x1", "16", NULL };
  ck_assert (ps_study_add (s, v, "test", &id, &error));
  ck_assert_uint_eq (id, 24);
  ck_assert_str_eq (ps_study_value (s, 24, 1), "8x1");
  g_autoptr (PsStudy) big = ps_study_new (base, keys);
  ck_assert (!ps_study_add_grid (big, values, where, 23, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_OPTION));
  g_clear_error (&error);
  for (int k = 0; k < 3; k++)
    g_ptr_array_free (values[k], TRUE);
}
END_TEST

int
main (void)
{
  ps_target_init ();
  Suite *s = suite_create ("driver");
  ps_check_case (s, "sequence", 0,
                 PS_CHECK_TESTS (test_driver_stops_after_each_stage,
                                 test_driver_one_schedule_for_trace_and_peak,
                                 test_driver_lower_without_schedule_honours_tiling,
                                 test_driver_resume_from_partition,
                                 test_driver_partition_agrees_on_interpreter));
  ps_check_case (s, "errors", 0,
                 PS_CHECK_TESTS (test_driver_devices_must_match_slice,
                                 test_study_row_not_utf8_reads_back,
                                 test_study_grid_counted));
  return ps_check_run (s, CK_FORK_GETENV);
}

/* Compute time by op_name (cli/op_times.c): names map back to op_names,
 * only the prefixes asked for count, and an event in a loop counts once per
 * run of the loop. */
#include "config.h"

#include <check.h>
#include <math.h>

#include "tests/suite_main.h"
#include "driver/op_times.h"
#include "sim/compute.h"

static PsTraceCompute
vector_op (guint64 bytes)
{
  PsTraceCompute c = { 0 };
  c.op = PS_TRACE_OP_ELEMENTWISE;
  c.dtype = PS_TRACE_F32;
  c.read_bytes = bytes;
  c.write_bytes = bytes;
  c.vector_ops = bytes / 4;
  return c;
}

START_TEST (test_op_times_prefixes_and_loops)
{
  g_autoptr (PsHardware) hw = ps_hardware_load_or_default (NULL, NULL);
  ck_assert (hw != NULL);
  PsTraceCompute a = vector_op (1 << 20), b = vector_op (1 << 22), c = vector_op (1 << 24);
  PsTrace *t = ps_trace_new ("op_times");
  ps_trace_add_compute (t, "gate.1", &a);
  ps_trace_add_loop (t, "layers", 3);
  ps_trace_add_loop (t, "inner", 2);
  ps_trace_add_compute (t, "gate.2", &b);
  ps_trace_add_end_loop (t);
  ps_trace_add_compute (t, "expert.3", &c);
  ps_trace_add_end_loop (t);
  ps_trace_add_compute (t, "untagged.4", &c);
  GHashTable *names = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_hash_table_insert (names, g_strdup ("gate.1"), g_strdup ("moe/gating"));
  g_hash_table_insert (names, g_strdup ("gate.2"), g_strdup ("moe/gating/top2"));
  g_hash_table_insert (names, g_strdup ("expert.3"), g_strdup ("moe/experts"));
  PsComputeOp oa = ps_compute_op_from_trace (&a), ob = ps_compute_op_from_trace (&b);
  PsComputeOp oc = ps_compute_op_from_trace (&c);
  double ta = ps_compute_op (hw, &oa).time_s, tb = ps_compute_op (hw, &ob).time_s;
  double tc = ps_compute_op (hw, &oc).time_s;
  ck_assert (ta > 0 && tb > ta && tc > tb);
  static const char *gating[] = { "moe/gating", NULL }, *experts[] = { "moe/experts", NULL };
  static const char *both[] = { "moe/experts", "moe/gating", NULL }, *none[] = { "moe/dispatch", NULL };
  double g = ps_op_times_compute (t, hw, names, gating);
  ck_assert_msg (fabs (g - (ta + 6 * tb)) <= 1e-12 * g, "gating %g, want %g", g, ta + 6 * tb);
  double e = ps_op_times_compute (t, hw, names, experts);
  ck_assert (fabs (e - 3 * tc) <= 1e-12 * e);
  ck_assert (fabs (ps_op_times_compute (t, hw, names, both) - (g + e)) <= 1e-12 * (g + e));
  ck_assert (ps_op_times_compute (t, hw, names, none) == 0);
  g_hash_table_unref (names);
  ps_trace_free (t);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("op_times");
  ps_check_case (s, "op_times", 0,
                 PS_CHECK_TESTS (test_op_times_prefixes_and_loops));
  return ps_check_run (s, CK_FORK_GETENV);
}

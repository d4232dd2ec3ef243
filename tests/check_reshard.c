/* Resharding between every pair of shardings among replicated, tiled on each
 * dim (and on both, and in another device order), partially replicated and
 * maximal, on 2, 4 and 8 devices, each checked by running the partitioned
 * program with the reference interpreter (partitioner/interp/verify.h). A few pairs
 * also check that the cheap collective was chosen. */
#include "config.h"

#include <check.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/ir/sharding.h"
#include "partitioner/spmd/spmd.h"
#include "partitioner/interp/verify.h"

/* Shardings of a rank-2 array for n devices, as HLO text. */
static GPtrArray *
shardings_for (int n)
{
  GPtrArray *a = g_ptr_array_new_with_free_func (g_free);
  GString *ids = g_string_new (NULL), *rev = g_string_new (NULL);
  for (int i = 0; i < n; i++)
    {
      g_string_append_printf (ids, "%s%d", i ? "," : "", i);
      g_string_append_printf (rev, "%s%d", i ? "," : "", n - 1 - i);
    }
  g_ptr_array_add (a, g_strdup ("{replicated}"));
  g_ptr_array_add (a, g_strdup_printf ("{devices=[%d,1]%s}", n, ids->str));
  g_ptr_array_add (a, g_strdup_printf ("{devices=[1,%d]%s}", n, ids->str));
  g_ptr_array_add (a, g_strdup_printf ("{devices=[%d,1]%s}", n, rev->str));
  if (n >= 4)
    {
      g_ptr_array_add (a, g_strdup_printf ("{devices=[2,%d]%s}", n / 2, ids->str));
      g_ptr_array_add (a, g_strdup_printf ("{devices=[%d,1,2]%s last_tile_dim_replicate}",
                                           n / 2, ids->str));
      g_ptr_array_add (a, g_strdup_printf ("{devices=[1,%d,2]%s last_tile_dim_replicate}",
                                           n / 2, ids->str));
      g_ptr_array_add (a, g_strdup_printf ("{devices=[2,1,%d]%s last_tile_dim_replicate}",
                                           n / 2, rev->str));
    }
  g_ptr_array_add (a, g_strdup ("{maximal device=0}"));
  g_ptr_array_add (a, g_strdup_printf ("{maximal device=%d}", n - 1));
  g_string_free (ids, TRUE);
  g_string_free (rev, TRUE);
  return a;
}

static PsModule *
reshard_module (const char *type, const char *from, const char *to)
{
  g_autofree char *text = g_strdup_printf (
      "HloModule r\n\nENTRY e {\n  p = %s parameter(0), sharding=%s\n"
      "  ROOT c = %s copy(p), sharding=%s\n}\n",
      type, from, type, to);
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (text, strlen (text), "reshard.hlo", &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  return m;
}

static int
count_op (const PsModule *m, PsOpcode op)
{
  int k = 0;
  for (guint c = 0; c < m->computations->len; c++)
    {
      const PsComputation *comp = g_ptr_array_index (m->computations, c);
      for (guint i = 0; i < comp->instrs->len; i++)
        k += ((const PsInstr *) g_ptr_array_index (comp->instrs, i))->opcode == op;
    }
  return k;
}

static void
check_pair (const char *type, int n, const char *from, const char *to, PsModule **out)
{
  g_autoptr (PsModule) m = reshard_module (type, from, to);
  GError *error = NULL;
  PsModule *part = ps_spmd_partition (m, n, NULL, &error);
  ck_assert_msg (part != NULL, "%s -> %s on %d: %s", from, to, n, error ? error->message : "");
  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  PsVerifyResult res = { 0 };
  gboolean ran = ps_verify_spmd (m, part, n, &vo, &res, &error);
  ck_assert_msg (ran, "%s -> %s on %d: %s", from, to, n, error ? error->message : "");
  ck_assert_msg (res.agree, "%s -> %s on %d: %s", from, to, n, res.message);
  ck_assert_int_gt (res.n_compared, 0);
  ps_verify_result_clear (&res);
  if (out)
    *out = part;
  else
    ps_module_free (part);
}

static void
all_pairs (int n, const char *type)
{
  g_autoptr (GPtrArray) s = shardings_for (n);
  for (guint i = 0; i < s->len; i++)
    for (guint j = 0; j < s->len; j++)
      check_pair (type, n, g_ptr_array_index (s, i), g_ptr_array_index (s, j), NULL);
}

START_TEST (test_all_pairs_2)
{
  all_pairs (2, "f32[7,6]");
  all_pairs (2, "s32[4,4]");
}
END_TEST

START_TEST (test_all_pairs_4)
{
  all_pairs (4, "f32[7,6]");
  all_pairs (4, "s32[8,4]");
}
END_TEST

START_TEST (test_all_pairs_8)
{
  all_pairs (8, "f32[7,6]");
  all_pairs (8, "pred[16,8]");
}
END_TEST

/* The moves the table in doc/partitioner.md promises. */
START_TEST (test_cheapest_collectives)
{
  PsModule *p = NULL;
  /* Replicated to tiled: a local dynamic-slice, no communication. */
  check_pair ("f32[8,8]", 4, "{replicated}", "{devices=[4,1]0,1,2,3}", &p);
  ck_assert_int_eq (count_op (p, PS_OP_ALL_GATHER) + count_op (p, PS_OP_ALL_REDUCE)
                        + count_op (p, PS_OP_ALL_TO_ALL) + count_op (p, PS_OP_COLLECTIVE_PERMUTE), 0);
  ck_assert_int_eq (count_op (p, PS_OP_DYNAMIC_SLICE) >= 1, 1);
  ps_module_free (p);
  /* Tiled to replicated: one all-gather. */
  check_pair ("f32[8,8]", 4, "{devices=[4,1]0,1,2,3}", "{replicated}", &p);
  ck_assert_int_eq (count_op (p, PS_OP_ALL_GATHER), 1);
  ps_module_free (p);
  /* Moving the sharded dim: one all-to-all. */
  check_pair ("f32[8,8]", 4, "{devices=[4,1]0,1,2,3}", "{devices=[1,4]0,1,2,3}", &p);
  ck_assert_int_eq (count_op (p, PS_OP_ALL_TO_ALL), 1);
  ck_assert_int_eq (count_op (p, PS_OP_ALL_GATHER), 0);
  ps_module_free (p);
  /* Two dims moving at once: two all-to-alls, never a full gather. */
  check_pair ("f32[8,8,8]", 8, "{devices=[1,4,2]0,1,2,3,4,5,6,7}",
              "{devices=[2,4,1]0,2,4,6,1,3,5,7}", &p);
  ck_assert_int_eq (count_op (p, PS_OP_ALL_GATHER), 0);
  ck_assert_int_ge (count_op (p, PS_OP_ALL_TO_ALL), 1);
  ps_module_free (p);
  /* Same tiles, other device order: one collective-permute. */
  check_pair ("f32[8,8]", 4, "{devices=[4,1]0,1,2,3}", "{devices=[4,1]3,2,1,0}", &p);
  ck_assert_int_eq (count_op (p, PS_OP_COLLECTIVE_PERMUTE), 1);
  ck_assert_int_eq (count_op (p, PS_OP_ALL_GATHER), 0);
  ps_module_free (p);
  /* Partially replicated to tiled in a compatible order: slicing only. */
  check_pair ("f32[8,8]", 4, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
              "{devices=[2,2]0,1,2,3}", &p);
  ck_assert_int_eq (count_op (p, PS_OP_ALL_GATHER) + count_op (p, PS_OP_ALL_TO_ALL)
                        + count_op (p, PS_OP_COLLECTIVE_PERMUTE), 0);
  ps_module_free (p);
  /* Tiled to partially replicated: all-gather within the replica groups. */
  check_pair ("f32[8,8]", 4, "{devices=[2,2]0,1,2,3}",
              "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", &p);
  ck_assert_int_eq (count_op (p, PS_OP_ALL_GATHER), 1);
  ps_module_free (p);
}
END_TEST

/* The XLA-test flavour: replicate with dynamic-update-slice + all-reduce. */
START_TEST (test_no_all_gather_option)
{
  g_autoptr (PsModule) m = reshard_module ("f32[7,6]", "{devices=[2,2]0,1,2,3}", "{replicated}");
  PsSpmdOptions o;
  ps_spmd_options_init (&o);
  o.use_all_gather = FALSE;
  GError *error = NULL;
  g_autoptr (PsModule) part = ps_spmd_partition (m, 4, &o, &error);
  ck_assert_ptr_nonnull (part);
  ck_assert_int_eq (count_op (part, PS_OP_ALL_GATHER), 0);
  ck_assert_int_eq (count_op (part, PS_OP_ALL_REDUCE), 1);
  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  PsVerifyResult res = { 0 };
  ck_assert (ps_verify_spmd (m, part, 4, &vo, &res, &error));
  ck_assert_msg (res.agree, "%s", res.message);
  ps_verify_result_clear (&res);
}
END_TEST

START_TEST (test_too_few_devices)
{
  g_autoptr (PsModule) m = reshard_module ("f32[8]", "{devices=[8]0,1,2,3,4,5,6,7}", "{replicated}");
  GError *error = NULL;
  PsModule *part = ps_spmd_partition (m, 4, NULL, &error);
  ck_assert_ptr_null (part);
  ck_assert_ptr_nonnull (error);
  ck_assert (strstr (error->message, "needs 8 devices") != NULL);
  /* The message names the source position: FILE:LINE:COL. */
  ck_assert_msg (g_str_has_prefix (error->message, m->source_name)
                 && g_ascii_isdigit (error->message[strlen (m->source_name) + 1]), "%s", error->message);
  g_error_free (error);
}
END_TEST

static Suite *
reshard_suite (void)
{
  Suite *s = suite_create ("reshard");
  ps_check_case (s, "pairs", 300,
                 PS_CHECK_TESTS (test_all_pairs_2, test_all_pairs_4,
                                 test_all_pairs_8, test_cheapest_collectives,
                                 test_no_all_gather_option,
                                 test_too_few_devices));
  return s;
}

int
main (void)
{
  return ps_check_run (reshard_suite (), CK_FORK_GETENV);
}

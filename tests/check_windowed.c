/* Windowed einsum (PsSpmdOptions.windowed_einsum_threshold_bytes): a dot
 * whose plan all-gathers one dim of an operand is partitioned instead as k
 * local dots over chunks passed around a ring of collective-permutes. Each
 * case is partitioned with the threshold at 0 (windowed: k - 1 permutes, no
 * all-gather) and at -1 (the all-gather program), both verified against the
 * original with the reference interpreter on 2, 4 and 8 devices, even and
 * uneven shapes, the gathered operand on either side, free and contracting
 * gathered dims, and the reduce-scatter variant (partial sums passed
 * around the ring); the gather kinds also bidirectionally. The choices table replays the windowed decision. */
#include "config.h"

#include <check.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/interp/shrink.h"
#include "partitioner/spmd/spmd.h"
#include "tests/spmd_testutil.h"

typedef enum {
  RHS_FREE,      /* rhs split on its free dim, output like the lhs: rhs windowed */
  LHS_FREE,      /* lhs split on its free dim, output like the rhs: lhs windowed */
  RHS_CONTRACT,  /* rhs split on the contracting dim, output like the lhs */
  LHS_CONTRACT,  /* lhs split on the contracting dim, output like the rhs */
  BATCH_GROUPS,  /* batch split by 2, rhs free dim windowed in rings of n / 2 */
  RS_LHS,        /* contraction split, output split on the lhs free dim: the
                  * reduce-scatter becomes partial sums passed around the ring */
  RS_RHS,        /* same, output split on the rhs free dim */
  N_KINDS
} Kind;

static const char *const kind_names[] = { "rhs-free", "lhs-free", "rhs-contracting",
                                          "lhs-contracting", "batch-groups",
                                          "reduce-scatter-lhs", "reduce-scatter-rhs" };

static char *
iota_list (int n)
{
  GString *s = g_string_new (NULL);
  for (int i = 0; i < n; i++)
    g_string_append_printf (s, "%s%d", i ? "," : "", i);
  return g_string_free (s, FALSE);
}

/* The HLO of one case: M x K times K x N on n devices; `uneven` makes the
 * gathered dim (and M) not a multiple of n. */
static char *
case_hlo (Kind kind, int n, gboolean uneven)
{
  g_autofree char *ids = iota_list (n);
  int m = uneven ? 3 * n + 1 : 2 * n, k = uneven ? 2 * n + 1 : 2 * n, nn = uneven ? 2 * n - 1 : n;
  /* A long contraction, so that splitting it (and reduce-scattering) is
   * the cheapest plan rather than gathering an operand. */
  if (kind == RS_LHS || kind == RS_RHS)
    k = 8 * k + (uneven ? 1 : 0);
  const char *row = "devices=[%d,1]%s", *col = "devices=[1,%d]%s";
  g_autofree char *rs = g_strdup_printf (row, n, ids), *cs = g_strdup_printf (col, n, ids);
  const char *sa = rs, *sb = cs, *so = rs;
  switch (kind)
    {
    case RHS_FREE: sa = rs; sb = cs; so = rs; break;
    case LHS_FREE: sa = rs; sb = cs; so = cs; break;
    case RHS_CONTRACT: sa = rs; sb = rs; so = rs; break;
    case LHS_CONTRACT: sa = cs; sb = cs; so = cs; break;
    case RS_LHS: sa = cs; sb = rs; so = rs; break;
    case RS_RHS: sa = cs; sb = rs; so = cs; break;
    case BATCH_GROUPS:
      {
        int h = n / 2;
        return g_strdup_printf (
          "HloModule w\nENTRY e {\n"
          "  a = f32[2,%d,%d] parameter(0), sharding={devices=[2,%d,1]%s}\n"
          "  b = f32[2,%d,%d] parameter(1), sharding={devices=[2,1,%d]%s}\n"
          "  ROOT d = f32[2,%d,%d] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0},"
          " lhs_contracting_dims={2}, rhs_contracting_dims={1}, sharding={devices=[2,%d,1]%s}\n}\n",
          m, k, h, ids, k, nn, h, ids, m, nn, h, ids);
      }
    default: g_assert_not_reached ();
    }
  return g_strdup_printf (
    "HloModule w\nENTRY e {\n"
    "  a = f32[%d,%d] parameter(0), sharding={%s}\n"
    "  b = f32[%d,%d] parameter(1), sharding={%s}\n"
    "  ROOT d = f32[%d,%d] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " sharding={%s}\n}\n",
    m, k, sa, k, nn, sb, m, nn, so);
}

static PsModule *
parse (const char *hlo)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (hlo, strlen (hlo), "windowed.hlo", &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  return m;
}

/* Partitions with the given threshold, verifies, returns the program. */
static PsModule *
partition_verified_bidi (const PsModule *m, int n, int64_t threshold, GHashTable *choices,
                         gboolean replay, gboolean bidi, const char *what)
{
  PsSpmdOptions o;
  ps_spmd_options_init (&o);
  o.windowed_einsum_threshold_bytes = threshold;
  o.windowed_einsum_bidirectional = bidi;
  o.choices = choices;
  o.replay_choices = replay;
  GError *error = NULL;
  g_autofree char *text = NULL;
  gboolean ok = spmd_test_verify (m, n, &o, 3, &text, &error);
  ck_assert_msg (ok, "%s: %s\n%s", what, error ? error->message : "", text ? text : "");
  PsModule *part = ps_spmd_partition (m, n, &o, &error);
  ck_assert_msg (part != NULL, "%s: %s", what, error ? error->message : "");
  return part;
}

static PsModule *
partition_verified (const PsModule *m, int n, int64_t threshold, GHashTable *choices,
                    gboolean replay, const char *what)
{
  return partition_verified_bidi (m, n, threshold, choices, replay, FALSE, what);
}

static void
assert_windowed (const PsModule *part, int ring, gboolean windowed, gboolean rs_kind,
                 const char *what)
{
  int perm = spmd_test_count_op (part, PS_OP_COLLECTIVE_PERMUTE);
  int ag = spmd_test_count_op (part, PS_OP_ALL_GATHER);
  int rsc = spmd_test_count_op (part, PS_OP_REDUCE_SCATTER);
  int dots = spmd_test_count_op (part, PS_OP_DOT);
  if (windowed)
    {
      ck_assert_msg (perm == ring - 1 && ag == 0 && rsc == 0 && dots == ring,
                     "%s: windowed: %d permutes, %d all-gathers, %d reduce-scatters, %d dots "
                     "(ring of %d)", what, perm, ag, rsc, dots, ring);
    }
  else
    {
      ck_assert_msg (perm == 0 && (rs_kind ? rsc == 1 : ag >= 1) && dots == 1,
                     "%s: not windowed: %d permutes, %d all-gathers, %d reduce-scatters, %d dots",
                     what, perm, ag, rsc, dots);
    }
}

static const int device_counts[] = { 2, 4, 8 };

/* _i enumerates kind x devices x even/uneven. */
START_TEST (test_windowed)
{
  Kind kind = (Kind) (_i / 6);
  int n = device_counts[(_i / 2) % 3];
  gboolean uneven = _i % 2;
  g_autofree char *hlo = case_hlo (kind, n, uneven);
  g_autofree char *what = g_strdup_printf ("%s n=%d %s", kind_names[kind], n,
                                           uneven ? "uneven" : "even");
  g_autoptr (PsModule) m = parse (hlo);
  int ring = kind == BATCH_GROUPS ? n / 2 : n;
  if (ring < 2)
    return;
  g_autoptr (PsModule) w = partition_verified (m, n, 0, NULL, FALSE, what);
  gboolean rsk = kind == RS_LHS || kind == RS_RHS;
  assert_windowed (w, ring, TRUE, rsk, what);
  g_autoptr (PsModule) old = partition_verified (m, n, -1, NULL, FALSE, what);
  assert_windowed (old, ring, FALSE, rsk, what);
  /* Bidirectional: as many dots and permutes, half of them the other way
   * round the ring (the reduce-scatter kind ignores it). */
  g_autofree char *bwhat = g_strconcat (what, " bidirectional", NULL);
  g_autoptr (PsModule) bw = partition_verified_bidi (m, n, 0, NULL, FALSE, TRUE, bwhat);
  assert_windowed (bw, ring, TRUE, rsk, bwhat);
  /* Above the gathered (or reduce-scattered) size: the collective stays. */
  g_autoptr (PsModule) big = partition_verified (m, n, 1 << 30, NULL, FALSE, what);
  assert_windowed (big, ring, FALSE, rsk, what);
}
END_TEST

/* The choices table carries the windowed decision: a replay takes it
 * whatever the threshold says, so a scaled copy (shrink.h) partitions
 * like the original. */
START_TEST (test_choices_replay)
{
  g_autofree char *hlo = case_hlo (RHS_FREE, 4, TRUE);
  g_autoptr (PsModule) m = parse (hlo);
  g_autoptr (GHashTable) on = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr (PsModule) a = partition_verified (m, 4, 0, on, FALSE, "record windowed");
  assert_windowed (a, 4, TRUE, FALSE, "record windowed");
  ck_assert_int_eq (g_hash_table_size (on), 1);
  int v = GPOINTER_TO_INT (g_hash_table_lookup (on, "d"));
  ck_assert_int_eq (v >> 4, 2);  /* rhs windowed */
  g_autoptr (PsModule) b = partition_verified (m, 4, -1, on, TRUE, "replay windowed");
  assert_windowed (b, 4, TRUE, FALSE, "replay windowed");

  g_autoptr (GHashTable) off = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr (PsModule) c = partition_verified (m, 4, -1, off, FALSE, "record gather");
  ck_assert_int_eq (GPOINTER_TO_INT (g_hash_table_lookup (off, "d")) >> 4, 0);
  g_autoptr (PsModule) d = partition_verified (m, 4, 0, off, TRUE, "replay gather");
  assert_windowed (d, 4, FALSE, FALSE, "replay gather");

  /* The reduce-scatter variant is recorded as 3. */
  g_autofree char *rs_hlo = case_hlo (RS_LHS, 4, TRUE);
  g_autoptr (PsModule) rm = parse (rs_hlo);
  g_autoptr (GHashTable) rsc = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr (PsModule) e = partition_verified (rm, 4, 0, rsc, FALSE, "record reduce-scatter");
  assert_windowed (e, 4, TRUE, TRUE, "record reduce-scatter");
  ck_assert_int_eq (GPOINTER_TO_INT (g_hash_table_lookup (rsc, "d")) >> 4, 3);
  g_autoptr (PsModule) f = partition_verified (rm, 4, -1, rsc, TRUE, "replay reduce-scatter");
  assert_windowed (f, 4, TRUE, TRUE, "replay reduce-scatter");
}
END_TEST

/* A dot too large for the interpreter is verified through a scaled copy
 * (shrink.h): the copy's operands are far below the threshold, so only the
 * replayed decision makes it windowed like the original, and the copy
 * must partition into the same program. */
START_TEST (test_scaled_copy)
{
  for (int kind = 0; kind < 2; kind++)
    {
      const char *hlo = kind == 0
        ? "HloModule big\nENTRY e {\n"
          "  a = f32[4100,2048] parameter(0), sharding={devices=[8,1]0,1,2,3,4,5,6,7}\n"
          "  b = f32[2048,8195] parameter(1), sharding={devices=[1,8]0,1,2,3,4,5,6,7}\n"
          "  ROOT d = f32[4100,8195] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
          " sharding={devices=[8,1]0,1,2,3,4,5,6,7}\n}\n"
        : "HloModule big\nENTRY e {\n"
          "  a = f32[4100,65539] parameter(0), sharding={devices=[1,8]0,1,2,3,4,5,6,7}\n"
          "  b = f32[65539,1024] parameter(1), sharding={devices=[8,1]0,1,2,3,4,5,6,7}\n"
          "  ROOT d = f32[4100,1024] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
          " sharding={devices=[8,1]0,1,2,3,4,5,6,7}\n}\n";
      g_autoptr (PsModule) m = parse (hlo);
      g_autoptr (GHashTable) choices = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
      PsSpmdOptions o;
      ps_spmd_options_init (&o);
      o.windowed_einsum_threshold_bytes = 1 << 20;
      o.choices = choices;
      GError *error = NULL;
      g_autoptr (PsModule) part = ps_spmd_partition (m, 8, &o, &error);
      ck_assert_msg (part != NULL, "%s", error ? error->message : "");
      assert_windowed (part, 8, TRUE, kind == 1, "large");
      o.replay_choices = TRUE;
      PsVerifyResult res = { 0 };
      gboolean ok = ps_shrink_verify (m, part, 8, &o, NULL, NULL, &res, NULL, &error);
      ck_assert_msg (ok, "scaled copy: %s", error ? error->message : "");
      ck_assert_msg (res.agree && res.n_compared > 0, "scaled copy: %s",
                     res.message ? res.message : "nothing compared");
      ps_verify_result_clear (&res);
    }
}
END_TEST

/* A plan that gathers nothing is left alone even at threshold 0. */
START_TEST (test_no_gather_untouched)
{
  const char *hlo =
    "HloModule m\nENTRY e {\n"
    "  a = f32[8,6] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
    "  b = f32[6,4] parameter(1), sharding={replicated}\n"
    "  ROOT d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    " sharding={devices=[4,1]0,1,2,3}\n}\n";
  g_autoptr (PsModule) m = parse (hlo);
  g_autoptr (PsModule) p = partition_verified (m, 4, 0, NULL, FALSE, "no gather");
  ck_assert_int_eq (spmd_test_count_op (p, PS_OP_COLLECTIVE_PERMUTE), 0);
  ck_assert_int_eq (spmd_test_count_op (p, PS_OP_DOT), 1);
}
END_TEST

static Suite *
windowed_suite (void)
{
  Suite *s = suite_create ("windowed");
  TCase *tc = ps_check_case (s, "windowed", 120,
                             PS_CHECK_TESTS (test_choices_replay,
                                             test_no_gather_untouched,
                                             test_scaled_copy));
  tcase_add_loop_test (tc, test_windowed, 0, N_KINDS * 6);
  return s;
}

int
main (void)
{
  return ps_check_run (windowed_suite (), CK_FORK_GETENV);
}

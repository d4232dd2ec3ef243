/* The convolutional models (models/unet3d.h, models/conformer.h): small
 * training steps partitioned for 8 devices and verified on the reference
 * interpreter against the single-device step, with the collectives the
 * partitioner must derive from the few annotations (halo exchanges and
 * batch-norm statistics for spatial partitioning; all-reduces for the
 * model-dim sharding). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/build_testutil.h"
#include "tests/suite_main.h"
#include "models/conformer.h"
#include "models/unet3d.h"
#include "partitioner/interp/interp.h"
#include "partitioner/interp/verify.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/spmd/spmd.h"
#include "tests/spmd_testutil.h"

/* Propagates, partitions for n devices and verifies; returns the SPMD
 * program (transfer full). The statistics of batch norm are summed in a
 * different order (and as E[x^2] - mean^2, as XLA's expander writes
 * them) on the pieces, so f32 results agree within a few ulps of the sums
 * they go through, not bit for bit: the tolerance is 1e-3 relative. */
static PsModule *
partition_and_verify (PsModule *m, int64_t n, PsSpmdReport *rep)
{
  GError *error = NULL;
  ck_assert_msg (ps_module_validate (m, m->name, &error), "%s", error ? error->message : "");
  ck_assert_msg (ps_propagate (m, NULL, &error), "%s", error ? error->message : "");
  PsSpmdOptions o;
  ps_spmd_options_init (&o);
  o.report = rep;
  PsModule *part = ps_spmd_partition (m, n, &o, &error);
  ck_assert_msg (part != NULL, "%s", error ? error->message : "");
  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  vo.seed = 5;
  vo.rtol = 1e-3;
  vo.atol = 1e-3;
  PsVerifyResult res = { 0 };
  ck_assert_msg (ps_verify_spmd (m, part, n, &vo, &res, &error), "%s", error ? error->message : "");
  ck_assert_msg (res.agree && res.n_compared > 0, "%s", res.message);
  ps_verify_result_clear (&res);
  return part;
}

static void
check_unet (const PsUnet3dConfig *c)
{
  PsUnet3dInfo info;
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_unet3d_build (c, &info, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  /* The user's annotations: the input image and its labels (and the
   * replicated weights). */
  ck_assert_int_gt (info.params, 0);
  ck_assert_int_gt (info.model_flops, 0);
  PsSpmdReport rep = { 0 };
  int64_t n = c->data * c->spatial[0] * c->spatial[1] * c->spatial[2];
  g_autoptr (PsModule) part = partition_and_verify (m, n, &rep);
  if (rep.n_fallbacks && rep.fallback_ops)
    {
      GHashTableIter it;
      gpointer k, v;
      g_hash_table_iter_init (&it, rep.fallback_ops);
      while (g_hash_table_iter_next (&it, &k, &v))
        fprintf (stderr, "fallback: %s x%d\n", (const char *) k, GPOINTER_TO_INT (v));
    }
  ck_assert_int_eq (rep.n_fallbacks, 0);
  /* Halo exchanges of the spatially split convolutions, and the
   * all-reduces of batch-norm statistics and weight gradients. */
  ck_assert_int_gt (spmd_test_count_op (part, PS_OP_COLLECTIVE_PERMUTE), 0);
  ck_assert_int_gt (spmd_test_count_op (part, PS_OP_ALL_REDUCE), 0);
  /* Spatial partitioning keeps the image split: nothing gathers it whole. */
  ck_assert_int_eq (spmd_test_count_op (part, PS_OP_ALL_TO_ALL), 0);
  ps_spmd_report_clear (&rep);
}

START_TEST (test_unet_spatial_2x2x2)
{
  PsUnet3dConfig c;
  ps_unet3d_config_small (&c);
  check_unet (&c);
}
END_TEST

/* D split 8 ways over 12 voxels (uneven at every level: 12, 6, 3). */
START_TEST (test_unet_spatial_uneven)
{
  PsUnet3dConfig c;
  ps_unet3d_config_small (&c);
  c.image[0] = 12;
  c.spatial[0] = 8;
  c.spatial[1] = c.spatial[2] = 1;
  check_unet (&c);
}
END_TEST

/* Data parallel and a 2 x 2 spatial split together. */
START_TEST (test_unet_data_and_spatial)
{
  PsUnet3dConfig c;
  ps_unet3d_config_small (&c);
  c.data = 2;
  c.spatial[0] = 1;
  check_unet (&c);
}
END_TEST

/* A training step on the interpreter, parameters from their names
 * (labels in 0 .. 2). */
static PsValue *
run_step (const PsModule *m)
{
  int n = (int) m->entry->params->len;
  PsValue **args = g_new0 (PsValue *, n);
  for (int i = 0; i < n; i++)
    {
      PsInstr *p = m->entry->params->pdata[i];
      args[i] = ps_value_new (p->shape);
      guint32 st = g_str_hash (p->name);
      for (int64_t k = 0; k < args[i]->n; k++)
        {
          st = st * 1664525u + 1013904223u;
          double r = (double) (st >> 8) / (double) (1u << 24);
          double val = strcmp (p->name, "labels") == 0 ? (double) ((st >> 8) % 3)
                       : strcmp (p->name, "learning_rate") == 0 ? 0.01
                       : strcmp (p->name, "decay") == 0 ? 0.9
                       : g_str_has_suffix (p->name, ".opt1") ? 1e-3 * (1 + r) : (r - 0.5) * 0.2;
          ps_value_set (args[i], k, val);
        }
    }
  return build_test_run_consuming (m, n, args);
}

static PsValue *
run_unet (const PsUnet3dConfig *c)
{
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_unet3d_build (c, NULL, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  return run_step (m);
}

/* Every element of a and b equal, to the bit. */
static void
assert_same_outputs (const PsValue *a, const PsValue *b)
{
  ck_assert_int_eq (a->n_elems, b->n_elems);
  for (int e = 0; e < a->n_elems; e++)
    {
      ck_assert_int_eq (a->elems[e]->n, b->elems[e]->n);
      for (int64_t k = 0; k < a->elems[e]->n; k++)
        ck_assert_msg (ps_value_get (a->elems[e], k) == ps_value_get (b->elems[e], k),
                       "output %d[%" G_GINT64_FORMAT "]: loop %.9g, unrolled %.9g", e, k,
                       ps_value_get (a->elems[e], k), ps_value_get (b->elems[e], k));
    }
}

/* Gradient accumulation in the U-Net: two microbatches partition without
 * fallbacks and verify 2x2x2-split against the original; as one while
 * loop (the default) the step is the unrolled microbatches' to the bit,
 * batch norm included; without batch norm (whose statistics are per
 * microbatch) it equals the one-microbatch step on the interpreter. */
START_TEST (test_unet_microbatches)
{
  PsUnet3dConfig c;
  ps_unet3d_config_small (&c);
  c.microbatches = 2;
  check_unet (&c);
  c.spatial[0] = c.spatial[1] = c.spatial[2] = 1;
  {
    g_autoptr (PsValue) a = run_unet (&c);
    c.unroll_microbatches = TRUE;
    g_autoptr (PsValue) b = run_unet (&c);
    c.unroll_microbatches = FALSE;
    assert_same_outputs (a, b);
  }
  c.batch_norm = FALSE;
  PsValue *outs[2];
  for (int v = 0; v < 2; v++)
    {
      c.microbatches = v + 1;
      outs[v] = run_unet (&c);
    }
  ck_assert_int_eq (outs[0]->n_elems, outs[1]->n_elems);
  for (int e = 0; e < outs[0]->n_elems; e++)
    for (int64_t k = 0; k < outs[0]->elems[e]->n; k++)
      {
        double a = ps_value_get (outs[0]->elems[e], k), b = ps_value_get (outs[1]->elems[e], k);
        ck_assert_msg (fabs (a - b) <= 1e-4 * fmax (fabs (a), 1e-2),
                       "output %d[%" G_GINT64_FORMAT "]: 1 microbatch %.9g, 2: %.9g", e, k, a, b);
      }
  ps_value_free (outs[0]);
  ps_value_free (outs[1]);
}
END_TEST

START_TEST (test_unet_mlperf_shape)
{
  PsUnet3dConfig c;
  ps_unet3d_config_mlperf (&c);
  PsUnet3dInfo info;
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_unet3d_build (&c, &info, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  ck_assert_msg (ps_module_validate (m, m->name, &error), "%s", error ? error->message : "");
  /* MLPerf's U-Net: 5 levels and a bottleneck of 3x3x3 convs, 5 transposed
   * convs, the output conv; every 3x3x3 conv with batch norm. */
  ck_assert_int_eq (spmd_test_count_op (m, PS_OP_BATCH_NORM_TRAINING), 22);
  ck_assert_int_eq (spmd_test_count_op (m, PS_OP_BATCH_NORM_GRAD), 22);
  /* 31.2M parameters, the count of the reference's Unet3D. */
  ck_assert_double_gt (info.params, 31.1e6);
  ck_assert_double_lt (info.params, 31.3e6);
  c.image[0] = 100;
  ck_assert (!ps_unet3d_check (&c, &error));
  ck_assert_ptr_nonnull (strstr (error->message, "--image"));
  g_clear_error (&error);
}
END_TEST

/* Conformer: data parallel over 4 and the model dim over 2, in each of the
 * three sharding plans (2d, 1d, dp). */
START_TEST (test_conformer_data_and_model)
{
  PsConformerConfig c;
  ps_conformer_config_tiny (&c);
  c.sharding = (PsConformerSharding) _i;
  if (c.sharding == PS_CONFORMER_DP)
    c.global_batch = 8;
  PsConformerInfo info;
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_conformer_build (&c, &info, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  /* Each block's batch norm, again in its rematerialised forward. */
  ck_assert_int_eq (spmd_test_count_op (m, PS_OP_BATCH_NORM_TRAINING), 2 * c.layers);
  PsSpmdReport rep = { 0 };
  g_autoptr (PsModule) part = partition_and_verify (m, c.data * c.model, &rep);
  ck_assert_int_eq (rep.n_fallbacks, 0);
  ck_assert_int_gt (spmd_test_count_op (part, PS_OP_ALL_REDUCE), 0);
  ps_spmd_report_clear (&rep);
}
END_TEST

/* Conformer microbatches: two of them, unrolled (the family's default)
 * and as one while loop, partition and verify on 8 devices, and the two
 * forms compute the same step to the bit on the interpreter. */
START_TEST (test_conformer_microbatches)
{
  PsConformerConfig c;
  ps_conformer_config_tiny (&c);
  c.global_batch = 8;
  c.microbatches = 2;
  PsValue *outs[2] = { NULL, NULL };
  for (int loop = 0; loop < 2; loop++)
    {
      c.unroll_microbatches = !loop;
      GError *error = NULL;
      g_autoptr (PsModule) m = ps_conformer_build (&c, NULL, &error);
      ck_assert_msg (m != NULL, "%s", error ? error->message : "");
      ck_assert_int_eq (ps_module_find_computation (m, "microbatches.body") != NULL, loop);
      outs[loop] = run_step (m);
      PsSpmdReport rep = { 0 };
      g_autoptr (PsModule) part = partition_and_verify (m, c.data * c.model, &rep);
      ps_spmd_report_clear (&rep);
    }
  assert_same_outputs (outs[1], outs[0]);
  ps_value_free (outs[0]);
  ps_value_free (outs[1]);
  c.microbatches = 3;
  GError *error = NULL;
  ck_assert (!ps_conformer_check (&c, &error));
  ck_assert_ptr_nonnull (strstr (error->message, "--microbatches"));
  g_clear_error (&error);
}
END_TEST

START_TEST (test_conformer_large_shape)
{
  PsConformerConfig c;
  ps_conformer_config_large (&c);
  c.layers = 2;
  PsConformerInfo info;
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_conformer_build (&c, &info, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  ck_assert_msg (ps_module_validate (m, m->name, &error), "%s", error ? error->message : "");
  c.heads = 7;
  ck_assert (!ps_conformer_check (&c, &error));
  ck_assert_ptr_nonnull (strstr (error->message, "--heads 7"));
  g_clear_error (&error);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("convnets");
  TCase *tc = ps_check_case (s, "models", 600,
                             PS_CHECK_TESTS (test_unet_spatial_2x2x2,
                                             test_unet_spatial_uneven,
                                             test_unet_data_and_spatial,
                                             test_unet_microbatches,
                                             test_unet_mlperf_shape));
  tcase_add_loop_test (tc, test_conformer_data_and_model, PS_CONFORMER_2D, PS_CONFORMER_DP + 1);
  tcase_add_test (tc, test_conformer_large_shape);
  tcase_add_test (tc, test_conformer_microbatches);
  return ps_check_run (s, CK_FORK_GETENV);
}

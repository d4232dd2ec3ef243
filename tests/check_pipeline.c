/* GSPMD pipelining (models/pipeline.h), checked on the reference
 * interpreter: a small dense LM of 8 layers in 4 stages (2 layers each)
 * with 2 in-layer shards and 3 microbatches computes the same loss and the
 * same gradients as the same model without a pipeline; partitioned for its
 * 8 devices it agrees with itself unpartitioned, and its stage shift is a
 * collective-permute the partitioner made (the program it is given has
 * none); stages are placed next to each other on the torus
 * (ps_pipeline_mesh_devices). tests/check_vmap.c checks the vectorization
 * over stages on its own. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/build_testutil.h"
#include "tests/suite_main.h"
#include "models/dense_lm.h"
#include "models/moe_layer.h"
#include "models/moe_lm.h"
#include "partitioner/builder/vmap.h"
#include "models/pipeline.h"
#include "partitioner/interp/interp.h"
#include "partitioner/interp/verify.h"
#include "tests/interp_inputs.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/spmd/spmd.h"

static void
small_config (PsDenseLmConfig *c, int stages)
{
  ps_dense_lm_config_small (c);
  c->layers = 8;
  c->microbatches = 3;
  c->global_batch = 12;  /* a multiple of 4 stages: the head splits it over them */
  c->outputs_gradients = TRUE;
  if (stages > 1)
    {
      c->pipeline_stages = stages;
      c->mesh[0] = 1;
      c->mesh[1] = 2;
    }
}

#define LAYERS_PER_STAGE 2

/* A parameter's element k as the unpipelined model holds it: the name
 * without its layers. / layerL. / stages.layerJ. prefix, and the
 * element's index in the stacked form [8, ...] ("layerL.x" is row L,
 * "stages.layerJ.x" [4, ...] holds layer 2 k + J in row k). */
static const char *
logical (const PsInstr *p, int64_t k, int64_t *index)
{
  *index = k;
  if (g_str_has_prefix (p->name, "layers."))
    return p->name + strlen ("layers.");
  if (g_str_has_prefix (p->name, "layer") && g_ascii_isdigit (p->name[strlen ("layer")]))
    {
      char *end = NULL;
      int64_t l = g_ascii_strtoll (p->name + strlen ("layer"), &end, 10);
      *index = l * ps_shape_elements (p->shape) + k;
      return end + 1;
    }
  if (!g_str_has_prefix (p->name, "stages.layer"))
    return p->name;
  char *end = NULL;
  int64_t j = g_ascii_strtoll (p->name + strlen ("stages.layer"), &end, 10);
  int64_t rest = ps_shape_elements (p->shape) / p->shape->dims[0];
  *index = ((k / rest) * LAYERS_PER_STAGE + j) * rest + k % rest;
  return end + 1;
}

/* Weights and activations in [-0.1, 0.1), norm scales near 1. */
static const PsTestInputs pipeline_inputs = { .spread = 0.2, .ln_spread = 0.2, .train_state = FALSE };

/* A weight's element has the same value in both forms: it is hashed by
 * its logical name and index. */
static double
pipeline_value (const PsInstr *p, int64_t k, gpointer user)
{
  int64_t at;
  const char *key = logical (p, k, &at);
  return ps_test_input (&pipeline_inputs, p->name, key, at, *(const int64_t *) user);
}

static PsValue *
run_step (const PsModule *m, int64_t vocab)
{
  PsValue **args = ps_test_args (m, &pipeline_inputs, vocab, pipeline_value, &vocab);
  PsValue *out = ps_test_run (m, args);
  ps_test_args_free (m, args);
  return out;
}

/* Output e >= 1 is the gradient of weight parameter e - 1: each element
 * of a pipelined gradient against the unpipelined one of the same layer
 * and position (within 1e-4 of that gradient's largest element); every
 * unpipelined element is compared once. */
static void
compare_gradients (const PsModule *mu, const PsValue *ou, const PsModule *mp, const PsValue *op, int remat)
{
  g_autoptr (GHashTable) unp = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  /* the largest unpipelined element of a name over its layers */
  g_autoptr (GHashTable) scale = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, g_free);
  int64_t total = 0;
  for (int e = 1; e < ou->n_elems; e++)
    {
      const PsInstr *pu = mu->entry->params->pdata[e - 1];
      const PsValue *gu = ou->elems[e];
      int64_t at;
      const char *name = logical (pu, 0, &at);
      double *sc = g_hash_table_lookup (scale, name);
      if (!sc)
        {
          sc = g_new0 (double, 1);
          g_hash_table_insert (scale, (gpointer) name, sc);
        }
      for (int64_t k = 0; k < gu->n; k++)
        {
          logical (pu, k, &at);
          double *v = g_new (double, 1);
          *v = ps_value_get (gu, k);
          *sc = fmax (*sc, fabs (*v));
          g_hash_table_insert (unp, g_strdup_printf ("%s@%" G_GINT64_FORMAT, name, at), v);
        }
      total += gu->n;
    }
  double worst = 0;
  int64_t compared = 0;
  for (int e = 1; e < op->n_elems; e++)
    {
      const PsInstr *pp = mp->entry->params->pdata[e - 1];
      const PsValue *gp = op->elems[e];
      for (int64_t k = 0; k < gp->n; k++)
        {
          int64_t at;
          const char *name = logical (pp, k, &at);
          g_autofree char *key = g_strdup_printf ("%s@%" G_GINT64_FORMAT, name, at);
          const double *a = g_hash_table_lookup (unp, key);
          ck_assert_msg (a != NULL, "no unpipelined gradient for %s [%" G_GINT64_FORMAT "]", pp->name, k);
          const double *sc = g_hash_table_lookup (scale, name);
          double b = ps_value_get (gp, k), d = fabs (*a - b) / fmax (*sc, 1e-12);
          worst = fmax (worst, d);
          compared++;
          ck_assert_msg (d <= 1e-4, "remat %d gradient of %s [%" G_GINT64_FORMAT "]: unpipelined "
                         "%.9g, pipelined %.9g", remat, pp->name, k, *a, b);
        }
    }
  ck_assert_int_eq (compared, total);
  g_print ("%s remat %d: loss %.9g, largest gradient difference %.3g of the gradient's scale\n",
           mp->name, remat, ps_value_get (ou->elems[0], 0), worst);
}

START_TEST (test_pipeline_matches_unpipelined)
{
  for (int remat = 1; remat >= 0; remat--)
    {
      PsDenseLmConfig u, p;
      small_config (&u, 1);
      small_config (&p, 4);
      u.remat = p.remat = remat;
      GError *error = NULL;
      PsModule *mu = ps_dense_lm_build (&u, NULL, &error);
      ck_assert_msg (mu != NULL, "%s", error ? error->message : "");
      PsModule *mp = ps_dense_lm_build (&p, NULL, &error);
      ck_assert_msg (mp != NULL, "%s", error ? error->message : "");
      /* in f32 arithmetic: the two programs sum the microbatches'
       * contributions in different places, which bf16 rounding would
       * make differ by about 1 % */
      ps_verify_widen_floats (mu);
      ps_verify_widen_floats (mp);
      PsValue *ou = run_step (mu, u.vocab), *op = run_step (mp, p.vocab);
      double lu = ps_value_get (ou->elems[0], 0), lp = ps_value_get (op->elems[0], 0);
      ck_assert_msg (fabs (lu - lp) <= 1e-5 * fabs (lu), "loss: %.9g vs %.9g", lu, lp);
      compare_gradients (mu, ou, mp, op, remat);
      ps_value_free (ou);
      ps_value_free (op);
      ps_module_free (mu);
      ps_module_free (mp);
    }
}
END_TEST

static int
count_opcode (const PsModule *m, PsOpcode op)
{
  int n = 0;
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        n += ((const PsInstr *) c->instrs->pdata[i])->opcode == op;
    }
  return n;
}

/* m, annotated and without collective-permutes, propagated and
 * partitioned for 8 devices: the partitioned program agrees with m on the
 * interpreter and shifts the stage buffer with collective-permutes (the
 * partitioner's: forward and backward loops). Returns its all-to-alls;
 * frees m. */
static int
partition_verified (PsModule *m)
{
  GError *error = NULL;
  ck_assert_int_eq (count_opcode (m, PS_OP_COLLECTIVE_PERMUTE), 0);
  PsPropagateOptions po;
  ps_propagate_options_init (&po);
  ck_assert_msg (ps_propagate (m, &po, &error), "%s", error ? error->message : "");
  PsSpmdOptions so;
  ps_spmd_options_init (&so);
  PsModule *spmd = ps_spmd_partition (m, 8, &so, &error);
  ck_assert_msg (spmd != NULL, "%s", error ? error->message : "");
  int permutes = count_opcode (spmd, PS_OP_COLLECTIVE_PERMUTE);
  ck_assert_msg (permutes >= 2, "%d collective-permutes", permutes);
  int a2a = count_opcode (spmd, PS_OP_ALL_TO_ALL);
  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  PsVerifyResult r;
  ck_assert_msg (ps_verify_spmd (m, spmd, 8, &vo, &r, &error), "%s", error ? error->message : "");
  ck_assert_msg (r.agree, "%s", r.message);
  ps_verify_result_clear (&r);
  ps_module_free (spmd);
  ps_module_free (m);
  return a2a;
}

/* Partitioned for its 8 devices (4 stages x 2 in-layer shards), the
 * pipelined step agrees with itself on the interpreter; the program the
 * partitioner gets has no collective-permute, the partitioned one shifts
 * the stage buffer with one (forward and backward loops). */
START_TEST (test_pipeline_partitioned)
{
  PsDenseLmConfig p;
  small_config (&p, 4);
  p.outputs_gradients = FALSE;
  GError *error = NULL;
  PsModule *m = ps_dense_lm_build (&p, NULL, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  partition_verified (m);
}
END_TEST

/* The MoE LM (models/moe_lm.h): 8 layers, every other one an MoE block of
 * 8 experts, in 4 stages of 2 cores with 3 microbatches of 4 sequences,
 * 2 groups a microbatch (one per core of a stage), against the same model
 * unpipelined (2 cores: the same groups). */
static void
moe_config (PsMoeLmConfig *c, int stages)
{
  ps_moe_lm_config_small (c);
  c->layers = 8;
  c->microbatches = 3;
  c->global_batch = 12;
  c->groups = 2;
  c->outputs_gradients = TRUE;
  c->pipeline_stages = stages;
  c->cores = stages > 1 ? 8 : 2;
}

/* Same loss (cross-entropy plus the load-balancing terms, which the
 * pipeline sums over the stages' non-bubble iterations) and the same
 * gradient of every weight, the gating's router included. */
START_TEST (test_moe_pipeline_matches_unpipelined)
{
  for (int remat = 1; remat >= 0; remat--)
    {
      PsMoeLmConfig u, p;
      moe_config (&u, 1);
      moe_config (&p, 4);
      u.remat = p.remat = remat;
      GError *error = NULL;
      PsModule *mu = ps_moe_lm_build (&u, NULL, &error);
      ck_assert_msg (mu != NULL, "%s", error ? error->message : "");
      PsModule *mp = ps_moe_lm_build (&p, NULL, &error);
      ck_assert_msg (mp != NULL, "%s", error ? error->message : "");
      PsValue *ou = run_step (mu, u.vocab), *op = run_step (mp, p.vocab);
      double lu = ps_value_get (ou->elems[0], 0), lp = ps_value_get (op->elems[0], 0);
      ck_assert_msg (fabs (lu - lp) <= 1e-5 * fabs (lu), "loss: %.9g vs %.9g", lu, lp);
      compare_gradients (mu, ou, mp, op, remat);
      ps_value_free (ou);
      ps_value_free (op);
      ps_module_free (mu);
      ps_module_free (mp);
    }
}
END_TEST

/* Without its load-balancing terms the loss would differ: the test above
 * compares a loss that has them. */
START_TEST (test_moe_pipeline_aux_counts)
{
  PsMoeLmConfig p, q;
  moe_config (&p, 4);
  moe_config (&q, 4);
  q.aux_loss_weight = 0;
  GError *error = NULL;
  PsModule *mp = ps_moe_lm_build (&p, NULL, &error), *mq = ps_moe_lm_build (&q, NULL, &error);
  ck_assert_msg (mp && mq, "%s", error ? error->message : "");
  PsValue *op = run_step (mp, p.vocab), *oq = run_step (mq, q.vocab);
  double lp = ps_value_get (op->elems[0], 0), lq = ps_value_get (oq->elems[0], 0);
  /* 4 MoE layers, each term about 1 (balanced) times 0.01 */
  ck_assert_msg (lp - lq > 0.02 && lp - lq < 0.08, "aux part of the loss %.9g", lp - lq);
  ps_value_free (op);
  ps_value_free (oq);
  ps_module_free (mp);
  ps_module_free (mq);
}
END_TEST

/* Partitioned for its 8 devices, the pipelined MoE step agrees with itself
 * on the interpreter; the partitioner made the stage shift's
 * collective-permutes and the MoE block's all-to-alls within a stage. */
START_TEST (test_moe_pipeline_partitioned)
{
  PsMoeLmConfig p;
  moe_config (&p, 4);
  p.outputs_gradients = FALSE;
  GError *error = NULL;
  PsModule *m = ps_moe_lm_build (&p, NULL, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  ck_assert_int_eq (count_opcode (m, PS_OP_ALL_TO_ALL), 0);
  int a2a = partition_verified (m);
  ck_assert_msg (a2a >= 2, "%d all-to-alls", a2a);
}
END_TEST

/* A stage must run the same layers; option errors name the option. */
START_TEST (test_moe_pipeline_errors)
{
  PsMoeLmConfig p;
  GError *error = NULL;
  moe_config (&p, 4);
  p.layers = 4;            /* one layer a stage, MoE every 2 */
  ck_assert_ptr_null (ps_moe_lm_build (&p, NULL, &error));
  ck_assert_msg (strstr (error->message, "--pipeline-stages 4: a stage's 1 layers are not a whole number of "
                                         "--moe-every = 2"), "%s", error->message);
  g_clear_error (&error);
  moe_config (&p, 3);
  p.layers = 6;
  ck_assert_ptr_null (ps_moe_lm_build (&p, NULL, &error));
  ck_assert_msg (strstr (error->message, "the 8 cores are not divisible by --pipeline-stages (3)"), "%s",
                 error->message);
  g_clear_error (&error);
}
END_TEST

/* The MoE block (models/moe_layer.h) vectorized over 3 rows by ps_vmap, as
 * a pipeline stage runs it, gives in row k what the block gives on row k
 * of its inputs (f64 on the interpreter): the output and the
 * load-balancing term. No vmap rule was added for it: its gating
 * (reduce-max/min over iota, the triangular-einsum cumsum, compares,
 * selects, converts) and einsums are ops vmap had. */
enum { VN = 3, VG = 2, VS = 4, VM = 3, VE = 4, VH = 5 };

START_TEST (test_vmap_moe_layer)
{
  static const int64_t dims[4][3] = { { VG, VS, VM }, { VM, VE, 0 }, { VE, VM, VH }, { VE, VH, VM } };
  static const int ranks[4] = { 3, 2, 3, 3 };
  PsMoeConfig cfg = { VE, ps_moe_capacity (VS, VE, 2.0), 2, -1 };
  PsModule *m = ps_module_new ("vmap_moe");
  g_autoptr (PsBuilder) bm = ps_builder_new (m, "main");
  PsInstr *P[4];
  for (int i = 0; i < 4; i++)
    {
      int64_t d[4] = { VN };
      memcpy (d + 1, dims[i], sizeof (int64_t) * (gsize) ranks[i]);
      P[i] = ps_build_parameter (bm, (const char *[]) { "x", "wg", "wi", "wo" }[i], PS_F64, ranks[i] + 1, d);
    }
  /* the block for one row, in a scratch computation */
  g_autoptr (PsBuilder) bf = ps_builder_new (m, "f");
  PsInstr *f[4];
  for (int i = 0; i < 4; i++)
    f[i] = ps_build_parameter (bf, (const char *[]) { "x", "wg", "wi", "wo" }[i], PS_F64, ranks[i], dims[i]);
  PsInstr *fo[2];
  fo[0] = ps_moe_layer (bf, &cfg, f[0], f[1], f[2], f[3], &fo[1]);
  ck_assert (fo[0] != NULL && ps_builder_ok (bf));
  PsComputation *fc = f[0]->parent, *main = P[0]->parent;
  g_autoptr (GHashTable) inputs = g_hash_table_new (NULL, NULL);
  g_autoptr (GHashTable) batched = g_hash_table_new (NULL, NULL);
  for (int i = 0; i < 4; i++)
    {
      g_hash_table_insert (inputs, f[i], P[i]);
      g_hash_table_add (batched, f[i]);
    }
  PsVmapOptions vo = { VN, NULL, NULL };
  PsInstr *elems[2 * (VN + 1)];
  GError *error = NULL;
  ck_assert_msg (ps_vmap (main, fc, 2, fo, inputs, batched, &vo, elems, &error), "%s",
                 error ? error->message : "");
  ps_module_remove_computation (m, fc);
  /* the reference: the block on each row */
  for (int k = 0; k < VN; k++)
    {
      PsInstr *r[4];
      for (int i = 0; i < 4; i++)
        r[i] = build_test_row (main, P[i], k);
      elems[2 * (k + 1)] = ps_moe_layer (bm, &cfg, r[0], r[1], r[2], r[3], &elems[2 * (k + 1) + 1]);
    }
  ck_assert (ps_builder_ok (bm));
  main->root = ps_build_tuple (bm, 2 * (VN + 1), elems);
  main->is_entry = TRUE;
  m->entry = main;
  ck_assert_msg (ps_module_validate (m, "vmap_moe", &error), "%s", error ? error->message : "");
  PsValue *args[4];
  guint32 rng = 11;
  for (int i = 0; i < 4; i++)
    {
      args[i] = ps_value_new (P[i]->shape);
      for (int64_t j = 0; j < args[i]->n; j++)
        {
          rng = rng * 1664525u + 1013904223u;
          ps_value_set (args[i], j, (double) (rng >> 8) / (double) (1u << 24) - 0.5);
        }
    }
  PsValue *out = ps_interp_run (m, 4, args, NULL, &error);
  ck_assert_msg (out != NULL, "%s", error ? error->message : "");
  for (int i = 0; i < 2; i++)
    {
      const PsValue *v = out->elems[i];
      int64_t per = v->n / VN;
      for (int k = 0; k < VN; k++)
        {
          const PsValue *ref = out->elems[2 * (k + 1) + i];
          ck_assert_int_eq (ref->n, per);
          for (int64_t j = 0; j < per; j++)
            ck_assert_msg (fabs (ps_value_get (v, k * per + j) - ps_value_get (ref, j)) <= 1e-12,
                           "output %d row %d [%" G_GINT64_FORMAT "]: %.17g vs %.17g", i, k, j,
                           ps_value_get (v, k * per + j), ps_value_get (ref, j));
        }
    }
  ps_value_free (out);
  for (int i = 0; i < 4; i++)
    ps_value_free (args[i]);
  ps_module_free (m);
}
END_TEST

/* Stage neighbours on neighbouring chips: on a 4 x 4 slice with 4 stages,
 * stage k sits on chip column x = k, so every shift is one hop along x;
 * along y when only y fits; otherwise a snake through the chips (4 stages
 * of one chip each on 2 x 2 chips: one hop each). */
START_TEST (test_pipeline_mesh_devices)
{
  g_autofree int64_t *ids = ps_pipeline_mesh_devices (4, 4, 4, 2);
  ck_assert_ptr_nonnull (ids);
  for (int k = 0; k < 4; k++)
    for (int j = 0; j < 8; j++)
      {
        int64_t core = ids[k * 8 + j], chip = core / 2;
        ck_assert_int_eq (chip / 4, k);          /* x */
        if (k > 0)
          ck_assert_int_eq (ids[(k - 1) * 8 + j] + 8, core);  /* one step in x */
      }
  g_autofree int64_t *y = ps_pipeline_mesh_devices (2, 3, 4, 2);
  ck_assert_ptr_nonnull (y);
  ck_assert_int_eq (y[12] / 2 % 4, 1);           /* stage 1 on y = 1 */
  g_autofree int64_t *snake = ps_pipeline_mesh_devices (4, 2, 2, 2);
  ck_assert_ptr_nonnull (snake);
  for (int k = 1; k < 4; k++)
    for (int j = 0; j < 2; j++)
      {
        int64_t a = snake[(k - 1) * 2 + j] / 2, b = snake[k * 2 + j] / 2;
        int dx = abs ((int) (a / 2 - b / 2)), dy = abs ((int) (a % 2 - b % 2));
        ck_assert_int_eq (dx + dy, 1);
      }
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("pipeline");
  ps_check_case (s, "pipeline", 300,
                 PS_CHECK_TESTS (test_pipeline_matches_unpipelined,
                                 test_pipeline_partitioned,
                                 test_pipeline_mesh_devices,
                                 test_moe_pipeline_matches_unpipelined,
                                 test_moe_pipeline_aux_counts,
                                 test_moe_pipeline_partitioned,
                                 test_moe_pipeline_errors,
                                 test_vmap_moe_layer));
  return ps_check_run (s, CK_FORK_GETENV);
}

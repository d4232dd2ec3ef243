/* The MoE block (models/moe_layer.h): its top-k gating against a direct
 * implementation of GShard's algorithm, its partitioning on 8 devices
 * (interpreter-verified, AllToAll derived from the annotations), and its
 * gradients against finite differences. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <string.h>

#include "tests/build_testutil.h"
#include "tests/suite_main.h"
#include "models/moe_layer.h"
#include "models/moe_lm.h"
#include "partitioner/builder/autodiff.h"
#include "partitioner/interp/interp.h"
#include "partitioner/interp/verify.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/spmd/spmd.h"
#include "tests/spmd_testutil.h"

static double
rnd (guint32 *st)
{
  *st = *st * 1664525u + 1013904223u;
  return (double) (*st >> 8) / (double) (1u << 24);
}

/* GShard's group-level top-k gating (Lingvo Top2GatingOnLogits with
 * legacy_mtf_behavior, generalised to k choices), written as loops. */
static void
reference_gating (int64_t G, int64_t S, int64_t E, int64_t C, int K, const double *logits,
                  double *combine, double *aux)
{
  double *raw = g_new (double, S * E), *chosen = g_new (double, S * E);
  double *gate = g_new (double, K * S), *used = g_new (double, E);
  int64_t *idx = g_new (int64_t, K * S), *slot = g_new (int64_t, K * S);
  gboolean *kept = g_new (gboolean, K * S);
  double aux_sum = 0;
  memset (combine, 0, sizeof (double) * (gsize) (G * S * E * C));
  for (int64_t g = 0; g < G; g++)
    {
      for (int64_t s = 0; s < S; s++)
        {
          const double *l = logits + (g * S + s) * E;
          double mx = -INFINITY, sum = 0;
          for (int64_t e = 0; e < E; e++)
            mx = fmax (mx, l[e]);
          for (int64_t e = 0; e < E; e++)
            sum += exp (l[e] - mx);
          for (int64_t e = 0; e < E; e++)
            {
              raw[s * E + e] = exp (l[e] - mx) / sum;
              chosen[s * E + e] = 0;
            }
        }
      for (int64_t e = 0; e < E; e++)
        used[e] = 0;
      for (int k = 0; k < K; k++)
        {
          double *count = g_new0 (double, E);
          for (int64_t s = 0; s < S; s++)
            {
              int64_t best = 0;
              for (int64_t e = 1; e < E; e++)
                if (raw[s * E + e] * (1 - chosen[s * E + e]) > raw[s * E + best] * (1 - chosen[s * E + best]))
                  best = e;
              idx[k * S + s] = best;
              gate[k * S + s] = raw[s * E + best] * (1 - chosen[s * E + best]);
              chosen[s * E + best] = 1;
              double pos = count[best] + used[best];
              count[best] += 1;
              kept[k * S + s] = pos < (double) C;
              slot[k * S + s] = kept[k * S + s] ? (int64_t) pos : 0;
            }
          for (int64_t e = 0; e < E; e++)
            used[e] += MIN (count[e], (double) C - used[e] > 0 ? (double) C - used[e] : 0);
          if (k == 0)
            for (int64_t e = 0; e < E; e++)
              {
                double density = count[e] / (double) S, proxy = 0;
                for (int64_t s = 0; s < S; s++)
                  proxy += raw[s * E + e] / (double) S;
                aux_sum += density * proxy;
              }
          g_free (count);
        }
      for (int64_t s = 0; s < S; s++)
        {
          double denom = 0;
          for (int k = 0; k < K; k++)
            denom += gate[k * S + s];
          denom = K > 1 ? denom + 1e-9 : 1.0;
          for (int k = 0; k < K; k++)
            if (kept[k * S + s])
              combine[((g * S + s) * E + idx[k * S + s]) * C + slot[k * S + s]]
                  += gate[k * S + s] / denom;
        }
    }
  *aux = aux_sum * (double) E / (double) G;
  g_free (raw);
  g_free (chosen);
  g_free (gate);
  g_free (used);
  g_free (idx);
  g_free (slot);
  g_free (kept);
}

/* Gating of random logits on the interpreter equals the loops above, for
 * k = 1, 2, 3 and capacities that drop tokens. */
START_TEST (test_gating_matches_reference)
{
  const int64_t G = 3, S = 7, E = 4;
  for (int K = 1; K <= 3; K++)
    for (int64_t C = 1; C <= 3; C++)
      {
        g_autoptr (PsModule) m = ps_module_new ("gating");
        PsBuilder *b = ps_builder_new (m, "main");
        int64_t gse[3] = { G, S, E };
        PsInstr *logits = ps_build_parameter (b, "logits", PS_F64, 3, gse);
        PsMoeConfig cfg = { E, C, K, -1 };
        PsMoeGating gt;
        ck_assert (ps_moe_gating (b, &cfg, logits, PS_F64, &gt));
        PsInstr *outs[3] = { gt.combine, gt.dispatch, gt.aux_loss };
        GError *error = NULL;
        ck_assert_msg (ps_builder_finish_entry (b, ps_build_tuple (b, 3, outs), &error) != NULL, "%s",
                       error ? error->message : "");
        guint32 st = 11 + (guint32) (K * 7 + C);
        double *l = g_new (double, G * S * E);
        for (int64_t i = 0; i < G * S * E; i++)
          l[i] = 3 * (rnd (&st) - 0.5);
        PsValue *arg = ps_value_new_from_doubles (PS_F64, 3, gse, l);
        PsValue *out = ps_interp_run (m, 1, &arg, NULL, &error);
        ck_assert_msg (out != NULL, "%s", error ? error->message : "");
        double *want = g_new (double, G * S * E * C), aux;
        reference_gating (G, S, E, C, K, l, want, &aux);
        int dropped = 0;
        for (int64_t i = 0; i < G * S * E * C; i++)
          {
            double got = ps_value_get (out->elems[0], i);
            ck_assert_msg (fabs (got - want[i]) < 1e-12, "K=%d C=%" G_GINT64_FORMAT " combine[%" G_GINT64_FORMAT
                           "] = %g, want %g", K, C, i, got, want[i]);
            ck_assert (ps_value_get (out->elems[1], i) == (want[i] != 0 ? 1.0 : 0.0));
          }
        for (int64_t gs = 0; gs < G * S; gs++)
          {
            int n = 0;
            for (int64_t j = 0; j < E * C; j++)
              n += want[gs * E * C + j] != 0;
            dropped += K - n;
          }
        /* 7 tokens x K choices over E x C slots: something must drop. */
        if (S * K > E * C)
          ck_assert_int_gt (dropped, 0);
        ck_assert_msg (fabs (ps_value_get (out->elems[2], 0) - aux) < 1e-12, "aux %g want %g",
                       ps_value_get (out->elems[2], 0), aux);
        g_free (want);
        g_free (l);
        ps_value_free (arg);
        ps_value_free (out);
      }
}
END_TEST

/* One MoE block and its gradients as a training step would write them:
 * y = moe(x), loss = sum(y * r) + 0.01 aux; outputs loss, dx, dwg, dwi,
 * dwo. Annotations: x on G, wi/wo on E (the mesh is 1-D over n devices);
 * shard_axis -1 leaves everything unannotated. */
/* The experts' activation build_step gives the block (FALSE: ReLU). */
static gboolean step_gelu;

static PsModule *
build_step (int64_t G, int64_t S, int64_t M, int64_t H, int64_t E, int64_t C, int K,
            PsElemType t, int64_t n_devices, gboolean annotate)
{
  PsModule *m = ps_module_new ("moe_step");
  m->num_partitions = n_devices;
  PsBuilder *b = ps_builder_new (m, "main");
  int64_t mesh[1] = { n_devices };
  ps_builder_set_mesh (b, 1, mesh, NULL);
  int64_t gsm[3] = { G, S, M }, me[2] = { M, E }, emh[3] = { E, M, H }, ehm[3] = { E, H, M };
  PsInstr *x = ps_build_parameter (b, "x", t, 3, gsm);
  PsInstr *wg = ps_build_parameter (b, "wg", t, 2, me);
  PsInstr *wi = ps_build_parameter (b, "wi", t, 3, emh);
  PsInstr *wo = ps_build_parameter (b, "wo", t, 3, ehm);
  PsInstr *r = ps_build_parameter (b, "r", t, 3, gsm);
  if (annotate)
    {
      static const int64_t on0[3] = { 0, -1, -1 }, rep[2] = { -1, -1 };
      ps_builder_mesh_split (b, x, on0);
      ps_builder_mesh_split (b, r, on0);
      ps_builder_mesh_split (b, wg, rep);
      ps_builder_mesh_split (b, wi, on0);
      ps_builder_mesh_split (b, wo, on0);
    }
  PsMoeConfig cfg = { E, C, K, annotate ? 0 : -1 };
  cfg.gelu = step_gelu;
  PsInstr *aux = NULL;
  PsInstr *y = ps_moe_layer (b, &cfg, x, wg, wi, wo, &aux);
  static const int64_t all3[3] = { 0, 1, 2 };
  PsInstr *loss = ps_build_reduce_sum (b, ps_build_mul (b, y, r), 3, all3);
  PsInstr *aux_t = ps_build_convert (b, aux, t);
  loss = ps_build_add (b, loss, ps_build_mul (b, aux_t, ps_build_scalar (b, t, 0.01)));
  ck_assert_msg (ps_builder_ok (b), "%s", ps_builder_error (b) ? ps_builder_error (b)->message : "");
  PsInstr *wrt[4] = { x, wg, wi, wo };
  GError *error = NULL;
  GPtrArray *g = ps_autodiff_gradients (ps_builder_computation (b), loss, 4, wrt, &error);
  ck_assert_msg (g != NULL, "%s", error ? error->message : "");
  PsInstr *outs[5] = { loss, g->pdata[0], g->pdata[1], g->pdata[2], g->pdata[3] };
  g_ptr_array_free (g, TRUE);
  ck_assert_msg (ps_builder_finish_entry (b, ps_build_tuple (b, 5, outs), &error) != NULL, "%s",
                 error ? error->message : "");
  ck_assert_msg (ps_module_validate (m, "moe_step", &error), "%s", error ? error->message : "");
  return m;
}

/* The step partitioned for 8 devices agrees with the single-device program
 * on the interpreter, for even and uneven G and E and capacities that drop
 * tokens; the G <-> E reshards come out of the partitioner as AllToAll
 * (the model emits no collective). */
START_TEST (test_partitioned_step_verifies)
{
  static const struct { int64_t G, S, E, C; int K; } cases[] = {
    { 8, 6, 8, 1, 2 },    /* even; C = 1 < 2 S / E: tokens dropped */
    { 8, 5, 8, 2, 2 },    /* capacity factor 2: C = ceil(2 * 5 / 8) */
    { 12, 5, 6, 2, 2 },   /* 12 groups and 6 experts over 8 devices: uneven tiles */
    { 8, 6, 8, 1, 1 },    /* top-1 */
  };
  /* Each case with ReLU experts, the first two also with GELU experts
   * (expert_ffn = gelu). */
  for (gsize j = 0; j < G_N_ELEMENTS (cases) + 2; j++)
    {
      gsize i = j % G_N_ELEMENTS (cases);
      step_gelu = j >= G_N_ELEMENTS (cases);
      g_autoptr (PsModule) m = build_step (cases[i].G, cases[i].S, 4, 6, cases[i].E, cases[i].C,
                                           cases[i].K, PS_F32, 8, TRUE);
      ck_assert_int_eq (spmd_test_count_op (m, PS_OP_ALL_TO_ALL), 0);
      ck_assert_int_eq (spmd_test_count_op (m, PS_OP_ALL_REDUCE), 0);
      GError *error = NULL;
      ck_assert_msg (ps_propagate (m, NULL, &error), "%s", error ? error->message : "");
      g_autoptr (PsModule) part = ps_spmd_partition (m, 8, NULL, &error);
      ck_assert_msg (part != NULL, "%s", error ? error->message : "");
      int a2a = spmd_test_count_op (part, PS_OP_ALL_TO_ALL);
      /* Forward dispatch and combine, and their transposes in backward. */
      ck_assert_msg (a2a >= 4, "case %zu: %d all-to-all", i, a2a);
      PsVerifyOptions vo;
      ps_verify_options_init (&vo);
      vo.seed = 5 + i;
      PsVerifyResult res = { 0 };
      ck_assert_msg (ps_verify_spmd (m, part, 8, &vo, &res, &error), "%s", error ? error->message : "");
      ck_assert_msg (res.agree && res.n_compared > 0, "case %zu%s: %s", i, step_gelu ? " (gelu)" : "", res.message);
      ps_verify_result_clear (&res);
    }
  step_gelu = FALSE;
}
END_TEST

/* Every gating op keeps its op_name through autodiff and partitioning, and
 * the all-to-alls are attributed to the dispatch and combine einsums. */
START_TEST (test_op_names_survive_partitioning)
{
  g_autoptr (PsModule) m = build_step (8, 6, 4, 6, 8, 2, 2, PS_F32, 8, TRUE);
  GError *error = NULL;
  ck_assert (ps_propagate (m, NULL, &error));
  g_autoptr (PsModule) part = ps_spmd_partition (m, 8, NULL, &error);
  ck_assert (part != NULL);
  int gating = 0, a2a_named = 0;
  for (guint i = 0; i < part->entry->instrs->len; i++)
    {
      const PsInstr *in = part->entry->instrs->pdata[i];
      if (in->metadata && strstr (in->metadata, PS_MOE_OP_GATING))
        gating++;
      if (in->opcode == PS_OP_ALL_TO_ALL)
        a2a_named += in->metadata != NULL
                     && (strstr (in->metadata, PS_MOE_OP_DISPATCH) || strstr (in->metadata, PS_MOE_OP_COMBINE)
                         || strstr (in->metadata, PS_MOE_OP_EXPERTS));
    }
  ck_assert_int_gt (gating, 20);
  ck_assert_int_eq (a2a_named, spmd_test_count_op (part, PS_OP_ALL_TO_ALL));
}
END_TEST

/* Autodiff's gradients of the step equal central finite differences (f64,
 * away from the gating's decision boundaries, which an h of 1e-6 does not
 * cross for these inputs). */
START_TEST (test_gradients_match_finite_differences)
{
  const int64_t G = 2, S = 5, M = 3, H = 4, E = 4, C = 2;
  /* ReLU experts, then GELU experts (expert_ffn = gelu). */
  for (int act = 0; act < 2; act++)
  {
  step_gelu = act == 1;
  g_autoptr (PsModule) m = build_step (G, S, M, H, E, C, 2, PS_F64, 1, FALSE);
  int n = (int) m->entry->params->len;
  PsValue **args = g_new0 (PsValue *, n);
  guint32 st = 99;
  for (int i = 0; i < n; i++)
    {
      PsInstr *p = m->entry->params->pdata[i];
      args[i] = ps_value_new (p->shape);
      for (int64_t k = 0; k < args[i]->n; k++)
        ps_value_set (args[i], k, 2 * (rnd (&st) - 0.5));
    }
  GError *error = NULL;
  PsValue *out = ps_interp_run (m, n, args, NULL, &error);
  ck_assert_msg (out != NULL, "%s", error ? error->message : "");
  int checked = 0;
  for (int w = 0; w < 4; w++)
    for (int64_t k = 0; k < args[w]->n; k += 1 + args[w]->n / 7)
      {
        double v = ps_value_get (args[w], k), h = 1e-6, f[2];
        for (int side = 0; side < 2; side++)
          {
            ps_value_set (args[w], k, v + (side ? h : -h));
            PsValue *o = ps_interp_run (m, n, args, NULL, &error);
            ck_assert (o != NULL);
            f[side] = ps_value_get (o->elems[0], 0);
            ps_value_free (o);
          }
        ps_value_set (args[w], k, v);
        double fd = (f[1] - f[0]) / (2 * h), ad = ps_value_get (out->elems[1 + w], k);
        ck_assert_msg (fabs (fd - ad) <= 1e-6 + 1e-5 * fabs (fd), "input %d element %" G_GINT64_FORMAT
                       ": autodiff %.9g, finite difference %.9g", w, k, ad, fd);
        checked++;
      }
  ck_assert_int_gt (checked, 20);
  /* The router gets a gradient (through the normalised gates and the aux
   * loss), so the check above is not comparing zeros. */
  double wg_norm = 0;
  for (int64_t k = 0; k < out->elems[2]->n; k++)
    wg_norm += fabs (ps_value_get (out->elems[2], k));
  ck_assert (wg_norm > 1e-6);
  ps_value_free (out);
  for (int i = 0; i < n; i++)
    ps_value_free (args[i]);
  g_free (args);
  }
  step_gelu = FALSE;
}
END_TEST

START_TEST (test_capacity)
{
  ck_assert_int_eq (ps_moe_capacity (2048, 2048, 2.0), 2);
  ck_assert_int_eq (ps_moe_capacity (8192, 128, 2.0), 128);
  ck_assert_int_eq (ps_moe_capacity (5, 8, 2.0), 2);
  ck_assert_int_eq (ps_moe_capacity (4, 64, 1.0), 1);
}
END_TEST

/* Partitions the MoE LM step m for `cores` devices and checks it agrees
 * with the single-device step; one MoE layer makes at least 4 AllToAlls
 * (dispatch and combine forward, in the rematerialised forward, and their
 * transposes backward). */
static void
verify_moe_lm (const PsModule *m, int64_t cores, guint32 seed)
{
  GError *error = NULL;
  g_autoptr (PsModule) part = ps_spmd_partition (m, cores, NULL, &error);
  ck_assert_msg (part != NULL, "%s", error ? error->message : "");
  ck_assert_int_ge (spmd_test_count_op (part, PS_OP_ALL_TO_ALL), 4);
  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  vo.seed = seed;
  PsVerifyResult res = { 0 };
  ck_assert_msg (ps_verify_spmd (m, part, cores, &vo, &res, &error), "%s", error ? error->message : "");
  ck_assert_msg (res.agree && res.n_compared > 0, "%s", res.message);
  ps_verify_result_clear (&res);
}

/* The small MoE LM training step: valid, its initial loss near log(V)
 * on the interpreter, and partitioned for 8 cores it agrees with the
 * single-device step (the AllToAlls derived from the annotations). */
START_TEST (test_moe_lm_step_verifies)
{
  PsMoeLmConfig c;
  ps_moe_lm_config_small (&c);
  c.capacity_factor = 1.0;      /* C = 1 of 2 S/E: tokens dropped */
  PsMoeLmInfo info;
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_moe_lm_build (&c, &info, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  ck_assert_msg (ps_module_validate (m, "moe_lm", &error), "%s", error ? error->message : "");
  ck_assert_int_eq (spmd_test_count_op (m, PS_OP_ALL_TO_ALL), 0);
  ck_assert (info.active_params < info.params);
  ck_assert_msg (ps_propagate (m, NULL, &error), "%s", error ? error->message : "");
  verify_moe_lm (m, c.cores, 3);
}
END_TEST

/* The MoE LM with the block options of the layer library (rotary
 * positions, RMS norm, SwiGLU dense layers, multi-query attention, GELU
 * experts):
 * partitioned for 8 cores it agrees with the single-device step. */
START_TEST (test_moe_lm_block_options_verify)
{
  PsMoeLmConfig c;
  ps_moe_lm_config_small (&c);
  c.position = PS_POSITION_ROPE;
  c.norm = PS_NORM_RMS;
  c.ffn = PS_FFN_SWIGLU;
  c.kv_heads = 1;
  c.rotary_dim = c.head_dim / 2;   /* partial rotary */
  c.expert_ffn = PS_FFN_GELU;
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_moe_lm_build (&c, NULL, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  ck_assert_msg (ps_module_validate (m, "moe_lm", &error), "%s", error ? error->message : "");
  ck_assert_msg (ps_propagate (m, NULL, &error), "%s", error ? error->message : "");
  verify_moe_lm (m, c.cores, 5);
}
END_TEST

/* The MoE LM's step on the interpreter: ids and labels k * 7 mod V, the
 * learning rate 0.01 and decay 0.8, optimizer states in [1e-3, 2e-3),
 * norm scales near 1, other weights in [-0.05, 0.05). */
static PsValue *
run_moe_step (const PsMoeLmConfig *c)
{
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_moe_lm_build (c, NULL, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  int n = (int) m->entry->params->len;
  PsValue **args = g_new0 (PsValue *, n);
  guint32 st = 7;
  for (int i = 0; i < n; i++)
    {
      PsInstr *p = m->entry->params->pdata[i];
      gboolean ints = p->shape->etype == PS_S32, state = strstr (p->name, ".opt") != NULL;
      gboolean norm = !state && (strstr (p->name, "ln") != NULL);
      args[i] = ps_value_new (p->shape);
      for (int64_t k = 0; k < args[i]->n; k++)
        {
          double r = rnd (&st), v = ints ? (double) ((k * 7) % c->vocab)
                                  : state ? 1e-3 * (1 + r) : norm ? 1 + 0.1 * (r - 0.5) : 0.1 * (r - 0.5);
          if (strcmp (p->name, "learning_rate") == 0)
            v = 0.01;
          else if (strcmp (p->name, "decay") == 0)
            v = 0.8;
          ps_value_set (args[i], k, v);
        }
    }
  return build_test_run_consuming (m, n, args);
}

/* The microbatches as one while loop (the default) compute what the
 * unrolled microbatches compute, to the bit (the same additions into the
 * same accumulators, in the same order), and the loop's step partitioned
 * for 8 cores agrees with the single-device step. */
START_TEST (test_moe_lm_microbatch_loop)
{
  for (int mb = 2; mb <= 4; mb += 2)
    {
      PsMoeLmConfig c;
      ps_moe_lm_config_small (&c);
      c.microbatches = mb;
      c.global_batch = 32;
      g_autoptr (PsValue) a = run_moe_step (&c);
      c.unroll_microbatches = TRUE;
      g_autoptr (PsValue) b = run_moe_step (&c);
      ck_assert_int_eq (a->n_elems, b->n_elems);
      int64_t compared = 0;
      for (int e = 0; e < a->n_elems; e++)
        for (int64_t k = 0; k < a->elems[e]->n; k++, compared++)
          ck_assert_msg (ps_value_get (a->elems[e], k) == ps_value_get (b->elems[e], k),
                         "%d microbatches, output %d[%" G_GINT64_FORMAT "]: loop %.9g, unrolled %.9g",
                         mb, e, k, ps_value_get (a->elems[e], k), ps_value_get (b->elems[e], k));
      ck_assert_int_gt (compared, 1000);
    }
  PsMoeLmConfig c;
  ps_moe_lm_config_small (&c);
  c.microbatches = 2;
  c.global_batch = 32;
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_moe_lm_build (&c, NULL, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  ck_assert_msg (ps_module_find_computation (m, "microbatches.body") != NULL, "no microbatch loop");
  ck_assert_msg (ps_propagate (m, NULL, &error), "%s", error ? error->message : "");
  verify_moe_lm (m, c.cores, 11);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("moe");
  ps_check_case (s, "moe_layer", 300,
                 PS_CHECK_TESTS (test_capacity, test_gating_matches_reference,
                                 test_partitioned_step_verifies,
                                 test_op_names_survive_partitioning,
                                 test_gradients_match_finite_differences,
                                 test_moe_lm_step_verifies,
                                 test_moe_lm_block_options_verify,
                                 test_moe_lm_microbatch_loop));
  return ps_check_run (s, CK_FORK_GETENV);
}

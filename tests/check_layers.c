/* The layer library (models/net.h, models/layers.h): a sharding plan turns
 * dim letters into the expected mesh_split shardings, optimizer state follows
 * its weight (with weight-update sharding), a weight view accumulates into its
 * weight, and a model composed from the blocks differently from the dense LM
 * (no relative bias, ReLU FFN, Adam, two microbatches, remat) partitions
 * correctly: original and SPMD program agree on the reference interpreter. */
#include "config.h"

#include <check.h>
#include <string.h>

#include <math.h>

#include "tests/suite_main.h"
#include "models/dense_lm.h"
#include "models/encdec.h"
#include "models/layers.h"
#include "models/net.h"
#include "partitioner/builder/autodiff.h"
#include "partitioner/builder/builder.h"
#include "partitioner/ir/sharding.h"
#include "partitioner/interp/interp.h"
#include "partitioner/propagate/propagate.h"
#include "tests/interp_inputs.h"
#include "tests/spmd_testutil.h"

static const int64_t mesh_2x4[2] = { 2, 4 };
static const int64_t devices_8[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };

/* Axis 0 splits the batch and the weights' m; axis 1 the heads/hidden. */
static void
plan_2d (PsShardingPlan *plan)
{
  ps_sharding_plan_init (plan);
  ps_sharding_plan_split (plan, PS_ACTIVATIONS, "b", 0);
  ps_sharding_plan_split (plan, PS_ACTIVATIONS, "m", 1);
  ps_sharding_plan_split (plan, PS_WEIGHTS, "m", 0);
  ps_sharding_plan_split (plan, PS_WEIGHTS, "nhv", 1);
}

static void
assert_sharding (const PsInstr *x, const char *want)
{
  if (want == NULL)
    {
      ck_assert_msg (x->sharding == NULL, "%s is sharded", x->name);
      return;
    }
  ck_assert_msg (x->sharding != NULL, "%s has no sharding", x->name);
  g_autofree char *s = ps_sharding_to_string (x->sharding);
  ck_assert_msg (strcmp (s, want) == 0, "%s: %s, want %s", x->name, s, want);
}

START_TEST (test_plan_shardings)
{
  PsShardingPlan plan;
  plan_2d (&plan);
  g_autoptr (PsNet) net = ps_net_new ("t", "main", 2, mesh_2x4, devices_8, &plan);
  PsAttention att;
  ps_attention_weights (net, "l0", 16, 4, 2, 8, &att);
  assert_sharding (att.ln, NULL);
  assert_sharding (att.wq, "{devices=[2,4,1]<=[8]}");
  assert_sharding (att.rel_bias, "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}");
  int64_t bsm[3] = { 4, 2, 16 };
  PsInstr *x = ps_net_input (net, "x", PS_BF16, 3, bsm);
  assert_sharding (x, NULL);
  ps_net_annotate (net, x, "bsm");
  assert_sharding (x, "{devices=[2,1,4]<=[8]}");
  /* embedding [v, m]: v on axis 1, m on axis 0; 4 user annotations so far. */
  PsInstr *emb = ps_embedding_weight (net, "emb", 8, 16);
  assert_sharding (emb, "{devices=[4,2]<=[2,4]T(1,0)}");
  ck_assert_int_eq (net->n_annotations, 7);
  ck_assert_str_eq (att.wk->name, "l0.wk");

  /* All devices, and a class the plan leaves to propagation. */
  ps_sharding_plan_init (&plan);
  ps_sharding_plan_split (&plan, PS_ACTIVATIONS, "b", PS_AXIS_ALL);
  g_autoptr (PsNet) dp = ps_net_new ("t", "main", 2, mesh_2x4, devices_8, &plan);
  PsInstr *w = ps_net_weight (dp, "w", "mh", 2, (int64_t[]) { 16, 8 });
  assert_sharding (w, NULL);
  int64_t big[3] = { 8, 2, 16 };
  PsInstr *y = ps_net_input (dp, "y", PS_BF16, 3, big);
  ps_net_annotate (dp, y, "bsm");
  assert_sharding (y, "{devices=[8,1,1]<=[8]}");
  ck_assert_int_eq (dp->n_annotations, 1);
}
END_TEST

START_TEST (test_optimizer_state_shardings)
{
  PsShardingPlan plan;
  plan_2d (&plan);
  g_autoptr (PsNet) net = ps_net_new ("t", "main", 2, mesh_2x4, devices_8, &plan);
  PsInstr *w1 = ps_net_weight (net, "w1", "mh", 2, (int64_t[]) { 16, 8 });
  PsInstr *ln = ps_layer_norm_weight (net, NULL, "ln", 16);
  ck_assert_int_eq (ps_net_n_weights (net), 2);
  ps_net_add_optimizer_state (net, PS_OPTIMIZER_ADAFACTOR, 0);
  /* Parameters: w1, ln, then the state. w1.opt0 [16] (Adafactor's row
   * factor keeps m): m on axis 0, like w1. w1.opt1 [8] (the column factor
   * keeps h): h on axis 1; weight-update sharding over axis 0 does not
   * apply (dim 0 is already split). ln.opt0 [16]: nothing splits it, so
   * weight-update sharding puts dim 0 on axis 0. */
  PsComputation *c = net->c;
  ck_assert_int_eq (c->params->len, 5);
  PsInstr *row = c->params->pdata[2], *col = c->params->pdata[3], *lns = c->params->pdata[4];
  ck_assert_str_eq (row->name, "w1.opt0");
  assert_sharding (row, "{devices=[2,4]<=[8] last_tile_dim_replicate}");
  assert_sharding (col, "{devices=[4,2]<=[2,4]T(1,0) last_tile_dim_replicate}");
  assert_sharding (lns, "{devices=[2,4]<=[8] last_tile_dim_replicate}");
  /* State annotations are not the user's. */
  ck_assert_int_eq (net->n_annotations, 1);
  (void) w1;
  (void) ln;
}
END_TEST

/* d(sum(view * x))/d(weight) = x, through a bf16 view, accumulated twice. */
START_TEST (test_view_gradient_accumulates)
{
  PsShardingPlan plan;
  ps_sharding_plan_init (&plan);
  g_autoptr (PsNet) net = ps_net_new ("t", "main", 2, mesh_2x4, devices_8, &plan);
  int64_t d[1] = { 4 };
  PsInstr *w = ps_net_weight (net, "w", NULL, 1, d);
  ps_net_add_optimizer_state (net, PS_OPTIMIZER_ADAM, PS_AXIS_NONE);
  PsInstr *x = ps_net_input (net, "x", PS_BF16, 1, d);
  for (int u = 0; u < 2; u++)
    {
      PsInstr *v = ps_net_weight_view (net, w, PS_BF16);
      ck_assert_int_eq (v->opcode, PS_OP_CONVERT);
      PsInstr *p = ps_build_binary (ps_net_builder (net), PS_OP_MULTIPLY, v, x);
      int64_t all = 0;
      PsInstr *loss = ps_build_convert (ps_net_builder (net), ps_build_sum (ps_net_builder (net), p, 1, &all), PS_F32);
      ps_net_add_loss (net, loss);
      GError *error = NULL;
      ck_assert (ps_net_vjp (net, loss, ps_build_scalar (ps_net_builder (net), PS_F32, 1.0), NULL, NULL, 1, &v, &error));
    }
  PsInstr *lr = ps_net_input (net, "lr", PS_F32, 0, NULL);
  PsInstr *decay = ps_net_input (net, "decay", PS_F32, 0, NULL);
  g_autoptr (PsModule) m = ps_net_finish (g_steal_pointer (&net), lr, decay);
  GError *error = NULL;
  ck_assert_msg (ps_module_validate (m, "t", &error), "%s", error ? error->message : "");
  /* The accumulated gradient is f32 and an add of two converted grads. */
  int adds_of_converts = 0;
  for (guint i = 0; i < m->entry->instrs->len; i++)
    {
      PsInstr *in = m->entry->instrs->pdata[i];
      if (in->opcode == PS_OP_ADD && in->shape->etype == PS_F32 && in->shape->rank == 1
          && in->operands[0]->opcode == PS_OP_CONVERT && in->operands[1]->opcode == PS_OP_CONVERT)
        adds_of_converts++;
    }
  ck_assert_int_eq (adds_of_converts, 1);
}
END_TEST

/* A block written with the builder (as models/moe_layer.c is) inside a
 * net: same computation, parameters numbered in order, the builder's mesh
 * is the net's, the step validates and partitions. */
START_TEST (test_builder_block_in_net)
{
  PsShardingPlan plan;
  plan_2d (&plan);
  g_autoptr (PsNet) net = ps_net_new ("mixed", "train_step", 2, mesh_2x4, devices_8, &plan);
  PsInstr *w = ps_net_weight (net, "w", "mh", 2, (int64_t[]) { 8, 16 });
  ps_net_add_optimizer_state (net, PS_OPTIMIZER_ADAFACTOR, PS_AXIS_NONE);
  PsBuilder *b = ps_net_builder (net);
  ck_assert (ps_net_builder (net) == b);
  PsInstr *x = ps_build_parameter (b, "x", PS_F32, 3, (int64_t[]) { 4, 2, 8 });
  ck_assert_int_eq (x->parameter_number, 3);
  ps_net_annotate (net, x, "bsm");
  PsInstr *h = ps_build_mesh_split (b, ps_build_einsum (b, "bsm,mh->bsh", x, w), (int64_t[]) { 0, -1, 1 });
  PsInstr *loss = ps_build_reduce_sum (b, ps_build_mul (b, h, h), 3, (int64_t[]) { 0, 1, 2 });
  ck_assert (ps_builder_ok (b));
  ps_net_add_loss (net, loss);
  GError *error = NULL;
  ck_assert_msg (ps_net_vjp (net, loss, ps_build_scalar (ps_net_builder (net), PS_F32, 1.0), NULL, NULL, 1, &w, &error),
                 "%s", error ? error->message : "");
  PsInstr *lr = ps_net_input (net, "lr", PS_F32, 0, NULL);
  ck_assert_int_eq (lr->parameter_number, 4);
  PsInstr *decay = ps_net_input (net, "decay", PS_F32, 0, NULL);
  g_autoptr (PsModule) m = ps_net_finish (g_steal_pointer (&net), lr, decay);
  ck_assert_msg (ps_module_validate (m, "mixed", &error), "%s", error ? error->message : "");
  ck_assert (ps_propagate (m, NULL, &error));
  PsSpmdOptions opts;
  ps_spmd_options_init (&opts);
  ck_assert_msg (spmd_test_verify (m, 8, &opts, 3, NULL, &error), "%s", error ? error->message : "");
}
END_TEST

/* A model the dense LM is not: attention without relative bias, ReLU FFN,
 * two layers, two microbatches, remat, Adam. */
static PsModule *
build_composed (void)
{
  PsShardingPlan plan;
  plan_2d (&plan);
  g_autoptr (PsNet) net = ps_net_new ("composed", "train_step", 2, mesh_2x4, devices_8, &plan);
  const int64_t B = 4, S = 4, M = 8, H = 16, N = 4, D = 2, V = 8;
  PsAttentionContext ctx;
  PsInstr *emb = ps_embedding_weight (net, "embedding", V, M);
  PsTransformerLayer tl[2];
  PsLayer layers[2];
  for (int l = 0; l < 2; l++)
    {
      g_autofree char *prefix = g_strdup_printf ("layer%d", l);
      int first = ps_net_n_weights (net);
      ps_transformer_layer_weights (net, prefix, M, H, N, D, 0, FALSE, &ctx, &tl[l]);
      layers[l] = ps_layer (net, ps_transformer_layer, &tl[l], first);
      ck_assert_int_eq (layers[l].n_weights, 8);
      ck_assert (tl[l].ffn.w1_gate == NULL && tl[l].attention.rel_bias == NULL);
    }
  PsInstr *final_ln = ps_layer_norm_weight (net, NULL, "final_ln", M);
  ps_net_add_optimizer_state (net, PS_OPTIMIZER_ADAM, PS_AXIS_NONE);
  int64_t bs[2] = { B, S };
  PsInstr *ids = ps_net_input (net, "ids", PS_S32, 2, bs);
  PsInstr *labels = ps_net_input (net, "labels", PS_S32, 2, bs);
  PsInstr *lr = ps_net_input (net, "lr", PS_F32, 0, NULL);
  PsInstr *decay = ps_net_input (net, "beta2", PS_F32, 0, NULL);
  ps_attention_context_causal (net, S, 0, &ctx);
  ck_assert (ctx.rel_onehot == NULL && ctx.mask != NULL);
  for (int u = 0; u < 2; u++)
    {
      PsInstr *x0 = ps_embed (net, ps_net_microbatch (net, ids, u, 2), ps_build_convert (ps_net_builder (net), emb, PS_BF16));
      PsInstr *xs[3];
      PsInstr *top = ps_layer_stack_forward (net, 2, layers, x0, xs);
      PsInstr *head = ps_net_weight_view (net, emb, PS_BF16);
      PsInstr *h = ps_layer_norm (net, top, final_ln);
      PsInstr *logits = ps_build_convert (ps_net_builder (net), ps_net_einsum (net, "bsm,vm->bsv", h, head), PS_F32);
      PsInstr *loss = ps_softmax_cross_entropy (net, logits, ps_net_microbatch (net, labels, u, 2));
      ps_net_add_loss (net, loss);
      PsInstr *hw[2] = { final_ln, head }, *gx;
      GError *error = NULL;
      ck_assert (ps_net_vjp (net, loss, ps_build_scalar (ps_net_builder (net), PS_F32, 0.5), top, &gx, 2, hw, &error));
      ck_assert (ps_layer_stack_backward (net, 2, layers, xs, gx, TRUE, &gx, &error));
      ck_assert (ps_net_vjp (net, x0, gx, NULL, NULL, 1, &emb, &error));
    }
  /* embedding + 2 layers x (6 weights + 1 input per microbatch x 2). */
  ck_assert_int_eq (net->n_annotations, 1 + 2 * (6 + 2));
  return ps_net_finish (g_steal_pointer (&net), lr, decay);
}

START_TEST (test_composed_model_partitions)
{
  g_autoptr (PsModule) m = build_composed ();
  GError *error = NULL;
  ck_assert_msg (ps_module_validate (m, "composed", &error), "%s", error ? error->message : "");
  ck_assert (ps_propagate (m, NULL, &error));
  PsSpmdOptions opts;
  ps_spmd_options_init (&opts);
  ck_assert_msg (spmd_test_verify (m, 8, &opts, 7, NULL, &error), "%s", error ? error->message : "");
  ck_assert_int_gt (spmd_test_count_op (m, PS_OP_DOT), 0);
}
END_TEST


/* ---- block options --------------------------------------------------------------- */

/* One layer of block options o in f32 (so finite differences are exact
 * enough), unsharded: loss = mean(layer(x)^2 * r) with a fixed r, returning
 * (loss, every weight's gradient). */
static PsModule *
build_block_grad (const PsBlockOptions *o)
{
  PsShardingPlan plan;
  ps_sharding_plan_init (&plan);
  static const int64_t one[2] = { 1, 1 }, dev0[1] = { 0 };
  g_autoptr (PsNet) net = ps_net_new ("block", "main", 2, one, dev0, &plan);
  net->act = PS_F32;
  const int64_t B = 2, S = 4, M = 8, H = 12, N = 4, D = 4;
  PsAttentionContext ctx;
  PsTransformerLayer tl;
  ps_transformer_layer_weights_opts (net, "l", M, H, N, D, o, &ctx, &tl);
  PsLayer layer = ps_layer (net, ps_transformer_layer, &tl, 0);
  ps_net_add_optimizer_state (net, PS_OPTIMIZER_ADAM, PS_AXIS_NONE);
  int64_t bsm[3] = { B, S, M };
  PsInstr *x = ps_net_input (net, "x", PS_F32, 3, bsm);
  PsInstr *r = ps_net_input (net, "r", PS_F32, 3, bsm);
  ps_attention_context_causal_opts (net, S, D, o, &ctx);
  PsInstr *y = ps_transformer_layer (net, &tl, x);
  PsInstr *yy = ps_build_binary (ps_net_builder (net), PS_OP_MULTIPLY, ps_build_binary (ps_net_builder (net), PS_OP_MULTIPLY, y, y), r);
  int64_t all[3] = { 0, 1, 2 };
  PsInstr *loss = ps_build_sum (ps_net_builder (net), yy, 3, all);
  ps_net_add_loss (net, loss);
  GError *error = NULL;
  PsInstr **w = (PsInstr **) net->weights->pdata;
  ck_assert_msg (ps_net_vjp (net, loss, ps_build_scalar (ps_net_builder (net), PS_F32, 1.0), NULL, NULL, layer.n_weights, w,
                             &error), "%s", error ? error->message : "");
  return ps_net_finish_gradients (g_steal_pointer (&net));
}

static double
block_value (const char *name, int64_t k)
{
  guint32 st = g_str_hash (name) ^ (guint32) (k * 2654435761u);
  st = st * 1664525u + 1013904223u;
  double u = (double) (st >> 8) / (double) (1u << 24) - 0.5;
  if (g_str_has_suffix (name, "ln1") || g_str_has_suffix (name, "ln2"))
    return 1.0 + 0.2 * u;
  return strcmp (name, "x") == 0 || strcmp (name, "r") == 0 ? 2 * u : 0.6 * u;
}

/* The rotary tables of both pairings against the formulas written out
 * (RoFormer eq. 34; half: GPT-NeoX/Llama rotate_half, adjacent: GPT-J's
 * mesh-transformer-jax rotate_every_two), full and partial width: the
 * loss sum(cos*a) + sum(sin*b) + sum(rot*c) with w = 1 weights every
 * entry of the three tables by a different input value. */
START_TEST (test_rope_pairs_tables)
{
  const int64_t S = 3, D = 6;
  for (int pairs = 0; pairs < 2; pairs++)
    for (int64_t R = 4; R <= D; R += 2)
      {
        PsShardingPlan plan;
        ps_sharding_plan_init (&plan);
        static const int64_t one[2] = { 1, 1 }, dev0[1] = { 0 };
        g_autoptr (PsNet) net = ps_net_new ("rope", "main", 2, one, dev0, &plan);
        net->act = PS_F32;
        PsBuilder *b = ps_net_builder (net);
        int64_t n1[1] = { 1 }, sd[2] = { S, D }, dd[2] = { D, D }, both[2] = { 0, 1 };
        PsInstr *w = ps_net_weight (net, "w", NULL, 1, n1);
        PsInstr *a = ps_net_input (net, "a", PS_F32, 2, sd);
        PsInstr *bb = ps_net_input (net, "b", PS_F32, 2, sd);
        PsInstr *cc = ps_net_input (net, "c", PS_F32, 2, dd);
        PsBlockOptions o;
        ps_block_options_init (&o, 0, TRUE);
        o.position = PS_POSITION_ROPE;
        o.rotary_dim = R;
        o.rotary_pairs = (PsRotaryPairs) pairs;
        PsAttentionContext ctx;
        ps_attention_context_causal_opts (net, S, D, &o, &ctx);
        PsInstr *sum = ps_build_add (b, ps_build_sum (b, ps_build_mul (b, ctx.rope_cos, a), 2, both),
                                     ps_build_sum (b, ps_build_mul (b, ctx.rope_sin, bb), 2, both));
        sum = ps_build_add (b, sum, ps_build_sum (b, ps_build_mul (b, ctx.rope_rot, cc), 2, both));
        int64_t d0[1] = { 0 };
        PsInstr *loss = ps_build_sum (b, ps_build_mul (b, w, sum), 1, d0);
        ps_net_add_loss (net, loss);
        GError *error = NULL;
        ck_assert_msg (ps_net_vjp (net, loss, ps_build_scalar (b, PS_F32, 1.0), NULL, NULL, 1, &w, &error), "%s",
                       error ? error->message : "");
        g_autoptr (PsModule) m = ps_net_finish_gradients (g_steal_pointer (&net));
        int n = (int) m->entry->params->len;
        g_autofree PsValue **args = g_new0 (PsValue *, n);
        double want = 0;
        for (int i = 0; i < n; i++)
          {
            PsInstr *p = m->entry->params->pdata[i];
            args[i] = ps_value_new (p->shape);
            for (int64_t k = 0; k < args[i]->n; k++)
              ps_value_set (args[i], k, strcmp (p->name, "w") == 0 ? 1.0 : block_value (p->name, k));
          }
        for (int i = 0; i < n; i++)
          {
            const char *name = ((PsInstr *) m->entry->params->pdata[i])->name;
            for (int64_t k = 0; k < args[i]->n; k++)
              {
                const double v = ps_value_get (args[i], k);
                const int64_t r0 = k / D, c0 = k % D;   /* [s, j] or [i, e] */
                if (strcmp (name, "a") == 0 || strcmp (name, "b") == 0)
                  {
                    const int64_t pair = pairs ? c0 / 2 : (c0 >= R / 2 ? c0 - R / 2 : c0);
                    const double angle = (double) r0 * pow (10000.0, -2.0 * (double) pair / (double) R);
                    const double t = strcmp (name, "a") == 0 ? (c0 < R ? cos (angle) : 1.0)
                                                            : (c0 < R ? sin (angle) : 0.0);
                    want += t * v;
                  }
                else if (strcmp (name, "c") == 0 && r0 < R && c0 < R)
                  {
                    /* out[e] = sum_i x[i] rot[i, e]: half: out[e] = -x[e + R/2] for e < R/2 and
                     * x[e - R/2] above; adjacent: out[2k] = -x[2k+1], out[2k+1] = x[2k]. */
                    double t = 0;
                    if (pairs)
                      t = c0 % 2 == 0 ? (r0 == c0 + 1 ? -1.0 : 0.0) : (r0 == c0 - 1 ? 1.0 : 0.0);
                    else
                      t = c0 < R / 2 ? (r0 == c0 + R / 2 ? -1.0 : 0.0) : (r0 == c0 - R / 2 ? 1.0 : 0.0);
                    want += t * v;
                  }
              }
          }
        PsValue *out = ps_interp_run (m, n, args, NULL, &error);
        ck_assert_msg (out != NULL, "%s", error ? error->message : "");
        const double got = ps_value_get (out->elems[0], 0);
        ck_assert_msg (fabs (got - want) <= 1e-4 * (1 + fabs (want)), "pairs %s, r %" G_GINT64_FORMAT
                       ": tables give %.7g, formulas %.7g", ps_rotary_pairs_names[pairs], R, got, want);
        ps_value_free (out);
        for (int i = 0; i < n; i++)
          ps_value_free (args[i]);
      }
}
END_TEST

/* Gradients of the new blocks (RMS norm, rotary positions, full and partial, grouped-query
 * and multi-query attention, the parallel block, SwiGLU, GELU) against
 * central finite differences of the loss, a few elements of every weight. */
START_TEST (test_block_gradients_finite_differences)
{
  PsBlockOptions cases[6];
  for (int i = 0; i < 6; i++)
    ps_block_options_init (&cases[i], 0, TRUE);
  cases[0].position = PS_POSITION_ROPE, cases[0].norm = PS_NORM_RMS, cases[0].ffn = PS_FFN_SWIGLU;
  cases[0].kv_heads = 2, cases[0].block = PS_BLOCK_PARALLEL;
  cases[1].position = PS_POSITION_ROPE, cases[1].kv_heads = 1, cases[1].ffn = PS_FFN_GELU;
  cases[2].position = PS_POSITION_RELATIVE, cases[2].rel_buckets = 4, cases[2].kv_heads = 2;
  cases[2].norm = PS_NORM_RMS;
  cases[3].block = PS_BLOCK_PARALLEL, cases[3].ffn = PS_FFN_RELU;
  /* Partial rotary (GPT-J): 2 of the head's 4 dims rotate. */
  cases[4].position = PS_POSITION_ROPE, cases[4].rotary_dim = 2, cases[4].kv_heads = 2;
  cases[4].block = PS_BLOCK_PARALLEL, cases[4].ffn = PS_FFN_GELU;
  /* GPT-J's pairing of neighbouring dims, partial. */
  cases[5] = cases[4];
  cases[5].rotary_pairs = PS_ROTARY_ADJACENT;
  for (int c = 0; c < 6; c++)
    {
      g_autoptr (PsModule) m = build_block_grad (&cases[c]);
      GError *error = NULL;
      ck_assert_msg (ps_module_validate (m, "block", &error), "%s", error ? error->message : "");
      int n = (int) m->entry->params->len;
      g_autofree PsValue **args = g_new0 (PsValue *, n);
      for (int i = 0; i < n; i++)
        {
          PsInstr *p = m->entry->params->pdata[i];
          args[i] = ps_value_new (p->shape);
          for (int64_t k = 0; k < args[i]->n; k++)
            ps_value_set (args[i], k, block_value (p->name, k));
        }
      PsValue *out = ps_interp_run (m, n, args, NULL, &error);
      ck_assert_msg (out != NULL, "%s", error ? error->message : "");
      int checked = 0;
      for (int e = 1; e < out->n_elems; e++)
        {
          PsValue *g = out->elems[e];
          int wi = e - 1;      /* weights are the first parameters */
          for (int64_t k = 0; k < g->n; k += 1 + g->n / 5)
            {
              const double eps = 1e-3, x0 = ps_value_get (args[wi], k);
              double lf[2];
              for (int sgn = 0; sgn < 2; sgn++)
                {
                  ps_value_set (args[wi], k, x0 + (sgn ? -eps : eps));
                  PsValue *o = ps_interp_run (m, n, args, NULL, &error);
                  ck_assert (o != NULL);
                  lf[sgn] = ps_value_get (o->elems[0], 0);
                  ps_value_free (o);
                }
              ps_value_set (args[wi], k, x0);
              double fd = (lf[0] - lf[1]) / (2 * eps), an = ps_value_get (g, k);
              ck_assert_msg (fabs (fd - an) <= 2e-3 + 2e-2 * fabs (fd), "case %d, %s[%" G_GINT64_FORMAT
                             "]: autodiff %g, finite differences %g", c,
                             ((PsInstr *) m->entry->params->pdata[wi])->name, k, an, fd);
              checked++;
            }
        }
      ck_assert_int_gt (checked, 8);
      ps_value_free (out);
      for (int i = 0; i < n; i++)
        ps_value_free (args[i]);
    }
}
END_TEST

/* The dense LM with the block options and sharding presets: the
 * partitioned step agrees with the original on the reference interpreter,
 * and each sharding preset makes the collectives its design implies (from
 * its annotations only; doc/models.md counts them). */
START_TEST (test_dense_options_partition)
{
  struct {
    const char *what;
    PsPositionKind position;
    PsBlockKind block;
    PsNormKind norm;
    PsFfnKind ffn;
    int64_t kv_heads;
    gboolean untied;
    int rel_buckets;
    PsShardingPreset sharding;
    const char *want[3];       /* collectives the program must contain */
    int stages;                /* > 1: pipelined, in-layer mesh 2x2 */
    int64_t rotary_dim;
    PsRotaryPairs rotary_pairs;
  } cases[] = {
    { "rope, parallel, rms, swiglu, gqa, untied (2d)", PS_POSITION_ROPE, PS_BLOCK_PARALLEL, PS_NORM_RMS,
      PS_FFN_SWIGLU, 4, TRUE, 0, PS_SHARDING_2D, { "all-reduce(" } },
    { "learned, gelu, mqa (dp)", PS_POSITION_LEARNED, PS_BLOCK_SEQUENTIAL, PS_NORM_LAYER, PS_FFN_GELU, 1,
      FALSE, 0, PS_SHARDING_DP, { "all-reduce(" } },
    { "megatron, no positions, relu", PS_POSITION_NONE, PS_BLOCK_SEQUENTIAL, PS_NORM_LAYER, PS_FFN_RELU, 0,
      FALSE, 0, PS_SHARDING_MEGATRON, { "all-reduce(" } },
    { "megatron-sp, rope", PS_POSITION_ROPE, PS_BLOCK_SEQUENTIAL, PS_NORM_LAYER, PS_FFN_GEGLU, 0, FALSE, 8,
      PS_SHARDING_MEGATRON_SP, { "all-gather(", "reduce-scatter(" } },
    { "fsdp, relative, swiglu, rms", PS_POSITION_RELATIVE, PS_BLOCK_SEQUENTIAL, PS_NORM_RMS, PS_FFN_SWIGLU,
      0, FALSE, 8, PS_SHARDING_FSDP, { "all-gather(", "reduce-scatter(" } },
    { "pipeline, learned, parallel, rms, swiglu, gqa", PS_POSITION_LEARNED, PS_BLOCK_PARALLEL, PS_NORM_RMS,
      PS_FFN_SWIGLU, 2, FALSE, 0, PS_SHARDING_2D, { "collective-permute(" }, 2 },
    { "partial rotary (2 of 4 dims), parallel, gelu, megatron", PS_POSITION_ROPE, PS_BLOCK_PARALLEL,
      PS_NORM_LAYER, PS_FFN_GELU, 0, FALSE, 0, PS_SHARDING_MEGATRON, { "all-reduce(" }, 1, 2 },
    { "GPT-J's adjacent rotary pairs, partial, parallel, gelu, megatron", PS_POSITION_ROPE, PS_BLOCK_PARALLEL,
      PS_NORM_LAYER, PS_FFN_GELU, 0, FALSE, 0, PS_SHARDING_MEGATRON, { "all-reduce(" }, 1, 2, PS_ROTARY_ADJACENT },
    /* Fewer kv heads than the axis that splits heads (4, or all 8): the
     * query heads of each kv head split instead, K and V replicated. */
    { "megatron, mqa", PS_POSITION_ROPE, PS_BLOCK_PARALLEL, PS_NORM_LAYER, PS_FFN_GELU, 1, TRUE, 0,
      PS_SHARDING_MEGATRON, { "all-reduce(" } },
    { "megatron-sp, gqa 2", PS_POSITION_NONE, PS_BLOCK_SEQUENTIAL, PS_NORM_RMS, PS_FFN_SWIGLU, 2, FALSE, 0,
      PS_SHARDING_MEGATRON_SP, { "all-gather(", "reduce-scatter(" } },
    { "2d, gqa 2, relative", PS_POSITION_RELATIVE, PS_BLOCK_SEQUENTIAL, PS_NORM_LAYER, PS_FFN_GEGLU, 2, FALSE,
      8, PS_SHARDING_2D, { "all-reduce(" } },
    { "1d, mqa", PS_POSITION_ROPE, PS_BLOCK_SEQUENTIAL, PS_NORM_LAYER, PS_FFN_GEGLU, 1, FALSE, 0,
      PS_SHARDING_1D, { "all-reduce(" } },
    /* An untied head in a pipeline: its own softmax weight, outside the
     * stages like the embedding. */
    { "pipeline, untied, rope", PS_POSITION_ROPE, PS_BLOCK_SEQUENTIAL, PS_NORM_RMS, PS_FFN_SWIGLU, 0, TRUE, 0,
      PS_SHARDING_2D, { "collective-permute(" }, 2 },
    { "pipeline 1d, mqa", PS_POSITION_LEARNED, PS_BLOCK_SEQUENTIAL, PS_NORM_LAYER, PS_FFN_GELU, 1, FALSE, 0,
      PS_SHARDING_1D, { "collective-permute(" }, 2 },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      PsDenseLmConfig c;
      ps_dense_lm_config_small (&c);
      c.heads = 8;
      c.head_dim = 4;
      c.vocab = 60;            /* not a multiple of 8: padded where split */
      c.position = cases[i].position;
      c.block = cases[i].block;
      c.norm = cases[i].norm;
      c.ffn = cases[i].ffn;
      c.kv_heads = cases[i].kv_heads;
      c.untied_embeddings = cases[i].untied;
      c.rel_buckets = cases[i].rel_buckets;
      c.rotary_dim = cases[i].rotary_dim;
      c.rotary_pairs = cases[i].rotary_pairs;
      c.sharding = cases[i].sharding;
      if (cases[i].stages > 1)
        {
          c.pipeline_stages = cases[i].stages;
          c.microbatches = 2;
          c.mesh[0] = c.mesh[1] = 2;
        }
      GError *error = NULL;
      g_autoptr (PsModule) m = ps_dense_lm_build (&c, NULL, &error);
      ck_assert_msg (m != NULL, "%s: %s", cases[i].what, error ? error->message : "");
      ck_assert_msg (ps_module_validate (m, "dense", &error), "%s: %s", cases[i].what, error->message);
      ck_assert (ps_propagate (m, NULL, &error));
      PsSpmdOptions opts;
      ps_spmd_options_init (&opts);
      g_autofree char *text = NULL;
      ck_assert_msg (spmd_test_verify (m, 8, &opts, 11 + (guint32) i, &text, &error), "%s: %s",
                     cases[i].what, error ? error->message : "");
      for (int k = 0; k < 3 && cases[i].want[k]; k++)
        ck_assert_msg (strstr (text, cases[i].want[k]) != NULL, "%s: no %s", cases[i].what, cases[i].want[k]);
    }
}
END_TEST

/* The encoder-decoder step (T5-shaped: RMS norm, GEGLU, untied, relative
 * buckets; then rotary, SwiGLU and grouped-query attention under the
 * megatron preset; layer norm and tied embeddings under fsdp): partitioned,
 * it agrees with the original on the reference interpreter (loss, every
 * updated weight and optimizer state, encoder ones included). */
START_TEST (test_encdec_partitions)
{
  for (int k = 0; k < 4; k++)
    {
      PsEncDecConfig c;
      ps_encdec_config_small (&c);
      c.vocab = 60;
      if (k == 1)
        {
          c.position = PS_POSITION_ROPE;
          c.ffn = PS_FFN_SWIGLU;
          c.kv_heads = 4;
          c.heads = 8;
          c.head_dim = 2;
          c.sharding = PS_SHARDING_MEGATRON;
        }
      if (k == 3)
        {
          /* Partial rotary: 2 of 4 dims, encoder and decoder. */
          c.position = PS_POSITION_ROPE;
          c.head_dim = 4;
          c.rotary_dim = 2;
          c.sharding = PS_SHARDING_MEGATRON;
        }
      if (k == 2)
        {
          c.sharding = PS_SHARDING_FSDP;
          c.norm = PS_NORM_LAYER;
          c.untied_embeddings = FALSE;
        }
      GError *error = NULL;
      PsModelInfo info;
      g_autoptr (PsModule) m = ps_encdec_build (&c, &info, &error);
      ck_assert_msg (m != NULL, "%s", error ? error->message : "");
      ck_assert_msg (ps_module_validate (m, "encdec", &error), "%s", error->message);
      ck_assert (info.params > 0 && info.model_flops > 0);
      ck_assert (ps_propagate (m, NULL, &error));
      PsSpmdOptions opts;
      ps_spmd_options_init (&opts);
      ck_assert_msg (spmd_test_verify (m, 8, &opts, 21 + (guint32) k, NULL, &error), "case %d: %s", k,
                     error ? error->message : "");
    }
}
END_TEST

/* The sharding text of the parameter named `name`. transfer full. */
static char *
param_sharding (const PsModule *m, const char *name)
{
  for (guint i = 0; i < m->entry->params->len; i++)
    {
      const PsInstr *p = m->entry->params->pdata[i];
      if (strcmp (p->name, name) == 0)
        return p->sharding ? ps_sharding_to_string (p->sharding) : g_strdup ("");
    }
  return g_strdup ("(no such parameter)");
}

/* An encdec step with MoE FFNs (2 + 2 layers, mesh 2x4): no AllToAll in
 * the input, at least 8 in the partitioned step (2 blocks x dispatch and
 * combine x forward and backward), which agrees with the original on the
 * interpreter; with wi_tiling, the first encoder MoE block's wi carries
 * that tiling. */
static void
check_encdec_moe_step (const PsEncDecConfig *c, guint32 seed, const char *wi_tiling)
{
  GError *error = NULL;
  PsModelInfo info;
  g_autoptr (PsModule) m = ps_encdec_build (c, &info, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  ck_assert_msg (ps_module_validate (m, "encdec", &error), "%s", error->message);
  ck_assert_int_eq (spmd_test_count_op (m, PS_OP_ALL_TO_ALL), 0);
  if (wi_tiling)
    {
      g_autofree char *wi = param_sharding (m, "encoder.layer1.moe_wi");
      ck_assert_msg (strstr (wi, wi_tiling), "seed %u: wi %s", seed, wi);
    }
  ck_assert (ps_propagate (m, NULL, &error));
  g_autoptr (PsModule) part = ps_spmd_partition (m, 8, NULL, &error);
  ck_assert_msg (part != NULL, "%s", error ? error->message : "");
  ck_assert_int_ge (spmd_test_count_op (part, PS_OP_ALL_TO_ALL), 8);
  PsSpmdOptions opts;
  ps_spmd_options_init (&opts);
  ck_assert_msg (spmd_test_verify (m, 8, &opts, seed, NULL, &error), "seed %u: %s", seed, error ? error->message : "");
}

/* MoE FFNs in both stacks (every 2nd layer of 2 + 2): the input has no
 * AllToAll, the partitioned step does (dispatch and combine of each block,
 * forward and backward), and it agrees with the original on the
 * interpreter; under 2d (experts and groups over axis 0 of 2x4) and
 * megatron with top-1, 16 groups and a small capacity that drops tokens;
 * and under 2d with GELU experts (expert_ffn = gelu). */
START_TEST (test_encdec_moe_partitions)
{
  for (int k = 0; k < 3; k++)
    {
      PsEncDecConfig c;
      ps_encdec_config_small (&c);
      c.experts = 4;
      if (k == 2)
        c.expert_ffn = PS_FFN_GELU;   /* 2d with GELU experts */
      if (k == 1)
        {
          c.sharding = PS_SHARDING_MEGATRON;
          c.top_k = 1;
          c.groups = 16;
          c.capacity_factor = 0.5;
          c.ffn = PS_FFN_RELU;
        }
      check_encdec_moe_step (&c, 41 + (guint32) k, NULL);
    }
  /* Groups and experts must split over mesh axis 0; groups divide the tokens. */
  PsEncDecConfig c;
  ps_encdec_config_small (&c);
  c.experts = 3;
  GError *error = NULL;
  ck_assert (!ps_encdec_check (&c, &error));
  ck_assert_msg (strstr (error->message, "--experts"), "%s", error->message);
  g_clear_error (&error);
  c.experts = 4;
  c.groups = 6;
  ck_assert (!ps_encdec_check (&c, &error));
  ck_assert_msg (strstr (error->message, "--groups"), "%s", error->message);
  g_clear_error (&error);
}
END_TEST

/* The expert layouts beyond experts-x, from annotations only: experts-xy
 * (groups and experts over all 8 devices of 2x4: each expert weight tiled
 * 8 ways on E, the dispatch and combine AllToAlls among all devices) and
 * experts-x-hidden-y (E over axis 0, the experts' hidden dim over axis 1:
 * wi [E, M, H] tiled [2, 1, 4]), under 2d and megatron; the input has no
 * collective of its own, the partitioned steps agree with the original on
 * the interpreter; experts or a hidden dim that do not split are refused. */
START_TEST (test_encdec_moe_layouts)
{
  for (int k = 0; k < 4; k++)
    {
      PsEncDecConfig c;
      ps_encdec_config_small (&c);
      c.experts = 8;
      c.moe_layout = k < 2 ? PS_MOE_LAYOUT_EXPERTS_XY : PS_MOE_LAYOUT_EXPERTS_X_HIDDEN_Y;
      if (k % 2 == 1)
        {
          c.sharding = PS_SHARDING_MEGATRON;
          c.top_k = 1;
          c.capacity_factor = 0.5;
        }
      check_encdec_moe_step (&c, 81 + (guint32) k, k < 2 ? "devices=[8,1,1]" : "devices=[2,1,4]");
    }
  PsEncDecConfig c;
  ps_encdec_config_small (&c);
  c.experts = 4;
  c.moe_layout = PS_MOE_LAYOUT_EXPERTS_XY;
  GError *error = NULL;
  ck_assert (!ps_encdec_check (&c, &error));
  ck_assert_msg (strstr (error->message, "--experts") && strstr (error->message, "device count"), "%s",
                 error->message);
  g_clear_error (&error);
  c.moe_layout = PS_MOE_LAYOUT_EXPERTS_X_HIDDEN_Y;
  c.sharding = PS_SHARDING_DP;   /* which alone would not split the FFN */
  c.ffn_dim = 30;
  ck_assert (!ps_encdec_check (&c, &error));
  ck_assert_msg (strstr (error->message, "--ffn-dim"), "%s", error->message);
  g_clear_error (&error);
}
END_TEST

/* Token ids below the vocabulary, norm scales near 1, small positive
 * optimizer state, the rest in [-0.5, 0.5). */
static const PsTestInputs encdec_inputs = { .spread = 1.0, .ln_spread = 0.1, .train_state = TRUE };

/* The step of m on encdec_inputs. transfer full. */
static PsValue *
encdec_step (PsModule *m, int64_t vocab)
{
  PsValue **args = ps_test_args (m, &encdec_inputs, vocab, NULL, NULL);
  PsValue *out = ps_test_run (m, args);
  ps_test_args_free (m, args);
  return out;
}

/* Outputs of two steps agree (1e-4 relative, f32 activations: only the
 * order of sums differs); over 1000 values compared. */
static void
assert_same_outputs (const PsValue *a, const PsValue *b, const char *what)
{
  ck_assert_int_eq (a->n_elems, b->n_elems);
  int64_t compared = 0;
  for (int e = 0; e < a->n_elems; e++)
    for (int64_t i = 0; i < a->elems[e]->n; i++)
      {
        double x = ps_value_get (a->elems[e], i), y = ps_value_get (b->elems[e], i);
        ck_assert_msg (fabs (x - y) <= 1e-4 * fmax (fabs (x), 1e-2), "%s, output %d[%" G_GINT64_FORMAT "]: %.9g vs %.9g",
                       what, e, i, x, y);
        compared++;
      }
  ck_assert_int_gt (compared, 1000);
}

/* remat (backward one layer at a time, each layer's forward rebuilt; the
 * decoder's layers differentiated with respect to the encoder's output
 * too) and microbatches are the same training step as the whole-step
 * backward: same loss, new weights and optimizer state on the
 * interpreter, dense and with MoE FFNs in both stacks (their
 * load-balancing terms differentiated with their layer; tied embeddings,
 * whose head is differentiated apart from the embedding's other uses).
 * MoE gating groups a microbatch's tokens, so there microbatches change
 * the step and only remat is compared at each count. The MoE case shares
 * one relative-bias table per stack (T5), which every layer's backward
 * then adds to. The partitioned remat steps agree with the original. */
START_TEST (test_encdec_remat_same_step)
{
  for (int k = 0; k < 2; k++)
    {
      PsValue *outs[4];
      for (int v = 0; v < 4; v++)
        {
          PsEncDecConfig c;
          ps_encdec_config_small (&c);
          c.f32_activations = TRUE;
          c.remat = v % 2;
          c.microbatches = v < 2 ? 1 : 2;
          if (k == 1)
            {
              c.experts = 4;
              c.sharding = PS_SHARDING_MEGATRON;
              c.untied_embeddings = FALSE;
              c.shared_rel_bias = TRUE;
            }
          GError *error = NULL;
          g_autoptr (PsModule) m = ps_encdec_build (&c, NULL, &error);
          ck_assert_msg (m != NULL, "%s", error ? error->message : "");
          ck_assert_msg (ps_module_validate (m, "encdec", &error), "%s", error->message);
          /* T5's one table per stack, or one a layer (2 + 2 layers). */
          int tables = 0;
          for (guint i = 0; i < m->entry->params->len; i++)
            tables += g_str_has_suffix (((PsInstr *) m->entry->params->pdata[i])->name, "rel_bias");
          ck_assert_int_eq (tables, k == 1 ? 2 : 4);
          outs[v] = encdec_step (m, c.vocab);
          if (c.remat)
            {
              ck_assert (ps_propagate (m, NULL, &error));
              PsSpmdOptions opts;
              ps_spmd_options_init (&opts);
              ck_assert_msg (spmd_test_verify (m, 8, &opts, 61 + (guint32) (k * 4 + v), NULL, &error),
                             "case %d, variant %d: %s", k, v, error ? error->message : "");
            }
        }
      assert_same_outputs (outs[0], outs[1], k ? "moe, remat" : "dense, remat");
      assert_same_outputs (outs[2], outs[3], k ? "moe, 2 microbatches, remat" : "dense, 2 microbatches, remat");
      if (k == 0)
        assert_same_outputs (outs[0], outs[2], "dense, 2 microbatches");
      for (int v = 0; v < 4; v++)
        ps_value_free (outs[v]);
    }
  /* The batch must split into the microbatches, and each over the data axis. */
  PsEncDecConfig c;
  ps_encdec_config_small (&c);
  c.microbatches = 3;
  GError *error = NULL;
  ck_assert (!ps_encdec_check (&c, &error));
  ck_assert_msg (strstr (error->message, "--microbatches"), "%s", error->message);
  g_clear_error (&error);
  c.microbatches = 8;
  ck_assert (!ps_encdec_check (&c, &error));
  ck_assert_msg (strstr (error->message, "microbatch"), "%s", error->message);
  g_clear_error (&error);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("layers");
  ps_check_case (s, "layers", 300,
                 PS_CHECK_TESTS (test_plan_shardings,
                                 test_optimizer_state_shardings,
                                 test_view_gradient_accumulates,
                                 test_builder_block_in_net,
                                 test_composed_model_partitions,
                                 test_block_gradients_finite_differences,
                                 test_rope_pairs_tables,
                                 test_dense_options_partition,
                                 test_encdec_partitions,
                                 test_encdec_moe_partitions,
                                 test_encdec_remat_same_step,
                                 test_encdec_moe_layouts));
  return ps_check_run (s, CK_FORK_GETENV);
}

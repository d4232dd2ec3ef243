/* The dense Transformer LM builder: the compiled-in presets match
 * published.tsv, option errors name the option, the built training step is a
 * valid program with the paper's few annotations per layer, and it runs on the
 * reference interpreter (a small config) with a sane initial loss. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/dense_lm.h"
#include "partitioner/interp/interp.h"
#include "partitioner/ir/ir.h"

/* A copy of ../shared/reference/published.tsv, in the tree. */
static char *
published_path (void)
{
  const char *src = g_getenv ("PS_SRCDIR");
  return g_build_filename (src ? src : PS_SRCDIR, "tests", "data", "published.tsv", NULL);
}

START_TEST (test_presets_match_published_tsv)
{
  g_autofree char *path = published_path ();
  g_autofree char *text = NULL;
  ck_assert_msg (g_file_get_contents (path, &text, NULL, NULL), "cannot read %s", path);
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
  char **header = NULL;
  int rows = 0;
  for (int i = 0; lines[i]; i++)
    {
      if (lines[i][0] == '#' || lines[i][0] == '\0')
        continue;
      char **f = g_strsplit (lines[i], "\t", -1);
      if (!header)
        {
          header = f;
          continue;
        }
      PsDenseLmConfig c;
      GError *error = NULL;
      ck_assert_msg (ps_dense_lm_preset (f[0], &c, &error), "preset %s: %s", f[0],
                     error ? error->message : "");
      for (int k = 1; header[k] && f[k]; k++)
        {
          const char *col = header[k];
          const char *v = f[k];
          if (strcmp (col, "layers") == 0)
            ck_assert_int_eq (c.layers, atoi (v));
          else if (strcmp (col, "model_dim") == 0)
            ck_assert_int_eq (c.model_dim, atoll (v));
          else if (strcmp (col, "ffn_dim") == 0)
            ck_assert_int_eq (c.ffn_dim, atoll (v));
          else if (strcmp (col, "heads") == 0)
            ck_assert_int_eq (c.heads, atoll (v));
          else if (strcmp (col, "seq_len") == 0)
            ck_assert_int_eq (c.seq_len, atoll (v));
          else if (strcmp (col, "global_batch") == 0)
            ck_assert_int_eq (c.global_batch, atoll (v));
          else if (strcmp (col, "gated_gelu") == 0)
            ck_assert_int_eq (c.gated_gelu, atoi (v));
          else if (strcmp (col, "cores") == 0)
            ck_assert_int_eq (c.mesh[0] * c.mesh[1], atoll (v));
          else if (strcmp (col, "slice") == 0)
            ck_assert_str_eq (c.slice, v);
          else if (strcmp (col, "mesh") == 0)
            {
              g_autofree char *want = g_strdup_printf ("%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT,
                                                       c.mesh[0], c.mesh[1]);
              ck_assert_str_eq (want, v);
            }
          else if (strcmp (col, "physical") == 0)
            {
              g_autofree char *want = g_strdup_printf ("%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT,
                                                       c.physical[0], c.physical[1], c.physical[2]);
              ck_assert_str_eq (want, v);
            }
          else if (strcmp (col, "device_mesh") == 0)
            ck_assert_str_eq (c.device_order, v);
          else if (strcmp (col, "optimizer") == 0)
            ck_assert_str_eq (ps_optimizer_name (c.optimizer), v);
          else if (strcmp (col, "tokens_per_s") == 0)
            ck_assert (fabs (c.published_tokens_per_s - atof (v)) < 1e-9);
        }
      rows++;
      g_strfreev (f);
    }
  g_strfreev (header);
  int n = 0;
  while (ps_dense_lm_preset_names ()[n])
    n++;
  ck_assert_int_eq (rows, n);
}
END_TEST

START_TEST (test_option_errors)
{
  PsDenseLmConfig c;
  GError *error = NULL;
  ck_assert (!ps_dense_lm_preset ("NoSuchModel", &c, &error));
  ck_assert (strstr (error->message, "DenseLm128B8x8") != NULL);
  g_clear_error (&error);

  ps_dense_lm_config_small (&c);
  c.heads = 6; /* not divisible by mesh axis 1 (4) */
  ck_assert (!ps_dense_lm_check (&c, &error));
  ck_assert_msg (strstr (error->message, "--heads") != NULL, "%s", error->message);
  g_clear_error (&error);

  ps_dense_lm_config_small (&c);
  c.microbatches = 3;
  ck_assert (!ps_dense_lm_check (&c, &error));
  ck_assert_msg (strstr (error->message, "--microbatches") != NULL, "%s", error->message);
  g_clear_error (&error);

  ps_dense_lm_config_small (&c);
  c.device_order = "nonpod2d";
  c.physical[0] = 4;
  ck_assert (ps_dense_lm_mesh_devices (&c, &error) == NULL);
  ck_assert_msg (strstr (error->message, "nonpod2d") != NULL, "%s", error->message);
  g_clear_error (&error);
}
END_TEST

/* Issue 16: a run changed by options is no longer the published one, and a
 * published row spelled setting by setting (gated GELU included) is. */
START_TEST (test_published_match)
{
  const char *const *names = ps_dense_lm_preset_names ();
  for (int i = 0; names[i]; i++)
    {
      PsDenseLmConfig p, c;
      ck_assert (ps_dense_lm_preset (names[i], &p, NULL));
      ck_assert_str_eq (ps_dense_lm_published_match (&p), names[i]);
      /* Every setting from the small model's defaults, as flags would. */
      ps_dense_lm_config_small (&c);
      g_autofree char *diff = ps_dense_lm_config_diff (&c, &p);
      ck_assert (strstr (diff, "layers") && strstr (diff, "slice"));
      ck_assert (ps_dense_lm_published_match (&c) == NULL);
      c.layers = p.layers;
      c.model_dim = p.model_dim;
      c.ffn_dim = p.ffn_dim;
      c.heads = p.heads;
      c.head_dim = p.head_dim;
      c.seq_len = p.seq_len;
      c.global_batch = p.global_batch;
      c.vocab = p.vocab;
      c.rel_buckets = p.rel_buckets;
      c.mesh[0] = p.mesh[0];
      c.mesh[1] = p.mesh[1];
      c.device_order = p.device_order;
      c.slice = p.slice;
      ck_assert_msg (ps_dense_lm_published_match (&c) == NULL || p.gated_gelu == c.gated_gelu,
                     "%s matched without its gated GELU setting", names[i]);
      c.gated_gelu = p.gated_gelu;
      ck_assert_str_eq (ps_dense_lm_published_match (&c), names[i]);
      c.layers = 24;
      g_autofree char *d2 = ps_dense_lm_config_diff (&c, &p);
      ck_assert_str_eq (d2, "layers");
      ck_assert (ps_dense_lm_published_match (&c) == NULL);
    }
}
END_TEST

static int
count_sharded (const PsModule *m)
{
  int n = 0;
  for (guint i = 0; i < m->entry->instrs->len; i++)
    n += ((PsInstr *) m->entry->instrs->pdata[i])->sharding != NULL;
  return n;
}

START_TEST (test_build_small_is_valid)
{
  PsDenseLmConfig c;
  ps_dense_lm_config_small (&c);
  PsDenseLmInfo info;
  GError *error = NULL;
  PsModule *m = ps_dense_lm_build (&c, &info, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  ck_assert_msg (ps_module_validate (m, "dense_lm", &error), "%s", error ? error->message : "");
  /* 2d preset: the embedding, then per layer the input activation, the six
   * projection weights the paper annotates (Wq Wk Wv Wo W1 W2) plus the gate
   * of the gated GELU and the relative-position bias: 9 a layer. Optimizer
   * state follows its weight and is not counted. */
  ck_assert_int_eq (info.n_annotations, 1 + 9);
  /* unrolled, each layer carries its own */
  c.unroll = TRUE;
  PsDenseLmInfo info_u;
  PsModule *u = ps_dense_lm_build (&c, &info_u, &error);
  ck_assert_msg (u != NULL, "%s", error ? error->message : "");
  ck_assert_int_eq (info_u.n_annotations, 1 + c.layers * 9);
  ck_assert (fabs (info_u.params - info.params) < 0.5);
  ps_module_free (u);
  c.unroll = FALSE;
  ck_assert_int_ge (count_sharded (m), info.n_annotations);
  /* Parameter count: embedding + per layer 4*M*N*D + 3*M*H + K*N + 2*M, + final M. */
  double M = c.model_dim, H = c.ffn_dim, ND = c.heads * c.head_dim;
  double want = c.vocab * M + c.layers * (4 * M * ND + 3 * M * H + c.rel_buckets * c.heads + 2 * M) + M;
  ck_assert (fabs (info.params - want) < 0.5);
  ps_module_free (m);
}
END_TEST

/* Runs the small training step on the interpreter: the initial loss of a
 * model with small random weights is close to log(vocab), and the step's
 * outputs are finite. Also checks remat does not change the result. */
START_TEST (test_small_step_runs)
{
  double loss[2];
  for (int remat = 0; remat < 2; remat++)
    {
      PsDenseLmConfig c;
      ps_dense_lm_config_small (&c);
      c.layers = 1;
      c.remat = remat;
      c.microbatches = 2;
      GError *error = NULL;
      PsModule *m = ps_dense_lm_build (&c, NULL, &error);
      ck_assert_msg (m != NULL, "%s", error ? error->message : "");
      int n = (int) m->entry->params->len;
      PsValue **args = g_new0 (PsValue *, n);
      guint32 st = 7;
      for (int i = 0; i < n; i++)
        {
          PsInstr *p = m->entry->params->pdata[i];
          args[i] = ps_value_new (p->shape);
          for (int64_t k = 0; k < args[i]->n; k++)
            {
              st = st * 1664525u + 1013904223u;
              double r = (double) (st >> 8) / (double) (1u << 24);
              double v;
              if (g_str_has_suffix (p->name, ".opt0") || g_str_has_suffix (p->name, ".opt1"))
                v = 1e-3;
              else if (strcmp (p->name, "ids") == 0 || strcmp (p->name, "labels") == 0)
                v = (double) ((st >> 8) % (guint32) c.vocab);
              else if (strcmp (p->name, "learning_rate") == 0)
                v = 0.01;
              else if (strcmp (p->name, "decay") == 0)
                v = 0.8;
              else if (strstr (p->name, "ln") != NULL)
                v = 1.0;
              else
                v = (r - 0.5) * 0.02;
              ps_value_set (args[i], k, v);
            }
        }
      PsValue *out = ps_interp_run (m, n, args, NULL, &error);
      ck_assert_msg (out != NULL, "interp: %s", error ? error->message : "");
      loss[remat] = ps_value_get (out->elems[0], 0);
      ck_assert_msg (fabs (loss[remat] - log ((double) c.vocab)) < 0.3, "initial loss %g, log(V) %g",
                     loss[remat], log ((double) c.vocab));
      for (int e = 1; e < out->n_elems; e++)
        for (int64_t k = 0; k < out->elems[e]->n; k++)
          ck_assert (isfinite (ps_value_get (out->elems[e], k)));
      ps_value_free (out);
      for (int i = 0; i < n; i++)
        ps_value_free (args[i]);
      g_free (args);
      ps_module_free (m);
    }
  ck_assert (fabs (loss[0] - loss[1]) < 1e-6);
}
END_TEST

/* A deterministic value for parameter `name` element k (the same for a
 * layer's weight in both forms: "layer1.wq" and row 1 of "layers.wq"). */
static double
init_value (const char *name, int64_t k, int64_t vocab)
{
  guint32 st = g_str_hash (name) ^ (guint32) (k * 2654435761u);
  st = st * 1664525u + 1013904223u;
  st = st * 1664525u + 1013904223u;
  double r = (double) (st >> 8) / (double) (1u << 24);
  if (g_str_has_suffix (name, ".opt0") || g_str_has_suffix (name, ".opt1"))
    return 1e-3 * (1 + r);
  if (strcmp (name, "ids") == 0 || strcmp (name, "labels") == 0)
    return (double) ((st >> 8) % (guint32) vocab);
  if (strcmp (name, "learning_rate") == 0)
    return 0.01;
  if (strcmp (name, "decay") == 0)
    return 0.8;
  if (strstr (name, "ln") != NULL && !strstr (name, ".opt"))
    return 1.0 + 0.1 * (r - 0.5);
  return (r - 0.5) * 0.1;
}

/* "layers.wq.opt1" -> "layer%d.wq.opt1" for layer l (NULL if not stacked). */
static char *
layer_name (const char *stacked, int l)
{
  if (!g_str_has_prefix (stacked, "layers."))
    return NULL;
  return g_strdup_printf ("layer%d.%s", l, stacked + 7);
}

/* The layer stack as a loop computes the same step as the same stack
 * unrolled (each stacked weight is the unrolled layers' weights, row by
 * row): loss, every new weight and optimizer state, on the interpreter,
 * with remat on and off and two microbatches. */
START_TEST (test_loop_matches_unrolled)
{
  for (int remat = 0; remat < 2; remat++)
    {
      PsDenseLmConfig c;
      ps_dense_lm_config_small (&c);
      c.layers = 3;
      c.remat = remat;
      c.microbatches = 2;
      GError *error = NULL;
      PsModule *lm = ps_dense_lm_build (&c, NULL, &error);
      ck_assert_msg (lm != NULL, "%s", error ? error->message : "");
      c.unroll = TRUE;
      PsModule *um = ps_dense_lm_build (&c, NULL, &error);
      ck_assert_msg (um != NULL, "%s", error ? error->message : "");
      PsModule *ms[2] = { um, lm };
      PsValue *outs[2];
      for (int f = 0; f < 2; f++)
        {
          PsComputation *e = ms[f]->entry;
          int n = (int) e->params->len;
          PsValue **args = g_new0 (PsValue *, n);
          for (int i = 0; i < n; i++)
            {
              PsInstr *p = e->params->pdata[i];
              args[i] = ps_value_new (p->shape);
              int64_t per = p->shape->rank > 0 && f == 1 && g_str_has_prefix (p->name, "layers.")
                            ? args[i]->n / p->shape->dims[0] : args[i]->n;
              for (int64_t k = 0; k < args[i]->n; k++)
                {
                  g_autofree char *ln = f == 1 ? layer_name (p->name, (int) (k / per)) : NULL;
                  ps_value_set (args[i], k, init_value (ln ? ln : p->name, ln ? k % per : k, c.vocab));
                }
            }
          outs[f] = ps_interp_run (ms[f], n, args, NULL, &error);
          ck_assert_msg (outs[f] != NULL, "interp: %s", error ? error->message : "");
          for (int i = 0; i < n; i++)
            ps_value_free (args[i]);
          g_free (args);
        }
      /* outputs: loss, new weights, new states, in parameter order */
      double lu = ps_value_get (outs[0]->elems[0], 0), ll = ps_value_get (outs[1]->elems[0], 0);
      ck_assert_msg (fabs (lu - ll) <= 1e-6 * fabs (lu), "loss: unrolled %.9g, loop %.9g", lu, ll);
      int compared = 0;
      for (guint i = 0; i < lm->entry->params->len; i++)
        {
          PsInstr *p = lm->entry->params->pdata[i];
          int out_k = -1;
          /* output 1 + i for weights and states (the parameters before ids) */
          if (strcmp (p->name, "ids") == 0)
            break;
          out_k = 1 + (int) i;
          const PsValue *lv = outs[1]->elems[out_k];
          int64_t per = g_str_has_prefix (p->name, "layers.") ? lv->n / p->shape->dims[0] : lv->n;
          for (int64_t k = 0; k < lv->n; k++)
            {
              g_autofree char *ln = layer_name (p->name, (int) (k / per));
              const char *uname = ln ? ln : p->name;
              PsInstr *up = ps_computation_find_instr (um->entry, uname);
              ck_assert_msg (up != NULL, "%s", uname);
              const PsValue *uv = outs[0]->elems[1 + up->parameter_number];
              double a = ps_value_get (uv, ln ? k % per : k), b = ps_value_get (lv, k);
              ck_assert_msg (fabs (a - b) <= 1e-5 * fmax (fabs (a), 1e-3),
                             "remat %d %s[%" G_GINT64_FORMAT "]: unrolled %.9g, loop %.9g",
                             remat, p->name, k, a, b);
              compared++;
            }
        }
      ck_assert_int_gt (compared, 1000);
      ps_value_free (outs[0]);
      ps_value_free (outs[1]);
      ps_module_free (lm);
      ps_module_free (um);
    }
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("models");
  TCase *tc = tcase_create ("dense_lm");
  tcase_set_timeout (tc, 300);
  tcase_add_test (tc, test_presets_match_published_tsv);
  tcase_add_test (tc, test_published_match);
  tcase_add_test (tc, test_option_errors);
  tcase_add_test (tc, test_build_small_is_valid);
  tcase_add_test (tc, test_small_step_runs);
  tcase_add_test (tc, test_loop_matches_unrolled);
  suite_add_tcase (s, tc);
  SRunner *sr = srunner_create (s);
  srunner_run_all (sr, CK_NORMAL);
  int failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? 0 : 1;
}

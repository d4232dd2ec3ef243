/* The model-family registry and the dense Transformer LM builder: the
 * preset files match published.tsv column by column, model files read back
 * what they print and report errors at FILE:LINE:COL, option errors name
 * the option, the built training step is a
 * valid program with the paper's few annotations per layer, and it runs on the
 * reference interpreter (a small config) with a sane initial loss. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/suite_main.h"
#include "driver/target.h"
#include "models/dense_lm.h"
#include "models/family.h"
#include "partitioner/analysis/memory.h"
#include "topology/slice.h"
#include "partitioner/interp/interp.h"
#include "partitioner/ir/ir.h"
#include "tests/interp_inputs.h"

/* A copy of ../shared/reference/published.tsv, in the tree. */
static char *
published_path (void)
{
  const char *src = g_getenv ("PS_SRCDIR");
  return g_build_filename (src ? src : PS_SRCDIR, "tests", "data", "published.tsv", NULL);
}

/* The value a published.tsv column has in a model file, or NULL for the
 * columns that are not parameters. */
static const char *
tsv_key (const char *col)
{
  static const char *same[] = { "layers", "model_dim", "ffn_dim", "heads", "seq_len", "global_batch",
                                "gated_gelu", "slice", "mesh", "optimizer" };
  for (gsize i = 0; i < G_N_ELEMENTS (same); i++)
    if (strcmp (col, same[i]) == 0)
      return same[i];
  if (strcmp (col, "device_mesh") == 0)
    return "device_order";
  return NULL;
}

/* Every row of published.tsv is a preset file whose every column is a
 * parameter (or follows from one: cores and physical from the slice, the
 * figure from [published]), so each published run can be written as a
 * model file or as options. */
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
      GError *error = NULL;
      g_autoptr (PsParams) p = ps_model_preset_load (f[0], &error);
      ck_assert_msg (p != NULL, "preset %s: %s", f[0], error ? error->message : "");
      ck_assert_str_eq (ps_params_family (p)->name, "dense");
      g_autoptr (PsSlice) slice = ps_slice_new (ps_params_str (p, "slice"), PS_WRAP_AUTO, 2, &error);
      ck_assert (slice != NULL);
      for (int k = 1; header[k] && f[k]; k++)
        {
          const char *col = header[k], *v = f[k];
          const char *key = tsv_key (col);
          if (key)
            {
              g_autofree char *have = ps_params_text (p, key);
              const char *want = strcmp (col, "gated_gelu") == 0 ? (atoi (v) ? "true" : "false") : v;
              ck_assert_msg (strcmp (have, want) == 0, "%s %s: preset %s, published.tsv %s", f[0], col, have, want);
            }
          else if (strcmp (col, "cores") == 0)
            {
              ck_assert_int_eq (ps_params_mesh_size (p, "mesh"), atoll (v));
              ck_assert_int_eq (ps_slice_n_cores (slice), atoll (v));
            }
          else if (strcmp (col, "physical") == 0)
            {
              g_autofree char *want = g_strdup_printf ("%dx%dx%d", slice->chips_x, slice->chips_y,
                                                       slice->cores_per_chip);
              ck_assert_str_eq (want, v);
            }
          else if (strcmp (col, "tokens_per_s") == 0)
            {
              const char *table = NULL;
              ck_assert (fabs (ps_params_published (p, &table, NULL) - atof (v)) < 1e-9);
              ck_assert_str_eq (table, "dense");
            }
          else
            ck_abort_msg ("published.tsv column %s is not a parameter of the dense family", col);
        }
      /* The published settings the file's comments state for every row. */
      ck_assert_int_eq (ps_params_int (p, "head_dim"), 128);
      ck_assert_int_eq (ps_params_int (p, "vocab"), 32000);
      ck_assert_int_eq (ps_params_int (p, "rel_buckets"), 32);
      ck_assert_str_eq (ps_params_str (p, "sharding"), "2d");
      rows++;
      g_strfreev (f);
    }
  g_strfreev (header);
  int n = 0;
  for (const PsModelPreset *pr = ps_model_presets (); pr->name; pr++)
    {
      g_autoptr (PsParams) p = ps_model_preset_load (pr->name, NULL);
      const char *table = NULL;
      n += ps_params_published (p, &table, NULL) > 0 && g_strcmp0 (table, "dense") == 0;
    }
  ck_assert_int_eq (rows, n);
}
END_TEST

START_TEST (test_option_errors)
{
  PsDenseLmConfig c;
  GError *error = NULL;
  ck_assert (ps_model_preset_load ("NoSuchModel", &error) == NULL);
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

  /* Partial rotary: even, at most the head dim, only with rotary positions. */
  const struct { PsPositionKind position; int64_t rotary_dim; const char *want; } rot[] = {
    { PS_POSITION_ROPE, 3, "even" }, { PS_POSITION_ROPE, 10, "at most --head-dim" },
    { PS_POSITION_RELATIVE, 4, "needs --position rope" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (rot); i++)
    {
      ps_dense_lm_config_small (&c);
      c.position = rot[i].position;
      c.rotary_dim = rot[i].rotary_dim;
      ck_assert (!ps_dense_lm_check (&c, &error));
      ck_assert_msg (strstr (error->message, "--rotary-dim") && strstr (error->message, rot[i].want),
                     "%s", error->message);
      g_clear_error (&error);
    }

  /* Grouped-query heads that split over neither their kv heads nor their
   * groups: 8 heads in 2 groups of 4 over 8 devices (1d). */
  ps_dense_lm_config_small (&c);
  c.heads = 8;
  c.kv_heads = 2;
  c.sharding = PS_SHARDING_1D;
  ck_assert (!ps_dense_lm_check (&c, &error));
  ck_assert_msg (strstr (error->message, "--kv-heads") && strstr (error->message, "neither"), "%s",
                 error->message);
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
  for (const PsModelPreset *pr = ps_model_presets (); pr->name; pr++)
    {
      g_autoptr (PsParams) p = ps_model_preset_load (pr->name, NULL);
      if (ps_params_published (p, NULL, NULL) <= 0)
        continue;
      ck_assert_str_eq (ps_params_published_match (p, NULL), pr->name);
      /* Every setting onto the family's defaults, as options would. */
      g_autoptr (PsParams) c = ps_params_new (ps_params_family (p));
      g_autofree char *diff = ps_params_diff (c, p);
      ck_assert (strstr (diff, "layers") && strstr (diff, "slice"));
      ck_assert (ps_params_published_match (c, NULL) == NULL);
      const PsModelFamily *f = ps_params_family (p);
      /* Issue 16's gated GELU setting, for the dense family. */
      gboolean gelu = ps_model_family_find_spec (f, "gated_gelu") != NULL;
      for (int i = 0; i < ps_model_family_n_specs (f); i++)
        {
          const PsParamSpec *s = ps_model_family_spec (f, i);
          if (strcmp (s->key, "gated_gelu") == 0)
            continue;
          g_autofree char *v = ps_params_text (p, s->key);
          ck_assert (ps_params_set (c, s->key, v, "--x", NULL));
        }
      if (gelu)
        {
          ck_assert_msg (ps_params_published_match (c, NULL) == NULL || ps_params_bool (p, "gated_gelu"),
                         "%s matched without its gated GELU setting", pr->name);
          g_autofree char *g = ps_params_text (p, "gated_gelu");
          ck_assert (ps_params_set (c, "gated_gelu", g, "--gated-gelu", NULL));
        }
      double tput = 0;
      ck_assert_str_eq (ps_params_published_match (c, &tput), pr->name);
      ck_assert (tput == ps_params_published (p, NULL, NULL));
      /* An encoder-decoder has its layers per stack. */
      gboolean stacks = ps_model_family_find_spec (f, "layers") == NULL;
      ck_assert (ps_params_set (c, stacks ? "enc_layers" : "layers", "24", "--layers", NULL));
      ck_assert (ps_params_set (c, "async_collectives", "true", "--async-collectives", NULL));
      g_autofree char *d2 = ps_params_diff (c, p);
      ck_assert_str_eq (d2, stacks ? "enc-layers" : "layers");
      ck_assert (ps_params_published_match (c, NULL) == NULL);
    }
}
END_TEST

/* The family's defaults are the small model of the quick start. */
START_TEST (test_family_defaults)
{
  GError *error = NULL;
  const PsModelFamily *f = ps_model_family_find ("dense", &error);
  ck_assert (f == &ps_dense_family);
  ck_assert (ps_model_family_find ("resnet", &error) == NULL);
  ck_assert (strstr (error->message, "known: dense") != NULL);
  g_clear_error (&error);
  g_autoptr (PsParams) p = ps_params_new (f);
  PsModelTarget t = { 8, { 2, 2, 2 } };
  ck_assert (f->check (p, &t, NULL));
  PsModelInfo info;
  g_autoptr (PsModule) m = f->build (p, &t, &info, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  PsDenseLmConfig c;
  ps_dense_lm_config_small (&c);
  PsDenseLmInfo di;
  g_autoptr (PsModule) m2 = ps_dense_lm_build (&c, &di, NULL);
  ck_assert_int_eq (info.n_instructions, di.n_instructions);
  ck_assert (info.params == di.params);
  ck_assert_int_eq (info.mesh.rank, 2);
  ck_assert_int_eq (info.mesh.dims[0] * info.mesh.dims[1], 8);
  /* The mesh must hold the slice's cores. */
  t.n_cores = 32;
  ck_assert (!f->check (p, &t, &error));
  ck_assert_msg (strstr (error->message, "--mesh 2x4 has 8 devices but slice v3-8 has 32 cores"), "%s",
                 error->message);
  g_clear_error (&error);
}
END_TEST

/* A printed model file reads back to the same parameters, and GLib's own
 * GKeyFile reads it too (the files are GKeyFile syntax). */
START_TEST (test_model_file_roundtrip)
{
  for (const PsModelPreset *pr = ps_model_presets (); pr->name; pr++)
    {
      g_autoptr (PsParams) p = ps_model_preset_load (pr->name, NULL);
      g_autofree char *text = ps_params_print (p, "a comment\nover two lines");
      GError *error = NULL;
      g_autoptr (PsParams) q = ps_params_read ("printed.ini", text, &error);
      ck_assert_msg (q != NULL, "%s", error ? error->message : "");
      g_autofree char *d = ps_params_diff (p, q);
      ck_assert_str_eq (d, "");
      ck_assert (ps_params_published (q, NULL, NULL) == ps_params_published (p, NULL, NULL));
      g_autofree char *text2 = ps_params_print (q, "a comment\nover two lines");
      ck_assert_str_eq (text, text2);
      g_autoptr (GKeyFile) kf = g_key_file_new ();
      ck_assert (g_key_file_load_from_data (kf, text, (gsize) -1, G_KEY_FILE_NONE, &error));
      g_autofree char *slice = g_key_file_get_string (kf, "slice", "slice", NULL);
      g_autofree char *want = ps_params_text (p, "slice");
      ck_assert_str_eq (slice, want);
      /* The compiled-in file itself reads to the same parameters. */
      g_autoptr (PsParams) r = ps_params_read ("preset.ini", pr->text, NULL);
      g_autofree char *d2 = ps_params_diff (p, r);
      ck_assert_str_eq (d2, "");
    }
}
END_TEST

/* Errors in model files: one line, FILE:LINE:COL, what is wrong. */
START_TEST (test_model_file_errors)
{
  static const struct { const char *text, *want; } cases[] = {
    { "[model]\nlayers = 3\n", "f.ini: no 'family' in [model]" },
    { "[model]\nfamily = resnet\n", "f.ini:2:10: unknown model family 'resnet'" },
    { "[model]\nfamily = dense\nfamily = dense\n", "f.ini:3:1: family is set twice" },
    { "layers = 3\n[model]\nfamily = dense\n", "f.ini:1:1: a key before the first [section]" },
    { "[model]\nfamily = dense\n[modle]\n", "f.ini:3:2: unknown section [modle]" },
    { "[model]\nfamily = dense\n[slice\n", "f.ini:3:1: a section header is '[name]'" },
    { "[model]\nfamily = dense\nlayers 3\n", "f.ini:3:1: expected 'key = value'" },
    { "[model]\nfamily = dense\nlayer = 3\n", "f.ini:3:1: unknown key 'layer' for model family dense" },
    { "[model]\nfamily = dense\nlayers = three\n", "f.ini:3:10: layers: 'three' is not an integer" },
    { "[model]\nfamily = dense\n  layers = 0\n", "f.ini:3:12: layers must be positive (got 0)" },
    { "[model]\nfamily = dense\nlayers = 2\nlayers = 2\n", "f.ini:4:1: 'layers' is set twice" },
    { "[model]\nfamily = dense\nmesh = 2x4\n", "f.ini:3:1: 'mesh' belongs in [parallelism], not [model]" },
    { "[model]\nfamily = dense\n[parallelism]\nmesh = 2x4x1\n", "f.ini:4:8: mesh: '2x4x1' has 3 dims, this model takes 2" },
    { "[model]\nfamily = dense\n[parallelism]\nmesh = 2x\n", "f.ini:4:8: mesh: '2x' is not a mesh" },
    { "[model]\nfamily = dense\n[parallelism]\nmesh = 65536x65536\n", "f.ini:4:8: mesh: '65536x65536' is not a mesh" },
    { "[model]\nfamily = dense\n[parallelism]\nremat = maybe\n", "f.ini:4:9: remat: 'maybe' is not true or false" },
    { "[model]\nfamily = dense\n[parallelism]\nsharding = 3d\n", "f.ini:4:12: sharding: '3d' is not one of 2d, 1d, dp" },
    { "[model]\nfamily = dense\n[published]\nthroughput = fast\n", "f.ini:4:14: throughput: 'fast' is not a positive number" },
    { "[model]\nfamily = dense\n[published]\nspeed = 1\n", "f.ini:4:1: unknown key 'speed' in [published]" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      GError *error = NULL;
      PsParams *p = ps_params_read ("f.ini", cases[i].text, &error);
      ck_assert_msg (p == NULL, "case %zu accepted", i);
      ck_assert_msg (g_str_has_prefix (error->message, cases[i].want), "case %zu: got '%s', want '%s'", i,
                     error->message, cases[i].want);
      ck_assert (strchr (error->message, '\n') == NULL);
      g_clear_error (&error);
    }
  /* Values from a file keep their position for later checks. */
  GError *error = NULL;
  g_autoptr (PsParams) p = ps_params_read ("dir/f.ini", "# c\n[model]\nfamily = dense\nheads = 6\n"
                                           "[slice]\nhw = my.ini\n", &error);
  ck_assert (p != NULL);
  ck_assert_str_eq (ps_params_where (p, "heads"), "dir/f.ini:4:9: heads");
  ck_assert_str_eq (ps_params_where (p, "layers"), "--layers");
  ck_assert_str_eq (ps_params_str (p, "hw"), "dir/my.ini");
  PsModelTarget t = { 8, { 2, 2, 2 } };
  ck_assert (!ps_dense_family.check (p, &t, &error));
  ck_assert_str_eq (error->message, "dir/f.ini:4:9: heads = 6 is not divisible by mesh axis 1 (4)");
  g_clear_error (&error);
  /* Options: PS_ERROR_OPTION naming the option. */
  ck_assert (!ps_params_set (p, "layers", "x", "--layers", &error));
  ck_assert_str_eq (error->message, "--layers: 'x' is not an integer");
  ck_assert (error->code == PS_ERROR_OPTION);
  g_clear_error (&error);
  ck_assert (!ps_params_set (p, "experts", "4", "--set experts", &error));
  ck_assert_str_eq (error->message, "--set experts: 'experts' is not a parameter of model family dense");
  g_clear_error (&error);
  /* Keys and options are the same names with '_' or '-'. */
  ck_assert (ps_params_set (p, "model-dim", "64", "--model-dim", NULL));
  ck_assert_int_eq (ps_params_int (p, "model_dim"), 64);
  ck_assert (ps_params_set (p, "batch", "16", "--batch", NULL));
  ck_assert_int_eq (ps_params_int (p, "global_batch"), 16);
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

/* Weights and activations in [-0.05, 0.05), norm scales near 1, small
 * positive optimizer state. */
static const PsTestInputs model_inputs = { .spread = 0.1, .ln_spread = 0.1, .train_state = TRUE };

/* A deterministic value for parameter `name` element k (the same for a
 * layer's weight in both forms: "layer1.wq" and row 1 of "layers.wq"). */
static double
init_value (const char *name, int64_t k, int64_t vocab)
{
  return ps_test_input (&model_inputs, name, name, k, vocab);
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
 * with remat on and off, two microbatches, and the update in the backward
 * loop (the default) or in a loop of its own; and the in-loop update with
 * one microbatch (no accumulated gradient). */
START_TEST (test_loop_matches_unrolled)
{
  for (int v = 0; v < 5; v++)
    {
      int remat = v == 4 || v % 2, separate = v < 4 && v / 2;
      PsDenseLmConfig c;
      ps_dense_lm_config_small (&c);
      c.layers = 3;
      c.remat = remat;
      c.separate_update = separate;
      c.microbatches = v == 4 ? 1 : 2;
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
                             "variant %d %s[%" G_GINT64_FORMAT "]: unrolled %.9g, loop %.9g",
                             v, p->name, k, a, b);
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

/* The small model's step on the interpreter, parameters from init_value. */
static PsValue *
run_small_step (const PsDenseLmConfig *c, int64_t *n_instrs)
{
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_dense_lm_build (c, NULL, &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  *n_instrs = 0;
  for (guint i = 0; i < m->computations->len; i++)
    *n_instrs += ((PsComputation *) m->computations->pdata[i])->instrs->len;
  PsValue **args = ps_test_args (m, &model_inputs, c->vocab, NULL, NULL);
  PsValue *out = ps_test_run (m, args);
  ps_test_args_free (m, args);
  return out;
}

/* Gradient accumulation does not change the step: the same global batch
 * in 1, 2 or 4 microbatches (the loss the mean of the microbatches' means,
 * each microbatch's gradients added into one accumulator per weight)
 * gives the same loss and the same new weights and optimizer states on
 * the interpreter, in the loop form and unrolled. */
START_TEST (test_microbatches_same_step)
{
  for (int unroll = 0; unroll < 2; unroll++)
    {
      PsValue *outs[3];
      const int mbs[3] = { 1, 2, 4 };
      for (int v = 0; v < 3; v++)
        {
          PsDenseLmConfig c;
          ps_dense_lm_config_small (&c);
          c.layers = 2;
          c.unroll = unroll;
          c.microbatches = mbs[v];
          int64_t size;
          outs[v] = run_small_step (&c, &size);
        }
      for (int v = 1; v < 3; v++)
        {
          ck_assert_int_eq (outs[v]->n_elems, outs[0]->n_elems);
          int64_t compared = 0;
          for (int e = 0; e < outs[0]->n_elems; e++)
            for (int64_t k = 0; k < outs[0]->elems[e]->n; k++)
              {
                double a = ps_value_get (outs[0]->elems[e], k), b = ps_value_get (outs[v]->elems[e], k);
                /* bf16 activations rounded per microbatch, f32 sums in another
                 * order: 2e-3 relative (the optimizer normalizes the update, so a
                 * lost microbatch changes its direction: O(1) per element) */
                ck_assert_msg (fabs (a - b) <= 2e-3 * fmax (fabs (a), 1e-3),
                               "unroll %d, %d microbatches, output %d[%" G_GINT64_FORMAT "]: %.9g vs %.9g",
                               unroll, mbs[v], e, k, a, b);
                compared++;
              }
          ck_assert_int_gt (compared, 1000);
        }
      for (int v = 0; v < 3; v++)
        ps_value_free (outs[v]);
    }
}
END_TEST

/* The microbatches as one while loop (the default) compute what the
 * unrolled microbatches compute, to the bit: the same additions into the
 * same accumulators in the same order, the same update after them; and
 * the program no longer grows with the microbatches (every computation's
 * instructions counted, M = 2 and 4). Layers as a loop and unrolled. */
START_TEST (test_microbatch_loop_matches_unrolled)
{
  for (int unroll = 0; unroll < 2; unroll++)
    {
      int64_t loop_size[2] = { 0, 0 }, unrolled_size[2] = { 0, 0 };
      for (int v = 0; v < 2; v++)
        {
          PsDenseLmConfig c;
          ps_dense_lm_config_small (&c);
          c.layers = 2;
          c.unroll = unroll;
          c.microbatches = v == 0 ? 2 : 4;
          g_autoptr (PsValue) a = run_small_step (&c, &loop_size[v]);
          c.unroll_microbatches = TRUE;
          g_autoptr (PsValue) b = run_small_step (&c, &unrolled_size[v]);
          ck_assert_int_eq (a->n_elems, b->n_elems);
          int64_t compared = 0;
          for (int e = 0; e < a->n_elems; e++)
            {
              ck_assert_int_eq (a->elems[e]->n, b->elems[e]->n);
              for (int64_t k = 0; k < a->elems[e]->n; k++, compared++)
                ck_assert_msg (ps_value_get (a->elems[e], k) == ps_value_get (b->elems[e], k),
                               "unroll %d, %d microbatches, output %d[%" G_GINT64_FORMAT "]: loop %.9g, "
                               "unrolled %.9g", unroll, c.microbatches, e, k,
                               ps_value_get (a->elems[e], k), ps_value_get (b->elems[e], k));
            }
          ck_assert_int_gt (compared, 1000);
        }
      ck_assert_int_eq (loop_size[0], loop_size[1]);
      ck_assert_int_gt (unrolled_size[1], unrolled_size[0]);
    }
}
END_TEST

/* The update inside the backward loop (the default) never holds a stack
 * of every layer's gradient: against the update in a loop of its own, the
 * peak is lower by about the stacked weights' bytes (the gradient stack,
 * as large as the weights, live across the backward loop there), less
 * the update's temporaries of one layer, which the backward iteration now
 * holds (under 5 %). Unpartitioned program, one microbatch. */
START_TEST (test_loop_update_memory)
{
  uint64_t peak[2] = { 0, 0 }, stacked = 0;
  for (int separate = 0; separate < 2; separate++)
    {
      PsDenseLmConfig c;
      ps_dense_lm_config_small (&c);
      c.layers = 3;
      c.separate_update = separate;
      GError *error = NULL;
      g_autoptr (PsModule) m = ps_dense_lm_build (&c, NULL, &error);
      ck_assert_msg (m != NULL, "%s", error ? error->message : "");
      PsMemoryReport *r = ps_memory_analyze (m, NULL, &error);
      ck_assert_msg (r != NULL, "%s", error ? error->message : "");
      peak[separate] = r->peak_bytes;
      ps_memory_report_free (r);
      stacked = 0;
      for (guint i = 0; i < m->entry->params->len; i++)
        {
          const PsInstr *p = m->entry->params->pdata[i];
          if (g_str_has_prefix (p->name, "layers.") && !strstr (p->name, ".opt"))
            stacked += (uint64_t) ps_shape_bytes (p->shape);
        }
    }
  ck_assert_uint_gt (stacked, 0);
  ck_assert_msg (peak[0] + stacked * 0.95 <= peak[1], "peak in the backward loop %" G_GUINT64_FORMAT
                 ", in a loop of its own %" G_GUINT64_FORMAT ", stacked weights %" G_GUINT64_FORMAT,
                 peak[0], peak[1], stacked);
}
END_TEST

int
main (void)
{
  /* Every family's [slice] and [options] come from the driver's registry. */
  ps_target_init ();
  Suite *s = suite_create ("models");
  ps_check_case (s, "dense_lm", 300,
                 PS_CHECK_TESTS (test_presets_match_published_tsv,
                                 test_published_match, test_family_defaults,
                                 test_model_file_roundtrip,
                                 test_model_file_errors, test_option_errors,
                                 test_build_small_is_valid,
                                 test_small_step_runs,
                                 test_loop_matches_unrolled,
                                 test_microbatches_same_step,
                                 test_microbatch_loop_matches_unrolled,
                                 test_loop_update_memory));
  return ps_check_run (s, CK_FORK_GETENV);
}

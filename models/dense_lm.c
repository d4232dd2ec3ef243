/* The dense Transformer LM training step: see dense_lm.h. */
#include "config.h"

#include "models/dense_lm.h"

#include <math.h>
#include <string.h>

#include "partitioner/builder/autodiff.h"
#include "partitioner/builder/scan.h"
#include "partitioner/ir/sharding.h"
#include "traces/trace.h"

/* ---- presets ---------------------------------------------------------------- */

/* The rows of ../shared/reference/published.tsv (Lingvo's
 * lingvo/tasks/lm/params/synthetic_packed_input.py and the "Expect ~N
 * tokens/sec" comments there). tests/check_models.c compares this table with
 * the file so the two cannot drift apart. */
static const struct {
  const char *name;
  int layers;
  int64_t model_dim, ffn_dim, heads, seq_len, batch;
  gboolean gated;
  const char *slice;
  int64_t mesh0, mesh1;
  int64_t px, py, pc;
  const char *order;
  double tokens_per_s;
} presets[] = {
  { "DenseLm128B8x8", 64, 8192, 65536, 128, 1024, 16, TRUE, "v3-128", 8, 16, 8, 8, 2, "nonpod2d", 3700 },
  { "DenseLm128B16x16", 64, 8192, 65536, 128, 1024, 128, TRUE, "v3-512", 16, 32, 16, 16, 2, "nonpod2d", 18000 },
  { "DenseLm128B32x32", 64, 8192, 65536, 128, 1024, 512, TRUE, "v3-2048", 32, 64, 32, 32, 2, "arange", 62000 },
  { "DenseLm175B32x32", 96, 12288, 49152, 96, 2048, 1024, FALSE, "v3-2048", 64, 32, 32, 32, 2, "arange_T", 51530 },
};

static const char *preset_names[G_N_ELEMENTS (presets) + 1] = {
  "DenseLm128B8x8", "DenseLm128B16x16", "DenseLm128B32x32", "DenseLm175B32x32", NULL
};

const char *const *
ps_dense_lm_preset_names (void)
{
  return preset_names;
}

static void
config_defaults (PsDenseLmConfig *c)
{
  memset (c, 0, sizeof *c);
  c->name = "custom";
  c->head_dim = 128;
  c->vocab = 32000;
  c->rel_buckets = 32;
  c->optimizer = PS_OPTIMIZER_ADAFACTOR;
  c->remat = TRUE;
  c->microbatches = 1;
  c->device_order = "arange";
  c->sharding = PS_SHARDING_2D;
}

gboolean
ps_dense_lm_preset (const char *name, PsDenseLmConfig *out, GError **error)
{
  for (gsize i = 0; i < G_N_ELEMENTS (presets); i++)
    if (g_ascii_strcasecmp (name, presets[i].name) == 0)
      {
        config_defaults (out);
        out->name = presets[i].name;
        out->layers = presets[i].layers;
        out->model_dim = presets[i].model_dim;
        out->ffn_dim = presets[i].ffn_dim;
        out->heads = presets[i].heads;
        out->seq_len = presets[i].seq_len;
        out->global_batch = presets[i].batch;
        out->gated_gelu = presets[i].gated;
        out->slice = presets[i].slice;
        out->mesh[0] = presets[i].mesh0;
        out->mesh[1] = presets[i].mesh1;
        out->physical[0] = presets[i].px;
        out->physical[1] = presets[i].py;
        out->physical[2] = presets[i].pc;
        out->device_order = presets[i].order;
        out->published_tokens_per_s = presets[i].tokens_per_s;
        return TRUE;
      }
  g_autofree char *known = g_strjoinv (", ", (char **) preset_names);
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "unknown preset '%s' (known: %s)", name, known);
  return FALSE;
}

static gboolean
str_differ (const char *a, const char *b)
{
  return g_strcmp0 (a, b) != 0;
}

char *
ps_dense_lm_config_diff (const PsDenseLmConfig *a, const PsDenseLmConfig *b)
{
  struct { const char *what; gboolean differ; } f[] = {
    { "layers", a->layers != b->layers },
    { "model-dim", a->model_dim != b->model_dim },
    { "ffn-dim", a->ffn_dim != b->ffn_dim },
    { "heads", a->heads != b->heads },
    { "head-dim", a->head_dim != b->head_dim },
    { "seq-len", a->seq_len != b->seq_len },
    { "batch", a->global_batch != b->global_batch },
    { "vocab", a->vocab != b->vocab },
    { "rel-buckets", a->rel_buckets != b->rel_buckets },
    { "gated-gelu", !a->gated_gelu != !b->gated_gelu },
    { "optimizer", a->optimizer != b->optimizer },
    { "remat", !a->remat != !b->remat },
    { "microbatches", a->microbatches != b->microbatches },
    { "mesh", a->mesh[0] != b->mesh[0] || a->mesh[1] != b->mesh[1] },
    { "device-order", str_differ (a->device_order, b->device_order) },
    { "sharding", a->sharding != b->sharding },
    { "weight-update-sharding", !a->weight_update_sharding != !b->weight_update_sharding },
    { "slice", str_differ (a->slice, b->slice) },
  };
  GString *out = g_string_new (NULL);
  for (gsize i = 0; i < G_N_ELEMENTS (f); i++)
    if (f[i].differ)
      g_string_append_printf (out, "%s%s", out->len ? ", " : "", f[i].what);
  return g_string_free (out, FALSE);
}

const char *
ps_dense_lm_published_match (const PsDenseLmConfig *cfg)
{
  for (gsize i = 0; i < G_N_ELEMENTS (presets); i++)
    {
      PsDenseLmConfig p;
      ps_dense_lm_preset (presets[i].name, &p, NULL);
      g_autofree char *diff = ps_dense_lm_config_diff (cfg, &p);
      if (*diff == '\0')
        return presets[i].name;
    }
  return NULL;
}

void
ps_dense_lm_config_small (PsDenseLmConfig *out)
{
  config_defaults (out);
  out->name = "small";
  out->layers = 2;
  out->model_dim = 32;
  out->ffn_dim = 64;
  out->heads = 4;
  out->head_dim = 8;
  out->seq_len = 16;
  out->global_batch = 8;
  out->vocab = 64;
  out->rel_buckets = 8;
  out->gated_gelu = TRUE;
  out->mesh[0] = 2;
  out->mesh[1] = 4;
  out->slice = "v3-8";
  out->physical[0] = 2;
  out->physical[1] = 2;
  out->physical[2] = 2;
}

const char *
ps_sharding_preset_name (PsShardingPreset p)
{
  switch (p)
    {
    case PS_SHARDING_1D: return "1d";
    case PS_SHARDING_DP: return "dp";
    default: return "2d";
    }
}

gboolean
ps_sharding_preset_from_name (const char *name, PsShardingPreset *out)
{
  if (strcmp (name, "2d") == 0)
    *out = PS_SHARDING_2D;
  else if (strcmp (name, "1d") == 0)
    *out = PS_SHARDING_1D;
  else if (strcmp (name, "dp") == 0)
    *out = PS_SHARDING_DP;
  else
    return FALSE;
  return TRUE;
}

static gboolean
require_div (int64_t value, int64_t by, const char *what, const char *axis, GError **error)
{
  if (by > 0 && value % by != 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "%s = %" G_GINT64_FORMAT " is not divisible by %s (%" G_GINT64_FORMAT ")",
                   what, value, axis, by);
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_dense_lm_check (const PsDenseLmConfig *c, GError **error)
{
  struct { const char *opt; int64_t v; } pos[] = {
    { "--layers", c->layers }, { "--model-dim", c->model_dim }, { "--ffn-dim", c->ffn_dim },
    { "--heads", c->heads }, { "--head-dim", c->head_dim }, { "--seq-len", c->seq_len },
    { "--batch", c->global_batch }, { "--vocab", c->vocab }, { "--microbatches", c->microbatches },
    { "--mesh (first)", c->mesh[0] }, { "--mesh (second)", c->mesh[1] },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (pos); i++)
    if (pos[i].v <= 0)
      {
        g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be positive (got %" G_GINT64_FORMAT ")",
                     pos[i].opt, pos[i].v);
        return FALSE;
      }
  /* Half the buckets are exact distances, the rest logarithmic up to 128. */
  if (c->rel_buckets < 2 || c->rel_buckets > 254)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--rel-buckets must be 2 .. 254 (got %d)",
                   c->rel_buckets);
      return FALSE;
    }
  if (c->global_batch % c->microbatches != 0)
    return require_div (c->global_batch, c->microbatches, "--batch", "--microbatches", error);
  int64_t b = c->global_batch / c->microbatches;
  int64_t all = c->mesh[0] * c->mesh[1];
  switch (c->sharding)
    {
    case PS_SHARDING_2D:
      return require_div (b, c->mesh[0], "the microbatch size (--batch / --microbatches)",
                          "mesh axis 0", error)
             && require_div (c->model_dim, c->mesh[0], "--model-dim", "mesh axis 0", error)
             && require_div (c->model_dim, c->mesh[1], "--model-dim", "mesh axis 1", error)
             && require_div (c->heads, c->mesh[1], "--heads", "mesh axis 1", error)
             && require_div (c->ffn_dim, c->mesh[1], "--ffn-dim", "mesh axis 1", error)
             && require_div (c->vocab, c->mesh[1], "--vocab", "mesh axis 1", error);
    case PS_SHARDING_1D:
      return require_div (c->heads, all, "--heads", "the device count", error)
             && require_div (c->ffn_dim, all, "--ffn-dim", "the device count", error)
             && require_div (c->vocab, all, "--vocab", "the device count", error);
    case PS_SHARDING_DP:
      return require_div (b, all, "the microbatch size (--batch / --microbatches)",
                          "the device count", error);
    }
  return TRUE;
}

int64_t *
ps_dense_lm_mesh_devices (const PsDenseLmConfig *c, GError **error)
{
  PsTraceMesh mesh = { 0 };
  mesh.rank = 2;
  mesh.dims[0] = c->mesh[0];
  mesh.dims[1] = c->mesh[1];
  if (strcmp (c->device_order, "arange") == 0)
    mesh.order = PS_TRACE_ORDER_ARANGE;
  else if (strcmp (c->device_order, "arange_T") == 0)
    mesh.order = PS_TRACE_ORDER_ARANGE_T;
  else if (strcmp (c->device_order, "nonpod2d") == 0)
    {
      mesh.order = PS_TRACE_ORDER_NONPOD2D;
      if (c->physical[0] * c->physical[1] * c->physical[2] != c->mesh[0] * c->mesh[1])
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                       "--device-order nonpod2d: the slice has %" G_GINT64_FORMAT
                       " cores but the mesh %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " has %" G_GINT64_FORMAT,
                       c->physical[0] * c->physical[1] * c->physical[2], c->mesh[0], c->mesh[1],
                       c->mesh[0] * c->mesh[1]);
          return NULL;
        }
      for (int i = 0; i < 3; i++)
        mesh.physical[i] = c->physical[i];
    }
  else
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "--device-order: unknown order '%s' (arange, arange_T or nonpod2d)", c->device_order);
      return NULL;
    }
  guint64 n = 0;
  guint32 *ids = ps_trace_mesh_device_ids (&mesh, &n);
  if (ids == NULL)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--device-order %s does not fit mesh %"
                   G_GINT64_FORMAT "x%" G_GINT64_FORMAT, c->device_order, c->mesh[0], c->mesh[1]);
      return NULL;
    }
  int64_t *out = g_new (int64_t, n);
  for (guint64 i = 0; i < n; i++)
    out[i] = ids[i];
  g_free (ids);
  return out;
}

/* ---- building blocks ---------------------------------------------------------- */

typedef struct {
  const PsDenseLmConfig *cfg;
  PsModule *m;
  PsComputation *c;
  int64_t *mesh_devices;      /* 2-D mesh, row-major */
  int n_annotations;
  GError **error;
} Builder;

/* Sharding from a dims mapping: entry i is the mesh axis (0 or 1) that splits
 * tensor dim i, -1 for none, or 2 for "both axes" (the flattened mesh, used by
 * the 1-D and data-parallel presets). */
static PsSharding *
mesh_sharding (Builder *b, int rank, const int *mapping)
{
  int64_t map[16];
  gboolean flat = FALSE;
  for (int i = 0; i < rank; i++)
    {
      map[i] = mapping[i];
      flat |= mapping[i] == 2;
    }
  GError *err = NULL;
  PsSharding *s;
  if (flat)
    {
      int64_t dims[1] = { b->cfg->mesh[0] * b->cfg->mesh[1] };
      for (int i = 0; i < rank; i++)
        map[i] = map[i] == 2 ? 0 : -1;
      s = ps_sharding_mesh_split (rank, 1, dims, b->mesh_devices, map, &err);
    }
  else
    s = ps_sharding_mesh_split (rank, 2, b->cfg->mesh, b->mesh_devices, map, &err);
  g_assert_no_error (err);
  return s;
}

static void
annotate_as (Builder *b, PsInstr *x, const int *mapping, gboolean by_user)
{
  if (mapping == NULL || x->sharding != NULL)
    return;
  g_autoptr (PsSharding) s = mesh_sharding (b, x->shape->rank, mapping);
  ps_instr_set_sharding (x, s);
  if (by_user)
    b->n_annotations++;
}

/* What a user writes: activations and weights. */
static void
annotate (Builder *b, PsInstr *x, const int *mapping)
{
  annotate_as (b, x, mapping, TRUE);
}

static PsInstr *
param (Builder *b, const char *name, PsShape *shape)
{
  PsInstr *p = ps_computation_add_instr (b->c, PS_OP_PARAMETER, name, shape, 0, NULL);
  p->parameter_number = b->c->params->len;
  g_ptr_array_add (b->c->params, p);
  return p;
}

static PsInstr *
convert (Builder *b, PsInstr *x, PsElemType t)
{
  return ps_ad_convert (b->c, x, t);
}

/* einsum("bsm,mh->bsh", lhs, rhs): one dot (batch letters in both operands
 * and the output, contracted letters in both operands only), then a
 * transpose into the output's letter order when the dot's natural order
 * [batch, lhs free, rhs free] differs. */
static PsInstr *
einsum (Builder *b, const char *spec, PsInstr *lhs, PsInstr *rhs)
{
  g_auto (GStrv) io = g_strsplit (spec, "->", 2);
  g_auto (GStrv) ins = g_strsplit (io[0], ",", 2);
  const char *ls = ins[0], *rs = ins[1], *os = io[1];
  g_assert ((int) strlen (ls) == lhs->shape->rank && (int) strlen (rs) == rhs->shape->rank);
  int64_t lb[16], rb[16], lc[16], rc[16];
  int nb = 0, nc = 0;
  for (int i = 0; ls[i]; i++)
    {
      const char *in_r = strchr (rs, ls[i]);
      if (!in_r)
        continue;
      if (strchr (os, ls[i]))
        {
          lb[nb] = i;
          rb[nb++] = in_r - rs;
        }
      else
        {
          lc[nc] = i;
          rc[nc++] = in_r - rs;
        }
    }
  char natural[32];
  int k = 0;
  int64_t dims[16];
  for (int i = 0; i < nb; i++)
    {
      natural[k] = ls[lb[i]];
      dims[k++] = lhs->shape->dims[lb[i]];
    }
  for (int i = 0; ls[i]; i++)
    if (!strchr (rs, ls[i]))
      {
        natural[k] = ls[i];
        dims[k++] = lhs->shape->dims[i];
      }
  for (int i = 0; rs[i]; i++)
    if (!strchr (ls, rs[i]))
      {
        natural[k] = rs[i];
        dims[k++] = rhs->shape->dims[i];
      }
  natural[k] = '\0';
  PsInstr *ops[2] = { lhs, rhs };
  PsInstr *dot = ps_computation_add_instr (b->c, PS_OP_DOT, NULL,
                                           ps_shape_new_array (lhs->shape->etype, k, dims), 2, ops);
  ps_ints_set (&dot->dot.lhs_batch, nb, lb);
  ps_ints_set (&dot->dot.rhs_batch, nb, rb);
  ps_ints_set (&dot->dot.lhs_contracting, nc, lc);
  ps_ints_set (&dot->dot.rhs_contracting, nc, rc);
  if (strcmp (natural, os) == 0)
    return dot;
  int64_t perm[16], tdims[16];
  for (int i = 0; os[i]; i++)
    {
      perm[i] = strchr (natural, os[i]) - natural;
      tdims[i] = dims[perm[i]];
    }
  PsInstr *t = ps_computation_add_instr (b->c, PS_OP_TRANSPOSE, NULL,
                                         ps_shape_new_array (lhs->shape->etype, k, tdims), 1, &dot);
  ps_ints_set (&t->dimensions, k, perm);
  return t;
}

static PsInstr *
bin (Builder *b, PsOpcode op, PsInstr *x, PsInstr *y)
{
  return ps_ad_binary (b->c, op, x, y);
}

static PsInstr *
bcast (Builder *b, PsInstr *x, const PsShape *to, int n, const int64_t *dims)
{
  return ps_ad_broadcast (b->c, x, to, n, dims);
}

static PsInstr *
full (Builder *b, const PsShape *like, double v)
{
  return ps_ad_full (b->c, like, v);
}

/* Layer norm over the last dim with a learned scale, computed in f32:
 * (x - mean) * rsqrt(var + eps) * scale, returned in x's type. */
static PsInstr *
layer_norm (Builder *b, PsInstr *x, PsInstr *scale)
{
  PsInstr *xf = convert (b, x, PS_F32);
  int r = xf->shape->rank;
  int64_t last = r - 1, keep[16];
  for (int i = 0; i < r - 1; i++)
    keep[i] = i;
  double inv_m = 1.0 / (double) xf->shape->dims[r - 1];
  PsInstr *sum = ps_ad_reduce_sum (b->c, xf, 1, &last);
  PsInstr *mean = bin (b, PS_OP_MULTIPLY, sum, full (b, sum->shape, inv_m));
  PsInstr *xc = bin (b, PS_OP_SUBTRACT, xf, bcast (b, mean, xf->shape, r - 1, keep));
  PsInstr *sq = bin (b, PS_OP_MULTIPLY, xc, xc);
  PsInstr *var = bin (b, PS_OP_MULTIPLY, ps_ad_reduce_sum (b->c, sq, 1, &last), full (b, sum->shape, inv_m));
  PsInstr *rs = ps_ad_unary (b->c, PS_OP_RSQRT, bin (b, PS_OP_ADD, var, full (b, var->shape, 1e-6)));
  PsInstr *n = bin (b, PS_OP_MULTIPLY, xc, bcast (b, rs, xf->shape, r - 1, keep));
  PsInstr *sc = bcast (b, scale, xf->shape, 1, &last);
  return convert (b, bin (b, PS_OP_MULTIPLY, n, sc), x->shape->etype);
}

/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static PsInstr *
gelu (Builder *b, PsInstr *x)
{
  PsInstr *x3 = bin (b, PS_OP_MULTIPLY, bin (b, PS_OP_MULTIPLY, x, x), x);
  PsInstr *in = bin (b, PS_OP_ADD, x, bin (b, PS_OP_MULTIPLY, full (b, x->shape, 0.044715), x3));
  PsInstr *t = ps_ad_unary (b->c, PS_OP_TANH,
                            bin (b, PS_OP_MULTIPLY, full (b, x->shape, sqrt (2.0 / G_PI)), in));
  PsInstr *h = bin (b, PS_OP_ADD, full (b, x->shape, 1.0), t);
  return bin (b, PS_OP_MULTIPLY, bin (b, PS_OP_MULTIPLY, full (b, x->shape, 0.5), x), h);
}

/* one_hot(ids)[..., v] = (ids[...] == v), as `t`. */
static PsInstr *
one_hot (Builder *b, PsInstr *ids, int64_t depth, PsElemType t)
{
  int r = ids->shape->rank;
  int64_t dims[16], keep[16];
  for (int i = 0; i < r; i++)
    {
      dims[i] = ids->shape->dims[i];
      keep[i] = i;
    }
  dims[r] = depth;
  PsShape *s = ps_shape_new_array (PS_S32, r + 1, dims);
  PsInstr *io = ps_computation_add_instr (b->c, PS_OP_IOTA, NULL, s, 0, NULL);
  io->iota_dimension = r;
  PsInstr *ib = bcast (b, ids, io->shape, r, keep);
  PsInstr *ops[2] = { ib, io };
  PsInstr *eq = ps_computation_add_instr (b->c, PS_OP_COMPARE, NULL,
                                          ps_shape_new_array (PS_PRED, r + 1, dims), 2, ops);
  eq->comparison = PS_CMP_EQ;
  return convert (b, eq, t);
}

/* The relative-position buckets of a causal LM, as a bf16 one-hot
 * [S, S, buckets]: distance n = max(s - t, 0); exact buckets below half, then
 * logarithmic up to a distance of 128 (T5/Lingvo style). Computed from iota so
 * it is not a huge constant. */
static PsInstr *
relative_buckets (Builder *b, int64_t S, int buckets)
{
  int64_t d2[2] = { S, S };
  PsShape *sh = ps_shape_new_array (PS_S32, 2, d2);
  PsInstr *qi = ps_computation_add_instr (b->c, PS_OP_IOTA, NULL, ps_shape_copy (sh), 0, NULL);
  qi->iota_dimension = 0;
  PsInstr *ki = ps_computation_add_instr (b->c, PS_OP_IOTA, NULL, sh, 0, NULL);
  ki->iota_dimension = 1;
  PsInstr *dist = bin (b, PS_OP_SUBTRACT, qi, ki);
  dist = bin (b, PS_OP_MAXIMUM, dist, full (b, dist->shape, 0));
  int exact = buckets / 2;
  PsInstr *df = convert (b, dist, PS_F32);
  /* exact + log(n / exact) / log(128 / exact) * (buckets - exact) */
  PsInstr *ratio = bin (b, PS_OP_DIVIDE, bin (b, PS_OP_MAXIMUM, df, full (b, df->shape, 1.0)),
                        full (b, df->shape, (double) exact));
  PsInstr *lg = ps_ad_unary (b->c, PS_OP_LOG, ratio);
  double k = (double) (buckets - exact) / log (128.0 / exact);
  PsInstr *large = bin (b, PS_OP_ADD, full (b, df->shape, (double) exact),
                        bin (b, PS_OP_MULTIPLY, lg, full (b, df->shape, k)));
  large = ps_ad_unary (b->c, PS_OP_FLOOR, large);
  large = bin (b, PS_OP_MINIMUM, large, full (b, large->shape, (double) (buckets - 1)));
  PsInstr *ops[2] = { dist, full (b, dist->shape, exact) };
  PsInstr *small = ps_computation_add_instr (b->c, PS_OP_COMPARE, NULL,
                                             ps_shape_new_array (PS_PRED, 2, d2), 2, ops);
  small->comparison = PS_CMP_LT;
  PsInstr *sel[3] = { small, dist, convert (b, large, PS_S32) };
  PsInstr *bucket = ps_computation_add_instr (b->c, PS_OP_SELECT, NULL,
                                              ps_shape_new_array (PS_S32, 2, d2), 3, sel);
  return one_hot (b, bucket, buckets, PS_BF16);
}

/* Weights of one layer, in the order the optimizer sees them. */
enum { W_LN1, W_Q, W_K, W_V, W_O, W_REL, W_LN2, W_1, W_1G, W_2, W_COUNT };

typedef struct {
  PsInstr *w[W_COUNT];       /* NULL when absent (W_1G without gated GELU) */
} Layer;

/* Mappings per preset: [preset][weight or activation][dim]. */
static const int *
weight_mapping (const PsDenseLmConfig *cfg, int which)
{
  static const int mnd_2d[3] = { 0, 1, -1 }, mh_2d[2] = { 0, 1 }, hm_2d[2] = { 1, 0 };
  static const int rel_2d[2] = { -1, 1 };
  static const int mnd_1d[3] = { -1, 2, -1 }, mh_1d[2] = { -1, 2 }, hm_1d[2] = { 2, -1 };
  static const int rel_1d[2] = { -1, 2 };
  if (cfg->sharding == PS_SHARDING_DP)
    return NULL;
  gboolean two = cfg->sharding == PS_SHARDING_2D;
  switch (which)
    {
    case W_Q: case W_K: case W_V: case W_O: return two ? mnd_2d : mnd_1d;
    case W_1: case W_1G: return two ? mh_2d : mh_1d;
    case W_2: return two ? hm_2d : hm_1d;
    case W_REL: return two ? rel_2d : rel_1d;
    default: return NULL;
    }
}

static const int *
activation_mapping (const PsDenseLmConfig *cfg)
{
  static const int x_2d[3] = { 0, -1, 1 }, x_dp[3] = { 2, -1, -1 }, x_1d[3] = { -1, -1, -1 };
  switch (cfg->sharding)
    {
    case PS_SHARDING_2D: return x_2d;
    case PS_SHARDING_DP: return x_dp;
    default: return x_1d;
    }
}

/* One Transformer layer's forward pass; x is bf16 [B, S, M]. */
static PsInstr *
layer_forward (Builder *b, const Layer *L, PsInstr *x, PsInstr *rel_onehot, PsInstr *mask)
{
  const PsDenseLmConfig *cfg = b->cfg;
  annotate (b, x, activation_mapping (cfg));
  PsInstr *w[W_COUNT];
  for (int i = 0; i < W_COUNT; i++)
    w[i] = L->w[i] && i != W_LN1 && i != W_LN2 ? convert (b, L->w[i], PS_BF16) : L->w[i];

  /* Self-attention. */
  PsInstr *h = layer_norm (b, x, w[W_LN1]);
  PsInstr *q = einsum (b, "bsm,mnd->bsnd", h, w[W_Q]);
  PsInstr *k = einsum (b, "bsm,mnd->bsnd", h, w[W_K]);
  PsInstr *v = einsum (b, "bsm,mnd->bsnd", h, w[W_V]);
  q = bin (b, PS_OP_MULTIPLY, q, full (b, q->shape, 1.0 / sqrt ((double) cfg->head_dim)));
  PsInstr *logits = einsum (b, "bsnd,btnd->bnst", q, k);
  /* Relative position bias [N, S, T] from the bucket one-hot, plus mask. */
  PsInstr *bias = einsum (b, "stk,kn->nst", rel_onehot, w[W_REL]);
  int64_t nst[3] = { 1, 2, 3 };
  PsInstr *lf = convert (b, logits, PS_F32);
  PsInstr *bf = convert (b, bias, PS_F32);
  lf = bin (b, PS_OP_ADD, lf, bcast (b, bf, lf->shape, 3, nst));
  int64_t st[2] = { 2, 3 };
  lf = bin (b, PS_OP_ADD, lf, bcast (b, mask, lf->shape, 2, st));
  /* Softmax over t in f32. */
  int64_t last = 3, keep[3] = { 0, 1, 2 };
  PsInstr *mx = ps_ad_reduce (b->c, lf, PS_OP_MAXIMUM, -1e30, 1, &last);
  PsInstr *e = ps_ad_unary (b->c, PS_OP_EXP,
                            bin (b, PS_OP_SUBTRACT, lf, bcast (b, mx, lf->shape, 3, keep)));
  PsInstr *se = ps_ad_reduce_sum (b->c, e, 1, &last);
  PsInstr *p = bin (b, PS_OP_DIVIDE, e, bcast (b, se, e->shape, 3, keep));
  PsInstr *pb = convert (b, p, PS_BF16);
  PsInstr *ctx = einsum (b, "bnst,btnd->bsnd", pb, v);
  PsInstr *att = einsum (b, "bsnd,mnd->bsm", ctx, w[W_O]);
  PsInstr *x1 = bin (b, PS_OP_ADD, x, att);

  /* Feed-forward. */
  PsInstr *h2 = layer_norm (b, x1, w[W_LN2]);
  PsInstr *f = einsum (b, "bsm,mh->bsh", h2, w[W_1]);
  if (cfg->gated_gelu)
    f = bin (b, PS_OP_MULTIPLY, gelu (b, f), einsum (b, "bsm,mh->bsh", h2, w[W_1G]));
  else
    f = ps_ad_binary (b->c, PS_OP_MAXIMUM, f, full (b, f->shape, 0.0));
  PsInstr *o = einsum (b, "bsh,hm->bsm", f, w[W_2]);
  return bin (b, PS_OP_ADD, x1, o);
}

/* The loop body of the layer stack: one layer from the scan's slices of
 * the stacked weights (xs_of[i]: which xs holds weight i, -1 if absent). */
typedef struct {
  Builder *b;
  int xs_of[W_COUNT];
  int n_xs;
} LoopCtx;

static gboolean
layer_body (const PsScanArgs *a, PsInstr **carry_out, gpointer user, GError **error)
{
  (void) error;
  LoopCtx *lc = user;
  Builder *b = lc->b;
  PsComputation *outer = b->c;
  b->c = a->c;
  Layer L = { { 0 } };
  for (int i = 0; i < W_COUNT; i++)
    L.w[i] = lc->xs_of[i] >= 0 ? a->xs[lc->xs_of[i]] : NULL;
  carry_out[0] = layer_forward (b, &L, a->carry[0], a->consts[0], a->consts[1]);
  b->c = outer;
  return TRUE;
}

/* Cross-entropy of the final activations against the labels, averaged over
 * the microbatch's tokens, in f32; the softmax weights are the embedding. */
static PsInstr *
head_loss (Builder *b, PsInstr *x, PsInstr *lnf, PsInstr *emb_bf, PsInstr *labels)
{
  PsInstr *h = layer_norm (b, x, lnf);
  PsInstr *logits = convert (b, einsum (b, "bsm,vm->bsv", h, emb_bf), PS_F32);
  int64_t last = 2, keep[2] = { 0, 1 };
  PsInstr *mx = ps_ad_reduce (b->c, logits, PS_OP_MAXIMUM, -1e30, 1, &last);
  PsInstr *xs = bin (b, PS_OP_SUBTRACT, logits, bcast (b, mx, logits->shape, 2, keep));
  PsInstr *se = ps_ad_reduce_sum (b->c, ps_ad_unary (b->c, PS_OP_EXP, xs), 1, &last);
  PsInstr *lse = ps_ad_unary (b->c, PS_OP_LOG, se);
  PsInstr *logp = bin (b, PS_OP_SUBTRACT, xs, bcast (b, lse, xs->shape, 2, keep));
  PsInstr *oh = one_hot (b, labels, b->cfg->vocab, PS_F32);
  int64_t all[3] = { 0, 1, 2 };
  PsInstr *tot = ps_ad_reduce_sum (b->c, bin (b, PS_OP_MULTIPLY, logp, oh), 3, all);
  double n = (double) (labels->shape->dims[0] * labels->shape->dims[1]);
  return bin (b, PS_OP_MULTIPLY, tot, ps_ad_scalar (b->c, PS_F32, -1.0 / n));
}

static PsInstr *
slice_batch (Builder *b, PsInstr *x, int64_t start, int64_t size)
{
  if (start == 0 && size == x->shape->dims[0])
    return x;
  int r = x->shape->rank;
  int64_t st[16], li[16], one[16], dims[16];
  for (int i = 0; i < r; i++)
    {
      st[i] = i == 0 ? start : 0;
      li[i] = i == 0 ? start + size : x->shape->dims[i];
      one[i] = 1;
      dims[i] = li[i] - st[i];
    }
  PsInstr *s = ps_computation_add_instr (b->c, PS_OP_SLICE, NULL,
                                         ps_shape_new_array (x->shape->etype, r, dims), 1, &x);
  ps_ints_set (&s->slice_starts, r, st);
  ps_ints_set (&s->slice_limits, r, li);
  ps_ints_set (&s->slice_strides, r, one);
  return s;
}

static gboolean
grads_into (GPtrArray *g, int n, PsInstr **acc, Builder *b)
{
  for (int i = 0; i < n; i++)
    {
      PsInstr *gi = g->pdata[i];
      acc[i] = acc[i] ? bin (b, PS_OP_ADD, acc[i], convert (b, gi, acc[i]->shape->etype)) : gi;
    }
  g_ptr_array_free (g, TRUE);
  return TRUE;
}

PsModule *
ps_dense_lm_build (const PsDenseLmConfig *cfg, PsDenseLmInfo *info, GError **error)
{
  if (!ps_dense_lm_check (cfg, error))
    return NULL;
  g_autofree int64_t *devices = ps_dense_lm_mesh_devices (cfg, error);
  if (!devices)
    return NULL;
  g_autofree char *mname = g_strdup_printf ("dense_lm_%s", cfg->name);
  PsModule *m = ps_module_new (mname);
  m->num_partitions = cfg->mesh[0] * cfg->mesh[1];
  PsComputation *c = ps_computation_new (m, "train_step");
  c->is_entry = TRUE;
  m->entry = c;
  Builder b = { cfg, m, c, devices, 0, error };
  const int64_t B = cfg->global_batch, S = cfg->seq_len, M = cfg->model_dim, H = cfg->ffn_dim;
  const int64_t N = cfg->heads, D = cfg->head_dim, V = cfg->vocab;
  const int K = cfg->rel_buckets;

  /* Parameters: weights, then optimizer state, then data and scalars. */
  GPtrArray *weights = g_ptr_array_new ();
  GPtrArray *wmaps = g_ptr_array_new ();
  int64_t vm[2] = { V, M };
  PsInstr *emb = param (&b, "embedding", ps_shape_new_array (PS_F32, 2, vm));
  static const int emb_2d[2] = { 1, 0 }, emb_1d[2] = { 2, -1 };
  const int *emb_map = cfg->sharding == PS_SHARDING_2D ? emb_2d
                       : cfg->sharding == PS_SHARDING_1D ? emb_1d : NULL;
  annotate (&b, emb, emb_map);
  g_ptr_array_add (weights, emb);
  g_ptr_array_add (wmaps, (gpointer) emb_map);
  /* Unrolled: one set of weights per layer ("layer3.wq"). As a loop: each
   * weight stacked over the layers ("layers.wq" [L, M, N, D]), the layer
   * dim unsharded, the rest annotated as a layer's weight is. */
  const gboolean loop = !cfg->unroll;
  const int n_sets = loop ? 1 : cfg->layers;
  Layer *layers = g_new0 (Layer, n_sets);
  GPtrArray *owned_maps = g_ptr_array_new_with_free_func (g_free);
  for (int l = 0; l < n_sets; l++)
    {
      int64_t mnd[3] = { M, N, D }, mh[2] = { M, H }, hm[2] = { H, M }, kn[2] = { K, N }, mm[1] = { M };
      static const char *names[W_COUNT] = { "ln1", "wq", "wk", "wv", "wo", "rel_bias", "ln2", "w1", "w1_gate", "w2" };
      for (int i = 0; i < W_COUNT; i++)
        {
          int rank;
          const int64_t *dims;
          switch (i)
            {
            case W_LN1: case W_LN2: rank = 1; dims = mm; break;
            case W_Q: case W_K: case W_V: case W_O: rank = 3; dims = mnd; break;
            case W_REL: rank = 2; dims = kn; break;
            case W_1: case W_1G: rank = 2; dims = mh; break;
            default: rank = 2; dims = hm; break;
            }
          if (i == W_1G && !cfg->gated_gelu)
            continue;
          const int *map = weight_mapping (cfg, i);
          g_autofree char *n = NULL;
          PsShape *s;
          if (loop)
            {
              int64_t sd[4] = { cfg->layers };
              memcpy (sd + 1, dims, sizeof (int64_t) * (gsize) rank);
              s = ps_shape_new_array (PS_F32, rank + 1, sd);
              n = g_strdup_printf ("layers.%s", names[i]);
              if (map)
                {
                  int *sm = g_new (int, rank + 1);
                  sm[0] = -1;
                  memcpy (sm + 1, map, sizeof (int) * (gsize) rank);
                  g_ptr_array_add (owned_maps, sm);
                  map = sm;
                }
            }
          else
            {
              s = ps_shape_new_array (PS_F32, rank, dims);
              n = g_strdup_printf ("layer%d.%s", l, names[i]);
            }
          layers[l].w[i] = param (&b, n, s);
          annotate (&b, layers[l].w[i], map);
          g_ptr_array_add (weights, layers[l].w[i]);
          g_ptr_array_add (wmaps, (gpointer) map);
        }
    }
  PsInstr *lnf = param (&b, "final_ln", ps_shape_new_array (PS_F32, 1, &M));
  g_ptr_array_add (weights, lnf);
  g_ptr_array_add (wmaps, NULL);
  int nw = (int) weights->len;
  /* Leading dims of each weight that stack layers (the optimizer works
   * per layer). */
  const int n_stack_of_layers = loop ? 1 : 0;

  GPtrArray *states = g_ptr_array_new ();
  int *first_state = g_new0 (int, nw + 1);
  for (int i = 0; i < nw; i++)
    {
      PsInstr *w = weights->pdata[i];
      PsShape *ss[2];
      int n_stack = i > 0 && i < nw - 1 ? n_stack_of_layers : 0;
      int ns = ps_optimizer_state_shapes_stacked (cfg->optimizer, w->shape, n_stack, ss);
      first_state[i] = states->len;
      for (int k = 0; k < ns; k++)
        {
          g_autofree char *n = g_strdup_printf ("%s.opt%d", w->name, k);
          PsInstr *sp = param (&b, n, ss[k]);
          /* Adam state has the weight's sharding; Adafactor's factors keep
           * the weight's mapping minus the reduced dim. With weight-update
           * sharding, dim 0 of the state is split over the data-parallel
           * axis when nothing else splits it. */
          const int *wm = wmaps->pdata[i];
          int map[16];
          gboolean any = FALSE;
          for (int d = 0; d < sp->shape->rank; d++)
            {
              int src = d;
              gboolean factored = cfg->optimizer == PS_OPTIMIZER_ADAFACTOR
                                  && w->shape->rank - n_stack >= 2;
              if (factored && k == 0 && d >= w->shape->rank - 1)
                src = d + 1;
              if (factored && k == 1 && d >= w->shape->rank - 2)
                src = d + 1;
              map[d] = wm ? wm[src] : -1;
              any |= map[d] != -1;
            }
          if (cfg->weight_update_sharding && sp->shape->rank > n_stack)
            {
              int dp_axis = cfg->sharding == PS_SHARDING_2D ? 0 : 2;
              int64_t dp = cfg->sharding == PS_SHARDING_2D ? cfg->mesh[0] : cfg->mesh[0] * cfg->mesh[1];
              gboolean used = FALSE;
              for (int d = 0; d < sp->shape->rank; d++)
                used |= map[d] == dp_axis || map[d] == 2 || (dp_axis == 2 && map[d] >= 0);
              /* the first dim of a layer's state, not the layer dim */
              if (!used && map[n_stack] == -1 && sp->shape->rank > n_stack
                  && sp->shape->dims[n_stack] % dp == 0)
                {
                  map[n_stack] = dp_axis;
                  any = TRUE;
                }
            }
          /* Frameworks give optimizer slots their variable's sharding; the
           * user does not write these, so they are not counted. */
          if (any)
            annotate_as (&b, sp, map, FALSE);
          g_ptr_array_add (states, sp);
        }
    }
  first_state[nw] = states->len;
  int64_t bs[2] = { B, S };
  PsInstr *ids = param (&b, "ids", ps_shape_new_array (PS_S32, 2, bs));
  PsInstr *labels = param (&b, "labels", ps_shape_new_array (PS_S32, 2, bs));
  PsInstr *lr = param (&b, "learning_rate", ps_shape_new_scalar (PS_F32));
  PsInstr *decay = param (&b, "decay", ps_shape_new_scalar (PS_F32));

  /* Shared across layers: relative-position one-hot and causal mask. */
  PsInstr *rel = relative_buckets (&b, S, K);
  int64_t ss2[2] = { S, S };
  PsInstr *qi = ps_computation_add_instr (c, PS_OP_IOTA, NULL, ps_shape_new_array (PS_S32, 2, ss2), 0, NULL);
  qi->iota_dimension = 0;
  PsInstr *ki = ps_computation_add_instr (c, PS_OP_IOTA, NULL, ps_shape_new_array (PS_S32, 2, ss2), 0, NULL);
  ki->iota_dimension = 1;
  PsInstr *cops[2] = { ki, qi };
  PsInstr *future = ps_computation_add_instr (c, PS_OP_COMPARE, NULL, ps_shape_new_array (PS_PRED, 2, ss2), 2, cops);
  future->comparison = PS_CMP_GT;
  PsShape *fs = ps_shape_new_array (PS_F32, 2, ss2);
  PsInstr *msel[3] = { future, ps_ad_full (c, fs, -1e9), ps_ad_full (c, fs, 0.0) };
  ps_shape_free (fs);
  PsInstr *mask = ps_computation_add_instr (c, PS_OP_SELECT, NULL, ps_shape_new_array (PS_F32, 2, ss2), 3, msel);

  /* Forward and backward per microbatch, gradients accumulated. */
  PsInstr **gacc = g_new0 (PsInstr *, nw);
  PsInstr *loss_acc = NULL;
  int64_t mb = B / cfg->microbatches;
  PsInstr **xs = g_new0 (PsInstr *, cfg->layers + 1);
  gboolean ok = TRUE;
  for (int u = 0; u < cfg->microbatches && ok; u++)
    {
      PsInstr *mids = slice_batch (&b, ids, u * mb, mb);
      PsInstr *mlab = slice_batch (&b, labels, u * mb, mb);
      PsInstr *emb_bf = convert (&b, emb, PS_BF16);
      PsInstr *x0 = einsum (&b, "bsv,vm->bsm", one_hot (&b, mids, V, PS_BF16), emb_bf);
      xs[0] = x0;
      PsScan *scan = NULL;
      if (loop)
        {
          /* The layer stack as one loop over the stacked weights; the
           * position one-hot and the mask are loop invariants. */
          PsInstr *stacked[W_COUNT];
          LoopCtx lc = { &b, { 0 }, 0 };
          for (int i = 0; i < W_COUNT; i++)
            {
              lc.xs_of[i] = -1;
              if (layers[0].w[i])
                {
                  lc.xs_of[i] = lc.n_xs;
                  stacked[lc.n_xs++] = layers[0].w[i];
                }
            }
          PsInstr *consts[2] = { rel, mask };
          gboolean consts_grad[2] = { FALSE, FALSE };
          PsScanSpec spec = { .name = "layers", .length = cfg->layers, .n_carry = 1, .carry = &x0,
                              .n_xs = lc.n_xs, .xs = stacked, .n_consts = 2, .consts = consts,
                              .body = layer_body, .user = &lc, .differentiable = TRUE,
                              .remat = cfg->remat, .consts_grad = consts_grad };
          scan = ps_scan_build (c, &spec, error);
          if (!scan)
            {
              ok = FALSE;
              break;
            }
          xs[cfg->layers] = ps_scan_carry_out (scan, 0);
        }
      else
        for (int l = 0; l < cfg->layers; l++)
          xs[l + 1] = layer_forward (&b, &layers[l], xs[l], rel, mask);
      /* The head gets its own cast of the (tied) embedding, and the head's
       * backward is taken with respect to that cast: differentiating with
       * respect to the embedding itself would walk back through every layer
       * (the embedding feeds the first one) and keep all activations alive. */
      PsInstr *emb_head = ps_computation_add_instr (c, PS_OP_CONVERT, NULL,
                                                    ps_shape_copy (emb_bf->shape), 1, &emb);
      PsInstr *loss = head_loss (&b, xs[cfg->layers], lnf, emb_head, mlab);
      loss_acc = loss_acc ? bin (&b, PS_OP_ADD, loss_acc, loss) : loss;

      /* Backward: head, then layers from the top, then the embedding. The
       * loss is averaged over microbatches, so seed with 1/microbatches. */
      PsInstr *seed = ps_ad_scalar (c, PS_F32, 1.0 / cfg->microbatches);
      PsInstr *hw[3] = { xs[cfg->layers], lnf, emb_head };
      GPtrArray *g = ps_autodiff_vjp (c, loss, seed, 3, hw, error);
      if (!g)
        {
          g_clear_pointer (&scan, ps_scan_free);
          ok = FALSE;
          break;
        }
      PsInstr *gx = g->pdata[0];
      PsInstr *acc_head[2] = { gacc[nw - 1], gacc[0] };
      PsInstr *head_g = g_ptr_array_steal_index (g, 1);
      PsInstr *emb_g = convert (&b, g_ptr_array_steal_index (g, 1), PS_F32);
      g_ptr_array_free (g, TRUE);
      acc_head[0] = acc_head[0] ? bin (&b, PS_OP_ADD, acc_head[0], head_g) : head_g;
      acc_head[1] = acc_head[1] ? bin (&b, PS_OP_ADD, acc_head[1], emb_g) : emb_g;
      gacc[nw - 1] = acc_head[0];
      gacc[0] = acc_head[1];
      if (loop)
        {
          PsInstr *dws[W_COUNT];
          ok = ps_scan_vjp (scan, &gx, &gx, dws, NULL, error);
          ps_scan_free (scan);
          if (!ok)
            break;
          for (int i = 0; i < nw - 2; i++)
            gacc[1 + i] = gacc[1 + i] ? bin (&b, PS_OP_ADD, gacc[1 + i], dws[i]) : dws[i];
        }
      int wi_end = nw - 1;
      for (int l = cfg->layers - 1; l >= 0 && ok && !loop; l--)
        {
          /* Rematerialisation: rebuild this layer's forward from its input
           * right before its backward, so only layer inputs stay live. */
          PsInstr *y = cfg->remat ? layer_forward (&b, &layers[l], xs[l], rel, mask) : xs[l + 1];
          PsInstr *wrt[W_COUNT + 1];
          int nwrt = 0;
          wrt[nwrt++] = xs[l];
          int first = 0;
          for (int i = 0; i < W_COUNT; i++)
            if (layers[l].w[i])
              wrt[nwrt++] = layers[l].w[i];
          GPtrArray *lg = ps_autodiff_vjp (c, y, gx, nwrt, wrt, error);
          if (!lg)
            {
              ok = FALSE;
              break;
            }
          gx = lg->pdata[0];
          g_ptr_array_remove_index (lg, 0);
          /* Layer l's weights sit in `weights` right after those of layers < l. */
          first = wi_end - (nwrt - 1);
          grads_into (lg, nwrt - 1, gacc + first, &b);
          wi_end = first;
        }
      if (!ok)
        break;
      GPtrArray *eg = ps_autodiff_vjp (c, x0, gx, 1, &emb, error);
      if (!eg)
        {
          ok = FALSE;
          break;
        }
      grads_into (eg, 1, gacc, &b);
    }
  g_free (xs);
  GPtrArray *outs = g_ptr_array_new ();
  GPtrArray *new_states = g_ptr_array_new ();
  if (!ok)
    {
      g_clear_pointer (&m, ps_module_free);
      goto out;
    }

  /* Optimizer. */
  PsOptimizerHyper hyper;
  ps_optimizer_hyper_defaults (cfg->optimizer, &hyper);
  hyper.lr = lr;
  hyper.decay = decay;
  PsInstr *loss_out = loss_acc;
  if (cfg->microbatches > 1)
    loss_out = bin (&b, PS_OP_MULTIPLY, loss_acc, ps_ad_scalar (c, PS_F32, 1.0 / cfg->microbatches));
  g_ptr_array_add (outs, loss_out);
  PsInstr **new_w = g_new0 (PsInstr *, nw);
  PsInstr **new_st = g_new0 (PsInstr *, states->len + 1);
  if (loop && nw > 2)
    {
      /* the stacked layer weights: one loop over the layers */
      ok = ps_optimizer_apply_layers (c, cfg->optimizer, &hyper, nw - 2, (PsInstr **) weights->pdata + 1,
                                      gacc + 1, (PsInstr **) states->pdata + first_state[1],
                                      new_w + 1, new_st + first_state[1], error);
    }
  for (int i = 0; i < nw && ok; i++)
    if (!new_w[i])
      ps_optimizer_apply (c, cfg->optimizer, &hyper, weights->pdata[i], gacc[i],
                          (PsInstr **) states->pdata + first_state[i], &new_w[i],
                          new_st + first_state[i]);
  for (int i = 0; i < nw && ok; i++)
    {
      /* The new weight replaces the old one (a donated buffer in XLA), so it
       * keeps the weight's sharding. */
      PsInstr *w = weights->pdata[i];
      if (w->sharding)
        ps_instr_set_sharding (new_w[i], w->sharding);
      g_ptr_array_add (outs, new_w[i]);
      for (int k = first_state[i]; k < first_state[i + 1]; k++)
        {
          PsInstr *st = states->pdata[k];
          if (st->sharding)
            ps_instr_set_sharding (new_st[k], st->sharding);
          g_ptr_array_add (new_states, new_st[k]);
        }
    }
  g_free (new_w);
  g_free (new_st);
  if (!ok)
    {
      g_clear_pointer (&m, ps_module_free);
      goto out;
    }
  for (guint i = 0; i < new_states->len; i++)
    g_ptr_array_add (outs, new_states->pdata[i]);
  PsShape **shapes = g_new (PsShape *, outs->len);
  for (guint i = 0; i < outs->len; i++)
    shapes[i] = ((PsInstr *) outs->pdata[i])->shape;
  c->root = ps_computation_add_instr (c, PS_OP_TUPLE, "outputs", ps_shape_new_tuple ((int) outs->len, shapes),
                                      (int) outs->len, (PsInstr **) outs->pdata);
  g_free (shapes);

  if (info)
    {
      memset (info, 0, sizeof *info);
      info->n_annotations = b.n_annotations;
      info->n_instructions = c->instrs->len;
      double params = 0;
      for (int i = 0; i < nw; i++)
        params += (double) ps_shape_elements (((PsInstr *) weights->pdata[i])->shape);
      info->params = params;
      info->tokens_per_step = B * S;
      /* 6 flops per parameter per token (forward 2, backward 4) plus the
       * attention scores and context: 12 * L * B * S^2 * N * D. */
      info->model_flops = 6.0 * params * (double) (B * S)
                          + 12.0 * cfg->layers * (double) B * (double) S * (double) S * (double) (N * D);
    }
out:
  g_free (gacc);
  g_free (first_state);
  g_free (layers);
  g_ptr_array_free (owned_maps, TRUE);
  g_ptr_array_free (weights, TRUE);
  g_ptr_array_free (wmaps, TRUE);
  g_ptr_array_free (states, TRUE);
  g_ptr_array_free (new_states, TRUE);
  g_ptr_array_free (outs, TRUE);
  return m;
}

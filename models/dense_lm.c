/* The dense Transformer LM training step: see dense_lm.h. */
#include "config.h"

#include "models/dense_lm.h"

#include <math.h>
#include <string.h>

#include "partitioner/builder/autodiff.h"
#include "partitioner/ir/sharding.h"
#include "traces/trace.h"

/* ---- configs ------------------------------------------------------------------ */

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

/* The name of a setting in messages: where the config's parameters say
 * it came from ("--heads", "run.ini:5:9: heads"), else its option. */
static const char *
label (const PsDenseLmConfig *c, const char *key, const char *option)
{
  return c->params ? ps_params_where (c->params, key) : option;
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
  struct { const char *key, *opt; int64_t v; } pos[] = {
    { "layers", "--layers", c->layers }, { "model_dim", "--model-dim", c->model_dim },
    { "ffn_dim", "--ffn-dim", c->ffn_dim }, { "heads", "--heads", c->heads },
    { "head_dim", "--head-dim", c->head_dim }, { "seq_len", "--seq-len", c->seq_len },
    { "global_batch", "--batch", c->global_batch }, { "vocab", "--vocab", c->vocab },
    { "microbatches", "--microbatches", c->microbatches },
    { "mesh", "--mesh (first)", c->mesh[0] }, { "mesh", "--mesh (second)", c->mesh[1] },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (pos); i++)
    if (pos[i].v <= 0)
      {
        g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be positive (got %" G_GINT64_FORMAT ")",
                     label (c, pos[i].key, pos[i].opt), pos[i].v);
        return FALSE;
      }
  /* Half the buckets are exact distances, the rest logarithmic up to 128. */
  if (c->rel_buckets < 2 || c->rel_buckets > 254)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s must be 2 .. 254 (got %d)",
                   label (c, "rel_buckets", "--rel-buckets"), c->rel_buckets);
      return FALSE;
    }
  const char *batch = label (c, "global_batch", "--batch"), *mbs = label (c, "microbatches", "--microbatches");
  if (c->global_batch % c->microbatches != 0)
    return require_div (c->global_batch, c->microbatches, batch, mbs, error);
  int64_t b = c->global_batch / c->microbatches;
  int64_t all = c->mesh[0] * c->mesh[1];
  const char *md = label (c, "model_dim", "--model-dim"), *heads = label (c, "heads", "--heads");
  const char *ffn = label (c, "ffn_dim", "--ffn-dim"), *vocab = label (c, "vocab", "--vocab");
  const char *mb = "the microbatch size (global batch / microbatches)";
  switch (c->sharding)
    {
    case PS_SHARDING_2D:
      return require_div (b, c->mesh[0], mb, "mesh axis 0", error)
             && require_div (c->model_dim, c->mesh[0], md, "mesh axis 0", error)
             && require_div (c->model_dim, c->mesh[1], md, "mesh axis 1", error)
             && require_div (c->heads, c->mesh[1], heads, "mesh axis 1", error)
             && require_div (c->ffn_dim, c->mesh[1], ffn, "mesh axis 1", error)
             && require_div (c->vocab, c->mesh[1], vocab, "mesh axis 1", error);
    case PS_SHARDING_1D:
      return require_div (c->heads, all, heads, "the device count", error)
             && require_div (c->ffn_dim, all, ffn, "the device count", error)
             && require_div (c->vocab, all, vocab, "the device count", error);
    case PS_SHARDING_DP:
      return require_div (b, all, mb, "the device count", error);
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
                       "%s nonpod2d: the slice has %" G_GINT64_FORMAT
                       " cores but the mesh %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " has %" G_GINT64_FORMAT,
                       label (c, "device_order", "--device-order"), c->physical[0] * c->physical[1] * c->physical[2], c->mesh[0], c->mesh[1],
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
  Layer *layers = g_new0 (Layer, cfg->layers);
  for (int l = 0; l < cfg->layers; l++)
    {
      int64_t mnd[3] = { M, N, D }, mh[2] = { M, H }, hm[2] = { H, M }, kn[2] = { K, N }, mm[1] = { M };
      static const char *names[W_COUNT] = { "ln1", "wq", "wk", "wv", "wo", "rel_bias", "ln2", "w1", "w1_gate", "w2" };
      for (int i = 0; i < W_COUNT; i++)
        {
          PsShape *s;
          switch (i)
            {
            case W_LN1: case W_LN2: s = ps_shape_new_array (PS_F32, 1, mm); break;
            case W_Q: case W_K: case W_V: case W_O: s = ps_shape_new_array (PS_F32, 3, mnd); break;
            case W_REL: s = ps_shape_new_array (PS_F32, 2, kn); break;
            case W_1: case W_1G: s = ps_shape_new_array (PS_F32, 2, mh); break;
            default: s = ps_shape_new_array (PS_F32, 2, hm); break;
            }
          if (i == W_1G && !cfg->gated_gelu)
            {
              ps_shape_free (s);
              continue;
            }
          g_autofree char *n = g_strdup_printf ("layer%d.%s", l, names[i]);
          layers[l].w[i] = param (&b, n, s);
          annotate (&b, layers[l].w[i], weight_mapping (cfg, i));
          g_ptr_array_add (weights, layers[l].w[i]);
          g_ptr_array_add (wmaps, (gpointer) weight_mapping (cfg, i));
        }
    }
  PsInstr *lnf = param (&b, "final_ln", ps_shape_new_array (PS_F32, 1, &M));
  g_ptr_array_add (weights, lnf);
  g_ptr_array_add (wmaps, NULL);
  int nw = (int) weights->len;

  GPtrArray *states = g_ptr_array_new ();
  int *first_state = g_new0 (int, nw + 1);
  for (int i = 0; i < nw; i++)
    {
      PsInstr *w = weights->pdata[i];
      PsShape *ss[2];
      int ns = ps_optimizer_state_shapes (cfg->optimizer, w->shape, ss);
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
              if (cfg->optimizer == PS_OPTIMIZER_ADAFACTOR && w->shape->rank >= 2 && k == 0 && d >= w->shape->rank - 1)
                src = d + 1;
              if (cfg->optimizer == PS_OPTIMIZER_ADAFACTOR && w->shape->rank >= 2 && k == 1 && d >= w->shape->rank - 2)
                src = d + 1;
              map[d] = wm ? wm[src] : -1;
              any |= map[d] != -1;
            }
          if (cfg->weight_update_sharding && sp->shape->rank > 0)
            {
              int dp_axis = cfg->sharding == PS_SHARDING_2D ? 0 : 2;
              int64_t dp = cfg->sharding == PS_SHARDING_2D ? cfg->mesh[0] : cfg->mesh[0] * cfg->mesh[1];
              gboolean used = FALSE;
              for (int d = 0; d < sp->shape->rank; d++)
                used |= map[d] == dp_axis || map[d] == 2 || (dp_axis == 2 && map[d] >= 0);
              if (!used && map[0] == -1 && sp->shape->dims[0] % dp == 0)
                {
                  map[0] = dp_axis;
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
      int wi_end = nw - 1;
      for (int l = cfg->layers - 1; l >= 0 && ok; l--)
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
  for (int i = 0; i < nw; i++)
    {
      PsInstr *nwt, *nst[2];
      ps_optimizer_apply (c, cfg->optimizer, &hyper, weights->pdata[i], gacc[i],
                          (PsInstr **) states->pdata + first_state[i], &nwt, nst);
      /* The new weight replaces the old one (a donated buffer in XLA), so it
       * keeps the weight's sharding. */
      PsInstr *w = weights->pdata[i];
      if (w->sharding)
        ps_instr_set_sharding (nwt, w->sharding);
      g_ptr_array_add (outs, nwt);
      for (int k = 0; k < first_state[i + 1] - first_state[i]; k++)
        {
          PsInstr *st = states->pdata[first_state[i] + k];
          if (st->sharding)
            ps_instr_set_sharding (nst[k], st->sharding);
          g_ptr_array_add (new_states, nst[k]);
        }
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
  g_ptr_array_free (weights, TRUE);
  g_ptr_array_free (wmaps, TRUE);
  g_ptr_array_free (states, TRUE);
  g_ptr_array_free (new_states, TRUE);
  g_ptr_array_free (outs, TRUE);
  return m;
}

/* The layer library's base (see layers.h): activations, layer and RMS
 * norms, softmax and the block options. The blocks (layers.c) and
 * attention (layers_attention.c) call these, and nothing here calls them:
 * so calls in the library run one way.
 */
#include "config.h"

#include "models/layers.h"

#include <math.h>

#include "models/layers_private.h"

/* ---- elementwise and normalisation ------------------------------------------------------ */

/* Layer norm (centre: subtract the mean first) or RMS norm over the last
 * dim, in f32. */
static PsInstr *
norm_last_dim (PsNet *net, PsInstr *x, PsInstr *scale, gboolean centre)
{
  PsInstr *xf = ly_convert (net, x, PS_F32);
  int r = xf->shape->rank;
  int64_t last = r - 1, keep[PS_NET_MAX_RANK];
  for (int i = 0; i < r - 1; i++)
    keep[i] = i;
  double inv_m = 1.0 / (double) xf->shape->dims[r - 1];
  g_autoptr (PsShape) rows = ps_shape_new_array (PS_F32, r - 1, xf->shape->dims);
  PsInstr *xc = xf;
  if (centre)
    {
      PsInstr *sum = ps_build_sum (ps_net_builder (net), xf, 1, &last);
      PsInstr *mean = ly_bin (net, PS_OP_MULTIPLY, sum, ly_full (net, rows, inv_m));
      xc = ly_bin (net, PS_OP_SUBTRACT, xf, ly_bcast (net, mean, xf->shape, r - 1, keep));
    }
  PsInstr *sq = ly_bin (net, PS_OP_MULTIPLY, xc, xc);
  PsInstr *inv_m_full = ly_full (net, rows, inv_m);
  PsInstr *var = ly_bin (net, PS_OP_MULTIPLY, ps_build_sum (ps_net_builder (net), sq, 1, &last), inv_m_full);
  PsInstr *rs = ly_un (net, PS_OP_RSQRT, ly_bin (net, PS_OP_ADD, var, ly_full (net, var->shape, 1e-6)));
  PsInstr *n = ly_bin (net, PS_OP_MULTIPLY, xc, ly_bcast (net, rs, xf->shape, r - 1, keep));
  PsInstr *sc = ly_bcast (net, scale, xf->shape, 1, &last);
  return ly_convert (net, ly_bin (net, PS_OP_MULTIPLY, n, sc), x->shape->etype);
}

PsInstr *
ps_layer_norm (PsNet *net, PsInstr *x, PsInstr *scale)
{
  return norm_last_dim (net, x, scale, TRUE);
}

PsInstr *
ps_layer_norm_weight (PsNet *net, const char *prefix, const char *name, int64_t dim)
{
  return ly_weight (net, prefix, name, NULL, 1, &dim);
}

PsInstr *
ps_rms_norm (PsNet *net, PsInstr *x, PsInstr *scale)
{
  return norm_last_dim (net, x, scale, FALSE);
}

PsInstr *
ps_norm (PsNet *net, PsNormKind kind, PsInstr *x, PsInstr *scale)
{
  return kind == PS_NORM_RMS ? ps_rms_norm (net, x, scale) : ps_layer_norm (net, x, scale);
}

PsInstr *
ps_silu (PsNet *net, PsInstr *x)
{
  return ly_bin (net, PS_OP_MULTIPLY, x, ly_un (net, PS_OP_LOGISTIC, x));
}

PsInstr *
ps_gelu (PsNet *net, PsInstr *x)
{
  PsInstr *x3 = ly_bin (net, PS_OP_MULTIPLY, ly_bin (net, PS_OP_MULTIPLY, x, x), x);
  PsInstr *in = ly_bin (net, PS_OP_ADD, x, ly_bin (net, PS_OP_MULTIPLY, ly_full (net, x->shape, 0.044715), x3));
  PsInstr *t = ly_un (net, PS_OP_TANH, ly_bin (net, PS_OP_MULTIPLY, ly_full (net, x->shape, sqrt (2.0 / G_PI)), in));
  PsInstr *h = ly_bin (net, PS_OP_ADD, ly_full (net, x->shape, 1.0), t);
  return ly_bin (net, PS_OP_MULTIPLY, ly_bin (net, PS_OP_MULTIPLY, ly_full (net, x->shape, 0.5), x), h);
}

PsInstr *
ps_relu (PsNet *net, PsInstr *x)
{
  return ly_bin (net, PS_OP_MAXIMUM, x, ly_full (net, x->shape, 0.0));
}

PsInstr *
ps_softmax (PsNet *net, PsInstr *x)
{
  int r = x->shape->rank;
  int64_t last = r - 1, keep[PS_NET_MAX_RANK];
  for (int i = 0; i < r - 1; i++)
    keep[i] = i;
  PsInstr *mx = ps_build_reduce_op (ps_net_builder (net), x, PS_OP_MAXIMUM, -1e30, 1, &last);
  PsInstr *e = ly_un (net, PS_OP_EXP, ly_bin (net, PS_OP_SUBTRACT, x, ly_bcast (net, mx, x->shape, r - 1, keep)));
  PsInstr *se = ps_build_sum (ps_net_builder (net), e, 1, &last);
  return ly_bin (net, PS_OP_DIVIDE, e, ly_bcast (net, se, e->shape, r - 1, keep));
}

/* ---- block options ---------------------------------------------------------------------- */

const char *const ps_position_names[] = { "relative", "rope", "learned", "none", NULL };
const char *const ps_block_names[] = { "sequential", "parallel", NULL };
const char *const ps_norm_names[] = { "layer", "rms", NULL };
const char *const ps_ffn_names[] = { "relu", "gelu", "geglu", "swiglu", NULL };
const char *const ps_rotary_pairs_names[] = { "half", "adjacent", NULL };

int
ps_layer_choice (const char *const *names, const char *name)
{
  for (int i = 0; names[i]; i++)
    if (g_strcmp0 (names[i], name) == 0)
      return i;
  return -1;
}

void
ps_block_options_init (PsBlockOptions *o, int rel_buckets, gboolean gated_gelu)
{
  o->position = rel_buckets > 0 ? PS_POSITION_RELATIVE : PS_POSITION_NONE;
  o->rel_buckets = rel_buckets;
  o->block = PS_BLOCK_SEQUENTIAL;
  o->norm = PS_NORM_LAYER;
  o->ffn = gated_gelu ? PS_FFN_GEGLU : PS_FFN_RELU;
  o->kv_heads = 0;
  o->rotary_dim = 0;
  o->rotary_pairs = PS_ROTARY_HALF;
}

gboolean
ps_block_check_rotary (const PsParamStore *params, PsPositionKind position, int64_t head_dim,
                       int64_t rotary_dim, PsRotaryPairs pairs, GError **error)
{
  if (pairs != PS_ROTARY_HALF && position != PS_POSITION_ROPE)
    return ps_param_fail (error, "%s %s needs %s rope", ps_param_store_label (params, "rotary_pairs", "--rotary-pairs"),
                          ps_rotary_pairs_names[pairs], ps_param_store_label (params, "position", "--position"));
  if (rotary_dim == 0)
    return TRUE;
  const char *rd = ps_param_store_label (params, "rotary_dim", "--rotary-dim");
  if (position != PS_POSITION_ROPE)
    return ps_param_fail (error, "%s %" G_GINT64_FORMAT " needs %s rope", rd, rotary_dim,
                          ps_param_store_label (params, "position", "--position"));
  if (rotary_dim < 0 || rotary_dim > head_dim || rotary_dim % 2 != 0)
    return ps_param_fail (error, "%s must be 0 (all of the head) or even and at most %s (%" G_GINT64_FORMAT
                          "), got %" G_GINT64_FORMAT, rd, ps_param_store_label (params, "head_dim", "--head-dim"),
                          head_dim, rotary_dim);
  return TRUE;
}

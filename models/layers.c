/* The layer library: see layers.h.
 *
 * Emission order is part of the contract (instruction names carry their
 * creation index, so the printed programs depend on it): where one
 * instruction needs two freshly emitted operands they are emitted into
 * named locals first, in the order written.
 */
#include "config.h"

#include "models/layers.h"

#include "partitioner/builder/scan.h"

#include <math.h>

#include "partitioner/builder/autodiff.h"

/* Shorthands over net->c. */
static PsInstr *
bin (PsNet *net, PsOpcode op, PsInstr *x, PsInstr *y)
{
  return ps_ad_binary (net->c, op, x, y);
}

static PsInstr *
un (PsNet *net, PsOpcode op, PsInstr *x)
{
  return ps_ad_unary (net->c, op, x);
}

static PsInstr *
full (PsNet *net, const PsShape *like, double v)
{
  return ps_ad_full (net->c, like, v);
}

static PsInstr *
bcast (PsNet *net, PsInstr *x, const PsShape *to, int n, const int64_t *dims)
{
  return ps_ad_broadcast (net->c, x, to, n, dims);
}

static PsInstr *
convert (PsNet *net, PsInstr *x, PsElemType t)
{
  return ps_ad_convert (net->c, x, t);
}

static PsInstr *
iota (PsNet *net, PsElemType t, int rank, const int64_t *dims, int64_t dim)
{
  PsInstr *i = ps_computation_add_instr (net->c, PS_OP_IOTA, NULL, ps_shape_new_array (t, rank, dims), 0, NULL);
  i->iota_dimension = dim;
  return i;
}

static PsInstr *
compare (PsNet *net, PsCompareDir dir, PsInstr *x, PsInstr *y)
{
  PsInstr *ops[2] = { x, y };
  PsInstr *c = ps_computation_add_instr (net->c, PS_OP_COMPARE, NULL,
                                         ps_shape_new_array (PS_PRED, x->shape->rank, x->shape->dims), 2, ops);
  c->comparison = dir;
  return c;
}

static PsInstr *
select3 (PsNet *net, PsInstr *pred, PsInstr *on_true, PsInstr *on_false)
{
  PsInstr *ops[3] = { pred, on_true, on_false };
  return ps_computation_add_instr (net->c, PS_OP_SELECT, NULL, ps_shape_copy (on_true->shape), 3, ops);
}

/* "<prefix>.<name>", or name alone without a prefix (transfer full). */
static char *
weight_name (const char *prefix, const char *name)
{
  return prefix ? g_strdup_printf ("%s.%s", prefix, name) : g_strdup (name);
}

static PsInstr *
weight (PsNet *net, const char *prefix, const char *name, const char *letters, int rank,
        const int64_t *dims)
{
  g_autofree char *full_name = weight_name (prefix, name);
  return ps_net_weight (net, full_name, letters, rank, dims);
}

/* ---- elementwise and normalisation ------------------------------------------------------ */

PsInstr *
ps_layer_norm (PsNet *net, PsInstr *x, PsInstr *scale)
{
  PsInstr *xf = convert (net, x, PS_F32);
  int r = xf->shape->rank;
  int64_t last = r - 1, keep[PS_NET_MAX_RANK];
  for (int i = 0; i < r - 1; i++)
    keep[i] = i;
  double inv_m = 1.0 / (double) xf->shape->dims[r - 1];
  PsInstr *sum = ps_ad_reduce_sum (net->c, xf, 1, &last);
  PsInstr *mean = bin (net, PS_OP_MULTIPLY, sum, full (net, sum->shape, inv_m));
  PsInstr *xc = bin (net, PS_OP_SUBTRACT, xf, bcast (net, mean, xf->shape, r - 1, keep));
  PsInstr *sq = bin (net, PS_OP_MULTIPLY, xc, xc);
  PsInstr *inv_m_full = full (net, sum->shape, inv_m);
  PsInstr *var = bin (net, PS_OP_MULTIPLY, ps_ad_reduce_sum (net->c, sq, 1, &last), inv_m_full);
  PsInstr *rs = un (net, PS_OP_RSQRT, bin (net, PS_OP_ADD, var, full (net, var->shape, 1e-6)));
  PsInstr *n = bin (net, PS_OP_MULTIPLY, xc, bcast (net, rs, xf->shape, r - 1, keep));
  PsInstr *sc = bcast (net, scale, xf->shape, 1, &last);
  return convert (net, bin (net, PS_OP_MULTIPLY, n, sc), x->shape->etype);
}

PsInstr *
ps_layer_norm_weight (PsNet *net, const char *prefix, const char *name, int64_t dim)
{
  return weight (net, prefix, name, NULL, 1, &dim);
}

PsInstr *
ps_gelu (PsNet *net, PsInstr *x)
{
  PsInstr *x3 = bin (net, PS_OP_MULTIPLY, bin (net, PS_OP_MULTIPLY, x, x), x);
  PsInstr *in = bin (net, PS_OP_ADD, x, bin (net, PS_OP_MULTIPLY, full (net, x->shape, 0.044715), x3));
  PsInstr *t = un (net, PS_OP_TANH, bin (net, PS_OP_MULTIPLY, full (net, x->shape, sqrt (2.0 / G_PI)), in));
  PsInstr *h = bin (net, PS_OP_ADD, full (net, x->shape, 1.0), t);
  return bin (net, PS_OP_MULTIPLY, bin (net, PS_OP_MULTIPLY, full (net, x->shape, 0.5), x), h);
}

PsInstr *
ps_relu (PsNet *net, PsInstr *x)
{
  return bin (net, PS_OP_MAXIMUM, x, full (net, x->shape, 0.0));
}

PsInstr *
ps_softmax (PsNet *net, PsInstr *x)
{
  int r = x->shape->rank;
  int64_t last = r - 1, keep[PS_NET_MAX_RANK];
  for (int i = 0; i < r - 1; i++)
    keep[i] = i;
  PsInstr *mx = ps_ad_reduce (net->c, x, PS_OP_MAXIMUM, -1e30, 1, &last);
  PsInstr *e = un (net, PS_OP_EXP, bin (net, PS_OP_SUBTRACT, x, bcast (net, mx, x->shape, r - 1, keep)));
  PsInstr *se = ps_ad_reduce_sum (net->c, e, 1, &last);
  return bin (net, PS_OP_DIVIDE, e, bcast (net, se, e->shape, r - 1, keep));
}

/* ---- embedding and loss ------------------------------------------------------------------ */

PsInstr *
ps_embedding_weight (PsNet *net, const char *name, int64_t vocab, int64_t model_dim)
{
  int64_t vm[2] = { vocab, model_dim };
  return ps_net_weight (net, name, "vm", 2, vm);
}

PsInstr *
ps_embed (PsNet *net, PsInstr *ids, PsInstr *table)
{
  PsInstr *oh = ps_net_one_hot (net, ids, table->shape->dims[0], table->shape->etype);
  return ps_net_einsum (net, "bsv,vm->bsm", oh, table);
}

PsInstr *
ps_softmax_cross_entropy (PsNet *net, PsInstr *logits, PsInstr *labels)
{
  int r = logits->shape->rank;
  g_assert (labels->shape->rank == r - 1);
  int64_t last = r - 1, keep[PS_NET_MAX_RANK], all[PS_NET_MAX_RANK];
  for (int i = 0; i < r; i++)
    keep[i] = all[i] = i;
  PsInstr *mx = ps_ad_reduce (net->c, logits, PS_OP_MAXIMUM, -1e30, 1, &last);
  PsInstr *xs = bin (net, PS_OP_SUBTRACT, logits, bcast (net, mx, logits->shape, r - 1, keep));
  PsInstr *se = ps_ad_reduce_sum (net->c, un (net, PS_OP_EXP, xs), 1, &last);
  PsInstr *lse = un (net, PS_OP_LOG, se);
  PsInstr *logp = bin (net, PS_OP_SUBTRACT, xs, bcast (net, lse, xs->shape, r - 1, keep));
  PsInstr *oh = ps_net_one_hot (net, labels, logits->shape->dims[r - 1], logits->shape->etype);
  PsInstr *tot = ps_ad_reduce_sum (net->c, bin (net, PS_OP_MULTIPLY, logp, oh), r, all);
  double n = (double) ps_shape_elements (labels->shape);
  return bin (net, PS_OP_MULTIPLY, tot, ps_ad_scalar (net->c, logits->shape->etype, -1.0 / n));
}

/* ---- self-attention ---------------------------------------------------------------------- */

void
ps_attention_weights (PsNet *net, const char *prefix, int64_t model_dim, int64_t heads,
                      int64_t head_dim, int rel_buckets, PsAttention *out)
{
  int64_t mnd[3] = { model_dim, heads, head_dim }, kn[2] = { rel_buckets, heads };
  out->ln = ps_layer_norm_weight (net, prefix, "ln1", model_dim);
  out->wq = weight (net, prefix, "wq", "mnd", 3, mnd);
  out->wk = weight (net, prefix, "wk", "mnd", 3, mnd);
  out->wv = weight (net, prefix, "wv", "mnd", 3, mnd);
  out->wo = weight (net, prefix, "wo", "mnd", 3, mnd);
  out->rel_bias = rel_buckets > 0 ? weight (net, prefix, "rel_bias", "kn", 2, kn) : NULL;
}

/* The bucket of each (s, t) as s32 [s, t]. */
static PsInstr *
relative_buckets (PsNet *net, int64_t S, int buckets)
{
  int64_t st[2] = { S, S };
  PsInstr *qi = iota (net, PS_S32, 2, st, 0);
  PsInstr *ki = iota (net, PS_S32, 2, st, 1);
  PsInstr *dist = bin (net, PS_OP_SUBTRACT, qi, ki);
  dist = bin (net, PS_OP_MAXIMUM, dist, full (net, dist->shape, 0));
  int exact = buckets / 2;
  PsInstr *df = convert (net, dist, PS_F32);
  /* exact + log(n / exact) / log(128 / exact) * (buckets - exact) */
  PsInstr *exact_f = full (net, df->shape, (double) exact);
  PsInstr *ratio = bin (net, PS_OP_DIVIDE, bin (net, PS_OP_MAXIMUM, df, full (net, df->shape, 1.0)), exact_f);
  PsInstr *lg = un (net, PS_OP_LOG, ratio);
  double k = (double) (buckets - exact) / log (128.0 / exact);
  PsInstr *scaled = bin (net, PS_OP_MULTIPLY, lg, full (net, df->shape, k));
  PsInstr *large = bin (net, PS_OP_ADD, full (net, df->shape, (double) exact), scaled);
  large = un (net, PS_OP_FLOOR, large);
  large = bin (net, PS_OP_MINIMUM, large, full (net, large->shape, (double) (buckets - 1)));
  PsInstr *small = compare (net, PS_CMP_LT, dist, full (net, dist->shape, exact));
  return select3 (net, small, dist, convert (net, large, PS_S32));
}

/* -1e9 where t > s, else 0, f32 [s, t]. */
static PsInstr *
causal_mask (PsNet *net, int64_t S)
{
  int64_t st[2] = { S, S };
  PsInstr *qi = iota (net, PS_S32, 2, st, 0);
  PsInstr *ki = iota (net, PS_S32, 2, st, 1);
  PsInstr *future = compare (net, PS_CMP_GT, ki, qi);
  g_autoptr (PsShape) fs = ps_shape_new_array (PS_F32, 2, st);
  PsInstr *masked = ps_ad_full (net->c, fs, -1e9);
  PsInstr *open = ps_ad_full (net->c, fs, 0.0);
  return select3 (net, future, masked, open);
}

void
ps_attention_context_causal (PsNet *net, int64_t seq_len, int rel_buckets, PsAttentionContext *out)
{
  out->rel_onehot = NULL;
  if (rel_buckets > 0)
    out->rel_onehot = ps_net_one_hot (net, relative_buckets (net, seq_len, rel_buckets), rel_buckets, net->act);
  out->mask = causal_mask (net, seq_len);
}

void
ps_attention_cast (PsNet *net, const PsAttention *w, PsAttention *out)
{
  out->ln = w->ln;
  out->wq = convert (net, w->wq, net->act);
  out->wk = convert (net, w->wk, net->act);
  out->wv = convert (net, w->wv, net->act);
  out->wo = convert (net, w->wo, net->act);
  out->rel_bias = w->rel_bias ? convert (net, w->rel_bias, net->act) : NULL;
}

PsInstr *
ps_attention (PsNet *net, const PsAttention *w, const PsAttentionContext *ctx, PsInstr *x)
{
  PsInstr *h = ps_layer_norm (net, x, w->ln);
  PsInstr *q = ps_net_einsum (net, "bsm,mnd->bsnd", h, w->wq);
  PsInstr *k = ps_net_einsum (net, "bsm,mnd->bsnd", h, w->wk);
  PsInstr *v = ps_net_einsum (net, "bsm,mnd->bsnd", h, w->wv);
  double head_dim = (double) w->wq->shape->dims[2];
  q = bin (net, PS_OP_MULTIPLY, q, full (net, q->shape, 1.0 / sqrt (head_dim)));
  PsInstr *logits = ps_net_einsum (net, "bsnd,btnd->bnst", q, k);
  PsInstr *lf;
  if (w->rel_bias)
    {
      /* Relative position bias [n, s, t] from the bucket one-hot. */
      PsInstr *bias = ps_net_einsum (net, "stk,kn->nst", ctx->rel_onehot, w->rel_bias);
      int64_t nst[3] = { 1, 2, 3 };
      lf = convert (net, logits, PS_F32);
      PsInstr *bf = convert (net, bias, PS_F32);
      lf = bin (net, PS_OP_ADD, lf, bcast (net, bf, lf->shape, 3, nst));
    }
  else
    lf = convert (net, logits, PS_F32);
  if (ctx->mask)
    {
      int64_t st[2] = { 2, 3 };
      lf = bin (net, PS_OP_ADD, lf, bcast (net, ctx->mask, lf->shape, 2, st));
    }
  PsInstr *p = convert (net, ps_softmax (net, lf), net->act);
  PsInstr *c = ps_net_einsum (net, "bnst,btnd->bsnd", p, v);
  PsInstr *out = ps_net_einsum (net, "bsnd,mnd->bsm", c, w->wo);
  return bin (net, PS_OP_ADD, x, out);
}

/* ---- feed-forward ------------------------------------------------------------------------ */

void
ps_ffn_weights (PsNet *net, const char *prefix, int64_t model_dim, int64_t ffn_dim, gboolean gated_gelu,
                PsFfn *out)
{
  int64_t mh[2] = { model_dim, ffn_dim }, hm[2] = { ffn_dim, model_dim };
  out->ln = ps_layer_norm_weight (net, prefix, "ln2", model_dim);
  out->w1 = weight (net, prefix, "w1", "mh", 2, mh);
  out->w1_gate = gated_gelu ? weight (net, prefix, "w1_gate", "mh", 2, mh) : NULL;
  out->w2 = weight (net, prefix, "w2", "hm", 2, hm);
}

void
ps_ffn_cast (PsNet *net, const PsFfn *w, PsFfn *out)
{
  out->ln = w->ln;
  out->w1 = convert (net, w->w1, net->act);
  out->w1_gate = w->w1_gate ? convert (net, w->w1_gate, net->act) : NULL;
  out->w2 = convert (net, w->w2, net->act);
}

PsInstr *
ps_ffn (PsNet *net, const PsFfn *w, PsInstr *x)
{
  PsInstr *h = ps_layer_norm (net, x, w->ln);
  PsInstr *f = ps_net_einsum (net, "bsm,mh->bsh", h, w->w1);
  if (w->w1_gate)
    {
      PsInstr *gate = ps_net_einsum (net, "bsm,mh->bsh", h, w->w1_gate);
      f = bin (net, PS_OP_MULTIPLY, ps_gelu (net, f), gate);
    }
  else
    f = ps_relu (net, f);
  PsInstr *out = ps_net_einsum (net, "bsh,hm->bsm", f, w->w2);
  return bin (net, PS_OP_ADD, x, out);
}

/* ---- the Transformer layer ----------------------------------------------------------------- */

void
ps_transformer_layer_weights (PsNet *net, const char *prefix, int64_t model_dim, int64_t ffn_dim,
                              int64_t heads, int64_t head_dim, int rel_buckets, gboolean gated_gelu,
                              const PsAttentionContext *ctx, PsTransformerLayer *out)
{
  ps_attention_weights (net, prefix, model_dim, heads, head_dim, rel_buckets, &out->attention);
  ps_ffn_weights (net, prefix, model_dim, ffn_dim, gated_gelu, &out->ffn);
  out->ctx = ctx;
}

PsInstr *
ps_transformer_layer (PsNet *net, gconstpointer layer, PsInstr *x)
{
  const PsTransformerLayer *L = layer;
  ps_net_annotate (net, x, "bsm");
  PsAttention att;
  PsFfn ffn;
  ps_attention_cast (net, &L->attention, &att);
  ps_ffn_cast (net, &L->ffn, &ffn);
  return ps_ffn (net, &ffn, ps_attention (net, &att, L->ctx, x));
}

static PsInstr *
rebound (GHashTable *map, PsInstr *x)
{
  PsInstr *y = x ? g_hash_table_lookup (map, x) : NULL;
  return y ? y : x;
}

gpointer
ps_transformer_layer_rebind (gconstpointer layer, GHashTable *map)
{
  PsTransformerLayer *r = g_memdup2 (layer, sizeof *r);
  PsInstr **f[] = { &r->attention.ln, &r->attention.wq, &r->attention.wk, &r->attention.wv,
                    &r->attention.wo, &r->attention.rel_bias, &r->ffn.ln, &r->ffn.w1,
                    &r->ffn.w1_gate, &r->ffn.w2 };
  for (gsize i = 0; i < G_N_ELEMENTS (f); i++)
    *f[i] = rebound (map, *f[i]);
  return r;
}

/* ---- layer stacks ------------------------------------------------------------------------------ */

PsLayer
ps_layer (PsNet *net, PsLayerFn forward, gconstpointer weights, int first_weight)
{
  PsLayer l = { forward, weights, first_weight, ps_net_n_weights (net) - first_weight, NULL };
  return l;
}

PsInstr *
ps_layer_stack_forward (PsNet *net, int n, const PsLayer *layers, PsInstr *x, PsInstr **xs)
{
  return ps_layer_stack_forward_aux (net, n, layers, x, xs, NULL);
}

PsInstr *
ps_layer_stack_forward_aux (PsNet *net, int n, const PsLayer *layers, PsInstr *x, PsInstr **xs,
                            PsInstr **auxs)
{
  xs[0] = x;
  for (int i = 0; i < n; i++)
    {
      xs[i + 1] = layers[i].forward (net, layers[i].weights, xs[i]);
      PsInstr *aux = ps_net_take_layer_aux (net);
      g_assert (aux == NULL || auxs != NULL);
      if (auxs)
        auxs[i] = aux;
    }
  return xs[n];
}

gboolean
ps_layer_stack_backward (PsNet *net, int n, const PsLayer *layers, PsInstr *const *xs, PsInstr *dy,
                         gboolean remat, PsInstr **dx, GError **error)
{
  return ps_layer_stack_backward_aux (net, n, layers, xs, NULL, NULL, dy, remat, dx, error);
}

gboolean
ps_layer_stack_backward_aux (PsNet *net, int n, const PsLayer *layers, PsInstr *const *xs,
                             PsInstr *const *auxs, PsInstr *aux_seed, PsInstr *dy, gboolean remat,
                             PsInstr **dx, GError **error)
{
  for (int i = n - 1; i >= 0; i--)
    {
      const PsLayer *l = &layers[i];
      PsInstr *ys[2] = { remat ? l->forward (net, l->weights, xs[i]) : xs[i + 1], NULL };
      PsInstr *aux = ps_net_take_layer_aux (net);
      if (!remat)
        aux = auxs ? auxs[i] : NULL;
      PsInstr *dys[2] = { dy, aux_seed };
      PsInstr **w = (PsInstr **) net->weights->pdata + l->first_weight;
      ys[1] = aux;
      g_assert (aux == NULL || aux_seed != NULL);
      if (!ps_net_vjp_multi (net, aux ? 2 : 1, ys, dys, xs[i], &dy, l->n_weights, w, error))
        return FALSE;
    }
  *dx = dy;
  return TRUE;
}

/* ---- layer stacks as a loop ----------------------------------------------------------------- */

struct PsLayerLoop {
  PsNet *net;
  const PsLayer *layer;
  PsScan *scan;
};

typedef struct {
  PsNet *net;
  const PsLayer *layer;
} LoopBody;

/* One layer on the scan's slices: the net builds in the loop body for the
 * time of the call. */
static gboolean
loop_body (const PsScanArgs *a, PsInstr **carry_out, gpointer user, GError **error)
{
  (void) error;
  LoopBody *b = user;
  PsNet *net = b->net;
  const PsLayer *l = b->layer;
  g_autoptr (GHashTable) map = g_hash_table_new (NULL, NULL);
  for (int i = 0; i < l->n_weights; i++)
    g_hash_table_insert (map, net->weights->pdata[l->first_weight + i], a->xs[i]);
  g_autofree gpointer w = l->rebind (l->weights, map);
  PsComputation *outer = net->c;
  net->c = a->c;
  carry_out[0] = l->forward (net, w, a->carry[0]);
  net->c = outer;
  g_assert (ps_net_take_layer_aux (net) == NULL);
  return TRUE;
}

PsInstr *
ps_layer_loop_forward (PsNet *net, const PsLayer *layer, int64_t n, PsInstr *x, gboolean remat,
                       PsLayerLoop **loop, GError **error)
{
  g_return_val_if_fail (layer->rebind != NULL && n >= 1, NULL);
  PsInstr **w = (PsInstr **) net->weights->pdata + layer->first_weight;
  for (int i = 0; i < layer->n_weights; i++)
    {
      int64_t sd[PS_NET_MAX_RANK];
      g_return_val_if_fail (ps_net_weight_stack (net, w[i], sd) == 1 && sd[0] == n, NULL);
    }
  LoopBody b = { net, layer };
  PsScanSpec spec = { .name = "layers", .length = n, .n_carry = 1, .carry = &x,
                      .n_xs = layer->n_weights, .xs = w, .body = loop_body, .user = &b,
                      .differentiable = TRUE, .remat = remat };
  PsScan *s = ps_scan_build (net->c, &spec, error);
  if (!s)
    return NULL;
  *loop = g_new0 (PsLayerLoop, 1);
  (*loop)->net = net;
  (*loop)->layer = layer;
  (*loop)->scan = s;
  return ps_scan_carry_out (s, 0);
}

gboolean
ps_layer_loop_backward (PsNet *net, PsLayerLoop *loop, PsInstr *dy, PsInstr **dx, GError **error)
{
  g_return_val_if_fail (loop != NULL && loop->net == net, FALSE);
  const PsLayer *l = loop->layer;
  /* the layers' gradients go straight into one carried accumulator per
   * weight: no stack of this microbatch's gradients next to the sum */
  gboolean ok = ps_net_scan_vjp_accumulate (net, loop->scan, l->first_weight, l->n_weights, dy,
                                            dx, error);
  ps_layer_loop_free (loop);
  return ok;
}

gboolean
ps_layer_loop_backward_update (PsNet *net, PsLayerLoop *loop, PsInstr *dy, PsInstr **dx,
                               PsInstr *lr, PsInstr *decay, GError **error)
{
  g_return_val_if_fail (loop != NULL && loop->net == net, FALSE);
  const PsLayer *l = loop->layer;
  gboolean ok = ps_net_scan_vjp_update (net, loop->scan, l->first_weight, l->n_weights, dy, dx,
                                        lr, decay, error);
  ps_layer_loop_free (loop);
  return ok;
}

void
ps_layer_loop_free (PsLayerLoop *loop)
{
  if (!loop)
    return;
  ps_scan_free (loop->scan);
  g_free (loop);
}

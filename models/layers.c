/* The layer library: see layers.h. Activations, norms, softmax and the
 * block options are in layers_base.c, below this file and
 * layers_attention.c, which both call them.
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

#include "models/layers_private.h"

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
  PsInstr *mx = ps_build_reduce_op (ps_net_builder (net), logits, PS_OP_MAXIMUM, -1e30, 1, &last);
  PsInstr *xs = ly_bin (net, PS_OP_SUBTRACT, logits, ly_bcast (net, mx, logits->shape, r - 1, keep));
  PsInstr *se = ps_build_sum (ps_net_builder (net), ly_un (net, PS_OP_EXP, xs), 1, &last);
  PsInstr *lse = ly_un (net, PS_OP_LOG, se);
  PsInstr *logp = ly_bin (net, PS_OP_SUBTRACT, xs, ly_bcast (net, lse, xs->shape, r - 1, keep));
  PsInstr *oh = ps_net_one_hot (net, labels, logits->shape->dims[r - 1], logits->shape->etype);
  PsInstr *tot = ps_build_sum (ps_net_builder (net), ly_bin (net, PS_OP_MULTIPLY, logp, oh), r, all);
  double n = (double) ps_shape_elements (labels->shape);
  return ly_bin (net, PS_OP_MULTIPLY, tot, ps_build_scalar (ps_net_builder (net), logits->shape->etype, -1.0 / n));
}

/* ---- feed-forward ------------------------------------------------------------------------ */

void
ps_ffn_weights (PsNet *net, const char *prefix, int64_t model_dim, int64_t ffn_dim, gboolean gated_gelu,
                PsFfn *out)
{
  ps_ffn_weights_kind (net, prefix, model_dim, ffn_dim, gated_gelu ? PS_FFN_GEGLU : PS_FFN_RELU,
                       PS_NORM_LAYER, TRUE, out);
}

void
ps_ffn_weights_kind (PsNet *net, const char *prefix, int64_t model_dim, int64_t ffn_dim, PsFfnKind kind,
                     PsNormKind norm, gboolean pre_norm, PsFfn *out)
{
  int64_t mh[2] = { model_dim, ffn_dim }, hm[2] = { ffn_dim, model_dim };
  const gboolean gated = kind == PS_FFN_GEGLU || kind == PS_FFN_SWIGLU;
  out->kind = kind;
  out->norm = norm;
  out->ln = pre_norm ? ps_layer_norm_weight (net, prefix, "ln2", model_dim) : NULL;
  out->w1 = ly_weight (net, prefix, "w1", "mh", 2, mh);
  out->w1_gate = gated ? ly_weight (net, prefix, "w1_gate", "mh", 2, mh) : NULL;
  out->w2 = ly_weight (net, prefix, "w2", "hm", 2, hm);
}

void
ps_moe_ffn_weights (PsNet *net, const char *prefix, const char *ln_name, int64_t model_dim,
                    int64_t ffn_dim, int64_t experts, const char *wi_letters, const char *wo_letters,
                    PsInstr **ln, PsInstr **wg, PsInstr **wi, PsInstr **wo)
{
  int64_t me[2] = { model_dim, experts }, emh[3] = { experts, model_dim, ffn_dim };
  int64_t ehm[3] = { experts, ffn_dim, model_dim };
  *ln = ps_layer_norm_weight (net, prefix, ln_name, model_dim);
  *wg = ly_weight (net, prefix, "moe_wg", "mr", 2, me);
  *wi = ly_weight (net, prefix, "moe_wi", wi_letters, 3, emh);
  *wo = ly_weight (net, prefix, "moe_wo", wo_letters, 3, ehm);
}

void
ps_ffn_cast (PsNet *net, const PsFfn *w, PsFfn *out)
{
  out->kind = w->kind;
  out->norm = w->norm;
  out->ln = w->ln;
  out->w1 = ly_convert (net, w->w1, net->act);
  out->w1_gate = w->w1_gate ? ly_convert (net, w->w1_gate, net->act) : NULL;
  out->w2 = ly_convert (net, w->w2, net->act);
}

PsInstr *
ps_ffn_core (PsNet *net, const PsFfn *w, PsInstr *h)
{
  PsInstr *f = ps_net_einsum (net, "bsm,mh->bsh", h, w->w1);
  switch (w->kind)
    {
    case PS_FFN_GEGLU:
    case PS_FFN_SWIGLU:
      {
        PsInstr *gate = ps_net_einsum (net, "bsm,mh->bsh", h, w->w1_gate);
        f = ly_bin (net, PS_OP_MULTIPLY, w->kind == PS_FFN_GEGLU ? ps_gelu (net, f) : ps_silu (net, f), gate);
        break;
      }
    case PS_FFN_GELU:
      f = ps_gelu (net, f);
      break;
    case PS_FFN_RELU:
      f = ps_relu (net, f);
      break;
    }
  return ps_net_einsum (net, "bsh,hm->bsm", f, w->w2);
}

PsInstr *
ps_ffn (PsNet *net, const PsFfn *w, PsInstr *x)
{
  PsInstr *h = ps_norm (net, w->norm, x, w->ln);
  PsInstr *out = ps_ffn_core (net, w, h);
  return ly_bin (net, PS_OP_ADD, x, out);
}

/* ---- the Transformer layer ----------------------------------------------------------------- */

void
ps_transformer_layer_weights (PsNet *net, const char *prefix, int64_t model_dim, int64_t ffn_dim,
                              int64_t heads, int64_t head_dim, int rel_buckets, gboolean gated_gelu,
                              const PsAttentionContext *ctx, PsTransformerLayer *out)
{
  PsBlockOptions o;
  ps_block_options_init (&o, rel_buckets, gated_gelu);
  ps_transformer_layer_weights_opts (net, prefix, model_dim, ffn_dim, heads, head_dim, &o, ctx, out);
}

void
ps_transformer_layer_weights_opts (PsNet *net, const char *prefix, int64_t model_dim, int64_t ffn_dim,
                                   int64_t heads, int64_t head_dim, const PsBlockOptions *o,
                                   const PsAttentionContext *ctx, PsTransformerLayer *out)
{
  int buckets = o->position == PS_POSITION_RELATIVE ? o->rel_buckets : 0;
  int64_t kv = o->kv_heads > 0 ? o->kv_heads : heads;
  ps_attention_weights_kv (net, prefix, model_dim, heads, head_dim, kv, buckets, o->norm, &out->attention);
  /* A parallel block (GPT-J, PaLM) has one norm for both branches. */
  ps_ffn_weights_kind (net, prefix, model_dim, ffn_dim, o->ffn, o->norm, o->block == PS_BLOCK_SEQUENTIAL,
                       &out->ffn);
  out->ctx = ctx;
  out->block = o->block;
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
  if (L->block == PS_BLOCK_SEQUENTIAL)
    return ps_ffn (net, &ffn, ps_attention (net, &att, L->ctx, x));
  /* Parallel (GPT-J's and PaLM's formulation): x + attn(norm x) + ffn(norm x). */
  PsInstr *h = ps_norm (net, att.norm, x, att.ln);
  PsInstr *a = ps_attention_core (net, &att, L->ctx, h);
  PsInstr *f = ps_ffn_core (net, &ffn, h);
  return ly_bin (net, PS_OP_ADD, ly_bin (net, PS_OP_ADD, x, a), f);
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

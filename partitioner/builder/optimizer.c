/* Optimizer updates as IR: see optimizer.h. */
#include "config.h"

#include "partitioner/builder/optimizer.h"

#include <string.h>

#include "partitioner/builder/folder_private.h"
#include "partitioner/builder/scan.h"

const char *const ps_optimizer_names[] = { "adafactor", "adam", NULL };

const char *
ps_optimizer_name (PsOptimizerKind k)
{
  return ps_optimizer_names[k == PS_OPTIMIZER_ADAM];
}

static PsShape *
shape_without_dim (const PsShape *s, int drop)
{
  int64_t dims[64];
  int r = 0;
  for (int d = 0; d < s->rank; d++)
    if (d != drop)
      dims[r++] = s->dims[d];
  return ps_shape_new_array (PS_F32, r, dims);
}

int
ps_optimizer_state_shapes (PsOptimizerKind k, const PsShape *w, PsShape **out)
{
  return ps_optimizer_state_shapes_stacked (k, w, 0, out);
}

int
ps_optimizer_state_shapes_stacked (PsOptimizerKind k, const PsShape *w, int n_stack,
                                   PsShape **out)
{
  if (k == PS_OPTIMIZER_ADAM)
    {
      if (out)
        {
          out[0] = ps_shape_new_array (PS_F32, w->rank, w->dims);
          out[1] = ps_shape_new_array (PS_F32, w->rank, w->dims);
        }
      return 2;
    }
  if (w->rank - n_stack >= 2)
    {
      if (out)
        {
          out[0] = shape_without_dim (w, w->rank - 1);
          out[1] = shape_without_dim (w, w->rank - 2);
        }
      return 2;
    }
  if (out)
    out[0] = ps_shape_new_array (PS_F32, w->rank, w->dims);
  return 1;
}

int
ps_optimizer_state_source_dim (PsOptimizerKind k, int weight_rank, int state, int dim)
{
  /* Adafactor's column factor (state 1) drops the second-to-last dim. */
  if (k == PS_OPTIMIZER_ADAFACTOR && weight_rank >= 2 && state == 1 && dim >= weight_rank - 2)
    return dim + 1;
  return dim;
}

void
ps_optimizer_hyper_defaults (PsOptimizerKind k, PsOptimizerHyper *h)
{
  memset (h, 0, sizeof *h);
  if (k == PS_OPTIMIZER_ADAM)
    {
      h->beta1 = 0.9;
      h->epsilon1 = 1e-8;
    }
  else
    {
      h->epsilon1 = 1e-30;
      h->epsilon2 = 1e-3;
      h->clip = 1.0;
    }
}

/* Scalar s broadcast to the shape of `like`. */
static PsInstr *
bcast_scalar (PsComputation *c, PsInstr *s, const PsShape *like)
{
  if (like->rank == 0)
    return s;
  return ad_broadcast (c, s, like, 0, NULL);
}

static PsInstr *
mul (PsComputation *c, PsInstr *a, PsInstr *b)
{
  return ad_binary (c, PS_OP_MULTIPLY, a, b);
}

static PsInstr *
add (PsComputation *c, PsInstr *a, PsInstr *b)
{
  return ad_binary (c, PS_OP_ADD, a, b);
}

/* decay * state + (1 - decay) * x */
static PsInstr *
ema (PsComputation *c, PsInstr *decay, PsInstr *state, PsInstr *x)
{
  PsInstr *one = ad_scalar (c, PS_F32, 1.0);
  PsInstr *om = ad_binary (c, PS_OP_SUBTRACT, one, decay);
  return add (c, mul (c, bcast_scalar (c, decay, state->shape), state),
              mul (c, bcast_scalar (c, om, x->shape), x));
}

/* Mean over `dim` of a (f32). */
static PsInstr *
mean_dim (PsComputation *c, PsInstr *a, int dim)
{
  int64_t d = dim;
  PsInstr *s = ad_reduce_sum (c, a, 1, &d);
  PsInstr *inv = ad_full (c, s->shape, 1.0 / (double) a->shape->dims[dim]);
  return mul (c, s, inv);
}

/* Root mean square of the elements of each stacked weight: f32[] when
 * n_stack is 0, else over the dims after the first n_stack (the result
 * has those n_stack dims). */
static PsInstr *
rms (PsComputation *c, PsInstr *a, int n_stack)
{
  int64_t dims[64];
  int n = 0;
  double count = 1;
  for (int d = n_stack; d < a->shape->rank; d++)
    {
      dims[n++] = d;
      count *= (double) a->shape->dims[d];
    }
  PsInstr *sq = mul (c, a, a);
  PsInstr *s = ad_reduce_sum (c, sq, n, dims);
  PsInstr *inv = ad_scalar (c, PS_F32, 1.0 / (count > 0 ? count : 1));
  PsInstr *m = mul (c, s, n_stack == 0 ? inv : bcast_scalar (c, inv, s->shape));
  return ad_unary (c, PS_OP_SQRT, m);
}

/* A per-weight value (f32[], or one per stacked weight) broadcast to the
 * shape of `like`. */
static PsInstr *
bcast_stacked (PsComputation *c, PsInstr *v, const PsShape *like, int n_stack)
{
  if (n_stack == 0)
    return bcast_scalar (c, v, like);
  int64_t keep[64];
  for (int d = 0; d < n_stack; d++)
    keep[d] = d;
  return ad_broadcast (c, v, like, n_stack, keep);
}

static void
adafactor (PsComputation *c, const PsOptimizerHyper *h, PsInstr *w, PsInstr *g,
           PsInstr *const *st, int n_stack, PsInstr **nw, PsInstr **nst)
{
  int r = w->shape->rank;
  PsInstr *g2 = add (c, mul (c, g, g), ad_full (c, g->shape, h->epsilon1));
  PsInstr *rsq;
  if (r - n_stack >= 2)
    {
      PsInstr *row = ema (c, h->decay, st[0], mean_dim (c, g2, r - 1));
      PsInstr *col = ema (c, h->decay, st[1], mean_dim (c, g2, r - 2));
      nst[0] = row;
      nst[1] = col;
      /* v_hat[.., i, j] = row[.., i] * col[.., j] / mean(row[.., :]) */
      PsInstr *row_mean = mean_dim (c, row, r - 2);
      int64_t keep_row[64], keep_col[64], keep_mean[64];
      for (int d = 0; d < r - 1; d++)
        keep_row[d] = d;
      for (int d = 0; d < r - 2; d++)
        keep_col[d] = keep_mean[d] = d;
      keep_col[r - 2] = r - 1;
      PsInstr *rb = ad_broadcast (c, row, w->shape, r - 1, keep_row);
      PsInstr *cb = ad_broadcast (c, col, w->shape, r - 1, keep_col);
      PsInstr *mb = ad_broadcast (c, row_mean, w->shape, r - 2, keep_mean);
      PsInstr *vhat = ad_binary (c, PS_OP_DIVIDE, mul (c, rb, cb), mb);
      rsq = ad_unary (c, PS_OP_RSQRT, vhat);
    }
  else
    {
      PsInstr *v = ema (c, h->decay, st[0], g2);
      nst[0] = v;
      rsq = ad_unary (c, PS_OP_RSQRT, v);
    }
  PsInstr *u = mul (c, g, rsq);
  if (n_stack == 0)
    {
      /* Clip: u / max(1, rms(u) / d). */
      PsInstr *ratio = mul (c, rms (c, u, 0), ad_scalar (c, PS_F32, 1.0 / h->clip));
      PsInstr *den = ad_binary (c, PS_OP_MAXIMUM, ad_scalar (c, PS_F32, 1.0), ratio);
      u = ad_binary (c, PS_OP_DIVIDE, u, bcast_scalar (c, den, u->shape));
      /* Relative step: lr * max(eps2, rms(w)). */
      PsInstr *scale = ad_binary (c, PS_OP_MAXIMUM, ad_scalar (c, PS_F32, h->epsilon2),
                                     rms (c, w, 0));
      PsInstr *step = mul (c, h->lr, scale);
      *nw = ad_binary (c, PS_OP_SUBTRACT, w, mul (c, bcast_scalar (c, step, u->shape), u));
      return;
    }
  /* The same per stacked weight. */
  PsInstr *ru = rms (c, u, n_stack);
  PsInstr *ratio = mul (c, ru, bcast_scalar (c, ad_scalar (c, PS_F32, 1.0 / h->clip), ru->shape));
  PsInstr *den = ad_binary (c, PS_OP_MAXIMUM, bcast_scalar (c, ad_scalar (c, PS_F32, 1.0),
                                                               ratio->shape), ratio);
  u = ad_binary (c, PS_OP_DIVIDE, u, bcast_stacked (c, den, u->shape, n_stack));
  /* Relative step: lr * max(eps2, rms(w)). */
  PsInstr *rw = rms (c, w, n_stack);
  PsInstr *scale = ad_binary (c, PS_OP_MAXIMUM,
                                 bcast_scalar (c, ad_scalar (c, PS_F32, h->epsilon2), rw->shape), rw);
  PsInstr *step = mul (c, bcast_scalar (c, h->lr, scale->shape), scale);
  *nw = ad_binary (c, PS_OP_SUBTRACT, w, mul (c, bcast_stacked (c, step, u->shape, n_stack), u));
}

static void
adam (PsComputation *c, const PsOptimizerHyper *h, PsInstr *w, PsInstr *g,
      PsInstr *const *st, PsInstr **nw, PsInstr **nst)
{
  PsInstr *b1 = ad_scalar (c, PS_F32, h->beta1);
  PsInstr *m = ema (c, b1, st[0], g);
  PsInstr *v = ema (c, h->decay, st[1], mul (c, g, g));
  nst[0] = m;
  nst[1] = v;
  PsInstr *den = add (c, ad_unary (c, PS_OP_SQRT, v), ad_full (c, v->shape, h->epsilon1));
  PsInstr *u = ad_binary (c, PS_OP_DIVIDE, m, den);
  *nw = ad_binary (c, PS_OP_SUBTRACT, w, mul (c, bcast_scalar (c, h->lr, u->shape), u));
}

void
ps_optimizer_apply (PsComputation *c, PsOptimizerKind k, const PsOptimizerHyper *h,
                    PsInstr *weight, PsInstr *grad, PsInstr *const *states,
                    PsInstr **new_weight, PsInstr **new_states)
{
  g_return_if_fail (weight->shape->etype == PS_F32);
  if (grad->shape->etype != PS_F32)
    grad = ad_convert (c, grad, PS_F32);
  if (k == PS_OPTIMIZER_ADAM)
    adam (c, h, weight, grad, states, new_weight, new_states);
  else
    adafactor (c, h, weight, grad, states, 0, new_weight, new_states);
}

void
ps_optimizer_apply_stacked (PsComputation *c, PsOptimizerKind k, const PsOptimizerHyper *h,
                            PsInstr *weight, PsInstr *grad, PsInstr *const *states, int n_stack,
                            PsInstr **new_weight, PsInstr **new_states)
{
  g_return_if_fail (weight->shape->etype == PS_F32);
  g_return_if_fail (n_stack >= 0 && n_stack <= weight->shape->rank);
  if (grad->shape->etype != PS_F32)
    grad = ad_convert (c, grad, PS_F32);
  if (k == PS_OPTIMIZER_ADAM)
    adam (c, h, weight, grad, states, new_weight, new_states);
  else
    adafactor (c, h, weight, grad, states, n_stack, new_weight, new_states);
}

/* ---- stacked weights, one layer at a time ---------------------------------------- */

typedef struct {
  PsOptimizerKind kind;
  const PsOptimizerHyper *h;
  int n;
  const int *first_state;   /* n + 1 entries: states of weight i */
} Layers;

/* Layer t of one stacked weight: w and g are its slices, `states` its
 * ns stacked states. nv receives the new weight slice and the ns new
 * state slices. */
static void
update_slice (PsComputation *c, PsOptimizerKind k, const PsOptimizerHyper *h, PsInstr *w,
              PsInstr *g, int ns, PsInstr *const *states, PsInstr *t, PsInstr *zero, PsInstr **nv)
{
  PsInstr *slices[2] = { NULL, NULL };
  for (int j = 0; j < ns; j++)
    slices[j] = ps_scan_slice_at (c, states[j], t, zero);
  ps_optimizer_apply (c, k, h, w, g, slices, &nv[0], nv + 1);
}

/* Carry: every stacked gradient, then every stacked state; xs: the
 * weights; consts: lr, decay. Layer t of each weight is updated from its
 * gradient and state, and written over that gradient (the gradient stack
 * becomes the new weight stack) and the state. */
static gboolean
layers_body (const PsScanArgs *a, PsInstr **carry_out, gpointer user, GError **error)
{
  (void) error;
  const Layers *L = user;
  PsComputation *c = a->c;
  PsInstr *zero = ad_scalar (c, PS_S32, 0);
  PsOptimizerHyper h = *L->h;
  h.lr = a->consts[0];
  h.decay = a->consts[1];
  for (int i = 0; i < L->n; i++)
    {
      int ns = L->first_state[i + 1] - L->first_state[i];
      /* carry i: the gradient; carry n + first_state[i] + k: state k */
      int at[3] = { i, L->n + L->first_state[i], L->n + L->first_state[i] + 1 };
      PsInstr *g = ps_scan_slice_at (c, a->carry[i], a->index, zero), *nv[3];
      update_slice (c, L->kind, &h, a->xs[i], g, ns, a->carry + at[1], a->index, zero, nv);
      for (int k = 0; k <= ns; k++)
        carry_out[at[k]] = ps_scan_update_at (c, a->carry[at[k]], nv[k], a->index, zero);
    }
  return TRUE;
}

void
ps_optimizer_apply_layer_at (PsComputation *c, PsOptimizerKind k, const PsOptimizerHyper *h,
                             int n, PsInstr *const *weights, PsInstr *const *grads,
                             PsInstr *const *states, PsInstr *t, PsInstr **new_weights,
                             PsInstr **new_states)
{
  g_return_if_fail (c != NULL && n >= 1);
  PsInstr *zero = ad_scalar (c, PS_S32, 0);
  for (int i = 0, first = 0; i < n; i++)
    {
      int ns = ps_optimizer_state_shapes_stacked (k, weights[i]->shape, 1, NULL);
      PsInstr *w = ps_scan_slice_at (c, weights[i], t, zero), *nv[3];
      update_slice (c, k, h, w, grads[i], ns, states + first, t, zero, nv);
      new_weights[i] = ps_scan_update_at (c, weights[i], nv[0], t, zero);
      for (int j = 0; j < ns; j++)
        new_states[first + j] = ps_scan_update_at (c, states[first + j], nv[1 + j], t, zero);
      first += ns;
    }
}

gboolean
ps_optimizer_apply_layers (PsComputation *c, PsOptimizerKind k, const PsOptimizerHyper *h,
                           int n, PsInstr *const *weights, PsInstr *const *grads,
                           PsInstr *const *states, PsInstr **new_weights, PsInstr **new_states,
                           GError **error)
{
  g_return_val_if_fail (c != NULL && n >= 1, FALSE);
  int64_t length = weights[0]->shape->dims[0];
  g_autofree int *first = g_new0 (int, n + 1);
  for (int i = 0; i < n; i++)
    first[i + 1] = first[i] + ps_optimizer_state_shapes_stacked (k, weights[i]->shape, 1, NULL);
  int n_carry = n + first[n];
  g_autofree PsInstr **carry = g_new (PsInstr *, n_carry);
  for (int i = 0; i < n; i++)
    carry[i] = grads[i]->shape->etype == PS_F32 ? grads[i] : ad_convert (c, grads[i], PS_F32);
  for (int j = 0; j < first[n]; j++)
    carry[n + j] = states[j];
  PsInstr *consts[2] = { h->lr, h->decay };
  Layers L = { k, h, n, first };
  PsScanSpec spec = { .name = "optimizer", .length = length, .n_carry = n_carry, .carry = carry,
                      .n_xs = n, .xs = weights, .n_consts = 2, .consts = consts,
                      .body = layers_body, .user = &L };
  g_autoptr (PsScan) s = ps_scan_build (c, &spec, error);
  if (!s)
    return FALSE;
  for (int i = 0; i < n; i++)
    new_weights[i] = ps_scan_carry_out (s, i);
  for (int j = 0; j < first[n]; j++)
    new_states[j] = ps_scan_carry_out (s, n + j);
  return TRUE;
}

/* Autodiff of convolutions and batch normalization (see autodiff.h), and
 * the emission helpers model code uses to write them.
 *
 * Convolution gradients follow JAX's transpose rules for
 * conv_general_dilated (jax/_src/lax/convolution.py,
 * _conv_general_dilated_transpose_lhs/_rhs), which are what XLA receives
 * from JAX and TensorFlow alike:
 *
 *  - grad of the input: a convolution of the output gradient with the
 *    kernel reversed in its spatial dims and its in/out feature roles
 *    swapped (feature groups moved from the output-feature dim into the
 *    input-feature dim), stride and base dilation exchanged, and padding
 *    (k - 1) d - lo before, the rest after;
 *  - grad of the kernel: a convolution of the input with the output
 *    gradient as kernel, batch and feature roles swapped (so the batch is
 *    contracted), window = the output's spatial size, window dilation =
 *    the forward stride, feature groups as batch groups.
 *
 * batch-norm-training's gradient is batch-norm-grad of its operand, scale
 * and batch statistics (what XLA's BatchNormTraining gradient and
 * TensorFlow's FusedBatchNormGrad compute); the statistics outputs carry
 * no gradient of their own, as in TensorFlow. */
#include "config.h"

#include <string.h>

#include "partitioner/builder/autodiff_private.h"

static int64_t
dilate (int64_t n, int64_t d)
{
  return n == 0 ? 0 : 1 + d * (n - 1);
}

PsInstr *
ad_convolution (PsComputation *c, PsInstr *lhs, PsInstr *rhs, const PsConvDims *dims,
                   const PsWindowDim *window, int64_t feature_group_count,
                   int64_t batch_group_count)
{
  int n = dims->n_spatial;
  PsInstr *ops[2] = { lhs, rhs };
  PsInstr *x = ps_computation_add_instr (c, PS_OP_CONVOLUTION, NULL, NULL, 2, ops);
  x->conv = *dims;
  x->conv.in_spatial = g_memdup2 (dims->in_spatial, sizeof (int64_t) * (gsize) MAX (n, 1));
  x->conv.k_spatial = g_memdup2 (dims->k_spatial, sizeof (int64_t) * (gsize) MAX (n, 1));
  x->conv.out_spatial = g_memdup2 (dims->out_spatial, sizeof (int64_t) * (gsize) MAX (n, 1));
  x->conv.present = TRUE;
  x->window.n = n;
  x->window.dims = n > 0 ? g_memdup2 (window, sizeof (PsWindowDim) * (gsize) n) : NULL;
  x->feature_group_count = feature_group_count > 1 ? feature_group_count : 0;
  x->batch_group_count = batch_group_count > 1 ? batch_group_count : 0;
  GError *error = NULL;
  x->shape = ps_infer_shape (x, &error);
  if (!x->shape)
    g_error ("autodiff: convolution %s does not fit: %s", x->name, error->message);
  return x;
}

PsInstr *
ad_get_tuple_element (PsComputation *c, PsInstr *tuple, int64_t index)
{
  g_return_val_if_fail (ps_shape_is_tuple (tuple->shape) && index < tuple->shape->n_elems, NULL);
  PsInstr *g = ps_computation_add_instr (c, PS_OP_GET_TUPLE_ELEMENT, NULL,
                                         ps_shape_copy (tuple->shape->elems[index]), 1, &tuple);
  g->tuple_index = index;
  return g;
}

PsInstr *
ad_batch_norm (PsComputation *c, PsOpcode op, PsInstr *const *operands, float epsilon,
                  int64_t feature_index)
{
  int n = op == PS_OP_BATCH_NORM_TRAINING ? 3 : 5;
  PsInstr *x = ps_computation_add_instr (c, op, NULL, NULL, n, operands);
  x->epsilon = epsilon;
  x->feature_index = feature_index;
  GError *error = NULL;
  x->shape = ps_infer_shape (x, &error);
  if (!x->shape)
    g_error ("autodiff: %s %s does not fit: %s", ps_opcode_name (op), x->name, error->message);
  return x;
}

/* The kernel with its output-feature dim split into (groups, rest) and the
 * groups moved, major, into the input-feature dim (JAX's
 * _reshape_axis_out_of then _reshape_axis_into). */
static PsInstr *
groups_into_input_features (PsComputation *c, PsInstr *k, int64_t po, int64_t pi, int64_t g)
{
  const PsShape *s = k->shape;
  int r = s->rank;
  int64_t e[64] = { 0 };
  for (int d = 0, j = 0; d < r; d++)
    {
      if (d == po)
        {
          e[j++] = g;
          e[j++] = s->dims[d] / g;
        }
      else
        e[j++] = s->dims[d];
    }
  PsShape *es = ps_shape_new_array (s->etype, r + 1, e);
  PsInstr *x = ad_reshape (c, k, es);
  ps_shape_free (es);
  /* Position of original dim d in the expanded shape; the groups sit at po. */
#define POS(d) ((d) < po ? (d) : (d) + 1)
  int64_t perm[64] = { 0 };
  int j = 0;
  for (int d = 0; d < r; d++)
    {
      if (d == pi)
        perm[j++] = po;
      perm[j++] = POS (d);
    }
#undef POS
  x = ad_transpose (c, x, perm);
  int64_t f[64] = { 0 };
  for (int d = 0; d < r; d++)
    f[d] = d == pi ? g * s->dims[d] : d == po ? s->dims[d] / g : s->dims[d];
  PsShape *fs = ps_shape_new_array (s->etype, r, f);
  x = ad_reshape (c, x, fs);
  ps_shape_free (fs);
  return x;
}

PsInstr *
ad_conv_input_grad (PsComputation *c, PsInstr *conv, PsInstr *g)
{
  const PsConvDims *d = &conv->conv;
  int n = d->n_spatial;
  PsInstr *lhs = conv->operands[0], *k = conv->operands[1];
  int64_t fgc = MAX (conv->feature_group_count, 1);
  if (MAX (conv->batch_group_count, 1) > 1)
    return NULL;
  if (fgc > 1)
    k = groups_into_input_features (c, k, d->k_out_feature, d->k_in_feature, fgc);
  if (n > 0)
    {
      PsInstr *rev = ps_computation_add_instr (c, PS_OP_REVERSE, NULL, ps_shape_copy (k->shape), 1, &k);
      ps_ints_set (&rev->dimensions, n, d->k_spatial);
      k = rev;
    }
  PsConvDims t = { 0 };
  t.present = TRUE;
  t.n_spatial = n;
  t.in_batch = d->out_batch;
  t.in_feature = d->out_feature;
  t.in_spatial = d->out_spatial;
  t.k_in_feature = d->k_out_feature;
  t.k_out_feature = d->k_in_feature;
  t.k_spatial = d->k_spatial;
  t.out_batch = d->in_batch;
  t.out_feature = d->in_feature;
  t.out_spatial = d->in_spatial;
  PsWindowDim w[MAX (n, 1)];
  for (int i = 0; i < n; i++)
    {
      const PsWindowDim *f = &conv->window.dims[i];
      int64_t in = lhs->shape->dims[d->in_spatial[i]], out = conv->shape->dims[d->out_spatial[i]];
      int64_t lhs_d = dilate (in, MAX (f->base_dilation, 1));
      int64_t rhs_d = dilate (f->size, MAX (f->window_dilation, 1));
      int64_t out_d = dilate (out, MAX (f->stride, 1));
      int64_t before = rhs_d - f->pad_lo - 1;
      w[i] = (PsWindowDim) { .size = f->size, .stride = MAX (f->base_dilation, 1),
                             .pad_lo = before, .pad_hi = lhs_d + rhs_d - 1 - out_d - before,
                             .base_dilation = MAX (f->stride, 1),
                             .window_dilation = MAX (f->window_dilation, 1) };
    }
  PsInstr *gc = ad_convert (c, g, k->shape->etype);
  PsInstr *dx = ad_convolution (c, gc, k, &t, w, fgc, 1);
  if (!ps_shape_equal (dx->shape, lhs->shape))
    g_error ("autodiff: the input gradient of %s has the wrong shape", conv->name);
  return dx;
}

PsInstr *
ad_conv_kernel_grad (PsComputation *c, PsInstr *conv, PsInstr *g)
{
  const PsConvDims *d = &conv->conv;
  int n = d->n_spatial;
  PsInstr *lhs = conv->operands[0], *k = conv->operands[1];
  int64_t fgc = MAX (conv->feature_group_count, 1);
  if (MAX (conv->batch_group_count, 1) > 1)
    return NULL;
  PsConvDims t = { 0 };
  t.present = TRUE;
  t.n_spatial = n;
  t.in_batch = d->in_feature;
  t.in_feature = d->in_batch;
  t.in_spatial = d->in_spatial;
  t.k_out_feature = d->out_feature;
  t.k_in_feature = d->out_batch;
  t.k_spatial = d->out_spatial;
  t.out_batch = d->k_in_feature;
  t.out_feature = d->k_out_feature;
  t.out_spatial = d->k_spatial;
  PsWindowDim w[MAX (n, 1)];
  for (int i = 0; i < n; i++)
    {
      const PsWindowDim *f = &conv->window.dims[i];
      int64_t in = lhs->shape->dims[d->in_spatial[i]], out = conv->shape->dims[d->out_spatial[i]];
      int64_t lhs_d = dilate (in, MAX (f->base_dilation, 1));
      int64_t rhs_d = dilate (f->size, MAX (f->window_dilation, 1));
      int64_t out_d = dilate (out, MAX (f->stride, 1));
      w[i] = (PsWindowDim) { .size = out, .stride = MAX (f->window_dilation, 1),
                             .pad_lo = f->pad_lo,
                             .pad_hi = (out_d - lhs_d) + (rhs_d - f->pad_lo - 1),
                             .base_dilation = MAX (f->base_dilation, 1),
                             .window_dilation = MAX (f->stride, 1) };
    }
  PsInstr *gc = ad_convert (c, g, lhs->shape->etype);
  PsInstr *dk = ad_convolution (c, lhs, gc, &t, w, 1, fgc);
  if (!ps_shape_equal (dk->shape, k->shape))
    g_error ("autodiff: the kernel gradient of %s has the wrong shape", conv->name);
  return dk;
}

void
ad_batch_norm_training_grad (PsComputation *c, PsInstr *bn, PsInstr *dy, PsInstr **dx,
                                PsInstr **dscale, PsInstr **doffset)
{
  PsInstr *mean = ad_get_tuple_element (c, bn, 1);
  PsInstr *var = ad_get_tuple_element (c, bn, 2);
  PsInstr *ops[5] = { bn->operands[0], bn->operands[1], mean, var,
                      ad_convert (c, dy, bn->operands[0]->shape->etype) };
  PsInstr *grad = ad_batch_norm (c, PS_OP_BATCH_NORM_GRAD, ops, bn->epsilon, bn->feature_index);
  *dx = ad_get_tuple_element (c, grad, 0);
  *dscale = ad_get_tuple_element (c, grad, 1);
  *doffset = ad_get_tuple_element (c, grad, 2);
}

void
ad_batch_norm_inference_grad (PsComputation *c, PsInstr *bn, PsInstr *g, PsInstr **grads)
{
  /* y = (x - mean) * m + offset with m = scale * rsqrt(var + eps):
   * dx = g m, doffset = sum g, dscale = sum g (x - mean) rsqrt(var + eps),
   * dmean = -sum g m, dvar = sum g (x - mean) scale * -1/2 (var + eps)^-3/2. */
  PsInstr *x = bn->operands[0], *scale = bn->operands[1], *mean = bn->operands[3];
  PsInstr *var = bn->operands[4];
  int r = x->shape->rank;
  int64_t f = bn->feature_index;
  int64_t red[r];
  int nr = 0;
  for (int d = 0; d < r; d++)
    if (d != f)
      red[nr++] = d;
  PsInstr *gx = ad_convert (c, g, x->shape->etype);
  PsInstr *ve = ad_binary (c, PS_OP_ADD, var, ad_full (c, var->shape, bn->epsilon));
  PsInstr *rs = ad_unary (c, PS_OP_RSQRT, ve);
  PsInstr *m = ad_binary (c, PS_OP_MULTIPLY, scale, rs);
  PsInstr *xc = ad_binary (c, PS_OP_SUBTRACT, x, ad_broadcast (c, mean, x->shape, 1, &f));
  PsInstr *sum_g = ad_reduce_sum (c, gx, nr, red);
  PsInstr *sum_gxc = ad_reduce_sum (c, ad_binary (c, PS_OP_MULTIPLY, gx, xc), nr, red);
  grads[0] = ad_binary (c, PS_OP_MULTIPLY, gx, ad_broadcast (c, m, x->shape, 1, &f));
  grads[1] = ad_binary (c, PS_OP_MULTIPLY, sum_gxc, rs);
  grads[2] = sum_g;
  grads[3] = ad_unary (c, PS_OP_NEGATE, ad_binary (c, PS_OP_MULTIPLY, sum_g, m));
  PsInstr *rs3 = ad_binary (c, PS_OP_MULTIPLY, rs, ad_binary (c, PS_OP_MULTIPLY, rs, rs));
  PsInstr *half = ad_full (c, var->shape, -0.5);
  PsInstr *k = ad_binary (c, PS_OP_MULTIPLY, half, ad_binary (c, PS_OP_MULTIPLY, scale, rs3));
  grads[4] = ad_binary (c, PS_OP_MULTIPLY, sum_gxc, k);
}

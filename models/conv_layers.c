/* Convolution blocks of the layer library: see conv_layers.h. */
#include "config.h"

#include "models/conv_layers.h"


PsInstr *
ps_conv (PsNet *net, PsInstr *x, PsInstr *kernel, const int64_t *strides, const int64_t *pad_lo,
         const int64_t *pad_hi, const int64_t *lhs_dilation, int64_t groups)
{
  int r = x->shape->rank, n = r - 2;
  g_assert (n >= 0 && kernel->shape->rank == r && n <= 9);
  /* Channels last: "b012f_012io->b012f" for three spatial dims. */
  char sp[10] = { 0 };
  for (int i = 0; i < n; i++)
    sp[i] = (char) ('0' + i);
  g_autofree char *labels = g_strdup_printf ("b%sf_%sio->b%sf", sp, sp, sp);
  PsBuilder *b = ps_net_builder (net);
  PsInstr *k = ps_build_cast (b, kernel, x->shape->etype);
  return ps_build_convolution_dilated (b, x, k, labels, strides, pad_lo, pad_hi, lhs_dilation, NULL,
                                       groups);
}

double
ps_conv_flops (const PsInstr *conv)
{
  const PsShape *k = conv->operands[1]->shape;
  double window = 1;
  for (int i = 0; i < conv->conv.n_spatial; i++)
    window *= (double) k->dims[conv->conv.k_spatial[i]];
  return 2.0 * (double) ps_shape_elements (conv->shape) * window
         * (double) k->dims[conv->conv.k_in_feature];
}

PsInstr *
ps_batch_norm (PsNet *net, PsInstr *x, PsInstr *scale, PsInstr *offset)
{
  PsBuilder *b = ps_net_builder (net);
  PsInstr *xf = ps_build_cast (b, x, PS_F32);
  /* epsilon: PyTorch's BatchNorm3d / SyncBatchNorm default. */
  PsInstr *bn = ps_build_batch_norm_training (b, xf, scale, offset, 1e-5f, x->shape->rank - 1);
  PsInstr *y = ps_build_get_tuple_element (b, bn, 0);
  return ps_build_cast (b, y, x->shape->etype);
}

void
ps_batch_norm_weights (PsNet *net, const char *prefix, const char *name, int64_t c,
                       PsInstr **scale, PsInstr **offset)
{
  g_autofree char *s = g_strdup_printf ("%s.%s_scale", prefix, name);
  g_autofree char *o = g_strdup_printf ("%s.%s_offset", prefix, name);
  *scale = ps_net_weight (net, s, NULL, 1, &c);
  *offset = ps_net_weight (net, o, NULL, 1, &c);
}

PsInstr *
ps_swish (PsNet *net, PsInstr *x)
{
  PsBuilder *b = ps_net_builder (net);
  return ps_build_mul (b, x, ps_build_unary (b, PS_OP_LOGISTIC, x));
}

PsInstr *
ps_add_bias (PsNet *net, PsInstr *x, PsInstr *bias)
{
  int64_t last = x->shape->rank - 1;
  PsBuilder *b = ps_net_builder (net);
  PsInstr *bc = ps_build_cast (b, bias, x->shape->etype);
  return ps_build_add (b, x, ps_build_broadcast_to (b, bc, x->shape, &last));
}

/* Convolution blocks of the layer library: see conv_layers.h. */
#include "config.h"

#include "models/conv_layers.h"

#include "partitioner/builder/autodiff.h"

PsInstr *
ps_conv (PsNet *net, PsInstr *x, PsInstr *kernel, const int64_t *strides, const int64_t *pad_lo,
         const int64_t *pad_hi, const int64_t *lhs_dilation, int64_t groups)
{
  int r = x->shape->rank, n = r - 2;
  g_assert (n >= 0 && kernel->shape->rank == r && n <= PS_NET_MAX_RANK);
  int64_t in_sp[PS_NET_MAX_RANK], k_sp[PS_NET_MAX_RANK];
  PsWindowDim w[PS_NET_MAX_RANK];
  for (int i = 0; i < n; i++)
    {
      in_sp[i] = i + 1;
      k_sp[i] = i;
      w[i] = (PsWindowDim) { .size = kernel->shape->dims[i], .stride = strides ? strides[i] : 1,
                             .pad_lo = pad_lo ? pad_lo[i] : 0, .pad_hi = pad_hi ? pad_hi[i] : 0,
                             .base_dilation = lhs_dilation ? lhs_dilation[i] : 1,
                             .window_dilation = 1 };
    }
  PsConvDims d = { .present = TRUE, .n_spatial = n, .in_batch = 0, .in_feature = r - 1,
                   .in_spatial = in_sp, .k_in_feature = n, .k_out_feature = n + 1,
                   .k_spatial = k_sp, .out_batch = 0, .out_feature = r - 1,
                   .out_spatial = in_sp };
  PsInstr *k = ps_ad_convert (net->c, kernel, x->shape->etype);
  return ps_ad_convolution (net->c, x, k, &d, w, groups, 1);
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
  PsInstr *xf = ps_ad_convert (net->c, x, PS_F32);
  PsInstr *ops[3] = { xf, scale, offset };
  /* epsilon: PyTorch's BatchNorm3d / SyncBatchNorm default. */
  PsInstr *bn = ps_ad_batch_norm (net->c, PS_OP_BATCH_NORM_TRAINING, ops, 1e-5f,
                                  x->shape->rank - 1);
  PsInstr *y = ps_ad_get_tuple_element (net->c, bn, 0);
  return ps_ad_convert (net->c, y, x->shape->etype);
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
  return ps_ad_binary (net->c, PS_OP_MULTIPLY, x, ps_ad_unary (net->c, PS_OP_LOGISTIC, x));
}

PsInstr *
ps_add_bias (PsNet *net, PsInstr *x, PsInstr *bias)
{
  int64_t last = x->shape->rank - 1;
  PsInstr *b = ps_ad_convert (net->c, bias, x->shape->etype);
  return ps_ad_binary (net->c, PS_OP_ADD, x, ps_ad_broadcast (net->c, b, x->shape, 1, &last));
}

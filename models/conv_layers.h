/* Convolution blocks of the layer library (models/layers.h): the pieces
 * the image and speech models compose. Activations are channels-last,
 * [batch, spatial..., features] ("b0..f" in HLO dim labels), kernels
 * [window..., in features / groups, out features] ("0..io").
 *
 * Ownership: every returned PsInstr* is transfer none (owned by net->c).
 */
#ifndef PS_MODELS_CONV_LAYERS_H
#define PS_MODELS_CONV_LAYERS_H

#include <glib.h>
#include <stdint.h>

#include "models/net.h"

G_BEGIN_DECLS

/* A convolution of x [b, s_1..s_k, c_in] with `kernel` [w_1..w_k, c_in /
 * groups, c_out] (converted to x's type), per spatial dim: stride, padding
 * before and after, base (lhs) dilation (NULL: 1, 0, 0, 1). The result is
 * [b, o_1..o_k, c_out] in x's type. A transposed ("deconvolution")
 * up-sampling by s is a base dilation s with padding w - 1 both sides. */
PsInstr *ps_conv (PsNet *net, PsInstr *x, PsInstr *kernel, const int64_t *strides,
                  const int64_t *pad_lo, const int64_t *pad_hi, const int64_t *lhs_dilation,
                  int64_t groups);
/* Multiply-adds of a convolution, every window position counted (padding
 * included), as FLOPs (2 per multiply-add). */
double ps_conv_flops (const PsInstr *conv);

/* Batch normalization of a channels-last x over every dim but the last, in
 * training mode (XLA's batch-norm-training: the batch's own statistics),
 * computed in f32 with f32 scale and offset [c]; returned in x's type. */
PsInstr *ps_batch_norm (PsNet *net, PsInstr *x, PsInstr *scale, PsInstr *offset);
/* The batch-norm scale and offset "<prefix>.<name>_scale", "..._offset"
 * of c features (f32, not annotated: replicated, or split like the
 * features by propagation). */
void ps_batch_norm_weights (PsNet *net, const char *prefix, const char *name, int64_t c,
                            PsInstr **scale, PsInstr **offset);
/* swish(x) = x * logistic(x). */
PsInstr *ps_swish (PsNet *net, PsInstr *x);
/* Adds a bias [c] (converted to x's type) along x's last dim. */
PsInstr *ps_add_bias (PsNet *net, PsInstr *x, PsInstr *bias);

G_END_DECLS

#endif

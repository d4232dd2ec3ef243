/* Internal to autodiff (autodiff.c, autodiff_conv.c): the gradient rules of
 * convolutions and batch normalization. Not for other modules. */
#ifndef PS_PARTITIONER_AUTODIFF_PRIVATE_H
#define PS_PARTITIONER_AUTODIFF_PRIVATE_H

#include "partitioner/builder/autodiff.h"
#include "partitioner/builder/folder_private.h"

G_BEGIN_DECLS

/* Gradients of a convolution's input and kernel given the output's
 * gradient g (appended to c); NULL for a batch-grouped convolution (no
 * rule). */
PsInstr *ad_conv_input_grad (PsComputation *c, PsInstr *conv, PsInstr *g);
PsInstr *ad_conv_kernel_grad (PsComputation *c, PsInstr *conv, PsInstr *g);
/* batch-norm-training's operand, scale and offset gradients from the
 * normalized output's gradient dy. */
void ad_batch_norm_training_grad (PsComputation *c, PsInstr *bn, PsInstr *dy, PsInstr **dx,
                                     PsInstr **dscale, PsInstr **doffset);
/* batch-norm-inference's gradients of its 5 operands, in operand order. */
void ad_batch_norm_inference_grad (PsComputation *c, PsInstr *bn, PsInstr *g,
                                      PsInstr **grads);

G_END_DECLS

#endif

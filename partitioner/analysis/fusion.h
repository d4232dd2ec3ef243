/* Fusion rules: which producers XLA's fusion passes put into their
 * consumers, so that the cost analysis (cost.h) groups a partitioned
 * program into the kernels XLA would make of it. This module holds the
 * rules (from xla/service/instruction_fusion.cc, named in
 * doc/compute-model.md, "Fusion"); cost.c applies them and counts the
 * traffic of each group.
 *
 * Three modes, selectable for comparisons (`--fusion` of podsim run, the
 * model files' [options] fusion key):
 *   - PS_FUSION_MODE_XLA (the default): producer-consumer fusion into a
 *     single user, plus duplication of cheap producers into every
 *     consumer when all of them can fuse it (XLA's may_duplicate with
 *     IsExpensive and "fusible on all paths"), plus multi-output fusion
 *     (cost.h rules 6-8: a reduce with its shared producer, the
 *     normalization diamond, siblings reading one value).
 *   - PS_FUSION_MODE_PRODUCER: podsim's rule before issue 21: an elementwise
 *     op joins its producer only when it is that producer's single user.
 *   - PS_FUSION_MODE_NONE: every op is a kernel of its own (broadcast, iota and
 *     slices read in place are still folded into their consumers: they
 *     are never kernels).
 *
 * Everything here is plain predicates over the IR: nothing to free.
 */
#ifndef PS_PARTITIONER_FUSION_H
#define PS_PARTITIONER_FUSION_H

#include <glib.h>

#include "common/params.h"
#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

typedef enum {
  PS_FUSION_MODE_XLA = 0,
  PS_FUSION_MODE_PRODUCER,
  PS_FUSION_MODE_NONE,
} PsFusionMode;

const char *ps_fusion_mode_name (PsFusionMode m);            /* "xla", "producer", "none" */
/* The option choosing the mode ([options] fusion; common/params.h): its
 * choices are this module's names. */
extern const PsParamSpec ps_fusion_param_mode;
/* FALSE (with PS_ERROR_OPTION naming `what`) on anything else. */
gboolean ps_fusion_mode_parse (const char *name, const char *what, PsFusionMode *out,
                               GError **error);

/* XLA's InstructionFusion::IsExpensive for the opcodes podsim's IR has:
 * transcendentals, float divide and remainder, and every op that is not
 * a cheap elementwise or data-movement op. Expensive producers are never
 * duplicated into several consumers. */
gboolean ps_fusion_is_expensive (const PsInstr *in);

/* A consumer that a duplicated elementwise producer can be fused into:
 * elementwise ops (a loop fusion), reduce and reduce-window (input
 * fusion), the loop-fused data movement (transpose, slice, pad,
 * concatenate, copy, reverse, broadcast), and batch-norm ops (XLA's
 * BatchNormExpander turns them into reduces and elementwise ops). */
gboolean ps_fusion_consumer_takes_producer (const PsInstr *consumer);

/* XLA mode: `p` (an elementwise array op, not the computation's root)
 * has two or more users and is not expensive, or is a widening convert
 * (XLA's IsAlwaysDuplicable: fused into its consumers even when there is
 * one, so they read the narrow type), and every user can fuse it: XLA then
 * fuses a copy of it into each user, and its result never goes to HBM.
 * Not a producer that is the single user of a dot or convolution (other
 * than a widening convert): it is fused into that op's output instead,
 * where its result is written once. */
gboolean ps_fusion_duplicates (const PsInstr *p);

/* The per-op half of ps_fusion_duplicates: p could be copied into its
 * users (cheap or a widening convert, not a dot's or convolution's output,
 * every user fusible), whatever their number. A producer whose single
 * user is duplicated is duplicated with it (XLA first fuses it into that
 * user, then copies the fusion into the user's consumers): the cost
 * analysis applies that over the computation, consumers first. */
gboolean ps_fusion_duplicable (const PsInstr *p);
/* TRUE when every use of `p` is by one instruction (which may use it
 * twice); linear, since a value may have thousands of users. */
gboolean ps_fusion_single_user (const PsInstr *p);
/* A convert to a wider element type (bf16 -> f32). */
gboolean ps_fusion_widening_convert (const PsInstr *p);

/* A reduce of one array over its minor-most dims only (a row-wise
 * reduction, as softmax's and layer norm's over the feature dim; podsim's
 * layouts are row-major): the reduction whose result an elementwise
 * consumer can read in the same kernel (the normalization diamond of
 * XLA's GPU SoftmaxRewriterTriton, xla/service/gpu/transforms/
 * softmax_rewriter_triton.cc). Not a reduction to a scalar. */
gboolean ps_fusion_reduce_row_wise (const PsInstr *r);

/* XLA mode: a batch-norm-training or batch-norm-grad whose element 0
 * (the normalized value, or dx) is read, through get-tuple-elements and
 * tuples, only by consumers that fuse their producers (and is not
 * returned): XLA's BatchNormExpander (xla/service/batchnorm_expander.cc)
 * turns it into reductions (the statistics, a sibling multi-output
 * fusion over its operands) and elementwise ops for element 0, which
 * producer-consumer fusion puts into those consumers. The op is then a
 * kernel writing only its statistics; each consumer computes element 0
 * from the op's operands. */
gboolean ps_fusion_bn_normalize_fused (const PsInstr *bn);
/* The batch-norm op whose element 0 the value `v` is (through
 * get-tuple-elements of tuples), or NULL. transfer none. */
const PsInstr *ps_fusion_bn_element0 (const PsInstr *v);

G_END_DECLS

#endif

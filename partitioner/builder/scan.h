/* Scan: a loop over the leading dim of stacked inputs, written as one HLO
 * `while`, with its reverse-mode derivative.
 *
 * Real training programs do not unroll repeated layers: Lingvo's repeated
 * layers and JAX's `lax.scan` write a layer stack as one loop body over
 * weights stacked along a new leading dim [L, ...]. This module builds that
 * loop in a computation of the graph IR, so that propagation, partitioning,
 * memory analysis and lowering handle the body once.
 *
 * A scan has carried values (`carry`, e.g. the activations flowing from
 * layer to layer), stacked inputs (`xs`, [length, ...]: iteration t sees
 * xs[t]), and loop invariants (`consts`). The caller's body function builds
 * one iteration in the computation it is handed and returns the new carry:
 *
 *   static gboolean layer (const PsScanArgs *a, PsInstr **carry_out, gpointer u, GError **e)
 *   { carry_out[0] = my_layer (a->c, a->carry[0], a->xs, a->consts); return TRUE; }
 *   PsScanSpec spec = { .name = "layers", .length = L, .n_carry = 1, .carry = &x,
 *                       .n_xs = 7, .xs = stacked_weights, .body = layer,
 *                       .differentiable = TRUE, .remat = TRUE };
 *   g_autoptr (PsScan) s = ps_scan_build (c, &spec, &error);
 *   PsInstr *y = ps_scan_carry_out (s, 0);
 *   ... loss, dy ...
 *   ps_scan_vjp (s, &dy, &dx, dws, NULL, &error);   (dws stacked like the weights)
 *
 * The HLO it writes (as XLA gets it from JAX): a while whose state tuple is
 * (counter s32[], carry..., xs..., consts..., saved stacks...); the body
 * dynamic-slices xs[t] (start t along the leading dim, which the caller
 * leaves unsharded, 0 elsewhere), runs the body, and with `differentiable`
 * dynamic-update-slices what the backward needs into stacks [length, ...];
 * the condition is counter < length and the while carries
 * backend_config={"known_trip_count":{"n":"length"}}, so cost analysis and
 * lowering know the trip count.
 *
 * The derivative (ps_scan_vjp) is a second while over the iterations in
 * reverse: it carries the carry's gradient, dynamic-slices the saved values
 * of iteration t, runs the body's vector-Jacobian product and
 * dynamic-update-slices each xs gradient into a stacked gradient; consts'
 * gradients are summed over the iterations. What is saved:
 *   - remat: only each iteration's carry (a layer stack: the layer inputs);
 *     the backward body recomputes the forward from it;
 *   - otherwise: every forward value the backward reads that depends on the
 *     carry (as JAX saves residuals); values that depend only on xs, consts
 *     and the index (a weight's bf16 cast) are recomputed, not stacked.
 * The body is built once, in a scratch computation, and copied into the
 * loops; the scratch is removed by ps_scan_free().
 *
 * The body function may read instructions of the caller directly (like a
 * closure): each one read becomes one more loop invariant, without a
 * gradient (pass it as a const to get one). An instruction of any other
 * computation is an error, except in a scan built inside another scan's
 * body (a layer loop inside a microbatch loop, models/net.c): there its
 * inputs and the instructions its body reads may be the enclosing
 * caller's, and the enclosing scan makes them its loop invariants too.
 * Instructions keep their sharding annotations when copied; the loops a
 * body built are copied with their computations, and ps_scan_free
 * removes the scratch's own.
 *
 * Ownership: the spec's arrays are copied; PsScan is transfer full
 * (ps_scan_free); every PsInstr* returned is transfer none (owned by the
 * caller's computation).
 */
#ifndef PS_PARTITIONER_SCAN_H
#define PS_PARTITIONER_SCAN_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

typedef struct {
  PsComputation *c;          /* where the body is being built */
  PsInstr *index;            /* s32[]: t, the position in xs of this iteration */
  PsInstr *const *carry;     /* n_carry values */
  PsInstr *const *xs;        /* n_xs slices xs[t] (the leading dim dropped) */
  PsInstr *const *consts;    /* n_consts values */
} PsScanArgs;

/* Builds one iteration in args->c; fills carry_out[k] (same shape as the
 * carry) with instructions of args->c. FALSE with an error to give up. */
typedef gboolean (*PsScanBodyFn) (const PsScanArgs *args, PsInstr **carry_out,
                                  gpointer user, GError **error);

typedef struct {
  const char *name;          /* computations NAME.body, NAME.cond, ...; "scan" when NULL */
  int64_t length;            /* iterations, >= 1; every xs has it as dim 0 */
  gboolean reverse;          /* t runs length-1 .. 0 */
  int n_carry;
  PsInstr *const *carry;     /* initial carry, instructions of the caller */
  int n_xs;
  PsInstr *const *xs;        /* stacked inputs [length, ...] */
  int n_consts;
  PsInstr *const *consts;    /* loop invariants */
  PsScanBodyFn body;
  gpointer user;
  /* ps_scan_vjp will be called: save what it needs. */
  gboolean differentiable;
  gboolean remat;
  /* Which xs / consts get gradients (NULL: every floating-point one). The
   * carry's floating-point values always do. */
  const gboolean *xs_grad;
  const gboolean *consts_grad;
  /* Sum the consts' gradients in f32 whatever their type: for a weight's
   * bf16 cast made once outside the loop (where XLA's loop-invariant code
   * motion would put the cast written in the body), summed over the
   * iterations as the f32 weight's gradient would be. */
  gboolean consts_grad_f32;
} PsScanSpec;

typedef struct PsScan PsScan;

/* Builds the loop at the end of c. Errors (PS_ERROR_INVALID): shapes that do
 * not match the spec, a body that returns the wrong shapes or uses an
 * instruction of another computation, an autodiff rule missing
 * (PS_ERROR_UNSUPPORTED). transfer full. */
PsScan *ps_scan_build (PsComputation *c, const PsScanSpec *spec, GError **error);

/* The final value of carry k (a get-tuple-element of the while). */
PsInstr *ps_scan_carry_out (const PsScan *s, int k);
PsInstr *ps_scan_while (const PsScan *s);

/* The backward loop of a differentiable scan, at the end of the caller's
 * computation. dcarry[k]: gradient of carry_out k (NULL, or the array NULL:
 * zero). Fills (each array may be NULL when not wanted; entries without a
 * gradient, non-float or not requested, are set to NULL):
 *   dcarry_init[n_carry]: gradient of the initial carry;
 *   dxs[n_xs]: gradients of the stacked inputs, [length, ...];
 *   dconsts[n_consts]: gradients of the invariants, summed over iterations
 *   (in f32 with consts_grad_f32).
 * Can be called once. */
gboolean ps_scan_vjp (PsScan *s, PsInstr *const *dcarry, PsInstr **dcarry_init,
                      PsInstr **dxs, PsInstr **dconsts, GError **error);

/* The backward loop with the stacked inputs' gradients consumed where they
 * are made: iteration t hands the gradients of xs[t] to u->fn instead of
 * writing them into stacked gradients, and fn may write the xs (the loop
 * carries them) and extra values of its own. A training step applies each
 * layer's optimizer update there, as soon as its gradient exists, so no
 * stack of every layer's gradient is ever live (models/net.c). fn runs
 * once, building the body; it must write only xs[t] of the xs (the
 * backward iterations still to come read the others), and its outputs keep
 * the shapes of its inputs. Fills dcarry_init and dconsts as ps_scan_vjp
 * does, xs_out[n_xs] with the loop's final xs and extra_out[n_extra] with
 * the final extra values (each may be NULL). */
typedef struct {
  PsComputation *c;          /* the backward body */
  PsInstr *index;            /* s32[]: t */
  PsInstr *const *xs;        /* n_xs stacked xs [length, ...], as carried */
  PsInstr *const *dxs;       /* n_xs gradients of xs[t] (NULL: no gradient) */
  PsInstr *const *extra;     /* u->n_extra carried values */
  PsInstr *const *consts;    /* u->n_consts invariants */
} PsScanUpdateArgs;

typedef gboolean (*PsScanUpdateFn) (const PsScanUpdateArgs *args, PsInstr **xs_out,
                                    PsInstr **extra_out, gpointer user, GError **error);

typedef struct {
  int n_extra;
  PsInstr *const *extra;     /* initial values, instructions of the caller */
  int n_consts;
  PsInstr *const *consts;    /* invariants, instructions of the caller */
  PsScanUpdateFn fn;         /* xs_out/extra_out arrive holding the inputs */
  gpointer user;
} PsScanUpdate;

gboolean ps_scan_vjp_update (PsScan *s, PsInstr *const *dcarry, PsInstr **dcarry_init,
                             PsInstr **dconsts, const PsScanUpdate *u, PsInstr **xs_out,
                             PsInstr **extra_out, GError **error);

/* Element t (an s32[] of c) of a stacked value [n, ...], as an array of
 * the element's dims: dynamic-slice then reshape. `zero`: an s32[] 0 of c to
 * reuse for the other start indices, or NULL to make one. */
PsInstr *ps_scan_slice_at (PsComputation *c, PsInstr *stack, PsInstr *t, PsInstr *zero);
/* The stacked value with element t replaced by v (dynamic-update-slice). */
PsInstr *ps_scan_update_at (PsComputation *c, PsInstr *stack, PsInstr *v, PsInstr *t,
                            PsInstr *zero);

/* Removes the scratch computation; the loops stay. */
void ps_scan_free (PsScan *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsScan, ps_scan_free)

G_END_DECLS

#endif

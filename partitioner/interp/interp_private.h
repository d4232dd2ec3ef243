/* Private to interp*.c (partitioner/interp/, private prefix ip_ and Ip; see
 * doc/architecture.md): the interface between the interpreter's files
 * (interp.c: the engine, control flow and collectives;
 * interp_elementwise.c: elementwise ops and reducers; interp_data.c: data
 * movement, gather/scatter, sort; interp_window.c: dot, convolution,
 * reductions and windowed ops; interp_linalg.c; interp_norm.c: batch
 * normalization), over two base files every op file may call:
 * interp_ctx.c (errors, the work budget, calling a computation) and
 * interp_value.c (values). Only the engine calls the op files, so their
 * calls run one way: engine -> op files -> base. */
#ifndef PS_PARTITIONER_INTERP_PRIVATE_H
#define PS_PARTITIONER_INTERP_PRIVATE_H

#include "partitioner/interp/interp.h"

G_BEGIN_DECLS

typedef struct IpCtx IpCtx;
struct IpCtx {
  const PsModule *module;
  PsInterpOptions opts;
  int64_t num_devices;        /* num_replicas * num_partitions */
  int64_t work;               /* element operations done so far */
  int64_t live_elements;      /* elements held by evaluated instructions, all devices */
  GHashTable *plans;          /* PsComputation* -> plan (interp.c) */
  GHashTable *scalar_progs;   /* PsComputation* -> scalar program (interp.c) */
  GHashTable *rng_states;     /* device + 1 -> guint64[2], rng-get-and-update-state's */
  /* The engine's evaluation of a called computation (ip_call_fast). */
  const PsValue *(*call) (IpCtx *ctx, const PsComputation *c, int64_t device, int n_args,
                          PsValue *const *args, PsValue **owned, GError **error);
};

/* Counts `n` element operations; FALSE with an error naming `ins` once the
 * budget is spent. */
gboolean ip_charge (IpCtx *ctx, const PsInstr *ins, int64_t n, GError **error);

/* Sets an error "interpreter: instruction NAME (opcode): message". */
void ip_fail (GError **error, PsErrorCode code, const PsInstr *ins,
              const char *fmt, ...) G_GNUC_PRINTF (4, 5);

/* Runs a called computation on one device with n scalar-or-array arguments
 * (borrowed); used for reducers, comparators and scatter combiners. Returns
 * the computation's result (transfer full). */
PsValue *ip_call (IpCtx *ctx, const PsComputation *c, int64_t device,
                  int n_args, PsValue *const *args, GError **error);

/* Same, but the result may be borrowed (valid until the next call of the
 * same computation): *owned is set when the caller must free it. The fast
 * path for computations of scalar elementwise ops allocates nothing. */
const PsValue *ip_call_fast (IpCtx *ctx, const PsComputation *c, int64_t device,
                             int n_args, PsValue *const *args, PsValue **owned,
                             GError **error);

/* A binary scalar computation compiled to a fast form when it is a single
 * elementwise op of its two parameters (add, max, ...); otherwise it calls
 * the computation. */
typedef struct {
  IpCtx *ctx;
  const PsComputation *comp;
  int64_t device;
  PsOpcode fast_op;           /* PS_OP_COUNT when not fast */
  gboolean swapped;
  PsValue *a, *b;             /* scratch scalars for the slow path */
} IpReducer;

void ip_reducer_init (IpReducer *r, IpCtx *ctx, const PsComputation *c,
                      int64_t device, PsElemType t);
void ip_reducer_clear (IpReducer *r);
/* Combines two scalars of the reducer's type (elements ai of a, bi of b)
 * into out[oi]. */
gboolean ip_reducer_apply (IpReducer *r, const PsValue *a, int64_t ai, const PsValue *b,
                           int64_t bi, PsValue *out, int64_t oi, GError **error);

/* Element helpers for type-agnostic data movement. */
static inline int
ip_value_elem_size (const PsValue *v)
{
  return v->c ? 16 : 8;
}
static inline void *
ip_value_raw (const PsValue *v)
{
  return v->f ? (void *) v->f : v->i ? (void *) v->i : (void *) v->c;
}

/* v wrapped to the width of integer type t (pred: v != 0). */
int64_t ip_wrap_int (PsElemType t, int64_t v);
/* Same array dims (element types may differ). */
gboolean ip_same_dims (const PsShape *a, const PsShape *b);

/* One evaluation of an instruction on one device (no collectives, no
 * control flow). ops are the operand values (borrowed). transfer full. */
PsValue *ip_elementwise (IpCtx *ctx, const PsInstr *ins, PsValue **ops,
                         GError **error);
/* Same, into a preallocated result of the instruction's shape. */
gboolean ip_elementwise_into (const PsInstr *ins, PsValue **ops, PsValue *out,
                              GError **error);
/* bitcast-convert of one element between types of the same size. */
void ip_bitcast_elem (PsValue *dst, int64_t di, const PsValue *src, int64_t si);
PsValue *ip_data_op (IpCtx *ctx, const PsInstr *ins, PsValue **ops,
                     int64_t device, GError **error);
PsValue *ip_window_op (IpCtx *ctx, const PsInstr *ins, PsValue **ops,
                       int64_t device, GError **error);
PsValue *ip_linalg_op (IpCtx *ctx, const PsInstr *ins, PsValue **ops,
                       GError **error);
gboolean ip_is_linalg_op (PsOpcode op);
/* batch-norm-training, -inference and -grad (interp_norm.c). */
PsValue *ip_norm_op (IpCtx *ctx, const PsInstr *ins, PsValue **ops,
                     GError **error);
gboolean ip_is_norm_op (PsOpcode op);
gboolean ip_is_elementwise (PsOpcode op);
gboolean ip_is_data_op (PsOpcode op);
gboolean ip_is_window_op (PsOpcode op);

/* Applies an elementwise binary opcode to scalars (used by fast reducers and
 * collectives). */
void ip_binary_elem (PsOpcode op, PsElemType t, const PsValue *a, int64_t ai,
                     const PsValue *b, int64_t bi, PsValue *out, int64_t oi);

G_END_DECLS

#endif

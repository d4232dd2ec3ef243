/* The reference interpreter: runs a module of the graph IR on real data.
 *
 * It exists to prove the SPMD partitioner correct: run the original module on
 * full inputs, run the partitioned module on N devices on the local pieces of
 * the same inputs, and compare (partitioner/verify.h does exactly that). It
 * is written for clarity, not speed: plain loops over row-major arrays.
 *
 * Values (PsValue) hold an array or a tuple. Array elements are stored wide:
 * floating types (f16, bf16, f32, f64) as double, holding a value exactly
 * representable in the element type (every op rounds its result to the type,
 * bf16 and f16 with round-to-nearest-even); integers and pred as int64_t
 * (unsigned types zero-extended, u64 as its bit pattern, pred 0/1); complex
 * types as (re, im) pairs of doubles.
 *
 * SPMD execution (ps_interp_run_spmd) runs the same program on every device
 * in lockstep: each instruction is evaluated for all devices before the next,
 * so a collective sees every participant's operand. The devices are XLA's
 * partitions of one replica by default (num_replicas = 1, num_partitions = N,
 * as XLA runs an SPMD-partitioned program); the replica-group semantics of
 * every collective follow XLA's CollectiveOpGroupMode (channel_id and
 * use_global_device_ids decide whether ids are replicas, partitions or global
 * ids). A while loop or conditional whose decision differs between devices is
 * run per device, which is fine unless a collective inside then lacks some of
 * its participants: that is a clear error, never a hang.
 *
 * Errors: unsupported ops, bad attributes and exhausted work budgets return
 * NULL/FALSE with a PS_ERROR error naming the instruction (PS_ERROR_UNSUPPORTED
 * for ops the interpreter does not implement, PS_ERROR_LIMIT when a value,
 * the live values or the work exceed the caps in PsInterpOptions).
 *
 * Ownership: every PsValue* returned is new (transfer full, free with
 * ps_value_free); arguments are borrowed unless stated.
 */
#ifndef PS_PARTITIONER_INTERP_H
#define PS_PARTITIONER_INTERP_H

#include <glib.h>
#include <stdint.h>

#include "common/error.h"
#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

typedef struct PsValue PsValue;
struct PsValue {
  PsShape *shape;        /* owned; array or tuple */
  /* Arrays: n elements, row-major. Exactly one of f/i/c is non-NULL (for
   * zero-element arrays all may be NULL); they alias one owned buffer. */
  int64_t n;
  double *f;             /* f16 bf16 f32 f64 */
  int64_t *i;            /* pred, s8..s64, u8..u64 */
  double *c;             /* c64 c128: 2n doubles, re then im */
  /* Tuples. */
  int n_elems;
  PsValue **elems;       /* owned */
};

/* A zero-filled value of `shape` (tuples recursively). */
PsValue *ps_value_new (const PsShape *shape);
/* An array of `t` with the given dims; `data` (n doubles, may be NULL for
 * zeros) is converted to the type with the type's rounding. */
PsValue *ps_value_new_from_doubles (PsElemType t, int rank, const int64_t *dims,
                                    const double *data);
/* Takes ownership of the n elements. */
PsValue *ps_value_new_tuple (int n, PsValue **elems);
PsValue *ps_value_copy (const PsValue *v);
void ps_value_free (PsValue *v);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsValue, ps_value_free)
/* A constant's literal as a value of `shape`. NULL + error on size mismatch. */
PsValue *ps_value_from_literal (const PsShape *shape, const PsLiteral *lit, GError **error);

/* Element i of an array as a double (integers converted, complex: real part)
 * and stored from a double with the element type's rounding / wrapping. */
double ps_value_get (const PsValue *v, int64_t i);
void ps_value_set (PsValue *v, int64_t i, double x);
/* Appends element i as HLO literal text ("1.5", "true", "(1, 2)"). */
void ps_value_append_elem (GString *out, const PsValue *v, int64_t i);
/* dst[di] = src[si], exactly (no trip through double when both hold the
 * same kind of element). */
void ps_value_copy_elem (PsValue *dst, int64_t di, const PsValue *src, int64_t si);
/* Exact equality of shapes and elements (NaN equals NaN with the same sign). */
gboolean ps_value_equal (const PsValue *a, const PsValue *b);
/* HLO-literal-like text "f32[2,2] {{1, 2}, {3, 4}}", at most max_elems
 * elements then "..." (0 = all). transfer full. */
char *ps_value_to_string (const PsValue *v, int64_t max_elems);

/* x rounded to the nearest value of float type t (f64: x itself); for
 * integer types wraps to the type's width; pred: x != 0. */
double ps_etype_round (PsElemType t, double x);

typedef struct {
  /* Devices as XLA's replicas x partitions; 0 means: ps_interp_run uses 1 x 1,
   * ps_interp_run_spmd uses 1 replica and num_devices partitions. The device
   * with replica r and partition p has global id r * num_partitions + p. */
  int64_t num_replicas, num_partitions;
  /* Seed of rng. The numbers depend on the seed, the instruction's name and
   * the element index only, not on the device, so that a replicated rng
   * agrees everywhere. */
  guint64 rng_seed;
  /* Caps so that huge programs fail cleanly instead of hanging: total element
   * operations over the run, and elements of any one value. 0 = defaults
   * (2e9 operations, 64M elements). */
  int64_t max_work;
  int64_t max_elements;
  /* Cap on the elements held at once by all devices together (the memory
   * the run needs is about 8 bytes each); 0 = 4 x max_elements. */
  int64_t max_live_elements;
  /* rng returns its first operand (uniform: the low bound; normal: the
   * mean) instead of pseudo-random numbers. A partitioned rng cannot draw
   * the original's numbers, so verify.h turns this on to check everything
   * else about such programs. */
  gboolean rng_constant;
  /* Run the module as the global view of a program with manual regions (the
   * original module of a partitioning, see verify.h): SPMDFullToShardShape
   * and SPMDShardToFullShape move data between devices as their shardings
   * say instead of being identities. Device d's piece of the operand under
   * the operand's sharding becomes its piece of the result under the
   * result's sharding (what the partitioner's copy does), and the result on
   * d is the array those pieces make up within d's manual group: all
   * devices when the result is not manual, d alone when it is fully manual,
   * the devices sharing d's manual subgroup coordinates when it is
   * partially manual. Where several devices hold the same tile (replicated
   * dims), the one with replicated coordinates 0 (replicated: device 0)
   * provides it. Only ps_interp_run_spmd uses it; the values then depend
   * on the instructions' shardings. */
  gboolean global_view;
} PsInterpOptions;

/* Runs the entry computation on one device with n_args arguments (one per
 * entry parameter, shapes must match). opts may be NULL. transfer full. */
PsValue *ps_interp_run (const PsModule *m, int n_args, PsValue *const *args,
                        const PsInterpOptions *opts, GError **error);

/* Runs the entry computation on num_devices devices in lockstep.
 * args[d * n_args + k] is device d's parameter k (borrowed). On success
 * results[d] receives device d's result (transfer full; results must have
 * num_devices slots). opts may be NULL; when it sets num_replicas and
 * num_partitions their product must be num_devices. */
gboolean ps_interp_run_spmd (const PsModule *m, int64_t num_devices, int n_args,
                             PsValue *const *args, PsValue **results,
                             const PsInterpOptions *opts, GError **error);

G_END_DECLS

#endif

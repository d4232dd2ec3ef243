/* Verification of an SPMD partitioning with the reference interpreter.
 *
 * Given the original module (with shardings, as after propagation) and the
 * partitioned per-device module, ps_verify_spmd makes deterministic random
 * inputs from a seed, runs the original on the full inputs, gives every
 * device the local piece of each parameter its sharding says (tile bounds,
 * zero padding past the end of uneven dims; replicated: the full array;
 * maximal: the full array on that device, zeros elsewhere), runs the SPMD
 * program on all devices in lockstep, and compares every device's piece of
 * every output with the matching region of the original's output (padding
 * ignored; replicated outputs on every device, maximal ones on their
 * device). Comparing each device's piece checks the same thing as
 * reassembling the output and also catches replicas that disagree.
 *
 * Rounding: a partitioned program rounds partial results where the
 * original rounds the whole (a dot over a split contracting dim rounds each
 * device's partial sum, then adds them, as XLA's programs do). The error of
 * either is bounded by the magnitudes of the summed terms, not of the
 * result, so under cancellation (terms of 1e3 summing to 4) it exceeds any
 * tolerance relative to the result, in bf16 and in f32 alike. When an
 * output differs and the programs use floats narrower than f64, both are run
 * again with every float value computed in f64 (ps_verify_widen_floats),
 * whose rounding is 2^29 times finer than f32's; if they agree then (to the
 * f64 tolerance), the result agrees with `widened` set and the message names
 * the difference as written. A wrong element differs in f64 too.
 *
 * Comparison: integers and pred exactly; floats with
 * |actual - expected| <= atol + rtol * |expected| where (rtol, atol) are
 * f64 (1e-9, 1e-9), f32 (1e-4, 1e-3), f16 (1e-2, 5e-2), bf16 (2e-2, 1e-1)
 * unless the options override them; NaN matches NaN, infinities match the
 * same infinity. The inputs (multiples of 2^-10 in [-2, 2) for floats) make
 * most float results exact, so the tolerance only absorbs reassociation.
 *
 * Integer parameters are small: in [0, bound) when the parameter feeds
 * (through shape-preserving ops) the indices of a gather or scatter or the
 * start of a dynamic-slice/-update-slice, bound being the smallest indexed
 * dim; otherwise in [-8, 8) (unsigned: [0, 16)).
 *
 * Init values: a parameter that reaches (through copies, converts, reshapes,
 * broadcasts) the init operand of a reduce, reduce-window or
 * select-and-scatter whose reducer is a single add, multiply, and, or, xor,
 * maximum or minimum is given that op's identity (0, 1, all ones, 0, 0,
 * lowest, highest): XLA may apply an init value any number of times (a
 * partitioned reduce applies it once per device), so results are only
 * defined for an identity.
 *
 * Programs whose meaning is per device: when the original has a manual or
 * partially manual sharding anywhere, a partition-id or replica-id, or a
 * collective, a one-device run cannot give what each device computes (a
 * manual region works on its device's tile and may ask for its id or talk to
 * other devices). The original then runs in the global view: on all N
 * devices in lockstep (ps_interp_run_spmd with
 * PsInterpOptions.global_view), where a non-manual value is the whole
 * array on every device, SPMDFullToShardShape gives each device its piece
 * of the operand under the operand's sharding, SPMDShardToFullShape
 * assembles the array from the pieces of the devices of one manual group
 * (see interp.h), and partition-id and collectives act per device. Inputs:
 * every device gets the full array of a non-manual parameter leaf; a
 * manual leaf gets values of its own per manual group (fully manual: per
 * device; partially manual: per group of devices sharing the manual
 * subgroup coordinates), and the partitioned program gets the device's
 * piece of that group's array. Each device's output piece is compared with
 * the same piece of that device's reference result (for a manual output,
 * the whole value). A partitioned program that is right on one device and
 * wrong on another is caught; and since a manual all-reduce is compared
 * with what the global view computes, one that adds pieces of different
 * tiles is too.
 *
 * rng: both programs run with PsInterpOptions.rng_constant (every rng
 * returns its first operand), since a partitioned rng cannot draw the
 * original's numbers; the rest of such a program is still checked.
 *
 * Ownership: modules and options are borrowed; the result owns its message
 * (free with ps_verify_result_clear).
 */
#ifndef PS_PARTITIONER_VERIFY_H
#define PS_PARTITIONER_VERIFY_H

#include <glib.h>
#include <stdint.h>

#include "common/error.h"
#include "partitioner/interp/interp.h"
#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

/* verify runs the interpreter on every device: at most this many (twice the
 * cores of a v3-2048 pod), so its time and memory stay bounded. */
#define PS_VERIFY_MAX_DEVICES 4096

typedef struct {
  guint64 seed;
  /* Tolerance override for every float type; 0 = the per-type defaults. */
  double rtol, atol;
  /* Interpreter limits (max_work, max_elements) and rng seed; num_replicas
   * and num_partitions are set by the driver. */
  PsInterpOptions interp;
  /* Do not recheck float mismatches in f64 (see above). */
  gboolean no_widen;
} PsVerifyOptions;

typedef struct {
  gboolean agree;            /* every output of every device agrees */
  /* agree only in f64 arithmetic: the programs as written (bf16, f16,
   * f32) differed by more than the tolerance, message says where. */
  gboolean widened;
  int n_outputs;             /* leaves of the entry's result */
  int64_t n_compared;        /* elements compared over all devices */
  /* First mismatch (when !agree): output leaf, device, index in the full
   * output, and the values; message says it all in one line. */
  int mismatch_output;
  int64_t mismatch_device;
  char *message;             /* owned; "all N outputs agree" when agree */
} PsVerifyResult;

void ps_verify_options_init (PsVerifyOptions *opts);
void ps_verify_result_clear (PsVerifyResult *r);

/* The local shape a parameter of `shape` with sharding `s` (NULL =
 * replicated) must have on every device. transfer full. */
PsShape *ps_verify_local_shape (const PsSharding *s, const PsShape *shape);

/* Retypes every bf16, f16 and f32 value of `m` (shapes, constants) as f64
 * and every c64 as c128, in place. FALSE (m untouched) when a
 * bitcast-convert reads or makes such floats. */
gboolean ps_verify_widen_floats (PsModule *m);
gboolean ps_verify_module_has_narrow_floats (const PsModule *m);

/* Runs both programs and compares. Returns FALSE with an error when a
 * program cannot be run (interpreter error, parameter count or local shape
 * mismatch: those errors name the parameter); TRUE with result->agree
 * otherwise. */
gboolean ps_verify_spmd (const PsModule *original, const PsModule *partitioned,
                         int64_t num_devices, const PsVerifyOptions *opts,
                         PsVerifyResult *result, GError **error);

G_END_DECLS

#endif

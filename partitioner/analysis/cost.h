/* Cost analysis: FLOPs and HBM bytes read and written by every instruction
 * of a module, after a simple XLA-like fusion, so that lowering can turn each
 * fusion into one compute event and a user can see where the work is.
 *
 * Counting rules (per device when the module is an SPMD program):
 *   - dot: 2 x (output elements) x (product of contracting dims);
 *     convolution: 2 x multiply-adds that touch a real (not padded, not
 *     dilation-hole) input element; both are "2 x MACs".
 *   - elementwise ops: one FLOP and one vector op per output element
 *     (XLA's HloCostAnalysis convention); reduce: input elements x the
 *     reducer's ops; reduce-window: output elements x window x reducer ops.
 *   - data movement (copy, transpose, slice, pad, concatenate, gather,
 *     scatter, dynamic-slice, dynamic-update-slice, reverse, sort, ...): no
 *     FLOPs (sort: n log2 n comparisons as vector ops).
 *   - free (no work, no traffic): parameter, constant, get-tuple-element,
 *     tuple, bitcast, reshape (treated as a bitcast), after-all,
 *     partition-id, replica-id, opt-barrier; and elementwise ops, compares
 *     and converts whose result is an integer or predicate scalar (loop
 *     counters and conditions, offsets: the TensorCore's scalar unit
 *     computes them alongside the vector and matrix units).
 *
 * Fusion rule (what pays HBM traffic; opts->fusion PS_FUSION_MODE_PRODUCER is
 * rules 1-4, PS_FUSION_MODE_XLA adds 5-9, PS_FUSION_MODE_NONE keeps only
 * rules 1 and 4):
 *   1. broadcast and iota are fused into every consumer: they write
 *      nothing, and a consumer reading them reads the broadcast's operand
 *      (iota: nothing) instead. So is a dynamic-slice whose users (through
 *      reshapes) are compute ops or collectives: each reads the slice's
 *      bytes of the operand (a loop body reading layer t of a stacked
 *      weight). One that is returned or put in a tuple stays a copy.
 *   2. an elementwise op (not copy) joins the fusion of its producer when
 *      that producer is a compute op (not free, not a collective, not a
 *      while/call/conditional/custom-call), has this op as its only user and
 *      the same number of elements (first such operand wins); reshapes and
 *      bitcasts in between that only this op reads join too. The
 *      producer's result then never goes to HBM.
 *   3. a reduce joins the fusion of its first operand when that fusion is
 *      made only of elementwise ops and the operand's only user is the
 *      reduce (XLA's input fusion).
 *   4. a dynamic-update-slice joins the fusion of its update's producer
 *      (through reshapes) when that producer is a compute op whose only
 *      user it is: the update is computed straight into the buffer (XLA's
 *      in-place dynamic-update-slice fusion), writing the update's bytes.
 *   5. (XLA) a cheap elementwise producer with several users, all of
 *      which can fuse it (fusion.h: ps_fusion_duplicates), is copied into
 *      each of them, as XLA's InstructionFusion duplicates producers: a
 *      fusion reading it reads its operands instead and does its work.
 *   Multi-output fusion (XLA mode, cost_mof.c), merging the fusions
   rules 1-5 made when both are loop or input fusions (elementwise ops,
   reduces) with the same loop shape (a reduce's operand's elements, else
   the root's):
   6. a reduce joins the fusion of its operand's elementwise producer when
      other instructions read that producer too (producer-consumer
      multi-output fusion): the producer's value is written once, the
      reduce does not read it back;
   7. an elementwise op reading, through a broadcast, the result of a
      fusion whose reduces are all row-wise (fusion.h) joins that fusion
      (the normalization diamond: softmax, layer norm);
   8. fusions reading one non-scalar value that do not read each other
      are one sibling fusion, reading it once.
   9. a batch-norm-training or -grad whose element 0 only fusing
      consumers read (fusion.h: ps_fusion_bn_normalize_fused) writes only
      its statistics; each fusion reading element 0 reads the op's
      operands instead and does the normalization (training: 3 vector
      ops per element of the 6, grad: 4 of 8), and element 0 has no
      buffer (memory.h: the op's operands stay live while it is read).
      A batch-norm-inference (no statistics: XLA's BatchNormExpander
      makes it elementwise) counts as elementwise for rule 2 in XLA mode:
      it joins the fusion of the producer of its operand x, and its
      elementwise consumer joins its fusion (3 vector ops per element).
   A merge is refused when an instruction outside both reads one of
   their members before the later root in post order (which rules out
   cycles) or when a member is an output donated over a parameter. The
   merged fusion's root is the later root; members read outside it are
   its extra outputs (PsCost.output): it writes them too, and each has a
   buffer (memory.h) defined with the fusion's schedule unit; broadcasts
   and duplicated producers between two members become members.
   A fusion reads every value it takes from outside once (slice,
 *   dynamic-slice and gather read only what they output; dynamic-update-
 *   slice and scatter update in place, reading and writing the update) and
 *   writes its root's result. Its traffic is charged to its root; members
 *   have fused = TRUE and zero bytes.
 *   Collectives read their operand and write their result; lowering turns
 *   them into collective events, not compute.
 *
 * While loops: the while instruction costs trip_count x (body + condition).
 * The trip count comes from backend_config {"known_trip_count":{"n":"N"}}
 * or from the usual counter pattern (init constant, compare LT/LE/GT/GE with
 * a constant, add of a constant step); see ps_while_trip_count().
 * call costs its callee, conditional its most expensive branch.
 *
 * Ownership: the analysis borrows the module (keep it alive and unchanged)
 * and owns its results; free it with ps_cost_analysis_free().
 */
#ifndef PS_PARTITIONER_COST_H
#define PS_PARTITIONER_COST_H

#include <glib.h>
#include <stdint.h>

#include "common/params.h"
#include "partitioner/analysis/fusion.h"
#include "partitioner/analysis/tiling.h"
#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

typedef enum {
  PS_COST_FREE,          /* no work and no traffic */
  PS_COST_INLINED,       /* broadcast / iota: fused into its consumers */
  PS_COST_MATMUL,        /* dot */
  PS_COST_CONV,          /* convolution */
  PS_COST_ELEMENTWISE,
  PS_COST_REDUCE,        /* reduce, reduce-window, select-and-scatter */
  PS_COST_DATA_MOVEMENT,
  PS_COST_COLLECTIVE,
  PS_COST_CONTROL,       /* while, call, conditional: costs of the callees */
  PS_COST_OTHER,         /* sort, rng, custom-call, fft, ... */
} PsCostClass;

typedef struct {
  uint64_t flops;
  uint64_t read_bytes;   /* HBM, charged to fusion roots */
  uint64_t write_bytes;
  uint64_t vector_ops;   /* element operations on the vector unit */
} PsCostCounts;

typedef struct {
  PsCostClass klass;
  PsCostCounts own;      /* this instruction alone (bytes: fusion's, on the root) */
  gboolean fused;        /* member of a fusion whose root is another instruction */
  const PsInstr *root;   /* root of its fusion (itself when not fused) */
  const PsInstr *head;   /* first instruction of its fusion (decides the kind) */
  int64_t trip_count;    /* while: iterations used; else 0 */
  /* XLA fusion: a cheap producer fused (copied) into each of its
   * consumers (klass PS_COST_INLINED, own all zero): dup is its work, added
   * to every fusion that reads it. */
  gboolean duplicated;
  PsCostCounts dup;
  /* XLA fusion: a member (fused) of a multi-output fusion whose value is
   * also read outside it: the fusion writes it to HBM next to its root's
   * result (its buffer is the fusion's, defined with it). */
  gboolean output;
  /* XLA fusion: a batch norm whose element 0 its readers compute
   * (fusion.h: ps_fusion_bn_normalize_fused); bn_rest is that part of
   * its work, added to each fusion reading element 0. */
  gboolean bn_fused;
  PsCostCounts bn_rest;
} PsCost;

typedef struct PsCostAnalysis PsCostAnalysis;

/* Options: trip count to assume for a while loop whose count cannot be
 * found (0 = such a loop is an error); the fusion rules (fusion.h;
 * default, 0: PS_FUSION_MODE_XLA); how buffers are laid out in tiles
 * (tiling.h; default, 0: PS_TILING_BEST): the size the memory analysis
 * and the scheduler give them and the HBM bytes a kernel reads and
 * writes for them. */
typedef struct {
  int64_t default_trip_count;
  PsFusionMode fusion;
  PsTilingMode tiling;
} PsCostOptions;

void ps_cost_options_init (PsCostOptions *opts);

/* Analyzes every computation reachable from the entry. Fails (PS_ERROR_
 * UNSUPPORTED) on a while loop without a known trip count when no default
 * is given. transfer full. */
PsCostAnalysis *ps_cost_analyze (const PsModule *m, const PsCostOptions *opts,
                                 GError **error);
void ps_cost_analysis_free (PsCostAnalysis *a);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsCostAnalysis, ps_cost_analysis_free)

/* TRUE when the module held fusion instructions (an HLO dump after XLA's
 * optimizations): each is one kernel (the work of its body, the traffic
 * of its operands and result), and the analysis made no fusion of its own
 * (in-place updates aside), whatever opts->fusion asked. */
gboolean ps_cost_prefused (const PsCostAnalysis *a);
/* The buffer tiling the analysis was made with (PsCostOptions.tiling). */
PsTilingMode ps_cost_tiling (const PsCostAnalysis *a);
/* The dot or convolution whose MXU work a fusion instruction's kernel
 * does (the largest), or `in` itself when it is a dot or convolution;
 * NULL otherwise. transfer none. */
const PsInstr *ps_cost_mxu_op (const PsInstr *in);

/* A ragged-dot whose ragged dim is an lhs contracting dim contracts each
 * group over its own slice: the number of groups (the group sizes' last
 * dim), by which a dot of its result shape overcounts; 1 otherwise. */
int64_t ps_cost_ragged_groups (const PsInstr *in);

/* transfer none; NULL for an instruction the analysis did not see. */
const PsCost *ps_cost_get (const PsCostAnalysis *a, const PsInstr *instr);

/* The whole fusion whose root is `root`: summed FLOPs and vector ops of its
 * members, its traffic. */
PsCostCounts ps_cost_fusion (const PsCostAnalysis *a, const PsInstr *root);

/* Members of the fusion whose root is `root`, in program order (root last).
 * transfer container. */
GPtrArray *ps_cost_fusion_members (const PsCostAnalysis *a, const PsInstr *root);

/* One run of computation `c` (entry: the whole step), with while loops
 * multiplied by their trip counts. Collective traffic is included. */
PsCostCounts ps_cost_computation (const PsCostAnalysis *a, const PsComputation *c);

/* Finds a while loop's trip count (backend_config known_trip_count, or the
 * counter pattern). FALSE when it cannot. */
gboolean ps_while_trip_count (const PsInstr *w, int64_t *out);

/* Human-readable table: one line per fusion root of the entry, then totals.
 * transfer full. */
char *ps_cost_report (const PsCostAnalysis *a);

/* The trip count of a while loop that the analysis cannot find
 * (PsCostOptions.default_trip_count, and the lowering's), as every reader
 * of a module declares it: [model] trip_count of the hlo family, the
 * --trip-count of `podsim partition` and `podsim trace lower`. The macro
 * is for a family's spec table (an array of values); the variable is the
 * same spec for option lists. */
#define PS_COST_PARAM_TRIP_COUNT \
  { .section = "model", .key = "trip_count", .type = PS_PARAM_INT, .def = "0", \
    .doc = "Iterations of a while loop whose trip count cannot be found (0: such a loop is an error)", \
    .max = G_MAXINT32 }
extern const PsParamSpec ps_cost_param_trip_count;

G_END_DECLS

#endif

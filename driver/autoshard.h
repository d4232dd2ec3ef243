/* Automatic sharding of a user's HLO program (podsim autoshard): which
 * annotations on the entry parameters and on a few internal tensors (the
 * values loops carry that are not parameters, then the first dot or
 * convolution result of each shape) give the shortest simulated step that
 * fits in HBM. Candidates per tensor are enumerated from its shape and the
 * mesh as XLA's auto-sharding enumerates strategies (replicated, one
 * dimension over one mesh axis, two dimensions over two axes).
 *
 * Two costs. The full one is the whole pipeline (propagate, partition,
 * exact memory, replay on the slice) in a child process per candidate
 * (SimGrid runs one engine per process), so the torus, the device order
 * and the peak HBM all count. The cheap one (autoshard_cost.c) runs the
 * same pipeline in this process up to the lowered trace (so the peak is
 * the exact one) and costs the trace with the replay's compute model and
 * each collective's closed form on the slice's links in the program's
 * device order (ps_coll_plan_time_bound), nothing overlapped and no link
 * contention between collectives.
 *
 * Solvers. Exact enumeration under the full cost when the product of the
 * candidate counts is at most max_exhaustive (every candidate is also
 * costed cheaply, to measure how well the cheap cost ranks). Above it, by
 * default, the dynamic program of autoshard_dp.h under the cheap cost: the
 * tensors grouped by shape into variables (a loop's stacked Q, K, V, O
 * weights, a weight and its optimizer slots take one candidate), the
 * internal tensors' variables and those of parameters of at least 0.1 % of
 * the searched bytes laid out in the order the layer structure first uses
 * them (a while loop's body right after the loop, once), a cost term per
 * variable's choice and per neighbour pair measured around a base
 * combination, Viterbi's recursion exact over that model, the HBM limit by
 * Lagrangian relaxation; in rounds, the first around no annotation, each
 * later one around the best combination costed so far. When nothing the DP
 * found fits, or with solver LOCAL, a local search under the cheap cost
 * from no annotation: sweeps of moves
 * that change many tensors together (the first dim of size s over axis a
 * in every tensor having one, one or two such (s, a) at once, for all
 * tensors, the parameters alone or the internal ones alone: how a model's
 * letters are split, so a loop's stacked weights, the Megatron column/row
 * pair and the optimizer slots move with their weight; and all tensors of
 * one shape to one candidate; the first sweep takes the best move, later
 * ones each improving move at once), then single-tensor moves (tensors of
 * at least 0.1 % of the searched bytes), in passes until one gains under
 * 0.01 % or the time budget is spent; a candidate that does not fit is
 * ranked by its peak, so the search walks towards fitting first. The best
 * `full_runs` distinct candidates of the cheap search are then run through
 * the full pipeline, which decides the answer. doc/manual.md ("Automatic
 * sharding") says what this does not do.
 *
 * Ownership: the result is transfer full (ps_autoshard_result_free); the
 * parameters are borrowed.
 */
#ifndef PS_DRIVER_AUTOSHARD_H
#define PS_DRIVER_AUTOSHARD_H

#include <glib.h>

#include "models/family.h"

typedef struct {
  char *shard;          /* the annotations, as the hlo family's 'shard' value */
  gboolean ok;          /* ran to the end and fits */
  double step_time_s;
  guint64 peak_hbm_bytes;
  char *why;            /* why it lost when it did not run or fit; owned */
  gboolean full;        /* ran through the full pipeline (else: the fields above unset) */
  /* The cheap cost (est_ran FALSE: it failed, est_why says why). */
  gboolean est_ran, est_fits;
  double est_step_s;
  guint64 est_peak_hbm_bytes;
  char *est_why;
} PsAutoshardCandidate;

/* AUTO: exhaustive up to max_exhaustive combinations, else DP. */
typedef enum {
  PS_AUTOSHARD_SOLVER_AUTO,
  PS_AUTOSHARD_SOLVER_EXHAUSTIVE,
  PS_AUTOSHARD_SOLVER_DP,
  PS_AUTOSHARD_SOLVER_LOCAL,
} PsAutoshardSolver;

typedef struct {
  int64_t max_exhaustive; /* enumerate every combination up to this many (0: 256) */
  int max_passes;         /* coordinate descent passes (0: 4) */
  gboolean progress;      /* one line per batch on stderr */
  int jobs;               /* parallel children (0: the processors) */
  int full_runs;          /* candidates of the cheap search given the full run (0: 8) */
  int max_internal;       /* internal tensors searched too (< 0: 8; 0: none) */
  double budget_s;        /* the local search stops after this long (0: no limit) */
  PsAutoshardSolver solver;
  int dp_width;           /* dp: candidates kept per tensor besides replicated (0: 4) */
  int dp_rounds;          /* dp: at most this many rounds, each around the best so far (0: 8) */
  gboolean tie_shapes;    /* internal tensors: every contraction result or operand of each chosen
                           * shape, the shapes chosen from operands too (max_internal counts shapes) */
} PsAutoshardOptions;

typedef struct {
  GPtrArray *ranked;      /* PsAutoshardCandidate*: the full runs, fastest
                           * fitting first, then the cheap-only ones by
                           * their cheap cost */
  int n_params;           /* parameters searched */
  int n_internal;         /* internal tensors searched */
  int64_t space;          /* combinations in the search space */
  gboolean exhaustive;
  int n_evaluated;        /* full runs */
  int n_estimated;        /* cheap-cost runs */
  int n_rounds;           /* local search: moves taken */
  gboolean stopped;       /* local search: stopped by the budget */
  const char *solver;     /* "exhaustive", "dp", "dp+local", "local-search" (static) */
  /* dp: tensors in the chain, rounds, measurements (unary and pair),
   * pairs, the cheap step of its best (0: none fit) */
  int dp_chain, dp_rounds, dp_measured, dp_pairs;
  double dp_best_s;
  gboolean dp_fallback;   /* dp found nothing that fits: the full local search ran */
  /* Exhaustive only: how the cheap cost ranks the candidates that fit
   * (Spearman's rank correlation with the full step; 2: fewer than 2), and
   * the full-run rank (1-based) of the cheap cost's best. */
  double rank_correlation;
  int cheap_best_rank;
} PsAutoshardResult;

void ps_autoshard_result_free (PsAutoshardResult *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsAutoshardResult, ps_autoshard_result_free)

/* The candidate mappings of one array of `rank` dims over a mesh
 * (mesh_rank axes of sizes mesh): "[-1,-1]" (replicated), "[a,-1]"...,
 * as the hlo family's dims-mapping text. transfer full (GStrv). */
char **ps_autoshard_candidates (int rank, const int64_t *dims, int mesh_rank, const int64_t *mesh);

/* The cheap cost of annotations `shard` (the hlo family's text) for the
 * hlo family's parameters (file, slice, mesh, device order, target
 * options): ps_autoshard_cost_estimate fills e (est_why owned by the
 * caller) and returns FALSE when a stage failed. transfer full. */
typedef struct PsAutoshardCost PsAutoshardCost;
typedef struct {
  gboolean ran, fits;
  guint64 peak_hbm_bytes;
  double compute_s, communication_s, step_time_s;
  char *why;
} PsAutoshardEstimate;
PsAutoshardCost *ps_autoshard_cost_new (const PsParams *p, GError **error);
gboolean ps_autoshard_cost_estimate (PsAutoshardCost *c, const char *shard, PsAutoshardEstimate *e);
int ps_autoshard_cost_n_runs (const PsAutoshardCost *c);
/* With on, a program that does not fit is lowered and costed too (its
 * step_time_s set, fits FALSE): the DP's terms need a step for each. */
void ps_autoshard_cost_set_past_no_fit (PsAutoshardCost *c, gboolean on);
/* The HBM of one core, the limit a candidate must fit under. */
guint64 ps_autoshard_cost_hbm_bytes (const PsAutoshardCost *c);
void ps_autoshard_cost_free (PsAutoshardCost *c);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsAutoshardCost, ps_autoshard_cost_free)

/* Searches the hlo family's parameters `p` (file, slice, mesh), each
 * full run as `podsim run RUN_ARGV... --shard ...` in a child
 * (run_argv: NULL-terminated, borrowed, without --shard). Errors: the
 * program's or the options' (PS_ERROR_OPTION, PS_ERROR_PARSE), a child
 * that cannot start or an interrupt (PS_ERROR_IO). */
PsAutoshardResult *ps_autoshard_search (const PsParams *p, char **run_argv, const PsAutoshardOptions *o,
                                        GError **error);

#endif

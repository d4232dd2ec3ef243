/* podsim autoshard's solver over the graph: a dynamic program over a chain
 * of tensors (driver/autoshard.h says where it sits in the search).
 *
 * The tensors are discrete variables (each its candidate shardings, 0..n-1)
 * laid out along the program (the order in which the layer structure first
 * uses them: a loop's body counts once, at the loop). The cost of a
 * combination is modelled as the base combination's plus one term per
 * tensor moved off the base (measured: the base with that tensor alone
 * moved) plus one term per pair of neighbours in the chain (measured: the
 * base with both moved, less their own terms): the second-order anchored
 * expansion of the measured cost, as XLA's auto-sharding ILP has a cost per
 * choice and per resharding edge. Step and peak HBM get such a model each;
 * the peak limit is met by Lagrangian relaxation (minimize step + lambda *
 * peak, lambda raised until the predicted peak fits), and each minimization
 * is exact over the model by Viterbi's recursion along the chain. The model
 * is exact when the measured cost has no interaction beyond neighbours
 * (tests/check_autoshard_dp.c checks the recursion against enumeration on
 * such costs); the caller measures every solution it returns.
 *
 * Pruning: each tensor keeps the base and its `width` best candidates (half
 * by their step term, half by their peak term), so the pair terms cost at
 * most width^2 measurements per neighbour pair.
 *
 * Ownership: solutions are appended to the caller's array as g_malloc'd
 * int arrays of n entries (transfer full).
 */
#ifndef PS_DRIVER_AUTOSHARD_DP_H
#define PS_DRIVER_AUTOSHARD_DP_H

#include <glib.h>

typedef struct {
  gboolean ran;        /* FALSE: this combination failed: never chosen */
  double step_s;       /* also when it does not fit */
  double peak_bytes;
} PsDpCost;

/* Measures one combination (n entries). Returns FALSE to stop the solver
 * (a time budget): what was measured so far is still solved. */
typedef gboolean (*PsDpEval) (const int *choice, PsDpCost *out, gpointer user);

typedef struct {
  int n;                /* variables */
  const int *n_cands;   /* each variable's candidate count */
  const int *order;     /* the chain: the variables searched, in order */
  int n_order;
  int width;            /* candidates kept per variable besides the base (0: 4) */
  double limit_bytes;   /* the peak the solution must stay under */
} PsDpProblem;

typedef struct {
  int n_measured;       /* eval calls */
  int n_pairs;          /* neighbour pairs measured */
  int n_lambdas;        /* minimizations run */
  gboolean stopped;     /* eval asked to stop */
} PsDpStats;

/* Solves pb from `base` (n entries; the other variables stay there):
 * appends each distinct minimizer (one per lambda tried, the
 * unconstrained one first) to `solutions`. Returns how many. */
int ps_autoshard_dp_solve (const PsDpProblem *pb, const int *base, PsDpEval eval, gpointer user,
                           GPtrArray *solutions, PsDpStats *stats);

/* The recursion alone, on a given model: minimizes
 * sum_i unary[i][x_i] + sum_i pair[i][x_i * nk[i+1] + x_{i+1}] over the
 * chain of m variables with nk[i] values each (G_MAXDOUBLE: forbidden);
 * writes the minimizer to x and returns its cost (G_MAXDOUBLE: none). */
double ps_autoshard_dp_chain (int m, const int *nk, double *const *unary, double *const *pair, int *x);

#endif

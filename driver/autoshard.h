/* Automatic sharding of a user's HLO program (podsim autoshard): which
 * annotations on the entry parameters give the shortest simulated step
 * that fits in HBM. Candidates per parameter are enumerated from its shape
 * and the mesh as XLA's auto-sharding enumerates strategies (replicated,
 * one dimension over one mesh axis, two dimensions over two axes); each
 * combination is costed by the full pipeline (propagate, partition, exact
 * memory, replay on the slice), so the torus, the device order and the
 * peak HBM all count. The solver is exact enumeration when the product of
 * the candidate counts is at most max_exhaustive, else coordinate descent
 * (one parameter at a time, each choice run through the pipeline) until a
 * pass changes nothing: doc/manual.md ("Automatic sharding") says what this
 * does not yet do (no analytical cost, no ILP, no internal tensors).
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
} PsAutoshardCandidate;

typedef struct {
  int64_t max_exhaustive; /* enumerate every combination up to this many (0: 256) */
  int max_passes;         /* coordinate descent passes (0: 4) */
  gboolean progress;      /* one line per batch on stderr */
  int jobs;               /* parallel children (0: the processors) */
} PsAutoshardOptions;

typedef struct {
  GPtrArray *ranked;      /* PsAutoshardCandidate*, fastest fitting first */
  int n_params;           /* parameters searched */
  int64_t space;          /* combinations in the search space */
  gboolean exhaustive;
  int n_evaluated;
} PsAutoshardResult;

void ps_autoshard_result_free (PsAutoshardResult *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsAutoshardResult, ps_autoshard_result_free)

/* The candidate mappings of one array of `rank` dims over a mesh
 * (mesh_rank axes of sizes mesh): "[-1,-1]" (replicated), "[a,-1]"...,
 * as the hlo family's dims-mapping text. transfer full (GStrv). */
char **ps_autoshard_candidates (int rank, const int64_t *dims, int mesh_rank, const int64_t *mesh);

/* Searches the hlo family's parameters `p` (file, slice, mesh), each
 * combination run as `podsim run RUN_ARGV... --shard ...` in a child
 * (run_argv: NULL-terminated, borrowed, without --shard). Errors: the
 * program's or the options' (PS_ERROR_OPTION, PS_ERROR_PARSE), a child
 * that cannot start or an interrupt (PS_ERROR_IO). */
PsAutoshardResult *ps_autoshard_search (const PsParams *p, char **run_argv, const PsAutoshardOptions *o,
                                        GError **error);

#endif

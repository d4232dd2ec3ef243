/* Private to propagate*.c (partitioner/propagate/, private prefix pp_ and
 * Pp; see doc/architecture.md): the sharding algebra the pass needs
 * (partial replication, transposes, reshapes, merging of compatible
 * shardings) and the per-opcode rules. Other modules use propagate.h.
 *
 * Every function returning PsSharding* returns a new sharding (transfer
 * full) or NULL for "no sharding can be derived"; arguments are borrowed.
 * The semantics follow XLA's hlo_sharding_util so that propagation gives the
 * same answers as XLA's pass.
 */
#ifndef PS_PARTITIONER_PROPAGATE_PRIVATE_H
#define PS_PARTITIONER_PROPAGATE_PRIVATE_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/ir/ir.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/ir/sharding.h"

G_BEGIN_DECLS

#define PP_MAX_DIMS 32

/* ---- queries, with XLA's meaning ---------------------------------------- */
gboolean pp_is_tuple (const PsSharding *s);
gboolean pp_is_manual (const PsSharding *s);          /* fully manual leaf(s) */
gboolean pp_is_replicated (const PsSharding *s);      /* unknown counts as replicated */
gboolean pp_is_tile_maximal (const PsSharding *s);    /* replicated, maximal, unknown */
gboolean pp_is_tiled (const PsSharding *s);           /* TILED kind (leaf) */
gboolean pp_is_spatially_partitioned (const PsSharding *s);
gboolean pp_has_partial_replication (const PsSharding *s);
gboolean pp_replicate_on_last_tile_dim (const PsSharding *s);
gboolean pp_is_manual_subgroup (const PsSharding *s);
int pp_data_rank (const PsSharding *s);
int64_t pp_num_tiles (const PsSharding *s);
int64_t pp_tile_dim (const PsSharding *s, int i);     /* 1 for non-tiled */
int pp_subgroup_dim (const PsSharding *s, PsSubgroupKind k); /* tile-dim index or -1 */
gboolean pp_has_unique_device (const PsSharding *s, int64_t *device);

/* ---- constructors ------------------------------------------------------- */
PsSharding *pp_copy (const PsSharding *s);
PsSharding *pp_subgroup_of (int n, const int64_t *dims, const PsSharding *s);
PsSharding *pp_replicated_like (const PsSharding *meta_src);
PsSharding *pp_manual_like (const PsSharding *meta_src);
/* Tuple sharding for `shape` whose every leaf is a copy of `s`. */
PsSharding *pp_single_tuple (const PsShape *shape, const PsSharding *s);
/* Sharding of tuple element `index` of `shape` (a tuple) under `s`. */
PsSharding *pp_sub_sharding (const PsSharding *s, const PsShape *shape, int index);
/* First leaf index and leaf count of tuple element `index`. */
void pp_tuple_leaf_range (const PsShape *shape, int index, int *first, int *count);
/* Expands a non-tuple sharding on a tuple shape to a tuple sharding. */
PsSharding *pp_normalize_tuple (const PsSharding *s, const PsShape *shape);
/* Same, taking ownership of s. */
PsSharding *pp_normalize_tuple_take (PsSharding *s, const PsShape *shape);

/* ---- algebra (hlo_sharding_util) ---------------------------------------- */
PsSharding *pp_partially_replicate_on_dims (const PsSharding *s, int n, const int64_t *dims);
PsSharding *pp_partially_replicate_all_except (const PsSharding *s, int n, const int64_t *keep);
PsSharding *pp_replicate_all_data_dims (const PsSharding *s, int data_rank);
PsSharding *pp_remove_shape_dims (const PsSharding *s, int n, const int64_t *dims);
PsSharding *pp_transpose (const PsSharding *s, int n, const int64_t *perm);
/* NULL when a tiled source dim has no target. */
PsSharding *pp_transpose_collapsed (const PsSharding *s, int n_src, const int64_t *src_to_tgt,
                                    int n_tgt, const int64_t *tgt_to_src);
PsSharding *pp_reshape_sharding (const PsShape *src, const PsShape *tgt, const PsSharding *s);
PsSharding *pp_propagate_through_reshape (const PsShape *src, const PsShape *tgt,
                                          const PsSharding *s);
PsSharding *pp_reverse (const PsSharding *s, int n, const int64_t *dims);
PsSharding *pp_along_dims (const PsSharding *s, int n, const int64_t *src_dims,
                           const int64_t *tgt_dims, int tgt_rank);
/* Merged sharding or NULL when not compatible. */
PsSharding *pp_merge_if_compatible (const PsSharding *to_merge, int64_t minimum_tiles,
                                    const PsSharding *dst);
/* XLA's MergeSharding: may replace *dst; returns whether to_merge... see .c */
gboolean pp_merge_sharding (const PsSharding *to_merge, PsSharding **dst, gboolean may_combine);
gboolean pp_is_more_specific (const PsSharding *lhs, const PsSharding *rhs);
gboolean pp_is_strictly_better (const PsSharding *lhs, const PsSharding *rhs);
gboolean pp_is_subtiling_or_equal (const PsShape *shape, const PsSharding *potential,
                                   const PsSharding *s);
/* XLA's ReturnImprovedShardingImpl: takes ownership of `from`; returns the
 * improved sharding or NULL (and frees `from`). */
PsSharding *pp_return_improved (PsSharding *from, const PsSharding *to_improve,
                                const PsShape *shape, gboolean may_combine,
                                gboolean allow_aggressive);
PsSharding *pp_find_common (int n, PsSharding *const *shardings, const PsSharding *dflt);

/* Replaces the sharding's metadata text. */
void pp_set_metadata_text (PsSharding *s, const char *text);

G_END_DECLS

#endif

#ifndef PS_PARTITIONER_PROPAGATE_CTX
#define PS_PARTITIONER_PROPAGATE_CTX
G_BEGIN_DECLS

/* State of one run of the pass, shared by the driver and the rules. */
typedef struct {
  PsModule *m;
  gboolean is_spmd;
  gboolean to_output;       /* any root leaf may be refined */
  gboolean to_params;       /* any parameter may be refined */
  GHashTable *comp_map;     /* PsComputation* -> calling PsInstr* (while/conditional/call) */
  GHashTable *provided;     /* PsInstr* set: shardings the pass may not change */
  GHashTable *unspec;       /* PsInstr* -> PsInts* (sorted unspecified dims) */
  const char *const *threads; /* execution threads processed, NULL = all */
  /* Memo of the dot/convolution sharding derivations (propagate_rules.c),
   * keyed by instruction and operand; NULL = no memo. The pass re-derives
   * the same operand shardings from unchanged inputs many times, and on a
   * 2048-device pod each derivation builds several 16 KiB tile
   * assignments. */
  struct PpDotMemo *dot_memo;
} PpCtx;

typedef struct PpDotMemo PpDotMemo;
PpDotMemo *pp_dot_memo_new (void);
void pp_dot_memo_free (PpDotMemo *m);

/* Whether computations of execution thread `thread` (NULL = main) are
 * processed. */
gboolean pp_thread_included (const PpCtx *c, const char *thread);

gboolean pp_is_custom_call (const PsInstr *i, const char *target);
gboolean pp_is_elementwise (const PsInstr *i);
int pp_non_root_users (const PsInstr *i);
gboolean pp_support_spatial (PpCtx *c, const PsInstr *i, gboolean to_output, gboolean to_params);
gboolean pp_can_propagate_at (const PsInstr *i, int aggr);
/* Takes ownership of s. */
gboolean pp_maybe_improve (PsSharding *s, PsInstr *i, gboolean may_combine, gboolean aggressive);
/* Same for tuple element `index` of a tuple-shaped instruction. */
gboolean pp_maybe_improve_sub_ (PsSharding *s, PsInstr *i, int index, gboolean may_combine);
gboolean pp_infer_from_operands (PpCtx *c, PsInstr *i, int aggr);
gboolean pp_infer_from_users (PpCtx *c, PsInstr *i, int aggr);
PsSharding *pp_sharding_from_user (PpCtx *c, const PsInstr *i, const PsInstr *user, int aggr);
int pp_operand_index (const PsInstr *user, const PsInstr *op);

/* Dot/convolution dims as XLA's dot_as_convolution_util sees them. */
typedef struct { int64_t lhs, rhs, out; } PpDimNums;
typedef struct {
  int nb, nc, nln, nrn, ns;
  PpDimNums batch[PP_MAX_DIMS], contracting[PP_MAX_DIMS], lhs_nc[PP_MAX_DIMS],
      rhs_nc[PP_MAX_DIMS], spatial[PP_MAX_DIMS];
  int lhs_rank, rhs_rank, out_rank;
  /* Dims of the lhs (0), rhs (1) and result (2) that stay replicated and
   * are in none of the lists above: a ragged-dot's ragged and group dims
   * (pp_dot_dims_from_dot); none for a dot or a convolution. */
  int nrep[3];
  int64_t rep[3][2];
} PpDotDims;
void pp_dot_dims_from_dot (const PsInstr *dot, PpDotDims *d);
void pp_dot_dims_from_conv (const PsInstr *conv, PpDotDims *d);
PsSharding *pp_infer_dot_operand (const PsSharding *dot_sharding, const PsSharding *other,
                                  int operand_index, const PpDotDims *d, gboolean may_combine);
gboolean pp_infer_dot_from_operands (PpCtx *c, PsInstr *i, const PpDotDims *d,
                                     gboolean may_combine);

/* Gather and scatter (propagate_gather.c). */
gboolean pp_infer_gather_from_operands (PpCtx *c, PsInstr *i, gboolean may_combine);
gboolean pp_infer_scatter_from_operands (PpCtx *c, PsInstr *i, gboolean may_combine);
PsSharding *pp_gather_operand_from_user (PpCtx *c, const PsInstr *i, const PsInstr *user);
PsSharding *pp_scatter_operand_from_user (PpCtx *c, const PsInstr *i, const PsInstr *user);

/* Batch normalization (propagate_norm.c). */
gboolean pp_infer_batch_norm_from_operands (PpCtx *c, PsInstr *i, gboolean may_combine,
                                            gboolean aggressive);
PsSharding *pp_batch_norm_operand_from_user (const PsInstr *i, const PsInstr *user);

G_END_DECLS
#endif

/* Private to spmd*.c (partitioner/spmd/, private prefix sp_ and Sp; see
 * doc/architecture.md): the partitioning context, the
 * partitioned-value type, instruction builders and the handler entry points.
 *
 * A partitioned value (SpPVal) pairs the local instruction in the output
 * program with the sharding it is laid out in and the full (logical) shape.
 * Handlers read their operands' SpPVal, reshard them as their strategy needs
 * (spmd_reshard.c), emit local instructions through the sp_* builders and
 * return the SpPVal of the result; the driver (spmd.c) reshards that to the
 * instruction's own sharding. Calls run one way: spmd.c -> handlers
 * (spmd_dot.c, spmd_conv.c, spmd_norm.c, spmd_ops.c) -> spmd_reshard.c ->
 * spmd_build.c and spmd_value.c (values' lookups, errors, the fallback
 * report), which call nothing back.
 *
 * Ownership: a SpPVal owns its sharding and full shape; builders take
 * ownership of the shapes passed to them and borrow operand instructions.
 */
#ifndef PS_PARTITIONER_SPMD_PRIVATE_H
#define PS_PARTITIONER_SPMD_PRIVATE_H

#include "partitioner/ir/ir.h"
#include "partitioner/ir/sharding.h"
#include "partitioner/spmd/spmd.h"

G_BEGIN_DECLS

typedef struct SpModule SpModule;
typedef struct SpComp SpComp;

typedef struct {
  PsInstr *hlo;          /* local value in the output computation */
  PsSharding *sharding;  /* owned unless `shared`, never NULL */
  PsShape *full;         /* owned logical shape */
  gboolean shared;       /* sharding is the memo's interned copy (sp_pval_new) */
} SpPVal;

struct SpModule {
  const PsModule *src;
  PsModule *out;
  int64_t n;             /* devices */
  PsSpmdOptions opts;
  int64_t next_channel;
  GHashTable *comp_map;  /* src computation -> out computation (copied verbatim) */
  GHashTable *reducers;  /* "kind.etype" -> out computation */
  GPtrArray *helper_comps; /* computations to move before their callers */
  GError *error;         /* first error; handlers stop when set */
};

struct SpComp {
  SpModule *m;
  const PsComputation *src;
  PsComputation *out;
  GHashTable *vals;      /* const PsInstr* (src) -> SpPVal* */
  PsInstr *pid;          /* s32[] partition id, made on first use */
  /* Set while a handler runs: src instruction, for error messages. */
  const PsInstr *cur;
};

/* ---- values ---- */
SpPVal *sp_pval_new (PsInstr *hlo, const PsSharding *s, const PsShape *full);
void sp_pval_free (SpPVal *v);
SpPVal *sp_operand (SpComp *c, const PsInstr *src_instr, int i);
/* The sharding the source instruction carries (replicated when none);
 * borrowed from `src` or a static replicated. */
const PsSharding *sp_sharding_of (const PsInstr *src);
const PsSharding *sp_replicated (void);

/* ---- the fail path ---- */
void sp_fail (SpComp *c, PsErrorCode code, const char *fmt, ...) G_GNUC_PRINTF (3, 4);
gboolean sp_failed (SpComp *c);
void sp_note_fallback (SpComp *c, PsOpcode op);

/* ---- builders (spmd_build.c) ---- */
PsInstr *sp_add (SpComp *c, PsOpcode op, PsShape *shape, int n, PsInstr *const *ops);
PsInstr *sp_add1 (SpComp *c, PsOpcode op, PsShape *shape, PsInstr *a);
PsInstr *sp_add2 (SpComp *c, PsOpcode op, PsShape *shape, PsInstr *a, PsInstr *b);
/* Copies the typed attributes of `src` (not operands, called, sharding). */
void sp_copy_attrs (PsInstr *dst, const PsInstr *src);
PsShape *sp_shape (PsElemType t, int rank, const int64_t *dims);
PsInstr *sp_const_scalar (SpComp *c, PsElemType t, double v);
/* The neutral element of a reducer kind for type t, as a scalar constant. */
PsInstr *sp_const_zero (SpComp *c, PsElemType t);
PsInstr *sp_const_s32_vec (SpComp *c, int64_t n, const int64_t *v);
PsInstr *sp_partition_id (SpComp *c);
/* table[partition id] as an s32[] scalar (a constant when all are equal). */
PsInstr *sp_table_lookup (SpComp *c, const int64_t *table);
PsInstr *sp_broadcast_scalar (SpComp *c, PsInstr *scalar, const PsShape *shape);
PsInstr *sp_broadcast (SpComp *c, PsInstr *x, const PsShape *shape, int n_dims,
                       const int64_t *dims);
PsInstr *sp_slice (SpComp *c, PsInstr *x, const int64_t *starts, const int64_t *limits);
PsInstr *sp_pad (SpComp *c, PsInstr *x, PsInstr *padval, const int64_t *lo,
                 const int64_t *hi);
PsInstr *sp_dynamic_slice (SpComp *c, PsInstr *x, PsInstr *const *starts,
                           const int64_t *sizes);
PsInstr *sp_dynamic_update_slice (SpComp *c, PsInstr *x, PsInstr *upd,
                                  PsInstr *const *starts);
PsInstr *sp_reshape (SpComp *c, PsInstr *x, int rank, const int64_t *dims);
PsInstr *sp_transpose (SpComp *c, PsInstr *x, const int64_t *perm);
PsInstr *sp_iota (SpComp *c, PsElemType t, int rank, const int64_t *dims, int64_t dim);
PsInstr *sp_compare (SpComp *c, PsInstr *a, PsInstr *b, PsCompareDir dir);
PsInstr *sp_select (SpComp *c, PsInstr *pred, PsInstr *a, PsInstr *b);
PsInstr *sp_binary (SpComp *c, PsOpcode op, PsInstr *a, PsInstr *b);
PsInstr *sp_convert (SpComp *c, PsInstr *x, PsElemType t);
PsInstr *sp_gte (SpComp *c, PsInstr *tuple, int64_t index);
PsInstr *sp_tuple (SpComp *c, int n, PsInstr *const *elems);
PsInstr *sp_concat (SpComp *c, int n, PsInstr *const *xs, int64_t dim);
PsInstr *sp_copy (SpComp *c, PsInstr *x);

typedef enum { SP_RED_SUM, SP_RED_MAX, SP_RED_MIN, SP_RED_OR, SP_RED_AND } SpReduceKind;
/* A scalar reducer computation of the output module. */
PsComputation *sp_reducer (SpModule *m, SpReduceKind kind, PsElemType t);

/* Collectives over groups of global device ids (n_groups x group_size). */
PsInstr *sp_all_reduce (SpComp *c, PsInstr *x, SpReduceKind kind, int n_groups,
                        int group_size, const int64_t *groups);
/* All-reduce with a copy of a reduce's own scalar computation. */
PsInstr *sp_all_reduce_with (SpComp *c, PsInstr *x, const PsComputation *src_reducer,
                             int n_groups, int group_size, const int64_t *groups);
/* The output-module copy of a scalar computation of the input (made once). */
PsComputation *sp_copy_computation (SpModule *m, const PsComputation *src);
/* A name for a new output computation: `base`, or base.spmdN when taken.
 * transfer full. */
char *sp_fresh_comp_name (SpModule *m, const char *base);
/* Makes p parameter `number` of comp. */
void sp_set_param (PsComputation *comp, PsInstr *p, int64_t number);
PsInstr *sp_all_gather (SpComp *c, PsInstr *x, int64_t dim, int n_groups,
                        int group_size, const int64_t *groups);
PsInstr *sp_reduce_scatter (SpComp *c, PsInstr *x, SpReduceKind kind, int64_t dim,
                            int n_groups, int group_size, const int64_t *groups);
PsInstr *sp_all_to_all (SpComp *c, PsInstr *x, int64_t dim, int n_groups,
                        int group_size, const int64_t *groups);
PsInstr *sp_collective_permute (SpComp *c, PsInstr *x, int n_pairs, const int64_t *pairs);

/* ---- sharding arithmetic (spmd_reshard.c) ---- */
/* Memoises the sharding arithmetic below (remaps, groups, slice checks)
 * until the matching pop; ps_spmd_partition brackets its work with them.
 * `saved` keeps an enclosing memo (nested partitioning). */
void sp_memo_push (gpointer *saved);
void sp_memo_pop (gpointer saved);
/* Hash and equality of TILED shardings by tile structure and device array
 * (as ps_sharding_equal_layout), cheap for iota-form arrays. */
/* The memo's interned copy of a tiled sharding without metadata or
 * sharding group (equal to s in every field), or NULL (no memo, other
 * shardings). Borrowed until sp_memo_pop. */
const PsSharding *sp_sharding_intern (const PsSharding *s);
/* sp_sharding_remap, borrowed when memoised: the result stays valid until
 * sp_memo_pop, or until the caller frees *owned (set when the result had
 * to be made). NULL as sp_sharding_remap. */
const PsSharding *sp_sharding_remap_view (const PsSharding *s, int rank, const int64_t *src_dim,
                                          PsSharding **owned);
guint sp_sharding_layout_hash (gconstpointer s);
gboolean sp_sharding_layout_same (gconstpointer a, gconstpointer b);
/* Shard count of data dim d (1 when not tiled). */
int64_t sp_shards (const PsSharding *s, int d);
/* Per-device offset table of data dim d: offset[dev] = tile index * tile
 * size (n entries; devices not in the sharding get 0). transfer full. */
int64_t *sp_offset_table (SpModule *m, const PsSharding *s, const PsShape *full, int d);
/* The s32[] offset of this device's tile in data dim d. */
PsInstr *sp_offset (SpComp *c, const PsSharding *s, const PsShape *full, int d);
/* Groups of devices that differ only in the given tile dims (mask over all
 * tile dims, subgroup dims included), each ordered row-major over those
 * dims. Returns n_groups * group_size ids (transfer full). */
int64_t *sp_groups (const PsSharding *s, const gboolean *dims_mask, int *n_groups,
                    int *group_size);
/* The groups of devices that split any reduced data dim (red[d], r data
 * dims) of s: each group's partial results combine into one. NULL when no
 * reduced dim is split. transfer full. */
int64_t *sp_reduced_groups (const PsSharding *s, const gboolean *red, int r, int *n_groups,
                            int *group_size);
/* Replaces the padding of the local value of `v` in the data dims of
 * `dims_mask` (NULL: all) with the scalar `fill` (s32[]... of v's etype). */
PsInstr *sp_mask_padding (SpComp *c, const SpPVal *v, const gboolean *dims_mask,
                          PsInstr *fill);
/* Whether any data dim has padding (size not a multiple of shard count). */
gboolean sp_has_padding (const PsSharding *s, const PsShape *full);

/* A tiled sharding from a tile array: `rank` data dims of sizes tiles[],
 * then optionally one replicated dim of size rep; devices row-major.
 * Normalises (all-1 tiles -> replicated). transfer full. */
PsSharding *sp_make_sharding (int rank, const int64_t *tiles, int64_t rep,
                              const int64_t *devices);
/* A sharding of a rank-`rank` tensor whose data dim i takes tile dim
 * src_dim[i] of s (-1: not split); all other tile dims of s (data and
 * replicated subgroup) become replication. Manual subgroups are not
 * supported (returns NULL). transfer full. */
PsSharding *sp_sharding_remap (const PsSharding *s, int rank, const int64_t *src_dim);
/* Same, but manual subgroup dims of s stay manual subgroup dims. */
PsSharding *sp_sharding_remap_keep_manual (const PsSharding *s, int rank,
                                           const int64_t *src_dim);

/* Rough bytes moved by resharding a value of `full` shape: 0 when equal,
 * a small local cost when only slicing, else the local or full bytes. */
double sp_reshard_cost (SpModule *m, const PsShape *full, const PsSharding *from,
                        const PsSharding *to);

/* Reshards v to `to`; returns the local instruction (never NULL unless an
 * error was set). v is not modified. */
PsInstr *sp_reshard (SpComp *c, const SpPVal *v, const PsSharding *to);
/* Same but returns a new SpPVal. */
SpPVal *sp_reshard_pval (SpComp *c, const SpPVal *v, const PsSharding *to);

/* ---- handlers: return the result as a new SpPVal in any sharding, or NULL
 * to ask for the fallback (without setting an error). ---- */
SpPVal *sp_handle_dot (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_convolution (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_reduce_window (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_broadcast (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_transpose (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_reshape (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_reduce (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_manual_reduce (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_iota (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_slice (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_pad (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_concatenate (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_dynamic_slice (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_dynamic_update_slice (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_reverse (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_sort (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_gather (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_scatter (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_bitcast_convert (SpComp *c, const PsInstr *in);
SpPVal *sp_handle_batch_norm (SpComp *c, const PsInstr *in);   /* spmd_norm.c */

/* Halo exchange along data dim d of v (split in k tiles like the output of
 * `out_size` elements along that dim): returns, per device, exactly the
 * padded, base-dilated input positions its output tile's windows read, so
 * the windowed op can run with that dim's padding 0 and base dilation 1.
 * `fill` is the scalar pad value. (spmd_conv.c) */
PsInstr *sp_halo_exchange (SpComp *c, const SpPVal *v, int d, const PsWindowDim *w,
                           int64_t out_size, int64_t k, PsInstr *fill);

/* The fallback: replicate operands, run the op on full shapes. */
SpPVal *sp_fallback (SpComp *c, const PsInstr *in);
/* Clones `in` into c->out with the given local operands and shape. */
PsInstr *sp_clone_with (SpComp *c, const PsInstr *in, PsShape *shape, int n,
                        PsInstr *const *ops);

G_END_DECLS

#endif

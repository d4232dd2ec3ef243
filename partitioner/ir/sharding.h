/* Shardings: how a tensor is laid out over the devices of the SPMD program.
 *
 * The representation follows XLA's HloSharding: replicated, maximal (one
 * device), manual, unknown (placeholder for shard_as/shard_like groups),
 * tiled with a tile-assignment array (explicit device list or iota form),
 * partially tiled (trailing subgroup dims of kind replicated and/or manual)
 * and tuple shardings (one per leaf). The text form is XLA's, so HLO files
 * round-trip; see tests/data/conformance/HLO_SYNTAX.md section 6.
 *
 * Every constructor returns a normalised sharding (as XLA's parser does):
 * a replicate subgroup covering all devices becomes {replicated}, size-1
 * subgroup dims are dropped, subgroup kinds are ordered manual then
 * replicated, device ids within each replication group are sorted.
 * Equality is structural: kind, tile dims, expanded device array, subgroup
 * kinds and shard group; metadata is ignored, an iota form equals the list it
 * expands to.
 *
 * Ownership: every function returning PsSharding* returns a new sharding
 * (transfer full), free with ps_sharding_free(); arguments are borrowed.
 */
#ifndef PS_PARTITIONER_SHARDING_H
#define PS_PARTITIONER_SHARDING_H

#include <glib.h>
#include <stdint.h>

#include "common/checked.h"
#include "common/error.h"
#include "partitioner/ir/shape.h"

G_BEGIN_DECLS

typedef struct PsSharding PsSharding; /* also forward-declared by ir.h */

typedef enum {
  PS_SHARDING_REPLICATED,
  PS_SHARDING_MAXIMAL,
  PS_SHARDING_MANUAL,
  PS_SHARDING_UNKNOWN,
  PS_SHARDING_TILED,     /* includes partial replication and subgroups */
  PS_SHARDING_TUPLE,
} PsShardingKind;

typedef enum { PS_SUBGROUP_MANUAL, PS_SUBGROUP_REPLICATED } PsSubgroupKind;

typedef enum { PS_SHARD_GROUP_NONE, PS_SHARD_GROUP_AS, PS_SHARD_GROUP_LIKE } PsShardGroupKind;

struct PsSharding {
  PsShardingKind kind;
  int64_t device;            /* MAXIMAL: the device */

  /* TILED: the tile-assignment array. Its first n_tile_dims - n_subgroups
   * dims are data dims (one per tensor dim); the trailing n_subgroups dims
   * are subgroup dims of the given kinds. */
  int n_tile_dims;
  int64_t *tile_dims;
  int64_t n_devices;         /* product of tile_dims */
  int64_t *devices;          /* tile assignment, row-major, n_devices ids */
  /* When not NULL, `devices` is shared with other shardings made by
   * ps_sharding_share() and this counts its holders; read-only then. */
  int *devices_ref;
  int n_subgroups;
  PsSubgroupKind *subgroup_kinds;
  /* The iota form that generates `devices`, when there is one: reshape dims
   * and transpose permutation (NULL when not iota-representable). The
   * printer uses it; equality ignores it. */
  int n_iota_dims;
  int64_t *iota_dims;
  int64_t *iota_perm;

  /* TUPLE: one sharding per leaf of the tuple shape, depth-first. */
  int n_elems;
  PsSharding **elems;

  PsShardGroupKind group_kind;
  int64_t group_id;
  char *metadata;            /* raw text after "metadata=", or NULL */
};

/* A copy of s whose device arrays (every leaf's) are shared with s, not
 * copied: O(tile dims) instead of O(devices). Neither may then write to
 * its `devices`; ps_sharding_copy() gives an array of one's own. Equal to
 * ps_sharding_copy (s) in every other way. */
PsSharding *ps_sharding_share (const PsSharding *s);

/* Parses one sharding attribute value (`{replicated}`, `{{...},{...}}`...)
 * from text[0..len). On error returns NULL, sets *err_offset to the byte
 * offset of the problem within text and a PS_ERROR_PARSE error whose message
 * has no position prefix (the caller adds "FILE:LINE:COL: "). */
PsSharding *ps_sharding_parse (const char *text, gsize len, gsize *err_offset,
                               GError **error);
/* Parses a complete string; errors are prefixed with `what` (a file name or
 * "sharding"). */
PsSharding *ps_sharding_from_string (const char *text, const char *what, GError **error);
/* Canonical text; reparsing gives an equal sharding. transfer full. */
char *ps_sharding_to_string (const PsSharding *s);
void ps_sharding_append (GString *out, const PsSharding *s, gboolean with_metadata);
/* The op_name="..." values of the sharding's metadata, in order, as a
 * NULL-terminated list (transfer full, g_strfreev; empty without metadata). */
char **ps_sharding_op_names (const PsSharding *s);

PsSharding *ps_sharding_copy (const PsSharding *s);
void ps_sharding_free (PsSharding *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsSharding, ps_sharding_free)
/* Structural equality (metadata ignored, shard group compared). */
gboolean ps_sharding_equal (const PsSharding *a, const PsSharding *b);
/* Same, ignoring shard groups too. */
gboolean ps_sharding_equal_layout (const PsSharding *a, const PsSharding *b);

/* Tile-assignment rank limit: generous (XLA tests use up to 7) and keeps the
 * normaliser's scratch arrays on the stack. */
#define PS_SHARDING_MAX_DIMS 32
/* Device-array size limit, so a typo like [100000,100000] is an error, not
 * an allocation failure. A full TPU v3 pod has 2048 cores. */
#define PS_SHARDING_MAX_DEVICES ((int64_t) PS_MAX_DEVICES)
/* Device ids of the shardings of one module (or one tuple sharding)
 * together: each sharding alone is bounded above, but a 150 KB module of
 * 2,100 parameters with a 65536-device iota sharding each asked for 1 GiB
 * of ids. 2^26 ids are 512 MiB; a v3-2048 pod's 4096 cores allow 16,384
 * shardings over every core (doc/robustness.md). */
#define PS_SHARDING_MAX_MODULE_IDS ((int64_t) 1 << 26)

/* Constructors (normalising). */
PsSharding *ps_sharding_replicated (void);
PsSharding *ps_sharding_manual (void);
PsSharding *ps_sharding_unknown (void);
PsSharding *ps_sharding_maximal (int64_t device);
/* Tiled over all tile dims (no subgroups): devices has prod(dims) ids. */
PsSharding *ps_sharding_tiled (int n_dims, const int64_t *dims, const int64_t *devices);
/* Tiled with trailing subgroup dims of the given kinds. */
PsSharding *ps_sharding_subgroup (int n_dims, const int64_t *dims, const int64_t *devices,
                                  int n_subgroups, const PsSubgroupKind *kinds);
/* The same taking ownership of `devices`, which must be valid (prod(dims)
 * unique ids >= 0; not checked: a programmer error otherwise). This is the
 * one normalising constructor every TILED sharding goes through (the
 * parser, the constructors above, mesh_split), so all of them agree on the
 * canonical form; propagation calls it directly on tile arrays it has just
 * computed, without a copy. */
PsSharding *ps_sharding_subgroup_take (int n_dims, const int64_t *dims, int64_t *devices,
                                       int n_subgroups, const PsSubgroupKind *kinds);
/* Tiled with the last dim replicated (last_tile_dim_replicate). */
PsSharding *ps_sharding_partial (int n_dims, const int64_t *dims, const int64_t *devices);
/* Takes ownership of the elements. */
PsSharding *ps_sharding_tuple (int n, PsSharding **elems);
/* A tuple sharding giving every leaf of `shape` a copy of `s`; returns a
 * copy of s when shape is not a tuple or s is already a tuple. */
PsSharding *ps_sharding_expand_to_shape (const PsSharding *s, const PsShape *shape);

/* mesh_split(tensor, mesh, dims_mapping) as the GSPMD paper defines it:
 * tensor dim i is split over mesh dim dims_mapping[i] (-1: not split); mesh
 * dims no tensor dim uses become one trailing replicated subgroup dim.
 * mesh_devices lists the mesh's device ids row-major (NULL = arange).
 * Returns NULL with an error when a mesh dim is used twice or is out of range. */
PsSharding *ps_sharding_mesh_split (int rank, int mesh_rank, const int64_t *mesh_dims,
                                    const int64_t *mesh_devices,
                                    const int64_t *dims_mapping, GError **error);

/* Queries. */
gboolean ps_sharding_is_replicated (const PsSharding *s); /* tuples: all leaves */
gboolean ps_sharding_is_tiled (const PsSharding *s);      /* TILED kind */
gboolean ps_sharding_is_manual (const PsSharding *s);     /* fully manual */
gboolean ps_sharding_is_maximal (const PsSharding *s);
gboolean ps_sharding_is_tuple (const PsSharding *s);
/* Number of data dims of a TILED sharding (tile dims minus subgroup dims). */
int ps_sharding_data_rank (const PsSharding *s);
/* Product of the data tile dims (1 for non-tiled). */
int64_t ps_sharding_num_tiles (const PsSharding *s);
/* Product of replicated subgroup dims (1 when none). */
int64_t ps_sharding_replication (const PsSharding *s);
gboolean ps_sharding_has_manual_subgroup (const PsSharding *s);
/* Whether a device id appears in the sharding. */
gboolean ps_sharding_uses_device (const PsSharding *s, int64_t device);
/* Number of devices a sharding needs (max id + 1); 0 for replicated. */
int64_t ps_sharding_min_devices (const PsSharding *s);
/* Device ids the sharding stores (its tile assignment; a tuple's: all its
 * elements'), what its memory grows with. */
int64_t ps_sharding_n_ids (const PsSharding *s);

/* The tile index (one coordinate per tile dim, subgroup dims included) of
 * `device` in a TILED sharding. FALSE if the device is not in it. */
gboolean ps_sharding_device_index (const PsSharding *s, int64_t device, int64_t *index);
/* Local (per-device) shape of an array of `shape` under a TILED sharding:
 * each data dim rounded up to a multiple of its shard count, divided.
 * Non-tiled shardings give the full shape. Tuples per leaf. transfer full. */
PsShape *ps_sharding_tile_shape (const PsSharding *s, const PsShape *shape);
/* Offsets and limits (exclusive, clamped to the dim size) of `device`'s
 * tile in each data dim. For uneven dims the last tiles may be short or
 * empty (limit <= offset). FALSE if the device holds no tile. */
gboolean ps_sharding_tile_bounds (const PsSharding *s, const PsShape *shape, int64_t device,
                                  int64_t *offsets, int64_t *limits);
/* Subsharding of a tuple sharding for leaf `leaf` (depth-first index);
 * non-tuples return a copy. */
PsSharding *ps_sharding_leaf (const PsSharding *s, int leaf);

G_END_DECLS

#endif

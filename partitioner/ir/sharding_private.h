/* Internals shared by sharding.c and sharding_text.c; not for other modules.
 *
 * ps_sharding_make_tiled_ is the one normalising constructor every TILED
 * sharding goes through (the parser, the public constructors, mesh_split),
 * so all of them agree on the canonical form. It takes ownership of
 * `devices` and trusts that they were validated (prod(dims) unique ids >= 0).
 */
#ifndef PS_PARTITIONER_SHARDING_PRIVATE_H
#define PS_PARTITIONER_SHARDING_PRIVATE_H

#include "partitioner/ir/sharding.h"

G_BEGIN_DECLS

/* Tile-assignment rank limit: generous (XLA tests use up to 7) and keeps the
 * normaliser's scratch arrays on the stack. */
#define PS_SHARDING_MAX_DIMS 32
/* Device-array size limit, so a typo like [100000,100000] is an error, not
 * an allocation failure. A full TPU v3 pod has 2048 cores. */
#define PS_SHARDING_MAX_DEVICES ((int64_t) 1 << 22)

PsSharding *ps_sharding_make_tiled_ (int n_dims, const int64_t *dims, int64_t *devices,
                                     int n_sub, const PsSubgroupKind *kinds);
/* iota(prod(reshape)) reshaped and transposed by perm (NULL: identity).
 * transfer full. */
int64_t *ps_sharding_expand_iota_ (int n_reshape, const int64_t *reshape,
                                   const int64_t *perm);

G_END_DECLS

#endif

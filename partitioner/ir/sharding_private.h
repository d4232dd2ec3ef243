/* Private to sharding*.c (partitioner/ir/, private prefix sh_; see
 * doc/architecture.md): what sharding.c and sharding_text.c share. */
#ifndef PS_PARTITIONER_SHARDING_PRIVATE_H
#define PS_PARTITIONER_SHARDING_PRIVATE_H

#include "partitioner/ir/sharding.h"

G_BEGIN_DECLS

/* iota(prod(reshape)) reshaped and transposed by perm (NULL: identity).
 * transfer full. */
int64_t *sh_expand_iota (int n_reshape, const int64_t *reshape, const int64_t *perm);

G_END_DECLS

#endif

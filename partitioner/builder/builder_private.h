/* Private to builder*.c (partitioner/builder/, private prefix bd_; see
 * doc/architecture.md): what builder.c and builder_ops.c share.
 *
 * The helpers implement the builder's error discipline: bd_usable()
 * is FALSE when an earlier error is recorded or an operand is NULL (so the
 * caller returns NULL and adds nothing), bd_fail() records only the
 * first error, bd_add() appends an instruction (taking the shape)
 * under the name set by ps_builder_name_next().
 */
#ifndef PS_PARTITIONER_BUILDER_PRIVATE_H
#define PS_PARTITIONER_BUILDER_PRIVATE_H

#include "partitioner/builder/builder.h"

G_BEGIN_DECLS

struct PsBuilder {
  PsModule *m;
  PsComputation *c;
  GError *error;
  char *next_name;
  char *metadata;            /* op_name scope given to new instructions, or NULL */
  int mesh_rank;
  int64_t *mesh_dims;
  int64_t *mesh_devices;     /* NULL = arange */
  gboolean closure;          /* ps_builder_allow_closure */
};

void bd_fail (PsBuilder *b, const char *op, const char *fmt, ...) G_GNUC_PRINTF (3, 4);
gboolean bd_usable (PsBuilder *b, int n, PsInstr *const *xs);
gboolean bd_usable1 (PsBuilder *b, PsInstr *x);
gboolean bd_usable2 (PsBuilder *b, PsInstr *x, PsInstr *y);
/* Takes ownership of shape. */
PsInstr *bd_add (PsBuilder *b, PsOpcode op, PsShape *shape, int n,
                 PsInstr *const *operands);
char *bd_shape_str (const PsInstr *x);           /* transfer full */
gboolean bd_is_array (PsBuilder *b, const char *op, PsInstr *x);
gboolean bd_same_type (PsBuilder *b, const char *op, PsInstr *x, PsInstr *y);
/* Integer range of an element type (pred 0..1); FALSE for non-integers. */
gboolean bd_int_range (PsElemType t, int64_t *lo, uint64_t *hi);
gboolean bd_is_binary_op (PsOpcode op);

G_END_DECLS

#endif

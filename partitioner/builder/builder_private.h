/* Internals shared by builder.c and builder_ops.c; not for other modules.
 *
 * The helpers implement the builder's error discipline: ps_builder_usable_()
 * is FALSE when an earlier error is recorded or an operand is NULL (so the
 * caller returns NULL and adds nothing), ps_builder_fail_() records only the
 * first error, ps_builder_add_() appends an instruction (taking the shape)
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
};

void ps_builder_fail_ (PsBuilder *b, const char *op, const char *fmt, ...) G_GNUC_PRINTF (3, 4);
gboolean ps_builder_usable_ (PsBuilder *b, int n, PsInstr *const *xs);
gboolean ps_builder_usable1_ (PsBuilder *b, PsInstr *x);
gboolean ps_builder_usable2_ (PsBuilder *b, PsInstr *x, PsInstr *y);
/* Takes ownership of shape. */
PsInstr *ps_builder_add_ (PsBuilder *b, PsOpcode op, PsShape *shape, int n,
                          PsInstr *const *operands);
char *ps_builder_shape_str_ (const PsInstr *x);           /* transfer full */
gboolean ps_builder_is_array_ (PsBuilder *b, const char *op, PsInstr *x);
gboolean ps_builder_same_type_ (PsBuilder *b, const char *op, PsInstr *x, PsInstr *y);
/* Integer range of an element type (pred 0..1); FALSE for non-integers. */
gboolean ps_builder_int_range_ (PsElemType t, int64_t *lo, uint64_t *hi);
gboolean ps_builder_is_binary_op_ (PsOpcode op);

G_END_DECLS

#endif

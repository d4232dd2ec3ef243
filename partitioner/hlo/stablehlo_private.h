/* What the StableHLO reader's files share (stablehlo.h is the module's
 * public face). The reader is a recursive-descent translator from MLIR text
 * to HLO text: a cursor over the borrowed text (Sl), the HLO lines of the
 * function being read, and the first error, after which every helper
 * returns at once. Split along its seams: the lexer and the type and
 * literal forms (stablehlo_lex.c), attribute dictionaries and Shardy
 * shardings (stablehlo_sdy.c), regions and the operations that hold them
 * (stablehlo_regions.c), the operation table (stablehlo_ops.c) and its
 * operations with structured dimension numbers (stablehlo_indexing.c), and the
 * functions and the module (stablehlo_reader.c). Private to stablehlo*.c;
 * prefix sl_, Sl, SL_.
 */
#ifndef PS_PARTITIONER_STABLEHLO_PRIVATE_H
#define PS_PARTITIONER_STABLEHLO_PRIVATE_H

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  const char *t;
  gsize len, pos;
  const char *file;
  GError *err;
  GString *callees;          /* the non-entry computations, each after its callees */
  GString *entry;            /* the entry computation */
  GPtrArray *body;           /* the function being read: one HLO line each (char*) */
  GHashTable *line_of;       /* SSA name (HLO) -> 1 + its index in body */
  GHashTable *shapes;        /* SSA name (HLO) -> HLO shape text, per function */
  int64_t num_partitions;
  char *module_name;
  int n_reducers;
  GPtrArray *funcs;          /* the private functions read, in file order */
  GPtrArray *calls;          /* the callees of the function being read (char*) */
  GHashTable *meshes;        /* sdy.mesh name -> SlMesh* */
} Sl;

/* A Shardy mesh: named axes, major to minor, over devices 0..n-1 in order. */
typedef struct {
  GPtrArray *axes;           /* char* */
  GArray *sizes;             /* int64_t */
} SlMesh;

#define SL_FAILED(s) ((s)->err != NULL)
#define SL_CUR(s) ((s)->pos < (s)->len ? (s)->t[(s)->pos] : '\0')

/* stablehlo_lex.c: the lexer and the type and literal forms */
void G_GNUC_PRINTF (3, 4) sl_error (Sl *s, gsize off, const char *fmt, ...);
void sl_skip_ws (Sl *s);
gboolean sl_accept (Sl *s, const char *tok);
char *sl_describe (Sl *s);
gboolean sl_expect (Sl *s, const char *tok, const char *why);
char *sl_word (Sl *s);
char *sl_ssa (Sl *s, const char *what);
char *sl_tensor_type (Sl *s);
char *sl_result_type (Sl *s);
gboolean sl_int_list (Sl *s, GString *out);
char *sl_string_lit (Sl *s);
char *sl_dense_value (Sl *s);
gboolean sl_keyed_list (Sl *s, const char *key, GString *out);
char *sl_number (Sl *s);
char *sl_hex_floats (Sl *s, gsize at, const char *v, const char *shape);
char *sl_raw_value (Sl *s);

/* stablehlo_sdy.c: attribute dictionaries and Shardy shardings */
void sl_mesh_free (gpointer p);
gboolean sl_sdy_mesh (Sl *s);
char *sl_sdy_body (Sl *s);
gboolean sl_attr_dict (Sl *s, char **sharding);

/* stablehlo_regions.c: regions and the operations that hold them (reduce, while) */
char *sl_reducer (Sl *s, const char *op, const char *scalar);
gboolean sl_reduce_is_pretty_region (Sl *s);
gboolean sl_region (Sl *s, const char *name, gboolean generic, GPtrArray *targs, GPtrArray *ttypes, const char *tshape,
                int pairs);
gboolean sl_dims_attr (Sl *s, GString *out);
gboolean sl_reduce_with_region (Sl *s, const char *x, const char *c, const char *dims, gboolean generic, GString *rest);
char *sl_tuple_types (Sl *s, int n, GPtrArray *types);
gboolean sl_while_loop (Sl *s, gsize at, const char *name, int nres);
gboolean sl_reduce_several (Sl *s, gsize at, const char *name, int nres, const char *x0, const char *c0);

/* stablehlo_ops.c: the operation table, one HLO instruction per operation */
void sl_emit (Sl *s, gsize at, const char *name, const char *shape, const char *rest, const char *sharding);
gboolean sl_operands (Sl *s, GString *out, int *n);
gboolean sl_operation (Sl *s, char **returned, char **returned_shape);

/* stablehlo_indexing.c: gather, scatter and convolution (the generic form
 * for gather and scatter, both forms for convolution); the cursor is after
 * the operation's name; rest gets the HLO instruction after its shape */
gboolean sl_gather (Sl *s, gsize at, GString *rest, char **shape, char **sharding);
/* scatter and sort may have several results (nres): then they emit the
 * tuple instruction `name` and its elements themselves and leave *shape
 * NULL */
gboolean sl_scatter (Sl *s, gsize at, const char *name, int nres, GString *rest, char **shape, char **sharding);
gboolean sl_sort (Sl *s, gsize at, const char *name, int nres, GString *rest, char **shape, char **sharding);
gboolean sl_convolution (Sl *s, gsize at, gboolean generic, GString *rest, char **shape, char **sharding);

/* stablehlo_reader.c: functions, their order, the public entry points */
void sl_add_func (Sl *s, const char *name, char *text, GPtrArray *calls, gsize at);

G_END_DECLS

#endif

/* Private to shrink*.c (partitioner/interp/, private prefix sk_ and Sk; see
 * doc/architecture.md): the classes of dimensions that must
 * keep equal sizes (shrink_classes.c) and the per-op rules that join or pin
 * them (shrink_rules.c). See shrink.h for the method. */
#ifndef PS_PARTITIONER_SHRINK_PRIVATE_H
#define PS_PARTITIONER_SHRINK_PRIVATE_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

/* A class whose size is `mult` times another's: the merged dim of a
 * reshape whose major factor may shrink (the other factors are pinned). */
typedef struct {
  int node, src;
  int64_t mult;
} SkDeriv;

typedef struct {
  const PsModule *m;
  /* By instruction id: index of its first leaf in the leaf arrays, and its
   * leaf count (0 for ids not in the module). */
  int *first_leaf, *n_leaves;
  GArray *leaf_node;      /* int: first node of each leaf */
  GArray *leaf_rank;      /* int */
  /* By node: union-find parent, size, pinned flag, shard-count lcm. */
  GArray *parent;         /* int */
  GArray *size;           /* int64_t */
  GArray *pinned;         /* gboolean */
  GArray *modulus;        /* int64_t */
  GArray *derivs;         /* SkDeriv */
} SkShrink;

#define NODE_PARENT(sh, n) g_array_index ((sh)->parent, int, (n))
#define NODE_SIZE(sh, n) g_array_index ((sh)->size, int64_t, (n))
#define NODE_PINNED(sh, n) g_array_index ((sh)->pinned, gboolean, (n))
#define NODE_MOD(sh, n) g_array_index ((sh)->modulus, int64_t, (n))

/* Nodes: one per dimension of every array leaf of every instruction. */
void sk_shrink_init (SkShrink *sh, const PsModule *m);
void sk_shrink_clear (SkShrink *sh);
int sk_find (SkShrink *sh, int n);                 /* class root, path-compressing */
int sk_leaf_index (const SkShrink *sh, const PsInstr *in, int leaf);   /* -1 if none */
int sk_leaf_rank (const SkShrink *sh, const PsInstr *in, int leaf);    /* -1 if none */
int sk_node_of (const SkShrink *sh, const PsInstr *in, int leaf, int64_t dim); /* -1 if none */
int sk_n_leaves (const SkShrink *sh, const PsInstr *in);
int sk_element_first_leaf (const PsShape *s, int64_t k);

/* Pinning keeps a node's size; uniting joins two nodes of equal size (of
 * unequal sizes: pins both). Negative nodes and missing leaves are
 * ignored or pinned as the function says. */
void sk_pin_node (SkShrink *sh, int n);
void sk_pin (SkShrink *sh, const PsInstr *in, int leaf, int64_t dim);
void sk_pin_leaf (SkShrink *sh, const PsInstr *in, int leaf);
void sk_pin_instr (SkShrink *sh, const PsInstr *in);
void sk_pin_all (SkShrink *sh, const PsInstr *in);   /* the instruction and its operands */
void sk_unite_nodes (SkShrink *sh, int a, int b);
void sk_unite (SkShrink *sh, const PsInstr *a, int la, int64_t da, const PsInstr *b, int lb, int64_t db);
void sk_unite_leaf (SkShrink *sh, const PsInstr *a, int la, const PsInstr *b, int lb);
void sk_unite_leaves (SkShrink *sh, const PsInstr *a, int la, const PsInstr *b, int lb, int count);
void sk_unite_value (SkShrink *sh, const PsInstr *a, const PsInstr *b);
/* Records that node's size is mult times src's (both >= 0). */
void sk_derive (SkShrink *sh, int node, int src, int64_t mult);

/* Records the shard counts of `in`'s sharding on its nodes. */
void sk_note_sharding (SkShrink *sh, const PsInstr *in);
/* Joins and pins the nodes of `in` and its operands as its opcode requires
 * (shrink_rules.c). */
void sk_constrain (SkShrink *sh, const PsInstr *in);

G_END_DECLS

#endif

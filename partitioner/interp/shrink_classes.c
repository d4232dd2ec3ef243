/* Classes of dimensions for scaled copies (see shrink.h): one node per
 * dimension of every array value, union-find over nodes, pins and shard
 * counts. */
#include "config.h"

#include "partitioner/ir/sharding.h"
#include "partitioner/interp/shrink_private.h"

/* ---- dimension nodes and their classes ---------------------------------- */

int
sk_find (SkShrink *sh, int n)
{
  int r = n;
  while (NODE_PARENT (sh, r) != r)
    r = NODE_PARENT (sh, r);
  while (NODE_PARENT (sh, n) != r)
    {
      int next = NODE_PARENT (sh, n);
      NODE_PARENT (sh, n) = r;
      n = next;
    }
  return r;
}

int
sk_leaf_index (const SkShrink *sh, const PsInstr *in, int leaf)
{
  if (in->id < 0 || !sh->n_leaves[in->id] || leaf < 0 || leaf >= sh->n_leaves[in->id])
    return -1;
  return sh->first_leaf[in->id] + leaf;
}

int
sk_leaf_rank (const SkShrink *sh, const PsInstr *in, int leaf)
{
  int li = sk_leaf_index (sh, in, leaf);
  return li < 0 ? -1 : g_array_index (sh->leaf_rank, int, li);
}

int
sk_node_of (const SkShrink *sh, const PsInstr *in, int leaf, int64_t dim)
{
  int li = sk_leaf_index (sh, in, leaf);
  if (li < 0 || dim < 0 || dim >= g_array_index (sh->leaf_rank, int, li))
    return -1;
  return g_array_index (sh->leaf_node, int, li) + (int) dim;
}

void
sk_pin_node (SkShrink *sh, int n)
{
  if (n >= 0)
    NODE_PINNED (sh, n) = TRUE;
}

void
sk_pin (SkShrink *sh, const PsInstr *in, int leaf, int64_t dim)
{
  sk_pin_node (sh, sk_node_of (sh, in, leaf, dim));
}

void
sk_pin_leaf (SkShrink *sh, const PsInstr *in, int leaf)
{
  for (int d = 0; d < sk_leaf_rank (sh, in, leaf); d++)
    sk_pin (sh, in, leaf, d);
}

void
sk_pin_instr (SkShrink *sh, const PsInstr *in)
{
  if (in->id >= 0)
    for (int l = 0; l < sh->n_leaves[in->id]; l++)
      sk_pin_leaf (sh, in, l);
}

/* Pins an instruction and all its operands: the op depends on their sizes
 * in ways the classes do not model. */
void
sk_pin_all (SkShrink *sh, const PsInstr *in)
{
  sk_pin_instr (sh, in);
  for (int i = 0; i < in->n_operands; i++)
    sk_pin_instr (sh, in->operands[i]);
}

void
sk_unite_nodes (SkShrink *sh, int a, int b)
{
  if (a < 0 || b < 0)
    return;
  if (NODE_SIZE (sh, a) != NODE_SIZE (sh, b))
    {
      /* Sizes the op relates in a way not modelled (e.g. an operand
       * broadcast implicitly): keep both. */
      sk_pin_node (sh, a);
      sk_pin_node (sh, b);
      return;
    }
  int ra = sk_find (sh, a), rb = sk_find (sh, b);
  if (ra != rb)
    NODE_PARENT (sh, ra) = rb;
}

void
sk_unite (SkShrink *sh, const PsInstr *a, int la, int64_t da, const PsInstr *b, int lb, int64_t db)
{
  int na = sk_node_of (sh, a, la, da), nb = sk_node_of (sh, b, lb, db);
  if (na < 0 || nb < 0)
    {
      sk_pin_node (sh, na);
      sk_pin_node (sh, nb);
      return;
    }
  sk_unite_nodes (sh, na, nb);
}

/* Joins two leaves dim by dim; leaves of different ranks are pinned. */
void
sk_unite_leaf (SkShrink *sh, const PsInstr *a, int la, const PsInstr *b, int lb)
{
  int ra = sk_leaf_rank (sh, a, la), rb = sk_leaf_rank (sh, b, lb);
  if (ra != rb || ra < 0)
    {
      sk_pin_leaf (sh, a, la);
      sk_pin_leaf (sh, b, lb);
      return;
    }
  for (int d = 0; d < ra; d++)
    sk_unite (sh, a, la, d, b, lb, d);
}

void
sk_unite_leaves (SkShrink *sh, const PsInstr *a, int la, const PsInstr *b, int lb, int count)
{
  for (int i = 0; i < count; i++)
    sk_unite_leaf (sh, a, la + i, b, lb + i);
}

int
sk_n_leaves (const SkShrink *sh, const PsInstr *in)
{
  return in->id >= 0 ? sh->n_leaves[in->id] : 0;
}

/* Whole values of equal structure (tuples leaf by leaf). */
void
sk_unite_value (SkShrink *sh, const PsInstr *a, const PsInstr *b)
{
  if (sk_n_leaves (sh, a) != sk_n_leaves (sh, b))
    {
      sk_pin_instr (sh, a);
      sk_pin_instr (sh, b);
      return;
    }
  sk_unite_leaves (sh, a, 0, b, 0, sk_n_leaves (sh, a));
}

/* Index of the first leaf of tuple element k of `s`. */
int
sk_element_first_leaf (const PsShape *s, int64_t k)
{
  int off = 0;
  for (int64_t j = 0; j < k && j < s->n_elems; j++)
    off += ps_shape_leaf_count (s->elems[j]);
  return off;
}

void
sk_derive (SkShrink *sh, int node, int src, int64_t mult)
{
  if (node < 0 || src < 0 || mult < 1)
    {
      sk_pin_node (sh, node);
      sk_pin_node (sh, src);
      return;
    }
  SkDeriv d = { node, src, mult };
  g_array_append_val (sh->derivs, d);
}

/* ---- shard counts ----------------------------------------------------------- */

void
sk_note_sharding (SkShrink *sh, const PsInstr *in)
{
  const PsSharding *s = in->sharding;
  if (!s)
    return;
  for (int l = 0; l < sk_n_leaves (sh, in); l++)
    {
      const PsSharding *ls = s;
      if (s->kind == PS_SHARDING_TUPLE)
        {
          if (l >= s->n_elems)
            return;
          ls = s->elems[l];
        }
      if (ls->kind != PS_SHARDING_TILED)
        continue;
      int rank = sk_leaf_rank (sh, in, l);
      if (ls->n_tile_dims - ls->n_subgroups != rank)
        {
          sk_pin_leaf (sh, in, l);
          continue;
        }
      for (int d = 0; d < rank; d++)
        {
          int n = sk_node_of (sh, in, l, d);
          int64_t t = ls->tile_dims[d], m = NODE_MOD (sh, n);
          if (t > 1)
            NODE_MOD (sh, n) = m / ps_gcd64 (m, t) * t;
        }
    }
}

/* ---- nodes of a module ---------------------------------------------------------- */

void
sk_shrink_init (SkShrink *sh, const PsModule *m)
{
  sh->m = m;
  int n_ids = m->next_id + 1;
  sh->first_leaf = g_new0 (int, n_ids);
  sh->n_leaves = g_new0 (int, n_ids);
  sh->leaf_node = g_array_new (FALSE, FALSE, sizeof (int));
  sh->leaf_rank = g_array_new (FALSE, FALSE, sizeof (int));
  sh->parent = g_array_new (FALSE, FALSE, sizeof (int));
  sh->size = g_array_new (FALSE, FALSE, sizeof (int64_t));
  sh->pinned = g_array_new (FALSE, FALSE, sizeof (gboolean));
  sh->modulus = g_array_new (FALSE, FALSE, sizeof (int64_t));
  sh->derivs = g_array_new (FALSE, FALSE, sizeof (SkDeriv));
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          const PsInstr *in = c->instrs->pdata[i];
          if (in->id < 0 || in->id >= n_ids)
            continue;
          GPtrArray *leaves = ps_shape_leaves (in->shape);
          sh->first_leaf[in->id] = (int) sh->leaf_node->len;
          sh->n_leaves[in->id] = (int) leaves->len;
          for (guint l = 0; l < leaves->len; l++)
            {
              const PsShape *ls = leaves->pdata[l];
              int first = (int) sh->parent->len, rank = ls->etype == PS_TOKEN ? 0 : ls->rank;
              g_array_append_val (sh->leaf_node, first);
              g_array_append_val (sh->leaf_rank, rank);
              for (int d = 0; d < rank; d++)
                {
                  int n = first + d;
                  int64_t one = 1;
                  g_array_append_val (sh->parent, n);
                  g_array_append_val (sh->size, ls->dims[d]);
                  /* Dynamic dims ("<=N") keep their bound. */
                  gboolean pinned = ls->dynamic && ls->dynamic[d];
                  g_array_append_val (sh->pinned, pinned);
                  g_array_append_val (sh->modulus, one);
                }
            }
          g_ptr_array_free (leaves, TRUE);
        }
    }
}

void
sk_shrink_clear (SkShrink *sh)
{
  g_free (sh->first_leaf);
  g_free (sh->n_leaves);
  g_array_free (sh->leaf_node, TRUE);
  g_array_free (sh->leaf_rank, TRUE);
  g_array_free (sh->parent, TRUE);
  g_array_free (sh->size, TRUE);
  g_array_free (sh->pinned, TRUE);
  g_array_free (sh->modulus, TRUE);
  g_array_free (sh->derivs, TRUE);
}

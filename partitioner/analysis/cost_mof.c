/* Multi-output fusion (cost.h, rules 6-8): merges the fusions cost.c
 * made into the multi-output fusions XLA's passes make, each rule named
 * with its source below and in doc/compute-model.md ("Fusion"). */
#include "config.h"

#include "partitioner/analysis/cost_private.h"

static PsCost *
cost_of (PsCostAnalysis *a, const PsInstr *in)
{
  return ps_cost_lookup (a, in);
}

static uint64_t
elems_of (const PsShape *s)
{
  int64_t e = ps_shape_is_array (s) ? ps_shape_elements (s) : 0;
  return e > 0 ? (uint64_t) e : 0;
}

typedef struct {
  PsCostAnalysis *a;
  const PsComputation *comp;
  GHashTable *pos;         /* PsInstr* -> 1 + post index */
  GHashTable *merged;      /* roots of the fusions merges made */
} Mof;

static int
mof_pos (const Mof *m, const PsInstr *in)
{
  return GPOINTER_TO_INT (g_hash_table_lookup (m->pos, in)) - 1;
}

static const PsInstr *
group_root (const Mof *m, const PsInstr *in)
{
  const PsCost *c = cost_of (m->a, in);
  return c ? c->root : NULL;
}

/* What a multi-output fusion may be made of (XLA's GPU
 * IsFusibleAsMultiOutputFusionRoot and IsProducerMultiOutputFusible in
 * xla/service/gpu/gpu_fusible.cc): a loop fusion (elementwise ops, the
 * bitcasts between them) or an input fusion (reduces of one array and
 * elementwise ops; the computation's result, last in post order, can
 * only be the root of a merged fusion). *loop: the
 * elements of its loop shape (ShapesCompatibleForMultiOutputFusion's
 * get_loop_shape: a reduce's operand, else the root); *n_reduce its
 * reduces, *row_wise whether all of them are row-wise (fusion.h). */
static gboolean
mof_group (const Mof *m, const PsInstr *root, uint64_t *loop, int *n_reduce, gboolean *row_wise)
{
  GPtrArray *g = g_hash_table_lookup (m->a->members, root);
  if (!g || !ps_shape_is_array (root->shape))
    return FALSE;
  *n_reduce = 0;
  *row_wise = TRUE;
  *loop = elems_of (root->shape);
  uint64_t red = 0;
  for (guint i = 0; i < g->len; i++)
    {
      const PsInstr *x = g_ptr_array_index (g, i);
      const PsCost *xc = cost_of (m->a, x);
      if (x->opcode == PS_OP_REDUCE)
        {
          if (x->n_operands != 2 || !ps_shape_is_array (x->shape))
            return FALSE;
          uint64_t l = elems_of (x->operands[0]->shape);
          if (*n_reduce > 0 && l != red)
            return FALSE;
          red = l;
          (*n_reduce)++;
          *row_wise = *row_wise && ps_fusion_reduce_row_wise (x);
        }
      else if (xc->klass != PS_COST_ELEMENTWISE && xc->klass != PS_COST_INLINED
               && !(xc->klass == PS_COST_FREE
                    && (x->opcode == PS_OP_RESHAPE || x->opcode == PS_OP_BITCAST)))
        return FALSE;
    }
  if (*n_reduce > 0)
    *loop = red;
  return TRUE;
}

/* A value the fusion's operands reach without a kernel of their own:
 * broadcasts, iotas and slices read in place, duplicated producers, and
 * reshapes and bitcasts left outside fusions. */
static gboolean
pass_through (const Mof *m, const PsInstr *u)
{
  const PsCost *uc = cost_of (m->a, u);
  return u != m->comp->root
         && (uc->klass == PS_COST_INLINED
             || (uc->klass == PS_COST_FREE && !uc->fused
                 && (u->opcode == PS_OP_RESHAPE || u->opcode == PS_OP_BITCAST)));
}

/* Is `v` (a member of the fusion rooted at `root`, or of `other`) read
 * by an instruction of neither fusion that comes before post index
 * `last`? Then the two cannot be one kernel in the program's post order
 * (the schedule's third candidate and the order of loop conditions): the
 * merge is refused. This also rules out every cycle (a path from the
 * fusion through an outside instruction back into it needs such a
 * reader), which is what XLA's reachability check
 * (MultiOutputFusion::LegalToFusePreliminaryConstraints, is_connected)
 * is for; it is stricter than XLA's. Sets *escapes when `v` is read
 * outside at all. */
static gboolean
read_early (const Mof *m, const PsInstr *v, const PsInstr *root, const PsInstr *other, int last,
            gboolean *escapes, int depth)
{
  if (v == m->comp->root)
    *escapes = TRUE;
  for (guint i = 0; i < v->users->len; i++)
    {
      const PsInstr *u = g_ptr_array_index (v->users, i);
      const PsInstr *r = group_root (m, u);
      /* (a value without a kernel, inside or not, is computed by each of
       * its readers from v) */
      if (depth < 16 && pass_through (m, u))
        {
          if (read_early (m, u, root, other, last, escapes, depth + 1))
            return TRUE;
          continue;
        }
      if (r == root || (other && r == other))
        continue;
      *escapes = TRUE;
      if (last >= 0 && mof_pos (m, u) < last)
        return TRUE;
    }
  return FALSE;
}

/* Is `x` an element of the entry's result written over a donated
 * parameter? Such an output must come after every other reader of the
 * parameter (schedule.c's donation edges); a fusion writing it and values
 * those readers need would be a cycle, so it stays out of multi-output
 * fusions (as XLA's LegalToFuseMainConstraints keeps in-place outputs
 * that share a buffer apart). */
static gboolean
donated_output (const Mof *m, const PsInstr *x)
{
  const PsModule *mod = m->comp->parent;
  const PsInstr *root = m->comp->root;
  if (!mod || m->comp != mod->entry || !root || root->opcode != PS_OP_TUPLE)
    return FALSE;
  for (int i = 0; i < mod->n_aliases; i++)
    {
      const PsAlias *al = &mod->aliases[i];
      if (al->output_index.n == 1 && al->output_index.v[0] >= 0
          && al->output_index.v[0] < root->n_operands && root->operands[al->output_index.v[0]] == x)
        return TRUE;
    }
  return FALSE;
}

static gboolean
merge_valid (const Mof *m, const PsInstr *ra, const PsInstr *rb)
{
  int last = MAX (mof_pos (m, ra), mof_pos (m, rb));
  const PsInstr *roots[2] = { ra, rb };
  for (int k = 0; k < 2; k++)
    {
      GPtrArray *g = g_hash_table_lookup (m->a->members, roots[k]);
      for (guint i = 0; i < g->len; i++)
        {
          gboolean esc = FALSE;
          if (donated_output (m, g_ptr_array_index (g, i))
              || read_early (m, g_ptr_array_index (g, i), ra, rb, last, &esc, 0))
            return FALSE;
        }
    }
  return TRUE;
}

/* One fusion of the two: the later root is its root, the members in
 * program (post) order. */
static const PsInstr *
merge_groups (Mof *m, const PsInstr *ra, const PsInstr *rb)
{
  if (mof_pos (m, ra) > mof_pos (m, rb))
    {
      const PsInstr *t = ra;
      ra = rb;
      rb = t;
    }
  GPtrArray *ga = NULL;
  g_hash_table_steal_extended (m->a->members, ra, NULL, (gpointer *) &ga);
  GPtrArray *gb = g_hash_table_lookup (m->a->members, rb);
  GPtrArray *g = g_ptr_array_sized_new (ga->len + gb->len);
  guint i = 0, j = 0;
  while (i < ga->len || j < gb->len)
    {
      gboolean take_a = j >= gb->len
                        || (i < ga->len && mof_pos (m, g_ptr_array_index (ga, i))
                                           < mof_pos (m, g_ptr_array_index (gb, j)));
      g_ptr_array_add (g, take_a ? g_ptr_array_index (ga, i++) : g_ptr_array_index (gb, j++));
    }
  for (guint k = 0; k < ga->len; k++)
    {
      PsCost *c = cost_of (m->a, g_ptr_array_index (ga, k));
      c->root = rb;
      c->fused = TRUE;
    }
  cost_of (m->a, rb)->head = g_ptr_array_index (g, 0);
  g_ptr_array_unref (ga);
  g_hash_table_insert (m->a->members, (gpointer) rb, g);
  g_hash_table_remove (m->merged, ra);
  g_hash_table_add (m->merged, (gpointer) rb);
  return rb;
}

/* The two fusions as one, when both can be in a multi-output fusion with
 * the same loop shape (`diamond`: the reduces of the merged one all
 * row-wise) and the merge keeps the program's order. */
static gboolean
try_merge (Mof *m, const PsInstr *ra, const PsInstr *rb, gboolean producer_no_reduce,
           gboolean diamond)
{
  uint64_t la, lb;
  int na, nb;
  gboolean wa, wb;
  if (!ra || !rb || ra == rb || !mof_group (m, ra, &la, &na, &wa) || !mof_group (m, rb, &lb, &nb, &wb)
      || la != lb || (producer_no_reduce && na > 0) || (diamond && !(wa && wb)))
    return FALSE;
  if (!merge_valid (m, ra, rb))
    return FALSE;
  merge_groups (m, ra, rb);
  return TRUE;
}

/* Does a member of the fusion rooted at `rb` read one of `ra`'s
 * (directly or through values without kernels)? */
static gboolean
reads_group (const Mof *m, const PsInstr *v, const PsInstr *ra, int depth)
{
  for (int j = 0; j < v->n_operands; j++)
    {
      const PsInstr *o = v->operands[j];
      if (group_root (m, o) == ra || (depth < 16 && pass_through (m, o) && reads_group (m, o, ra, depth + 1)))
        return TRUE;
    }
  return FALSE;
}

static gboolean
connected (const Mof *m, const PsInstr *ra, const PsInstr *rb)
{
  const PsInstr *roots[2] = { ra, rb };
  for (int k = 0; k < 2; k++)
    {
      GPtrArray *g = g_hash_table_lookup (m->a->members, roots[k]);
      for (guint i = 0; i < g->len; i++)
        if (reads_group (m, g_ptr_array_index (g, i), roots[1 - k], 0))
          return TRUE;
    }
  return FALSE;
}

/* The fusion whose reduce an elementwise op reads through a broadcast
 * (the normalization diamond: softmax's x / broadcast(sum x), layer
 * norm's (x - broadcast(mean)) * broadcast(rsqrt(var))), looking through
 * duplicated producers; NULL if none. */
static const PsInstr *
diamond_source (const Mof *m, const PsInstr *c, int depth)
{
  for (int j = 0; j < c->n_operands; j++)
    {
      const PsInstr *o = c->operands[j];
      const PsCost *oc = cost_of (m->a, o);
      if (!oc)
        continue;
      if (o->opcode == PS_OP_BROADCAST && oc->klass == PS_COST_INLINED && o->n_operands == 1)
        {
          const PsInstr *w = o->operands[0];
          for (int d = 0; d < 8 && (w->opcode == PS_OP_RESHAPE || w->opcode == PS_OP_BITCAST)
                          && w->n_operands == 1 && !cost_of (m->a, w)->fused; d++)
            w = w->operands[0];
          const PsInstr *r = group_root (m, w);
          uint64_t l;
          int n;
          gboolean row;
          if (r && r != group_root (m, c) && mof_group (m, r, &l, &n, &row) && n > 0 && row)
            return r;
        }
      else if (oc->duplicated && depth < 8)
        {
          const PsInstr *r = diamond_source (m, o, depth + 1);
          if (r)
            return r;
        }
    }
  return NULL;
}

static int
cmp_pos (gconstpointer x, gconstpointer y, gpointer data)
{
  const Mof *m = data;
  return mof_pos (m, *(const PsInstr *const *) x) - mof_pos (m, *(const PsInstr *const *) y);
}

/* A merged fusion computes inside itself the values without kernels
 * (broadcasts, duplicated producers, bitcasts) that read one of its
 * members and are read by one (softmax's broadcast of its maximum, read by
 * the subtraction): they become its members, so that no unit of the
 * schedule sits between two of its own. */
/* Is pass-through `x` (reached from fusion `root`) read by a member of
 * that fusion, directly or through other such values (memo: 1 yes, 2 no)? */
static gboolean
read_back (const Mof *m, const PsInstr *x, const PsInstr *root, GHashTable *reached, int depth)
{
  gpointer known = g_hash_table_lookup (reached, x);
  if (GPOINTER_TO_INT (known) >= 1 && GPOINTER_TO_INT (known) <= 2)
    return GPOINTER_TO_INT (known) == 1;
  gboolean yes = FALSE;
  for (guint k = 0; k < x->users->len && !yes; k++)
    {
      const PsInstr *u = g_ptr_array_index (x->users, k);
      if (g_hash_table_contains (reached, u))
        yes = depth < 64 && read_back (m, u, root, reached, depth + 1);
      else
        yes = group_root (m, u) == root;
    }
  g_hash_table_insert (reached, (gpointer) x, GINT_TO_POINTER (yes ? 1 : 2));
  return yes;
}

/* A merged fusion computes inside itself the values without kernels
 * (broadcasts, duplicated producers, bitcasts) that read one of its
 * members, directly or through others, and that one of its members reads
 * (softmax's broadcast of its maximum, read by the subtraction; a
 * residual add duplicated into a layer norm that reads its output): they
 * become its members, so that no unit of the schedule sits between two
 * of its own. */
static void
absorb_between (Mof *m)
{
  /* the merged fusions in post order: the result must not depend on
   * the addresses a hash table orders by */
  g_autoptr (GPtrArray) roots = g_ptr_array_new ();
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init (&it, m->merged);
  while (g_hash_table_iter_next (&it, &key, NULL))
    g_ptr_array_add (roots, key);
  g_ptr_array_sort_with_data (roots, cmp_pos, m);
  for (guint ri = 0; ri < roots->len; ri++)
    {
      gpointer root = g_ptr_array_index (roots, ri);
      GPtrArray *g = g_hash_table_lookup (m->a->members, root);
      /* the pass-through values reached from its members (value 3:
       * reached, not yet decided) */
      g_autoptr (GHashTable) reached = g_hash_table_new (NULL, NULL);
      g_autoptr (GPtrArray) stack = g_ptr_array_new ();
      for (guint i = 0; i < g->len; i++)
        g_ptr_array_add (stack, g_ptr_array_index (g, i));
      while (stack->len > 0)
        {
          const PsInstr *v = g_ptr_array_steal_index_fast (stack, stack->len - 1);
          for (guint k = 0; k < v->users->len; k++)
            {
              const PsInstr *u = g_ptr_array_index (v->users, k);
              if (group_root (m, u) == u && pass_through (m, u)
                  && !g_hash_table_contains (reached, u) && g_hash_table_size (reached) < 4096)
                {
                  g_hash_table_insert (reached, (gpointer) u, GINT_TO_POINTER (3));
                  g_ptr_array_add (stack, (gpointer) u);
                }
            }
        }
      g_autoptr (GPtrArray) take = g_ptr_array_new ();
      GHashTableIter rt;
      gpointer x;
      g_hash_table_iter_init (&rt, reached);
      while (g_hash_table_iter_next (&rt, &x, NULL))
        g_ptr_array_add (take, x);
      g_ptr_array_sort_with_data (take, cmp_pos, m);   /* deterministic */
      for (guint i = 0; i < take->len; i++)
        if (read_back (m, g_ptr_array_index (take, i), root, reached, 0))
          g_ptr_array_add (g, g_ptr_array_index (take, i));
      for (guint i = 0; i < take->len; i++)
        if (GPOINTER_TO_INT (g_hash_table_lookup (reached, g_ptr_array_index (take, i))) == 1)
          {
            PsInstr *xi = g_ptr_array_index (take, i);
            GPtrArray *own = NULL;
            g_hash_table_steal_extended (m->a->members, xi, NULL, (gpointer *) &own);
            if (own)
              g_ptr_array_unref (own);
            cost_of (m->a, xi)->root = root;
          }
      g_ptr_array_sort_with_data (g, cmp_pos, m);
    }
}

/* Do the fusions of comp, as units, form a cycle (Kahn's algorithm over
 * their roots)? The merge rules are built not to make one; this is the
 * guarantee the schedule relies on. */
static gboolean
has_cycle (const Mof *m, GPtrArray *order)
{
  guint n = order->len;
  g_autofree int *preds = g_new0 (int, n + 1);
  g_autoptr (GPtrArray) succ = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_ptr_array_set_size (succ, n);
  for (guint i = 0; i < n; i++)
    succ->pdata[i] = g_array_new (FALSE, FALSE, sizeof (int));
  for (guint i = 0; i < n; i++)
    {
      const PsInstr *x = g_ptr_array_index (order, i);
      int rx = mof_pos (m, group_root (m, x));
      for (int j = 0; j < x->n_operands; j++)
        {
          int ro = mof_pos (m, group_root (m, x->operands[j]));
          if (ro < 0 || rx < 0 || ro == rx)
            continue;
          g_array_append_val ((GArray *) succ->pdata[ro], rx);
          preds[rx]++;
        }
    }
  g_autoptr (GArray) ready = g_array_new (FALSE, FALSE, sizeof (int));
  guint roots = 0, done = 0;
  for (guint i = 0; i < n; i++)
    if (group_root (m, g_ptr_array_index (order, i)) == g_ptr_array_index (order, i))
      {
        roots++;
        if (preds[i] == 0)
          g_array_append_val (ready, i);
      }
  while (ready->len > 0)
    {
      int r = g_array_index (ready, int, ready->len - 1);
      g_array_set_size (ready, ready->len - 1);
      done++;
      GArray *e = succ->pdata[r];
      for (guint k = 0; k < e->len; k++)
        if (--preds[g_array_index (e, int, k)] == 0)
          g_array_append_val (ready, g_array_index (e, int, k));
    }
  return done != roots;
}

enum { MOF_MAX_SIBLINGS = 128 };   /* XLA's kUserSliceSize */

void
ps_cost_multi_output_fusion (PsCostAnalysis *a, const PsComputation *comp, GPtrArray *order)
{
  Mof m = { a, comp, g_hash_table_new (NULL, NULL), g_hash_table_new (NULL, NULL) };
  for (guint i = 0; i < order->len; i++)
    g_hash_table_insert (m.pos, g_ptr_array_index (order, i), GINT_TO_POINTER (i + 1));
  /* the fusions before, in case the merges made a cycle after all */
  g_autoptr (GHashTable) before = g_hash_table_new_full (NULL, NULL, NULL,
                                                         (GDestroyNotify) g_ptr_array_unref);
  for (guint i = 0; i < order->len; i++)
    {
      GPtrArray *g = g_hash_table_lookup (a->members, g_ptr_array_index (order, i));
      if (g)
        g_hash_table_insert (before, g_ptr_array_index (order, i), g_ptr_array_copy (g, NULL, NULL));
    }
  /* 6. a reduce and the elementwise producer of its operand that other
   *    instructions read too: one fusion writing both (producer-consumer
   *    multi-output fusion, XLA's GPU MultiOutputFusion::
   *    DoProducerConsumerMultiOutputFusion) */
  for (guint i = 0; i < order->len; i++)
    {
      const PsInstr *r = g_ptr_array_index (order, i);
      if (r->opcode != PS_OP_REDUCE || r->n_operands != 2)
        continue;
      const PsInstr *p = r->operands[0];
      for (int d = 0; d < 8 && (p->opcode == PS_OP_RESHAPE || p->opcode == PS_OP_BITCAST)
                      && p->n_operands == 1; d++)
        p = p->operands[0];
      const PsCost *pc = cost_of (a, p);
      if (pc && pc->klass == PS_COST_ELEMENTWISE)
        try_merge (&m, group_root (&m, p), group_root (&m, r), TRUE, FALSE);
    }
  /* 7. an elementwise consumer of a row-wise reduction's result, read
   *    through a broadcast, joins the reduction's fusion (the
   *    normalization diamond of XLA's GPU SoftmaxRewriterTriton) */
  for (guint i = 0; i < order->len; i++)
    {
      const PsInstr *c = g_ptr_array_index (order, i);
      const PsCost *cc = cost_of (a, c);
      if (cc->klass != PS_COST_ELEMENTWISE)
        continue;
      const PsInstr *r = diamond_source (&m, c, 0);
      if (r)
        try_merge (&m, r, group_root (&m, c), FALSE, TRUE);
    }
  /* 8. fusions reading one non-scalar value, neither reading the other:
   *    one sibling multi-output fusion reads it once (XLA's
   *    MultiOutputFusion, xla/service/multi_output_fusion.cc, and its GPU
   *    FuseSiblings) */
  for (guint i = 0; i < order->len; i++)
    {
      const PsInstr *v = g_ptr_array_index (order, i);
      const PsCost *vc = cost_of (a, v);
      if (v->users->len < 2 || !ps_shape_is_array (v->shape) || elems_of (v->shape) <= 1
          || vc->klass == PS_COST_INLINED)
        continue;
      const PsInstr *sib[MOF_MAX_SIBLINGS];
      int n = 0;
      for (guint k = 0; k < v->users->len && n < MOF_MAX_SIBLINGS; k++)
        {
          const PsInstr *r = group_root (&m, g_ptr_array_index (v->users, k));
          gboolean again = r == group_root (&m, v);
          for (int q = 0; q < n && !again; q++)
            again = sib[q] == r;
          if (!again)
            sib[n++] = r;
        }
      for (int x = 0; x < n; x++)
        for (int y = x + 1; y < n; y++)
          {
            const PsInstr *rx = group_root (&m, sib[x]), *ry = group_root (&m, sib[y]);
            if (rx != ry && !connected (&m, rx, ry))
              try_merge (&m, rx, ry, FALSE, FALSE);
          }
    }
  absorb_between (&m);
  if (g_hash_table_size (m.merged) > 0 && has_cycle (&m, order))
    {
      /* keep the single-output fusions of rules 1-5 for this computation */
      for (guint i = 0; i < order->len; i++)
        {
          PsInstr *x = g_ptr_array_index (order, i);
          GPtrArray *g = NULL;
          g_hash_table_remove (a->members, x);
          if (g_hash_table_steal_extended (before, x, NULL, (gpointer *) &g))
            g_hash_table_insert (a->members, x, g);
        }
    }
  g_hash_table_unref (m.pos);
  g_hash_table_unref (m.merged);
}

/* After multi-output fusion: which members of each fusion are read
 * outside it (its extra outputs). */
void
ps_cost_mark_outputs (PsCostAnalysis *a, const PsComputation *comp, GPtrArray *order)
{
  Mof m = { a, comp, NULL, NULL };
  for (guint i = 0; i < order->len; i++)
    {
      const PsInstr *root = g_ptr_array_index (order, i);
      GPtrArray *g = g_hash_table_lookup (a->members, root);
      for (guint j = 0; g && g->len > 1 && j + 1 < g->len; j++)
        {
          const PsInstr *x = g_ptr_array_index (g, j);
          gboolean esc = FALSE;
          /* a value without a kernel is computed again by its readers; a
           * tuple or get-tuple-element passes one element on */
          if (!pass_through (&m, x) && cost_of (a, x)->klass != PS_COST_FREE)
            read_early (&m, x, root, NULL, -1, &esc, 0);
          cost_of (a, x)->output = esc;
        }
    }
}


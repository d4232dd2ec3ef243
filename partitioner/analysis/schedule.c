/* The memory-aware, latency-hiding schedule of an SPMD program's entry
 * computation (see schedule.h). */
#include "config.h"

#include <string.h>

#include "partitioner/analysis/memory.h"
#include "partitioner/analysis/schedule.h"

static const char *const policy_names[PS_SCHEDULE_POLICY_COUNT + 1] = {
  [PS_SCHEDULE_XLA] = "xla",
  [PS_SCHEDULE_XLA_ALL] = "xla-all",
  [PS_SCHEDULE_SYNC] = "sync",
  [PS_SCHEDULE_EAGER] = "eager",
  [PS_SCHEDULE_POLICY_COUNT] = NULL,
};

static const char *const policy_docs[PS_SCHEDULE_POLICY_COUNT] = {
  [PS_SCHEDULE_XLA] = "memory-aware order, collective-permutes overlapped",
  [PS_SCHEDULE_XLA_ALL] = "every collective kind overlapped",
};

const PsParamSpec ps_schedule_param_policy = {
  .section = "options", .key = "schedule", .type = PS_PARAM_CHOICE, .def = "xla",
  .doc = "Schedule of the partitioned step (doc/partitioner.md)",
  .choice_names = policy_names, .choice_docs = policy_docs
};

const PsParamSpec ps_schedule_param_async = {
  .section = "options", .key = "async_collectives", .type = PS_PARAM_BOOL, .def = "false",
  .doc = "Same as schedule = eager: every collective overlapped as early and late as data allows",
  .search = "*"
};

const char *
ps_schedule_policy_name (PsSchedulePolicy p)
{
  return p >= 0 && p < PS_SCHEDULE_POLICY_COUNT ? policy_names[p] : "?";
}

gboolean
ps_schedule_policy_parse (const char *name, const char *option, PsSchedulePolicy *out,
                          GError **error)
{
  int p;
  if (!ps_parse_name (name, policy_names, PS_SCHEDULE_POLICY_COUNT, option, "schedule", &p, error))
    return FALSE;
  *out = p;
  return TRUE;
}

/* ---- units: a fusion, or one instruction -------------------------------- */

typedef struct {
  GArray *members;       /* post-order indices, root last */
  GArray *deps;          /* units it reads (unique) */
  GArray *users;         /* units reading it (unique) */
  GArray *uses;          /* buffers (units) it reads, unique */
  int64_t defined;       /* bytes its result allocates */
  int64_t user_count;    /* users of its root instruction (XLA's tie-break) */
  gboolean scalar;
} Unit;

typedef struct {
  const PsCostAnalysis *cost;
  GPtrArray *post;       /* entry post order */
  GHashTable *index;     /* PsInstr* -> 1 + post index */
  int *unit_of;          /* per post index */
  GArray *units;         /* Unit */
  GPtrArray *sources;    /* per post index: GArray of buffer units, lazily */
} Graph;

static int
post_index (const Graph *g, const PsInstr *in)
{
  return GPOINTER_TO_INT (g_hash_table_lookup (g->index, in)) - 1;
}

static gboolean
is_collective (const PsInstr *in)
{
  switch (in->opcode)
    {
    case PS_OP_ALL_REDUCE: case PS_OP_ALL_GATHER: case PS_OP_REDUCE_SCATTER:
    case PS_OP_ALL_TO_ALL: case PS_OP_COLLECTIVE_PERMUTE:
      return TRUE;
    default:
      return FALSE;
    }
}

/* Does the instruction's result get a buffer of its own? (memory.c's rule:
 * not a parameter or constant, which are live throughout, not an alias of
 * its operands, not inlined or fused.) */
static gboolean
materializes (const Graph *g, const PsInstr *in)
{
  switch (in->opcode)
    {
    case PS_OP_PARAMETER: case PS_OP_CONSTANT: case PS_OP_TUPLE: case PS_OP_GET_TUPLE_ELEMENT:
    case PS_OP_BITCAST: case PS_OP_RESHAPE: case PS_OP_WHILE: case PS_OP_OPTIMIZATION_BARRIER:
    case PS_OP_DOMAIN: case PS_OP_BROADCAST: case PS_OP_IOTA:
      return FALSE;
    default:
      break;
    }
  const PsCost *c = ps_cost_get (g->cost, in);
  return !c || ((!c->fused || c->output) && c->klass != PS_COST_INLINED && c->klass != PS_COST_FREE);
}

static void
add_unique (GArray *a, int v)
{
  for (guint i = 0; i < a->len; i++)
    if (g_array_index (a, int, i) == v)
      return;
  g_array_append_val (a, v);
}

/* The buffers (defining units) whose storage the value of `in` is. */
static GArray *
sources (Graph *g, const PsInstr *in, int depth)
{
  int i = post_index (g, in);
  if (i < 0)
    return NULL;
  GArray *known = g_ptr_array_index (g->sources, i);
  if (known)
    return known;
  GArray *s = g_array_new (FALSE, FALSE, sizeof (int));
  if (materializes (g, in))
    add_unique (s, g->unit_of[i]);
  else if (depth < 256 && in->opcode != PS_OP_PARAMETER && in->opcode != PS_OP_CONSTANT)
    {
      int limit = in->opcode == PS_OP_WHILE ? MIN (in->n_operands, 1) : in->n_operands;
      if (in->opcode == PS_OP_GET_TUPLE_ELEMENT && in->n_operands == 1
          && in->operands[0]->opcode == PS_OP_TUPLE && in->tuple_index >= 0
          && in->tuple_index < in->operands[0]->n_operands)
        {
          GArray *e = sources (g, in->operands[0]->operands[in->tuple_index], depth + 1);
          for (guint k = 0; e && k < e->len; k++)
            add_unique (s, g_array_index (e, int, k));
        }
      else
        for (int j = 0; j < limit; j++)
          {
            GArray *e = sources (g, in->operands[j], depth + 1);
            for (guint k = 0; e && k < e->len; k++)
              add_unique (s, g_array_index (e, int, k));
          }
    }
  g_ptr_array_index (g->sources, i) = s;
  return s;
}

/* A donated output is written over its parameter, so it comes after every
 * other read of that parameter: the ordering constraints XLA's copy
 * insertion adds for in-place outputs instead of copying the parameter.
 * Only for outputs read by nothing but the result tuple (no cycle). */
static void
donation_edges (Graph *g, const PsComputation *entry)
{
  const PsModule *m = entry->parent;
  const PsInstr *root = entry->root;
  if (!m || !root || root->opcode != PS_OP_TUPLE)
    return;
  for (int a = 0; a < m->n_aliases; a++)
    {
      const PsAlias *al = &m->aliases[a];
      if (al->output_index.n != 1 || al->param_index.n != 0 || al->output_index.v[0] < 0
          || al->output_index.v[0] >= root->n_operands || al->parameter < 0
          || al->parameter >= (int64_t) entry->params->len)
        continue;
      const PsInstr *o = root->operands[al->output_index.v[0]];
      const PsInstr *p = g_ptr_array_index (entry->params, al->parameter);
      gboolean only_output = TRUE;
      for (guint k = 0; o->users && k < o->users->len; k++)
        only_output = only_output && g_ptr_array_index (o->users, k) == root;
      int oi = post_index (g, o);
      if (!only_output || oi < 0 || o == p)
        continue;
      Unit *ou = &g_array_index (g->units, Unit, g->unit_of[oi]);
      for (guint k = 0; p->users && k < p->users->len; k++)
        {
          int ui = post_index (g, g_ptr_array_index (p->users, k));
          if (ui >= 0 && g->unit_of[ui] != g->unit_of[oi] && g_ptr_array_index (p->users, k) != root)
            add_unique (ou->deps, g->unit_of[ui]);
        }
    }
}

static void
array_unref0 (gpointer a)
{
  if (a)
    g_array_unref (a);
}

static void
graph_free (Graph *g)
{
  for (guint u = 0; g->units && u < g->units->len; u++)
    {
      Unit *un = &g_array_index (g->units, Unit, u);
      g_array_unref (un->members);
      g_array_unref (un->deps);
      g_array_unref (un->users);
      g_array_unref (un->uses);
    }
  if (g->units)
    g_array_unref (g->units);
  if (g->sources)
    g_ptr_array_unref (g->sources);
  if (g->index)
    g_hash_table_unref (g->index);
  if (g->post)
    g_ptr_array_unref (g->post);
  g_free (g->unit_of);
}

static void
graph_build (Graph *g, const PsComputation *entry, const PsCostAnalysis *cost)
{
  memset (g, 0, sizeof *g);
  g->cost = cost;
  g->post = ps_computation_post_order (entry);
  int n = (int) g->post->len;
  g->index = g_hash_table_new (NULL, NULL);
  for (int i = 0; i < n; i++)
    g_hash_table_insert (g->index, g_ptr_array_index (g->post, i), GINT_TO_POINTER (i + 1));
  g->unit_of = g_new (int, n + 1);
  g->units = g_array_new (FALSE, TRUE, sizeof (Unit));
  /* units in the post order of their roots; members join their root's */
  for (int i = 0; i < n; i++)
    {
      const PsInstr *in = g_ptr_array_index (g->post, i);
      const PsCost *c = ps_cost_get (cost, in);
      if (c && c->fused && c->root && c->root != in)
        continue;
      Unit un = { 0 };
      un.members = g_array_new (FALSE, FALSE, sizeof (int));
      un.deps = g_array_new (FALSE, FALSE, sizeof (int));
      un.users = g_array_new (FALSE, FALSE, sizeof (int));
      un.uses = g_array_new (FALSE, FALSE, sizeof (int));
      g->unit_of[i] = (int) g->units->len;
      g_array_append_val (g->units, un);
    }
  for (int i = 0; i < n; i++)
    {
      const PsInstr *in = g_ptr_array_index (g->post, i);
      const PsCost *c = ps_cost_get (cost, in);
      if (c && c->fused && c->root && c->root != in)
        g->unit_of[i] = g->unit_of[post_index (g, c->root)];
      g_array_append_val (g_array_index (g->units, Unit, g->unit_of[i]).members, i);
    }
  g->sources = g_ptr_array_new_with_free_func (array_unref0);
  g_ptr_array_set_size (g->sources, n);
  for (guint u = 0; u < g->units->len; u++)
    {
      Unit *un = &g_array_index (g->units, Unit, u);
      const PsInstr *root = g_ptr_array_index (g->post, g_array_index (un->members, int,
                                                                       un->members->len - 1));
      /* a multi-output fusion defines its extra outputs too */
      un->defined = 0;
      for (guint k = 0; k < un->members->len; k++)
        {
          const PsInstr *m = g_ptr_array_index (g->post, g_array_index (un->members, int, k));
          const PsCost *mc = ps_cost_get (cost, m);
          if (mc && mc->bn_fused)   /* its statistics only (cost.h rule 9) */
            for (int e = 1; e < m->shape->n_elems; e++)
              un->defined += ps_tiling_bytes (m->shape->elems[e], ps_cost_tiling (cost));
          else if (materializes (g, m))
            un->defined += ps_tiling_bytes (m->shape, ps_cost_tiling (cost));
        }
      un->user_count = root->users ? root->users->len : 0;
      un->scalar = root->shape && root->shape->etype != PS_TUPLE && ps_shape_elements (root->shape) == 1;
      for (guint k = 0; k < un->members->len; k++)
        {
          const PsInstr *m = g_ptr_array_index (g->post, g_array_index (un->members, int, k));
          for (int j = 0; j < m->n_operands; j++)
            {
              int oi = post_index (g, m->operands[j]);
              if (oi < 0 || g->unit_of[oi] == (int) u)
                continue;
              add_unique (un->deps, g->unit_of[oi]);
              GArray *src = sources (g, m->operands[j], 0);
              for (guint b = 0; src && b < src->len; b++)
                if (g_array_index (src, int, b) != (int) u)
                  add_unique (un->uses, g_array_index (src, int, b));
            }
        }
    }
  if (entry->parent && entry == entry->parent->entry)
    donation_edges (g, entry);
  for (guint u = 0; u < g->units->len; u++)
    {
      Unit *un = &g_array_index (g->units, Unit, u);
      for (guint k = 0; k < un->deps->len; k++)
        g_array_append_val (g_array_index (g->units, Unit, g_array_index (un->deps, int, k)).users, u);
    }
}

/* ---- XLA's list scheduler ------------------------------------------------ */

typedef struct {
  int64_t p1, p2;
  guint64 seq;
  int unit, version;
} Entry;

static gboolean
entry_before (const Entry *a, const Entry *b)
{
  if (a->p1 != b->p1)
    return a->p1 > b->p1;
  if (a->p2 != b->p2)
    return a->p2 > b->p2;
  return a->seq > b->seq;   /* the last inserted of equals, as XLA's multimap */
}

static void
heap_push (GArray *h, Entry e)
{
  g_array_append_val (h, e);
  for (guint i = h->len - 1; i > 0;)
    {
      guint p = (i - 1) / 2;
      Entry *x = &g_array_index (h, Entry, i), *y = &g_array_index (h, Entry, p);
      if (!entry_before (x, y))
        break;
      Entry t = *x;
      *x = *y;
      *y = t;
      i = p;
    }
}

static Entry
heap_pop (GArray *h)
{
  Entry top = g_array_index (h, Entry, 0);
  g_array_index (h, Entry, 0) = g_array_index (h, Entry, h->len - 1);
  g_array_set_size (h, h->len - 1);
  for (guint i = 0;;)
    {
      guint l = 2 * i + 1, r = l + 1, best = i;
      if (l < h->len && entry_before (&g_array_index (h, Entry, l), &g_array_index (h, Entry, best)))
        best = l;
      if (r < h->len && entry_before (&g_array_index (h, Entry, r), &g_array_index (h, Entry, best)))
        best = r;
      if (best == i)
        break;
      Entry t = g_array_index (h, Entry, i);
      g_array_index (h, Entry, i) = g_array_index (h, Entry, best);
      g_array_index (h, Entry, best) = t;
      i = best;
    }
  return top;
}

typedef struct {
  Graph *g;
  int64_t *left;         /* per buffer unit: unscheduled uses (+1 live out) */
  GArray **users_of;     /* per buffer unit: units that use it */
  int *version;          /* per unit: current entry version; -1 not ready */
  GArray *heap;
  guint64 seq;
} List;

static void
list_push (List *ls, int u)
{
  const Unit *un = &g_array_index (ls->g->units, Unit, u);
  Entry e = { G_MAXINT64, G_MAXINT64, ++ls->seq, u, ++ls->version[u] };
  if (!un->scalar)
    {
      int64_t freed = 0;
      for (guint k = 0; k < un->uses->len; k++)
        {
          int b = g_array_index (un->uses, int, k);
          if (ls->left[b] == 1)
            freed += g_array_index (ls->g->units, Unit, b).defined;
        }
      e.p1 = freed - un->defined;
      e.p2 = un->user_count;
    }
  heap_push (ls->heap, e);
}

/* The instruction order of the list scheduler. transfer container. */
static GPtrArray *
list_schedule (Graph *g, const PsComputation *entry)
{
  int nu = (int) g->units->len;
  List ls = { g, g_new0 (int64_t, nu + 1), g_new0 (GArray *, nu + 1), g_new (int, nu + 1),
              g_array_new (FALSE, FALSE, sizeof (Entry)), 0 };
  g_autofree int *preds = g_new0 (int, nu + 1);
  for (int u = 0; u < nu; u++)
    {
      const Unit *un = &g_array_index (g->units, Unit, u);
      ls.version[u] = -1;
      preds[u] = (int) un->deps->len;
      for (guint k = 0; k < un->uses->len; k++)
        {
          int b = g_array_index (un->uses, int, k);
          ls.left[b]++;
          if (!ls.users_of[b])
            ls.users_of[b] = g_array_new (FALSE, FALSE, sizeof (int));
          g_array_append_val (ls.users_of[b], u);
        }
    }
  GArray *out = entry->root ? sources (g, entry->root, 0) : NULL;
  for (guint k = 0; out && k < out->len; k++)
    ls.left[g_array_index (out, int, k)]++;
  for (int u = 0; u < nu; u++)
    if (preds[u] == 0)
      list_push (&ls, u);
  GPtrArray *order = g_ptr_array_sized_new (g->post->len);
  while (ls.heap->len > 0)
    {
      Entry e = heap_pop (ls.heap);
      if (e.version != ls.version[e.unit])
        continue;
      ls.version[e.unit] = -2;   /* scheduled */
      const Unit *un = &g_array_index (g->units, Unit, e.unit);
      for (guint k = 0; k < un->members->len; k++)
        g_ptr_array_add (order, g_ptr_array_index (g->post, g_array_index (un->members, int, k)));
      for (guint k = 0; k < un->uses->len; k++)
        {
          int b = g_array_index (un->uses, int, k);
          if (--ls.left[b] != 1)
            continue;
          /* the last user of b now frees it: raise ready users' priority */
          for (guint j = 0; j < ls.users_of[b]->len; j++)
            {
              int v = g_array_index (ls.users_of[b], int, j);
              if (ls.version[v] >= 0)
                list_push (&ls, v);
            }
        }
      for (guint k = 0; k < un->users->len; k++)
        {
          int v = g_array_index (un->users, int, k);
          if (--preds[v] == 0)
            list_push (&ls, v);
        }
    }
  for (int u = 0; u < nu; u++)
    if (ls.users_of[u])
      g_array_unref (ls.users_of[u]);
  g_free (ls.users_of);
  g_free (ls.left);
  g_free (ls.version);
  g_array_unref (ls.heap);
  g_assert (order->len == g->post->len);
  return order;
}

/* ---- XLA's DFS scheduler --------------------------------------------------- */

typedef struct {
  const Graph *g;
  int64_t *extra_users, *total_sizes;
} DfsStats;

static const PsInstr *
unit_root (const Graph *g, int u)
{
  const Unit *un = &g_array_index (g->units, Unit, u);
  return g_ptr_array_index (g->post, g_array_index (un->members, int, un->members->len - 1));
}

static int
cmp_dfs (const void *a, const void *b, void *data)
{
  const DfsStats *st = data;
  int x = *(const int *) a, y = *(const int *) b;
  if (st->extra_users[x] != st->extra_users[y])
    return st->extra_users[x] > st->extra_users[y] ? -1 : 1;
  if (st->total_sizes[x] != st->total_sizes[y])
    return st->total_sizes[x] > st->total_sizes[y] ? -1 : 1;
  return strcmp (unit_root (st->g, x)->name, unit_root (st->g, y)->name);
}

/* XLA's DFSMemoryScheduler: a post order that visits operands with the most
 * transitive fan-out ("extra users"), then the largest transitive size,
 * first; both capped as XLA caps them. transfer container. */
static GPtrArray *
dfs_schedule (const Graph *g, const PsComputation *entry)
{
  int nu = (int) g->units->len;
  DfsStats st = { g, g_new0 (int64_t, nu + 1), g_new0 (int64_t, nu + 1) };
  int64_t cumulative = 0, total = nu;
  for (int u = 0; u < nu; u++)   /* units are in post order of their roots */
    {
      const Unit *un = &g_array_index (g->units, Unit, u);
      const PsInstr *root = unit_root (g, u);
      if (root->opcode == PS_OP_PARAMETER || root->opcode == PS_OP_CONSTANT)
        continue;
      st.extra_users[u] = un->users->len > 0 ? (int64_t) un->users->len - 1 : 0;
      st.total_sizes[u] = un->defined;
      cumulative += un->defined;
      for (guint k = 0; k < un->deps->len; k++)
        {
          int d = g_array_index (un->deps, int, k);
          st.extra_users[u] += st.extra_users[d];
          st.total_sizes[u] += st.total_sizes[d];
        }
      st.total_sizes[u] = MIN (st.total_sizes[u], cumulative);
      st.extra_users[u] = MIN (st.extra_users[u], total);
    }
  GPtrArray *order = g_ptr_array_sized_new (g->post->len);
  g_autofree guint8 *state = g_new0 (guint8, nu + 1);   /* 1 visiting, 2 done */
  g_autoptr (GArray) stack = g_array_new (FALSE, FALSE, sizeof (int) * 2);
  int root_unit = entry->root ? g->unit_of[post_index (g, entry->root)] : nu - 1;
  for (int pass = -1; pass < nu; pass++)
    {
      int start = pass < 0 ? root_unit : pass;
      if (start < 0 || state[start])
        continue;
      /* iterative DFS: (unit, next operand index), operands sorted */
      int top[2] = { start, 0 };
      g_array_append_val (stack, top);
      state[start] = 1;
      GPtrArray *sorted = g_ptr_array_new_with_free_func (g_free);
      g_ptr_array_set_size (sorted, nu);
      while (stack->len > 0)
        {
          int *t = &g_array_index (stack, int, 2 * (stack->len - 1));
          int u = t[0];
          const Unit *un = &g_array_index (g->units, Unit, u);
          if (!sorted->pdata[u])
            {
              int *ops = g_new (int, un->deps->len + 1);
              if (un->deps->len > 0)
                memcpy (ops, un->deps->data, sizeof (int) * un->deps->len);
              g_qsort_with_data (ops, (gint) un->deps->len, sizeof (int), cmp_dfs, &st);
              sorted->pdata[u] = ops;
            }
          if (t[1] < (int) un->deps->len)
            {
              int d = ((int *) sorted->pdata[u])[t[1]++];
              if (!state[d])
                {
                  state[d] = 1;
                  int next[2] = { d, 0 };
                  g_array_append_val (stack, next);
                }
              continue;
            }
          state[u] = 2;
          for (guint k = 0; k < un->members->len; k++)
            g_ptr_array_add (order, g_ptr_array_index (g->post, g_array_index (un->members, int, k)));
          g_array_set_size (stack, stack->len - 1);
        }
      g_ptr_array_unref (sorted);
    }
  g_free (st.extra_users);
  g_free (st.total_sizes);
  g_assert (order->len == g->post->len);
  return order;
}

/* ---- latency hiding ------------------------------------------------------ */

typedef struct {
  const PsInstr *c;
  int pos;               /* in the memory-aware order */
  int start, done;       /* slots: before the instruction at that position */
  gboolean async;
} Window;

static gboolean
async_kind (PsSchedulePolicy p, const PsInstr *in)
{
  if (!is_collective (in) || p == PS_SCHEDULE_SYNC)
    return FALSE;
  return p != PS_SCHEDULE_XLA || in->opcode == PS_OP_COLLECTIVE_PERMUTE;
}

static int
cmp_key (gconstpointer a, gconstpointer b)
{
  const int64_t *x = a, *y = b;
  if (x[0] != y[0])
    return x[0] < y[0] ? -1 : 1;
  return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The order with every async collective moved to its start slot, and the
 * instruction each one completes before. */
static GPtrArray *
place (GPtrArray *base, GArray *wins, GHashTable *done_before)
{
  int n = (int) base->len;
  g_autoptr (GHashTable) start_of = g_hash_table_new (NULL, NULL);
  for (guint w = 0; w < wins->len; w++)
    {
      const Window *x = &g_array_index (wins, Window, w);
      if (x->async)
        g_hash_table_insert (start_of, (gpointer) x->c, GINT_TO_POINTER (x->start + 1));
    }
  /* key: 2 x slot for a moved start (before the instruction there), else
   * 2 x position + 1; then the original position */
  g_autofree int64_t *keys = g_new (int64_t, 3 * (gsize) n + 3);
  for (int i = 0; i < n; i++)
    {
      int s = GPOINTER_TO_INT (g_hash_table_lookup (start_of, g_ptr_array_index (base, i)));
      keys[3 * i] = s ? 2 * (int64_t) (s - 1) : 2 * (int64_t) i + 1;
      keys[3 * i + 1] = i;
      keys[3 * i + 2] = i;
    }
  qsort (keys, (gsize) n, 3 * sizeof (int64_t), cmp_key);
  GPtrArray *order = g_ptr_array_sized_new ((guint) n);
  for (int i = 0; i < n; i++)
    g_ptr_array_add (order, g_ptr_array_index (base, keys[3 * i + 2]));
  g_hash_table_remove_all (done_before);
  for (guint w = 0; w < wins->len; w++)
    {
      const Window *x = &g_array_index (wins, Window, w);
      if (!x->async)
        continue;
      /* the first instruction whose key is at or after slot `done` */
      int lo = 0, hi = n;
      while (lo < hi)
        {
          int mid = (lo + hi) / 2;
          if (keys[3 * mid] >= 2 * (int64_t) x->done)
            hi = mid;
          else
            lo = mid + 1;
        }
      const PsInstr *at = lo < n ? g_ptr_array_index (base, keys[3 * lo + 2]) : NULL;
      g_hash_table_insert (done_before, (gpointer) x->c, (gpointer) at);
    }
  return order;
}

/* First position of the unit of each instruction in `order`. */
static int *
unit_first_positions (const Graph *g, GPtrArray *order)
{
  int n = (int) order->len;
  int *first_of_unit = g_new (int, g->units->len + 1);
  for (guint u = 0; u < g->units->len; u++)
    first_of_unit[u] = n;
  int *pos_first = g_new (int, n + 1);
  for (int i = 0; i < n; i++)
    {
      int u = g->unit_of[post_index (g, g_ptr_array_index (order, i))];
      first_of_unit[u] = MIN (first_of_unit[u], i);
    }
  for (int i = 0; i < n; i++)
    pos_first[post_index (g, g_ptr_array_index (order, i))] =
      first_of_unit[g->unit_of[post_index (g, g_ptr_array_index (order, i))]];
  g_free (first_of_unit);
  return pos_first;   /* indexed by post index */
}

static GArray *
make_windows (const Graph *g, GPtrArray *order, PsSchedulePolicy policy)
{
  int n = (int) order->len;
  g_autofree int *pos = g_new (int, n + 1);
  for (int i = 0; i < n; i++)
    pos[post_index (g, g_ptr_array_index (order, i))] = i;
  g_autofree int *first = unit_first_positions (g, order);
  GArray *wins = g_array_new (FALSE, FALSE, sizeof (Window));
  int last_of_kind[PS_OP_COUNT];
  for (int k = 0; k < PS_OP_COUNT; k++)
    last_of_kind[k] = -1;
  for (int i = 0; i < n; i++)
    {
      const PsInstr *c = g_ptr_array_index (order, i);
      if (!async_kind (policy, c))
        continue;
      Window w = { c, i, i, n, TRUE };
      int ready = 0;
      for (int j = 0; j < c->n_operands; j++)
        ready = MAX (ready, pos[post_index (g, c->operands[j])] + 1);
      for (guint j = 0; c->users && j < c->users->len; j++)
        w.done = MIN (w.done, first[post_index (g, g_ptr_array_index (c->users, j))]);
      w.start = ready;
      if (policy != PS_SCHEDULE_EAGER && last_of_kind[c->opcode] >= 0)
        {
          /* one in flight per kind: the previous completes by here */
          Window *prev = &g_array_index (wins, Window, last_of_kind[c->opcode]);
          prev->done = MIN (prev->done, i);
          w.start = MAX (w.start, prev->done);
        }
      last_of_kind[c->opcode] = (int) wins->len;
      g_array_append_val (wins, w);
    }
  /* a collective that reads another's result starts after it completes;
   * one with nothing between start and use stays synchronous */
  g_autoptr (GHashTable) win_of = g_hash_table_new (NULL, NULL);
  for (guint w = 0; w < wins->len; w++)
    g_hash_table_insert (win_of, (gpointer) g_array_index (wins, Window, w).c,
                         GINT_TO_POINTER (w + 1));
  for (guint w = 0; w < wins->len; w++)
    {
      Window *x = &g_array_index (wins, Window, w);
      for (guint j = 0; x->c->users && j < x->c->users->len; j++)
        {
          int u = GPOINTER_TO_INT (g_hash_table_lookup (win_of, g_ptr_array_index (x->c->users, j)));
          if (u)
            x->done = MIN (x->done, g_array_index (wins, Window, u - 1).start);
        }
    }
  for (guint w = 0; w < wins->len; w++)
    {
      Window *x = &g_array_index (wins, Window, w);
      if (x->done <= x->pos + 1 && x->start >= x->pos)
        x->async = FALSE;
      x->done = MAX (x->done, x->pos + 1);
      x->start = MIN (x->start, x->pos);
    }
  return wins;
}

/* ---- the schedule ---------------------------------------------------------- */

void
ps_schedule_free (PsSchedule *s)
{
  if (!s)
    return;
  g_ptr_array_unref (s->order);
  g_hash_table_unref (s->orders);
  g_hash_table_unref (s->done_before);
  ps_memory_report_free (s->memory);
  g_free (s);
}

GPtrArray *
ps_schedule_order_of (const PsSchedule *s, const PsComputation *c)
{
  g_return_val_if_fail (s != NULL, NULL);
  return g_hash_table_lookup (s->orders, c);
}

/* Index in `order` of the step at which the peak occurs. */
static int
peak_step (const PsMemoryReport *r)
{
  for (guint i = 0; i < r->order->len; i++)
    if (g_ptr_array_index (r->order, i) == r->peak_instr)
      return (int) i;
  return -1;
}

/* One scheduled computation: its graph, its memory-aware order with
 * parameters and constants first, and its collectives' windows. */
typedef struct {
  const PsComputation *c;
  Graph g;
  GPtrArray *base;
  GArray *wins;
} CompSched;

static void
comp_sched_free (gpointer p)
{
  CompSched *cs = p;
  graph_free (&cs->g);
  g_ptr_array_unref (cs->base);
  g_array_unref (cs->wins);
  g_free (cs);
}

/* The computations a device runs as part of the entry: the entry, while
 * bodies, called computations and branches, callees before callers (each
 * once). Conditions and reducers run in post order. */
static void
collect_comps (const PsComputation *c, GHashTable *seen, GPtrArray *out, int depth)
{
  if (depth > 64 || !g_hash_table_add (seen, (gpointer) c))
    return;
  for (guint i = 0; i < c->instrs->len; i++)
    {
      const PsInstr *in = g_ptr_array_index (c->instrs, i);
      if (in->opcode == PS_OP_WHILE && in->n_called >= 2)
        collect_comps (in->called[1], seen, out, depth + 1);
      else if (in->opcode == PS_OP_CALL || in->opcode == PS_OP_FUSION || in->opcode == PS_OP_CONDITIONAL)
        for (int k = 0; k < in->n_called; k++)
          collect_comps (in->called[k], seen, out, depth + 1);
    }
  g_ptr_array_add (out, (gpointer) c);
}

/* Makes synchronous the largest asynchronous collective in flight at the
 * peak (every one in flight there when `all`). When the peak is inside
 * what an entry instruction calls (a loop body), the largest asynchronous
 * collective of those computations. FALSE when there is none. */
static gboolean
revert_at_peak (GPtrArray *comps, const PsMemoryReport *r, GHashTable *done_before,
                gboolean all, int *n_reverted)
{
  GPtrArray *order = r->order;
  int at = peak_step (r);
  g_autoptr (GHashTable) step = g_hash_table_new (NULL, NULL);
  for (guint i = 0; i < order->len; i++)
    g_hash_table_insert (step, g_ptr_array_index (order, i), GINT_TO_POINTER (i + 1));
  /* the computations the peak instruction runs */
  g_autoptr (GHashTable) inside = g_hash_table_new (NULL, NULL);
  const PsInstr *pi = r->peak_instr;
  for (int k = 0; pi && k < pi->n_called; k++)
    {
      g_autoptr (GPtrArray) sub = g_ptr_array_new ();
      g_autoptr (GHashTable) seen = g_hash_table_new (NULL, NULL);
      collect_comps (pi->called[k], seen, sub, 0);
      for (guint j = 0; j < sub->len; j++)
        g_hash_table_add (inside, sub->pdata[j]);
    }
  Window *worst = NULL;
  int reverted = 0;
  for (guint c = 0; c < comps->len; c++)
    {
      CompSched *cs = comps->pdata[c];
      gboolean entry = cs->c->parent && cs->c == cs->c->parent->entry;
      if (!entry && !g_hash_table_contains (inside, cs->c))
        continue;
      for (guint w = 0; w < cs->wins->len; w++)
        {
          Window *x = &g_array_index (cs->wins, Window, w);
          if (!x->async)
            continue;
          if (entry)
            {
              int from = GPOINTER_TO_INT (g_hash_table_lookup (step, x->c)) - 1;
              gpointer db = g_hash_table_lookup (done_before, x->c);
              int to = db ? GPOINTER_TO_INT (g_hash_table_lookup (step, db)) - 2
                          : (int) order->len - 1;
              if (at < from || at > to)
                continue;
            }
          if (all)
            {
              x->async = FALSE;
              reverted++;
            }
          else if (!worst || ps_shape_bytes (x->c->shape) > ps_shape_bytes (worst->c->shape))
            worst = x;
        }
    }
  if (worst)
    {
      worst->async = FALSE;
      reverted++;
    }
  *n_reverted += reverted;
  return reverted > 0;
}

/* A parameter, a constant, or an element of a (tuple) parameter: there
 * from the start of the computation. */
static gboolean
is_input (const PsInstr *in)
{
  for (int depth = 0; depth < 64; depth++)
    {
      if (in->opcode == PS_OP_PARAMETER || in->opcode == PS_OP_CONSTANT)
        return TRUE;
      if (in->opcode != PS_OP_GET_TUPLE_ELEMENT || in->n_operands != 1)
        return FALSE;
      in = in->operands[0];
    }
  return FALSE;
}

/* Chooses c's memory-aware order (the callees' are in `orders` already)
 * and its windows. */
static CompSched *
schedule_comp (const PsModule *m, const PsCostAnalysis *cost, const PsComputation *c,
               PsSchedulePolicy policy, GHashTable *orders, int *chosen)
{
  CompSched *cs = g_new0 (CompSched, 1);
  cs->c = c;
  graph_build (&cs->g, c, cost);
  /* DefaultMemoryScheduler: the order among XLA's list, DFS and post-order
   * schedulers that needs the least memory (ties in that order) */
  GPtrArray *cand[3] = { list_schedule (&cs->g, c), dfs_schedule (&cs->g, c),
                         g_ptr_array_ref (cs->g.post) };
  uint64_t peaks[3];
  int best = -1;
  for (int k = 0; k < 3; k++)
    {
      g_hash_table_insert (orders, (gpointer) c, g_ptr_array_ref (cand[k]));
      peaks[k] = ps_memory_computation_peak (m, cost, c, orders, NULL);
      if (best < 0 || peaks[k] < peaks[best])
        best = k;
    }
  g_hash_table_remove (orders, c);
  *chosen = best;
  /* parameters, constants (live throughout) and the elements of a loop
   * state first, so that a collective reading one can start at the
   * beginning */
  cs->base = g_ptr_array_sized_new (cand[best]->len);
  for (int pass = 0; pass < 2; pass++)
    for (guint i = 0; i < cand[best]->len; i++)
      {
        PsInstr *in = g_ptr_array_index (cand[best], i);
        if (is_input (in) == (pass == 0))
          g_ptr_array_add (cs->base, in);
      }
  for (int j = 0; j < 3; j++)
    g_ptr_array_unref (cand[j]);
  cs->wins = make_windows (&cs->g, cs->base, policy);
  /* the synchronous order, for the callers' choice */
  g_hash_table_insert (orders, (gpointer) c, g_ptr_array_ref (cs->base));
  return cs;
}

PsSchedule *
ps_schedule_module (const PsModule *m, const PsCostAnalysis *cost, const PsScheduleOptions *opts,
                    GError **error)
{
  g_return_val_if_fail (m != NULL && m->entry != NULL && cost != NULL, NULL);
  PsScheduleOptions defaults = { 0 };
  if (!opts)
    opts = &defaults;
  g_autoptr (PsSchedule) s = g_new0 (PsSchedule, 1);
  s->policy = opts->policy;
  s->done_before = g_hash_table_new (NULL, NULL);
  s->orders = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) g_ptr_array_unref);
  g_autoptr (GPtrArray) comps = g_ptr_array_new_with_free_func (comp_sched_free);
  {
    g_autoptr (GPtrArray) list = g_ptr_array_new ();
    g_autoptr (GHashTable) seen = g_hash_table_new (NULL, NULL);
    collect_comps (m->entry, seen, list, 0);
    for (guint i = 0; i < list->len; i++)
      {
        int chosen;
        g_ptr_array_add (comps, schedule_comp (m, cost, list->pdata[i], opts->policy, s->orders,
                                               &chosen));
        if (list->pdata[i] == m->entry)
          s->memory_scheduler = chosen;
      }
  }
  g_autoptr (PsMemoryReport) sync = ps_memory_analyze_schedule (m, cost, s->orders, NULL, error);
  if (!sync)
    return NULL;
  /* eager ignores the budget; a step whose synchronous schedule does not
   * fit gains nothing from reverting */
  uint64_t budget = opts->policy == PS_SCHEDULE_EAGER || sync->peak_bytes > opts->hbm_budget_bytes
                    ? 0 : opts->hbm_budget_bytes;
  for (int round = 0;; round++)
    {
      g_hash_table_remove_all (s->done_before);
      for (guint i = 0; i < comps->len; i++)
        {
          CompSched *cs = comps->pdata[i];
          g_autoptr (GHashTable) db = g_hash_table_new (NULL, NULL);
          GPtrArray *order = place (cs->base, cs->wins, db);
          g_hash_table_insert (s->orders, (gpointer) cs->c, order);
          GHashTableIter it;
          gpointer k, v;
          g_hash_table_iter_init (&it, db);
          while (g_hash_table_iter_next (&it, &k, &v))
            g_hash_table_insert (s->done_before, k, v);
        }
      g_clear_pointer (&s->memory, ps_memory_report_free);
      s->memory = ps_memory_analyze_schedule (m, cost, s->orders, s->done_before, error);
      if (!s->memory)
        return NULL;
      s->peak_bytes = s->memory->peak_bytes;
      if (budget == 0 || s->peak_bytes <= budget
          || !revert_at_peak (comps, s->memory, s->done_before, round >= 8, &s->n_reverted))
        break;
    }
  s->order = g_ptr_array_ref (g_hash_table_lookup (s->orders, m->entry));
  s->n_async = (int) g_hash_table_size (s->done_before);
  return g_steal_pointer (&s);
}

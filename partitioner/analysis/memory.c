/* Memory analysis: liveness of buffers in sequential order (see memory.h). */
#include "config.h"

#include <string.h>

#include "partitioner/analysis/memory.h"
#include "partitioner/analysis/tiling.h"

typedef struct {
  const PsInstr *def;      /* defining instruction */
  uint64_t bytes;
  uint64_t alloc;          /* bytes it adds to the heap: 0 when it lives in
                            * a donated parameter or an operand's buffer */
  int def_step;            /* -1: parameter or constant */
  int last_use;            /* step; n = live to the end */
  int rep;                 /* the buffer whose storage it uses (itself) */
} Buffer;

typedef struct {
  const PsCostAnalysis *cost;
  GHashTable *temp_peak;   /* PsComputation* -> uint64_t* (peak minus parameters) */
  GHashTable *orders;      /* PsComputation* -> its order, or NULL: post order */
  GHashTable *done_before; /* async collectives, or NULL */
} Ctx;

/* A buffer's bytes as the TPU lays it out (tiling.h). */
static uint64_t
bytes_of (const Ctx *ctx, const PsShape *s)
{
  /* no cost analysis: no options either, the dense bytes */
  PsTilingMode mode = ctx->cost ? ps_cost_tiling (ctx->cost) : PS_TILING_NONE;
  int64_t b = ps_tiling_bytes (s, mode);
  return b > 0 ? (uint64_t) b : 0;
}

/* Does `in` only alias the buffers of its operands? */
static gboolean
is_alias (const Ctx *ctx, const PsInstr *in)
{
  switch (in->opcode)
    {
    case PS_OP_TUPLE: case PS_OP_GET_TUPLE_ELEMENT: case PS_OP_BITCAST: case PS_OP_RESHAPE:
    case PS_OP_WHILE: case PS_OP_OPTIMIZATION_BARRIER: case PS_OP_DOMAIN:
    case PS_OP_BROADCAST: case PS_OP_IOTA:
      return TRUE;
    default:
      break;
    }
  if (ctx->cost)
    {
      const PsCost *c = ps_cost_get (ctx->cost, in);
      /* a multi-output fusion's extra output has a buffer of its own */
      if (c && ((c->fused && !c->output) || c->klass == PS_COST_INLINED))
        return TRUE;
    }
  return FALSE;
}

/* The instruction whose buffers element `index` of tuple-valued `v` uses,
 * looking through while loops (updated in place) and nested tuples; NULL
 * when it cannot tell. */
static const PsInstr *
tuple_element (const PsInstr *v, int64_t index)
{
  for (int depth = 0; v && depth < 64; depth++)
    {
      if (v->opcode == PS_OP_TUPLE)
        return index >= 0 && index < v->n_operands ? v->operands[index] : NULL;
      if (v->opcode == PS_OP_WHILE && v->n_operands >= 1)
        v = v->operands[0];
      else
        return NULL;
    }
  return NULL;
}

static uint64_t comp_temp_peak (Ctx *ctx, const PsComputation *c, gboolean state);

/* The bytes of the buffer `in` defines: its shape's, except for a batch
 * norm whose element 0 its readers compute (cost.h rule 9): its
 * statistics only, and its value refers to its operands' buffers too
 * (appended to `mine`), which stay live while element 0 is read. */
static uint64_t
bn_fused_bytes (const Ctx *ctx, const PsInstr *in, GHashTable *refs, GArray *mine)
{
  const PsCost *c = ctx->cost ? ps_cost_get (ctx->cost, in) : NULL;
  if (!c || !c->bn_fused)
    return bytes_of (ctx, in->shape);
  uint64_t n = 0;
  for (int e = 1; e < in->shape->n_elems; e++)
    n += bytes_of (ctx, in->shape->elems[e]);
  for (int j = 0; j < in->n_operands; j++)
    {
      GArray *src = g_hash_table_lookup (refs, in->operands[j]);
      for (guint k = 0; src && k < src->len; k++)
        {
          gboolean again = FALSE;
          for (guint q = 0; q < mine->len && !again; q++)
            again = g_array_index (mine, int, q) == g_array_index (src, int, k);
          if (!again)
            g_array_append_val (mine, g_array_index (src, int, k));
        }
    }
  return n;
}

static uint64_t
callee_temp (Ctx *ctx, const PsInstr *in)
{
  uint64_t t = 0;
  /* a fusion is one kernel: its body's values stay on chip */
  if (in->opcode != PS_OP_WHILE && in->opcode != PS_OP_CALL && in->opcode != PS_OP_CONDITIONAL)
    return 0;
  for (int k = 0; k < in->n_called; k++)
    t = MAX (t, comp_temp_peak (ctx, in->called[k], in->opcode == PS_OP_WHILE && k == 1));
  return t;
}

/* An asynchronous collective reads its operands until it completes, just
 * before `done_before` (or at the end). */
static void
extend_async_operands (GHashTable *done_before, GPtrArray *order, GHashTable *step_of,
                       GHashTable *refs, GArray *bufs)
{
  GHashTableIter it;
  gpointer k, v;
  g_hash_table_iter_init (&it, done_before);
  while (g_hash_table_iter_next (&it, &k, &v))
    {
      const PsInstr *c = k;
      /* step_of holds 1 + step; the done runs just before that step */
      int until = v ? GPOINTER_TO_INT (g_hash_table_lookup (step_of, v)) - 2 : (int) order->len - 1;
      for (int j = 0; j < c->n_operands; j++)
        {
          GArray *src = g_hash_table_lookup (refs, c->operands[j]);
          for (guint b = 0; src && b < src->len; b++)
            {
              Buffer *buf = &g_array_index (bufs, Buffer, g_array_index (src, int, b));
              buf->last_use = MAX (buf->last_use, until);
            }
        }
    }
}

/* Donation (the module's input_output_alias): an output written over a
 * donated parameter takes no buffer of its own, provided the parameter has
 * no use after the output is defined (otherwise XLA copies the parameter
 * first, which costs the same as the output's own buffer, so nothing is
 * saved). Honoured for outputs that are the result or one element of it
 * and for whole parameters. Called before parameters are pinned live to
 * the end, while their last_use is their real last use. Returns the bytes
 * donated. */
static uint64_t
donate_outputs (const PsComputation *comp, GHashTable *refs, GArray *bufs)
{
  const PsModule *m = comp->parent;
  uint64_t donated = 0;
  for (int i = 0; i < m->n_aliases; i++)
    {
      const PsAlias *a = &m->aliases[i];
      if (a->param_index.n != 0 || a->output_index.n > 1 || !comp->root || a->parameter < 0
          || a->parameter >= (int64_t) comp->params->len)
        continue;
      const PsInstr *elem = a->output_index.n == 0 ? comp->root
                            : tuple_element (comp->root, a->output_index.v[0]);
      GArray *ob = elem ? g_hash_table_lookup (refs, elem) : NULL;
      GArray *pb = g_hash_table_lookup (refs, g_ptr_array_index (comp->params, a->parameter));
      if (!ob || ob->len != 1 || !pb || pb->len != 1)
        continue;
      Buffer *o = &g_array_index (bufs, Buffer, g_array_index (ob, int, 0));
      const Buffer *par = &g_array_index (bufs, Buffer, g_array_index (pb, int, 0));
      if (o->def_step < 0 || o->alloc == 0 || o->bytes != par->bytes || par->last_use > o->def_step)
        continue;
      o->alloc = 0;
      donated += o->bytes;
    }
  return donated;
}

static int
buffer_rep (GArray *bufs, int k)
{
  while (g_array_index (bufs, Buffer, k).rep != k)
    k = g_array_index (bufs, Buffer, k).rep;
  return k;
}

/* Operands whose buffer `in` may write its result into, as XLA's
 * HloDataflowAnalysis::CanShareOperandBufferWithUser allows: any operand
 * of a fusion made only of elementwise ops (read at the index it writes),
 * the buffer operand of scatter (updated in place; dynamic-update-slice is
 * handled in the walk). */
static GPtrArray *
in_place_operands (const Ctx *ctx, const PsInstr *in)
{
  GPtrArray *ops = g_ptr_array_new ();
  const PsCost *c = ctx->cost ? ps_cost_get (ctx->cost, in) : NULL;
  if (!c || c->fused)
    return ops;
  if (in->opcode == PS_OP_SCATTER && in->n_operands > 0)
    {
      g_ptr_array_add (ops, in->operands[0]);
      return ops;
    }
  g_autoptr (GPtrArray) members = ps_cost_fusion_members (ctx->cost, in);
  for (guint i = 0; i < members->len; i++)
    {
      const PsCost *mc = ps_cost_get (ctx->cost, g_ptr_array_index (members, i));
      if (!mc || (mc->klass != PS_COST_ELEMENTWISE && mc->klass != PS_COST_INLINED))
        return ops;
    }
  for (guint i = 0; i < members->len; i++)
    {
      const PsInstr *mi = g_ptr_array_index (members, i);
      for (int j = 0; j < mi->n_operands; j++)
        {
          const PsCost *oc = ps_cost_get (ctx->cost, mi->operands[j]);
          if (!oc || oc->root != in)
            g_ptr_array_add (ops, mi->operands[j]);
        }
    }
  return ops;
}

/* Buffer reuse in place: a result written into an operand's buffer that
 * dies at that instruction, of the same size, adds nothing to the heap and
 * keeps that buffer alive as long as the result lives. */
static void
share_in_place (const Ctx *ctx, GPtrArray *order, GHashTable *refs, GArray *def_buf, GArray *bufs)
{
  for (guint s = 0; s < order->len; s++)
    {
      int d = g_array_index (def_buf, int, s);
      if (d < 0)
        continue;
      Buffer *D = &g_array_index (bufs, Buffer, d);
      if (D->def_step < 0 || D->alloc == 0)
        continue;
      g_autoptr (GPtrArray) ops = in_place_operands (ctx, g_ptr_array_index (order, s));
      for (guint i = 0; i < ops->len && D->rep == d; i++)
        {
          GArray *src = g_hash_table_lookup (refs, g_ptr_array_index (ops, i));
          for (guint k = 0; src && k < src->len; k++)
            {
              int r = buffer_rep (bufs, g_array_index (src, int, k));
              Buffer *R = &g_array_index (bufs, Buffer, r);
              if (R->def_step >= 0 && R->alloc > 0 && R->last_use == (int) s && R->bytes == D->bytes)
                {
                  D->rep = r;
                  D->alloc = 0;
                  R->last_use = D->last_use;
                  break;
                }
            }
        }
    }
}

/* Is element k of a while's state written by its body (not passed
 * through unchanged)? */
static gboolean
while_writes (const PsInstr *w, int k)
{
  if (w->n_called < 2 || !w->called[1]->root)
    return TRUE;
  const PsInstr *root = w->called[1]->root;
  if (root->opcode != PS_OP_TUPLE || k >= root->n_operands)
    return TRUE;
  const PsInstr *e = root->operands[k];
  return !(e->opcode == PS_OP_GET_TUPLE_ELEMENT && e->tuple_index == k && e->n_operands == 1
           && e->operands[0]->opcode == PS_OP_PARAMETER);
}

/* May an instruction overwrite the buffers `src` of its operand in place
 * (the operand's only user)? Not when there are none (a broadcast or a
 * fused value: the update needs a buffer of its own) or one is a parameter
 * or constant, unless the parameter is a while body's loop state. */
static gboolean
writable (GArray *bufs, GArray *src, gboolean state)
{
  if (!src || src->len == 0)
    return FALSE;
  for (guint j = 0; j < src->len; j++)
    if (g_array_index (bufs, Buffer, g_array_index (src, int, j)).def_step < 0 && !state)
      return FALSE;
  return TRUE;
}

/* Has every reader of v's buffers but `self` run already (directly or
 * through aliases of it)? Then self may update them in place. */
static gboolean
last_reader (const Ctx *ctx, const PsInstr *v, const PsInstr *self, GHashTable *step_of, int depth)
{
  if (depth > 16)
    return FALSE;
  for (guint i = 0; i < v->users->len; i++)
    {
      const PsInstr *u = g_ptr_array_index (v->users, i);
      if (u == self)
        continue;
      if (!g_hash_table_contains (step_of, u))
        return FALSE;
      if (is_alias (ctx, u) && !last_reader (ctx, u, self, step_of, depth + 1))
        return FALSE;
    }
  return TRUE;
}

/* The liveness walk over one computation. With `r` set (the entry), fills
 * the report; returns the peak. `param_bytes` receives the parameters'
 * bytes (a callee's parameters are its caller's buffers). `state` says the
 * parameter is a while body's loop state, which the body may update in
 * place. */
static uint64_t
walk (Ctx *ctx, const PsComputation *comp, PsMemoryReport *r, uint64_t *param_bytes,
      gboolean state)
{
  GPtrArray *given = ctx->orders ? g_hash_table_lookup (ctx->orders, comp) : NULL;
  g_autoptr (GPtrArray) order = given ? g_ptr_array_ref (given) : ps_computation_post_order (comp);
  int n = (int) order->len;
  g_autoptr (GHashTable) step_of = g_hash_table_new (NULL, NULL);
  /* instruction -> GArray of buffer indices it refers to */
  g_autoptr (GHashTable) refs = g_hash_table_new_full (NULL, NULL, NULL,
                                                        (GDestroyNotify) g_array_unref);
  g_autoptr (GArray) bufs = g_array_new (FALSE, TRUE, sizeof (Buffer));
  g_autoptr (GArray) def_buf = g_array_new (FALSE, TRUE, sizeof (int)); /* per step: buffer or -1 */
  /* while -> GPtrArray of GArray*: the buffers of each state element */
  g_autoptr (GHashTable) while_elems = g_hash_table_new_full (NULL, NULL, NULL,
                                                               (GDestroyNotify) g_ptr_array_unref);
  uint64_t always = 0, params_only = 0;

  for (int s = 0; s < n; s++)
    {
      const PsInstr *in = g_ptr_array_index (order, s);
      g_hash_table_insert (step_of, (gpointer) in, GINT_TO_POINTER (s + 1));
      GArray *mine = g_array_new (FALSE, FALSE, sizeof (int));
      int defined = -1;
      GPtrArray *welems = in->opcode == PS_OP_GET_TUPLE_ELEMENT && in->n_operands == 1
                          ? g_hash_table_lookup (while_elems, in->operands[0]) : NULL;
      const PsInstr *elem = !welems && in->opcode == PS_OP_GET_TUPLE_ELEMENT && in->n_operands == 1
                            ? tuple_element (in->operands[0], in->tuple_index) : NULL;
      const PsInstr *dus_base = in->opcode == PS_OP_DYNAMIC_UPDATE_SLICE && in->n_operands >= 2
                                ? in->operands[0] : NULL;
      if (welems)
        {
          if (in->tuple_index >= 0 && in->tuple_index < (int64_t) welems->len)
            {
              GArray *src = g_ptr_array_index (welems, in->tuple_index);
              g_array_append_vals (mine, src->data, src->len);
            }
        }
      else if (elem)
        {
          /* precise: only the selected element stays alive */
          GArray *src = g_hash_table_lookup (refs, elem);
          if (src)
            g_array_append_vals (mine, src->data, src->len);
        }
      else if (in->opcode == PS_OP_WHILE && in->n_operands == 1
               && in->operands[0]->opcode == PS_OP_TUPLE)
        {
          /* XLA's copy insertion: the loop updates its state in place, so an
           * element the body writes gets a buffer of its own unless the
           * init value is a buffer nothing else reads (not a parameter,
           * constant or broadcast, no other user). Read-only elements
           * alias their init value. */
          const PsInstr *init = in->operands[0];
          GPtrArray *elems = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
          for (int k = 0; k < init->n_operands; k++)
            {
              const PsInstr *v = init->operands[k];
              GArray *src = g_hash_table_lookup (refs, v);
              GArray *e = g_array_new (FALSE, FALSE, sizeof (int));
              gboolean copy = FALSE;
              if (while_writes (in, k))
                copy = v->users->len > 1 || !writable (bufs, src, state);
              if (copy)
                {
                  uint64_t size = bytes_of (ctx, v->shape);
                  Buffer b = { v, size, size, s, s, (int) bufs->len };
                  int bi = (int) bufs->len;
                  g_array_append_val (bufs, b);
                  g_array_append_val (e, bi);
                }
              else if (src)
                g_array_append_vals (e, src->data, src->len);
              g_array_append_vals (mine, e->data, e->len);
              g_ptr_array_add (elems, e);
            }
          g_hash_table_insert (while_elems, (gpointer) in, elems);
        }
      else if (dus_base && last_reader (ctx, dus_base, in, step_of, 0)
               && writable (bufs, g_hash_table_lookup (refs, dus_base), state))
        {
          /* in place: the updated value takes over its operand's buffer */
          GArray *src = g_hash_table_lookup (refs, dus_base);
          if (src)
            g_array_append_vals (mine, src->data, src->len);
        }
      else if (is_alias (ctx, in))
        {
          int limit = in->opcode == PS_OP_WHILE ? MIN (in->n_operands, 1) : in->n_operands;
          g_autoptr (GHashTable) seen = g_hash_table_new (NULL, NULL);
          for (int j = 0; j < limit; j++)
            {
              GArray *src = g_hash_table_lookup (refs, in->operands[j]);
              for (guint k = 0; src && k < src->len; k++)
                {
                  int b = g_array_index (src, int, k);
                  if (g_hash_table_add (seen, GINT_TO_POINTER (b + 1)))
                    g_array_append_val (mine, b);
                }
            }
        }
      else
        {
          gboolean whole = in->opcode == PS_OP_PARAMETER || in->opcode == PS_OP_CONSTANT;
          uint64_t size = bn_fused_bytes (ctx, in, refs, mine);
          Buffer b = { in, size, size, whole ? -1 : s, whole ? -1 : s, (int) bufs->len };
          defined = (int) bufs->len;
          g_array_append_val (bufs, b);
          g_array_append_val (mine, defined);
          if (whole)
            always += b.bytes;
          if (in->opcode == PS_OP_PARAMETER)
            params_only += b.bytes;
        }
      g_array_append_val (def_buf, defined);
      g_hash_table_insert (refs, (gpointer) in, mine);
    }
  /* last uses; outputs live to the end */
  for (int s = 0; s < n; s++)
    {
      const PsInstr *in = g_ptr_array_index (order, s);
      for (int j = 0; j < in->n_operands; j++)
        {
          GArray *src = g_hash_table_lookup (refs, in->operands[j]);
          for (guint k = 0; src && k < src->len; k++)
            {
              Buffer *b = &g_array_index (bufs, Buffer, g_array_index (src, int, k));
              b->last_use = MAX (b->last_use, s);
            }
        }
    }
  if (given && ctx->done_before)
    extend_async_operands (ctx->done_before, order, step_of, refs, bufs);
  uint64_t donated = comp->parent && comp == comp->parent->entry
                     ? donate_outputs (comp, refs, bufs) : 0;
  GArray *out = comp->root ? g_hash_table_lookup (refs, comp->root) : NULL;
  for (guint k = 0; k < bufs->len; k++)
    {
      Buffer *b = &g_array_index (bufs, Buffer, k);
      if (b->def_step < 0)
        b->last_use = n;
    }
  for (guint k = 0; out && k < out->len; k++)
    g_array_index (bufs, Buffer, g_array_index (out, int, k)).last_use = n;
  share_in_place (ctx, order, refs, def_buf, bufs);
  /* allocations and frees per step; what stays to the end is the outputs'
   * storage */
  g_autofree uint64_t *freed = g_new0 (uint64_t, n + 1);
  g_autofree uint64_t *born = g_new0 (uint64_t, n + 1);
  uint64_t output_bytes = 0;
  for (guint k = 0; k < bufs->len; k++)
    {
      const Buffer *b = &g_array_index (bufs, Buffer, k);
      if (b->def_step >= 0)
        born[b->def_step] += b->alloc;
      if (b->def_step >= 0 && b->last_use < n)
        freed[b->last_use] += b->alloc;
      else if (b->def_step >= 0)
        output_bytes += b->alloc;
    }
  uint64_t live = always, peak = always;
  int peak_step = -1;
  for (int s = 0; s < n; s++)
    {
      const PsInstr *in = g_ptr_array_index (order, s);
      live += born[s];
      uint64_t now = live + callee_temp (ctx, in);
      if (now > peak)
        {
          peak = now;
          peak_step = s;
        }
      live -= freed[s];
      if (r)
        g_array_append_val (r->live_after_bytes, live);
    }
  if (r)
    {
      for (int s = 0; s < n; s++)
        g_ptr_array_add (r->order, g_ptr_array_index (order, s));
      r->peak_bytes = peak;
      r->parameter_bytes = always;
      r->output_bytes = output_bytes;
      r->donated_bytes = donated;
      r->temp_peak_bytes = peak - always;
      r->peak_instr = peak_step >= 0 ? g_ptr_array_index (order, peak_step) : NULL;
      for (guint k = 0; k < bufs->len; k++)
        {
          const Buffer *b = &g_array_index (bufs, Buffer, k);
          if (b->alloc > 0 && b->def_step <= peak_step && b->last_use >= peak_step)
            {
              PsMemoryHolder h = { b->def, b->alloc };
              g_array_append_val (r->holders, h);
            }
        }
    }
  if (param_bytes)
    *param_bytes = params_only;
  return peak;
}

static uint64_t
comp_temp_peak (Ctx *ctx, const PsComputation *c, gboolean state)
{
  uint64_t *known = g_hash_table_lookup (ctx->temp_peak, c);
  if (known)
    return *known;
  uint64_t params = 0;
  uint64_t peak = walk (ctx, c, NULL, &params, state);
  uint64_t *v = g_new (uint64_t, 1);
  /* the callee's parameters are the caller's buffers */
  *v = peak - params;
  g_hash_table_insert (ctx->temp_peak, (gpointer) c, v);
  return *v;
}

static int
cmp_holder (gconstpointer a, gconstpointer b)
{
  const PsMemoryHolder *x = a, *y = b;
  if (x->bytes != y->bytes)
    return x->bytes > y->bytes ? -1 : 1;
  return x->instr->id < y->instr->id ? -1 : x->instr->id > y->instr->id;
}

PsMemoryReport *
ps_memory_analyze (const PsModule *m, const PsCostAnalysis *cost, GError **error)
{
  return ps_memory_analyze_schedule (m, cost, NULL, NULL, error);
}

PsMemoryReport *
ps_memory_analyze_schedule (const PsModule *m, const PsCostAnalysis *cost, GHashTable *orders,
                            GHashTable *done_before, GError **error)
{
  g_return_val_if_fail (m != NULL, NULL);
  if (!m->entry)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "module %s has no entry computation",
                   m->name ? m->name : "?");
      return NULL;
    }
  Ctx ctx = { cost, g_hash_table_new_full (NULL, NULL, NULL, g_free), orders, done_before };
  PsMemoryReport *r = g_new0 (PsMemoryReport, 1);
  r->holders = g_array_new (FALSE, FALSE, sizeof (PsMemoryHolder));
  r->order = g_ptr_array_new ();
  r->live_after_bytes = g_array_new (FALSE, FALSE, sizeof (uint64_t));
  walk (&ctx, m->entry, r, NULL, FALSE);
  g_array_sort (r->holders, cmp_holder);
  g_hash_table_unref (ctx.temp_peak);
  return r;
}

/* Is c the body of some while of m (its parameter the loop state)? */
static gboolean
is_while_body (const PsModule *m, const PsComputation *c)
{
  for (guint i = 0; i < m->computations->len; i++)
    {
      const PsComputation *k = g_ptr_array_index (m->computations, i);
      for (guint j = 0; j < k->instrs->len; j++)
        {
          const PsInstr *in = g_ptr_array_index (k->instrs, j);
          if (in->opcode == PS_OP_WHILE && in->n_called >= 2 && in->called[1] == c)
            return TRUE;
        }
    }
  return FALSE;
}

uint64_t
ps_memory_computation_peak (const PsModule *m, const PsCostAnalysis *cost,
                            const PsComputation *c, GHashTable *orders, GHashTable *done_before)
{
  g_return_val_if_fail (m != NULL && c != NULL, 0);
  Ctx ctx = { cost, g_hash_table_new_full (NULL, NULL, NULL, g_free), orders, done_before };
  uint64_t peak = walk (&ctx, c, NULL, NULL, c != m->entry && is_while_body (m, c));
  g_hash_table_unref (ctx.temp_peak);
  return peak;
}

void
ps_memory_report_free (PsMemoryReport *r)
{
  if (!r)
    return;
  g_array_unref (r->holders);
  g_ptr_array_unref (r->order);
  g_array_unref (r->live_after_bytes);
  g_free (r);
}

uint64_t
ps_memory_live_after (const PsMemoryReport *r, const PsInstr *instr)
{
  for (guint i = 0; i < r->order->len; i++)
    if (g_ptr_array_index (r->order, i) == instr)
      return g_array_index (r->live_after_bytes, uint64_t, i);
  return 0;
}

char *
ps_memory_report_to_string (const PsMemoryReport *r, int max_holders)
{
  GString *s = g_string_new (NULL);
  g_autofree char *peak = ps_format_bytes ((double) r->peak_bytes);
  g_autofree char *params = ps_format_bytes ((double) r->parameter_bytes);
  g_autofree char *temps = ps_format_bytes ((double) r->temp_peak_bytes);
  g_autofree char *outs = ps_format_bytes ((double) r->output_bytes);
  g_autofree char *don = ps_format_bytes ((double) r->donated_bytes);
  g_string_append_printf (s, "per-device peak %s (%" G_GUINT64_FORMAT " bytes) at %s: "
                          "parameters %s, temporaries and outputs %s (outputs %s; %s more "
                          "written over donated parameters)\n",
                          peak, (guint64) r->peak_bytes,
                          r->peak_instr ? r->peak_instr->name : "entry",
                          params, temps, outs, don);
  for (guint i = 0; i < r->holders->len && (int) i < max_holders; i++)
    {
      const PsMemoryHolder *h = &g_array_index (r->holders, PsMemoryHolder, i);
      g_autofree char *shape = ps_shape_to_string (h->instr->shape, FALSE);
      g_autofree char *b = ps_format_bytes ((double) h->bytes);
      g_string_append_printf (s, "  %-28s %-28s %12s\n", h->instr->name, shape, b);
    }
  return g_string_free (s, FALSE);
}

/* Memory analysis: liveness of buffers in sequential order (see memory.h). */
#include "config.h"

#include <string.h>

#include "partitioner/analysis/memory.h"

typedef struct {
  const PsInstr *def;      /* defining instruction */
  uint64_t bytes;
  int def_step;            /* -1: parameter or constant */
  int last_use;            /* step; n = live to the end */
} Buffer;

typedef struct {
  const PsCostAnalysis *cost;
  GHashTable *temp_peak;   /* PsComputation* -> uint64_t* (peak minus parameters) */
} Ctx;

static uint64_t
bytes_of (const PsShape *s)
{
  int64_t b = ps_shape_bytes (s);
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
      if (c && (c->fused || c->klass == PS_COST_INLINED))
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

static uint64_t
callee_temp (Ctx *ctx, const PsInstr *in)
{
  uint64_t t = 0;
  if (in->opcode != PS_OP_WHILE && in->opcode != PS_OP_CALL && in->opcode != PS_OP_CONDITIONAL)
    return 0;
  for (int k = 0; k < in->n_called; k++)
    t = MAX (t, comp_temp_peak (ctx, in->called[k], in->opcode == PS_OP_WHILE && k == 1));
  return t;
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
  g_autoptr (GPtrArray) order = ps_computation_post_order (comp);
  int n = (int) order->len;
  g_autoptr (GHashTable) step_of = g_hash_table_new (NULL, NULL);
  /* instruction -> GArray of buffer indices it refers to */
  g_autoptr (GHashTable) refs = g_hash_table_new_full (NULL, NULL, NULL,
                                                        (GDestroyNotify) g_array_unref);
  g_autoptr (GArray) bufs = g_array_new (FALSE, TRUE, sizeof (Buffer));
  /* while -> GPtrArray of GArray*: the buffers of each state element */
  g_autoptr (GHashTable) while_elems = g_hash_table_new_full (NULL, NULL, NULL,
                                                               (GDestroyNotify) g_ptr_array_unref);
  uint64_t always = 0, params_only = 0;

  for (int s = 0; s < n; s++)
    {
      const PsInstr *in = g_ptr_array_index (order, s);
      g_hash_table_insert (step_of, (gpointer) in, GINT_TO_POINTER (s));
      GArray *mine = g_array_new (FALSE, FALSE, sizeof (int));
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
                  Buffer b = { v, bytes_of (v->shape), s, s };
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
          Buffer b = { in, bytes_of (in->shape), whole ? -1 : s, whole ? n : s };
          int defined = (int) bufs->len;
          g_array_append_val (bufs, b);
          g_array_append_val (mine, defined);
          if (whole)
            always += b.bytes;
          if (in->opcode == PS_OP_PARAMETER)
            params_only += b.bytes;
        }
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
  GArray *out = comp->root ? g_hash_table_lookup (refs, comp->root) : NULL;
  uint64_t output_bytes = 0;
  for (guint k = 0; out && k < out->len; k++)
    {
      Buffer *b = &g_array_index (bufs, Buffer, g_array_index (out, int, k));
      if (b->def_step >= 0)
        output_bytes += b->bytes;
      b->last_use = n;
    }
  /* allocations and frees per step */
  g_autofree uint64_t *freed = g_new0 (uint64_t, n + 1);
  g_autofree uint64_t *born = g_new0 (uint64_t, n + 1);
  for (guint k = 0; k < bufs->len; k++)
    {
      const Buffer *b = &g_array_index (bufs, Buffer, k);
      if (b->def_step >= 0)
        born[b->def_step] += b->bytes;
      if (b->def_step >= 0 && b->last_use < n)
        freed[b->last_use] += b->bytes;
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
      r->temp_peak_bytes = peak - always;
      r->peak_instr = peak_step >= 0 ? g_ptr_array_index (order, peak_step) : NULL;
      for (guint k = 0; k < bufs->len; k++)
        {
          const Buffer *b = &g_array_index (bufs, Buffer, k);
          if (b->bytes > 0 && b->def_step <= peak_step && b->last_use >= peak_step)
            {
              PsMemoryHolder h = { b->def, b->bytes };
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
  g_return_val_if_fail (m != NULL, NULL);
  if (!m->entry)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "module %s has no entry computation",
                   m->name ? m->name : "?");
      return NULL;
    }
  Ctx ctx = { cost, g_hash_table_new_full (NULL, NULL, NULL, g_free) };
  PsMemoryReport *r = g_new0 (PsMemoryReport, 1);
  r->holders = g_array_new (FALSE, FALSE, sizeof (PsMemoryHolder));
  r->order = g_ptr_array_new ();
  r->live_after_bytes = g_array_new (FALSE, FALSE, sizeof (uint64_t));
  walk (&ctx, m->entry, r, NULL, FALSE);
  g_array_sort (r->holders, cmp_holder);
  g_hash_table_unref (ctx.temp_peak);
  return r;
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
  g_string_append_printf (s, "per-device peak %s (%" G_GUINT64_FORMAT " bytes) at %s: "
                          "parameters %s, temporaries and outputs %s (outputs %s)\n",
                          peak, (guint64) r->peak_bytes,
                          r->peak_instr ? r->peak_instr->name : "entry",
                          params, temps, outs);
  for (guint i = 0; i < r->holders->len && (int) i < max_holders; i++)
    {
      const PsMemoryHolder *h = &g_array_index (r->holders, PsMemoryHolder, i);
      g_autofree char *shape = ps_shape_to_string (h->instr->shape, FALSE);
      g_autofree char *b = ps_format_bytes ((double) h->bytes);
      g_string_append_printf (s, "  %-28s %-28s %12s\n", h->instr->name, shape, b);
    }
  return g_string_free (s, FALSE);
}

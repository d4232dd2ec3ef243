/* Asynchronous pairs, variadic collectives and add-dependency made into the
 * synchronous single-operand forms the later stages work on (async.h). */
#include "config.h"

#include <string.h>

#include "partitioner/ir/async.h"
#include "partitioner/ir/sharding.h"

/* The -start opcode a -done completes, and the synchronous opcode of both. */
static gboolean
pair_of (PsOpcode done, PsOpcode *start, PsOpcode *sync)
{
  switch (done)
    {
    case PS_OP_ALL_GATHER_DONE: *start = PS_OP_ALL_GATHER_START; *sync = PS_OP_ALL_GATHER; return TRUE;
    case PS_OP_ALL_REDUCE_DONE: *start = PS_OP_ALL_REDUCE_START; *sync = PS_OP_ALL_REDUCE; return TRUE;
    case PS_OP_COLLECTIVE_PERMUTE_DONE:
      *start = PS_OP_COLLECTIVE_PERMUTE_START;
      *sync = PS_OP_COLLECTIVE_PERMUTE;
      return TRUE;
    case PS_OP_COPY_DONE: *start = PS_OP_COPY_START; *sync = PS_OP_COPY; return TRUE;
    case PS_OP_ASYNC_DONE: *start = PS_OP_ASYNC_START; *sync = PS_OP_CALL; return TRUE;
    default: return FALSE;
    }
}

/* Puts `x` (just appended to c) right before `before` in program order, so
 * that it precedes every user of the instruction it replaces. */
static void
move_before (PsComputation *c, PsInstr *x, const PsInstr *before)
{
  g_ptr_array_remove_index (c->instrs, c->instrs->len - 1);
  guint at = 0;
  while (at < c->instrs->len && g_ptr_array_index (c->instrs, at) != before)
    at++;
  g_ptr_array_insert (c->instrs, (gint) at, x);
}

/* Replaces `old` by `x` everywhere, removes `old` and gives x its name (so
 * --shard and reports keep naming what the dump named). */
static void
take_place (PsComputation *c, PsInstr *old, PsInstr *x)
{
  g_autofree char *name = g_strdup (old->name);
  if (old->sharding && !x->sharding)
    ps_instr_set_sharding (x, old->sharding);
  ps_instr_replace_all_uses (old, x);
  ps_computation_remove_instr (c, old);
  /* Renamed in the module's name index too, so that a fresh name made
   * later cannot repeat it. */
  PsModule *m = c->parent;
  if (m && m->name_index && g_hash_table_lookup (m->name_index, x->name) == x)
    g_hash_table_remove (m->name_index, x->name);
  g_free (x->name);
  x->name = g_steal_pointer (&name);
  if (m && m->name_index)
    g_hash_table_replace (m->name_index, g_strdup (x->name), x);
}

/* The instruction the async-start's computation wraps, when its operands
 * are all parameters of it (XLA's async wrapping makes exactly that). */
static const PsInstr *
wrapped_root (const PsComputation *w)
{
  const PsInstr *r = w ? w->root : NULL;
  if (!r || r->opcode == PS_OP_PARAMETER)
    return NULL;
  for (int i = 0; i < r->n_operands; i++)
    if (r->operands[i]->opcode != PS_OP_PARAMETER)
      return NULL;
  return r;
}

static PsInstr *
sync_pair (PsComputation *c, PsInstr *done, PsAsyncStats *st, GError **error)
{
  PsOpcode want, sync;
  pair_of (done->opcode, &want, &sync);
  PsInstr *start = done->operands[0];
  while (start->opcode == PS_OP_ASYNC_UPDATE && done->opcode == PS_OP_ASYNC_DONE)
    start = start->operands[0];
  if (start->opcode != want)
    {
      ps_instr_error (error, PS_ERROR_INVALID, done, "%s takes the %s it completes, not %s '%s'",
                      ps_opcode_name (done->opcode), ps_opcode_name (want), ps_opcode_name (start->opcode),
                      start->name);
      return NULL;
    }
  PsInstr *x;
  if (want == PS_OP_ASYNC_START)
    {
      const PsComputation *w = start->n_called > 0 ? start->called[0] : NULL;
      const PsInstr *r = wrapped_root (w);
      if (r)
        {
          int n = r->n_operands;
          PsInstr *ops[n > 0 ? n : 1];
          for (int i = 0; i < n; i++)
            {
              int64_t k = r->operands[i]->parameter_number;
              if (k < 0 || k >= start->n_operands)
                {
                  ps_instr_error (error, PS_ERROR_INVALID, start, "async-start passes %d operands, its "
                                  "computation reads parameter %" G_GINT64_FORMAT, start->n_operands, k);
                  return NULL;
                }
              ops[i] = start->operands[k];
            }
          x = ps_computation_add_instr (c, r->opcode, NULL, ps_shape_copy (done->shape), n, ops);
          ps_instr_copy_attrs (x, r);
          ps_instr_set_called (x, r->n_called, r->called);
        }
      else
        {
          x = ps_computation_add_instr (c, PS_OP_CALL, NULL, ps_shape_copy (done->shape), start->n_operands,
                                        start->operands);
          PsComputation *callee = (PsComputation *) w;
          ps_instr_set_called (x, 1, &callee);
        }
    }
  else
    {
      x = ps_computation_add_instr (c, sync, NULL, ps_shape_copy (done->shape), start->n_operands,
                                    start->operands);
      ps_instr_copy_attrs (x, start);
      ps_instr_set_called (x, start->n_called, start->called);
    }
  x->src_line = done->src_line;
  x->src_col = done->src_col;
  if (start->sharding && !done->sharding && ps_sharding_is_tuple (start->sharding)
      && start->sharding->n_elems >= 2 && ps_shape_is_array (x->shape))
    ps_instr_set_sharding (x, start->sharding->elems[1]);
  move_before (c, x, done);
  take_place (c, done, x);
  /* The -start (and updates between) now feed nothing but each other. */
  while (start->users->len == 1 && ((PsInstr *) g_ptr_array_index (start->users, 0))->opcode == PS_OP_ASYNC_UPDATE)
    {
      PsInstr *u = g_ptr_array_index (start->users, 0);
      if (u->users->len > 0)
        break;
      ps_computation_remove_instr (c, u);
    }
  if (start->users->len == 0 && start != c->root)
    ps_computation_remove_instr (c, start);
  st->pairs++;
  return x;
}

static gboolean
is_variadic_collective (const PsInstr *in)
{
  return (in->opcode == PS_OP_ALL_GATHER || in->opcode == PS_OP_REDUCE_SCATTER
          || in->opcode == PS_OP_ALL_REDUCE)
         && in->n_operands > 1 && ps_shape_is_tuple (in->shape) && in->shape->n_elems == in->n_operands;
}

static void
split_variadic (PsComputation *c, PsInstr *in, PsAsyncStats *st)
{
  int n = in->n_operands;
  PsInstr *parts[n];
  for (int i = 0; i < n; i++)
    {
      parts[i] = ps_computation_add_instr (c, in->opcode, NULL, ps_shape_copy (in->shape->elems[i]), 1,
                                           &in->operands[i]);
      ps_instr_copy_attrs (parts[i], in);
      ps_instr_set_called (parts[i], in->n_called, in->called);
      parts[i]->src_line = in->src_line;
      parts[i]->src_col = in->src_col;
      if (in->sharding && ps_sharding_is_tuple (in->sharding) && i < in->sharding->n_elems)
        ps_instr_set_sharding (parts[i], in->sharding->elems[i]);
      move_before (c, parts[i], in);
    }
  PsInstr *t = ps_computation_add_instr (c, PS_OP_TUPLE, NULL, ps_shape_copy (in->shape), n, parts);
  move_before (c, t, in);
  take_place (c, in, t);
  st->split++;
}

gboolean
ps_async_make_synchronous (PsModule *m, PsAsyncStats *stats, GError **error)
{
  g_return_val_if_fail (m != NULL, FALSE);
  PsAsyncStats st = { 0 };
  for (guint ci = 0; ci < m->computations->len; ci++)
    {
      PsComputation *c = g_ptr_array_index (m->computations, ci);
      /* A snapshot: the rewrites add and remove instructions. */
      GPtrArray *snap = g_ptr_array_copy (c->instrs, NULL, NULL);
      GHashTable *gone = g_hash_table_new (NULL, NULL); /* removed, not to be visited */
      for (guint i = 0; i < snap->len; i++)
        {
          PsInstr *in = g_ptr_array_index (snap, i);
          if (g_hash_table_contains (gone, in))
            continue;
          PsOpcode s0, s1;
          if (pair_of (in->opcode, &s0, &s1))
            {
              /* The -start and updates come before their -done in program
               * order, so only the -done itself leaves the snapshot's rest. */
              g_hash_table_add (gone, in);
              PsInstr *x = sync_pair (c, in, &st, error);
              if (!x)
                {
                  g_ptr_array_free (snap, TRUE);
                  g_hash_table_destroy (gone);
                  return FALSE;
                }
              if (is_variadic_collective (x))
                split_variadic (c, x, &st);
            }
          else if (is_variadic_collective (in))
            {
              g_hash_table_add (gone, in);
              split_variadic (c, in, &st);
            }
          else if (in->opcode == PS_OP_ADD_DEPENDENCY && in->n_operands == 2)
            {
              g_hash_table_add (gone, in);
              PsInstr *x = in->operands[0];
              ps_instr_replace_all_uses (in, x);
              ps_computation_remove_instr (c, in);
              st.dependencies++;
            }
        }
      g_ptr_array_free (snap, TRUE);
      g_hash_table_destroy (gone);
    }
  /* A -start left without its -done (the dump was cut) is an error too. */
  for (guint ci = 0; ci < m->computations->len; ci++)
    {
      PsComputation *c = g_ptr_array_index (m->computations, ci);
      for (guint i = 0; i < c->instrs->len; i++)
        {
          PsInstr *in = g_ptr_array_index (c->instrs, i);
          if (in->opcode == PS_OP_ALL_GATHER_START || in->opcode == PS_OP_ALL_REDUCE_START
              || in->opcode == PS_OP_COLLECTIVE_PERMUTE_START || in->opcode == PS_OP_COPY_START
              || in->opcode == PS_OP_ASYNC_START || in->opcode == PS_OP_ASYNC_UPDATE)
            {
              ps_instr_error (error, PS_ERROR_UNSUPPORTED, in, "%s has no matching -done; podsim "
                              "simulates asynchronous pairs only as a whole", ps_opcode_name (in->opcode));
              return FALSE;
            }
        }
    }
  if (stats)
    *stats = st;
  return TRUE;
}

gboolean
ps_async_module_is_partitioned (const PsModule *m)
{
  g_return_val_if_fail (m != NULL, FALSE);
  if (m->entry && g_str_has_suffix (m->entry->name, "_spmd"))
    return TRUE;
  gboolean sharded = FALSE, spmd_ops = FALSE;
  for (guint ci = 0; ci < m->computations->len; ci++)
    {
      const PsComputation *c = g_ptr_array_index (m->computations, ci);
      for (guint i = 0; i < c->instrs->len; i++)
        {
          const PsInstr *in = g_ptr_array_index (c->instrs, i);
          if (in->sharding)
            sharded = TRUE;
          if (in->opcode == PS_OP_PARTITION_ID
              || ps_opcode_is_collective (in->opcode)
              || in->opcode == PS_OP_ALL_GATHER_START || in->opcode == PS_OP_ALL_REDUCE_START
              || in->opcode == PS_OP_COLLECTIVE_PERMUTE_START)
            spmd_ops = TRUE;
        }
    }
  return spmd_ops && !sharded;
}

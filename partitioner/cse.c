/* CSE and DCE: see cse.h. */
#include "config.h"

#include "partitioner/cse.h"

#include <string.h>

#include "partitioner/hlo_printer.h"

static gboolean
has_side_effects (const PsInstr *in)
{
  switch (in->opcode)
    {
    case PS_OP_PARAMETER:
    case PS_OP_RNG:
    case PS_OP_RNG_BIT_GENERATOR:
    case PS_OP_INFEED:
    case PS_OP_OUTFEED:
    case PS_OP_SEND:
    case PS_OP_SEND_DONE:
    case PS_OP_RECV:
    case PS_OP_RECV_DONE:
    case PS_OP_CUSTOM_CALL:
    case PS_OP_WHILE:
    case PS_OP_CONDITIONAL:
    case PS_OP_CALL:
    case PS_OP_CALL_START:
    case PS_OP_CALL_DONE:
    case PS_OP_AFTER_ALL:
    case PS_OP_OPTIMIZATION_BARRIER:
    case PS_OP_DOMAIN:
      return TRUE;
    default:
      return FALSE;
    }
}

/* The instruction's text without its name and without channel ids: equal
 * keys mean equal values. Operands print by name, and earlier merges have
 * already pointed them at their representatives. */
static char *
instr_key (const PsInstr *in)
{
  g_autofree char *text = ps_hlo_instr_to_string (in, NULL);
  const char *eq = strstr (text, " = ");
  GString *k = g_string_new (eq ? eq + 3 : text);
  char *ch;
  while ((ch = strstr (k->str, ", channel_id=")) != NULL)
    {
      gsize at = (gsize) (ch - k->str);
      gsize end = at + strlen (", channel_id=");
      while (end < k->len && g_ascii_isdigit (k->str[end]))
        end++;
      g_string_erase (k, (gssize) at, (gssize) (end - at));
    }
  return g_string_free (k, FALSE);
}

/* Only communication and the index arithmetic the partitioner emits around
 * it are merged: merging computation would also merge a rematerialised
 * layer with its original forward pass (they are the same ops on the same
 * inputs), undoing the remat. XLA keeps them apart with optimization
 * barriers; podsim simply leaves compute alone. `plain` holds instructions
 * that depend only on constants, iota and the partition id. */
static gboolean
mergeable (const PsInstr *in, GHashTable *plain)
{
  if (ps_opcode_is_collective (in->opcode))
    return TRUE;
  switch (in->opcode)
    {
    case PS_OP_CONSTANT:
    case PS_OP_IOTA:
    case PS_OP_PARTITION_ID:
    case PS_OP_REPLICA_ID:
      return TRUE;
    default:
      break;
    }
  if (in->n_operands == 0)
    return FALSE;
  for (int i = 0; i < in->n_operands; i++)
    if (!g_hash_table_contains (plain, in->operands[i]))
      return FALSE;
  return TRUE;
}

static void
cse_computation (PsComputation *c, PsCseStats *st)
{
  g_autoptr (GHashTable) seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr (GHashTable) dead = g_hash_table_new (NULL, NULL);
  g_autoptr (GHashTable) plain = g_hash_table_new (NULL, NULL);
  for (guint i = 0; i < c->instrs->len; i++)
    {
      PsInstr *in = c->instrs->pdata[i];
      if (has_side_effects (in) || in == c->root || !mergeable (in, plain))
        continue;
      if (!ps_opcode_is_collective (in->opcode))
        g_hash_table_add (plain, in);
      char *key = instr_key (in);
      PsInstr *rep = g_hash_table_lookup (seen, key);
      if (rep)
        {
          ps_instr_replace_all_uses (in, rep);
          g_hash_table_add (dead, in);
          st->merged++;
          g_free (key);
        }
      else
        g_hash_table_insert (seen, key, in);
    }
  /* Dead code: walk backwards so users are decided before their operands. */
  for (guint i = c->instrs->len; i-- > 0;)
    {
      PsInstr *in = c->instrs->pdata[i];
      if (in == c->root || has_side_effects (in) || g_hash_table_contains (dead, in))
        continue;
      gboolean used = FALSE;
      for (guint u = 0; u < in->users->len && !used; u++)
        used = !g_hash_table_contains (dead, in->users->pdata[u]);
      if (!used)
        g_hash_table_add (dead, in);
    }
  st->removed += g_hash_table_size (dead);
  ps_computation_remove_instrs (c, dead);
}

void
ps_cse_module (PsModule *m, PsCseStats *stats)
{
  PsCseStats st = { 0, 0 };
  for (guint i = 0; i < m->computations->len; i++)
    cse_computation (m->computations->pdata[i], &st);
  if (stats)
    *stats = st;
}

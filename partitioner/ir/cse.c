/* CSE and DCE: see cse.h. */
#include "config.h"

#include "partitioner/ir/cse.h"

#include <string.h>

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
    case PS_OP_FUSION:
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

/* The CSE key: the instruction itself, compared field by field
 * (ps_instr_same_value: opcode, shape, operands by identity, attributes
 * but the channel id), with a hash of the cheap fields. Operands are
 * compared by identity because earlier merges have already pointed them at
 * their representatives. The bulky fields (replica groups over thousands of
 * devices, source-target pairs, constant tables) are hashed from about 64
 * samples; equality compares them in full. */
typedef struct {
  const PsInstr *in;
  guint hash;
} CseKey;

/* Hashes at most about 64 evenly spaced entries: the key comparison
 * checks all of them, and a full pass over every 2048-device group list
 * was most of the key's cost. */
static guint
hash_i64 (guint h, const int64_t *v, gsize n)
{
  gsize step = n / 64 + 1;
  for (gsize i = 0; i < n; i += step)
    h = (h * 1000003u) ^ (guint) (v[i] ^ (v[i] >> 32));
  return h;
}

/* Sampled like hash_i64 (a 2048-entry s32 offset table is 8 KiB). */
static guint
hash_bytes (guint h, const guint8 *b, gsize n)
{
  gsize step = n / 256 + 1;
  for (gsize i = 0; i < n; i += step)
    h = (h * 16777619u) ^ b[i];
  return (h * 16777619u) ^ (guint) n;
}

static CseKey *
instr_key (const PsInstr *in)
{
  CseKey *k = g_new0 (CseKey, 1);
  k->in = in;
  guint h = (guint) in->opcode;
  const PsShape *s = in->shape;
  if (s && s->etype != PS_TUPLE)
    h = hash_i64 ((h * 31u) ^ (guint) s->etype, s->dims, (gsize) s->rank);
  for (int i = 0; i < in->n_operands; i++)
    h = (h * 31u) ^ (guint) in->operands[i]->id;
  h = (h * 31u) ^ (guint) in->iota_dimension;
  h = hash_i64 ((h * 31u) ^ (guint) in->dimensions.n, in->dimensions.v, (gsize) in->dimensions.n);
  h = hash_i64 ((h * 31u) ^ (guint) in->n_groups, in->replica_groups,
                (gsize) in->n_groups * (gsize) in->group_size);
  h = hash_i64 ((h * 31u) ^ (guint) in->n_pairs, in->source_target_pairs, (gsize) in->n_pairs * 2);
  if (in->literal)
    h = hash_bytes (h, in->literal->data,
                    (gsize) in->literal->n * (gsize) ps_etype_size_bytes (in->literal->etype));
  k->hash = h;
  return k;
}

static guint
cse_key_hash (gconstpointer p)
{
  return ((const CseKey *) p)->hash;
}

static gboolean
cse_key_equal (gconstpointer pa, gconstpointer pb)
{
  const CseKey *ka = pa, *kb = pb;
  return ka->hash == kb->hash && ps_instr_same_value (ka->in, kb->in);
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
  g_autoptr (GHashTable) seen = g_hash_table_new_full (cse_key_hash, cse_key_equal, g_free, NULL);
  g_autoptr (GHashTable) dead = g_hash_table_new (NULL, NULL);
  g_autoptr (GHashTable) plain = g_hash_table_new (NULL, NULL);
  for (guint i = 0; i < c->instrs->len; i++)
    {
      PsInstr *in = c->instrs->pdata[i];
      if (has_side_effects (in) || in == c->root || !mergeable (in, plain))
        continue;
      if (!ps_opcode_is_collective (in->opcode))
        g_hash_table_add (plain, in);
      CseKey *key = instr_key (in);
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

/* CSE and DCE: see cse.h. */
#include "config.h"

#include "partitioner/ir/cse.h"

#include <math.h>
#include <string.h>

#include "partitioner/hlo/hlo_printer.h"

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
 * already pointed them at their representatives.
 *
 * The bulky parts of that text (replica groups over thousands of devices,
 * source-target pairs, integer constant tables) are compared as numbers
 * instead of printed: the text is printed from a shallow copy of the
 * instruction without them, and the key keeps a pointer to the instruction
 * to compare them. Their printed forms are injective (decimal integers in a
 * fixed layout), so two keys are equal exactly when the full texts would be:
 * the merges are the same, only the printing is saved (it was half of the
 * partition stage on 2048 devices). */
typedef struct {
  char *text;
  const PsInstr *in;
  gboolean raw_literal;  /* the literal is compared as bytes, not printed */
  guint hash;
} CseKey;

static gboolean
int_etype (PsElemType t)
{
  switch (t)
    {
    case PS_S8: case PS_S16: case PS_S32: case PS_S64:
    case PS_U8: case PS_U16: case PS_U32: case PS_U64:
      return TRUE;
    default:
      return FALSE;
    }
}

/* Whether no element is a NaN (all NaNs print as "nan", whatever their
 * bits). */
static gboolean
no_nan (const PsLiteral *l)
{
  for (int64_t i = 0; i < l->n; i++)
    switch (l->etype)
      {
      case PS_F32:
        if (isnan (((const float *) l->data)[i]))
          return FALSE;
        break;
      case PS_F64:
        if (isnan (((const double *) l->data)[i]))
          return FALSE;
        break;
      case PS_BF16:
        if ((((const guint16 *) l->data)[i] & 0x7fff) > 0x7f80)
          return FALSE;
        break;
      case PS_F16:
        if ((((const guint16 *) l->data)[i] & 0x7fff) > 0x7c00)
          return FALSE;
        break;
      default:
        return FALSE;
      }
  return TRUE;
}

/* A literal whose printed text is a function of its bytes and back,
 * printed in its own shape's layout: integers (not pred: any nonzero byte
 * prints "true"), and real floats without NaNs (the printer writes the
 * shortest text that reads back to the same value, and -0 as "-0"). */
static gboolean
literal_as_bytes (const PsInstr *in)
{
  const PsLiteral *l = in->literal;
  if (in->opcode != PS_OP_CONSTANT || !l || !in->shape || in->shape->etype == PS_TUPLE
      || l->etype != in->shape->etype || ps_shape_elements (in->shape) != l->n)
    return FALSE;
  if (int_etype (l->etype))
    return TRUE;
  switch (l->etype)
    {
    case PS_F16: case PS_BF16: case PS_F32: case PS_F64:
      return no_nan (l);
    default:
      return FALSE;
    }
}

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

static gsize
literal_bytes (const PsLiteral *l)
{
  return (gsize) l->n * (gsize) ps_etype_size_bytes (l->etype);
}

static char *
instr_text (const PsInstr *in)
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

static CseKey *
instr_key (const PsInstr *in)
{
  PsInstr stub = *in;
  stub.replica_groups = NULL;
  stub.n_groups = 0;
  stub.group_size = 0;
  stub.source_target_pairs = NULL;
  stub.n_pairs = 0;
  CseKey *k = g_new0 (CseKey, 1);
  k->in = in;
  k->raw_literal = literal_as_bytes (in);
  if (k->raw_literal)
    stub.literal = NULL;
  k->text = instr_text (&stub);
  guint h = g_str_hash (k->text);
  if (in->has_replica_groups)
    {
      h = (h * 31u) ^ (guint) in->n_groups;
      if (in->n_groups > 0)
        h = hash_i64 ((h * 31u) ^ (guint) in->group_size, in->replica_groups,
                      (gsize) in->n_groups * (gsize) in->group_size);
    }
  h = hash_i64 ((h * 31u) ^ (guint) in->n_pairs, in->source_target_pairs,
                (gsize) in->n_pairs * 2);
  if (k->raw_literal)
    h = hash_bytes (h, in->literal->data, literal_bytes (in->literal));
  k->hash = h;
  return k;
}

static void
cse_key_free (gpointer p)
{
  CseKey *k = p;
  g_free (k->text);
  g_free (k);
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
  const PsInstr *a = ka->in, *b = kb->in;
  if (ka->hash != kb->hash || ka->raw_literal != kb->raw_literal || strcmp (ka->text, kb->text) != 0)
    return FALSE;
  /* The texts are equal, so both print replica groups or neither. */
  if (a->has_replica_groups)
    {
      if (a->n_groups != b->n_groups)
        return FALSE;
      if (a->n_groups > 0
          && (a->group_size != b->group_size
              || memcmp (a->replica_groups, b->replica_groups,
                         sizeof (int64_t) * (gsize) a->n_groups * (gsize) a->group_size) != 0))
        return FALSE;
    }
  if (a->n_pairs != b->n_pairs
      || (a->n_pairs > 0
          && memcmp (a->source_target_pairs, b->source_target_pairs,
                     sizeof (int64_t) * 2 * (gsize) a->n_pairs) != 0))
    return FALSE;
  if (ka->raw_literal)
    {
      /* Equal texts: same shape, so the same element type and count. */
      const PsLiteral *la = a->literal, *lb = b->literal;
      if (la->etype != lb->etype || la->n != lb->n
          || memcmp (la->data, lb->data, literal_bytes (la)) != 0)
        return FALSE;
    }
  return TRUE;
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
  g_autoptr (GHashTable) seen = g_hash_table_new_full (cse_key_hash, cse_key_equal,
                                                      cse_key_free, NULL);
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
          cse_key_free (key);
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

/* What every handler and the resharder call back: the replicated
 * sharding, an instruction's sharding and its operand's partitioned value,
 * errors and the fallback report. They read the partitioning context only,
 * so the handlers' calls run one way: the driver (spmd.c) -> handlers
 * (spmd_dot.c, spmd_conv.c, spmd_norm.c, spmd_ops.c) -> resharding
 * (spmd_reshard.c) -> instruction builders (spmd_build.c) and this file. */
#include "config.h"

#include <stdarg.h>

#include "partitioner/spmd/spmd_private.h"

const PsSharding *
sp_replicated (void)
{
  static PsSharding *rep;
  if (g_once_init_enter (&rep))
    g_once_init_leave (&rep, ps_sharding_replicated ());
  return rep;
}

const PsSharding *
sp_sharding_of (const PsInstr *src)
{
  if (!src->sharding || src->sharding->kind == PS_SHARDING_UNKNOWN)
    return sp_replicated ();
  return src->sharding;
}

SpPVal *
sp_operand (SpComp *c, const PsInstr *src_instr, int i)
{
  return g_hash_table_lookup (c->vals, src_instr->operands[i]);
}

void
sp_fail (SpComp *c, PsErrorCode code, const char *fmt, ...)
{
  if (c->m->error)
    return;
  va_list ap;
  va_start (ap, fmt);
  char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  if (c->cur)
    ps_instr_error (&c->m->error, code, c->cur, "%s", msg);
  else
    c->m->error = g_error_new (PS_ERROR, code, "%s", msg);
  g_free (msg);
}

gboolean
sp_failed (SpComp *c)
{
  return c->m->error != NULL;
}

void
sp_note_fallback (SpComp *c, PsOpcode op)
{
  PsSpmdReport *r = c->m->opts.report;
  if (!r)
    return;
  r->n_fallbacks++;
  if (!r->fallback_ops)
    r->fallback_ops = g_hash_table_new (g_str_hash, g_str_equal);
  const char *name = ps_opcode_name (op);
  int k = GPOINTER_TO_INT (g_hash_table_lookup (r->fallback_ops, name));
  g_hash_table_insert (r->fallback_ops, (gpointer) name, GINT_TO_POINTER (k + 1));
}

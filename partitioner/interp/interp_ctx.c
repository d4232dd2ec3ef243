/* What the interpreter's op files call back into: its errors, the work
 * budget, and running a called computation (a reducer, comparator or
 * scatter combiner), which the engine (interp.c) does through the
 * context's hook, so the op files depend on this file and not on the
 * engine that dispatches to them. */
#include "config.h"

#include "partitioner/interp/interp_private.h"

void
ip_fail (GError **error, PsErrorCode code, const PsInstr *ins, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  if (ins && ins->src_line > 0)
    ps_instr_error (error, code, ins, "interpreter (%s): %s", ps_opcode_name (ins->opcode), msg);
  else if (ins)
    g_set_error (error, PS_ERROR, code, "interpreter: %s (%s): %s", ins->name,
                 ps_opcode_name (ins->opcode), msg);
  else
    g_set_error (error, PS_ERROR, code, "interpreter: %s", msg);
  g_free (msg);
}

gboolean
ip_charge (IpCtx *ctx, const PsInstr *ins, int64_t n, GError **error)
{
  ctx->work += MAX (n, 1);
  if (ctx->work > ctx->opts.max_work)
    {
      ip_fail (error, PS_ERROR_LIMIT, ins,
               "work limit of %" G_GINT64_FORMAT " element operations exceeded "
               "(program too large for the reference interpreter)",
               ctx->opts.max_work);
      return FALSE;
    }
  return TRUE;
}

const PsValue *
ip_call_fast (IpCtx *ctx, const PsComputation *c, int64_t device, int n_args,
              PsValue *const *args, PsValue **owned, GError **error)
{
  return ctx->call (ctx, c, device, n_args, args, owned, error);
}

PsValue *
ip_call (IpCtx *ctx, const PsComputation *c, int64_t device, int n_args,
         PsValue *const *args, GError **error)
{
  PsValue *owned = NULL;
  const PsValue *r = ip_call_fast (ctx, c, device, n_args, args, &owned, error);
  if (!r)
    return NULL;
  return owned ? owned : ps_value_copy (r);
}

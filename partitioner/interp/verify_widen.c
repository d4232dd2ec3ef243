/* Rechecking float programs in f64 arithmetic (see verify.h). */
#include "config.h"

#include <string.h>

#include "common/float16.h"
#include "partitioner/interp/verify.h"

/* Float types narrower than f64 (and complex narrower than c128). */
static gboolean
is_narrow_float (PsElemType t)
{
  return t == PS_BF16 || t == PS_F16 || t == PS_F32 || t == PS_C64 || ps_etype_minifloat (t);
}

static gboolean
shape_has_narrow (const PsShape *s)
{
  if (s->etype == PS_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (shape_has_narrow (s->elems[i]))
          return TRUE;
      return FALSE;
    }
  return is_narrow_float (s->etype);
}

static void
shape_widen (PsShape *s)
{
  if (s->etype == PS_TUPLE)
    for (int i = 0; i < s->n_elems; i++)
      shape_widen (s->elems[i]);
  else if (is_narrow_float (s->etype))
    s->etype = s->etype == PS_C64 ? PS_C128 : PS_F64;
}

gboolean
ps_verify_module_has_narrow_floats (const PsModule *m)
{
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        if (shape_has_narrow (((const PsInstr *) c->instrs->pdata[i])->shape))
          return TRUE;
    }
  return FALSE;
}

static double
literal_double (const PsLiteral *lit, int64_t e)
{
  switch (lit->etype)
    {
    case PS_BF16: return ps_bf16_to_f32 (((const uint16_t *) lit->data)[e]);
    case PS_F16: return ps_f16_to_f32 (((const uint16_t *) lit->data)[e]);
    default:
      if (ps_etype_minifloat (lit->etype))
        return ps_etype_minifloat_decode (lit->etype, ((const uint8_t *) lit->data)[e]);
      return ((const float *) lit->data)[e]; /* f32; c64 as 2n floats */
    }
}

gboolean
ps_verify_widen_floats (PsModule *m)
{
  /* A bitcast-convert reinterprets the bits: no f64 equivalent. */
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          const PsInstr *in = c->instrs->pdata[i];
          if (in->opcode == PS_OP_BITCAST_CONVERT
              && (shape_has_narrow (in->shape)
                  || (in->n_operands == 1 && shape_has_narrow (in->operands[0]->shape))))
            return FALSE;
        }
    }
  for (guint k = 0; k < m->computations->len; k++)
    {
      PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          PsInstr *in = c->instrs->pdata[i];
          shape_widen (in->shape);
          PsLiteral *lit = in->literal;
          if (lit && is_narrow_float (lit->etype))
            {
              gboolean cplx = lit->etype == PS_C64;
              PsLiteral *w = ps_literal_new (cplx ? PS_C128 : PS_F64, lit->n);
              double *dst = w->data;
              for (int64_t e = 0; e < (cplx ? 2 * lit->n : lit->n); e++)
                dst[e] = literal_double (lit, e);
              ps_literal_free (lit);
              in->literal = w;
            }
        }
    }
  g_clear_pointer (&m->entry_layout, g_free);
  return TRUE;
}

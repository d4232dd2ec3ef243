/* Rechecking 16-bit float programs in f32 arithmetic (see verify.h). */
#include "config.h"

#include <string.h>

#include "common/float16.h"
#include "partitioner/interp/verify.h"

static gboolean
is_16bit_float (PsElemType t)
{
  return t == PS_BF16 || t == PS_F16;
}

static gboolean
shape_has_16bit (const PsShape *s)
{
  if (s->etype == PS_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (shape_has_16bit (s->elems[i]))
          return TRUE;
      return FALSE;
    }
  return is_16bit_float (s->etype);
}

static void
shape_widen (PsShape *s)
{
  if (s->etype == PS_TUPLE)
    for (int i = 0; i < s->n_elems; i++)
      shape_widen (s->elems[i]);
  else if (is_16bit_float (s->etype))
    s->etype = PS_F32;
}

gboolean
ps_verify_module_has_16bit_floats (const PsModule *m)
{
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        if (shape_has_16bit (((const PsInstr *) c->instrs->pdata[i])->shape))
          return TRUE;
    }
  return FALSE;
}

gboolean
ps_verify_widen_floats (PsModule *m)
{
  /* A bitcast-convert reinterprets the 16 bits: no f32 equivalent. */
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          const PsInstr *in = c->instrs->pdata[i];
          if (in->opcode == PS_OP_BITCAST_CONVERT
              && (shape_has_16bit (in->shape)
                  || (in->n_operands == 1 && shape_has_16bit (in->operands[0]->shape))))
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
          if (lit && is_16bit_float (lit->etype))
            {
              PsLiteral *w = ps_literal_new (PS_F32, lit->n);
              const uint16_t *src = lit->data;
              float *dst = w->data;
              for (int64_t e = 0; e < lit->n; e++)
                dst[e] = lit->etype == PS_BF16 ? ps_bf16_to_f32 (src[e])
                                               : ps_f16_to_f32 (src[e]);
              ps_literal_free (lit);
              in->literal = w;
            }
        }
    }
  g_clear_pointer (&m->entry_layout, g_free);
  return TRUE;
}

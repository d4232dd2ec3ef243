/* The builder API (see builder.h), the forms the layer library writes
 * (models/net.h): a value itself when a cast or reshape would change
 * nothing, a constant shaped like a value, and reductions with the
 * reducer computations autodiff's gradients use, so that a model's sums
 * and their gradients share one "ad_<op>_<type>" reducer. Each checks its
 * operands and keeps the first error as every builder call does.
 */
#include "config.h"

#include "partitioner/builder/folder_private.h"
#include "partitioner/builder/builder_private.h"

PsInstr *
ps_build_cast (PsBuilder *b, PsInstr *x, PsElemType t)
{
  if (!bd_usable1 (b, x))
    return NULL;
  if (x->shape->etype == t)
    return x;
  return ps_build_convert (b, x, t);
}

PsInstr *
ps_build_full_like (PsBuilder *b, const PsShape *like, double value)
{
  g_return_val_if_fail (like != NULL, NULL);
  return ps_build_full (b, like->etype, like->rank, like->dims, value);
}

PsInstr *
ps_build_reshape_to (PsBuilder *b, PsInstr *x, const PsShape *to)
{
  g_return_val_if_fail (to != NULL, NULL);
  if (!bd_usable1 (b, x))
    return NULL;
  if (ps_shape_equal (x->shape, to))
    return x;
  return ps_build_reshape (b, x, to->rank, to->dims);
}

PsInstr *
ps_build_broadcast_to (PsBuilder *b, PsInstr *x, const PsShape *to, const int64_t *dims)
{
  g_return_val_if_fail (to != NULL, NULL);
  return ps_build_broadcast (b, x, to->rank, to->dims, dims);
}

PsInstr *
ps_build_reduce_op (PsBuilder *b, PsInstr *x, PsOpcode op, double init, int n_dims,
                    const int64_t *dims)
{
  g_return_val_if_fail (bd_is_binary_op (op), NULL);
  if (!bd_usable1 (b, x) || !bd_is_array (b, "reduce", x))
    return NULL;
  if (n_dims == 0)
    return x;
  const PsShape *xs = x->shape;
  int64_t out[64];
  int r = 0;
  for (int d = 0; d < xs->rank; d++)
    {
      gboolean reduced = FALSE;
      for (int i = 0; i < n_dims; i++)
        reduced |= dims[i] == d;
      if (!reduced)
        out[r++] = xs->dims[d];
    }
  if (r + n_dims != xs->rank)
    {
      bd_fail (b, "reduce", "the reduced dims are out of range or listed twice");
      return NULL;
    }
  PsInstr *k = ps_build_scalar (b, xs->etype, init);
  if (k == NULL)
    return NULL;
  PsInstr *ops[2] = { x, k };
  PsInstr *red = bd_add (b, PS_OP_REDUCE, ps_shape_new_array (xs->etype, r, out), 2, ops);
  /* The dims as given, as autodiff lists them; the reducer after the
   * reduce, as autodiff makes it (names follow creation order). */
  ps_ints_set (&red->dimensions, n_dims, dims);
  PsComputation *reducer = ad_reducer (b->m, op, xs->etype);
  ps_instr_set_called (red, 1, &reducer);
  return red;
}

PsInstr *
ps_build_sum (PsBuilder *b, PsInstr *x, int n_dims, const int64_t *dims)
{
  return ps_build_reduce_op (b, x, PS_OP_ADD, 0.0, n_dims, dims);
}

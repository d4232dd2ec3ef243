/* The unchecked instruction helpers of autodiff and the optimizers
 * (ad_*, folder_private.h): each appends one instruction (or a few) whose
 * shape follows from its operands. The gradient rules (autodiff.c,
 * autodiff_conv.c) call these and nothing here calls them back, as
 * spmd_build.c is to the partitioner's handlers. */
#include "config.h"

#include <string.h>

#include "partitioner/builder/folder_private.h"

PsInstr *
ad_scalar (PsComputation *c, PsElemType t, double value)
{
  PsInstr *k = ps_computation_add_instr (c, PS_OP_CONSTANT, NULL, ps_shape_new_scalar (t), 0, NULL);
  k->literal = ps_literal_new (t, 1);
  ps_literal_set_f64 (k->literal, 0, value);
  return k;
}

PsInstr *
ad_broadcast (PsComputation *c, PsInstr *a, const PsShape *shape, int n_dims,
                 const int64_t *dims)
{
  PsShape *s = ps_shape_new_array (a->shape->etype, shape->rank, shape->dims);
  PsInstr *b = ps_computation_add_instr (c, PS_OP_BROADCAST, NULL, s, 1, &a);
  ps_ints_set (&b->dimensions, n_dims, dims);
  return b;
}

PsInstr *
ad_full (PsComputation *c, const PsShape *like, double value)
{
  PsInstr *k = ad_scalar (c, like->etype, value);
  if (like->rank == 0)
    return k;
  return ad_broadcast (c, k, like, 0, NULL);
}

PsInstr *
ad_binary (PsComputation *c, PsOpcode op, PsInstr *a, PsInstr *b)
{
  PsInstr *ops[2] = { a, b };
  return ps_computation_add_instr (c, op, NULL, ps_shape_copy (a->shape), 2, ops);
}

PsInstr *
ad_unary (PsComputation *c, PsOpcode op, PsInstr *a)
{
  return ps_computation_add_instr (c, op, NULL, ps_shape_copy (a->shape), 1, &a);
}

PsInstr *
ad_convert (PsComputation *c, PsInstr *a, PsElemType t)
{
  if (a->shape->etype == t)
    return a;
  PsShape *s = ps_shape_new_array (t, a->shape->rank, a->shape->dims);
  return ps_computation_add_instr (c, PS_OP_CONVERT, NULL, s, 1, &a);
}

PsInstr *
ad_dynamic_slice (PsComputation *c, PsInstr *a, PsInstr *const *starts, const int64_t *sizes)
{
  int r = a->shape->rank;
  PsInstr *ops[65];
  ops[0] = a;
  for (int i = 0; i < r; i++)
    ops[i + 1] = starts[i];
  PsInstr *d = ps_computation_add_instr (c, PS_OP_DYNAMIC_SLICE, NULL,
                                         ps_shape_new_array (a->shape->etype, r, sizes), r + 1, ops);
  ps_ints_set (&d->dynamic_slice_sizes, r, sizes);
  return d;
}

PsInstr *
ad_dynamic_update_slice (PsComputation *c, PsInstr *a, PsInstr *update, PsInstr *const *starts)
{
  int r = a->shape->rank;
  PsInstr *ops[66];
  ops[0] = a;
  ops[1] = update;
  for (int i = 0; i < r; i++)
    ops[i + 2] = starts[i];
  return ps_computation_add_instr (c, PS_OP_DYNAMIC_UPDATE_SLICE, NULL, ps_shape_copy (a->shape),
                                   r + 2, ops);
}

PsInstr *
ad_tuple (PsComputation *c, int n, PsInstr *const *elems)
{
  g_autofree PsShape **shapes = g_new (PsShape *, n + 1);
  for (int i = 0; i < n; i++)
    shapes[i] = elems[i]->shape;
  return ps_computation_add_instr (c, PS_OP_TUPLE, NULL, ps_shape_new_tuple (n, shapes), n, elems);
}

PsComputation *
ad_reducer (PsModule *m, PsOpcode op, PsElemType t)
{
  g_autofree char *name = g_strdup_printf ("ad_%s_%s", ps_opcode_name (op), ps_etype_name (t));
  PsComputation *r = ps_module_find_computation (m, name);
  if (r)
    return r;
  r = ps_computation_new (m, name);
  /* Callees must precede their callers in the module. */
  g_ptr_array_remove (m->computations, r);
  g_ptr_array_insert (m->computations, 0, r);
  g_autofree char *xn = g_strdup_printf ("%s.x", name);
  g_autofree char *yn = g_strdup_printf ("%s.y", name);
  g_autofree char *rn = g_strdup_printf ("%s.%s", name, ps_opcode_name (op));
  PsInstr *x = ps_computation_add_instr (r, PS_OP_PARAMETER, xn, ps_shape_new_scalar (t), 0, NULL);
  x->parameter_number = 0;
  PsInstr *y = ps_computation_add_instr (r, PS_OP_PARAMETER, yn, ps_shape_new_scalar (t), 0, NULL);
  y->parameter_number = 1;
  g_ptr_array_add (r->params, x);
  g_ptr_array_add (r->params, y);
  PsInstr *ops[2] = { x, y };
  r->root = ps_computation_add_instr (r, op, rn, ps_shape_new_scalar (t), 2, ops);
  return r;
}

PsInstr *
ad_reduce (PsComputation *c, PsInstr *a, PsOpcode op, double init, int n_dims,
              const int64_t *dims)
{
  if (n_dims == 0)
    return a;
  const PsShape *as = a->shape;
  int64_t out_dims[64];
  int r = 0;
  for (int d = 0; d < as->rank; d++)
    {
      gboolean reduced = FALSE;
      for (int i = 0; i < n_dims; i++)
        reduced |= dims[i] == d;
      if (!reduced)
        out_dims[r++] = as->dims[d];
    }
  PsInstr *ops[2] = { a, ad_scalar (c, as->etype, init) };
  PsInstr *red = ps_computation_add_instr (c, PS_OP_REDUCE, NULL,
                                           ps_shape_new_array (as->etype, r, out_dims), 2, ops);
  ps_ints_set (&red->dimensions, n_dims, dims);
  PsComputation *reducer = ad_reducer (c->parent, op, as->etype);
  ps_instr_set_called (red, 1, &reducer);
  return red;
}

PsInstr *
ad_reduce_sum (PsComputation *c, PsInstr *a, int n_dims, const int64_t *dims)
{
  return ad_reduce (c, a, PS_OP_ADD, 0.0, n_dims, dims);
}

static PsInstr *
emit_transpose (PsComputation *c, PsInstr *a, const int64_t *perm)
{
  int rank = a->shape->rank;
  gboolean identity = TRUE;
  for (int i = 0; i < rank; i++)
    identity &= perm[i] == i;
  if (identity)
    return a;
  int64_t dims[64];
  for (int i = 0; i < rank; i++)
    dims[i] = a->shape->dims[perm[i]];
  PsInstr *t = ps_computation_add_instr (c, PS_OP_TRANSPOSE, NULL,
                                         ps_shape_new_array (a->shape->etype, rank, dims), 1, &a);
  ps_ints_set (&t->dimensions, rank, perm);
  return t;
}

static PsInstr *
emit_reshape (PsComputation *c, PsInstr *a, const PsShape *to)
{
  if (ps_shape_equal (a->shape, to))
    return a;
  PsShape *s = ps_shape_new_array (a->shape->etype, to->rank, to->dims);
  return ps_computation_add_instr (c, PS_OP_RESHAPE, NULL, s, 1, &a);
}

PsInstr *
ad_transpose (PsComputation *c, PsInstr *a, const int64_t *perm)
{
  return emit_transpose (c, a, perm);
}

PsInstr *
ad_reshape (PsComputation *c, PsInstr *a, const PsShape *to)
{
  return emit_reshape (c, a, to);
}


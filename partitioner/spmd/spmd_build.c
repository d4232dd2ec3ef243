/* Instruction builders for the SPMD partitioner: every local instruction and
 * collective the handlers emit goes through these, so shapes are computed in
 * one place and collectives always carry channel ids and global device ids;
 * and the scalar computations (reducers, comparators) copied verbatim into
 * the output, with the clones of instructions that call them. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "partitioner/spmd/spmd_private.h"

PsShape *
sp_shape (PsElemType t, int rank, const int64_t *dims)
{
  return ps_shape_new_array (t, rank, dims);
}

PsInstr *
sp_add (SpComp *c, PsOpcode op, PsShape *shape, int n, PsInstr *const *ops)
{
  return ps_computation_add_instr (c->out, op, NULL, shape, n, ops);
}

PsInstr *
sp_add1 (SpComp *c, PsOpcode op, PsShape *shape, PsInstr *a)
{
  return sp_add (c, op, shape, 1, &a);
}

PsInstr *
sp_add2 (SpComp *c, PsOpcode op, PsShape *shape, PsInstr *a, PsInstr *b)
{
  PsInstr *ops[2] = { a, b };
  return sp_add (c, op, shape, 2, ops);
}

static int64_t *
i64_dup (const int64_t *v, int64_t n)
{
  return n > 0 && v ? g_memdup2 (v, sizeof (int64_t) * (gsize) n) : NULL;
}

void
sp_copy_attrs (PsInstr *dst, const PsInstr *src)
{
  ps_instr_copy_attrs (dst, src);
}

/* ---- constants ---- */

PsInstr *
sp_const_scalar (SpComp *c, PsElemType t, double v)
{
  PsInstr *k = sp_add (c, PS_OP_CONSTANT, ps_shape_new_scalar (t), 0, NULL);
  k->literal = ps_literal_new (t, 1);
  ps_literal_set_f64 (k->literal, 0, v);
  return k;
}

PsInstr *
sp_const_zero (SpComp *c, PsElemType t)
{
  return sp_const_scalar (c, t, 0);
}

PsInstr *
sp_const_s32_vec (SpComp *c, int64_t n, const int64_t *v)
{
  PsInstr *k = sp_add (c, PS_OP_CONSTANT, sp_shape (PS_S32, 1, &n), 0, NULL);
  k->literal = ps_literal_new (PS_S32, n);
  for (int64_t i = 0; i < n; i++)
    ((int32_t *) k->literal->data)[i] = (int32_t) v[i];
  return k;
}

PsInstr *
sp_partition_id (SpComp *c)
{
  if (!c->pid)
    {
      PsInstr *p = sp_add (c, PS_OP_PARTITION_ID, ps_shape_new_scalar (PS_U32), 0, NULL);
      c->pid = sp_convert (c, p, PS_S32);
    }
  return c->pid;
}

PsInstr *
sp_table_lookup (SpComp *c, const int64_t *table)
{
  int64_t n = c->m->n;
  gboolean same = TRUE;
  for (int64_t i = 1; i < n; i++)
    if (table[i] != table[0])
      same = FALSE;
  if (same)
    return sp_const_scalar (c, PS_S32, (double) table[0]);
  PsInstr *k = sp_const_s32_vec (c, n, table);
  PsInstr *pid = sp_partition_id (c);
  int64_t one = 1;
  PsInstr *ds = sp_dynamic_slice (c, k, &pid, &one);
  return sp_reshape (c, ds, 0, NULL);
}

/* ---- shape ops ---- */

PsInstr *
sp_broadcast_scalar (SpComp *c, PsInstr *scalar, const PsShape *shape)
{
  return sp_broadcast (c, scalar, shape, 0, NULL);
}

PsInstr *
sp_broadcast (SpComp *c, PsInstr *x, const PsShape *shape, int n_dims, const int64_t *dims)
{
  PsInstr *b = sp_add1 (c, PS_OP_BROADCAST,
                        sp_shape (x->shape->etype, shape->rank, shape->dims), x);
  ps_ints_set (&b->dimensions, n_dims, dims);
  return b;
}

PsInstr *
sp_slice (SpComp *c, PsInstr *x, const int64_t *starts, const int64_t *limits)
{
  int r = x->shape->rank;
  gboolean noop = TRUE;
  int64_t dims[r > 0 ? r : 1], strides[r > 0 ? r : 1];
  for (int i = 0; i < r; i++)
    {
      dims[i] = limits[i] - starts[i];
      strides[i] = 1;
      if (starts[i] != 0 || limits[i] != x->shape->dims[i])
        noop = FALSE;
    }
  if (noop)
    return x;
  PsInstr *s = sp_add1 (c, PS_OP_SLICE, sp_shape (x->shape->etype, r, dims), x);
  ps_ints_set (&s->slice_starts, r, starts);
  ps_ints_set (&s->slice_limits, r, limits);
  ps_ints_set (&s->slice_strides, r, strides);
  return s;
}

PsInstr *
sp_pad (SpComp *c, PsInstr *x, PsInstr *padval, const int64_t *lo, const int64_t *hi)
{
  int r = x->shape->rank;
  gboolean noop = TRUE;
  int64_t dims[r > 0 ? r : 1];
  for (int i = 0; i < r; i++)
    {
      dims[i] = x->shape->dims[i] + lo[i] + hi[i];
      if (lo[i] != 0 || hi[i] != 0)
        noop = FALSE;
    }
  if (noop)
    return x;
  PsInstr *p = sp_add2 (c, PS_OP_PAD, sp_shape (x->shape->etype, r, dims), x, padval);
  p->n_pad = r;
  p->padding = g_new0 (PsPadDim, r > 0 ? r : 1);
  for (int i = 0; i < r; i++)
    {
      p->padding[i].lo = lo[i];
      p->padding[i].hi = hi[i];
    }
  return p;
}

PsInstr *
sp_dynamic_slice (SpComp *c, PsInstr *x, PsInstr *const *starts, const int64_t *sizes)
{
  int r = x->shape->rank;
  PsInstr *ops[r + 1];
  ops[0] = x;
  for (int i = 0; i < r; i++)
    ops[i + 1] = starts[i];
  PsInstr *d = sp_add (c, PS_OP_DYNAMIC_SLICE, sp_shape (x->shape->etype, r, sizes), r + 1, ops);
  ps_ints_set (&d->dynamic_slice_sizes, r, sizes);
  return d;
}

PsInstr *
sp_dynamic_update_slice (SpComp *c, PsInstr *x, PsInstr *upd, PsInstr *const *starts)
{
  int r = x->shape->rank;
  PsInstr *ops[r + 2];
  ops[0] = x;
  ops[1] = upd;
  for (int i = 0; i < r; i++)
    ops[i + 2] = starts[i];
  return sp_add (c, PS_OP_DYNAMIC_UPDATE_SLICE, ps_shape_copy (x->shape), r + 2, ops);
}

PsInstr *
sp_reshape (SpComp *c, PsInstr *x, int rank, const int64_t *dims)
{
  if (x->shape->rank == rank
      && (rank == 0 || memcmp (x->shape->dims, dims, sizeof (int64_t) * (gsize) rank) == 0))
    return x;
  return sp_add1 (c, PS_OP_RESHAPE, sp_shape (x->shape->etype, rank, dims), x);
}

PsInstr *
sp_transpose (SpComp *c, PsInstr *x, const int64_t *perm)
{
  int r = x->shape->rank;
  gboolean id = TRUE;
  int64_t dims[r > 0 ? r : 1];
  for (int i = 0; i < r; i++)
    {
      dims[i] = x->shape->dims[perm[i]];
      if (perm[i] != i)
        id = FALSE;
    }
  if (id)
    return x;
  PsInstr *t = sp_add1 (c, PS_OP_TRANSPOSE, sp_shape (x->shape->etype, r, dims), x);
  ps_ints_set (&t->dimensions, r, perm);
  return t;
}

PsInstr *
sp_iota (SpComp *c, PsElemType t, int rank, const int64_t *dims, int64_t dim)
{
  PsInstr *i = sp_add (c, PS_OP_IOTA, sp_shape (t, rank, dims), 0, NULL);
  i->iota_dimension = dim;
  return i;
}

PsInstr *
sp_compare (SpComp *c, PsInstr *a, PsInstr *b, PsCompareDir dir)
{
  PsInstr *k = sp_add2 (c, PS_OP_COMPARE,
                        sp_shape (PS_PRED, a->shape->rank, a->shape->dims), a, b);
  k->comparison = dir;
  return k;
}

PsInstr *
sp_select (SpComp *c, PsInstr *pred, PsInstr *a, PsInstr *b)
{
  PsInstr *ops[3] = { pred, a, b };
  return sp_add (c, PS_OP_SELECT, ps_shape_copy (a->shape), 3, ops);
}

PsInstr *
sp_binary (SpComp *c, PsOpcode op, PsInstr *a, PsInstr *b)
{
  return sp_add2 (c, op, ps_shape_copy (a->shape), a, b);
}

PsInstr *
sp_convert (SpComp *c, PsInstr *x, PsElemType t)
{
  if (x->shape->etype == t)
    return x;
  return sp_add1 (c, PS_OP_CONVERT, sp_shape (t, x->shape->rank, x->shape->dims), x);
}

PsInstr *
sp_gte (SpComp *c, PsInstr *tuple, int64_t index)
{
  PsInstr *g = sp_add1 (c, PS_OP_GET_TUPLE_ELEMENT,
                        ps_shape_copy (tuple->shape->elems[index]), tuple);
  g->tuple_index = index;
  return g;
}

PsInstr *
sp_tuple (SpComp *c, int n, PsInstr *const *elems)
{
  PsShape *shapes[n > 0 ? n : 1];
  for (int i = 0; i < n; i++)
    shapes[i] = elems[i]->shape;
  return sp_add (c, PS_OP_TUPLE, ps_shape_new_tuple (n, shapes), n, elems);
}

PsInstr *
sp_concat (SpComp *c, int n, PsInstr *const *xs, int64_t dim)
{
  if (n == 1)
    return xs[0];
  PsShape *s = ps_shape_copy (xs[0]->shape);
  for (int i = 1; i < n; i++)
    s->dims[dim] += xs[i]->shape->dims[dim];
  PsInstr *k = sp_add (c, PS_OP_CONCATENATE, s, n, xs);
  ps_ints_set (&k->dimensions, 1, &dim);
  return k;
}

PsInstr *
sp_copy (SpComp *c, PsInstr *x)
{
  return sp_add1 (c, PS_OP_COPY, ps_shape_copy (x->shape), x);
}

/* ---- reducers and collectives ---- */

PsComputation *
sp_reducer (SpModule *m, SpReduceKind kind, PsElemType t)
{
  static const char *names[] = { "sum", "max", "min", "or", "and" };
  if (t == PS_PRED && kind == SP_RED_SUM)
    kind = SP_RED_OR;
  char *key = g_strdup_printf ("%s.%s", names[kind], ps_etype_name (t));
  PsComputation *comp = g_hash_table_lookup (m->reducers, key);
  if (comp)
    {
      g_free (key);
      return comp;
    }
  char *name = g_strdup_printf ("spmd.%s", key);
  comp = ps_computation_new (m->out, name);
  g_free (name);
  PsShape *sc = ps_shape_new_scalar (t);
  PsInstr *a = ps_computation_add_instr (comp, PS_OP_PARAMETER, "lhs", ps_shape_copy (sc), 0, NULL);
  a->parameter_number = 0;
  PsInstr *b = ps_computation_add_instr (comp, PS_OP_PARAMETER, "rhs", ps_shape_copy (sc), 0, NULL);
  b->parameter_number = 1;
  g_ptr_array_add (comp->params, a);
  g_ptr_array_add (comp->params, b);
  static const PsOpcode ops[] = { PS_OP_ADD, PS_OP_MAXIMUM, PS_OP_MINIMUM, PS_OP_OR, PS_OP_AND };
  PsInstr *ab[2] = { a, b };
  comp->root = ps_computation_add_instr (comp, ops[kind], "result", sc, 2, ab);
  g_hash_table_insert (m->reducers, key, comp);
  g_ptr_array_add (m->helper_comps, comp);
  return comp;
}

static void
set_groups (SpComp *c, PsInstr *x, int n_groups, int group_size, const int64_t *groups)
{
  x->n_groups = n_groups;
  x->group_size = group_size;
  x->replica_groups = i64_dup (groups, (int64_t) n_groups * group_size);
  x->has_replica_groups = TRUE;
  x->channel_id = c->m->next_channel++;
  x->use_global_device_ids = TRUE;
  if (c->m->opts.report)
    c->m->opts.report->n_collectives++;
}

PsInstr *
sp_all_reduce (SpComp *c, PsInstr *x, SpReduceKind kind, int n_groups, int group_size,
               const int64_t *groups)
{
  if (group_size <= 1)
    return x;
  PsInstr *ar = sp_add1 (c, PS_OP_ALL_REDUCE, ps_shape_copy (x->shape), x);
  PsComputation *red = sp_reducer (c->m, kind, x->shape->etype);
  ps_instr_set_called (ar, 1, &red);
  set_groups (c, ar, n_groups, group_size, groups);
  return ar;
}

PsInstr *
sp_all_reduce_with (SpComp *c, PsInstr *x, const PsComputation *src_reducer, int n_groups,
                    int group_size, const int64_t *groups)
{
  if (group_size <= 1)
    return x;
  PsInstr *ar = sp_add1 (c, PS_OP_ALL_REDUCE, ps_shape_copy (x->shape), x);
  PsComputation *red = sp_copy_computation (c->m, src_reducer);
  ps_instr_set_called (ar, 1, &red);
  set_groups (c, ar, n_groups, group_size, groups);
  return ar;
}

PsInstr *
sp_all_gather (SpComp *c, PsInstr *x, int64_t dim, int n_groups, int group_size,
               const int64_t *groups)
{
  if (group_size <= 1)
    return x;
  PsShape *s = ps_shape_copy (x->shape);
  s->dims[dim] *= group_size;
  PsInstr *ag = sp_add1 (c, PS_OP_ALL_GATHER, s, x);
  ps_ints_set (&ag->dimensions, 1, &dim);
  set_groups (c, ag, n_groups, group_size, groups);
  return ag;
}

PsInstr *
sp_reduce_scatter (SpComp *c, PsInstr *x, SpReduceKind kind, int64_t dim, int n_groups,
                   int group_size, const int64_t *groups)
{
  if (group_size <= 1)
    return x;
  g_assert (x->shape->dims[dim] % group_size == 0);
  PsShape *s = ps_shape_copy (x->shape);
  s->dims[dim] /= group_size;
  PsInstr *rs = sp_add1 (c, PS_OP_REDUCE_SCATTER, s, x);
  PsComputation *red = sp_reducer (c->m, kind, x->shape->etype);
  ps_instr_set_called (rs, 1, &red);
  ps_ints_set (&rs->dimensions, 1, &dim);
  set_groups (c, rs, n_groups, group_size, groups);
  return rs;
}

PsInstr *
sp_all_to_all (SpComp *c, PsInstr *x, int64_t dim, int n_groups, int group_size,
               const int64_t *groups)
{
  if (group_size <= 1)
    return x;
  PsInstr *a = sp_add1 (c, PS_OP_ALL_TO_ALL, ps_shape_copy (x->shape), x);
  ps_ints_set (&a->dimensions, 1, &dim);
  set_groups (c, a, n_groups, group_size, groups);
  return a;
}

PsInstr *
sp_collective_permute (SpComp *c, PsInstr *x, int n_pairs, const int64_t *pairs)
{
  PsInstr *p = sp_add1 (c, PS_OP_COLLECTIVE_PERMUTE, ps_shape_copy (x->shape), x);
  p->n_pairs = n_pairs;
  p->source_target_pairs = i64_dup (pairs, (int64_t) n_pairs * 2);
  p->channel_id = c->m->next_channel++;
  if (c->m->opts.report)
    c->m->opts.report->n_collectives++;
  return p;
}

/* ---- computations copied verbatim (reducers, comparators), and clones ---- */

char *
sp_fresh_comp_name (SpModule *m, const char *base)
{
  if (!ps_module_find_computation (m->out, base))
    return g_strdup (base);
  for (int k = 1;; k++)
    {
      char *name = g_strdup_printf ("%s.spmd%d", base, k);
      if (!ps_module_find_computation (m->out, name))
        return name;
      g_free (name);
    }
}

void
sp_set_param (PsComputation *comp, PsInstr *p, int64_t number)
{
  p->parameter_number = number;
  if ((int64_t) comp->params->len <= number)
    g_ptr_array_set_size (comp->params, (guint) number + 1);
  g_ptr_array_index (comp->params, number) = p;
}

/* Scalar computations (reducers, comparators) need no partitioning. */
PsComputation *
sp_copy_computation (SpModule *m, const PsComputation *src)
{
  PsComputation *done = g_hash_table_lookup (m->comp_map, src);
  if (done)
    return done;
  g_autofree char *name = sp_fresh_comp_name (m, src->name);
  PsComputation *out = ps_computation_new (m->out, name);
  out->execution_thread = g_strdup (src->execution_thread);
  GHashTable *imap = g_hash_table_new (g_direct_hash, g_direct_equal);
  g_autoptr (GPtrArray) order = ps_computation_post_order (src);
  for (guint i = 0; i < order->len; i++)
    {
      const PsInstr *in = g_ptr_array_index (order, i);
      PsInstr *ops[in->n_operands > 0 ? in->n_operands : 1];
      for (int k = 0; k < in->n_operands; k++)
        ops[k] = g_hash_table_lookup (imap, in->operands[k]);
      PsInstr *ni = ps_computation_add_instr (out, in->opcode, NULL, ps_shape_copy (in->shape),
                                              in->n_operands, ops);
      sp_copy_attrs (ni, in);
      if (in->n_called > 0)
        {
          PsComputation *called[in->n_called];
          for (int k = 0; k < in->n_called; k++)
            called[k] = sp_copy_computation (m, in->called[k]);
          ps_instr_set_called (ni, in->n_called, called);
        }
      if (in->opcode == PS_OP_PARAMETER)
        sp_set_param (out, ni, in->parameter_number);
      g_hash_table_insert (imap, (gpointer) in, ni);
    }
  out->root = g_hash_table_lookup (imap, src->root);
  g_hash_table_destroy (imap);
  g_hash_table_insert (m->comp_map, (gpointer) src, out);
  g_ptr_array_add (m->helper_comps, out);
  return out;
}

PsInstr *
sp_clone_with (SpComp *c, const PsInstr *in, PsShape *shape, int n, PsInstr *const *ops)
{
  PsInstr *ni = sp_add (c, in->opcode, shape, n, ops);
  sp_copy_attrs (ni, in);
  if (in->n_called > 0)
    {
      PsComputation *called[in->n_called];
      for (int k = 0; k < in->n_called; k++)
        called[k] = sp_copy_computation (c->m, in->called[k]);
      ps_instr_set_called (ni, in->n_called, called);
    }
  return ni;
}

/* Vectorization over a leading dim: see vmap.h. */
#include "config.h"

#include "partitioner/builder/vmap.h"

#include <string.h>

#include "partitioner/builder/folder_private.h"

typedef struct {
  PsComputation *dst;
  const PsVmapOptions *o;
  GHashTable *val;       /* src instr -> dst value */
  GHashTable *is_b;      /* src instr set: its value is batched */
  GError **error;
} Vm;

static PsShape *
batched_shape (int64_t n, const PsShape *s)
{
  int64_t dims[64];
  dims[0] = n;
  for (int d = 0; d < s->rank; d++)
    dims[d + 1] = s->dims[d];
  return ps_shape_new_array (s->etype, s->rank + 1, dims);
}

/* v (unbatched, dst) broadcast to [n] + its shape. */
static PsInstr *
to_batched (Vm *vm, PsInstr *v)
{
  PsShape *s = batched_shape (vm->o->n, v->shape);
  int64_t dims[64];
  for (int d = 0; d < v->shape->rank; d++)
    dims[d] = d + 1;
  PsInstr *b = ad_broadcast (vm->dst, v, s, v->shape->rank, dims);
  ps_shape_free (s);
  return b;
}

static void
set_batched_sharding (Vm *vm, PsInstr *dst, const PsSharding *s)
{
  if (!s || !vm->o->batch_sharding || dst->sharding)
    return;
  dst->sharding = vm->o->batch_sharding (s, dst->shape->rank, vm->o->user);
}

static gboolean
fail (Vm *vm, const PsInstr *x, const char *why)
{
  g_set_error (vm->error, PS_ERROR, PS_ERROR_UNSUPPORTED, "vmap: %s %s: %s",
               ps_opcode_name (x->opcode), x->name, why);
  return FALSE;
}

/* A new instruction of x's opcode and attributes on ops, shape `shape`
 * (taken). */
static PsInstr *
like (Vm *vm, const PsInstr *x, PsShape *shape, int n, PsInstr *const *ops)
{
  PsInstr *y = ps_computation_add_instr (vm->dst, x->opcode, NULL, shape, n, ops);
  ps_instr_copy_attrs (y, x);
  if (x->n_called > 0)
    ps_instr_set_called (y, x->n_called, x->called);
  return y;
}

static void
shift_ints (PsInts *v, int64_t by)
{
  for (int i = 0; i < v->n; i++)
    v->v[i] += by;
}

static void
prepend_ints (PsInts *v, int64_t first)
{
  int64_t t[64];
  t[0] = first;
  for (int i = 0; i < v->n; i++)
    t[i + 1] = v->v[i];
  ps_ints_set (v, v->n + 1, t);
}

/* The batched dot: see vmap.h. */
static PsInstr *
batch_dot (Vm *vm, const PsInstr *x, PsInstr *lhs, PsInstr *rhs, gboolean bl, gboolean br)
{
  PsInstr *ops[2] = { lhs, rhs };
  if (bl && br)
    {
      PsInstr *y = like (vm, x, batched_shape (vm->o->n, x->shape), 2, ops);
      shift_ints (&y->dot.lhs_batch, 1);
      shift_ints (&y->dot.rhs_batch, 1);
      shift_ints (&y->dot.lhs_contracting, 1);
      shift_ints (&y->dot.rhs_contracting, 1);
      prepend_ints (&y->dot.lhs_batch, 0);
      prepend_ints (&y->dot.rhs_batch, 0);
      return y;
    }
  /* n is a free dim of one operand: the result holds it where that
   * operand's free dims start (after the batch dims, and after lhs's free
   * dims when it is rhs's) */
  int nb = x->dot.lhs_batch.n;
  int lhs_free = x->operands[0]->shape->rank - nb - x->dot.lhs_contracting.n;
  int at = bl ? nb : nb + lhs_free;
  int r = x->shape->rank;
  int64_t dims[64];
  for (int d = 0, k = 0; d <= r; d++)
    dims[d] = d == at ? vm->o->n : x->shape->dims[k++];
  PsInstr *y = like (vm, x, ps_shape_new_array (x->shape->etype, r + 1, dims), 2, ops);
  if (bl)
    {
      shift_ints (&y->dot.lhs_batch, 1);
      shift_ints (&y->dot.lhs_contracting, 1);
    }
  else
    {
      shift_ints (&y->dot.rhs_batch, 1);
      shift_ints (&y->dot.rhs_contracting, 1);
    }
  if (at == 0)
    return y;
  int64_t perm[64];
  perm[0] = at;
  for (int d = 0, k = 1; d <= r; d++)
    if (d != at)
      perm[k++] = d;
  int64_t td[64];
  for (int d = 0; d <= r; d++)
    td[d] = dims[perm[d]];
  PsInstr *t = ps_computation_add_instr (vm->dst, PS_OP_TRANSPOSE, NULL,
                                         ps_shape_new_array (x->shape->etype, r + 1, td), 1, &y);
  ps_ints_set (&t->dimensions, r + 1, perm);
  return t;
}

/* One batched instruction; ops are the dst values of x's operands, b[i]
 * whether each is batched. */
static PsInstr *
batch_one (Vm *vm, const PsInstr *x, PsInstr **ops, const gboolean *b)
{
  int64_t n = vm->o->n;
  int k = x->n_operands;
  PsShape *bs = ps_shape_is_array (x->shape) ? batched_shape (n, x->shape) : NULL;
  if (!bs)
    {
      fail (vm, x, "tuple-shaped values cannot be vectorized");
      return NULL;
    }
  switch (x->opcode)
    {
    case PS_OP_BROADCAST:
      {
        PsInstr *y = like (vm, x, bs, 1, ops);
        shift_ints (&y->dimensions, 1);
        prepend_ints (&y->dimensions, 0);
        return y;
      }
    case PS_OP_RESHAPE:
    case PS_OP_BITCAST:
    case PS_OP_COPY:
      return like (vm, x, bs, 1, ops);
    case PS_OP_TRANSPOSE:
      {
        PsInstr *y = like (vm, x, bs, 1, ops);
        shift_ints (&y->dimensions, 1);
        prepend_ints (&y->dimensions, 0);
        return y;
      }
    case PS_OP_REDUCE:
      {
        if (k != 2 || b[1])
          {
            ps_shape_free (bs);
            fail (vm, x, "only a one-operand reduce with an unbatched init");
            return NULL;
          }
        PsInstr *y = like (vm, x, bs, 2, ops);
        shift_ints (&y->dimensions, 1);
        return y;
      }
    case PS_OP_DOT:
      ps_shape_free (bs);
      return batch_dot (vm, x, ops[0], ops[1], b[0], b[1]);
    case PS_OP_SLICE:
      {
        PsInstr *y = like (vm, x, bs, 1, ops);
        prepend_ints (&y->slice_starts, 0);
        prepend_ints (&y->slice_limits, n);
        prepend_ints (&y->slice_strides, 1);
        return y;
      }
    case PS_OP_PAD:
      {
        if (b[1])
          {
            ps_shape_free (bs);
            fail (vm, x, "a batched padding value");
            return NULL;
          }
        PsInstr *y = like (vm, x, bs, 2, ops);
        g_free (y->padding);
        y->n_pad = x->n_pad + 1;
        y->padding = g_new0 (PsPadDim, y->n_pad);
        memcpy (y->padding + 1, x->padding, sizeof (PsPadDim) * (gsize) x->n_pad);
        return y;
      }
    case PS_OP_CONCATENATE:
      {
        for (int i = 0; i < k; i++)
          if (!b[i])
            ops[i] = to_batched (vm, ops[i]);
        PsInstr *y = like (vm, x, bs, k, ops);
        shift_ints (&y->dimensions, 1);
        return y;
      }
    case PS_OP_DYNAMIC_SLICE:
    case PS_OP_DYNAMIC_UPDATE_SLICE:
      {
        gboolean dus = x->opcode == PS_OP_DYNAMIC_UPDATE_SLICE;
        int first_index = dus ? 2 : 1;
        for (int i = first_index; i < k; i++)
          if (b[i])
            {
              ps_shape_free (bs);
              fail (vm, x, "start indices that differ along the vectorized dim");
              return NULL;
            }
        PsInstr *nops[66];
        nops[0] = b[0] ? ops[0] : to_batched (vm, ops[0]);
        if (dus)
          nops[1] = b[1] ? ops[1] : to_batched (vm, ops[1]);
        nops[first_index] = ad_scalar (vm->dst, ops[first_index]->shape->etype, 0);
        for (int i = first_index; i < k; i++)
          nops[i + 1] = ops[i];
        PsInstr *y = like (vm, x, bs, k + 1, nops);
        if (!dus)
          prepend_ints (&y->dynamic_slice_sizes, n);
        return y;
      }
    case PS_OP_CUSTOM_CALL:
      if (x->custom_call_target && strcmp (x->custom_call_target, "Sharding") == 0 && k == 1)
        {
          PsInstr *y = ps_computation_add_instr (vm->dst, PS_OP_CUSTOM_CALL, NULL, bs, 1, ops);
          y->custom_call_target = g_strdup ("Sharding");
          set_batched_sharding (vm, y, x->sharding);
          return y;
        }
      break;
    default:
      if (ps_opcode_is_elementwise (x->opcode) || x->opcode == PS_OP_COMPARE
          || x->opcode == PS_OP_SELECT || x->opcode == PS_OP_CONVERT || x->opcode == PS_OP_CLAMP)
        {
          for (int i = 0; i < k; i++)
            if (!b[i] && !(x->opcode == PS_OP_SELECT && i == 0 && ops[0]->shape->rank == 0))
              ops[i] = to_batched (vm, ops[i]);
          /* a scalar predicate that is batched selects per element of n */
          if (x->opcode == PS_OP_SELECT && b[0] && x->operands[0]->shape->rank == 0
              && x->shape->rank > 0)
            {
              PsShape *ps = ps_shape_new_array (PS_PRED, bs->rank, bs->dims);
              int64_t zero = 0;
              ops[0] = ad_broadcast (vm->dst, ops[0], ps, 1, &zero);
              ps_shape_free (ps);
            }
          return like (vm, x, bs, k, ops);
        }
      break;
    }
  ps_shape_free (bs);
  fail (vm, x, "no vectorization rule");
  return NULL;
}

gboolean
ps_vmap (PsComputation *dst, const PsComputation *src, int n_roots, PsInstr *const *roots,
         GHashTable *inputs, GHashTable *batched, const PsVmapOptions *opts, PsInstr **out,
         GError **error)
{
  g_return_val_if_fail (dst && src && opts && opts->n >= 1, FALSE);
  Vm vm = { dst, opts, g_hash_table_new (NULL, NULL), g_hash_table_new (NULL, NULL), error };
  g_autoptr (GPtrArray) order = ps_computation_post_order (src);
  g_autoptr (GHashTable) need = g_hash_table_new (NULL, NULL);
  for (int i = 0; i < n_roots; i++)
    g_hash_table_add (need, roots[i]);
  for (guint i = order->len; i-- > 0;)
    {
      PsInstr *x = order->pdata[i];
      if (!g_hash_table_contains (need, x) || g_hash_table_contains (inputs, x))
        continue;
      for (int k = 0; k < x->n_operands; k++)
        g_hash_table_add (need, x->operands[k]);
    }
  gboolean ok = TRUE;
  for (guint i = 0; i < order->len && ok; i++)
    {
      PsInstr *x = order->pdata[i];
      if (!g_hash_table_contains (need, x))
        continue;
      PsInstr *v = g_hash_table_lookup (inputs, x);
      if (v)
        {
          g_hash_table_insert (vm.val, x, v);
          if (g_hash_table_contains (batched, x))
            {
              g_hash_table_add (vm.is_b, x);
              set_batched_sharding (&vm, v, x->sharding);
            }
          continue;
        }
      if (x->opcode == PS_OP_PARAMETER)
        {
          ok = fail (&vm, x, "a parameter of the source without an input");
          break;
        }
      int k = x->n_operands;
      if (k > 64)
        {
          ok = fail (&vm, x, "more than 64 operands");
          break;
        }
      PsInstr *ops[66];
      gboolean b[66];
      gboolean any = FALSE;
      for (int j = 0; j < k; j++)
        {
          /* a value of another computation: the caller's, used as it is */
          PsInstr *o = x->operands[j];
          ops[j] = o->parent == src ? g_hash_table_lookup (vm.val, o) : o;
          b[j] = g_hash_table_contains (vm.is_b, o);
          any |= b[j];
        }
      PsInstr *y;
      if (!any)
        {
          y = like (&vm, x, ps_shape_copy (x->shape), k, ops);
          if (x->sharding)
            y->sharding = ps_sharding_copy (x->sharding);
        }
      else
        {
          y = batch_one (&vm, x, ops, b);
          if (!y)
            {
              ok = FALSE;
              break;
            }
          g_hash_table_add (vm.is_b, x);
          if (x->opcode != PS_OP_CUSTOM_CALL)
            set_batched_sharding (&vm, y, x->sharding);
        }
      g_hash_table_insert (vm.val, x, y);
    }
  for (int i = 0; ok && i < n_roots; i++)
    {
      PsInstr *v = g_hash_table_lookup (vm.val, roots[i]);
      out[i] = g_hash_table_contains (vm.is_b, roots[i]) ? v : to_batched (&vm, v);
    }
  g_hash_table_destroy (vm.val);
  g_hash_table_destroy (vm.is_b);
  return ok;
}

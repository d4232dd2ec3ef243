/* The builder API (see builder.h), first half: builder state and sticky
 * errors, module ordering, parameters and constants, elementwise and shape
 * ops. Contractions, reductions, gather/scatter, control flow and sharding
 * annotations are in builder_ops.c.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "common/ndindex.h"
#include "common/float16.h"
#include "partitioner/builder/builder.h"
#include "partitioner/builder/builder_private.h"

/* ---- builder state ---------------------------------------------------------- */

static char *
unique_computation_name (PsModule *m, const char *name)
{
  if (ps_module_find_computation (m, name) == NULL)
    return g_strdup (name);
  for (int k = 1;; k++)
    {
      char *cand = g_strdup_printf ("%s.%d", name, k);
      if (ps_module_find_computation (m, cand) == NULL)
        return cand;
      g_free (cand);
    }
}

PsBuilder *
ps_builder_new (PsModule *m, const char *name)
{
  g_return_val_if_fail (m != NULL && name != NULL, NULL);
  PsBuilder *b = g_new0 (PsBuilder, 1);
  b->m = m;
  g_autofree char *uname = unique_computation_name (m, name);
  b->c = ps_computation_new (m, uname);
  return b;
}

PsBuilder *
ps_builder_new_in (PsModule *m, PsComputation *c)
{
  g_return_val_if_fail (m != NULL && c != NULL && c->parent == m, NULL);
  PsBuilder *b = g_new0 (PsBuilder, 1);
  b->m = m;
  b->c = c;
  return b;
}

void
ps_builder_free (PsBuilder *b)
{
  if (b == NULL)
    return;
  g_clear_error (&b->error);
  g_free (b->next_name);
  g_free (b->metadata);
  g_free (b->mesh_dims);
  g_free (b->mesh_devices);
  g_free (b);
}

PsComputation *
ps_builder_computation (const PsBuilder *b)
{
  g_return_val_if_fail (b != NULL, NULL);
  return b->c;
}

PsModule *
ps_builder_module (const PsBuilder *b)
{
  g_return_val_if_fail (b != NULL, NULL);
  return b->m;
}

const GError *
ps_builder_error (const PsBuilder *b)
{
  g_return_val_if_fail (b != NULL, NULL);
  return b->error;
}

gboolean
ps_builder_ok (const PsBuilder *b)
{
  g_return_val_if_fail (b != NULL, FALSE);
  return b->error == NULL;
}

gboolean
ps_builder_check (const PsBuilder *b, GError **error)
{
  g_return_val_if_fail (b != NULL, FALSE);
  if (b->error == NULL)
    return TRUE;
  g_propagate_error (error, g_error_copy (b->error));
  return FALSE;
}

void
ps_builder_name_next (PsBuilder *b, const char *name)
{
  g_return_if_fail (b != NULL);
  g_free (b->next_name);
  b->next_name = g_strdup (name);
}

void
ps_builder_allow_closure (PsBuilder *b)
{
  g_return_if_fail (b != NULL);
  b->closure = TRUE;
}

void
ps_builder_set_op_name (PsBuilder *b, const char *op_name)
{
  g_return_if_fail (b != NULL);
  g_free (b->metadata);
  b->metadata = op_name ? g_strdup_printf ("op_name=\"%s\"", op_name) : NULL;
}

void
bd_fail (PsBuilder *b, const char *op, const char *fmt, ...)
{
  if (b->error != NULL)
    return;
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  b->error = g_error_new (PS_ERROR, PS_ERROR_INVALID, "builder '%s': %s: %s", b->c->name, op, msg);
}

/* FALSE when an earlier error or a NULL operand means the call must do
 * nothing. An operand from another module is a programmer error. */
gboolean
bd_usable (PsBuilder *b, int n, PsInstr *const *xs)
{
  g_return_val_if_fail (b != NULL, FALSE);
  if (b->error != NULL)
    return FALSE;
  for (int i = 0; i < n; i++)
    {
      if (xs[i] == NULL)
        {
          /* Only reachable when the caller ignored a NULL result without an
           * error recorded here, e.g. from another builder. */
          bd_fail (b, "operand", "operand %d is NULL", i);
          return FALSE;
        }
      g_return_val_if_fail (xs[i]->parent != NULL && xs[i]->parent->parent == b->m, FALSE);
      if (xs[i]->parent != b->c && !b->closure)
        {
          bd_fail (b, "operand", "'%s' belongs to computation '%s', not this one",
                   xs[i]->name, xs[i]->parent->name);
          return FALSE;
        }
    }
  return TRUE;
}

gboolean
bd_usable1 (PsBuilder *b, PsInstr *x)
{
  return bd_usable (b, 1, &x);
}

gboolean
bd_usable2 (PsBuilder *b, PsInstr *x, PsInstr *y)
{
  PsInstr *xs[] = { x, y };
  return bd_usable (b, 2, xs);
}

/* Appends an instruction; takes ownership of shape. */
PsInstr *
bd_add (PsBuilder *b, PsOpcode op, PsShape *shape, int n, PsInstr *const *operands)
{
  char *name = NULL;
  if (b->next_name != NULL)
    {
      name = b->next_name;
      b->next_name = NULL;
      if (ps_module_find_instr (b->m, name) != NULL)
        {
          for (int k = 1;; k++)
            {
              char *cand = g_strdup_printf ("%s.%d", name, k);
              if (ps_module_find_instr (b->m, cand) == NULL)
                {
                  g_free (name);
                  name = cand;
                  break;
                }
              g_free (cand);
            }
        }
    }
  /* Shapes derived from operands (a dot's outer product, a concatenation)
   * can exceed the limits their operands kept: the first error is kept and
   * every later builder call returns NULL. */
  if (b->error == NULL && !ps_shape_within_limits (shape))
    {
      g_autofree char *str = ps_shape_to_string (shape, FALSE);
      bd_fail (b, ps_opcode_name (op), "the result %s is over the limits of 2^40 "
               "elements and %d dims (doc/robustness.md)", str, PS_MAX_RANK);
    }
  PsInstr *in = ps_computation_add_instr (b->c, op, name, shape, n, operands);
  g_free (name);
  if (b->metadata)
    in->metadata = g_strdup (b->metadata);
  return in;
}

char *
bd_shape_str (const PsInstr *x)
{
  return ps_shape_to_string (x->shape, FALSE);
}

gboolean
bd_is_array (PsBuilder *b, const char *op, PsInstr *x)
{
  if (x->shape->etype == PS_TUPLE || x->shape->etype == PS_TOKEN)
    {
      g_autofree char *s = bd_shape_str (x);
      bd_fail (b, op, "'%s' has shape %s, an array is needed", x->name, s);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_dims (PsBuilder *b, const char *op, int rank, const int64_t *dims)
{
  if (rank < 0 || (rank > 0 && dims == NULL))
    {
      bd_fail (b, op, "bad rank %d", rank);
      return FALSE;
    }
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0)
      {
        bd_fail (b, op, "dim %d has negative size %" G_GINT64_FORMAT, i, dims[i]);
        return FALSE;
      }
  int64_t n;
  if (rank > PS_MAX_RANK || !ps_checked_product (rank, dims, PS_MAX_ELEMENTS, &n))
    {
      bd_fail (b, op, "%d dims holding more than 2^40 elements or more than %d dims "
               "(doc/robustness.md)", rank, PS_MAX_RANK);
      return FALSE;
    }
  return TRUE;
}

/* ---- module order ------------------------------------------------------------- */

static void
visit_computation (PsComputation *c, GHashTable *done, GPtrArray *out)
{
  if (g_hash_table_contains (done, c))
    return;
  g_hash_table_add (done, c);
  for (guint i = 0; i < c->instrs->len; i++)
    {
      PsInstr *in = g_ptr_array_index (c->instrs, i);
      for (int k = 0; k < in->n_called; k++)
        if (in->called[k] != NULL)
          visit_computation (in->called[k], done, out);
    }
  g_ptr_array_add (out, c);
}

/* Stable callees-first order: a computation keeps its place unless one of
 * its callees came later. Call graphs are acyclic in HLO. */
static void
order_computations (PsModule *m)
{
  GHashTable *done = g_hash_table_new (g_direct_hash, g_direct_equal);
  GPtrArray *out = g_ptr_array_sized_new (m->computations->len);
  for (guint i = 0; i < m->computations->len; i++)
    visit_computation (g_ptr_array_index (m->computations, i), done, out);
  g_assert (out->len == m->computations->len);
  memcpy (m->computations->pdata, out->pdata, sizeof (gpointer) * out->len);
  g_ptr_array_free (out, TRUE);
  g_hash_table_destroy (done);
}

static PsComputation *
finish (PsBuilder *b, PsInstr *root, gboolean entry, GError **error)
{
  g_return_val_if_fail (b != NULL, NULL);
  if (b->error == NULL && root == NULL)
    bd_fail (b, "finish", "no root instruction");
  if (b->error == NULL && root->parent != b->c)
    bd_fail (b, "finish", "root '%s' is not in this computation", root->name);
  if (b->error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (&b->error));
      ps_builder_free (b);
      return NULL;
    }
  PsComputation *c = b->c;
  c->root = root;
  if (entry)
    {
      if (b->m->entry != NULL)
        b->m->entry->is_entry = FALSE;
      b->m->entry = c;
      c->is_entry = TRUE;
    }
  order_computations (b->m);
  ps_builder_free (b);
  return c;
}

PsComputation *
ps_builder_finish (PsBuilder *b, PsInstr *root, GError **error)
{
  return finish (b, root, FALSE, error);
}

PsComputation *
ps_builder_finish_entry (PsBuilder *b, PsInstr *root, GError **error)
{
  return finish (b, root, TRUE, error);
}

/* ---- leaves ---------------------------------------------------------------------- */

PsInstr *
ps_build_parameter_shape (PsBuilder *b, const char *name, const PsShape *shape)
{
  g_return_val_if_fail (b != NULL && shape != NULL, NULL);
  if (b->error != NULL)
    return NULL;
  if (name != NULL)
    ps_builder_name_next (b, name);
  PsInstr *in = bd_add (b, PS_OP_PARAMETER, ps_shape_copy (shape), 0, NULL);
  /* Numbered by the computation, not the builder: a builder made with
   * ps_builder_new_in() shares the computation with other code. */
  in->parameter_number = b->c->params->len;
  g_ptr_array_add (b->c->params, in);
  return in;
}

PsInstr *
ps_build_parameter (PsBuilder *b, const char *name, PsElemType t, int rank, const int64_t *dims)
{
  g_return_val_if_fail (b != NULL, NULL);
  if (b->error != NULL || !check_dims (b, "parameter", rank, dims))
    return NULL;
  PsShape *shape = ps_shape_new_array (t, rank, dims);
  PsInstr *in = ps_build_parameter_shape (b, name, shape);
  ps_shape_free (shape);
  return in;
}

/* Integer range of an element type, for constant checks. */
gboolean
bd_int_range (PsElemType t, int64_t *lo, uint64_t *hi)
{
  switch (t)
    {
    case PS_PRED:
      *lo = 0;
      *hi = 1;
      return TRUE;
    case PS_S8:
      *lo = G_MININT8;
      *hi = G_MAXINT8;
      return TRUE;
    case PS_S16:
      *lo = G_MININT16;
      *hi = G_MAXINT16;
      return TRUE;
    case PS_S32:
      *lo = G_MININT32;
      *hi = G_MAXINT32;
      return TRUE;
    case PS_S64:
      *lo = G_MININT64;
      *hi = G_MAXINT64;
      return TRUE;
    case PS_U8:
      *lo = 0;
      *hi = G_MAXUINT8;
      return TRUE;
    case PS_U16:
      *lo = 0;
      *hi = G_MAXUINT16;
      return TRUE;
    case PS_U32:
      *lo = 0;
      *hi = G_MAXUINT32;
      return TRUE;
    case PS_U64:
      *lo = 0;
      *hi = G_MAXUINT64;
      return TRUE;
    default: return FALSE;
    }
}

static void
store_int (PsLiteral *l, int64_t i, int64_t v)
{
  switch (l->etype)
    {
    case PS_PRED: ((uint8_t *) l->data)[i] = v != 0; break;
    case PS_S8: ((int8_t *) l->data)[i] = (int8_t) v; break;
    case PS_S16: ((int16_t *) l->data)[i] = (int16_t) v; break;
    case PS_S32: ((int32_t *) l->data)[i] = (int32_t) v; break;
    case PS_S64: ((int64_t *) l->data)[i] = v; break;
    case PS_U8: ((uint8_t *) l->data)[i] = (uint8_t) v; break;
    case PS_U16: ((uint16_t *) l->data)[i] = (uint16_t) v; break;
    case PS_U32: ((uint32_t *) l->data)[i] = (uint32_t) v; break;
    case PS_U64: ((uint64_t *) l->data)[i] = (uint64_t) v; break;
    default: g_assert_not_reached ();
    }
}

static gboolean
literal_type_ok (PsBuilder *b, PsElemType t)
{
  if (t == PS_TUPLE || t == PS_TOKEN || t >= PS_ETYPE_COUNT)
    {
      bd_fail (b, "constant", "a constant cannot have type %s", ps_etype_name (t));
      return FALSE;
    }
  return TRUE;
}

static gboolean
is_float_type (PsElemType t)
{
  return ps_etype_is_float (t) || ps_etype_is_complex (t);
}

static PsInstr *
constant_from (PsBuilder *b, PsElemType t, int rank, const int64_t *dims, const double *fv,
               const int64_t *iv)
{
  g_return_val_if_fail (b != NULL, NULL);
  if (b->error != NULL || !check_dims (b, "constant", rank, dims) || !literal_type_ok (b, t))
    return NULL;
  int64_t n = ps_product (rank, dims);
  g_return_val_if_fail (n == 0 || fv != NULL || iv != NULL, NULL);
  PsLiteral *lit = ps_literal_new (t, n);
  for (int64_t i = 0; i < n; i++)
    {
      if (is_float_type (t))
        {
          ps_literal_set_f64 (lit, i, fv ? fv[i] : (double) iv[i]);
          continue;
        }
      int64_t lo;
      uint64_t hi;
      bd_int_range (t, &lo, &hi);
      int64_t v;
      if (fv != NULL)
        {
          double d = fv[i];
          if (t == PS_PRED)
            d = d != 0;
          if (!(d == floor (d)) || d < (double) lo || d > (double) hi)
            {
              bd_fail (b, "constant", "value %g is not a %s", fv[i], ps_etype_name (t));
              ps_literal_free (lit);
              return NULL;
            }
          v = (int64_t) d;
        }
      else
        {
          v = iv[i];
          if (t == PS_PRED)
            v = v != 0;
          if (v < lo || (v > 0 && (uint64_t) v > hi))
            {
              bd_fail (b, "constant", "value %" G_GINT64_FORMAT " is not a %s", iv[i],
                       ps_etype_name (t));
              ps_literal_free (lit);
              return NULL;
            }
        }
      store_int (lit, i, v);
    }
  PsInstr *in = bd_add (b, PS_OP_CONSTANT, ps_shape_new_array (t, rank, dims), 0, NULL);
  in->literal = lit;
  return in;
}

PsInstr *
ps_build_scalar (PsBuilder *b, PsElemType t, double value)
{
  return constant_from (b, t, 0, NULL, &value, NULL);
}

PsInstr *
ps_build_scalar_int (PsBuilder *b, PsElemType t, int64_t value)
{
  return constant_from (b, t, 0, NULL, NULL, &value);
}

PsInstr *
ps_build_constant (PsBuilder *b, PsElemType t, int rank, const int64_t *dims, const double *values)
{
  return constant_from (b, t, rank, dims, values, NULL);
}

PsInstr *
ps_build_constant_int (PsBuilder *b, PsElemType t, int rank, const int64_t *dims,
                       const int64_t *values)
{
  return constant_from (b, t, rank, dims, NULL, values);
}

PsInstr *
ps_build_full (PsBuilder *b, PsElemType t, int rank, const int64_t *dims, double value)
{
  PsInstr *s = ps_build_scalar (b, t, value);
  if (rank == 0)
    return s;
  return ps_build_broadcast_scalar (b, s, rank, dims);
}

PsInstr *
ps_build_iota (PsBuilder *b, PsElemType t, int rank, const int64_t *dims, int64_t iota_dimension)
{
  g_return_val_if_fail (b != NULL, NULL);
  if (b->error != NULL || !check_dims (b, "iota", rank, dims))
    return NULL;
  if (iota_dimension < 0 || iota_dimension >= rank)
    {
      bd_fail (b, "iota",
               "iota_dimension %" G_GINT64_FORMAT " is not a dim of a rank-%d array",
               iota_dimension, rank);
      return NULL;
    }
  if (!literal_type_ok (b, t) || t == PS_PRED)
    {
      bd_fail (b, "iota", "iota cannot have type %s", ps_etype_name (t));
      return NULL;
    }
  PsInstr *in = bd_add (b, PS_OP_IOTA, ps_shape_new_array (t, rank, dims), 0, NULL);
  in->iota_dimension = iota_dimension;
  return in;
}

/* ---- elementwise --------------------------------------------------------------- */

static gboolean
is_unary_op (PsOpcode op)
{
  switch (op)
    {
    case PS_OP_ABS:
    case PS_OP_CBRT:
    case PS_OP_CEIL:
    case PS_OP_CLZ:
    case PS_OP_COPY:
    case PS_OP_COSINE:
    case PS_OP_ERF:
    case PS_OP_EXP:
    case PS_OP_EXPM1:
    case PS_OP_FLOOR:
    case PS_OP_IMAG:
    case PS_OP_IS_FINITE:
    case PS_OP_LOG:
    case PS_OP_LOG1P:
    case PS_OP_LOGISTIC:
    case PS_OP_NEGATE:
    case PS_OP_NOT:
    case PS_OP_POPCNT:
    case PS_OP_REAL:
    case PS_OP_ROUND_NEAREST_AFZ:
    case PS_OP_ROUND_NEAREST_EVEN:
    case PS_OP_RSQRT:
    case PS_OP_SIGN:
    case PS_OP_SINE:
    case PS_OP_SQRT:
    case PS_OP_TAN:
    case PS_OP_TANH: return TRUE;
    default: return FALSE;
    }
}

gboolean
bd_is_binary_op (PsOpcode op)
{
  switch (op)
    {
    case PS_OP_ADD:
    case PS_OP_SUBTRACT:
    case PS_OP_MULTIPLY:
    case PS_OP_DIVIDE:
    case PS_OP_MAXIMUM:
    case PS_OP_MINIMUM:
    case PS_OP_POWER:
    case PS_OP_REMAINDER:
    case PS_OP_AND:
    case PS_OP_OR:
    case PS_OP_XOR:
    case PS_OP_SHIFT_LEFT:
    case PS_OP_SHIFT_RIGHT_ARITHMETIC:
    case PS_OP_SHIFT_RIGHT_LOGICAL:
    case PS_OP_ATAN2:
    case PS_OP_COMPLEX: return TRUE;
    default: return FALSE;
    }
}

PsInstr *
ps_build_unary (PsBuilder *b, PsOpcode op, PsInstr *x)
{
  g_return_val_if_fail (is_unary_op (op), NULL);
  if (!bd_usable1 (b, x) || !bd_is_array (b, ps_opcode_name (op), x))
    return NULL;
  PsShape *shape = ps_shape_copy (x->shape);
  if (op == PS_OP_IS_FINITE)
    shape->etype = PS_PRED;
  else if ((op == PS_OP_REAL || op == PS_OP_IMAG) && ps_etype_is_complex (shape->etype))
    shape->etype = shape->etype == PS_C64 ? PS_F32 : PS_F64;
  return bd_add (b, op, shape, 1, &x);
}

/* Makes x and y the same dims by broadcasting a scalar side. */
static gboolean
match_scalars (PsBuilder *b, const char *op, PsInstr **x, PsInstr **y)
{
  if (!bd_is_array (b, op, *x) || !bd_is_array (b, op, *y))
    return FALSE;
  int rx = (*x)->shape->rank, ry = (*y)->shape->rank;
  if (rx == 0 && ry > 0)
    *x = ps_build_broadcast_scalar (b, *x, ry, (*y)->shape->dims);
  else if (ry == 0 && rx > 0)
    *y = ps_build_broadcast_scalar (b, *y, rx, (*x)->shape->dims);
  if (*x == NULL || *y == NULL)
    return FALSE;
  PsShape sx = *(*x)->shape, sy = *(*y)->shape;
  sx.etype = sy.etype = PS_F32;
  if (!ps_shape_equal (&sx, &sy))
    {
      g_autofree char *a = bd_shape_str (*x);
      g_autofree char *c = bd_shape_str (*y);
      bd_fail (b, op, "operand shapes %s and %s differ", a, c);
      return FALSE;
    }
  return TRUE;
}

gboolean
bd_same_type (PsBuilder *b, const char *op, PsInstr *x, PsInstr *y)
{
  if (x->shape->etype != y->shape->etype)
    {
      bd_fail (b, op, "operand types %s and %s differ (convert one first)",
               ps_etype_name (x->shape->etype), ps_etype_name (y->shape->etype));
      return FALSE;
    }
  return TRUE;
}

PsInstr *
ps_build_binary (PsBuilder *b, PsOpcode op, PsInstr *x, PsInstr *y)
{
  g_return_val_if_fail (bd_is_binary_op (op), NULL);
  const char *name = ps_opcode_name (op);
  if (!bd_usable2 (b, x, y) || !match_scalars (b, name, &x, &y)
      || !bd_same_type (b, name, x, y))
    return NULL;
  PsInstr *ops[] = { x, y };
  PsShape *shape = ps_shape_copy (x->shape);
  if (op == PS_OP_COMPLEX)
    shape->etype = shape->etype == PS_F64 ? PS_C128 : PS_C64;
  return bd_add (b, op, shape, 2, ops);
}

PsInstr *
ps_build_add (PsBuilder *b, PsInstr *x, PsInstr *y)
{
  return ps_build_binary (b, PS_OP_ADD, x, y);
}

PsInstr *
ps_build_sub (PsBuilder *b, PsInstr *x, PsInstr *y)
{
  return ps_build_binary (b, PS_OP_SUBTRACT, x, y);
}

PsInstr *
ps_build_mul (PsBuilder *b, PsInstr *x, PsInstr *y)
{
  return ps_build_binary (b, PS_OP_MULTIPLY, x, y);
}

PsInstr *
ps_build_div (PsBuilder *b, PsInstr *x, PsInstr *y)
{
  return ps_build_binary (b, PS_OP_DIVIDE, x, y);
}

PsInstr *
ps_build_max (PsBuilder *b, PsInstr *x, PsInstr *y)
{
  return ps_build_binary (b, PS_OP_MAXIMUM, x, y);
}

PsInstr *
ps_build_compare (PsBuilder *b, PsCompareDir dir, PsInstr *x, PsInstr *y)
{
  g_return_val_if_fail (dir != PS_CMP_NONE, NULL);
  if (!bd_usable2 (b, x, y) || !match_scalars (b, "compare", &x, &y)
      || !bd_same_type (b, "compare", x, y))
    return NULL;
  PsInstr *ops[] = { x, y };
  PsShape *shape = ps_shape_copy (x->shape);
  shape->etype = PS_PRED;
  PsInstr *in = bd_add (b, PS_OP_COMPARE, shape, 2, ops);
  in->comparison = dir;
  return in;
}

PsInstr *
ps_build_select (PsBuilder *b, PsInstr *pred, PsInstr *on_true, PsInstr *on_false)
{
  PsInstr *xs[] = { pred, on_true, on_false };
  if (!bd_usable (b, 3, xs) || !match_scalars (b, "select", &on_true, &on_false)
      || !bd_same_type (b, "select", on_true, on_false)
      || !bd_is_array (b, "select", pred))
    return NULL;
  if (pred->shape->etype != PS_PRED)
    {
      bd_fail (b, "select", "the predicate '%s' is %s, not pred", pred->name,
               ps_etype_name (pred->shape->etype));
      return NULL;
    }
  /* A scalar side broadcasts to the other: either the predicate or both
   * values. */
  if (pred->shape->rank > 0 && on_true->shape->rank == 0)
    {
      on_true = ps_build_broadcast_scalar (b, on_true, pred->shape->rank, pred->shape->dims);
      on_false = ps_build_broadcast_scalar (b, on_false, pred->shape->rank, pred->shape->dims);
    }
  else if (pred->shape->rank == 0 && on_true->shape->rank > 0)
    pred = ps_build_broadcast_scalar (b, pred, on_true->shape->rank, on_true->shape->dims);
  if (pred == NULL || on_true == NULL || on_false == NULL)
    return NULL;
  PsInstr *t = on_true;
  if (!match_scalars (b, "select", &pred, &t))
    return NULL;
  PsInstr *ops[] = { pred, on_true, on_false };
  return bd_add (b, PS_OP_SELECT, ps_shape_copy (on_true->shape), 3, ops);
}

PsInstr *
ps_build_clamp (PsBuilder *b, PsInstr *lo, PsInstr *x, PsInstr *hi)
{
  PsInstr *xs[] = { lo, x, hi };
  if (!bd_usable (b, 3, xs) || !match_scalars (b, "clamp", &lo, &x)
      || !match_scalars (b, "clamp", &hi, &x) || !bd_same_type (b, "clamp", lo, x)
      || !bd_same_type (b, "clamp", hi, x))
    return NULL;
  PsInstr *ops[] = { lo, x, hi };
  return bd_add (b, PS_OP_CLAMP, ps_shape_copy (x->shape), 3, ops);
}

PsInstr *
ps_build_convert (PsBuilder *b, PsInstr *x, PsElemType t)
{
  if (!bd_usable1 (b, x) || !bd_is_array (b, "convert", x)
      || !literal_type_ok (b, t))
    return NULL;
  PsShape *shape = ps_shape_copy (x->shape);
  shape->etype = t;
  return bd_add (b, PS_OP_CONVERT, shape, 1, &x);
}

/* ---- shape ops ------------------------------------------------------------------------ */

PsInstr *
ps_build_broadcast (PsBuilder *b, PsInstr *x, int out_rank, const int64_t *out_dims,
                    const int64_t *dims)
{
  if (!bd_usable1 (b, x) || !bd_is_array (b, "broadcast", x)
      || !check_dims (b, "broadcast", out_rank, out_dims))
    return NULL;
  int r = x->shape->rank;
  g_return_val_if_fail (r == 0 || dims != NULL, NULL);
  for (int i = 0; i < r; i++)
    {
      if (dims[i] < 0 || dims[i] >= out_rank || (i > 0 && dims[i] <= dims[i - 1]))
        {
          bd_fail (b, "broadcast",
                   "dimensions must increase within [0,%d); entry %d is %" G_GINT64_FORMAT,
                   out_rank, i, dims[i]);
          return NULL;
        }
      if (out_dims[dims[i]] != x->shape->dims[i])
        {
          bd_fail (b, "broadcast",
                   "operand dim %d (%" G_GINT64_FORMAT
                   ") lands on output dim %" G_GINT64_FORMAT " of size %" G_GINT64_FORMAT,
                   i, x->shape->dims[i], dims[i], out_dims[dims[i]]);
          return NULL;
        }
    }
  PsInstr *in = bd_add (b, PS_OP_BROADCAST,
                        ps_shape_new_array (x->shape->etype, out_rank, out_dims), 1, &x);
  ps_ints_set (&in->dimensions, r, dims);
  return in;
}

PsInstr *
ps_build_broadcast_scalar (PsBuilder *b, PsInstr *x, int rank, const int64_t *dims)
{
  if (!bd_usable1 (b, x))
    return NULL;
  if (x->shape->etype == PS_TUPLE || x->shape->rank != 0)
    {
      g_autofree char *s = bd_shape_str (x);
      bd_fail (b, "broadcast", "'%s' has shape %s, a scalar is needed", x->name, s);
      return NULL;
    }
  return ps_build_broadcast (b, x, rank, dims, NULL);
}

PsInstr *
ps_build_reshape (PsBuilder *b, PsInstr *x, int rank, const int64_t *dims)
{
  if (!bd_usable1 (b, x) || !bd_is_array (b, "reshape", x)
      || !check_dims (b, "reshape", rank, dims))
    return NULL;
  int64_t n = ps_product (rank, dims);
  if (n != ps_shape_elements (x->shape))
    {
      g_autofree char *s = bd_shape_str (x);
      bd_fail (b, "reshape",
               "%s has %" G_GINT64_FORMAT " elements, the new dims %" G_GINT64_FORMAT, s,
               ps_shape_elements (x->shape), n);
      return NULL;
    }
  return bd_add (b, PS_OP_RESHAPE, ps_shape_new_array (x->shape->etype, rank, dims), 1,
                 &x);
}

static gboolean
check_perm (PsBuilder *b, const char *op, int n, const int64_t *perm)
{
  guint64 seen = 0;
  for (int i = 0; i < n; i++)
    {
      if (perm[i] < 0 || perm[i] >= n || perm[i] >= 64 || (seen & ((guint64) 1 << perm[i])))
        {
          bd_fail (b, op,
                   "not a permutation of %d dims (entry %d is %" G_GINT64_FORMAT ")", n, i,
                   perm[i]);
          return FALSE;
        }
      seen |= (guint64) 1 << perm[i];
    }
  return TRUE;
}

PsInstr *
ps_build_transpose (PsBuilder *b, PsInstr *x, const int64_t *perm)
{
  if (!bd_usable1 (b, x) || !bd_is_array (b, "transpose", x))
    return NULL;
  int r = x->shape->rank;
  g_return_val_if_fail (r == 0 || perm != NULL, NULL);
  if (!check_perm (b, "transpose", r, perm))
    return NULL;
  int64_t out[64];
  for (int i = 0; i < r; i++)
    out[i] = x->shape->dims[perm[i]];
  PsInstr *in
      = bd_add (b, PS_OP_TRANSPOSE, ps_shape_new_array (x->shape->etype, r, out), 1, &x);
  ps_ints_set (&in->dimensions, r, perm);
  return in;
}

PsInstr *
ps_build_slice (PsBuilder *b, PsInstr *x, const int64_t *starts, const int64_t *limits,
                const int64_t *strides)
{
  if (!bd_usable1 (b, x) || !bd_is_array (b, "slice", x))
    return NULL;
  int r = x->shape->rank;
  g_return_val_if_fail (r == 0 || (starts != NULL && limits != NULL), NULL);
  int64_t ones[64], out[64];
  g_return_val_if_fail (r <= 64, NULL);
  for (int i = 0; i < r; i++)
    {
      ones[i] = strides ? strides[i] : 1;
      if (starts[i] < 0 || limits[i] < starts[i] || limits[i] > x->shape->dims[i] || ones[i] < 1)
        {
          bd_fail (b, "slice",
                   "dim %d: [%" G_GINT64_FORMAT ":%" G_GINT64_FORMAT ":%" G_GINT64_FORMAT
                   "] does not fit size %" G_GINT64_FORMAT,
                   i, starts[i], limits[i], ones[i], x->shape->dims[i]);
          return NULL;
        }
      out[i] = (limits[i] - starts[i] + ones[i] - 1) / ones[i];
    }
  PsInstr *in
      = bd_add (b, PS_OP_SLICE, ps_shape_new_array (x->shape->etype, r, out), 1, &x);
  ps_ints_set (&in->slice_starts, r, starts);
  ps_ints_set (&in->slice_limits, r, limits);
  ps_ints_set (&in->slice_strides, r, ones);
  return in;
}

PsInstr *
ps_build_pad (PsBuilder *b, PsInstr *x, PsInstr *pad_value, const PsPadDim *padding)
{
  if (!bd_usable2 (b, x, pad_value) || !bd_is_array (b, "pad", x)
      || !bd_same_type (b, "pad", x, pad_value))
    return NULL;
  if (pad_value->shape->rank != 0)
    {
      bd_fail (b, "pad", "the padding value must be a scalar");
      return NULL;
    }
  int r = x->shape->rank;
  g_return_val_if_fail (r == 0 || padding != NULL, NULL);
  int64_t out[64];
  g_return_val_if_fail (r <= 64, NULL);
  for (int i = 0; i < r; i++)
    {
      int64_t n = x->shape->dims[i];
      if (padding[i].interior < 0)
        {
          bd_fail (b, "pad", "dim %d: negative interior padding", i);
          return NULL;
        }
      out[i] = n + padding[i].lo + padding[i].hi + (n > 0 ? (n - 1) * padding[i].interior : 0);
      if (out[i] < 0)
        {
          bd_fail (b, "pad", "dim %d: padding makes the size negative", i);
          return NULL;
        }
    }
  PsInstr *ops[] = { x, pad_value };
  PsInstr *in
      = bd_add (b, PS_OP_PAD, ps_shape_new_array (x->shape->etype, r, out), 2, ops);
  in->n_pad = r;
  if (r > 0)
    in->padding = g_memdup2 (padding, sizeof (PsPadDim) * (gsize) r);
  return in;
}

PsInstr *
ps_build_concatenate (PsBuilder *b, int n, PsInstr *const *xs, int64_t dim)
{
  g_return_val_if_fail (n >= 1 && xs != NULL, NULL);
  if (!bd_usable (b, n, xs) || !bd_is_array (b, "concatenate", xs[0]))
    return NULL;
  int r = xs[0]->shape->rank;
  if (dim < 0 || dim >= r)
    {
      bd_fail (b, "concatenate",
               "dim %" G_GINT64_FORMAT " is not a dim of a rank-%d array", dim, r);
      return NULL;
    }
  int64_t out[64];
  g_return_val_if_fail (r <= 64, NULL);
  memcpy (out, xs[0]->shape->dims, sizeof (int64_t) * (gsize) r);
  out[dim] = 0;
  for (int k = 0; k < n; k++)
    {
      if (!bd_is_array (b, "concatenate", xs[k])
          || !bd_same_type (b, "concatenate", xs[0], xs[k]))
        return NULL;
      gboolean ok = xs[k]->shape->rank == r;
      for (int i = 0; ok && i < r; i++)
        ok = i == dim || xs[k]->shape->dims[i] == xs[0]->shape->dims[i];
      if (!ok)
        {
          g_autofree char *a = bd_shape_str (xs[0]);
          g_autofree char *c = bd_shape_str (xs[k]);
          bd_fail (
                   b, "concatenate",
                   "operand %d (%s) does not fit operand 0 (%s) outside dim %" G_GINT64_FORMAT, k, c, a,
                   dim);
          return NULL;
        }
      out[dim] += xs[k]->shape->dims[dim];
    }
  PsInstr *in = bd_add (b, PS_OP_CONCATENATE,
                        ps_shape_new_array (xs[0]->shape->etype, r, out), n, xs);
  ps_ints_set (&in->dimensions, 1, &dim);
  return in;
}

static gboolean
check_starts (PsBuilder *b, const char *op, int rank, PsInstr *const *starts)
{
  if (!bd_usable (b, rank, starts))
    return FALSE;
  for (int i = 0; i < rank; i++)
    if (starts[i]->shape->etype == PS_TUPLE || starts[i]->shape->rank != 0
        || !ps_etype_is_integral (starts[i]->shape->etype)
        || starts[i]->shape->etype != starts[0]->shape->etype)
      {
        g_autofree char *s = bd_shape_str (starts[i]);
        bd_fail (b, op, "start index %d is %s; starts must be integer scalars of one type",
                 i, s);
        return FALSE;
      }
  return TRUE;
}

PsInstr *
ps_build_dynamic_slice (PsBuilder *b, PsInstr *x, PsInstr *const *starts, const int64_t *sizes)
{
  if (!bd_usable1 (b, x) || !bd_is_array (b, "dynamic-slice", x))
    return NULL;
  int r = x->shape->rank;
  g_return_val_if_fail (r == 0 || (starts != NULL && sizes != NULL), NULL);
  if (!check_starts (b, "dynamic-slice", r, starts))
    return NULL;
  for (int i = 0; i < r; i++)
    if (sizes[i] < 0 || sizes[i] > x->shape->dims[i])
      {
        bd_fail (b, "dynamic-slice",
                 "size %" G_GINT64_FORMAT " does not fit dim %d of size %" G_GINT64_FORMAT,
                 sizes[i], i, x->shape->dims[i]);
        return NULL;
      }
  PsInstr **ops = g_new (PsInstr *, r + 1);
  ops[0] = x;
  for (int i = 0; i < r; i++)
    ops[i + 1] = starts[i];
  PsInstr *in = bd_add (b, PS_OP_DYNAMIC_SLICE,
                        ps_shape_new_array (x->shape->etype, r, sizes), r + 1, ops);
  g_free (ops);
  ps_ints_set (&in->dynamic_slice_sizes, r, sizes);
  return in;
}

PsInstr *
ps_build_dynamic_update_slice (PsBuilder *b, PsInstr *x, PsInstr *update, PsInstr *const *starts)
{
  if (!bd_usable2 (b, x, update) || !bd_is_array (b, "dynamic-update-slice", x)
      || !bd_is_array (b, "dynamic-update-slice", update)
      || !bd_same_type (b, "dynamic-update-slice", x, update))
    return NULL;
  int r = x->shape->rank;
  g_return_val_if_fail (r == 0 || starts != NULL, NULL);
  if (!check_starts (b, "dynamic-update-slice", r, starts))
    return NULL;
  gboolean fits = update->shape->rank == r;
  for (int i = 0; fits && i < r; i++)
    fits = update->shape->dims[i] <= x->shape->dims[i];
  if (!fits)
    {
      g_autofree char *a = bd_shape_str (update);
      g_autofree char *c = bd_shape_str (x);
      bd_fail (b, "dynamic-update-slice", "update %s does not fit in %s", a, c);
      return NULL;
    }
  PsInstr **ops = g_new (PsInstr *, r + 2);
  ops[0] = x;
  ops[1] = update;
  for (int i = 0; i < r; i++)
    ops[i + 2] = starts[i];
  PsInstr *in
      = bd_add (b, PS_OP_DYNAMIC_UPDATE_SLICE, ps_shape_copy (x->shape), r + 2, ops);
  g_free (ops);
  return in;
}

/* The builder API (see builder.h): instruction constructors with sticky
 * errors, einsum lowering to dot, reducer computations, mesh_split helpers.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "partitioner/builder.h"
#include "partitioner/hlo_internal.h"

struct PsBuilder {
  PsModule *m;
  PsComputation *c;
  GError *error;
  char *next_name;
  int64_t n_params;
  int mesh_rank;
  int64_t *mesh_dims;
  int64_t *mesh_devices;     /* NULL = arange */
};

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

void
ps_builder_free (PsBuilder *b)
{
  if (b == NULL)
    return;
  g_clear_error (&b->error);
  g_free (b->next_name);
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

void
ps_builder_name_next (PsBuilder *b, const char *name)
{
  g_return_if_fail (b != NULL);
  g_free (b->next_name);
  b->next_name = g_strdup (name);
}

static void G_GNUC_PRINTF (3, 4)
fail (PsBuilder *b, const char *op, const char *fmt, ...)
{
  if (b->error != NULL)
    return;
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  b->error = g_error_new (PS_ERROR, PS_ERROR_INVALID, "builder '%s': %s: %s", b->c->name, op,
                          msg);
}

/* FALSE when an earlier error or a NULL operand means the call must do
 * nothing. An operand from another module is a programmer error. */
static gboolean
usable (PsBuilder *b, int n, PsInstr *const *xs)
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
          fail (b, "operand", "operand %d is NULL", i);
          return FALSE;
        }
      g_return_val_if_fail (xs[i]->parent != NULL && xs[i]->parent->parent == b->m, FALSE);
      if (xs[i]->parent != b->c)
        {
          fail (b, "operand", "'%s' belongs to computation '%s', not this one", xs[i]->name,
                xs[i]->parent->name);
          return FALSE;
        }
    }
  return TRUE;
}

static gboolean
usable1 (PsBuilder *b, PsInstr *x)
{
  return usable (b, 1, &x);
}

static gboolean
usable2 (PsBuilder *b, PsInstr *x, PsInstr *y)
{
  PsInstr *xs[] = { x, y };
  return usable (b, 2, xs);
}

/* Appends an instruction; takes ownership of shape. */
static PsInstr *
add (PsBuilder *b, PsOpcode op, PsShape *shape, int n, PsInstr *const *operands)
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
  PsInstr *in = ps_computation_add_instr (b->c, op, name, shape, n, operands);
  g_free (name);
  return in;
}

static char *
shape_str (const PsInstr *x)
{
  return ps_shape_to_string (x->shape, FALSE);
}

static gboolean
is_array (PsBuilder *b, const char *op, PsInstr *x)
{
  if (x->shape->etype == PS_TUPLE || x->shape->etype == PS_TOKEN)
    {
      g_autofree char *s = shape_str (x);
      fail (b, op, "'%s' has shape %s, an array is needed", x->name, s);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_dims (PsBuilder *b, const char *op, int rank, const int64_t *dims)
{
  if (rank < 0 || (rank > 0 && dims == NULL))
    {
      fail (b, op, "bad rank %d", rank);
      return FALSE;
    }
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0)
      {
        fail (b, op, "dim %d has negative size %" G_GINT64_FORMAT, i, dims[i]);
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
    fail (b, "finish", "no root instruction");
  if (b->error == NULL && root->parent != b->c)
    fail (b, "finish", "root '%s' is not in this computation", root->name);
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
  PsInstr *in = add (b, PS_OP_PARAMETER, ps_shape_copy (shape), 0, NULL);
  in->parameter_number = b->n_params++;
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

static int64_t
product (int n, const int64_t *v)
{
  int64_t p = 1;
  for (int i = 0; i < n; i++)
    p *= v[i];
  return p;
}

/* Integer range of an element type, for constant checks. */
static gboolean
int_range (PsElemType t, int64_t *lo, uint64_t *hi)
{
  switch (t)
    {
    case PS_PRED: *lo = 0; *hi = 1; return TRUE;
    case PS_S8: *lo = G_MININT8; *hi = G_MAXINT8; return TRUE;
    case PS_S16: *lo = G_MININT16; *hi = G_MAXINT16; return TRUE;
    case PS_S32: *lo = G_MININT32; *hi = G_MAXINT32; return TRUE;
    case PS_S64: *lo = G_MININT64; *hi = G_MAXINT64; return TRUE;
    case PS_U8: *lo = 0; *hi = G_MAXUINT8; return TRUE;
    case PS_U16: *lo = 0; *hi = G_MAXUINT16; return TRUE;
    case PS_U32: *lo = 0; *hi = G_MAXUINT32; return TRUE;
    case PS_U64: *lo = 0; *hi = G_MAXUINT64; return TRUE;
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

static void
store_float (PsLiteral *l, int64_t i, double v)
{
  switch (l->etype)
    {
    case PS_F16: ((uint16_t *) l->data)[i] = ps_float_to_f16_bits ((float) v); break;
    case PS_BF16: ((uint16_t *) l->data)[i] = ps_float_to_bf16_bits ((float) v); break;
    case PS_F32: ((float *) l->data)[i] = (float) v; break;
    case PS_F64: ((double *) l->data)[i] = v; break;
    case PS_C64: ((float *) l->data)[2 * i] = (float) v; break;
    case PS_C128: ((double *) l->data)[2 * i] = v; break;
    default: g_assert_not_reached ();
    }
}

static gboolean
literal_type_ok (PsBuilder *b, PsElemType t)
{
  if (t == PS_TUPLE || t == PS_TOKEN || t >= PS_ETYPE_COUNT)
    {
      fail (b, "constant", "a constant cannot have type %s", ps_etype_name (t));
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
  int64_t n = product (rank, dims);
  g_return_val_if_fail (n == 0 || fv != NULL || iv != NULL, NULL);
  PsLiteral *lit = ps_literal_new (t, n);
  for (int64_t i = 0; i < n; i++)
    {
      if (is_float_type (t))
        {
          store_float (lit, i, fv ? fv[i] : (double) iv[i]);
          continue;
        }
      int64_t lo;
      uint64_t hi;
      int_range (t, &lo, &hi);
      int64_t v;
      if (fv != NULL)
        {
          double d = fv[i];
          if (t == PS_PRED)
            d = d != 0;
          if (!(d == floor (d)) || d < (double) lo || d > (double) hi)
            {
              fail (b, "constant", "value %g is not a %s", fv[i], ps_etype_name (t));
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
              fail (b, "constant", "value %" G_GINT64_FORMAT " is not a %s", iv[i],
                    ps_etype_name (t));
              ps_literal_free (lit);
              return NULL;
            }
        }
      store_int (lit, i, v);
    }
  PsInstr *in = add (b, PS_OP_CONSTANT, ps_shape_new_array (t, rank, dims), 0, NULL);
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
      fail (b, "iota", "iota_dimension %" G_GINT64_FORMAT " is not a dim of a rank-%d array",
            iota_dimension, rank);
      return NULL;
    }
  if (!literal_type_ok (b, t) || t == PS_PRED)
    {
      fail (b, "iota", "iota cannot have type %s", ps_etype_name (t));
      return NULL;
    }
  PsInstr *in = add (b, PS_OP_IOTA, ps_shape_new_array (t, rank, dims), 0, NULL);
  in->iota_dimension = iota_dimension;
  return in;
}

/* ---- elementwise --------------------------------------------------------------- */

static gboolean
is_unary_op (PsOpcode op)
{
  switch (op)
    {
    case PS_OP_ABS: case PS_OP_CBRT: case PS_OP_CEIL: case PS_OP_CLZ: case PS_OP_COPY:
    case PS_OP_COSINE: case PS_OP_ERF: case PS_OP_EXP: case PS_OP_EXPM1: case PS_OP_FLOOR:
    case PS_OP_IMAG: case PS_OP_IS_FINITE: case PS_OP_LOG: case PS_OP_LOG1P:
    case PS_OP_LOGISTIC: case PS_OP_NEGATE: case PS_OP_NOT: case PS_OP_POPCNT:
    case PS_OP_REAL: case PS_OP_ROUND_NEAREST_AFZ: case PS_OP_ROUND_NEAREST_EVEN:
    case PS_OP_RSQRT: case PS_OP_SIGN: case PS_OP_SINE: case PS_OP_SQRT: case PS_OP_TAN:
    case PS_OP_TANH:
      return TRUE;
    default:
      return FALSE;
    }
}

static gboolean
is_binary_op (PsOpcode op)
{
  switch (op)
    {
    case PS_OP_ADD: case PS_OP_SUBTRACT: case PS_OP_MULTIPLY: case PS_OP_DIVIDE:
    case PS_OP_MAXIMUM: case PS_OP_MINIMUM: case PS_OP_POWER: case PS_OP_REMAINDER:
    case PS_OP_AND: case PS_OP_OR: case PS_OP_XOR: case PS_OP_SHIFT_LEFT:
    case PS_OP_SHIFT_RIGHT_ARITHMETIC: case PS_OP_SHIFT_RIGHT_LOGICAL: case PS_OP_ATAN2:
    case PS_OP_COMPLEX:
      return TRUE;
    default:
      return FALSE;
    }
}

PsInstr *
ps_build_unary (PsBuilder *b, PsOpcode op, PsInstr *x)
{
  g_return_val_if_fail (is_unary_op (op), NULL);
  if (!usable1 (b, x) || !is_array (b, ps_opcode_name (op), x))
    return NULL;
  PsShape *shape = ps_shape_copy (x->shape);
  if (op == PS_OP_IS_FINITE)
    shape->etype = PS_PRED;
  else if ((op == PS_OP_REAL || op == PS_OP_IMAG) && ps_etype_is_complex (shape->etype))
    shape->etype = shape->etype == PS_C64 ? PS_F32 : PS_F64;
  return add (b, op, shape, 1, &x);
}

/* Makes x and y the same dims by broadcasting a scalar side. */
static gboolean
match_scalars (PsBuilder *b, const char *op, PsInstr **x, PsInstr **y)
{
  if (!is_array (b, op, *x) || !is_array (b, op, *y))
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
      g_autofree char *a = shape_str (*x);
      g_autofree char *c = shape_str (*y);
      fail (b, op, "operand shapes %s and %s differ", a, c);
      return FALSE;
    }
  return TRUE;
}

static gboolean
same_type (PsBuilder *b, const char *op, PsInstr *x, PsInstr *y)
{
  if (x->shape->etype != y->shape->etype)
    {
      fail (b, op, "operand types %s and %s differ (convert one first)",
            ps_etype_name (x->shape->etype), ps_etype_name (y->shape->etype));
      return FALSE;
    }
  return TRUE;
}

PsInstr *
ps_build_binary (PsBuilder *b, PsOpcode op, PsInstr *x, PsInstr *y)
{
  g_return_val_if_fail (is_binary_op (op), NULL);
  const char *name = ps_opcode_name (op);
  if (!usable2 (b, x, y) || !match_scalars (b, name, &x, &y) || !same_type (b, name, x, y))
    return NULL;
  PsInstr *ops[] = { x, y };
  PsShape *shape = ps_shape_copy (x->shape);
  if (op == PS_OP_COMPLEX)
    shape->etype = shape->etype == PS_F64 ? PS_C128 : PS_C64;
  return add (b, op, shape, 2, ops);
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
  if (!usable2 (b, x, y) || !match_scalars (b, "compare", &x, &y)
      || !same_type (b, "compare", x, y))
    return NULL;
  PsInstr *ops[] = { x, y };
  PsShape *shape = ps_shape_copy (x->shape);
  shape->etype = PS_PRED;
  PsInstr *in = add (b, PS_OP_COMPARE, shape, 2, ops);
  in->comparison = dir;
  return in;
}

PsInstr *
ps_build_select (PsBuilder *b, PsInstr *pred, PsInstr *on_true, PsInstr *on_false)
{
  PsInstr *xs[] = { pred, on_true, on_false };
  if (!usable (b, 3, xs) || !match_scalars (b, "select", &on_true, &on_false)
      || !same_type (b, "select", on_true, on_false) || !is_array (b, "select", pred))
    return NULL;
  if (pred->shape->etype != PS_PRED)
    {
      fail (b, "select", "the predicate '%s' is %s, not pred", pred->name,
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
  return add (b, PS_OP_SELECT, ps_shape_copy (on_true->shape), 3, ops);
}

PsInstr *
ps_build_clamp (PsBuilder *b, PsInstr *lo, PsInstr *x, PsInstr *hi)
{
  PsInstr *xs[] = { lo, x, hi };
  if (!usable (b, 3, xs) || !match_scalars (b, "clamp", &lo, &x)
      || !match_scalars (b, "clamp", &hi, &x) || !same_type (b, "clamp", lo, x)
      || !same_type (b, "clamp", hi, x))
    return NULL;
  PsInstr *ops[] = { lo, x, hi };
  return add (b, PS_OP_CLAMP, ps_shape_copy (x->shape), 3, ops);
}

PsInstr *
ps_build_convert (PsBuilder *b, PsInstr *x, PsElemType t)
{
  if (!usable1 (b, x) || !is_array (b, "convert", x) || !literal_type_ok (b, t))
    return NULL;
  PsShape *shape = ps_shape_copy (x->shape);
  shape->etype = t;
  return add (b, PS_OP_CONVERT, shape, 1, &x);
}

/* ---- shape ops ------------------------------------------------------------------------ */

PsInstr *
ps_build_broadcast (PsBuilder *b, PsInstr *x, int out_rank, const int64_t *out_dims,
                    const int64_t *dims)
{
  if (!usable1 (b, x) || !is_array (b, "broadcast", x)
      || !check_dims (b, "broadcast", out_rank, out_dims))
    return NULL;
  int r = x->shape->rank;
  g_return_val_if_fail (r == 0 || dims != NULL, NULL);
  for (int i = 0; i < r; i++)
    {
      if (dims[i] < 0 || dims[i] >= out_rank || (i > 0 && dims[i] <= dims[i - 1]))
        {
          fail (b, "broadcast", "dimensions must increase within [0,%d); entry %d is %"
                G_GINT64_FORMAT, out_rank, i, dims[i]);
          return NULL;
        }
      if (out_dims[dims[i]] != x->shape->dims[i])
        {
          fail (b, "broadcast", "operand dim %d (%" G_GINT64_FORMAT ") lands on output dim %"
                G_GINT64_FORMAT " of size %" G_GINT64_FORMAT, i, x->shape->dims[i], dims[i],
                out_dims[dims[i]]);
          return NULL;
        }
    }
  PsInstr *in = add (b, PS_OP_BROADCAST, ps_shape_new_array (x->shape->etype, out_rank, out_dims),
                     1, &x);
  ps_ints_set (&in->dimensions, r, dims);
  return in;
}

PsInstr *
ps_build_broadcast_scalar (PsBuilder *b, PsInstr *x, int rank, const int64_t *dims)
{
  if (!usable1 (b, x))
    return NULL;
  if (x->shape->etype == PS_TUPLE || x->shape->rank != 0)
    {
      g_autofree char *s = shape_str (x);
      fail (b, "broadcast", "'%s' has shape %s, a scalar is needed", x->name, s);
      return NULL;
    }
  return ps_build_broadcast (b, x, rank, dims, NULL);
}

PsInstr *
ps_build_reshape (PsBuilder *b, PsInstr *x, int rank, const int64_t *dims)
{
  if (!usable1 (b, x) || !is_array (b, "reshape", x) || !check_dims (b, "reshape", rank, dims))
    return NULL;
  int64_t n = product (rank, dims);
  if (n != ps_shape_elements (x->shape))
    {
      g_autofree char *s = shape_str (x);
      fail (b, "reshape", "%s has %" G_GINT64_FORMAT " elements, the new dims %"
            G_GINT64_FORMAT, s, ps_shape_elements (x->shape), n);
      return NULL;
    }
  return add (b, PS_OP_RESHAPE, ps_shape_new_array (x->shape->etype, rank, dims), 1, &x);
}

static gboolean
check_perm (PsBuilder *b, const char *op, int n, const int64_t *perm)
{
  guint64 seen = 0;
  for (int i = 0; i < n; i++)
    {
      if (perm[i] < 0 || perm[i] >= n || perm[i] >= 64 || (seen & ((guint64) 1 << perm[i])))
        {
          fail (b, op, "not a permutation of %d dims (entry %d is %" G_GINT64_FORMAT ")", n, i,
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
  if (!usable1 (b, x) || !is_array (b, "transpose", x))
    return NULL;
  int r = x->shape->rank;
  g_return_val_if_fail (r == 0 || perm != NULL, NULL);
  if (!check_perm (b, "transpose", r, perm))
    return NULL;
  int64_t out[64];
  for (int i = 0; i < r; i++)
    out[i] = x->shape->dims[perm[i]];
  PsInstr *in = add (b, PS_OP_TRANSPOSE, ps_shape_new_array (x->shape->etype, r, out), 1, &x);
  ps_ints_set (&in->dimensions, r, perm);
  return in;
}

PsInstr *
ps_build_slice (PsBuilder *b, PsInstr *x, const int64_t *starts, const int64_t *limits,
                const int64_t *strides)
{
  if (!usable1 (b, x) || !is_array (b, "slice", x))
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
          fail (b, "slice", "dim %d: [%" G_GINT64_FORMAT ":%" G_GINT64_FORMAT ":%"
                G_GINT64_FORMAT "] does not fit size %" G_GINT64_FORMAT, i, starts[i],
                limits[i], ones[i], x->shape->dims[i]);
          return NULL;
        }
      out[i] = (limits[i] - starts[i] + ones[i] - 1) / ones[i];
    }
  PsInstr *in = add (b, PS_OP_SLICE, ps_shape_new_array (x->shape->etype, r, out), 1, &x);
  ps_ints_set (&in->slice_starts, r, starts);
  ps_ints_set (&in->slice_limits, r, limits);
  ps_ints_set (&in->slice_strides, r, ones);
  return in;
}

PsInstr *
ps_build_pad (PsBuilder *b, PsInstr *x, PsInstr *pad_value, const PsPadDim *padding)
{
  if (!usable2 (b, x, pad_value) || !is_array (b, "pad", x) || !same_type (b, "pad", x, pad_value))
    return NULL;
  if (pad_value->shape->rank != 0)
    {
      fail (b, "pad", "the padding value must be a scalar");
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
          fail (b, "pad", "dim %d: negative interior padding", i);
          return NULL;
        }
      out[i] = n + padding[i].lo + padding[i].hi + (n > 0 ? (n - 1) * padding[i].interior : 0);
      if (out[i] < 0)
        {
          fail (b, "pad", "dim %d: padding makes the size negative", i);
          return NULL;
        }
    }
  PsInstr *ops[] = { x, pad_value };
  PsInstr *in = add (b, PS_OP_PAD, ps_shape_new_array (x->shape->etype, r, out), 2, ops);
  in->n_pad = r;
  if (r > 0)
    in->padding = g_memdup2 (padding, sizeof (PsPadDim) * (gsize) r);
  return in;
}

PsInstr *
ps_build_concatenate (PsBuilder *b, int n, PsInstr *const *xs, int64_t dim)
{
  g_return_val_if_fail (n >= 1 && xs != NULL, NULL);
  if (!usable (b, n, xs) || !is_array (b, "concatenate", xs[0]))
    return NULL;
  int r = xs[0]->shape->rank;
  if (dim < 0 || dim >= r)
    {
      fail (b, "concatenate", "dim %" G_GINT64_FORMAT " is not a dim of a rank-%d array", dim, r);
      return NULL;
    }
  int64_t out[64];
  g_return_val_if_fail (r <= 64, NULL);
  memcpy (out, xs[0]->shape->dims, sizeof (int64_t) * (gsize) r);
  out[dim] = 0;
  for (int k = 0; k < n; k++)
    {
      if (!is_array (b, "concatenate", xs[k]) || !same_type (b, "concatenate", xs[0], xs[k]))
        return NULL;
      gboolean ok = xs[k]->shape->rank == r;
      for (int i = 0; ok && i < r; i++)
        ok = i == dim || xs[k]->shape->dims[i] == xs[0]->shape->dims[i];
      if (!ok)
        {
          g_autofree char *a = shape_str (xs[0]);
          g_autofree char *c = shape_str (xs[k]);
          fail (b, "concatenate", "operand %d (%s) does not fit operand 0 (%s) outside dim %"
                G_GINT64_FORMAT, k, c, a, dim);
          return NULL;
        }
      out[dim] += xs[k]->shape->dims[dim];
    }
  PsInstr *in = add (b, PS_OP_CONCATENATE, ps_shape_new_array (xs[0]->shape->etype, r, out), n,
                     xs);
  ps_ints_set (&in->dimensions, 1, &dim);
  return in;
}

static gboolean
check_starts (PsBuilder *b, const char *op, int rank, PsInstr *const *starts)
{
  if (!usable (b, rank, starts))
    return FALSE;
  for (int i = 0; i < rank; i++)
    if (starts[i]->shape->etype == PS_TUPLE || starts[i]->shape->rank != 0
        || !ps_etype_is_integral (starts[i]->shape->etype)
        || starts[i]->shape->etype != starts[0]->shape->etype)
      {
        g_autofree char *s = shape_str (starts[i]);
        fail (b, op, "start index %d is %s; starts must be integer scalars of one type", i, s);
        return FALSE;
      }
  return TRUE;
}

PsInstr *
ps_build_dynamic_slice (PsBuilder *b, PsInstr *x, PsInstr *const *starts, const int64_t *sizes)
{
  if (!usable1 (b, x) || !is_array (b, "dynamic-slice", x))
    return NULL;
  int r = x->shape->rank;
  g_return_val_if_fail (r == 0 || (starts != NULL && sizes != NULL), NULL);
  if (!check_starts (b, "dynamic-slice", r, starts))
    return NULL;
  for (int i = 0; i < r; i++)
    if (sizes[i] < 0 || sizes[i] > x->shape->dims[i])
      {
        fail (b, "dynamic-slice", "size %" G_GINT64_FORMAT " does not fit dim %d of size %"
              G_GINT64_FORMAT, sizes[i], i, x->shape->dims[i]);
        return NULL;
      }
  PsInstr **ops = g_new (PsInstr *, r + 1);
  ops[0] = x;
  for (int i = 0; i < r; i++)
    ops[i + 1] = starts[i];
  PsInstr *in = add (b, PS_OP_DYNAMIC_SLICE, ps_shape_new_array (x->shape->etype, r, sizes),
                     r + 1, ops);
  g_free (ops);
  ps_ints_set (&in->dynamic_slice_sizes, r, sizes);
  return in;
}

PsInstr *
ps_build_dynamic_update_slice (PsBuilder *b, PsInstr *x, PsInstr *update, PsInstr *const *starts)
{
  if (!usable2 (b, x, update) || !is_array (b, "dynamic-update-slice", x)
      || !is_array (b, "dynamic-update-slice", update)
      || !same_type (b, "dynamic-update-slice", x, update))
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
      g_autofree char *a = shape_str (update);
      g_autofree char *c = shape_str (x);
      fail (b, "dynamic-update-slice", "update %s does not fit in %s", a, c);
      return NULL;
    }
  PsInstr **ops = g_new (PsInstr *, r + 2);
  ops[0] = x;
  ops[1] = update;
  for (int i = 0; i < r; i++)
    ops[i + 2] = starts[i];
  PsInstr *in = add (b, PS_OP_DYNAMIC_UPDATE_SLICE, ps_shape_copy (x->shape), r + 2, ops);
  g_free (ops);
  return in;
}

/* ---- contractions --------------------------------------------------------------- */

static gboolean
check_dim_list (PsBuilder *b, const char *op, const char *what, const PsInts *l, int rank,
                guint64 *used)
{
  for (int i = 0; i < l->n; i++)
    {
      int64_t d = l->v[i];
      if (d < 0 || d >= rank || d >= 64 || (*used & ((guint64) 1 << d)))
        {
          fail (b, op, "%s dim %" G_GINT64_FORMAT " is out of range or used twice", what, d);
          return FALSE;
        }
      *used |= (guint64) 1 << d;
    }
  return TRUE;
}

PsInstr *
ps_build_dot (PsBuilder *b, PsInstr *lhs, PsInstr *rhs, const PsDotDims *dims)
{
  g_return_val_if_fail (dims != NULL, NULL);
  if (!usable2 (b, lhs, rhs) || !is_array (b, "dot", lhs) || !is_array (b, "dot", rhs)
      || !same_type (b, "dot", lhs, rhs))
    return NULL;
  const PsShape *ls = lhs->shape, *rs = rhs->shape;
  guint64 lu = 0, ru = 0;
  if (!check_dim_list (b, "dot", "lhs batch", &dims->lhs_batch, ls->rank, &lu)
      || !check_dim_list (b, "dot", "lhs contracting", &dims->lhs_contracting, ls->rank, &lu)
      || !check_dim_list (b, "dot", "rhs batch", &dims->rhs_batch, rs->rank, &ru)
      || !check_dim_list (b, "dot", "rhs contracting", &dims->rhs_contracting, rs->rank, &ru))
    return NULL;
  if (dims->lhs_batch.n != dims->rhs_batch.n
      || dims->lhs_contracting.n != dims->rhs_contracting.n)
    {
      fail (b, "dot", "lhs and rhs list different numbers of batch or contracting dims");
      return NULL;
    }
  const PsInts *pairs[2][2] = { { &dims->lhs_batch, &dims->rhs_batch },
                                { &dims->lhs_contracting, &dims->rhs_contracting } };
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < pairs[k][0]->n; i++)
      {
        int64_t ld = pairs[k][0]->v[i], rd = pairs[k][1]->v[i];
        if (ls->dims[ld] != rs->dims[rd])
          {
            fail (b, "dot", "lhs %s dim %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT ") != rhs %s"
                  " dim %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT ")",
                  k ? "contracting" : "batch", ld, ls->dims[ld], k ? "contracting" : "batch",
                  rd, rs->dims[rd]);
            return NULL;
          }
      }
  int64_t out[128];
  int n = 0;
  for (int i = 0; i < dims->lhs_batch.n; i++)
    out[n++] = ls->dims[dims->lhs_batch.v[i]];
  for (int i = 0; i < ls->rank; i++)
    if (!(lu & ((guint64) 1 << i)))
      out[n++] = ls->dims[i];
  for (int i = 0; i < rs->rank; i++)
    if (!(ru & ((guint64) 1 << i)))
      out[n++] = rs->dims[i];
  PsInstr *ops[] = { lhs, rhs };
  PsInstr *in = add (b, PS_OP_DOT, ps_shape_new_array (ls->etype, n, out), 2, ops);
  ps_ints_set (&in->dot.lhs_batch, dims->lhs_batch.n, dims->lhs_batch.v);
  ps_ints_set (&in->dot.rhs_batch, dims->rhs_batch.n, dims->rhs_batch.v);
  ps_ints_set (&in->dot.lhs_contracting, dims->lhs_contracting.n, dims->lhs_contracting.v);
  ps_ints_set (&in->dot.rhs_contracting, dims->rhs_contracting.n, dims->rhs_contracting.v);
  return in;
}

PsInstr *
ps_build_matmul (PsBuilder *b, PsInstr *lhs, PsInstr *rhs)
{
  if (!usable2 (b, lhs, rhs) || !is_array (b, "dot", lhs) || !is_array (b, "dot", rhs))
    return NULL;
  if (lhs->shape->rank < 1 || rhs->shape->rank < 1)
    {
      fail (b, "dot", "matmul needs operands of rank >= 1");
      return NULL;
    }
  int64_t lc = lhs->shape->rank - 1, rc = 0;
  PsDotDims d = { { 0, NULL }, { 0, NULL }, { 1, &lc }, { 1, &rc } };
  return ps_build_dot (b, lhs, rhs, &d);
}

/* Sums the dims of x whose letters are not in `keep`; updates letters. */
static PsInstr *
einsum_sum_unused (PsBuilder *b, PsInstr *x, char *letters, const char *keep1, const char *keep2)
{
  int64_t dims[64];
  int n = 0, w = 0;
  for (int i = 0; letters[i]; i++)
    {
      gboolean kept = strchr (keep1, letters[i]) || (keep2 && strchr (keep2, letters[i]));
      if (kept)
        letters[w++] = letters[i];
      else
        dims[n++] = i;
    }
  letters[w] = '\0';
  if (n == 0)
    return x;
  return ps_build_reduce_sum (b, x, n, dims);
}

static gboolean
einsum_operand (PsBuilder *b, const char *spec, const char *letters, PsInstr *x, const char *which)
{
  if ((int) strlen (letters) != x->shape->rank)
    {
      g_autofree char *s = shape_str (x);
      fail (b, "einsum", "'%s': %s has %d letters '%s' but shape %s", spec, which,
            (int) strlen (letters), letters, s);
      return FALSE;
    }
  for (int i = 0; letters[i]; i++)
    {
      if (!g_ascii_isalpha (letters[i]))
        {
          fail (b, "einsum", "'%s': '%c' is not a letter", spec, letters[i]);
          return FALSE;
        }
      if (strchr (letters + i + 1, letters[i]))
        {
          fail (b, "einsum", "'%s': letter '%c' repeats in %s (diagonals are not supported)",
                spec, letters[i], which);
          return FALSE;
        }
    }
  return TRUE;
}

static int
index_of (const char *s, char c)
{
  const char *p = strchr (s, c);
  return p ? (int) (p - s) : -1;
}

PsInstr *
ps_build_einsum (PsBuilder *b, const char *spec, PsInstr *lhs, PsInstr *rhs)
{
  g_return_val_if_fail (spec != NULL, NULL);
  if (rhs != NULL ? !usable2 (b, lhs, rhs) : !usable1 (b, lhs))
    return NULL;
  if (!is_array (b, "einsum", lhs) || (rhs && !is_array (b, "einsum", rhs)))
    return NULL;
  /* Split "a,b->c" (spaces ignored). */
  GString *clean = g_string_new (NULL);
  for (const char *p = spec; *p; p++)
    if (!g_ascii_isspace (*p))
      g_string_append_c (clean, *p);
  g_autofree char *text = g_string_free (clean, FALSE);
  char *arrow = strstr (text, "->");
  if (arrow == NULL || strlen (text) > 200)
    {
      fail (b, "einsum", "'%s' has no '->'", spec);
      return NULL;
    }
  *arrow = '\0';
  char ls[64] = "", rs[64] = "", os[64] = "";
  char *comma = strchr (text, ',');
  if ((comma != NULL) != (rhs != NULL))
    {
      fail (b, "einsum", "'%s' names %d operands but %d were given", spec, comma ? 2 : 1,
            rhs ? 2 : 1);
      return NULL;
    }
  if (comma)
    *comma = '\0';
  if (strlen (text) >= 64 || (comma && strlen (comma + 1) >= 64) || strlen (arrow + 2) >= 64)
    {
      fail (b, "einsum", "'%s' is too long", spec);
      return NULL;
    }
  strcpy (ls, text);
  if (comma)
    strcpy (rs, comma + 1);
  strcpy (os, arrow + 2);
  if (!einsum_operand (b, spec, ls, lhs, "lhs") || (rhs && !einsum_operand (b, spec, rs, rhs, "rhs")))
    return NULL;
  for (int i = 0; os[i]; i++)
    {
      if (strchr (os + i + 1, os[i]))
        {
          fail (b, "einsum", "'%s': letter '%c' repeats in the output", spec, os[i]);
          return NULL;
        }
      if (!strchr (ls, os[i]) && !strchr (rs, os[i]))
        {
          fail (b, "einsum", "'%s': output letter '%c' is in no input", spec, os[i]);
          return NULL;
        }
    }
  /* Sizes of shared letters must agree. */
  for (int i = 0; rhs && ls[i]; i++)
    {
      int j = index_of (rs, ls[i]);
      if (j >= 0 && lhs->shape->dims[i] != rhs->shape->dims[j])
        {
          fail (b, "einsum", "'%s': letter '%c' is %" G_GINT64_FORMAT " in lhs but %"
                G_GINT64_FORMAT " in rhs", spec, ls[i], lhs->shape->dims[i],
                rhs->shape->dims[j]);
          return NULL;
        }
    }
  lhs = einsum_sum_unused (b, lhs, ls, os, rhs ? rs : NULL);
  if (rhs)
    rhs = einsum_sum_unused (b, rhs, rs, os, ls);
  if (lhs == NULL || (rhs == NULL && comma))
    return NULL;

  char produced[64] = "";
  PsInstr *result = lhs;
  if (rhs == NULL)
    strcpy (produced, ls);
  else
    {
      int64_t lb[64], rb[64], lc[64], rc[64];
      int nb = 0, nc = 0, np = 0;
      /* Batch dims in output order, so the common case needs no transpose. */
      for (int i = 0; os[i]; i++)
        if (strchr (ls, os[i]) && strchr (rs, os[i]))
          {
            lb[nb] = index_of (ls, os[i]);
            rb[nb] = index_of (rs, os[i]);
            produced[np++] = os[i];
            nb++;
          }
      for (int i = 0; ls[i]; i++)
        if (strchr (rs, ls[i]) && !strchr (os, ls[i]))
          {
            lc[nc] = i;
            rc[nc] = index_of (rs, ls[i]);
            nc++;
          }
      for (int i = 0; ls[i]; i++)
        if (!strchr (rs, ls[i]))
          produced[np++] = ls[i];
      for (int i = 0; rs[i]; i++)
        if (!strchr (ls, rs[i]))
          produced[np++] = rs[i];
      produced[np] = '\0';
      PsDotDims d = { { nb, lb }, { nb, rb }, { nc, lc }, { nc, rc } };
      result = ps_build_dot (b, lhs, rhs, &d);
      if (result == NULL)
        return NULL;
    }
  if (strcmp (produced, os) == 0)
    return result;
  int64_t perm[64];
  for (int i = 0; os[i]; i++)
    perm[i] = index_of (produced, os[i]);
  return ps_build_transpose (b, result, perm);
}

/* dim_labels "b01f_01io->b01f". */
static gboolean
parse_dim_labels (const char *labels, PsConvDims *d, GString *why)
{
  g_auto (GStrv) io = g_strsplit (labels, "->", 2);
  if (io[0] == NULL || io[1] == NULL)
    {
      g_string_append (why, "has no '->'");
      return FALSE;
    }
  g_auto (GStrv) lk = g_strsplit (io[0], "_", 2);
  if (lk[0] == NULL || lk[1] == NULL)
    {
      g_string_append (why, "has no '_' between input and kernel labels");
      return FALSE;
    }
  const char *parts[3] = { lk[0], lk[1], io[1] };
  const char special[3][2] = { { 'b', 'f' }, { 'i', 'o' }, { 'b', 'f' } };
  int n = (int) strlen (parts[0]) - 2;
  if (n < 0 || n > 9)
    {
      g_string_append (why, "needs 2 to 11 input labels");
      return FALSE;
    }
  int64_t *spatial[3];
  int64_t a[3], c[3];
  for (int k = 0; k < 3; k++)
    {
      if ((int) strlen (parts[k]) != n + 2)
        {
          g_string_append_printf (why, "part '%s' does not have %d labels", parts[k], n + 2);
          for (int j = 0; j < k; j++)
            g_free (spatial[j]);
          return FALSE;
        }
      spatial[k] = g_new (int64_t, MAX (n, 1));
      a[k] = c[k] = -1;
      for (int i = 0; i < n; i++)
        spatial[k][i] = -1;
      for (int i = 0; i < n + 2; i++)
        {
          char ch = parts[k][i];
          if (ch == special[k][0] && a[k] < 0)
            a[k] = i;
          else if (ch == special[k][1] && c[k] < 0)
            c[k] = i;
          else if (ch >= '0' && ch - '0' < n && spatial[k][ch - '0'] < 0)
            spatial[k][ch - '0'] = i;
          else
            {
              g_string_append_printf (why, "label '%c' in '%s' is unknown or repeated", ch,
                                      parts[k]);
              for (int j = 0; j <= k; j++)
                g_free (spatial[j]);
              return FALSE;
            }
        }
    }
  d->present = TRUE;
  d->n_spatial = n;
  d->in_batch = a[0];
  d->in_feature = c[0];
  d->in_spatial = spatial[0];
  d->k_in_feature = a[1];
  d->k_out_feature = c[1];
  d->k_spatial = spatial[1];
  d->out_batch = a[2];
  d->out_feature = c[2];
  d->out_spatial = spatial[2];
  return TRUE;
}

PsInstr *
ps_build_convolution (PsBuilder *b, PsInstr *lhs, PsInstr *rhs, const char *dim_labels,
                      const int64_t *strides, const int64_t *pad_lo, const int64_t *pad_hi,
                      const int64_t *rhs_dilation, int64_t feature_group_count)
{
  g_return_val_if_fail (dim_labels != NULL, NULL);
  if (!usable2 (b, lhs, rhs) || !is_array (b, "convolution", lhs)
      || !is_array (b, "convolution", rhs) || !same_type (b, "convolution", lhs, rhs))
    return NULL;
  PsConvDims d = { 0 };
  g_autoptr (GString) why = g_string_new (NULL);
  if (!parse_dim_labels (dim_labels, &d, why))
    {
      fail (b, "convolution", "dim_labels '%s' %s", dim_labels, why->str);
      return NULL;
    }
  int n = d.n_spatial;
  const PsShape *ls = lhs->shape, *ks = rhs->shape;
  int64_t g = feature_group_count < 1 ? 1 : feature_group_count;
  int64_t out[16];
  PsWindowDim *win = g_new0 (PsWindowDim, MAX (n, 1));
  const char *err = NULL;
  if (ls->rank != n + 2 || ks->rank != n + 2)
    err = "operand ranks do not match dim_labels";
  else if (ls->dims[d.in_feature] % g != 0 || ks->dims[d.k_out_feature] % g != 0)
    err = "feature dims are not divisible by feature_group_count";
  else if (ls->dims[d.in_feature] / g != ks->dims[d.k_in_feature])
    err = "input features / feature_group_count != kernel input features";
  for (int i = 0; err == NULL && i < n; i++)
    {
      PsWindowDim *w = &win[i];
      w->size = ks->dims[d.k_spatial[i]];
      w->stride = strides ? strides[i] : 1;
      w->pad_lo = pad_lo ? pad_lo[i] : 0;
      w->pad_hi = pad_hi ? pad_hi[i] : 0;
      w->base_dilation = 1;
      w->window_dilation = rhs_dilation ? rhs_dilation[i] : 1;
      if (w->stride < 1 || w->window_dilation < 1)
        err = "strides and dilations must be >= 1";
      int64_t in = ls->dims[d.in_spatial[i]] + w->pad_lo + w->pad_hi;
      int64_t span = w->size == 0 ? 0 : (w->size - 1) * w->window_dilation + 1;
      if (err == NULL && in < span)
        err = "the window is larger than the padded input";
      out[d.out_spatial[i]] = err ? 0 : (in - span) / w->stride + 1;
    }
  if (err != NULL)
    {
      fail (b, "convolution", "%s", err);
      g_free (win);
      g_free (d.in_spatial);
      g_free (d.k_spatial);
      g_free (d.out_spatial);
      return NULL;
    }
  out[d.out_batch] = ls->dims[d.in_batch];
  out[d.out_feature] = ks->dims[d.k_out_feature];
  PsInstr *ops[] = { lhs, rhs };
  PsInstr *in = add (b, PS_OP_CONVOLUTION, ps_shape_new_array (ls->etype, n + 2, out), 2, ops);
  in->conv = d;
  in->window.n = n;
  in->window.dims = win;
  if (n == 0)
    {
      g_free (win);
      in->window.dims = NULL;
    }
  in->feature_group_count = g > 1 ? g : 0;
  return in;
}

/* ---- reductions ------------------------------------------------------------------ */

static gboolean
is_reducer (const PsComputation *c, PsOpcode op, PsElemType t)
{
  if (c->params->len != 2 || c->root == NULL || c->root->opcode != op)
    return FALSE;
  for (guint i = 0; i < 2; i++)
    {
      const PsInstr *p = g_ptr_array_index (c->params, i);
      if (p->shape->etype != t || p->shape->rank != 0)
        return FALSE;
    }
  return TRUE;
}

PsComputation *
ps_builder_reducer (PsBuilder *b, PsOpcode op, PsElemType t)
{
  g_return_val_if_fail (b != NULL && is_binary_op (op), NULL);
  g_autofree char *name = g_strdup_printf ("%s_%s", ps_opcode_name (op), ps_etype_name (t));
  PsComputation *c = ps_module_find_computation (b->m, name);
  if (c != NULL && is_reducer (c, op, t))
    return c;
  PsBuilder *r = ps_builder_new (b->m, name);
  PsInstr *x = ps_build_parameter (r, "x", t, 0, NULL);
  PsInstr *y = ps_build_parameter (r, "y", t, 0, NULL);
  PsInstr *root = ps_build_binary (r, op, x, y);
  GError *error = NULL;
  c = ps_builder_finish (r, root, &error);
  if (c == NULL)
    {
      fail (b, "reducer", "%s", error->message);
      g_error_free (error);
    }
  return c;
}

PsInstr *
ps_build_reduce (PsBuilder *b, PsInstr *x, PsInstr *init, int n_dims, const int64_t *dims,
                 PsComputation *reducer)
{
  if (!usable2 (b, x, init) || reducer == NULL || !is_array (b, "reduce", x)
      || !same_type (b, "reduce", x, init))
    return NULL;
  if (init->shape->rank != 0)
    {
      fail (b, "reduce", "the init value must be a scalar");
      return NULL;
    }
  if (reducer->root == NULL || reducer->params->len != 2)
    {
      fail (b, "reduce", "reducer '%s' is not a finished two-parameter computation",
            reducer->name);
      return NULL;
    }
  guint64 used = 0;
  PsInts l = { n_dims, (int64_t *) dims };
  if (!check_dim_list (b, "reduce", "reduced", &l, x->shape->rank, &used))
    return NULL;
  int64_t out[64];
  int n = 0;
  for (int i = 0; i < x->shape->rank; i++)
    if (!(used & ((guint64) 1 << i)))
      out[n++] = x->shape->dims[i];
  PsInstr *ops[] = { x, init };
  PsInstr *in = add (b, PS_OP_REDUCE, ps_shape_new_array (x->shape->etype, n, out), 2, ops);
  /* XLA lists reduced dims in increasing order. */
  int64_t sorted[64];
  int k = 0;
  for (int i = 0; i < 64; i++)
    if (used & ((guint64) 1 << i))
      sorted[k++] = i;
  ps_ints_set (&in->dimensions, k, sorted);
  ps_instr_set_called (in, 1, &reducer);
  return in;
}

PsInstr *
ps_build_reduce_sum (PsBuilder *b, PsInstr *x, int n_dims, const int64_t *dims)
{
  if (!usable1 (b, x) || !is_array (b, "reduce", x))
    return NULL;
  PsElemType t = x->shape->etype;
  PsInstr *zero = t == PS_PRED ? ps_build_scalar_int (b, t, 0) : ps_build_scalar (b, t, 0.0);
  PsComputation *r = ps_builder_reducer (b, t == PS_PRED ? PS_OP_OR : PS_OP_ADD, t);
  return ps_build_reduce (b, x, zero, n_dims, dims, r);
}

PsInstr *
ps_build_reduce_max (PsBuilder *b, PsInstr *x, int n_dims, const int64_t *dims)
{
  if (!usable1 (b, x) || !is_array (b, "reduce", x))
    return NULL;
  PsElemType t = x->shape->etype;
  PsInstr *init;
  int64_t lo;
  uint64_t hi;
  if (ps_etype_is_complex (t))
    {
      fail (b, "reduce", "complex numbers have no maximum");
      return NULL;
    }
  if (int_range (t, &lo, &hi))
    init = ps_build_scalar_int (b, t, lo);
  else
    init = ps_build_scalar (b, t, -INFINITY);
  PsComputation *r = ps_builder_reducer (b, PS_OP_MAXIMUM, t);
  return ps_build_reduce (b, x, init, n_dims, dims, r);
}

/* ---- gather and scatter ----------------------------------------------------------- */

static void
ints_copy (PsInts *dst, const PsInts *src)
{
  ps_ints_set (dst, src->n, src->v);
}

PsInstr *
ps_build_gather (PsBuilder *b, PsInstr *operand, PsInstr *indices, const PsGatherDims *dims)
{
  g_return_val_if_fail (dims != NULL, NULL);
  if (!usable2 (b, operand, indices) || !is_array (b, "gather", operand)
      || !is_array (b, "gather", indices))
    return NULL;
  const PsShape *os = operand->shape, *is = indices->shape;
  if (!ps_etype_is_integral (is->etype))
    {
      fail (b, "gather", "indices must be integers, not %s", ps_etype_name (is->etype));
      return NULL;
    }
  if (dims->index_vector_dim < 0 || dims->index_vector_dim > is->rank)
    {
      fail (b, "gather", "index_vector_dim %" G_GINT64_FORMAT " is out of range",
            dims->index_vector_dim);
      return NULL;
    }
  if (dims->slice_sizes.n != os->rank)
    {
      fail (b, "gather", "slice_sizes has %d entries for a rank-%d operand", dims->slice_sizes.n,
            os->rank);
      return NULL;
    }
  int64_t index_len = dims->index_vector_dim == is->rank ? 1 : is->dims[dims->index_vector_dim];
  if (dims->start_index_map.n != index_len)
    {
      fail (b, "gather", "start_index_map has %d entries but the index vector has %"
            G_GINT64_FORMAT, dims->start_index_map.n, index_len);
      return NULL;
    }
  guint64 window_removed = 0, seen = 0;
  if (!check_dim_list (b, "gather", "collapsed slice", &dims->collapsed_slice_dims, os->rank,
                       &window_removed)
      || !check_dim_list (b, "gather", "operand batching", &dims->operand_batching_dims,
                          os->rank, &window_removed)
      || !check_dim_list (b, "gather", "start index map", &dims->start_index_map, os->rank, &seen))
    return NULL;
  for (int i = 0; i < os->rank; i++)
    {
      int64_t s = dims->slice_sizes.v[i];
      if (s < 0 || s > os->dims[i] || ((window_removed & ((guint64) 1 << i)) && s > 1))
        {
          fail (b, "gather", "slice size %" G_GINT64_FORMAT " does not fit operand dim %d",
                s, i);
          return NULL;
        }
    }
  int n_batch = is->rank - (dims->index_vector_dim < is->rank ? 1 : 0);
  int n_offset = os->rank - __builtin_popcountll (window_removed);
  if (dims->offset_dims.n != n_offset)
    {
      fail (b, "gather", "offset_dims has %d entries, the slice keeps %d dims",
            dims->offset_dims.n, n_offset);
      return NULL;
    }
  int rank = n_batch + n_offset;
  guint64 off_used = 0;
  if (!check_dim_list (b, "gather", "offset", &dims->offset_dims, rank, &off_used))
    return NULL;
  int64_t out[64];
  int bi = 0, oi = 0;
  for (int i = 0; i < rank; i++)
    {
      if (off_used & ((guint64) 1 << i))
        {
          while (window_removed & ((guint64) 1 << oi))
            oi++;
          out[i] = dims->slice_sizes.v[oi++];
        }
      else
        {
          if (bi == dims->index_vector_dim)
            bi++;
          out[i] = is->dims[bi++];
        }
    }
  PsInstr *ops[] = { operand, indices };
  PsInstr *in = add (b, PS_OP_GATHER, ps_shape_new_array (os->etype, rank, out), 2, ops);
  in->gather.index_vector_dim = dims->index_vector_dim;
  in->gather.indices_are_sorted = dims->indices_are_sorted;
  ints_copy (&in->gather.offset_dims, &dims->offset_dims);
  ints_copy (&in->gather.collapsed_slice_dims, &dims->collapsed_slice_dims);
  ints_copy (&in->gather.start_index_map, &dims->start_index_map);
  ints_copy (&in->gather.operand_batching_dims, &dims->operand_batching_dims);
  ints_copy (&in->gather.start_indices_batching_dims, &dims->start_indices_batching_dims);
  ints_copy (&in->gather.slice_sizes, &dims->slice_sizes);
  return in;
}

PsInstr *
ps_build_scatter (PsBuilder *b, PsInstr *operand, PsInstr *indices, PsInstr *updates,
                  const PsScatterDims *dims, PsComputation *update)
{
  g_return_val_if_fail (dims != NULL, NULL);
  PsInstr *xs[] = { operand, indices, updates };
  if (!usable (b, 3, xs) || update == NULL || !is_array (b, "scatter", operand)
      || !is_array (b, "scatter", indices) || !is_array (b, "scatter", updates)
      || !same_type (b, "scatter", operand, updates))
    return NULL;
  const PsShape *os = operand->shape, *is = indices->shape, *us = updates->shape;
  if (!ps_etype_is_integral (is->etype))
    {
      fail (b, "scatter", "indices must be integers, not %s", ps_etype_name (is->etype));
      return NULL;
    }
  if (dims->index_vector_dim < 0 || dims->index_vector_dim > is->rank)
    {
      fail (b, "scatter", "index_vector_dim %" G_GINT64_FORMAT " is out of range",
            dims->index_vector_dim);
      return NULL;
    }
  guint64 win = 0, inserted = 0, map = 0;
  if (!check_dim_list (b, "scatter", "update window", &dims->update_window_dims, us->rank, &win)
      || !check_dim_list (b, "scatter", "inserted window", &dims->inserted_window_dims, os->rank,
                          &inserted)
      || !check_dim_list (b, "scatter", "input batching", &dims->input_batching_dims, os->rank,
                          &inserted)
      || !check_dim_list (b, "scatter", "scatter dims to operand", &dims->scatter_dims_to_operand_dims,
                          os->rank, &map))
    return NULL;
  int n_scatter = is->rank - (dims->index_vector_dim < is->rank ? 1 : 0);
  if (us->rank != n_scatter + dims->update_window_dims.n
      || dims->update_window_dims.n + __builtin_popcountll (inserted) != os->rank)
    {
      fail (b, "scatter", "update rank %d does not match %d scatter dims and %d window dims",
            us->rank, n_scatter, dims->update_window_dims.n);
      return NULL;
    }
  if (update->root == NULL || update->params->len != 2)
    {
      fail (b, "scatter", "update computation '%s' is not a finished two-parameter computation",
            update->name);
      return NULL;
    }
  PsInstr *in = add (b, PS_OP_SCATTER, ps_shape_copy (os), 3, xs);
  in->scatter.index_vector_dim = dims->index_vector_dim;
  in->scatter.indices_are_sorted = dims->indices_are_sorted;
  in->scatter.unique_indices = dims->unique_indices;
  ints_copy (&in->scatter.update_window_dims, &dims->update_window_dims);
  ints_copy (&in->scatter.inserted_window_dims, &dims->inserted_window_dims);
  ints_copy (&in->scatter.scatter_dims_to_operand_dims, &dims->scatter_dims_to_operand_dims);
  ints_copy (&in->scatter.input_batching_dims, &dims->input_batching_dims);
  ints_copy (&in->scatter.scatter_indices_batching_dims, &dims->scatter_indices_batching_dims);
  ps_instr_set_called (in, 1, &update);
  return in;
}

/* ---- tuples and control flow ---------------------------------------------------------- */

PsInstr *
ps_build_tuple (PsBuilder *b, int n, PsInstr *const *xs)
{
  g_return_val_if_fail (n >= 0 && (n == 0 || xs != NULL), NULL);
  if (!usable (b, n, xs))
    return NULL;
  PsShape **shapes = g_new (PsShape *, MAX (n, 1));
  for (int i = 0; i < n; i++)
    shapes[i] = xs[i]->shape;
  PsShape *shape = ps_shape_new_tuple (n, shapes);
  g_free (shapes);
  return add (b, PS_OP_TUPLE, shape, n, xs);
}

PsInstr *
ps_build_get_tuple_element (PsBuilder *b, PsInstr *t, int64_t index)
{
  if (!usable1 (b, t))
    return NULL;
  if (t->shape->etype != PS_TUPLE || index < 0 || index >= t->shape->n_elems)
    {
      g_autofree char *s = shape_str (t);
      fail (b, "get-tuple-element", "no element %" G_GINT64_FORMAT " in %s", index, s);
      return NULL;
    }
  PsInstr *in = add (b, PS_OP_GET_TUPLE_ELEMENT, ps_shape_copy (t->shape->elems[index]), 1, &t);
  in->tuple_index = index;
  return in;
}

static gboolean
check_signature (PsBuilder *b, const char *op, const PsComputation *c, int n,
                 PsInstr *const *args)
{
  if (c->root == NULL)
    {
      fail (b, op, "computation '%s' is not finished (no root)", c->name);
      return FALSE;
    }
  if ((int) c->params->len != n)
    {
      fail (b, op, "computation '%s' takes %u parameters, %d given", c->name, c->params->len, n);
      return FALSE;
    }
  for (int i = 0; i < n; i++)
    {
      const PsInstr *p = g_ptr_array_index (c->params, i);
      if (!ps_shape_equal (p->shape, args[i]->shape))
        {
          g_autofree char *want = ps_shape_to_string (p->shape, FALSE);
          g_autofree char *got = shape_str (args[i]);
          fail (b, op, "computation '%s' parameter %d is %s, argument is %s", c->name, i, want,
                got);
          return FALSE;
        }
    }
  return TRUE;
}

PsInstr *
ps_build_while (PsBuilder *b, PsComputation *condition, PsComputation *body, PsInstr *init)
{
  g_return_val_if_fail (condition != NULL && body != NULL, NULL);
  if (!usable1 (b, init) || !check_signature (b, "while", condition, 1, &init)
      || !check_signature (b, "while", body, 1, &init))
    return NULL;
  const PsShape *cs = condition->root->shape;
  if (cs->etype != PS_PRED || cs->rank != 0)
    {
      fail (b, "while", "condition '%s' must return pred[]", condition->name);
      return NULL;
    }
  if (!ps_shape_equal (body->root->shape, init->shape))
    {
      fail (b, "while", "body '%s' must return the loop state's shape", body->name);
      return NULL;
    }
  PsInstr *in = add (b, PS_OP_WHILE, ps_shape_copy (init->shape), 1, &init);
  PsComputation *called[] = { condition, body };
  ps_instr_set_called (in, 2, called);
  return in;
}

PsInstr *
ps_build_call (PsBuilder *b, PsComputation *callee, int n, PsInstr *const *args)
{
  g_return_val_if_fail (callee != NULL && n >= 0, NULL);
  if (!usable (b, n, args) || !check_signature (b, "call", callee, n, args))
    return NULL;
  PsInstr *in = add (b, PS_OP_CALL, ps_shape_copy (callee->root->shape), n, args);
  ps_instr_set_called (in, 1, &callee);
  return in;
}

/* ---- sharding annotations ------------------------------------------------------ */

static gboolean
sharding_fits (PsBuilder *b, const char *op, PsInstr *x, const PsSharding *s)
{
  if (s->kind == PS_SHARDING_TILED && x->shape->etype != PS_TUPLE
      && ps_sharding_data_rank (s) != x->shape->rank)
    {
      g_autofree char *txt = ps_sharding_to_string (s);
      g_autofree char *sh = shape_str (x);
      fail (b, op, "sharding %s does not fit %s ('%s')", txt, sh, x->name);
      return FALSE;
    }
  if (s->kind == PS_SHARDING_TUPLE
      && (x->shape->etype != PS_TUPLE || s->n_elems != ps_shape_leaf_count (x->shape)))
    {
      fail (b, op, "tuple sharding with %d leaves does not fit '%s'", s->n_elems, x->name);
      return FALSE;
    }
  return TRUE;
}

PsInstr *
ps_build_sharding_annotation (PsBuilder *b, PsInstr *x, const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, NULL);
  if (!usable1 (b, x) || !sharding_fits (b, "custom-call", x, s))
    return NULL;
  PsInstr *in = add (b, PS_OP_CUSTOM_CALL, ps_shape_copy (x->shape), 1, &x);
  in->custom_call_target = g_strdup ("Sharding");
  g_autoptr (PsSharding) full = ps_sharding_expand_to_shape (s, x->shape);
  ps_instr_set_sharding (in, full);
  return in;
}

PsInstr *
ps_build_sharding_annotation_open (PsBuilder *b, PsInstr *x, const PsSharding *s, int n_open,
                                   const int64_t *open_dims)
{
  g_return_val_if_fail (n_open >= 0 && (n_open == 0 || open_dims != NULL), NULL);
  if (!usable1 (b, x) || !is_array (b, "custom-call", x))
    return NULL;
  guint64 used = 0;
  PsInts l = { n_open, (int64_t *) open_dims };
  if (!check_dim_list (b, "custom-call", "unspecified", &l, x->shape->rank, &used))
    return NULL;
  PsInstr *in = ps_build_sharding_annotation (b, x, s);
  if (in == NULL || n_open == 0)
    return in;
  GString *cfg = g_string_new ("unspecified_dims=[");
  int k = 0;
  for (int i = 0; i < 64; i++)
    if (used & ((guint64) 1 << i))
      g_string_append_printf (cfg, "%s%d", k++ ? "," : "", i);
  g_string_append_c (cfg, ']');
  in->backend_config = g_string_free (cfg, FALSE);
  return in;
}

void
ps_builder_set_mesh (PsBuilder *b, int mesh_rank, const int64_t *mesh_dims,
                     const int64_t *mesh_devices)
{
  g_return_if_fail (b != NULL && mesh_rank >= 1 && mesh_dims != NULL);
  g_free (b->mesh_dims);
  g_free (b->mesh_devices);
  b->mesh_rank = mesh_rank;
  b->mesh_dims = g_memdup2 (mesh_dims, sizeof (int64_t) * (gsize) mesh_rank);
  int64_t n = product (mesh_rank, mesh_dims);
  b->mesh_devices = mesh_devices ? g_memdup2 (mesh_devices, sizeof (int64_t) * (gsize) n) : NULL;
}

static PsSharding *
mesh_sharding (PsBuilder *b, PsInstr *x, const int64_t *dims_mapping)
{
  if (!usable1 (b, x) || !is_array (b, "mesh_split", x))
    return NULL;
  if (b->mesh_rank == 0)
    {
      fail (b, "mesh_split", "no mesh set (call ps_builder_set_mesh first)");
      return NULL;
    }
  GError *error = NULL;
  PsSharding *s = ps_sharding_mesh_split (x->shape->rank, b->mesh_rank, b->mesh_dims,
                                          b->mesh_devices, dims_mapping, &error);
  if (s == NULL)
    {
      fail (b, "mesh_split", "'%s': %s", x->name, error->message);
      g_error_free (error);
    }
  return s;
}

PsInstr *
ps_builder_mesh_split (PsBuilder *b, PsInstr *x, const int64_t *dims_mapping)
{
  g_autoptr (PsSharding) s = mesh_sharding (b, x, dims_mapping);
  if (s == NULL)
    return NULL;
  ps_instr_set_sharding (x, s);
  return x;
}

PsInstr *
ps_build_mesh_split (PsBuilder *b, PsInstr *x, const int64_t *dims_mapping)
{
  g_autoptr (PsSharding) s = mesh_sharding (b, x, dims_mapping);
  if (s == NULL)
    return NULL;
  return ps_build_sharding_annotation (b, x, s);
}

/* Shape inference (ps_infer_shape) and module validation
 * (ps_module_validate), declared in ir.h.
 *
 * Inference follows XLA's ShapeInference for the opcodes podsim's models and
 * the conformance corpus use. For opcodes whose result cannot be derived from
 * operands and attributes (reshape, broadcast, iota, custom-call, ...), it
 * checks what it can against the written shape and returns that shape, or
 * fails with PS_ERROR_UNSUPPORTED when none is written. PS_ERROR_INVALID
 * means the operands do not fit the opcode. */
#include "config.h"

#include <stdarg.h>
#include <string.h>

#include "partitioner/ir/ir.h"
#include "partitioner/ir/sharding.h"

#define OPNAME(in) ps_opcode_name ((in)->opcode)

static PsShape *
fail (GError **error, PsErrorCode code, const char *fmt, ...) G_GNUC_PRINTF (3, 4);

static PsShape *
fail (GError **error, PsErrorCode code, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error_literal (error, PS_ERROR, code, msg);
  g_free (msg);
  return NULL;
}

static char *
shape_str (const PsShape *s)
{
  return s ? ps_shape_to_string (s, FALSE) : g_strdup ("(no shape)");
}

/* The written shape when there is one; else "cannot infer". */
static PsShape *
written (const PsInstr *in, GError **error)
{
  if (in->shape)
    return ps_shape_copy (in->shape);
  return fail (error, PS_ERROR_UNSUPPORTED, "the result shape of %s cannot be inferred; write it",
               OPNAME (in));
}

/* The element type to use when the opcode may change it (dot, convert). */
static PsElemType
out_etype (const PsInstr *in, PsElemType fallback)
{
  return in->shape && ps_shape_is_array (in->shape) ? in->shape->etype : fallback;
}

static gboolean
count_ok (const PsInstr *in, int want, GError **error)
{
  if (in->n_operands != want)
    {
      fail (error, PS_ERROR_INVALID, "%s takes %d operand%s, got %d", OPNAME (in), want,
            want == 1 ? "" : "s", in->n_operands);
      return FALSE;
    }
  return TRUE;
}

static gboolean
arrays_ok (const PsInstr *in, GError **error)
{
  for (int i = 0; i < in->n_operands; i++)
    {
      const PsInstr *o = in->operands[i];
      if (!o || !o->shape)
        {
          fail (error, PS_ERROR_INVALID, "operand %d of %s has no shape", i, OPNAME (in));
          return FALSE;
        }
      if (!ps_shape_is_array (o->shape))
        {
          g_autofree char *s = shape_str (o->shape);
          fail (error, PS_ERROR_INVALID, "operand %d of %s is the tuple %s; an array is needed", i,
                OPNAME (in), s);
          return FALSE;
        }
    }
  return TRUE;
}

static PsShape *
with_etype (const PsShape *s, PsElemType t)
{
  return ps_shape_new_array (t, s->rank, s->dims);
}

static gboolean
dim_in_range (const PsInstr *in, const char *what, int64_t d, int rank, GError **error)
{
  if (d < 0 || d >= rank)
    {
      fail (error, PS_ERROR_INVALID, "%s: %s %" G_GINT64_FORMAT " is out of range for rank %d",
            OPNAME (in), what, d, rank);
      return FALSE;
    }
  return TRUE;
}

/* Output size of one windowed dim (convolution, reduce-window), or -1 when
 * the sizes involved overflow (attributes are read from text). */
static int64_t
window_out (int64_t in, const PsWindowDim *w)
{
  int64_t dilated_in = 0, padded, win;
  if (in > 0 && (!ps_checked_mul_i64 (in - 1, w->base_dilation, &dilated_in)
                 || !ps_checked_add_i64 (dilated_in, 1, &dilated_in)))
    return -1;
  if (!ps_checked_add_i64 (dilated_in, w->pad_lo, &padded)
      || !ps_checked_add_i64 (padded, w->pad_hi, &padded)
      || !ps_checked_mul_i64 (w->size - 1, w->window_dilation, &win)
      || !ps_checked_add_i64 (win, 1, &win))
    return -1;
  if (padded < win || w->stride <= 0)
    return 0;
  return (padded - win) / w->stride + 1;
}

static PsShape *
window_overflow (const PsInstr *in, int dim, GError **error)
{
  return fail (error, PS_ERROR_INVALID, "%s: the size of window dim %d overflows", OPNAME (in), dim);
}

static gboolean
window_ok (const PsInstr *in, GError **error)
{
  for (int i = 0; i < in->window.n; i++)
    {
      const PsWindowDim *w = &in->window.dims[i];
      if (w->size <= 0 || w->stride <= 0 || w->base_dilation <= 0 || w->window_dilation <= 0)
        {
          fail (error, PS_ERROR_INVALID, "%s: window dim %d needs positive size, stride and dilations",
                OPNAME (in), i);
          return FALSE;
        }
    }
  return TRUE;
}

static PsShape *
infer_elementwise (const PsInstr *in, GError **error)
{
  PsOpcode op = in->opcode;
  int want = 2;
  if (op == PS_OP_SELECT || op == PS_OP_CLAMP)
    want = 3;
  else if (op == PS_OP_ABS || op == PS_OP_CBRT || op == PS_OP_CEIL || op == PS_OP_CLZ
           || op == PS_OP_CONVERT || op == PS_OP_COPY || op == PS_OP_COSINE || op == PS_OP_ERF
           || op == PS_OP_EXP || op == PS_OP_EXPM1 || op == PS_OP_FLOOR || op == PS_OP_IMAG
           || op == PS_OP_IS_FINITE || op == PS_OP_LOG || op == PS_OP_LOG1P || op == PS_OP_LOGISTIC
           || op == PS_OP_NEGATE || op == PS_OP_NOT || op == PS_OP_POPCNT || op == PS_OP_REAL
           || op == PS_OP_REDUCE_PRECISION || op == PS_OP_ROUND_NEAREST_AFZ
           || op == PS_OP_ROUND_NEAREST_EVEN || op == PS_OP_RSQRT || op == PS_OP_SIGN
           || op == PS_OP_SINE || op == PS_OP_SQRT || op == PS_OP_TAN || op == PS_OP_TANH)
    want = 1;
  if (op == PS_OP_MAP)
    want = in->n_operands > 0 ? in->n_operands : 1;
  if (!count_ok (in, want, error) || !arrays_ok (in, error))
    return NULL;
  const PsShape *a = in->operands[0]->shape;
  if (op == PS_OP_SELECT)
    {
      const PsShape *pr = a, *t = in->operands[1]->shape, *f = in->operands[2]->shape;
      if (pr->etype != PS_PRED)
        return fail (error, PS_ERROR_INVALID, "select needs a pred selector, got %s", ps_etype_name (pr->etype));
      if (!ps_shape_equal (t, f) || (pr->rank != 0 && !ps_shape_same_dims (pr, t)))
        {
          g_autofree char *s0 = shape_str (pr), *s1 = shape_str (t), *s2 = shape_str (f);
          return fail (error, PS_ERROR_INVALID, "select operands have shapes %s, %s and %s", s0, s1, s2);
        }
      return ps_shape_new_array (t->etype, t->rank, t->dims);
    }
  if (op == PS_OP_CLAMP)
    {
      const PsShape *lo = a, *x = in->operands[1]->shape, *hi = in->operands[2]->shape;
      if ((lo->rank != 0 && !ps_shape_same_dims (lo, x)) || (hi->rank != 0 && !ps_shape_same_dims (hi, x))
          || lo->etype != x->etype || hi->etype != x->etype)
        {
          g_autofree char *s0 = shape_str (lo), *s1 = shape_str (x), *s2 = shape_str (hi);
          return fail (error, PS_ERROR_INVALID, "clamp operands have shapes %s, %s and %s", s0, s1, s2);
        }
      return ps_shape_new_array (x->etype, x->rank, x->dims);
    }
  if (op == PS_OP_STOCHASTIC_CONVERT)
    {
      /* XLA's ShapeInference::InferStochasticConvertShape: a float operand,
       * unsigned random bits of the same width and dims; the result type is
       * the written one */
      const PsShape *r = in->operands[1]->shape;
      gboolean fl = ps_etype_is_float (a->etype) || ps_etype_minifloat (a->etype);
      if (!fl || !ps_etype_is_integral (r->etype) || ps_etype_is_signed (r->etype)
          || ps_etype_bits (a->etype) != ps_etype_bits (r->etype) || !ps_shape_same_dims (a, r))
        {
          g_autofree char *s0 = shape_str (a), *s1 = shape_str (r);
          return fail (error, PS_ERROR_INVALID, "stochastic-convert takes a float operand and unsigned random "
                       "bits of its width and dims, got %s and %s", s0, s1);
        }
      if (!in->shape)
        return written (in, error);
      return with_etype (a, out_etype (in, a->etype));
    }
  for (int i = 1; i < in->n_operands; i++)
    {
      const PsShape *b = in->operands[i]->shape;
      gboolean etype_ok = b->etype == a->etype
                          || op == PS_OP_MAP; /* map's inputs may differ in type */
      if (!ps_shape_same_dims (a, b) || !etype_ok)
        {
          g_autofree char *s0 = shape_str (a), *s1 = shape_str (b);
          return fail (error, PS_ERROR_INVALID, "%s operands have different shapes %s and %s",
                       OPNAME (in), s0, s1);
        }
    }
  switch (op)
    {
    case PS_OP_COMPARE:
    case PS_OP_IS_FINITE:
      return with_etype (a, PS_PRED);
    case PS_OP_CONVERT:
      if (!in->shape)
        return written (in, error);
      return with_etype (a, out_etype (in, a->etype));
    case PS_OP_COMPLEX:
      return with_etype (a, a->etype == PS_F64 ? PS_C128 : PS_C64);
    case PS_OP_REAL:
    case PS_OP_IMAG:
    case PS_OP_ABS:
      if (ps_etype_is_complex (a->etype))
        return with_etype (a, a->etype == PS_C128 ? PS_F64 : PS_F32);
      return with_etype (a, a->etype);
    case PS_OP_MAP:
      if (in->n_called > 0 && in->called[0] && in->called[0]->root && in->called[0]->root->shape
          && ps_shape_is_array (in->called[0]->root->shape))
        return with_etype (a, in->called[0]->root->shape->etype);
      return with_etype (a, a->etype);
    default:
      return with_etype (a, a->etype);
    }
}

static PsShape *
infer_dot (const PsInstr *in, GError **error)
{
  if (!count_ok (in, 2, error) || !arrays_ok (in, error))
    return NULL;
  const PsShape *l = in->operands[0]->shape, *r = in->operands[1]->shape;
  const PsDotDims *d = &in->dot;
  if (d->lhs_batch.n != d->rhs_batch.n || d->lhs_contracting.n != d->rhs_contracting.n)
    return fail (error, PS_ERROR_INVALID, "dot: lhs and rhs name different numbers of batch or contracting dims");
  gboolean *lused = g_new0 (gboolean, l->rank + 1), *rused = g_new0 (gboolean, r->rank + 1);
  PsShape *res = NULL;
  const PsInts *lists[4] = { &d->lhs_batch, &d->rhs_batch, &d->lhs_contracting, &d->rhs_contracting };
  for (int k = 0; k < 4; k++)
    {
      const PsShape *s = (k % 2 == 0) ? l : r;
      gboolean *used = (k % 2 == 0) ? lused : rused;
      for (int i = 0; i < lists[k]->n; i++)
        {
          int64_t dim = lists[k]->v[i];
          if (!dim_in_range (in, (k % 2 == 0) ? "lhs dimension" : "rhs dimension", dim, s->rank, error))
            goto out;
          if (used[dim])
            {
              fail (error, PS_ERROR_INVALID, "dot: %s dimension %" G_GINT64_FORMAT " is named twice",
                    (k % 2 == 0) ? "lhs" : "rhs", dim);
              goto out;
            }
          used[dim] = TRUE;
        }
    }
  for (int i = 0; i < d->lhs_batch.n; i++)
    if (l->dims[d->lhs_batch.v[i]] != r->dims[d->rhs_batch.v[i]])
      {
        fail (error, PS_ERROR_INVALID, "dot: batch dims have sizes %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT,
              l->dims[d->lhs_batch.v[i]], r->dims[d->rhs_batch.v[i]]);
        goto out;
      }
  for (int i = 0; i < d->lhs_contracting.n; i++)
    if (l->dims[d->lhs_contracting.v[i]] != r->dims[d->rhs_contracting.v[i]])
      {
        g_autofree char *ls = shape_str (l), *rs = shape_str (r);
        fail (error, PS_ERROR_INVALID,
              "dot: contracting dims of %s and %s have sizes %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT,
              ls, rs, l->dims[d->lhs_contracting.v[i]], r->dims[d->rhs_contracting.v[i]]);
        goto out;
      }
  {
    GArray *dims = g_array_new (FALSE, FALSE, sizeof (int64_t));
    for (int i = 0; i < d->lhs_batch.n; i++)
      g_array_append_val (dims, l->dims[d->lhs_batch.v[i]]);
    for (int i = 0; i < l->rank; i++)
      if (!lused[i])
        g_array_append_val (dims, l->dims[i]);
    for (int i = 0; i < r->rank; i++)
      if (!rused[i])
        g_array_append_val (dims, r->dims[i]);
    res = ps_shape_new_array (out_etype (in, l->etype), (int) dims->len, (int64_t *) dims->data);
    g_array_free (dims, TRUE);
  }
out:
  g_free (lused);
  g_free (rused);
  return res;
}

static PsShape *
infer_convolution (const PsInstr *in, GError **error)
{
  if (!count_ok (in, 2, error) || !arrays_ok (in, error))
    return NULL;
  const PsShape *x = in->operands[0]->shape, *k = in->operands[1]->shape;
  const PsConvDims *c = &in->conv;
  if (!c->present)
    return fail (error, PS_ERROR_INVALID, "convolution needs dim_labels");
  int n = c->n_spatial;
  if (x->rank != n + 2 || k->rank != n + 2)
    return fail (error, PS_ERROR_INVALID, "convolution: dim_labels have %d spatial dims but the operands have ranks %d and %d",
                 n, x->rank, k->rank);
  if (in->window.n != n)
    return fail (error, PS_ERROR_INVALID, "convolution: window has %d dims but there are %d spatial dims",
                 in->window.n, n);
  if (!window_ok (in, error))
    return NULL;
  int64_t fgc = in->feature_group_count > 0 ? in->feature_group_count : 1;
  int64_t bgc = in->batch_group_count > 0 ? in->batch_group_count : 1;
  int64_t in_f = x->dims[c->in_feature], k_in = k->dims[c->k_in_feature];
  int64_t k_in_all;
  if (!ps_checked_mul_i64 (k_in, fgc, &k_in_all) || in_f != k_in_all)
    return fail (error, PS_ERROR_INVALID,
                 "convolution: input feature size %" G_GINT64_FORMAT " is not kernel input features %" G_GINT64_FORMAT
                 " times feature_group_count %" G_GINT64_FORMAT, in_f, k_in, fgc);
  if (x->dims[c->in_batch] % bgc != 0)
    return fail (error, PS_ERROR_INVALID, "convolution: batch %" G_GINT64_FORMAT " is not divisible by batch_group_count %" G_GINT64_FORMAT,
                 x->dims[c->in_batch], bgc);
  int64_t *dims = g_new0 (int64_t, n + 2);
  dims[c->out_batch] = x->dims[c->in_batch] / bgc;
  dims[c->out_feature] = k->dims[c->k_out_feature];
  for (int i = 0; i < n; i++)
    {
      const PsWindowDim *w = &in->window.dims[i];
      if (w->size != k->dims[c->k_spatial[i]])
        {
          g_free (dims);
          return fail (error, PS_ERROR_INVALID, "convolution: window size %" G_GINT64_FORMAT
                       " differs from kernel spatial size %" G_GINT64_FORMAT, w->size, k->dims[c->k_spatial[i]]);
        }
      dims[c->out_spatial[i]] = window_out (x->dims[c->in_spatial[i]], w);
      if (dims[c->out_spatial[i]] < 0)
        {
          g_free (dims);
          return window_overflow (in, i, error);
        }
    }
  PsShape *s = ps_shape_new_array (out_etype (in, x->etype), n + 2, dims);
  g_free (dims);
  return s;
}

static PsShape *
tuple_or_single (GPtrArray *shapes)
{
  PsShape *r;
  if (shapes->len == 1)
    r = ps_shape_copy (g_ptr_array_index (shapes, 0));
  else
    r = ps_shape_new_tuple ((int) shapes->len, (PsShape *const *) shapes->pdata);
  g_ptr_array_free (shapes, TRUE);
  return r;
}

static PsShape *
infer_reduce (const PsInstr *in, GError **error)
{
  if (in->n_operands < 2 || in->n_operands % 2 != 0)
    return fail (error, PS_ERROR_INVALID, "%s takes inputs and as many init values, got %d operands",
                 OPNAME (in), in->n_operands);
  if (!arrays_ok (in, error))
    return NULL;
  int k = in->n_operands / 2;
  const PsShape *a = in->operands[0]->shape;
  for (int i = 1; i < k; i++)
    if (!ps_shape_same_dims (a, in->operands[i]->shape))
      return fail (error, PS_ERROR_INVALID, "%s inputs have different dims", OPNAME (in));
  for (int i = k; i < 2 * k; i++)
    if (in->operands[i]->shape->rank != 0)
      return fail (error, PS_ERROR_INVALID, "%s init value %d is not a scalar", OPNAME (in), i - k);
  GPtrArray *shapes = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_shape_free);
  if (in->opcode == PS_OP_REDUCE)
    {
      gboolean *gone = g_new0 (gboolean, a->rank + 1);
      for (int i = 0; i < in->dimensions.n; i++)
        {
          if (!dim_in_range (in, "dimension", in->dimensions.v[i], a->rank, error))
            {
              g_free (gone);
              g_ptr_array_free (shapes, TRUE);
              return NULL;
            }
          gone[in->dimensions.v[i]] = TRUE;
        }
      GArray *dims = g_array_new (FALSE, FALSE, sizeof (int64_t));
      for (int i = 0; i < a->rank; i++)
        if (!gone[i])
          g_array_append_val (dims, a->dims[i]);
      for (int i = 0; i < k; i++)
        g_ptr_array_add (shapes, ps_shape_new_array (in->operands[k + i]->shape->etype, (int) dims->len,
                                                     (int64_t *) dims->data));
      g_array_free (dims, TRUE);
      g_free (gone);
    }
  else
    {
      if (in->window.n != a->rank)
        {
          g_ptr_array_free (shapes, TRUE);
          return fail (error, PS_ERROR_INVALID, "reduce-window: window has %d dims but the input has rank %d",
                       in->window.n, a->rank);
        }
      if (!window_ok (in, error))
        {
          g_ptr_array_free (shapes, TRUE);
          return NULL;
        }
      int64_t *dims = g_new0 (int64_t, a->rank + 1);
      for (int i = 0; i < a->rank; i++)
        if ((dims[i] = window_out (a->dims[i], &in->window.dims[i])) < 0)
          {
            g_free (dims);
            g_ptr_array_free (shapes, TRUE);
            return window_overflow (in, i, error);
          }
      for (int i = 0; i < k; i++)
        g_ptr_array_add (shapes, ps_shape_new_array (in->operands[k + i]->shape->etype, a->rank, dims));
      g_free (dims);
    }
  return tuple_or_single (shapes);
}

static PsShape *
infer_gather (const PsInstr *in, GError **error)
{
  if (!count_ok (in, 2, error) || !arrays_ok (in, error))
    return NULL;
  const PsShape *a = in->operands[0]->shape, *idx = in->operands[1]->shape;
  const PsGatherDims *g = &in->gather;
  if (g->slice_sizes.n != a->rank)
    return fail (error, PS_ERROR_INVALID, "gather: slice_sizes has %d entries but the operand has rank %d",
                 g->slice_sizes.n, a->rank);
  if (g->index_vector_dim < 0 || g->index_vector_dim > idx->rank)
    return fail (error, PS_ERROR_INVALID, "gather: index_vector_dim %" G_GINT64_FORMAT " out of range",
                 g->index_vector_dim);
  for (int i = 0; i < a->rank; i++)
    if (g->slice_sizes.v[i] < 0 || g->slice_sizes.v[i] > a->dims[i])
      return fail (error, PS_ERROR_INVALID, "gather: slice size %" G_GINT64_FORMAT " exceeds dim %d of size %" G_GINT64_FORMAT,
                   g->slice_sizes.v[i], i, a->dims[i]);
  /* Batch dims: the indices' dims without index_vector_dim. */
  GArray *batch = g_array_new (FALSE, FALSE, sizeof (int64_t));
  for (int i = 0; i < idx->rank; i++)
    if (i != g->index_vector_dim)
      g_array_append_val (batch, idx->dims[i]);
  GArray *offs = g_array_new (FALSE, FALSE, sizeof (int64_t));
  for (int i = 0; i < a->rank; i++)
    if (!ps_ints_contains (&g->collapsed_slice_dims, i) && !ps_ints_contains (&g->operand_batching_dims, i))
      g_array_append_val (offs, g->slice_sizes.v[i]);
  PsShape *res = NULL;
  if ((int) offs->len != g->offset_dims.n)
    fail (error, PS_ERROR_INVALID, "gather: %d offset_dims but %u uncollapsed slice dims", g->offset_dims.n,
          offs->len);
  else
    {
      int rank = (int) (batch->len + offs->len);
      int64_t *dims = g_new0 (int64_t, rank + 1);
      int bi = 0, oi = 0;
      gboolean ok = TRUE;
      for (int i = 0; i < rank && ok; i++)
        {
          if (ps_ints_contains (&g->offset_dims, i))
            dims[i] = g_array_index (offs, int64_t, oi++);
          else if (bi < (int) batch->len)
            dims[i] = g_array_index (batch, int64_t, bi++);
          else
            ok = FALSE;
        }
      if (ok && oi == (int) offs->len)
        res = ps_shape_new_array (a->etype, rank, dims);
      else
        fail (error, PS_ERROR_INVALID, "gather: offset_dims do not fit the output rank %d", rank);
      g_free (dims);
    }
  g_array_free (batch, TRUE);
  g_array_free (offs, TRUE);
  return res;
}

static PsShape *
root_shape_of (const PsInstr *in, int k, GError **error)
{
  if (k >= in->n_called || !in->called[k] || !in->called[k]->root || !in->called[k]->root->shape)
    return fail (error, PS_ERROR_INVALID, "%s has no called computation to take its shape from", OPNAME (in));
  return ps_shape_copy (in->called[k]->root->shape);
}

static PsShape *
infer_slice (const PsInstr *in, GError **error)
{
  if (!count_ok (in, 1, error) || !arrays_ok (in, error))
    return NULL;
  const PsShape *a = in->operands[0]->shape;
  if (in->slice_starts.n != a->rank)
    return fail (error, PS_ERROR_INVALID, "slice has %d entries but the operand has rank %d",
                 in->slice_starts.n, a->rank);
  int64_t *dims = g_new0 (int64_t, a->rank + 1);
  for (int i = 0; i < a->rank; i++)
    {
      int64_t s = in->slice_starts.v[i], l = in->slice_limits.v[i], st = in->slice_strides.v[i];
      if (s < 0 || l < s || l > a->dims[i] || st <= 0)
        {
          g_free (dims);
          return fail (error, PS_ERROR_INVALID, "slice [%" G_GINT64_FORMAT ":%" G_GINT64_FORMAT
                       "] does not fit dim %d of size %" G_GINT64_FORMAT, s, l, i, a->dims[i]);
        }
      dims[i] = l == s ? 0 : (l - s - 1) / st + 1; /* ceil, without overflow for a huge stride */
    }
  PsShape *r = ps_shape_new_array (a->etype, a->rank, dims);
  g_free (dims);
  return r;
}

static PsShape *
infer_pad (const PsInstr *in, GError **error)
{
  if (!count_ok (in, 2, error) || !arrays_ok (in, error))
    return NULL;
  const PsShape *a = in->operands[0]->shape;
  if (in->operands[1]->shape->rank != 0)
    return fail (error, PS_ERROR_INVALID, "pad value must be a scalar");
  if (in->n_pad != a->rank)
    return fail (error, PS_ERROR_INVALID, "padding has %d entries but the operand has rank %d", in->n_pad, a->rank);
  int64_t *dims = g_new0 (int64_t, a->rank + 1);
  for (int i = 0; i < a->rank; i++)
    {
      const PsPadDim *p = &in->padding[i];
      int64_t inner = 0;
      gboolean fits = a->dims[i] == 0 || ps_checked_mul_i64 (a->dims[i] - 1, p->interior, &inner);
      fits = fits && ps_checked_add_i64 (p->lo, p->hi, &dims[i])
             && ps_checked_add_i64 (dims[i], a->dims[i], &dims[i])
             && ps_checked_add_i64 (dims[i], inner, &dims[i]);
      if (!fits)
        {
          g_free (dims);
          return fail (error, PS_ERROR_INVALID, "padding of dim %d overflows", i);
        }
      if (p->interior < 0 || dims[i] < 0)
        {
          g_free (dims);
          return fail (error, PS_ERROR_INVALID, "padding of dim %d gives a negative size", i);
        }
    }
  PsShape *r = ps_shape_new_array (a->etype, a->rank, dims);
  g_free (dims);
  return r;
}

static PsShape *
infer_concatenate (const PsInstr *in, GError **error)
{
  if (in->n_operands < 1)
    return fail (error, PS_ERROR_INVALID, "concatenate needs at least one operand");
  if (!arrays_ok (in, error))
    return NULL;
  const PsShape *a = in->operands[0]->shape;
  if (in->dimensions.n != 1)
    return fail (error, PS_ERROR_INVALID, "concatenate needs exactly one dimension");
  int64_t axis = in->dimensions.v[0];
  if (!dim_in_range (in, "dimension", axis, a->rank, error))
    return NULL;
  int64_t *dims = g_new0 (int64_t, a->rank + 1);
  if (a->rank > 0)
    memcpy (dims, a->dims, sizeof (int64_t) * (gsize) a->rank);
  for (int k = 1; k < in->n_operands; k++)
    {
      const PsShape *b = in->operands[k]->shape;
      gboolean ok = b->rank == a->rank && b->etype == a->etype;
      for (int i = 0; ok && i < a->rank; i++)
        if (i != axis && b->dims[i] != a->dims[i])
          ok = FALSE;
      if (!ok)
        {
          g_free (dims);
          g_autofree char *s0 = shape_str (a), *s1 = shape_str (b);
          return fail (error, PS_ERROR_INVALID, "concatenate operands %s and %s differ outside dimension %" G_GINT64_FORMAT,
                       s0, s1, axis);
        }
      if (!ps_checked_add_i64 (dims[axis], b->dims[axis], &dims[axis]))
        {
          g_free (dims);
          return fail (error, PS_ERROR_INVALID, "concatenate: dimension %" G_GINT64_FORMAT " overflows", axis);
        }
    }
  PsShape *r = ps_shape_new_array (a->etype, a->rank, dims);
  g_free (dims);
  return r;
}

static PsShape *
infer_transpose (const PsInstr *in, GError **error)
{
  if (!count_ok (in, 1, error) || !arrays_ok (in, error))
    return NULL;
  const PsShape *a = in->operands[0]->shape;
  if (in->dimensions.n != a->rank)
    return fail (error, PS_ERROR_INVALID, "transpose: permutation has %d entries but the operand has rank %d",
                 in->dimensions.n, a->rank);
  int64_t *dims = g_new0 (int64_t, a->rank + 1);
  gboolean *seen = g_new0 (gboolean, a->rank + 1);
  PsShape *r = NULL;
  for (int i = 0; i < a->rank; i++)
    {
      int64_t d = in->dimensions.v[i];
      if (d < 0 || d >= a->rank || seen[d])
        {
          fail (error, PS_ERROR_INVALID, "transpose: dimensions are not a permutation of 0..%d", a->rank - 1);
          goto out;
        }
      seen[d] = TRUE;
      dims[i] = a->dims[d];
    }
  r = ps_shape_new_array (a->etype, a->rank, dims);
out:
  g_free (dims);
  g_free (seen);
  return r;
}

static PsShape *
infer_broadcast (const PsInstr *in, GError **error)
{
  if (!count_ok (in, 1, error) || !arrays_ok (in, error))
    return NULL;
  const PsShape *a = in->operands[0]->shape;
  if (in->dimensions.n != a->rank)
    return fail (error, PS_ERROR_INVALID, "broadcast: dimensions has %d entries but the operand has rank %d",
                 in->dimensions.n, a->rank);
  if (!in->shape)
    return written (in, error);
  const PsShape *o = in->shape;
  if (!ps_shape_is_array (o))
    return fail (error, PS_ERROR_INVALID, "broadcast result must be an array");
  for (int i = 0; i < a->rank; i++)
    {
      int64_t d = in->dimensions.v[i];
      if (!dim_in_range (in, "dimension", d, o->rank, error))
        return NULL;
      if (o->dims[d] != a->dims[i])
        return fail (error, PS_ERROR_INVALID, "broadcast: operand dim %d (size %" G_GINT64_FORMAT
                     ") maps to result dim %" G_GINT64_FORMAT " of size %" G_GINT64_FORMAT,
                     i, a->dims[i], d, o->dims[d]);
    }
  return ps_shape_new_array (a->etype, o->rank, o->dims);
}

static PsShape *
infer_reshape (const PsInstr *in, GError **error)
{
  if (!count_ok (in, 1, error) || !arrays_ok (in, error))
    return NULL;
  if (!in->shape)
    return written (in, error);
  const PsShape *a = in->operands[0]->shape;
  if (!ps_shape_is_array (in->shape) || ps_shape_elements (in->shape) != ps_shape_elements (a))
    {
      g_autofree char *s0 = shape_str (a), *s1 = shape_str (in->shape);
      return fail (error, PS_ERROR_INVALID, "%s cannot turn %s into %s: element counts differ",
                   OPNAME (in), s0, s1);
    }
  return ps_shape_new_array (a->etype, in->shape->rank, in->shape->dims);
}

static PsShape *
infer_dynamic_slice (const PsInstr *in, GError **error)
{
  if (in->n_operands < 1 || !arrays_ok (in, error))
    return in->n_operands < 1 ? fail (error, PS_ERROR_INVALID, "dynamic-slice needs an operand") : NULL;
  const PsShape *a = in->operands[0]->shape;
  if (in->n_operands != 1 + a->rank && in->n_operands != 2)
    return fail (error, PS_ERROR_INVALID, "dynamic-slice of rank %d takes %d operands, got %d", a->rank,
                 1 + a->rank, in->n_operands);
  if (in->dynamic_slice_sizes.n != a->rank)
    return fail (error, PS_ERROR_INVALID, "dynamic_slice_sizes has %d entries but the operand has rank %d",
                 in->dynamic_slice_sizes.n, a->rank);
  for (int i = 0; i < a->rank; i++)
    if (in->dynamic_slice_sizes.v[i] < 0 || in->dynamic_slice_sizes.v[i] > a->dims[i])
      return fail (error, PS_ERROR_INVALID, "dynamic slice size %" G_GINT64_FORMAT " exceeds dim %d of size %" G_GINT64_FORMAT,
                   in->dynamic_slice_sizes.v[i], i, a->dims[i]);
  return ps_shape_new_array (a->etype, a->rank, in->dynamic_slice_sizes.v);
}

static PsShape *
infer_dynamic_update_slice (const PsInstr *in, GError **error)
{
  if (in->n_operands < 2 || !arrays_ok (in, error))
    return in->n_operands < 2 ? fail (error, PS_ERROR_INVALID, "dynamic-update-slice needs an operand and an update") : NULL;
  const PsShape *a = in->operands[0]->shape, *u = in->operands[1]->shape;
  if (u->rank != a->rank || u->etype != a->etype)
    {
      g_autofree char *s0 = shape_str (a), *s1 = shape_str (u);
      return fail (error, PS_ERROR_INVALID, "dynamic-update-slice: update %s does not fit %s", s1, s0);
    }
  for (int i = 0; i < a->rank; i++)
    if (u->dims[i] > a->dims[i])
      {
        g_autofree char *s0 = shape_str (a), *s1 = shape_str (u);
        return fail (error, PS_ERROR_INVALID, "dynamic-update-slice: update %s is larger than %s", s1, s0);
      }
  if (in->n_operands != 2 + a->rank && in->n_operands != 3)
    return fail (error, PS_ERROR_INVALID, "dynamic-update-slice of rank %d takes %d operands, got %d",
                 a->rank, 2 + a->rank, in->n_operands);
  return ps_shape_new_array (a->etype, a->rank, a->dims);
}

/* The group size of a collective, or 0 when its groups are not written. */
static int64_t
group_size (const PsInstr *in)
{
  return in->has_replica_groups && in->n_groups > 0 ? in->group_size : 0;
}

static PsShape *same_as_operands (const PsInstr *in, GError **error);

static PsShape *
infer_all_gather_scatter (const PsInstr *in, GError **error)
{
  if (!count_ok (in, 1, error) || !arrays_ok (in, error))
    return NULL;
  const PsShape *a = in->operands[0]->shape;
  if (in->dimensions.n != 1 || !dim_in_range (in, "dimension", in->dimensions.v[0], a->rank, error))
    return (error && *error) ? NULL : fail (error, PS_ERROR_INVALID, "%s needs one dimension", OPNAME (in));
  int64_t g = group_size (in);
  if (g == 0)
    return written (in, error);
  int64_t *dims = g_new0 (int64_t, a->rank + 1);
  if (a->rank > 0)
    memcpy (dims, a->dims, sizeof (int64_t) * (gsize) a->rank);
  int64_t d = in->dimensions.v[0];
  if (in->opcode == PS_OP_ALL_GATHER)
    {
      if (!ps_checked_mul_i64 (dims[d], g, &dims[d]))
        {
          g_free (dims);
          return fail (error, PS_ERROR_INVALID, "all-gather: dim %" G_GINT64_FORMAT " overflows", d);
        }
    }
  else
    {
      if (dims[d] % g != 0)
        {
          g_free (dims);
          return fail (error, PS_ERROR_INVALID, "reduce-scatter: dim %" G_GINT64_FORMAT " of size %" G_GINT64_FORMAT
                       " does not split into %" G_GINT64_FORMAT, d, a->dims[d], g);
        }
      dims[d] /= g;
    }
  PsShape *r = ps_shape_new_array (a->etype, a->rank, dims);
  g_free (dims);
  return r;
}

/* A variadic (coalesced) all-gather or reduce-scatter, as XLA's combiner
 * passes make them: one result per operand, a tuple of them. Each is
 * inferred as the single-operand collective with the same attributes. */
static PsShape *
infer_variadic_gather_scatter (const PsInstr *in, GError **error)
{
  if (in->n_operands <= 1)
    return infer_all_gather_scatter (in, error);
  const PsShape *w = in->shape;
  if (w && (!ps_shape_is_tuple (w) || w->n_elems != in->n_operands))
    return fail (error, PS_ERROR_INVALID, "%s of %d operands returns a tuple of %d results", OPNAME (in),
                 in->n_operands, in->n_operands);
  GPtrArray *shapes = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_shape_free);
  for (int i = 0; i < in->n_operands; i++)
    {
      PsInstr one = *in;
      one.n_operands = 1;
      one.operands = &in->operands[i];
      one.shape = w ? w->elems[i] : NULL;
      PsShape *s = infer_all_gather_scatter (&one, error);
      if (!s)
        {
          g_ptr_array_free (shapes, TRUE);
          return NULL;
        }
      g_ptr_array_add (shapes, s);
    }
  PsShape *r = ps_shape_new_tuple ((int) shapes->len, (PsShape *const *) shapes->pdata);
  g_ptr_array_free (shapes, TRUE);
  return r;
}

/* The operands' shapes: the one shape, or a tuple of them. */
static PsShape *
operands_shape (const PsInstr *in)
{
  if (in->n_operands == 1)
    return ps_shape_copy (in->operands[0]->shape);
  PsShape *v[in->n_operands > 0 ? in->n_operands : 1];
  for (int i = 0; i < in->n_operands; i++)
    v[i] = in->operands[i]->shape;
  return ps_shape_new_tuple (in->n_operands, v);
}

/* The -start of an asynchronous pair, as XLA's shape inference defines it:
 * all-gather-start (operands, results); collective-permute-start (operand,
 * result, u32[], u32[]); copy-start (operand, operand, u32[]). The
 * collective's own result is inferred as its synchronous form's; a written
 * shape with more context elements (older XLA versions wrote fewer or
 * more) is taken as it is once its first two elements check. */
static PsShape *
infer_async_start (const PsInstr *in, PsOpcode sync, int n_context, GError **error)
{
  if (in->n_operands < 1)
    return fail (error, PS_ERROR_INVALID, "%s needs an operand", OPNAME (in));
  const PsShape *w = in->shape;
  if (w && (!ps_shape_is_tuple (w) || w->n_elems < 2))
    return fail (error, PS_ERROR_INVALID, "%s returns a tuple (operands, results, context...)", OPNAME (in));
  PsInstr one = *in;
  one.opcode = sync;
  one.shape = w ? w->elems[1] : NULL;
  PsShape *res = sync == PS_OP_ALL_GATHER ? infer_variadic_gather_scatter (&one, error)
                 : sync == PS_OP_COPY ? ps_shape_copy (in->operands[0]->shape)
                 : same_as_operands (&one, error);
  if (!res)
    return NULL;
  g_autoptr (PsShape) ops = operands_shape (in);
  if (w && !ps_shape_equal (w->elems[0], ops))
    {
      ps_shape_free (res);
      g_autofree char *a = shape_str (w->elems[0]);
      g_autofree char *b = shape_str (ops);
      return fail (error, PS_ERROR_INVALID, "%s: the first element of its shape is %s, not its operands' %s",
                   OPNAME (in), a, b);
    }
  if (w && w->n_elems != 2 + n_context)
    {
      ps_shape_free (res);
      return ps_shape_copy (w);
    }
  PsShape *v[4] = { ops, res, NULL, NULL };
  for (int i = 0; i < n_context; i++)
    v[2 + i] = ps_shape_new_scalar (PS_U32);
  PsShape *r = ps_shape_new_tuple (2 + n_context, v);
  for (int i = 0; i < n_context; i++)
    ps_shape_free (v[2 + i]);
  ps_shape_free (res);
  return r;
}

/* The -done (and async-update) of a pair: element k of the -start's tuple
 * (async-update: the whole tuple). */
static PsShape *
infer_async_done (const PsInstr *in, int k, GError **error)
{
  if (!count_ok (in, 1, error))
    return NULL;
  const PsShape *t = in->operands[0]->shape;
  if (k < 0)
    return ps_shape_copy (t);
  if (!ps_shape_is_tuple (t) || t->n_elems <= k)
    return fail (error, PS_ERROR_INVALID, "%s takes the tuple its -start returns", OPNAME (in));
  return ps_shape_copy (t->elems[k]);
}

static PsShape *
same_as_operands (const PsInstr *in, GError **error)
{
  if (in->n_operands < 1)
    return fail (error, PS_ERROR_INVALID, "%s needs an operand", OPNAME (in));
  GPtrArray *shapes = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_shape_free);
  for (int i = 0; i < in->n_operands; i++)
    {
      if (!in->operands[i] || !in->operands[i]->shape)
        {
          g_ptr_array_free (shapes, TRUE);
          return fail (error, PS_ERROR_INVALID, "operand %d of %s has no shape", i, OPNAME (in));
        }
      g_ptr_array_add (shapes, ps_shape_copy (in->operands[i]->shape));
    }
  PsShape *r = tuple_or_single (shapes);
  /* Shapes copied from operands keep no layout: a layout is a property of
   * what is written, and the inferred shape is compared without it. */
  return r;
}

/* batch-norm-training (operand, scale, offset) -> (operand, mean, variance);
 * batch-norm-inference (operand, scale, offset, mean, variance) -> operand;
 * batch-norm-grad (operand, scale, mean, variance, grad_output) ->
 * (grad_operand, grad_scale, grad_offset). As XLA's ShapeInference: a float
 * operand of rank >= 1, feature_index one of its dims, every other operand
 * of its element type, the per-feature ones of rank 1 and the feature
 * dim's size, grad_output of the operand's shape. */
static PsShape *
infer_batch_norm (const PsInstr *in, GError **error)
{
  int want = in->opcode == PS_OP_BATCH_NORM_TRAINING ? 3 : 5;
  if (!count_ok (in, want, error) || !arrays_ok (in, error))
    return NULL;
  const PsShape *x = in->operands[0]->shape;
  if (x->rank < 1 || !ps_etype_is_float (x->etype))
    {
      g_autofree char *xs = shape_str (x);
      return fail (error, PS_ERROR_INVALID, "%s needs a floating-point operand of rank >= 1, got %s",
                   OPNAME (in), xs);
    }
  if (!dim_in_range (in, "feature_index", in->feature_index, x->rank, error))
    return NULL;
  int64_t nf = x->dims[in->feature_index];
  for (int i = 1; i < want; i++)
    {
      const PsShape *o = in->operands[i]->shape;
      gboolean grad_out = in->opcode == PS_OP_BATCH_NORM_GRAD && i == 4;
      if (o->etype != x->etype)
        return fail (error, PS_ERROR_INVALID, "%s: operand %d is %s, the operand is %s", OPNAME (in), i,
                     ps_etype_name (o->etype), ps_etype_name (x->etype));
      if (grad_out ? !ps_shape_same_dims (o, x) : (o->rank != 1 || o->dims[0] != nf))
        {
          g_autofree char *os = shape_str (o);
          g_autofree char *xs = shape_str (x);
          if (grad_out)
            return fail (error, PS_ERROR_INVALID, "%s: grad_output %s does not have the operand's shape %s",
                         OPNAME (in), os, xs);
          return fail (error, PS_ERROR_INVALID, "%s: operand %d is %s; the %" G_GINT64_FORMAT
                       " features of dim %" G_GINT64_FORMAT " of %s need a rank-1 array of that size",
                       OPNAME (in), i, os, nf, in->feature_index, xs);
        }
    }
  if (in->opcode == PS_OP_BATCH_NORM_INFERENCE)
    return ps_shape_copy (x);
  PsShape *feat = ps_shape_new_array (x->etype, 1, &nf);
  PsShape *xc = ps_shape_new_array (x->etype, x->rank, x->dims);
  PsShape *elems[3] = { xc, feat, feat };
  PsShape *r = ps_shape_new_tuple (3, elems);
  ps_shape_free (xc);
  ps_shape_free (feat);
  return r;
}

static PsShape *infer_unchecked (const PsInstr *in, GError **error);

PsShape *
ps_infer_shape (const PsInstr *in, GError **error)
{
  g_return_val_if_fail (in != NULL, NULL);
  /* A written shape is checked before inference computes with it. */
  if (in->shape && !ps_shape_within_limits (in->shape))
    {
      g_autofree char *str = shape_str (in->shape);
      return fail (error, PS_ERROR_LIMIT, "%s has shape %s, over the limits of 2^40 elements "
                   "and %d dimensions (doc/robustness.md)", OPNAME (in), str, PS_MAX_RANK);
    }
  PsShape *s = infer_unchecked (in, error);
  if (s && !ps_shape_within_limits (s))
    {
      g_autofree char *str = shape_str (s);
      ps_shape_free (s);
      return fail (error, PS_ERROR_LIMIT, "%s would give %s, over the limits of 2^40 elements "
                   "and %d dimensions (doc/robustness.md)", OPNAME (in), str, PS_MAX_RANK);
    }
  return s;
}

static PsShape *
infer_unchecked (const PsInstr *in, GError **error)
{
  for (int i = 0; i < in->n_operands; i++)
    if (!in->operands[i] || !in->operands[i]->shape)
      return fail (error, PS_ERROR_INVALID, "operand %d of %s is missing or has no shape", i, OPNAME (in));
  PsOpcode op = in->opcode;
  if (op == PS_OP_COPY && in->n_operands == 1 && ps_shape_is_tuple (in->operands[0]->shape))
    return ps_shape_copy (in->operands[0]->shape); /* copies of tuples are allowed */
  if (ps_opcode_is_elementwise (op))
    return infer_elementwise (in, error);
  switch (op)
    {
    case PS_OP_DOT:
      /* A sparse dot carries a third (metadata) operand and stores the
       * sparse lhs compressed: podsim takes its written shape. */
      if (in->n_operands == 3 && ps_instr_get_raw_attr (in, "sparsity"))
        return written (in, error);
      return infer_dot (in, error);
    case PS_OP_CONVOLUTION: return infer_convolution (in, error);
    case PS_OP_BATCH_NORM_TRAINING: case PS_OP_BATCH_NORM_INFERENCE: case PS_OP_BATCH_NORM_GRAD:
      return infer_batch_norm (in, error);
    case PS_OP_REDUCE: case PS_OP_REDUCE_WINDOW: return infer_reduce (in, error);
    case PS_OP_GATHER: return infer_gather (in, error);
    case PS_OP_SLICE: return infer_slice (in, error);
    case PS_OP_PAD: return infer_pad (in, error);
    case PS_OP_CONCATENATE: return infer_concatenate (in, error);
    case PS_OP_TRANSPOSE: return infer_transpose (in, error);
    case PS_OP_BROADCAST: return infer_broadcast (in, error);
    case PS_OP_RESHAPE: case PS_OP_BITCAST: return infer_reshape (in, error);
    case PS_OP_DYNAMIC_SLICE: return infer_dynamic_slice (in, error);
    case PS_OP_DYNAMIC_UPDATE_SLICE: return infer_dynamic_update_slice (in, error);
    case PS_OP_ALL_GATHER: case PS_OP_REDUCE_SCATTER: return infer_variadic_gather_scatter (in, error);
    case PS_OP_ALL_GATHER_START: return infer_async_start (in, PS_OP_ALL_GATHER, 0, error);
    case PS_OP_COLLECTIVE_PERMUTE_START:
      if (in->n_operands != 1)
        return written (in, error);
      return infer_async_start (in, PS_OP_COLLECTIVE_PERMUTE, 2, error);
    case PS_OP_COPY_START:
      if (!count_ok (in, 1, error))
        return NULL;
      return infer_async_start (in, PS_OP_COPY, 1, error);
    case PS_OP_ALL_REDUCE_START: return same_as_operands (in, error);
    case PS_OP_ALL_REDUCE_DONE: case PS_OP_ASYNC_UPDATE: return infer_async_done (in, -1, error);
    case PS_OP_ALL_GATHER_DONE: case PS_OP_COLLECTIVE_PERMUTE_DONE: case PS_OP_ASYNC_DONE:
      return infer_async_done (in, 1, error);
    case PS_OP_COPY_DONE: return infer_async_done (in, 0, error);
    case PS_OP_ADD_DEPENDENCY:
      if (!count_ok (in, 2, error))
        return NULL;
      return ps_shape_copy (in->operands[0]->shape);
    case PS_OP_GET_DIMENSION_SIZE:
      if (!count_ok (in, 1, error))
        return NULL;
      return ps_shape_new_scalar (PS_S32);
    case PS_OP_REVERSE:
      if (!count_ok (in, 1, error) || !arrays_ok (in, error))
        return NULL;
      for (int i = 0; i < in->dimensions.n; i++)
        if (!dim_in_range (in, "dimension", in->dimensions.v[i], in->operands[0]->shape->rank, error))
          return NULL;
      return ps_shape_copy (in->operands[0]->shape);
    case PS_OP_SORT:
      if (in->n_operands < 1 || !arrays_ok (in, error))
        return in->n_operands < 1 ? fail (error, PS_ERROR_INVALID, "sort needs an operand") : NULL;
      for (int i = 1; i < in->n_operands; i++)
        if (!ps_shape_same_dims (in->operands[0]->shape, in->operands[i]->shape))
          return fail (error, PS_ERROR_INVALID, "sort operands have different dims");
      if (in->dimensions.n > 1
          || (in->dimensions.n == 1
              && !dim_in_range (in, "dimension", in->dimensions.v[0], in->operands[0]->shape->rank, error)))
        return (error && *error) ? NULL : fail (error, PS_ERROR_INVALID, "sort takes one dimension");
      return same_as_operands (in, error);
    case PS_OP_COLLECTIVE_BROADCAST:
      /* XLA's InferCollectiveBroadcastShape: the first operand's shape */
      if (!count_ok (in, 1, error) || !arrays_ok (in, error))
        return NULL;
      return ps_shape_copy (in->operands[0]->shape);
    case PS_OP_ALL_REDUCE: case PS_OP_ALL_TO_ALL: case PS_OP_COLLECTIVE_PERMUTE:
    case PS_OP_OPTIMIZATION_BARRIER: case PS_OP_DOMAIN: case PS_OP_CHOLESKY:
      if (op == PS_OP_COLLECTIVE_PERMUTE && in->n_operands != 1)
        return written (in, error);
      return same_as_operands (in, error);
    case PS_OP_TRIANGULAR_SOLVE:
      if (!count_ok (in, 2, error))
        return NULL;
      return ps_shape_copy (in->operands[1]->shape);
    case PS_OP_SELECT_AND_SCATTER:
      if (!count_ok (in, 3, error) || !arrays_ok (in, error))
        return NULL;
      return ps_shape_copy (in->operands[0]->shape);
    case PS_OP_SCATTER:
      {
        if (in->n_operands < 3 || in->n_operands % 2 != 1)
          return fail (error, PS_ERROR_INVALID, "scatter takes operands, indices and updates, got %d operands",
                       in->n_operands);
        int k = (in->n_operands - 1) / 2;
        if (!arrays_ok (in, error))
          return NULL;
        const PsScatterDims *sd = &in->scatter;
        const PsShape *a = in->operands[0]->shape, *u = in->operands[k + 1]->shape;
        for (int i = 1; i < k; i++)
          if (!ps_shape_same_dims (a, in->operands[i]->shape) || !ps_shape_same_dims (u, in->operands[k + 1 + i]->shape))
            return fail (error, PS_ERROR_INVALID, "scatter inputs or updates differ in dims");
        if (sd->update_window_dims.n + sd->inserted_window_dims.n + sd->input_batching_dims.n != a->rank)
          return fail (error, PS_ERROR_INVALID,
                       "scatter: %d update window dims, %d inserted and %d batching dims do not add up to the operand rank %d",
                       sd->update_window_dims.n, sd->inserted_window_dims.n, sd->input_batching_dims.n, a->rank);
        for (int i = 0; i < sd->update_window_dims.n; i++)
          if (!dim_in_range (in, "update window dim", sd->update_window_dims.v[i], u->rank, error))
            return NULL;
        GPtrArray *shapes = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_shape_free);
        for (int i = 0; i < k; i++)
          g_ptr_array_add (shapes, ps_shape_copy (in->operands[i]->shape));
        return tuple_or_single (shapes);
      }
    case PS_OP_GET_TUPLE_ELEMENT:
      {
        if (!count_ok (in, 1, error))
          return NULL;
        const PsShape *t = in->operands[0]->shape;
        if (!ps_shape_is_tuple (t))
          return fail (error, PS_ERROR_INVALID, "get-tuple-element of a non-tuple operand");
        if (in->tuple_index < 0 || in->tuple_index >= t->n_elems)
          return fail (error, PS_ERROR_INVALID, "tuple index %" G_GINT64_FORMAT " out of range for a tuple of %d",
                       in->tuple_index, t->n_elems);
        return ps_shape_copy (t->elems[in->tuple_index]);
      }
    case PS_OP_TUPLE:
      {
        GPtrArray *shapes = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_shape_free);
        for (int i = 0; i < in->n_operands; i++)
          g_ptr_array_add (shapes, ps_shape_copy (in->operands[i]->shape));
        PsShape *r = ps_shape_new_tuple ((int) shapes->len, (PsShape *const *) shapes->pdata);
        g_ptr_array_free (shapes, TRUE);
        return r;
      }
    case PS_OP_WHILE:
      if (!count_ok (in, 1, error))
        return NULL;
      return ps_shape_copy (in->operands[0]->shape);
    case PS_OP_CONDITIONAL:
      return root_shape_of (in, 0, error);
    case PS_OP_CALL:
    case PS_OP_FUSION:
      return root_shape_of (in, 0, error);
    case PS_OP_AFTER_ALL:
    case PS_OP_OUTFEED:
      return ps_shape_new_scalar (PS_TOKEN);
    case PS_OP_PARTITION_ID:
    case PS_OP_REPLICA_ID:
      if (!count_ok (in, 0, error))
        return NULL;
      return ps_shape_new_scalar (PS_U32);
    case PS_OP_BITCAST_CONVERT:
      if (!count_ok (in, 1, error))
        return NULL;
      return written (in, error);
    default:
      return written (in, error);
    }
}

/* ---- validation --------------------------------------------------------- */

static gboolean G_GNUC_PRINTF (5, 6)
vfail (GError **error, PsErrorCode code, const char *file, const PsInstr *in, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  if (in && in->src_line > 0)
    ps_set_error_at (error, code, file, in->src_line, in->src_col, "%s", msg);
  else if (in)
    ps_set_error_at (error, code, file, 0, 0, "computation '%s', instruction '%s': %s",
                     in->parent ? in->parent->name : "?", in->name, msg);
  else
    ps_set_error_at (error, code, file, 0, 0, "%s", msg);
  g_free (msg);
  return FALSE;
}

static gboolean
check_sharding (const PsInstr *in, const char *file, GError **error)
{
  const PsSharding *s = in->sharding;
  if (!s)
    return TRUE;
  int leaves = ps_shape_leaf_count (in->shape);
  if (in->shape->etype == PS_TOKEN)
    return TRUE; /* outfeed: the sharding describes the data sent */
  if (s->kind == PS_SHARDING_TUPLE)
    {
      if (!ps_shape_is_tuple (in->shape))
        return vfail (error, PS_ERROR_INVALID, file, in, "tuple sharding on '%s', whose shape is not a tuple",
                      in->name);
      if (s->n_elems != leaves)
        return vfail (error, PS_ERROR_INVALID, file, in,
                      "sharding of '%s' has %d elements but its shape has %d leaves", in->name, s->n_elems,
                      leaves);
      GPtrArray *lv = ps_shape_leaves (in->shape);
      gboolean ok = TRUE;
      for (int i = 0; i < s->n_elems && ok; i++)
        {
          const PsSharding *e = s->elems[i];
          const PsShape *ls = g_ptr_array_index (lv, i);
          if (e->kind == PS_SHARDING_TILED && ps_sharding_data_rank (e) != ls->rank)
            ok = vfail (error, PS_ERROR_INVALID, file, in,
                        "sharding element %d of '%s' tiles %d dims but leaf %d has rank %d", i, in->name,
                        ps_sharding_data_rank (e), i, ls->rank);
        }
      g_ptr_array_free (lv, TRUE);
      return ok;
    }
  if (s->kind == PS_SHARDING_TILED && ps_shape_is_array (in->shape)
      && ps_sharding_data_rank (s) != in->shape->rank)
    {
      g_autofree char *sh = ps_shape_to_string (in->shape, FALSE);
      return vfail (error, PS_ERROR_INVALID, file, in, "sharding of '%s' tiles %d dims but its shape %s has rank %d",
                    in->name, ps_sharding_data_rank (s), sh, in->shape->rank);
    }
  return TRUE;
}

static gboolean
check_called (const PsInstr *in, const char *file, GError **error)
{
  for (int i = 0; i < in->n_called; i++)
    if (!in->called[i] || !in->called[i]->root)
      return vfail (error, PS_ERROR_INVALID, file, in, "'%s' calls a missing or empty computation", in->name);
  int nparams0 = in->n_called > 0 ? (int) in->called[0]->params->len : 0;
  switch (in->opcode)
    {
    case PS_OP_WHILE:
      if (in->n_called != 2)
        return vfail (error, PS_ERROR_INVALID, file, in, "while '%s' needs a condition and a body", in->name);
      if (in->called[0]->params->len != 1 || in->called[1]->params->len != 1)
        return vfail (error, PS_ERROR_INVALID, file, in, "while '%s': condition and body must take one parameter",
                      in->name);
      if (!ps_shape_equal (in->called[1]->root->shape, in->shape))
        {
          g_autofree char *a = ps_shape_to_string (in->called[1]->root->shape, FALSE);
          g_autofree char *b = ps_shape_to_string (in->shape, FALSE);
          return vfail (error, PS_ERROR_INVALID, file, in, "while '%s': body returns %s but the loop state is %s",
                        in->name, a, b);
        }
      break;
    case PS_OP_CONDITIONAL:
      if (in->n_called != in->n_operands - 1)
        return vfail (error, PS_ERROR_INVALID, file, in, "conditional '%s' has %d branches but %d branch operands",
                      in->name, in->n_called, in->n_operands - 1);
      break;
    case PS_OP_CALL:
    case PS_OP_FUSION:
    case PS_OP_ASYNC_START:
      if (nparams0 != in->n_operands)
        return vfail (error, PS_ERROR_INVALID, file, in, "%s '%s' passes %d operands to '%s', which takes %d",
                      ps_opcode_name (in->opcode), in->name, in->n_operands, in->called[0]->name, nparams0);
      break;
    case PS_OP_REDUCE: case PS_OP_REDUCE_WINDOW:
      if (in->n_called == 1 && nparams0 != in->n_operands)
        return vfail (error, PS_ERROR_INVALID, file, in, "reducer '%s' of '%s' takes %d parameters, expected %d",
                      in->called[0]->name, in->name, nparams0, in->n_operands);
      break;
    case PS_OP_SORT:
      if (in->n_called == 1 && nparams0 != 2 * in->n_operands)
        return vfail (error, PS_ERROR_INVALID, file, in, "comparator '%s' of '%s' takes %d parameters, expected %d",
                      in->called[0]->name, in->name, nparams0, 2 * in->n_operands);
      break;
    case PS_OP_ALL_REDUCE: case PS_OP_REDUCE_SCATTER: case PS_OP_ALL_REDUCE_START:
      if (in->n_called == 1 && nparams0 != 2)
        return vfail (error, PS_ERROR_INVALID, file, in, "reducer '%s' of '%s' takes %d parameters, expected 2",
                      in->called[0]->name, in->name, nparams0);
      break;
    default:
      break;
    }
  return TRUE;
}

/* Depth-first over the calls from c; *height is the longest chain of calls
 * below c. `state` maps a computation on the current path to -1 (a call to
 * it closes a cycle) and a finished one to its height + 1. Chains longer than
 * PS_MAX_NESTING are refused before the recursion gets deeper than that. */
static gboolean
check_calls (const PsComputation *c, GHashTable *state, int depth, const char *file,
             int *height, GError **error)
{
  g_hash_table_insert (state, (gpointer) c, GINT_TO_POINTER (-1));
  int h = 0;
  for (guint i = 0; i < c->instrs->len; i++)
    {
      const PsInstr *in = g_ptr_array_index (c->instrs, i);
      for (int k = 0; k < in->n_called; k++)
        {
          const PsComputation *callee = in->called[k];
          int st = GPOINTER_TO_INT (g_hash_table_lookup (state, callee)), sub;
          if (st < 0)
            return vfail (error, PS_ERROR_INVALID, file, in,
                          "'%s' calls computation '%s' recursively (the call graph has "
                          "a cycle)", in->name, callee->name);
          if (st > 0)
            sub = st - 1;
          else if (depth + 1 >= PS_MAX_NESTING)
            sub = PS_MAX_NESTING;
          else if (!check_calls (callee, state, depth + 1, file, &sub, error))
            return FALSE;
          if (sub + 1 >= PS_MAX_NESTING)
            return vfail (error, PS_ERROR_LIMIT, file, in,
                          "'%s' calls computations nested more than %d deep (doc/robustness.md)",
                          in->name, PS_MAX_NESTING);
          h = MAX (h, sub + 1);
        }
    }
  g_hash_table_insert (state, (gpointer) c, GINT_TO_POINTER (h + 1));
  *height = h;
  return TRUE;
}

gboolean
ps_module_validate (const PsModule *m, const char *filename, GError **error)
{
  const char *file = filename ? filename : m->name;
  if (!m->entry)
    return vfail (error, PS_ERROR_INVALID, file, NULL, "module '%s' has no entry computation", m->name);
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = g_ptr_array_index (m->computations, k);
      if (!c->root)
        return vfail (error, PS_ERROR_INVALID, file, NULL, "computation '%s' has no root", c->name);
      for (guint i = 0; i < c->params->len; i++)
        {
          const PsInstr *pi = g_ptr_array_index (c->params, i);
          if (!pi || pi->opcode != PS_OP_PARAMETER || pi->parameter_number != (int64_t) i)
            return vfail (error, PS_ERROR_INVALID, file, pi, "computation '%s': parameter %u is missing or misnumbered",
                          c->name, i);
        }
      for (guint i = 0; i < c->instrs->len; i++)
        {
          const PsInstr *in = g_ptr_array_index (c->instrs, i);
          if (!in->shape)
            return vfail (error, PS_ERROR_INVALID, file, in, "'%s' has no shape", in->name);
          for (int j = 0; j < in->n_operands; j++)
            if (!in->operands[j] || in->operands[j]->parent != c)
              return vfail (error, PS_ERROR_INVALID, file, in, "operand %d of '%s' is not in computation '%s'", j,
                            in->name, c->name);
          if (in->has_replica_groups && ps_instr_groups_ragged (in) && in->opcode != PS_OP_ALL_REDUCE
              && in->opcode != PS_OP_ALL_REDUCE_START)
            return vfail (error, PS_ERROR_INVALID, file, in, "%s '%s': replica groups of different sizes "
                          "(XLA's verifier takes them for all-reduce only)", OPNAME (in), in->name);
          GError *ie = NULL;
          PsShape *inf = ps_infer_shape (in, &ie);
          if (!inf)
            {
              gboolean bad = ie->code != PS_ERROR_UNSUPPORTED;
              if (bad)
                vfail (error, PS_ERROR_INVALID, file, in, "%s", ie->message);
              g_error_free (ie);
              if (bad)
                return FALSE;
            }
          else
            {
              gboolean eq = ps_shape_equal (inf, in->shape);
              if (!eq)
                {
                  g_autofree char *w = ps_shape_to_string (in->shape, FALSE);
                  g_autofree char *s = ps_shape_to_string (inf, FALSE);
                  vfail (error, PS_ERROR_INVALID, file, in, "shape %s of '%s' does not match %s, the shape its %s produces",
                         w, in->name, s, ps_opcode_name (in->opcode));
                }
              ps_shape_free (inf);
              if (!eq)
                return FALSE;
            }
          if (!check_called (in, file, error) || !check_sharding (in, file, error))
            return FALSE;
        }
    }
  /* Passes recurse into called computations: a cycle would never end. */
  g_autoptr (GHashTable) state = g_hash_table_new (NULL, NULL);
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = g_ptr_array_index (m->computations, k);
      int height;
      if (!g_hash_table_contains (state, c) && !check_calls (c, state, 0, file, &height, error))
        return FALSE;
    }
  return TRUE;
}

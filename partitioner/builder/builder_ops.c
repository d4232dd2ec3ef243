/* The builder API (see builder.h), second half: dot and einsum,
 * convolution, reductions and reducer computations, gather and scatter,
 * tuples and control flow, sharding annotations and mesh_split.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "common/ndindex.h"
#include "partitioner/builder/builder_private.h"

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
          bd_fail (b, op, "%s dim %" G_GINT64_FORMAT " is out of range or used twice",
                   what, d);
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
  if (!bd_usable2 (b, lhs, rhs) || !bd_is_array (b, "dot", lhs)
      || !bd_is_array (b, "dot", rhs) || !bd_same_type (b, "dot", lhs, rhs))
    return NULL;
  const PsShape *ls = lhs->shape, *rs = rhs->shape;
  guint64 lu = 0, ru = 0;
  if (!check_dim_list (b, "dot", "lhs batch", &dims->lhs_batch, ls->rank, &lu)
      || !check_dim_list (b, "dot", "lhs contracting", &dims->lhs_contracting, ls->rank, &lu)
      || !check_dim_list (b, "dot", "rhs batch", &dims->rhs_batch, rs->rank, &ru)
      || !check_dim_list (b, "dot", "rhs contracting", &dims->rhs_contracting, rs->rank, &ru))
    return NULL;
  if (dims->lhs_batch.n != dims->rhs_batch.n || dims->lhs_contracting.n != dims->rhs_contracting.n)
    {
      bd_fail (b, "dot",
               "lhs and rhs list different numbers of batch or contracting dims");
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
            bd_fail (b, "dot",
                     "lhs %s dim %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT ") != rhs %s"
                     " dim %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT ")",
                     k ? "contracting" : "batch", ld, ls->dims[ld],
                     k ? "contracting" : "batch", rd, rs->dims[rd]);
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
  PsInstr *in = bd_add (b, PS_OP_DOT, ps_shape_new_array (ls->etype, n, out), 2, ops);
  ps_ints_set (&in->dot.lhs_batch, dims->lhs_batch.n, dims->lhs_batch.v);
  ps_ints_set (&in->dot.rhs_batch, dims->rhs_batch.n, dims->rhs_batch.v);
  ps_ints_set (&in->dot.lhs_contracting, dims->lhs_contracting.n, dims->lhs_contracting.v);
  ps_ints_set (&in->dot.rhs_contracting, dims->rhs_contracting.n, dims->rhs_contracting.v);
  return in;
}

PsInstr *
ps_build_matmul (PsBuilder *b, PsInstr *lhs, PsInstr *rhs)
{
  if (!bd_usable2 (b, lhs, rhs) || !bd_is_array (b, "dot", lhs)
      || !bd_is_array (b, "dot", rhs))
    return NULL;
  if (lhs->shape->rank < 1 || rhs->shape->rank < 1)
    {
      bd_fail (b, "dot", "matmul needs operands of rank >= 1");
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
      g_autofree char *s = bd_shape_str (x);
      bd_fail (b, "einsum", "'%s': %s has %d letters '%s' but shape %s", spec, which,
               (int) strlen (letters), letters, s);
      return FALSE;
    }
  for (int i = 0; letters[i]; i++)
    {
      if (!g_ascii_isalpha (letters[i]))
        {
          bd_fail (b, "einsum", "'%s': '%c' is not a letter", spec, letters[i]);
          return FALSE;
        }
      if (strchr (letters + i + 1, letters[i]))
        {
          bd_fail (b, "einsum",
                   "'%s': letter '%c' repeats in %s (diagonals are not supported)", spec,
                   letters[i], which);
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
  if (rhs != NULL ? !bd_usable2 (b, lhs, rhs) : !bd_usable1 (b, lhs))
    return NULL;
  if (!bd_is_array (b, "einsum", lhs) || (rhs && !bd_is_array (b, "einsum", rhs)))
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
      bd_fail (b, "einsum", "'%s' has no '->'", spec);
      return NULL;
    }
  *arrow = '\0';
  char ls[64] = "", rs[64] = "", os[64] = "";
  char *comma = strchr (text, ',');
  if ((comma != NULL) != (rhs != NULL))
    {
      bd_fail (b, "einsum", "'%s' names %d operands but %d were given", spec,
               comma ? 2 : 1, rhs ? 2 : 1);
      return NULL;
    }
  if (comma)
    *comma = '\0';
  if (strlen (text) >= 64 || (comma && strlen (comma + 1) >= 64) || strlen (arrow + 2) >= 64)
    {
      bd_fail (b, "einsum", "'%s' is too long", spec);
      return NULL;
    }
  strcpy (ls, text);
  if (comma)
    strcpy (rs, comma + 1);
  strcpy (os, arrow + 2);
  if (!einsum_operand (b, spec, ls, lhs, "lhs")
      || (rhs && !einsum_operand (b, spec, rs, rhs, "rhs")))
    return NULL;
  for (int i = 0; os[i]; i++)
    {
      if (strchr (os + i + 1, os[i]))
        {
          bd_fail (b, "einsum", "'%s': letter '%c' repeats in the output", spec, os[i]);
          return NULL;
        }
      if (!strchr (ls, os[i]) && !strchr (rs, os[i]))
        {
          bd_fail (b, "einsum", "'%s': output letter '%c' is in no input", spec, os[i]);
          return NULL;
        }
    }
  /* Sizes of shared letters must agree. */
  for (int i = 0; rhs && ls[i]; i++)
    {
      int j = index_of (rs, ls[i]);
      if (j >= 0 && lhs->shape->dims[i] != rhs->shape->dims[j])
        {
          bd_fail (b, "einsum",
                   "'%s': letter '%c' is %" G_GINT64_FORMAT " in lhs but %" G_GINT64_FORMAT
                   " in rhs",
                   spec, ls[i], lhs->shape->dims[i], rhs->shape->dims[j]);
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
  return ps_build_convolution_dilated (b, lhs, rhs, dim_labels, strides, pad_lo, pad_hi, NULL,
                                       rhs_dilation, feature_group_count);
}

PsInstr *
ps_build_convolution_dilated (PsBuilder *b, PsInstr *lhs, PsInstr *rhs, const char *dim_labels,
                              const int64_t *strides, const int64_t *pad_lo, const int64_t *pad_hi,
                              const int64_t *lhs_dilation, const int64_t *rhs_dilation,
                              int64_t feature_group_count)
{
  g_return_val_if_fail (dim_labels != NULL, NULL);
  if (!bd_usable2 (b, lhs, rhs) || !bd_is_array (b, "convolution", lhs)
      || !bd_is_array (b, "convolution", rhs)
      || !bd_same_type (b, "convolution", lhs, rhs))
    return NULL;
  PsConvDims d = { 0 };
  g_autoptr (GString) why = g_string_new (NULL);
  if (!parse_dim_labels (dim_labels, &d, why))
    {
      bd_fail (b, "convolution", "dim_labels '%s' %s", dim_labels, why->str);
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
      w->base_dilation = lhs_dilation ? lhs_dilation[i] : 1;
      w->window_dilation = rhs_dilation ? rhs_dilation[i] : 1;
      if (w->stride < 1 || w->window_dilation < 1 || w->base_dilation < 1)
        err = "strides and dilations must be >= 1";
      int64_t isz = ls->dims[d.in_spatial[i]];
      int64_t in = (isz == 0 ? 0 : (isz - 1) * w->base_dilation + 1) + w->pad_lo + w->pad_hi;
      int64_t span = w->size == 0 ? 0 : (w->size - 1) * w->window_dilation + 1;
      if (err == NULL && in < span)
        err = "the window is larger than the padded input";
      out[d.out_spatial[i]] = err ? 0 : (in - span) / w->stride + 1;
    }
  if (err != NULL)
    {
      bd_fail (b, "convolution", "%s", err);
      g_free (win);
      g_free (d.in_spatial);
      g_free (d.k_spatial);
      g_free (d.out_spatial);
      return NULL;
    }
  out[d.out_batch] = ls->dims[d.in_batch];
  out[d.out_feature] = ks->dims[d.k_out_feature];
  PsInstr *ops[] = { lhs, rhs };
  PsInstr *in
      = bd_add (b, PS_OP_CONVOLUTION, ps_shape_new_array (ls->etype, n + 2, out), 2, ops);
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

/* ---- batch normalization ------------------------------------------------------------- */

/* The op over `n` operands; shape inference (ir.h) checks them. */
static PsInstr *
batch_norm (PsBuilder *b, PsOpcode op, int n, PsInstr *const *xs, float epsilon,
            int64_t feature_index)
{
  if (!bd_usable (b, n, xs))
    return NULL;
  if (!(epsilon >= 0))
    {
      bd_fail (b, ps_opcode_name (op), "epsilon must be >= 0");
      return NULL;
    }
  PsInstr proto = { 0 };
  proto.opcode = op;
  proto.n_operands = n;
  proto.operands = (PsInstr **) xs;
  proto.feature_index = feature_index;
  GError *e = NULL;
  PsShape *s = ps_infer_shape (&proto, &e);
  if (!s)
    {
      bd_fail (b, ps_opcode_name (op), "%s", e->message);
      g_error_free (e);
      return NULL;
    }
  PsInstr *in = bd_add (b, op, s, n, xs);
  in->feature_index = feature_index;
  in->epsilon = epsilon;
  return in;
}

PsInstr *
ps_build_batch_norm_training (PsBuilder *b, PsInstr *x, PsInstr *scale, PsInstr *offset,
                              float epsilon, int64_t feature_index)
{
  PsInstr *xs[3] = { x, scale, offset };
  return batch_norm (b, PS_OP_BATCH_NORM_TRAINING, 3, xs, epsilon, feature_index);
}

PsInstr *
ps_build_batch_norm_inference (PsBuilder *b, PsInstr *x, PsInstr *scale, PsInstr *offset,
                               PsInstr *mean, PsInstr *variance, float epsilon,
                               int64_t feature_index)
{
  PsInstr *xs[5] = { x, scale, offset, mean, variance };
  return batch_norm (b, PS_OP_BATCH_NORM_INFERENCE, 5, xs, epsilon, feature_index);
}

PsInstr *
ps_build_batch_norm_grad (PsBuilder *b, PsInstr *x, PsInstr *scale, PsInstr *mean,
                          PsInstr *variance, PsInstr *grad_output, float epsilon,
                          int64_t feature_index)
{
  PsInstr *xs[5] = { x, scale, mean, variance, grad_output };
  return batch_norm (b, PS_OP_BATCH_NORM_GRAD, 5, xs, epsilon, feature_index);
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
  g_return_val_if_fail (b != NULL && bd_is_binary_op (op), NULL);
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
      bd_fail (b, "reducer", "%s", error->message);
      g_error_free (error);
      return NULL;
    }
  /* Callees must precede their callers in the module, also when the
   * caller was created first (a loop body built before its reducers). */
  g_ptr_array_remove (b->m->computations, c);
  g_ptr_array_insert (b->m->computations, 0, c);
  return c;
}

PsInstr *
ps_build_reduce (PsBuilder *b, PsInstr *x, PsInstr *init, int n_dims, const int64_t *dims,
                 PsComputation *reducer)
{
  if (!bd_usable2 (b, x, init) || reducer == NULL || !bd_is_array (b, "reduce", x)
      || !bd_same_type (b, "reduce", x, init))
    return NULL;
  if (init->shape->rank != 0)
    {
      bd_fail (b, "reduce", "the init value must be a scalar");
      return NULL;
    }
  if (reducer->root == NULL || reducer->params->len != 2)
    {
      bd_fail (b, "reduce", "reducer '%s' is not a finished two-parameter computation",
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
  PsInstr *in
      = bd_add (b, PS_OP_REDUCE, ps_shape_new_array (x->shape->etype, n, out), 2, ops);
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
  if (!bd_usable1 (b, x) || !bd_is_array (b, "reduce", x))
    return NULL;
  PsElemType t = x->shape->etype;
  PsInstr *zero = t == PS_PRED ? ps_build_scalar_int (b, t, 0) : ps_build_scalar (b, t, 0.0);
  PsComputation *r = ps_builder_reducer (b, t == PS_PRED ? PS_OP_OR : PS_OP_ADD, t);
  return ps_build_reduce (b, x, zero, n_dims, dims, r);
}

PsInstr *
ps_build_reduce_max (PsBuilder *b, PsInstr *x, int n_dims, const int64_t *dims)
{
  if (!bd_usable1 (b, x) || !bd_is_array (b, "reduce", x))
    return NULL;
  PsElemType t = x->shape->etype;
  PsInstr *init;
  int64_t lo;
  uint64_t hi;
  if (ps_etype_is_complex (t))
    {
      bd_fail (b, "reduce", "complex numbers have no maximum");
      return NULL;
    }
  if (bd_int_range (t, &lo, &hi))
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
  if (!bd_usable2 (b, operand, indices) || !bd_is_array (b, "gather", operand)
      || !bd_is_array (b, "gather", indices))
    return NULL;
  const PsShape *os = operand->shape, *is = indices->shape;
  if (!ps_etype_is_integral (is->etype))
    {
      bd_fail (b, "gather", "indices must be integers, not %s", ps_etype_name (is->etype));
      return NULL;
    }
  if (dims->index_vector_dim < 0 || dims->index_vector_dim > is->rank)
    {
      bd_fail (b, "gather", "index_vector_dim %" G_GINT64_FORMAT " is out of range",
               dims->index_vector_dim);
      return NULL;
    }
  if (dims->slice_sizes.n != os->rank)
    {
      bd_fail (b, "gather", "slice_sizes has %d entries for a rank-%d operand",
               dims->slice_sizes.n, os->rank);
      return NULL;
    }
  int64_t index_len = dims->index_vector_dim == is->rank ? 1 : is->dims[dims->index_vector_dim];
  if (dims->start_index_map.n != index_len)
    {
      bd_fail (b, "gather",
               "start_index_map has %d entries but the index vector has %" G_GINT64_FORMAT,
               dims->start_index_map.n, index_len);
      return NULL;
    }
  guint64 window_removed = 0, seen = 0;
  if (!check_dim_list (b, "gather", "collapsed slice", &dims->collapsed_slice_dims, os->rank,
                       &window_removed)
      || !check_dim_list (b, "gather", "operand batching", &dims->operand_batching_dims, os->rank,
                          &window_removed)
      || !check_dim_list (b, "gather", "start index map", &dims->start_index_map, os->rank, &seen))
    return NULL;
  for (int i = 0; i < os->rank; i++)
    {
      int64_t s = dims->slice_sizes.v[i];
      if (s < 0 || s > os->dims[i] || ((window_removed & ((guint64) 1 << i)) && s > 1))
        {
          bd_fail (b, "gather",
                   "slice size %" G_GINT64_FORMAT " does not fit operand dim %d", s, i);
          return NULL;
        }
    }
  int n_batch = is->rank - (dims->index_vector_dim < is->rank ? 1 : 0);
  int n_offset = os->rank - __builtin_popcountll (window_removed);
  if (dims->offset_dims.n != n_offset)
    {
      bd_fail (b, "gather", "offset_dims has %d entries, the slice keeps %d dims",
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
  PsInstr *in
      = bd_add (b, PS_OP_GATHER, ps_shape_new_array (os->etype, rank, out), 2, ops);
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
  if (!bd_usable (b, 3, xs) || update == NULL
      || !bd_is_array (b, "scatter", operand)
      || !bd_is_array (b, "scatter", indices)
      || !bd_is_array (b, "scatter", updates)
      || !bd_same_type (b, "scatter", operand, updates))
    return NULL;
  const PsShape *os = operand->shape, *is = indices->shape, *us = updates->shape;
  if (!ps_etype_is_integral (is->etype))
    {
      bd_fail (b, "scatter", "indices must be integers, not %s",
               ps_etype_name (is->etype));
      return NULL;
    }
  if (dims->index_vector_dim < 0 || dims->index_vector_dim > is->rank)
    {
      bd_fail (b, "scatter", "index_vector_dim %" G_GINT64_FORMAT " is out of range",
               dims->index_vector_dim);
      return NULL;
    }
  guint64 win = 0, inserted = 0, map = 0;
  if (!check_dim_list (b, "scatter", "update window", &dims->update_window_dims, us->rank, &win)
      || !check_dim_list (b, "scatter", "inserted window", &dims->inserted_window_dims, os->rank,
                          &inserted)
      || !check_dim_list (b, "scatter", "input batching", &dims->input_batching_dims, os->rank,
                          &inserted)
      || !check_dim_list (b, "scatter", "scatter dims to operand",
                          &dims->scatter_dims_to_operand_dims, os->rank, &map))
    return NULL;
  int n_scatter = is->rank - (dims->index_vector_dim < is->rank ? 1 : 0);
  if (us->rank != n_scatter + dims->update_window_dims.n
      || dims->update_window_dims.n + __builtin_popcountll (inserted) != os->rank)
    {
      bd_fail (b, "scatter",
               "update rank %d does not match %d scatter dims and %d window dims",
               us->rank, n_scatter, dims->update_window_dims.n);
      return NULL;
    }
  if (update->root == NULL || update->params->len != 2)
    {
      bd_fail (b, "scatter",
               "update computation '%s' is not a finished two-parameter computation",
               update->name);
      return NULL;
    }
  PsInstr *in = bd_add (b, PS_OP_SCATTER, ps_shape_copy (os), 3, xs);
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
  if (!bd_usable (b, n, xs))
    return NULL;
  PsShape **shapes = g_new (PsShape *, MAX (n, 1));
  for (int i = 0; i < n; i++)
    shapes[i] = xs[i]->shape;
  PsShape *shape = ps_shape_new_tuple (n, shapes);
  g_free (shapes);
  return bd_add (b, PS_OP_TUPLE, shape, n, xs);
}

PsInstr *
ps_build_get_tuple_element (PsBuilder *b, PsInstr *t, int64_t index)
{
  if (!bd_usable1 (b, t))
    return NULL;
  if (t->shape->etype != PS_TUPLE || index < 0 || index >= t->shape->n_elems)
    {
      g_autofree char *s = bd_shape_str (t);
      bd_fail (b, "get-tuple-element", "no element %" G_GINT64_FORMAT " in %s", index, s);
      return NULL;
    }
  PsInstr *in
      = bd_add (b, PS_OP_GET_TUPLE_ELEMENT, ps_shape_copy (t->shape->elems[index]), 1, &t);
  in->tuple_index = index;
  return in;
}

static gboolean
check_signature (PsBuilder *b, const char *op, const PsComputation *c, int n, PsInstr *const *args)
{
  if (c->root == NULL)
    {
      bd_fail (b, op, "computation '%s' is not finished (no root)", c->name);
      return FALSE;
    }
  if ((int) c->params->len != n)
    {
      bd_fail (b, op, "computation '%s' takes %u parameters, %d given", c->name,
               c->params->len, n);
      return FALSE;
    }
  for (int i = 0; i < n; i++)
    {
      const PsInstr *p = g_ptr_array_index (c->params, i);
      if (!ps_shape_equal (p->shape, args[i]->shape))
        {
          g_autofree char *want = ps_shape_to_string (p->shape, FALSE);
          g_autofree char *got = bd_shape_str (args[i]);
          bd_fail (b, op, "computation '%s' parameter %d is %s, argument is %s", c->name,
                   i, want, got);
          return FALSE;
        }
    }
  return TRUE;
}

PsInstr *
ps_build_optimization_barrier (PsBuilder *b, PsInstr *x)
{
  if (!bd_usable1 (b, x))
    return NULL;
  return bd_add (b, PS_OP_OPTIMIZATION_BARRIER, ps_shape_copy (x->shape), 1, &x);
}

PsInstr *
ps_build_while (PsBuilder *b, PsComputation *condition, PsComputation *body, PsInstr *init)
{
  g_return_val_if_fail (condition != NULL && body != NULL, NULL);
  if (!bd_usable1 (b, init) || !check_signature (b, "while", condition, 1, &init)
      || !check_signature (b, "while", body, 1, &init))
    return NULL;
  const PsShape *cs = condition->root->shape;
  if (cs->etype != PS_PRED || cs->rank != 0)
    {
      bd_fail (b, "while", "condition '%s' must return pred[]", condition->name);
      return NULL;
    }
  if (!ps_shape_equal (body->root->shape, init->shape))
    {
      bd_fail (b, "while", "body '%s' must return the loop state's shape", body->name);
      return NULL;
    }
  PsInstr *in = bd_add (b, PS_OP_WHILE, ps_shape_copy (init->shape), 1, &init);
  PsComputation *called[] = { condition, body };
  ps_instr_set_called (in, 2, called);
  return in;
}

PsInstr *
ps_build_call (PsBuilder *b, PsComputation *callee, int n, PsInstr *const *args)
{
  g_return_val_if_fail (callee != NULL && n >= 0, NULL);
  if (!bd_usable (b, n, args) || !check_signature (b, "call", callee, n, args))
    return NULL;
  PsInstr *in = bd_add (b, PS_OP_CALL, ps_shape_copy (callee->root->shape), n, args);
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
      g_autofree char *sh = bd_shape_str (x);
      bd_fail (b, op, "sharding %s does not fit %s ('%s')", txt, sh, x->name);
      return FALSE;
    }
  if (s->kind == PS_SHARDING_TUPLE
      && (x->shape->etype != PS_TUPLE || s->n_elems != ps_shape_leaf_count (x->shape)))
    {
      bd_fail (b, op, "tuple sharding with %d leaves does not fit '%s'", s->n_elems,
               x->name);
      return FALSE;
    }
  return TRUE;
}

PsInstr *
ps_build_sharding_annotation (PsBuilder *b, PsInstr *x, const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, NULL);
  if (!bd_usable1 (b, x) || !sharding_fits (b, "custom-call", x, s))
    return NULL;
  PsInstr *in = bd_add (b, PS_OP_CUSTOM_CALL, ps_shape_copy (x->shape), 1, &x);
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
  if (!bd_usable1 (b, x) || !bd_is_array (b, "custom-call", x))
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
  int64_t n = ps_product (mesh_rank, mesh_dims);
  b->mesh_devices = mesh_devices ? g_memdup2 (mesh_devices, sizeof (int64_t) * (gsize) n) : NULL;
}

static PsSharding *
mesh_sharding (PsBuilder *b, PsInstr *x, const int64_t *dims_mapping)
{
  if (!bd_usable1 (b, x) || !bd_is_array (b, "mesh_split", x))
    return NULL;
  if (b->mesh_rank == 0)
    {
      bd_fail (b, "mesh_split", "no mesh set (call ps_builder_set_mesh first)");
      return NULL;
    }
  GError *error = NULL;
  PsSharding *s = ps_sharding_mesh_split (x->shape->rank, b->mesh_rank, b->mesh_dims,
                                          b->mesh_devices, dims_mapping, &error);
  if (s == NULL)
    {
      bd_fail (b, "mesh_split", "'%s': %s", x->name, error->message);
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

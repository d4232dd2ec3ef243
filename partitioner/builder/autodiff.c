/* Reverse-mode autodiff over the graph IR: see autodiff.h. */
#include "config.h"

#include "partitioner/builder/autodiff_private.h"

#include <math.h>
#include <string.h>

static PsInstr *
emit_dot (PsComputation *c, PsInstr *lhs, PsInstr *rhs, int nb, const int64_t *lb,
          const int64_t *rb, int nc, const int64_t *lc, const int64_t *rc)
{
  int64_t dims[64];
  int r = 0;
  for (int i = 0; i < nb; i++)
    dims[r++] = lhs->shape->dims[lb[i]];
  for (int d = 0; d < lhs->shape->rank; d++)
    {
      gboolean used = FALSE;
      for (int i = 0; i < nb; i++)
        used |= lb[i] == d;
      for (int i = 0; i < nc; i++)
        used |= lc[i] == d;
      if (!used)
        dims[r++] = lhs->shape->dims[d];
    }
  for (int d = 0; d < rhs->shape->rank; d++)
    {
      gboolean used = FALSE;
      for (int i = 0; i < nb; i++)
        used |= rb[i] == d;
      for (int i = 0; i < nc; i++)
        used |= rc[i] == d;
      if (!used)
        dims[r++] = rhs->shape->dims[d];
    }
  PsInstr *ops[2] = { lhs, rhs };
  PsInstr *dot = ps_computation_add_instr (c, PS_OP_DOT, NULL,
                                           ps_shape_new_array (lhs->shape->etype, r, dims), 2, ops);
  ps_ints_set (&dot->dot.lhs_batch, nb, lb);
  ps_ints_set (&dot->dot.rhs_batch, nb, rb);
  ps_ints_set (&dot->dot.lhs_contracting, nc, lc);
  ps_ints_set (&dot->dot.rhs_contracting, nc, rc);
  return dot;
}

/* ---- the rules ------------------------------------------------------------ */

typedef struct {
  PsComputation *c;
  GHashTable *adj;   /* PsInstr* -> PsInstr* accumulated gradient */
  /* Tuple-shaped instructions: PsInstr* -> PsInstr** (one accumulated
   * gradient per element, NULL where none arrived), from get-tuple-element. */
  GHashTable *parts;
} Ad;

static void
accumulate (Ad *ad, PsInstr *x, PsInstr *g)
{
  if (g->shape->etype != x->shape->etype)
    g = ad_convert (ad->c, g, x->shape->etype);
  PsInstr *old = g_hash_table_lookup (ad->adj, x);
  if (old)
    g = ad_binary (ad->c, PS_OP_ADD, old, g);
  g_hash_table_insert (ad->adj, x, g);
}

static gboolean
is_float (const PsInstr *x)
{
  return ps_shape_is_array (x->shape) && ps_etype_is_float (x->shape->etype);
}

/* Free (non-batch, non-contracting) dims of one dot operand, ascending. */
static int
dot_free_dims (int rank, const PsInts *batch, const PsInts *contracting, int64_t *out)
{
  int n = 0;
  for (int d = 0; d < rank; d++)
    if (!ps_ints_contains (batch, d) && !ps_ints_contains (contracting, d))
      out[n++] = d;
  return n;
}

static int
cmp_i64 (const void *a, const void *b)
{
  int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;
  return (x > y) - (x < y);
}

/* Gradient of one dot operand. For the LHS (which = 0): dot(g, rhs) over the
 * rhs's free dims, giving [batch, lhs free, rhs contracting (ascending rhs
 * order)], then transposed to the LHS's dim order; the RHS is symmetric. */
static PsInstr *
dot_operand_grad (Ad *ad, PsInstr *dot, PsInstr *g, int which)
{
  PsInstr *self = dot->operands[which], *other = dot->operands[1 - which];
  const PsInts *sb = which == 0 ? &dot->dot.lhs_batch : &dot->dot.rhs_batch;
  const PsInts *ob = which == 0 ? &dot->dot.rhs_batch : &dot->dot.lhs_batch;
  const PsInts *sc = which == 0 ? &dot->dot.lhs_contracting : &dot->dot.rhs_contracting;
  const PsInts *oc = which == 0 ? &dot->dot.rhs_contracting : &dot->dot.lhs_contracting;
  int nb = sb->n;
  int64_t lf[64], rf[64];
  int nlf = dot_free_dims (dot->operands[0]->shape->rank, &dot->dot.lhs_batch,
                           &dot->dot.lhs_contracting, lf);
  int nrf = dot_free_dims (dot->operands[1]->shape->rank, &dot->dot.rhs_batch,
                           &dot->dot.rhs_contracting, rf);
  int64_t *sf = which == 0 ? lf : rf, *of = which == 0 ? rf : lf;
  int nsf = which == 0 ? nlf : nrf, nof = which == 0 ? nrf : nlf;

  /* In g: batch dims 0..nb-1, lhs free next, rhs free last. */
  int64_t g_batch[64], g_contract[64];
  for (int i = 0; i < nb; i++)
    g_batch[i] = i;
  int64_t of_start = which == 0 ? nb + nlf : nb;
  for (int i = 0; i < nof; i++)
    g_contract[i] = of_start + i;
  PsInstr *gc = g;
  if (g->shape->etype != other->shape->etype)
    gc = ad_convert (ad->c, g, other->shape->etype);
  PsInstr *res = emit_dot (ad->c, gc, other, nb, g_batch, ob->v, nof, g_contract, of);

  /* res dims: [batch, self free, other's contracting dims ascending]. Map each
   * to the self dim it stands for. */
  int rank = self->shape->rank;
  int64_t self_of[64];
  int j = 0;
  for (int i = 0; i < nb; i++)
    self_of[j++] = sb->v[i];
  for (int i = 0; i < nsf; i++)
    self_of[j++] = sf[i];
  int64_t oc_sorted[64];
  if (oc->n > 0)  /* an outer product (no contracting dims) has no list at all */
    {
      memcpy (oc_sorted, oc->v, sizeof (int64_t) * (gsize) oc->n);
      qsort (oc_sorted, (gsize) oc->n, sizeof (int64_t), cmp_i64);
    }
  for (int k = 0; k < oc->n; k++)
    for (int i = 0; i < oc->n; i++)
      if (oc->v[i] == oc_sorted[k])
        self_of[j++] = sc->v[i];
  g_assert (j == rank);
  int64_t perm[64];
  for (int d = 0; d < rank; d++)
    for (int k = 0; k < rank; k++)
      if (self_of[k] == d)
        perm[d] = k;
  return ad_transpose (ad->c, res, perm);
}

static gboolean
reducer_is (const PsInstr *red, PsOpcode op)
{
  if (red->n_called != 1 || red->called[0]->root == NULL)
    return FALSE;
  return red->called[0]->root->opcode == op;
}

/* A get-tuple-element's gradient, kept per element of its tuple operand. */
static void
accumulate_part (Ad *ad, PsInstr *t, int64_t index, PsInstr *g)
{
  PsInstr **parts = g_hash_table_lookup (ad->parts, t);
  if (!parts)
    {
      parts = g_new0 (PsInstr *, t->shape->n_elems);
      g_hash_table_insert (ad->parts, t, parts);
    }
  const PsShape *es = t->shape->elems[index];
  if (g->shape->etype != es->etype)
    g = ad_convert (ad->c, g, es->etype);
  parts[index] = parts[index] ? ad_binary (ad->c, PS_OP_ADD, parts[index], g) : g;
}

/* Backward through a tuple-shaped instruction given its elements'
 * gradients (NULL: none). */
static gboolean
backprop_tuple (Ad *ad, PsInstr *x, PsInstr *const *parts, GError **error)
{
  PsComputation *c = ad->c;
  switch (x->opcode)
    {
    case PS_OP_BATCH_NORM_TRAINING:
      {
        if (!parts[0])
          return TRUE; /* only the statistics were used: no gradient */
        PsInstr *dx, *ds, *doff;
        ad_batch_norm_training_grad (c, x, parts[0], &dx, &ds, &doff);
        accumulate (ad, x->operands[0], dx);
        accumulate (ad, x->operands[1], ds);
        accumulate (ad, x->operands[2], doff);
        return TRUE;
      }
    case PS_OP_TUPLE:
      for (int i = 0; i < x->n_operands; i++)
        if (parts[i] && is_float (x->operands[i]))
          accumulate (ad, x->operands[i], parts[i]);
      return TRUE;
    default:
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED,
                   "autodiff: no gradient rule for '%s' (instruction %s)",
                   ps_opcode_name (x->opcode), x->name);
      return FALSE;
    }
}

/* Carries a gradient: a float array, or a tuple of float arrays. */
static gboolean
carries_gradient (const PsInstr *x)
{
  if (!ps_shape_is_tuple (x->shape))
    return is_float (x);
  for (int i = 0; i < x->shape->n_elems; i++)
    {
      const PsShape *e = x->shape->elems[i];
      if (!ps_shape_is_array (e) || !ps_etype_is_float (e->etype))
        return FALSE;
    }
  return x->shape->n_elems > 0;
}

/* Whether a rule group handled an instruction: done, failed (error set), or
 * not an op of the group (or one it has no rule for). */
typedef enum { RULE_NONE, RULE_DONE, RULE_FAILED } Rule;

/* Elementwise ops, select and the ops without a gradient: the chain rule per element. */
static Rule
backprop_elementwise (Ad *ad, PsInstr *x, PsInstr *g, GError **error)
{
  (void) error;
  PsComputation *c = ad->c;
  PsInstr *a = x->n_operands > 0 ? x->operands[0] : NULL;
  PsInstr *b = x->n_operands > 1 ? x->operands[1] : NULL;
  switch (x->opcode)
    {
    case PS_OP_PARAMETER:
    case PS_OP_CONSTANT:
    case PS_OP_IOTA:
    case PS_OP_COMPARE:
      return RULE_DONE;
    case PS_OP_ADD:
      accumulate (ad, a, g);
      accumulate (ad, b, g);
      return RULE_DONE;
    case PS_OP_SUBTRACT:
      accumulate (ad, a, g);
      accumulate (ad, b, ad_unary (c, PS_OP_NEGATE, g));
      return RULE_DONE;
    case PS_OP_MULTIPLY:
      accumulate (ad, a, ad_binary (c, PS_OP_MULTIPLY, g, b));
      accumulate (ad, b, ad_binary (c, PS_OP_MULTIPLY, g, a));
      return RULE_DONE;
    case PS_OP_DIVIDE:
      {
        /* d(a/b)/da = 1/b, d(a/b)/db = -(a/b)/b */
        accumulate (ad, a, ad_binary (c, PS_OP_DIVIDE, g, b));
        PsInstr *gb = ad_binary (c, PS_OP_DIVIDE, ad_binary (c, PS_OP_MULTIPLY, g, x), b);
        accumulate (ad, b, ad_unary (c, PS_OP_NEGATE, gb));
        return RULE_DONE;
      }
    case PS_OP_NEGATE:
      accumulate (ad, a, ad_unary (c, PS_OP_NEGATE, g));
      return RULE_DONE;
    case PS_OP_COPY:
      accumulate (ad, a, g);
      return RULE_DONE;
    case PS_OP_CONVERT:
      if (is_float (a))
        accumulate (ad, a, ad_convert (c, g, a->shape->etype));
      return RULE_DONE;
    case PS_OP_EXP:
      accumulate (ad, a, ad_binary (c, PS_OP_MULTIPLY, g, x));
      return RULE_DONE;
    case PS_OP_LOG:
      accumulate (ad, a, ad_binary (c, PS_OP_DIVIDE, g, a));
      return RULE_DONE;
    case PS_OP_TANH:
      {
        PsInstr *one = ad_full (c, x->shape, 1.0);
        PsInstr *sq = ad_binary (c, PS_OP_MULTIPLY, x, x);
        PsInstr *d = ad_binary (c, PS_OP_SUBTRACT, one, sq);
        accumulate (ad, a, ad_binary (c, PS_OP_MULTIPLY, g, d));
        return RULE_DONE;
      }
    case PS_OP_LOGISTIC:
      {
        PsInstr *one = ad_full (c, x->shape, 1.0);
        PsInstr *d = ad_binary (c, PS_OP_MULTIPLY, x, ad_binary (c, PS_OP_SUBTRACT, one, x));
        accumulate (ad, a, ad_binary (c, PS_OP_MULTIPLY, g, d));
        return RULE_DONE;
      }
    case PS_OP_RSQRT:
      {
        /* d/da a^-1/2 = -1/2 * x / a */
        PsInstr *h = ad_full (c, x->shape, -0.5);
        PsInstr *d = ad_binary (c, PS_OP_MULTIPLY, h, ad_binary (c, PS_OP_DIVIDE, x, a));
        accumulate (ad, a, ad_binary (c, PS_OP_MULTIPLY, g, d));
        return RULE_DONE;
      }
    case PS_OP_SQRT:
      {
        PsInstr *h = ad_full (c, x->shape, 0.5);
        PsInstr *d = ad_binary (c, PS_OP_DIVIDE, h, x);
        accumulate (ad, a, ad_binary (c, PS_OP_MULTIPLY, g, d));
        return RULE_DONE;
      }
    case PS_OP_ERF:
      {
        /* d/da erf(a) = 2/sqrt(pi) exp(-a^2) */
        PsInstr *sq = ad_binary (c, PS_OP_MULTIPLY, a, a);
        PsInstr *e = ad_unary (c, PS_OP_EXP, ad_unary (c, PS_OP_NEGATE, sq));
        PsInstr *k = ad_full (c, x->shape, 2.0 / sqrt (G_PI));
        accumulate (ad, a, ad_binary (c, PS_OP_MULTIPLY, g, ad_binary (c, PS_OP_MULTIPLY, k, e)));
        return RULE_DONE;
      }
    case PS_OP_ABS:
      {
        PsInstr *s = ad_unary (c, PS_OP_SIGN, a);
        accumulate (ad, a, ad_binary (c, PS_OP_MULTIPLY, g, s));
        return RULE_DONE;
      }
    case PS_OP_POWER:
      {
        if (b->opcode != PS_OP_CONSTANT && !(b->opcode == PS_OP_BROADCAST
                                             && b->operands[0]->opcode == PS_OP_CONSTANT))
          break;
        /* g * b * a^(b-1) = g * b * x / a */
        PsInstr *d = ad_binary (c, PS_OP_MULTIPLY, b, ad_binary (c, PS_OP_DIVIDE, x, a));
        accumulate (ad, a, ad_binary (c, PS_OP_MULTIPLY, g, d));
        return RULE_DONE;
      }
    case PS_OP_MAXIMUM:
    case PS_OP_MINIMUM:
      {
        PsShape *ps = ps_shape_new_array (PS_PRED, x->shape->rank, x->shape->dims);
        PsInstr *ops[2] = { a, b };
        PsInstr *pick_a = ps_computation_add_instr (c, PS_OP_COMPARE, NULL, ps, 2, ops);
        pick_a->comparison = x->opcode == PS_OP_MAXIMUM ? PS_CMP_GE : PS_CMP_LE;
        PsInstr *zero = ad_full (c, g->shape, 0.0);
        PsInstr *s1[3] = { pick_a, g, zero }, *s2[3] = { pick_a, zero, g };
        accumulate (ad, a, ps_computation_add_instr (c, PS_OP_SELECT, NULL, ps_shape_copy (g->shape), 3, s1));
        accumulate (ad, b, ps_computation_add_instr (c, PS_OP_SELECT, NULL, ps_shape_copy (g->shape), 3, s2));
        return RULE_DONE;
      }
    case PS_OP_SELECT:
      {
        PsInstr *p = x->operands[0], *t = x->operands[1], *f = x->operands[2];
        PsInstr *zero = ad_full (c, g->shape, 0.0);
        PsInstr *pp = p;
        if (p->shape->rank == 0 && x->shape->rank > 0)
          pp = ad_broadcast (c, p, x->shape, 0, NULL);
        PsInstr *s1[3] = { pp, g, zero }, *s2[3] = { pp, zero, g };
        if (is_float (t))
          accumulate (ad, t, ps_computation_add_instr (c, PS_OP_SELECT, NULL, ps_shape_copy (g->shape), 3, s1));
        if (is_float (f))
          accumulate (ad, f, ps_computation_add_instr (c, PS_OP_SELECT, NULL, ps_shape_copy (g->shape), 3, s2));
        return RULE_DONE;
      }
    default:
      break;
    }
  return RULE_NONE;
}

/* Ops that move data without arithmetic (broadcast, reshape, transpose, slices, pads, concatenation, tuples, sharding annotations): the inverse movement. */
static Rule
backprop_structural (Ad *ad, PsInstr *x, PsInstr *g, GError **error)
{
  (void) error;
  PsComputation *c = ad->c;
  PsInstr *a = x->n_operands > 0 ? x->operands[0] : NULL;
  switch (x->opcode)
    {
    case PS_OP_BROADCAST:
      {
        /* Sum over the output dims the operand does not map to; what remains
         * is in ascending output-dim order, which may need a transpose. */
        int R = x->shape->rank;
        int64_t red[64];
        int nr = 0;
        for (int d = 0; d < R; d++)
          if (!ps_ints_contains (&x->dimensions, d))
            red[nr++] = d;
        PsInstr *s = ad_reduce_sum (c, g, nr, red);
        int r = a->shape->rank;
        /* Operand dim i sits at output dim dimensions[i]; after the reduce
         * the rank of dimensions[i] among the kept dims is its position. */
        int64_t perm[64];
        for (int i = 0; i < r; i++)
          {
            int pos = 0;
            for (int k = 0; k < r; k++)
              pos += x->dimensions.v[k] < x->dimensions.v[i];
            perm[i] = pos;
          }
        accumulate (ad, a, ad_transpose (c, s, perm));
        return RULE_DONE;
      }
    case PS_OP_RESHAPE:
    case PS_OP_BITCAST:
      accumulate (ad, a, ad_reshape (c, g, a->shape));
      return RULE_DONE;
    case PS_OP_TRANSPOSE:
      {
        int r = x->shape->rank;
        int64_t inv[64];
        for (int i = 0; i < r; i++)
          inv[x->dimensions.v[i]] = i;
        accumulate (ad, a, ad_transpose (c, g, inv));
        return RULE_DONE;
      }
    case PS_OP_GET_TUPLE_ELEMENT:
      if (!ps_shape_is_tuple (a->shape))
        break;
      accumulate_part (ad, a, x->tuple_index, g);
      return RULE_DONE;
    case PS_OP_SLICE:
      {
        gboolean strided = FALSE;
        for (int d = 0; d < x->slice_strides.n; d++)
          strided |= x->slice_strides.v[d] != 1;
        if (strided)
          break;
        PsInstr *zero = ad_scalar (c, g->shape->etype, 0.0);
        PsInstr *ops[2] = { g, zero };
        PsInstr *p = ps_computation_add_instr (c, PS_OP_PAD, NULL, ps_shape_copy (a->shape), 2, ops);
        p->n_pad = a->shape->rank;
        p->padding = g_new0 (PsPadDim, p->n_pad);
        for (int d = 0; d < p->n_pad; d++)
          {
            p->padding[d].lo = x->slice_starts.v[d];
            p->padding[d].hi = a->shape->dims[d] - x->slice_limits.v[d];
          }
        accumulate (ad, a, p);
        return RULE_DONE;
      }
    case PS_OP_PAD:
      {
        int r = a->shape->rank;
        int64_t st[64], li[64], one[64];
        for (int d = 0; d < r; d++)
          {
            if (x->padding[d].interior != 0 || x->padding[d].lo < 0 || x->padding[d].hi < 0)
              return RULE_NONE;
            st[d] = x->padding[d].lo;
            li[d] = x->padding[d].lo + a->shape->dims[d];
            one[d] = 1;
          }
        PsInstr *s = ps_computation_add_instr (c, PS_OP_SLICE, NULL, ps_shape_copy (a->shape), 1, &g);
        ps_ints_set (&s->slice_starts, r, st);
        ps_ints_set (&s->slice_limits, r, li);
        ps_ints_set (&s->slice_strides, r, one);
        accumulate (ad, a, s);
        return RULE_DONE;
      }
    case PS_OP_DYNAMIC_SLICE:
      {
        /* The slice's gradient lands where the slice came from (start
         * indices are clamped the same way by both ops). */
        PsInstr *zero = ad_full (c, a->shape, 0.0);
        accumulate (ad, a, ad_dynamic_update_slice (c, zero, g, x->operands + 1));
        return RULE_DONE;
      }
    case PS_OP_DYNAMIC_UPDATE_SLICE:
      {
        PsInstr *upd = x->operands[1];
        PsInstr *const *starts = x->operands + 2;
        if (is_float (a))
          accumulate (ad, a, ad_dynamic_update_slice (c, g, ad_full (c, upd->shape, 0.0),
                                                         starts));
        if (is_float (upd))
          accumulate (ad, upd, ad_dynamic_slice (c, g, starts, upd->shape->dims));
        return RULE_DONE;
      }
    case PS_OP_CUSTOM_CALL:
      {
        /* A sharding annotation is the identity; its gradient carries the
         * same annotation (TensorFlow's XlaSharding gradient, JAX's
         * sharding constraint transpose), so the backward pass is laid out
         * like the forward. */
        if (x->custom_call_target == NULL || strcmp (x->custom_call_target, "Sharding") != 0
            || x->n_operands != 1)
          break;
        PsInstr *s = ps_computation_add_instr (c, PS_OP_CUSTOM_CALL, NULL, ps_shape_copy (g->shape), 1, &g);
        s->custom_call_target = g_strdup ("Sharding");
        if (x->sharding)
          ps_instr_set_sharding (s, x->sharding);
        accumulate (ad, a, s);
        return RULE_DONE;
      }
    case PS_OP_CONCATENATE:
      {
        int r = x->shape->rank;
        int64_t axis = x->dimensions.v[0], off = 0;
        for (int i = 0; i < x->n_operands; i++)
          {
            PsInstr *op = x->operands[i];
            int64_t st[64], li[64], one[64];
            for (int d = 0; d < r; d++)
              {
                st[d] = d == axis ? off : 0;
                li[d] = d == axis ? off + op->shape->dims[d] : x->shape->dims[d];
                one[d] = 1;
              }
            off += op->shape->dims[axis];
            PsInstr *s = ps_computation_add_instr (c, PS_OP_SLICE, NULL, ps_shape_copy (op->shape), 1, &g);
            ps_ints_set (&s->slice_starts, r, st);
            ps_ints_set (&s->slice_limits, r, li);
            ps_ints_set (&s->slice_strides, r, one);
            if (is_float (op))
              accumulate (ad, op, s);
          }
        return RULE_DONE;
      }
    default:
      break;
    }
  return RULE_NONE;
}

/* Reductions and contractions (reduce, dot, convolution, batch norm): the transposed contraction. */
static Rule
backprop_contraction (Ad *ad, PsInstr *x, PsInstr *g, GError **error)
{
  (void) error;
  PsComputation *c = ad->c;
  PsInstr *a = x->n_operands > 0 ? x->operands[0] : NULL;
  PsInstr *b = x->n_operands > 1 ? x->operands[1] : NULL;
  switch (x->opcode)
    {
    case PS_OP_REDUCE:
      {
        if (x->n_operands != 2 || ps_shape_is_tuple (x->shape))
          break;
        int r = a->shape->rank;
        int64_t kept[64];
        int nk = 0;
        for (int d = 0; d < r; d++)
          if (!ps_ints_contains (&x->dimensions, d))
            kept[nk++] = d;
        PsInstr *gb = ad_broadcast (c, g, a->shape, nk, kept);
        if (reducer_is (x, PS_OP_ADD))
          {
            accumulate (ad, a, gb);
            return RULE_DONE;
          }
        if (reducer_is (x, PS_OP_MAXIMUM) || reducer_is (x, PS_OP_MINIMUM))
          {
            PsInstr *xb = ad_broadcast (c, x, a->shape, nk, kept);
            PsInstr *ops[2] = { a, xb };
            PsInstr *eq = ps_computation_add_instr (c, PS_OP_COMPARE, NULL,
                                                    ps_shape_new_array (PS_PRED, r, a->shape->dims), 2, ops);
            eq->comparison = PS_CMP_EQ;
            PsInstr *zero = ad_full (c, gb->shape, 0.0);
            PsInstr *s[3] = { eq, gb, zero };
            accumulate (ad, a, ps_computation_add_instr (c, PS_OP_SELECT, NULL, ps_shape_copy (gb->shape), 3, s));
            return RULE_DONE;
          }
        break;
      }
    case PS_OP_DOT:
      accumulate (ad, a, dot_operand_grad (ad, x, g, 0));
      accumulate (ad, b, dot_operand_grad (ad, x, g, 1));
      return RULE_DONE;
    case PS_OP_CONVOLUTION:
      {
        if (!x->conv.present || x->batch_group_count > 1 || x->window.n != x->conv.n_spatial)
          break;
        PsInstr *da = ad_conv_input_grad (c, x, g);
        PsInstr *db = ad_conv_kernel_grad (c, x, g);
        if (x->has_precision)
          for (int i = 0; i < 2; i++)
            {
              PsInstr *y = i ? db : da;
              y->has_precision = TRUE;
              y->precision[0] = y->precision[1] = MAX (x->precision[0], x->precision[1]);
            }
        accumulate (ad, a, da);
        accumulate (ad, b, db);
        return RULE_DONE;
      }
    case PS_OP_BATCH_NORM_INFERENCE:
      {
        PsInstr *grads[5];
        ad_batch_norm_inference_grad (c, x, g, grads);
        for (int i = 0; i < 5; i++)
          accumulate (ad, x->operands[i], grads[i]);
        return RULE_DONE;
      }
    default:
      break;
    }
  return RULE_NONE;
}

static gboolean
backprop_one (Ad *ad, PsInstr *x, PsInstr *g, GError **error)
{
  Rule r = backprop_elementwise (ad, x, g, error);
  if (r == RULE_NONE)
    r = backprop_structural (ad, x, g, error);
  if (r == RULE_NONE)
    r = backprop_contraction (ad, x, g, error);
  if (r != RULE_NONE)
    return r == RULE_DONE;
  g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED,
               "autodiff: no gradient rule for '%s' (instruction %s)",
               ps_opcode_name (x->opcode), x->name);
  return FALSE;
}

GPtrArray *
ps_autodiff_gradients (PsComputation *c, PsInstr *y, int n_wrt, PsInstr *const *wrt,
                       GError **error)
{
  return ps_autodiff_vjp (c, y, NULL, n_wrt, wrt, error);
}

GPtrArray *
ps_autodiff_vjp (PsComputation *c, PsInstr *y, PsInstr *dy, int n_wrt, PsInstr *const *wrt,
                 GError **error)
{
  g_return_val_if_fail (c != NULL && y != NULL && y->parent == c, NULL);
  g_return_val_if_fail (ps_shape_is_array (y->shape), NULL);
  PsInstr *dys[1] = { dy ? dy : ad_full (c, y->shape, 1.0) };
  return ps_autodiff_vjp_multi (c, 1, &y, dys, n_wrt, wrt, error);
}

GPtrArray *
ps_autodiff_vjp_multi (PsComputation *c, int n_y, PsInstr *const *ys, PsInstr *const *dys,
                       int n_wrt, PsInstr *const *wrt, GError **error)
{
  g_return_val_if_fail (c != NULL && n_y >= 0, NULL);
  for (int k = 0; k < n_y; k++)
    {
      g_return_val_if_fail (ys[k] != NULL && ys[k]->parent == c, NULL);
      g_return_val_if_fail (ps_shape_is_array (ys[k]->shape), NULL);
      g_return_val_if_fail (dys[k] != NULL && ps_shape_equal (dys[k]->shape, ys[k]->shape), NULL);
    }

  /* Instructions y depends on, and among them those that lead to a wrt
   * input: only those need gradients. Only floating-point values carry a
   * gradient: a compare, an integer or a pred made from a wrt input is
   * piecewise constant in it (an argmax, a one-hot mask, a capacity count),
   * so nothing is emitted for the paths through them. */
  g_autoptr (GPtrArray) order = ps_computation_post_order (c);
  g_autoptr (GHashTable) reaches = g_hash_table_new (NULL, NULL);
  for (int i = 0; i < n_wrt; i++)
    g_hash_table_add (reaches, wrt[i]);
  for (guint i = 0; i < order->len; i++)
    {
      PsInstr *in = order->pdata[i];
      if (!carries_gradient (in))
        continue;
      for (int k = 0; k < in->n_operands; k++)
        if (g_hash_table_contains (reaches, in->operands[k]))
          {
            g_hash_table_add (reaches, in);
            break;
          }
    }
  g_autoptr (GHashTable) needed = g_hash_table_new (NULL, NULL);
  guint y_pos = 0;
  for (int k = 0; k < n_y; k++)
    g_hash_table_add (needed, ys[k]);
  for (guint i = 0; i < order->len; i++)
    if (g_hash_table_contains (needed, order->pdata[i]))
      y_pos = i;
  for (guint i = y_pos + 1; i-- > 0;)
    {
      PsInstr *in = order->pdata[i];
      if (!g_hash_table_contains (needed, in))
        continue;
      for (int k = 0; k < in->n_operands; k++)
        g_hash_table_add (needed, in->operands[k]);
    }

  Ad ad = { c, g_hash_table_new (NULL, NULL),
            g_hash_table_new_full (NULL, NULL, NULL, g_free) };
  for (int k = 0; k < n_y; k++)
    accumulate (&ad, ys[k], dys[k]);
  for (guint i = y_pos + 1; i-- > 0;)
    {
      PsInstr *in = order->pdata[i];
      if (!g_hash_table_contains (needed, in) || !g_hash_table_contains (reaches, in))
        continue;
      if (in->opcode == PS_OP_PARAMETER)
        continue;
      PsInstr *g = NULL, **parts = NULL;
      if (ps_shape_is_tuple (in->shape))
        parts = g_hash_table_lookup (ad.parts, in);
      else
        g = g_hash_table_lookup (ad.adj, in);
      if (g == NULL && parts == NULL)
        continue;
      /* A requested input that no other requested input feeds is where
       * the walk stops (a layer's input when differentiating one layer). */
      gboolean through = FALSE;
      for (int k = 0; k < in->n_operands && !through; k++)
        through = g_hash_table_contains (reaches, in->operands[k]);
      if (!through)
        continue;
      guint first_new = c->instrs->len;
      if (parts ? !backprop_tuple (&ad, in, parts, error) : !backprop_one (&ad, in, g, error))
        {
          g_hash_table_destroy (ad.adj);
          g_hash_table_destroy (ad.parts);
          return NULL;
        }
      /* The backward of an op keeps its op_name (as XLA keeps the forward
       * op's metadata on its gradient ops), so reports can attribute it. */
      if (in->metadata)
        for (guint k = first_new; k < c->instrs->len; k++)
          {
            PsInstr *gi = c->instrs->pdata[k];
            if (gi->metadata == NULL)
              gi->metadata = g_strdup (in->metadata);
          }
    }
  GPtrArray *out = g_ptr_array_new ();
  for (int i = 0; i < n_wrt; i++)
    {
      PsInstr *g = g_hash_table_lookup (ad.adj, wrt[i]);
      if (g == NULL)
        g = ad_full (c, wrt[i]->shape, 0.0);
      g_ptr_array_add (out, g);
    }
  g_hash_table_destroy (ad.adj);
  g_hash_table_destroy (ad.parts);
  return out;
}

/* Contracting and windowed ops of the interpreter: dot, ragged-dot, convolution, reduce,
 * reduce-window and select-and-scatter.
 *
 * dot and convolution accumulate in double and round once to the result
 * type (a wider accumulator than XLA's f32 one, so the result does not
 * depend on summation order; verify.h's tolerance covers the difference).
 * reduce and reduce-window apply their reducer computation step by step in
 * the result type, exactly as written, except that bf16/f16 sums and
 * products accumulate in f32 and round once (XLA's backends do the same). */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/interp/interp_private.h"

gboolean
ip_is_window_op (PsOpcode op)
{
  return op == PS_OP_DOT || op == PS_OP_RAGGED_DOT || op == PS_OP_CONVOLUTION || op == PS_OP_REDUCE
         || op == PS_OP_REDUCE_WINDOW || op == PS_OP_SELECT_AND_SCATTER || op == PS_OP_MAP;
}

#define FAIL(...) do { ip_fail (error, PS_ERROR_INVALID, ins, __VA_ARGS__); goto fail; } while (0)

/* Products are accumulated in double (integers in int64). */
typedef struct {
  double re, im;
  int64_t i;
} Acc;

static inline void
acc_mul_add (Acc *acc, const PsValue *a, int64_t ai, const PsValue *b, int64_t bi)
{
  if (a->f)
    acc->re += a->f[ai] * b->f[bi];
  else if (a->i)
    acc->i = (int64_t) ((uint64_t) acc->i + (uint64_t) a->i[ai] * (uint64_t) b->i[bi]);
  else if (a->c)
    {
      double ar = a->c[2 * ai], aim = a->c[2 * ai + 1], br = b->c[2 * bi], bim = b->c[2 * bi + 1];
      acc->re += ar * br - aim * bim;
      acc->im += ar * bim + aim * br;
    }
}

static inline void
acc_store (PsValue *out, int64_t oi, const Acc *acc, gboolean int_inputs)
{
  if (out->c)
    {
      out->c[2 * oi] = ps_etype_round (out->shape->etype, acc->re);
      out->c[2 * oi + 1] = ps_etype_round (out->shape->etype, acc->im);
    }
  else if (int_inputs)
    ps_value_set (out, oi, (double) acc->i);
  else
    ps_value_set (out, oi, acc->re);
}

/* Operands may have another element type than the result (mixed-precision
 * dot, s8 x s8 -> s32): bring both to a common representation. */
static PsValue *
promote (const PsValue *v, PsElemType t)
{
  gboolean vf = ps_etype_is_float (v->shape->etype), tf = ps_etype_is_float (t);
  gboolean vc = ps_etype_is_complex (v->shape->etype), tc = ps_etype_is_complex (t);
  if (vf == tf && vc == tc)
    return NULL; /* same representation: use as is */
  PsShape *s = ps_shape_copy (v->shape);
  s->etype = tc ? PS_C128 : tf ? PS_F64 : PS_S64;
  PsValue *p = ps_value_new (s);
  ps_shape_free (s);
  for (int64_t i = 0; i < v->n; i++)
    ps_value_set (p, i, ps_value_get (v, i));
  return p;
}

/* dot, and ragged-dot (XLA's three modes, ir.h PsRaggedMode; the
 * semantics of jax.lax.ragged_dot_general's documentation): the groups
 * are consecutive runs of the ragged dim, group_sizes[j] long; in the
 * non-contracting mode row r takes the rhs slice of its group along the
 * rhs group dim and rows past the last group are 0; in the contracting
 * mode result[j] contracts only over group j's run of the dim; the batch
 * mode is a dot. */
static PsValue *
op_dot (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  int64_t lrag = -1, rgrp = -1;
  PsRaggedMode mode = ins->opcode == PS_OP_RAGGED_DOT ? ps_instr_ragged_dims (ins, &lrag, &rgrp) : PS_RAGGED_NONE;
  if (ins->opcode == PS_OP_RAGGED_DOT && mode == PS_RAGGED_NONE)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "ragged-dot needs lhs_ragged_dims={d} (and rhs_group_dims={g} when d is a non-contracting dim)");
      return NULL;
    }
  if (mode == PS_RAGGED_BATCH)
    mode = PS_RAGGED_NONE, rgrp = -1;
  PsValue *out = ps_value_new (ins->shape);
  PsValue *pl = promote (ops[0], out->shape->etype), *pr = promote (ops[1], out->shape->etype);
  const PsValue *l = pl ? pl : ops[0], *r = pr ? pr : ops[1];
  const PsDotDims *dd = &ins->dot;
  int lr = l->shape->rank, rr = r->shape->rank;
  int nb = dd->lhs_batch.n, nc = dd->lhs_contracting.n;
  int64_t *lst = ps_shape_strides (l->shape), *rst = ps_shape_strides (r->shape);
  int *lfree = g_new0 (int, lr + 1), *rfree = g_new0 (int, rr + 1);
  int nlf = 0, nrf = 0;
  int64_t *cdims = g_new0 (int64_t, nc + 1), *cidx = g_new0 (int64_t, nc + 1);
  int64_t *oidx = g_new0 (int64_t, out->shape->rank + 1);
  int64_t *gstart = NULL, *gend = NULL, *ccoord = NULL;
  int64_t ngroups = 0;
  int og = mode == PS_RAGGED_CONTRACTING ? 1 : 0; /* the result's leading group dim */
  int rag_free = -1, rag_c = -1;                  /* where the ragged dim sits */
  if (dd->rhs_batch.n != nb || dd->rhs_contracting.n != nc)
    FAIL ("batch/contracting dims differ in number");
  if (mode != PS_RAGGED_NONE || ins->opcode == PS_OP_RAGGED_DOT)
    {
      const PsValue *gs = ops[2];
      if (lrag < 0 || lrag >= lr || !gs->i || gs->shape->rank != 1
          || (rgrp >= 0 && (rgrp >= rr || r->shape->dims[rgrp] != gs->shape->dims[0])))
        FAIL ("group_sizes must be an integer vector of one size per group (rhs group dim)");
      ngroups = gs->shape->dims[0];
      gstart = g_new0 (int64_t, ngroups + 1);
      gend = g_new0 (int64_t, ngroups + 1);
      int64_t at = 0, extent = l->shape->dims[lrag];
      for (int64_t j = 0; j < ngroups; j++)
        {
          int64_t n = MAX (gs->i[j], 0);
          gstart[j] = MIN (at, extent);
          at = gstart[j] + MIN (n, extent - gstart[j]);
          gend[j] = at;
        }
    }
  for (int d = 0; d < lr; d++)
    if (!ps_ints_contains (&dd->lhs_batch, d) && !ps_ints_contains (&dd->lhs_contracting, d))
      {
        if (d == lrag)
          rag_free = nlf;
        lfree[nlf++] = d;
      }
  for (int d = 0; d < rr; d++)
    if (!ps_ints_contains (&dd->rhs_batch, d) && !ps_ints_contains (&dd->rhs_contracting, d) && d != rgrp)
      rfree[nrf++] = d;
  if (og + nb + nlf + nrf != out->shape->rank)
    FAIL ("result rank %d is not batch + free dims (%d)", out->shape->rank, og + nb + nlf + nrf);
  if (og && out->shape->dims[0] != ngroups)
    FAIL ("the result's group dim has %" G_GINT64_FORMAT " entries for %" G_GINT64_FORMAT " groups",
          out->shape->dims[0], ngroups);
  for (int k = 0; k < nb; k++)
    {
      int64_t a = dd->lhs_batch.v[k], b = dd->rhs_batch.v[k];
      if (a < 0 || a >= lr || b < 0 || b >= rr || l->shape->dims[a] != r->shape->dims[b]
          || out->shape->dims[og + k] != l->shape->dims[a])
        FAIL ("batch dim %d does not match", k);
    }
  for (int k = 0; k < nc; k++)
    {
      int64_t a = dd->lhs_contracting.v[k], b = dd->rhs_contracting.v[k];
      if (a < 0 || a >= lr || b < 0 || b >= rr || l->shape->dims[a] != r->shape->dims[b])
        FAIL ("contracting dim %d does not match", k);
      cdims[k] = l->shape->dims[a];
      if (a == lrag)
        rag_c = k;
    }
  for (int k = 0; k < nlf; k++)
    if (out->shape->dims[og + nb + k] != l->shape->dims[lfree[k]])
      FAIL ("lhs free dim %d does not match the result", lfree[k]);
  for (int k = 0; k < nrf; k++)
    if (out->shape->dims[og + nb + nlf + k] != r->shape->dims[rfree[k]])
      FAIL ("rhs free dim %d does not match the result", rfree[k]);
  int64_t csize = 1;
  for (int k = 0; k < nc; k++)
    csize *= cdims[k];
  if (!ip_charge (ctx, ins, out->n * csize, error))
    goto fail;
  gboolean ints = l->i != NULL;
  /* Offsets of every contracting position, computed once: the inner loop
   * is then a plain multiply-add over two offset tables. */
  int64_t *loff = g_new0 (int64_t, MAX (1, csize)), *roff = g_new0 (int64_t, MAX (1, csize));
  if (rag_c >= 0)
    ccoord = g_new0 (int64_t, MAX (1, csize));
  memset (cidx, 0, sizeof (int64_t) * (nc + 1));
  for (int64_t c = 0; c < csize; c++)
    {
      for (int k = 0; k < nc; k++)
        {
          loff[c] += cidx[k] * lst[dd->lhs_contracting.v[k]];
          roff[c] += cidx[k] * rst[dd->rhs_contracting.v[k]];
        }
      if (ccoord)
        ccoord[c] = cidx[rag_c];
      ps_index_next (nc, cdims, cidx);
    }
  for (int64_t e = 0; e < out->n; e++)
    {
      int64_t lb = 0, rb = 0;
      int64_t lo = 0, hi = csize; /* the contracting mode: group oidx[0]'s run */
      gboolean skip = FALSE;
      for (int k = 0; k < nb; k++)
        {
          lb += oidx[og + k] * lst[dd->lhs_batch.v[k]];
          rb += oidx[og + k] * rst[dd->rhs_batch.v[k]];
        }
      for (int k = 0; k < nlf; k++)
        lb += oidx[og + nb + k] * lst[lfree[k]];
      for (int k = 0; k < nrf; k++)
        rb += oidx[og + nb + nlf + k] * rst[rfree[k]];
      if (mode == PS_RAGGED_NON_CONTRACTING)
        {
          int64_t row = oidx[og + nb + rag_free], j = 0;
          while (j < ngroups && !(row >= gstart[j] && row < gend[j]))
            j++;
          if (j == ngroups)
            skip = TRUE; /* past the last group: 0 */
          else
            rb += j * rst[rgrp];
        }
      else if (mode == PS_RAGGED_CONTRACTING)
        lo = gstart[oidx[0]], hi = gend[oidx[0]];
      Acc acc = { 0, 0, 0 };
      if (skip)
        ;
      else if (l->f)
        {
          const double *lf = l->f + lb, *rf = r->f + rb;
          double sum = 0;
          for (int64_t c = 0; c < csize; c++)
            if (!ccoord || (ccoord[c] >= lo && ccoord[c] < hi))
              sum += lf[loff[c]] * rf[roff[c]];
          acc.re = sum;
        }
      else
        for (int64_t c = 0; c < csize; c++)
          if (!ccoord || (ccoord[c] >= lo && ccoord[c] < hi))
            acc_mul_add (&acc, l, lb + loff[c], r, rb + roff[c]);
      if (ints && out->i)
        out->i[e] = ip_wrap_int (out->shape->etype, acc.i);
      else
        acc_store (out, e, &acc, ints);
      ps_index_next (out->shape->rank, out->shape->dims, oidx);
    }
  g_free (loff);
  g_free (roff);
  goto done;
fail:
  g_clear_pointer (&out, ps_value_free);
done:
  ps_value_free (pl);
  ps_value_free (pr);
  g_free (lst);
  g_free (rst);
  g_free (lfree);
  g_free (rfree);
  g_free (cdims);
  g_free (cidx);
  g_free (oidx);
  g_free (gstart);
  g_free (gend);
  g_free (ccoord);
  return out;
}

static PsValue *
op_convolution (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  PsValue *out = ps_value_new (ins->shape);
  PsValue *pl = promote (ops[0], out->shape->etype), *pr = promote (ops[1], out->shape->etype);
  const PsValue *l = pl ? pl : ops[0], *r = pr ? pr : ops[1];
  const PsConvDims *cd = &ins->conv;
  int ns = cd->n_spatial;
  int64_t *lst = ps_shape_strides (l->shape), *rst = ps_shape_strides (r->shape);
  int64_t *ost = ps_shape_strides (out->shape);
  int64_t *oidx = g_new0 (int64_t, out->shape->rank + 1);
  int64_t *kdims = g_new0 (int64_t, ns + 1), *kidx = g_new0 (int64_t, ns + 1);
  int64_t fgc = MAX (1, ins->feature_group_count), bgc = MAX (1, ins->batch_group_count);
  if (!cd->present || l->shape->rank != ns + 2 || r->shape->rank != ns + 2
      || out->shape->rank != ns + 2 || ins->window.n != ns)
    FAIL ("dim_labels, window and operand ranks do not agree");
  int64_t in_batch = l->shape->dims[cd->in_batch], in_feat = l->shape->dims[cd->in_feature];
  int64_t k_in = r->shape->dims[cd->k_in_feature], k_out = r->shape->dims[cd->k_out_feature];
  if (in_feat % fgc || k_out % fgc || in_batch % bgc || k_out % bgc || in_feat / fgc != k_in
      || out->shape->dims[cd->out_feature] != k_out
      || out->shape->dims[cd->out_batch] != in_batch / bgc)
    FAIL ("feature/batch group counts do not fit the operands");
  for (int s = 0; s < ns; s++)
    {
      const PsWindowDim *w = &ins->window.dims[s];
      kdims[s] = r->shape->dims[cd->k_spatial[s]];
      if (w->size != kdims[s] || w->stride < 1 || MAX (1, w->base_dilation) < 1)
        FAIL ("window size does not match the kernel in spatial dim %d", s);
    }
  int64_t ksize = 1;
  for (int s = 0; s < ns; s++)
    ksize *= kdims[s];
  int64_t in_fg = in_feat / fgc, out_fg = k_out / fgc;
  int64_t batch_group_size = in_batch / bgc, out_per_bgroup = k_out / bgc;
  if (!ip_charge (ctx, ins, out->n * ksize * in_fg, error))
    goto fail;
  gboolean ints = l->i != NULL;
  for (int64_t e = 0; e < out->n; e++)
    {
      int64_t ob = oidx[cd->out_batch], of = oidx[cd->out_feature];
      int64_t fg = of / out_fg;
      int64_t bg = of / out_per_bgroup;
      Acc acc = { 0, 0, 0 };
      memset (kidx, 0, sizeof (int64_t) * (ns + 1));
      for (int64_t k = 0; k < ksize; k++)
        {
          int64_t lsp = 0, rsp = 0;
          gboolean in = TRUE;
          for (int s = 0; s < ns && in; s++)
            {
              const PsWindowDim *w = &ins->window.dims[s];
              int64_t bd = MAX (1, w->base_dilation), wd = MAX (1, w->window_dilation);
              int64_t u = oidx[cd->out_spatial[s]] * w->stride - w->pad_lo + kidx[s] * wd;
              if (u % bd != 0)
                {
                  in = FALSE;
                  break;
                }
              int64_t li = u / bd;
              if (u < 0 || li >= l->shape->dims[cd->in_spatial[s]])
                {
                  in = FALSE;
                  break;
                }
              lsp += li * lst[cd->in_spatial[s]];
              rsp += (w->reversal ? kdims[s] - 1 - kidx[s] : kidx[s]) * rst[cd->k_spatial[s]];
            }
          if (in)
            for (int64_t iz = 0; iz < in_fg; iz++)
              {
                int64_t li = lsp + (ob + bg * batch_group_size) * lst[cd->in_batch]
                             + (fg * in_fg + iz) * lst[cd->in_feature];
                int64_t ri = rsp + of * rst[cd->k_out_feature] + iz * rst[cd->k_in_feature];
                acc_mul_add (&acc, l, li, r, ri);
              }
          ps_index_next (ns, kdims, kidx);
        }
      if (ints && out->i)
        out->i[e] = ip_wrap_int (out->shape->etype, acc.i);
      else
        acc_store (out, e, &acc, ints);
      ps_index_next (out->shape->rank, out->shape->dims, oidx);
    }
  (void) ost;
  goto done;
fail:
  g_clear_pointer (&out, ps_value_free);
done:
  ps_value_free (pl);
  ps_value_free (pr);
  g_free (lst);
  g_free (rst);
  g_free (ost);
  g_free (oidx);
  g_free (kdims);
  g_free (kidx);
  return out;
}

/* Applies a (possibly variadic) reducer: acc[k][ai] = f(acc..., x...). */
typedef struct {
  IpCtx *ctx;
  const PsInstr *ins;
  int64_t device;
  int n;                     /* number of reduced arrays */
  IpReducer fast;            /* used when n == 1 */
  PsValue **args;            /* 2n scalars for the variadic path */
} Combiner;

static void
combiner_init (Combiner *c, IpCtx *ctx, const PsInstr *ins, int64_t device, int n,
               PsValue **inits)
{
  memset (c, 0, sizeof *c);
  c->ctx = ctx;
  c->ins = ins;
  c->device = device;
  c->n = n;
  if (n == 1)
    ip_reducer_init (&c->fast, ctx, ins->called[0], device, inits[0]->shape->etype);
  else
    {
      c->args = g_new0 (PsValue *, 2 * n);
      for (int k = 0; k < n; k++)
        {
          PsShape *s = ps_shape_new_scalar (inits[k]->shape->etype);
          c->args[k] = ps_value_new (s);
          c->args[n + k] = ps_value_new (s);
          ps_shape_free (s);
        }
    }
}

static void
combiner_clear (Combiner *c)
{
  if (c->n == 1)
    ip_reducer_clear (&c->fast);
  for (int k = 0; c->args && k < 2 * c->n; k++)
    ps_value_free (c->args[k]);
  g_free (c->args);
}

/* acc[k][ai] = reducer(acc[k][ai], src[k][si]) for every k. */
static gboolean
combiner_apply (Combiner *c, PsValue **acc, int64_t ai, PsValue *const *src, int64_t si,
                GError **error)
{
  if (c->n == 1)
    return ip_reducer_apply (&c->fast, acc[0], ai, src[0], si, acc[0], ai, error);
  for (int k = 0; k < c->n; k++)
    {
      ps_value_copy_elem (c->args[k], 0, acc[k], ai);
      ps_value_copy_elem (c->args[c->n + k], 0, src[k], si);
    }
  const PsComputation *comp = c->ins->called[0];
  if (!ip_charge (c->ctx, c->ins, comp->instrs->len, error))
    return FALSE;
  PsValue *owned = NULL;
  const PsValue *r = ip_call_fast (c->ctx, comp, c->device, 2 * c->n, c->args, &owned, error);
  if (!r)
    return FALSE;
  if (r->n_elems != c->n)
    {
      ps_value_free (owned);
      ip_fail (error, PS_ERROR_INVALID, c->ins, "reducer must return a %d-tuple", c->n);
      return FALSE;
    }
  for (int k = 0; k < c->n; k++)
    {
      if (r->elems[k]->n != 1 || r->elems[k]->shape->etype != acc[k]->shape->etype)
        {
          ps_value_free (owned);
          ip_fail (error, PS_ERROR_INVALID, c->ins, "reducer returns the wrong types");
          return FALSE;
        }
      ps_value_copy_elem (acc[k], ai, r->elems[k], 0);
    }
  ps_value_free (owned);
  return TRUE;
}

static PsValue *
pack_results (PsValue **res, int n, const PsShape *shape)
{
  PsValue *out = shape->etype == PS_TUPLE ? ps_value_new_tuple (n, res) : res[0];
  memset (res, 0, sizeof (PsValue *) * (shape->etype == PS_TUPLE ? n : 1));
  return out;
}

/* The cleanup both reductions share: the combiner (when set up) and the
 * results not handed on by pack_results. */
static void
results_clear (Combiner *comb, gboolean have_comb, PsValue **res, int n)
{
  if (have_comb)
    combiner_clear (comb);
  for (int k = 0; k < n; k++)
    ps_value_free (res[k]);
  g_free (res);
}

static PsValue *
op_reduce (IpCtx *ctx, const PsInstr *ins, PsValue **ops, int64_t device, GError **error)
{
  int no = ins->n_operands;
  if (no < 2 || no % 2 || ins->n_called < 1)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "reduce needs N inputs, N inits and a computation");
      return NULL;
    }
  int n = no / 2;
  PsValue **in = ops, **inits = ops + n;
  const PsValue *a0 = in[0];
  int rank = a0->shape->rank;
  PsValue **res = g_new0 (PsValue *, n);
  int64_t *idx = g_new0 (int64_t, rank + 1);
  int64_t *st = ps_shape_strides (a0->shape);
  gboolean *red = g_new0 (gboolean, rank + 1);
  Combiner comb;
  gboolean have_comb = FALSE;
  PsValue *out = NULL;
  for (int k = 0; k < n; k++)
    {
      const PsShape *rs = ins->shape->etype == PS_TUPLE
                          ? (k < ins->shape->n_elems ? ins->shape->elems[k] : NULL) : ins->shape;
      if (!rs || rs->etype == PS_TUPLE || in[k]->shape->etype == PS_TUPLE
          || !ip_same_dims (in[k]->shape, a0->shape) || inits[k]->n != 1
          || inits[k]->shape->etype != rs->etype || in[k]->shape->etype != rs->etype)
        FAIL ("operands, inits and result of reduce do not fit");
      res[k] = ps_value_new (rs);
    }
  for (int k = 0; k < ins->dimensions.n; k++)
    {
      if (ins->dimensions.v[k] < 0 || ins->dimensions.v[k] >= rank)
        FAIL ("bad reduce dimension");
      red[ins->dimensions.v[k]] = TRUE;
    }
  if (res[0]->shape->rank != rank - ins->dimensions.n)
    FAIL ("result rank does not match");
  {
    int od = 0;
    for (int d = 0; d < rank; d++)
      if (!red[d] && res[0]->shape->dims[od++] != a0->shape->dims[d])
        FAIL ("result dims do not match the kept dims");
  }
  for (int k = 0; k < n; k++)
    for (int64_t e = 0; e < res[k]->n; e++)
      ps_value_copy_elem (res[k], e, inits[k], 0);
  combiner_init (&comb, ctx, ins, device, n, inits);
  have_comb = TRUE;
  if (!ip_charge (ctx, ins, a0->n * (n == 1 && comb.fast.fast_op != PS_OP_COUNT ? 1 : 8), error))
    goto fail;
  /* Row-major over the input: the order in which each output element sees
   * its inputs is the input's row-major order, deterministic. */
  int64_t *rst = ps_shape_strides (res[0]->shape);
  PsElemType et = a0->shape->etype;
  if (n == 1 && (et == PS_BF16 || et == PS_F16)
      && (comb.fast.fast_op == PS_OP_ADD || comb.fast.fast_op == PS_OP_MULTIPLY))
    {
      /* Sums and products of 16-bit floats accumulate in f32 and round once
       * at the end, as XLA's CPU and TPU backends do: rounding every step to
       * 8 mantissa bits would make the result depend mostly on the order. */
      gboolean add = comb.fast.fast_op == PS_OP_ADD;
      for (int64_t e = 0; e < a0->n; e++)
        {
          int64_t oi = 0;
          int od = 0;
          for (int d = 0; d < rank; d++)
            if (!red[d])
              oi += idx[d] * rst[od++];
          double x = in[0]->f[e];
          res[0]->f[oi] = (double) (float) (add ? res[0]->f[oi] + x : res[0]->f[oi] * x);
          ps_index_next (rank, a0->shape->dims, idx);
        }
      for (int64_t e = 0; e < res[0]->n; e++)
        res[0]->f[e] = ps_etype_round (et, res[0]->f[e]);
    }
  else
    for (int64_t e = 0; e < a0->n; e++)
      {
        int64_t oi = 0;
        int od = 0;
        for (int d = 0; d < rank; d++)
          if (!red[d])
            oi += idx[d] * rst[od++];
        if (!combiner_apply (&comb, res, oi, in, e, error))
          {
            g_free (rst);
            goto fail;
          }
        ps_index_next (rank, a0->shape->dims, idx);
      }
  g_free (rst);
  out = pack_results (res, n, ins->shape);
fail:
  results_clear (&comb, have_comb, res, n);
  g_free (idx);
  g_free (st);
  g_free (red);
  return out;
}

/* Input index of window position `widx` for output position `oidx` in dim
 * d, or -1 when it falls on padding or between dilated elements. */
static int64_t
window_input (const PsWindowDim *w, int64_t o, int64_t k, int64_t in_dim)
{
  int64_t bd = MAX (1, w->base_dilation), wd = MAX (1, w->window_dilation);
  int64_t u = o * w->stride - w->pad_lo + k * wd;
  if (u < 0 || u % bd != 0)
    return -1;
  u /= bd;
  return u < in_dim ? u : -1;
}

static PsValue *
op_reduce_window (IpCtx *ctx, const PsInstr *ins, PsValue **ops, int64_t device,
                  GError **error)
{
  int no = ins->n_operands;
  if (no < 2 || no % 2 || ins->n_called < 1)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "reduce-window needs N inputs, N inits and a computation");
      return NULL;
    }
  int n = no / 2;
  PsValue **in = ops, **inits = ops + n;
  const PsValue *a0 = in[0];
  int rank = a0->shape->rank;
  PsValue **res = g_new0 (PsValue *, n);
  int64_t *oidx = g_new0 (int64_t, rank + 1), *widx = g_new0 (int64_t, rank + 1);
  int64_t *wdims = g_new0 (int64_t, rank + 1);
  int64_t *st = ps_shape_strides (a0->shape);
  Combiner comb;
  gboolean have_comb = FALSE;
  PsValue *out = NULL;
  if (ins->window.n != rank)
    FAIL ("window has %d dims, the operand %d", ins->window.n, rank);
  for (int k = 0; k < n; k++)
    {
      const PsShape *rs = ins->shape->etype == PS_TUPLE
                          ? (k < ins->shape->n_elems ? ins->shape->elems[k] : NULL) : ins->shape;
      if (!rs || rs->etype == PS_TUPLE || !ip_same_dims (in[k]->shape, a0->shape)
          || inits[k]->n != 1 || rs->rank != rank || inits[k]->shape->etype != rs->etype)
        FAIL ("operands, inits and result of reduce-window do not fit");
      res[k] = ps_value_new (rs);
    }
  int64_t wsize = 1;
  for (int d = 0; d < rank; d++)
    {
      wdims[d] = ins->window.dims[d].size;
      if (wdims[d] < 0 || ins->window.dims[d].stride < 1)
        FAIL ("bad window in dim %d", d);
      wsize *= wdims[d];
    }
  combiner_init (&comb, ctx, ins, device, n, inits);
  have_comb = TRUE;
  if (!ip_charge (ctx, ins, res[0]->n * wsize, error))
    goto fail;
  for (int64_t e = 0; e < res[0]->n; e++)
    {
      for (int k = 0; k < n; k++)
        ps_value_copy_elem (res[k], e, inits[k], 0);
      memset (widx, 0, sizeof (int64_t) * (rank + 1));
      for (int64_t w = 0; w < wsize; w++)
        {
          int64_t ai = 0;
          gboolean inb = TRUE;
          for (int d = 0; d < rank && inb; d++)
            {
              int64_t u = window_input (&ins->window.dims[d], oidx[d], widx[d], a0->shape->dims[d]);
              if (u < 0)
                inb = FALSE;
              else
                ai += u * st[d];
            }
          if (inb && !combiner_apply (&comb, res, e, in, ai, error))
            goto fail;
          ps_index_next (rank, wdims, widx);
        }
      ps_index_next (rank, res[0]->shape->dims, oidx);
    }
  out = pack_results (res, n, ins->shape);
fail:
  results_clear (&comb, have_comb, res, n);
  g_free (oidx);
  g_free (widx);
  g_free (wdims);
  g_free (st);
  return out;
}

static PsValue *
op_select_and_scatter (IpCtx *ctx, const PsInstr *ins, PsValue **ops, int64_t device,
                       GError **error)
{
  if (ins->n_operands != 3 || ins->n_called < 2)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "select-and-scatter needs 3 operands and 2 computations");
      return NULL;
    }
  const PsValue *a = ops[0], *src = ops[1], *init = ops[2];
  int rank = a->shape->rank;
  PsValue *out = ps_value_new (ins->shape);
  int64_t *sidx = g_new0 (int64_t, rank + 1), *widx = g_new0 (int64_t, rank + 1);
  int64_t *wdims = g_new0 (int64_t, rank + 1);
  int64_t *st = ps_shape_strides (a->shape);
  PsShape *scal = ps_shape_new_scalar (a->shape->etype);
  PsValue *args[2] = { ps_value_new (scal), ps_value_new (scal) };
  IpReducer scat;
  gboolean have_scat = FALSE;
  if (!ps_shape_equal (out->shape, a->shape) || init->n != 1 || ins->window.n != rank
      || src->shape->rank != rank || src->shape->etype != a->shape->etype)
    FAIL ("operand, source, init and window do not fit");
  int64_t wsize = 1;
  for (int d = 0; d < rank; d++)
    {
      wdims[d] = ins->window.dims[d].size;
      wsize *= wdims[d];
    }
  for (int64_t e = 0; e < out->n; e++)
    ps_value_copy_elem (out, e, init, 0);
  ip_reducer_init (&scat, ctx, ins->called[1], device, a->shape->etype);
  have_scat = TRUE;
  if (!ip_charge (ctx, ins, src->n * wsize * ins->called[0]->instrs->len, error))
    goto fail;
  for (int64_t e = 0; e < src->n; e++)
    {
      int64_t best = -1;
      memset (widx, 0, sizeof (int64_t) * (rank + 1));
      for (int64_t w = 0; w < wsize; w++)
        {
          int64_t ai = 0;
          gboolean inb = TRUE;
          for (int d = 0; d < rank && inb; d++)
            {
              int64_t u = window_input (&ins->window.dims[d], sidx[d], widx[d], a->shape->dims[d]);
              if (u < 0)
                inb = FALSE;
              else
                ai += u * st[d];
            }
          if (inb)
            {
              if (best < 0)
                best = ai;
              else
                {
                  /* select(current, candidate) true keeps the current one. */
                  ps_value_copy_elem (args[0], 0, a, best);
                  ps_value_copy_elem (args[1], 0, a, ai);
                  PsValue *owned = NULL;
                  const PsValue *r = ip_call_fast (ctx, ins->called[0], device, 2, args,
                                                   &owned, error);
                  if (!r)
                    goto fail;
                  gboolean keep = r->i && r->n == 1 && r->i[0];
                  ps_value_free (owned);
                  if (!keep)
                    best = ai;
                }
            }
          ps_index_next (rank, wdims, widx);
        }
      if (best >= 0 && !ip_reducer_apply (&scat, out, best, src, e, out, best, error))
        goto fail;
      ps_index_next (rank, src->shape->dims, sidx);
    }
  goto done;
fail:
  g_clear_pointer (&out, ps_value_free);
done:
  if (have_scat)
    ip_reducer_clear (&scat);
  ps_value_free (args[0]);
  ps_value_free (args[1]);
  ps_shape_free (scal);
  g_free (sidx);
  g_free (widx);
  g_free (wdims);
  g_free (st);
  return out;
}

static PsValue *
op_map (IpCtx *ctx, const PsInstr *ins, PsValue **ops, int64_t device, GError **error)
{
  int no = ins->n_operands;
  PsValue *out = ps_value_new (ins->shape);
  PsValue **args = g_new0 (PsValue *, MAX (1, no));
  if (ins->n_called < 1 || out->shape->etype == PS_TUPLE)
    FAIL ("map needs a computation and an array result");
  for (int k = 0; k < no; k++)
    {
      if (ops[k]->n != out->n)
        FAIL ("operand %d has another element count", k);
      PsShape *s = ps_shape_new_scalar (ops[k]->shape->etype);
      args[k] = ps_value_new (s);
      ps_shape_free (s);
    }
  if (!ip_charge (ctx, ins, out->n * ins->called[0]->instrs->len, error))
    goto fail;
  for (int64_t e = 0; e < out->n; e++)
    {
      for (int k = 0; k < no; k++)
        ps_value_copy_elem (args[k], 0, ops[k], e);
      PsValue *r = ip_call (ctx, ins->called[0], device, no, args, error);
      if (!r)
        goto fail;
      ps_value_copy_elem (out, e, r, 0);
      ps_value_free (r);
    }
  goto done;
fail:
  g_clear_pointer (&out, ps_value_free);
done:
  for (int k = 0; k < no; k++)
    ps_value_free (args[k]);
  g_free (args);
  return out;
}

PsValue *
ip_window_op (IpCtx *ctx, const PsInstr *ins, PsValue **ops, int64_t device,
              GError **error)
{
  for (int k = 0; k < ins->n_operands; k++)
    if (ops[k]->shape->etype == PS_TUPLE)
      {
        ip_fail (error, PS_ERROR_INVALID, ins, "operand %d is a tuple", k);
        return NULL;
      }
  switch (ins->opcode)
    {
    case PS_OP_DOT:
      if (ins->n_operands > 2)
        {
          ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "sparse dot (with a metadata operand) is not supported");
          return NULL;
        }
      if (ins->n_operands != 2 || ins->shape->etype == PS_TUPLE)
        break;
      return op_dot (ctx, ins, ops, error);
    case PS_OP_RAGGED_DOT:
      if (ins->n_operands != 3 || ins->shape->etype == PS_TUPLE)
        break;
      return op_dot (ctx, ins, ops, error);
    case PS_OP_CONVOLUTION:
      if (ins->n_operands != 2 || ins->shape->etype == PS_TUPLE)
        break;
      return op_convolution (ctx, ins, ops, error);
    case PS_OP_REDUCE:
      return op_reduce (ctx, ins, ops, device, error);
    case PS_OP_REDUCE_WINDOW:
      return op_reduce_window (ctx, ins, ops, device, error);
    case PS_OP_SELECT_AND_SCATTER:
      return op_select_and_scatter (ctx, ins, ops, device, error);
    case PS_OP_MAP:
      return op_map (ctx, ins, ops, device, error);
    default:
      break;
    }
  ip_fail (error, PS_ERROR_INVALID, ins, "wrong operands");
  return NULL;
}

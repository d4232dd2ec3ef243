/* Linear-algebra ops of the interpreter: cholesky, triangular-solve and fft
 * (complex FFT/IFFT), in double on small matrices and signals, rounded once
 * to the result type. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "partitioner/interp/interp_private.h"

gboolean
ip_is_linalg_op (PsOpcode op)
{
  return op == PS_OP_CHOLESKY || op == PS_OP_TRIANGULAR_SOLVE || op == PS_OP_FFT;
}

static gboolean
attr_true (const PsInstr *ins, const char *key)
{
  const char *v = ps_instr_get_raw_attr (ins, key);
  return v && strcmp (v, "true") == 0;
}

/* A = L L^T (lower) or U^T U (upper) per batch matrix; the other triangle of
 * the result is zero (XLA leaves it implementation-defined). Matrices that
 * are not positive definite give NaN, as sqrt of a negative does. */
static PsValue *
op_cholesky (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *a = ops[0];
  int rank = a->shape->rank;
  if (ins->n_operands != 1 || !a->f || rank < 2 || a->shape->dims[rank - 1] != a->shape->dims[rank - 2]
      || !ps_shape_equal (a->shape, ins->shape))
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "cholesky needs a float [..., n, n] operand");
      return NULL;
    }
  gboolean lower = attr_true (ins, "lower");
  int64_t n = a->shape->dims[rank - 1], mats = n ? a->n / (n * n) : 0;
  if (!ip_charge (ctx, ins, mats * n * n * n, error))
    return NULL;
  PsValue *out = ps_value_new (ins->shape);
  double *l = g_new0 (double, MAX (1, n * n));
  for (int64_t m = 0; m < mats; m++)
    {
      const double *src = a->f + m * n * n;
      memset (l, 0, sizeof (double) * n * n);
      /* Read the used triangle as the lower one of a symmetric matrix. */
#define A(i, j) (lower ? src[(i) * n + (j)] : src[(j) * n + (i)])
      for (int64_t j = 0; j < n; j++)
        {
          double s = A (j, j);
          for (int64_t k = 0; k < j; k++)
            s -= l[j * n + k] * l[j * n + k];
          l[j * n + j] = sqrt (s);
          for (int64_t i = j + 1; i < n; i++)
            {
              double t = A (i, j);
              for (int64_t k = 0; k < j; k++)
                t -= l[i * n + k] * l[j * n + k];
              l[i * n + j] = t / l[j * n + j];
            }
        }
#undef A
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++)
          {
            int64_t oi = lower ? i * n + j : j * n + i;
            out->f[m * n * n + oi] = ps_etype_round (out->shape->etype, l[i * n + j]);
          }
    }
  g_free (l);
  return out;
}

/* Solves op(a) x = b (left_side) or x op(a) = b with a triangular. */
static PsValue *
op_triangular_solve (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *a = ops[0], *b = ops[1];
  int rank = b->shape->rank;
  gboolean left = attr_true (ins, "left_side"), lower = attr_true (ins, "lower");
  gboolean unit = attr_true (ins, "unit_diagonal");
  const char *tr = ps_instr_get_raw_attr (ins, "transpose_a");
  gboolean transpose = tr && (strcmp (tr, "TRANSPOSE") == 0 || strcmp (tr, "ADJOINT") == 0);
  if (ins->n_operands != 2 || !a->f || !b->f || rank < 2 || a->shape->rank != rank
      || !ps_shape_equal (b->shape, ins->shape))
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "triangular-solve needs float [..., k, k] and [..., m, n] operands");
      return NULL;
    }
  int64_t m = b->shape->dims[rank - 2], n = b->shape->dims[rank - 1];
  int64_t k = left ? m : n;
  if (a->shape->dims[rank - 1] != k || a->shape->dims[rank - 2] != k
      || (k != 0 && m * n != 0 && a->n / (k * k) != b->n / (m * n)))
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "a is not a [..., %" G_GINT64_FORMAT ", %"
               G_GINT64_FORMAT "] matrix batch matching b", k, k);
      return NULL;
    }
  int64_t mats = m * n != 0 ? b->n / (m * n) : 0;
  if (!ip_charge (ctx, ins, mats * k * k * (left ? n : m), error))
    return NULL;
  PsValue *out = ps_value_new (ins->shape);
  double *t = g_new0 (double, MAX (1, k * k));
  double *x = g_new0 (double, MAX (1, k));
  for (int64_t bm = 0; bm < mats; bm++)
    {
      const double *sa = a->f + bm * k * k;
      /* T = op(triangle of a): lower-triangular iff lower != transpose. For
       * the right side, x T = b is T^T x^T = b^T: transpose once more. */
      gboolean flip = transpose != !left;
      for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++)
          {
            gboolean in = lower ? j <= i : j >= i;
            double v = in ? sa[i * k + j] : 0;
            if (i == j && unit)
              v = 1;
            if (flip)
              t[j * k + i] = v;
            else
              t[i * k + j] = v;
          }
      gboolean t_lower = lower != flip;
      int64_t nrhs = left ? n : m;
      for (int64_t r = 0; r < nrhs; r++)
        {
          /* The r-th right-hand side: a column of b (left) or a row (right). */
          for (int64_t i = 0; i < k; i++)
            x[i] = left ? b->f[bm * m * n + i * n + r] : b->f[bm * m * n + r * n + i];
          if (t_lower)
            for (int64_t i = 0; i < k; i++)
              {
                for (int64_t j = 0; j < i; j++)
                  x[i] -= t[i * k + j] * x[j];
                x[i] /= t[i * k + i];
              }
          else
            for (int64_t i = k - 1; i >= 0; i--)
              {
                for (int64_t j = i + 1; j < k; j++)
                  x[i] -= t[i * k + j] * x[j];
                x[i] /= t[i * k + i];
              }
          for (int64_t i = 0; i < k; i++)
            {
              int64_t oi = left ? bm * m * n + i * n + r : bm * m * n + r * n + i;
              out->f[oi] = ps_etype_round (out->shape->etype, x[i]);
            }
        }
    }
  g_free (t);
  g_free (x);
  return out;
}

/* Complex FFT/IFFT over the last len(fft_length) dims, as a plain DFT. */
static PsValue *
op_fft (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  const PsValue *a = ops[0];
  const char *type = ps_instr_get_raw_attr (ins, "fft_type");
  gboolean inverse = type && strcmp (type, "IFFT") == 0;
  if (!type || (!inverse && strcmp (type, "FFT") != 0))
    {
      ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "fft_type %s is not supported (FFT and IFFT are)",
               type ? type : "(none)");
      return NULL;
    }
  const char *lens = ps_instr_get_raw_attr (ins, "fft_length");
  int nd = 1;
  for (const char *p = lens; p && *p; p++)
    nd += *p == ',';
  int rank = a->shape->rank;
  if (ins->n_operands != 1 || !a->c || !ps_shape_equal (a->shape, ins->shape) || nd > rank
      || nd > 3)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "fft needs a complex operand of the result's shape");
      return NULL;
    }
  PsValue *out = ps_value_copy (a);
  int64_t *st = ps_shape_strides (a->shape);
  double *buf = NULL;
  gboolean ok = TRUE;
  for (int d = rank - nd; d < rank && ok; d++)
    {
      int64_t len = a->shape->dims[d], stride = st[d];
      if (!ip_charge (ctx, ins, out->n * len, error))
        {
          ok = FALSE;
          break;
        }
      g_free (buf);
      buf = g_new0 (double, 2 * MAX (1, len));
      int64_t lines = len ? out->n / len : 0;
      for (int64_t line = 0; line < lines; line++)
        {
          /* Start of the line: index with dim d at 0. */
          int64_t base = (line / stride) * stride * len + line % stride;
          for (int64_t kf = 0; kf < len; kf++)
            {
              double re = 0, im = 0;
              for (int64_t j = 0; j < len; j++)
                {
                  double ang = (inverse ? 2 : -2) * G_PI * (double) ((kf * j) % len) / (double) len;
                  double xr = out->c[2 * (base + j * stride)], xi = out->c[2 * (base + j * stride) + 1];
                  re += xr * cos (ang) - xi * sin (ang);
                  im += xr * sin (ang) + xi * cos (ang);
                }
              if (inverse)
                {
                  re /= (double) len;
                  im /= (double) len;
                }
              buf[2 * kf] = re;
              buf[2 * kf + 1] = im;
            }
          for (int64_t kf = 0; kf < len; kf++)
            {
              out->c[2 * (base + kf * stride)] = ps_etype_round (out->shape->etype, buf[2 * kf]);
              out->c[2 * (base + kf * stride) + 1] = ps_etype_round (out->shape->etype, buf[2 * kf + 1]);
            }
        }
    }
  g_free (buf);
  g_free (st);
  if (!ok)
    g_clear_pointer (&out, ps_value_free);
  return out;
}

PsValue *
ip_linalg_op (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  if (ins->shape->etype == PS_TUPLE)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "tuple result");
      return NULL;
    }
  for (int k = 0; k < ins->n_operands; k++)
    if (ops[k]->shape->etype == PS_TUPLE)
      {
        ip_fail (error, PS_ERROR_INVALID, ins, "tuple operand");
        return NULL;
      }
  switch (ins->opcode)
    {
    case PS_OP_CHOLESKY: return op_cholesky (ctx, ins, ops, error);
    case PS_OP_TRIANGULAR_SOLVE: return op_triangular_solve (ctx, ins, ops, error);
    case PS_OP_FFT: return op_fft (ctx, ins, ops, error);
    default:
      ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "not a linear-algebra op");
      return NULL;
    }
}

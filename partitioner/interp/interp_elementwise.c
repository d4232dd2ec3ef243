/* Elementwise ops of the interpreter: unary and binary math, compare,
 * select, clamp, convert, reduce-precision. Every result is rounded (floats)
 * or wrapped (integers) to the result's element type, so f32 arithmetic done
 * in double gives exactly the f32 result for + - * / sqrt, and bf16/f16 ops
 * behave as XLA's (compute in f32, round to nearest even). */
#include "config.h"

#include <math.h>
#include <string.h>

#include "partitioner/interp/interp_private.h"

gboolean
ip_is_elementwise (PsOpcode op)
{
  switch (op)
    {
    case PS_OP_ABS: case PS_OP_ADD: case PS_OP_AND: case PS_OP_ATAN2: case PS_OP_CBRT:
    case PS_OP_CEIL: case PS_OP_CLAMP: case PS_OP_CLZ: case PS_OP_COMPARE:
    case PS_OP_COMPLEX: case PS_OP_CONVERT: case PS_OP_COSINE: case PS_OP_DIVIDE:
    case PS_OP_ERF: case PS_OP_EXP: case PS_OP_EXPM1: case PS_OP_FLOOR: case PS_OP_IMAG:
    case PS_OP_IS_FINITE: case PS_OP_LOG: case PS_OP_LOG1P: case PS_OP_LOGISTIC:
    case PS_OP_MAXIMUM: case PS_OP_MINIMUM: case PS_OP_MULTIPLY: case PS_OP_NEGATE:
    case PS_OP_NOT: case PS_OP_OR: case PS_OP_POPCNT: case PS_OP_POWER: case PS_OP_REAL:
    case PS_OP_REDUCE_PRECISION: case PS_OP_REMAINDER: case PS_OP_ROUND_NEAREST_AFZ:
    case PS_OP_ROUND_NEAREST_EVEN: case PS_OP_RSQRT: case PS_OP_SELECT:
    case PS_OP_SHIFT_LEFT: case PS_OP_SHIFT_RIGHT_ARITHMETIC:
    case PS_OP_SHIFT_RIGHT_LOGICAL: case PS_OP_SIGN: case PS_OP_SINE: case PS_OP_SQRT:
    case PS_OP_STOCHASTIC_CONVERT: case PS_OP_SUBTRACT: case PS_OP_TAN: case PS_OP_TANH:
    case PS_OP_XOR:
      return TRUE;
    default:
      return FALSE;
    }
}

static int
bit_width (PsElemType t)
{
  switch (t)
    {
    case PS_PRED: return 1;
    case PS_S8: case PS_U8: return 8;
    case PS_S16: case PS_U16: return 16;
    case PS_S32: case PS_U32: return 32;
    default: return 64;
    }
}

/* Integers wrap to their width (two's complement), as XLA's do. */
static int64_t
wrap (PsElemType t, uint64_t v)
{
  switch (t)
    {
    case PS_PRED: return v != 0;
    case PS_S8: return (int8_t) (uint8_t) v;
    case PS_S16: return (int16_t) (uint16_t) v;
    case PS_S32: return (int32_t) (uint32_t) v;
    case PS_U8: return (uint8_t) v;
    case PS_U16: return (uint16_t) v;
    case PS_U32: return (uint32_t) v;
    default: return (int64_t) v;
    }
}

static gboolean
is_unsigned (PsElemType t)
{
  return t == PS_U8 || t == PS_U16 || t == PS_U32 || t == PS_U64 || t == PS_PRED;
}

static int
int_cmp (PsElemType t, int64_t x, int64_t y)
{
  if (t == PS_U64)
    return (uint64_t) x < (uint64_t) y ? -1 : (uint64_t) x > (uint64_t) y;
  return x < y ? -1 : x > y;
}

static int64_t
int_pow (int64_t x, int64_t y)
{
  if (y < 0)
    return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
  uint64_t r = 1, b = (uint64_t) x;
  while (y)
    {
      if (y & 1)
        r *= b;
      b *= b;
      y >>= 1;
    }
  return (int64_t) r;
}

static double
float_binary (PsOpcode op, double x, double y)
{
  switch (op)
    {
    case PS_OP_ADD: return x + y;
    case PS_OP_SUBTRACT: return x - y;
    case PS_OP_MULTIPLY: return x * y;
    case PS_OP_DIVIDE: return x / y;
    case PS_OP_REMAINDER: return fmod (x, y);
    case PS_OP_MAXIMUM: return (isnan (x) || isnan (y)) ? NAN : (x > y || (x == y && !signbit (x))) ? x : y;
    case PS_OP_MINIMUM: return (isnan (x) || isnan (y)) ? NAN : (x < y || (x == y && signbit (x))) ? x : y;
    case PS_OP_POWER: return pow (x, y);
    case PS_OP_ATAN2: return atan2 (x, y);
    default: return NAN;
    }
}

static int64_t
int_binary (PsOpcode op, PsElemType t, int64_t x, int64_t y)
{
  uint64_t ux = (uint64_t) x, uy = (uint64_t) y;
  int w = bit_width (t);
  switch (op)
    {
    case PS_OP_ADD: return wrap (t, ux + uy);
    case PS_OP_SUBTRACT: return wrap (t, ux - uy);
    case PS_OP_MULTIPLY: return wrap (t, ux * uy);
    case PS_OP_DIVIDE:
      /* XLA: x / 0 is -1 (all bits set); INT_MIN / -1 is INT_MIN. */
      if (y == 0)
        return wrap (t, UINT64_MAX);
      if (t == PS_U64)
        return (int64_t) (ux / uy);
      if (y == -1)
        return wrap (t, 0 - ux);
      return wrap (t, (uint64_t) (x / y));
    case PS_OP_REMAINDER:
      if (y == 0)
        return x;
      if (t == PS_U64)
        return (int64_t) (ux % uy);
      if (y == -1)
        return 0;
      return wrap (t, (uint64_t) (x % y));
    case PS_OP_MAXIMUM: return int_cmp (t, x, y) >= 0 ? x : y;
    case PS_OP_MINIMUM: return int_cmp (t, x, y) <= 0 ? x : y;
    case PS_OP_AND: return wrap (t, ux & uy);
    case PS_OP_OR: return wrap (t, ux | uy);
    case PS_OP_XOR: return wrap (t, ux ^ uy);
    case PS_OP_POWER: return wrap (t, (uint64_t) int_pow (x, y));
    case PS_OP_SHIFT_LEFT:
      if (!is_unsigned (t) ? (y < 0 || y >= w) : (uy >= (uint64_t) w))
        return 0;
      return wrap (t, ux << uy);
    case PS_OP_SHIFT_RIGHT_LOGICAL:
      {
        uint64_t mask = w == 64 ? UINT64_MAX : ((1ULL << w) - 1);
        if (!is_unsigned (t) ? (y < 0 || y >= w) : (uy >= (uint64_t) w))
          return 0;
        return wrap (t, (ux & mask) >> uy);
      }
    case PS_OP_SHIFT_RIGHT_ARITHMETIC:
      {
        /* The value as a signed number of the type's width. */
        int64_t sx = w == 64 ? x : (int64_t) (ux << (64 - w)) >> (64 - w);
        if (!is_unsigned (t) ? (y < 0 || y >= w) : (uy >= (uint64_t) w))
          return wrap (t, sx < 0 ? UINT64_MAX : 0);
        return wrap (t, (uint64_t) (sx >> uy));
      }
    default: return 0;
    }
}

void
ip_binary_elem (PsOpcode op, PsElemType t, const PsValue *a, int64_t ai, const PsValue *b,
                int64_t bi, PsValue *out, int64_t oi)
{
  if (a->f)
    out->f[oi] = ps_etype_round (t, float_binary (op, a->f[ai], b->f[bi]));
  else if (a->i)
    out->i[oi] = int_binary (op, t, a->i[ai], b->i[bi]);
  else if (a->c)
    {
      double ar = a->c[2 * ai], aim = a->c[2 * ai + 1];
      double br = b->c[2 * bi], bim = b->c[2 * bi + 1];
      double r = NAN, im = NAN;
      switch (op)
        {
        case PS_OP_ADD: r = ar + br; im = aim + bim; break;
        case PS_OP_SUBTRACT: r = ar - br; im = aim - bim; break;
        case PS_OP_MULTIPLY: r = ar * br - aim * bim; im = ar * bim + aim * br; break;
        case PS_OP_DIVIDE:
          {
            double den = br * br + bim * bim;
            r = (ar * br + aim * bim) / den;
            im = (aim * br - ar * bim) / den;
            break;
          }
        default: break;
        }
      out->c[2 * oi] = ps_etype_round (t, r);
      out->c[2 * oi + 1] = ps_etype_round (t, im);
    }
}

/* Total order of floats (-NaN < -inf < ... < -0 < +0 < ... < inf < NaN)
 * as an integer key, for compare type=TOTALORDER. */
static int64_t
total_order_key (double x)
{
  int64_t k;
  memcpy (&k, &x, 8);
  return k < 0 ? (int64_t) (INT64_MIN - (uint64_t) k) - 1 : k;
}

static gboolean
compare_elem (PsCompareDir dir, gboolean total, const PsValue *a, int64_t ai, const PsValue *b,
              int64_t bi)
{
  int c;
  if (a->f)
    {
      double x = a->f[ai], y = b->f[bi];
      if (total)
        {
          int64_t kx = total_order_key (x), ky = total_order_key (y);
          c = kx < ky ? -1 : kx > ky;
        }
      else
        {
          if (isnan (x) || isnan (y))
            return dir == PS_CMP_NE;
          c = x < y ? -1 : x > y;
        }
    }
  else if (a->i)
    c = int_cmp (a->shape->etype, a->i[ai], b->i[bi]);
  else if (a->c)
    c = (a->c[2 * ai] == b->c[2 * bi] && a->c[2 * ai + 1] == b->c[2 * bi + 1]) ? 0 : 2;
  else
    return FALSE;
  switch (dir)
    {
    case PS_CMP_EQ: return c == 0;
    case PS_CMP_NE: return c != 0;
    case PS_CMP_LT: return c == -1;
    case PS_CMP_LE: return c == -1 || c == 0;
    case PS_CMP_GT: return c == 1;
    case PS_CMP_GE: return c == 1 || c == 0;
    default: return FALSE;
    }
}

static double
float_unary (PsOpcode op, double x)
{
  switch (op)
    {
    case PS_OP_ABS: return fabs (x);
    case PS_OP_NEGATE: return -x;
    case PS_OP_EXP: return exp (x);
    case PS_OP_EXPM1: return expm1 (x);
    case PS_OP_LOG: return log (x);
    case PS_OP_LOG1P: return log1p (x);
    case PS_OP_SQRT: return sqrt (x);
    case PS_OP_RSQRT: return 1.0 / sqrt (x);
    case PS_OP_CBRT: return cbrt (x);
    case PS_OP_SINE: return sin (x);
    case PS_OP_COSINE: return cos (x);
    case PS_OP_TAN: return tan (x);
    case PS_OP_TANH: return tanh (x);
    case PS_OP_LOGISTIC: return 1.0 / (1.0 + exp (-x));
    case PS_OP_FLOOR: return floor (x);
    case PS_OP_CEIL: return ceil (x);
    case PS_OP_ROUND_NEAREST_AFZ: return round (x);
    case PS_OP_ROUND_NEAREST_EVEN: return nearbyint (x);
    case PS_OP_SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;
    case PS_OP_ERF: return erf (x);
    default: return NAN;
    }
}

static int64_t
int_unary (PsOpcode op, PsElemType t, int64_t x)
{
  int w = bit_width (t);
  uint64_t mask = w == 64 ? UINT64_MAX : ((1ULL << w) - 1);
  switch (op)
    {
    case PS_OP_ABS: return is_unsigned (t) ? x : wrap (t, x < 0 ? 0 - (uint64_t) x : (uint64_t) x);
    case PS_OP_NEGATE: return wrap (t, 0 - (uint64_t) x);
    case PS_OP_NOT: return t == PS_PRED ? !x : wrap (t, ~(uint64_t) x);
    case PS_OP_SIGN: return is_unsigned (t) ? x != 0 : (x > 0) - (x < 0);
    case PS_OP_POPCNT: return __builtin_popcountll ((uint64_t) x & mask);
    case PS_OP_CLZ:
      {
        uint64_t v = (uint64_t) x & mask;
        return v == 0 ? w : __builtin_clzll (v) - (64 - w);
      }
    default: return x;
    }
}

static int64_t
convert_int_to_int (PsElemType to, const PsValue *src, int64_t i)
{
  return wrap (to, (uint64_t) src->i[i]);
}

static void
convert_elem (PsValue *out, int64_t oi, const PsValue *src, int64_t si)
{
  PsElemType to = out->shape->etype, from = src->shape->etype;
  if (out->i && src->i)
    out->i[oi] = to == PS_PRED ? src->i[si] != 0 : convert_int_to_int (to, src, si);
  else if (out->c)
    {
      double re = src->c ? src->c[2 * si] : ps_value_get (src, si);
      double im = src->c ? src->c[2 * si + 1] : 0;
      out->c[2 * oi] = ps_etype_round (to, re);
      out->c[2 * oi + 1] = ps_etype_round (to, im);
    }
  else if (out->f && src->i && (from == PS_S64 || from == PS_U64) && to != PS_F64)
    {
      /* Round the 64-bit integer to f32 directly, not via double, so the
       * result is correctly rounded. */
      float x = from == PS_U64 ? (float) (uint64_t) src->i[si] : (float) src->i[si];
      out->f[oi] = ps_etype_round (to, x);
    }
  else
    ps_value_set (out, oi, ps_value_get (src, si));
}

/* stochastic-convert of one float x with random bits `random` of x's
 * width to the signed integer type t, as XLA's evaluator does it
 * (StochasticConvertOp in xla/hlo/evaluator/hlo_evaluator.cc): infinities
 * and out-of-range values saturate, NaN gives 0, and |x| rounds up when
 * its fraction, as a fixed-point number of `bits` bits, exceeds the
 * random bits (so it rounds up with probability equal to the fraction).
 * The fraction of a binary float is exact in double, as in the float's
 * own type. The bounds are compared as the float type holds them
 * (f32(2^31 - 1) is 2^31), which is what XLA's cast does. */
static int64_t
stochastic_convert_elem (PsElemType ft, double x, uint64_t random, int bits, PsElemType t)
{
  int64_t lo;
  uint64_t hi_u;
  ps_etype_int_range (t, &lo, &hi_u);
  int64_t hi = (int64_t) hi_u;
  gboolean neg = signbit (x) != 0;
  if (isinf (x))
    return neg ? lo : hi;
  if (isnan (x))
    return 0;
  if (x >= ps_etype_round (ft, (double) hi))
    return hi;
  if (x <= ps_etype_round (ft, (double) lo))
    return lo;
  x = fabs (x);
  int64_t trunc = (int64_t) x;
  double frac = x - (double) trunc;
  if (frac != 0)
    {
      double fixed = ldexp (frac, bits);
      uint64_t fixed_frac = fixed >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t) fixed;
      if (random < fixed_frac)
        {
          if (trunc == hi)
            return lo;
          trunc++;
        }
    }
  return neg ? -trunc : trunc;
}

/* reduce-precision to (exponent_bits, mantissa_bits), as XLA defines it:
 * round the mantissa to nearest even, then flush values out of the exponent
 * range to zero or infinity. */
static double
reduce_precision (double x, int ebits, int mbits)
{
  if (isnan (x) || isinf (x))
    return x;
  if (mbits < 52)
    {
      int e;
      double m = frexp (x, &e); /* x = m * 2^e, 0.5 <= |m| < 1 */
      double scaled = ldexp (m, mbits + 1);
      double r = nearbyint (scaled);
      x = ldexp (r, e - mbits - 1);
    }
  if (ebits < 11 && x != 0)
    {
      int max_exp = (1 << (ebits - 1)) - 1;
      int min_exp = 1 - max_exp;
      int e;
      frexp (x, &e);
      e -= 1; /* x = 1.m * 2^e */
      if (e > max_exp)
        return copysign (INFINITY, x);
      if (e < min_exp)
        return copysign (0.0, x);
    }
  return x;
}

PsValue *
ip_elementwise (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  (void) ctx;
  if (ins->shape->etype == PS_TUPLE)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "elementwise op with a tuple shape");
      return NULL;
    }
  PsValue *out = ps_value_new (ins->shape);
  if (!ip_elementwise_into (ins, ops, out, error))
    {
      ps_value_free (out);
      return NULL;
    }
  return out;
}

gboolean
ip_elementwise_into (const PsInstr *ins, PsValue **ops, PsValue *out, GError **error)
{
  int no = ins->n_operands;
  PsOpcode op = ins->opcode;
  int want = (op == PS_OP_SELECT || op == PS_OP_CLAMP) ? 3
             : (op == PS_OP_ABS || op == PS_OP_CBRT || op == PS_OP_CEIL || op == PS_OP_CLZ
                || op == PS_OP_CONVERT || op == PS_OP_COSINE || op == PS_OP_ERF
                || op == PS_OP_EXP || op == PS_OP_EXPM1 || op == PS_OP_FLOOR
                || op == PS_OP_IMAG || op == PS_OP_IS_FINITE || op == PS_OP_LOG
                || op == PS_OP_LOG1P || op == PS_OP_LOGISTIC || op == PS_OP_NEGATE
                || op == PS_OP_NOT || op == PS_OP_POPCNT || op == PS_OP_REAL
                || op == PS_OP_REDUCE_PRECISION || op == PS_OP_ROUND_NEAREST_AFZ
                || op == PS_OP_ROUND_NEAREST_EVEN || op == PS_OP_RSQRT || op == PS_OP_SIGN
                || op == PS_OP_SINE || op == PS_OP_SQRT || op == PS_OP_TAN
                || op == PS_OP_TANH) ? 1 : 2;
  if (no != want)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "expects %d operands, has %d", want, no);
      return FALSE;
    }
  int64_t n = out->n;
  /* Operands must match the result's element count; a scalar operand is
   * broadcast (select's predicate and clamp's bounds may be scalars). */
  for (int k = 0; k < no; k++)
    if (ops[k]->shape->etype == PS_TUPLE || (ops[k]->n != n && ops[k]->n != 1))
      {
        ip_fail (error, PS_ERROR_INVALID, ins, "operand %d has %" G_GINT64_FORMAT
                 " elements, the result %" G_GINT64_FORMAT, k, ops[k]->n, n);
        return FALSE;
      }
  const PsValue *a = ops[0], *b = no > 1 ? ops[1] : NULL, *c = no > 2 ? ops[2] : NULL;
#define IX(v, e) ((v)->n == 1 ? 0 : (e))
  PsElemType t = out->shape->etype;
  if (n == 0)
    return TRUE;
  switch (op)
    {
    case PS_OP_SELECT:
      if (a->shape->etype != PS_PRED || b->shape->etype != t || c->shape->etype != t)
        goto bad_types;
      for (int64_t e = 0; e < n; e++)
        ps_value_copy_elem (out, e, a->i[IX (a, e)] ? b : c, a->i[IX (a, e)] ? IX (b, e) : IX (c, e));
      break;
    case PS_OP_CLAMP:
      if (b->shape->etype != t || a->shape->etype != t || c->shape->etype != t || out->c)
        goto bad_types;
      for (int64_t e = 0; e < n; e++)
        {
          ip_binary_elem (PS_OP_MAXIMUM, t, b, IX (b, e), a, IX (a, e), out, e);
          ip_binary_elem (PS_OP_MINIMUM, t, out, e, c, IX (c, e), out, e);
        }
      break;
    case PS_OP_COMPARE:
      if (a->shape->etype != b->shape->etype || t != PS_PRED)
        goto bad_types;
      {
        gboolean total = ins->compare_type && strcmp (ins->compare_type, "TOTALORDER") == 0;
        for (int64_t e = 0; e < n; e++)
          out->i[e] = compare_elem (ins->comparison, total, a, IX (a, e), b, IX (b, e));
      }
      break;
    case PS_OP_CONVERT:
      for (int64_t e = 0; e < n; e++)
        convert_elem (out, e, a, IX (a, e));
      break;
    case PS_OP_STOCHASTIC_CONVERT:
      if (!a->f || !b->i || !out->i || !ps_etype_is_signed (t))
        {
          /* XLA's evaluator converts to signed integers only */
          ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "stochastic-convert from %s to %s is not supported "
                   "(XLA's evaluator converts floats to signed integers only)",
                   ps_etype_name (a->shape->etype), ps_etype_name (t));
          return FALSE;
        }
      {
        int bits = ps_etype_bits (a->shape->etype);
        for (int64_t e = 0; e < n; e++)
          {
            uint64_t rb = (uint64_t) b->i[IX (b, e)];
            if (bits < 64)
              rb &= (UINT64_C (1) << bits) - 1;
            out->i[e] = stochastic_convert_elem (a->shape->etype, a->f[IX (a, e)], rb, bits, t);
          }
      }
      break;
    case PS_OP_COMPLEX:
      if (!out->c || !a->f || !b->f)
        goto bad_types;
      for (int64_t e = 0; e < n; e++)
        {
          out->c[2 * e] = ps_etype_round (t, a->f[IX (a, e)]);
          out->c[2 * e + 1] = ps_etype_round (t, b->f[IX (b, e)]);
        }
      break;
    case PS_OP_REAL:
    case PS_OP_IMAG:
      if (a->c && out->f)
        for (int64_t e = 0; e < n; e++)
          out->f[e] = ps_etype_round (t, a->c[2 * IX (a, e) + (op == PS_OP_IMAG)]);
      else if (a->f && out->f)
        for (int64_t e = 0; e < n; e++)
          out->f[e] = op == PS_OP_REAL ? a->f[IX (a, e)] : 0;
      else
        goto bad_types;
      break;
    case PS_OP_IS_FINITE:
      if (!a->f || !out->i)
        goto bad_types;
      for (int64_t e = 0; e < n; e++)
        out->i[e] = isfinite (a->f[IX (a, e)]);
      break;
    case PS_OP_REDUCE_PRECISION:
      {
        const char *es = ps_instr_get_raw_attr (ins, "exponent_bits");
        const char *ms = ps_instr_get_raw_attr (ins, "mantissa_bits");
        if (!a->f || !out->f || !es || !ms)
          goto bad_types;
        int eb = atoi (es), mb = atoi (ms);
        if (eb < 1 || mb < 0)
          goto bad_types;
        for (int64_t e = 0; e < n; e++)
          out->f[e] = ps_etype_round (t, reduce_precision (a->f[IX (a, e)], eb, mb));
        break;
      }
    default:
      if (no == 1)
        {
          if (a->shape->etype != t && !(a->c && op == PS_OP_ABS))
            goto bad_types;
          if (a->f)
            {
              if (op == PS_OP_NOT || op == PS_OP_POPCNT || op == PS_OP_CLZ)
                goto bad_types;
              for (int64_t e = 0; e < n; e++)
                out->f[e] = ps_etype_round (t, float_unary (op, a->f[IX (a, e)]));
            }
          else if (a->i)
            {
              switch (op)
                {
                case PS_OP_ABS: case PS_OP_NEGATE: case PS_OP_NOT: case PS_OP_SIGN:
                case PS_OP_POPCNT: case PS_OP_CLZ:
                  break;
                default:
                  goto bad_types;
                }
              for (int64_t e = 0; e < n; e++)
                out->i[e] = int_unary (op, t, a->i[IX (a, e)]);
            }
          else if (a->c && op == PS_OP_NEGATE)
            for (int64_t e = 0; e < 2 * n; e++)
              out->c[e] = -a->c[e % 2 + 2 * IX (a, e / 2)];
          else if (a->c && op == PS_OP_ABS && out->f)
            for (int64_t e = 0; e < n; e++)
              out->f[e] = ps_etype_round (t, hypot (a->c[2 * IX (a, e)], a->c[2 * IX (a, e) + 1]));
          else
            goto bad_types;
        }
      else
        {
          if (a->shape->etype != t || b->shape->etype != t)
            goto bad_types;
          if (a->f && (op == PS_OP_AND || op == PS_OP_OR || op == PS_OP_XOR
                       || op == PS_OP_SHIFT_LEFT || op == PS_OP_SHIFT_RIGHT_ARITHMETIC
                       || op == PS_OP_SHIFT_RIGHT_LOGICAL))
            goto bad_types;
          if (a->c && op != PS_OP_ADD && op != PS_OP_SUBTRACT && op != PS_OP_MULTIPLY
              && op != PS_OP_DIVIDE)
            goto bad_types;
          for (int64_t e = 0; e < n; e++)
            ip_binary_elem (op, t, a, IX (a, e), b, IX (b, e), out, e);
        }
      break;
    }
#undef IX
  return TRUE;

bad_types:
  {
    char *sa = ps_shape_to_string (a->shape, FALSE);
    ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "not supported on operand type %s (result %s)",
             sa, ps_etype_name (t));
    g_free (sa);
    return FALSE;
  }
}

/* ---- reducers: a binary scalar computation, fast when it is one op ---------- */

void
ip_reducer_init (IpReducer *r, IpCtx *ctx, const PsComputation *c, int64_t device,
                 PsElemType t)
{
  memset (r, 0, sizeof *r);
  r->ctx = ctx;
  r->comp = c;
  r->device = device;
  r->fast_op = PS_OP_COUNT;
  const PsInstr *root = c ? c->root : NULL;
  if (root && root->n_operands == 2 && c->params->len == 2 && root->shape->rank == 0
      && root->shape->etype == t)
    {
      const PsInstr *a = root->operands[0], *b = root->operands[1];
      gboolean params = a->opcode == PS_OP_PARAMETER && b->opcode == PS_OP_PARAMETER
                        && a != b && a->shape->etype == t && b->shape->etype == t;
      switch (root->opcode)
        {
        case PS_OP_ADD: case PS_OP_MULTIPLY: case PS_OP_MAXIMUM: case PS_OP_MINIMUM:
        case PS_OP_AND: case PS_OP_OR: case PS_OP_XOR:
          if (params)
            {
              r->fast_op = root->opcode;
              r->swapped = a->parameter_number == 1;
            }
          break;
        default:
          break;
        }
    }
  if (r->fast_op == PS_OP_COUNT && c)
    {
      PsShape *s = ps_shape_new_scalar (t);
      r->a = ps_value_new (s);
      r->b = ps_value_new (s);
      ps_shape_free (s);
    }
}

void
ip_reducer_clear (IpReducer *r)
{
  g_clear_pointer (&r->a, ps_value_free);
  g_clear_pointer (&r->b, ps_value_free);
}

gboolean
ip_reducer_apply (IpReducer *r, const PsValue *a, int64_t ai, const PsValue *b, int64_t bi,
                  PsValue *out, int64_t oi, GError **error)
{
  if (r->fast_op != PS_OP_COUNT)
    {
      /* Commutative ops, but keep operand order for NaN payload determinism. */
      if (r->swapped)
        ip_binary_elem (r->fast_op, out->shape->etype, b, bi, a, ai, out, oi);
      else
        ip_binary_elem (r->fast_op, out->shape->etype, a, ai, b, bi, out, oi);
      return TRUE;
    }
  if (!r->comp)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "interpreter: reduction without a computation");
      return FALSE;
    }
  ps_value_copy_elem (r->a, 0, a, ai);
  ps_value_copy_elem (r->b, 0, b, bi);
  PsValue *args[2] = { r->a, r->b };
  if (!ip_charge (r->ctx, r->comp->root, r->comp->instrs->len, error))
    return FALSE;
  PsValue *owned = NULL;
  const PsValue *res = ip_call_fast (r->ctx, r->comp, r->device, 2, args, &owned, error);
  if (!res)
    return FALSE;
  if (res->shape->etype == PS_TUPLE || res->n != 1 || res->shape->etype != out->shape->etype)
    {
      ps_value_free (owned);
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                   "interpreter: reducer %s must return a scalar of the reduced type", r->comp->name);
      return FALSE;
    }
  ps_value_copy_elem (out, oi, res, 0);
  ps_value_free (owned);
  return TRUE;
}

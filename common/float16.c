/* 16-bit float conversions: see float16.h. */
#include "config.h"

#include <math.h>

#include "common/float16.h"

#include <string.h>

static uint32_t
f32_bits (float x)
{
  uint32_t u;
  memcpy (&u, &x, 4);
  return u;
}

static float
bits_f32 (uint32_t u)
{
  float x;
  memcpy (&x, &u, 4);
  return x;
}

uint16_t
ps_f32_to_bf16 (float x)
{
  uint32_t u = f32_bits (x);
  uint16_t sign = (uint16_t) ((u >> 16) & 0x8000u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return sign | 0x7fc0u;
  /* Round to nearest even: add 0x7fff plus the lowest kept bit; a carry into
   * the exponent rounds up to the next binade or to infinity, as it should. */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t) (u >> 16);
}

float
ps_bf16_to_f32 (uint16_t bits)
{
  return bits_f32 ((uint32_t) bits << 16);
}

uint16_t
ps_f32_to_f16 (float x)
{
  uint32_t u = f32_bits (x);
  uint16_t sign = (uint16_t) ((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return sign | 0x7e00u;
  if (a >= 0x47800000u) /* >= 65536 (and infinity): overflows before rounding */
    return sign | 0x7c00u;
  if (a < 0x33000000u) /* < 2^-25: rounds to zero */
    return sign;
  int exp = (int) (a >> 23) - 127;
  uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  int shift; /* low bits of the 24-bit significand that are dropped */
  uint32_t base_exp;
  if (exp < -14)
    {
      shift = 13 + (-14 - exp);
      base_exp = 0;
    }
  else
    {
      shift = 13;
      base_exp = (uint32_t) (exp + 15);
    }
  uint32_t kept = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (kept & 1u)))
    kept++;
  uint32_t out;
  if (base_exp == 0)
    out = kept; /* subnormal; a carry into bit 10 gives the smallest normal */
  else
    out = (base_exp << 10) + (kept - 0x400u); /* a carry bumps the exponent */
  if (out >= 0x7c00u)
    out = 0x7c00u;
  return sign | (uint16_t) out;
}

float
ps_f16_to_f32 (uint16_t bits)
{
  uint32_t sign = (uint32_t) (bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  if (exp == 0)
    {
      /* Zero or subnormal: mant * 2^-24, exact in f32. */
      float v = (float) mant / 16777216.0f;
      return sign ? -v : v;
    }
  if (exp == 31) /* infinity or NaN, payload kept */
    return bits_f32 (sign | 0x7f800000u | (mant << 13));
  return bits_f32 (sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

/* ---- 8-bit and narrower floats ------------------------------------------- */

/* Magnitude bits (exponent and mantissa) of a format. */
static int
mf_mag_bits (const PsMinifloat *f)
{
  return f->ebits + f->mbits;
}

static uint8_t
mf_nan_code (const PsMinifloat *f)
{
  int nb = mf_mag_bits (f);
  switch (f->kind)
    {
    case PS_MF_IEEE: /* a quiet NaN: top exponent, first mantissa bit set */
      return (uint8_t) ((((1 << f->ebits) - 1) << f->mbits) | (1 << (f->mbits - 1)));
    case PS_MF_FN: return (uint8_t) ((1 << nb) - 1);
    case PS_MF_FNUZ: return (uint8_t) (1 << nb); /* the negative zero's code */
    case PS_MF_FINITE: return (uint8_t) (1 << nb); /* ml_dtypes' quiet_NaN(): -0 */
    case PS_MF_UNSIGNED: return (uint8_t) ((1 << nb) - 1);
    }
  return 0;
}

/* The largest code of a finite positive value. */
static int
mf_max_code (const PsMinifloat *f)
{
  int all = (1 << mf_mag_bits (f)) - 1;
  switch (f->kind)
    {
    case PS_MF_IEEE: return (((1 << f->ebits) - 1) << f->mbits) - 1;
    case PS_MF_FN: return all - 1;
    case PS_MF_FNUZ: case PS_MF_FINITE: return all;
    case PS_MF_UNSIGNED: return all - 1;
    }
  return all;
}

float
ps_minifloat_decode (const PsMinifloat *f, uint8_t bits)
{
  int nb = mf_mag_bits (f);
  int mag = bits & ((1 << nb) - 1);
  int sign = f->kind != PS_MF_UNSIGNED && ((bits >> nb) & 1);
  int e = mag >> f->mbits, m = mag & ((1 << f->mbits) - 1);
  int emax = (1 << f->ebits) - 1;
  if (f->kind == PS_MF_IEEE && e == emax)
    return m == 0 ? (sign ? -INFINITY : INFINITY) : NAN;
  if (f->kind == PS_MF_FN && mag == (1 << nb) - 1)
    return NAN;
  if (f->kind == PS_MF_FNUZ && sign && mag == 0)
    return NAN;
  if (f->kind == PS_MF_UNSIGNED)
    return mag == (1 << nb) - 1 ? NAN : ldexpf (1.0f, e - f->bias); /* no zero */
  float v;
  if (e == 0)
    v = ldexpf ((float) m / (float) (1 << f->mbits), 1 - f->bias);
  else
    v = ldexpf (1.0f + (float) m / (float) (1 << f->mbits), e - f->bias);
  return sign ? -v : v;
}

/* Nearest code, ties to the even code (the one whose last bit is 0). The
 * positive finite codes grow with their bit pattern, so a scan up to the
 * largest finite one finds the two neighbours of |x|. */
uint8_t
ps_minifloat_encode (const PsMinifloat *f, float x)
{
  int nb = mf_mag_bits (f);
  uint8_t nan = mf_nan_code (f);
  if (isnan (x))
    return f->kind == PS_MF_IEEE || f->kind == PS_MF_FN ? (uint8_t) (nan | (signbit (x) ? 1 << nb : 0)) : nan;
  if (f->kind == PS_MF_UNSIGNED && (x < 0 || x == 0))
    return nan; /* neither a sign nor a zero (ml_dtypes: negation gives NaN) */
  uint8_t sign = f->kind != PS_MF_UNSIGNED && signbit (x) ? (uint8_t) (1 << nb) : 0;
  float a = fabsf (x);
  int max_code = mf_max_code (f);
  float max = ps_minifloat_decode (f, (uint8_t) max_code);
  float below = ps_minifloat_decode (f, (uint8_t) (max_code - 1));
  if (a > max)
    {
      /* Rounding to nearest even carries past the largest finite value at
       * max + half its spacing (the largest code is odd). Past it: infinity
       * (IEEE), NaN (fn, fnuz, e8m0), the largest value for the MX types
       * without either (ml_dtypes' infinity() of float4_e2m1fn is max()). */
      float half = (max - below) / 2;
      if (a < max + half || f->kind == PS_MF_FINITE)
        return sign | (uint8_t) max_code;
      if (f->kind == PS_MF_IEEE)
        return sign | (uint8_t) (((1 << f->ebits) - 1) << f->mbits);
      return f->kind == PS_MF_FN ? (uint8_t) (sign | nan) : nan;
    }
  int lo = 0;
  while (lo < max_code && ps_minifloat_decode (f, (uint8_t) (lo + 1)) <= a)
    lo++;
  int pick = lo;
  if (lo < max_code)
    {
      float vlo = ps_minifloat_decode (f, (uint8_t) lo);
      float vhi = ps_minifloat_decode (f, (uint8_t) (lo + 1));
      if (a - vlo > vhi - a || (a - vlo == vhi - a && lo % 2 == 1))
        pick = lo + 1;
    }
  if (pick == 0 && f->kind == PS_MF_FNUZ)
    sign = 0; /* no negative zero: its code is NaN */
  return sign | (uint8_t) pick;
}

static const PsMinifloat f8e4m3fn_format = { 4, 3, 7, PS_MF_FN };
static const PsMinifloat f8e5m2_format = { 5, 2, 15, PS_MF_IEEE };

uint8_t
ps_f32_to_f8e4m3fn (float x)
{
  return ps_minifloat_encode (&f8e4m3fn_format, x);
}

float
ps_f8e4m3fn_to_f32 (uint8_t bits)
{
  return ps_minifloat_decode (&f8e4m3fn_format, bits);
}

uint8_t
ps_f32_to_f8e5m2 (float x)
{
  return ps_minifloat_encode (&f8e5m2_format, x);
}

float
ps_f8e5m2_to_f32 (uint8_t bits)
{
  return ps_minifloat_decode (&f8e5m2_format, bits);
}

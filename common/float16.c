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

/* ---- 8-bit floats ------------------------------------------------------------ */

/* The value of a code of a format with `mbits` mantissa bits and exponent
 * bias `bias`; `ieee`: the top exponent is infinity/NaN (f8e5m2), else only
 * the all-ones code is NaN (f8e4m3fn). */
static float
f8_decode (uint8_t bits, int mbits, int bias, gboolean ieee)
{
  int sign = bits >> 7, e = (bits >> mbits) & ((1 << (7 - mbits)) - 1), m = bits & ((1 << mbits) - 1);
  int emax = (1 << (7 - mbits)) - 1;
  float v;
  if (ieee && e == emax)
    v = m == 0 ? INFINITY : NAN;
  else if (!ieee && e == emax && m == (1 << mbits) - 1)
    v = NAN;
  else if (e == 0)
    v = ldexpf ((float) m / (float) (1 << mbits), 1 - bias);
  else
    v = ldexpf (1.0f + (float) m / (float) (1 << mbits), e - bias);
  return sign ? -v : v;
}

/* Nearest code, ties to the even code (the one whose mantissa's last bit is
 * 0). The positive finite codes grow with their bit pattern, so a scan up
 * to the largest finite one finds the two neighbours of |x|. */
static uint8_t
f8_encode (float x, int mbits, int bias, gboolean ieee)
{
  uint8_t sign = signbit (x) ? 0x80 : 0;
  uint8_t nan = ieee ? 0x7e : 0x7f, inf = ieee ? 0x7c : 0x7f;
  if (isnan (x))
    return sign | nan;
  float a = fabsf (x);
  int max_code = ieee ? 0x7b : 0x7e;
  float max = f8_decode ((uint8_t) max_code, mbits, bias, ieee);
  float below = f8_decode ((uint8_t) (max_code - 1), mbits, bias, ieee);
  if (a > max)
    {
      /* Rounding to nearest even carries past the largest finite value at
       * max + half its spacing (the largest code is odd). */
      float half = (max - below) / 2;
      return a >= max + half ? (sign | inf) : (sign | (uint8_t) max_code);
    }
  int lo = 0;
  while (lo < max_code && f8_decode ((uint8_t) (lo + 1), mbits, bias, ieee) <= a)
    lo++;
  if (lo == max_code)
    return sign | (uint8_t) lo;
  float vlo = f8_decode ((uint8_t) lo, mbits, bias, ieee);
  float vhi = f8_decode ((uint8_t) (lo + 1), mbits, bias, ieee);
  int pick = a - vlo < vhi - a ? lo : a - vlo > vhi - a ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return sign | (uint8_t) pick;
}

uint8_t
ps_f32_to_f8e4m3fn (float x)
{
  return f8_encode (x, 3, 7, FALSE);
}

float
ps_f8e4m3fn_to_f32 (uint8_t bits)
{
  return f8_decode (bits, 3, 7, FALSE);
}

uint8_t
ps_f32_to_f8e5m2 (float x)
{
  return f8_encode (x, 2, 15, TRUE);
}

float
ps_f8e5m2_to_f32 (uint8_t bits)
{
  return f8_decode (bits, 2, 15, TRUE);
}

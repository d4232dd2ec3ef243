/* 16-bit float conversions: see float16.h. */
#include "config.h"

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

/* The 16-bit float formats: IEEE binary16 (f16) and bfloat16 (bf16), as bit
 * patterns, converted to and from f32.
 *
 * Narrowing (f32 -> f16/bf16) rounds to nearest, ties to even; values past
 * the largest finite one become infinity (f16: from 65520 up; bf16: when
 * rounding carries into the exponent); f16 subnormals are produced exactly.
 * NaN: narrowing gives the canonical quiet NaN with the input's sign (f16
 * 0x7e00, bf16 0x7fc0, plus 0x8000 when negative), the payload is dropped,
 * as Eigen and ml_dtypes (what XLA's CPU runtime uses) do. Widening is exact
 * and keeps every bit, NaN payloads included.
 *
 * The 8-bit formats of OCP's FP8 specification as XLA names them (and
 * ml_dtypes implements them): f8e4m3fn (4 exponent bits, bias 7, 3
 * mantissa bits, no infinity, S.1111.111 is NaN, largest 448) and f8e5m2
 * (bias 15, 2 mantissa bits, IEEE-like with infinities, largest 57344).
 * Narrowing rounds to nearest, ties to even; past the largest finite value
 * (by more than half its spacing) f8e5m2 gives infinity and f8e4m3fn NaN,
 * as ml_dtypes' static_cast does; NaN gives the format's NaN with the sign.
 *
 * The same code reads and writes every narrow float format XLA has
 * (xla/xla_data.proto's PrimitiveType, as ml_dtypes' README and
 * include/float8.h and mxfloat.h define them), described by a PsMinifloat:
 * exponent and mantissa bits, bias, and how the format spends its special
 * codes (kind). Codes sit in the low bits of a byte, the sign (if any)
 * just above the magnitude.
 *
 * One copy for the whole tree (HLO literals, the builder's constants, the
 * interpreter, verification, the partitioner's constants).
 */
#ifndef PS_COMMON_FLOAT16_H
#define PS_COMMON_FLOAT16_H

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

typedef enum {
  PS_MF_IEEE,      /* top exponent: infinities and NaNs (f8e5m2, f8e4m3, f8e3m4) */
  PS_MF_FN,        /* no infinity, S.all-ones is NaN (f8e4m3fn) */
  PS_MF_FNUZ,      /* no infinity, no -0: its code 1000..0 is the NaN (..fnuz) */
  PS_MF_FINITE,    /* no infinity, no NaN; overflow saturates (f4e2m1fn) */
  PS_MF_UNSIGNED,  /* no sign, no mantissa, no zero, all-ones NaN (f8e8m0fnu) */
} PsMinifloatKind;

typedef struct {
  int ebits, mbits, bias;
  PsMinifloatKind kind;
} PsMinifloat;

float ps_minifloat_decode (const PsMinifloat *f, uint8_t bits);
/* Round to nearest even. Past the largest finite value (by at least half its
 * spacing): infinity, NaN, or (PS_MF_FINITE) the largest value; a NaN gives
 * the format's NaN; PS_MF_UNSIGNED gives NaN for zero and negatives (it has
 * neither) and its smallest value for a positive value below it. */
uint8_t ps_minifloat_encode (const PsMinifloat *f, float x);

uint16_t ps_f32_to_bf16 (float x);
float ps_bf16_to_f32 (uint16_t bits);
uint16_t ps_f32_to_f16 (float x);
float ps_f16_to_f32 (uint16_t bits);
uint8_t ps_f32_to_f8e4m3fn (float x);
float ps_f8e4m3fn_to_f32 (uint8_t bits);
uint8_t ps_f32_to_f8e5m2 (float x);
float ps_f8e5m2_to_f32 (uint8_t bits);

G_END_DECLS

#endif

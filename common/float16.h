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
 * One copy for the whole tree (HLO literals, the builder's constants, the
 * interpreter, verification, the partitioner's constants).
 */
#ifndef PS_COMMON_FLOAT16_H
#define PS_COMMON_FLOAT16_H

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

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

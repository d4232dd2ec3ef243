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

G_END_DECLS

#endif

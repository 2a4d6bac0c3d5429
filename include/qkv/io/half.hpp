// IEEE binary16 (F16) and bfloat16 (BF16) <-> binary32 conversions, bit-exact.
// Widening is exact for every value (subnormals, infinities, NaN payloads). Narrowing rounds to
// nearest, ties to even; values beyond the largest finite F16 (65504) round to infinity exactly where
// IEEE says (|x| >= 65520); NaN stays NaN (payload kept where it fits, never turned into infinity).
#pragma once
#include <cstdint>

namespace qkv::io {

float f16_to_float(std::uint16_t h);
std::uint16_t float_to_f16(float f);
float bf16_to_float(std::uint16_t b);
std::uint16_t float_to_bf16(float f);

}  // namespace qkv::io

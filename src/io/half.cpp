#include "qkv/io/half.hpp"

#include <bit>
#include <cmath>

namespace qkv::io {

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24, exact in binary32
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(mag) | sign);
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

std::uint16_t float_to_f16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: keep the top payload bits; never let it become infinity
    std::uint32_t m = (ax >> 13) & 0x3ffu;
    if (m == 0) m = 0x200u;
    return static_cast<std::uint16_t>(sign | 0x7c00u | m);
  }
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 (or inf) -> inf
  const std::uint32_t exp = ax >> 23;
  if (exp < 113) {  // below 2^-14: the result is subnormal (or zero) in binary16
    if (exp < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself is a tie -> even 0)
    const std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;  // value = m * 2^(exp-150)
    const std::uint32_t shift = 126 - exp;                 // units of 2^-24: m >> shift
    std::uint32_t k = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1);
    const std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (k & 1u))) ++k;
    return static_cast<std::uint16_t>(sign | k);
  }
  std::uint32_t h = ((exp - 112) << 10) | ((ax >> 13) & 0x3ffu);
  const std::uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry correctly bumps the exponent
  return static_cast<std::uint16_t>(sign | h);
}

float bf16_to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

std::uint16_t float_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate, but keep it a NaN
    std::uint16_t b = static_cast<std::uint16_t>(x >> 16);
    if ((b & 0x7fu) == 0) b |= 0x40u;
    return b;
  }
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);  // ties to even; overflow -> inf
  return static_cast<std::uint16_t>(rounded >> 16);
}

}  // namespace qkv::io

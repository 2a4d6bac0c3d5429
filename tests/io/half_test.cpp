#include "qkv/io/half.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace qkv::io {
namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Reference narrowing by search over the decoded (exact, monotonic) positive finite halves: the nearest
// one, ties to the even encoding; >= 65520 is infinity. Independent of float_to_f16's bit tricks.
uint16_t ref_f16(float f) {
  static const std::vector<double> vals = [] {
    std::vector<double> v;
    for (uint32_t h = 0; h <= 0x7bff; ++h) v.push_back(static_cast<double>(f16_to_float(static_cast<uint16_t>(h))));
    v.push_back(65536.0);  // where infinity sits for rounding purposes
    return v;
  }();
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  const auto up = std::upper_bound(vals.begin(), vals.end(), a);
  const auto lo = static_cast<uint16_t>(up - vals.begin() - 1);
  const double dlo = a - vals[lo], dhi = vals[lo + 1] - a;
  uint16_t h = lo;
  if (dhi < dlo || (dhi == dlo && (lo & 1))) h = lo + 1;
  return sign | h;
}

uint16_t ref_bf16(float f) {
  const uint32_t x = bits(f);
  const uint32_t lo = x & 0xffff0000u;  // truncation toward zero in magnitude
  const double a = std::fabs(static_cast<double>(f));
  const double vlo = std::fabs(static_cast<double>(std::bit_cast<float>(lo)));
  // the next bf16 up in magnitude; for the largest finite it is 2^128, where infinity rounds from
  const double vhi = (lo & 0x7fffffffu) == 0x7f7f0000u ? std::ldexp(1.0, 128)
                                                        : std::fabs(static_cast<double>(std::bit_cast<float>(lo + 0x10000u)));
  uint32_t r = lo;
  const double dlo = a - vlo, dhi = vhi - a;
  if (dhi < dlo || (dhi == dlo && ((lo >> 16) & 1))) r = lo + 0x10000u;
  return static_cast<uint16_t>(r >> 16);
}

TEST(Half, F16WideningIsExactAndRoundTripsEveryEncoding) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 31 && m != 0) {
      EXPECT_TRUE(std::isnan(f)) << h;
    } else {
      // value = (-1)^s * (e ? 1024 + m : m) * 2^(max(e,1) - 25)
      const double mag = std::ldexp(static_cast<double>(e ? 1024 + m : m), static_cast<int>(e ? e : 1) - 25);
      const double want = e == 31 ? std::numeric_limits<double>::infinity() : mag;
      EXPECT_EQ(static_cast<double>(f), (h & 0x8000) ? -want : want) << h;
    }
    EXPECT_EQ(float_to_f16(f), h) << "round trip of " << h;
  }
}

TEST(Half, F16NarrowingKnownValues) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16(0.1f), 0x2e66);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65519.996f), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // the tie rounds to even, which is infinity
  EXPECT_EQ(float_to_f16(1e9f), 0x7c00);
  EXPECT_EQ(float_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(float_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie -> even 2
  EXPECT_EQ(float_to_f16(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the smallest normal
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t qnan = float_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(qnan & 0x7c00, 0x7c00);
  EXPECT_NE(qnan & 0x03ff, 0);
  // A float NaN whose payload lies entirely in the low bits must stay NaN, not become infinity.
  const uint16_t low_nan = float_to_f16(std::bit_cast<float>(0x7f800001u));
  EXPECT_EQ(low_nan & 0x7c00, 0x7c00);
  EXPECT_NE(low_nan & 0x03ff, 0);
}

TEST(Half, F16NarrowingMatchesNearestEvenReference) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> any;
  int checked = 0;
  for (int i = 0; i < 400000; ++i) {
    // Half the draws are arbitrary bit patterns, half land in binary16's range where rounding happens.
    uint32_t x = any(rng);
    if (i % 2) x = (x & 0x807fffffu) | ((101u + x % 42u) << 23);
    const float f = std::bit_cast<float>(x);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_f16(f), ref_f16(f)) << "bits 0x" << std::hex << x;
    ++checked;
  }
  // Exact midpoints between consecutive halves (the ties), all of them.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double mid = (static_cast<double>(f16_to_float(static_cast<uint16_t>(h))) +
                        static_cast<double>(f16_to_float(static_cast<uint16_t>(h + 1)))) / 2;
    const auto f = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(f), mid);  // midpoints are exact in binary32
    ASSERT_EQ(float_to_f16(f), (h & 1) ? h + 1 : h) << h;
    ASSERT_EQ(float_to_f16(-f), ((h & 1) ? h + 1 : h) | 0x8000) << h;
    ++checked;
  }
  EXPECT_GT(checked, 200000);
}

TEST(Half, Bf16WideningRoundTripsEveryEncoding) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bf16_to_float(static_cast<uint16_t>(b));
    EXPECT_EQ(bits(f), b << 16);
    EXPECT_EQ(float_to_bf16(f), b) << b;
  }
}

TEST(Half, Bf16NarrowingKnownValuesAndReference) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(3.14159265f), 0x4049);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to infinity
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  const uint16_t nan = float_to_bf16(std::bit_cast<float>(0x7f800001u));
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
  std::mt19937 rng(777);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 400000; ++i) {
    const uint32_t x = any(rng);
    const float f = std::bit_cast<float>(x);
    if (std::isnan(f) || std::isinf(f)) continue;
    ASSERT_EQ(float_to_bf16(f), ref_bf16(f)) << "bits 0x" << std::hex << x;
  }
}

}  // namespace
}  // namespace qkv::io

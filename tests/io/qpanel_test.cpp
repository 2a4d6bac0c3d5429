// Panel expansion for the prefill (qkv/io/qpanel.hpp) on every path this CPU runs, against its slow twin
// dequantize_value: every type, odd sizes, row ranges that start and end anywhere, bit-identical values;
// and the errors it names.
#include "qkv/io/qpanel.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/flash.hpp"

namespace {

using qkv::FlashPath;
using qkv::io::GgmlType;

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                           GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1};

struct PathGuard {
  explicit PathGuard(FlashPath p) { qkv::flash_force_path(p); }
  ~PathGuard() { qkv::flash_force_path(FlashPath::Auto); }
};

TEST(QPanel, BitIdenticalToDequantizeValueOnEveryPath) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (GgmlType t : kTypes) {
    const int bs = int(qkv::io::ggml_type_traits(uint32_t(t))->block_size);
    for (int K : bs == 1 ? std::vector<int>{1, 7, 256, 300, 513} : std::vector<int>{bs, 3 * bs, 9 * bs}) {
      const int N = 13;
      std::vector<float> w(std::size_t(N) * K);
      for (auto& v : w) v = g(rng);
      const std::size_t rb = qkv::io::ggml_row_size(t, K);
      std::vector<unsigned char> q(rb * N);
      for (int n = 0; n < N; ++n)
        qkv::io::quantize_row(t, w.data() + std::size_t(n) * K, q.data() + rb * n, K);
      for (FlashPath p : {FlashPath::Portable, FlashPath::Avx2, FlashPath::Avx512, FlashPath::Neon}) {
        if (!qkv::flash_path_supported(p)) continue;
        PathGuard guard(p);
        // a 64-byte-aligned panel (decoded in place) and one a float off (through the tile)
        for (auto [r0, r1, shift] :
             {std::tuple{0, N, 0}, std::tuple{0, N, 1}, std::tuple{3, 4, 0}, std::tuple{5, 13, 1}}) {
          std::vector<float> buf(std::size_t(r1 - r0) * K + 17, -7.0f);
          float* out =
              buf.data() + (16 - (reinterpret_cast<std::uintptr_t>(buf.data()) % 64) / 4) % 16 + shift;
          qkv::io::dequantize_panel(t, q.data(), r0, r1, K, out);
          for (int r = r0; r < r1; ++r)
            for (int k = 0; k < K; ++k) {
              const float want = qkv::io::dequantize_value(t, q.data() + rb * r, k);
              const float got = out[std::size_t(r - r0) * K + k];
              ASSERT_EQ(0, std::memcmp(&want, &got, 4))
                  << qkv::io::ggml_type_name(t) << " path " << qkv::flash_path_name(p) << " K=" << K
                  << " row " << r << " k=" << k << ": " << got << " vs " << want;
            }
        }
      }
    }
  }
}

TEST(QPanel, NamesTheTypeOrTheBlocks) {
  std::vector<unsigned char> q(1024);
  std::vector<float> out(1024);
  try {
    qkv::io::dequantize_panel(GgmlType::Q4_K, q.data(), 0, 1, 100, out.data());
    FAIL() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not whole Q4_K blocks of 256"), std::string::npos) << e.what();
  }
}

}  // namespace

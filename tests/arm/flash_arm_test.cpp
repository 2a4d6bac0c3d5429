// The fused attention kernels on aarch64, without BLIS or GoogleTest: built by Debian's cross compiler
// and run under qemu-aarch64 (tests/arm/run.sh, a stage of scripts/test.sh). Every path this build can
// run (portable and NEON) is forced in turn and checked against the double reference over the shape
// grid of tests/core/flash_test.cpp (T = 1, odd T, dh not a multiple of the 4-lane vector), multi-head
// and grouped-query, forward and backward; the NEON exp against double exp. Exit 0 only if all pass.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/flash.hpp"

namespace {

int g_failures = 0, g_checks = 0;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(dist(rng));
  return v;
}

double max_abs(const std::vector<float>& x) {
  double m = 0.0;
  for (float e : x) m = std::max(m, std::abs(double(e)));
  return m;
}
double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return std::numeric_limits<double>::infinity();
    m = std::max(m, std::abs(double(a[i]) - b[i]));
  }
  return m;
}

// As check_case in tests/core/flash_test.cpp (same tolerances and the same bound for dq, dk).
void check_case(int H, int n_kv, int T, int dh, float scale, unsigned seed, const std::string& tag) {
  const double tol = 1e-5;
  const size_t n = size_t(H) * T * dh, nkv = size_t(n_kv) * T * dh;
  const auto q = randn(n, seed), k = randn(nkv, seed + 1), v = randn(nkv, seed + 2), dz = randn(n, seed + 3);
  std::vector<float> z(n), lse(size_t(H) * T), zr(n), lser(lse.size());
  qkv::flash_attention_forward_gqa(q.data(), k.data(), v.data(), z.data(), lse.data(), H, n_kv, T, dh, scale);
  qkv::flash_attention_forward_reference_gqa(q.data(), k.data(), v.data(), zr.data(), lser.data(), H, n_kv, T,
                                             dh, scale);
  expect(max_diff(z, zr) <= tol * std::max(1e-30, max_abs(zr)), tag + " z");
  double lse_err = 0.0;
  for (size_t i = 0; i < lse.size(); ++i)
    lse_err = std::max(lse_err, std::abs(double(lse[i]) - lser[i]) / std::max(1.0, std::abs(double(lser[i]))));
  expect(lse_err <= tol, tag + " lse");
  std::vector<float> dq(n, NAN), dk(nkv, NAN), dv(nkv, NAN), dqr(n), dkr(nkv), dvr(nkv);
  qkv::flash_attention_backward_gqa(q.data(), k.data(), v.data(), z.data(), lse.data(), dz.data(), dq.data(),
                                    dk.data(), dv.data(), H, n_kv, T, dh, scale);
  qkv::flash_attention_backward_reference_gqa(q.data(), k.data(), v.data(), zr.data(), lser.data(), dz.data(),
                                              dqr.data(), dkr.data(), dvr.data(), H, n_kv, T, dh, scale);
  double dz_n = 0.0, v_n = 0.0;
  for (size_t r = 0; r < n / dh; ++r) {
    double a = 0.0;
    for (int d = 0; d < dh; ++d) a += double(dz[r * dh + d]) * dz[r * dh + d];
    dz_n = std::max(dz_n, std::sqrt(a));
  }
  for (size_t r = 0; r < nkv / dh; ++r) {
    double b = 0.0;
    for (int d = 0; d < dh; ++d) b += double(v[r * dh + d]) * v[r * dh + d];
    v_n = std::max(v_n, std::sqrt(b));
  }
  const double dP = dz_n * v_n, bq = 2 * scale * dP * max_abs(k), bk = 2 * scale * dP * max_abs(q) * (H / n_kv);
  const double eq = max_diff(dq, dqr), ek = max_diff(dk, dkr);
  expect(eq <= tol * max_abs(dqr) || eq <= 0.1 * tol * bq, tag + " dq");
  expect(ek <= tol * max_abs(dkr) || ek <= 0.1 * tol * bk, tag + " dk");
  expect(max_diff(dv, dvr) <= tol * std::max(1e-30, max_abs(dvr)), tag + " dv");
}

void check_exp(const std::string& path) {
  std::vector<float> x, y;
  const int n = 1 << 18;
  for (int i = 0; i <= n; ++i) x.push_back(-87.3f + (87.3f + 1.0f) * float(i) / n);
  for (float c : {-0.34657359f, 0.34657359f, -10.744781f})
    for (float dir : {-1.0f, 1.0f}) {
      float t = c;
      for (int s = 0; s < 5000; ++s) x.push_back(t = std::nextafter(t, dir * 100.0f));
    }
  y.resize(x.size());
  if (!qkv::flash_detail::vexp(x.data(), y.data(), int(x.size()))) return;  // portable: no vector exp
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::exp(double(x[i]));
    worst = std::max(worst, std::abs(y[i] - e) / e);
  }
  expect(worst < 2e-7, path + " exp relative error " + std::to_string(worst));
  const float edge[5] = {-87.4f, -std::numeric_limits<float>::infinity(), std::nanf(""), 0.0f, -1000.0f};
  float out[5];
  qkv::flash_detail::vexp(edge, out, 5);
  expect(out[0] == 0.0f && out[1] == 0.0f && std::isnan(out[2]) && out[3] == 1.0f && out[4] == 0.0f,
         path + " exp edges");
}

}  // namespace

int main() {
  std::string ran, missing;
  for (qkv::FlashPath p : {qkv::FlashPath::Portable, qkv::FlashPath::Neon, qkv::FlashPath::Avx2,
                           qkv::FlashPath::Avx512}) {
    const std::string name = qkv::flash_path_name(p);
    if (!qkv::flash_path_supported(p)) {
      missing += " " + name;
      continue;
    }
    ran += " " + name;
    qkv::flash_force_path(p);
    expect(qkv::flash_path() == p, name + " forced");
    const int before = g_failures;
    unsigned seed = 1;
    for (int H : {1, 3})
      for (int T : {1, 2, 7, 17, 64, 127})
        for (int dh : {1, 7, 16, 33, 64})
          for (float temp : {0.3f, 1.0f, 10.0f})
            check_case(H, H, T, dh, temp / std::sqrt(float(dh)), seed += 7,
                       name + " H=" + std::to_string(H) + " T=" + std::to_string(T) + " dh=" + std::to_string(dh) +
                           " temp=" + std::to_string(temp));
    for (auto [H, n_kv] : {std::pair{4, 2}, std::pair{3, 1}})
      for (int T : {1, 50, 200})
        for (int dh : {7, 64})
          check_case(H, n_kv, T, dh, 1.0f / std::sqrt(float(dh)), seed += 11,
                     name + " gqa H=" + std::to_string(H) + " n_kv=" + std::to_string(n_kv) +
                         " T=" + std::to_string(T) + " dh=" + std::to_string(dh));
    check_case(2, 2, 333, 64, 0.125f, 1234, name + " T=333");
    check_exp(name);
    std::printf("%s: %s\n", name.c_str(), g_failures == before ? "all checks passed" : "FAILED");
  }
  qkv::flash_force_path(qkv::FlashPath::Auto);
  expect(qkv::flash_path() == qkv::FlashPath::Neon, "NEON is the automatic choice on aarch64");
  std::printf("flash_arm_test: %d checks, %d failures; ran:%s; cannot run here:%s\n", g_checks, g_failures,
              ran.c_str(), missing.empty() ? " none" : missing.c_str());
  return g_failures == 0 ? 0 : 1;
}

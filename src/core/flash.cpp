// Fused causal attention: entry points, run-time dispatch, the portable path and the double reference.
// The vector kernels live in flash_kernels.cpp (AVX-512), flash_kernels_avx2.cpp and
// flash_kernels_neon.cpp (both from flash_kernels_simd.hpp).
#include "qkv/flash.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "qkv/error.hpp"

namespace qkv {

namespace flash_detail {
// Defined in flash_kernels.cpp (AVX-512), flash_kernels_avx2.cpp, flash_kernels_neon.cpp; each is a
// stub returning false / doing nothing where its ISA cannot be compiled.
bool avx512_available();
void forward_avx512(const float* q, const float* k, const float* v, float* z, float* lse, int H, int n_kv,
                    int T, int q0, int dh, float scale);
void backward_avx512(const float* q, const float* k, const float* v, const float* z, const float* lse,
                     const float* dz, float* dq, float* dk, float* dv, int H, int T, int dh, float scale);
bool vexp_avx512(const float* x, float* y, int n);
bool avx2_available();
void forward_avx2(const float* q, const float* k, const float* v, float* z, float* lse, int H, int n_kv, int T,
                  int q0, int dh, float scale);
void backward_avx2(const float* q, const float* k, const float* v, const float* z, const float* lse,
                   const float* dz, float* dq, float* dk, float* dv, int H, int T, int dh, float scale);
bool vexp_avx2(const float* x, float* y, int n);
bool neon_available();
void forward_neon(const float* q, const float* k, const float* v, float* z, float* lse, int H, int n_kv, int T,
                  int q0, int dh, float scale);
void backward_neon(const float* q, const float* k, const float* v, const float* z, const float* lse,
                   const float* dz, float* dq, float* dk, float* dv, int H, int T, int dh, float scale);
bool vexp_neon(const float* x, float* y, int n);
}  // namespace flash_detail

namespace {

using std::size_t;

void check_shape(const char* who, int H, int T, int dh, int n_kv = -1) {
  if (H < 1 || T < 1 || dh < 1)
    data_error(std::string(who) + ": sizes must be >= 1, got H=" + std::to_string(H) +
               " T=" + std::to_string(T) + " dh=" + std::to_string(dh));
  if (n_kv != -1 && (n_kv < 1 || H % n_kv != 0))
    data_error(std::string(who) + ": n_kv must be >= 1 and divide H, got H=" + std::to_string(H) +
               " n_kv=" + std::to_string(n_kv));
}

// Eight partial sums, so the compiler can vectorise without reassociating (no -ffast-math).
float dot(const float* a, const float* b, int n) {
  float s[8] = {};
  int d = 0;
  for (; d + 8 <= n; d += 8)
    for (int u = 0; u < 8; ++u) s[u] += a[d + u] * b[d + u];
  float t = 0.0f;
  for (; d < n; ++d) t += a[d] * b[d];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + t;
}

// ---- portable path: row-wise online softmax, plain loops the compiler may auto-vectorise ----

// z_i = Σ_{j<=i} softmax_j(scale q_i·k_j) v_j, one query row at a time (rows q0 .. T - 1: q, z hold T - q0
// rows a head), keys in tiles of kTile. Query head h reads key/value head h / (H / n_kv).
void forward_portable(const float* q, const float* k, const float* v, float* z, float* lse, int H, int n_kv,
                      int T, int q0, int dh, float scale) {
  constexpr int kTile = 64;
  const int Tq = T - q0;
  const long rows = static_cast<long>(H) * Tq;
#pragma omp parallel
  {
    // per-thread scratch, grown once and kept: steady-state calls allocate nothing
    thread_local std::vector<float> s, acc;
    s.resize(kTile);
    acc.resize(dh);
#pragma omp for schedule(dynamic, 8)
    for (long w = 0; w < rows; ++w) {
      const int h = static_cast<int>(w % H);
      const int i = T - 1 - static_cast<int>(w / H);  // long rows first
      const size_t base = (static_cast<size_t>(h) * Tq + static_cast<size_t>(i - q0)) * dh;
      const size_t kvbase = static_cast<size_t>(h / (H / n_kv)) * T * dh;
      const float* qi = q + base;
      float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int j0 = 0; j0 <= i; j0 += kTile) {
        const int nk = std::min(kTile, i + 1 - j0);
        float mt = m;
        for (int j = 0; j < nk; ++j) {
          s[j] = scale * dot(qi, k + kvbase + static_cast<size_t>(j0 + j) * dh, dh);
          mt = std::max(mt, s[j]);
        }
        const float alpha = std::exp(m - mt);  // 0 on the first tile (m = -inf)
        l *= alpha;
        for (int d = 0; d < dh; ++d) acc[d] *= alpha;
        for (int j = 0; j < nk; ++j) {
          const float p = std::exp(s[j] - mt);
          l += p;
          const float* vj = v + kvbase + static_cast<size_t>(j0 + j) * dh;
          for (int d = 0; d < dh; ++d) acc[d] += p * vj[d];
        }
        m = mt;
      }
      float* zi = z + base;
      for (int d = 0; d < dh; ++d) zi[d] = acc[d] / l;
      lse[static_cast<size_t>(h) * Tq + i - q0] = m + std::log(l);
    }
  }
}

// Three race-free passes: D_i; dq row by row over keys j <= i; dk, dv row by row over queries i >= j.
void backward_portable(const float* q, const float* k, const float* v, const float* z, const float* lse,
                       const float* dz, float* dq, float* dk, float* dv, int H, int T, int dh, float scale) {
  const long rows = static_cast<long>(H) * T;
  std::vector<float> D(static_cast<size_t>(rows));
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (long r = 0; r < rows; ++r)  // D_i = rowsum(dz_i * z_i)
      D[r] = dot(dz + static_cast<size_t>(r) * dh, z + static_cast<size_t>(r) * dh, dh);

      // dq_i = scale Σ_{j<=i} dS_ij k_j,  dS_ij = P_ij (dz_i·v_j - D_i),  P_ij = exp(scale q_i·k_j - lse_i)
#pragma omp for schedule(dynamic, 8)
    for (long w = 0; w < rows; ++w) {
      const int h = static_cast<int>(w % H);
      const int i = T - 1 - static_cast<int>(w / H);
      const size_t base = static_cast<size_t>(h) * T * dh, ri = static_cast<size_t>(h) * T + i;
      const float *qi = q + base + static_cast<size_t>(i) * dh,
                  *dzi = dz + base + static_cast<size_t>(i) * dh;
      float* dqi = dq + base + static_cast<size_t>(i) * dh;
      std::fill(dqi, dqi + dh, 0.0f);
      for (int j = 0; j <= i; ++j) {
        const float* kj = k + base + static_cast<size_t>(j) * dh;
        const float p = std::exp(scale * dot(qi, kj, dh) - lse[ri]);
        const float ds = p * (dot(dzi, v + base + static_cast<size_t>(j) * dh, dh) - D[ri]);
        for (int d = 0; d < dh; ++d) dqi[d] += ds * kj[d];
      }
      for (int d = 0; d < dh; ++d) dqi[d] *= scale;
    }

    // dk_j = scale Σ_{i>=j} dS_ij q_i,  dv_j = Σ_{i>=j} P_ij dz_i
#pragma omp for schedule(dynamic, 8)
    for (long w = 0; w < rows; ++w) {
      const int h = static_cast<int>(w % H);
      const int j = static_cast<int>(w / H);  // key 0 has the most queries
      const size_t base = static_cast<size_t>(h) * T * dh;
      const float *kj = k + base + static_cast<size_t>(j) * dh, *vj = v + base + static_cast<size_t>(j) * dh;
      float *dkj = dk + base + static_cast<size_t>(j) * dh, *dvj = dv + base + static_cast<size_t>(j) * dh;
      std::fill(dkj, dkj + dh, 0.0f);
      std::fill(dvj, dvj + dh, 0.0f);
      for (int i = j; i < T; ++i) {
        const size_t ri = static_cast<size_t>(h) * T + i;
        const float *qi = q + base + static_cast<size_t>(i) * dh,
                    *dzi = dz + base + static_cast<size_t>(i) * dh;
        const float p = std::exp(scale * dot(qi, kj, dh) - lse[ri]);
        const float ds = p * (dot(dzi, vj, dh) - D[ri]);
        for (int d = 0; d < dh; ++d) {
          dkj[d] += ds * qi[d];
          dvj[d] += p * dzi[d];
        }
      }
      for (int d = 0; d < dh; ++d) dkj[d] *= scale;
    }
  }
}

// ---- dispatch: one table per path, the best chosen once; flash_force_path overrides it ----

struct Kernels {
  FlashPath path;
  void (*forward)(const float*, const float*, const float*, float*, float*, int, int, int, int, int, float);
  void (*backward)(const float*, const float*, const float*, const float*, const float*, const float*, float*,
                   float*, float*, int, int, int, float);
  bool (*vexp)(const float*, float*, int);
};

bool vexp_none(const float*, float*, int) {
  return false;
}

const Kernels kPortable{FlashPath::Portable, forward_portable, backward_portable, vexp_none};
const Kernels kAvx2{FlashPath::Avx2, flash_detail::forward_avx2, flash_detail::backward_avx2,
                    flash_detail::vexp_avx2};
const Kernels kAvx512{FlashPath::Avx512, flash_detail::forward_avx512, flash_detail::backward_avx512,
                      flash_detail::vexp_avx512};
const Kernels kNeon{FlashPath::Neon, flash_detail::forward_neon, flash_detail::backward_neon,
                    flash_detail::vexp_neon};

bool supported(FlashPath p) {
  switch (p) {
    case FlashPath::Auto:
    case FlashPath::Portable:
      return true;
    case FlashPath::Avx2:
      return flash_detail::avx2_available();
    case FlashPath::Avx512:
      return flash_detail::avx512_available();
    case FlashPath::Neon:
      return flash_detail::neon_available();
  }
  return false;
}

const Kernels* table(FlashPath p) {
  switch (p) {
    case FlashPath::Avx2:
      return &kAvx2;
    case FlashPath::Avx512:
      return &kAvx512;
    case FlashPath::Neon:
      return &kNeon;
    default:
      return &kPortable;
  }
}

const Kernels* best_supported() {
  return supported(FlashPath::Avx512) ? &kAvx512
         : supported(FlashPath::Avx2) ? &kAvx2
         : supported(FlashPath::Neon) ? &kNeon
                                      : &kPortable;
}

// The CPU's best path, or the one QKV_ISA names (portable, avx2, avx512, neon; auto or unset: the best):
// every kernel that follows flash_path() — attention, row operations, the fused dequantizing products —
// then runs that ISA. A name this CPU cannot run is a usage error.
const Kernels* best() {
  static const Kernels* const k = [] {
    const char* env = std::getenv("QKV_ISA");
    if (env == nullptr || *env == 0) return best_supported();
    if (std::string(env) == "auto") return best_supported();
    FlashPath p = FlashPath::Auto;
    for (FlashPath c : {FlashPath::Portable, FlashPath::Avx2, FlashPath::Avx512, FlashPath::Neon})
      if (std::string(env) == flash_path_name(c)) p = c;
    if (p == FlashPath::Auto)
      usage_error(std::string("QKV_ISA=") + env + ": expected auto, portable, avx2, avx512 or neon");
    if (!supported(p))
      usage_error(std::string("QKV_ISA=") + env + ": this CPU cannot run the " + env + " kernels (best here: " +
                  flash_path_name(best_supported()->path) + ")");
    return table(p);
  }();
  return k;
}

std::atomic<const Kernels*> g_forced{nullptr};

const Kernels& active() {
  const Kernels* f = g_forced.load(std::memory_order_relaxed);
  return f ? *f : *best();
}

std::vector<double> widen(const float* p, size_t n) {
  return std::vector<double>(p, p + n);
}
void narrow(const std::vector<double>& src, float* dst) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<float>(src[i]);
}

}  // namespace

bool flash_path_supported(FlashPath p) {
  return supported(p);
}
void flash_force_path(FlashPath p) {
  if (!supported(p))
    usage_error(std::string("flash attention: the ") + flash_path_name(p) +
                " path cannot run on this CPU (best here: " + flash_path_name(best()->path) + ")");
  g_forced.store(p == FlashPath::Auto ? nullptr : table(p));
}
FlashPath flash_path() {
  return active().path;
}
const char* flash_path_name(FlashPath p) {
  switch (p) {
    case FlashPath::Auto:
      return "auto";
    case FlashPath::Portable:
      return "portable";
    case FlashPath::Avx2:
      return "avx2";
    case FlashPath::Avx512:
      return "avx512";
    case FlashPath::Neon:
      return "neon";
  }
  return "?";
}
const char* flash_path_name() {
  return flash_path_name(flash_path());
}
FlashPath flash_path_from_name(const char* name) {
  const std::string n = name ? name : "";
  for (FlashPath p : {FlashPath::Auto, FlashPath::Portable, FlashPath::Avx2, FlashPath::Avx512, FlashPath::Neon})
    if (n == flash_path_name(p)) return p;
  usage_error("flash attention path '" + n + "': expected auto, portable, avx2, avx512 or neon");
}
void flash_force_portable(bool on) {
  flash_force_path(on ? FlashPath::Portable : FlashPath::Auto);
}
bool flash_uses_avx512() {
  return flash_path() == FlashPath::Avx512;
}

namespace flash_detail {
bool vexp(const float* x, float* y, int n) {
  return active().vexp(x, y, n);
}
}  // namespace flash_detail

void flash_attention_forward(const float* q, const float* k, const float* v, float* z, float* lse, int H,
                             int T, int dh, float scale) {
  check_shape("flash_attention_forward", H, T, dh);
  active().forward(q, k, v, z, lse, H, H, T, 0, dh, scale);
}

void flash_attention_forward_gqa(const float* q, const float* k, const float* v, float* z, float* lse, int H,
                                 int n_kv, int T, int dh, float scale) {
  check_shape("flash_attention_forward_gqa", H, T, dh, n_kv);
  active().forward(q, k, v, z, lse, H, n_kv, T, 0, dh, scale);
}

void flash_attention_forward_last(const float* q, const float* k, const float* v, float* z, float* lse, int H,
                                  int n_kv, int T, int Tq, int dh, float scale) {
  check_shape("flash_attention_forward_last", H, T, dh, n_kv);
  if (Tq < 1 || Tq > T)
    data_error("flash_attention_forward_last: the queries must be 1 .. T = " + std::to_string(T) + " rows, got " +
               std::to_string(Tq));
  active().forward(q, k, v, z, lse, H, n_kv, T, T - Tq, dh, scale);
}

void flash_attention_backward(const float* q, const float* k, const float* v, const float* z,
                              const float* lse, const float* dz, float* dq, float* dk, float* dv, int H,
                              int T, int dh, float scale) {
  check_shape("flash_attention_backward", H, T, dh);
  active().backward(q, k, v, z, lse, dz, dq, dk, dv, H, T, dh, scale);
}

void flash_attention_backward_gqa(const float* q, const float* k, const float* v, const float* z,
                                  const float* lse, const float* dz, float* dq, float* dk, float* dv, int H,
                                  int n_kv, int T, int dh, float scale) {
  check_shape("flash_attention_backward_gqa", H, T, dh, n_kv);
  const Kernels& kr = active();
  if (n_kv == H) return kr.backward(q, k, v, z, lse, dz, dq, dk, dv, H, T, dh, scale);
  // Each query head gets its own copy of its key/value head; dk, dv are the sums over a group.
  const size_t hs = static_cast<size_t>(T) * dh, n = static_cast<size_t>(H) * hs;
  const int g = H / n_kv;
  std::vector<float> ke(n), ve(n), dke(n), dve(n);
  for (int h = 0; h < H; ++h) {
    std::copy_n(k + static_cast<size_t>(h / g) * hs, hs, ke.data() + h * hs);
    std::copy_n(v + static_cast<size_t>(h / g) * hs, hs, ve.data() + h * hs);
  }
  kr.backward(q, ke.data(), ve.data(), z, lse, dz, dq, dke.data(), dve.data(), H, T, dh, scale);
  for (int c = 0; c < n_kv; ++c)
    for (size_t e = 0; e < hs; ++e) {
      float sk = 0.0f, sv = 0.0f;
      for (int u = 0; u < g; ++u) {
        sk += dke[static_cast<size_t>(c * g + u) * hs + e];
        sv += dve[static_cast<size_t>(c * g + u) * hs + e];
      }
      dk[c * hs + e] = sk;
      dv[c * hs + e] = sv;
    }
}

// ---- reference: materialise S, A per head in double ----

namespace flash_detail {

namespace {
// S = scale q kᵀ (causal), A = softmax(S); returns lse per row. S, A: [T, T] (entries j > i unused: A = 0).
void softmax_head(const double* q, const double* k, int T, int dh, double scale, std::vector<double>& A,
                  double* lse) {
  for (int i = 0; i < T; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (int j = 0; j <= i; ++j) {
      double s = 0.0;
      for (int d = 0; d < dh; ++d)
        s += q[static_cast<size_t>(i) * dh + d] * k[static_cast<size_t>(j) * dh + d];
      A[static_cast<size_t>(i) * T + j] = scale * s;
      m = std::max(m, scale * s);
    }
    double sum = 0.0;
    for (int j = 0; j <= i; ++j) sum += std::exp(A[static_cast<size_t>(i) * T + j] - m);
    for (int j = 0; j < T; ++j)
      A[static_cast<size_t>(i) * T + j] =
          j <= i ? std::exp(A[static_cast<size_t>(i) * T + j] - m) / sum : 0.0;
    if (lse) lse[i] = m + std::log(sum);
  }
}
}  // namespace

void reference_forward_f64(const double* q, const double* k, const double* v, double* z, double* lse, int H,
                           int T, int dh, double scale) {
  reference_forward_f64(q, k, v, z, lse, H, H, T, dh, scale);
}

void reference_forward_f64(const double* q, const double* k, const double* v, double* z, double* lse, int H,
                           int n_kv, int T, int dh, double scale) {
  std::vector<double> A(static_cast<size_t>(T) * T);
  for (int h = 0; h < H; ++h) {
    const size_t base = static_cast<size_t>(h) * T * dh, kvb = static_cast<size_t>(h / (H / n_kv)) * T * dh;
    softmax_head(q + base, k + kvb, T, dh, scale, A, lse + static_cast<size_t>(h) * T);
    for (int i = 0; i < T; ++i)  // z = A v
      for (int d = 0; d < dh; ++d) {
        double s = 0.0;
        for (int j = 0; j <= i; ++j)
          s += A[static_cast<size_t>(i) * T + j] * v[kvb + static_cast<size_t>(j) * dh + d];
        z[base + static_cast<size_t>(i) * dh + d] = s;
      }
  }
}

void reference_backward_f64(const double* q, const double* k, const double* v, const double* dz, double* dq,
                            double* dk, double* dv, double* dS, int H, int T, int dh, double scale) {
  reference_backward_f64(q, k, v, dz, dq, dk, dv, dS, H, H, T, dh, scale);
}

// With n_kv < H, dk and dv of a key/value head sum the contributions of the query heads reading it.
void reference_backward_f64(const double* q, const double* k, const double* v, const double* dz, double* dq,
                            double* dk, double* dv, double* dS, int H, int n_kv, int T, int dh, double scale) {
  const size_t TT = static_cast<size_t>(T) * T;
  std::vector<double> A(TT), dA(TT), G(TT);
  std::fill(dk, dk + static_cast<size_t>(n_kv) * T * dh, 0.0);
  std::fill(dv, dv + static_cast<size_t>(n_kv) * T * dh, 0.0);
  for (int h = 0; h < H; ++h) {
    const size_t base = static_cast<size_t>(h) * T * dh, kvb = static_cast<size_t>(h / (H / n_kv)) * T * dh;
    softmax_head(q + base, k + kvb, T, dh, scale, A, nullptr);
    // z = A v  =>  dA = dz vᵀ,  dv = Aᵀ dz
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) {
        double s = 0.0;
        for (int d = 0; d < dh; ++d)
          s += dz[base + static_cast<size_t>(i) * dh + d] * v[kvb + static_cast<size_t>(j) * dh + d];
        dA[static_cast<size_t>(i) * T + j] = s;
      }
    for (int j = 0; j < T; ++j)
      for (int d = 0; d < dh; ++d) {
        double s = 0.0;
        for (int i = 0; i < T; ++i)
          s += A[static_cast<size_t>(i) * T + j] * dz[base + static_cast<size_t>(i) * dh + d];
        dv[kvb + static_cast<size_t>(j) * dh + d] += s;
      }
    // A = softmax(S)  =>  dS_ij = A_ij (dA_ij - Σ_l A_il dA_il)   (masked entries have A = 0)
    for (int i = 0; i < T; ++i) {
      double r = 0.0;
      for (int j = 0; j < T; ++j) r += A[static_cast<size_t>(i) * T + j] * dA[static_cast<size_t>(i) * T + j];
      for (int j = 0; j < T; ++j)
        G[static_cast<size_t>(i) * T + j] =
            A[static_cast<size_t>(i) * T + j] * (dA[static_cast<size_t>(i) * T + j] - r);
    }
    if (dS) std::copy(G.begin(), G.end(), dS + static_cast<size_t>(h) * TT);
    // S = scale q kᵀ  =>  dq = scale dS k,  dk = scale dSᵀ q
    for (int i = 0; i < T; ++i)
      for (int d = 0; d < dh; ++d) {
        double sq = 0.0, sk = 0.0;
        for (int j = 0; j < T; ++j) {
          sq += G[static_cast<size_t>(i) * T + j] * k[kvb + static_cast<size_t>(j) * dh + d];
          sk += G[static_cast<size_t>(j) * T + i] * q[base + static_cast<size_t>(j) * dh + d];
        }
        dq[base + static_cast<size_t>(i) * dh + d] = scale * sq;
        dk[kvb + static_cast<size_t>(i) * dh + d] += scale * sk;
      }
  }
}

}  // namespace flash_detail

void flash_attention_forward_reference(const float* q, const float* k, const float* v, float* z, float* lse,
                                       int H, int T, int dh, float scale) {
  check_shape("flash_attention_forward_reference", H, T, dh);
  const size_t n = static_cast<size_t>(H) * T * dh;
  std::vector<double> zd(n), lsed(static_cast<size_t>(H) * T);
  flash_detail::reference_forward_f64(widen(q, n).data(), widen(k, n).data(), widen(v, n).data(), zd.data(),
                                      lsed.data(), H, T, dh, scale);
  narrow(zd, z);
  narrow(lsed, lse);
}

void flash_attention_backward_reference(const float* q, const float* k, const float* v, const float* z,
                                        const float* lse, const float* dz, float* dq, float* dk, float* dv,
                                        int H, int T, int dh, float scale) {
  check_shape("flash_attention_backward_reference", H, T, dh);
  const size_t n = static_cast<size_t>(H) * T * dh;
  std::vector<double> dqd(n), dkd(n), dvd(n);
  flash_detail::reference_backward_f64(widen(q, n).data(), widen(k, n).data(), widen(v, n).data(),
                                       widen(dz, n).data(), dqd.data(), dkd.data(), dvd.data(), nullptr, H, T,
                                       dh, scale);
  narrow(dqd, dq);
  narrow(dkd, dk);
  narrow(dvd, dv);
}

void flash_attention_forward_reference_gqa(const float* q, const float* k, const float* v, float* z,
                                           float* lse, int H, int n_kv, int T, int dh, float scale) {
  check_shape("flash_attention_forward_reference_gqa", H, T, dh, n_kv);
  const size_t n = static_cast<size_t>(H) * T * dh, nkv = static_cast<size_t>(n_kv) * T * dh;
  std::vector<double> zd(n), lsed(static_cast<size_t>(H) * T);
  flash_detail::reference_forward_f64(widen(q, n).data(), widen(k, nkv).data(), widen(v, nkv).data(), zd.data(),
                                      lsed.data(), H, n_kv, T, dh, scale);
  narrow(zd, z);
  narrow(lsed, lse);
}

void flash_attention_backward_reference_gqa(const float* q, const float* k, const float* v, const float*,
                                            const float*, const float* dz, float* dq, float* dk, float* dv,
                                            int H, int n_kv, int T, int dh, float scale) {
  check_shape("flash_attention_backward_reference_gqa", H, T, dh, n_kv);
  const size_t n = static_cast<size_t>(H) * T * dh, nkv = static_cast<size_t>(n_kv) * T * dh;
  std::vector<double> dqd(n), dkd(nkv), dvd(nkv);
  flash_detail::reference_backward_f64(widen(q, n).data(), widen(k, nkv).data(), widen(v, nkv).data(),
                                       widen(dz, n).data(), dqd.data(), dkd.data(), dvd.data(), nullptr, H, n_kv,
                                       T, dh, scale);
  narrow(dqd, dq);
  narrow(dkd, dk);
  narrow(dvd, dv);
}

}  // namespace qkv

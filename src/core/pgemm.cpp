// pgemm.hpp: the column panels, the threads over them, and the path's micro-kernel (pgemm_avx512.cpp,
// pgemm_avx2.cpp, both pgemm_simd.hpp) chosen from a table by flash_path() (QKV_ISA).
#include "qkv/pgemm.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/flash.hpp"
#include "qkv/gemm.hpp"

namespace qkv {

namespace {

struct PgemmPath {
  FlashPath path;
  int mr, nr, w;  // a tile's rows and columns (a group of the packed panel), the vector's lanes
  void (*panel)(int, int, int, const float*, long, const float*, bool, float*, long);
  void (*pack_rows)(const float*, long, int, int, int, float*);
};

}  // namespace

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace flash_detail {
void pgemm_panel_avx512(int M, int n, int K, const float* A, long lda, const float* bp, bool acc, float* C, long ldc);
void pgemm_panel_avx2(int M, int n, int K, const float* A, long lda, const float* bp, bool acc, float* C, long ldc);
void pgemm_pack_rows_avx512(const float* rows, long ld, int n, int K, int nr, float* dst);
void pgemm_pack_rows_avx2(const float* rows, long ld, int n, int K, int nr, float* dst);
}  // namespace flash_detail

namespace {
constexpr PgemmPath kX86[] = {
    {FlashPath::Avx512, 8, 32, 16, flash_detail::pgemm_panel_avx512, flash_detail::pgemm_pack_rows_avx512},
    {FlashPath::Avx2, 4, 24, 8, flash_detail::pgemm_panel_avx2, flash_detail::pgemm_pack_rows_avx2},
};
constexpr std::span<const PgemmPath> kPaths(kX86);
}  // namespace
#else
namespace {
constexpr std::span<const PgemmPath> kPaths;  // no micro-kernel off x86-64: the forward keeps BLIS
}  // namespace
#endif

namespace {

const PgemmPath* path_in_use() {
  const FlashPath p = flash_path();
  for (const auto& e : kPaths)
    if (e.path == p) return &e;
  return nullptr;
}

// A panel's packed columns take at most 2 MiB (one per thread, counted in tests/cli/memory_test.sh's RSS
// bound) and at most 512 columns: the KC = 512 k steps of a panel a pass reads stay in L2 while A's rows
// pass (512 steps measured 0.4–6.7 % faster than 256 with avx512; with avx2, 1–2.5 % in the prefill and
// the GEMM's shapes once the prefill ran at 78–80 % of the peak: docs/performance.md).
constexpr long kPanelFloats = long(1) << 19;
constexpr int kMaxPanelCols = 512;

// QKV_GEMM=blis hands the prefill back to BLIS (to measure one against the other); packed is the default.
bool packed_wanted() {
  static const bool packed = [] {
    const char* e = std::getenv("QKV_GEMM");
    const std::string v = e ? e : "";
    if (v.empty() || v == "packed") return true;
    if (v == "blis") return false;
    usage_error("QKV_GEMM=" + v + ": expected packed or blis");
  }();
  return packed;
}

}  // namespace

bool pgemm_supported() { return packed_wanted() && path_in_use() != nullptr; }

std::string pgemm_name() {
  const PgemmPath* p = pgemm_supported() ? path_in_use() : nullptr;
  if (!p) return "";
  return std::string("qkv packed, ") + flash_path_name() + " tiles of " + std::to_string(p->mr) + " × " +
         std::to_string(p->nr);
}

int pgemm_nr() {
  const PgemmPath* p = path_in_use();
  return p ? p->nr : 0;
}

void pgemm_pack_rows(const float* rows, long ld, int n, int K, int nr, float* dst) {
  const PgemmPath* p = path_in_use();
  if (!p) usage_error(std::string("pgemm_pack_rows: the ") + flash_path_name() + " path has no packed GEMM");
  p->pack_rows(rows, ld, n, K, nr, dst);
}

void pgemm_pack_cols(const float* B, long ldb, int j0, int n, int K, int nr, float* dst) {
  for (int g = 0; g * nr < n; g++) {
    const int cols = std::min(nr, n - g * nr);
    float* d = dst + long(g) * K * nr;
    for (int k = 0; k < K; k++) {
      std::copy_n(B + k * ldb + j0 + g * nr, cols, d + long(k) * nr);
      std::fill_n(d + long(k) * nr + cols, nr - cols, 0.0f);
    }
  }
}

void pgemm(int M, int N, int K, const float* A, int lda, const PackB& pack, bool accumulate, float* C, int ldc) {
  const PgemmPath* p = path_in_use();
  if (!p) usage_error(std::string("pgemm: the ") + flash_path_name() + " path has no packed GEMM");
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int i = 0; i < M; i++) std::fill_n(C + long(i) * ldc, N, 0.0f);
    return;
  }
  const int nr = p->nr;
  // The threads' shares of the columns end on whole vectors, as equal as that allows (1024 columns are 512
  // each, where groups of 24 would give one thread 22 groups and the other 21); each share in as few
  // panels of whole groups as the caps allow, equal in groups.
  const int team = omp_get_level() == 0 && double(M) * N * K >= 2e6 ? gemm_threads() : 1;
  const long cap = std::clamp<long>(kPanelFloats / K / nr * nr, nr, kMaxPanelCols);
  const long vectors = (N + p->w - 1) / p->w;
  const int threads = int(std::min<long>(team, vectors));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int s0 = int(vectors * t / nt * p->w), s1 = int(std::min<long>(vectors * (t + 1) / nt * p->w, N));
    const long groups = (s1 - s0 + nr - 1) / nr;
    const long panels = std::max<long>(1, (s1 - s0 + cap - 1) / cap);
    static thread_local std::vector<float> buf;
    const size_t need = size_t((groups + panels - 1) / panels * nr) * K + 16;
    if (buf.size() < need) buf.resize(need);
    float* bp = buf.data() + (16 - reinterpret_cast<std::uintptr_t>(buf.data()) % 64 / 4) % 16;
    for (long q = 0; q < panels && s0 < s1; q++) {
      const int j0 = s0 + int(groups * q / panels * nr);
      const int n = int(std::min<long>(s0 + groups * (q + 1) / panels * nr, s1) - j0);
      pack(j0, n, nr, bp);
      p->panel(M, n, K, A, lda, bp, accumulate, C + j0, ldc);
    }
  }
}

}  // namespace qkv

// The family forward (lm.hpp): one block function that reads the Arch, with a hook point at every
// named activation. Unhooked, attention runs in the fused flash kernel and nothing T×T exists.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>

#include "qkv/error.hpp"
#include "qkv/flash.hpp"
#include "qkv/gemm.hpp"
#include "qkv/io/qmatmul.hpp"
#include "qkv/io/qpanel.hpp"
#include "qkv/lm.hpp"
#include "qkv/lm_train.hpp"
#include "qkv/rowops.hpp"
#include "qkv/ops.hpp"
#include "qkv/pgemm.hpp"
#include "qkv/profile.hpp"
#include "kv_batch.hpp"

namespace qkv {
namespace {

constexpr long kParallelElems = 1 << 15;
// Non-F32 weights are converted this many elements at a time (2 MiB) into a buffer that is dead while
// the products run: the keys' st.k (the projections read u, zm or h and write P, att or h; the keys are
// split out of P only after them), so no buffer of its own is held. The chunk is a constant (a
// Conv1D weight is chunked along the reduction, so the chunk decides how its sums are split).
constexpr int64_t kChunk = int64_t(1) << 19;

struct Ctx {
  const Model& m;
  const Arch& a;
  RunState& st;
  const Hooks* hooks;
  int T;  // tokens per sequence
  bool materialise_all;
  KvCache* cache;
  int B = 1;             // sequences, run as B·T rows
  bool batched = false;  // hooks lead with B (RunOptions::batch)
  bool padded = false;   // some sequence has padding: attention keeps to each run of st.seg
  // The rotation tables' cos and sin [off + T, r/2] (rope_tables), made once per run for every layer
  // (computed per layer, the double cos/sin cost about 1 % of a 512-token prefill).
  const std::vector<float>* rope_cs = nullptr;
  const std::vector<float>* rope_sn = nullptr;
  int R() const { return B * T; }
  // A hook's shape: the per-sequence dims, with B in front for a batch.
  std::vector<int64_t> shape(std::initializer_list<int64_t> dims) const {
    std::vector<int64_t> v;
    if (batched) v.push_back(B);
    v.insert(v.end(), dims);
    return v;
  }
  // Calls the hook at `name` when the caller asked for it; the activation is `data` shaped `shape`.
  // Names are built (prefix + suffix) only when something is hooked: an unhooked run allocates nothing.
  bool wants(const std::string& prefix, const char* suffix) const {
    return hooks && hooks->wants && hooks->wants(prefix + suffix);
  }
  void hook(const std::string& name, float* data, std::vector<int64_t> shape) const {
    if (hooks && hooks->fn) hooks->fn(name, ActView{data, std::move(shape)});
  }
  void maybe(const std::string& prefix, const char* suffix, float* data, std::initializer_list<int64_t> shape) const {
    if (!hooks || !hooks->wants) return;
    const std::string name = prefix + suffix;
    if (hooks->wants(name)) hook(name, data, this->shape(shape));
  }
};

void grow(std::vector<float>& b, size_t n) {
  if (b.size() < n) b.resize(n);
}

// y [N, d] = norm(x [N, d]) as the Arch says. torch (LayerNorm): F.layer_norm(x, (d,), w, b, eps);
// (RMSNorm): x * rsqrt(mean(x²) + eps) * w; (Gemma): … * (1 + w). RMSNorm runs in rowops.hpp's vector rows
// (the ISA path in use).
void norm_rows(float* y, const float* x, const Weight& w, const Weight& b, const Arch& a, int N, int d) {
  std::vector<float> ws, bs;
  const float* W = w.f32(0, d, ws);
  const float eps = float(a.norm_eps);
  if (a.norm != NormKind::LayerNorm) {
    rmsnorm_rows(y, x, W, N, d, eps, a.norm == NormKind::RMSNormPlusOne);
    return;
  }
  const float* B = b.present() ? b.f32(0, d, bs) : nullptr;
#pragma omp parallel for schedule(static) if (long(N) * d >= kParallelElems)
  for (int i = 0; i < N; i++) {
    const float* xi = x + long(i) * d;
    float* yi = y + long(i) * d;
    // The same loops as ops.hpp's layernorm_forward, so GPT-2's trace is bit-identical to the training forward's.
    float mu = 0;
    for (int j = 0; j < d; j++) mu += xi[j];
    mu /= float(d);
    float var = 0;
    for (int j = 0; j < d; j++) var += (xi[j] - mu) * (xi[j] - mu);
    var /= float(d);
    const float r = 1.0f / std::sqrt(var + eps);
    if (B) {
      for (int j = 0; j < d; j++) yi[j] = (xi[j] - mu) * r * W[j] + B[j];
    } else {
      for (int j = 0; j < d; j++) yi[j] = (xi[j] - mu) * r * W[j];
    }
  }
}

// The ggml type of an [out, in] weight the fused few-row kernels (io/qmatmul.hpp) can multiply as stored.
std::optional<io::GgmlType> fused_type(const Weight& W) {
  if (W.in_out) return std::nullopt;
  const io::GgmlType t = W.type == WeightType::F32    ? io::GgmlType::F32
                         : W.type == WeightType::F16  ? io::GgmlType::F16
                         : W.type == WeightType::BF16 ? io::GgmlType::BF16
                                                      : io::GgmlType(W.ggml_type);
  if (!io::qmatmul_supports(t)) return std::nullopt;
  return t;
}

// y [N, out] (row stride ldy) = x [N, in] · Wᵀ + b for few rows (a decoding step, a short prompt, the
// last position's logits): the weight multiplied as stored, each block dequantized in the kernel, never
// expanded into a buffer. False when it does not apply (many rows, Conv1D layout, a type without kernel).
bool linear_fused(float* y, int ldy, const float* x, int N, const Weight& W, bool bias) {
  if (N > io::kQMatmulMaxRows) return false;
  const auto t = fused_type(W);
  if (!t) return false;
  const int in = int(W.shape[1]), out = int(W.shape[0]);
  io::qmatmul(*t, W.data, out, in, x, in, N, y, ldy, bias);
  return true;
}

// buf's first 64-byte aligned float, with room for n floats after it (the half decoders then write each row's
// tiles in place, io/qpanel.hpp).
float* aligned_rows(std::vector<float>& buf, size_t n) {
  if (buf.size() < n + 16) buf.resize(n + 16);
  return buf.data() + (16 - reinterpret_cast<std::uintptr_t>(buf.data()) % 64 / 4) % 16;
}

// Many rows (a prefill) through a half or quantized [out, in] weight where linear_packed does not apply (the
// portable and NEON paths, QKV_GEMM=blis): each thread expands a panel of
// about kPanelRows rows (about the core's L2: 256 rows × 1024 floats = 1 MiB), but about 2 MiB at most (fewer rows
// for wide inputs: MLP down projections; each thread holds one panel, which counts in the RSS bound of
// tests/cli/memory_test.sh), and at least 16, with the vector
// decoders of the ISA in use (io/qpanel.hpp) into its own buffer and multiplies it by x single-threaded
// (BLIS inside a parallel region); panels are handed out dynamically. Every weight is expanded once per
// call, the expansion stays in cache until BLIS packs it, and the weight is never float32 whole.
// False when it does not apply (F32, Conv1D layout, a type without decoder).
constexpr int64_t kPanelFloats = int64_t(1) << 18;
constexpr int kPanelRows = 256;

// Panel p of `panels` covers rows [panel_start(p), panel_start(p + 1)): equal shares cut at multiples of 16.
int panel_start(int out, int panels, int p) {
  return p >= panels ? out : int(int64_t(out) * p / panels / 16 * 16);
}

bool linear_panels(float* y, int ldy, const float* x, int N, const Weight& W, float beta) {
  const auto t = fused_type(W);
  if (!t || W.type == WeightType::F32) return false;
  const int in = int(W.shape[1]), out = int(W.shape[0]);
  if (in % io::ggml_type_traits(uint32_t(*t))->block_size != 0) return false;  // W.f32's path names the error
  const int team = omp_get_level() == 0 ? gemm_threads() : 1;
  // Panels of at most `wide` rows (kPanelRows within 2 MiB: each panel repacks x in BLIS, so fewer, larger
  // panels repack it less), as many as a multiple of the team so that each thread gets the same rows (11
  // panels of 256 rows of a 2816-row gate projection left one of 2 threads idle for a twelfth of it), at
  // least 16 rows each (a panel is at most ceil(out / panels) + 15 rows: up to 15 rows past `wide`).
  const int64_t wide = std::min<int64_t>(std::max<int64_t>(kPanelRows, kPanelFloats / in), 2 * kPanelFloats / in);
  const int per_thread = int((out + team * wide - 1) / (team * wide));
  const int panels = std::max(1, std::min(team * per_thread, out / 16));
  int most = 0;
  for (int p = 0; p < panels; ++p) most = std::max(most, panel_start(out, panels, p + 1) - panel_start(out, panels, p));
  const int threads = std::max(1, std::min(team, panels));
#pragma omp parallel num_threads(threads)
  {
    static thread_local std::vector<float> buf;
    float* panel = aligned_rows(buf, size_t(most) * in);
#pragma omp for schedule(dynamic, 1)
    for (int p = 0; p < panels; ++p) {
      const int r0 = panel_start(out, panels, p), n = panel_start(out, panels, p + 1) - r0;
      io::dequantize_panel(*t, W.data, r0, r0 + n, in, panel);
      gemm<float>(false, true, N, n, in, 1.0f, x, in, panel, in, beta, y + r0, ldy);
    }
  }
  return true;
}

// Rows [r0, r0 + cnt) of an [out, in] weight as float32 rows: float32 in place, half and quantized ones
// expanded into rows by the vector decoders of the ISA in use, other types converted through scratch.
const float* weight_rows(const Weight& W, int r0, int cnt, float* rows, std::vector<float>& scratch) {
  const int in = int(W.shape[1]);
  if (W.type == WeightType::F32) return static_cast<const float*>(W.data) + int64_t(r0) * in;
  if (const auto t = fused_type(W)) {
    io::dequantize_panel(*t, W.data, r0, r0 + cnt, in, rows);
    return rows;
  }
  return W.f32(int64_t(r0) * in, int64_t(cnt) * in, scratch);
}

// Fills pgemm's panel with output columns [j0, j0 + n) of W (pgemm.hpp's PackB), nr rows of W at a time:
// an [out, in] weight's rows transposed (float32 read in place, half and quantized ones expanded by the
// vector decoders of the ISA in use, other types converted), a Conv1D [in, out] weight's row segments copied.
void pack_weight(const Weight& W, int j0, int n, int nr, float* dst) {
  const int in = int(W.in_out ? W.shape[0] : W.shape[1]), out = int(W.in_out ? W.shape[1] : W.shape[0]);
  static thread_local std::vector<float> scratch, tmp;
  if (W.in_out && W.type == WeightType::F32) {
    pgemm_pack_cols(static_cast<const float*>(W.data), out, j0, n, in, nr, dst);
    return;
  }
  if (W.in_out) {
    for (int g = 0; g * nr < n; g++) {
      const int c0 = j0 + g * nr, cols = std::min(nr, n - g * nr);
      float* d = dst + long(g) * in * nr;
      for (int k = 0; k < in; k++) {
        const float* src = W.f32(int64_t(k) * out + c0, cols, scratch);
        std::copy_n(src, cols, d + long(k) * nr);
        std::fill_n(d + long(k) * nr + cols, nr - cols, 0.0f);
      }
    }
    return;
  }
  float* rows = aligned_rows(tmp, size_t(nr) * in);
  for (int g = 0; g * nr < n; g++) {
    const int r0 = j0 + g * nr, cnt = std::min(nr, n - g * nr);
    pgemm_pack_rows(weight_rows(W, r0, cnt, rows, scratch), in, cnt, in, nr, dst + long(g) * in * nr);
  }
}

// Whether pack_weight expands W (input width in): a type the decoders expand, in whole blocks, or any
// non-GGML type; other GGML types stay with W.f32's path, which names the error.
bool packable(const Weight& W, int in) {
  const auto t = fused_type(W);
  return t ? in % io::ggml_type_traits(uint32_t(*t))->block_size == 0 : W.type != WeightType::GGML;
}

// Weights side by side ([out_p, in] each, their outputs adjacent columns of y: Llama's separate q, k and v)
// in one packed product over their stacked rows, so the threads share all its columns at once (pgemm.cpp)
// instead of each thread taking part of three narrow products; a group of columns across two weights
// takes rows of both. Same bits as one product each (every output's k order is the tile's). False where
// linear_packed would be (few rows, no packed GEMM, a Conv1D or undecodable weight).
bool linear_packed_stack(float* y, int ldy, const float* x, int N, std::span<const Weight* const> ws,
                         std::span<const Weight* const> bs) {
  if (N <= io::kQMatmulMaxRows || !pgemm_supported()) return false;
  const int in = int(ws[0]->shape[1]);
  std::vector<int> off{0};
  for (const Weight* W : ws) {
    if (W->in_out || int(W->shape[1]) != in || !packable(*W, in)) return false;
    off.push_back(off.back() + int(W->shape[0]));
  }
  // y = the biases side by side first (zeros for a weight without one), then the product accumulates
  std::vector<float> bias_row;
  for (size_t p = 0; p < ws.size(); p++)
    if (bs[p] && bs[p]->present()) {
      bias_row.resize(size_t(off.back()));
      std::vector<float> tmp;
      std::copy_n(bs[p]->f32(0, off[p + 1] - off[p], tmp), off[p + 1] - off[p], bias_row.begin() + off[p]);
    }
  const bool bias = !bias_row.empty();
#pragma omp parallel for schedule(static) if (bias && long(N) * off.back() >= kParallelElems)
  for (int i = 0; i < (bias ? N : 0); i++) std::copy(bias_row.begin(), bias_row.end(), y + long(i) * ldy);
  const auto pack = [&](int j0, int n, int nr, float* dst) {
    static thread_local std::vector<float> tmp, part, scratch;
    float* rows = aligned_rows(tmp, size_t(nr) * in);
    for (int g = 0; g * nr < n; g++) {
      const int r0 = j0 + g * nr, cnt = std::min(nr, n - g * nr);
      size_t p = std::upper_bound(off.begin(), off.end(), r0) - off.begin() - 1;
      const float* src = nullptr;
      if (r0 + cnt <= off[p + 1]) {
        src = weight_rows(*ws[p], r0 - off[p], cnt, rows, scratch);
      } else {  // rows of two (or more) weights: each weight's rows copied into place
        for (int r = r0; r < r0 + cnt; p++) {
          const int c = std::min(r0 + cnt, off[p + 1]) - r;
          const float* s = weight_rows(*ws[p], r - off[p], c, aligned_rows(part, size_t(nr) * in), scratch);
          std::copy_n(s, size_t(c) * in, rows + size_t(r - r0) * in);
          r += c;
        }
        src = rows;
      }
      pgemm_pack_rows(src, in, cnt, in, nr, dst + long(g) * in * nr);
    }
  };
  pgemm(N, off.back(), in, x, in, pack, bias, y, ldy);
  return true;
}

// Many rows (more than kQMatmulMaxRows: a prefill) on the paths with a packed GEMM (pgemm.hpp: avx512,
// avx2): every weight type and layout, each thread expanding its own column panels, the activations read in
// place. False elsewhere (BLIS then), for fewer rows (a decoding step through a Conv1D weight stays with
// gemv, which reads the weight once instead of copying it first), or when a quantized row is not whole
// blocks (W.f32's path names the error).
bool linear_packed(float* y, int ldy, const float* x, int N, const Weight& W, bool accumulate) {
  if (N <= io::kQMatmulMaxRows || !pgemm_supported()) return false;  // few rows: a panel would cost a weight copy
  const int in = int(W.in_out ? W.shape[0] : W.shape[1]), out = int(W.in_out ? W.shape[1] : W.shape[0]);
  if (!packable(W, in)) return false;
  pgemm(N, out, in, x, in, [&W](int j0, int n, int nr, float* dst) { pack_weight(W, j0, n, nr, dst); }, accumulate,
        y, ldy);
  return true;
}

// y [N, out] (row stride ldy) = x [N, in] · W + b (W in its own layout: [out, in], or Conv1D [in, out]).
// As ops.hpp's affine_forward: y = b first, then the GEMM accumulates (beta = 1). Where linear_packed does
// not apply, F32 weights go to BLIS in place and F16/BF16 ones are converted kChunk elements at a time
// into one reused buffer; one row (a decoding step, last-position logits) through gemm_skinny's
// matrix–vector kernel.
// Up to kQMatmulMaxRows rows of an [out, in] weight go to the fused kernels (linear_fused) instead, more rows
// to the packed GEMM (linear_packed) on the avx512 and avx2 paths, else, for a non-F32 [out, in] weight, to
// L2-sized expanded panels (linear_panels).
void linear(float* y, int ldy, const float* x, int N, const Weight& W, const Weight* b, std::vector<float>& scratch) {
  const int in = int(W.in_out ? W.shape[0] : W.shape[1]);
  const int out = int(W.in_out ? W.shape[1] : W.shape[0]);
  const bool bias = b && b->present();
  if (bias) {
    std::vector<float> bs;
    const float* B = b->f32(0, out, bs);
#pragma omp parallel for schedule(static) if (long(N) * out >= kParallelElems)
    for (int i = 0; i < N; i++) std::copy_n(B, out, y + long(i) * ldy);
  }
  const float beta = bias ? 1.0f : 0.0f;
  if (linear_fused(y, ldy, x, N, W, bias)) return;
  if (linear_packed(y, ldy, x, N, W, bias)) return;
  if (linear_panels(y, ldy, x, N, W, beta)) return;
  if (W.type == WeightType::F32) {
    const float* w = static_cast<const float*>(W.data);
    if (W.in_out) gemm_skinny<float>(false, false, N, out, in, 1.0f, x, in, w, out, beta, y, ldy);
    else gemm_skinny<float>(false, true, N, out, in, 1.0f, x, in, w, in, beta, y, ldy);
  } else if (!W.in_out) {
    // chunks of output rows: y[:, r0:r0+n] (+)= x · W[r0:r0+n]ᵀ
    const int rows = int(std::max<int64_t>(1, kChunk / in));
    for (int r0 = 0; r0 < out; r0 += rows) {
      const int n = std::min(rows, out - r0);
      const float* w = W.f32(int64_t(r0) * in, int64_t(n) * in, scratch);
      gemm_skinny<float>(false, true, N, n, in, 1.0f, x, in, w, in, beta, y + r0, ldy);
    }
  } else {
    // chunks of input rows (the reduction): y (+)= x[:, r0:r0+n] · W[r0:r0+n, :]
    const int rows = int(std::max<int64_t>(1, kChunk / out));
    for (int r0 = 0; r0 < in; r0 += rows) {
      const int n = std::min(rows, in - r0);
      const float* w = W.f32(int64_t(r0) * out, int64_t(n) * out, scratch);
      gemm_skinny<float>(false, false, N, out, n, 1.0f, x + r0, in, w, out, r0 == 0 ? beta : 1.0f, y, ldy);
    }
  }
}

// [rows, H, dh] (row stride ld, head h at column col(h)) -> [H, rows, dh]
template <class Col>
void to_heads(float* dst, const float* src, int rows, int ld, int H, int dh, Col col) {
#pragma omp parallel for schedule(static) if (long(rows) * H * dh >= kParallelElems)
  for (int t = 0; t < rows; t++)
    for (int h = 0; h < H; h++) std::copy_n(src + long(t) * ld + col(h), dh, dst + (long(h) * rows + t) * dh);
}

// [H, T, dh] <-> [T, H, dh] (TransformerLens's layout), for hooks on q, k, v, and z into W_O's rows
// (rows to the threads when there are enough: it runs on every block's z).
void heads_to_rows(float* dst, const float* src, int H, int T, int dh) {
#pragma omp parallel for schedule(static) if (long(T) * H * dh >= kParallelElems)
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++) std::copy_n(src + (long(h) * T + t) * dh, dh, dst + (long(t) * H + h) * dh);
}
void rows_to_heads(float* dst, const float* src, int H, int T, int dh) {
  for (int h = 0; h < H; h++)
    for (int t = 0; t < T; t++) std::copy_n(src + (long(t) * H + h) * dh, dh, dst + (long(h) * T + t) * dh);
}

// Offers x [B, H, T, dh] to the hook `name` as [(B,) T, H, dh]; what the hook writes comes back.
void hook_heads(const Ctx& c, const std::string& prefix, const char* suffix, float* x, int H, int dh) {
  if (!c.wants(prefix, suffix)) return;
  const std::string name = prefix + suffix;
  const size_t per = size_t(H) * c.T * dh;
  std::vector<float> t(per * c.B);
  for (int b = 0; b < c.B; b++) heads_to_rows(t.data() + b * per, x + b * per, H, c.T, dh);
  c.hook(name, t.data(), c.shape({c.T, H, dh}));
  for (int b = 0; b < c.B; b++) rows_to_heads(x + b * per, t.data() + b * per, H, c.T, dh);
}

// The rotation angles' cos and sin [T, r/2] for a forward whose positions are below T: the training
// forward's table (lm_train.hpp's rope_table, in double: θ_i = pos · inv_freq_i, longrope's factors for a
// sequence of T and its attention factor) rounded to float.
void rope_tables(const Arch& a, int T, std::vector<float>& cs, std::vector<float>& sn) {
  const lm_ops::RopeTable r = lm_ops::rope_table(a, T);
  cs.assign(r.cos.begin(), r.cos.end());
  sn.assign(r.sin.begin(), r.sin.end());
}

// x [H, T, dh] rotated in place, row t to position pos[t] (the tables' row): pairs (i, i + r/2)
// (rotate_half) or (2i, 2i + 1); dims >= r untouched (rowops.hpp's vector rows).
// torch (half): x[..., :r] * cos + rotate_half(x[..., :r]) * sin
void rope_apply(float* x, int H, int T, int dh, const Arch& a, const float* cs, const float* sn, const int* pos) {
  rotary_rows(x, H, T, dh, a.rotary_dim, a.pairing == RotaryPairing::Adjacent, cs, sn, pos);
}

// S [T, Tk] = scale · q [T, dh] · kᵀ (k [Tk, dh]). A decoding step (T ≤ kQMatmulMaxRows) takes the fused
// few-row kernel on the float32 keys (io::qmatmul, the ISA in use): BLIS's gemv cost more per call than the
// product itself here (16 heads × 2 calls × every layer per token; measured 2.4 ms per token of a 16-layer
// model with its skx kernels, 0.7 ms with zen3's — most of the gap between QKV_ISA=avx512 and avx2 decoding).
void scores(float* S, const float* q, const float* k, int T, int Tk, int dh, float scale) {
  if (T > io::kQMatmulMaxRows) {
    gemm<float>(false, true, T, Tk, dh, scale, q, dh, k, dh, 0.0f, S, Tk);
    return;
  }
  io::qmatmul(io::GgmlType::F32, k, Tk, dh, q, dh, T, S, Tk, false);
  for (size_t i = 0; i < size_t(T) * Tk; i++) S[i] *= scale;
}

// z [T, dh] = A [T, Tk] · v [Tk, dh]; few rows as a sum of value rows (the same reason as scores()).
void weighted_values(float* z, const float* A, const float* v, int T, int Tk, int dh) {
  if (T > io::kQMatmulMaxRows) {
    gemm<float>(false, false, T, dh, Tk, 1.0f, A, Tk, v, dh, 0.0f, z, dh);
    return;
  }
  for (int i = 0; i < T; i++) {
    float* zi = z + size_t(i) * dh;
    std::fill(zi, zi + dh, 0.0f);
    for (int j = 0; j < Tk; j++) {
      const float a = A[size_t(i) * Tk + j];
      const float* vj = v + size_t(j) * dh;
#pragma omp simd
      for (int d = 0; d < dh; d++) zi[d] += a * vj[d];
    }
  }
}

// Attention with the score matrix materialised (when a hook asks for scores or the pattern, for soft-caps,
// windows shorter than T and padded batches, and for runs that extend a K/V cache): S = scale·q·kᵀ,
// soft-cap, mask, hook, softmax, hook, z = A·v, for each of the B sequences. Queries are the T new rows at
// positions off .. off+T-1; keys and values are Tk = off + T rows, sequence b's kv head g at
// k + (b·n_kv + g)·stride. A padded batch's query sees only keys of its own run (st.seg).
void attention_materialised(const Ctx& c, int l, float* z, const float* k, const float* v, size_t stride, int off) {
  const Arch& a = c.a;
  RunState& st = c.st;
  const int T = c.T, Tk = off + c.T, H = a.H, K = a.n_kv, dh = a.dh, G = a.H / a.n_kv, w = a.window_of(l);
  const std::string b = "blocks." + std::to_string(l) + ".attn.";
  const size_t TT = size_t(T) * Tk, per = size_t(H) * T * dh;
  grow(st.S, size_t(c.B) * H * TT);
  float* S = st.S.data();
  const float ninf = -std::numeric_limits<float>::infinity();
  const float scale = float(a.attn_scale), cap = float(a.attn_softcap);
  for (int s = 0; s < c.B; s++) {
    const int* seg = c.padded ? st.seg.data() + size_t(s) * Tk : nullptr;  // by column (kv_batch.hpp)
    for (int h = 0; h < H; h++) {
      float* Sh = S + (size_t(s) * H + h) * TT;
      scores(Sh, st.q.data() + s * per + size_t(h) * T * dh, k + (size_t(s) * K + h / G) * stride, T, Tk, dh, scale);
#pragma omp parallel for schedule(static) if (long(T) * Tk >= kParallelElems)
      for (int i = 0; i < T; i++) {
        float* x = Sh + size_t(i) * Tk;
        const int qi = off + i, n = std::min(Tk, qi + 1);  // the query's position; keys past it are masked
        std::fill(x + n, x + Tk, ninf);
        for (int j = 0; j < n; j++) {
          if ((w > 0 && qi - j >= w) || (seg && seg[j] != seg[qi])) x[j] = ninf;
          else if (cap > 0) x[j] = cap * std::tanh(x[j] / cap);
        }
      }
    }
  }
  c.maybe(b, "hook_attn_scores", S, {H, T, Tk});
  // A = softmax(S) row by row, in place (ops.hpp's softmax_forward: max subtracted, -inf -> 0), over
  // each row's causal prefix only: the keys past the query are -inf, whose exp(-inf) = 0 changes neither
  // the max nor the sum, so the prefix gives the full row's bits without computing T²/2 exponentials.
  const int64_t rows = int64_t(c.B) * H * T;
#pragma omp parallel for schedule(static) if (rows * Tk >= kParallelElems)
  for (int64_t r = 0; r < rows; r++) {
    float* x = S + size_t(r) * Tk;
    const int n = std::min(Tk, off + int(r % T) + 1);
    softmax_forward(x, x, 1, n);
    std::fill(x + n, x + Tk, 0.0f);
  }
  c.maybe(b, "hook_pattern", S, {H, T, Tk});
  for (int s = 0; s < c.B; s++)
    for (int h = 0; h < H; h++)
      weighted_values(z + s * per + size_t(h) * T * dh, S + (size_t(s) * H + h) * TT, v + (size_t(s) * K + h / G) * stride,
                      T, Tk, dh);
}

// z [B, H, keep, dh] by the fused kernel for each sequence's last `keep` queries (all T but in a trimmed
// block), one sequence at a time; query head h reads key/value head h / (H / n_kv).
void attention_flash(const Ctx& c, float* z, int keep) {
  const Arch& a = c.a;
  RunState& st = c.st;
  const int T = c.T, H = a.H, K = a.n_kv, dh = a.dh;
  grow(st.lse, size_t(c.B) * H * keep);
  const size_t qs = size_t(H) * keep * dh, ks = size_t(K) * T * dh;
  // GQA in the kernel itself: k and v stay [n_kv, T, dh], read in place by every head of their group.
  for (int s = 0; s < c.B; s++)
    flash_attention_forward_last(st.q.data() + s * qs, st.k.data() + s * ks, st.v.data() + s * ks, z + s * qs,
                                 st.lse.data() + size_t(s) * H * keep, H, K, T, keep, dh, float(a.attn_scale));
}

// a [B·keep, d] = attention(u [B·T, d]) for block l, every hook point on the way: the projections over
// all rows at once, heads, rotation and attention per sequence. keep = c.T, or kTrimRows in a last block
// trimmed whole (trims_attention): then only each sequence's last keep rows get queries, and W_O.
void attention_block(const Ctx& c, int l, const float* u, float* out, int keep) {
  const Arch& a = c.a;
  const BlockWeights& w = c.m.blocks[size_t(l)];
  RunState& st = c.st;
  const int T = c.T, R = c.R(), d = a.d, H = a.H, K = a.n_kv, dh = a.dh, qd = a.q_dim(), kvd = a.kv_dim();
  const std::string b = "blocks." + std::to_string(l) + ".attn.";
  // q, k, v: the model's own maps of u, into [R, qd | kvd | kvd] (or NeoX's [R, H, 3, dh]), then heads.
  const int total = qd + 2 * kvd;
  // Sized once for P and for the MLP's h, which reuses its place (a later grow would copy, briefly
  // holding both).
  grow(st.qkv, size_t(R) * std::max(total, a.attn_only() ? 0 : a.d_ff));
  float* P = st.qkv.data();
  std::optional<profile::Scope> scope(std::in_place, "q, k, v projections");
  if (a.qkv_layout == QkvLayout::Separate) {
    // q over the rows that get queries: with k and v over every row, or, trimmed, each sequence's last
    // keep rows in a product of their own
    const bool q_apart = keep < T;
    const int first = q_apart ? 1 : 0;  // the first of q, k, v in the stacked product
    const Weight* ws[] = {&w.wq, &w.wk, &w.wv};
    const Weight* bs[] = {&w.bq, &w.bk, &w.bv};
    if (!linear_packed_stack(P + (q_apart ? qd : 0), total, u, R, std::span(ws).subspan(first),
                             std::span(bs).subspan(first))) {
      if (!q_apart) linear(P, total, u, R, w.wq, &w.bq, st.k);
      linear(P + qd, total, u, R, w.wk, &w.bk, st.k);
      linear(P + qd + kvd, total, u, R, w.wv, &w.bv, st.k);
    }
    if (q_apart)
      for (int s = 0; s < c.B; s++) {
        const size_t r0 = size_t(s) * T + T - keep;
        linear(P + r0 * total, total, u + r0 * d, keep, w.wq, &w.bq, st.k);
      }
  } else {
    linear(P, total, u, R, w.wqkv, &w.bqkv, st.k);
  }
  // [B, heads, T, dh]: sequence s's rows of P into its own heads (queries: its last keep rows)
  const size_t qs = size_t(H) * keep * dh, ks = size_t(K) * T * dh;
  grow(st.q, qs * c.B);
  grow(st.k, ks * c.B);
  grow(st.v, ks * c.B);
  const bool neox = a.qkv_layout == QkvLayout::NeoxPerHead;
  for (int s = 0; s < c.B; s++) {
    const float* Ps = P + size_t(s) * T * total;
    to_heads(st.q.data() + s * qs, Ps + size_t(T - keep) * total, keep, total, H, dh,
             [&](int h) { return neox ? h * 3 * dh : h * dh; });
    to_heads(st.k.data() + s * ks, Ps, T, total, K, dh, [&](int h) { return neox ? h * 3 * dh + dh : qd + h * dh; });
    to_heads(st.v.data() + s * ks, Ps, T, total, K, dh,
             [&](int h) { return neox ? h * 3 * dh + 2 * dh : qd + kvd + h * dh; });
  }
  scope.reset();
  hook_heads(c, b, "hook_q", st.q.data(), H, dh);
  hook_heads(c, b, "hook_k", st.k.data(), K, dh);
  hook_heads(c, b, "hook_v", st.v.data(), K, dh);
  KvCache* cache = c.cache;
  const int off = cache ? cache->len : 0;  // positions of the new rows: off .. off + T - 1 (st.pos)
  if (a.rotary()) {
    scope.emplace("rotary");
    const float *cs = c.rope_cs->data(), *sn = c.rope_sn->data();
    for (int s = 0; s < c.B; s++) {
      const int* pos = st.pos.data() + size_t(s) * T;
      rope_apply(st.q.data() + s * qs, H, keep, dh, a, cs, sn, pos + T - keep);
      rope_apply(st.k.data() + s * ks, K, T, dh, a, cs, sn, pos);
    }
    scope.reset();
    hook_heads(c, b, "hook_rot_q", st.q.data(), H, dh);
    hook_heads(c, b, "hook_rot_k", st.k.data(), K, dh);
  }
  // Buffers are reused once dead, so a forward holds each activation size once (docs/performance.md,
  // memory): z goes where the fused projection P was (P is dead once split into heads), hook_z's
  // [T, H, dh] where q was (dead once z exists); the MLP's hidden layer later reuses P's place too.
  float* z = P;
  const int win = a.window_of(l);
  const bool materialise = c.materialise_all || c.padded || c.wants(b, "hook_attn_scores") ||
                           c.wants(b, "hook_pattern") || a.attn_softcap > 0 || (win > 0 && win < T);
  // A run into an empty cache (a prompt's prefill) attends over its own rows only, as a run without a
  // cache: the fused kernel, unless something asks for the materialised path.
  const bool fused = !materialise && (!cache || off == 0);
  scope.emplace(fused ? "attention (flash)" : "attention (materialised)");
  // The new rows' (rotated) keys and values join the cache; a later run attends over everything cached.
  if (cache) kv_detail::append(*cache, l, st.k.data(), st.v.data(), c.B, K, T, dh);
  Ctx cq = c;  // the queries' view: keep rows a sequence, the last at position off + T − 1
  cq.T = keep;
  if (fused)
    attention_flash(c, z, keep);
  else if (cache)
    attention_materialised(cq, l, z, cache->k[size_t(l)].data(), cache->v[size_t(l)].data(), size_t(cache->cap) * dh,
                           off + T - keep);
  else
    attention_materialised(cq, l, z, st.k.data(), st.v.data(), size_t(T) * dh, T - keep);
  // z [B, H, keep, dh] -> zm [B·keep, H·dh] (which is TransformerLens's hook_z [(B,) T, H, dh] as it lies)
  float* zm = st.q.data();  // [B·keep, H·dh]: st.q's size
  for (int s = 0; s < c.B; s++) heads_to_rows(zm + s * qs, z + s * qs, H, keep, dh);
  scope.reset();
  c.maybe(b, "hook_z", zm, {T, H, dh});
  scope.emplace("W_O");
  linear(out, d, zm, c.B * keep, w.wo, &w.bo, st.k);
}

float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f)); }

// The gate's pre-activations of a fused gate_up_proj, [rows, ff] at stride ldg, at hook mlp.hook_pre: a
// contiguous copy for the hook, its edits written back (only when that hook is asked for).
void hook_strided_gate(const Ctx& c, const std::string& b, float* g, int ldg, int rows, int ff) {
  if (!c.wants(b, "mlp.hook_pre")) return;
  std::vector<float> tmp(size_t(rows) * ff);
  for (int t = 0; t < rows; t++) std::copy_n(g + long(t) * ldg, ff, tmp.data() + long(t) * ff);
  c.hook(b + "mlp.hook_pre", tmp.data(), c.shape({c.T, ff}));
  for (int t = 0; t < rows; t++) std::copy_n(tmp.data() + long(t) * ff, ff, g + long(t) * ldg);
}

// out [B·T, d] = mlp(u [B·T, d]). Hooks as TransformerLens's MLP and GatedMLP name them: mlp.hook_pre (the
// first map's output; gated: the gate's, before its activation), mlp.hook_pre_linear (gated: up's output),
// mlp.hook_post (what the down projection reads), each [T, d_mlp].
void mlp_block(const Ctx& c, int l, const float* u, float* out) {
  const Arch& a = c.a;
  const BlockWeights& w = c.m.blocks[size_t(l)];
  RunState& st = c.st;
  const int T = c.R(), d = a.d, ff = a.d_ff;  // every row of the batch
  const long n = long(T) * ff;
  const std::string b = "blocks." + std::to_string(l) + ".";
  grow(st.qkv, size_t(n));  // the attention's fused projection is dead by now: its place holds h
  float* h = st.qkv.data();
  if (a.mlp == MlpKind::GeluTanh || a.mlp == MlpKind::Gelu) {
    linear(h, ff, u, T, w.w_up, &w.b_up, st.k);
    c.maybe(b, "mlp.hook_pre", h, {c.T, ff});
    const bool tanh_form = a.mlp == MlpKind::GeluTanh;
    if (tanh_form) {
      // rowops.hpp's vectorised GELU (x / (1 + e^{-2y}), within 2e-7 relative of the training forward's
      // std::tanh form, ops.hpp), as the old fast GPT-2 forward had it: the scalar tanh took a third of GPT-2
      // small's MLP time at T = 1024.
      grow(st.zeros, size_t(ff));
      gelu_bias_rows(h, st.zeros.data(), T, ff);
    } else {
#pragma omp parallel for schedule(static) if (n >= kParallelElems)
      for (long i = 0; i < n; i++) h[i] = gelu_erf(h[i]);
    }
  } else {
    // gated: h = act(gate(u)) · up(u)
    float* g;
    int ldg;
    if (a.gate_up_fused) {
      grow(st.g, size_t(2) * n);
      linear(st.g.data(), 2 * ff, u, T, w.w_gate_up, nullptr, st.k);
      g = st.g.data(), ldg = 2 * ff;
#pragma omp parallel for schedule(static) if (n >= kParallelElems)
      for (int t = 0; t < T; t++) std::copy_n(g + long(t) * ldg + ff, ff, h + long(t) * ff);
      hook_strided_gate(c, b, g, ldg, T, ff);
    } else {
      grow(st.g, size_t(n));
      linear(st.g.data(), ff, u, T, w.w_gate, &w.b_gate, st.k);
      linear(h, ff, u, T, w.w_up, &w.b_up, st.k);
      g = st.g.data(), ldg = ff;
      c.maybe(b, "mlp.hook_pre", g, {c.T, ff});
    }
    c.maybe(b, "mlp.hook_pre_linear", h, {c.T, ff});
    // h ·= act(g), both activations written as g / (1 + e^{-s}) (silu: s = g; gelu_tanh: s = 2·√(2/π)(g +
    // 0.044715 g³)), the exponent capped at 88 where the result is 0 to float precision: rowops.hpp's
    // vector rows on AVX2/AVX-512 (the attention kernels' exp, < 2e-7 relative), std::exp on the portable path.
    gated_rows(h, g, ldg, T, ff, a.mlp == MlpKind::SwiGLU ? GateAct::Silu : GateAct::GeluTanh);
  }
  c.maybe(b, "mlp.hook_post", h, {c.T, ff});
  linear(out, d, h, T, w.w_down, &w.b_down, st.k);
}

void add_rows(float* x, const float* y, long n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelElems)
  for (long i = 0; i < n; i++) x[i] += y[i];
}

// Whether block l of this run goes on past its attention with each sequence's last kTrimRows rows only:
// the last block of a run that wants the last position's logits (last_only), when no hook asks for an
// activation after its attention output and the run does not stop there. Its MLP and residual for the
// earlier rows feed nothing (llama.cpp's prefill skips them too: its graph keeps only the output rows
// there). kTrimRows, not 1: more rows than the few-row kernels take (io::kQMatmulMaxRows), so the kept
// rows' products run in the kernels the whole block would have used, each row's sums in the same order
// (every op there is row by row), and the last row's values are the full block's bit for bit whatever
// the weight's layout (a Hugging Face Conv1D and its GGUF copy give the same bytes).
constexpr int kTrimRows = io::kQMatmulMaxRows + 1;

bool trims_block(const Ctx& c, const RunOptions& opt, int l) {
  if (!opt.last_only || l != c.a.n_layer - 1 || opt.stop_at_layer == l || c.a.attn_only() || c.T <= kTrimRows)
    return false;
  if (!c.hooks || !c.hooks->wants) return true;
  const std::string b = "blocks." + std::to_string(l) + ".";
  for (const char* s : {"hook_resid_mid", "ln2.hook_normalized", "mlp.hook_pre", "mlp.hook_pre_linear", "mlp.hook_post",
                        "hook_mlp_out", "hook_resid_post"})
    if (c.wants(b, s)) return false;
  return true;
}

// Whether a block that trims_block trims goes down to its last rows from its queries on: no hook asks for
// anything of that block (its attention's hooks see every row) and no sequence is padded. Its keys and
// values still cover every row; the queries, attention and W_O then run on the last kTrimRows rows, each
// row's sums as in the whole block (flash_attention_forward_last; the products' kernels as above).
bool trims_attention(const Ctx& c, int l) {
  if (c.padded) return false;
  if (!c.hooks || !c.hooks->wants) return true;
  const std::string b = "blocks." + std::to_string(l) + ".";
  for (const std::string& n : hook_names(c.m))
    if (n.starts_with(b) && c.hooks->wants(n)) return false;
  return true;
}

// The last r rows of each of the B sequences of p [B·T, d] to the front, [B·r, d] (in order, so nothing is
// overwritten before it is read).
void keep_last_rows(float* p, int B, int T, int r, int d) {
  for (int s = 0; s < B; s++) std::copy(p + (long(s) * T + T - r) * d, p + long(s + 1) * T * d, p + long(s) * r * d);
}

// A trimmed block's residual x (and st.xin, a parallel residual's block input; att unless null, i.e.
// already computed on the last rows alone) down to each sequence's last kTrimRows rows; c.T says so.
void trim_rows(Ctx& c, float* x, float* att) {
  const int d = c.a.d;
  keep_last_rows(x, c.B, c.T, kTrimRows, d);
  if (att) keep_last_rows(att, c.B, c.T, kTrimRows, d);
  if (c.a.parallel_residual) keep_last_rows(c.st.xin.data(), c.B, c.T, kTrimRows, d);
  c.T = kTrimRows;
}

// Block l after its attention output att: x += mlp(norm(x + att)) + att, or with a parallel residual
// x += att + mlp(norm(the block's input, st.xin)), every hook point on the way, over the c.R() rows
// (each sequence's last kTrimRows in a trimmed block: trim_rows).
void mlp_half(const Ctx& c, int l, float* x, float* att) {
  const Arch& a = c.a;
  const BlockWeights& w = c.m.blocks[size_t(l)];
  RunState& st = c.st;
  const int d = a.d;
  const std::string b = "blocks." + std::to_string(l) + ".";
  const int R = c.R(), T = c.T;
  const long n = long(R) * d;
  // The MLP's output goes where the attention's was (dead once added to x), unless the residual is
  // parallel (HF: mlp_out + attn_out + x needs both).
  if (a.parallel_residual) grow(st.m, size_t(n));
  float* mo = a.parallel_residual ? st.m.data() : att;
  float* u = st.u.data();
  if (a.parallel_residual) {
    norm_rows(u, st.xin.data(), w.ln2_w, w.ln2_b, a, R, d);
  } else {
    add_rows(x, att, n);
    c.maybe(b, "hook_resid_mid", x, {T, d});
    profile::Scope p_("norm");
    norm_rows(u, x, w.ln2_w, w.ln2_b, a, R, d);
  }
  c.maybe(b, "ln2.hook_normalized", u, {T, d});
  {
    profile::Scope p_("mlp block");
    mlp_block(c, l, u, mo);
  }
  if (a.post_norms) norm_rows(mo, mo, w.post_mlp_w, Weight{}, a, R, d);
  c.maybe(b, "hook_mlp_out", mo, {T, d});
  if (a.parallel_residual) add_rows(mo, att, n);  // HF: mlp_out + attn_out + x
  add_rows(x, mo, n);
}

}  // namespace

void apply_rotary(const Arch& a, float* x, int n, const int* pos) {
  if (!a.rotary()) return;
  int mx = 0;
  for (int r = 0; r < n; r++) mx = std::max(mx, pos[r]);
  std::vector<float> cs, sn;
  rope_tables(a, mx + 1, cs, sn);
  for (int r = 0; r < n; r++) rope_apply(x + size_t(r) * a.dh, 1, 1, a.dh, a, cs.data(), sn.data(), pos + r);
}

std::vector<std::string> hook_names(const Model& m) {
  const Arch& a = m.arch;
  std::vector<std::string> n;
  for (int l = 0; l < a.n_layer; l++) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    n.push_back(b + "hook_resid_pre");
    n.push_back(b + "ln1.hook_normalized");
    for (const char* s : {"hook_q", "hook_k", "hook_v"}) n.push_back(b + "attn." + s);
    if (a.rotary()) {
      n.push_back(b + "attn.hook_rot_q");
      n.push_back(b + "attn.hook_rot_k");
    }
    for (const char* s : {"hook_attn_scores", "hook_pattern", "hook_z"}) n.push_back(b + "attn." + s);
    n.push_back(b + "hook_attn_out");
    if (!a.attn_only()) {
      if (!a.parallel_residual) n.push_back(b + "hook_resid_mid");
      n.push_back(b + "ln2.hook_normalized");
      n.push_back(b + "mlp.hook_pre");
      if (a.gated_mlp()) n.push_back(b + "mlp.hook_pre_linear");
      n.push_back(b + "mlp.hook_post");
      n.push_back(b + "hook_mlp_out");
    }
    n.push_back(b + "hook_resid_post");
  }
  n.push_back("ln_final.hook_normalized");
  n.push_back("logits");
  return n;
}

double lm_forward_flops(const Arch& a, int T, bool last_only) {
  const double d = a.d, t = T, causal = t * (t + 1) / 2;
  double per_block = 2 * t * d * (a.q_dim() + 2.0 * a.kv_dim())  // Q, K, V
                     + 4 * causal * a.H * a.dh                    // q·kᵀ and A·v over the causal pairs
                     + 2 * t * a.q_dim() * d;                     // W_O
  double mlp_row = 0;
  if (!a.attn_only()) {
    mlp_row = 2 * d * a.d_ff * (a.gated_mlp() ? 3 : 2);
    per_block += t * mlp_row;
  }
  // last_only (unhooked): the last block runs on the last kTrimRows rows alone past its keys and values
  // (trims_block, trims_attention): their queries (a separate q weight's product; a fused one's runs on
  // every row), their causal pairs, W_O and the MLP
  double trimmed = 0;
  if (last_only && T > kTrimRows && !a.attn_only()) {
    const double kept_pairs = kTrimRows * t - kTrimRows * (kTrimRows - 1) / 2.0;
    const double q_row = a.qkv_layout == QkvLayout::Separate ? 2 * d * a.q_dim() : 0;
    trimmed = (t - kTrimRows) * (mlp_row + 2 * a.q_dim() * d + q_row) + 4 * (causal - kept_pairs) * a.H * a.dh;
  }
  return a.n_layer * per_block + 2 * (last_only ? 1 : t) * d * a.vocab_size - trimmed;
}

// Each row's position and the start of its run (st.pos, st.seg) from the attention mask, which must give
// each of the B sequences one contiguous run of real tokens; whether any sequence is padded. Without a
// mask (or a batch) every row is real and row t of a sequence sits at position off + t.
static bool positions(RunState& st, const RunOptions& opt, int B, int T, int off) {
  st.pos.resize(size_t(B) * T);
  st.seg.assign(size_t(B) * T, 0);
  const std::vector<uint8_t>* mask = opt.attention_mask;
  if (mask && mask->size() != size_t(B) * T)
    usage_error("attention_mask: " + std::to_string(mask->size()) + " values for a batch of " + std::to_string(B) +
                " × " + std::to_string(T) + " tokens");
  bool padded = false;
  for (int b = 0; b < B; b++) {
    int s = 0, e = T;  // the real run [s, e)
    if (mask) {
      const uint8_t* mb = mask->data() + size_t(b) * T;
      while (s < T && !mb[s]) s++;
      e = s;
      while (e < T && mb[e]) e++;
      if (s == T) usage_error("attention_mask: sequence " + std::to_string(b) + " has no real token");
      for (int t = e; t < T; t++)
        if (mb[t])
          usage_error("attention_mask: sequence " + std::to_string(b) +
                      "'s real tokens are not one contiguous run (pad on the left or on the right only)");
      padded = padded || s > 0 || e < T;
    }
    for (int t = 0; t < T; t++) {
      const int start = t < s ? 0 : t < e ? s : e;
      st.seg[size_t(b) * T + t] = start;
      st.pos[size_t(b) * T + t] = off + t - start;
    }
  }
  return padded;
}

const std::vector<float>& run(const Model& m, const std::vector<int>& ids, RunState& st, const RunOptions& opt) {
  const Arch& a = m.arch;
  if (opt.batch < 0) usage_error("batch: " + std::to_string(opt.batch) + " sequences");
  const int B = std::max(1, opt.batch);
  if (ids.size() % size_t(B))
    usage_error("batch: " + std::to_string(ids.size()) + " token ids do not split into " + std::to_string(B) +
                " sequences of one length");
  if (opt.attention_mask && opt.batch == 0) usage_error("attention_mask: only with a batch");
  const int T = int(ids.size()) / B, R = int(ids.size()), d = a.d, V = a.vocab_size;
  if (T < 1) usage_error("no tokens: the input is empty");
  const int before = opt.cache ? opt.cache->len : 0;
  if (before + T > a.n_ctx)
    usage_error(std::to_string(before + T) + " tokens" + (before ? " (" + std::to_string(before) + " cached)" : std::string()) +
                ", but the model's context is " + std::to_string(a.n_ctx) +
                " positions; shorten the input");
  for (int r = 0; r < R; r++)
    if (ids[size_t(r)] < 0 || ids[size_t(r)] >= V)
      usage_error("token id " + std::to_string(ids[size_t(r)]) + " at position " +
                  (opt.batch > 0 ? "[" + std::to_string(r / T) + ", " + std::to_string(r % T) + "]" : std::to_string(r)) +
                  " is outside the vocabulary [0, " + std::to_string(V) + ")");
  KvCache* cache = opt.cache;
  if (cache) kv_detail::reserve(*cache, a, B, T);  // sized for the B sequences (kv_batch.cpp)
  const int off = cache ? cache->len : 0;
  std::vector<int> pad;  // the cache's left padding after this run, committed with its length
  const bool padded = cache ? kv_detail::positions(st, *cache, opt.attention_mask, B, T, pad)
                            : positions(st, opt, B, T, off);
  const auto commit = [&] {
    if (!cache) return;
    cache->len += T;
    cache->pad = std::move(pad);
  };
  Ctx c{m, a, st, opt.hooks, T, opt.materialise_all, cache, B, opt.batch > 0, padded};
  std::vector<float> rope_cs, rope_sn;  // once for every layer
  if (a.rotary()) rope_tables(a, off + T, rope_cs, rope_sn);
  c.rope_cs = &rope_cs, c.rope_sn = &rope_sn;
  st.T = T;
  st.B = B;
  const size_t Td = size_t(R) * d;
  grow(st.x, Td);
  grow(st.u, Td);
  grow(st.a, Td);
  float *x = st.x.data(), *u = st.u.data(), *att = st.a.data();

  if (opt.start_at_layer < 0 || opt.start_at_layer >= a.n_layer)
    usage_error("start_at_layer " + std::to_string(opt.start_at_layer) + " is outside [0, " + std::to_string(a.n_layer) + ")");
  if (opt.start_at_layer > 0 && (!opt.resid_pre || cache))
    usage_error("start_at_layer needs the block's input residual (resid_pre) and no K/V cache");
  if (opt.start_at_layer > 0) {
    std::copy_n(opt.resid_pre, Td, x);
  } else {  // x = embed[ids] (+ wpe[t]) (· √d for Gemma)
    profile::Scope p_("embedding");
    const float es = a.embed_scale ? float(std::sqrt(double(d))) : 1.0f;
    const bool learned = a.pos == PosKind::Learned;

#pragma omp parallel for schedule(static) if (long(Td) >= kParallelElems)
    for (int t = 0; t < R; t++) {
      float* xt = x + long(t) * d;
      m.wte.read(int64_t(ids[size_t(t)]) * d, d, xt);
      if (learned) {
        float* p = att + long(t) * d;  // the attention output's place is free until block 0
        m.wpe.read(int64_t(st.pos[size_t(t)]) * d, d, p);
        for (int j = 0; j < d; j++) xt[j] += p[j];
      }
      if (es != 1.0f)
        for (int j = 0; j < d; j++) xt[j] *= es;
    }
  }

  for (int l = opt.start_at_layer; l < a.n_layer; l++) {
    const BlockWeights& w = m.blocks[size_t(l)];
    const std::string b = "blocks." + std::to_string(l) + ".";
    c.maybe(b, "hook_resid_pre", x, {T, d});
    {
      profile::Scope p_("norm");
      norm_rows(u, x, w.ln1_w, w.ln1_b, a, R, d);
    }
    c.maybe(b, "ln1.hook_normalized", u, {T, d});
    if (a.parallel_residual && !a.attn_only()) {  // the MLP reads the block's input, not resid_mid
      grow(st.xin, Td);
      std::copy_n(x, Td, st.xin.data());
    }
    // A trimmed last block (trims_block) runs on each sequence's last kTrimRows rows past its attention
    // output, or past its keys and values when nothing of the block is hooked (trims_attention).
    const bool trim = trims_block(c, opt, l), whole = trim && trims_attention(c, l);
    attention_block(c, l, u, att, whole ? kTrimRows : T);
    if (whole) trim_rows(c, x, nullptr);
    if (a.post_norms) norm_rows(att, att, w.post_attn_w, Weight{}, a, c.R(), d);
    c.maybe(b, "hook_attn_out", att, {T, d});
    if (trim && !whole) trim_rows(c, x, att);
    if (!a.attn_only()) mlp_half(c, l, x, att);
    else add_rows(x, att, long(Td));
    c.maybe(b, "hook_resid_post", x, {T, d});
    if (opt.stop_at_layer == l) {
      commit();
      st.logits.clear();
      return st.logits;
    }
  }

  // logits = norm_f(x) · Wᵀ (lm_head, or the embedding when tied), soft-capped for Gemma 2
  // x holds B · c.T rows: c.T = T, or fewer after a trimmed last block (trims_block)
  const int rows = opt.last_only ? B : R;  // last_only: each sequence's last row
  const float* xf = x + long(c.R() - rows) * d;
  if (opt.last_only && B > 1) {
    for (int s = 0; s < B; s++) std::copy_n(x + (long(s) * c.T + c.T - 1) * d, d, u + long(s) * d);
    xf = u;  // normalised in place
  }
  norm_rows(u, xf, m.lnf_w, m.lnf_b, a, rows, d);
  c.maybe(std::string(), "ln_final.hook_normalized", u, {opt.last_only ? 1 : T, d});
  st.logits.resize(size_t(rows) * V);
  const Weight& W = m.lm_head.present() ? m.lm_head : m.wte;
  {
    profile::Scope p_("logits (unembedding)");
    linear(st.logits.data(), V, u, rows, W, nullptr, st.k);
  }
  if (a.final_softcap > 0) {
    const float cap = float(a.final_softcap);
    for (auto& v : st.logits) v = cap * std::tanh(v / cap);
  }
  c.maybe(std::string(), "logits", st.logits.data(), {opt.last_only ? 1 : T, V});
  commit();
  return st.logits;
}

namespace {
// run() with a hook that copies every activation `keep` accepts (all when empty; the logits always).
std::map<std::string, Tensor> cached_run(const Model& m, const std::vector<int>& ids, RunOptions o,
                                         const std::function<bool(const std::string&)>& keep) {
  std::map<std::string, Tensor> cache;
  Hooks h;
  h.wants = [&](const std::string& n) { return !keep || keep(n) || n == "logits"; };
  h.fn = [&](const std::string& n, ActView v) {
    Tensor t(v.shape);
    std::copy_n(v.data, v.numel(), t.data());
    cache[n] = std::move(t);
  };
  RunState st;
  o.hooks = &h;
  run(m, ids, st, o);
  return cache;
}
}  // namespace

std::map<std::string, Tensor> run_with_cache(const Model& m, const std::vector<int>& ids,
                                             const std::function<bool(const std::string&)>& keep,
                                             bool materialise_all) {
  RunOptions o;
  o.materialise_all = materialise_all;
  return cached_run(m, ids, o, keep);
}

std::map<std::string, Tensor> run_with_cache_batch(const Model& m, const std::vector<int>& ids, int batch,
                                                   const std::vector<uint8_t>& mask,
                                                   const std::function<bool(const std::string&)>& keep,
                                                   bool materialise_all) {
  if (batch < 1) usage_error("batch: " + std::to_string(batch) + " sequences");
  RunOptions o;
  o.materialise_all = materialise_all;
  o.batch = batch;
  o.attention_mask = mask.empty() ? nullptr : &mask;
  return cached_run(m, ids, o, keep);
}

}  // namespace qkv

// The fast inference forward (inference.hpp): BLIS GEMMs, the flash kernel, fused row kernels.
#include "qkv/inference.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "qkv/error.hpp"
#include "qkv/flash.hpp"
#include "qkv/gemm.hpp"
#include "model/embed.hpp"

namespace qkv {
namespace {

// Row loops go to OpenMP threads only when there is enough work to pay for waking them.
constexpr long kParallelElems = 1 << 15;

// u [d] = ln(x [d]) · w + b. torch: F.layer_norm(x, (d,), w, b, eps). The `omp simd` reductions let
// the compiler keep several partial sums (a fixed order for a given build); two passes for the variance.
inline void layernorm_row(float* y, const float* x, const float* w, const float* b, int d, float eps) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int j = 0; j < d; j++) s += x[j];
  const float m = s / float(d);
  float var = 0;
#pragma omp simd reduction(+ : var)
  for (int j = 0; j < d; j++) var += (x[j] - m) * (x[j] - m);
  const float r = 1.0f / std::sqrt(var / float(d) + eps);
#pragma omp simd
  for (int j = 0; j < d; j++) y[j] = (x[j] - m) * r * w[j] + b[j];
}

// y [N, d] = ln(x [N, d])
void layernorm_rows(float* y, const float* x, const float* w, const float* b, int N, int d, float eps) {
#pragma omp parallel for schedule(static) if (long(N) * d >= kParallelElems)
  for (int i = 0; i < N; i++) layernorm_row(y + long(i) * d, x + long(i) * d, w, b, d, eps);
}

// h [n] = gelu(h + b), tanh approximation written as x·σ(2y): 0.5·x·(1 + tanh y) = x / (1 + e^{-2y}),
// y = √(2/π)(x + 0.044715 x³). torch: F.gelu(h + b, approximate="tanh"). The exp is the flash kernel's
// AVX-512 one (relative error < 8e-8) when that path is active, else std::exp. −2y is capped at 88 so
// the exp stays finite (then the result is x/(1 + 1.6e38), i.e. 0 to float precision, as it should).
void gelu_bias_row(float* h, const float* b, int n, bool vexp_ok) {
  constexpr int kChunk = 256;
  constexpr float k0 = 0.7978845608028654f, k1 = 0.044715f;
  alignas(64) float t[kChunk];
  for (int j0 = 0; j0 < n; j0 += kChunk) {
    const int m = std::min(kChunk, n - j0);
    float* hj = h + j0;
    const float* bj = b + j0;
#pragma omp simd
    for (int j = 0; j < m; j++) {
      const float x = hj[j] + bj[j];
      hj[j] = x;
      const float e = -2.0f * (k0 * (x + k1 * x * x * x));
      t[j] = e < 88.0f ? e : 88.0f;
    }
    if (!vexp_ok || !flash_detail::vexp(t, t, m))
      for (int j = 0; j < m; j++) t[j] = std::exp(t[j]);
#pragma omp simd
    for (int j = 0; j < m; j++) hj[j] = hj[j] / (1.0f + t[j]);
  }
}

void gelu_bias_rows(float* h, const float* b, int N, int n) {
  const bool vexp_ok = flash_uses_avx512();
#pragma omp parallel for schedule(static) if (long(N) * n >= kParallelElems)
  for (int i = 0; i < N; i++) gelu_bias_row(h + long(i) * n, b, n, vexp_ok);
}

// qkv [T, 3d] + b_attn -> q, k, v [H, T, dh]. torch: (qkv + b).split(d, -1); q.view(T, H, dh).transpose(0, 1)
void split_heads_bias(float* q, float* k, float* v, const float* qkv, const float* b, int T, int d, int H) {
  const int dh = d / H;
  float* dst[3] = {q, k, v};
#pragma omp parallel for schedule(static) if (long(T) * d >= kParallelElems)
  for (int t = 0; t < T; t++)
    for (int part = 0; part < 3; part++)
      for (int h = 0; h < H; h++) {
        const long c = long(part) * d + long(h) * dh;
        const float* src = qkv + long(t) * 3 * d + c;
        float* o = dst[part] + (long(h) * T + t) * dh;
#pragma omp simd
        for (int e = 0; e < dh; e++) o[e] = src[e] + b[c + e];
      }
}

// z [H, T, dh] -> zm [T, d]. torch: z.transpose(0, 1).reshape(T, d)
void merge_heads(float* zm, const float* z, int T, int d, int H) {
  const int dh = d / H;
#pragma omp parallel for schedule(static) if (long(T) * d >= kParallelElems)
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++) std::copy_n(z + (long(h) * T + t) * dh, dh, zm + long(t) * d + long(h) * dh);
}

// x [N, d] += b [d]
void add_bias_rows(float* x, const float* b, int N, int d) {
#pragma omp parallel for schedule(static) if (long(N) * d >= kParallelElems)
  for (int i = 0; i < N; i++) {
    float* xi = x + long(i) * d;
#pragma omp simd
    for (int j = 0; j < d; j++) xi[j] += b[j];
  }
}

bool same_shape(const GPT2Config& a, const GPT2Config& b) {
  return a.vocab_size == b.vocab_size && a.n_embd == b.n_embd && a.n_head == b.n_head &&
         a.mlp_dim() == b.mlp_dim() && a.attn_only == b.attn_only;
}

}  // namespace

void InferenceState::reserve(const GPT2Config& c, int T, bool full) {
  if (T < 1) usage_error("InferenceState: max_T must be at least 1");
  config = c;
  max_T = T;
  full_logits = full;
  const size_t Td = size_t(T) * c.n_embd;
  for (auto* b : {&x, &u, &q, &k, &v, &z, &zm}) b->assign(Td, 0.0f);
  qkv.assign(3 * Td, 0.0f);
  h.assign(c.attn_only ? 0 : size_t(T) * c.mlp_dim(), 0.0f);
  lse.assign(size_t(T) * c.n_head, 0.0f);
  logits.clear();
  logits.shrink_to_fit();
  logits.reserve((full ? size_t(T) : 1) * c.vocab_size);
}

double forward_flops(const GPT2Config& c, int T, bool last_only) {
  const double d = c.n_embd, t = T, causal = t * (t + 1) / 2;
  double per_block = 2 * t * d * 3 * d  // c_attn
                     + 4 * causal * d   // q·kᵀ and A·v over the causal pairs, all heads
                     + 2 * t * d * d;   // c_proj
  if (!c.attn_only) per_block += 4 * t * d * c.mlp_dim();  // c_fc and mlp c_proj
  return c.n_layer * per_block + 2 * (last_only ? 1 : t) * d * c.vocab_size;
}

const std::vector<float>& forward_fast(const GPT2& m, const std::vector<int>& ids, InferenceState& st,
                                       bool last_only) {
  const GPT2Config& c = m.config;
  const int T = int(ids.size()), d = c.n_embd, H = c.n_head, dh = c.head_dim(), V = c.vocab_size;
  const int inner = c.mlp_dim();
  model_detail::check_input_ids(c, ids);
  if (st.max_T < T || !same_shape(st.config, c) || (!last_only && !st.full_logits))
    st.reserve(c, std::max(T, st.max_T), (st.max_T > 0 && st.full_logits) || !last_only);

  const float* P = m.params.data();
  const float eps = float(c.layer_norm_epsilon);
  const float scale = 1.0f / std::sqrt(float(dh));
  float *x = st.x.data(), *u = st.u.data();

  // x = wte[ids] + wpe[positions]
  model_detail::embed_tokens(m, ids, x, long(T) * d >= kParallelElems);

  for (int l = 0; l < c.n_layer; l++) {
    const LayerOffsets& o = m.layers[size_t(l)];
    // attention sublayer: x += c_proj(attention(split(c_attn(ln_1(x)))))
    layernorm_rows(u, x, P + o.ln1_w, P + o.ln1_b, T, d, eps);
    gemm<float>(false, false, T, 3 * d, d, 1.0f, u, d, P + o.W_attn, 3 * d, 0.0f, st.qkv.data(), 3 * d);
    split_heads_bias(st.q.data(), st.k.data(), st.v.data(), st.qkv.data(), P + o.b_attn, T, d, H);
    flash_attention_forward(st.q.data(), st.k.data(), st.v.data(), st.z.data(), st.lse.data(), H, T, dh,
                            scale);
    merge_heads(st.zm.data(), st.z.data(), T, d, H);
    add_bias_rows(x, P + o.b_O, T, d);
    gemm<float>(false, false, T, d, d, 1.0f, st.zm.data(), d, P + o.W_O, d, 1.0f, x, d);
    if (c.attn_only) continue;
    // MLP sublayer: x += c_proj(gelu(c_fc(ln_2(x))))
    layernorm_rows(u, x, P + o.ln2_w, P + o.ln2_b, T, d, eps);
    gemm<float>(false, false, T, inner, d, 1.0f, u, d, P + o.W_fc, inner, 0.0f, st.h.data(), inner);
    gelu_bias_rows(st.h.data(), P + o.b_fc, T, inner);
    add_bias_rows(x, P + o.b_proj, T, d);
    gemm<float>(false, false, T, d, inner, 1.0f, st.h.data(), inner, P + o.W_proj, d, 1.0f, x, d);
  }

  // logits = ln_f(x) · wteᵀ, over every row or only the last
  const float* wte = P + m.wte;
  const int rows = last_only ? 1 : T;
  const float* xf = x + long(T - rows) * d;
  layernorm_rows(u, xf, P + m.lnf_w, P + m.lnf_b, rows, d, eps);
  st.logits.resize(size_t(rows) * V);  // within the reserved capacity: no allocation
  gemm<float>(false, true, rows, V, d, 1.0f, u, d, wte, d, 0.0f, st.logits.data(), V);
  return st.logits;
}

}  // namespace qkv

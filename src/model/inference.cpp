// The fast inference forward (inference.hpp): BLIS GEMMs, the flash kernel, fused row kernels.
// `qkv bench forward --profile` times each op (profile.hpp).
#include "qkv/inference.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "qkv/error.hpp"
#include "qkv/flash.hpp"
#include "qkv/gemm.hpp"
#include "qkv/profile.hpp"
#include "qkv/rowops.hpp"
#include "model/embed.hpp"

namespace qkv {
namespace {

// Row loops go to OpenMP threads only when there is enough work to pay for waking them.
constexpr long kParallelElems = 1 << 15;

// LayerNorm and bias + GELU rows: rowops.hpp (vectorised on the attention kernels' path).

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

  // Each op in a profile::Scope: `qkv bench forward --profile` prints the breakdown (off: one atomic
  // load per op).
  using Scope = profile::Scope;
  // x = wte[ids] + wpe[positions]
  {
    Scope p_("embedding");
    model_detail::embed_tokens(m, ids, x, long(T) * d >= kParallelElems);
  }

  for (int l = 0; l < c.n_layer; l++) {
    const LayerOffsets& o = m.layers[size_t(l)];
    // attention sublayer: x += c_proj(attention(split(c_attn(ln_1(x)))))
    {
      Scope p_("layernorm");
      layernorm_rows(u, x, P + o.ln1_w, P + o.ln1_b, T, d, eps);
    }
    {
      Scope p_("gemm c_attn");
      gemm<float>(false, false, T, 3 * d, d, 1.0f, u, d, P + o.W_attn, 3 * d, 0.0f, st.qkv.data(), 3 * d);
    }
    {
      Scope p_("split heads + bias");
      split_heads_bias(st.q.data(), st.k.data(), st.v.data(), st.qkv.data(), P + o.b_attn, T, d, H);
    }
    {
      Scope p_("attention");
      flash_attention_forward(st.q.data(), st.k.data(), st.v.data(), st.z.data(), st.lse.data(), H, T, dh,
                              scale);
    }
    {
      Scope p_("merge heads");
      merge_heads(st.zm.data(), st.z.data(), T, d, H);
    }
    {
      Scope p_("bias add");
      add_bias_rows(x, P + o.b_O, T, d);
    }
    {
      Scope p_("gemm attn c_proj");
      gemm<float>(false, false, T, d, d, 1.0f, st.zm.data(), d, P + o.W_O, d, 1.0f, x, d);
    }
    if (c.attn_only) continue;
    // MLP sublayer: x += c_proj(gelu(c_fc(ln_2(x))))
    {
      Scope p_("layernorm");
      layernorm_rows(u, x, P + o.ln2_w, P + o.ln2_b, T, d, eps);
    }
    {
      Scope p_("gemm c_fc");
      gemm<float>(false, false, T, inner, d, 1.0f, u, d, P + o.W_fc, inner, 0.0f, st.h.data(), inner);
    }
    {
      Scope p_("gelu + bias");
      gelu_bias_rows(st.h.data(), P + o.b_fc, T, inner);
    }
    {
      Scope p_("bias add");
      add_bias_rows(x, P + o.b_proj, T, d);
    }
    {
      Scope p_("gemm mlp c_proj");
      gemm<float>(false, false, T, d, inner, 1.0f, st.h.data(), inner, P + o.W_proj, d, 1.0f, x, d);
    }
  }

  // logits = ln_f(x) · wteᵀ, over every row or only the last
  const float* wte = P + m.wte;
  const int rows = last_only ? 1 : T;
  const float* xf = x + long(T - rows) * d;
  {
    Scope p_("layernorm");
    layernorm_rows(u, xf, P + m.lnf_w, P + m.lnf_b, rows, d, eps);
  }
  st.logits.resize(size_t(rows) * V);  // within the reserved capacity: no allocation
  {
    Scope p_("gemm unembed");
    gemm<float>(false, true, rows, V, d, 1.0f, u, d, wte, d, 0.0f, st.logits.data(), V);
  }
  return st.logits;
}

}  // namespace qkv

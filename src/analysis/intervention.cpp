#include "qkv/analysis/intervention.hpp"

#include <algorithm>
#include <cmath>

#include "qkv/analysis/head_weights.hpp"
#include "qkv/error.hpp"
#include "qkv/gemm.hpp"
#include "qkv/ops.hpp"

namespace qkv::analysis {
namespace {

// The attention sublayer with the edit: the same op list as attention_sublayer_forward, plus one step.
void edited_attention(float* out, const float* x, const AttentionParams<float>& p, const AttentionShape& s,
                      const HeadIntervention& iv, AttentionCache<float>& c, std::vector<float>& head_pattern) {
  c.resize(s);
  const int T = s.T, d = s.d, H = s.H, dh = s.dh();
  layernorm_forward(c.u.data(), c.mean.data(), c.rstd.data(), x, p.ln_w, p.ln_b, T, d, s.eps);
  affine_forward(c.qkv.data(), c.u.data(), p.W_attn, p.b_attn, T, d, 3 * d);
  split_qkv_forward(c.q.data(), c.k.data(), c.v.data(), c.qkv.data(), T, d, H);
  scores_forward(c.S.data(), c.q.data(), c.k.data(), H, T, dh, 1.0f / std::sqrt(float(dh)));
  c.A = c.S;
  causal_mask_forward(c.A.data(), H, T);
  softmax_forward(c.A.data(), c.A.data(), int64_t(H) * T, T);
  float* A = c.A.data() + size_t(iv.head) * T * T;
  if (iv.mode == HeadAblation::Pattern)
    for (int i = 0; i < T; i++)
      for (int j = 0; j < T; j++) A[size_t(i) * T + j] = j <= i ? 1.0f / float(i + 1) : 0.0f;
  if (iv.mode == HeadAblation::Values)
    std::fill(c.v.begin() + int64_t(iv.head) * T * dh, c.v.begin() + int64_t(iv.head + 1) * T * dh, 0.0f);
  head_pattern.assign(A, A + size_t(T) * T);
  mix_forward(c.z.data(), c.A.data(), c.v.data(), H, T, dh);
  merge_heads_forward(c.z_merged.data(), c.z.data(), T, d, H);
  affine_forward(c.attn_out.data(), c.z_merged.data(), p.W_O, p.b_O, T, d, d);
  for (size_t i = 0; i < size_t(T) * d; i++) out[i] = x[i] + c.attn_out[i];
}

}  // namespace

InterventionRun forward_with_intervention(const GPT2& m, const std::vector<int>& ids, const HeadIntervention& iv) {
  check_head(m, iv.layer, iv.head);
  const GPT2Config& cfg = m.config;
  const int T = int(ids.size()), d = cfg.n_embd, V = cfg.vocab_size;
  if (T < 1 || T > cfg.n_positions)
    usage_error("forward_with_intervention: " + std::to_string(T) + " tokens, the model takes 1 to " +
                std::to_string(cfg.n_positions));
  for (int id : ids)
    if (id < 0 || id >= V) usage_error("forward_with_intervention: token id " + std::to_string(id) + " outside [0, " +
                                       std::to_string(V) + ")");
  const float* P = m.params.data();
  std::vector<float> x(size_t(T) * d), mid(size_t(T) * d);
  for (int t = 0; t < T; t++)  // x = wte[ids] + wpe[positions]
    for (int j = 0; j < d; j++) x[size_t(t) * d + j] = P[m.wte + int64_t(ids[size_t(t)]) * d + j] + P[m.wpe + int64_t(t) * d + j];
  AttentionCache<float> ac;
  MlpCache<float> mc;
  InterventionRun run;
  for (int l = 0; l < cfg.n_layer; l++) {
    if (l == iv.layer)
      edited_attention(mid.data(), x.data(), m.attention(l, P), m.attention_shape(T), iv, ac, run.head_pattern);
    else
      attention_sublayer_forward(mid.data(), x.data(), m.attention(l, P), m.attention_shape(T), ac);
    if (cfg.attn_only)
      x = mid;
    else
      mlp_sublayer_forward(x.data(), mid.data(), m.mlp(l, P), m.mlp_shape(T), mc);
  }
  std::vector<float> lnf(size_t(T) * d), mean(static_cast<size_t>(T)), rstd(static_cast<size_t>(T));
  layernorm_forward(lnf.data(), mean.data(), rstd.data(), x.data(), P + m.lnf_w, P + m.lnf_b, T, d,
                    cfg.layer_norm_epsilon);
  run.logits.resize(size_t(T) * V);
  gemm<float>(false, true, T, V, d, 1.0f, lnf.data(), d, P + m.wte, d, 0.0f, run.logits.data(), V);  // ln_f(x)·wteᵀ
  return run;
}

}  // namespace qkv::analysis

namespace qkv::analysis {

InterventionRun forward_with_intervention(const Model& m, const std::vector<int>& ids, const HeadIntervention& iv) {
  check_head(m, iv.layer, iv.head);
  const Arch& a = m.arch;
  const int T = int(ids.size()), H = a.H, dh = a.dh, l = iv.layer, head = iv.head;
  const std::string pattern = "blocks." + std::to_string(l) + ".attn.hook_pattern";
  const std::string z = "blocks." + std::to_string(l) + ".attn.hook_z";
  InterventionRun run;
  Hooks hooks;
  hooks.wants = [&](const std::string& n) { return n == pattern || (iv.mode == HeadAblation::Values && n == z); };
  hooks.fn = [&](const std::string& n, ActView v) {
    if (n == pattern) {  // [H, T, T]
      float* A = v.data + size_t(head) * T * T;
      if (iv.mode == HeadAblation::Pattern)
        for (int i = 0; i < T; i++) {
          int allowed = 0;
          for (int j = 0; j < T; j++) allowed += visible(a, l, i, j);
          for (int j = 0; j < T; j++) A[size_t(i) * T + j] = visible(a, l, i, j) ? 1.0f / float(allowed) : 0.0f;
        }
      run.head_pattern.assign(A, A + size_t(T) * T);
    } else {  // hook_z [T, H, dh]: the head's slice
      for (int t = 0; t < T; t++) std::fill_n(v.data + (size_t(t) * H + head) * dh, dh, 0.0f);
    }
  };
  RunState st;
  RunOptions o;
  o.hooks = &hooks;
  run.logits = qkv::run(m, ids, st, o);
  return run;
}

}  // namespace qkv::analysis

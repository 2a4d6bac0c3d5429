// GPT-2's forward: embeddings, blocks (attention sublayer, then MLP sublayer), ln_f, tied unembedding.
#include <cmath>
#include <limits>

#include "qkv/gemm.hpp"
#include "qkv/model.hpp"
#include "qkv/ops.hpp"
#include "model/embed.hpp"

namespace qkv {
namespace {

Tensor copy_tensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t(std::move(shape));
  std::copy(v.begin(), v.begin() + t.numel(), t.data());
  return t;
}

// [H, T, dh] -> [T, H, dh], TransformerLens's layout for hook_q/k/v/z.
Tensor heads_last(const std::vector<float>& v, int H, int T, int dh) {
  Tensor t({T, H, dh});
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T; i++)
      std::copy(v.begin() + (int64_t(h) * T + i) * dh, v.begin() + (int64_t(h) * T + i + 1) * dh,
                t.data() + (int64_t(i) * H + h) * dh);
  return t;
}

void record_block(const GPT2& m, int l, const Activations& a, Trace& tr) {
  const int T = a.T, d = m.config.n_embd, H = m.config.n_head, dh = m.config.head_dim();
  const std::string b = "blocks." + std::to_string(l) + ".";
  const AttentionCache<float>& c = a.attn[size_t(l)];
  tr.acts[b + "hook_resid_pre"] = copy_tensor(a.resid[size_t(l)], {T, d});
  tr.acts[b + "ln1.hook_normalized"] = copy_tensor(c.u, {T, d});
  tr.acts[b + "attn.hook_q"] = heads_last(c.q, H, T, dh);
  tr.acts[b + "attn.hook_k"] = heads_last(c.k, H, T, dh);
  tr.acts[b + "attn.hook_v"] = heads_last(c.v, H, T, dh);
  tr.acts[b + "attn.hook_z"] = heads_last(c.z, H, T, dh);
  Tensor scores = copy_tensor(c.S, {H, T, T});
  causal_mask_forward(scores.data(), H, T);
  tr.acts[b + "attn.hook_attn_scores"] = std::move(scores);
  tr.acts[b + "attn.hook_pattern"] = copy_tensor(c.A, {H, T, T});
  tr.acts[b + "hook_attn_out"] = copy_tensor(c.attn_out, {T, d});
  if (!m.config.attn_only) {
    tr.acts[b + "hook_resid_mid"] = copy_tensor(a.mid[size_t(l)], {T, d});
    tr.acts[b + "hook_mlp_out"] = copy_tensor(a.mlp[size_t(l)].mlp_out, {T, d});
  }
  tr.acts[b + "hook_resid_post"] = copy_tensor(a.resid[size_t(l) + 1], {T, d});
}

}  // namespace

const std::vector<float>& forward(const GPT2& m, const std::vector<int>& ids, Activations& a, Trace* trace) {
  const GPT2Config& c = m.config;
  const int T = int(ids.size()), d = c.n_embd, L = c.n_layer, V = c.vocab_size;
  model_detail::check_input_ids(c, ids);
  a.T = T;
  a.ids = ids;
  a.resid.resize(size_t(L) + 1);
  a.mid.resize(size_t(L));
  a.attn.resize(size_t(L));
  a.mlp.resize(size_t(L));
  for (auto& r : a.resid) r.resize(size_t(T) * d);
  for (auto& r : a.mid) r.resize(size_t(T) * d);

  // x = wte[ids] + wpe[positions]
  model_detail::embed_tokens(m, ids, a.resid[0].data(), /*parallel=*/false);

  for (int l = 0; l < L; l++) {
    attention_sublayer_forward(a.mid[size_t(l)].data(), a.resid[size_t(l)].data(), m.attention(l, m.params.data()),
                               m.attention_shape(T), a.attn[size_t(l)]);
    if (c.attn_only)
      a.resid[size_t(l) + 1] = a.mid[size_t(l)];
    else
      mlp_sublayer_forward(a.resid[size_t(l) + 1].data(), a.mid[size_t(l)].data(), m.mlp(l, m.params.data()),
                           m.mlp_shape(T), a.mlp[size_t(l)]);
    if (trace && trace->wants_layer(l)) record_block(m, l, a, *trace);
  }

  // logits = ln_f(x) · wteᵀ
  const float* wte = m.params.data() + m.wte;
  a.lnf.resize(size_t(T) * d);
  a.lnf_mean.resize(size_t(T));
  a.lnf_rstd.resize(size_t(T));
  layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), a.resid[size_t(L)].data(),
                    m.params.data() + m.lnf_w, m.params.data() + m.lnf_b, T, d, c.layer_norm_epsilon);
  a.logits.resize(size_t(T) * V);
  gemm<float>(false, true, T, V, d, 1.0f, a.lnf.data(), d, wte, d, 0.0f, a.logits.data(), V);
  if (trace) {
    trace->acts["ln_final.hook_normalized"] = copy_tensor(a.lnf, {T, d});
    if (trace->want_logits) trace->acts["logits"] = copy_tensor(a.logits, {T, V});
  }
  return a.logits;
}

}  // namespace qkv

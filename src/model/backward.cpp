// GPT-2's backward for the mean next-token cross-entropy: the forward of forward.cpp, read bottom-up.
#include <cmath>

#include "qkv/error.hpp"
#include "qkv/gemm.hpp"
#include "qkv/model.hpp"
#include "qkv/ops.hpp"

namespace qkv {

double cross_entropy(const std::vector<float>& logits, const std::vector<int>& targets, int V) {
  double loss = 0;
  int n = 0;
  for (size_t t = 0; t < targets.size(); t++) {
    if (targets[t] < 0) continue;
    const float* z = logits.data() + t * size_t(V);
    double mx = z[0];
    for (int j = 1; j < V; j++) mx = std::max(mx, double(z[j]));
    double sum = 0;
    for (int j = 0; j < V; j++) sum += std::exp(double(z[j]) - mx);
    loss += std::log(sum) + mx - z[targets[t]];
    n++;
  }
  return n ? loss / n : 0.0;
}

double backward(const GPT2& m, const std::vector<int>& targets, Activations& a, std::vector<float>& grads) {
  const GPT2Config& c = m.config;
  const int T = a.T, d = c.n_embd, V = c.vocab_size, L = c.n_layer;
  if (grads.size() != m.params.size()) grads.assign(m.params.size(), 0.0f);
  if (int(targets.size()) != T)
    usage_error("backward: " + std::to_string(targets.size()) + " targets for " + std::to_string(T) + " positions");
  int n = 0;
  for (int t : targets) {
    if (t >= V) usage_error("backward: target id " + std::to_string(t) + " is outside the vocabulary");
    n += t >= 0;
  }
  const double loss = cross_entropy(a.logits, targets, V);
  if (n == 0) return loss;

  // loss = mean_t −log softmax(logits[t])[target[t]]  =>  dlogits = (softmax − onehot) / n
  std::vector<float> dlogits(size_t(T) * V, 0.0f);
  softmax_forward(dlogits.data(), a.logits.data(), T, V);
  for (int t = 0; t < T; t++) {
    float* g = dlogits.data() + size_t(t) * V;
    if (targets[size_t(t)] < 0) {
      std::fill(g, g + V, 0.0f);
      continue;
    }
    g[targets[size_t(t)]] -= 1.0f;
    for (int j = 0; j < V; j++) g[j] /= float(n);
  }
  // logits = lnf · wteᵀ: dlnf = dlogits · wte, dwte += dlogitsᵀ · lnf
  const float* wte = m.params.data() + m.wte;
  float* G = grads.data();
  std::vector<float> dlnf(size_t(T) * d, 0.0f), dx(size_t(T) * d, 0.0f), dprev(size_t(T) * d);
  gemm<float>(false, false, T, d, V, 1.0f, dlogits.data(), V, wte, d, 0.0f, dlnf.data(), d);
  gemm<float>(true, false, V, d, T, 1.0f, dlogits.data(), V, a.lnf.data(), d, 1.0f, G + m.wte, d);
  // lnf = ln_f(resid[L])
  layernorm_backward(dx.data(), G + m.lnf_w, G + m.lnf_b, dlnf.data(), a.resid[size_t(L)].data(),
                     m.params.data() + m.lnf_w, a.lnf_mean.data(), a.lnf_rstd.data(), T, d);
  for (int l = L - 1; l >= 0; l--) {
    if (!c.attn_only) {  // resid[l+1] = mid + mlp(mid)
      std::fill(dprev.begin(), dprev.end(), 0.0f);
      MlpGrads<float> mg = m.mlp_grads(l, G);
      mlp_sublayer_backward(dprev.data(), mg, dx.data(), a.mid[size_t(l)].data(), m.mlp(l, m.params.data()),
                            m.mlp_shape(T), a.mlp[size_t(l)]);
      std::swap(dx, dprev);
    }
    // mid = resid[l] + attn(resid[l])
    std::fill(dprev.begin(), dprev.end(), 0.0f);
    AttentionGrads<float> ag = m.attention_grads(l, G);
    attention_sublayer_backward(dprev.data(), ag, dx.data(), a.resid[size_t(l)].data(), m.attention(l, m.params.data()),
                                m.attention_shape(T), a.attn[size_t(l)]);
    std::swap(dx, dprev);
  }
  // x = wte[ids] + wpe[positions]
  for (int t = 0; t < T; t++)
    for (int j = 0; j < d; j++) {
      G[m.wte + int64_t(a.ids[size_t(t)]) * d + j] += dx[size_t(t) * d + j];
      G[m.wpe + int64_t(t) * d + j] += dx[size_t(t) * d + j];
    }
  return loss;
}

}  // namespace qkv

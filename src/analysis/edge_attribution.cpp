// Edge attribution patching (edge_attribution.hpp): every sender → receiver q/k/v edge from one backward.
#include "qkv/analysis/edge_attribution.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <string>
#include <tuple>

#include "qkv/analysis/head_weights.hpp"
#include "qkv/error.hpp"

namespace qkv::analysis {
namespace {

std::string block(int l) { return "blocks." + std::to_string(l) + "."; }

// Each sender's change in the residual stream, Δ_s = (z_src − z_base)[:, h, :] · W_O^h, [T, d] per (l, h)
// for the layers before the last (flat index l·H + h).
std::vector<std::vector<double>> sender_deltas(const Model& m, const AttributionBase& ab) {
  const Arch& a = m.arch;
  const int T = ab.T_run, d = a.d, dh = a.dh, H = a.H;
  std::vector<std::vector<double>> out(size_t(a.n_layer - 1) * size_t(H));
  for (int l = 0; l + 1 < a.n_layer; l++) {
    const std::vector<HeadWeights> hw = layer_head_weights(m, l);
    const float *zs = ab.src.acts.at(block(l) + "attn.hook_z").data(), *zb = ab.base.acts.at(block(l) + "attn.hook_z").data();
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
      std::vector<double>& D = out[size_t(l) * H + size_t(h)];
      D.assign(size_t(T) * d, 0.0);
      for (int t = 0; t < T; t++)
        for (int e = 0; e < dh; e++) {
          const size_t zi = (size_t(t) * H + size_t(h)) * dh + size_t(e);
          const double dz = double(zs[zi]) - double(zb[zi]);
          for (int i = 0; i < d; i++) D[size_t(t) * d + size_t(i)] += dz * hw[size_t(h)].W_O(e, i);
        }
    }
  }
  return out;
}

// du [d] (∂metric/∂ the norm's x̂, γ already applied) taken back through norm1 at the row x: ∂metric/∂x.
void norm_backward(const Arch& a, const float* x, std::vector<double>& du) {
  const int d = a.d;
  double mean = 0, var = 0;
  if (a.norm == NormKind::LayerNorm)
    for (int i = 0; i < d; i++) mean += double(x[i]) / d;
  for (int i = 0; i < d; i++) var += (double(x[i]) - mean) * (double(x[i]) - mean) / d;
  const double rs = 1.0 / std::sqrt(var + a.norm_eps);  // LayerNorm: 1/σ; RMSNorm (mean 0): 1/rms
  double mdu = 0, mdux = 0;
  for (int i = 0; i < d; i++) {
    mdu += du[size_t(i)] / d;
    mdux += du[size_t(i)] * (double(x[i]) - mean) * rs / d;
  }
  if (a.norm != NormKind::LayerNorm) mdu = 0;  // RMSNorm does not centre
  for (int i = 0; i < d; i++) du[size_t(i)] = rs * (du[size_t(i)] - mdu - (double(x[i]) - mean) * rs * mdux);
}

int input_index(char c) { return c == 'q' ? 0 : c == 'k' ? 1 : 2; }

}  // namespace

EdgeAttributionResult edge_attribution(const Model& m, const LmParams& params, const std::vector<int>& clean,
                                       const std::vector<int>& corrupt, PatchDirection direction,
                                       const PatchMetric& metric) {
  const auto t0 = std::chrono::steady_clock::now();
  const Arch& a = m.arch;
  if (a.n_layer < 2) usage_error("edges: a model of one layer has no edges between heads (a receiver is in a later layer)");
  if (a.post_norms)
    usage_error("edges: this model's post-attention norm (Gemma 2) normalises the heads' summed output before the "
                "residual stream, so no head writes an output of its own there; edge attribution needs one");
  std::set<std::string> keep, keep_grads;
  for (int l = 0; l < a.n_layer; l++) {
    if (l + 1 < a.n_layer) keep.insert(block(l) + "attn.hook_z");
    if (l == 0) continue;
    keep.insert(block(l) + "hook_resid_pre");
    for (const char* c : {"q", "k", "v"}) keep_grads.insert(block(l) + "attn.hook_" + c);
  }
  const AttributionBase ab = attribution_base(
      m, params, clean, corrupt, metric, direction, [&](const std::string& n) { return keep.count(n) > 0; },
      [&](const std::string& n) { return keep_grads.count(n) > 0; });
  EdgeAttributionResult r;
  r.direction = direction;
  r.T = ab.T, r.T_run = ab.T_run, r.last_only = ab.last_only, r.clean = ab.clean, r.corrupt = ab.corrupt;
  const int T = ab.T_run, d = a.d, dh = a.dh, H = a.H, G = a.H / a.n_kv;
  const std::vector<std::vector<double>> delta = sender_deltas(m, ab);
  std::vector<double> g(static_cast<size_t>(T) * d);
  for (int lr = 1; lr < a.n_layer; lr++) {
    const std::vector<HeadWeights> hw = layer_head_weights(m, lr, true);  // γ folded into W_Q/K/V's rows
    const float* x = ab.base.acts.at(block(lr) + "hook_resid_pre").data();
    for (char c : {'q', 'k', 'v'}) {
      const int n = c == 'q' ? H : a.n_kv;
      const float* dc = ab.grads.grads.at(block(lr) + "attn.hook_" + std::string(1, c)).data();  // [T, n, dh]
      for (int j = 0; j < n; j++) {
        const HeadWeights& w = hw[size_t(c == 'q' ? j : j * G)];
        const Matrix& W = c == 'q' ? w.W_Q : c == 'k' ? w.W_K : w.W_V;
        // Each row and each sender on its own: the sums run in one order whatever the threads.
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++) {
          std::vector<double> du(static_cast<size_t>(d));
          for (int i = 0; i < d; i++) {
            double s = 0;
            for (int e = 0; e < dh; e++) s += double(dc[(size_t(t) * n + size_t(j)) * dh + size_t(e)]) * W(i, e);
            du[size_t(i)] = s;
          }
          norm_backward(a, x + size_t(t) * d, du);
          std::copy(du.begin(), du.end(), g.begin() + long(size_t(t) * d));
        }
        std::vector<double> est(size_t(lr) * H);
#pragma omp parallel for schedule(static)
        for (int s = 0; s < lr * H; s++) {
          const std::vector<double>& D = delta[size_t(s)];
          double sum = 0;
          for (size_t i = 0; i < g.size(); i++) sum += D[i] * g[i];
          est[size_t(s)] = sum;
        }
        for (int s = 0; s < lr * H; s++)
          r.edges.push_back({s / H, s % H, lr, j, c, est[size_t(s)],
                             normalised_metric(ab.base_metric + est[size_t(s)], r.clean, r.corrupt)});
      }
    }
  }
  std::sort(r.edges.begin(), r.edges.end(), [](const Edge& p, const Edge& q) {
    auto key = [](const Edge& e) {
      return std::tuple(e.sender_layer, e.sender_head, e.receiver_layer, input_index(e.input), e.receiver_head);
    };
    return key(p) < key(q);
  });
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace qkv::analysis

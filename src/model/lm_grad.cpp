// Gradients with respect to activations (lm_grad.hpp): the metric's seed, then lm_train_forward and
// lm_backward with a sink that copies each hook point's gradient out in TransformerLens's layout.
#include "qkv/lm_grad.hpp"

#include <algorithm>
#include <cmath>

#include "qkv/error.hpp"

namespace qkv {

LogitMetric logit_diff_metric(int answer, int wrong, int position) {
  LogitMetric m;
  m.description = "logit[" + (position < 0 ? std::to_string(position) : std::to_string(position)) + ", " +
                  std::to_string(answer) + "] - logit[., " + std::to_string(wrong) + "]";
  m.fn = [=](const std::vector<float>& logits, int T, int V, std::vector<float>& dl) {
    for (const auto& [what, id] : {std::pair<const char*, int>{"answer", answer}, {"wrong", wrong}})
      if (id < 0 || id >= V)
        usage_error(std::string(what) + ": token " + std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(V) + ")");
    const int p = position < 0 ? T + position : position;
    if (p < 0 || p >= T)
      usage_error("position: " + std::to_string(position) + " is outside the " + std::to_string(T) + " tokens");
    const size_t row = size_t(p) * V;
    dl[row + size_t(answer)] += 1.0f;
    dl[row + size_t(wrong)] -= 1.0f;
    return double(logits[row + size_t(answer)]) - double(logits[row + size_t(wrong)]);
  };
  return m;
}

LogitMetric loss_metric(std::vector<int> positions, std::vector<int> targets) {
  if (positions.size() != targets.size()) usage_error("loss: one target per position");
  LogitMetric m;
  m.description = "mean loss at " + std::to_string(positions.size()) + " positions";
  m.fn = [positions = std::move(positions), targets = std::move(targets)](const std::vector<float>& logits, int T,
                                                                            int V, std::vector<float>& dl) {
    if (positions.empty()) usage_error("loss: no positions");
    double loss = 0;
    const double n = double(positions.size());
    for (size_t i = 0; i < positions.size(); i++) {
      const int p = positions[i], y = targets[i];
      if (p < 0 || p >= T)
        usage_error("loss position " + std::to_string(p) + " is outside the " + std::to_string(T) + " tokens");
      if (y < 0 || y >= V) usage_error("loss target " + std::to_string(y) + " is outside the vocabulary");
      const float* z = logits.data() + size_t(p) * V;
      double mx = z[0];
      for (int j = 1; j < V; j++) mx = std::max(mx, double(z[j]));
      double sum = 0;
      for (int j = 0; j < V; j++) sum += std::exp(double(z[j]) - mx);
      loss += std::log(sum) + mx - double(z[y]);
      // ∂/∂z_j of −log softmax(z)_y = softmax(z)_j − [j = y], over n positions
      float* g = dl.data() + size_t(p) * V;
      for (int j = 0; j < V; j++) g[j] += float(std::exp(double(z[j]) - mx) / sum / n);
      g[y] -= float(1.0 / n);
    }
    return loss / n;
  };
  return m;
}

LogitMetric next_token_loss_metric(const std::vector<int>& ids, std::vector<int> positions) {
  const int T = int(ids.size());
  if (positions.empty())
    for (int p = 0; p + 1 < T; p++) positions.push_back(p);
  if (positions.empty()) usage_error("loss: one token has no next token to predict");
  std::vector<int> targets;
  for (int p : positions) {
    if (p < 0 || p + 1 >= T)
      usage_error("loss position " + std::to_string(p) + " is outside [0, " + std::to_string(T - 1) +
                  ") (a loss position predicts the next token)");
    targets.push_back(ids[size_t(p) + 1]);
  }
  LogitMetric m = loss_metric(positions, std::move(targets));
  m.description = "mean next-token loss at " + std::to_string(positions.size()) + " positions";
  return m;
}

GradRun run_with_grads(const LmParams& p, const std::vector<int>& ids, const LogitMetric& metric,
                       const std::function<bool(const std::string&)>& keep) {
  const int V = p.arch().vocab_size;
  GradRun r;
  LmActs<float> acts;
  r.logits = lm_train_forward(p.layout, p.params.data(), ids, acts);
  const int T = acts.T;
  std::vector<float> dl(size_t(T) * V, 0.0f);
  r.value = metric.fn(r.logits, T, V, dl);
  ActGradSink<float> sink;
  sink.wants = keep;
  sink.fn = [&](const std::string& name, const float* data, const std::vector<int64_t>& shape, bool heads_major) {
    Tensor t(shape);
    if (!heads_major) {
      std::copy_n(data, t.numel(), t.data());
    } else {  // [n, T, dh] -> [T, n, dh]
      const int64_t Tn = shape[0], n = shape[1], dh = shape[2];
      for (int64_t h = 0; h < n; h++)
        for (int64_t s = 0; s < Tn; s++) std::copy_n(data + (h * Tn + s) * dh, dh, t.data() + (s * n + h) * dh);
    }
    r.grads[name] = std::move(t);
  };
  lm_backward(p.layout, p.params.data(), std::move(dl), acts, static_cast<float*>(nullptr), &sink);
  return r;
}

LmParams grad_params(const Model& model) { return lm_params_from(model, nlohmann::json::object()); }

}  // namespace qkv

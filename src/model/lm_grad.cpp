// Gradients with respect to activations (lm_grad.hpp): the metric's seed, then lm_train_forward and
// lm_backward with a sink that copies each hook point's gradient out in TransformerLens's layout.
#include "qkv/lm_grad.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

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
      // e_j = exp(z_j − max) once, kept until the sum is known
      std::vector<double> e(static_cast<size_t>(V));
      double sum = 0;
      for (int j = 0; j < V; j++) {
        e[size_t(j)] = std::exp(double(z[j]) - mx);
        sum += e[size_t(j)];
      }
      loss += std::log(sum) + mx - double(z[y]);
      // ∂/∂z_j of −log softmax(z)_y = softmax(z)_j − [j = y], over n positions
      float* g = dl.data() + size_t(p) * V;
      const double k = 1.0 / (sum * n);
      for (int j = 0; j < V; j++) g[j] += float(e[size_t(j)] * k);
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
  const auto t0 = std::chrono::steady_clock::now();
  r.logits = lm_train_forward(p.layout, p.params.data(), ids, acts);
  const auto t1 = std::chrono::steady_clock::now();
  r.forward_seconds = std::chrono::duration<double>(t1 - t0).count();
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
  const auto t2 = std::chrono::steady_clock::now();
  lm_backward(p.layout, p.params.data(), std::move(dl), acts, static_cast<float*>(nullptr), &sink);
  r.backward_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
  return r;
}

namespace {

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// Sequence b's real run [s, e) of the mask (the whole row without one); qkv::Error unless it is one
// contiguous, non-empty run.
std::pair<int, int> real_span(const std::vector<uint8_t>& mask, int b, int T) {
  if (mask.empty()) return {0, T};
  const uint8_t* m = mask.data() + size_t(b) * T;
  int s = 0;
  while (s < T && !m[s]) s++;
  int e = s;
  while (e < T && m[e]) e++;
  if (s == T) usage_error("attention_mask: sequence " + std::to_string(b) + " has no real token");
  for (int t = e; t < T; t++)
    if (m[t]) usage_error("attention_mask: sequence " + std::to_string(b) + "'s real tokens are not one contiguous run");
  return {s, e};
}

// One sequence's gradient [n, …] (or [H, n, n] for scores and pattern) into the batch's [B, T, …] at
// rows s .. s + n of sequence b.
void place(Tensor& dst, const Tensor& g, int b, int s, bool square) {
  const std::vector<int64_t>& gs = g.shape();
  const std::vector<int64_t>& ds = dst.shape();
  if (square) {  // [H, n, n] -> [B, H, T, T]
    const int64_t H = gs[0], n = gs[1], T = ds[2];
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < n; i++)
        std::copy_n(g.data() + (h * n + i) * n, n, dst.data() + ((b * H + h) * T + s + i) * T + s);
    return;
  }
  const int64_t row = g.numel() / gs[0], T = ds[1];
  std::copy_n(g.data(), g.numel(), dst.data() + (b * T + s) * row);
}

}  // namespace

GradRun run_with_grads_batch(const LmParams& p, const std::vector<int>& ids, int B, const std::vector<uint8_t>& mask,
                             const std::function<LogitMetric(const std::vector<int>&)>& per_sequence,
                             const BatchLogitMetric& batch_metric,
                             const std::function<bool(const std::string&)>& keep) {
  if (B < 1 || ids.empty() || ids.size() % size_t(B))
    usage_error("batch: " + std::to_string(ids.size()) + " token ids do not split into " + std::to_string(B) + " sequences");
  const int T = int(ids.size()) / B, V = p.arch().vocab_size;
  if (!mask.empty() && mask.size() != ids.size()) usage_error("attention_mask: not one value per token");
  std::vector<std::pair<int, int>> span;
  std::vector<LmActs<float>> acts(static_cast<size_t>(B));
  GradRun r;
  r.logits.assign(size_t(B) * T * V, 0.0f);
  for (int b = 0; b < B; b++) {
    span.push_back(real_span(mask, b, T));
    const auto [s, e] = span.back();
    const std::vector<int> seq(ids.begin() + long(b) * T + s, ids.begin() + long(b) * T + e);
    const std::vector<float>& lg = lm_train_forward(p.layout, p.params.data(), seq, acts[size_t(b)]);
    std::copy(lg.begin(), lg.end(), r.logits.begin() + (long(b) * T + s) * V);
  }
  std::vector<float> dl(r.logits.size(), 0.0f);
  if (per_sequence) {
    for (int b = 0; b < B; b++) {
      const auto [s, e] = span[size_t(b)];
      const std::vector<int> seq(ids.begin() + long(b) * T + s, ids.begin() + long(b) * T + e);
      std::vector<float> d(size_t(e - s) * V, 0.0f);
      r.value += per_sequence(seq).fn(acts[size_t(b)].logits, e - s, V, d);
      std::copy(d.begin(), d.end(), dl.begin() + (long(b) * T + s) * V);
    }
  } else {
    r.value = batch_metric(r.logits, B, T, V, dl);
  }
  for (int b = 0; b < B; b++) {
    const auto [s, e] = span[size_t(b)];
    ActGradSink<float> sink;
    sink.wants = keep;
    sink.fn = [&, b = b, s = s](const std::string& name, const float* data, const std::vector<int64_t>& shape,
                                bool heads_major) {
      Tensor g(shape);
      if (!heads_major) {
        std::copy_n(data, g.numel(), g.data());
      } else {  // [n, T, dh] -> [T, n, dh]
        const int64_t Tn = shape[0], n = shape[1], dh = shape[2];
        for (int64_t h = 0; h < n; h++)
          for (int64_t t = 0; t < Tn; t++) std::copy_n(data + (h * Tn + t) * dh, dh, g.data() + (t * n + h) * dh);
      }
      const bool square = ends_with(name, "hook_pattern") || ends_with(name, "hook_attn_scores");
      auto it = r.grads.find(name);
      if (it == r.grads.end()) {
        std::vector<int64_t> full = g.shape();
        if (square) full = {B, full[0], T, T};
        else full[0] = T, full.insert(full.begin(), B);
        it = r.grads.emplace(name, Tensor(full)).first;
      }
      place(it->second, g, b, s, square);
    };
    std::vector<float> d(dl.begin() + (long(b) * T + s) * V, dl.begin() + (long(b) * T + e) * V);
    lm_backward(p.layout, p.params.data(), std::move(d), acts[size_t(b)], static_cast<float*>(nullptr), &sink);
  }
  return r;
}

LmParams grad_params(const Model& model) { return lm_params_from(model, nlohmann::json::object()); }

}  // namespace qkv

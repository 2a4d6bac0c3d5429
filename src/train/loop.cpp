#include <omp.h>

#include <algorithm>
#include <chrono>

#include "qkv/analysis/head_detector.hpp"
#include "qkv/error.hpp"
#include "qkv/lm.hpp"
#include "qkv/train/train.hpp"

namespace qkv {

int training_threads(const TrainSettings& s) { return s.threads > 0 ? s.threads : omp_get_max_threads(); }

InContextLoss in_context_loss(const GPT2& model, int n, int sequences, uint64_t seed) {
  if (n < 2 || 2 * n > model.config.n_positions)
    usage_error("in-context loss: need 2 <= n and 2n <= n_positions (" + std::to_string(model.config.n_positions) + ")");
  // The same held-out sequences as the head detector's (random tokens r, then r again).
  const auto seqs = analysis::repeated_random_tokens(model.config.vocab_size, n, sequences, seed);
  InContextLoss r;
  Activations a;
  for (const std::vector<int>& ids : seqs) {
    forward(model, ids, a);
    std::vector<int> first(ids.size(), -1), second(ids.size(), -1);
    for (int t = 0; t + 1 < n; t++) first[size_t(t)] = ids[size_t(t) + 1];       // within the first half
    for (int t = n; t + 1 < 2 * n; t++) second[size_t(t)] = ids[size_t(t) + 1];  // within the repeat
    r.first_half += cross_entropy(a.logits, first, model.config.vocab_size);
    r.repeated_half += cross_entropy(a.logits, second, model.config.vocab_size);
  }
  r.first_half /= sequences;
  r.repeated_half /= sequences;
  return r;
}

HeadWatch HeadWatch::of(const std::vector<analysis::HeadScores>& heads) {
  HeadWatch w;
  for (const auto& h : heads) {
    if (h.layer == 0 && h.previous_token > w.previous_token) {
      w.previous_token = h.previous_token;
      w.previous_token_head = h.head;
    }
    if (h.layer > 0) w.induction_shifted = std::max(w.induction_shifted, h.induction_shifted);
    if (h.layer > 0 && h.induction > w.induction) {
      w.induction = h.induction;
      w.induction_layer = h.layer;
      w.induction_head = h.head;
    }
  }
  return w;
}

namespace {
// The GPT2's floats as a Model (no copy), for the head detector; this GPT-2-only loop goes when GPT-2 trains
// through the family trainer.
Model view_of(const GPT2& g) {
  nlohmann::json cj = {{"model_type", "gpt2"}, {"vocab_size", g.config.vocab_size}, {"n_positions", g.config.n_positions},
                       {"n_embd", g.config.n_embd}, {"n_layer", g.config.n_layer}, {"n_head", g.config.n_head},
                       {"layer_norm_epsilon", g.config.layer_norm_epsilon}, {"qkv_attn_only", g.config.attn_only}};
  if (g.config.n_inner > 0) cj["n_inner"] = g.config.n_inner;
  Model m;
  m.arch = arch_from_config(cj, "GPT2 in memory");
  m.table = tensor_table(m.arch);
  m.blocks.resize(size_t(m.arch.n_layer));
  for (size_t i = 0; i < m.table.size(); i++) {
    const TensorSpec& s = m.table[i];
    Weight& w = role_slot(m, m.blocks, s.role, s.layer);
    w.name = s.name, w.shape = s.shape, w.type = WeightType::F32, w.data = g.param(s.name);
    w.in_out = s.shape.size() == 2 && !is_embedding(s.role);
    m.index[s.name] = i;
  }
  return m;
}
}  // namespace

HeadWatch watch_heads(const GPT2& model, int n, int sequences, uint64_t seed) {
  HeadWatch w;
  if (model.config.n_layer < 1 || 2 * n > model.config.n_positions || n < 2) return w;
  const auto seqs = analysis::repeated_random_tokens(model.config.vocab_size, n, sequences, seed);
  const auto scan = analysis::scan_heads(view_of(model), seqs, n, -1, {});
  return HeadWatch::of(scan.heads);
}

std::vector<TrainRecord> train(GPT2& model, const DataSource& data, const TrainSettings& s, int eval_n,
                               const std::function<void(const TrainRecord&)>& on_step) {
  if (s.steps < 1 || s.batch < 1) usage_error("train: steps and batch must be at least 1");
  const int threads = training_threads(s);
  AdamW opt(model, s);
  std::mt19937_64 rng(s.seed);
  std::vector<std::vector<float>> grads(size_t(threads), std::vector<float>(model.params.size()));
  std::vector<Activations> acts(static_cast<size_t>(threads));
  std::vector<Sample> batch(static_cast<size_t>(s.batch));
  std::vector<double> losses(static_cast<size_t>(s.batch));
  std::vector<TrainRecord> history;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  for (int step = 0; step < s.steps; step++) {
    // Samples are drawn serially from one generator, so the data does not depend on threads.
    for (auto& b : batch) b = data(rng);
    for (auto& g : grads) std::fill(g.begin(), g.end(), 0.0f);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < s.batch; i++) {
      const int t = omp_get_thread_num();
      forward(model, batch[size_t(i)].ids, acts[size_t(t)]);
      losses[size_t(i)] = backward(model, batch[size_t(i)].targets, acts[size_t(t)], grads[size_t(t)]);
    }
    // Sum per-thread gradients in thread order, and average over the batch.
    std::vector<float>& g = grads[0];
    for (size_t t = 1; t < grads.size(); t++)
      for (size_t j = 0; j < g.size(); j++) g[j] += grads[t][j];
    for (float& x : g) x /= float(s.batch);
    double loss = 0;
    for (double l : losses) loss += l;
    loss /= s.batch;
    if (!std::isfinite(loss)) data_error("training diverged at step " + std::to_string(step) + " (loss is not finite)");
    TrainRecord r;
    r.step = step + 1;
    r.loss = loss;
    r.grad_norm = clip_grad_norm(g, s.clip);
    r.lr = learning_rate(s, step);
    opt.step(model, g, r.lr);
    for (const auto& b : batch) tokens += int64_t(b.ids.size());
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.tokens_per_second = tokens / std::max(r.seconds, 1e-9);
    if (eval_n > 0 && (r.step % s.eval_every == 0 || r.step == s.steps || r.step == 1)) {
      r.evaluated = true;
      r.eval = in_context_loss(model, eval_n, 16, s.seed + 1000003);
      r.heads = watch_heads(model, eval_n, 4, s.seed + 2000003);
    }
    history.push_back(r);
    if (on_step) on_step(r);
  }
  return history;
}

}  // namespace qkv

// The training loop over a family model (train_lm.hpp): loop.cpp's, with the family forward/backward.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "qkv/error.hpp"
#include "qkv/train/train_lm.hpp"

namespace qkv {

nlohmann::json induction_family_config(const std::string& type, const LmInductionRecipe& r) {
  nlohmann::json j = default_config(type, "tiny");
  const int V = 256, d = 128, L = 2, H = 4, ctx = 128;
  if (type == "gpt2") {
    j["vocab_size"] = V, j["n_embd"] = d, j["n_layer"] = L, j["n_head"] = H, j["n_positions"] = ctx,
    j["n_ctx"] = ctx;
    return j;
  }
  j["vocab_size"] = V, j["hidden_size"] = d, j["max_position_embeddings"] = ctx;
  if (type == "gpt_neo") {
    j["num_layers"] = L, j["num_heads"] = H, j["intermediate_size"] = r.d_ff;
    j["attention_types"] =
        nlohmann::json::array({nlohmann::json::array({nlohmann::json::array({"global"}), L})});
    return j;
  }
  j["num_hidden_layers"] = L, j["num_attention_heads"] = H, j["intermediate_size"] = r.d_ff;
  if (type == "gpt_neox") {
    j["rotary_emb_base"] = r.rope_theta;
    return j;
  }
  j["rope_theta"] = r.rope_theta;
  j.erase("bos_token_id");
  j.erase("eos_token_id");
  if (j.contains("head_dim")) j["head_dim"] = d / H;
  if (type != "phi3") j["num_key_value_heads"] = 2;  // grouped-query: 2 key/value heads for 4 query heads
  if (j.contains("sliding_window"))
    j["sliding_window"] = nullptr;  // every position visible, as in the first model
  if (type == "gemma2") j["query_pre_attn_scalar"] = d / H;
  return j;
}

void shared_embedding_init(LmParams& p, double ratio, uint64_t seed) {
  if (ratio == 0) return;
  const Arch& a = p.arch();
  float* wte = p.params.data() + p.layout.wte;
  const int64_t n = int64_t(a.vocab_size) * a.d;
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += double(wte[i]) * wte[i];
  const double rms = std::sqrt(ss / double(n));
  std::mt19937_64 rng(seed ^ 0xc0ffee);
  std::normal_distribution<double> N(0.0, 1.0);
  std::vector<float> c(static_cast<size_t>(a.d));
  for (auto& x : c) x = float(ratio * rms * N(rng));
  for (int v = 0; v < a.vocab_size; v++)
    for (int j = 0; j < a.d; j++) wte[int64_t(v) * a.d + j] += c[size_t(j)];
}

InContextLoss lm_in_context_loss(const LmParams& p, int n, int sequences, uint64_t seed) {
  const Arch& a = p.arch();
  if (n < 2 || 2 * n > a.n_ctx)
    usage_error("in-context loss: need 2 <= n and 2n <= the context (" + std::to_string(a.n_ctx) + ")");
  const auto seqs = analysis::repeated_random_tokens(a.vocab_size, n, sequences, seed);
  InContextLoss r;
  LmActs<float> acts;
  for (const std::vector<int>& ids : seqs) {
    lm_train_forward(p.layout, p.params.data(), ids, acts);
    std::vector<int> first(ids.size(), -1), second(ids.size(), -1);
    for (int t = 0; t + 1 < n; t++) first[size_t(t)] = ids[size_t(t) + 1];
    for (int t = n; t + 1 < 2 * n; t++) second[size_t(t)] = ids[size_t(t) + 1];
    r.first_half += lm_cross_entropy(acts.logits, first, a.vocab_size);
    r.repeated_half += lm_cross_entropy(acts.logits, second, a.vocab_size);
  }
  r.first_half /= sequences;
  r.repeated_half /= sequences;
  return r;
}

std::vector<analysis::HeadScores> lm_scan_heads(const LmParams& p,
                                                const std::vector<std::vector<int>>& repeated, int n) {
  const Arch& a = p.arch();
  const int L = a.n_layer, H = a.H;
  std::vector<analysis::HeadScores> heads(size_t(L) * H);
  for (int l = 0; l < L; l++)
    for (int h = 0; h < H; h++) heads[size_t(l) * H + h].layer = l, heads[size_t(l) * H + h].head = h;
  if (repeated.empty()) usage_error("lm_scan_heads: no repeated sequences");
  const double B = double(repeated.size());
  LmActs<float> acts;
  for (const auto& seq : repeated) {
    const int T = int(seq.size());
    if (T != 2 * n)
      usage_error("lm_scan_heads: a repeated sequence has " + std::to_string(T) + " tokens, expected " +
                  std::to_string(2 * n));
    lm_train_forward(p.layout, p.params.data(), seq, acts);
    const auto prev = analysis::previous_token_target(T), ind = analysis::induction_target(seq),
               dup = analysis::duplicate_token_target(seq);
    for (int l = 0; l < L; l++)
      for (int h = 0; h < H; h++) {
        const float* A = acts.layers[size_t(l)].A.data() + size_t(h) * T * T;
        analysis::HeadScores& s = heads[size_t(l) * H + h];
        s.previous_token += analysis::detector_score(A, prev, T) / B;
        s.duplicate_token += analysis::detector_score(A, dup, T) / B;
        s.induction_detector += analysis::detector_score(A, ind, T) / B;
        double stripe = 0, shifted = 0;
        for (int i = n; i < 2 * n; i++) stripe += A[size_t(i) * T + (i - n + 1)];
        for (int i = n; i < 2 * n; i++) shifted += A[size_t(i) * T + (i - n + 2)];
        s.induction += stripe / n / B;
        s.induction_shifted += shifted / n / B;
      }
  }
  return heads;
}

HeadWatch lm_watch_heads(const LmParams& p, int n, int sequences, uint64_t seed) {
  HeadWatch w;
  const Arch& a = p.arch();
  if (a.n_layer < 1 || 2 * n > a.n_ctx || n < 2) return w;
  const auto heads = lm_scan_heads(p, analysis::repeated_random_tokens(a.vocab_size, n, sequences, seed), n);
  return HeadWatch::of(heads);
}

std::vector<TrainRecord> train_lm(LmParams& p, const DataSource& data, const TrainSettings& s, int eval_n,
                                  const std::function<void(const TrainRecord&)>& on_step) {
  if (s.steps < 1 || s.batch < 1) usage_error("train: steps and batch must be at least 1");
  const int threads = training_threads(s);
  const LmLayout& L = p.layout;
  AdamW opt(lm_decay_mask(L), s);
  std::mt19937_64 rng(s.seed);
  std::vector<std::vector<float>> grads(size_t(threads), std::vector<float>(size_t(L.size)));
  std::vector<LmActs<float>> acts(static_cast<size_t>(threads));
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
      lm_train_forward(L, p.params.data(), batch[size_t(i)].ids, acts[size_t(t)]);
      losses[size_t(i)] = lm_train_backward(L, p.params.data(), batch[size_t(i)].targets, acts[size_t(t)],
                                            grads[size_t(t)].data());
    }
    // Sum per-thread gradients in thread order, and average over the batch.
    std::vector<float>& g = grads[0];
    for (size_t t = 1; t < grads.size(); t++)
      for (size_t j = 0; j < g.size(); j++) g[j] += grads[t][j];
    for (float& x : g) x /= float(s.batch);
    double loss = 0;
    for (double l : losses) loss += l;
    loss /= s.batch;
    if (!std::isfinite(loss))
      data_error("training diverged at step " + std::to_string(step) + " (loss is not finite)");
    TrainRecord r;
    r.step = step + 1;
    r.loss = loss;
    r.grad_norm = clip_grad_norm(g, s.clip);
    r.lr = learning_rate(s, step);
    opt.step(p.params.data(), g, r.lr);
    for (const auto& b : batch) tokens += int64_t(b.ids.size());
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.tokens_per_second = tokens / std::max(r.seconds, 1e-9);
    if (eval_n > 0 && (r.step % s.eval_every == 0 || r.step == s.steps || r.step == 1)) {
      r.evaluated = true;
      r.eval = lm_in_context_loss(p, eval_n, 16, s.seed + 1000003);
      r.heads = lm_watch_heads(p, eval_n, 4, s.seed + 2000003);
    }
    history.push_back(r);
    if (on_step) on_step(r);
  }
  return history;
}

}  // namespace qkv

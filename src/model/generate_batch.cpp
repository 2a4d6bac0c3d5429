// Batched generation (generate.hpp's generate_batch): B prompts left-padded into one prefill through run()
// with a batch and a K/V cache, then one B-row step per new token, each sequence sampled and stopped on its own.
#include <algorithm>
#include <chrono>
#include <set>

#include "qkv/error.hpp"
#include "qkv/generate.hpp"

namespace qkv {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The checks generate() makes, for the longest prompt and every prompt's ids.
void check_batch(const Model& m, const std::vector<std::vector<int>>& prompts, const GenerateOptions& opt,
                 const std::vector<uint64_t>& seeds) {
  check_sampling(opt.sampling);
  if (prompts.empty()) usage_error("no prompts: the batch is empty");
  if (!seeds.empty() && seeds.size() != prompts.size())
    usage_error("seed: " + std::to_string(seeds.size()) + " seeds for " + std::to_string(prompts.size()) +
                " prompts (one per prompt, or one for all)");
  if (opt.max_new_tokens < 1) usage_error("--max-new-tokens: " + std::to_string(opt.max_new_tokens) + " is not >= 1");
  size_t longest = 0;
  for (size_t b = 0; b < prompts.size(); b++) {
    if (prompts[b].empty()) usage_error("no tokens: prompt " + std::to_string(b) + " is empty");
    longest = std::max(longest, prompts[b].size());
  }
  if (int64_t(longest) + opt.max_new_tokens > m.arch.n_ctx)
    usage_error("the longest prompt is " + std::to_string(longest) + " tokens and --max-new-tokens " +
                std::to_string(opt.max_new_tokens) + " more, but the model's context is " +
                std::to_string(m.arch.n_ctx) + " positions; shorten the prompt or ask for at most " +
                std::to_string(std::max<int64_t>(0, m.arch.n_ctx - int64_t(longest))) + " new tokens");
}

}  // namespace

double BatchGenerateResult::tokens_per_second() const {
  size_t n = 0;
  for (const GenerateResult& r : seqs) n += r.tokens.size() > 0 ? r.tokens.size() - 1 : 0;
  return steps > 0 && decode_ms > 0 ? double(n) / (decode_ms / 1000.0) : 0.0;
}

std::vector<std::vector<int>> unpad_batch(const std::vector<int>& ids, int B, const std::vector<uint8_t>& mask) {
  if (B < 1 || ids.empty() || ids.size() % size_t(B))
    usage_error("tokens: " + std::to_string(ids.size()) + " ids do not make " + std::to_string(B) +
                " rows of one length");
  const size_t T = ids.size() / size_t(B);
  if (!mask.empty() && mask.size() != ids.size())
    usage_error("attention_mask: " + std::to_string(mask.size()) + " values for a batch of " + std::to_string(B) +
                " × " + std::to_string(T) + " tokens");
  std::vector<std::vector<int>> out(static_cast<size_t>(B));
  for (size_t b = 0; b < size_t(B); b++) {
    size_t s = 0, e = T;  // the real run [s, e)
    if (!mask.empty()) {
      const uint8_t* mb = mask.data() + b * T;
      while (s < T && !mb[s]) s++;
      if (s == T) usage_error("attention_mask: sequence " + std::to_string(b) + " has no real token");
      e = s;
      while (e < T && mb[e]) e++;
      for (size_t t = e; t < T; t++)
        if (mb[t])
          usage_error("attention_mask: sequence " + std::to_string(b) +
                      "'s real tokens are not one contiguous run (pad on the left or on the right only)");
    }
    out[b].assign(ids.begin() + long(b * T + s), ids.begin() + long(b * T + e));
  }
  return out;
}

BatchGenerateResult generate_batch(const Model& m, const std::vector<std::vector<int>>& prompts,
                                   const GenerateOptions& opt, const std::vector<uint64_t>& seeds,
                                   const std::function<bool(int b, int id)>& on_batch_token) {
  check_batch(m, prompts, opt, seeds);
  const int B = int(prompts.size()), V = m.arch.vocab_size;
  size_t T = 0;
  for (const auto& p : prompts) T = std::max(T, p.size());
  // left-padded [B, T]: the padding's id is the row's first real one (any id would do: it is masked)
  std::vector<int> ids(size_t(B) * T);
  std::vector<uint8_t> mask(size_t(B) * T, 0);
  for (size_t b = 0; b < size_t(B); b++) {
    const size_t s = T - prompts[b].size();
    std::fill_n(ids.begin() + long(b * T), s, prompts[b][0]);
    std::copy(prompts[b].begin(), prompts[b].end(), ids.begin() + long(b * T + s));
    std::fill_n(mask.begin() + long(b * T + s), prompts[b].size(), uint8_t(1));
  }
  const Hooks hooks = steering_hooks(m, opt.steer, opt.hooks);
  const std::set<int> stop(opt.stop_ids.begin(), opt.stop_ids.end());
  KvCache cache;
  RunState st;
  RunOptions ro;
  ro.cache = &cache;
  ro.last_only = true;
  ro.batch = B;
  ro.attention_mask = &mask;
  if (!opt.steer.empty() || opt.hooks) ro.hooks = &hooks;
  std::vector<std::mt19937_64> rng;
  for (int b = 0; b < B; b++) rng.emplace_back(seeds.empty() ? opt.sampling.seed : seeds[size_t(b)]);
  BatchGenerateResult r;
  r.seqs.assign(size_t(B), GenerateResult{});
  for (GenerateResult& g : r.seqs) g.stop_reason = "max_new_tokens";
  std::vector<bool> live(size_t(B), true);
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<float>* logits = &run(m, ids, st, ro);  // [B, V]: each sequence's last row
  ro.attention_mask = nullptr;  // every later row is real
  for (int step = 0;; step++) {
    int alive = 0;
    for (int b = 0; b < B; b++) {
      GenerateResult& g = r.seqs[size_t(b)];
      if (!live[size_t(b)]) continue;
      const int id = sample_next(logits->data() + size_t(b) * V, V, opt.sampling, rng[size_t(b)]);
      g.tokens.push_back(id);
      if (on_batch_token && !on_batch_token(b, id)) g.stop_reason = "callback";
      else if (stop.count(id)) g.stop_reason = "stop_id";
      else if (int(g.tokens.size()) < opt.max_new_tokens) alive++;
      live[size_t(b)] = g.stop_reason == "max_new_tokens" && int(g.tokens.size()) < opt.max_new_tokens;
    }
    (step == 0 ? r.prefill_ms : r.decode_ms) += ms_since(t0);
    if (alive == 0) break;
    t0 = std::chrono::steady_clock::now();
    // the next row of every sequence: its new token (a stopped one repeats its last, thrown away)
    std::vector<int> next(static_cast<size_t>(B));
    for (int b = 0; b < B; b++) {
      const auto& tk = r.seqs[size_t(b)].tokens;
      next[size_t(b)] = tk.back();
    }
    logits = &run(m, next, st, ro);
    r.steps++;
  }
  for (GenerateResult& g : r.seqs) g.prefill_ms = r.prefill_ms, g.decode_ms = r.decode_ms;
  return r;
}

}  // namespace qkv

// Generation (generate.hpp): a prefill of the prompt through run() with a KvCache, then one token per
// step; the sampling rule and the steering hooks beside it.
#include "qkv/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>

#include "qkv/error.hpp"

namespace qkv {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A uniform double in [0, 1) from one 64-bit draw: its top 53 bits / 2^53 (the same on every platform,
// unlike std::uniform_real_distribution).
double uniform01(std::mt19937_64& rng) {
  return double(rng() >> 11) * (1.0 / 9007199254740992.0);
}

// Per-position width of an activation by the hook name's ending (the shapes lm.hpp documents).
struct Width {
  const char* suffix;
  int64_t (*of)(const Arch&);  // null: the first axis is not the position (no steering)
};
const Width kWidths[] = {
    {"hook_resid_pre", [](const Arch& a) { return int64_t(a.d); }},
    {"hook_resid_mid", [](const Arch& a) { return int64_t(a.d); }},
    {"hook_resid_post", [](const Arch& a) { return int64_t(a.d); }},
    {"hook_normalized", [](const Arch& a) { return int64_t(a.d); }},
    {"hook_attn_out", [](const Arch& a) { return int64_t(a.d); }},
    {"hook_mlp_out", [](const Arch& a) { return int64_t(a.d); }},
    {"mlp.hook_pre", [](const Arch& a) { return int64_t(a.d_ff); }},
    {"mlp.hook_pre_linear", [](const Arch& a) { return int64_t(a.d_ff); }},
    {"mlp.hook_post", [](const Arch& a) { return int64_t(a.d_ff); }},
    {"attn.hook_q", [](const Arch& a) { return int64_t(a.q_dim()); }},
    {"attn.hook_rot_q", [](const Arch& a) { return int64_t(a.q_dim()); }},
    {"attn.hook_z", [](const Arch& a) { return int64_t(a.q_dim()); }},
    {"attn.hook_k", [](const Arch& a) { return int64_t(a.kv_dim()); }},
    {"attn.hook_v", [](const Arch& a) { return int64_t(a.kv_dim()); }},
    {"attn.hook_rot_k", [](const Arch& a) { return int64_t(a.kv_dim()); }},
    {"logits", [](const Arch& a) { return int64_t(a.vocab_size); }},
    {"attn.hook_attn_scores", nullptr},
    {"attn.hook_pattern", nullptr},
};

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

}  // namespace

void check_sampling(const Sampling& s) {
  if (!std::isfinite(s.temperature) || s.temperature < 0)
    usage_error("--temperature: " + std::to_string(s.temperature) +
                " is not a finite number >= 0 (0: greedy)");
  if (s.top_k < 0) usage_error("--top-k: " + std::to_string(s.top_k) + " is negative (0: no limit)");
  if (!(s.top_p > 0 && s.top_p <= 1))
    usage_error("--top-p: " + std::to_string(s.top_p) + " is outside (0, 1]");
}

int sample_next(const float* z, int V, const Sampling& s, std::mt19937_64& rng) {
  if (s.temperature == 0) return int(std::max_element(z, z + V) - z);  // the first of equal maxima
  // candidates by logit, largest first, ties by the lower id
  std::vector<int> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  const auto before = [&](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  size_t n = idx.size();
  if (s.top_k > 0 && size_t(s.top_k) < n) {
    n = size_t(s.top_k);
    std::partial_sort(idx.begin(), idx.begin() + long(n), idx.end(), before);
  } else if (s.top_p < 1) {
    std::sort(idx.begin(), idx.end(), before);
  }
  double zmax = -INFINITY;
  for (size_t i = 0; i < n; i++) zmax = std::max(zmax, double(z[idx[i]]));
  std::vector<double> p(n);
  double total = 0;
  for (size_t i = 0; i < n; i++) total += p[i] = std::exp((double(z[idx[i]]) - zmax) / s.temperature);
  if (s.top_p < 1) {  // the smallest most-probable prefix reaching top_p (idx is sorted here)
    double cum = 0;
    size_t keep = 0;
    while (keep < n && cum < s.top_p * total) cum += p[keep++];
    n = std::max<size_t>(keep, 1);
    total = 0;
    for (size_t i = 0; i < n; i++) total += p[i];
  }
  const double u = uniform01(rng) * total;
  double cum = 0;
  for (size_t i = 0; i < n; i++) {
    cum += p[i];
    if (u < cum) return idx[i];
  }
  return idx[n - 1];  // u within rounding of the total
}

int64_t steer_width(const Model& m, const std::string& hook, const std::string& arg) {
  const std::vector<std::string> names = hook_names(m);
  if (std::find(names.begin(), names.end(), hook) == names.end())
    usage_error(arg + ": '" + hook +
                "' is not a hook point of this model (qkv dump or model.hook_names lists them)");
  for (const Width& w : kWidths)
    if (ends_with(hook, w.suffix)) {
      if (!w.of)
        usage_error(arg + ": " + hook +
                    " is [heads, queries, keys], not one row per position; steer the residual " +
                    "stream, q/k/v, z or an output instead");
      return w.of(m.arch);
    }
  usage_error(arg + ": no per-position width known for " + hook);
}

Hooks steering_hooks(const Model& m, const std::vector<Steer>& steer, const Hooks* inner) {
  std::set<std::string> at;
  for (const Steer& s : steer) {
    const int64_t w = steer_width(m, s.hook);
    const std::string src = s.source.empty() ? "the steering vector" : s.source;
    if (int64_t(s.vec.size()) != w)
      data_error(src + ": " + std::to_string(s.vec.size()) + " values, but " + s.hook + " has " +
                 std::to_string(w) + " per position");
    for (float v : s.vec)
      if (!std::isfinite(v)) data_error(src + ": a value is not finite");
    if (!std::isfinite(s.coef)) usage_error("--steer: the coefficient for " + s.hook + " is not finite");
    at.insert(s.hook);
  }
  Hooks h;
  h.wants = [at, inner](const std::string& n) {
    return at.count(n) > 0 || (inner && inner->wants && inner->wants(n));
  };
  h.fn = [at, steer, inner](const std::string& n, ActView v) {
    if (at.count(n)) {
      for (const Steer& s : steer) {
        if (s.hook != n) continue;
        // every position's row, with or without a leading batch axis (generate_batch)
        const int64_t w = int64_t(s.vec.size()), rows = v.numel() / w;
        for (int64_t r = 0; r < rows; r++) {
          float* x = v.data + r * w;
          for (int64_t j = 0; j < w; j++) x[j] += s.coef * s.vec[size_t(j)];
        }
      }
    }
    if (inner && inner->wants && inner->fn && inner->wants(n)) inner->fn(n, v);
  };
  return h;
}

double GenerateResult::tokens_per_second() const {
  return tokens.size() >= 2 && decode_ms > 0 ? double(tokens.size() - 1) / (decode_ms / 1000.0) : 0.0;
}

namespace {

void check_lengths(const Model& m, size_t prompt, int max_new_tokens) {
  if (max_new_tokens < 1) usage_error("--max-new-tokens: " + std::to_string(max_new_tokens) + " is not >= 1");
  if (prompt < 1) usage_error("no tokens: the prompt is empty");
  if (int64_t(prompt) + max_new_tokens > m.arch.n_ctx)
    usage_error("the prompt is " + std::to_string(prompt) + " tokens and --max-new-tokens " +
                std::to_string(max_new_tokens) + " more, but the model's context is " +
                std::to_string(m.arch.n_ctx) + " positions; shorten the prompt or ask for at most " +
                std::to_string(std::max<int64_t>(0, m.arch.n_ctx - int64_t(prompt))) + " new tokens");
}

}  // namespace

GenerateResult generate(const Model& m, const std::vector<int>& prompt, const GenerateOptions& opt) {
  check_sampling(opt.sampling);
  check_lengths(m, prompt.size(), opt.max_new_tokens);
  const Hooks hooks = steering_hooks(m, opt.steer, opt.hooks);
  const std::set<int> stop(opt.stop_ids.begin(), opt.stop_ids.end());
  KvCache cache;
  RunState st;
  RunOptions ro;
  ro.cache = &cache;
  ro.last_only = true;
  if (!opt.steer.empty() || opt.hooks) ro.hooks = &hooks;
  std::mt19937_64 rng(opt.sampling.seed);
  const int V = m.arch.vocab_size;
  GenerateResult r;
  r.stop_reason = "max_new_tokens";
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<float>* logits = &run(m, prompt, st, ro);
  for (int step = 0;; step++) {
    const int id = sample_next(logits->data(), V, opt.sampling, rng);
    r.tokens.push_back(id);
    (step == 0 ? r.prefill_ms : r.decode_ms) += ms_since(t0);
    if (opt.on_token && !opt.on_token(id)) {
      r.stop_reason = "callback";
      break;
    }
    if (stop.count(id)) {
      r.stop_reason = "stop_id";
      break;
    }
    if (int(r.tokens.size()) >= opt.max_new_tokens) break;
    t0 = std::chrono::steady_clock::now();
    logits = &run(m, {id}, st, ro);
  }
  return r;
}

std::vector<int> generate_uncached(const Model& m, const std::vector<int>& prompt, int max_new_tokens,
                                   const Sampling& s, const Hooks* hooks) {
  check_sampling(s);
  check_lengths(m, prompt.size(), max_new_tokens);
  std::mt19937_64 rng(s.seed);
  std::vector<int> seq = prompt, out;
  RunOptions ro;
  ro.last_only = true;
  ro.hooks = hooks;
  for (int i = 0; i < max_new_tokens; i++) {
    RunState st;
    const std::vector<float>& logits = run(m, seq, st, ro);
    out.push_back(sample_next(logits.data(), m.arch.vocab_size, s, rng));
    seq.push_back(out.back());
  }
  return out;
}

}  // namespace qkv

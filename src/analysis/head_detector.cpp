#include "qkv/analysis/head_detector.hpp"

#include <map>
#include <random>
#include <string>

#include "qkv/error.hpp"

namespace qkv::analysis {

std::vector<std::vector<int>> repeated_random_tokens(int vocab, int n, int batch, uint64_t seed, int bos) {
  if (vocab < 1 || n < 1 || batch < 1) usage_error("repeated_random_tokens: vocab, length and batch must be >= 1");
  std::vector<std::vector<int>> out;
  for (int b = 0; b < batch; b++) {
    std::mt19937_64 rng(seed + uint64_t(b));
    std::vector<int> r(static_cast<size_t>(n), 0);
    for (int& t : r) t = int(rng() % uint64_t(vocab));
    std::vector<int> seq;
    if (bos >= 0) seq.push_back(bos);
    seq.insert(seq.end(), r.begin(), r.end());
    seq.insert(seq.end(), r.begin(), r.end());
    out.push_back(seq);
  }
  return out;
}

std::vector<double> previous_token_target(int T) {
  std::vector<double> p(size_t(T) * T, 0.0);
  for (int i = 1; i < T; i++) p[size_t(i) * T + i - 1] = 1;
  return p;
}

std::vector<double> duplicate_token_target(const std::vector<int>& ids) {
  const int T = int(ids.size());
  std::vector<double> p(size_t(T) * T, 0.0);
  for (int i = 0; i < T; i++)
    for (int j = 0; j < i; j++)
      if (ids[size_t(j)] == ids[size_t(i)]) p[size_t(i) * T + j] = 1;
  return p;
}

std::vector<double> induction_target(const std::vector<int>& ids) {
  // TransformerLens rolls the duplicate pattern one column right and keeps the lower triangle: j + 1 ≤ i.
  const int T = int(ids.size());
  std::vector<double> p(size_t(T) * T, 0.0);
  for (int i = 0; i < T; i++)
    for (int j = 0; j + 1 <= i; j++)
      if (ids[size_t(j)] == ids[size_t(i)]) p[size_t(i) * T + j + 1] = 1;
  return p;
}

double detector_score(const float* A, const std::vector<double>& target, int T) {
  double hit = 0, total = 0;
  for (size_t i = 0; i < size_t(T) * T; i++) hit += double(A[i]) * target[i], total += A[i];
  return total > 0 ? hit / total : 0.0;
}

namespace {

// The scan: patterns(seq) returns every layer's pattern [H, T, T] for that sequence.
template <class Patterns>
HeadScan scan_with(int L, int H, const std::vector<std::vector<int>>& repeated, int n, int bos,
                   const std::vector<int>& text, Patterns patterns) {
  const int start = bos >= 0 ? 1 : 0;
  HeadScan scan;
  scan.n = n, scan.bos = bos, scan.batch = int(repeated.size()), scan.repeated = repeated;
  scan.heads.resize(size_t(L) * H);
  for (int l = 0; l < L; l++)
    for (int h = 0; h < H; h++) scan.heads[size_t(l) * H + h].layer = l, scan.heads[size_t(l) * H + h].head = h;
  if (repeated.empty()) usage_error("scan_heads: no repeated sequences");

  for (const auto& seq : repeated) {
    const int T = int(seq.size());
    if (T != start + 2 * n)
      usage_error("scan_heads: a repeated sequence has " + std::to_string(T) + " tokens, expected " +
                  std::to_string(start + 2 * n));
    const std::vector<const float*> P = patterns(seq);
    const auto prev = previous_token_target(T), dup = duplicate_token_target(seq), ind = induction_target(seq);
    for (int l = 0; l < L; l++)
      for (int h = 0; h < H; h++) {
        const float* A = P[size_t(l)] + size_t(h) * T * T;
        HeadScores& s = scan.heads[size_t(l) * H + h];
        s.previous_token += detector_score(A, prev, T) / scan.batch;
        s.duplicate_token += detector_score(A, dup, T) / scan.batch;
        s.induction_detector += detector_score(A, ind, T) / scan.batch;
        double stripe = 0;
        for (int i = start + n; i < start + 2 * n; i++) stripe += A[size_t(i) * T + (i - n + 1)];
        s.induction += stripe / n / scan.batch;
        double shifted = 0;
        for (int i = start + n; i < start + 2 * n; i++) shifted += A[size_t(i) * T + (i - n + 2)];
        s.induction_shifted += shifted / n / scan.batch;
      }
  }
  if (!text.empty()) {
    scan.has_text = true;
    scan.text_tokens = int(text.size());
    const int T = int(text.size());
    const std::vector<const float*> P = patterns(text);
    const auto prev = previous_token_target(T), dup = duplicate_token_target(text), ind = induction_target(text);
    for (int l = 0; l < L; l++)
      for (int h = 0; h < H; h++) {
        const float* A = P[size_t(l)] + size_t(h) * T * T;
        HeadScores& s = scan.heads[size_t(l) * H + h];
        s.text_previous_token = detector_score(A, prev, T);
        s.text_duplicate_token = detector_score(A, dup, T);
        s.text_induction = detector_score(A, ind, T);
      }
  }
  return scan;
}

}  // namespace

HeadScan scan_heads(const Model& model, const std::vector<std::vector<int>>& repeated, int n, int bos,
                    const std::vector<int>& text) {
  const int L = model.arch.n_layer;
  std::map<std::string, Tensor> cache;
  return scan_with(L, model.arch.H, repeated, n, bos, text, [&](const std::vector<int>& seq) {
    cache = run_with_cache(model, seq, [](const std::string& s) { return s.find("hook_pattern") != std::string::npos; });
    std::vector<const float*> P;
    for (int l = 0; l < L; l++) P.push_back(cache.at("blocks." + std::to_string(l) + ".attn.hook_pattern").data());
    return P;
  });
}

}  // namespace qkv::analysis

#include "qkv/analysis/ablate.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "qkv/analysis/head_weights.hpp"
#include "qkv/analysis/intervention.hpp"
#include "qkv/error.hpp"
#include "qkv/lm_train.hpp"

namespace qkv::analysis {
namespace {

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

// targets[t] = ids[t + 1] for t in [first, last), −1 elsewhere (ignored by cross_entropy).
std::vector<int> targets_between(const std::vector<int>& ids, int first, int last) {
  std::vector<int> t(ids.size(), -1);
  for (int i = first; i < last; i++) t[size_t(i)] = ids[size_t(i) + 1];
  return t;
}

}  // namespace

AblationResult ablate_head(const Model& m, const std::vector<std::vector<int>>& repeated, int n, int bos,
                           int layer, int head) {
  check_head(m, layer, head);
  if (repeated.empty() || n < 2)
    usage_error("ablate_head: needs at least one repeated sequence of length >= 2");
  const int start = bos >= 0 ? 1 : 0, V = m.arch.vocab_size;
  AblationResult r;
  r.layer = layer, r.head = head, r.n = n, r.batch = int(repeated.size()), r.family = m.arch.model_type;
  RunState st;
  RunOptions plain;  // the model's forward without hooks, every layer's attention materialised as in the edited runs
  plain.materialise_all = true;
  for (const auto& ids : repeated) {
    if (int(ids.size()) != start + 2 * n)
      usage_error("ablate_head: a sequence has " + std::to_string(ids.size()) + " tokens, expected " +
                  std::to_string(start + 2 * n));
    const auto second = targets_between(ids, start + n, start + 2 * n - 1);
    const auto first = targets_between(ids, start, start + n - 1);
    const InterventionRun intact = forward_with_intervention(m, ids, {layer, head, HeadAblation::None});
    const InterventionRun qk = forward_with_intervention(m, ids, {layer, head, HeadAblation::Pattern});
    const InterventionRun ov = forward_with_intervention(m, ids, {layer, head, HeadAblation::Values});
    r.loss_intact += lm_cross_entropy(intact.logits, second, V) / r.batch;
    r.loss_qk += lm_cross_entropy(qk.logits, second, V) / r.batch;
    r.loss_ov += lm_cross_entropy(ov.logits, second, V) / r.batch;
    r.loss_first_half += lm_cross_entropy(intact.logits, first, V) / r.batch;
    r.intact_vs_model_max_abs = std::max(r.intact_vs_model_max_abs, max_abs_diff(intact.logits, run(m, ids, st, plain)));
    r.ov_pattern_max_abs_diff = std::max(r.ov_pattern_max_abs_diff, max_abs_diff(ov.head_pattern, intact.head_pattern));
    r.qk_pattern_max_abs_diff = std::max(r.qk_pattern_max_abs_diff, max_abs_diff(qk.head_pattern, intact.head_pattern));
  }
  return r;
}

}  // namespace qkv::analysis

// Gradients with respect to activations: ∂metric/∂(every hook point's activation) for a scalar metric of
// the logits, on a model of any family — TransformerLens's `run_with_cache(incl_bwd=True)`, `qkv dump
// --grad` and attribution patching read them.
//
// The gradient at a hook point is the one an intervention there sees: the activation perturbed at the
// hook and everything downstream recomputed from it (lm.hpp's hook semantics: hook_attn_scores after the
// soft-cap and the mask, so masked entries have gradient 0; hook_pattern's gradient is dz·vᵀ, masked
// entries included, as autograd gives for TransformerLens's pattern). They come from the family training
// forward and backward (lm_train.hpp) in float32 over a flat copy of the weights (LmParams), without
// parameter gradients.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "qkv/lm_train.hpp"
#include "qkv/tensor.hpp"

namespace qkv {

// A scalar function of the logits [T, V] (after any final soft-cap): returns its value and writes
// ∂value/∂logits into dlogits (sized T·V, zeroed by the caller).
struct LogitMetric {
  std::string description;
  std::function<double(const std::vector<float>& logits, int T, int V, std::vector<float>& dlogits)> fn;
};

// logits[position, answer] − logits[position, wrong]; position −1 (or any negative p: T + p) counts from the
// end. Out-of-range tokens or positions: qkv::Error (Usage) naming the argument, when the metric runs.
LogitMetric logit_diff_metric(int answer, int wrong, int position = -1);
// Mean over `positions` p of −log softmax(logits[p])[targets[i]] (targets[i] for positions[i]).
LogitMetric loss_metric(std::vector<int> positions, std::vector<int> targets);
// The loss of the input's own next tokens at `positions` (empty: every position but the last).
LogitMetric next_token_loss_metric(const std::vector<int>& ids, std::vector<int> positions = {});

struct GradRun {
  double value = 0;                     // the metric
  std::vector<float> logits;            // [T, V], the training forward's (equal to run()'s to ~1e-6)
  std::map<std::string, Tensor> grads;  // hook name -> ∂metric/∂activation, in the hook's shape
  double forward_seconds = 0, backward_seconds = 0;  // run_with_grads: the training forward; the backward
};

// One training forward and one backward of p on ids: the metric and the gradients at the hook points
// `keep` picks (null: every hook point, hook_names' names; "logits" is the metric's own ∂/∂logits).
GradRun run_with_grads(const LmParams& p, const std::vector<int>& ids, const LogitMetric& metric,
                       const std::function<bool(const std::string&)>& keep = nullptr);

// A batch ids [B·T] with its attention mask [B·T] (empty: all real; each sequence's real tokens one
// contiguous run, as RunOptions::attention_mask): each sequence's real tokens run through the training
// forward and backward by themselves (positions from 0, as the batched forward places them), and the
// gradients land in [B, T, …] arrays (pattern and scores [B, H, T, T]) with zeros at padding. The metric
// is `per_sequence(its real ids)` summed over the sequences, or, when that is null, `batch_metric` of the
// whole logits [B, T, V] (padding rows hold 0 there and their ∂/∂logits is ignored).
using BatchLogitMetric =
    std::function<double(const std::vector<float>& logits, int B, int T, int V, std::vector<float>& dlogits)>;
GradRun run_with_grads_batch(const LmParams& p, const std::vector<int>& ids, int batch, const std::vector<uint8_t>& mask,
                             const std::function<LogitMetric(const std::vector<int>& ids)>& per_sequence,
                             const BatchLogitMetric& batch_metric,
                             const std::function<bool(const std::string&)>& keep = nullptr);

// A trainable copy of a loaded model's weights for run_with_grads (lm_params_from, no config).
LmParams grad_params(const Model& model);

}  // namespace qkv

// Attribution patching: activation patching's sites (patching.hpp) estimated to first order from one
// backward instead of one forward per site (Nanda, "Attribution Patching", 2023; Syed et al. 2023).
//
// Noising runs the clean input and asks what replacing a site's activation by the corrupt run's would do;
// the estimate of the metric's change is the inner product, over the site's slice,
//   estimate = Σ (a_corrupt − a_clean) · ∂metric/∂a |clean
// (denoising: base and source swapped, the gradient at the corrupt run). The estimated metric is
// m_base + estimate and is normalised as activation patching's, (m − m_corrupt)/(m_clean − m_corrupt).
// Cost: a forward of each input (the activations and the two baselines, as activation patching's) and one
// training forward + backward of the base input (lm_grad.hpp) for every site together.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "qkv/analysis/patching.hpp"
#include "qkv/lm_grad.hpp"

namespace qkv::analysis {

struct AttributionPatchResult : SweepResult {
  std::vector<double> estimate;  // per site: the first-order change of the metric (metric = base + estimate)
  int backwards = 0;             // training forward + backward passes run (1)
};

// The metric as a function of the logits with its gradient (lm_grad.hpp), for the backward.
LogitMetric logit_metric(const PatchMetric& metric);

// Every site of options.hook, as patch_sweep enumerates them, estimated from gradients. params: the
// model's weights as a trainable copy (grad_params(model)), the backward's input. options.progress is
// not called (there is no per-site work worth reporting).
AttributionPatchResult attribution_sweep(const Model& model, const LmParams& params, const std::vector<int>& clean,
                                    const std::vector<int>& corrupt, const SweepOptions& options);

// What attribution patching and edge attribution patching (edge_attribution.hpp) share: the inputs truncated
// after the metric's last position (T_run), the two baseline forwards keeping `keep`'s activations (the base
// run: clean when noising, corrupt when denoising; the source run: the other), their metrics, and one
// training forward + backward of the base input with the gradients at `keep_grads`' hook points. Bad inputs
// (unequal lengths, a metric position past the end): qkv::Error (Usage).
struct AttributionBase {
  int T = 0, T_run = 0;
  bool last_only = false;
  double clean = 0, corrupt = 0, base_metric = 0;
  PatchedRun base, src;
  GradRun grads;
};
AttributionBase attribution_base(const Model& model, const LmParams& params, const std::vector<int>& clean,
                                 const std::vector<int>& corrupt, const PatchMetric& metric, PatchDirection direction,
                                 const std::function<bool(const std::string&)>& keep,
                                 const std::function<bool(const std::string&)>& keep_grads);
// (m − corrupt)/(clean − corrupt); nan when clean = corrupt.
double normalised_metric(double m, double clean, double corrupt);

}  // namespace qkv::analysis

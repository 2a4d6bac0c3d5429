// Attribution patching (attribution_patching.hpp): activation patching's sites from one backward.
#include "qkv/analysis/attribution_patching.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <utility>

#include "qkv/error.hpp"

namespace qkv::analysis {
namespace {

// The last position the metric reads (the runs are truncated after it, as activation patching's).
int last_position(const PatchMetric& mt, int T) {
  if (mt.kind == PatchMetric::Kind::LogitDiff) {
    const int p = mt.position < 0 ? T - 1 : mt.position;
    if (p >= T) usage_error("metric: position " + std::to_string(p) + " is outside [0, " + std::to_string(T) + ")");
    return p;
  }
  if (mt.loss_positions.empty()) usage_error("metric: no loss positions");
  int last = 0;
  for (int p : mt.loss_positions) {
    if (p < 0 || p >= T)
      usage_error("metric: loss position " + std::to_string(p) + " is outside [0, " + std::to_string(T) + ")");
    last = std::max(last, p);
  }
  return last;
}

// Σ (src − base) · grad over one site's slice of an activation laid out as `kind`.
double site_estimate(const std::string& kind, const std::vector<int64_t>& shape, const float* src,
                     const float* base, const float* grad, int head, int pos) {
  const int64_t T = kind == "pattern" ? shape[1] : shape[0];
  double sum = 0;
  auto add = [&](int64_t begin, int64_t n) {
    for (int64_t i = begin; i < begin + n; i++) sum += (double(src[i]) - double(base[i])) * double(grad[i]);
  };
  for (int64_t t = pos < 0 ? 0 : pos; t < (pos < 0 ? T : pos + 1); t++) {
    if (kind == "heads") {  // [T, n, dh]
      const int64_t n = shape[1], dh = shape[2];
      for (int64_t h = head < 0 ? 0 : head; h < (head < 0 ? n : head + 1); h++) add((t * n + h) * dh, dh);
    } else if (kind == "pattern") {  // [H, T, T]: the query row t of head h
      const int64_t H = shape[0];
      for (int64_t h = head < 0 ? 0 : head; h < (head < 0 ? H : head + 1); h++) add((h * T + t) * T, T);
    } else {  // [T, d]
      add(t * shape[1], shape[1]);
    }
  }
  return sum;
}

double normalise(double m, double clean, double corrupt) {
  return clean == corrupt ? std::nan("") : (m - corrupt) / (clean - corrupt);
}

}  // namespace

LogitMetric logit_metric(const PatchMetric& mt) {
  if (mt.kind == PatchMetric::Kind::LogitDiff) return logit_diff_metric(mt.answer, mt.wrong, mt.position);
  return loss_metric(mt.loss_positions, mt.targets);
}

AttributionBase attribution_base(const Model& m, const LmParams& params, const std::vector<int>& clean,
                                 const std::vector<int>& corrupt, const PatchMetric& metric, PatchDirection direction,
                                 const std::function<bool(const std::string&)>& keep,
                                 const std::function<bool(const std::string&)>& keep_grads) {
  if (clean.empty()) usage_error("the clean input is empty");
  if (clean.size() != corrupt.size())
    usage_error("clean and corrupt inputs must have equal length (attribution compares activations position by "
                "position): clean has " + std::to_string(clean.size()) + " tokens, corrupt " +
                std::to_string(corrupt.size()));
  AttributionBase r;
  r.T = int(clean.size());
  r.T_run = last_position(metric, r.T) + 1;
  const std::vector<int> c(clean.begin(), clean.begin() + r.T_run), k(corrupt.begin(), corrupt.begin() + r.T_run);
  // The baselines as activation patching computes them (the last row's logits when the metric reads only it).
  const int last = r.T_run - 1;
  r.last_only = metric.kind == PatchMetric::Kind::LogitDiff ||
                std::all_of(metric.loss_positions.begin(), metric.loss_positions.end(), [&](int p) { return p == last; });
  const int rows = r.last_only ? 1 : r.T_run;
  PatchedRun cr = run_patched(m, c, {}, keep, r.last_only), kr = run_patched(m, k, {}, keep, r.last_only);
  const int V = m.arch.vocab_size;
  r.clean = metric_value(metric, cr.logits, rows, V, r.T_run);
  r.corrupt = metric_value(metric, kr.logits, rows, V, r.T_run);
  const bool noising = direction == PatchDirection::Noising;
  r.base = std::move(noising ? cr : kr);
  r.src = std::move(noising ? kr : cr);
  r.base_metric = noising ? r.clean : r.corrupt;
  r.grads = run_with_grads(params, noising ? c : k, logit_metric(metric), keep_grads);
  return r;
}

double normalised_metric(double m, double clean, double corrupt) { return normalise(m, clean, corrupt); }

AttributionPatchResult attribution_sweep(const Model& m, const LmParams& params, const std::vector<int>& clean,
                                    const std::vector<int>& corrupt, const SweepOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  AttributionPatchResult r;
  r.hook = o.hook;
  r.direction = o.direction;
  r.layers = hook_layers(m, o.hook);
  const std::string first = hook_at_layer(o.hook, r.layers[0]);
  r.kind = hook_kind(first);
  r.heads = hook_heads(m.arch, first);
  std::set<std::string> names;
  for (int l : r.layers) names.insert(hook_at_layer(o.hook, l));
  auto keep = [&](const std::string& n) { return names.count(n) > 0; };
  const AttributionBase ab = attribution_base(m, params, clean, corrupt, o.metric, o.direction, keep, keep);
  r.T = ab.T, r.T_run = ab.T_run, r.last_only = ab.last_only, r.clean = ab.clean, r.corrupt = ab.corrupt;
  r.forwards = 2;
  r.backwards = 1;
  const PatchedRun &base = ab.base, &src = ab.src;
  const double base_metric = ab.base_metric;
  const GradRun& g = ab.grads;
  std::vector<int> heads = {-1}, positions = {-1};
  if (r.heads > 0) {
    heads.clear();
    for (int h = 0; h < r.heads; h++) heads.push_back(h);
  }
  if (o.per_position) {
    positions.clear();
    for (int t = 0; t < r.T; t++) positions.push_back(t);
  }
  for (int l : r.layers) {
    const std::string name = hook_at_layer(o.hook, l);
    const Tensor &s = src.acts.at(name), &b = base.acts.at(name), &gr = g.grads.at(name);
    for (int h : heads)
      for (int p : positions) {
        r.sites.push_back({l, h, p});
        double est = 0;
        if (p >= r.T_run)
          r.sites_skipped++;  // after the metric's last position: causality says nothing changes
        else
          est = site_estimate(r.kind, s.shape(), s.data(), b.data(), gr.data(), h, p);
        r.estimate.push_back(est);
        r.metric.push_back(base_metric + est);
        r.normalised.push_back(normalise(base_metric + est, r.clean, r.corrupt));
      }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace qkv::analysis

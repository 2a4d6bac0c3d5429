// The tour's shared context (context.hpp).
#include "analysis/claims/context.hpp"

#include <algorithm>
#include <cmath>

#include "analysis/claims/claim.hpp"
#include "qkv/error.hpp"

namespace qkv::analysis::detail {
namespace {

bool kept_on_text(const std::string& name) {  // the hooks the claims read from the run on the tour text
  for (const char* h : {"attn.hook_pattern", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z",
                        "attn.hook_rot_q", "attn.hook_rot_k"})
    if (name.ends_with(h)) return true;
  return false;
}

// ‖S − Sᵀ‖_F / ‖S‖_F of one head's raw scores S_ij = q_i·k_j (the scale cancels), q and k as the forward
// dots them (rotated on rotary models).
double asymmetry(const std::vector<float>& q, const std::vector<float>& k, int T, int dh) {
  std::vector<double> S(size_t(T) * T);
  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++) {
      double s = 0;
      for (int e = 0; e < dh; e++) s += double(q[size_t(i) * dh + e]) * k[size_t(j) * dh + e];
      S[size_t(i) * T + j] = s;
    }
  double num2 = 0, den2 = 0;
  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++) {
      const double a = S[size_t(i) * T + j], b = S[size_t(j) * T + i];
      num2 += (a - b) * (a - b), den2 += a * a;
    }
  return den2 > 0 ? std::sqrt(num2 / den2) : 0.0;
}

}  // namespace

TourContext::TourContext(const Model& m, const TourOptions& options, TourResult& result)
    : model(m), a(m.arch), o(options), r(result) {
  const int L = a.n_layer, H = a.H;
  // The head scan picks the chosen heads: the top induction score (layers ≥ 1 when there are two or more),
  // then the top previous-token score in a layer before it.
  seqs = repeated_random_tokens(a.vocab_size, r.n, o.batch, o.seed, o.bos);
  r.heads = scan_heads(model, seqs, r.n, o.bos, o.text_ids);
  const auto& hs = r.heads.heads;
  double best = -1;
  for (int l = L >= 2 ? 1 : 0; l < L; l++)
    for (int h = 0; h < H; h++)
      if (hs[size_t(l) * H + h].induction > best)
        best = hs[size_t(l) * H + h].induction, r.induction = {l, h};
  best = -1;
  for (int l = 0; l < std::max(1, r.induction.layer); l++)
    for (int h = 0; h < H; h++)
      if (hs[size_t(l) * H + h].previous_token > best)
        best = hs[size_t(l) * H + h].previous_token, r.previous = {l, h};
  cl = r.induction.layer, ch = r.induction.head, chosen = head_name(r.induction);

  // One run on the tour text: every head's pattern and the asymmetry of its raw scores.
  text_ = run_with_cache(model, o.text_ids, kept_on_text);
  const int T = r.T;
  const std::string qn = a.rotary() ? "attn.hook_rot_q" : "attn.hook_q",
                    kn = a.rotary() ? "attn.hook_rot_k" : "attn.hook_k";
  for (int l = 0; l < L; l++) {
    const Tensor& P = text(l, "attn.hook_pattern");
    for (int h = 0; h < H; h++) {
      r.patterns.emplace_back(P.data() + size_t(h) * T * T, P.data() + size_t(h + 1) * T * T);
      r.head_asym.push_back(asymmetry(head_rows(l, qn, h), head_rows(l, kn, h / (H / a.n_kv)), T, a.dh));
    }
  }
}

const Tensor& TourContext::text(int layer, const std::string& hook) const {
  return text_.at("blocks." + std::to_string(layer) + "." + hook);
}
const Tensor& TourContext::logits() const {
  return text_.at("logits");
}

std::vector<float> TourContext::head_rows(int layer, const std::string& hook, int head) const {
  const Tensor& x = text(layer, hook);  // [T, heads, dh]
  const int T = int(x.dim(0)), heads = int(x.dim(1)), dh = int(x.dim(2));
  std::vector<float> out(size_t(T) * dh);
  for (int t = 0; t < T; t++)
    std::copy_n(x.data() + (size_t(t) * heads + head) * dh, dh, out.data() + size_t(t) * dh);
  return out;
}

const HeadScores& TourContext::scan(const HeadRef& h) const {
  return r.heads.heads.at(size_t(h.layer) * a.H + h.head);
}

const std::vector<ProjectionResult>& TourContext::projections() {
  if (!projections_) {
    // Layer 0 (the seed's h[0]) and the chosen head's layer: a forward each, so not every layer of a big
    // model.
    r.projection_layers = {0};
    if (cl != 0) r.projection_layers.push_back(cl);
    for (int l : r.projection_layers) r.projections.push_back(project(model, o.text_ids, l));
    projections_ = true;
  }
  return r.projections;
}

const ScoresResult& TourContext::scores() {
  if (!scores_) r.scores = score_asymmetry(model, o.text_ids, cl, ch), scores_ = true;
  return r.scores;
}

const SwapResult& TourContext::swap() {
  if (!swap_) r.swap = swap_query_key(model, o.text_ids, cl, ch), swap_ = true;
  return r.swap;
}

const CircuitsResult& TourContext::circuits() {
  if (!circuits_) {
    // Every layer pair costs L²·d³; on a big model only the compositions into the chosen head's layer.
    const double cost = double(a.n_layer) * (a.n_layer - 1) / 2 * double(a.d) * a.d * a.d;
    CircuitsOptions co;
    co.copying = o.copying, co.baseline_samples = o.baseline_samples, co.seed = o.seed;
    if (cost > 2e9) co.target_layer = cl, co.copying = false;
    r.circuits = analysis::circuits(model, co);
    circuits_ = true;
  }
  return r.circuits;
}

const AblationResult& TourContext::ablation() {
  if (!ablation_) r.ablation = ablate_head(model, seqs, r.n, o.bos, cl, ch), ablation_ = true;
  return r.ablation;
}

const std::vector<SaturateRow>& TourContext::saturate() {
  if (r.saturate.empty()) r.saturate = qkv::saturate(o.saturate), r.saturate_keys = o.saturate.keys;
  return r.saturate;
}

const PatchingMeasure& TourContext::patching() {
  if (!patching_done_) patching_ = measure_patching(*this), patching_done_ = true;
  return patching_;
}

}  // namespace qkv::analysis::detail

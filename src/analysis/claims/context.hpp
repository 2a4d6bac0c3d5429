// What the tour's claims share, built once per model (private to src/analysis): the repeated random
// sequences and the head scan on them, the heads it picks, one cached run on the tour text, and — computed
// on first use, then read by every claim that needs them — the experiments several claims measure
// (projections, the chosen head's scores and swap, the circuits, the ablation, the patching runs). Their
// results land in the TourResult as the evidence the report draws.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "qkv/analysis/tour.hpp"

namespace qkv::analysis::detail {

// The patching runs behind the three causal claims (claims/patching.cpp), over the repeated sequences:
// clean, corrupt (first copy replaced), the induction head's keys / values patched from the corrupt run,
// and the previous-token → induction-key path patched. Means over the batch.
struct PatchingMeasure {
  std::string why_na;  // non-empty: no induction head to patch (the claims are n/a, this is why)
  double l_clean = 0, l_corrupt = 0, l_k = 0, l_v = 0, l_path = 0;  // repeated-half loss
  double s_clean = 0, s_k = 0, s_v = 0;                             // the head's induction stripe
  double v_pat_diff = 0, k_pat_diff = 0, v_z_diff = 0;              // max |Δ| of its pattern / z
  double dl_clean = 0, dl_v = 0;                                    // its direct logit for the next token
  int forwards = 0;
  double batch = 0;
};

class TourContext {
 public:
  // Runs the head scan (picking r.induction and r.previous) and the run on the tour text (r.patterns,
  // r.head_asym). The options are checked by tour() first.
  TourContext(const Model& model, const TourOptions& options, TourResult& r);

  const Model& model;
  const Arch& a;
  const TourOptions& o;
  TourResult& r;
  std::vector<std::vector<int>> seqs;  // the repeated random sequences [bos] r r, |r| = r.n
  int cl = 0, ch = 0;                  // the chosen (induction) head
  std::string chosen;                  // its name, "1.0"

  // An activation of the run on the tour text: "blocks.{layer}.{hook}" (e.g. "attn.hook_q") or "logits".
  const Tensor& text(int layer, const std::string& hook) const;
  const Tensor& logits() const;
  // One head's rows [T, dh] of a [T, heads, dh] activation at `layer`.
  std::vector<float> head_rows(int layer, const std::string& hook, int head) const;
  // The scan's scores of one head.
  const HeadScores& scan(const HeadRef& h) const;

  // Computed on first use, kept in r:
  const std::vector<ProjectionResult>& projections();  // layer 0, then the chosen head's layer (if not 0)
  const ScoresResult& scores();                        // the chosen head on the text
  const SwapResult& swap();
  const CircuitsResult& circuits();
  const AblationResult& ablation();
  const std::vector<SaturateRow>& saturate();
  const PatchingMeasure& patching();

 private:
  std::map<std::string, Tensor> text_;
  bool projections_ = false, scores_ = false, swap_ = false, circuits_ = false, ablation_ = false;
  bool patching_done_ = false;
  PatchingMeasure patching_;
};

PatchingMeasure measure_patching(const TourContext& ctx);  // claims/patching.cpp

}  // namespace qkv::analysis::detail

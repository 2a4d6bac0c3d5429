// Edge attribution patching (Syed et al. 2023, "Attribution Patching Outperforms Automated Circuit
// Discovery"): every edge between heads — a sender head's output, as written into the residual stream,
// read by a receiver head of a later layer through its q, k or v input — estimated to first order from one
// backward, as attribution_patching.hpp does for sites.
//
// Noising runs the clean input; for sender s = (layer l, head h) and receiver r = (layer l' > l, head j,
// input c ∈ {q, k, v}):
//   Δ_s      = (z_corrupt − z_clean)[:, h, :] · W_O^h                [T, d], the sender's change in the residual
//   g_{r,c}  = ∂metric/∂x |clean through only the receiver's c:      [T, d]
//              x = hook_resid_pre of layer l', c_j = norm1(x) · W_c^j + b_c^j, so
//              g = norm1's Jacobian at x (transposed) applied to (∂metric/∂c_j · W_c^jᵀ) ⊙ γ
//   estimate = Σ_{t,i} Δ_s[t, i] · g_{r,c}[t, i]
// i.e. d/dε of the metric when x + εΔ_s reaches only the receiver's c (path patching's path, linearised;
// the estimate of `qkv patch --path l.h:l'.j:c`'s change). Denoising swaps the runs. For k and v the receiver
// is a key/value head (n_kv of them under GQA), as in path patching; ∂metric/∂c is hook_q/k/v's gradient.
// Cost: the two baseline forwards and one training forward + backward, for every edge together.
#pragma once
#include <vector>

#include "qkv/analysis/attribution_patching.hpp"

namespace qkv::analysis {

struct Edge {
  int sender_layer = 0, sender_head = 0, receiver_layer = 1, receiver_head = 0;
  char input = 'q';     // 'q', 'k' or 'v'
  double estimate = 0;  // the metric's first-order change
  double normalised = 0;  // (base metric + estimate − corrupt)/(clean − corrupt), as activation patching's
};

struct EdgeAttributionResult {
  PatchDirection direction = PatchDirection::Noising;
  int T = 0, T_run = 0;
  bool last_only = false;
  double clean = 0, corrupt = 0;
  std::vector<Edge> edges;  // sender layer, sender head, receiver layer, input q/k/v, receiver head order
  int forwards = 2, backwards = 1;
  double seconds = 0;
};

// Every edge of the model. Refused (qkv::Error, Usage): a model of one layer (no edges), and Gemma 2's
// post-attention norm, which normalises the heads' summed output before the residual (no head has an
// output of its own there).
EdgeAttributionResult edge_attribution(const Model& model, const LmParams& params, const std::vector<int>& clean,
                                       const std::vector<int>& corrupt, PatchDirection direction,
                                       const PatchMetric& metric);

}  // namespace qkv::analysis

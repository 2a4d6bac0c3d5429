#include "qkv/analysis/intervention.hpp"

#include <algorithm>
#include <cmath>

#include "qkv/analysis/head_weights.hpp"
#include "qkv/error.hpp"

namespace qkv::analysis {

InterventionRun forward_with_intervention(const Model& m, const std::vector<int>& ids, const HeadIntervention& iv) {
  check_head(m, iv.layer, iv.head);
  const Arch& a = m.arch;
  const int T = int(ids.size()), H = a.H, dh = a.dh, l = iv.layer, head = iv.head;
  const std::string pattern = "blocks." + std::to_string(l) + ".attn.hook_pattern";
  const std::string z = "blocks." + std::to_string(l) + ".attn.hook_z";
  InterventionRun run;
  Hooks hooks;
  hooks.wants = [&](const std::string& n) { return n == pattern || (iv.mode == HeadAblation::Values && n == z); };
  hooks.fn = [&](const std::string& n, ActView v) {
    if (n == pattern) {  // [H, T, T]
      float* A = v.data + size_t(head) * T * T;
      if (iv.mode == HeadAblation::Pattern)
        for (int i = 0; i < T; i++) {
          int allowed = 0;
          for (int j = 0; j < T; j++) allowed += visible(a, l, i, j);
          for (int j = 0; j < T; j++) A[size_t(i) * T + j] = visible(a, l, i, j) ? 1.0f / float(allowed) : 0.0f;
        }
      run.head_pattern.assign(A, A + size_t(T) * T);
    } else {  // hook_z [T, H, dh]: the head's slice
      for (int t = 0; t < T; t++) std::fill_n(v.data + (size_t(t) * H + head) * dh, dh, 0.0f);
    }
  };
  RunState st;
  RunOptions o;
  o.hooks = &hooks;
  o.materialise_all = true;  // every layer as the edited one: an edit's effect is not mixed with fused-kernel rounding
  run.logits = qkv::run(m, ids, st, o);
  return run;
}

}  // namespace qkv::analysis

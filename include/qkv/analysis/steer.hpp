// Contrastive steering vectors (activation addition): the mean difference, at one hook point, between
// the activations of positive and negative texts. For each text t with activation A_t [T_t, w] at the
// hook (w values per position, flattened in C order), its mean over the positions p = from_t .. T_t - 1:
//   m_t = (1 / (T_t - from_t)) Σ_p A_t[p]
// then  v = (1 / |P|) Σ_{t ∈ P} m_t  −  (1 / |N|) Σ_{t ∈ N} m_t   (sums in double, v rounded to float32).
// Each text is run alone through the forward (no steering, attention fused where nothing asks for it).
// Added back with generate.hpp's Steer (coef × v at every position), it pushes towards the positive texts.
#pragma once
#include <string>
#include <vector>

#include "qkv/lm.hpp"

namespace qkv::analysis {

struct SteerText {
  std::vector<int> ids;
  int from = 0;  // positions before this are left out of the mean (e.g. 1 to skip a BOS token)
};

// Usage error for an empty side, an unknown hook or one without a row per position (generate.hpp's
// steer_width), or a text with no position left to average; run()'s errors for the ids.
std::vector<float> steering_vector(const Model& m, const std::string& hook,
                                   const std::vector<SteerText>& positive,
                                   const std::vector<SteerText>& negative);

}  // namespace qkv::analysis

// The tour's claims in order (claim.hpp): the projections and their traps, the scores and the swaps, what
// rotary positions, grouped-query attention and the K/V cache add, the induction circuit, the seeds' worked
// examples, √d_k, the backward, and the causal claims by patching.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "analysis/claims/claim.hpp"

namespace qkv::analysis::detail {

const std::vector<ClaimUnit>& claim_table() {
  static const std::vector<ClaimUnit> table = [] {
    std::vector<ClaimUnit> t;
    for (auto part : {projection_claims, score_claims, position_claims, circuit_claims, example_claims,
                      softmax_claims, gradient_claims, patching_claims})
      for (const ClaimUnit& u : part()) t.push_back(u);
    return t;
  }();
  return table;
}

std::string num(double v, int sig) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[64];
  const double a = std::fabs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e6))
    std::snprintf(b, sizeof b, "%.*e", std::max(0, sig - 2), v);
  else
    std::snprintf(b, sizeof b, "%.*g", sig, v);
  return b;
}

std::string sci(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.1e", v);
  return b;
}

std::string head_name(int layer, int head) {
  return std::to_string(layer) + "." + std::to_string(head);
}
std::string head_name(const HeadRef& h) {
  return h.valid() ? head_name(h.layer, h.head) : "none";
}

}  // namespace qkv::analysis::detail

// Backward passes checked against central finite differences, in double.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/attention.hpp"

namespace qkv {

// ∂loss/∂p[i] ≈ (loss(p + h·e_i) − loss(p − h·e_i)) / 2h for every i; p is restored afterwards.
std::vector<double> central_difference(const std::function<double()>& loss, std::vector<double>& p, double h = 1e-6);

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);

struct GradcheckResult {
  std::vector<std::pair<std::string, double>> max_abs_error;  // gradient name -> max |analytic − numeric|
  double ds_row_sum_max_abs = 0;  // largest |Σ_j dS_ij| over every row of every head
};

// One causal head, L = Σ dO ⊙ O with O = softmax(mask(Q·Kᵀ/√dk))·V: checks dQ, dK, dV and dS.
GradcheckResult gradcheck_head(int T, int dk, uint64_t seed);

// The whole attention sublayer, L = Σ dout ⊙ out: dx, dW_Q, dW_K, dW_V, db_Q, db_K, db_V, dW_O, db_O,
// dln_1.weight, dln_1.bias — the W_Q/W_K/W_V and b pieces are the thirds of dW_attn and db_attn.
GradcheckResult gradcheck_sublayer(const AttentionShape& shape, uint64_t seed);

}  // namespace qkv

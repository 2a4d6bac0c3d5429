// Seed 004's √d_k argument, measured: without the division, q·k grows like √d_k, softmax rows go
// one-hot and the gradient through the softmax vanishes.
#pragma once
#include <cstdint>
#include <vector>

namespace qkv {

struct SaturateRow {
  int dk = 0;
  double std_raw = 0;             // standard deviation of q·k
  double std_scaled = 0;          // standard deviation of q·k / √dk
  double max_weight_raw = 0;      // mean over rows of the largest softmax weight, without the division
  double max_weight_scaled = 0;   // same, with it
  double onehot_raw = 0;          // share of rows whose largest weight exceeds 0.99, without the division
  double onehot_scaled = 0;
  double grad_norm_raw = 0;       // mean over rows of ‖∂L/∂(scores)‖ for a unit-variance upstream gradient
  double grad_norm_scaled = 0;
};

struct SaturateOptions {
  int dk_min = 2, dk_max = 1024;  // powers of two
  int keys = 64;                  // keys per row (the softmax's width)
  int rows = 256;                 // random query rows per d_k
  uint64_t seed = 0;
};

std::vector<SaturateRow> saturate(const SaturateOptions& opt);

}  // namespace qkv

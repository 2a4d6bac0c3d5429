// The seeds' claims on a model of any family (lm.hpp): what still holds with rotary positions,
// grouped-query attention, RMSNorm, biases only on Q/K/V or no √d_k — measured on the model's own
// maps and its one forward, with a verdict or an `n/a` and the reason for every claim.
#pragma once
#include <cstdint>
#include <vector>

#include "qkv/analysis/tour.hpp"
#include "qkv/lm.hpp"

namespace qkv::analysis {

struct FamilyTourOptions {
  std::vector<int> text_ids;  // empty: a seeded random sequence repeated twice
  uint64_t seed = 0;
};

struct FamilyTourResult {
  std::vector<int> text_ids;
  HeadRef chosen;      // top induction score (layers >= 1 when there are two or more)
  HeadRef previous;    // top previous-token score in an earlier layer
  std::vector<double> prev_score, induction_score;  // [L·H] on the repeated random sequence
  std::vector<Claim> claims;
  // The evidence, for pictures: every head's pattern on the text [L·H][T·T]; the chosen head's raw
  // scores S = q·kᵀ (rotated, unscaled, unmasked) [T·T]; one fixed q, k pair's score as a function of
  // the offset i − j (rotary models; empty otherwise).
  int T = 0;
  std::vector<std::vector<float>> patterns;
  std::vector<double> S;
  std::vector<int> offsets;
  std::vector<double> offset_score;          // key at position 0, query at the offset
  std::vector<double> offset_score_shifted;  // the same pair, key at position offset_shift (same offsets)
  int offset_shift = 0;
  double seconds = 0;
  int held_count() const;
  int applicable_count() const;
};

FamilyTourResult family_tour(const Model& model, const FamilyTourOptions& options);

}  // namespace qkv::analysis

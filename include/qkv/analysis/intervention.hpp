// GPT-2's forward with one head edited: the blocks re-run from the core ops, and in the chosen block
// the head's pattern (its QK side) or its values (its OV side) replaced before they are mixed.
#pragma once
#include <vector>

#include "qkv/model.hpp"

namespace qkv::analysis {

enum class HeadAblation {
  None,     // the plain forward
  Pattern,  // QK side: the head's pattern becomes uniform over the allowed keys, A[i, j] = 1/(i+1) for j ≤ i
  Values,   // OV side: the head's values are zero (its pattern is untouched)
};

struct HeadIntervention {
  int layer = 0, head = 0;
  HeadAblation mode = HeadAblation::None;
};

struct InterventionRun {
  std::vector<float> logits;        // [T, vocab]
  std::vector<float> head_pattern;  // [T, T] the pattern the edited head actually used
};

InterventionRun forward_with_intervention(const GPT2& model, const std::vector<int>& ids, const HeadIntervention& iv);

}  // namespace qkv::analysis

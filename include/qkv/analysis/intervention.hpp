// The forward with one head edited through its hook points: in the chosen block the head's pattern (its
// QK side) or its values (its OV side) replaced before they are mixed.
#pragma once
#include <vector>

#include "qkv/lm.hpp"

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

// Any family, through the one forward's hook points (lm.hpp): Pattern rewrites the head's rows of
// blocks.L.attn.hook_pattern to the uniform pattern over its visible keys (j <= i, inside the layer's
// window); Values zeroes the head's slice of blocks.L.attn.hook_z — z_h = A_h·v, so this is the head's
// values zeroed, without touching the key/value head its GQA group shares with the other query heads.
// The pattern is hooked in every run (mode None included), and every layer's attention is materialised
// (RunOptions::materialise_all), so the three runs differ only by the edit.
InterventionRun forward_with_intervention(const Model& model, const std::vector<int>& ids, const HeadIntervention& iv);

}  // namespace qkv::analysis

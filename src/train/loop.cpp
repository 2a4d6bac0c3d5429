#include <omp.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "qkv/analysis/head_detector.hpp"
#include "qkv/error.hpp"
#include "qkv/lm.hpp"
#include "qkv/train/train.hpp"

namespace qkv {

int training_threads(const TrainSettings& s) { return s.threads > 0 ? s.threads : omp_get_max_threads(); }

HeadWatch HeadWatch::of(const std::vector<analysis::HeadScores>& heads) {
  HeadWatch w;
  for (const auto& h : heads) {
    if (h.layer == 0 && h.previous_token > w.previous_token) {
      w.previous_token = h.previous_token;
      w.previous_token_head = h.head;
    }
    if (h.layer > 0) w.induction_shifted = std::max(w.induction_shifted, h.induction_shifted);
    if (h.layer > 0 && h.induction > w.induction) {
      w.induction = h.induction;
      w.induction_layer = h.layer;
      w.induction_head = h.head;
    }
  }
  return w;
}

}  // namespace qkv

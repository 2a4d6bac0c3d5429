// Training a model of any family (lm_train.hpp) with the GPT-2 loop's recipe: the same data sources,
// AdamW, schedule, clipping and evaluation, deterministic for a seed and thread count.
#pragma once
#include <string>
#include <vector>

#include "qkv/analysis/head_detector.hpp"
#include "qkv/lm_train.hpp"
#include "qkv/train/train.hpp"

namespace qkv {

// The induction preset on a family (`qkv train --preset induction --arch NAME`): the family's own
// config.json (default_config's tiny one) reshaped to the first bundled model's size — 2 layers,
// d 128, 4 query heads of 32, 128 positions, a byte vocabulary — with 2 key/value heads where the family
// has grouped-query attention, an MLP of width `d_ff` where the family has one (the Llama families
// always do) and rope θ `rope_theta` where it is rotary.
struct LmInductionRecipe {
  int d_ff = 128;
  double rope_theta = 10000;
  double shared_embedding = 1;  // see shared_embedding_init
};
nlohmann::json induction_family_config(const std::string& model_type, const LmInductionRecipe& r = {});

// Adds one random vector c, with `ratio` times the rows' RMS, to every token embedding (still learned).
// A rotary model has no position embedding: a head can attend by offset only through a part of q and k
// that does not depend on the token, and with RMSNorm and no biases that part must come from a
// direction every embedding shares. Starting with one is the rotary analogue of the GPT-2 preset's
// sinusoidal position init.
void shared_embedding_init(LmParams& p, double ratio, uint64_t seed);

// As in_context_loss / watch_heads (train.hpp), on a family model through the training forward.
InContextLoss lm_in_context_loss(const LmParams& p, int n, int sequences, uint64_t seed);
// Per head (layer-major), the head detector's scores on repeated random tokens r r with |r| = n, by
// head_detector.hpp's definitions (previous_token, induction, induction_shifted, induction_detector).
std::vector<analysis::HeadScores> lm_scan_heads(const LmParams& p,
                                                const std::vector<std::vector<int>>& repeated, int n);
HeadWatch lm_watch_heads(const LmParams& p, int n, int sequences, uint64_t seed);

// The loop of train() (train.hpp) over a family model.
std::vector<TrainRecord> train_lm(LmParams& p, const DataSource& data, const TrainSettings& s, int eval_n,
                                  const std::function<void(const TrainRecord&)>& on_step);

}  // namespace qkv

// Training in C++, for every family (the loop: train_lm.hpp): AdamW, warm-up then cosine learning rate,
// gradient clipping, data sources, the evaluation records. Deterministic for a given seed and thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "qkv/analysis/head_detector.hpp"

namespace qkv {

struct TrainSettings {
  int steps = 3000;
  int batch = 32;            // sequences per step
  double lr = 1e-3;          // peak learning rate
  double min_lr_ratio = 0.1; // cosine decays to lr · min_lr_ratio
  int warmup = 100;          // linear warm-up steps
  double weight_decay = 0.1; // decoupled, on lm_decay_mask's parameters only
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double clip = 1.0;         // global gradient-norm clip (0 = off)
  uint64_t seed = 0;
  int eval_every = 100;      // steps between evaluations (in-context loss)
  int threads = 0;           // 0 = all cores; results are deterministic for a fixed count
};

// The threads train() uses for these settings (s.threads, or OpenMP's default when 0): results are
// identical for the same count, so checkpoints record it.
int training_threads(const TrainSettings& s);

// One training sequence: ids [T] and targets [T] (−1 = no loss at that position).
struct Sample {
  std::vector<int> ids, targets;
};
using DataSource = std::function<Sample(std::mt19937_64&)>;

// Sequences in which what comes next can be read from the context or from a fixed rule, of five kinds
// drawn with these weights (targets are set only where the next token follows, −1 elsewhere; the
// bundled model's recipe is the default, models/induction/README.md says why):
//   probe:    a random prefix repeated once (TransformerLens's probe; alone it lets a model find the
//             repeat by position instead of by content);
//   copies:   1–4 segments copied from random earlier to random later positions;
//   skip:     skip-bigram chains, x[t+1] = g(x[t-1]) for a fixed shuffle g — they reward the
//             previous-token head the induction circuit is built on;
//   periodic: a random segment of random length repeated to the end;
//   recall:   a global bigram language (x[t+1] = h(x[t]) three times in four) in which 4–16 trigger
//             pairs A B specific to the sequence recur in random order: the current token matters
//             everywhere, and the token before an A changes from one occurrence to the next, so only
//             "find the earlier A, copy what followed it" predicts B — the induction circuit; matching
//             the previous token (a shifted copying circuit) finds nothing.
struct InductionMix {
  int probe = 2, copies = 0, skip = 1, periodic = 0, recall = 2;  // the bundled model's recipe
};
InductionMix parse_induction_mix(const std::string& spec);  // "skip=1,periodic=1" (unnamed kinds: 0)
std::string to_string(const InductionMix& mix);
DataSource induction_data(std::vector<int> alphabet, int seq_len, InductionMix mix = {});  // tokens from `alphabet`
DataSource induction_data(int vocab, int seq_len, InductionMix mix = {});                   // every token 0 .. vocab-1

// Random windows of seq_len + 1 tokens from a tokenized corpus.
DataSource text_data(std::vector<int> tokens, int seq_len);

// AdamW over a flat buffer of decay.size() parameters (1 = decayed; lm_decay_mask): m, v moments, bias
// correction, decoupled weight decay.
class AdamW {
 public:
  AdamW(std::vector<uint8_t> decay, const TrainSettings& s);
  void step(float* params, const std::vector<float>& grads, double lr);
  int64_t steps_taken() const { return t_; }

 private:
  TrainSettings s_;
  std::vector<float> m_, v_;
  std::vector<uint8_t> decay_;  // per parameter element, from the table
  int64_t t_ = 0;
};

double learning_rate(const TrainSettings& s, int step);  // warm-up then cosine

// L2 norm of all gradients; scales them to `clip` when larger (clip > 0). Returns the norm before.
double clip_grad_norm(std::vector<float>& grads, double clip);

// Loss on the first and on the repeated half of random sequences of n tokens repeated twice
// (positions whose next token is predictable from context only in the second half).
struct InContextLoss {
  double first_half = 0, repeated_half = 0;
  double in_context() const { return repeated_half - first_half; }
};

// The circuit as it forms: the best previous-token score in the first layer and the best induction
// score in any later layer (TransformerLens's detector, on the same repeated random sequences).
struct HeadWatch {
  double previous_token = 0, induction = 0;
  double induction_shifted = 0;  // best (2 − n) diagonal in a later layer: copying one token further on
  int previous_token_head = -1, induction_layer = -1, induction_head = -1;
  // The bests among a head scan's scores (scan_heads' or lm_scan_heads').
  static HeadWatch of(const std::vector<analysis::HeadScores>& heads);
};

struct TrainRecord {
  int step = 0;
  double lr = 0, loss = 0, grad_norm = 0, seconds = 0, tokens_per_second = 0;
  bool evaluated = false;
  InContextLoss eval;
  HeadWatch heads;  // set with eval
};

}  // namespace qkv

// Which heads are previous-token, duplicate-token and induction heads: TransformerLens's head detector
// ("mul" error measure: attention mass on the expected positions over the pattern's total mass, with
// exclude_bos and exclude_current_token False), on seeded repeated random tokens and on a given text.
#pragma once
#include <cstdint>
#include <vector>

#include "qkv/lm.hpp"

namespace qkv::analysis {

// A random sequence r of length n (uniform ids in [0, vocab), std::mt19937_64 seeded with seed + b for
// sequence b, id = draw % vocab), repeated twice: [bos] r r (bos only when bos >= 0).
std::vector<std::vector<int>> repeated_random_tokens(int vocab, int n, int batch, uint64_t seed, int bos = -1);

// The detector's target patterns for one sequence, [T, T] row-major 0/1 (lower triangular):
std::vector<double> previous_token_target(int T);                       // i attends to i − 1
std::vector<double> duplicate_token_target(const std::vector<int>& ids);  // to earlier j with ids[j] == ids[i]
std::vector<double> induction_target(const std::vector<int>& ids);      // to j + 1 for those j

// Σ(A ⊙ target) / ΣA for one head's pattern A [T, T].
double detector_score(const float* A, const std::vector<double>& target, int T);

struct HeadScores {
  int layer = 0, head = 0;
  // On the repeated random tokens (means over the batch):
  double previous_token = 0, duplicate_token = 0;
  double induction = 0;           // mean of the pattern's (1 − n) offset diagonal over the repeated half:
                                  // A[i, i − n + 1] for the rows i of the second copy
  double induction_detector = 0;  // the detector's induction pattern (mass on the token after an earlier copy)
  double induction_shifted = 0;   // mean of the (2 − n) diagonal: A[i, i − n + 2], one token further on — the
                                  // stripe of a copying head that matches the PREVIOUS token instead of the
                                  // current one (it copies the same next token, read from the residual there)
  // On the given text (when there is one):
  double text_previous_token = 0, text_duplicate_token = 0, text_induction = 0;
};

struct HeadScan {
  int n = 0, batch = 0, bos = -1;
  uint64_t seed = 0;
  std::vector<std::vector<int>> repeated;  // the sequences used
  bool has_text = false;
  int text_tokens = 0;
  std::vector<HeadScores> heads;  // layer-major: heads[l·H + h]
};

// repeated: sequences of the form [bos?] r r with |r| = n. text: may be empty. The patterns are the
// forward's own hook_pattern (the model's mask and window included).
HeadScan scan_heads(const Model& model, const std::vector<std::vector<int>>& repeated, int n, int bos,
                    const std::vector<int>& text);

}  // namespace qkv::analysis

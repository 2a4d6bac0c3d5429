// Seed 003's corollary, measured: QK (where a head looks) and OV (what it moves) fail separately. On
// repeated random sequences, the loss on the repeated half with one head intact, with its pattern made
// uniform (QK ablated) and with its values zeroed (OV ablated: the pattern must stay identical).
#pragma once
#include <string>
#include <vector>

#include "qkv/lm.hpp"

namespace qkv::analysis {

struct AblationResult {
  int layer = 0, head = 0, n = 0, batch = 0;
  // mean cross-entropy of predicting token t + 1 at the positions t of the repeated half whose next token
  // is in it too; averaged over the sequences
  double loss_intact = 0, loss_qk = 0, loss_ov = 0;
  double loss_first_half = 0;          // the same on the first copy (nothing to copy yet), intact
  double intact_vs_model_max_abs = 0;  // the hooked forward without an edit vs the forward without hooks: 0
  double ov_pattern_max_abs_diff = 0;  // the head's pattern with OV ablated vs intact: must be 0
  double qk_pattern_max_abs_diff = 0;  // with QK ablated vs intact: the pattern did change
  std::string family;                  // config.json's model_type
};

// repeated: sequences [bos?] r r with |r| = n (see repeated_random_tokens); bos >= 0 when one leads.
// Through the forward's hooks (forward_with_intervention): OV ablated = the head's z zeroed (under GQA
// its group's shared values stay for the other heads). intact_vs_model_max_abs compares the hooked run
// without an edit with run() without hooks (both materialised): the hooks themselves change no bit.
AblationResult ablate_head(const Model& model, const std::vector<std::vector<int>>& repeated, int n, int bos,
                           int layer, int head);

}  // namespace qkv::analysis

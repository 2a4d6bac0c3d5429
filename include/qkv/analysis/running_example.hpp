// Seed 004's running example, "the cat climbed the": X [5, 4] → u = LayerNorm(X) → two toy heads whose
// W_Q, W_K, W_V only pick columns of u → S, A, O per head, unmasked (the page) or causal (the next page).
//
// The seed prints only the last row of X ([−0.5, −0.5, −0.5, 1.5]: its σ = 0.866 and u = [−0.577, −0.577,
// −0.577, 1.732]); the other four rows come from an embeddings page that is not among the seeds. qkv
// reconstructs them by a stated rule (running_example_rule()) so that every number the seed states comes
// out; running_example_checks() lists those numbers and what qkv computes for each.
#pragma once
#include <string>
#include <vector>

#include "qkv/analysis/soft_dictionary.hpp"  // qkv::Matrix

namespace qkv::analysis {

// The columns of u (0-based) one head's q, k and v pick: q = [u_{q[0]}, u_{q[1]}], and so on.
struct RunningPicks {
  int q[2], k[2], v[2];
};

struct RunningHead {
  RunningPicks picks{};
  qkv::Matrix Q, K, V;  // [n, 2] each: the picked columns of u
  qkv::Matrix QK;       // [n, n] q·k
  qkv::Matrix S;        // [n, n] q·k/√d_k (= q·k with scale off), before the mask (JSON has no −inf)
  qkv::Matrix A;        // [n, n] softmax rows, of S with j > i masked out when masked
  qkv::Matrix O;        // [n, 2] A·V
};

struct RunningExampleOptions {
  bool scale = true;    // divide by √d_k
  bool masked = false;  // causal mask (the seed's page is unmasked; its next page adds the mask)
};

struct RunningExample {
  std::vector<std::string> tokens;  // the, ␣cat, ␣climb, ed, ␣the
  std::vector<bool> from_seed;      // per row of X: printed by the seed (true) or reconstructed (false)
  qkv::Matrix X;                    // [n, d]
  std::vector<double> mean,
      sigma;                  // per row: μ and σ of X (LayerNorm without ε, scale or bias, as in the seed)
  qkv::Matrix u;              // [n, d] (X − μ)/σ
  qkv::Matrix W_Q, W_K, W_V;  // [d, d] 0/1 column pickers; columns [2h, 2h+2) are head h
  int n = 5, d = 4, dk = 2;
  bool scale = true, masked = false;
  std::vector<RunningHead> heads;  // 2
};

RunningExample running_example(const RunningExampleOptions& options = {});

// The fixed X (rows 1–4 reconstructed, row 5 the seed's) and the rule that chose rows 1–4.
qkv::Matrix running_example_X();
const std::string& running_example_rule();
// Head 1's picks are the seed's; head 2's are qkv's choice (the seed puts them on the next page without
// giving them): q = [u₁, u₃], k = [u₃, u₁], v = [u₃, u₄], so each W is a permutation matrix.
RunningPicks running_head_picks(int head);

// One number the seed states about the running example, and what qkv computes for it.
struct RunningCheck {
  std::string id;    // e.g. "last_row_A_scaled[2]"
  std::string what;  // the seed's words, shortened
  double seed = 0;   // as printed
  int decimals = 3;  // the seed's rounding
  double computed = 0;
  bool ok() const;  // computed rounds to the seed's value: |computed − seed| ≤ ½·10^−decimals
};
std::vector<RunningCheck> running_example_checks();

}  // namespace qkv::analysis

// Attention as a soft dictionary (seed 004) and the seeds' hand-worked examples (seeds 001, 004).
#pragma once
#include <string>
#include <vector>

namespace qkv {

using Matrix = std::vector<std::vector<double>>;  // small, hand-sized matrices: a list of rows

struct SoftDictionaryInput {
  std::vector<std::string> names;  // one per key/value row
  Matrix K;                        // [n, dk]
  Matrix V;                        // [n, dv] (may be empty: the seed-001 example has no values)
  Matrix Q;                        // [m, dk] queries; one row for the single-query example
  bool scale = true;               // divide by √dk
};

struct SoftDictionaryResult {
  Matrix scores;      // [m, n] q·k
  Matrix scaled;      // [m, n] q·k / √dk (= scores when scale is off)
  Matrix exp_scores;  // [m, n] e^(scaled − row max) · e^(row max): the seed's e^score column
  Matrix weights;     // [m, n] softmax rows (A)
  Matrix output;      // [m, dv] weights · V (O); empty without values
  double sqrt_dk = 1;
};

// Unmasked (a dictionary lookup, as in the seed's worked example) and computed with the core ops.
SoftDictionaryResult soft_dictionary(const SoftDictionaryInput& in);

// Seed 004: "sat · bank · river", values [river, money]; q = [1, 2] is the query of "bank".
SoftDictionaryInput bank_example();
// Seed 004's three queries at once (sat, bank, river): the 3×3 A and 3×2 O.
Matrix bank_all_queries();
// Seed 001: the query of "it" = (1.0, 0.5) against robot, patient, it (no values given).
SoftDictionaryInput robot_example();

}  // namespace qkv

namespace qkv {

// Seed 004's "whole matrix" panel: the n × n pattern of a typed sentence under four toy score functions.
// Each gives every pair (i, j) a unit-scale score z_ij:
//   content   z = 3·(f_i·f_j)/16, f a word's 16 ±1 features hashed from its lowercase form (the same word
//             matches itself with 3; different words score about N(0, 0.75²))
//   previous  z = 3 when j = i − 1, else 0 (a head that looks one token back)
//   decay     z = −0.5·|i − j| (a head whose score decays with distance)
//   mix       the mean of the three
// A dot product of d_k unit-variance components spreads like √d_k, so the toy's q·k = √d_k · z; the scores
// S are q·k/√d_k (= z) with the division on and q·k without it — where the matrix "goes binary" as d_k grows.
enum class ScoreKind { Content, Previous, Decay, Mix };
ScoreKind parse_score_kind(const std::string& name);  // content|previous|decay|mix; usage_error otherwise
const char* score_kind_name(ScoreKind k);

// Words and punctuation marks of a sentence ("The cat, sat." → The · cat · , · sat · .).
std::vector<std::string> split_words(const std::string& text);

struct WholeMatrixInput {
  std::vector<std::string> tokens;  // 1 … 64
  ScoreKind kind = ScoreKind::Content;
  int dk = 2;           // 1 … 4096
  bool scale = true;    // divide by √d_k
  bool masked = false;  // causal mask (the seed's panel is unmasked)
};

struct WholeMatrixResult {
  std::vector<std::string> tokens;
  Matrix z;   // [n, n] unit-scale scores
  Matrix qk;  // [n, n] √d_k · z
  Matrix S;   // [n, n] qk/√d_k or qk, before the mask
  Matrix A;   // [n, n] softmax rows (masked: j > i get 0)
  std::vector<double> row_max;  // largest weight of each row
  int binary_rows = 0;          // rows whose largest weight exceeds 0.99
  double sqrt_dk = 1;
};

WholeMatrixResult whole_matrix(const WholeMatrixInput& in);

}  // namespace qkv

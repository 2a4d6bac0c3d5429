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

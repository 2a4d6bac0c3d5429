// The tour: every claim of the seeds, measured on one model of any family (lm.hpp), each with the seed's
// sentence, the numbers, the criterion it is judged by and an honest verdict — or `n/a` and the reason
// when the model's architecture makes the claim moot (no biases, no rotary, no grouped-query attention).
// Every model gets every claim, in one order (tour_claim_ids()).
//
// The claims are data: a table of small units (src/analysis/claims/), each {id, source, seed sentence,
// applies(arch), measure(context)}; the context is built once per model — the head scan and the heads it
// picks, one cached run on the tour text, the experiments several claims read — and the tour runs the
// table. The heads a claim needs are picked from the model's own head scan: the top induction head (in a
// layer after the first, when there is one) and the top previous-token head of an earlier layer. Pure: no
// printing; progress goes through an optional callback.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/analysis/ablate.hpp"
#include "qkv/analysis/circuits.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/projections.hpp"
#include "qkv/analysis/saturate.hpp"
#include "qkv/analysis/scores.hpp"
#include "qkv/analysis/swap.hpp"
#include "qkv/gradcheck.hpp"
#include "qkv/lm.hpp"
#include "qkv/tokenizer.hpp"

namespace qkv::analysis {

// One measured quantity of a claim: a number, or (when `text` is set) a string such as a head "1.3".
struct Measure {
  std::string key;
  double value = 0;
  std::string text;
  bool is_text() const { return !text.empty(); }
};

struct Claim {
  std::string id;         // stable, e.g. "scores_asymmetric"
  std::string source;     // "seed 000"
  std::string seed;       // the seed's sentence, shortened
  std::string summary;    // what was measured on this model, one line ("n/a" when it does not apply)
  std::string criterion;  // the rule the verdict follows, stated with its thresholds
  bool held = false;
  bool applies = true;  // false: n/a on this model (the note says why); never silently dropped
  std::string note;     // why, in particular when the claim does not hold or does not apply
  std::vector<Measure> measured;
  double number(const std::string& key) const;  // the value of a numeric measure; throws if absent
};

struct TourOptions {
  std::vector<int> text_ids;  // the tour text, 2 ≤ T ≤ n_ctx (qkv::Error otherwise)
  int n = 0;                  // length of the repeated random sequence; 0: min(25, what fits)
  int batch = 4;              // repeated random sequences
  int bos = -1;               // token prepended to them (>= 0), e.g. GPT-2's <|endoftext|>
  uint64_t seed = 0;
  int baseline_samples = 16;  // composition baseline
  bool copying = false;       // OV copying scores in the circuits (one [d, d] product over the vocabulary)
  SaturateOptions saturate{2, 1024, 64, 64, 0};
  int grad_T = 5, grad_d = 12, grad_H = 3;  // gradcheck shapes (small: finite differences are O(params))
  // Called before each step: index from 1, total, the claim id (or "heads" for the head scan).
  std::function<void(int, int, const std::string&)> progress;
};

struct HeadRef {
  int layer = -1, head = -1;
  bool valid() const { return layer >= 0; }
};

struct TourResult {
  Arch arch;  // the model's architecture (family, sizes, norm, positions)
  int L = 0, H = 0, n_kv = 0, d = 0, dh = 0, T = 0, n = 0, batch = 0, bos = -1;
  uint64_t seed = 0;
  std::vector<int> text_ids;
  HeadRef induction;  // the chosen head: top induction score (layers ≥ 1 when L ≥ 2)
  HeadRef previous;   // top previous-token score in a layer before the chosen head's (layer 0 if L = 1)
  std::vector<Claim> claims;

  // The evidence behind the claims, for pictures. Each is filled by the claims that measure it; a claim that
  // does not apply leaves its evidence empty (e.g. no offset chart without rotary positions).
  std::vector<std::vector<float>> patterns;   // [L·H], each [T, T]: every head's pattern on the text
  std::vector<double> head_asym;              // [L·H] ‖S − Sᵀ‖_F/‖S‖_F of every head on the text
  std::vector<int> projection_layers;         // 0 and the chosen head's layer
  std::vector<ProjectionResult> projections;  // one per projection_layers entry
  ScoresResult scores;                        // the chosen head on the text (rotated q, k on rotary models)
  SwapResult swap;
  HeadScan heads;
  CircuitsResult circuits;  // every layer pair on small models; only into the chosen layer on big ones
  AblationResult ablation;
  std::vector<SaturateRow> saturate;
  int saturate_keys = 0;
  GradcheckResult grad_head, grad_sublayer;
  // rope_relative: one fixed q, k pair of the chosen head scored at every offset i − j, with the key at
  // position 0 and again at offset_shift (the two lines coincide: the score depends on i − j only).
  std::vector<int> offsets;
  std::vector<double> offset_score, offset_score_shifted;
  int offset_shift = 0;
  double seconds = 0;

  const Claim* claim(const std::string& id) const;  // nullptr when absent
  int held_count() const;
  int applicable_count() const;
};

// The claim ids in the order the tour runs them (every model gets all of them).
const std::vector<std::string>& tour_claim_ids();

TourResult tour(const Model& model, const TourOptions& options);

// The default tour text: the longest of a few sentences with a repeated phrase whose tokenization fits
// min(max_tokens, n_ctx). `encode` maps text to ids. Empty when none fits.
std::string default_tour_text(const std::function<std::vector<int>(const std::string&)>& encode,
                              int max_tokens);

// The tour's inputs as `qkv tour` and `qkv.tour` resolve them: `ids` (from --text/--tokens) when not empty,
// else the default tour text through `tok`, else (no tokenizer) a seeded random sequence repeated twice;
// `bos` -2 = <|endoftext|> when the tokenizer ends with it, -1 = none; `n` 0 = default. Usage errors
// naming --seq-len / --bos as the CLI's.
struct TourInput {
  TourOptions options;
  std::string text;                 // the tour text, when it came from text
  std::vector<std::string> labels;  // one per tour-text token ("␣the"; "#id" without a tokenizer)
};
TourInput tour_input(const Arch& arch, const Tokenizer* tok, const std::vector<int>& ids,
                     const std::string& text, int bos, int n, int batch, uint64_t seed);

}  // namespace qkv::analysis

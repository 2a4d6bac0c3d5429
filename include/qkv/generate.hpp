// Generation on the one family forward (lm.hpp's run() with a KvCache): the prompt is run once (the
// prefill), then one token per step, each step attending over the cached keys and values, so a step
// costs one token's forward. Hooks run at every step on that step's activations: the prefill's
// [T_prompt, …] rows, then [1, …] per new token (attention scores and pattern [H, 1, positions so far]).
// Logits are computed for the last position only (ln_final.hook_normalized and logits are [1, …]).
//
// Sampling (sample_next), per step, from the last position's logits z [V]:
//   temperature 0: argmax (the lowest id among equal maxima) — greedy, no randomness;
//   otherwise p ∝ exp(z / temperature), in double, restricted to the top_k largest logits (0: all;
//   ties at the k-th value broken by the lower id), then to the smallest set of the most probable
//   tokens whose probability (renormalised after top-k) sums to at least top_p (1: all), and one token
//   drawn by inverse CDF from u = (a 64-bit draw of std::mt19937_64 seeded with `seed`, top 53 bits) / 2^53.
//   The same model, prompt, options and seed give the same tokens.
//
// Steering (Steer): at its hook, coef × vec is added to every position's activation at every step
// (prompt included): vec has the activation's size per position (d for the residual stream, H·dh
// for hook_z …); hooks whose first axis is not the position (hook_attn_scores, hook_pattern) are refused.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "qkv/lm.hpp"

namespace qkv {

struct Sampling {
  double temperature = 0.0;  // 0: greedy; > 0 (finite)
  int top_k = 0;             // 0: no limit; >= 0
  double top_p = 1.0;        // (0, 1]
  uint64_t seed = 0;
};

// Checks the options (usage error naming --temperature / --top-k / --top-p otherwise).
void check_sampling(const Sampling& s);

// The next token from logits [V] as described above; rng is advanced once when sampling, not at all
// when greedy.
int sample_next(const float* logits, int V, const Sampling& s, std::mt19937_64& rng);

// One steering vector: coef × vec added at `hook` (a hook point of the model).
struct Steer {
  std::string hook;
  std::vector<float> vec;
  float coef = 1.0f;
  std::string source;  // where vec came from, for errors (e.g. the .npy path)
};

// The number of values per position of a hook's activation (usage error naming `arg` for an unknown
// hook, or one whose first axis is not the position).
int64_t steer_width(const Model& m, const std::string& hook, const std::string& arg = "--steer");

// Checks each Steer against the model (unknown hook: usage error; a vector of the wrong length, or
// not finite: data error naming its source) and returns Hooks that add them, then call `inner` (may be
// null) for every hook point it wants: what `inner` sees is the steered activation.
Hooks steering_hooks(const Model& m, const std::vector<Steer>& steer, const Hooks* inner);

struct GenerateOptions {
  int max_new_tokens = 16;  // >= 1; prompt + max_new_tokens must fit the context (usage error)
  Sampling sampling;
  std::vector<Steer> steer;
  const Hooks* hooks = nullptr;  // the caller's hooks, called at every step after the steering
  std::vector<int> stop_ids;  // stop after emitting one of these (e.g. the tokenizer's EOS; kept in tokens)
  // Called with each new token as it is chosen (a stop id too, before stopping); return false to stop.
  std::function<bool(int id)> on_token;
};

struct GenerateResult {
  std::vector<int> tokens;  // the new tokens (not the prompt)
  double prefill_ms = 0;    // the prompt's forward and the first token's choice
  double decode_ms = 0;     // the one-token forwards after it (tokens.size() - 1 of them) and their choices
  std::string stop_reason;  // "max_new_tokens", "stop_id", or "callback"
  // New tokens per second of decoding: (tokens.size() - 1) / decode seconds (0 with fewer than 2 tokens).
  double tokens_per_second() const;
};

// Generates after `prompt` (ids in [0, vocab), 1 <= size). Errors as run()'s, plus the options' checks.
GenerateResult generate(const Model& m, const std::vector<int>& prompt, const GenerateOptions& opt);

// Batched generation (src/model/generate_batch.cpp): B prompts of any lengths decoded together through one
// run() with a batch and a K/V cache (RunOptions::batch): the prompts left-padded to the longest (positions
// from the mask, padding keys never seen), then each step runs the B new rows through one product per
// weight and attends per sequence over its own cache. Sequence b is sampled as generate() samples it alone
// (its own std::mt19937_64 seeded with seeds[b], or opt.sampling.seed when `seeds` is empty) and stops on
// its own (stop id, max_new_tokens, on_batch_token returning false); a stopped sequence stays in the batch
// until all have stopped (its rows are computed and thrown away). So sequence b gives the tokens
// generate() gives for it alone, to rounding (the products over B rows and the padded attention sum in a
// different order). Hooks and steering see every step's arrays with a leading B axis: the prefill's
// [B, T_longest, …] (padding rows included; their values mean nothing), then [B, 1, …] per step
// (a pattern [B, H, 1, columns so far], padding columns 0). The longest prompt plus max_new_tokens must fit
// the context. opt.on_token is not called; on_batch_token(b, id) is.
struct BatchGenerateResult {
  std::vector<GenerateResult> seqs;  // per prompt: its new tokens and stop reason (times: the batch's)
  double prefill_ms = 0;             // the padded prompts' forward and the first tokens' choice
  double decode_ms = 0;              // the B-row forwards after it and their choices
  int steps = 0;                     // decoding steps after the prefill
  // New tokens of all sequences per second of decoding (each sequence's tokens after its first, over
  // decode seconds; 0 with no decoding step).
  double tokens_per_second() const;
};
BatchGenerateResult generate_batch(const Model& m, const std::vector<std::vector<int>>& prompts,
                                   const GenerateOptions& opt, const std::vector<uint64_t>& seeds = {},
                                   const std::function<bool(int b, int id)>& on_batch_token = nullptr);

// The prompts of a padded batch ids [B·T] (mask [B·T] of 1 real / 0 padding, empty: all real): each row's
// real tokens, which must be one contiguous run (left or right padding). Usage errors naming attention_mask
// for a mask of the wrong size, a row with no real token, or real tokens with a hole.
std::vector<std::vector<int>> unpad_batch(const std::vector<int>& ids, int B, const std::vector<uint8_t>& mask);

// The same choice without the cache: every step runs the whole sequence so far through run() (with
// `hooks`, e.g. steering_hooks, at every position of it) and chooses from its last row; no stop ids.
// O(n²) — the slow twin that generate()'s tests compare with.
// Bytes of weights one decoding step reads as stored (quantized blocks at their size): every matrix and
// norm vector, one row of each embedding (all of the token embedding when it is the tied unembedding).
// Divided by the memory bandwidth (peak.hpp's measure_bandwidth), the physical limit of tokens per second.
// src/model/weight_traffic.cpp.
int64_t weight_bytes_per_token(const Model& m);

std::vector<int> generate_uncached(const Model& m, const std::vector<int>& prompt, int max_new_tokens,
                                   const Sampling& s, const Hooks* hooks = nullptr);

}  // namespace qkv

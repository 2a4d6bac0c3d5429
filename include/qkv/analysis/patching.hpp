// Activation patching and path patching on the family forward's hook points (lm.hpp), for any model
// qkv::load_lm reads. Pure functions, no printing. docs/patching.md states every definition.
//
// Two runs of equal length: clean and corrupt. Noising runs the CLEAN tokens and copies one activation
// slice from the corrupt run into it; denoising runs the CORRUPT tokens and copies from the clean run.
// A metric m (logit difference of two tokens at a position, or mean loss on positions) is normalised
//   n = (m − m_corrupt) / (m_clean − m_corrupt)       0 = the corrupt run, 1 = the clean run.
// Every run here (baselines included) materialises attention in every layer (RunOptions::
// materialise_all), so a run whose patch copies an activation's own value is bit-identical to the
// unpatched run whatever the hook; the runs are truncated to the last position the metric reads (the
// forward is causal, so later tokens cannot change it) and read only the last row's logits when the
// metric reads one position at the end.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "qkv/lm.hpp"
#include "qkv/tensor.hpp"

namespace qkv::analysis {

enum class PatchDirection {
  Noising,    // run clean, patch in the corrupt activation (how much does this site's corruption hurt?)
  Denoising,  // run corrupt, patch in the clean activation (how much does this site alone restore?)
};
const char* direction_name(PatchDirection d);

struct PatchMetric {
  enum class Kind { LogitDiff, Loss };
  Kind kind = Kind::LogitDiff;
  int position = -1;            // LogitDiff: the position read (-1: the last)
  int answer = -1, wrong = -1;  // LogitDiff: logits[position][answer] − logits[position][wrong]
  // Loss: mean over these positions t of −log softmax(logits[t])[targets[t]] (targets[i] for
  // loss_positions[i]; the CLI uses the clean text's next token, clean[t + 1]).
  std::vector<int> loss_positions, targets;
  std::string describe() const;
};

// One replacement: in activation `hook` (a full hook name, "blocks.1.attn.hook_k"), the slice at
// (head, pos) becomes the same slice of `source` (the whole activation from another run of the same
// length). Shapes as lm.hpp hands them: q/k/v/rot_q/rot_k/z [T, heads, dh] (pos = row t);
// attn_scores/pattern [H, T, T] (pos = the query row); [T, d] activations (resid_pre/mid/post,
// attn_out, mlp_out, ln1/ln2.hook_normalized): head must be −1. −1 = every head / every position.
struct Patch {
  std::string hook;
  int head = -1, pos = -1;
  const Tensor* source = nullptr;
};

struct PatchedRun {
  std::vector<float> logits;           // [rows, vocab]: rows = T, or 1 with last_only
  std::map<std::string, Tensor> acts;  // the kept activations, as the forward used them (after patches)
};

// One forward of ids with the patches applied (materialise_all, see above). `keep` picks activations to
// copy out (null: none). Bad hook names, heads or positions, or a source of the wrong shape: qkv::Error
// (Usage) naming them. start_at_layer / resid_pre as in RunOptions: resume from a block whose input
// residual an earlier run of the same ids kept (every patch must be at that block or later).
PatchedRun run_patched(const Model& model, const std::vector<int>& ids, const std::vector<Patch>& patches,
                       const std::function<bool(const std::string&)>& keep = nullptr, bool last_only = false,
                       int stop_at_layer = -1, int start_at_layer = 0, const float* resid_pre = nullptr);

// The metric of one run's logits (rows [0, T) or, with last_only, the last row only).
double metric_value(const PatchMetric& metric, const std::vector<float>& logits, int rows, int vocab, int T);

// ---- activation patching -------------------------------------------------------------------------------

struct PatchSite {
  int layer = 0, head = -1, pos = -1;  // −1: all heads / all positions
};

struct SweepOptions {
  // "attn.hook_v" (every layer), "blocks.1.attn.hook_v" (that layer), "hook_resid_pre", "hook_mlp_out",
  // … and "attn.hook_result": each head's z slice, i.e. exactly its result z_h·W_O_h (b_O untouched).
  std::string hook;
  bool per_position = false;
  PatchDirection direction = PatchDirection::Noising;
  PatchMetric metric;
  // Called after each site (done = sites so far, of total), e.g. for qkv serve's progress bar. Optional.
  std::function<void(int done, int total)> progress;
};

struct SweepResult {
  std::string hook;         // as asked
  std::string kind;         // "heads" ([T, heads, dh]), "pattern" ([H, T, T]) or "rows" ([T, d])
  std::vector<int> layers;  // the layers swept
  int heads = 0;            // heads per layer (n_kv for k/v; 0 for [T, d] activations)
  int T = 0;                // tokens of each run
  int T_run = 0;            // tokens actually run (truncated after the metric's last position)
  bool last_only = false;
  PatchDirection direction = PatchDirection::Noising;
  double clean = 0, corrupt = 0;  // the metric of the unpatched runs
  std::vector<PatchSite> sites;
  std::vector<double> metric, normalised;  // one per site
  int forwards = 0;       // forwards run: 2 (clean and corrupt, which also cache the sources) + one per site
  int sites_skipped = 0;  // per-position sites after the metric's last position: no forward (causality)
  double seconds = 0;
};

// Every site of the hook: layer × head (× position with per_position) for per-head activations,
// layer (× position) for [T, d] ones. clean and corrupt: equal lengths (qkv::Error, Usage, saying so).
SweepResult patch_sweep(const Model& model, const std::vector<int>& clean, const std::vector<int>& corrupt,
                        const SweepOptions& options);

// The full hook name for `hook` at layer l ("attn.hook_v" -> "blocks.l.attn.hook_v"), and the layers a
// hook argument means (all, or the one it names). "attn.hook_result" maps to hook_z.
std::string hook_at_layer(const std::string& hook, int layer);
std::vector<int> hook_layers(const Model& model, const std::string& hook);
// How a full hook name's activation is laid out — "heads" ([T, heads, dh]), "pattern" ([H, T, T]) or
// "rows" ([T, d]) — and how many heads its sites have (n_kv for k/v, H for q/z/pattern, 0 for rows).
std::string hook_kind(const std::string& name);
int hook_heads(const Arch& arch, const std::string& name);

// ---- path patching -------------------------------------------------------------------------------------

struct PathSpec {
  int sender_layer = 0, sender_head = 0;
  int receiver_layer = 1,
      receiver_head = 0;  // receiver_head: a query head for 'q', a key/value head for 'k'/'v'
  char input = 'k';       // 'q', 'k' or 'v'
};

struct PathResult {
  PathSpec spec;
  PatchDirection direction = PatchDirection::Noising;
  double clean = 0, corrupt = 0, metric = 0, normalised = 0;
  // For comparison: the receiver's whole q/k/v slice patched (activation patching at the receiver).
  double receiver_metric = 0, receiver_normalised = 0;
  double delta_norm = 0;  // ‖Δ‖_F, the sender's swapped contribution to the residual stream
  int forwards = 0;
};

// The sender head's contribution to the residual stream (its slice of hook_z through W_O, as the engine
// computes attn_out, so post-norms included) swapped for the source run's, ONLY in the receiver head's
// q/k/v input; every other path frozen at the base run:
//   Δ      = attn_out_L_s(base with the sender's z slice from source) − attn_out_L_s(base)
//   x'     = resid_pre_L_r(base) + Δ
//   input' = the receiver's map (W_Q/W_K/W_V and bias) of norm1_L_r(x')   — the norm recomputed on x'
// and the base run re-run with only the receiver's hook_q/k/v slice replaced by input'. Needs
// sender_layer < receiver_layer. 4 forwards: the base run (caching), sender layer (stopped there),
// receiver layer (stopped there), full; plus 2 baselines and 1 for the receiver-only comparison.
PathResult path_patch(const Model& model, const std::vector<int>& clean, const std::vector<int>& corrupt,
                      const PathSpec& spec, PatchDirection direction, const PatchMetric& metric);

// "SENDER:RECEIVER:q|k|v" with heads as LAYER.HEAD, e.g. "0.1:1.0:k" (the CLI's --path, Python's path=);
// anything else: qkv::Error (Usage) naming `arg`. The heads' ranges are path_patch's to check.
PathSpec parse_path_spec(const std::string& arg, const std::string& spec);
// The share of the receiver's whole q/k/v effect that the one path carries (nan when the receiver has none).
double fraction_of_receiver_effect(const PathResult& r);


}  // namespace qkv::analysis

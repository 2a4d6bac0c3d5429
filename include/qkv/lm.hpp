// A model of any family (arch.hpp): weights as views into the mapped checkpoint, and ONE forward with
// hook points that the trace (copy out), interventions (write in) and the Python bindings all use.
//
// Per block, as the Arch says (src/model/lm_forward.cpp reads it top to bottom):
//   hook_resid_pre  x
//   u = norm1(x)                                   ln1.hook_normalized
//   q, k, v = the model's own Q/K/V maps of u      attn.hook_q [T,H,dh], hook_k / hook_v [T,n_kv,dh]
//   q, k = rotary(q, k) (rotary models)            attn.hook_rot_q [T,H,dh], hook_rot_k [T,n_kv,dh]
//   S = scale·q·kᵀ, soft-cap, causal/window mask   attn.hook_attn_scores [H,T,T] (masked: -inf)
//   A = softmax(S)                                  attn.hook_pattern [H,T,T]
//   z = A·v (query head h reads kv head h/(H/n_kv)) attn.hook_z [T,H,dh]
//   a = z·W_O (+ b_O) (post-norm: Gemma 2)          hook_attn_out [T,d]
//   x = x + a  (sequential)                        hook_resid_mid
//   u2 = norm2(x)  (parallel: norm2 of the block's input)   ln2.hook_normalized
//   pre = u2·W_in + b_in (gated: the gate's u2·W_gate)       mlp.hook_pre [T,d_mlp]
//   up = u2·W_in + b_in (gated MLPs only)                     mlp.hook_pre_linear [T,d_mlp]
//   post = act(pre) (gated: act(pre) · up)                    mlp.hook_post [T,d_mlp]
//   m = post·W_out + b_out (post-norm: Gemma 2)               hook_mlp_out [T,d]
//   x = x + m (parallel: x + a + m)                hook_resid_post
// then ln_final.hook_normalized, logits (after any final soft-cap).
// When neither scores nor pattern is hooked at a layer, its attention runs in the fused flash kernel
// and no T×T matrix exists.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/arch.hpp"
#include "qkv/tensor.hpp"

namespace qkv {

// GGML: a quantized tensor of a GGUF file (a type io::ggml_type_traits says qkv dequantizes; `ggml_type` says
// which), kept as stored and dequantized per use like F16/BF16 (include/qkv/io/gguf_quant.hpp's
// dequantize_row).
enum class WeightType { F32, F16, BF16, GGML };

// One parameter: a view of the checkpoint's bytes as stored (F32 used in place; F16/BF16/GGML converted per
// use into a reused buffer, never expanded for the whole model at once).
struct Weight {
  const void* data = nullptr;
  WeightType type = WeightType::F32;
  uint32_t ggml_type = 0;      // with WeightType::GGML: the io::GgmlType number
  std::vector<int64_t> shape;  // as stored
  std::string name;            // the checkpoint's name (for errors and `qkv info`)
  bool in_out = false;         // stored [in, out] (GPT-2's Conv1D) rather than nn.Linear's [out, in]
  bool present() const { return data != nullptr; }
  int64_t numel() const;
  // Elements [begin, begin + n) as fp32 into out.
  void read(int64_t begin, int64_t n, float* out) const;
  // A pointer to fp32 elements [begin, begin + n): in place for F32, else converted into scratch.
  const float* f32(int64_t begin, int64_t n, std::vector<float>& scratch) const;
};

// "F32", "F16", "BF16", or the ggml type's name ("Q4_K") for WeightType::GGML.
std::string weight_type_name(const Weight& w);

// A block's weights by role (arch.hpp's BlockSlots: ln1_w, wq, …, w_down): the norms before attention
// and the MLP, Gemma 2's post-norms, Q/K/V as separate projections or fused (wqkv), W_O, the MLP.
using BlockWeights = BlockSlots<Weight>;

// The model's whole-model weights (wte, wpe, lnf_w, lnf_b, lm_head) are its TopSlots: lm_head is absent
// when tied (then wte is read), wpe with rotary positions. role_slot(m, m.blocks, role, layer) reaches any.
class Model : public TopSlots<Weight> {
 public:
  Arch arch;
  std::string source;             // what was loaded, in words
  std::string path;               // the path given
  std::vector<TensorSpec> table;  // every tensor, in the family's order
  std::vector<BlockWeights> blocks;

  int64_t num_parameters() const;
  // The weight by checkpoint name (throws qkv::Error naming it).
  const Weight& weight(const std::string& name) const;
  // Storage the views point into (mappings, or owned copies); shared so Model copies are cheap.
  std::vector<std::shared_ptr<const void>> keep_alive;
  std::map<std::string, size_t> index;  // checkpoint-table name -> position in `table`
};

// Loads a Hugging Face directory (config.json + model.safetensors or model.safetensors.index.json
// shards) of any supported family, a .safetensors file with its config (qkv's own files), or an llm.c
// .bin (GPT-2). Missing / extra / mis-shaped tensors, an unknown model_type, a missing shard: qkv::Error
// naming the file and the tensor or key. NaN/Inf weights are refused.
Model load_lm(const std::string& path);

// A view of one activation at a hook point, shaped as TransformerLens names it (the batch dimension
// dropped for a single sequence, kept for a batch: RunOptions::batch). Writes through `data` change what
// the rest of the forward computes.
struct ActView {
  float* data = nullptr;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// The hook points a caller asks for. `wants(name)` decides whether the forward materialises that
// activation; `fn(name, view)` then reads it or edits it in place. Unhooked runs pay nothing.
struct Hooks {
  std::function<bool(const std::string&)> wants;
  std::function<void(const std::string&, ActView)> fn;
};

// Every buffer of a run; sized on first use, reused afterwards.
struct RunState {
  int T = 0, B = 1;  // tokens per sequence, sequences
  std::vector<float> x, u, xin, q, k, v, a, m, g, lse, logits, S, qkv;
  std::vector<float> zeros;   // never written: a zero bias for gelu_bias_rows
  std::vector<int> pos, seg;  // per row: its position, and where its run of real / padding tokens starts
};

// Keys (rotated) and values of the positions run so far, per layer [B, n_kv, cap, dh] (B = the batch's
// sequences, 1 without a batch): a run with a cache takes only the new tokens, at columns len .. len + T - 1,
// and attends over everything cached. pad[b]: how many of sequence b's first columns are padding (a
// left-padded batch's prefill, RunOptions::attention_mask); its real tokens count positions from there,
// and no real token ever sees a padding key. A cache holds one batch size from its first run on.
struct KvCache {
  int len = 0, cap = 0, batch = 1;
  std::vector<int> pad;
  std::vector<std::vector<float>> k, v;
  void clear() { *this = KvCache(); }
};

struct RunOptions {
  bool last_only = false;  // logits of the last position only
  const Hooks* hooks = nullptr;
  int stop_at_layer = -1;  // >= 0: stop after that block's resid_post (no logits)
  // Every layer's attention through the materialised T×T path, hooked or not, so that what one layer
  // shows does not depend on which other layers were asked for (`qkv dump --layers`). Off: layers
  // whose scores and pattern nobody hooks run fused (fast; equal to ~1e-7, not bit for bit).
  bool materialise_all = false;
  KvCache* cache =
      nullptr;  // extend this cache (incremental decoding); attention is materialised.
                // With a batch too: B sequences decoded together (the batch's padding on the left only)
  // Start at block `start_at_layer` from `resid_pre` [T, d], the residual entering that block (e.g. a
  // previous run's blocks.L.hook_resid_pre): the blocks before it and the embedding are not run. Given
  // the same residual, every later activation is bit-identical to the full run's (patching re-runs only
  // the layers a patch can change). Not with a cache.
  int start_at_layer = 0;
  const float* resid_pre = nullptr;
  // A batch: ids holds `batch` sequences of ids.size() / batch tokens each ([B, T], row-major), run as
  // one: every weight's product over all B·T rows at once, attention per sequence. 0 (the default): one
  // sequence, hooks shaped without the batch axis. >= 1: every hook's shape leads with B ([B, T, d],
  // q [B, T, H, dh], pattern [B, H, T, T]); the logits are [B·T, vocab] (last_only: [B, vocab], each
  // sequence's last row). With a cache: the B sequences' cache (KvCache), every product over the B·T new
  // rows at once (a decoding step of B sequences reads each weight once), attention per sequence over its
  // own cached keys; padding only on the left (before every real token of the sequence, so in the first
  // run, e.g. a prefill of prompts of different lengths), and every later run all real.
  int batch = 0;
  // With a batch: which tokens are real (1) and which are padding (0), [B·T]; null: all real. Each
  // sequence's real tokens must be one contiguous run (left or right padding). Positions count from the
  // start of each run (a left-padded sequence's first real token is position 0, as Hugging Face derives
  // position_ids from the mask) and a query sees only keys of its own run, so a sequence's real
  // positions compute what its own single-sequence run computes (to rounding: different GEMM shapes).
  // Padding tokens form runs of their own; their activations mean nothing.
  const std::vector<uint8_t>* attention_mask = nullptr;
};

// ids [T] -> logits [T, vocab] (or [1, vocab] with last_only), a reference into st.logits; with
// RunOptions::batch, ids [B·T] -> logits [B·T, vocab] ([B, vocab] with last_only).
// 1 <= T <= n_ctx, ids in [0, vocab) (qkv::Error, Usage, otherwise).
const std::vector<float>& run(const Model& model, const std::vector<int>& ids, RunState& st,
                              const RunOptions& opt = {});

// Every hook point's name for this model, in forward order (TransformerLens's names).
std::vector<std::string> hook_names(const Model& model);

// A run that copies out the named activations (`keep(name)` true; null = all) plus "logits".
// materialise_all as in RunOptions (default on: the values do not depend on what else was kept).
std::map<std::string, Tensor> run_with_cache(const Model& model, const std::vector<int>& ids,
                                             const std::function<bool(const std::string&)>& keep = nullptr,
                                             bool materialise_all = true);
// The same for a batch: ids [B·T] (B = batch), mask [B·T] or empty (all real); every array leads with B.
std::map<std::string, Tensor> run_with_cache_batch(
    const Model& model, const std::vector<int>& ids, int batch, const std::vector<uint8_t>& mask,
    const std::function<bool(const std::string&)>& keep = nullptr, bool materialise_all = true);

// Rotary positions applied to rows x [n, dh] in place, row r rotated to position pos[r] (the forward's
// own rotation, for experiments on single q/k pairs). No-op for models with learned positions.
void apply_rotary(const Arch& arch, float* x, int n, const int* pos);

// A layer's Q, K and V maps as dense fp32 in nn.Linear's layout, whatever the checkpoint's layout
// (GPT-2's thirds, NeoX's per-head interleave, Phi-3's stacked rows, separate projections):
// q = u·Wqᵀ + bq with Wq [H·dh, d], Wk/Wv [n_kv·dh, d]; biases empty when the model has none.
struct QkvMaps {
  std::vector<float> Wq, Wk, Wv, bq, bk, bv;
};
QkvMaps qkv_maps(const Model& model, int layer);

// FLOPs of run() (GEMMs and causal attention, multiply-adds × 2), for GFLOP/s figures.
double lm_forward_flops(const Arch& arch, int T, bool last_only = false);

// Writes a random checkpoint of this architecture exactly as Hugging Face lays out the family:
// dir/config.json (the given JSON) + model.safetensors (or `shards` files with
// model.safetensors.index.json) in F32/F16/BF16. N(0, 0.02) matrices, norms 1 (Gemma: 0), biases
// N(0, 0.02) so that they matter in tests. Deterministic for a seed.
void write_random_checkpoint(const std::string& dir, const nlohmann::json& config, WeightType dtype,
                             int shards, uint64_t seed);

}  // namespace qkv

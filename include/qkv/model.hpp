// GPT-2: the parameter table, loading from every supported checkpoint format, forward with a trace of
// named activations, and backward for training.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "qkv/attention.hpp"
#include "qkv/config.hpp"
#include "qkv/mlp.hpp"
#include "qkv/tensor.hpp"

namespace qkv {

// One row of THE table: every parameter, its checkpoint name (HF GPT-2, no "transformer." prefix), its
// shape, where it sits in the flat buffer, and whether AdamW decays it. Loading, checking, saving,
// gradient zeroing and the optimiser all walk this one table.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t numel = 0;
  bool decay = false;  // matrices decay; biases, LayerNorm parameters and position embeddings do not
};

std::vector<ParamSpec> gpt2_param_table(const GPT2Config& config);

// Offsets of one block's parameters in the flat buffer, so the same view serves weights and grads.
struct LayerOffsets {
  int64_t ln1_w, ln1_b, W_attn, b_attn, W_O, b_O;
  int64_t ln2_w = -1, ln2_b = -1, W_fc = -1, b_fc = -1, W_proj = -1, b_proj = -1;  // -1: attention-only
};

class GPT2 {
 public:
  GPT2() = default;
  explicit GPT2(const GPT2Config& config);  // every parameter zero

  GPT2Config config;
  std::vector<ParamSpec> table;
  std::vector<float> params;         // flat, in table order
  std::vector<LayerOffsets> layers;  // one per block
  int64_t wte = 0, wpe = 0, lnf_w = 0, lnf_b = 0;
  std::string source;  // where it was loaded from and in which format, for `qkv info`

  int64_t num_parameters() const { return int64_t(params.size()); }
  const ParamSpec& spec(const std::string& name) const;  // throws naming the parameter
  float* param(const std::string& name) { return params.data() + spec(name).offset; }
  const float* param(const std::string& name) const { return params.data() + spec(name).offset; }
  AttentionParams<float> attention(int l, const float* base) const;
  MlpParams<float> mlp(int l, const float* base) const;
  AttentionGrads<float> attention_grads(int l, float* base) const;
  MlpGrads<float> mlp_grads(int l, float* base) const;
  AttentionShape attention_shape(int T) const { return {T, config.n_embd, config.n_head, config.layer_norm_epsilon}; }
  MlpShape mlp_shape(int T) const { return {T, config.n_embd, config.mlp_dim(), config.layer_norm_epsilon}; }
};

// GPT-2's initialisation: N(0, 0.02) matrices and embeddings, residual projections (attn.c_proj,
// mlp.c_proj) scaled by 1/√(2·n_layer), LayerNorm weights 1, biases 0. Deterministic for a seed.
// With sinusoidal_positions, wpe starts as the sinusoids of "Attention Is All You Need" at the same
// RMS as the token embeddings (still learned): relative offsets such as "the previous token" are then
// one linear map away for every position, which a small model otherwise learns very slowly.
void init_gpt2(GPT2& model, uint64_t seed, bool sinusoidal_positions = false);

// Loads a checkpoint: a Hugging Face directory (config.json + model.safetensors), a .safetensors file
// written by qkv (config in __metadata__["config"], or a config.json beside it), or an llm.c .bin.
// Every inconsistency is a qkv::Error naming the file and tensor; NaN/Inf weights are rejected.
GPT2 load_model(const std::string& path);

// Writes model.safetensors with GPT-2 names and the config (plus `metadata`) in __metadata__.
void save_model(const GPT2& model, const std::string& path, const std::map<std::string, std::string>& metadata = {});

// The named activations a caller asks for, with TransformerLens's hook names, batch dimension dropped.
struct Trace {
  std::set<int> layers;      // blocks to record; empty = every block
  bool want_logits = true;
  std::map<std::string, Tensor> acts;
  bool wants_layer(int l) const { return layers.empty() || layers.count(l) > 0; }
};

// Everything a forward keeps for the backward; sized on first use, reused afterwards.
struct Activations {
  int T = 0;
  std::vector<int> ids;
  std::vector<std::vector<float>> resid;  // L + 1 residual streams: resid[l] = hook_resid_pre of block l
  std::vector<std::vector<float>> mid;    // per block: resid_mid (after attention)
  std::vector<AttentionCache<float>> attn;
  std::vector<MlpCache<float>> mlp;
  std::vector<float> lnf, lnf_mean, lnf_rstd;  // ln_f of the final residual
  std::vector<float> logits;                   // [T, vocab]
};

// ids [T] -> logits [T, vocab] (also left in acts.logits). Each id must be < vocab_size and
// T <= n_positions (qkv::Error otherwise). Records hooks into trace when given.
const std::vector<float>& forward(const GPT2& model, const std::vector<int>& ids, Activations& acts,
                                  Trace* trace = nullptr);

// Mean cross-entropy of logits[t] predicting targets[t] over the positions whose target is >= 0.
double cross_entropy(const std::vector<float>& logits, const std::vector<int>& targets, int vocab);

// After forward(): accumulates ∂loss/∂params into grads (same layout as params) for the mean
// cross-entropy loss above and returns that loss.
double backward(const GPT2& model, const std::vector<int>& targets, Activations& acts, std::vector<float>& grads);

}  // namespace qkv

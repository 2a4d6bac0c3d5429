// An architecture as data: one plain struct describes every model family qkv runs (GPT-2, Llama,
// Mistral, Qwen2, Gemma, Gemma 2, GPT-NeoX/Pythia, Phi-3, GPT-Neo). The loader fills it from a
// Hugging Face config.json; the family forward (lm.hpp) reads it; there is no class per family.
//
// Each family contributes only (src/model/arch.cpp): its config.json reader and its row of the
// tensor-name table (HF name -> role, shape, and the layout of fused Q/K/V weights).
#pragma once
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace qkv {

enum class NormKind {
  LayerNorm,        // (x - mean)/sqrt(var + eps) · w + b      GPT-2, GPT-NeoX, GPT-Neo
  RMSNorm,          // x/sqrt(mean(x²) + eps) · w              Llama, Mistral, Qwen2, Phi-3
  RMSNormPlusOne,   // x/sqrt(mean(x²) + eps) · (1 + w)        Gemma, Gemma 2
};
enum class PosKind { Learned, Rotary };
// Which coordinates of a head rotate together. Half: (i, i + r/2), Hugging Face's rotate_half (every
// HF family here). Adjacent: (2i, 2i + 1), GPT-J / Meta's original layout (llama.cpp's GGUF files).
enum class RotaryPairing { Half, Adjacent };
enum class MlpKind {
  GeluTanh,  // down(gelu_tanh(up(x)))       GPT-2 ("gelu_new"), GPT-Neo
  Gelu,      // down(gelu_erf(up(x)))        GPT-NeoX ("gelu")
  SwiGLU,    // down(silu(gate(x)) · up(x))  Llama, Mistral, Qwen2, Phi-3
  GeGLU,     // down(gelu_tanh(gate(x)) · up(x))  Gemma, Gemma 2
  None,      // attention-only (qkv's own tiny models)
};
// Where Q, K and V live in the checkpoint.
enum class QkvLayout {
  Separate,     // q_proj, k_proj, v_proj (nn.Linear [out, in])
  Gpt2Thirds,   // c_attn Conv1D [d, 3d]: columns [0,d) Q, [d,2d) K, [2d,3d) V; head h = cols h·dh..
  NeoxPerHead,  // query_key_value Linear [3·H·dh, d]: output viewed [H, 3, dh] (per head q, k, v)
  Stacked,      // qkv_proj Linear [(H + 2·n_kv)·dh, d]: rows Q, then K, then V (Phi-3)
};

struct RopeScaling {
  std::string type;  // "" none, "linear", "llama3", "longrope"
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_position_embeddings = 8192;
  // longrope (Phi-3's 128k models): frequency i divided by short_factor[i] while the sequence (the largest
  // position + 1) is at most original_max_position_embeddings, by long_factor[i] beyond, and cos and sin
  // (so q and k) multiplied by attention_factor — Hugging Face's rule: its default
  // √(1 + ln(max_position_embeddings / original) / ln(original)), 1 when the model is not extended.
  std::vector<double> short_factor, long_factor;
  double attention_factor = 1;
  // llama.cpp's per-frequency factors (a GGUF's rope_freqs.weight, [rotary_dim / 2]; how its files carry
  // Llama 3.1's llama3 scaling): frequency i is divided by freq_factors[i], after `type`'s scaling. Empty
  // unless read from such a file.
  std::vector<double> freq_factors;
};

struct Arch {
  std::string model_type;      // config.json's model_type: "gpt2", "llama", …
  std::string architecture;    // e.g. "LlamaForCausalLM" (informational)
  int vocab_size = 0, d = 0, n_layer = 0, n_ctx = 0;
  int H = 0, n_kv = 0, dh = 0;  // query heads, key/value heads (H % n_kv == 0), head_dim
  int d_ff = 0;                 // MLP width (0 with MlpKind::None)

  NormKind norm = NormKind::LayerNorm;
  double norm_eps = 1e-5;

  PosKind pos = PosKind::Learned;
  RotaryPairing pairing = RotaryPairing::Half;
  int rotary_dim = 0;  // how many of dh's coordinates rotate (partial rotary: rotary_pct · dh)
  double rope_theta = 10000;
  RopeScaling rope_scaling;

  QkvLayout qkv_layout = QkvLayout::Separate;
  bool conv1d = false;  // matrices stored [in, out] (GPT-2's Conv1D) rather than nn.Linear's [out, in]
  bool qkv_bias = false, o_bias = false, mlp_bias = false, norm_bias = false;
  double attn_scale = 0;       // multiplier of q·k: 1/√dh, query_pre_attn_scalar^-½, or 1 (GPT-Neo)
  double attn_softcap = 0;     // Gemma 2: S = c·tanh(S/c); 0 = none
  double final_softcap = 0;    // Gemma 2: logits = c·tanh(logits/c); 0 = none
  std::vector<int> window;     // per layer: 0 global, w > 0 sliding window (key j visible iff i - w < j <= i)

  MlpKind mlp = MlpKind::GeluTanh;
  bool gate_up_fused = false;  // Phi-3's gate_up_proj [2·d_ff, d]: gate rows first, then up
  bool parallel_residual = false;  // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
  bool post_norms = false;     // Gemma 2: a norm on the attention output and on the MLP output
  bool tied_embeddings = true;
  bool embed_scale = false;    // Gemma: x = embed · √d

  int q_dim() const { return H * dh; }
  int kv_dim() const { return n_kv * dh; }
  bool rotary() const { return pos == PosKind::Rotary; }
  bool attn_only() const { return mlp == MlpKind::None; }
  bool gated_mlp() const { return mlp == MlpKind::SwiGLU || mlp == MlpKind::GeGLU; }  // act(gate(u)) · up(u)
  // Every layer's window, or 0 when the layer attends to all earlier positions.
  int window_of(int layer) const { return window.empty() ? 0 : window[size_t(layer)]; }
  // Throws qkv::Error (Data) naming `where` and the key when the description is inconsistent.
  void validate(const std::string& where) const;
  void check_longrope(const std::string& where) const;  // validate's longrope part
  // The description in words, one line per aspect, for `qkv info`.
  std::vector<std::string> describe() const;
  nlohmann::json to_json() const;
};

// Rotary inverse frequencies [rotary_dim / 2] in double: θ^(−2i/r), then the rope scaling (linear: ÷ factor;
// llama3: long wavelengths ÷ factor, short ones kept, a smooth blend between; longrope: ÷ short_factor[i],
// or ÷ long_factor[i] when seq_len > original_max_position_embeddings; GGUF's per-frequency factors:
// frequency i ÷ freq_factors[i]). Position p's angle i is p · inv[i]; seq_len is the largest position + 1
// of the forward that rotates (as Hugging Face's dynamic longrope: a decoding step past the original
// length rotates by the long factors, the keys cached before it keep theirs). The forward, the training
// forward and the experiments all rotate by these.
std::vector<double> rope_inv_freq(const Arch& arch, int seq_len = 0);
// What cos and sin are multiplied by: longrope's attention_factor, else 1.
double rope_attention_factor(const Arch& arch);

// The families qkv knows, as config.json's model_type spells them (the family table's rows, family.hpp).
const std::vector<std::string>& supported_model_types();

// Reads a Hugging Face config.json (already parsed) into an Arch through its family's row (family.hpp).
// Unknown model_type, a key of the wrong type, an unsupported rope_scaling or an inconsistent head layout:
// qkv::Error (Data) naming `where` and the key.
Arch arch_from_config(const nlohmann::json& config, const std::string& where);

// A config.json for an architecture, as Hugging Face writes that family's (`qkv init --arch`).
// `preset` is "tiny" (tests) or "small" (benchmarks); `overrides` are KEY=VALUE pairs applied to the
// JSON before it is read back (any config key: `num_key_value_heads=2`).
nlohmann::json default_config(const std::string& model_type, const std::string& preset);

// What the forward reads a tensor as: every family's tensors map onto these roles (arch.cpp's tables),
// and everything that walks a model — loading, GGUF names, training offsets, initialisation — goes from
// a role to its slot through role_slot() below. Whole-model roles first, then per-block ones.
// clang-format off
enum class Role : uint8_t {
  wte, wpe, lnf_w, lnf_b, lm_head,                               // embeddings, final norm, unembedding
  ln1_w, ln1_b, ln2_w, ln2_b, post_attn_w, post_mlp_w,           // norms (Gemma 2's post-norms)
  wq, wk, wv, bq, bk, bv, wqkv, bqkv, wo, bo,                    // attention (separate or fused Q/K/V)
  w_up, b_up, w_gate, b_gate, w_gate_up, w_down, b_down,         // MLP
};
// clang-format on
constexpr int kTopRoles = 5;
constexpr int kRoles = int(Role::b_down) + 1;
const char* role_name(Role r);  // "wq", as qkv info and the errors print it
inline bool is_block_role(Role r) { return int(r) >= kTopRoles; }
// Norm weights (identity at init: 1, or 0 for Gemma's 1 + w) and norm biases.
inline bool is_norm_weight(Role r) {
  return r == Role::ln1_w || r == Role::ln2_w || r == Role::lnf_w || r == Role::post_attn_w || r == Role::post_mlp_w;
}
inline bool is_norm_bias(Role r) { return r == Role::ln1_b || r == Role::ln2_b || r == Role::lnf_b; }
// Matrices stored [in, out] by GPT-2's Conv1D (every 2-D tensor but the embeddings).
inline bool is_embedding(Role r) { return r == Role::wte || r == Role::wpe; }

// One T per role: a model's weights (TopSlots<Weight>, BlockSlots<Weight>), a trainable layout's offsets
// (int64_t), … Named members so that the block forward reads as a list of calls; role_slot() is the one
// map from a role to its member.
template <class T>
struct TopSlots {
  T wte{}, wpe{}, lnf_w{}, lnf_b{}, lm_head{};
};
template <class T>
struct BlockSlots {
  T ln1_w{}, ln1_b{}, ln2_w{}, ln2_b{}, post_attn_w{}, post_mlp_w{};
  T wq{}, wk{}, wv{}, bq{}, bk{}, bv{}, wqkv{}, bqkv{}, wo{}, bo{};
  T w_up{}, b_up{}, w_gate{}, b_gate{}, w_gate_up{}, w_down{}, b_down{};
};

// The slot of role r (in block `layer` for a block role).
template <class T>
T& role_slot(TopSlots<T>& top, std::vector<BlockSlots<T>>& blocks, Role r, int layer) {
  using Top = TopSlots<T>;
  using Blk = BlockSlots<T>;
  static constexpr T Top::*tops[] = {&Top::wte, &Top::wpe, &Top::lnf_w, &Top::lnf_b, &Top::lm_head};
  static constexpr T Blk::*blks[] = {
      &Blk::ln1_w, &Blk::ln1_b, &Blk::ln2_w, &Blk::ln2_b, &Blk::post_attn_w, &Blk::post_mlp_w, &Blk::wq,
      &Blk::wk,    &Blk::wv,    &Blk::bq,    &Blk::bk,    &Blk::bv,          &Blk::wqkv,       &Blk::bqkv,
      &Blk::wo,    &Blk::bo,    &Blk::w_up,  &Blk::b_up,  &Blk::w_gate,      &Blk::b_gate,     &Blk::w_gate_up,
      &Blk::w_down, &Blk::b_down};
  static_assert(std::size(tops) == kTopRoles && std::size(blks) == kRoles - kTopRoles, "one member per role");
  if (!is_block_role(r)) return top.*tops[int(r)];
  return blocks.at(size_t(layer)).*blks[int(r) - kTopRoles];
}
template <class T>
const T& role_slot(const TopSlots<T>& top, const std::vector<BlockSlots<T>>& blocks, Role r, int layer) {
  return role_slot(const_cast<TopSlots<T>&>(top), const_cast<std::vector<BlockSlots<T>>&>(blocks), r, layer);
}

// Every slot set to `fill` (e.g. -1: "absent" for offsets).
template <class T>
void fill_slots(TopSlots<T>& top, std::vector<BlockSlots<T>>& blocks, const T& fill) {
  for (int r = 0; r < kRoles; r++)
    for (size_t l = 0; l < (r < kTopRoles ? size_t(1) : blocks.size()); l++) role_slot(top, blocks, Role(r), int(l)) = fill;
}

// One tensor of a checkpoint as the family names it, with the role the forward reads it in.
struct TensorSpec {
  std::string name;             // Hugging Face's name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;   // as stored
  int layer = -1;               // -1: not in a block
  Role role = Role::wte;
};
// The family's tensor table for this architecture: exactly the tensors a checkpoint must hold.
std::vector<TensorSpec> tensor_table(const Arch& arch);

}  // namespace qkv

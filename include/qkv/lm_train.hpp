// Training a model of any family (arch.hpp): its parameters as one flat buffer in the family's own
// tensor-table order, a training forward that keeps what the backward needs, and the backward.
//
// The training forward is the family forward of lm_forward.cpp written out again over that buffer,
// templated on float (training) and double (gradient checks against central differences), with the
// attention always materialised (the backward needs A). Per block, as lm.hpp lists it:
//   u = norm1(x); P = the model's own Q/K/V maps of u; q, k, v = heads of P; q, k = rotary(q, k);
//   S = scale·q·kᵀ (soft-cap) (mask); A = softmax(S); z = A·v (query head h reads kv head h/(H/n_kv));
//   a = z·W_O (+ b_O) (post-norm); x += a; m = mlp(norm2(x)) (post-norm); x += m  (or parallel)
// then logits = norm_f(x)·Wᵀ (soft-cap). Every backward accumulates (+=).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/arch.hpp"
#include "qkv/lm.hpp"

namespace qkv {

// The pieces, each a forward / backward pair (tests check each against central differences).
namespace lm_ops {

// x [N, d] -> y [N, d] by the Arch's norm; saves mean [N] (LayerNorm only; may be null otherwise) and
// rstd [N]. LayerNorm: (x − μ)·r·w (+ b); RMSNorm: x·r·w; Gemma: x·r·(1 + w); b may be null.
template <class T>
void norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, NormKind kind, int N, int d,
                  double eps);
template <class T>
void norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                   NormKind kind, int N, int d);

// The rotation angles of positions 0 .. T-1 for an Arch (θ, rotary_dim, rope scaling; longrope's factors for a
// sequence of T and its attention factor): cos and sin [T, rotary_dim/2] in double (lm_forward.cpp rounds
// them to float).
struct RopeTable {
  int T = 0, dh = 0, r = 0;
  bool adjacent = false;
  std::vector<double> cos, sin;
};
RopeTable rope_table(const Arch& arch, int T);
// x [heads, T, dh] rotated in place: pairs (i, i + r/2) or (2i, 2i + 1), dims >= r untouched.
template <class T>
void rope_forward(T* x, int heads, const RopeTable& r);
// dx [heads, T, dh] in place: dx ← Rᵀ·dx (the rotation by −θ; rotations are orthogonal). overwrites
template <class T>
void rope_backward(T* dx, int heads, const RopeTable& r);

// q [H, T, dh], k, v [n_kv, T, dh] -> z [H, T, dh]; A [H, T, T] the pattern; Sc [H, T, T] the soft-capped
// scores (only when softcap > 0; may be null otherwise). Query head h reads kv head h / (H / n_kv); key j
// is visible to query i iff j <= i and (window == 0 or i − j < window).
template <class T>
void attention_forward(T* z, T* A, T* Sc, const T* q, const T* k, const T* v, int H, int n_kv, int T_, int dh,
                       double scale, double softcap, int window);
// dq [H, T, dh], dk, dv [n_kv, T, dh] accumulate (dK, dV summed over the heads of a group). dA_out and
// dS_out [H, T, T] (optional) receive ∂/∂pattern (dz·vᵀ, masked entries included) and ∂/∂(the soft-capped,
// masked scores) (0 where masked), overwritten.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dz, const T* A, const T* Sc, const T* q, const T* k,
                        const T* v, int H, int n_kv, int T_, int dh, double scale, double softcap,
                        T* dA_out = nullptr, T* dS_out = nullptr);

// h [n] = act(g) · up (gated kinds: SwiGLU silu, GeGLU gelu_tanh) or act(g) (GeluTanh, Gelu: up null).
template <class T>
void mlp_act_forward(T* h, const T* g, const T* up, MlpKind kind, int64_t n);
// dg (and dup, gated) accumulate.
template <class T>
void mlp_act_backward(T* dg, T* dup, const T* dh, const T* g, const T* up, MlpKind kind, int64_t n);

}  // namespace lm_ops

// Where each parameter sits in the flat buffer (-1: absent). One table drives offsets, init, saving,
// the Model view and weight decay: the family's tensor_table (arch.hpp).
struct LmLayout : TopSlots<int64_t> {
  Arch arch;
  std::vector<TensorSpec> table;
  std::vector<int64_t> offset;  // per table row
  int64_t size = 0;
  bool in_out = false;  // GPT-2: matrices stored [in, out] (Conv1D)
  using Block = BlockSlots<int64_t>;
  std::vector<Block> blocks;  // every role's offset, -1 where the family has no such tensor
};
LmLayout lm_layout(const Arch& arch);

// What the training forward keeps for the backward (per layer), sized on first use.
template <class F>
struct LmActs {
  int T = 0;
  std::vector<int> ids;
  struct Layer {
    std::vector<F> x_in, u1, mean1, rstd1, P, q, k, v, A, Sc, zm, ao, rstd_pa, x_mid, u2, mean2, rstd2, g, up,
        h, mo, rstd_pm;
  };
  std::vector<Layer> layers;
  std::vector<F> xf, uf, meanf, rstdf, raw, logits;  // raw: logits before the final soft-cap
  std::vector<F> work;                               // backward scratch
};

// ids [T] -> logits [T, vocab] (also in acts.logits), keeping every activation the backward reads.
template <class T>
const std::vector<T>& lm_train_forward(const LmLayout& L, const T* params, const std::vector<int>& ids,
                                       LmActs<T>& acts);

// Mean next-token cross-entropy over the positions whose target is >= 0.
template <class T>
double lm_cross_entropy(const std::vector<T>& logits, const std::vector<int>& targets, int vocab);

// After lm_train_forward: accumulates ∂loss/∂params into grads (size L.size) for the loss above and
// returns the loss.
template <class T>
double lm_train_backward(const LmLayout& L, const T* params, const std::vector<int>& targets, LmActs<T>& acts,
                         T* grads);

// Receives ∂(the backward's scalar)/∂(activation) at each hook point (lm.hpp's names and shapes) as the
// backward reaches it: `wants(name)` (null: every hook) picks them; fn gets the data as the backward
// holds it, [rows…] as `shape` says, except that q, k, v, rot_q and rot_k come heads-major [n, T, dh]
// (heads_major true) while their hook shape is TransformerLens's [T, n, dh]. The data is valid during
// the call only.
template <class F>
struct ActGradSink {
  std::function<bool(const std::string&)> wants;
  std::function<void(const std::string& name, const F* data, const std::vector<int64_t>& shape, bool heads_major)>
      fn;
};

// After lm_train_forward: the backward from dlogits = ∂(scalar)/∂logits [T, vocab] (after any final
// soft-cap, as run() returns the logits). grads (size L.size): accumulates ∂/∂params, or null to compute
// only the activations' gradients (about half the work); sink: the hook points' gradients, or null.
template <class T>
void lm_backward(const LmLayout& L, const T* params, std::vector<T> dlogits, LmActs<T>& acts, T* grads,
                 const ActGradSink<T>* sink);

// A trainable model: the layout and the fp32 parameters.
struct LmParams {
  LmLayout layout;
  std::vector<float> params;
  nlohmann::json config;  // the config.json it was made from (written beside the weights)
  const Arch& arch() const { return layout.arch; }
  float* at(const std::string& name);
};

// A model of this config with the family's initialisation: N(0, 0.02) matrices and embeddings, the
// residual outputs (W_O, the MLP's down) scaled by 1/√(2·n_layer), norm weights at identity (1, Gemma
// 0), biases 0. Deterministic for a seed.
struct LmInit {
  // Learned positions (GPT-2, GPT-Neo) start as sinusoids — wpe[pos, 2i] = sin(pos / 10000^(2i/d)),
  // wpe[pos, 2i+1] = cos(…) — scaled to RMS 0.02, and are still learned: the GPT-2 induction preset's
  // start, which hands a previous-token head a position code from the first step.
  bool sinusoidal_positions = false;
};
LmParams init_lm(const nlohmann::json& config, uint64_t seed, const LmInit& options = {});
// Parameters for gradient checks in double, large enough that every path matters: matrices N(0, 0.3),
// norm weights 1 + N(0, 0.2) (Gemma's 1 + w: N(0, 0.2)), other vectors N(0, 0.2). Deterministic for a seed.
std::vector<double> lm_gradcheck_params(const LmLayout& L, uint64_t seed);
// A loaded model's weights copied into a trainable buffer (F16/BF16 converted).
LmParams lm_params_from(const Model& m, const nlohmann::json& config);
// A Model whose weights are F32 views into p.params (valid while p lives and is not resized): run(),
// hooks and every experiment read the trained weights in place.
Model lm_view(const LmParams& p);
// model.safetensors at `path` (F32, the family's tensor names, `metadata` in __metadata__), written
// through a temporary file; config.json is p.config (the caller writes it).
void save_lm(const LmParams& p, const std::string& path,
             const std::map<std::string, std::string>& metadata = {});
// AdamW decays matrices and embeddings (2-D tensors except learned positions), not norms or biases.
std::vector<uint8_t> lm_decay_mask(const LmLayout& L);

}  // namespace qkv

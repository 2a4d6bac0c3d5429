// GPT-2's attention sublayer, forward and backward:
//   x -> x + c_proj(merge(attention(split(c_attn(ln_1(x))))))
// The block forward is a straight list of op calls (ops.hpp); the cache it fills is both what the
// backward needs and the trace a caller can read (u, q, k, v, S unmasked, A, z).
#pragma once
#include <vector>

namespace qkv {

struct AttentionShape {
  int T = 0;  // tokens
  int d = 0;  // model width
  int H = 1;  // heads; dh = d / H
  double eps = 1e-5;
  int dh() const { return d / H; }
  void validate() const;  // throws qkv::Error (Usage) when a size is not positive or H does not divide d
};

// Parameters of one sublayer as GPT-2 stores them (HF Conv1D layout, [in, out]).
template <class T>
struct AttentionParams {
  const T* ln_w = nullptr;    // ln_1.weight [d]
  const T* ln_b = nullptr;    // ln_1.bias [d]
  const T* W_attn = nullptr;  // attn.c_attn.weight [d, 3d]: columns [0,d) W_Q, [d,2d) W_K, [2d,3d) W_V
  const T* b_attn = nullptr;  // attn.c_attn.bias [3d]: b_Q | b_K | b_V
  const T* W_O = nullptr;     // attn.c_proj.weight [d, d]
  const T* b_O = nullptr;     // attn.c_proj.bias [d]
};

// Gradients, same shapes; the backward accumulates into them (+=).
template <class T>
struct AttentionGrads {
  T* ln_w = nullptr;
  T* ln_b = nullptr;
  T* W_attn = nullptr;
  T* b_attn = nullptr;
  T* W_O = nullptr;
  T* b_O = nullptr;
};

// The per-sublayer arena: sized once by resize(), reused by every forward and backward.
template <class T>
struct AttentionCache {
  std::vector<T> u;         // [T, d] ln_1(x), what c_attn reads
  std::vector<T> mean;      // [T]
  std::vector<T> rstd;      // [T]
  std::vector<T> qkv;       // [T, 3d]
  std::vector<T> q, k, v;   // [H, T, dh] each
  std::vector<T> S;         // [H, T, T] scaled, UNMASKED scores q·kᵀ/√dh
  std::vector<T> A;         // [H, T, T] the pattern (softmax of masked S)
  std::vector<T> z;         // [H, T, dh] A·v
  std::vector<T> z_merged;  // [T, d]
  std::vector<T> attn_out;  // [T, d] c_proj(z_merged) incl. its bias
  // backward workspace, allocated by the first backward (inference never pays for it)
  std::vector<T> d_attn_out, dz, dA, dS, dq, dk, dv, dqkv, du;

  void resize(const AttentionShape& s);
  void resize_backward(const AttentionShape& s);
};

// out [T, d] = x + attn_out. out may alias x (the backward then cannot run: it reads x).
template <class T>
void attention_sublayer_forward(T* out, const T* x, const AttentionParams<T>& p, const AttentionShape& s,
                                AttentionCache<T>& c);

// Given dout = ∂L/∂out, accumulates ∂L/∂x into dx (the residual path included) and every parameter
// gradient into g. Reads x and the cache of the forward that produced out.
template <class T>
void attention_sublayer_backward(T* dx, AttentionGrads<T>& g, const T* dout, const T* x, const AttentionParams<T>& p,
                                 const AttentionShape& s, AttentionCache<T>& c);

// The same mechanism through the slow reference ops (ops.hpp, namespace ref) for the tests.
template <class T>
void attention_sublayer_forward_reference(T* out, const T* x, const AttentionParams<T>& p, const AttentionShape& s,
                                          AttentionCache<T>& c);

}  // namespace qkv

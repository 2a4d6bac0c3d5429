// GPT-2's MLP sublayer, forward and backward:
//   x -> x + c_proj(gelu(c_fc(ln_2(x))))
#pragma once
#include <vector>

namespace qkv {

struct MlpShape {
  int T = 0;      // tokens
  int d = 0;      // model width
  int inner = 0;  // hidden width (4d in GPT-2)
  double eps = 1e-5;
};

template <class T>
struct MlpParams {
  const T* ln_w = nullptr;    // ln_2.weight [d]
  const T* ln_b = nullptr;    // ln_2.bias [d]
  const T* W_fc = nullptr;    // mlp.c_fc.weight [d, inner]
  const T* b_fc = nullptr;    // mlp.c_fc.bias [inner]
  const T* W_proj = nullptr;  // mlp.c_proj.weight [inner, d]
  const T* b_proj = nullptr;  // mlp.c_proj.bias [d]
};

template <class T>
struct MlpGrads {
  T *ln_w = nullptr, *ln_b = nullptr, *W_fc = nullptr, *b_fc = nullptr, *W_proj = nullptr, *b_proj = nullptr;
};

template <class T>
struct MlpCache {
  std::vector<T> u, mean, rstd;  // ln_2(x) [T, d], [T], [T]
  std::vector<T> pre;            // [T, inner] c_fc(u), before GELU
  std::vector<T> act;            // [T, inner] gelu(pre)
  std::vector<T> mlp_out;        // [T, d] c_proj(act) incl. its bias
  std::vector<T> dact, dpre, du;  // backward workspace
};

// out [T, d] = x + mlp_out.
template <class T>
void mlp_sublayer_forward(T* out, const T* x, const MlpParams<T>& p, const MlpShape& s, MlpCache<T>& c);

// Accumulates ∂L/∂x (residual path included) into dx and the parameter gradients into g.
template <class T>
void mlp_sublayer_backward(T* dx, MlpGrads<T>& g, const T* dout, const T* x, const MlpParams<T>& p, const MlpShape& s,
                           MlpCache<T>& c);

}  // namespace qkv

#include "qkv/attention.hpp"

#include <cmath>
#include <string>

#include "qkv/error.hpp"
#include "qkv/ops.hpp"

namespace qkv {

void AttentionShape::validate() const {
  if (T < 1 || d < 1 || H < 1)
    usage_error("attention shape T=" + std::to_string(T) + " d=" + std::to_string(d) + " H=" + std::to_string(H) +
                ": every size must be at least 1");
  if (d % H != 0)
    usage_error("attention shape: H=" + std::to_string(H) + " does not divide d=" + std::to_string(d));
}

template <class T>
void AttentionCache<T>::resize(const AttentionShape& s) {
  const size_t Td = size_t(s.T) * s.d, TT = size_t(s.H) * s.T * s.T;
  for (auto* b : {&u, &z_merged, &attn_out}) b->resize(Td);
  for (auto* b : {&mean, &rstd}) b->resize(size_t(s.T));
  qkv.resize(3 * Td);
  for (auto* b : {&q, &k, &v, &z}) b->resize(Td);
  for (auto* b : {&S, &A}) b->resize(TT);
}

template <class T>
void AttentionCache<T>::resize_backward(const AttentionShape& s) {
  const size_t Td = size_t(s.T) * s.d, TT = size_t(s.H) * s.T * s.T;
  for (auto* b : {&d_attn_out, &du, &dz, &dq, &dk, &dv}) b->resize(Td);
  dqkv.resize(3 * Td);
  for (auto* b : {&dA, &dS}) b->resize(TT);
}

namespace {

// One forward written once and run through either op set: Ops is the fast namespace or ref.
template <class T, bool Reference>
void forward_impl(T* out, const T* x, const AttentionParams<T>& p, const AttentionShape& s, AttentionCache<T>& c) {
  s.validate();
  c.resize(s);
  const int T_ = s.T, d = s.d, H = s.H, dh = s.dh();
  const T scale = T(1) / std::sqrt(T(dh));
#define QKV_OP(name) (Reference ? &ref::name<T> : &name<T>)
  QKV_OP(layernorm_forward)(c.u.data(), c.mean.data(), c.rstd.data(), x, p.ln_w, p.ln_b, T_, d, s.eps);
  QKV_OP(affine_forward)(c.qkv.data(), c.u.data(), p.W_attn, p.b_attn, T_, d, 3 * d);
  QKV_OP(split_qkv_forward)(c.q.data(), c.k.data(), c.v.data(), c.qkv.data(), T_, d, H);
  QKV_OP(scores_forward)(c.S.data(), c.q.data(), c.k.data(), H, T_, dh, scale);
  c.A = c.S;
  QKV_OP(causal_mask_forward)(c.A.data(), H, T_);
  QKV_OP(softmax_forward)(c.A.data(), c.A.data(), int64_t(H) * T_, T_);
  QKV_OP(mix_forward)(c.z.data(), c.A.data(), c.v.data(), H, T_, dh);
  QKV_OP(merge_heads_forward)(c.z_merged.data(), c.z.data(), T_, d, H);
  QKV_OP(affine_forward)(c.attn_out.data(), c.z_merged.data(), p.W_O, p.b_O, T_, d, d);
#undef QKV_OP
  for (size_t i = 0; i < c.attn_out.size(); i++) out[i] = x[i] + c.attn_out[i];
}

}  // namespace

template <class T>
void attention_sublayer_forward(T* out, const T* x, const AttentionParams<T>& p, const AttentionShape& s,
                                AttentionCache<T>& c) {
  forward_impl<T, false>(out, x, p, s, c);
}

template <class T>
void attention_sublayer_forward_reference(T* out, const T* x, const AttentionParams<T>& p, const AttentionShape& s,
                                          AttentionCache<T>& c) {
  forward_impl<T, true>(out, x, p, s, c);
}

template <class T>
void attention_sublayer_backward(T* dx, AttentionGrads<T>& g, const T* dout, const T* x, const AttentionParams<T>& p,
                                 const AttentionShape& s, AttentionCache<T>& c) {
  const int T_ = s.T, d = s.d, H = s.H, dh = s.dh();
  const T scale = T(1) / std::sqrt(T(dh));
  c.resize_backward(s);
  // out = x + attn_out
  for (size_t i = 0; i < size_t(T_) * d; i++) dx[i] += dout[i];
  // attn_out = z_merged·W_O + b_O
  std::fill(c.d_attn_out.begin(), c.d_attn_out.end(), T(0));  // becomes dz_merged
  affine_backward(c.d_attn_out.data(), g.W_O, g.b_O, dout, c.z_merged.data(), p.W_O, T_, d, d);
  // z_merged = merge(z)
  merge_heads_backward(c.dz.data(), c.d_attn_out.data(), T_, d, H);
  // z = A·v
  std::fill(c.dv.begin(), c.dv.end(), T(0));
  mix_backward(c.dA.data(), c.dv.data(), c.dz.data(), c.A.data(), c.v.data(), H, T_, dh);
  // A = softmax(mask(S)); masked entries have A = 0, so their dS is 0 already
  softmax_backward(c.dS.data(), c.dA.data(), c.A.data(), int64_t(H) * T_, T_);
  causal_mask_backward(c.dS.data(), H, T_);
  // S = q·kᵀ·scale
  std::fill(c.dq.begin(), c.dq.end(), T(0));
  std::fill(c.dk.begin(), c.dk.end(), T(0));
  scores_backward(c.dq.data(), c.dk.data(), c.dS.data(), c.q.data(), c.k.data(), H, T_, dh, scale);
  // q, k, v = split(qkv)
  split_qkv_backward(c.dqkv.data(), c.dq.data(), c.dk.data(), c.dv.data(), T_, d, H);
  // qkv = u·W_attn + b_attn
  std::fill(c.du.begin(), c.du.end(), T(0));
  affine_backward(c.du.data(), g.W_attn, g.b_attn, c.dqkv.data(), c.u.data(), p.W_attn, T_, d, 3 * d);
  // u = ln_1(x)
  layernorm_backward(dx, g.ln_w, g.ln_b, c.du.data(), x, p.ln_w, c.mean.data(), c.rstd.data(), T_, d);
}

#define QKV_INSTANTIATE_ATTENTION(T)                                                                           \
  template struct AttentionCache<T>;                                                                           \
  template void attention_sublayer_forward<T>(T*, const T*, const AttentionParams<T>&, const AttentionShape&,  \
                                              AttentionCache<T>&);                                             \
  template void attention_sublayer_forward_reference<T>(T*, const T*, const AttentionParams<T>&,               \
                                                        const AttentionShape&, AttentionCache<T>&);            \
  template void attention_sublayer_backward<T>(T*, AttentionGrads<T>&, const T*, const T*,                     \
                                               const AttentionParams<T>&, const AttentionShape&, AttentionCache<T>&);
QKV_INSTANTIATE_ATTENTION(float)
QKV_INSTANTIATE_ATTENTION(double)

}  // namespace qkv

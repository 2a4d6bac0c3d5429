#include "qkv/mlp.hpp"

#include <algorithm>

#include "qkv/ops.hpp"

namespace qkv {

template <class T>
void mlp_sublayer_forward(T* out, const T* x, const MlpParams<T>& p, const MlpShape& s, MlpCache<T>& c) {
  const size_t Td = size_t(s.T) * s.d, Ti = size_t(s.T) * s.inner;
  c.u.resize(Td);
  c.mean.resize(size_t(s.T));
  c.rstd.resize(size_t(s.T));
  c.pre.resize(Ti);
  c.act.resize(Ti);
  c.mlp_out.resize(Td);
  layernorm_forward(c.u.data(), c.mean.data(), c.rstd.data(), x, p.ln_w, p.ln_b, s.T, s.d, s.eps);
  affine_forward(c.pre.data(), c.u.data(), p.W_fc, p.b_fc, s.T, s.d, s.inner);
  gelu_forward(c.act.data(), c.pre.data(), int64_t(Ti));
  affine_forward(c.mlp_out.data(), c.act.data(), p.W_proj, p.b_proj, s.T, s.inner, s.d);
  for (size_t i = 0; i < Td; i++) out[i] = x[i] + c.mlp_out[i];
}

template <class T>
void mlp_sublayer_backward(T* dx, MlpGrads<T>& g, const T* dout, const T* x, const MlpParams<T>& p, const MlpShape& s,
                           MlpCache<T>& c) {
  const size_t Td = size_t(s.T) * s.d, Ti = size_t(s.T) * s.inner;
  // out = x + mlp_out
  for (size_t i = 0; i < Td; i++) dx[i] += dout[i];
  // mlp_out = act·W_proj + b_proj
  c.dact.assign(Ti, T(0));
  affine_backward(c.dact.data(), g.W_proj, g.b_proj, dout, c.act.data(), p.W_proj, s.T, s.inner, s.d);
  // act = gelu(pre)
  c.dpre.assign(Ti, T(0));
  gelu_backward(c.dpre.data(), c.dact.data(), c.pre.data(), int64_t(Ti));
  // pre = u·W_fc + b_fc
  c.du.assign(Td, T(0));
  affine_backward(c.du.data(), g.W_fc, g.b_fc, c.dpre.data(), c.u.data(), p.W_fc, s.T, s.d, s.inner);
  // u = ln_2(x)
  layernorm_backward(dx, g.ln_w, g.ln_b, c.du.data(), x, p.ln_w, c.mean.data(), c.rstd.data(), s.T, s.d);
}

template void mlp_sublayer_forward<float>(float*, const float*, const MlpParams<float>&, const MlpShape&,
                                          MlpCache<float>&);
template void mlp_sublayer_forward<double>(double*, const double*, const MlpParams<double>&, const MlpShape&,
                                           MlpCache<double>&);
template void mlp_sublayer_backward<float>(float*, MlpGrads<float>&, const float*, const float*,
                                           const MlpParams<float>&, const MlpShape&, MlpCache<float>&);
template void mlp_sublayer_backward<double>(double*, MlpGrads<double>&, const double*, const double*,
                                            const MlpParams<double>&, const MlpShape&, MlpCache<double>&);

}  // namespace qkv

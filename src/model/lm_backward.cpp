// The family training forward and its backward (lm_train.hpp): lm_forward.cpp's block over a flat
// parameter buffer, every activation kept, then the same block read bottom-up. Templated on float
// (training) and double (gradient checks).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "qkv/error.hpp"
#include "qkv/gemm.hpp"
#include "qkv/lm_train.hpp"
#include "qkv/ops.hpp"

namespace qkv {

namespace lm_ops {

template <class T>
void norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, NormKind kind, int N, int d,
                  double eps) {
  const T e = T(eps);
  for (int i = 0; i < N; i++) {
    const T* xi = x + long(i) * d;
    T* yi = y + long(i) * d;
    if (kind == NormKind::LayerNorm) {
      // the loops of lm_forward.cpp's norm_rows
      T mu = 0;
      for (int j = 0; j < d; j++) mu += xi[j];
      mu /= T(d);
      T var = 0;
      for (int j = 0; j < d; j++) var += (xi[j] - mu) * (xi[j] - mu);
      var /= T(d);
      const T r = T(1) / std::sqrt(var + e);
      if (b) {
        for (int j = 0; j < d; j++) yi[j] = (xi[j] - mu) * r * w[j] + b[j];
      } else {
        for (int j = 0; j < d; j++) yi[j] = (xi[j] - mu) * r * w[j];
      }
      if (mean) mean[i] = mu;
      rstd[i] = r;
    } else {
      T ss = 0;
      for (int j = 0; j < d; j++) ss += xi[j] * xi[j];
      const T r = T(1) / std::sqrt(ss / T(d) + e);
      if (kind == NormKind::RMSNorm) {
        for (int j = 0; j < d; j++) yi[j] = (xi[j] * r) * w[j];
      } else {
        for (int j = 0; j < d; j++) yi[j] = (xi[j] * r) * (T(1) + w[j]);
      }
      if (mean) mean[i] = 0;
      rstd[i] = r;
    }
  }
}

// x̂ = (x − μ)·r (LayerNorm) or x·r; y = x̂·w' + b with w' = w or 1 + w.
// dw += Σ dy·x̂; db += Σ dy; dx̂ = dy·w'; LayerNorm: dx += r·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂));
// RMSNorm: dx += r·(dx̂ − x̂·mean(dx̂·x̂)).
template <class T>
void norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                   NormKind kind, int N, int d) {
  const bool ln = kind == NormKind::LayerNorm, plus_one = kind == NormKind::RMSNormPlusOne;
  for (int i = 0; i < N; i++) {
    const T* xi = x + long(i) * d;
    const T* gi = dy + long(i) * d;
    T* dxi = dx + long(i) * d;
    const T mu = ln ? mean[i] : T(0), r = rstd[i];
    T s1 = 0, s2 = 0;
    for (int j = 0; j < d; j++) {
      const T xh = (xi[j] - mu) * r;
      const T dxh = gi[j] * (plus_one ? T(1) + w[j] : w[j]);
      s1 += dxh;
      s2 += dxh * xh;
      if (dw) dw[j] += gi[j] * xh;
      if (db) db[j] += gi[j];
    }
    s1 /= T(d);
    s2 /= T(d);
    for (int j = 0; j < d; j++) {
      const T xh = (xi[j] - mu) * r;
      const T dxh = gi[j] * (plus_one ? T(1) + w[j] : w[j]);
      dxi[j] += r * (dxh - (ln ? s1 : T(0)) - xh * s2);
    }
  }
}

RopeTable rope_table(const Arch& a, int T) {
  RopeTable t;
  t.T = T, t.dh = a.dh, t.r = a.rotary_dim, t.adjacent = a.pairing == RotaryPairing::Adjacent;
  const int half = a.rotary_dim / 2;
  const std::vector<double> inv = rope_inv_freq(a, T);
  const double m = rope_attention_factor(a);
  t.cos.resize(size_t(T) * half);
  t.sin.resize(size_t(T) * half);
  for (int p = 0; p < T; p++)
    for (int i = 0; i < half; i++) {
      const double ang = double(p) * inv[size_t(i)];
      t.cos[size_t(p) * half + i] = std::cos(ang) * m;
      t.sin[size_t(p) * half + i] = std::sin(ang) * m;
    }
  return t;
}

// x' = (x0·c − x1·s, x1·c + x0·s) per pair; backward: (dx0·c + dx1·s, dx1·c − dx0·s).
template <class T>
void rope_apply(T* x, int heads, const RopeTable& r, bool inverse) {
  const int half = r.r / 2, Tn = r.T, dh = r.dh;
  for (long ht = 0; ht < long(heads) * Tn; ht++) {
    const int t = int(ht % Tn);
    T* p = x + ht * dh;
    for (int i = 0; i < half; i++) {
      const int i0 = r.adjacent ? 2 * i : i, i1 = r.adjacent ? 2 * i + 1 : i + half;
      const T c = T(r.cos[size_t(t) * half + i]),
              s = inverse ? -T(r.sin[size_t(t) * half + i]) : T(r.sin[size_t(t) * half + i]);
      const T x0 = p[i0], x1 = p[i1];
      p[i0] = x0 * c - x1 * s;
      p[i1] = x1 * c + x0 * s;
    }
  }
}
template <class T>
void rope_forward(T* x, int heads, const RopeTable& r) {
  rope_apply(x, heads, r, false);
}
template <class T>
void rope_backward(T* dx, int heads, const RopeTable& r) {
  rope_apply(dx, heads, r, true);
}

template <class T>
void attention_forward(T* z, T* A, T* Sc, const T* q, const T* k, const T* v, int H, int n_kv, int Tn, int dh,
                       double scale, double softcap, int window) {
  const int G = H / n_kv;
  const size_t TT = size_t(Tn) * Tn, Td = size_t(Tn) * dh;
  const T ninf = -std::numeric_limits<T>::infinity(), cap = T(softcap);
  for (int h = 0; h < H; h++) {
    T* Ah = A + h * TT;
    // S = scale · q_h · k_gᵀ
    gemm<T>(false, true, Tn, Tn, dh, T(scale), q + h * Td, dh, k + size_t(h / G) * Td, dh, T(0), Ah, Tn);
    for (int i = 0; i < Tn; i++)
      for (int j = 0; j < Tn; j++) {
        T& s = Ah[size_t(i) * Tn + j];
        if (softcap > 0) {
          s = cap * std::tanh(s / cap);
          Sc[h * TT + size_t(i) * Tn + j] = s;
        }
        if (j > i || (window > 0 && i - j >= window)) s = ninf;
      }
    softmax_forward(Ah, Ah, Tn, Tn);
    // z_h = A_h · v_g
    gemm<T>(false, false, Tn, dh, Tn, T(1), Ah, Tn, v + size_t(h / G) * Td, dh, T(0), z + h * Td, dh);
  }
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dz, const T* A, const T* Sc, const T* q, const T* k,
                        const T* v, int H, int n_kv, int Tn, int dh, double scale, double softcap, T* dA_out,
                        T* dS_out) {
  const int G = H / n_kv;
  const size_t TT = size_t(Tn) * Tn, Td = size_t(Tn) * dh;
  std::vector<T> dA(TT), dS(TT);
  const T cap = T(softcap);
  for (int h = 0; h < H; h++) {
    const T* Ah = A + h * TT;
    const size_t g = size_t(h / G);
    // z = A·v: dA = dz·vᵀ, dv += Aᵀ·dz
    gemm<T>(false, true, Tn, Tn, dh, T(1), dz + h * Td, dh, v + g * Td, dh, T(0), dA.data(), Tn);
    gemm<T>(true, false, Tn, dh, Tn, T(1), Ah, Tn, dz + h * Td, dh, T(1), dv + g * Td, dh);
    // A = softmax(S): dS = A ⊙ (dA − rowsum(dA ⊙ A)) (masked entries have A = 0, so dS = 0 there)
    softmax_backward(dS.data(), dA.data(), Ah, Tn, Tn);
    // S = cap·tanh(S0/cap): dS0 = dS·(1 − (S/cap)²)
    if (dA_out) std::copy(dA.begin(), dA.end(), dA_out + h * TT);
    if (dS_out) std::copy(dS.begin(), dS.end(), dS_out + h * TT);
    if (softcap > 0)
      for (size_t i = 0; i < TT; i++) {
        const T t = Sc[h * TT + i] / cap;
        dS[i] *= T(1) - t * t;
      }
    // S0 = scale·q·kᵀ: dq += scale·dS·k, dk += scale·dSᵀ·q
    gemm<T>(false, false, Tn, dh, Tn, T(scale), dS.data(), Tn, k + g * Td, dh, T(1), dq + h * Td, dh);
    gemm<T>(true, false, Tn, dh, Tn, T(scale), dS.data(), Tn, q + h * Td, dh, T(1), dk + g * Td, dh);
  }
}

namespace {
constexpr double kC = 0.7978845608028654;  // √(2/π)
constexpr double kA = 0.044715;
template <class T>
T sigmoid_neg_exp(T s) {  // 1 / (1 + e^{s}), the exponent capped at 88 as lm_forward.cpp does
  return T(1) / (T(1) + std::exp(s < T(88) ? s : T(88)));
}
}  // namespace

template <class T>
void mlp_act_forward(T* h, const T* g, const T* up, MlpKind kind, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const T x = g[i];
    T a;
    switch (kind) {
      case MlpKind::SwiGLU:
        a = x * sigmoid_neg_exp(-x);
        break;  // silu(x) = x·σ(x)
      case MlpKind::GeGLU:
        a = x * sigmoid_neg_exp(T(-2) * (T(kC) * (x + T(kA) * x * x * x)));
        break;
      case MlpKind::GeluTanh:
        a = T(0.5) * x * (T(1) + std::tanh(T(kC) * (x + T(kA) * x * x * x)));
        break;
      case MlpKind::Gelu:
        a = T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
        break;
      default:
        a = x;
    }
    h[i] = up ? up[i] * a : a;
  }
}

template <class T>
void mlp_act_backward(T* dg, T* dup, const T* dh, const T* g, const T* up, MlpKind kind, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const T x = g[i];
    T a, da;
    switch (kind) {
      case MlpKind::SwiGLU: {
        const T s = T(1) / (T(1) + std::exp(-x));
        a = x * s, da = s * (T(1) + x * (T(1) - s));
        break;
      }
      case MlpKind::GeGLU:
      case MlpKind::GeluTanh: {
        // gelu_tanh(x) = x·σ(2y), y = c(x + a x³)
        const T y = T(kC) * (x + T(kA) * x * x * x);
        const T s = T(1) / (T(1) + std::exp(T(-2) * y));
        a = x * s, da = s + x * s * (T(1) - s) * T(2) * T(kC) * (T(1) + T(3 * kA) * x * x);
        break;
      }
      case MlpKind::Gelu: {
        a = T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
        da = T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476))) +
             x * std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
        break;
      }
      default:
        a = x, da = 1;
    }
    if (up) {
      dg[i] += dh[i] * up[i] * da;
      dup[i] += dh[i] * a;
    } else {
      dg[i] += dh[i] * da;
    }
  }
}

#define QKV_LM_OPS(T)                                                                                      \
  template void norm_forward<T>(T*, T*, T*, const T*, const T*, const T*, NormKind, int, int, double);     \
  template void norm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, NormKind,   \
                                 int, int);                                                                \
  template void rope_forward<T>(T*, int, const RopeTable&);                                                \
  template void rope_backward<T>(T*, int, const RopeTable&);                                               \
  template void attention_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int, int, double, \
                                     double, int);                                                         \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,        \
                                      const T*, int, int, int, int, double, double, T*, T*);               \
  template void mlp_act_forward<T>(T*, const T*, const T*, MlpKind, int64_t);                              \
  template void mlp_act_backward<T>(T*, T*, const T*, const T*, const T*, MlpKind, int64_t);
QKV_LM_OPS(float)
QKV_LM_OPS(double)
#undef QKV_LM_OPS

}  // namespace lm_ops

// ---- the layout ----

LmLayout lm_layout(const Arch& arch) {
  LmLayout L;
  L.arch = arch;
  L.table = tensor_table(arch);
  L.in_out = arch.conv1d;
  L.blocks.resize(size_t(arch.n_layer));
  fill_slots<int64_t>(L, L.blocks, -1);
  for (const TensorSpec& s : L.table) {
    int64_t n = 1;
    for (int64_t x : s.shape) n *= x;
    L.offset.push_back(L.size);
    role_slot(L, L.blocks, s.role, s.layer) = L.size;
    L.size += n;
  }
  return L;
}

namespace {

template <class T>
void grow(std::vector<T>& b, size_t n) {
  if (b.size() < n) b.resize(n);
}

// y [N, out] (row stride ldy) = x [N, in] · W (+ b): W [out, in] (nn.Linear) or [in, out] (Conv1D).
// overwrites
template <class T>
void lin_forward(T* y, int ldy, const T* x, int N, int in, int out, const T* W, const T* b, bool in_out) {
  if (b)
    for (int i = 0; i < N; i++) std::copy_n(b, out, y + long(i) * ldy);
  const T beta = b ? T(1) : T(0);
  if (in_out)
    gemm<T>(false, false, N, out, in, T(1), x, in, W, out, beta, y, ldy);
  else
    gemm<T>(false, true, N, out, in, T(1), x, in, W, in, beta, y, ldy);
}

// dx [N, in] += dy·W (dx may be null), dW += dyᵀ·x (or xᵀ·dy), db += Σ_rows dy (dW, db may be null)
template <class T>
void lin_backward(T* dx, T* dW, T* db, const T* dy, int ldy, const T* x, const T* W, int N, int in, int out,
                  bool in_out) {
  if (dx) {
    if (in_out)
      gemm<T>(false, true, N, in, out, T(1), dy, ldy, W, out, T(1), dx, in);
    else
      gemm<T>(false, false, N, in, out, T(1), dy, ldy, W, in, T(1), dx, in);
  }
  if (!dW) {
  } else if (in_out) {
    gemm<T>(true, false, in, out, N, T(1), x, in, dy, ldy, T(1), dW, out);
  } else {
    gemm<T>(true, false, out, in, N, T(1), dy, ldy, x, in, T(1), dW, in);
  }
  if (db)
    for (int i = 0; i < N; i++)
      for (int j = 0; j < out; j++) db[j] += dy[long(i) * ldy + j];
}

// Columns of head h of q / kv head g of k and v in P [T, total], by the layout.
struct Cols {
  int qd, kvd, dh;
  bool neox;
  int q(int h) const { return neox ? h * 3 * dh : h * dh; }
  int k(int g) const { return neox ? g * 3 * dh + dh : qd + g * dh; }
  int v(int g) const { return neox ? g * 3 * dh + 2 * dh : qd + kvd + g * dh; }
};

template <class T>
void gather(T* dst, const T* P, int Tn, int ld, int heads, int dh, int (Cols::*col)(int) const,
            const Cols& c) {
  for (int h = 0; h < heads; h++)
    for (int t = 0; t < Tn; t++)
      std::copy_n(P + long(t) * ld + (c.*col)(h), dh, dst + (long(h) * Tn + t) * dh);
}
template <class T>
void scatter(T* dP, const T* src, int Tn, int ld, int heads, int dh, int (Cols::*col)(int) const,
             const Cols& c) {
  for (int h = 0; h < heads; h++)
    for (int t = 0; t < Tn; t++) {
      const T* s = src + (long(h) * Tn + t) * dh;
      T* d = dP + long(t) * ld + (c.*col)(h);
      for (int j = 0; j < dh; j++) d[j] += s[j];
    }
}

// P + off, or null when the tensor is absent (off < 0) or there is no buffer (P null: no parameter gradients).
template <class T>
const T* opt(const T* P, int64_t off) {
  return P && off >= 0 ? P + off : nullptr;
}
template <class T>
T* opt(T* P, int64_t off) {
  return P && off >= 0 ? P + off : nullptr;
}

}  // namespace

template <class T>
const std::vector<T>& lm_train_forward(const LmLayout& L, const T* P, const std::vector<int>& ids,
                                       LmActs<T>& a) {
  const Arch& A = L.arch;
  const int Tn = int(ids.size()), d = A.d, V = A.vocab_size, H = A.H, K = A.n_kv, dh = A.dh, qd = A.q_dim(),
            kvd = A.kv_dim(), ff = A.d_ff, total = qd + 2 * kvd;
  if (Tn < 1 || Tn > A.n_ctx)
    usage_error("train: a sequence of " + std::to_string(Tn) + " tokens; the model's context is " +
                std::to_string(A.n_ctx));
  for (int id : ids)
    if (id < 0 || id >= V)
      usage_error("train: token id " + std::to_string(id) + " is outside the vocabulary");
  a.T = Tn;
  a.ids = ids;
  a.layers.resize(size_t(A.n_layer));
  const size_t Td = size_t(Tn) * d;
  const bool io = L.in_out;
  const Cols cols{qd, kvd, dh, A.qkv_layout == QkvLayout::NeoxPerHead};
  const lm_ops::RopeTable rope = A.rotary() ? lm_ops::rope_table(A, Tn) : lm_ops::RopeTable{};
  std::vector<T> x(Td);
  // x = embed[ids] (+ wpe[t]) (· √d)
  {
    const T es = A.embed_scale ? T(float(std::sqrt(double(d)))) : T(1);
    for (int t = 0; t < Tn; t++) {
      T* xt = x.data() + size_t(t) * d;
      std::copy_n(P + L.wte + int64_t(ids[size_t(t)]) * d, d, xt);
      if (L.wpe >= 0)
        for (int j = 0; j < d; j++) xt[j] += P[L.wpe + int64_t(t) * d + j];
      if (es != T(1))
        for (int j = 0; j < d; j++) xt[j] *= es;
    }
  }
  for (int l = 0; l < A.n_layer; l++) {
    const LmLayout::Block& w = L.blocks[size_t(l)];
    auto& c = a.layers[size_t(l)];
    c.x_in.assign(x.begin(), x.end());
    grow(c.u1, Td), grow(c.mean1, size_t(Tn)), grow(c.rstd1, size_t(Tn));
    lm_ops::norm_forward(c.u1.data(), c.mean1.data(), c.rstd1.data(), x.data(), P + w.ln1_w, opt(P, w.ln1_b),
                         A.norm, Tn, d, A.norm_eps);
    // P = the model's own Q/K/V maps of u
    grow(c.P, size_t(Tn) * total);
    if (A.qkv_layout == QkvLayout::Separate) {
      lin_forward(c.P.data(), total, c.u1.data(), Tn, d, qd, P + w.wq, opt(P, w.bq), io);
      lin_forward(c.P.data() + qd, total, c.u1.data(), Tn, d, kvd, P + w.wk, opt(P, w.bk), io);
      lin_forward(c.P.data() + qd + kvd, total, c.u1.data(), Tn, d, kvd, P + w.wv, opt(P, w.bv), io);
    } else {
      lin_forward(c.P.data(), total, c.u1.data(), Tn, d, total, P + w.wqkv, opt(P, w.bqkv), io);
    }
    grow(c.q, size_t(H) * Tn * dh), grow(c.k, size_t(K) * Tn * dh), grow(c.v, size_t(K) * Tn * dh);
    gather(c.q.data(), c.P.data(), Tn, total, H, dh, &Cols::q, cols);
    gather(c.k.data(), c.P.data(), Tn, total, K, dh, &Cols::k, cols);
    gather(c.v.data(), c.P.data(), Tn, total, K, dh, &Cols::v, cols);
    if (A.rotary()) {
      lm_ops::rope_forward(c.q.data(), H, rope);
      lm_ops::rope_forward(c.k.data(), K, rope);
    }
    grow(c.A, size_t(H) * Tn * Tn);
    if (A.attn_softcap > 0) grow(c.Sc, size_t(H) * Tn * Tn);
    std::vector<T> z(size_t(H) * Tn * dh);
    lm_ops::attention_forward(
        z.data(), c.A.data(), A.attn_softcap > 0 ? c.Sc.data() : static_cast<T*>(nullptr), c.q.data(),
        c.k.data(), c.v.data(), H, K, Tn, dh, A.attn_scale, A.attn_softcap, A.window_of(l));
    // z [H, T, dh] -> zm [T, H·dh]
    grow(c.zm, size_t(Tn) * qd);
    for (int h = 0; h < H; h++)
      for (int t = 0; t < Tn; t++)
        std::copy_n(z.data() + (size_t(h) * Tn + t) * dh, dh, c.zm.data() + size_t(t) * qd + h * dh);
    std::vector<T> att(Td);
    grow(c.ao, Td);
    lin_forward(c.ao.data(), d, c.zm.data(), Tn, qd, d, P + w.wo, opt(P, w.bo), io);
    if (A.post_norms) {
      grow(c.rstd_pa, size_t(Tn));
      lm_ops::norm_forward(att.data(), static_cast<T*>(nullptr), c.rstd_pa.data(), c.ao.data(),
                           P + w.post_attn_w, static_cast<const T*>(nullptr), A.norm, Tn, d, A.norm_eps);
    } else {
      std::copy_n(c.ao.data(), Td, att.data());
    }
    if (A.attn_only()) {
      for (size_t i = 0; i < Td; i++) x[i] += att[i];
      continue;
    }
    // the MLP reads norm2 of resid_mid (sequential) or of the block's input (parallel)
    if (!A.parallel_residual)
      for (size_t i = 0; i < Td; i++) x[i] += att[i];
    c.x_mid.assign(x.begin(), x.end());  // parallel: still the block's input
    grow(c.u2, Td), grow(c.mean2, size_t(Tn)), grow(c.rstd2, size_t(Tn));
    lm_ops::norm_forward(c.u2.data(), c.mean2.data(), c.rstd2.data(), c.x_mid.data(), P + w.ln2_w,
                         opt(P, w.ln2_b), A.norm, Tn, d, A.norm_eps);
    const size_t n = size_t(Tn) * ff;
    const bool gated = A.gated_mlp();
    grow(c.g, n), grow(c.h, n);
    if (gated) {
      grow(c.up, n);
      if (A.gate_up_fused) {
        std::vector<T> gu(2 * n);
        lin_forward(gu.data(), 2 * ff, c.u2.data(), Tn, d, 2 * ff, P + w.w_gate_up,
                    static_cast<const T*>(nullptr), io);
        for (int t = 0; t < Tn; t++) {
          std::copy_n(gu.data() + size_t(t) * 2 * ff, ff, c.g.data() + size_t(t) * ff);
          std::copy_n(gu.data() + size_t(t) * 2 * ff + ff, ff, c.up.data() + size_t(t) * ff);
        }
      } else {
        lin_forward(c.g.data(), ff, c.u2.data(), Tn, d, ff, P + w.w_gate, opt(P, w.b_gate), io);
        lin_forward(c.up.data(), ff, c.u2.data(), Tn, d, ff, P + w.w_up, opt(P, w.b_up), io);
      }
      lm_ops::mlp_act_forward(c.h.data(), c.g.data(), c.up.data(), A.mlp, int64_t(n));
    } else {
      lin_forward(c.g.data(), ff, c.u2.data(), Tn, d, ff, P + w.w_up, opt(P, w.b_up), io);
      lm_ops::mlp_act_forward(c.h.data(), c.g.data(), static_cast<const T*>(nullptr), A.mlp, int64_t(n));
    }
    grow(c.mo, Td);
    lin_forward(c.mo.data(), d, c.h.data(), Tn, ff, d, P + w.w_down, opt(P, w.b_down), io);
    std::vector<T> m(Td);
    if (A.post_norms) {
      grow(c.rstd_pm, size_t(Tn));
      lm_ops::norm_forward(m.data(), static_cast<T*>(nullptr), c.rstd_pm.data(), c.mo.data(),
                           P + w.post_mlp_w, static_cast<const T*>(nullptr), A.norm, Tn, d, A.norm_eps);
    } else {
      std::copy_n(c.mo.data(), Td, m.data());
    }
    if (A.parallel_residual)
      for (size_t i = 0; i < Td; i++) m[i] += att[i];  // HF: mlp_out + attn_out + x
    for (size_t i = 0; i < Td; i++) x[i] += m[i];
  }
  // logits = norm_f(x) · Wᵀ (soft-capped)
  a.xf = x;
  grow(a.uf, Td), grow(a.meanf, size_t(Tn)), grow(a.rstdf, size_t(Tn));
  lm_ops::norm_forward(a.uf.data(), a.meanf.data(), a.rstdf.data(), x.data(), P + L.lnf_w, opt(P, L.lnf_b),
                       A.norm, Tn, d, A.norm_eps);
  a.raw.resize(size_t(Tn) * V);
  const int64_t W = L.lm_head >= 0 ? L.lm_head : L.wte;
  lin_forward(a.raw.data(), V, a.uf.data(), Tn, d, V, P + W, static_cast<const T*>(nullptr), false);
  a.logits = a.raw;
  if (A.final_softcap > 0) {
    const T cap = T(A.final_softcap);
    for (auto& v : a.logits) v = cap * std::tanh(v / cap);
  }
  return a.logits;
}

template <class T>
double lm_cross_entropy(const std::vector<T>& logits, const std::vector<int>& targets, int V) {
  double loss = 0;
  int n = 0;
  for (size_t t = 0; t < targets.size(); t++) {
    if (targets[t] < 0) continue;
    const T* z = logits.data() + t * size_t(V);
    double mx = double(z[0]);
    for (int j = 1; j < V; j++) mx = std::max(mx, double(z[j]));
    double sum = 0;
    for (int j = 0; j < V; j++) sum += std::exp(double(z[j]) - mx);
    loss += std::log(sum) + mx - double(z[targets[t]]);
    n++;
  }
  return n ? loss / n : 0.0;
}

namespace {

// The hook point `name`'s gradient to the sink, if it wants it.
template <class T>
void emit(const ActGradSink<T>* sink, const std::string& name, const T* data, std::vector<int64_t> shape,
          bool heads_major = false) {
  if (sink && (!sink->wants || sink->wants(name))) sink->fn(name, data, shape, heads_major);
}

// What one block's backward reads and writes besides its layer's activations.
template <class T>
struct BlockGrad {
  const LmLayout& L;
  const T* P;
  T* G;  // null: no parameter gradients
  const ActGradSink<T>* sink;
  const lm_ops::RopeTable& rope;
  int Tn;
};

// The MLP half of block l, bottom-up: dx holds ∂/∂(block output) and gains the MLP branch's part of
// ∂/∂(its input): x_mid (sequential) or the block's input (parallel).
template <class T>
void mlp_backward(const BlockGrad<T>& b, int l, typename LmActs<T>::Layer& c, std::vector<T>& dx) {
  const Arch& A = b.L.arch;
  const LmLayout::Block& w = b.L.blocks[size_t(l)];
  const T *P = b.P;
  T* G = b.G;
  const int Tn = b.Tn, d = A.d, ff = A.d_ff;
  const size_t Td = size_t(Tn) * d;
  const bool io = b.L.in_out;
  const std::string pre = "blocks." + std::to_string(l) + ".";
  // x_out = x_mid + m (sequential) or x_in + att + m (parallel); dm = dx
  emit(b.sink, pre + "hook_mlp_out", dx.data(), {Tn, d});
  std::vector<T> dmo(Td, T(0));
  if (A.post_norms) {
    lm_ops::norm_backward(dmo.data(), opt(G, w.post_mlp_w), static_cast<T*>(nullptr), dx.data(), c.mo.data(),
                          P + w.post_mlp_w, static_cast<const T*>(nullptr), c.rstd_pm.data(), A.norm, Tn, d);
  } else {
    std::copy(dx.begin(), dx.end(), dmo.begin());
  }
  const size_t nn = size_t(Tn) * ff;
  std::vector<T> dhh(nn, T(0)), dg(nn, T(0)), dup;
  lin_backward(dhh.data(), opt(G, w.w_down), opt(G, w.b_down), dmo.data(), d, c.h.data(), P + w.w_down, Tn, ff,
               d, io);
  emit(b.sink, pre + "mlp.hook_post", dhh.data(), {Tn, ff});
  std::vector<T> du2(Td, T(0));
  const bool gated = A.gated_mlp();
  if (gated) {
    dup.assign(nn, T(0));
    lm_ops::mlp_act_backward(dg.data(), dup.data(), dhh.data(), c.g.data(), c.up.data(), A.mlp, int64_t(nn));
    emit(b.sink, pre + "mlp.hook_pre", dg.data(), {Tn, ff});
    emit(b.sink, pre + "mlp.hook_pre_linear", dup.data(), {Tn, ff});
    if (A.gate_up_fused) {
      std::vector<T> dgu(2 * nn);
      for (int t = 0; t < Tn; t++) {
        std::copy_n(dg.data() + size_t(t) * ff, ff, dgu.data() + size_t(t) * 2 * ff);
        std::copy_n(dup.data() + size_t(t) * ff, ff, dgu.data() + size_t(t) * 2 * ff + ff);
      }
      lin_backward(du2.data(), opt(G, w.w_gate_up), static_cast<T*>(nullptr), dgu.data(), 2 * ff, c.u2.data(),
                   P + w.w_gate_up, Tn, d, 2 * ff, io);
    } else {
      lin_backward(du2.data(), opt(G, w.w_gate), opt(G, w.b_gate), dg.data(), ff, c.u2.data(), P + w.w_gate, Tn,
                   d, ff, io);
      lin_backward(du2.data(), opt(G, w.w_up), opt(G, w.b_up), dup.data(), ff, c.u2.data(), P + w.w_up, Tn, d,
                   ff, io);
    }
  } else {
    lm_ops::mlp_act_backward(dg.data(), static_cast<T*>(nullptr), dhh.data(), c.g.data(),
                             static_cast<const T*>(nullptr), A.mlp, int64_t(nn));
    emit(b.sink, pre + "mlp.hook_pre", dg.data(), {Tn, ff});
    lin_backward(du2.data(), opt(G, w.w_up), opt(G, w.b_up), dg.data(), ff, c.u2.data(), P + w.w_up, Tn, d, ff,
                 io);
  }
  emit(b.sink, pre + "ln2.hook_normalized", du2.data(), {Tn, d});
  // u2 = norm2(x_mid): sequential x_mid = x_in + att, so dx_mid flows to both; parallel x_mid = x_in
  std::vector<T> tmp(Td, T(0));
  lm_ops::norm_backward(tmp.data(), opt(G, w.ln2_w), opt(G, w.ln2_b), du2.data(), c.x_mid.data(), P + w.ln2_w,
                        c.mean2.data(), c.rstd2.data(), A.norm, Tn, d);
  for (size_t i = 0; i < Td; i++) dx[i] += tmp[i];  // ∂L/∂x_mid (sequential) or part of ∂L/∂x_in
  if (!A.parallel_residual) emit(b.sink, pre + "hook_resid_mid", dx.data(), {Tn, d});
}

// The attention half of block l, bottom-up from datt = ∂/∂(attention output, after any post-norm); dx
// gains ∂/∂(the block's input) through norm1.
template <class T>
void attn_backward(const BlockGrad<T>& b, int l, typename LmActs<T>::Layer& c, const std::vector<T>& datt,
                   std::vector<T>& dx) {
  const Arch& A = b.L.arch;
  const LmLayout::Block& w = b.L.blocks[size_t(l)];
  const T* P = b.P;
  T* G = b.G;
  const int Tn = b.Tn, d = A.d, H = A.H, K = A.n_kv, dh = A.dh, qd = A.q_dim(), kvd = A.kv_dim(),
            total = qd + 2 * kvd;
  const size_t Td = size_t(Tn) * d;
  const bool io = b.L.in_out;
  const Cols cols{qd, kvd, dh, A.qkv_layout == QkvLayout::NeoxPerHead};
  const std::string pre = "blocks." + std::to_string(l) + ".", at = pre + "attn.";
  emit(b.sink, pre + "hook_attn_out", datt.data(), {Tn, d});
  // att = post_norm(ao); ao = zm · W_O (+ b_O)
  std::vector<T> dao(Td, T(0));
  if (A.post_norms) {
    lm_ops::norm_backward(dao.data(), opt(G, w.post_attn_w), static_cast<T*>(nullptr), datt.data(), c.ao.data(),
                          P + w.post_attn_w, static_cast<const T*>(nullptr), c.rstd_pa.data(), A.norm, Tn, d);
  } else {
    std::copy(datt.begin(), datt.end(), dao.begin());
  }
  std::vector<T> dzm(size_t(Tn) * qd, T(0));
  lin_backward(dzm.data(), opt(G, w.wo), opt(G, w.bo), dao.data(), d, c.zm.data(), P + w.wo, Tn, qd, d, io);
  emit(b.sink, at + "hook_z", dzm.data(), {Tn, H, dh});
  std::vector<T> dz(size_t(H) * Tn * dh), dq(size_t(H) * Tn * dh, T(0)), dk(size_t(K) * Tn * dh, T(0)),
      dv(size_t(K) * Tn * dh, T(0));
  for (int h = 0; h < H; h++)
    for (int t = 0; t < Tn; t++)
      std::copy_n(dzm.data() + size_t(t) * qd + h * dh, dh, dz.data() + (size_t(h) * Tn + t) * dh);
  const bool want_A = b.sink && (!b.sink->wants || b.sink->wants(at + "hook_pattern") ||
                                 b.sink->wants(at + "hook_attn_scores"));
  std::vector<T> dA(want_A ? size_t(H) * Tn * Tn : 0), dS(dA.size());
  lm_ops::attention_backward(dq.data(), dk.data(), dv.data(), dz.data(), c.A.data(),
                             A.attn_softcap > 0 ? c.Sc.data() : static_cast<const T*>(nullptr), c.q.data(),
                             c.k.data(), c.v.data(), H, K, Tn, dh, A.attn_scale, A.attn_softcap,
                             want_A ? dA.data() : nullptr, want_A ? dS.data() : nullptr);
  if (want_A) {
    emit(b.sink, at + "hook_attn_scores", dS.data(), {H, Tn, Tn});
    emit(b.sink, at + "hook_pattern", dA.data(), {H, Tn, Tn});
  }
  if (A.rotary()) {
    emit(b.sink, at + "hook_rot_q", dq.data(), {Tn, H, dh}, true);
    emit(b.sink, at + "hook_rot_k", dk.data(), {Tn, K, dh}, true);
    lm_ops::rope_backward(dq.data(), H, b.rope);
    lm_ops::rope_backward(dk.data(), K, b.rope);
  }
  emit(b.sink, at + "hook_q", dq.data(), {Tn, H, dh}, true);
  emit(b.sink, at + "hook_k", dk.data(), {Tn, K, dh}, true);
  emit(b.sink, at + "hook_v", dv.data(), {Tn, K, dh}, true);
  std::vector<T> dP(size_t(Tn) * total, T(0));
  scatter(dP.data(), dq.data(), Tn, total, H, dh, &Cols::q, cols);
  scatter(dP.data(), dk.data(), Tn, total, K, dh, &Cols::k, cols);
  scatter(dP.data(), dv.data(), Tn, total, K, dh, &Cols::v, cols);
  std::vector<T> du1(Td, T(0));
  if (A.qkv_layout == QkvLayout::Separate) {
    lin_backward(du1.data(), opt(G, w.wq), opt(G, w.bq), dP.data(), total, c.u1.data(), P + w.wq, Tn, d, qd, io);
    lin_backward(du1.data(), opt(G, w.wk), opt(G, w.bk), dP.data() + qd, total, c.u1.data(), P + w.wk, Tn, d, kvd,
                 io);
    lin_backward(du1.data(), opt(G, w.wv), opt(G, w.bv), dP.data() + qd + kvd, total, c.u1.data(), P + w.wv, Tn, d,
                 kvd, io);
  } else {
    lin_backward(du1.data(), opt(G, w.wqkv), opt(G, w.bqkv), dP.data(), total, c.u1.data(), P + w.wqkv, Tn, d,
                 total, io);
  }
  emit(b.sink, pre + "ln1.hook_normalized", du1.data(), {Tn, d});
  // u1 = norm1(x_in); x_in also flows straight through the residual. Sequential: dx (= ∂L/∂x_mid) is
  // already ∂L/∂x_in's residual part; parallel: dx holds ∂L/∂out + the MLP branch's part.
  lm_ops::norm_backward(dx.data(), opt(G, w.ln1_w), opt(G, w.ln1_b), du1.data(), c.x_in.data(), P + w.ln1_w,
                        c.mean1.data(), c.rstd1.data(), A.norm, Tn, d);
  emit(b.sink, pre + "hook_resid_pre", dx.data(), {Tn, d});
}

}  // namespace

template <class T>
void lm_backward(const LmLayout& L, const T* P, std::vector<T> dl, LmActs<T>& a, T* G, const ActGradSink<T>* sink) {
  const Arch& A = L.arch;
  const int Tn = a.T, d = A.d, V = A.vocab_size;
  if (dl.size() != size_t(Tn) * V)
    usage_error("backward: ∂/∂logits has " + std::to_string(dl.size()) + " values for " + std::to_string(Tn) +
                " positions × " + std::to_string(V) + " tokens");
  const size_t Td = size_t(Tn) * d;
  const lm_ops::RopeTable rope = A.rotary() ? lm_ops::rope_table(A, Tn) : lm_ops::RopeTable{};
  emit(sink, "logits", dl.data(), {Tn, V});
  // logits = cap·tanh(raw/cap): draw = dlogits·(1 − (logits/cap)²)
  if (A.final_softcap > 0) {
    const T cap = T(A.final_softcap);
    for (size_t i = 0; i < dl.size(); i++) {
      const T t = a.logits[i] / cap;
      dl[i] *= T(1) - t * t;
    }
  }
  // raw = uf · Wᵀ
  const int64_t W = L.lm_head >= 0 ? L.lm_head : L.wte;
  std::vector<T> duf(Td, T(0)), dx(Td, T(0));
  lin_backward(duf.data(), opt(G, W), static_cast<T*>(nullptr), dl.data(), V, a.uf.data(), P + W, Tn, d, V, false);
  emit(sink, "ln_final.hook_normalized", duf.data(), {Tn, d});
  lm_ops::norm_backward(dx.data(), opt(G, L.lnf_w), opt(G, L.lnf_b), duf.data(), a.xf.data(), P + L.lnf_w,
                        a.meanf.data(), a.rstdf.data(), A.norm, Tn, d);
  const BlockGrad<T> b{L, P, G, sink, rope, Tn};
  std::vector<T> datt(Td);
  for (int l = A.n_layer - 1; l >= 0; l--) {
    auto& c = a.layers[size_t(l)];
    // dx is ∂L/∂(block output). The residual passes it through; datt collects ∂L/∂att.
    emit(sink, "blocks." + std::to_string(l) + ".hook_resid_post", dx.data(), {Tn, d});
    std::copy(dx.begin(), dx.end(), datt.begin());  // x_out = … + att (both residual kinds)
    if (!A.attn_only()) {
      mlp_backward(b, l, c, dx);
      if (!A.parallel_residual) std::copy(dx.begin(), dx.end(), datt.begin());
    }
    attn_backward(b, l, c, datt, dx);
  }
  if (!G) return;
  // x = (wte[ids] + wpe[t]) · es
  const T es = A.embed_scale ? T(float(std::sqrt(double(d)))) : T(1);
  for (int t = 0; t < Tn; t++)
    for (int j = 0; j < d; j++) {
      const T g = dx[size_t(t) * d + j] * es;
      G[L.wte + int64_t(a.ids[size_t(t)]) * d + j] += g;
      if (L.wpe >= 0) G[L.wpe + int64_t(t) * d + j] += g;
    }
}

template <class T>
double lm_train_backward(const LmLayout& L, const T* P, const std::vector<int>& targets, LmActs<T>& a, T* G) {
  const int Tn = a.T, V = L.arch.vocab_size;
  if (int(targets.size()) != Tn)
    usage_error("backward: " + std::to_string(targets.size()) + " targets for " + std::to_string(Tn) +
                " positions");
  int n = 0;
  for (int t : targets) {
    if (t >= V) usage_error("backward: target id " + std::to_string(t) + " is outside the vocabulary");
    n += t >= 0;
  }
  const double loss = lm_cross_entropy(a.logits, targets, V);
  if (n == 0) return loss;
  // loss = mean_t −log softmax(logits[t])[target]: dlogits = (softmax − onehot) / n
  std::vector<T> dl(size_t(Tn) * V, T(0));
  softmax_forward(dl.data(), a.logits.data(), Tn, V);
  for (int t = 0; t < Tn; t++) {
    T* g = dl.data() + size_t(t) * V;
    if (targets[size_t(t)] < 0) {
      std::fill(g, g + V, T(0));
      continue;
    }
    g[targets[size_t(t)]] -= T(1);
    for (int j = 0; j < V; j++) g[j] /= T(n);
  }
  lm_backward(L, P, std::move(dl), a, G, static_cast<const ActGradSink<T>*>(nullptr));
  return loss;
}

template const std::vector<float>& lm_train_forward<float>(const LmLayout&, const float*,
                                                           const std::vector<int>&, LmActs<float>&);
template const std::vector<double>& lm_train_forward<double>(const LmLayout&, const double*,
                                                             const std::vector<int>&, LmActs<double>&);
template double lm_cross_entropy<float>(const std::vector<float>&, const std::vector<int>&, int);
template double lm_cross_entropy<double>(const std::vector<double>&, const std::vector<int>&, int);
template double lm_train_backward<float>(const LmLayout&, const float*, const std::vector<int>&,
                                         LmActs<float>&, float*);
template double lm_train_backward<double>(const LmLayout&, const double*, const std::vector<int>&,
                                          LmActs<double>&, double*);
template void lm_backward<float>(const LmLayout&, const float*, std::vector<float>, LmActs<float>&, float*,
                                 const ActGradSink<float>*);
template void lm_backward<double>(const LmLayout&, const double*, std::vector<double>, LmActs<double>&, double*,
                                  const ActGradSink<double>*);

}  // namespace qkv

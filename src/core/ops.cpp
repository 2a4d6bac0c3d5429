// The fast ops: GEMMs through BLIS (gemm.hpp), row loops written for the compiler to vectorise.
#include "qkv/ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops_instantiate.hpp"
#include "qkv/gemm.hpp"

namespace qkv {

template <class T>
void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int d, double eps) {
#pragma omp parallel for schedule(static) if (int64_t(N) * d > 65536)
  for (int i = 0; i < N; i++) {
    const T* xi = x + int64_t(i) * d;
    T* yi = y + int64_t(i) * d;
    T m = 0;
    for (int j = 0; j < d; j++) m += xi[j];
    m /= T(d);
    T var = 0;
    for (int j = 0; j < d; j++) var += (xi[j] - m) * (xi[j] - m);
    var /= T(d);
    T r = T(1) / std::sqrt(var + T(eps));
    for (int j = 0; j < d; j++) yi[j] = (xi[j] - m) * r * w[j] + b[j];
    mean[i] = m;
    rstd[i] = r;
  }
}

// Differentiates y = (x - mean) * rstd * w + b. With g = dy ⊙ w and x̂ = (x - mean) * rstd:
// dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂)); dw += dy ⊙ x̂; db += dy.
template <class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, int N,
                        int d) {
  for (int i = 0; i < N; i++) {
    const T* dyi = dy + int64_t(i) * d;
    const T* xi = x + int64_t(i) * d;
    T* dxi = dx + int64_t(i) * d;
    T m = mean[i], r = rstd[i];
    T g_mean = 0, gx_mean = 0;
    for (int j = 0; j < d; j++) {
      T xhat = (xi[j] - m) * r;
      T g = dyi[j] * w[j];
      g_mean += g;
      gx_mean += g * xhat;
      dw[j] += dyi[j] * xhat;
      db[j] += dyi[j];
    }
    g_mean /= T(d);
    gx_mean /= T(d);
    for (int j = 0; j < d; j++) {
      T xhat = (xi[j] - m) * r;
      dxi[j] += r * (dyi[j] * w[j] - g_mean - xhat * gx_mean);
    }
  }
}

template <class T>
void affine_forward(T* y, const T* x, const T* W, const T* b, int N, int in, int out) {
  if (b) {
    for (int i = 0; i < N; i++) std::copy(b, b + out, y + int64_t(i) * out);
  }
  gemm<T>(false, false, N, out, in, T(1), x, in, W, out, b ? T(1) : T(0), y, out);
}

// Differentiates y = x·W + b: dx += dy·Wᵀ, dW += xᵀ·dy, db += Σ_rows dy.
template <class T>
void affine_backward(T* dx, T* dW, T* db, const T* dy, const T* x, const T* W, int N, int in, int out) {
  if (dx) gemm<T>(false, true, N, in, out, T(1), dy, out, W, out, T(1), dx, in);
  gemm<T>(true, false, in, out, N, T(1), x, in, dy, out, T(1), dW, out);
  if (db)
    for (int i = 0; i < N; i++)
      for (int j = 0; j < out; j++) db[j] += dy[int64_t(i) * out + j];
}

template <class T>
void split_qkv_forward(T* q, T* k, T* v, const T* qkv, int T_, int d, int H) {
  const int dh = d / H;
  T* dst[3] = {q, k, v};
  for (int t = 0; t < T_; t++)
    for (int part = 0; part < 3; part++)
      for (int h = 0; h < H; h++) {
        const T* src = qkv + int64_t(t) * 3 * d + int64_t(part) * d + int64_t(h) * dh;
        std::copy(src, src + dh, dst[part] + (int64_t(h) * T_ + t) * dh);
      }
}

template <class T>
void split_qkv_backward(T* dqkv, const T* dq, const T* dk, const T* dv, int T_, int d, int H) {
  const int dh = d / H;
  const T* src[3] = {dq, dk, dv};
  for (int t = 0; t < T_; t++)
    for (int part = 0; part < 3; part++)
      for (int h = 0; h < H; h++) {
        const T* s = src[part] + (int64_t(h) * T_ + t) * dh;
        std::copy(s, s + dh, dqkv + int64_t(t) * 3 * d + int64_t(part) * d + int64_t(h) * dh);
      }
}

template <class T>
void merge_heads_forward(T* y, const T* z, int T_, int d, int H) {
  const int dh = d / H;
  for (int h = 0; h < H; h++)
    for (int t = 0; t < T_; t++) {
      const T* s = z + (int64_t(h) * T_ + t) * dh;
      std::copy(s, s + dh, y + int64_t(t) * d + int64_t(h) * dh);
    }
}

template <class T>
void merge_heads_backward(T* dz, const T* dy, int T_, int d, int H) {
  const int dh = d / H;
  for (int h = 0; h < H; h++)
    for (int t = 0; t < T_; t++) {
      const T* s = dy + int64_t(t) * d + int64_t(h) * dh;
      std::copy(s, s + dh, dz + (int64_t(h) * T_ + t) * dh);
    }
}

template <class T>
void scores_forward(T* S, const T* q, const T* k, int H, int T_, int dh, T scale) {
  for (int h = 0; h < H; h++) {
    const int64_t o = int64_t(h) * T_ * dh;
    gemm<T>(false, true, T_, T_, dh, scale, q + o, dh, k + o, dh, T(0), S + int64_t(h) * T_ * T_, T_);
  }
}

// Differentiates S = scale · q·kᵀ: dq += scale · dS·k, dk += scale · dSᵀ·q.
template <class T>
void scores_backward(T* dq, T* dk, const T* dS, const T* q, const T* k, int H, int T_, int dh, T scale) {
  for (int h = 0; h < H; h++) {
    const int64_t o = int64_t(h) * T_ * dh;
    const T* dSh = dS + int64_t(h) * T_ * T_;
    gemm<T>(false, false, T_, dh, T_, scale, dSh, T_, k + o, dh, T(1), dq + o, dh);
    gemm<T>(true, false, T_, dh, T_, scale, dSh, T_, q + o, dh, T(1), dk + o, dh);
  }
}

template <class T>
void causal_mask_forward(T* S, int H, int T_) {
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T_; i++) std::fill(S + (int64_t(h) * T_ + i) * T_ + i + 1, S + (int64_t(h) * T_ + i + 1) * T_, ninf);
}

template <class T>
void causal_mask_backward(T* dS, int H, int T_) {
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T_; i++) std::fill(dS + (int64_t(h) * T_ + i) * T_ + i + 1, dS + (int64_t(h) * T_ + i + 1) * T_, T(0));
}

template <class T>
void softmax_forward(T* A, const T* S, int64_t rows, int cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; r++) {
    const T* s = S + r * cols;
    T* a = A + r * cols;
    T mx = -std::numeric_limits<T>::infinity();
    for (int j = 0; j < cols; j++) mx = std::max(mx, s[j]);
    if (mx == -std::numeric_limits<T>::infinity()) {  // an all-masked row attends nowhere
      std::fill(a, a + cols, T(0));
      continue;
    }
    T sum = 0;
    for (int j = 0; j < cols; j++) {
      a[j] = std::exp(s[j] - mx);
      sum += a[j];
    }
    const T inv = T(1) / sum;
    for (int j = 0; j < cols; j++) a[j] *= inv;
  }
}

template <class T>
void softmax_backward(T* dS, const T* dA, const T* A, int64_t rows, int cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; r++) {
    const T* a = A + r * cols;
    const T* da = dA + r * cols;
    T* ds = dS + r * cols;
    T dot = 0;
    for (int j = 0; j < cols; j++) dot += da[j] * a[j];
    for (int j = 0; j < cols; j++) ds[j] = a[j] * (da[j] - dot);
  }
}

template <class T>
void mix_forward(T* z, const T* A, const T* v, int H, int T_, int dh) {
  for (int h = 0; h < H; h++) {
    const int64_t o = int64_t(h) * T_ * dh;
    gemm<T>(false, false, T_, dh, T_, T(1), A + int64_t(h) * T_ * T_, T_, v + o, dh, T(0), z + o, dh);
  }
}

// Differentiates z = A·v: dA = dz·vᵀ (overwritten), dv += Aᵀ·dz.
template <class T>
void mix_backward(T* dA, T* dv, const T* dz, const T* A, const T* v, int H, int T_, int dh) {
  for (int h = 0; h < H; h++) {
    const int64_t o = int64_t(h) * T_ * dh;
    const int64_t oa = int64_t(h) * T_ * T_;
    gemm<T>(false, true, T_, T_, dh, T(1), dz + o, dh, v + o, dh, T(0), dA + oa, T_);
    gemm<T>(true, false, T_, dh, T_, T(1), A + oa, T_, dz + o, dh, T(1), dv + o, dh);
  }
}

namespace {
template <class T>
constexpr T kGeluC = T(0.7978845608028654);  // √(2/π)
}

template <class T>
void gelu_forward(T* y, const T* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; i++) {
    const T xi = x[i];
    y[i] = T(0.5) * xi * (T(1) + std::tanh(kGeluC<T> * (xi + T(0.044715) * xi * xi * xi)));
  }
}

// Differentiates y = 0.5·x·(1 + tanh(c·(x + 0.044715·x³))).
template <class T>
void gelu_backward(T* dx, const T* dy, const T* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; i++) {
    const T xi = x[i];
    const T th = std::tanh(kGeluC<T> * (xi + T(0.044715) * xi * xi * xi));
    const T sech2 = T(1) - th * th;
    const T grad = T(0.5) * (T(1) + th) + T(0.5) * xi * sech2 * kGeluC<T> * (T(1) + T(3 * 0.044715) * xi * xi);
    dx[i] += grad * dy[i];
  }
}

QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)

}  // namespace qkv

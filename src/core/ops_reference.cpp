// The slow twins of ops.cpp: loops that read like the formulas, accumulating in double. Backward ops
// multiply by the explicit Jacobian where the fast op uses a shortcut, so the two are independent.
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops_instantiate.hpp"
#include "qkv/ops.hpp"

namespace qkv::ref {

template <class T>
void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int d, double eps) {
  for (int i = 0; i < N; i++) {
    double m = 0, var = 0;
    for (int j = 0; j < d; j++) m += x[i * d + j];
    m /= d;
    for (int j = 0; j < d; j++) var += (x[i * d + j] - m) * (x[i * d + j] - m);
    var /= d;
    const double r = 1.0 / std::sqrt(var + eps);
    for (int j = 0; j < d; j++) y[i * d + j] = static_cast<T>((x[i * d + j] - m) * r * w[j] + b[j]);
    mean[i] = static_cast<T>(m);
    rstd[i] = static_cast<T>(r);
  }
}

// x̂_i = (x_i − m)·r has Jacobian ∂x̂_i/∂x_j = r·(δ_ij − 1/d − x̂_i·x̂_j/d); dx_j = Σ_i dy_i·w_i·∂x̂_i/∂x_j.
template <class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, int N,
                        int d) {
  for (int n = 0; n < N; n++) {
    std::vector<double> xhat(d);
    for (int i = 0; i < d; i++) xhat[i] = (double(x[n * d + i]) - mean[n]) * rstd[n];
    for (int j = 0; j < d; j++) {
      double acc = 0;
      for (int i = 0; i < d; i++) {
        const double jac = rstd[n] * ((i == j ? 1.0 : 0.0) - 1.0 / d - xhat[i] * xhat[j] / d);
        acc += double(dy[n * d + i]) * w[i] * jac;
      }
      dx[n * d + j] += static_cast<T>(acc);
    }
    for (int i = 0; i < d; i++) {
      dw[i] += static_cast<T>(dy[n * d + i] * xhat[i]);
      db[i] += dy[n * d + i];
    }
  }
}

template <class T>
void affine_forward(T* y, const T* x, const T* W, const T* b, int N, int in, int out) {
  for (int i = 0; i < N; i++)
    for (int o = 0; o < out; o++) {
      double acc = b ? double(b[o]) : 0.0;
      for (int p = 0; p < in; p++) acc += double(x[i * in + p]) * W[p * out + o];
      y[i * out + o] = static_cast<T>(acc);
    }
}

template <class T>
void affine_backward(T* dx, T* dW, T* db, const T* dy, const T* x, const T* W, int N, int in, int out) {
  for (int i = 0; i < N; i++)
    for (int p = 0; p < in; p++)
      for (int o = 0; o < out; o++) {
        if (dx) dx[i * in + p] += dy[i * out + o] * W[p * out + o];
        dW[p * out + o] += x[i * in + p] * dy[i * out + o];
      }
  if (db)
    for (int i = 0; i < N; i++)
      for (int o = 0; o < out; o++) db[o] += dy[i * out + o];
}

// qkv[t, part·d + h·dh + e] <-> {q,k,v}[h, t, e]
template <class T>
void split_qkv_forward(T* q, T* k, T* v, const T* qkv, int T_, int d, int H) {
  const int dh = d / H;
  for (int h = 0; h < H; h++)
    for (int t = 0; t < T_; t++)
      for (int e = 0; e < dh; e++) {
        q[(h * T_ + t) * dh + e] = qkv[t * 3 * d + 0 * d + h * dh + e];
        k[(h * T_ + t) * dh + e] = qkv[t * 3 * d + 1 * d + h * dh + e];
        v[(h * T_ + t) * dh + e] = qkv[t * 3 * d + 2 * d + h * dh + e];
      }
}

template <class T>
void split_qkv_backward(T* dqkv, const T* dq, const T* dk, const T* dv, int T_, int d, int H) {
  const int dh = d / H;
  for (int h = 0; h < H; h++)
    for (int t = 0; t < T_; t++)
      for (int e = 0; e < dh; e++) {
        dqkv[t * 3 * d + 0 * d + h * dh + e] = dq[(h * T_ + t) * dh + e];
        dqkv[t * 3 * d + 1 * d + h * dh + e] = dk[(h * T_ + t) * dh + e];
        dqkv[t * 3 * d + 2 * d + h * dh + e] = dv[(h * T_ + t) * dh + e];
      }
}

template <class T>
void merge_heads_forward(T* y, const T* z, int T_, int d, int H) {
  const int dh = d / H;
  for (int t = 0; t < T_; t++)
    for (int h = 0; h < H; h++)
      for (int e = 0; e < dh; e++) y[t * d + h * dh + e] = z[(h * T_ + t) * dh + e];
}

template <class T>
void merge_heads_backward(T* dz, const T* dy, int T_, int d, int H) {
  const int dh = d / H;
  for (int t = 0; t < T_; t++)
    for (int h = 0; h < H; h++)
      for (int e = 0; e < dh; e++) dz[(h * T_ + t) * dh + e] = dy[t * d + h * dh + e];
}

template <class T>
void scores_forward(T* S, const T* q, const T* k, int H, int T_, int dh, T scale) {
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T_; i++)
      for (int j = 0; j < T_; j++) {
        double acc = 0;
        for (int e = 0; e < dh; e++) acc += double(q[(h * T_ + i) * dh + e]) * k[(h * T_ + j) * dh + e];
        S[(h * T_ + i) * T_ + j] = static_cast<T>(acc * scale);
      }
}

template <class T>
void scores_backward(T* dq, T* dk, const T* dS, const T* q, const T* k, int H, int T_, int dh, T scale) {
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T_; i++)
      for (int j = 0; j < T_; j++) {
        const double g = double(dS[(h * T_ + i) * T_ + j]) * scale;
        for (int e = 0; e < dh; e++) {
          dq[(h * T_ + i) * dh + e] += static_cast<T>(g * k[(h * T_ + j) * dh + e]);
          dk[(h * T_ + j) * dh + e] += static_cast<T>(g * q[(h * T_ + i) * dh + e]);
        }
      }
}

template <class T>
void causal_mask_forward(T* S, int H, int T_) {
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T_; i++)
      for (int j = 0; j < T_; j++)
        if (j > i) S[(h * T_ + i) * T_ + j] = -std::numeric_limits<T>::infinity();
}

template <class T>
void causal_mask_backward(T* dS, int H, int T_) {
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T_; i++)
      for (int j = 0; j < T_; j++)
        if (j > i) dS[(h * T_ + i) * T_ + j] = 0;
}

template <class T>
void softmax_forward(T* A, const T* S, int64_t rows, int cols) {
  for (int64_t r = 0; r < rows; r++) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < cols; j++) mx = std::max(mx, double(S[r * cols + j]));
    double sum = 0;
    for (int j = 0; j < cols; j++) sum += std::isinf(mx) ? 0.0 : std::exp(double(S[r * cols + j]) - mx);
    for (int j = 0; j < cols; j++)
      A[r * cols + j] = sum == 0.0 ? T(0) : static_cast<T>(std::exp(double(S[r * cols + j]) - mx) / sum);
  }
}

// ∂A_i/∂S_j = A_i·(δ_ij − A_j); dS_j = Σ_i dA_i·∂A_i/∂S_j, the whole Jacobian written out.
template <class T>
void softmax_backward(T* dS, const T* dA, const T* A, int64_t rows, int cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) {
      double acc = 0;
      for (int i = 0; i < cols; i++) {
        const double jac = double(A[r * cols + i]) * ((i == j ? 1.0 : 0.0) - double(A[r * cols + j]));
        acc += double(dA[r * cols + i]) * jac;
      }
      dS[r * cols + j] = static_cast<T>(acc);
    }
}

template <class T>
void mix_forward(T* z, const T* A, const T* v, int H, int T_, int dh) {
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T_; i++)
      for (int e = 0; e < dh; e++) {
        double acc = 0;
        for (int j = 0; j < T_; j++) acc += double(A[(h * T_ + i) * T_ + j]) * v[(h * T_ + j) * dh + e];
        z[(h * T_ + i) * dh + e] = static_cast<T>(acc);
      }
}

template <class T>
void mix_backward(T* dA, T* dv, const T* dz, const T* A, const T* v, int H, int T_, int dh) {
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T_; i++)
      for (int j = 0; j < T_; j++) {
        double acc = 0;
        for (int e = 0; e < dh; e++) {
          acc += double(dz[(h * T_ + i) * dh + e]) * v[(h * T_ + j) * dh + e];
          dv[(h * T_ + j) * dh + e] += A[(h * T_ + i) * T_ + j] * dz[(h * T_ + i) * dh + e];
        }
        dA[(h * T_ + i) * T_ + j] = static_cast<T>(acc);
      }
}

template <class T>
void gelu_forward(T* y, const T* x, int64_t n) {
  const double c = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; i++) {
    const double xi = x[i];
    y[i] = static_cast<T>(0.5 * xi * (1.0 + std::tanh(c * (xi + 0.044715 * std::pow(xi, 3)))));
  }
}

template <class T>
void gelu_backward(T* dx, const T* dy, const T* x, int64_t n) {
  const double c = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; i++) {
    const double xi = x[i];
    const double inner = c * (xi + 0.044715 * std::pow(xi, 3));
    const double dinner = c * (1.0 + 3.0 * 0.044715 * xi * xi);
    const double sech = 1.0 / std::cosh(inner);
    dx[i] += static_cast<T>(dy[i] * (0.5 * (1.0 + std::tanh(inner)) + 0.5 * xi * sech * sech * dinner));
  }
}

QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)

}  // namespace qkv::ref

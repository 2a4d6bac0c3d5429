// Row kernels of the fast inference forward (inference.hpp) and the family forward (lm_forward.cpp):
// LayerNorm, bias + GELU, RMSNorm (w or Gemma's 1 + w), rotary embedding (rotate_half or adjacent pairs,
// full or partial) and the gated activations (SwiGLU, GeGLU), vectorised for
// the attention kernels' path (flash.hpp: AVX-512, AVX2 + FMA, else the portable loops), so
// flash_force_path picks these too. Rows go to OpenMP threads when there are enough of them.
// Strict IEEE; the vector exp is flash.hpp's (< 2e-7 relative), the portable one std::exp.
#pragma once

namespace qkv {

// y [N, d] = (x - mean) / sqrt(var + eps) · w + b per row of x [N, d]; w, b [d].
// torch: F.layer_norm(x, (d,), w, b, eps)
void layernorm_rows(float* y, const float* x, const float* w, const float* b, int N, int d, float eps);

// h [N, n] = gelu(h + b) in place, b [n]; the tanh approximation written as x / (1 + e^{-2y}),
// y = √(2/π)(x + 0.044715 x³) (−2y capped at 88, where the result is 0 to float precision).
// torch: F.gelu(h + b, approximate="tanh")
void gelu_bias_rows(float* h, const float* b, int N, int n);

// y [N, d] = x · r · w (or x · r · (1 + w), Gemma), r = 1 / sqrt(mean(x²) + eps) per row; y may be x.
// torch: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w   (Gemma: * (1 + w))
void rmsnorm_rows(float* y, const float* x, const float* w, int N, int d, float eps, bool one_plus_w);

// x [H, T, dh] rotated in place, row t by the angles of position pos[t]: cs, sn [*, r/2] are the
// tables' cos and sin (row p: position p). Pairs (i, i + r/2) (rotate_half) or, `adjacent`, (2i, 2i + 1);
// dims >= r untouched. torch (half): x[..., :r] * cos + rotate_half(x[..., :r]) * sin
void rotary_rows(float* x, int H, int T, int dh, int r, bool adjacent, const float* cs, const float* sn,
                 const int* pos);

// h [N, n] ·= act(g) with g [N, n] at row stride ldg; act(g) = g / (1 + e^{-s}), s = g (silu: SwiGLU) or
// s = 2·√(2/π)(g + 0.044715 g³) (tanh GELU: GeGLU), −s capped at 88 (the result is 0 to float precision).
// torch: h * F.silu(g)   /   h * F.gelu(g, approximate="tanh")
enum class GateAct { Silu, GeluTanh };
void gated_rows(float* h, const float* g, int ldg, int N, int n, GateAct act);

namespace rowops_detail {
// The slow twins in double, for tests: one row each.
void layernorm_row_f64(double* y, const double* x, const double* w, const double* b, int d, double eps);
void gelu_bias_row_f64(double* h, const double* b, int n);
void rmsnorm_row_f64(double* y, const double* x, const double* w, int d, double eps, bool one_plus_w);
// one row p [dh] by the angle table row c, s [r/2]
void rotary_row_f64(double* p, const double* c, const double* s, int r, bool adjacent);
void gated_row_f64(double* h, const double* g, int n, GateAct act);
}  // namespace rowops_detail

}  // namespace qkv

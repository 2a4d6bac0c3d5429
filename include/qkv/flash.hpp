// Fused causal attention (FlashAttention-2 style), forward and backward, fp32.
//
// q, k, v, z, dq, dk, dv, dz: [H, T, dh] contiguous fp32; lse: [H, T].
//   S = scale · q kᵀ, causal-masked (key j visible to query i iff j <= i)
//   A = softmax(S) row-wise,  z = A v,  lse[h, i] = log Σ_{j<=i} exp(S[h, i, j])
// PyTorch: z = F.softmax((q @ k.transpose(-1, -2) * scale).masked_fill(~causal, -inf), -1) @ v
//
// The fast kernels tile over keys with an online softmax (running max and sum per query row), keep lse
// for the backward, never build the T×T matrix, and use extra memory O(T·dh) per head being worked on.
// They run on OpenMP threads and use AVX-512 when the CPU has it (chosen at run time), else a
// portable scalar path. Strict IEEE: the AVX-512 exp is a polynomial accurate to < 2e-7 relative
// (results below FLT_MIN are flushed to 0, a contribution < 1.2e-38 of a row's sum).
#pragma once

namespace qkv {

// q, k, v [H, T, dh] -> z [H, T, dh], lse [H, T]. Requires H, T, dh >= 1 (else throws qkv::Error).
void flash_attention_forward(const float* q, const float* k, const float* v, float* z, float* lse, int H,
                             int T, int dh, float scale);

// Given dz [H, T, dh] and the forward's z and lse, writes dq, dk, dv [H, T, dh] (overwritten).
//   D_i = Σ_d dz[i, d] z[i, d];  P = exp(S - lse);  dP = dz vᵀ;  dS = P ∘ (dP - D)
//   dq = scale · dS k;  dk = scale · dSᵀ q;  dv = Pᵀ dz
void flash_attention_backward(const float* q, const float* k, const float* v, const float* z,
                              const float* lse, const float* dz, float* dq, float* dk, float* dv, int H,
                              int T, int dh, float scale);

// Reference twins: materialise S and A per head in double. Slow, obviously correct. The reference
// backward recomputes A from q and k in double and does not read z or lse.
void flash_attention_forward_reference(const float* q, const float* k, const float* v, float* z, float* lse,
                                       int H, int T, int dh, float scale);
void flash_attention_backward_reference(const float* q, const float* k, const float* v, const float* z,
                                        const float* lse, const float* dz, float* dq, float* dk, float* dv,
                                        int H, int T, int dh, float scale);

// Testing hooks. flash_force_portable(true) makes the fast entry points use the portable path even on
// an AVX-512 machine; flash_uses_avx512() says which path the next call takes.
void flash_force_portable(bool on);
bool flash_uses_avx512();

namespace flash_detail {
// The reference in double, for finite-difference checks. dS [H, T, T] may be null.
void reference_forward_f64(const double* q, const double* k, const double* v, double* z, double* lse, int H,
                           int T, int dh, double scale);
void reference_backward_f64(const double* q, const double* k, const double* v, const double* dz, double* dq,
                            double* dk, double* dv, double* dS, int H, int T, int dh, double scale);
// The vectorised exp the AVX-512 kernels use, applied to x[0..n) -> y. Returns false (and leaves y
// untouched) when the AVX-512 path is unavailable.
bool vexp(const float* x, float* y, int n);
}  // namespace flash_detail

}  // namespace qkv

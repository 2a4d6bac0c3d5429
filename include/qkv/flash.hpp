// Fused causal attention (FlashAttention-2 style), forward and backward, fp32.
//
// q, k, v, z, dq, dk, dv, dz: [H, T, dh] contiguous fp32; lse: [H, T].
//   S = scale · q kᵀ, causal-masked (key j visible to query i iff j <= i)
//   A = softmax(S) row-wise,  z = A v,  lse[h, i] = log Σ_{j<=i} exp(S[h, i, j])
// PyTorch: z = F.softmax((q @ k.transpose(-1, -2) * scale).masked_fill(~causal, -inf), -1) @ v
//
// The fast kernels tile over keys with an online softmax (running max and sum per query row), keep lse
// for the backward, never build the T×T matrix, and use extra memory O(T·dh) per head being worked on.
// They run on OpenMP threads, on one of several paths chosen once at run time from the CPU (no -march
// flag needed): AVX-512 (x86-64 with AVX-512F/BW/DQ/VL), AVX2 + FMA (x86-64), NEON (aarch64), else a
// portable scalar path. Strict IEEE: the vector exp is a polynomial accurate to < 2e-7 relative
// (results below FLT_MIN are flushed to 0, a contribution < 1.2e-38 of a row's sum; the AVX2 and NEON
// exp take inputs above 88 as 88, where the kernels only pass x <= ~0).
//
// Grouped-query attention (Llama-family models): the _gqa entry points take k, v (and dk, dv) as
// [n_kv, T, dh] with H % n_kv == 0; query head h reads key/value head h / (H / n_kv). n_kv == H is
// ordinary multi-head attention (the entry points without _gqa).
#pragma once

namespace qkv {

// The kernel paths. Auto means "the best this CPU supports".
enum class FlashPath { Auto, Portable, Avx2, Avx512, Neon };

// q, k, v [H, T, dh] -> z [H, T, dh], lse [H, T]. Requires H, T, dh >= 1 (else throws qkv::Error).
void flash_attention_forward(const float* q, const float* k, const float* v, float* z, float* lse, int H,
                             int T, int dh, float scale);

// Given dz [H, T, dh] and the forward's z and lse, writes dq, dk, dv [H, T, dh] (overwritten).
//   D_i = Σ_d dz[i, d] z[i, d];  P = exp(S - lse);  dP = dz vᵀ;  dS = P ∘ (dP - D)
//   dq = scale · dS k;  dk = scale · dSᵀ q;  dv = Pᵀ dz
void flash_attention_backward(const float* q, const float* k, const float* v, const float* z,
                              const float* lse, const float* dz, float* dq, float* dk, float* dv, int H,
                              int T, int dh, float scale);

// Grouped-query forms: q, z [H, T, dh]; k, v [n_kv, T, dh]; lse [H, T]; dq [H, T, dh]; dk, dv
// [n_kv, T, dh] (summed over the H / n_kv query heads sharing each key/value head). Requires n_kv >= 1
// and H % n_kv == 0 (else throws qkv::Error). The forward reads k, v in place on every path; the
// backward with n_kv < H expands k, v per query head (4·H·T·dh floats of scratch) and reduces dk, dv.
void flash_attention_forward_gqa(const float* q, const float* k, const float* v, float* z, float* lse, int H,
                                 int n_kv, int T, int dh, float scale);
void flash_attention_backward_gqa(const float* q, const float* k, const float* v, const float* z,
                                  const float* lse, const float* dz, float* dq, float* dk, float* dv, int H,
                                  int n_kv, int T, int dh, float scale);

// The forward for the last Tq queries alone (a run that wants only its last rows' outputs): q, z
// [H, Tq, dh] are rows T − Tq .. T − 1, lse [H, Tq]; k, v [n_kv, T, dh] all T rows. Each row's z and lse
// are flash_attention_forward_gqa's for that row bit for bit, on every path (the keys go in the same
// tiles whichever rows are asked for). Requires 1 <= Tq <= T (else throws qkv::Error).
void flash_attention_forward_last(const float* q, const float* k, const float* v, float* z, float* lse, int H,
                                  int n_kv, int T, int Tq, int dh, float scale);

// Reference twins: materialise S and A per head in double. Slow, obviously correct. The reference
// backward recomputes A from q and k in double and does not read z or lse.
void flash_attention_forward_reference(const float* q, const float* k, const float* v, float* z, float* lse,
                                       int H, int T, int dh, float scale);
void flash_attention_backward_reference(const float* q, const float* k, const float* v, const float* z,
                                        const float* lse, const float* dz, float* dq, float* dk, float* dv,
                                        int H, int T, int dh, float scale);
void flash_attention_forward_reference_gqa(const float* q, const float* k, const float* v, float* z,
                                           float* lse, int H, int n_kv, int T, int dh, float scale);
void flash_attention_backward_reference_gqa(const float* q, const float* k, const float* v, const float* z,
                                            const float* lse, const float* dz, float* dq, float* dk, float* dv,
                                            int H, int n_kv, int T, int dh, float scale);

// Path selection (tests, benchmarks). flash_force_path(p) makes every later call take path p
// (Auto: back to the best one); throws qkv::Error (usage) when this CPU or build cannot run p.
// flash_path() is the path the next call takes (never Auto); flash_path_name() its name
// ("portable", "avx2", "avx512", "neon"); flash_path_from_name() the inverse (also "auto"; throws
// qkv::Error (usage) naming the choices on anything else).
bool flash_path_supported(FlashPath p);
void flash_force_path(FlashPath p);
FlashPath flash_path();
const char* flash_path_name(FlashPath p);
const char* flash_path_name();
FlashPath flash_path_from_name(const char* name);

// Older hooks, kept for their callers: flash_force_portable(on) is flash_force_path(on ? Portable :
// Auto); flash_uses_avx512() is flash_path() == Avx512.
void flash_force_portable(bool on);
bool flash_uses_avx512();

namespace flash_detail {
// The reference in double, for finite-difference checks. dS [H, T, T] may be null.
void reference_forward_f64(const double* q, const double* k, const double* v, double* z, double* lse, int H,
                           int T, int dh, double scale);
void reference_backward_f64(const double* q, const double* k, const double* v, const double* dz, double* dq,
                            double* dk, double* dv, double* dS, int H, int T, int dh, double scale);
// Grouped-query forms (k, v, dk, dv: [n_kv, T, dh]; dS [H, T, T] may be null).
void reference_forward_f64(const double* q, const double* k, const double* v, double* z, double* lse, int H,
                           int n_kv, int T, int dh, double scale);
void reference_backward_f64(const double* q, const double* k, const double* v, const double* dz, double* dq,
                            double* dk, double* dv, double* dS, int H, int n_kv, int T, int dh, double scale);
// The vectorised exp the current path's kernels use, applied to x[0..n) -> y. Returns false (and
// leaves y untouched) on the portable path.
bool vexp(const float* x, float* y, int n);
}  // namespace flash_detail

}  // namespace qkv

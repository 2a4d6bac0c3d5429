// The product of many rows by a weight (a prefill's projections): C [M, N] (+)= A [M, K] · B [K, N], with B
// handed over column panel by column panel by a packer, so a weight in any storage (float32 [out, in] or
// GPT-2's [in, out], half, quantized) is expanded straight into the packed form the micro-kernel reads,
// one panel per thread, while A is read in place: no packing of the activations, no barrier inside the
// product, each thread its own columns.
//
// Every output is summed over k = 0, 1, …, K − 1 in that order, one fused multiply-add at a time (onto C
// when accumulating), on every vector path: the AVX-512 and AVX2 paths give the same bits, whatever the
// thread count and however the weight is stored. The x86 vector paths only (pgemm_supported); elsewhere
// the forward keeps BLIS.
#pragma once
#include <functional>
#include <string>

namespace qkv {

// Fills dst with columns [j0, j0 + n) of B in groups of nr columns: dst[(g·K + k)·nr + r] = B(k, j0 + g·nr + r)
// for g < ⌈n / nr⌉, zero past column j0 + n. dst is 64-byte aligned and holds ⌈n / nr⌉·nr·K floats.
using PackB = std::function<void(int j0, int n, int nr, float* dst)>;

// C [M, N] (row stride ldc) = A [M, K] (row stride lda) · B, plus C's own values when accumulate (a bias
// written there first). Threads over column panels when called outside a parallel region (gemm_threads()).
void pgemm(int M, int N, int K, const float* A, int lda, const PackB& pack, bool accumulate, float* C, int ldc);

// True on the paths with a micro-kernel (flash_path(): avx512, avx2), unless QKV_GEMM=blis (then the
// forward's prefill goes to BLIS, for measuring one against the other; any other value but packed is a
// usage error).
bool pgemm_supported();

// "qkv packed, avx512 tiles of 8 × 32" when pgemm_supported(), else "".
std::string pgemm_name();

// The column-group width the path in use packs (32 for avx512, 24 for avx2; 0 where unsupported).
int pgemm_nr();

// Transposes rows [n, K] (row stride ld) into pack's layout for groups of nr (n ≤ its groups' width; rows
// past n are zero): for packers whose weight is stored, or expanded, as [out, in] rows.
void pgemm_pack_rows(const float* rows, long ld, int n, int K, int nr, float* dst);

// The same from B stored [K, N] (row stride ldb, e.g. GPT-2's Conv1D weights): columns [j0, j0 + n).
void pgemm_pack_cols(const float* B, long ldb, int j0, int n, int K, int nr, float* dst);

}  // namespace qkv

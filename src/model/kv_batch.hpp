// The K/V cache's bookkeeping for run() (lm_forward.cpp), one sequence or a batch of B decoded together:
// sizing the per-layer buffers [B, n_kv, cap, dh], appending a run's keys and values, and the positions
// and attention segments of a cached run's rows from the cache's left padding (KvCache::pad) and the
// run's attention mask.
#pragma once
#include <cstdint>
#include <vector>

#include "qkv/lm.hpp"

namespace qkv::kv_detail {

// Makes room for T more columns of B sequences (the first run sizes the cache for B; later runs must
// bring the same B: usage error otherwise). Keeps what is cached.
void reserve(KvCache& cache, const Arch& a, int B, int T);

// st.pos [B·T] and st.seg [B, len + T] (by column: where the column's run of padding / real tokens
// starts) for a run of T new tokens per sequence after cache.len cached ones; `pad` gets each
// sequence's left padding after the run (committed to the cache when the run completes). A mask may
// pad a sequence only before its first real token; a sequence with no real token is refused (usage
// errors naming attention_mask). Returns whether any sequence is padded.
bool positions(RunState& st, const KvCache& cache, const std::vector<uint8_t>* mask, int B, int T,
               std::vector<int>& pad);

// Copies block l's new keys and values k, v [B, n_kv, T, dh] into the cache's columns len .. len + T - 1.
void append(KvCache& cache, int l, const float* k, const float* v, int B, int K, int T, int dh);

}  // namespace qkv::kv_detail

// The K/V cache's bookkeeping for one sequence or a batch (kv_batch.hpp).
#include "kv_batch.hpp"

#include <algorithm>
#include <string>

#include "qkv/error.hpp"

namespace qkv::kv_detail {

void reserve(KvCache& cache, const Arch& a, int B, int T) {
  if (cache.k.size() != size_t(a.n_layer) || cache.len == 0) {  // first use: size it for this model and batch
    if (cache.k.size() != size_t(a.n_layer) || cache.batch != B) {
      cache.k.assign(size_t(a.n_layer), {});
      cache.v.assign(size_t(a.n_layer), {});
      cache.cap = 0;
    }
    cache.len = 0;
    cache.batch = B;
    cache.pad.assign(size_t(B), 0);
  }
  if (cache.batch != B)
    usage_error("batch: the K/V cache holds " + std::to_string(cache.batch) + " sequences, this run brings " +
                std::to_string(B));
  const int off = cache.len;
  if (off + T <= cache.cap) return;
  const int cap = std::min(a.n_ctx, std::max(off + T, 2 * cache.cap));  // grow (doubling), keeping what is cached
  const int groups = B * a.n_kv;
  for (auto* kv : {&cache.k, &cache.v})
    for (auto& buf : *kv) {
      std::vector<float> nb(size_t(groups) * cap * a.dh, 0.0f);
      for (int g = 0; g < groups && cache.cap > 0; g++)
        std::copy_n(buf.data() + size_t(g) * cache.cap * a.dh, size_t(off) * a.dh, nb.data() + size_t(g) * cap * a.dh);
      buf.swap(nb);
    }
  cache.cap = cap;
}

bool positions(RunState& st, const KvCache& cache, const std::vector<uint8_t>* mask, int B, int T,
               std::vector<int>& pad) {
  const int off = cache.len, Tk = off + T;
  if (mask && mask->size() != size_t(B) * T)
    usage_error("attention_mask: " + std::to_string(mask->size()) + " values for a batch of " + std::to_string(B) +
                " × " + std::to_string(T) + " tokens");
  pad = cache.pad;
  pad.resize(size_t(B), 0);
  for (int b = 0; b < B && mask; b++) {
    const uint8_t* mb = mask->data() + size_t(b) * T;
    int s = 0;
    while (s < T && !mb[s]) s++;
    if (s == T) usage_error("attention_mask: sequence " + std::to_string(b) + " has no real token");
    for (int t = s; t < T; t++)
      if (!mb[t])
        usage_error("attention_mask: sequence " + std::to_string(b) +
                    " is padded after a real token; with a K/V cache pad on the left only");
    if (s > 0 && pad[size_t(b)] != off)
      usage_error("attention_mask: sequence " + std::to_string(b) +
                  " is padded after real tokens already cached; with a K/V cache pad on the left only");
    pad[size_t(b)] += s;
  }
  st.pos.resize(size_t(B) * T);
  st.seg.assign(size_t(B) * Tk, 0);
  bool padded = false;
  for (int b = 0; b < B; b++) {
    const int p = pad[size_t(b)];
    padded = padded || p > 0;
    int* seg = st.seg.data() + size_t(b) * Tk;
    for (int j = 0; j < Tk; j++) seg[j] = j < p ? 0 : p;
    for (int t = 0; t < T; t++) st.pos[size_t(b) * T + t] = off + t - seg[off + t];
  }
  return padded;
}

void append(KvCache& cache, int l, const float* k, const float* v, int B, int K, int T, int dh) {
  std::vector<float>& kc = cache.k[size_t(l)];
  std::vector<float>& vc = cache.v[size_t(l)];
  const size_t stride = size_t(cache.cap) * dh, run = size_t(T) * dh, col = size_t(cache.len) * dh;
  for (int g = 0; g < B * K; g++) {  // st.k's sequence s, head h is group s·K + h, as the cache's
    std::copy_n(k + g * run, run, kc.data() + g * stride + col);
    std::copy_n(v + g * run, run, vc.data() + g * stride + col);
  }
}

}  // namespace qkv::kv_detail

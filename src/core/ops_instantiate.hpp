// Explicit instantiations of every op in ops_signatures.inc for one scalar type; expanded inside
// namespace qkv by ops.cpp and inside namespace qkv::ref by ops_reference.cpp.
#pragma once
#include <cstdint>

#define QKV_INSTANTIATE(T)                                                                                      \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, double);               \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, int);  \
  template void affine_forward<T>(T*, const T*, const T*, const T*, int, int, int);                             \
  template void affine_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);                   \
  template void split_qkv_forward<T>(T*, T*, T*, const T*, int, int, int);                                      \
  template void split_qkv_backward<T>(T*, const T*, const T*, const T*, int, int, int);                         \
  template void merge_heads_forward<T>(T*, const T*, int, int, int);                                            \
  template void merge_heads_backward<T>(T*, const T*, int, int, int);                                           \
  template void scores_forward<T>(T*, const T*, const T*, int, int, int, T);                                    \
  template void scores_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, T);                     \
  template void causal_mask_forward<T>(T*, int, int);                                                           \
  template void causal_mask_backward<T>(T*, int, int);                                                          \
  template void softmax_forward<T>(T*, const T*, int64_t, int);                                                 \
  template void softmax_backward<T>(T*, const T*, const T*, int64_t, int);                                      \
  template void mix_forward<T>(T*, const T*, const T*, int, int, int);                                          \
  template void mix_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int);                           \
  template void gelu_forward<T>(T*, const T*, int64_t);                                                         \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);

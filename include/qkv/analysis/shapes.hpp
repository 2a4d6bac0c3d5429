// Seed 004's "shape of every matrix" table and seed 001's "about 4d² parameters" count, as a pure function
// of plain numbers (n, d, H, n_kv, d_head, biases) so it serves multi-head and grouped-query models alike:
// K and V get n_kv·d_head columns, Q and O get H·d_head.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/arch.hpp"
#include "qkv/config.hpp"
#include "qkv/lm.hpp"

namespace qkv::analysis {

struct AttentionDims {
  int64_t n = 0;        // tokens (T)
  int64_t d = 0;        // model width
  int64_t H = 0;        // query heads
  int64_t n_kv = 0;     // key/value heads (= H without grouped-query attention)
  int64_t dh = 0;       // d_k = d_v per head
  bool biases = false;  // Q, K and V carry biases (GPT-2, Qwen2: yes)
  bool o_bias = false;  // W_O carries one (GPT-2: yes; Qwen2: no)
};

struct ShapeRow {
  std::string name;           // X, W_Q, …, W_O
  std::vector<int64_t> head;  // one head's shape (X: the whole X, which every head reads)
  std::vector<int64_t> all;   // every head together, as the layer stores or computes it
  std::string formula;        // the all-heads shape in symbols, e.g. "d × (n_kv·d_k)"
};

struct ParamCount {
  int64_t W_Q = 0, W_K = 0, W_V = 0, W_O = 0;  // weights
  int64_t b_Q = 0, b_K = 0, b_V = 0, b_O = 0;  // biases (0 without)
  int64_t weights() const { return W_Q + W_K + W_V + W_O; }
  int64_t biases() const { return b_Q + b_K + b_V + b_O; }
  int64_t total() const { return weights() + biases(); }
};

struct ShapesResult {
  AttentionDims dims;
  std::vector<ShapeRow> rows;  // X, W_Q, W_K, W_V, Q, K, V, S, A, O, W_O
  ParamCount params;           // one layer's attention parameters from the dims
  int64_t four_d2 = 0;         // 4·d²
};

// usage_error (naming the field) when a dimension is < 1, n_kv does not divide H, or n_kv > H.
ShapesResult attention_shapes(const AttentionDims& dims);

// Any family: H query heads, n_kv key/value heads of dh, the biases it has. `n` is the token count to show.
AttentionDims attention_dims(const Arch& arch, int64_t n);

// The attention parameters the model's own tensor table holds for layer l (the roles wq … bo, fused or
// not): weights and biases, read from the table's shapes, not from the config.
struct TensorCount {
  int64_t weights = 0, biases = 0;
  std::vector<std::string>
      names;  // the tensors counted, with their shapes, e.g. "h.0.attn.c_attn.weight [768, 2304]"
};
TensorCount attention_tensor_count(const std::vector<TensorSpec>& table, int layer);

// The seed's toy sizes: n = 5, d = 4, two heads of d_k = d_v = 2 (no biases: the toy's W only pick columns).
AttentionDims running_example_dims();

}  // namespace qkv::analysis

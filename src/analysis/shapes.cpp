// The shape table of one attention layer and its parameter count, from plain numbers.
#include "qkv/analysis/shapes.hpp"

#include <algorithm>
#include <iterator>

#include "qkv/error.hpp"

namespace qkv::analysis {

ShapesResult attention_shapes(const AttentionDims& g) {
  auto positive = [](int64_t v, const char* name) {
    if (v < 1) usage_error(std::string("shapes: ") + name + " must be >= 1, found " + std::to_string(v));
  };
  positive(g.n, "n"), positive(g.d, "d"), positive(g.H, "H"), positive(g.n_kv, "n_kv"),
      positive(g.dh, "d_head");
  if (g.n_kv > g.H || g.H % g.n_kv != 0)
    usage_error("shapes: n_kv = " + std::to_string(g.n_kv) + " must divide H = " + std::to_string(g.H));
  ShapesResult r;
  r.dims = g;
  const int64_t n = g.n, d = g.d, H = g.H, kv = g.n_kv, dh = g.dh;
  const bool gqa = kv != H;
  const std::string kvs = gqa ? "n_kv·d_k" : "H·d_k", kvv = gqa ? "n_kv·d_v" : "H·d_v";
  r.rows = {
      {"X", {n, d}, {n, d}, "n × d"},
      {"W_Q", {d, dh}, {d, H * dh}, "d × (H·d_k)"},
      {"W_K", {d, dh}, {d, kv * dh}, "d × (" + kvs + ")"},
      {"W_V", {d, dh}, {d, kv * dh}, "d × (" + kvv + ")"},
      {"Q", {n, dh}, {n, H * dh}, "n × (H·d_k)"},
      {"K", {n, dh}, {n, kv * dh}, "n × (" + kvs + ")"},
      {"V", {n, dh}, {n, kv * dh}, "n × (" + kvv + ")"},
      {"S", {n, n}, {H, n, n}, "H × n × n"},
      {"A", {n, n}, {H, n, n}, "H × n × n"},
      {"O", {n, dh}, {n, H * dh}, "n × (H·d_v)"},
      {"W_O", {dh, d}, {H * dh, d}, "(H·d_v) × d"},
  };
  ParamCount& p = r.params;
  p.W_Q = d * H * dh, p.W_K = d * kv * dh, p.W_V = d * kv * dh, p.W_O = H * dh * d;
  if (g.biases) p.b_Q = H * dh, p.b_K = kv * dh, p.b_V = kv * dh;
  if (g.o_bias) p.b_O = d;
  r.four_d2 = 4 * d * d;
  return r;
}

AttentionDims attention_dims(const Arch& a, int64_t n) {
  return {n, a.d, a.H, a.n_kv, a.dh, a.qkv_bias, a.o_bias};
}

TensorCount attention_tensor_count(const std::vector<TensorSpec>& table, int layer) {
  static const Role weights[] = {Role::wq, Role::wk, Role::wv, Role::wqkv, Role::wo};
  static const Role biases[] = {Role::bq, Role::bk, Role::bv, Role::bqkv, Role::bo};
  auto in = [](Role r, const auto& set) {
    return std::find(std::begin(set), std::end(set), r) != std::end(set);
  };
  TensorCount t;
  for (const TensorSpec& s : table) {
    if (s.layer != layer || !(in(s.role, weights) || in(s.role, biases))) continue;
    int64_t numel = 1;
    std::string shape;
    for (int64_t v : s.shape) numel *= v, shape += (shape.empty() ? "" : ", ") + std::to_string(v);
    t.names.push_back(s.name + " [" + shape + "]");
    (in(s.role, weights) ? t.weights : t.biases) += numel;
  }
  if (t.names.empty())
    usage_error("shapes: the model has no attention tensors in layer " + std::to_string(layer));
  return t;
}


AttentionDims running_example_dims() {
  return {5, 4, 2, 2, 2, false};
}

}  // namespace qkv::analysis

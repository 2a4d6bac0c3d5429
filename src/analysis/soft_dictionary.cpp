#include "qkv/analysis/soft_dictionary.hpp"

#include <cmath>

#include "qkv/error.hpp"
#include "qkv/gemm.hpp"
#include "qkv/ops.hpp"

namespace qkv {
namespace {

std::vector<double> flatten(const Matrix& m, size_t cols, const std::string& what) {
  std::vector<double> out;
  for (const auto& row : m) {
    if (row.size() != cols)
      usage_error(what + ": every row needs " + std::to_string(cols) + " numbers, found " + std::to_string(row.size()));
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

Matrix unflatten(const std::vector<double>& v, size_t rows, size_t cols) {
  Matrix m(rows, std::vector<double>(cols));
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++) m[i][j] = v[i * cols + j];
  return m;
}

}  // namespace

SoftDictionaryResult soft_dictionary(const SoftDictionaryInput& in) {
  if (in.K.empty() || in.Q.empty()) usage_error("soft dictionary: need at least one key and one query");
  const size_t n = in.K.size(), m = in.Q.size(), dk = in.K[0].size();
  const size_t dv = in.V.empty() ? 0 : in.V[0].size();
  if (!in.V.empty() && in.V.size() != n) usage_error("soft dictionary: as many values as keys are needed");
  const auto K = flatten(in.K, dk, "keys"), Q = flatten(in.Q, dk, "queries"), V = flatten(in.V, dv, "values");

  SoftDictionaryResult r;
  r.sqrt_dk = std::sqrt(double(dk));
  std::vector<double> S(m * n), scaled(m * n), A(m * n), O(m * dv);
  // S = Q·Kᵀ   torch: Q @ K.T
  gemm<double>(false, true, int(m), int(n), int(dk), 1.0, Q.data(), int(dk), K.data(), int(dk), 0.0, S.data(), int(n));
  const double s = in.scale ? 1.0 / r.sqrt_dk : 1.0;
  for (size_t i = 0; i < S.size(); i++) scaled[i] = S[i] * s;
  softmax_forward(A.data(), scaled.data(), int64_t(m), int(n));
  // O = A·V   torch: A @ V
  if (dv) gemm<double>(false, false, int(m), int(dv), int(n), 1.0, A.data(), int(n), V.data(), int(dv), 0.0, O.data(), int(dv));
  r.scores = unflatten(S, m, n);
  r.scaled = unflatten(scaled, m, n);
  r.weights = unflatten(A, m, n);
  r.output = dv ? unflatten(O, m, dv) : Matrix{};
  r.exp_scores = r.scaled;
  for (auto& row : r.exp_scores)
    for (auto& e : row) e = std::exp(e);
  return r;
}

SoftDictionaryInput bank_example() {
  SoftDictionaryInput in;
  in.names = {"sat", "bank", "river"};
  in.K = {{1, 0}, {1, 1}, {0, 2}};
  in.V = {{1, 0}, {0.5, 0.5}, {1, 0}};
  in.Q = {{1, 2}};
  return in;
}

Matrix bank_all_queries() { return {{2, 0}, {1, 2}, {0, 1}}; }

SoftDictionaryInput robot_example() {
  SoftDictionaryInput in;
  in.names = {"robot", "patient", "it"};
  in.K = {{2.0, 1.0}, {0.5, -1.0}, {0.0, 1.0}};
  in.Q = {{1.0, 0.5}};
  return in;
}

}  // namespace qkv

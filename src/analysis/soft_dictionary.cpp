#include "qkv/analysis/soft_dictionary.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>

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

namespace qkv {

ScoreKind parse_score_kind(const std::string& name) {
  if (name == "content") return ScoreKind::Content;
  if (name == "previous") return ScoreKind::Previous;
  if (name == "decay") return ScoreKind::Decay;
  if (name == "mix") return ScoreKind::Mix;
  usage_error("score function '" + name + "': expected content, previous, decay or mix");
}

const char* score_kind_name(ScoreKind k) {
  switch (k) {
    case ScoreKind::Content: return "content";
    case ScoreKind::Previous: return "previous";
    case ScoreKind::Decay: return "decay";
    case ScoreKind::Mix: return "mix";
  }
  return "?";
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(cur), cur.clear();
  };
  for (size_t i = 0; i < text.size(); i++) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (std::isspace(c)) {
      flush();
    } else if (c < 0x80 && std::ispunct(c) && c != '\'' && c != '-') {
      flush();
      out.emplace_back(1, char(c));
    } else {
      cur += char(c);  // letters, digits, apostrophes, hyphens and every byte of a UTF-8 character
    }
  }
  flush();
  return out;
}

namespace {

std::array<double, 16> word_features(const std::string& w) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the lowercase word, then splitmix64 for the 16 signs
  for (unsigned char c : w) h = (h ^ uint64_t(c < 0x80 ? std::tolower(c) : c)) * 0x100000001b3ULL;
  std::array<double, 16> f{};
  for (double& x : f) {
    h += 0x9e3779b97f4a7c15ULL;
    uint64_t z = h;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    x = ((z ^ (z >> 31)) >> 63) ? 1.0 : -1.0;
  }
  return f;
}

double toy_score(ScoreKind k, const std::array<double, 16>& fi, const std::array<double, 16>& fj, int i, int j) {
  switch (k) {
    case ScoreKind::Content: {
      double s = 0;
      for (size_t c = 0; c < 16; c++) s += fi[c] * fj[c];
      return 3.0 * s / 16.0;
    }
    case ScoreKind::Previous: return j == i - 1 ? 3.0 : 0.0;
    case ScoreKind::Decay: return -0.5 * std::abs(i - j);
    case ScoreKind::Mix:
      return (toy_score(ScoreKind::Content, fi, fj, i, j) + toy_score(ScoreKind::Previous, fi, fj, i, j) +
              toy_score(ScoreKind::Decay, fi, fj, i, j)) / 3.0;
  }
  return 0;
}

}  // namespace

WholeMatrixResult whole_matrix(const WholeMatrixInput& in) {
  const int n = int(in.tokens.size());
  if (n < 1 || n > 64) usage_error("whole matrix: the sentence has " + std::to_string(n) + " tokens; give 1 to 64");
  if (in.dk < 1 || in.dk > 4096) usage_error("whole matrix: d_k = " + std::to_string(in.dk) + " is outside [1, 4096]");
  WholeMatrixResult r;
  r.tokens = in.tokens;
  r.sqrt_dk = std::sqrt(double(in.dk));
  std::vector<std::array<double, 16>> f;
  for (const auto& t : in.tokens) f.push_back(word_features(t));
  std::vector<double> S(size_t(n) * n), A(size_t(n) * n);
  r.z.assign(size_t(n), std::vector<double>(size_t(n)));
  r.qk = r.S = r.z;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      const double z = toy_score(in.kind, f[size_t(i)], f[size_t(j)], i, j);
      r.z[size_t(i)][size_t(j)] = z;
      r.qk[size_t(i)][size_t(j)] = r.sqrt_dk * z;
      r.S[size_t(i)][size_t(j)] = S[size_t(i) * n + j] = in.scale ? z : r.sqrt_dk * z;
    }
  if (in.masked) causal_mask_forward<double>(S.data(), 1, n);
  softmax_forward<double>(A.data(), S.data(), n, n);
  r.A = unflatten(A, size_t(n), size_t(n));
  for (const auto& row : r.A) {
    const double m = *std::max_element(row.begin(), row.end());
    r.row_max.push_back(m);
    r.binary_rows += m > 0.99;
  }
  return r;
}

}  // namespace qkv

// The experiments' own checks: slow twins written differently, and tests built to fail when the
// mechanism is wrong (the matrices-only swap is not a transpose, the raw row is not ln_1(row), ...).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <nlohmann/json.hpp>

#include "qkv/analysis/circuits.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/head_weights.hpp"
#include "qkv/analysis/projections.hpp"
#include "qkv/analysis/scores.hpp"
#include "qkv/analysis/swap.hpp"
#include "qkv/error.hpp"
#include "qkv/lm.hpp"

namespace qkv::analysis {
namespace {

const std::string kTiny = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/tiny";
const std::vector<int> kIds = {3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57};

const Model& tiny() {
  static const Model m = load_lm(kTiny);
  return m;
}

// A writable fp32 copy of one of the model's weights, kept alive by the model.
float* own(Model& m, Weight& w) {
  auto buf = std::make_shared<std::vector<float>>(size_t(w.numel()));
  w.read(0, w.numel(), buf->data());
  w.data = buf->data(), w.type = WeightType::F32;
  m.keep_alive.push_back(buf);
  return buf->data();
}

Matrix random_matrix(int r, int c, std::mt19937_64& rng) {
  std::normal_distribution<double> n(0, 1);
  Matrix m(r, c);
  for (double& x : m.a) x = n(rng);
  return m;
}

// The slow twin: M = W_Q W_Kᵀ built entry by entry, norms read off it.
BilinearNorms bilinear_norms_slow(const Matrix& Wq, const Matrix& Wk) {
  const int d = Wq.rows;
  std::vector<double> M(size_t(d) * d, 0.0);
  for (int i = 0; i < d; i++)
    for (int j = 0; j < d; j++)
      for (int e = 0; e < Wq.cols; e++) M[size_t(i) * d + j] += Wq(i, e) * Wk(j, e);
  double n2 = 0, a2 = 0, s2 = 0;
  for (int i = 0; i < d; i++)
    for (int j = 0; j < d; j++) {
      const double m = M[size_t(i) * d + j], t = M[size_t(j) * d + i];
      n2 += m * m, a2 += (m - t) * (m - t), s2 += (m + t) * (m + t);
    }
  return {std::sqrt(n2), std::sqrt(a2) / (2 * std::sqrt(n2)), std::sqrt(s2) / (2 * std::sqrt(n2))};
}

TEST(Bilinear, FactoredNormsMatchTheFullMatrix) {
  std::mt19937_64 rng(7);
  for (auto [d, dh] : {std::pair{13, 5}, {1, 1}, {24, 8}, {40, 1}}) {
    const Matrix Wq = random_matrix(d, dh, rng), Wk = random_matrix(d, dh, rng);
    const BilinearNorms f = bilinear_norms(Wq, Wk), s = bilinear_norms_slow(Wq, Wk);
    EXPECT_NEAR(f.norm, s.norm, 1e-12 * s.norm);
    EXPECT_NEAR(f.antisym_share, s.antisym_share, 1e-9);
    EXPECT_NEAR(f.sym_share, s.sym_share, 1e-9);
    EXPECT_NEAR(f.sym_share * f.sym_share + f.antisym_share * f.antisym_share, 1.0, 1e-9);
  }
}

TEST(Bilinear, SymmetricAndAntisymmetricExtremes) {
  std::mt19937_64 rng(8);
  const Matrix a = random_matrix(10, 3, rng);
  EXPECT_NEAR(bilinear_norms(a, a).antisym_share, 0.0, 1e-7);  // W_K = W_Q: M = W_Q W_Qᵀ is symmetric
  // W_Q = [p, r], W_K = [r, −p]: M = p rᵀ − r pᵀ is antisymmetric
  Matrix Wq(10, 2), Wk(10, 2);
  for (int i = 0; i < 10; i++) Wq(i, 0) = a(i, 0), Wq(i, 1) = a(i, 1), Wk(i, 0) = a(i, 1), Wk(i, 1) = -a(i, 0);
  EXPECT_NEAR(bilinear_norms(Wq, Wk).antisym_share, 1.0, 1e-9);
}

TEST(Circuits, FactoredCompositionMatchesFullProducts) {
  std::mt19937_64 rng(9);
  const int d = 17, r1 = 3, r2 = 5;
  const Matrix A1 = random_matrix(d, r1, rng), B1 = random_matrix(r1, d, rng);
  const Matrix A2 = random_matrix(d, r2, rng), B2 = random_matrix(r2, d, rng);
  const Matrix left = matmul(A1, B1), right = matmul(A2, B2);  // the [d, d] products the slow twin may form
  const double full = frobenius(matmul(left, right)) / (frobenius(left) * frobenius(right));
  EXPECT_NEAR(composition_score(A1, B1, A2, B2), full, 1e-12);
  EXPECT_NEAR(low_rank_norm(A1, B1), frobenius(left), 1e-12 * frobenius(left));
  // A later head reading exactly what the earlier head writes composes far above a random one.
  EXPECT_GT(composition_score(A1, B1, transpose(B1), transpose(A1)), 3 * full);
}

TEST(Circuits, CopyingHeadScoresOne) {
  // Attention-only model whose head 0.0 has W_V W_O = I on a subspace and W_E's Gram positive: every
  // eigenvalue of W_O W_U W_E W_V is then positive, so the copying score is 1; negating W_O makes it −1.
  nlohmann::json cfg = default_config("gpt2", "tiny");
  cfg["n_embd"] = 24, cfg["n_head"] = 3, cfg["n_layer"] = 1, cfg["vocab_size"] = 101,
  cfg["qkv_attn_only"] = true;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("qkv_copying_" + std::to_string(::getpid()))).string();
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, 5);
  Model m = load_lm(dir);
  std::filesystem::remove_all(dir);  // the mapping stays valid after its files are unlinked (POSIX)
  const int d = m.arch.d, dh = m.arch.dh;
  ASSERT_EQ(m.arch.qkv_layout, QkvLayout::Gpt2Thirds);  // c_attn [d, 3d] and c_proj [d, d], stored [in, out]
  float* W_attn = own(m, m.blocks[0].wqkv);
  float* W_O = own(m, m.blocks[0].wo);
  for (int i = 0; i < d; i++)
    for (int e = 0; e < dh; e++) {
      W_attn[int64_t(i) * 3 * d + 2 * d + e] = (i == e) ? 1.f : 0.f;  // W_V^0 = [I; 0]
      W_O[int64_t(e) * d + i] = (i == e) ? 1.f : 0.f;                  // W_O^0 = [I 0]
    }
  CircuitsOptions o;
  o.fold_ln = false, o.baseline_samples = 0;
  EXPECT_NEAR(circuits(m, o).heads[0].copying, 1.0, 1e-9);
  for (int e = 0; e < dh; e++) W_O[int64_t(e) * d + e] = -1.f;
  EXPECT_NEAR(circuits(m, o).heads[0].copying, -1.0, 1e-9);
}

TEST(Project, ReproducesTheForwardAndTheTrapsAreLarge) {
  for (int l = 0; l < 2; l++) {
    const ProjectionResult r = project(tiny(), kIds, l);
    EXPECT_EQ(r.weight_shape, (std::vector<int64_t>{24, 72}));
    EXPECT_LT(r.heads_max_abs_diff, 1e-5);
    // A wrong cut of the thirds into heads is far off: the check can fail.
    EXPECT_GT(r.interleaved_cut_rel, 0.5);
    for (const ProjectionPart* p : {&r.q, &r.k, &r.v}) {
      EXPECT_GT(p->ln_trap_rel, 0.3);     // the raw row is not ln_1(row)
      EXPECT_GT(p->bias_trap_rel, 0.02);  // the fixture's biases are not zero
    }
  }
}

TEST(Project, ZeroBiasesMakeTheBiasTrapVanish) {
  Model m = load_lm(kTiny);
  float* b = own(m, m.blocks[1].bqkv);  // GPT-2's initialisation: biases 0
  std::fill_n(b, m.blocks[1].bqkv.numel(), 0.0f);
  const ProjectionResult r = project(m, {1, 2, 3, 4}, 1);
  EXPECT_EQ(r.q.bias_trap_rel, 0.0);
  EXPECT_EQ(r.q.bias_norm, 0.0);
  EXPECT_GT(r.q.ln_trap_rel, 0.3);
}

TEST(Swap, FullSwapTransposesMatricesOnlyDoesNot) {
  for (int h = 0; h < 3; h++) {
    const SwapResult r = swap_query_key(tiny(), kIds, 1, h);
    EXPECT_LT(r.full_vs_ST_max_abs, 1e-12);
    // Swapping only the matrices leaves the bias cross terms: neither S nor Sᵀ.
    EXPECT_GT(r.matrices_vs_ST_rel, 0.02);
    EXPECT_GT(r.matrices_vs_S_rel, 0.02);
    // After the mask and the softmax, the full swap's pattern is not Aᵀ.
    EXPECT_GT(r.pattern_full_vs_AT_rel, 0.3);
    EXPECT_GT(r.column_sum_max_dev, 0.1);
  }
}

TEST(Scores, AsymmetricAndPartsSumToTheModelsScores) {
  const ScoresResult r = score_asymmetry(tiny(), kIds, 0, 1);
  EXPECT_GT(r.asym_rel, 0.1);
  EXPECT_LT(r.reconstruction_max_abs, 1e-4);
  EXPECT_NEAR(std::abs(r.S_ij - r.S_ji), r.max_asym, 1e-12);
  EXPECT_GT(r.max_i, r.max_j);
  // With one token there is nothing to be asymmetric about.
  EXPECT_EQ(score_asymmetry(tiny(), {5}, 0, 1).asym_rel, 0.0);
}

TEST(HeadDetector, TargetsFollowTransformerLens) {
  const std::vector<int> ids = {4, 7, 4, 9, 7};
  const auto dup = duplicate_token_target(ids), ind = induction_target(ids);
  const auto at = [](const std::vector<double>& p, int i, int j) { return p[size_t(i) * 5 + j]; };
  EXPECT_EQ(at(dup, 2, 0), 1);  // the second 4 attends to the first
  EXPECT_EQ(at(dup, 4, 1), 1);
  EXPECT_EQ(at(dup, 2, 2), 0);  // never the token itself
  EXPECT_EQ(at(ind, 2, 1), 1);  // the token after the earlier 4
  EXPECT_EQ(at(ind, 4, 2), 1);  // the token after the earlier 7
  double total = 0;
  for (double x : ind) total += x;
  EXPECT_EQ(total, 2);
  // A perfect previous-token pattern scores 1; a diagonal pattern scores 0.
  std::vector<float> prev(25, 0.f), diag(25, 0.f);
  prev[0] = 1;
  for (int i = 1; i < 5; i++) prev[size_t(i) * 5 + i - 1] = 1;
  for (int i = 0; i < 5; i++) diag[size_t(i) * 5 + i] = 1;
  EXPECT_NEAR(detector_score(prev.data(), previous_token_target(5), 5), 4.0 / 5.0, 1e-12);  // row 0 has no target
  EXPECT_EQ(detector_score(diag.data(), previous_token_target(5), 5), 0.0);
}

TEST(HeadDetector, RepeatedTokensAreSeededAndRepeated) {
  const auto a = repeated_random_tokens(101, 6, 3, 42, 7), b = repeated_random_tokens(101, 6, 3, 42, 7);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 3u);
  for (const auto& s : a) {
    ASSERT_EQ(s.size(), 13u);
    EXPECT_EQ(s[0], 7);
    for (int i = 1; i <= 6; i++) EXPECT_EQ(s[size_t(i)], s[size_t(i) + 6]);
  }
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(repeated_random_tokens(101, 6, 1, 43)[0], repeated_random_tokens(101, 6, 1, 42)[0]);
}

TEST(Arguments, LayerAndHeadOutOfRangeNameTheRange) {
  try {
    check_head(tiny(), 2, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("--layer: 2 is outside [0, 2)"), std::string::npos) << e.what();
  }
  try {
    check_head(tiny(), 1, -1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--head: -1 is outside [0, 3)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv::analysis

// Seed 004's running example and shape table: against the seed's printed numbers, against plain loops
// written here (not the core ops the library uses), and against fixtures/experiments/running_example.json,
// which tests/reference/check_experiments.py makes with numpy (including the search that picks X).
#include "qkv/analysis/running_example.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/analysis/shapes.hpp"
#include "qkv/error.hpp"

namespace qkv::analysis {
namespace {

TEST(RunningExample, EveryNumberTheSeedStatesMatchesItsRounding) {
  const auto checks = running_example_checks();
  EXPECT_EQ(checks.size(), 21u);
  for (const auto& c : checks)
    EXPECT_TRUE(c.ok()) << c.id << ": " << c.computed << " vs the seed's " << c.seed;
  // The rounding test can fail: a number off by one unit in the last printed digit does not pass.
  RunningCheck off{"x", "", 0.622, 3, 0.6231};
  EXPECT_FALSE(off.ok());
  off.computed = 0.6224;
  EXPECT_TRUE(off.ok());
}

TEST(RunningExample, XHasTheSeedsLastRowAndMeanZeroRows) {
  const RunningExample r = running_example();
  ASSERT_EQ(r.X.size(), 5u);
  EXPECT_EQ(r.X[4], (std::vector<double>{-0.5, -0.5, -0.5, 1.5}));
  EXPECT_EQ(r.from_seed, (std::vector<bool>{false, false, false, false, true}));
  for (const auto& row : r.X) {
    double s = 0;
    for (double v : row) s += v;
    EXPECT_EQ(s, 0.0);
  }
  EXPECT_NEAR(r.sigma[4], std::sqrt(0.75), 1e-15);
  EXPECT_FALSE(running_example_rule().empty());
}

// Plain loops: LayerNorm, the picks, softmax with and without the mask; head 2 too.
TEST(RunningExample, MatchesPlainLoops) {
  for (bool scale : {true, false})
    for (bool masked : {false, true}) {
      const RunningExample r = running_example({scale, masked});
      const qkv::Matrix X = running_example_X();
      qkv::Matrix u(5, std::vector<double>(4));
      for (int i = 0; i < 5; i++) {
        double mu = 0, var = 0;
        for (double v : X[i]) mu += v / 4;
        for (double v : X[i]) var += (v - mu) * (v - mu) / 4;
        for (int j = 0; j < 4; j++) u[i][j] = (X[i][j] - mu) / std::sqrt(var);
      }
      for (int h = 0; h < 2; h++) {
        const RunningPicks p = running_head_picks(h);
        const auto& hd = r.heads[size_t(h)];
        for (int i = 0; i < 5; i++) {
          double s[5], mx = -INFINITY, z = 0;
          for (int j = 0; j < 5; j++) {
            s[j] =
                (u[i][p.q[0]] * u[j][p.k[0]] + u[i][p.q[1]] * u[j][p.k[1]]) / (scale ? std::sqrt(2.0) : 1.0);
            if (masked && j > i) s[j] = -INFINITY;
            mx = std::max(mx, s[j]);
          }
          for (double& v : s) z += (v = std::exp(v - mx));
          double o[2] = {0, 0};
          for (int j = 0; j < 5; j++) {
            EXPECT_NEAR(hd.A[i][j], s[j] / z, 1e-14) << h << " " << i << " " << j;
            for (int c = 0; c < 2; c++) o[c] += s[j] / z * u[j][p.v[c]];
          }
          for (int c = 0; c < 2; c++) EXPECT_NEAR(hd.O[i][c], o[c], 1e-14);
        }
      }
    }
}

TEST(RunningExample, MatchesNumpy) {
  std::ifstream f(std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/experiments/running_example.json");
  ASSERT_TRUE(f.good()) << "run tests/reference/check_experiments.py";
  const auto fx = nlohmann::json::parse(f);
  // numpy's own search over the grid, by the stated rule, found this X.
  EXPECT_EQ(fx["X"].get<qkv::Matrix>(), running_example_X());
  for (const auto& v : fx["views"]) {
    const RunningExample r = running_example({v["scale"].get<bool>(), v["masked"].get<bool>()});
    for (size_t h = 0; h < 2; h++)
      for (const char* key : {"Q", "K", "V", "S", "A", "O"}) {
        const qkv::Matrix want = v["heads"][h][key].get<qkv::Matrix>();
        const auto& hd = r.heads[h];
        const qkv::Matrix& got = std::string(key) == "Q"   ? hd.Q
                                 : std::string(key) == "K" ? hd.K
                                 : std::string(key) == "V" ? hd.V
                                 : std::string(key) == "S" ? hd.S
                                 : std::string(key) == "A" ? hd.A
                                                           : hd.O;
        ASSERT_EQ(got.size(), want.size()) << key;
        for (size_t i = 0; i < got.size(); i++)
          for (size_t j = 0; j < got[i].size(); j++)
            EXPECT_NEAR(got[i][j], want[i][j], 1e-13) << key << i << j;
      }
  }
}

TEST(Shapes, RunningExampleAndGpt2Small) {
  const ShapesResult toy = attention_shapes(running_example_dims());
  ASSERT_EQ(toy.rows.size(), 11u);
  auto row = [](const ShapesResult& s, const std::string& name) {
    for (const auto& r : s.rows)
      if (r.name == name) return r;
    ADD_FAILURE() << name;
    return ShapeRow{};
  };
  // The seed: "S and A are 5 × 5 and O is 5 × 2".
  EXPECT_EQ(row(toy, "S").head, (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(row(toy, "A").head, (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(row(toy, "O").head, (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(row(toy, "W_Q").all, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(toy.params.total(), 4 * 16);

  const Arch small = arch_from_config(default_config("gpt2", "small"), "GPT-2 small");
  const ShapesResult gs = attention_shapes(attention_dims(small, 1024));
  EXPECT_EQ(gs.params.weights(), 4 * 768 * 768);
  EXPECT_EQ(gs.params.biases(), 4 * 768);
  const TensorCount t = attention_tensor_count(tensor_table(small), 11);
  EXPECT_EQ(t.weights, gs.params.weights());
  EXPECT_EQ(t.biases, gs.params.biases());
  EXPECT_EQ(t.names.size(), 4u);
  EXPECT_EQ(row(gs, "W_Q").head, (std::vector<int64_t>{768, 64}));
  EXPECT_EQ(t.names[0], "h.11.attn.c_attn.weight [768, 2304]");
}

// Another family's table: separate q/k/v_proj, grouped-query K and V, Q/K/V biases without W_O's (Qwen2).
TEST(Shapes, ModelTablesOfOtherFamilies) {
  nlohmann::json cfg = default_config("qwen2", "tiny");
  const Arch a = arch_from_config(cfg, "qwen2 tiny");
  const ShapesResult s = attention_shapes(attention_dims(a, 5));
  const TensorCount t = attention_tensor_count(tensor_table(a), 1);
  EXPECT_EQ(t.names.size(), 7u);  // q, k, v, o weights; q, k, v biases
  EXPECT_EQ(t.weights, s.params.weights());
  EXPECT_EQ(t.biases, s.params.biases());
  EXPECT_EQ(s.params.b_O, 0);
  EXPECT_EQ(s.params.W_K, int64_t(a.d) * a.n_kv * a.dh);
  EXPECT_LT(a.n_kv, a.H);
}

TEST(Shapes, GroupedQueryKeysAndValuesAreNarrower) {
  // A Llama-like layer: d = 4096, 32 query heads, 8 key/value heads of 128, no biases.
  const ShapesResult s = attention_shapes({7, 4096, 32, 8, 128, false});
  EXPECT_EQ(s.rows[2].all, (std::vector<int64_t>{4096, 1024}));  // W_K: d × n_kv·d_k
  EXPECT_EQ(s.rows[5].all, (std::vector<int64_t>{7, 1024}));     // K
  EXPECT_EQ(s.rows[1].all, (std::vector<int64_t>{4096, 4096}));  // W_Q
  EXPECT_EQ(s.params.weights(), 2 * 4096LL * 4096 + 2 * 4096LL * 1024);
  EXPECT_EQ(s.params.biases(), 0);
  EXPECT_NE(s.rows[2].formula.find("n_kv"), std::string::npos);
}

TEST(Shapes, RejectsImpossibleDims) {
  EXPECT_THROW(attention_shapes({0, 4, 2, 2, 2, false}), Error);
  EXPECT_THROW(attention_shapes({5, 4, 3, 2, 2, false}), Error);  // n_kv does not divide H
  EXPECT_THROW(attention_shapes({5, 4, 2, 4, 2, false}), Error);  // n_kv > H
  EXPECT_THROW(
      attention_tensor_count(tensor_table(arch_from_config(default_config("gpt2", "small"), "x")), 12),
      Error);
}

}  // namespace
}  // namespace qkv::analysis

namespace qkv {
namespace {

TEST(WholeMatrix, SplitsWordsAndPunctuation) {
  EXPECT_EQ(split_words("The cat, sat.  It's well-known"),
            (std::vector<std::string>{"The", "cat", ",", "sat", ".", "It's", "well-known"}));
  EXPECT_TRUE(split_words(" \t\n").empty());
}

TEST(WholeMatrix, ScoreFunctionsDoWhatTheySay) {
  WholeMatrixInput in;
  in.tokens = split_words("the cat saw the dog and the cat ran");
  const int n = int(in.tokens.size());
  in.kind = ScoreKind::Previous;
  auto r = whole_matrix(in);
  for (int i = 1; i < n; i++) {
    const auto& row = r.A[size_t(i)];
    EXPECT_EQ(std::max_element(row.begin(), row.end()) - row.begin(), i - 1) << i;
  }
  in.kind = ScoreKind::Content;  // the same word (case-insensitive) scores 3 against itself
  r = whole_matrix(in);
  EXPECT_EQ(r.z[0][3], 3.0);
  EXPECT_EQ(r.z[1][7], 3.0);
  EXPECT_LT(r.z[1][4], 3.0);
  in.kind = ScoreKind::Decay;
  r = whole_matrix(in);
  EXPECT_EQ(r.z[2][5], -1.5);
  in.kind = ScoreKind::Mix;
  r = whole_matrix(in);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      WholeMatrixInput one = in;
      double sum = 0;
      for (ScoreKind k : {ScoreKind::Content, ScoreKind::Previous, ScoreKind::Decay}) {
        one.kind = k;
        sum += whole_matrix(one).z[size_t(i)][size_t(j)];
      }
      EXPECT_NEAR(r.z[size_t(i)][size_t(j)], sum / 3, 1e-15);
    }
  for (const auto& row : r.A) {
    double s = 0;
    for (double a : row) s += a;
    EXPECT_NEAR(s, 1.0, 1e-14);
  }
}

// The seed: "turn divide by √d_k off and drag d_k up. The matrix goes binary." With it on, d_k changes
// nothing.
TEST(WholeMatrix, GoesBinaryWithoutTheDivisionOnly) {
  WholeMatrixInput in;
  in.tokens = split_words("The cat sat on the mat because the cat was tired");
  for (ScoreKind k : {ScoreKind::Content, ScoreKind::Previous, ScoreKind::Decay, ScoreKind::Mix}) {
    in.kind = k;
    in.scale = true, in.dk = 2;
    const auto soft2 = whole_matrix(in);
    in.dk = 1024;
    const auto soft1024 = whole_matrix(in);
    EXPECT_EQ(soft2.A, soft1024.A) << score_kind_name(k);
    EXPECT_EQ(soft1024.binary_rows, 0) << score_kind_name(k);
    in.scale = false;
    const auto hard = whole_matrix(in);
    // Every row whose top score leads the next by ≥ 0.3 puts > 0.99 on its top-scoring keys (several
    // where a word repeats: "the", "cat"); near-ties (the mix) and all-equal rows stay split, as they must.
    int sharp = 0;
    for (size_t i = 0; i < hard.A.size(); i++) {
      const double top = *std::max_element(hard.z[i].begin(), hard.z[i].end());
      double next = -1e300, on_top = 0;
      for (size_t j = 0; j < hard.A.size(); j++) {
        if (hard.z[i][j] == top)
          on_top += hard.A[i][j];
        else
          next = std::max(next, hard.z[i][j]);
      }
      if (top - next < 0.3) continue;
      sharp++;
      EXPECT_GT(on_top, 0.99) << score_kind_name(k) << " row " << i;
    }
    EXPECT_GE(sharp, k == ScoreKind::Mix ? 2 : 6) << score_kind_name(k);
    if (k == ScoreKind::Decay) {
      EXPECT_EQ(hard.binary_rows, 11);
    }
    if (k == ScoreKind::Previous) {
      EXPECT_EQ(hard.binary_rows, 10);  // row 0 has no previous token: uniform
    }
    EXPECT_NEAR(hard.qk[3][2], 32.0 * soft2.z[3][2], 1e-12);
  }
  in.masked = true;
  const auto m = whole_matrix(in);
  EXPECT_EQ(m.A[0][1], 0.0);
  EXPECT_EQ(m.A[0][0], 1.0);
}

TEST(WholeMatrix, RefusesBadInput) {
  WholeMatrixInput in;
  EXPECT_THROW(whole_matrix(in), Error);  // no tokens
  in.tokens.assign(65, "a");
  EXPECT_THROW(whole_matrix(in), Error);
  in.tokens.assign(3, "a");
  in.dk = 0;
  EXPECT_THROW(whole_matrix(in), Error);
  EXPECT_THROW(parse_score_kind("nope"), Error);
}

}  // namespace
}  // namespace qkv

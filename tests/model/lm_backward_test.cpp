// The family backward (lm_train.hpp) against central differences in double: each piece (norms,
// rotary, grouped-query attention, MLP activations) with L = Σ R ⊙ y for a random R, then the whole
// model's cross-entropy for a tiny model of every family. And the training forward against run() on
// the same weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "qkv/gradcheck.hpp"
#include "qkv/lm_train.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

std::vector<double> randn(size_t n, uint64_t seed, double sd = 1.0, double mean = 0.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N(mean, sd);
  std::vector<double> v(n);
  for (auto& x : v) x = N(rng);
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

// |analytic − numeric| <= 1e-7 + 1e-6·max|numeric|
void expect_close(const std::vector<double>& analytic, const std::vector<double>& numeric,
                  const std::string& what) {
  double scale = 0;
  for (double x : numeric) scale = std::max(scale, std::abs(x));
  const double err = max_abs_diff(analytic, numeric);
  EXPECT_LE(err, 1e-7 + 1e-6 * scale)
      << what << ": max |analytic − numeric| " << err << " (largest gradient " << scale << ")";
  EXPECT_GT(scale, 0.0) << what << ": every gradient is zero, the check cannot fail";
}

TEST(LmBackward, NormsAgreeWithCentralDifferences) {
  const int N = 3, d = 7;
  for (NormKind kind : {NormKind::LayerNorm, NormKind::RMSNorm, NormKind::RMSNormPlusOne})
    for (bool bias : {false, true}) {
      if (bias && kind != NormKind::LayerNorm) continue;
      std::vector<double> x = randn(size_t(N) * d, 1, 1.0, 0.3), w = randn(size_t(d), 2, 0.3, 1.0),
                          b = randn(size_t(d), 3, 0.3), R = randn(size_t(N) * d, 4);
      std::vector<double> y(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
      auto loss = [&] {
        lm_ops::norm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                             bias ? b.data() : nullptr, kind, N, d, 1e-5);
        return dot(R, y);
      };
      loss();
      std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
      lm_ops::norm_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, R.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), kind, N, d);
      const std::string what = "norm " + std::to_string(int(kind)) + (bias ? " with bias" : "");
      expect_close(dx, central_difference(loss, x), what + " dx");
      expect_close(dw, central_difference(loss, w), what + " dw");
      if (bias) expect_close(db, central_difference(loss, b), what + " db");
    }
}

TEST(LmBackward, RotaryBothPairingsAndPartialAgreeWithCentralDifferences) {
  const int heads = 2, T = 5, dh = 8;
  for (RotaryPairing pairing : {RotaryPairing::Half, RotaryPairing::Adjacent})
    for (int r : {8, 4}) {
      Arch a;
      a.dh = dh, a.rotary_dim = r, a.pairing = pairing, a.rope_theta = 100;
      const lm_ops::RopeTable tab = lm_ops::rope_table(a, T);
      std::vector<double> x = randn(size_t(heads) * T * dh, 5), R = randn(x.size(), 6), y;
      auto loss = [&] {
        y = x;
        lm_ops::rope_forward(y.data(), heads, tab);
        return dot(R, y);
      };
      std::vector<double> dx = R;
      lm_ops::rope_backward(dx.data(), heads, tab);
      expect_close(dx, central_difference(loss, x),
                   std::string(pairing == RotaryPairing::Half ? "rotate_half" : "adjacent") +
                       " r=" + std::to_string(r));
      // partial: the last dh − r coordinates pass through untouched
      loss();
      for (int i = r; i < dh; i++) EXPECT_EQ(y[size_t(i)], x[size_t(i)]);
    }
}

TEST(LmBackward, GroupedQueryAttentionSumsKeyValueGradientsOverTheGroup) {
  const int H = 4, T = 6, dh = 3;
  struct C {
    int n_kv;
    double softcap;
    int window;
  };
  for (const C& c : {C{4, 0, 0}, C{2, 0, 0}, C{1, 0, 0}, C{2, 0.7, 0}, C{2, 0, 3}}) {
    std::vector<double> q = randn(size_t(H) * T * dh, 7), k = randn(size_t(c.n_kv) * T * dh, 8),
                        v = randn(size_t(c.n_kv) * T * dh, 9), R = randn(size_t(H) * T * dh, 10);
    std::vector<double> z(R.size()), A(size_t(H) * T * T), Sc(A.size());
    const double scale = 1 / std::sqrt(3.0);
    auto loss = [&] {
      lm_ops::attention_forward(z.data(), A.data(), Sc.data(), q.data(), k.data(), v.data(), H, c.n_kv, T, dh,
                                scale, c.softcap, c.window);
      return dot(R, z);
    };
    loss();
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    lm_ops::attention_backward(dq.data(), dk.data(), dv.data(), R.data(), A.data(), Sc.data(), q.data(),
                               k.data(), v.data(), H, c.n_kv, T, dh, scale, c.softcap);
    const std::string what = "attention H=4 n_kv=" + std::to_string(c.n_kv) +
                             " softcap=" + std::to_string(c.softcap) + " window=" + std::to_string(c.window);
    expect_close(dq, central_difference(loss, q), what + " dq");
    expect_close(dk, central_difference(loss, k), what + " dk");
    expect_close(dv, central_difference(loss, v), what + " dv");
    if (c.window) {
      loss();
      EXPECT_EQ(A[size_t(5) * T + 2], 0.0) << "key 2 is outside query 5's window of 3";
      EXPECT_GT(A[size_t(5) * T + 3], 0.0);
    }
  }
}

TEST(LmBackward, MlpActivationsAgreeWithCentralDifferences) {
  const int n = 40;
  for (MlpKind kind : {MlpKind::SwiGLU, MlpKind::GeGLU, MlpKind::GeluTanh, MlpKind::Gelu}) {
    const bool gated = kind == MlpKind::SwiGLU || kind == MlpKind::GeGLU;
    std::vector<double> g = randn(size_t(n), 11, 2.0), up = randn(size_t(n), 12), R = randn(size_t(n), 13),
                        h(static_cast<size_t>(n));
    auto loss = [&] {
      lm_ops::mlp_act_forward(h.data(), g.data(), gated ? up.data() : nullptr, kind, n);
      return dot(R, h);
    };
    std::vector<double> dg(static_cast<size_t>(n)), dup(static_cast<size_t>(n));
    lm_ops::mlp_act_backward(dg.data(), gated ? dup.data() : nullptr, R.data(), g.data(),
                             gated ? up.data() : nullptr, kind, n);
    expect_close(dg, central_difference(loss, g), "mlp act " + std::to_string(int(kind)) + " dg");
    if (gated)
      expect_close(dup, central_difference(loss, up), "mlp act " + std::to_string(int(kind)) + " dup");
  }
}

// A tiny config of each family: d 16, 4 query heads, vocab 24, 16 positions; windows of 3 where the
// family has them, soft-caps low enough to bend the scores.
nlohmann::json tiny(const std::string& type) {
  nlohmann::json j = default_config(type, "tiny");
  if (type == "gpt2") {
    j["n_embd"] = 16, j["n_head"] = 4, j["vocab_size"] = 24, j["n_positions"] = 16, j["n_ctx"] = 16;
    return j;
  }
  j["vocab_size"] = 24, j["hidden_size"] = 16, j["max_position_embeddings"] = 16;
  if (type == "gpt_neo") {
    j["num_heads"] = 4, j["window_size"] = 3;
    return j;
  }
  j["num_attention_heads"] = 4, j["intermediate_size"] = 24;
  if (type == "gpt_neox") j["rotary_pct"] = 0.5;
  if (type == "mistral" || type == "gemma2" || type == "phi3") j["sliding_window"] = 3;
  if (type == "gemma" || type == "gemma2") j["head_dim"] = 6;  // not d / H
  if (type == "gemma2")
    j["query_pre_attn_scalar"] = 5, j["attn_logit_softcapping"] = 0.8, j["final_logit_softcapping"] = 0.6;
  if (type == "qwen2") j["num_key_value_heads"] = 1;
  return j;
}

std::vector<double> random_params(const LmLayout& L, uint64_t seed) {
  return lm_gradcheck_params(L, seed);
}

void check_whole_model(const LmLayout& L, const std::string& what) {
  const std::vector<double> p0 = random_params(L, 21);
  const std::vector<int> ids = {3, 17, 5, 3, 17, 9, 0, 23};
  const std::vector<int> targets = {17, 5, -1, 17, 9, 2, 23, 1};
  LmActs<double> acts;
  std::vector<double> p = p0;
  auto loss = [&] {
    lm_train_forward(L, p.data(), ids, acts);
    return lm_cross_entropy(acts.logits, targets, L.arch.vocab_size);
  };
  std::vector<double> g(size_t(L.size), 0.0);
  lm_train_forward(L, p.data(), ids, acts);
  const double l = lm_train_backward(L, p.data(), targets, acts, g.data());
  EXPECT_NEAR(l, loss(), 1e-12);
  const std::vector<double> num = central_difference(loss, p, 1e-6);
  // Per tensor, so a failure names the piece.
  double scale = 0;
  for (double x : num) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < L.table.size(); i++) {
    const TensorSpec& s = L.table[i];
    int64_t n = 1;
    for (int64_t x : s.shape) n *= x;
    double err = 0, big = 0;
    for (int64_t j = 0; j < n; j++) {
      err = std::max(err, std::abs(g[size_t(L.offset[i] + j)] - num[size_t(L.offset[i] + j)]));
      big = std::max(big, std::abs(num[size_t(L.offset[i] + j)]));
    }
    EXPECT_LE(err, 1e-8 + 1e-6 * scale) << what << ": " << s.name << " (largest |grad| " << big << ")";
    EXPECT_GT(big, 0.0) << what << ": " << s.name << " has no gradient";
  }
}

TEST(LmBackward, TinyLlamaWithGqaAndRotaryAgreesWithCentralDifferences) {
  nlohmann::json c = tiny("llama");
  c["num_key_value_heads"] = 2;
  const LmLayout L = lm_layout(arch_from_config(c, "test"));
  ASSERT_EQ(L.arch.H, 4);
  ASSERT_EQ(L.arch.n_kv, 2);
  ASSERT_TRUE(L.arch.rotary());
  check_whole_model(L, "llama GQA 4/2");
  // Meta's adjacent pairing (GGUF), tied embeddings and biases on every projection.
  LmLayout adj = L;
  adj.arch.pairing = RotaryPairing::Adjacent;
  check_whole_model(adj, "llama adjacent pairs");
  c["tie_word_embeddings"] = true, c["attention_bias"] = true, c["mlp_bias"] = true;
  check_whole_model(lm_layout(arch_from_config(c, "test")), "llama tied, biases");
}

TEST(LmBackward, EveryFamilyAgreesWithCentralDifferences) {
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    check_whole_model(lm_layout(arch_from_config(tiny(type), type)), type);
  }
}

// The training forward is run() (lm_forward.cpp) written out again; on the same weights the logits agree.
TEST(LmBackward, TrainingForwardAgreesWithTheFamilyForward) {
  const fs::path dir = fs::temp_directory_path() / ("qkv_lm_backward_" + std::to_string(::getpid()));
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    const nlohmann::json c = tiny(type);
    LmParams p = init_lm(c, 5);
    // random, not the init's identity norms, so every weight matters
    const std::vector<double> r = random_params(p.layout, 33);
    for (size_t i = 0; i < r.size(); i++) p.params[i] = float(r[i]);
    const Model m = lm_view(p);
    const std::vector<int> ids = {1, 7, 22, 7, 3, 14, 1, 7, 0, 9};
    RunState st;
    const std::vector<float> want = run(m, ids, st);
    LmActs<float> acts;
    const std::vector<float>& got = lm_train_forward(p.layout, p.params.data(), ids, acts);
    ASSERT_EQ(got.size(), want.size());
    double err = 0, big = 0;
    for (size_t i = 0; i < got.size(); i++) {
      err = std::max(err, double(std::abs(got[i] - want[i])));
      big = std::max(big, double(std::abs(want[i])));
    }
    EXPECT_LE(err, 2e-5 * std::max(1.0, big)) << type << ": largest |logit| " << big;
    // and through a saved checkpoint loaded the ordinary way (the family's names and layout)
    fs::create_directories(dir / type);
    save_lm(p, (dir / type / "model.safetensors").string());
    std::ofstream((dir / type / "config.json").string()) << c.dump();
    const Model loaded = load_lm((dir / type).string());
    RunState st2;
    const std::vector<float> again = run(loaded, ids, st2);
    EXPECT_EQ(again, want) << type << ": the saved checkpoint computes something else";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv

// Gradients with respect to activations (lm_grad.hpp) against float64 PyTorch autograd at every hook point
// of every family (tests/reference/make_grad_fixtures.py: a probe added at each hook of the reference
// forward, the rest computed from it), and the metrics' seeds against their formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "model/family_cases.hpp"
#include "qkv/error.hpp"
#include "qkv/io/safetensors.hpp"
#include "qkv/lm_grad.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

using family_cases::Case;

// fp32 backward through two small layers against float64: each gradient within this share of its
// largest magnitude. A wrong convention (a transposed head layout, the pattern's masked entries dropped,
// the soft-cap's derivative missing, ∂ through the wrong norm input) is off by 1e-2 or more.
constexpr double kTol = 5e-5;

// GRAD_METRIC of make_grad_fixtures.py: the mean next-token loss at every position but the last plus
// logit[13, 57] − logit[13, 14].
LogitMetric fixture_metric(const std::vector<int>& ids) {
  const LogitMetric loss = next_token_loss_metric(ids), diff = logit_diff_metric(57, 14, 13);
  LogitMetric m;
  m.fn = [loss, diff](const std::vector<float>& logits, int T, int V, std::vector<float>& dl) {
    return loss.fn(logits, T, V, dl) + diff.fn(logits, T, V, dl);
  };
  return m;
}

TEST(ActivationGrads, EveryHookMatchesFloat64Autograd) {
  const auto all = family_cases::cases();
  ASSERT_GE(all.size(), 9u);
  std::set<std::string> families;
  for (const Case& c : all) {
    SCOPED_TRACE(c.name);
    const std::string grads = family_cases::kFx + c.name + "/grads.safetensors";
    ASSERT_TRUE(fs::exists(grads)) << "run tests/reference/make_grad_fixtures.py";
    const std::string dir = family_cases::make_checkpoint(c, "grads");
    const Model m = load_lm(dir);
    families.insert(m.arch.model_type);
    const GradRun r = run_with_grads(grad_params(m), c.tokens, fixture_metric(c.tokens));
    const auto want = io::SafetensorsFile::open(grads);
    EXPECT_EQ(r.grads.size() + 1, want.tensors().size()) << "qkv and the reference name different hook sets";
    double worst = 0;
    std::string worst_name;
    for (const auto& t : want.tensors()) {
      std::vector<float> w(size_t(t.numel()));
      want.read_f32(t, w.data());
      if (t.name == "metric") {
        EXPECT_NEAR(r.value, w[0], 1e-5 * std::abs(w[0]));
        continue;
      }
      const auto it = r.grads.find(t.name);
      if (it == r.grads.end()) {
        ADD_FAILURE() << "qkv has no gradient at " << t.name;
        continue;
      }
      ASSERT_EQ(it->second.shape(), t.shape) << t.name;
      double scale = 0, err = 0;
      for (size_t i = 0; i < w.size(); i++) {
        scale = std::max(scale, double(std::abs(w[i])));
        err = std::max(err, std::abs(double(it->second[int64_t(i)]) - double(w[i])));
      }
      ASSERT_GT(scale, 0) << t.name << ": a zero reference gradient checks nothing";
      EXPECT_LE(err / scale, kTol) << t.name << ": max |qkv - autograd| = " << err << " of max " << scale;
      if (err / scale > worst) worst = err / scale, worst_name = t.name;
    }
    std::printf("  %-24s %zu gradients, worst %.2e (%s)\n", c.name.c_str(), r.grads.size(), worst,
                worst_name.c_str());
    fs::remove_all(dir);
  }
  EXPECT_EQ(families.size(), supported_model_types().size()) << "a family without a gradient fixture";
}

// Parameter gradients on or off, the activations' gradients are the same numbers; and the training
// backward's parameter gradients do not change because a sink listens.
TEST(ActivationGrads, ParameterGradientsDoNotChangeThem) {
  const Case c = family_cases::cases().front();
  const std::string dir = family_cases::make_checkpoint(c, "grads_params");
  const LmParams p = grad_params(load_lm(dir));
  LmActs<float> acts;
  lm_train_forward(p.layout, p.params.data(), c.tokens, acts);
  const int T = acts.T, V = p.arch().vocab_size;
  std::vector<float> dl(size_t(T) * V, 0.0f);
  fixture_metric(c.tokens).fn(acts.logits, T, V, dl);
  std::map<std::string, std::vector<float>> with, without;
  auto sink_into = [](std::map<std::string, std::vector<float>>& out) {
    ActGradSink<float> s;
    s.fn = [&out](const std::string& n, const float* d, const std::vector<int64_t>& shape, bool) {
      out[n].assign(d, d + Tensor::count(shape));
    };
    return s;
  };
  const ActGradSink<float> s1 = sink_into(with), s2 = sink_into(without);
  std::vector<float> G(size_t(p.layout.size), 0.0f), G2(G.size(), 0.0f);
  lm_backward(p.layout, p.params.data(), dl, acts, G.data(), &s1);
  lm_backward(p.layout, p.params.data(), dl, acts, static_cast<float*>(nullptr), &s2);
  lm_backward(p.layout, p.params.data(), dl, acts, G2.data(), static_cast<const ActGradSink<float>*>(nullptr));
  EXPECT_EQ(with, without);
  EXPECT_EQ(G, G2);
  EXPECT_GT(with.size(), 20u);
  fs::remove_all(dir);
}

// llm.c stores GPT-2's matrices [out, in], the family layout [in, out]: the trainable copy transposes them,
// so the same weights give the same gradients from either file.
TEST(ActivationGrads, LlmcAndSafetensorsGiveTheSameGradients) {
  const std::string fx = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/";
  const Model st = load_lm(fx + "tiny"), bin = load_lm(fx + "tiny.bin");
  const std::vector<int> ids = {3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57};
  const GradRun a = run_with_grads(grad_params(st), ids, next_token_loss_metric(ids));
  const GradRun b = run_with_grads(grad_params(bin), ids, next_token_loss_metric(ids));
  EXPECT_EQ(a.value, b.value);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (const auto& [name, t] : a.grads) EXPECT_EQ(t.vec(), b.grads.at(name).vec()) << name;
}

TEST(ActivationGrads, MetricSeeds) {
  const int T = 3, V = 4;
  const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 1, -1, 2, 0, 5, 4, 3, 2};
  std::vector<float> dl(12, 0.0f);
  EXPECT_DOUBLE_EQ(logit_diff_metric(2, 0, -1).fn(logits, T, V, dl), 3.0 - 5.0);
  EXPECT_EQ(dl, (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 1, 0}));
  // the loss of ids {0, 2, 1}: positions 0 and 1 predict 2 and 1
  std::fill(dl.begin(), dl.end(), 0.0f);
  const double loss = next_token_loss_metric({0, 2, 1}).fn(logits, T, V, dl);
  double want = 0;
  for (auto [p, y] : {std::pair{0, 2}, {1, 1}}) {
    double z = 0;
    for (int j = 0; j < V; j++) z += std::exp(double(logits[size_t(p * V + j)]));
    want += (std::log(z) - logits[size_t(p * V + y)]) / 2;
    for (int j = 0; j < V; j++)
      EXPECT_NEAR(dl[size_t(p * V + j)], (std::exp(double(logits[size_t(p * V + j)])) / z - (j == y)) / 2, 1e-7);
  }
  EXPECT_NEAR(loss, want, 1e-12);
  for (int j = 0; j < V; j++) EXPECT_EQ(dl[size_t(2 * V + j)], 0.0f) << "the last position predicts nothing";
  EXPECT_THROW(logit_diff_metric(2, 0, 3).fn(logits, T, V, dl), Error);
  EXPECT_THROW(logit_diff_metric(2, 0, -4).fn(logits, T, V, dl), Error);
  EXPECT_THROW(logit_diff_metric(4, 0).fn(logits, T, V, dl), Error);
  EXPECT_THROW(next_token_loss_metric({0, 2, 1}, {2}), Error);
  EXPECT_THROW(next_token_loss_metric({0}), Error);
}

}  // namespace
}  // namespace qkv

// Every model family against an independent float64 PyTorch forward
// (tests/reference/make_family_fixtures.py): each case's checkpoint is remade exactly as the script
// made it (`qkv init --arch …`, deterministic), run through qkv's one forward, and every hook and the
// logits compared.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/io/safetensors.hpp"
#include "qkv/lm.hpp"
#include "qkv/lm_train.hpp"
#include "model/family_cases.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

// fp32 against float64, two small layers: a few ulp per op compounded over ~15 ops stays below 5e-6
// of the tensor's largest magnitude; a wrong convention (raw row, dropped bias, w vs 1 + w, wrong
// rotary pairing or window) is off by 1e-2 or more.
constexpr double kTol = 1e-5;

using family_cases::Case;
using family_cases::cases;
using family_cases::kFx;
using family_cases::make_checkpoint;

TEST(Families, EveryHookAndTheLogitsMatchTheFloat64Reference) {
  const auto all = cases();
  ASSERT_GE(all.size(), 9u) << "fixtures missing: run tests/reference/make_family_fixtures.py";
  std::set<std::string> families;
  for (const Case& c : all) {
    SCOPED_TRACE(c.name);
    const std::string dir = make_checkpoint(c);
    const Model m = load_lm(dir);
    families.insert(m.arch.model_type);
    const auto cache = run_with_cache(m, c.tokens);
    const auto want = io::SafetensorsFile::open(kFx + c.name + "/expected.safetensors");
    EXPECT_EQ(cache.size(), want.tensors().size()) << "qkv and the reference name different hook sets";
    double worst = 0;
    std::string worst_name;
    for (const auto& t : want.tensors()) {
      const auto it = cache.find(t.name);
      if (it == cache.end()) {
        ADD_FAILURE() << "qkv has no hook " << t.name;
        continue;
      }
      const Tensor& got = it->second;
      ASSERT_EQ(got.shape(), t.shape) << t.name;
      std::vector<float> w(size_t(t.numel()));
      want.read_f32(t, w.data());
      double scale = 0, err = 0;
      for (float x : w)
        if (std::isfinite(x)) scale = std::max(scale, double(std::abs(x)));
      for (size_t i = 0; i < w.size(); i++) {
        if (std::isinf(w[i])) {
          ASSERT_EQ(got[int64_t(i)], w[i]) << t.name << " at " << i << ": masked entries are -inf";
          continue;
        }
        err = std::max(err, std::abs(double(got[int64_t(i)]) - double(w[i])));
      }
      const double rel = scale > 0 ? err / scale : err;
      EXPECT_LE(rel, kTol) << t.name << ": max |qkv - reference| = " << err << " of max |reference| " << scale;
      if (rel > worst) worst = rel, worst_name = t.name;
    }
    std::printf("  %-24s %zu hooks, worst %.2e (%s)\n", c.name.c_str(), cache.size(), worst, worst_name.c_str());
    fs::remove_all(dir);
  }
  EXPECT_EQ(families.size(), supported_model_types().size()) << "a family without a fixture";
}

// The fused path (no hooks asking for the pattern) and the materialised one give the same logits.
TEST(Families, FusedAttentionAgreesWithTheMaterialisedPath) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::string dir = make_checkpoint(c);
    const Model m = load_lm(dir);
    RunState st;
    const std::vector<float> fast = run(m, c.tokens, st);
    const auto cache = run_with_cache(m, c.tokens);
    const Tensor& slow = cache.at("logits");
    double scale = 0, err = 0;
    for (size_t i = 0; i < fast.size(); i++) {
      scale = std::max(scale, double(std::abs(slow[int64_t(i)])));
      err = std::max(err, double(std::abs(fast[i] - slow[int64_t(i)])));
    }
    EXPECT_LE(err, 2e-6 * scale);
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace qkv

namespace qkv {
namespace {

// GPT-2 through run() (materialised attention) and through the training forward (lm_ops) on the bundled
// model: the same ops in the same order but GELU, which run() takes vectorised (rowops.hpp, x / (1 + e^{-2y}))
// and the training forward as 0.5·x·(1 + tanh(y)) (ops.hpp, kept for the bundled model's byte-exact
// retraining): the logits agree within 1e-6 of their largest magnitude.
TEST(Families, Gpt2RunMatchesTheTrainingForward) {
  const std::string path = std::string(QKV_SOURCE_DIR) + "/models/induction";
  const Model m = load_lm(path);
  std::ifstream cf(path + "/config.json");
  const LmParams p = lm_params_from(m, nlohmann::json::parse(cf));
  std::vector<int> ids;
  for (int i = 0; i < 40; i++) ids.push_back((i * 37 + 11) % m.arch.vocab_size);
  const auto cache = run_with_cache(m, ids);
  LmActs<float> acts;
  const std::vector<float>& train_logits = lm_train_forward(p.layout, p.params.data(), ids, acts);
  const Tensor& logits = cache.at("logits");
  ASSERT_EQ(size_t(logits.numel()), train_logits.size());
  float big = 0, worst = 0;
  for (int64_t i = 0; i < logits.numel(); i++) {
    big = std::max(big, std::fabs(train_logits[size_t(i)]));
    worst = std::max(worst, std::fabs(logits[i] - train_logits[size_t(i)]));
  }
  EXPECT_LE(worst, 1e-6f * big) << "largest |logit| " << big;
  EXPECT_GT(big, 1.0f);
}

}  // namespace
}  // namespace qkv

namespace qkv {
namespace {

// Incremental decoding: tokens fed one at a time through a K/V cache give the full forward's logits for
// every family (rotary offsets, windows, GQA); the same steps without the cache do not.
TEST(Families, KvCacheDecodingEqualsTheFullForward) {
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    const Model m = family_cases::random_tiny(type, "kv", 11);
    std::vector<int> ids;
    for (int i = 0; i < 24; i++) ids.push_back((i * 131 + 7) % m.arch.vocab_size);
    RunState full_st;
    const std::vector<float> full = run(m, ids, full_st);
    const int V = m.arch.vocab_size;
    KvCache cache;
    RunState st;
    RunOptions with;
    with.cache = &cache;
    double err = 0, scale = 0, uncached = 0;
    // the first 3 tokens at once (a prefill), then one at a time
    run(m, {ids[0], ids[1], ids[2]}, st, with);
    for (size_t t = 3; t < ids.size(); t++) {
      const std::vector<float> step = run(m, {ids[t]}, st, with);
      RunState st2;
      const std::vector<float> alone = run(m, {ids[t]}, st2);
      for (int v = 0; v < V; v++) {
        const float f = full[t * V + size_t(v)];
        err = std::max(err, double(std::abs(step[size_t(v)] - f)));
        uncached = std::max(uncached, double(std::abs(alone[size_t(v)] - f)));
        scale = std::max(scale, double(std::abs(f)));
      }
    }
    EXPECT_EQ(cache.len, int(ids.size()));
    EXPECT_LE(err, 1e-5 * scale);
    EXPECT_GT(uncached, 1e-2 * scale) << "without the cache a lone token cannot know its context";
    RunOptions too_long = with;
    std::vector<int> many(size_t(m.arch.n_ctx), 1);
    EXPECT_THROW(run(m, many, st, too_long), Error) << "cached + new beyond the context";
  }
}

// A prompt's prefill into an empty cache attends over its own rows, as a run without a cache does, through
// the same kernel (the fused one, unless the layer needs the materialised path): the same logits bit for
// bit, on every family; and the cache holds the prompt.
TEST(Families, PrefillIntoAnEmptyCacheIsTheUncachedRun) {
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    const Model m = family_cases::random_tiny(type, "pre", 19);
    std::vector<int> ids;
    for (int i = 0; i < 30; i++) ids.push_back((i * 61 + 11) % m.arch.vocab_size);
    RunState a, b;
    const std::vector<float> plain = run(m, ids, a);
    KvCache cache;
    RunOptions o;
    o.cache = &cache;
    const std::vector<float>& cached = run(m, ids, b, o);
    ASSERT_EQ(cached.size(), plain.size());
    EXPECT_EQ(0, std::memcmp(cached.data(), plain.data(), plain.size() * sizeof(float)));
    EXPECT_EQ(cache.len, int(ids.size()));
  }
}

// A last-position run that extends a cache (a second prompt after the first) trims its last block too,
// its queries attending over the cache at their offset: on every family, the same logits bit for bit as the
// untrimmed run (a hook on the last block's MLP) and, to rounding, as the uncached run over both prompts.
TEST(Families, LastOnlyExtendingACacheTrimsTheLastBlockToo) {
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    const Model m = family_cases::random_tiny(type, "extend", 23);
    const int V = m.arch.vocab_size, L = m.arch.n_layer;
    std::vector<int> ids;
    for (int i = 0; i < 32; i++) ids.push_back((i * 71 + 7) % V);
    const std::vector<int> first(ids.begin(), ids.begin() + 12), second(ids.begin() + 12, ids.end());
    Hooks h;
    h.wants = [&](const std::string& n) { return n == "blocks." + std::to_string(L - 1) + ".hook_mlp_out"; };
    h.fn = [](const std::string&, ActView) {};
    std::vector<std::vector<float>> got;
    for (const Hooks* hooks : std::initializer_list<const Hooks*>{nullptr, &h}) {
      KvCache cache;
      RunState st;
      RunOptions o;
      o.cache = &cache;
      o.last_only = true;
      run(m, first, st, o);
      o.hooks = hooks;
      got.push_back(run(m, second, st, o));
      EXPECT_EQ(cache.len, int(ids.size()));
    }
    ASSERT_EQ(got[0].size(), size_t(V));
    EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), size_t(V) * sizeof(float)));
    RunState fst;
    const std::vector<float> full = run(m, ids, fst);
    double err = 0, scale = 0;
    for (int v = 0; v < V; v++) {
      err = std::max(err, double(std::abs(got[0][size_t(v)] - full[size_t(31) * V + v])));
      scale = std::max(scale, double(std::abs(full[size_t(31) * V + v])));
    }
    EXPECT_LE(err, 1e-5 * scale);
  }
}

// A run that wants the last position's logits (last_only, what `qkv run`, the bench and generation's prefill
// ask for) runs the last block on each sequence's last 9 rows alone from its queries on (trims_block,
// trims_attention): on every family, one sequence or a batch of two, its logits are the full run's last
// rows to rounding and, bit for bit, those of the untrimmed last_only run (a hook on that block's MLP keeps
// every row) and of the run trimmed past the attention output only (a hook on the attention output), and
// the residual it leaves is the last 9 rows' (so the trim did happen).
TEST(Families, LastOnlyRunsTheLastBlockOnTheLastRowsAlone) {
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    const Model m = family_cases::random_tiny(type, "last", 17);
    const int T = 20, V = m.arch.vocab_size, d = m.arch.d, L = m.arch.n_layer;
    std::vector<int> ids;
    for (int i = 0; i < 2 * T; i++) ids.push_back((i * 89 + 3) % V);
    const std::vector<int> first(ids.begin(), ids.begin() + T), second(ids.begin() + T, ids.end());
    const std::string post = "blocks." + std::to_string(L - 1) + ".hook_resid_post";
    const auto full = run_with_cache(m, first, [&](const std::string& n) { return n == post; }, false);
    RunState fst;
    const std::vector<float> full2 = run(m, second, fst);
    const auto near = [&](const float* got, const float* want, int n) {
      double err = 0, scale = 0;
      for (int i = 0; i < n; i++) {
        err = std::max(err, double(std::abs(got[i] - want[i])));
        scale = std::max(scale, double(std::abs(want[i])));
      }
      return err <= 2e-6 * scale;
    };
    const float* want = full.at("logits").data() + size_t(T - 1) * V;
    RunState st;
    RunOptions o;
    o.last_only = true;
    const std::vector<float> last = run(m, first, st, o);
    ASSERT_EQ(last.size(), size_t(V));
    EXPECT_TRUE(near(last.data(), want, V));
    const float* resid = full.at(post).data();
    const int kept = 9;
    EXPECT_TRUE(near(st.x.data() + size_t(kept - 1) * d, resid + size_t(T - 1) * d, d)) << "the last rows left";
    EXPECT_TRUE(near(st.x.data(), resid + size_t(T - kept) * d, d));
    EXPECT_FALSE(near(st.x.data(), resid, d));
    RunOptions b = o;
    b.batch = 2;
    const std::vector<float> both = run(m, ids, st, b);
    ASSERT_EQ(both.size(), size_t(2 * V));
    EXPECT_TRUE(near(both.data(), want, V));
    EXPECT_TRUE(near(both.data() + V, full2.data() + size_t(T - 1) * V, V));
    // asked for, the last block's MLP output comes for every row
    Hooks h;
    std::vector<int64_t> shape;
    h.wants = [&](const std::string& n) { return n == "blocks." + std::to_string(L - 1) + ".hook_mlp_out"; };
    h.fn = [&](const std::string&, ActView v) { shape = v.shape; };
    RunOptions hooked = o;
    hooked.hooks = &h;
    const std::vector<float> last_hooked = run(m, first, st, hooked);
    if (!m.arch.attn_only()) {
      EXPECT_EQ(shape, (std::vector<int64_t>{T, d}));
    }
    EXPECT_EQ(0, std::memcmp(last_hooked.data(), last.data(), size_t(V) * sizeof(float)));
    // a hook on the attention's output: every row's, then the MLP on the last rows alone
    h.wants = [&](const std::string& n) { return n == "blocks." + std::to_string(L - 1) + ".hook_attn_out"; };
    const std::vector<float> last_mlp = run(m, first, st, hooked);
    EXPECT_EQ(shape, (std::vector<int64_t>{T, d}));
    EXPECT_EQ(0, std::memcmp(last_mlp.data(), last.data(), size_t(V) * sizeof(float)));
    if (!m.arch.attn_only()) {
      EXPECT_TRUE(near(st.x.data(), resid + size_t(T - kept) * d, d));
    }
  }
}

// A run resumed at block l from the full run's resid_pre there (what patching does for a patch at l)
// gives the full run's activations and logits bit for bit, on every family and at every block; a
// resumed run without the residual, or with a cache, is a usage error.
TEST(Families, StartAtLayerFromTheCachedResidualIsBitIdentical) {
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    const Model m = family_cases::random_tiny(type, "start", 13);
    std::vector<int> ids;
    for (int i = 0; i < 20; i++) ids.push_back((i * 97 + 5) % m.arch.vocab_size);
    const auto full = run_with_cache(m, ids);
    for (int l = 1; l < m.arch.n_layer; l++) {
      RunState st;
      RunOptions o;
      o.materialise_all = true;
      o.start_at_layer = l;
      o.resid_pre = full.at("blocks." + std::to_string(l) + ".hook_resid_pre").data();
      const std::vector<float> logits = run(m, ids, st, o);
      const Tensor& want = full.at("logits");
      ASSERT_EQ(logits.size(), size_t(want.numel()));
      EXPECT_EQ(0, std::memcmp(logits.data(), want.data(), logits.size() * sizeof(float))) << "from block " << l;
    }
    RunState st;
    RunOptions bad;
    bad.start_at_layer = 1;
    EXPECT_THROW(run(m, ids, st, bad), Error);  // no residual given
    bad.start_at_layer = m.arch.n_layer;
    EXPECT_THROW(run(m, ids, st, bad), Error);  // no such block
  }
}

}  // namespace
}  // namespace qkv

// GPT-2 through the one engine against float64 PyTorch fixtures (tests/reference/make_fixtures.py): every
// hook of run(), the logits, and the training backward's loss and every parameter gradient, for each
// checkpoint format GPT-2 comes in (Hugging Face directory, transformer. prefix, llm.c fp32/bf16, F16).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/io/npy.hpp"
#include "qkv/io/safetensors.hpp"
#include "qkv/lm.hpp"
#include "qkv/lm_train.hpp"
#include "qkv/attention.hpp"

namespace qkv {
namespace {

const std::string kFx = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/";

// Tolerance: fp32 forward of a 2-layer model whose activations are O(1)-O(10): rounding of a few ulp
// per op, compounded over ~10 ops and sums of ≤ 96 terms, stays below 5e-6 of the tensor's largest
// magnitude. Errors bigger than that are bugs (a dropped bias or a raw row are off by 1e-1 or more).
constexpr double kActTol = 5e-6;

std::vector<int> fixture_tokens(const std::string& dir) {
  const io::NpyArray t = io::read_npy(kFx + dir + "/tokens.npy");
  return std::vector<int>(t.data.begin(), t.data.end());
}

// max |got − want| / max |want|, with −inf required to match −inf exactly.
double scaled_error(const Tensor& got, const io::NpyArray& want, const std::string& name) {
  EXPECT_EQ(got.shape(), want.shape) << name;
  if (got.shape() != want.shape) return INFINITY;
  double scale = 0, err = 0;
  for (double w : want.data)
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < want.data.size(); i++) {
    const double w = want.data[i], g = got[int64_t(i)];
    if (std::isinf(w)) {
      EXPECT_EQ(g, w) << name << " at " << i;
      continue;
    }
    err = std::max(err, std::abs(g - w));
  }
  return err / std::max(scale, 1e-30);
}

// min_files: 12 hooks per block (10 attention-only) + ln_final + logits, or just the logits.
void expect_matches_fixture(const Model& m, const std::string& expected_dir, int min_files) {
  const std::map<std::string, Tensor> cache = run_with_cache(m, fixture_tokens(expected_dir));
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kFx + expected_dir)) {
    const std::string file = entry.path().filename().string();
    if (entry.is_directory() || file == "tokens.npy" || file == "loss.npy") continue;
    const std::string hook = file.substr(0, file.size() - 4);
    ASSERT_TRUE(cache.count(hook)) << "no hook named " << hook;
    EXPECT_LT(scaled_error(cache.at(hook), io::read_npy(entry.path().string()), hook), kActTol) << hook;
    compared++;
  }
  EXPECT_GE(compared, min_files);
}

TEST(ModelFidelity, HuggingFaceDirectoryWithBuffersAndOddDataOffset) {
  const Model m = load_lm(kFx + "tiny");
  expect_matches_fixture(m, "tiny_expected", 2 * 12 + 2);
}

TEST(ModelFidelity, TransformerPrefixAndLmHead) {
  expect_matches_fixture(load_lm(kFx + "tiny_prefixed"), "tiny_expected", 2 * 12 + 2);
}

TEST(ModelFidelity, LlmcFp32) {
  const Model m = load_lm(kFx + "tiny.bin");
  EXPECT_NE(m.source.find("llm.c"), std::string::npos);
  expect_matches_fixture(m, "tiny_expected", 2 * 12 + 2);
}

TEST(ModelFidelity, LlmcBf16AndSafetensorsF16) {
  expect_matches_fixture(load_lm(kFx + "tiny_bf16.bin"), "tiny_bf16_expected", 1);
  expect_matches_fixture(load_lm(kFx + "tiny_f16"), "tiny_f16_expected", 1);
}

TEST(ModelFidelity, AttentionOnly) {
  const Model m = load_lm(kFx + "tiny_attn_only");
  EXPECT_TRUE(m.arch.attn_only());
  expect_matches_fixture(m, "tiny_attn_only_expected", 2 * 10 + 2);
}

// Gradients: fp32 backward against PyTorch float64 autograd. Tolerance relative to each gradient's
// largest magnitude; 1e-4 leaves room for fp32 cancellation in the softmax/LayerNorm Jacobians.
void expect_grads_match(const std::string& model_dir, const std::string& expected_dir) {
  const Model m = load_lm(kFx + model_dir);
  std::ifstream cf(kFx + model_dir + "/config.json");
  const LmParams p = lm_params_from(m, nlohmann::json::parse(cf));
  const std::vector<int> ids = fixture_tokens(expected_dir);
  std::vector<int> targets(ids.size(), -1);
  for (size_t t = 0; t + 1 < ids.size(); t++) targets[t] = ids[t + 1];
  LmActs<float> acts;
  lm_train_forward(p.layout, p.params.data(), ids, acts);
  std::vector<float> grads(size_t(p.layout.size));
  const double loss = lm_train_backward(p.layout, p.params.data(), targets, acts, grads.data());
  EXPECT_NEAR(loss, io::read_npy(kFx + expected_dir + "/loss.npy").data.at(0), 1e-5);
  for (size_t k = 0; k < p.layout.table.size(); k++) {
    const TensorSpec& s = p.layout.table[k];
    const io::NpyArray want = io::read_npy(kFx + expected_dir + "/grads/" + s.name + ".npy");
    ASSERT_EQ(want.shape, s.shape) << s.name;
    double scale = 0, err = 0;
    for (size_t i = 0; i < want.data.size(); i++) {
      scale = std::max(scale, std::abs(want.data[i]));
      err = std::max(err, std::abs(double(grads[size_t(p.layout.offset[k]) + i]) - want.data[i]));
    }
    EXPECT_LT(err / std::max(scale, 1e-30), 1e-4) << s.name << " (max |grad| " << scale << ")";
  }
}

TEST(ModelGradients, FullModelMatchesPyTorch) { expect_grads_match("tiny", "tiny_expected"); }
TEST(ModelGradients, AttentionOnlyMatchesPyTorch) { expect_grads_match("tiny_attn_only", "tiny_attn_only_expected"); }

// The core attention sublayer alone, against PyTorch: output, trace and gradients.
TEST(SublayerFidelity, ForwardTraceAndBackwardMatchPyTorch) {
  auto rd = [](const std::string& n) { return io::read_npy(kFx + "sublayer/" + n + ".npy"); };
  auto f32 = [](const io::NpyArray& a) { return std::vector<float>(a.data.begin(), a.data.end()); };
  const auto x = f32(rd("x")), lw = f32(rd("ln_1_weight")), lb = f32(rd("ln_1_bias")), W = f32(rd("c_attn_weight")),
             b = f32(rd("c_attn_bias")), WO = f32(rd("c_proj_weight")), bO = f32(rd("c_proj_bias")),
             dout = f32(rd("dout"));
  const auto xs = rd("x").shape, qs = rd("q").shape;
  const AttentionShape s{int(xs[0]), int(xs[1]), int(qs[0])};
  AttentionParams<float> p{lw.data(), lb.data(), W.data(), b.data(), WO.data(), bO.data()};
  AttentionCache<float> c;
  std::vector<float> out(x.size());
  attention_sublayer_forward(out.data(), x.data(), p, s, c);
  auto close = [](const std::vector<float>& got, const io::NpyArray& want, const char* name, double tol) {
    ASSERT_EQ(got.size(), want.data.size()) << name;
    double scale = 0, err = 0;
    for (size_t i = 0; i < got.size(); i++) {
      scale = std::max(scale, std::abs(want.data[i]));
      err = std::max(err, std::abs(double(got[i]) - want.data[i]));
    }
    EXPECT_LT(err / scale, tol) << name;
  };
  close(out, rd("out"), "out", kActTol);
  close(c.u, rd("u"), "u", kActTol);
  close(c.q, rd("q"), "q", kActTol);
  close(c.k, rd("k"), "k", kActTol);
  close(c.v, rd("v"), "v", kActTol);
  close(c.S, rd("S"), "S (unmasked)", kActTol);
  close(c.A, rd("A"), "A", kActTol);
  close(c.z, rd("z"), "z", kActTol);
  std::vector<float> dx(x.size()), dlw(lw.size()), dlb(lb.size()), dW(W.size()), db(b.size()), dWO(WO.size()),
      dbO(bO.size());
  AttentionGrads<float> g{dlw.data(), dlb.data(), dW.data(), db.data(), dWO.data(), dbO.data()};
  attention_sublayer_backward(dx.data(), g, dout.data(), x.data(), p, s, c);
  close(dx, rd("dx"), "dx", 1e-5);
  close(dlw, rd("d_ln_1_weight"), "d_ln_1_weight", 1e-5);
  close(dlb, rd("d_ln_1_bias"), "d_ln_1_bias", 1e-5);
  close(dW, rd("d_c_attn_weight"), "d_c_attn_weight", 1e-5);
  close(db, rd("d_c_attn_bias"), "d_c_attn_bias", 1e-5);
  close(dWO, rd("d_c_proj_weight"), "d_c_proj_weight", 1e-5);
  close(dbO, rd("d_c_proj_bias"), "d_c_proj_bias", 1e-5);
}

TEST(ModelTable, Gpt2SmallHas124439808Parameters) {
  const std::vector<TensorSpec> table = tensor_table(arch_from_config(default_config("gpt2", "small"), "GPT-2 small"));
  int64_t n = 0;
  for (const auto& s : table) {
    int64_t k = 1;
    for (int64_t x : s.shape) k *= x;
    n += k;
  }
  EXPECT_EQ(n, 124439808);
  EXPECT_EQ(table.size(), 2u + 12u * 12u + 2u);
  EXPECT_EQ(table[4].name, "h.0.attn.c_attn.weight");
  EXPECT_EQ(table[4].shape, (std::vector<int64_t>{768, 2304}));
}

// ---- bad checkpoints: a clear qkv::Error naming file and tensor ----

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("qkv_model_test_" + std::to_string(::getpid()) + "_" +
                                                     std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  static inline int counter = 0;
};

std::string error_of(const std::string& path) {
  try {
    load_lm(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Rewrites the tiny model with one change made by `edit` to its tensor list.
std::string write_variant(const TempDir& dir, const std::function<void(std::vector<io::WriteTensor>&, LmParams&)>& edit) {
  std::ifstream cf(kFx + "tiny/config.json");
  LmParams m = lm_params_from(load_lm(kFx + "tiny"), nlohmann::json::parse(cf));
  std::vector<io::WriteTensor> ts;
  for (size_t i = 0; i < m.layout.table.size(); i++)
    ts.push_back({m.layout.table[i].name, m.layout.table[i].shape, m.params.data() + m.layout.offset[i]});
  edit(ts, m);
  std::filesystem::copy_file(kFx + "tiny/config.json", dir.path / "config.json");
  io::write_safetensors((dir.path / "model.safetensors").string(), ts, {});
  return dir.path.string();
}

TEST(ModelErrors, MissingTensorNamed) {
  TempDir d;
  const auto p = write_variant(d, [](auto& ts, auto&) { ts.erase(ts.begin() + 4); });
  const std::string e = error_of(p);
  EXPECT_NE(e.find("h.0.attn.c_attn.weight is missing"), std::string::npos) << e;
}

TEST(ModelErrors, ShapeDisagreesWithConfig) {
  TempDir d;
  const auto p = write_variant(d, [](auto& ts, auto&) { ts[4].shape = {72, 24}; });
  const std::string e = error_of(p);
  EXPECT_NE(e.find("h.0.attn.c_attn.weight has shape [72, 24], expected [24, 72]"), std::string::npos) << e;
}

TEST(ModelErrors, NaNWeightsAreReported) {
  TempDir d;
  const auto p = write_variant(d, [](auto&, LmParams& m) { m.at("h.1.attn.c_proj.bias")[3] = NAN; });
  const std::string e = error_of(p);
  EXPECT_NE(e.find("h.1.attn.c_proj.bias holds NaN"), std::string::npos) << e;
}

TEST(ModelErrors, UnexpectedTensorAndMissingFiles) {
  TempDir d;
  static float junk[2] = {1, 2};
  const auto p = write_variant(d, [](auto& ts, auto&) { ts.push_back({"h.9.foo", {2}, junk}); });
  EXPECT_NE(error_of(p).find("unexpected tensor h.9.foo"), std::string::npos) << error_of(p);
  EXPECT_NE(error_of(d.path.string() + "/nope").find("no such file"), std::string::npos);
  std::filesystem::remove(d.path / "config.json");
  EXPECT_NE(error_of(d.path.string()).find("config.json"), std::string::npos);
}

TEST(ModelErrors, TokensOutOfRangeOrTooMany) {
  const Model m = load_lm(kFx + "tiny");
  EXPECT_THROW(run_with_cache(m, {1, 2, 101}), Error);
  EXPECT_THROW(run_with_cache(m, {}), Error);
  EXPECT_THROW(run_with_cache(m, std::vector<int>(17, 1)), Error);
}

TEST(ModelSave, RoundTripsThroughSafetensors) {
  TempDir d;
  std::ifstream cf(kFx + "tiny_attn_only/config.json");
  const nlohmann::json config = nlohmann::json::parse(cf);
  const LmParams m = lm_params_from(load_lm(kFx + "tiny_attn_only"), config);
  std::ofstream(d.path / "config.json") << config.dump();
  const std::string p = (d.path / "model.safetensors").string();
  save_lm(m, p, {{"note", "test"}});
  const Model back = load_lm(d.path.string());
  EXPECT_TRUE(back.arch.attn_only());
  EXPECT_EQ(lm_params_from(back, config).params, m.params);
  EXPECT_EQ(io::SafetensorsFile::open(p).metadata().at("note"), "test");
}

}  // namespace
}  // namespace qkv

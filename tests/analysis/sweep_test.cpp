// qkv sweep's pieces against slow twins: the sparse detector sums against TransformerLens's dense
// targets (head_detector.hpp), the DLA quadratic form against the logits computed outright, the
// streamed tokenizer against encoding the whole text, the token files, and the final averages.
#include "qkv/analysis/sweep.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <map>
#include <nlohmann/json.hpp>

#include "qkv/analysis/head_detector.hpp"
#include "qkv/arch.hpp"
#include "qkv/lm.hpp"
#include "qkv/error.hpp"

namespace fs = std::filesystem;
using namespace qkv;
using namespace qkv::analysis;
using namespace qkv::analysis::sweep;

namespace {

const Model& bundled() {
  static const Model m = load_lm(std::string(QKV_SOURCE_DIR) + "/models/induction");
  return m;
}

// A random checkpoint of a family (qkv init --arch TYPE --preset tiny), weights large enough that
// patterns are not uniform.
const Model& family(const std::string& type) {
  static std::map<std::string, Model> cache;
  auto it = cache.find(type);
  if (it != cache.end()) return it->second;
  nlohmann::json cfg = default_config(type, "tiny");
  cfg["initializer_range"] = 0.2;
  const std::string dir =
      (fs::temp_directory_path() / ("qkv_sweep_test_" + std::to_string(::getpid()) + "_" + type)).string();
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, 11);
  Model m = load_lm(dir);
  fs::remove_all(dir);  // the model keeps its mapping of the unlinked file
  return cache.emplace(type, std::move(m)).first->second;
}

// The models the record is checked on: GPT-2 (the bundled model), and every other family.
std::vector<const Model*> models() {
  std::vector<const Model*> out{&bundled()};
  for (const std::string& type : supported_model_types())
    if (type != "gpt2") out.push_back(&family(type));
  return out;
}

// T ids: 32 random ones, the same 32 again, then ids below 16 (which repeat by chance).
std::vector<int> window_ids(int T, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> r(32);
  for (int& x : r) x = int(rng() % uint64_t(vocab));
  std::vector<int> ids = r;
  ids.insert(ids.end(), r.begin(), r.end());
  while (int(ids.size()) < T) ids.push_back(int(rng() % 16));
  ids.resize(size_t(T));
  return ids;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("qkv_sweep_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

void write_bytes(const std::string& path, const void* p, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(p), std::streamsize(n));
}

}  // namespace

TEST(Sweep, WindowRecordEqualsTheDetectorAndDirectSums) {
  for (const Model* mp : models()) {
    const Model& m = *mp;
    SCOPED_TRACE(m.arch.model_type);
    const int T = std::min(m.arch.n_ctx, 128), L = m.arch.n_layer, H = m.arch.H, K = 5;
    const std::vector<int> ids = window_ids(T, m.arch.vocab_size, 7);
    WindowRunner r(m, {});
    const Layout lay{L, H, K};
    std::vector<double> rec;
    window_record(r, ids, lay, rec);
    ASSERT_EQ(rec.size(), lay.size());
    EXPECT_EQ(rec[0], 1);
    EXPECT_EQ(rec[1], T);
    EXPECT_EQ(rec[2], T - 1);
    for (int k = 0; k <= K; k++) EXPECT_EQ(rec[size_t(3 + k)], T - k);
    // The patterns as `qkv dump` records them (the same materialised forward).
    const auto acts = run_with_cache(m, ids, [](const std::string& n) { return n.find("hook_pattern") != std::string::npos; });
    const auto prev = previous_token_target(T), dup = duplicate_token_target(ids), ind = induction_target(ids);
    for (int l = 0; l < L; l++)
      for (int h = 0; h < H; h++) {
        const float* A = acts.at("blocks." + std::to_string(l) + ".attn.hook_pattern").data() + size_t(h) * T * T;
        const double* o = rec.data() + lay.head(l, h);
        // Same sums in the same order: equal to the last bit.
        EXPECT_EQ(o[Layout::kPrev], detector_score(A, prev, T)) << l << "." << h;
        EXPECT_EQ(o[Layout::kDup], detector_score(A, dup, T)) << l << "." << h;
        EXPECT_EQ(o[Layout::kInd], detector_score(A, ind, T)) << l << "." << h;
        double ent = 0, sink = 0;
        std::vector<double> off(size_t(K) + 1, 0.0);
        for (int i = 0; i < T; i++)
          for (int j = 0; j < T; j++) {
            const double a = A[size_t(i) * T + j];
            if (j > i) {
              EXPECT_EQ(a, 0.0);
              continue;
            }
            if (i >= 1 && a > 0) ent -= a * std::log(a);
            if (i >= 1 && j == 0) sink += a;
            if (i - j <= K) off[size_t(i - j)] += a;
          }
        EXPECT_NEAR(o[Layout::kEntropy], ent, 1e-9 * T);
        EXPECT_NEAR(o[Layout::kSink], sink, 1e-12 * T);
        for (int k = 0; k <= K; k++) EXPECT_NEAR(o[Layout::kPerHead + k], off[size_t(k)], 1e-12 * T);
      }
    if (&m == &bundled()) {  // the circuit is visible in one repeated window
      EXPECT_GT(rec[lay.head(0, 1) + Layout::kPrev], 0.8);
      EXPECT_GT(rec[lay.head(1, 0) + Layout::kInd], 0.2);
    }
  }
}

// The DLA norm through the vocabulary, computed outright in double from the run's own z and final
// residual: y = z_h W_O^h; (Gemma 2: y ⊙ γ_post · rstd_post, rstd_post of the whole attention output
// Σ_h z_h W_O^h + b_O); u = P y ⊙ γ_f · rstd_f (P centres for LayerNorm only); logits = u W_Uᵀ.
TEST(Sweep, DlaNormEqualsTheLogitsComputedOutright) {
  for (const Model* mp : models()) {
    const Model& m = *mp;
    const Arch& a = m.arch;
    SCOPED_TRACE(a.model_type);
    const int T = 24, d = a.d, H = a.H, dh = a.dh, V = a.vocab_size, L = a.n_layer;
    const std::vector<int> ids = window_ids(T, V, 3);
    WindowRunner r(m, {});
    std::vector<double> rec;
    window_record(r, ids, Layout{L, H, 2}, rec);
    const auto acts = run_with_cache(m, ids);
    const float* xf = acts.at("blocks." + std::to_string(L - 1) + ".hook_resid_post").data();
    auto gain = [&](const Weight& w) {
      std::vector<float> g(static_cast<size_t>(d));
      w.read(0, d, g.data());
      std::vector<double> o(g.begin(), g.end());
      if (a.norm == NormKind::RMSNormPlusOne)
        for (double& x : o) x += 1;
      return o;
    };
    auto rstd = [&](const double* x, bool centre) {
      double mu = 0, ss = 0;
      if (centre)
        for (int j = 0; j < d; j++) mu += x[j] / d;
      for (int j = 0; j < d; j++) ss += (x[j] - mu) * (x[j] - mu);
      return 1 / std::sqrt(ss / d + a.norm_eps);
    };
    const bool ln = a.norm == NormKind::LayerNorm;
    const std::vector<double> gf = gain(m.lnf_w);
    const Weight& WU = m.lm_head.present() ? m.lm_head : m.wte;
    std::vector<float> wu(size_t(V) * d);
    WU.read(0, int64_t(V) * d, wu.data());
    for (int l = 0; l < L; l++) {
      const Weight& wo = m.blocks[size_t(l)].wo;
      std::vector<float> W(size_t(wo.numel()));
      wo.read(0, wo.numel(), W.data());
      // W_O[c][j]: input coordinate c = h·dh + r, output j
      auto WO = [&](int c, int j) { return double(wo.in_out ? W[size_t(c) * d + j] : W[size_t(j) * H * dh + c]); };
      const float* z = acts.at("blocks." + std::to_string(l) + ".attn.hook_z").data();  // [T, H, dh]
      const std::vector<double> gp = a.post_norms ? gain(m.blocks[size_t(l)].post_attn_w) : std::vector<double>();
      for (int h = 0; h < H; h++) {
        std::vector<double> fast(static_cast<size_t>(T));
        r.dla_norms(l, h, fast.data());
        for (int i = 0; i < T; i += 5) {
          std::vector<double> y(size_t(d), 0.0), all(size_t(d), 0.0), x(size_t(d), 0.0);
          for (int c = 0; c < H * dh; c++)
            for (int j = 0; j < d; j++) {
              const double t = double(z[size_t(i) * H * dh + c]) * WO(c, j);
              all[size_t(j)] += t;
              if (c / dh == h) y[size_t(j)] += t;
            }
          if (a.post_norms) {
            if (m.blocks[size_t(l)].bo.present()) {
              std::vector<float> b(static_cast<size_t>(d));
              m.blocks[size_t(l)].bo.read(0, d, b.data());
              for (int j = 0; j < d; j++) all[size_t(j)] += b[size_t(j)];
            }
            const double rp = rstd(all.data(), false);
            for (int j = 0; j < d; j++) y[size_t(j)] *= gp[size_t(j)] * rp;
          }
          for (int j = 0; j < d; j++) x[size_t(j)] = xf[size_t(i) * d + j];
          const double rf = rstd(x.data(), ln);
          double mean = 0;
          if (ln)
            for (double v : y) mean += v / d;
          double norm2 = 0;
          for (int v = 0; v < V; v++) {
            double logit = 0;
            for (int j = 0; j < d; j++) logit += (y[size_t(j)] - mean) * gf[size_t(j)] * rf * wu[size_t(v) * d + j];
            norm2 += logit * logit;
          }
          // Gemma 2's rstd_post comes from the attention output the runner forms in fp32 (a float GEMM, as
          // the forward's): 1e-6 there; everything else is double throughout.
          const double rel = a.post_norms ? 1e-6 : 1e-9;
          EXPECT_NEAR(fast[size_t(i)], std::sqrt(norm2), rel * std::sqrt(norm2) + 1e-12) << l << "." << h << " row " << i;
        }
      }
    }
  }
}

TEST(Sweep, HookShapesAreWhatTheTraceRecords) {
  for (const Model* mp : models()) {
    const Model& m = *mp;
    SCOPED_TRACE(m.arch.model_type);
    const int T = 9;
    const auto shapes = hook_shapes(m, T);
    const auto acts = run_with_cache(m, std::vector<int>(size_t(T), 3));
    ASSERT_EQ(shapes.size(), acts.size());
    for (const auto& [name, t] : acts) EXPECT_EQ(shapes.at(name), t.shape()) << name;
  }
}

TEST(Sweep, StreamedTokenizationEqualsTheWholeText) {
  const std::string dir = std::string(QKV_SHARED_DIR) + "/gpt2-tokenizer";
  if (!fs::exists(dir)) GTEST_SKIP() << "no GPT-2 tokenizer in " << dir;
  const Tokenizer tok = Tokenizer::from_dir(dir);
  const std::string text =
      "Hello world.\nIt's a  test  \n\nof the   streamed\n tokenizer:\n\n\nx\ny z 12345\n  "
      "\n!!\n\t\nend\nvoilà — über\n";
  const std::string path = temp_path("text.txt"), out = temp_path("tokens");
  write_bytes(path, text.data(), text.size());
  std::vector<int> expected = tok.encode(text);
  expected.insert(expected.end(), expected.begin(), expected.end());  // the file twice
  for (size_t block : {size_t(1), size_t(5), size_t(17), size_t(1) << 20}) {
    const int64_t n = tokenize_files({path, path}, tok, TokenDtype::U16, out, block);
    ASSERT_EQ(n, int64_t(expected.size())) << "block " << block;
    const Corpus c = Corpus::open({out}, TokenDtype::U16);
    std::vector<int> got(expected.size());
    c.read(0, int(got.size()), 50257, got.data());
    EXPECT_EQ(got, expected) << "block " << block;
  }
  fs::remove(path), fs::remove(out);
}

// A tokenizer.json pipeline is not piecewise (Metaspace prepends "▁" to each text it is given, the
// template adds BOS): every file is encoded whole, as one document, whatever the block size.
TEST(Sweep, TokenizerJsonFilesAreEncodedWhole) {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = b + 3;
  }
  int id = 259;
  for (const char* t : {"▁", "a", "b", "▁a", "ab", "▁ab"}) vocab[t] = id++;
  auto special = [](int i, const char* c) {
    return nlohmann::json{{"id", i}, {"content", c}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  const nlohmann::json tj = {
      {"version", "1.0"},
      {"added_tokens", {special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "▁"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", nlohmann::json::array()},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
        {"vocab", vocab}, {"merges", {"▁ a", "a b", "▁a b"}}}}};
  const std::string tpath = temp_path("tokenizer.json");
  const std::string tjs = tj.dump();
  write_bytes(tpath, tjs.data(), tjs.size());
  const Tokenizer tok = Tokenizer::from_hf_json(tpath);
  ASSERT_FALSE(tok.gpt2_pretokenizer());
  const std::string text = "ab a\nab\nb ab a\n\nab ab\n";
  const std::string path = temp_path("sp.txt"), out = temp_path("sp.tokens");
  write_bytes(path, text.data(), text.size());
  std::vector<int> expected = tok.encode(text);
  ASSERT_EQ(expected[0], 1);  // <s>
  expected.insert(expected.end(), expected.begin(), expected.end());  // the file twice: two documents
  for (size_t block : {size_t(1), size_t(5), size_t(1) << 20}) {
    const int64_t n = tokenize_files({path, path}, tok, TokenDtype::U16, out, block);
    ASSERT_EQ(n, int64_t(expected.size())) << "block " << block;
    const Corpus c = Corpus::open({out}, TokenDtype::U16);
    std::vector<int> got(expected.size());
    c.read(0, int(got.size()), tok.vocab_size(), got.data());
    EXPECT_EQ(got, expected) << "block " << block;
  }
  fs::remove(path), fs::remove(out), fs::remove(tpath);
}

TEST(Sweep, TokenFilesRawAndLlmc) {
  const std::string a = temp_path("a.u32"), b = temp_path("b.bin"), bad = temp_path("bad");
  const uint32_t raw[] = {1, 2, 300};
  write_bytes(a, raw, sizeof raw);
  std::vector<int32_t> head(256, 0);
  head[0] = 20240520, head[1] = 1, head[2] = 2;
  const uint16_t ids16[] = {7, 8};
  {
    std::ofstream f(b, std::ios::binary);
    f.write(reinterpret_cast<const char*>(head.data()), 1024);
    f.write(reinterpret_cast<const char*>(ids16), sizeof ids16);
  }
  const Corpus c = Corpus::open({a, b}, TokenDtype::U32);  // b's header says uint16
  ASSERT_EQ(c.size(), 5);
  std::vector<int> got(4);
  c.read(1, 4, 1000, got.data());
  EXPECT_EQ(got, (std::vector<int>{2, 300, 7, 8}));
  try {
    c.read(0, 3, 256, got.data());
    FAIL() << "id 300 >= vocab 256 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_NE(std::string(e.what()).find(a), std::string::npos) << e.what();
  }
  write_bytes(bad, raw, 5);
  EXPECT_THROW(Corpus::open({bad}, TokenDtype::U16), Error);  // 5 bytes: not whole uint16 ids
  EXPECT_THROW(Corpus::open({temp_path("missing")}, TokenDtype::U16), Error);
  head[2] = 3;  // header disagrees with the size
  {
    std::ofstream f(b, std::ios::binary);
    f.write(reinterpret_cast<const char*>(head.data()), 1024);
    f.write(reinterpret_cast<const char*>(ids16), sizeof ids16);
  }
  EXPECT_THROW(Corpus::open({b}, TokenDtype::U16), Error);
  fs::remove(a), fs::remove(b), fs::remove(bad);
}

TEST(Sweep, FinalizeAveragesByTheRightCounts) {
  const Layout lay{1, 1, 2};
  std::vector<double> t(lay.size(), 0.0);
  t[0] = 4, t[1] = 40, t[2] = 36, t[3] = 40, t[4] = 36, t[5] = 32;  // 4 windows of 10 tokens
  double* o = t.data() + lay.head(0, 0);
  o[Layout::kPrev] = 2, o[Layout::kDup] = 1, o[Layout::kInd] = 3, o[Layout::kEntropy] = 18,
  o[Layout::kSink] = 9;
  o[Layout::kDla] = 80, o[Layout::kPerHead] = 20, o[Layout::kPerHead + 1] = 18, o[Layout::kPerHead + 2] = 8;
  const Stats s = finalize(lay, t);
  ASSERT_EQ(s.heads.size(), 1u);
  EXPECT_EQ(s.windows, 4);
  EXPECT_DOUBLE_EQ(s.heads[0].previous_token, 0.5);
  EXPECT_DOUBLE_EQ(s.heads[0].duplicate_token, 0.25);
  EXPECT_DOUBLE_EQ(s.heads[0].induction, 0.75);
  EXPECT_DOUBLE_EQ(s.heads[0].entropy, 0.5);
  EXPECT_DOUBLE_EQ(s.heads[0].sink, 0.25);
  EXPECT_DOUBLE_EQ(s.heads[0].dla, 2);
  EXPECT_EQ(s.heads[0].offset, (std::vector<double>{0.5, 0.5, 0.25}));
  t.pop_back();
  EXPECT_THROW(finalize(lay, t), Error);
}

// The sum tree is a function of the windows only: every chunking (chunks that share blocks of the tree
// with their neighbours, or hold several whole ones) reduces to the same bits as summing each block of
// kSumBlock windows in window order and the blocks in order. Records of mixed magnitudes, so that
// another order would round differently (checked: the chunk-order sum of chunk sums differs).
TEST(Sweep, TheSumTreeDependsOnTheWindowsOnly) {
  const Layout lay{1, 1, 0};
  const int64_t n = 3 * kSumBlock + 17;
  std::mt19937_64 rng(5);
  std::vector<std::vector<double>> recs(static_cast<size_t>(n), std::vector<double>(lay.size()));
  for (auto& r : recs)
    for (double& x : r) x = std::ldexp(double(rng() % 1000003), int(rng() % 40) - 20);
  std::vector<double> want(lay.size(), 0.0);
  for (int64_t b0 = 0; b0 < n; b0 += kSumBlock) {
    std::vector<double> block(lay.size(), 0.0);
    for (int64_t w = b0; w < std::min(n, b0 + kSumBlock); w++)
      for (size_t i = 0; i < block.size(); i++) block[i] += recs[size_t(w)][i];
    for (size_t i = 0; i < block.size(); i++) want[i] += block[i];
  }
  bool naive_differs = false;
  for (int64_t cw : {int64_t(1), int64_t(7), kSumBlock, kSumBlock + 5, 2 * kSumBlock, n}) {
    BlockReducer red(lay, n);
    std::vector<double> naive(lay.size(), 0.0);
    for (int64_t w0 = 0; w0 < n; w0 += cw) {
      const int64_t w1 = std::min(n, w0 + cw);
      const std::vector<std::vector<double>> part(recs.begin() + w0, recs.begin() + w1);
      const std::vector<double> rows = chunk_rows(lay, w0, w1, n, part);
      EXPECT_EQ(rows.size(), sum_items(w0, w1, n).size() * lay.size());
      red.add(w0, w1, rows.data(), rows.size(), "chunk");
      std::vector<double> s(lay.size(), 0.0);
      for (const auto& r : part)
        for (size_t i = 0; i < s.size(); i++) s[i] += r[i];
      for (size_t i = 0; i < s.size(); i++) naive[i] += s[i];
    }
    EXPECT_EQ(red.total(), want) << "chunk_windows " << cw;
    naive_differs = naive_differs || naive != want;
  }
  EXPECT_TRUE(naive_differs) << "the records are too tame to tell the orders apart";
  BlockReducer gap(lay, n);
  const std::vector<double> rows = chunk_rows(lay, 5, 9, n, std::vector<std::vector<double>>(4, recs[0]));
  EXPECT_THROW(gap.add(5, 9, rows.data(), rows.size(), "chunk"), Error);  // does not start at window 0
  EXPECT_THROW(gap.total(), Error);                                       // windows missing
}

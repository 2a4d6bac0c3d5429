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

#include "qkv/analysis/head_detector.hpp"
#include "qkv/error.hpp"

namespace fs = std::filesystem;
using namespace qkv;
using namespace qkv::analysis;
using namespace qkv::analysis::sweep;

namespace {

const GPT2& bundled() {
  static const GPT2 m = load_model(std::string(QKV_SOURCE_DIR) + "/models/induction");
  return m;
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
  const GPT2& m = bundled();
  const int T = 128, L = m.config.n_layer, H = m.config.n_head, K = 5;
  const std::vector<int> ids = window_ids(T, m.config.vocab_size, 7);
  WindowRunner r(m, {});
  r.run(ids);
  const Layout lay{L, H, K};
  std::vector<double> rec;
  window_record(r, ids, lay, rec);
  ASSERT_EQ(rec.size(), lay.size());
  EXPECT_EQ(rec[0], 1);
  EXPECT_EQ(rec[1], T);
  EXPECT_EQ(rec[2], T - 1);
  for (int k = 0; k <= K; k++) EXPECT_EQ(rec[size_t(3 + k)], T - k);
  const auto prev = previous_token_target(T), dup = duplicate_token_target(ids), ind = induction_target(ids);
  for (int l = 0; l < L; l++)
    for (int h = 0; h < H; h++) {
      const float* A = r.pattern(l) + size_t(h) * T * T;
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
  // The circuit is visible in one repeated window: 0.1 previous-token, 1.x induction.
  EXPECT_GT(rec[lay.head(0, 1) + Layout::kPrev], 0.8);
  EXPECT_GT(rec[lay.head(1, 0) + Layout::kInd], 0.2);
}

TEST(Sweep, DlaNormEqualsTheLogitsComputedOutright) {
  const GPT2& m = bundled();
  const int T = 40, d = m.config.n_embd, H = m.config.n_head, dh = m.config.head_dim(),
            V = m.config.vocab_size;
  const std::vector<int> ids = window_ids(T, V, 3);
  WindowRunner r(m, {});
  r.run(ids);
  Activations acts;
  forward(m, ids, acts);
  const float* wte = m.params.data() + m.wte;
  const float* gamma = m.params.data() + m.lnf_w;
  for (int l = 0; l < m.config.n_layer; l++) {
    const float* W_O = m.attention(l, m.params.data()).W_O;
    for (int h = 0; h < H; h++) {
      std::vector<double> fast(static_cast<size_t>(T));
      r.dla_norms(l, h, fast.data());
      for (int i = 0; i < T; i += 7) {
        // y = z_h[i] · W_O^h; u = (y − mean y) ⊙ γ · rstd; logits = u · wteᵀ; ‖logits‖₂
        const float* z = acts.attn[size_t(l)].z.data() + (size_t(h) * T + i) * dh;
        std::vector<double> y(size_t(d), 0.0);
        for (int a = 0; a < dh; a++)
          for (int b = 0; b < d; b++) y[size_t(b)] += double(z[a]) * W_O[(size_t(h) * dh + a) * d + b];
        double mean = 0;
        for (double v : y) mean += v / d;
        const double rstd = acts.lnf_rstd[size_t(i)];
        double norm2 = 0;
        for (int v = 0; v < V; v++) {
          double logit = 0;
          for (int b = 0; b < d; b++)
            logit += (y[size_t(b)] - mean) * gamma[b] * rstd * wte[size_t(v) * d + b];
          norm2 += logit * logit;
        }
        EXPECT_NEAR(fast[size_t(i)], std::sqrt(norm2), 1e-9 * std::sqrt(norm2) + 1e-12)
            << l << "." << h << " row " << i;
      }
    }
  }
}

TEST(Sweep, HookShapesAreWhatTheTraceRecords) {
  const GPT2& m = bundled();
  const int T = 9;
  const auto shapes = hook_shapes(m, T);
  Activations acts;
  Trace tr;
  forward(m, std::vector<int>(size_t(T), 3), acts, &tr);
  ASSERT_EQ(shapes.size(), tr.acts.size());
  for (const auto& [name, t] : tr.acts) EXPECT_EQ(shapes.at(name), t.shape()) << name;
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

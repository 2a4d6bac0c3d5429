// GPT-2 through llama.cpp's gpt2 GGUF: HF directory -> GGUF f32 -> the same parameters and logits bit
// for bit; quantized files within each type's stated per-block bound; the tokenizer from the metadata
// equal to the vocab.json/merges.txt one; bad files named.
#include "qkv/io/gguf_gpt2.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "qkv/error.hpp"
#include "qkv/io/config_json.hpp"
#include "qkv/io/half.hpp"
#include "qkv/model.hpp"
#include "qkv/model_files.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

struct Tmp {
  fs::path dir;
  Tmp() {
    static int n = 0;
    dir = fs::temp_directory_path() /
          ("qkv_gguf_gpt2_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Tmp() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string operator()(const std::string& name) const { return (dir / name).string(); }
};

// A random GPT-2 with an MLP whose rows (n_embd = 256, 4·256) are whole Q4_K/Q6_K blocks, written as a
// Hugging Face directory.
std::string make_hf_dir(const Tmp& tmp, GPT2Config c = {}, uint64_t seed = 3) {
  if (c.n_embd == 768) c.vocab_size = 300, c.n_positions = 32, c.n_embd = 256, c.n_layer = 2, c.n_head = 4;
  GPT2 m(c);
  init_gpt2(m, seed);
  const std::string dir = tmp("hf");
  fs::create_directories(dir);
  io::write_config_json(dir + "/config.json", c);
  save_model(m, dir + "/model.safetensors");
  return dir;
}

std::vector<float> logits_of(const GPT2& m, const std::vector<int>& ids) {
  Activations acts;
  return forward(m, ids, acts);
}

const std::vector<int> kIds = {1, 17, 250, 3, 99, 42, 7, 7, 128, 299, 0, 5};

TEST(GgufGpt2, F32RoundTripIsBitExact) {
  Tmp tmp;
  const GPT2 m0 = load_model(make_hf_dir(tmp));
  const auto choices = save_gguf_gpt2(m0, nullptr, tmp("m.gguf"), io::GgmlType::F32);
  for (const auto& c : choices) EXPECT_EQ(c.type, io::GgmlType::F32) << c.name;
  const GPT2 m1 = load_model(tmp("m.gguf"));
  EXPECT_EQ(m1.config.n_embd, m0.config.n_embd);
  EXPECT_EQ(m1.config.vocab_size, m0.config.vocab_size);
  EXPECT_EQ(m1.config.n_inner, m0.config.n_inner);
  EXPECT_EQ(m1.config.layer_norm_epsilon,
            m0.config.layer_norm_epsilon);  // stored as FLOAT32, read back as the shortest decimal
  ASSERT_EQ(m1.params.size(), m0.params.size());
  EXPECT_EQ(0, std::memcmp(m1.params.data(), m0.params.data(), m0.params.size() * 4));
  const auto a = logits_of(m0, kIds), b = logits_of(m1, kIds);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  EXPECT_NE(m1.source.find("GGUF v3, gpt2; tensors 28 F32"), std::string::npos) << m1.source;
}

TEST(GgufGpt2, LlamaCppNamesLayoutAndMetadata) {
  Tmp tmp;
  const GPT2 m0 = load_model(make_hf_dir(tmp));
  save_gguf_gpt2(m0, nullptr, tmp("m.gguf"), io::GgmlType::Q8_0);
  const io::GgufFile f = io::GgufFile::open(tmp("m.gguf"));
  const auto& md = f.metadata();
  EXPECT_EQ(md.get_string("general.architecture"), "gpt2");
  EXPECT_EQ(md.get_int("gpt2.block_count"), 2);
  EXPECT_EQ(md.get_int("gpt2.context_length"), 32);
  EXPECT_EQ(md.get_int("gpt2.embedding_length"), 256);
  EXPECT_EQ(md.get_int("gpt2.feed_forward_length"), 1024);
  EXPECT_EQ(md.get_int("gpt2.attention.head_count"), 4);
  EXPECT_EQ(md.get_int("general.file_type"), 7);  // MOSTLY_Q8_0
  EXPECT_EQ(f.tensor("token_embd.weight").ne, (std::vector<uint64_t>{256, 300}));
  EXPECT_EQ(f.tensor("position_embd.weight").ne, (std::vector<uint64_t>{256, 32}));
  EXPECT_EQ(f.tensor("blk.1.attn_qkv.weight").ne, (std::vector<uint64_t>{256, 768}));  // ne[0] = in-features
  EXPECT_EQ(f.tensor("blk.1.attn_qkv.weight").type, io::GgmlType::Q8_0);
  EXPECT_EQ(f.tensor("blk.1.attn_qkv.bias").type, io::GgmlType::F32);
  EXPECT_EQ(f.tensor("blk.0.ffn_down.weight").ne, (std::vector<uint64_t>{1024, 256}));
  EXPECT_EQ(f.tensor("blk.0.attn_output.weight").ne, (std::vector<uint64_t>{256, 256}));
  EXPECT_NE(f.find("output_norm.bias"), nullptr);
  EXPECT_EQ(f.find("output.weight"), nullptr);  // tied, as llama.cpp's converter leaves it
  // Row o of the stored attn_qkv is HF's column o: W_stored[o][i] == c_attn.weight[i][o] (up to Q8_0).
  std::vector<float> w(256 * 768);
  f.read_f32(f.tensor("blk.0.attn_qkv.weight"), w.data());
  const float* hf = m0.param("h.0.attn.c_attn.weight");
  double worst = 0;
  for (int o = 0; o < 768; o += 37)
    for (int i = 0; i < 256; ++i)
      worst = std::max(worst, double(std::fabs(w[size_t(o * 256 + i)] - hf[i * 768 + o])));
  EXPECT_LT(worst, 0.01);
}

// Per 1-D block along a GGUF row (B values of row o, columns b0..b0+B), the bound the type states
// (include/qkv/io/gguf_quant.hpp), from the original weights.
double block_bound(io::GgmlType t, const std::vector<float>& x) {
  double amax = 0, lo = 0, hi = -INFINITY;
  for (float v : x)
    amax = std::max(amax, double(std::fabs(v))), lo = std::min(lo, double(v)), hi = std::max(hi, double(v));
  switch (t) {
    case io::GgmlType::F16:
      return amax * std::ldexp(1.0, -11) + 6e-8;
    case io::GgmlType::BF16:
      return amax * std::ldexp(1.0, -8);
    case io::GgmlType::Q8_0:
      return amax / 254 + amax * std::ldexp(1.0, -11) + 127 * std::ldexp(1.0, -25);
    case io::GgmlType::Q4_0:
      return amax / 8 * (1 + std::ldexp(1.0, -8)) + 8 * std::ldexp(1.0, -25);
    // Q4_K / Q6_K: s/2 with s <= range/15 + d (resp. amax/31 + d); d <= max over the super-block of the
    // same quantity / 63 (127) rounded up in binary16, so s/2 <= (1/2 + 1/126) of the super-block's.
    case io::GgmlType::Q4_K:
      return (hi - lo) / 15 * (0.5 + 1.0 / 63) * 1.01;
    case io::GgmlType::Q6_K:
      return amax / 31 * (0.5 + 1.0 / 127) * 1.01;
    default:
      return 0;
  }
}

TEST(GgufGpt2, QuantizedFilesStayWithinTheBlockBound) {
  Tmp tmp;
  const GPT2 m0 = load_model(make_hf_dir(tmp));
  const auto ref = logits_of(m0, kIds);
  double prev_err = -1;
  for (io::GgmlType t : {io::GgmlType::F16, io::GgmlType::BF16, io::GgmlType::Q8_0, io::GgmlType::Q6_K,
                         io::GgmlType::Q4_K, io::GgmlType::Q4_0}) {
    const std::string p = tmp("m_" + io::ggml_type_name(t) + ".gguf");
    save_gguf_gpt2(m0, nullptr, p, t);
    const GPT2 m1 = load_model(p);
    const io::GgufFile f = io::GgufFile::open(p);
    for (const ParamSpec& s : m0.table) {
      const float* a = m0.params.data() + s.offset;
      const float* b = m1.params.data() + s.offset;
      if (s.shape.size() == 1) {  // 1-D tensors stay F32
        ASSERT_EQ(0, std::memcmp(a, b, size_t(s.numel) * 4)) << s.name;
        continue;
      }
      // Walk the GGUF layout: rows of ne0 values; transposed matrices have rows = HF columns.
      const bool transposed = s.name.find(".c_") != std::string::npos;
      const int64_t rows = transposed ? s.shape[1] : s.shape[0], ne0 = transposed ? s.shape[0] : s.shape[1];
      const io::GgmlType stored = gguf_gpt2_tensor_type(t, uint64_t(ne0));
      const int64_t B = io::ggml_type_traits(uint32_t(stored))->block_size;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c0 = 0; c0 < ne0; c0 += B) {
          std::vector<float> blk;
          std::vector<float> got;
          for (int64_t c = c0; c < c0 + B; ++c) {
            const int64_t idx = transposed ? c * rows + r : r * ne0 + c;
            blk.push_back(a[idx]);
            got.push_back(b[idx]);
          }
          const double bound = block_bound(stored, blk);
          for (size_t k = 0; k < blk.size(); ++k)
            ASSERT_LE(std::fabs(double(got[k]) - double(blk[k])), bound)
                << io::ggml_type_name(t) << " " << s.name << " row " << r << " col " << c0 + int64_t(k);
        }
    }
    // The logits move, and they move less for the finer types (f16 < bf16 < q8_0 < q6_k < q4_k, q4_0).
    const auto lg = logits_of(m1, kIds);
    double err = 0, scale = 0;
    for (size_t i = 0; i < lg.size(); ++i)
      err = std::max(err, double(std::fabs(lg[i] - ref[i]))),
      scale = std::max(scale, double(std::fabs(ref[i])));
    EXPECT_GT(err, 0.0) << io::ggml_type_name(t);
    EXPECT_LT(err, 0.25 * scale) << io::ggml_type_name(t);
    if (t != io::GgmlType::Q4_0) {
      EXPECT_GT(err, prev_err) << io::ggml_type_name(t);
    }
    prev_err = std::max(prev_err, err);
    std::cout << "[ gguf ] " << io::ggml_type_name(t) << ": max |Δlogit| " << err << " (max |logit| " << scale
              << ")\n";
  }
}

TEST(GgufGpt2, SmallRowsFallBackLikeLlamaCpp) {
  EXPECT_EQ(gguf_gpt2_tensor_type(io::GgmlType::Q4_K, 128), io::GgmlType::Q4_0);
  EXPECT_EQ(gguf_gpt2_tensor_type(io::GgmlType::Q6_K, 64), io::GgmlType::Q8_0);
  EXPECT_EQ(gguf_gpt2_tensor_type(io::GgmlType::Q8_0, 48), io::GgmlType::F16);
  EXPECT_EQ(gguf_gpt2_tensor_type(io::GgmlType::Q4_K, 512), io::GgmlType::Q4_K);
}

TEST(GgufGpt2, AttentionOnlyBundledModelRoundTrips) {
  const std::string bundled = std::string(QKV_SOURCE_DIR) + "/models/induction";
  if (!fs::exists(bundled + "/model.safetensors")) GTEST_SKIP() << "no bundled model";
  Tmp tmp;
  const GPT2 m0 = load_model(bundled);
  const auto tok = tokenizer_for_model(bundled);
  ASSERT_TRUE(tok.has_value());
  save_gguf_gpt2(m0, &*tok, tmp("ind.gguf"), io::GgmlType::F32);
  const GPT2 m1 = load_model(tmp("ind.gguf"));
  EXPECT_TRUE(m1.config.attn_only);
  EXPECT_EQ(0, std::memcmp(m1.params.data(), m0.params.data(), m0.params.size() * 4));
  const auto t1 = tokenizer_for_model(tmp("ind.gguf"));
  ASSERT_TRUE(t1.has_value());
  EXPECT_EQ(t1->vocab_size(), tok->vocab_size());
  EXPECT_EQ(t1->encode("abc abd abc"), tok->encode("abc abd abc"));
}

TEST(GgufGpt2, TokenizerFromMetadataEqualsTheFiles) {
  const std::string dir = std::string(QKV_SHARED_DIR) + "/gpt2-tokenizer";
  if (!fs::exists(dir + "/encoder.json")) GTEST_SKIP() << "no GPT-2 tokenizer in " << dir;
  const Tokenizer tok = Tokenizer::from_dir(dir);
  Tmp tmp;
  GPT2Config c;
  c.vocab_size = 50304, c.n_positions = 8, c.n_embd = 32, c.n_layer = 1,
  c.n_head = 2;  // padded vocab, like llm.c
  GPT2 m(c);
  init_gpt2(m, 1);
  save_gguf_gpt2(m, &tok, tmp("t.gguf"), io::GgmlType::F16);
  const io::GgufFile f = io::GgufFile::open(tmp("t.gguf"));
  EXPECT_EQ(f.metadata().get_string("tokenizer.ggml.model"), "gpt2");
  const auto tokens = f.metadata().get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 50304u);
  EXPECT_EQ(tokens[50256], "<|endoftext|>");
  EXPECT_EQ(tokens[50300], "[PAD50300]");
  EXPECT_EQ(f.metadata().get_int("tokenizer.ggml.eos_token_id"), 50256);
  EXPECT_EQ(f.metadata().get_string_array("tokenizer.ggml.merges").size(), 50000u);
  const auto g = gguf_tokenizer(f);
  ASSERT_TRUE(g.has_value());
  ASSERT_EQ(g->vocab_size(), tok.vocab_size());
  for (int i = 0; i < tok.vocab_size(); ++i) ASSERT_EQ(g->token_string(i), tok.token_string(i)) << i;
  const std::vector<std::string> corpus = {"Hello world",
                                           "The quick brown fox jumps over the lazy dog.",
                                           "  leading spaces\n\nand newlines\t tabs",
                                           "naïve café — “quotes” 日本語のテキスト 🤖🚀",
                                           "it's we've they'll I'm you'd",
                                           "1234567890 3.14159 -42",
                                           "<|endoftext|> is text here",
                                           "def f(x):\n    return x ** 2  # comment",
                                           "\xff\xfe invalid utf8 \xc3"};
  for (const auto& s : corpus) EXPECT_EQ(g->encode(s), tok.encode(s)) << s;
}

TEST(GgufGpt2, BadTokenizerMetadataIsNamed) {
  Tmp tmp;
  const Tokenizer bytes = Tokenizer::byte_level();
  std::vector<std::string> base;  // GPT-2's 256 byte tokens, then "ab"
  for (int i = 0; i < 256; ++i) base.push_back(bytes.token_string(i));
  base.push_back("ab");
  auto with_tokens = [&](std::vector<std::string> extra, int replace_at = -1) {
    std::vector<std::string> t = base;
    if (replace_at >= 0)
      t[size_t(replace_at)] = extra[0];
    else
      t.insert(t.end(), extra.begin(), extra.end());
    return io::gguf_string_array(t);
  };
  auto with = [&](const std::function<void(io::GgufMetadata&)>& edit) {
    io::GgufMetadata md;
    md.set("tokenizer.ggml.model", std::string("gpt2"));
    md.set("tokenizer.ggml.tokens", io::gguf_string_array(base));
    md.set("tokenizer.ggml.merges", io::gguf_string_array({"a b"}));
    edit(md);
    io::write_gguf(tmp("t.gguf"), md, {});
  };
  auto expect = [&](std::initializer_list<std::string> parts) {
    try {
      gguf_tokenizer(tmp("t.gguf"));
      ADD_FAILURE() << "accepted; expected " << *parts.begin();
    } catch (const Error& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  with([](auto&) {});
  EXPECT_EQ(gguf_tokenizer(tmp("t.gguf"))->encode("ab"), std::vector<int>{256});
  with([](auto& md) { md.set("tokenizer.ggml.model", std::string("bert")); });
  expect({"t.gguf: key 'tokenizer.ggml.model' is 'bert'"});
  with([](auto& md) { md.set("tokenizer.ggml.model", std::string("llama")); });  // SentencePiece needs scores
  expect({"t.gguf: key 'tokenizer.ggml.scores' is missing"});
  with([](auto& md) { md.set("tokenizer.ggml.pre", std::string("falcon")); });
  expect({"t.gguf: key 'tokenizer.ggml.pre' is 'falcon'"});
  with([&](auto& md) { md.set("tokenizer.ggml.tokens", with_tokens({"a"})); });
  expect({"t.gguf: key 'tokenizer.ggml.tokens': token 257 \"a\" appears twice"});
  with([&](auto& md) { md.set("tokenizer.ggml.tokens", with_tokens({"b\xff"}, 1)); });
  expect({"t.gguf: key 'tokenizer.ggml.tokens': token 1 is not valid UTF-8"});
  with([](auto& md) { md.set("tokenizer.ggml.token_type", io::gguf_int32_array({1, 1})); });
  expect({"t.gguf: key 'tokenizer.ggml.token_type' has 2 entries, 'tokenizer.ggml.tokens' has 257"});
  with([](auto& md) { md.set("tokenizer.ggml.merges", io::gguf_string_array({"a\nb"})); });
  expect({"t.gguf: key 'tokenizer.ggml.merges': merge 0 contains a line break"});
  with([](auto& md) { md.set("tokenizer.ggml.merges", io::gguf_string_array({"a zz"})); });
  expect({"t.gguf: key 'tokenizer.ggml.merges'"});
  with([](auto& md) { md.set("tokenizer.ggml.tokens", std::string("a")); });
  expect({"t.gguf: key 'tokenizer.ggml.tokens': expected an ARRAY of STRING, found STRING"});
}

TEST(GgufGpt2, BadFilesAreNamed) {
  Tmp tmp;
  const GPT2 m0 = load_model(make_hf_dir(tmp));
  save_gguf_gpt2(m0, nullptr, tmp("m.gguf"), io::GgmlType::F32);
  const io::GgufFile f = io::GgufFile::open(tmp("m.gguf"));
  auto rewrite = [&](const std::function<void(io::GgufMetadata&, std::vector<io::GgufWriteTensor>&)>& edit) {
    io::GgufMetadata md = f.metadata();
    std::vector<io::GgufWriteTensor> ts;
    for (const auto& t : f.tensors())
      ts.push_back({t.name, t.type, t.ne, std::vector<unsigned char>(t.data, t.data + t.nbytes)});
    edit(md, ts);
    io::write_gguf(tmp("bad.gguf"), md, ts);
  };
  auto expect = [&](const std::string& part) {
    try {
      load_model(tmp("bad.gguf"));
      ADD_FAILURE() << "accepted; expected " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.gguf"), std::string::npos) << e.what();
    }
  };
  rewrite([](auto& md, auto&) { md.set("general.architecture", std::string("llama")); });
  expect("architecture gpt2 only");
  rewrite([](auto& md, auto&) { md.set("gpt2.block_count", uint32_t(3)); });
  expect("'blk.2.attn_norm.weight' (h.2.ln_1.weight) is missing");
  rewrite([](auto& md, auto&) { md.set("gpt2.attention.head_count", std::string("4")); });
  expect("'gpt2.attention.head_count': expected an integer, found STRING");
  rewrite([](auto&, auto& ts) { ts.pop_back(); });
  expect("'output_norm.bias'");
  rewrite([](auto&, auto& ts) { ts.push_back(ts[0]), ts.back().name = "extra.weight"; });
  expect("unexpected tensor 'extra.weight'");
  rewrite(
      [](auto&, auto& ts) { ts.push_back(ts[0]), ts.back().name = "output.weight", ts.back().data[5] ^= 1; });
  expect("'output.weight' differs from 'token_embd.weight'");
  rewrite([](auto&, auto& ts) {
    for (auto& t : ts)
      if (t.name == "blk.0.attn_qkv.weight") std::swap(t.ne[0], t.ne[1]);
  });
  expect("'blk.0.attn_qkv.weight' has ne [768, 256], expected [256, 768]");
  rewrite([](auto&, auto& ts) {
    const float nan = NAN;
    std::memcpy(ts[3].data.data(), &nan, 4);
  });
  expect("NaN");
  // output.weight equal to token_embd.weight is accepted (older converters wrote the tied copy).
  rewrite([](auto&, auto& ts) { ts.push_back(ts[0]), ts.back().name = "output.weight"; });
  EXPECT_EQ(load_model(tmp("bad.gguf")).params, m0.params);
}

}  // namespace
}  // namespace qkv

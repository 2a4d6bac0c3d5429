// The modern families <-> llama.cpp's GGUF architectures llama, qwen2, gemma, gemma2, phi3 (names, layout,
// metadata and the llama Q/K permutation in include/qkv/io/gguf_family.hpp).
#include "qkv/io/gguf_family.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "qkv/error.hpp"
#include "qkv/io/half.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

using io::GgmlType;

// The GGUF name of a tensor of the family tables (arch.cpp's roles).
std::string gguf_name(const TensorSpec& s) {
  // llama.cpp's names (LLM_TENSOR_NAMES), per role; empty: the role has no GGUF tensor.
  static const char* names[kRoles] = {
      "token_embd.weight", "position_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
      "attn_norm.weight", "attn_norm.bias", "ffn_norm.weight", "ffn_norm.bias", "post_attention_norm.weight",
      "post_ffw_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias",
      "attn_v.bias", "attn_qkv.weight", "attn_qkv.bias", "attn_output.weight", "attn_output.bias", "ffn_up.weight",
      "ffn_up.bias", "ffn_gate.weight", "ffn_gate.bias", "ffn_up.weight", "ffn_down.weight", "ffn_down.bias"};
  const std::string n = names[int(s.role)];
  return is_block_role(s.role) ? "blk." + std::to_string(s.layer) + "." + n : n;
}

Weight* slot(Model& m, const TensorSpec& s) { return &role_slot(m, m.blocks, s.role, s.layer); }
const Weight& slot(const Model& m, const TensorSpec& s) { return role_slot(m, m.blocks, s.role, s.layer); }

uint32_t file_type(GgmlType t) {  // llama.cpp's LlamaFileType for a whole-model type
  switch (t) {
    case GgmlType::F16:
      return 1;
    case GgmlType::Q4_0:
      return 2;
    case GgmlType::Q8_0:
      return 7;
    case GgmlType::Q4_K:
      return 14;
    case GgmlType::Q6_K:
      return 18;
    case GgmlType::BF16:
      return 32;
    default:
      return 0;
  }
}

// A FLOAT32 key read back as the shortest decimal that rounds to the same float.
double shortest_decimal(double x) {
  const float f = float(x);
  if (double(f) != x || !std::isfinite(f)) return x;
  for (int p = 1; p <= 9; ++p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*g", p, double(f));
    const double d = std::strtod(buf, nullptr);
    if (float(d) == f) return d;
  }
  return x;
}

// llama.cpp's own attention scale for an architecture when the file does not state one.
double default_scale(const std::string& arch, int n_layer, int d, int H, int dh) {
  if (arch == "gemma2" && n_layer == 46) return 1.0 / std::sqrt(double(d / H));  // Gemma 2 27B
  return 1.0 / std::sqrt(double(dh));
}

// Which tensors llama.cpp's converter permutes: llama's W_Q/b_Q (per query head) and W_K/b_K (per kv head).
int permuted_heads(const std::string& arch, const Arch& a, Role role) {
  if (arch != "llama") return 0;
  if (role == Role::wq || role == Role::bq) return a.H;
  if (role == Role::wk || role == Role::bk) return a.n_kv;
  return 0;
}

// Rows (the first dim) of x [rows, cols] regrouped per head of dh rows: `to_gguf` moves Hugging Face row
// s·dh/2 + i to 2i + s (llama.cpp's converter); otherwise the inverse.
template <class T>
void permute_rows(const T* src, T* dst, int64_t rows, int64_t cols, int heads, bool to_gguf) {
  const int64_t dh = rows / heads, half = dh / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t hf = h * dh + s * half + i, gg = h * dh + 2 * i + s;
        const int64_t from = to_gguf ? hf : gg, to = to_gguf ? gg : hf;
        std::memcpy(dst + to * cols, src + from * cols, size_t(cols) * sizeof(T));
      }
}

void check_finite(const Weight& w, const std::string& file) {
  const int64_t n = w.numel();
  int64_t bad = -1;
  if (w.type == WeightType::GGML) {  // dequantized a chunk of rows at a time, never whole
    const int64_t row = w.shape.size() > 1 ? w.numel() / w.shape[0] : n;
    const int64_t step = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(row, 1)) * row;
    std::vector<float> buf(size_t(std::min(step, n)));
    for (int64_t b = 0; b < n && bad < 0; b += step) {
      const int64_t k = std::min(step, n - b);
      w.read(b, k, buf.data());
      for (int64_t i = 0; i < k && bad < 0; i++)
        if (!std::isfinite(buf[size_t(i)])) bad = b + i;
    }
  } else if (w.type == WeightType::F32) {
    const auto* p = static_cast<const uint32_t*>(w.data);
    for (int64_t i = 0; i < n && bad < 0; i++)
      if ((p[i] & 0x7f800000u) == 0x7f800000u) bad = i;
  } else {
    const auto* p = static_cast<const uint16_t*>(w.data);
    const uint16_t e = w.type == WeightType::F16 ? 0x7c00 : 0x7f80;
    for (int64_t i = 0; i < n && bad < 0; i++)
      if ((p[i] & e) == e) bad = i;
  }
  if (bad >= 0) {
    float v;
    w.read(bad, 1, &v);
    data_error(file + ": tensor '" + w.name + "' holds " + (std::isnan(v) ? "NaN" : "Inf") +
               " at flat index " + std::to_string(bad) + "; refusing to compute with it");
  }
}

std::string ne_string(const std::vector<uint64_t>& ne) {
  return shape_string(std::vector<int64_t>(ne.begin(), ne.end()));
}

// The Arch a GGUF's metadata describes (model_type: the Hugging Face family it stands for).
Arch arch_from_gguf(const io::GgufFile& f, const std::string& g) {
  const io::GgufMetadata& md = f.metadata();
  const std::string& path = f.path();
  constexpr int64_t kMax = 1 << 24;
  auto key = [&](const char* k) { return g + "." + k; };
  Arch a;
  a.model_type = g;  // llama (also Mistral's files), qwen2, gemma, gemma2, phi3
  a.architecture = md.has("general.name") && md.get("general.name").type() == io::GgufType::STRING
                       ? "GGUF " + g + ": " + md.get_string("general.name")
                       : "GGUF " + g;
  a.n_layer = int(md.get_int_in(key("block_count"), 1, 1024));
  a.d = int(md.get_int_in(key("embedding_length"), 1, 1 << 16));
  a.n_ctx = int(md.get_int_in(key("context_length"), 1, kMax));
  a.H = int(md.get_int_in(key("attention.head_count"), 1, 4096));
  a.n_kv = md.has(key("attention.head_count_kv")) ? int(md.get_int_in(key("attention.head_count_kv"), 1, a.H))
                                                  : a.H;
  a.dh = md.has(key("attention.key_length")) ? int(md.get_int_in(key("attention.key_length"), 1, 1 << 16))
                                             : a.d / a.H;
  if (a.dh < 1) data_error(path + ": key '" + key("embedding_length") + "' is smaller than the head count");
  if (md.has(key("attention.value_length")) && md.get_int(key("attention.value_length")) != a.dh)
    data_error(path + ": key '" + key("attention.value_length") + "' differs from the key length " +
               std::to_string(a.dh) + "; qkv's families use one head size for keys and values");
  a.d_ff = int(md.get_int_in(key("feed_forward_length"), 1, 1 << 20));
  a.norm = NormKind::RMSNorm;  // Gemma's too: its stored weights already hold the + 1
  a.norm_eps = shortest_decimal(md.get_float(key("attention.layer_norm_rms_epsilon")));
  a.pos = PosKind::Rotary;
  a.pairing = RotaryPairing::Half;  // llama's permuted rows are undone on load
  a.rope_theta =
      md.has(key("rope.freq_base")) ? shortest_decimal(md.get_float(key("rope.freq_base"))) : 10000.0;
  a.rotary_dim =
      md.has(key("rope.dimension_count")) ? int(md.get_int_in(key("rope.dimension_count"), 2, a.dh)) : a.dh;
  if (md.has(key("rope.scaling.type"))) {
    const std::string& t = md.get_string(key("rope.scaling.type"));
    if (t == "linear") {
      a.rope_scaling.type = "linear";
      a.rope_scaling.factor = shortest_decimal(md.get_float(key("rope.scaling.factor")));
    } else if (t != "none") {
      data_error(path + ": key '" + key("rope.scaling.type") + "' is '" + t +
                 "'; qkv supports none and linear in GGUF files");
    }
  }
  a.qkv_layout = g == "phi3" ? QkvLayout::Stacked : QkvLayout::Separate;
  a.gate_up_fused = g == "phi3";
  a.mlp = g == "gemma" || g == "gemma2" ? MlpKind::GeGLU : MlpKind::SwiGLU;
  a.embed_scale = g == "gemma" || g == "gemma2";
  const std::string b0 = "blk.0.";
  a.qkv_bias = f.find(b0 + "attn_q.bias") != nullptr || f.find(b0 + "attn_qkv.bias") != nullptr;
  a.o_bias = f.find(b0 + "attn_output.bias") != nullptr;
  a.mlp_bias = f.find(b0 + "ffn_down.bias") != nullptr;
  a.tied_embeddings = f.find("output.weight") == nullptr;
  a.post_norms = g == "gemma2";
  a.attn_scale = default_scale(g, a.n_layer, a.d, a.H, a.dh);
  if (md.has(key("attention.scale"))) a.attn_scale = shortest_decimal(md.get_float(key("attention.scale")));
  if (g == "gemma2") {
    if (md.has(key("attn_logit_softcapping")))
      a.attn_softcap = shortest_decimal(md.get_float(key("attn_logit_softcapping")));
    if (md.has(key("final_logit_softcapping")))
      a.final_softcap = shortest_decimal(md.get_float(key("final_logit_softcapping")));
  }
  // Sliding windows: Gemma 2 on the even layers (llama.cpp's default 4096), Phi-3 on every layer when > 0;
  // llama files carry one only when qkv wrote a Mistral checkpoint with a window (llama.cpp ignores it).
  a.window.assign(size_t(a.n_layer), 0);
  const std::string sw = key("attention.sliding_window");
  const int w = md.has(sw) ? int(md.get_int_in(sw, 0, kMax)) : (g == "gemma2" ? 4096 : 0);
  if (w > 0 && g != "qwen2" && g != "gemma")
    for (int l = 0; l < a.n_layer; ++l)
      if (g != "gemma2" || l % 2 == 0) a.window[size_t(l)] = w;
  const io::GgufTensorInfo& emb = f.tensor("token_embd.weight");
  if (emb.ne.size() != 2 || emb.ne[0] != uint64_t(a.d) || emb.ne[1] == 0 || emb.ne[1] > uint64_t(kMax))
    data_error(path + ": tensor 'token_embd.weight' has ne " + ne_string(emb.ne) + ", expected [" +
               std::to_string(a.d) + ", vocab_size]");
  a.vocab_size = int(emb.ne[1]);
  if (md.has(key("vocab_size")) && md.get_int(key("vocab_size")) != a.vocab_size)
    data_error(path + ": key '" + key("vocab_size") + "' is " +
               std::to_string(md.get_int(key("vocab_size"))) + " but 'token_embd.weight' has " +
               std::to_string(a.vocab_size) + " rows");
  a.validate(path);
  return a;
}

}  // namespace

const std::vector<std::string>& gguf_family_architectures() {
  static const std::vector<std::string> a = {"llama", "qwen2", "gemma", "gemma2", "phi3"};
  return a;
}

std::string gguf_architecture_of(const Arch& a) {
  const std::string& t = a.model_type;
  if (t == "llama" || t == "mistral") return "llama";
  if (t == "qwen2" || t == "gemma" || t == "gemma2" || t == "phi3") return t;
  usage_error("a " + t +
              " model: qkv writes GGUF for gpt2, llama, mistral, qwen2, gemma, gemma2 and phi3 only");
}

Model load_gguf_lm(const std::string& path) {
  auto file = std::make_shared<io::GgufFile>(io::GgufFile::open(path));
  const io::GgufFile& f = *file;
  const std::string& g = f.metadata().get_string("general.architecture");
  bool known = false;
  for (const auto& x : gguf_family_architectures()) known = known || x == g;
  if (!known)
    data_error(path + ": key 'general.architecture' is '" + g +
               "'; qkv loads GGUF files of architecture gpt2, llama, qwen2, gemma, gemma2 and phi3");
  Model m;
  m.arch = arch_from_gguf(f, g);
  m.path = path;
  std::vector<TensorSpec> hf = tensor_table(m.arch);
  m.blocks.resize(size_t(m.arch.n_layer));
  // Every tensor checked (name, dims, type) before anything is read.
  std::vector<const io::GgufTensorInfo*> found;
  std::set<std::string> used;
  for (TensorSpec s : hf) {
    s.name = gguf_name(s);
    const io::GgufTensorInfo* t = f.find(s.name);
    if (!t)
      data_error(path + ": tensor '" + s.name + "' is missing (expected ne " +
                 ne_string(std::vector<uint64_t>(s.shape.rbegin(), s.shape.rend())) + " for this " + g +
                 " metadata)");
    const std::vector<uint64_t> want(s.shape.rbegin(), s.shape.rend());
    if (t->ne != want)
      data_error(path + ": tensor '" + s.name + "' has ne " + ne_string(t->ne) + ", expected " +
                 ne_string(want) + " from the metadata");
    if (!io::ggml_type_traits(uint32_t(t->type))->dequantizes)
      data_error(path + ": tensor '" + s.name + "' has type " + io::ggml_type_name(t->type) +
                 ", which qkv does not dequantize (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q4_1, Q5_0, Q5_1, Q5_K)");
    found.push_back(t);
    used.insert(s.name);
    m.table.push_back(s);
  }
  for (const auto& t : f.tensors()) {
    if (used.count(t.name)) continue;
    if (t.name == "rope_freqs.weight")
      data_error(path +
                 ": tensor 'rope_freqs.weight' (llama.cpp's per-frequency rope factors, Llama 3.1's rope "
                 "scaling) is not supported by qkv's GGUF loader");
    data_error(path + ": unexpected tensor '" + t.name + "' " + ne_string(t.ne) +
               " (not a parameter of this " + g + " metadata)");
  }
  std::map<std::string, int> type_count;
  bool permuted = false, quantized = false;
  for (size_t i = 0; i < m.table.size(); ++i) {
    const TensorSpec& s = m.table[i];
    const io::GgufTensorInfo& t = *found[i];
    ++type_count[io::ggml_type_name(t.type)];
    Weight* w = slot(m, s);
    w->name = s.name;
    w->shape = s.shape;
    const int heads = permuted_heads(g, m.arch, s.role);
    const bool plain = t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16;
    const size_t esize = t.type == GgmlType::F32 ? 4 : 2;
    const int64_t rows = s.shape[0], cols = t.numel() / std::max<int64_t>(rows, 1);
    if (plain && heads == 0 && reinterpret_cast<uintptr_t>(t.data) % esize == 0) {
      w->data = t.data;  // in place
      w->type = t.type == GgmlType::F32   ? WeightType::F32
                : t.type == GgmlType::F16 ? WeightType::F16
                                          : WeightType::BF16;
    } else if (plain && heads > 0 && reinterpret_cast<uintptr_t>(t.data) % esize == 0) {
      // llama's Q/K rows back into Hugging Face's order, in the stored type.
      if (esize == 4) {
        auto owned = std::make_shared<std::vector<float>>(size_t(t.numel()));
        permute_rows(reinterpret_cast<const float*>(t.data), owned->data(), rows, cols, heads, false);
        w->data = owned->data();
        m.keep_alive.push_back(owned);
      } else {
        auto owned = std::make_shared<std::vector<uint16_t>>(size_t(t.numel()));
        permute_rows(reinterpret_cast<const uint16_t*>(t.data), owned->data(), rows, cols, heads, false);
        w->data = owned->data();
        m.keep_alive.push_back(owned);
      }
      w->type = t.type == GgmlType::F32   ? WeightType::F32
                : t.type == GgmlType::F16 ? WeightType::F16
                                          : WeightType::BF16;
      permuted = true;
    } else if (plain) {
      // Unaligned F32/F16/BF16 (a general.alignment below 4): copied once into fp32 of our own.
      auto owned = std::make_shared<std::vector<float>>(size_t(t.numel()));
      f.read_f32(t, owned->data());
      if (heads > 0) {
        std::vector<float> tmp(*owned);
        permute_rows(tmp.data(), owned->data(), rows, cols, heads, false);
        permuted = true;
      }
      w->data = owned->data();
      w->type = WeightType::F32;
      m.keep_alive.push_back(owned);
    } else {
      // Quantized: kept as stored (any alignment), dequantized per use; llama's Q/K rows (whole blocks)
      // moved back into Hugging Face's order as bytes.
      w->type = WeightType::GGML;
      w->ggml_type = uint32_t(t.type);
      quantized = true;
      w->data = t.data;
      if (heads > 0) {
        const int64_t row_bytes = int64_t(t.nbytes) / rows;
        auto owned = std::make_shared<std::vector<unsigned char>>(size_t(t.nbytes));
        permute_rows(t.data, owned->data(), rows, row_bytes, heads, false);
        w->data = owned->data();
        m.keep_alive.push_back(owned);
        permuted = true;
      }
    }
    check_finite(*w, path);
    m.index[s.name] = i;
  }
  m.keep_alive.push_back(file);
  std::string types;
  for (const auto& [n, k] : type_count) types += (types.empty() ? "" : ", ") + std::to_string(k) + " " + n;
  m.source = path + " (GGUF v" + std::to_string(f.version()) + ", " + g + "; tensors " + types;
  if (permuted)
    m.source +=
        "; W_Q/W_K rows stored in llama.cpp's order for adjacent rotary pairs (2i, 2i+1), un-permuted on "
        "load: "
        "computed as Hugging Face's rotate_half pairs (i, i + d_head/2)";
  if (quantized) m.source += "; quantized tensors kept as stored and dequantized per use";
  if (g == "gemma" || g == "gemma2")
    m.source += "; norm weights stored as 1 + w (llama.cpp's converter) and used as plain RMSNorm gains";
  m.source += ")";
  return m;
}

std::vector<GgufTensorChoice> save_gguf_lm(const Model& model, const std::string& tokenizer_dir,
                                           const std::string& path, io::GgmlType type,
                                           const std::string& name) {
  const Arch& a = model.arch;
  const std::string g = gguf_architecture_of(a);
  auto key = [&](const char* k) { return g + "." + k; };
  io::GgufMetadata md(path);
  md.set("general.architecture", g);
  md.set("general.type", std::string("model"));
  md.set("general.name", name.empty() ? fs::path(path).stem().string() : name);
  md.set(key("block_count"), uint32_t(a.n_layer));
  md.set(key("context_length"), uint32_t(a.n_ctx));
  md.set(key("embedding_length"), uint32_t(a.d));
  md.set(key("feed_forward_length"), uint32_t(a.d_ff));
  md.set(key("attention.head_count"), uint32_t(a.H));
  md.set(key("attention.head_count_kv"), uint32_t(a.n_kv));
  md.set(key("rope.freq_base"), float(a.rope_theta));
  md.set(key("attention.layer_norm_rms_epsilon"), float(a.norm_eps));
  if (g == "gemma" || g == "gemma2" || a.dh * a.H != a.d) {
    md.set(key("attention.key_length"), uint32_t(a.dh));
    md.set(key("attention.value_length"), uint32_t(a.dh));
  }
  md.set(key("rope.dimension_count"), uint32_t(a.rotary_dim));
  if (g == "llama") md.set(key("vocab_size"), uint32_t(a.vocab_size));
  if (a.rope_scaling.type == "linear") {
    md.set(key("rope.scaling.type"), std::string("linear"));
    md.set(key("rope.scaling.factor"), float(a.rope_scaling.factor));
  } else if (!a.rope_scaling.type.empty()) {
    usage_error(path + ": rope scaling '" + a.rope_scaling.type +
                "' is not written to GGUF by qkv (llama.cpp stores llama3 scaling as a rope_freqs tensor)");
  }
  if (float(a.attn_scale) != float(default_scale(g, a.n_layer, a.d, a.H, a.dh)))
    md.set(key("attention.scale"), float(a.attn_scale));  // llama.cpp's key; its default rule would differ
  if (g == "gemma2") {
    md.set(key("attn_logit_softcapping"), float(a.attn_softcap));
    md.set(key("final_logit_softcapping"), float(a.final_softcap));
  } else if (a.attn_softcap > 0 || a.final_softcap > 0) {
    usage_error(path + ": soft-caps are written for gemma2 only");
  }
  // Windows as the architecture can say them.
  int w = 0;
  for (int x : a.window) w = std::max(w, x);
  for (int l = 0; l < a.n_layer; ++l) {
    const int want = w == 0 ? 0 : g == "gemma2" ? (l % 2 == 0 ? w : 0) : w;
    if (a.window_of(l) != want || ((g == "qwen2" || g == "gemma") && w > 0))
      usage_error(path + ": the sliding windows of this " + a.model_type + " model (layer " +
                  std::to_string(l) + ": " + std::to_string(a.window_of(l)) + ") cannot be written as a " +
                  g + " GGUF");
  }
  if (g == "gemma2" || g == "phi3" || (g == "llama" && w > 0))
    md.set(key("attention.sliding_window"), uint32_t(w));
  md.set("general.file_type", file_type(type));
  md.set("general.quantization_version", uint32_t(2));
  gguf_tokenizer_metadata(md, tokenizer_dir, a.vocab_size);

  std::vector<io::GgufWriteTensor> tensors;
  std::vector<GgufTensorChoice> choices;
  std::vector<float> buf, perm;
  for (const TensorSpec& s : model.table) {
    const Weight& wt = slot(model, s);
    if (wt.in_out) usage_error(path + ": tensor " + s.name + " is stored [in, out]; not a " + g + " layout");
    const std::string gname = gguf_name(s);
    const std::vector<uint64_t> ne(s.shape.rbegin(), s.shape.rend());
    buf.resize(size_t(wt.numel()));
    wt.read(0, wt.numel(), buf.data());
    const float* src = buf.data();
    if (a.norm == NormKind::RMSNormPlusOne && s.shape.size() == 1 &&
        is_norm_weight(s.role))
      for (float& x : buf) x = 1.0f + x;  // llama.cpp's converter stores Gemma's gain 1 + w (in fp32 here)
    if (const int heads = permuted_heads(g, a, s.role)) {
      perm.resize(buf.size());
      const int64_t rows = s.shape[0], cols = wt.numel() / rows;
      permute_rows(buf.data(), perm.data(), rows, cols, heads, true);
      src = perm.data();
    }
    const GgmlType t = ne.size() == 1 ? GgmlType::F32 : gguf_gpt2_tensor_type(type, ne[0]);
    try {
      tensors.push_back(io::make_gguf_tensor(gname, t, ne, src));
    } catch (const Error& e) {
      data_error(path + ": " + e.what());
    }
    choices.push_back({gname, t, ne});
  }
  io::write_gguf(path, md, tensors);
  return choices;
}

}  // namespace qkv

// Every family qkv writes <-> llama.cpp's GGUF architectures gpt2, llama, qwen2, gemma, gemma2, phi3 (names,
// layout, metadata, tensor types and the llama Q/K permutation in include/qkv/io/gguf_family.hpp).
#include "qkv/io/gguf_family.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "model/load_util.hpp"
#include "qkv/error.hpp"
#include "qkv/family.hpp"
#include "qkv/io/half.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

using io::GgmlType;

// llama.cpp's per-frequency rope factors: how its files carry Llama 3.1's llama3 rope scaling.
constexpr const char* kRopeFreqs = "rope_freqs.weight";
// Phi-3's longrope factors, as llama.cpp's converter writes them (F32 [rotary_dim / 2] each).
constexpr const char* kRopeLong = "rope_factors_long.weight";
constexpr const char* kRopeShort = "rope_factors_short.weight";

// The GGUF name of a tensor of the family tables (arch.cpp's roles).
std::string gguf_name(const TensorSpec& s) {
  // llama.cpp's names (LLM_TENSOR_NAMES), per role; empty: the role has no GGUF tensor.
  static const char* names[kRoles] = {"token_embd.weight",    "position_embd.weight",
                                      "output_norm.weight",   "output_norm.bias",
                                      "output.weight",        "attn_norm.weight",
                                      "attn_norm.bias",       "ffn_norm.weight",
                                      "ffn_norm.bias",        "post_attention_norm.weight",
                                      "post_ffw_norm.weight", "attn_q.weight",
                                      "attn_k.weight",        "attn_v.weight",
                                      "attn_q.bias",          "attn_k.bias",
                                      "attn_v.bias",          "attn_qkv.weight",
                                      "attn_qkv.bias",        "attn_output.weight",
                                      "attn_output.bias",     "ffn_up.weight",
                                      "ffn_up.bias",          "ffn_gate.weight",
                                      "ffn_gate.bias",        "ffn_up.weight",
                                      "ffn_down.weight",      "ffn_down.bias"};
  const std::string n = names[int(s.role)];
  return is_block_role(s.role) ? "blk." + std::to_string(s.layer) + "." + n : n;
}

Weight* slot(Model& m, const TensorSpec& s) {
  return &role_slot(m, m.blocks, s.role, s.layer);
}
const Weight& slot(const Model& m, const TensorSpec& s) {
  return role_slot(m, m.blocks, s.role, s.layer);
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

std::string ne_string(const std::vector<uint64_t>& ne) {
  return shape_string(std::vector<int64_t>(ne.begin(), ne.end()));
}

std::string architecture_name(const io::GgufMetadata& md, const std::string& g) {
  return md.has("general.name") && md.get("general.name").type() == io::GgufType::STRING
             ? "GGUF " + g + ": " + md.get_string("general.name")
             : "GGUF " + g;
}

// The vocabulary size: token_embd.weight's rows (ne [d, V]), checked against A.vocab_size when present.
int vocab_rows(const io::GgufFile& f, const std::string& g, int d) {
  constexpr uint64_t kMax = 1 << 24;
  const io::GgufTensorInfo& emb = f.tensor("token_embd.weight");
  if (emb.ne.size() != 2 || emb.ne[0] != uint64_t(d) || emb.ne[1] == 0 || emb.ne[1] > kMax)
    data_error(f.path() + ": tensor 'token_embd.weight' has ne " + ne_string(emb.ne) + ", expected [" +
               std::to_string(d) + ", vocab_size]");
  const std::string vk = g + ".vocab_size";
  if (f.metadata().has(vk) && f.metadata().get_int(vk) != int64_t(emb.ne[1]))
    data_error(f.path() + ": key '" + vk + "' is " + std::to_string(f.metadata().get_int(vk)) +
               " but 'token_embd.weight' has " + std::to_string(emb.ne[1]) + " rows");
  return int(emb.ne[1]);
}

// The Arch of a gpt2 GGUF: its keys read as the GPT-2 row of the family table reads a config.json, so the
// model is the one its Hugging Face directory gives (qkv.attn_only: qkv's attention-only models).
Arch gpt2_arch_from_gguf(const io::GgufFile& f) {
  const io::GgufMetadata& md = f.metadata();
  const std::string& path = f.path();
  const int64_t d = md.get_int_in("gpt2.embedding_length", 1, 1 << 16);
  const int64_t H = md.get_int_in("gpt2.attention.head_count", 1, 4096);
  if (d % H != 0)
    data_error(path + ": key 'gpt2.attention.head_count' (" + std::to_string(H) +
               ") does not divide 'gpt2.embedding_length' (" + std::to_string(d) + ")");
  const bool attn_only = md.has("qkv.attn_only") && md.get_bool("qkv.attn_only");
  nlohmann::json cj = {
      {"model_type", "gpt2"},
      {"n_layer", md.get_int_in("gpt2.block_count", 1, 1024)},
      {"n_positions", md.get_int_in("gpt2.context_length", 1, 1 << 20)},
      {"n_embd", d},
      {"n_head", H},
      {"layer_norm_epsilon", shortest_decimal(md.get_float("gpt2.attention.layer_norm_epsilon"))},
      {"qkv_attn_only", attn_only},
      {"vocab_size", vocab_rows(f, "gpt2", int(d))}};
  if (!attn_only) {
    const int64_t ff = md.get_int_in("gpt2.feed_forward_length", 1, 1 << 18);
    if (ff != 4 * d) cj["n_inner"] = ff;
  }
  Arch a = arch_from_config(cj, path);
  a.architecture = architecture_name(md, "gpt2");
  return a;
}

// One factor per rotary frequency from tensor `name` (F32 [rotary_dim / 2]); empty when the file has none.
// Only `arch`'s files carry it, as only llama.cpp's loader of that architecture reads it.
std::vector<double> rope_factor_tensor(const io::GgufFile& f, const std::string& g, const Arch& a, const char* name,
                                       const char* arch, const char* what) {
  const io::GgufTensorInfo* t = f.find(name);
  if (!t) return {};
  if (g != arch)
    data_error(f.path() + ": tensor '" + name + "' (" + what + ") is read in " + arch + " files only, " +
               "as llama.cpp reads it; this is a " + g + " file");
  const std::vector<uint64_t> want = {uint64_t(a.rotary_dim / 2)};
  if (t->type != GgmlType::F32 || t->ne != want)
    data_error(f.path() + ": tensor '" + name + "' is " + io::ggml_type_name(t->type) + " ne " + ne_string(t->ne) +
               ", expected F32 ne " + ne_string(want) + " (one factor per rotary frequency)");
  std::vector<float> v(size_t(t->numel()));
  f.read_f32(*t, v.data());
  return {v.begin(), v.end()};
}

// llama.cpp's per-frequency rope factors (its converter's form of Llama 3.1's llama3 scaling), in llama
// files as llama.cpp reads them: frequency i divided by value i (Arch::validate: finite and > 0).
void read_rope_freqs(const io::GgufFile& f, const std::string& g, Arch& a) {
  a.rope_scaling.freq_factors = rope_factor_tensor(f, g, a, kRopeFreqs, "llama", "per-frequency rope factors");
}

// Phi-3's longrope: both factor tensors, the original length and the attention factor (llama.cpp's
// default 1 when the key is absent).
void read_longrope(const io::GgufFile& f, const std::string& g, Arch& a) {
  RopeScaling& r = a.rope_scaling;
  r.long_factor = rope_factor_tensor(f, g, a, kRopeLong, "phi3", "longrope's long factors");
  r.short_factor = rope_factor_tensor(f, g, a, kRopeShort, "phi3", "longrope's short factors");
  if (r.long_factor.empty() && r.short_factor.empty()) return;
  if (r.long_factor.empty() || r.short_factor.empty())
    data_error(f.path() + ": tensor '" + (r.long_factor.empty() ? kRopeLong : kRopeShort) +
               "' is missing (longrope needs both factor tensors)");
  const io::GgufMetadata& md = f.metadata();
  r.type = "longrope";
  r.original_max_position_embeddings = int(md.get_int_in(g + ".rope.scaling.original_context_length", 1, 1 << 24));
  r.factor = double(a.n_ctx) / r.original_max_position_embeddings;
  r.attention_factor = md.has(g + ".rope.scaling.attn_factor")
                           ? shortest_decimal(md.get_float(g + ".rope.scaling.attn_factor"))
                           : 1.0;
}

// The Arch of a llama / qwen2 / gemma / gemma2 / phi3 GGUF (model_type: the Hugging Face family it
// stands for).
Arch rotary_arch_from_gguf(const io::GgufFile& f, const std::string& g) {
  const io::GgufMetadata& md = f.metadata();
  const std::string& path = f.path();
  constexpr int64_t kMax = 1 << 24;
  auto key = [&](const char* k) { return g + "." + k; };
  Arch a;
  a.model_type = g;  // llama (also Mistral's files), qwen2, gemma, gemma2, phi3
  a.architecture = architecture_name(md, g);
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
  a.vocab_size = vocab_rows(f, g, a.d);
  read_rope_freqs(f, g, a);
  read_longrope(f, g, a);
  a.validate(path);
  return a;
}

Arch arch_from_gguf(const io::GgufFile& f, const std::string& g) {
  return g == "gpt2" ? gpt2_arch_from_gguf(f) : rotary_arch_from_gguf(f, g);
}

// The GGUF dims of a tensor of the family table: GPT-2's Conv1D matrices ([in, out] in the table) are
// stored transposed, ne = [in, out] (ne[0] = in-features, as for every nn.Linear matrix); everything
// else as the table has it, ne = the shape reversed.
std::vector<uint64_t> gguf_ne(const Arch& a, const TensorSpec& s) {
  if (a.conv1d && s.shape.size() == 2 && !is_embedding(s.role))
    return {uint64_t(s.shape[0]), uint64_t(s.shape[1])};
  return {s.shape.rbegin(), s.shape.rend()};
}

// A gpt2 file's output.weight (older converters wrote GPT-2's tied unembedding out): accepted only as a
// true copy of token_embd.weight.
void check_tied_copy(const io::GgufFile& f, const io::GgufTensorInfo& out) {
  const io::GgufTensorInfo& emb = f.tensor("token_embd.weight");
  if (out.ne != emb.ne)
    data_error(f.path() + ": tensor 'output.weight' has a different shape than 'token_embd.weight'");
  if (!io::ggml_type_traits(uint32_t(out.type))->dequantizes)
    data_error(f.path() + ": tensor 'output.weight' has type " + io::ggml_type_name(out.type) +
               ", which qkv does not dequantize");
  std::vector<float> a(size_t(out.numel())), b(a.size());
  f.read_f32(out, a.data());
  f.read_f32(emb, b.data());
  if (a != b)
    data_error(f.path() +
               ": tensor 'output.weight' differs from 'token_embd.weight'; qkv supports GPT-2's tied "
               "unembedding only");
}

// Every tensor of the model's table found in the file with the dims and a type qkv reads, before anything
// is read; nothing else in the file. Fills m.table (GGUF names) and returns the tensors in its order.
std::vector<const io::GgufTensorInfo*> find_tensors(const io::GgufFile& f, const std::string& g, Model& m) {
  const std::string& path = f.path();
  std::vector<const io::GgufTensorInfo*> found;
  std::set<std::string> used;
  for (TensorSpec s : tensor_table(m.arch)) {
    const std::vector<uint64_t> want = gguf_ne(m.arch, s);
    s.name = gguf_name(s);
    const io::GgufTensorInfo* t = f.find(s.name);
    if (!t)
      data_error(path + ": tensor '" + s.name + "' is missing (expected ne " + ne_string(want) +
                 " for this " + g + " metadata)");
    if (t->ne != want)
      data_error(path + ": tensor '" + s.name + "' has ne " + ne_string(t->ne) + ", expected " +
                 ne_string(want) + " from the metadata");
    if (!io::ggml_type_traits(uint32_t(t->type))->dequantizes)
      data_error(path + ": tensor '" + s.name + "' has type " + io::ggml_type_name(t->type) +
                 ", which qkv does not dequantize (supported: " + io::ggml_type_list(false) + ")");
    found.push_back(t);
    used.insert(s.name);
    m.table.push_back(s);
  }
  for (const auto& t : f.tensors()) {
    if (used.count(t.name)) continue;
    if (g == "gpt2" && t.name == "output.weight") {
      check_tied_copy(f, t);
      continue;
    }
    if (t.name == kRopeFreqs && !m.arch.rope_scaling.freq_factors.empty()) continue;  // read into the Arch
    if ((t.name == kRopeLong || t.name == kRopeShort) && m.arch.rope_scaling.type == "longrope") continue;
    data_error(path + ": unexpected tensor '" + t.name + "' " + ne_string(t.ne) +
               " (not a parameter of this " + g + " metadata" +
               (m.arch.attn_only() ? ", which is attention-only" : "") + ")");
  }
  return found;
}

WeightType plain_type(GgmlType t) {
  return t == GgmlType::F32 ? WeightType::F32 : t == GgmlType::F16 ? WeightType::F16 : WeightType::BF16;
}

struct LoadNotes {
  bool permuted = false, quantized = false;
};

// One stored tensor as the weight w ([out, in] as stored), in its stored type: F32/F16/BF16 in place
// when aligned, quantized ones in place (dequantized per use). A copy of our own only for llama's Q/K
// (rows put back into Hugging Face's order; quantized blocks never straddle rows, so rows move as
// bytes) and for plain tensors a general.alignment below 4 leaves unaligned; the mapped pages are
// released once copied, so the tensor is resident once.
void view_tensor(const io::GgufFile& f, const io::GgufTensorInfo& t, int heads, Model& m, Weight& w,
                 LoadNotes& notes) {
  w.shape.assign(t.ne.rbegin(), t.ne.rend());
  w.in_out = false;
  const bool plain = t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16;
  const size_t esize = t.type == GgmlType::F32 ? 4 : 2;
  const bool aligned = !plain || reinterpret_cast<uintptr_t>(t.data) % esize == 0;
  notes.permuted = notes.permuted || heads > 0;
  notes.quantized = notes.quantized || !plain;
  w.type = plain ? plain_type(t.type) : WeightType::GGML;
  if (!plain) w.ggml_type = uint32_t(t.type);
  w.data = t.data;
  if (aligned && heads == 0) return;
  auto owned = std::make_shared<std::vector<uint32_t>>((t.nbytes + 3) / 4);  // 4-byte aligned
  auto* dst = reinterpret_cast<unsigned char*>(owned->data());
  if (heads > 0) {
    const int64_t rows = std::max<int64_t>(w.shape[0], 1);
    permute_rows(t.data, dst, rows, int64_t(t.nbytes) / rows, heads, false);
    f.release(t);
  } else {
    constexpr uint64_t kPiece = uint64_t(4) << 20;  // copy and release in pieces: never two whole copies
    for (uint64_t i = 0; i < t.nbytes; i += kPiece) {
      io::GgufTensorInfo piece;
      piece.data = t.data + i, piece.nbytes = std::min(kPiece, t.nbytes - i);
      std::memcpy(dst + i, piece.data, piece.nbytes);
      f.release(piece);
    }
  }
  w.data = owned->data();
  m.keep_alive.push_back(owned);
}

// ", Q4_K_M": general.file_type by llama.cpp's name; "" when absent or not an integer (it only informs).
std::string file_type_note(const io::GgufMetadata& md) {
  if (!md.has("general.file_type")) return "";
  try {
    return ", " + io::gguf_file_type_name(md.get_int("general.file_type"));
  } catch (const Error&) {
    return "";
  }
}

std::string source_line(const io::GgufFile& f, const std::string& g, const std::map<std::string, int>& types,
                        const LoadNotes& notes) {
  std::string ts;
  for (const auto& [n, k] : types) ts += (ts.empty() ? "" : ", ") + std::to_string(k) + " " + n;
  std::string s = f.path() + " (GGUF v" + std::to_string(f.version()) + ", " + g + file_type_note(f.metadata()) +
                  "; tensors " + ts;
  if (notes.permuted)
    s += "; W_Q/W_K rows stored in llama.cpp's order for adjacent rotary pairs (2i, 2i+1), un-permuted on "
         "load: "
         "computed as Hugging Face's rotate_half pairs (i, i + d_head/2)";
  if (notes.quantized) s += "; quantized tensors kept as stored and dequantized per use";
  if (g == "gemma" || g == "gemma2")
    s += "; norm weights stored as 1 + w (llama.cpp's converter) and used as plain RMSNorm gains";
  if (g == "gpt2")
    s += "; matrices stored [out, in] (Conv1D transposed, as llama.cpp's converter writes them)";
  return s + ")";
}

// ---- writing ----

// gpt2's keys beyond the common ones, as llama.cpp's GPT2Model converter writes them.
void set_gpt2_keys(io::GgufMetadata& md, const Arch& a) {
  md.set("gpt2.attention.layer_norm_epsilon", float(a.norm_eps));
  if (a.attn_only()) md.set("qkv.attn_only", true);  // qkv's own models; llama.cpp cannot run them
}

// The rotary families' keys beyond the common ones; usage errors for what the architecture cannot say.
void set_rotary_keys(io::GgufMetadata& md, const Arch& a, const std::string& g, const std::string& path) {
  auto key = [&](const char* k) { return g + "." + k; };
  md.set(key("attention.head_count_kv"), uint32_t(a.n_kv));
  md.set(key("rope.freq_base"), float(a.rope_theta));
  md.set(key("attention.layer_norm_rms_epsilon"), float(a.norm_eps));
  if (g == "gemma" || g == "gemma2" || a.dh * a.H != a.d) {
    md.set(key("attention.key_length"), uint32_t(a.dh));
    md.set(key("attention.value_length"), uint32_t(a.dh));
  }
  md.set(key("rope.dimension_count"), uint32_t(a.rotary_dim));
  if (a.rope_scaling.type == "linear") {
    md.set(key("rope.scaling.type"), std::string("linear"));
    md.set(key("rope.scaling.factor"), float(a.rope_scaling.factor));
  }  // llama3 (and factors read from a GGUF): no key, the rope_freqs tensor (rope_freqs_of), as llama.cpp's
     // converter
  if (a.rope_scaling.type == "longrope") {  // the factors go in as tensors (save_gguf_lm)
    if (g != "phi3")
      usage_error(path + ": longrope is written to GGUF for phi3 only (llama.cpp reads rope_factors_long/short there)");
    md.set(key("rope.scaling.attn_factor"), float(a.rope_scaling.attention_factor));
    md.set(key("rope.scaling.original_context_length"), uint32_t(a.rope_scaling.original_max_position_embeddings));
  }
  if (g != "llama" && (a.rope_scaling.type == "llama3" || !a.rope_scaling.freq_factors.empty()))
    usage_error(path +
                ": per-frequency rope factors (llama3 scaling) are written to GGUF for llama only (llama.cpp "
                "reads rope_freqs.weight there)");
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
}

// The rope_freqs.weight a llama file of this Arch carries (empty: none): the factors read from a GGUF, or
// llama3 scaling's, derived from rope_inv_freq (its one definition of llama3) as the unscaled frequency over
// the scaled one — 1 for short wavelengths, `factor` for long ones, 1 / ((1 − s)/factor + s) between, the
// values llama.cpp's converter writes.
std::vector<float> rope_freqs_of(const Arch& a) {
  const RopeScaling& s = a.rope_scaling;
  if (!s.freq_factors.empty()) return {s.freq_factors.begin(), s.freq_factors.end()};
  if (s.type != "llama3") return {};
  Arch plain = a;
  plain.rope_scaling = {};
  const std::vector<double> scaled = rope_inv_freq(a), unscaled = rope_inv_freq(plain);
  std::vector<float> out;
  for (size_t i = 0; i < scaled.size(); i++) out.push_back(float(unscaled[i] / scaled[i]));
  return out;
}

// Every key but the tokenizer's.
io::GgufMetadata arch_metadata(const Arch& a, const std::string& g, const std::string& path,
                               const io::GgufMix& mix, const std::string& name) {
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
  if (g == "gpt2")
    set_gpt2_keys(md, a);
  else
    set_rotary_keys(md, a, g, path);
  // llama.cpp sizes a tokenizer-less ("none") vocabulary from it; the loader checks it against the rows.
  md.set(key("vocab_size"), uint32_t(a.vocab_size));
  md.set("general.file_type", mix.file_type);
  md.set("general.quantization_version", uint32_t(2));
  return md;
}

// How one weight is stored: llama.cpp's name, its dims as nn.Linear keeps them (GPT-2's Conv1D [in, out]
// as [out, in]: ne = {in, out}), and its type — 1-D tensors and the position embedding F32, as llama.cpp's
// converter keeps them (and llama-quantize leaves them), the matrices as the mix says.
GgufTensorChoice gguf_choice(const Model& model, const TensorSpec& s, const io::GgufMix& mix,
                             const io::GgufMixModel& mm) {
  const Weight& wt = slot(model, s);
  std::vector<uint64_t> ne(wt.shape.rbegin(), wt.shape.rend());
  if (wt.in_out) ne = {uint64_t(wt.shape[0]), uint64_t(wt.shape[1])};
  const std::string name = gguf_name(s);
  const GgmlType t =
      ne.size() == 1 || s.role == Role::wpe ? GgmlType::F32 : io::gguf_mix_tensor_type(mix, mm, name, ne[0]);
  return {name, t, ne};
}

// Its bytes: fp32 rows of in-features (GPT-2's Conv1D transposed), Gemma's gains as 1 + w, llama's Q/K rows
// permuted, then converted or quantized to the chosen type.
std::vector<unsigned char> gguf_bytes(const Model& model, const TensorSpec& s, const std::string& g,
                                      const GgufTensorChoice& c, const std::string& path) {
  const Arch& a = model.arch;
  const Weight& wt = slot(model, s);
  std::vector<float> buf(size_t(wt.numel())), tmp;
  wt.read(0, wt.numel(), buf.data());
  if (wt.in_out) {  // [in, out] -> [out, in]
    const int64_t in = wt.shape[0], out = wt.shape[1];
    tmp.resize(buf.size());
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) tmp[size_t(o * in + i)] = buf[size_t(i * out + o)];
    buf.swap(tmp);
  }
  if (a.norm == NormKind::RMSNormPlusOne && wt.shape.size() == 1 && is_norm_weight(s.role))
    for (float& x : buf) x = 1.0f + x;  // llama.cpp's converter stores Gemma's gain 1 + w (in fp32 here)
  if (const int heads = permuted_heads(g, a, s.role)) {
    tmp.resize(buf.size());
    const int64_t rows = int64_t(c.ne.back()), cols = wt.numel() / rows;
    permute_rows(buf.data(), tmp.data(), rows, cols, heads, true);
    buf.swap(tmp);
  }
  try {
    return io::make_gguf_tensor(c.name, c.type, c.ne, buf.data()).data;
  } catch (const Error& e) {
    data_error(path + ": " + e.what());
  }
}

}  // namespace

const std::vector<std::string>& gguf_family_architectures() {
  static const std::vector<std::string> a = [] {
    std::vector<std::string> v;
    for (const Family& f : families())
      if (!f.gguf_architecture.empty() && std::find(v.begin(), v.end(), f.gguf_architecture) == v.end())
        v.push_back(f.gguf_architecture);
    return v;
  }();
  return a;
}

std::string gguf_architecture_of(const Arch& a) {
  const std::string& g = family(a.model_type, "gguf").gguf_architecture;
  if (!g.empty()) return g;
  std::string known;
  for (const Family& f : families())
    if (!f.gguf_architecture.empty()) known += (known.empty() ? "" : ", ") + f.model_type;
  usage_error("a " + a.model_type + " model: qkv writes GGUF for " + known + " only");
}

Model load_gguf_lm(const std::string& path) {
  auto file = std::make_shared<io::GgufFile>(io::GgufFile::open(path));
  const io::GgufFile& f = *file;
  const std::string& g = f.metadata().get_string("general.architecture");
  const auto& known = gguf_family_architectures();
  if (std::find(known.begin(), known.end(), g) == known.end()) {
    std::string list;
    for (size_t i = 0; i < known.size(); ++i)
      list += (i == 0 ? "" : i + 1 == known.size() ? " and " : ", ") + known[i];
    data_error(path + ": key 'general.architecture' is '" + g + "'; qkv loads GGUF files of architecture " +
               list);
  }
  Model m;
  m.arch = arch_from_gguf(f, g);
  m.path = path;
  m.blocks.resize(size_t(m.arch.n_layer));
  const std::vector<const io::GgufTensorInfo*> found = find_tensors(f, g, m);
  std::map<std::string, int> type_count;
  LoadNotes notes;
  for (size_t i = 0; i < m.table.size(); ++i) {
    const TensorSpec& s = m.table[i];
    const io::GgufTensorInfo& t = *found[i];
    ++type_count[io::ggml_type_name(t.type)];
    Weight* w = slot(m, s);
    w->name = s.name;
    view_tensor(f, t, permuted_heads(g, m.arch, s.role), m, *w, notes);
    detail::check_finite(*w, path);
    m.index[s.name] = i;
  }
  m.keep_alive.push_back(file);
  m.source = source_line(f, g, type_count, notes);
  return m;
}

std::vector<GgufTensorChoice> save_gguf_lm(const Model& model, const std::string& tokenizer_dir,
                                           const std::string& path, const io::GgufMix& mix,
                                           const std::string& name, int* tokenizer_tokens) {
  const std::string g = gguf_architecture_of(model.arch);
  io::GgufMetadata md = arch_metadata(model.arch, g, path, mix, name);
  // No tokenizer: llama.cpp's "none" (it refuses a file without tokenizer.ggml.model).
  const int tokens = gguf_tokenizer_metadata(md, tokenizer_dir, model.arch.vocab_size);
  if (tokens == 0) md.set("tokenizer.ggml.model", std::string("none"));
  if (tokenizer_tokens) *tokenizer_tokens = tokens;
  io::GgufMixModel mm{g, model.arch.n_layer, model.arch.H, model.arch.n_kv, true};
  for (const TensorSpec& s : model.table)
    if (gguf_name(s) == "output.weight") mm.tied = false;
  // Each tensor made when the writer reaches it: one weight in memory at a time, not the whole model.
  std::vector<io::GgufWriteTensor> tensors;
  std::vector<GgufTensorChoice> choices;
  for (const TensorSpec& s : model.table) {
    choices.push_back(gguf_choice(model, s, mix, mm));
    const GgufTensorChoice& c = choices.back();
    tensors.push_back({c.name, c.type, c.ne, {}, [&model, &s, &g, c, &path] {
                         return gguf_bytes(model, s, g, c, path);
                       }});
  }
  // The rope factor tensors first, as llama.cpp's converter writes them: llama3's rope_freqs, or longrope's
  // long then short factors.
  const RopeScaling& rs = model.arch.rope_scaling;
  std::vector<std::pair<const char*, std::vector<float>>> factors;
  if (std::vector<float> ff = rope_freqs_of(model.arch); !ff.empty()) factors.emplace_back(kRopeFreqs, ff);
  if (rs.type == "longrope") {
    factors.emplace_back(kRopeLong, std::vector<float>(rs.long_factor.begin(), rs.long_factor.end()));
    factors.emplace_back(kRopeShort, std::vector<float>(rs.short_factor.begin(), rs.short_factor.end()));
  }
  for (size_t i = 0; i < factors.size(); ++i) {
    const std::vector<uint64_t> ne = {uint64_t(factors[i].second.size())};
    tensors.insert(tensors.begin() + long(i), io::make_gguf_tensor(factors[i].first, GgmlType::F32, ne,
                                                                   factors[i].second.data()));
    choices.insert(choices.begin() + long(i), {factors[i].first, GgmlType::F32, ne});
  }
  io::write_gguf(path, md, tensors);
  return choices;
}

std::vector<GgufTensorChoice> save_gguf_lm(const Model& model, const std::string& tokenizer_dir,
                                           const std::string& path, io::GgmlType type,
                                           const std::string& name, int* tokenizer_tokens) {
  const auto mix = io::parse_gguf_mix(io::ggml_type_name(type), true);
  if (!mix) usage_error("GGUF tensor type " + io::ggml_type_name(type) + ": qkv does not write it");
  return save_gguf_lm(model, tokenizer_dir, path, *mix, name, tokenizer_tokens);
}

}  // namespace qkv

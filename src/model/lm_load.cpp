// Loading a model of any family (lm.hpp): config.json -> Arch, the family's tensor table checked
// against the file(s), weights as views into the mappings (F32 in place when aligned; F16/BF16 as stored).
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "model/load_util.hpp"
#include "qkv/error.hpp"
#include "qkv/family.hpp"
#include "qkv/io/gguf_family.hpp"
#include "qkv/io/gguf_quant.hpp"
#include "qkv/io/half.hpp"
#include "qkv/io/mapped_file.hpp"
#include "qkv/io/qmatmul.hpp"
#include "qkv/io/qpanel.hpp"
#include "qkv/io/safetensors.hpp"
#include "qkv/lm.hpp"

namespace fs = std::filesystem;

namespace qkv {

using nlohmann::json;

int64_t Weight::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

void Weight::read(int64_t begin, int64_t n, float* out) const {
  switch (type) {
    case WeightType::F32:
      std::memcpy(out, static_cast<const float*>(data) + begin, size_t(n) * sizeof(float));
      return;
    case WeightType::F16: {
      const auto* p = static_cast<const uint16_t*>(data) + begin;
      for (int64_t i = 0; i < n; i++) out[i] = io::f16_to_float(p[i]);
      return;
    }
    case WeightType::BF16: {
      // bf16 -> f32 is a 16-bit shift: exact, and simple enough for the compiler to vectorise.
      const auto* p = static_cast<const uint16_t*>(data) + begin;
#pragma omp simd
      for (int64_t i = 0; i < n; i++) {
        const uint32_t bits = uint32_t(p[i]) << 16;
        std::memcpy(out + i, &bits, 4);
      }
      return;
    }
    case WeightType::GGML: {
      // The blocks covering [begin, begin + n), dequantized (rows are whole blocks: row reads need no copy).
      const auto t = io::GgmlType(ggml_type);
      const auto tr = io::ggml_type_traits(ggml_type);
      const int64_t bs = tr->block_size;
      const int64_t b0 = begin / bs, b1 = (begin + n + bs - 1) / bs;
      const auto* base = static_cast<const unsigned char*>(data) + size_t(b0) * tr->type_size;
      if (begin % bs == 0 && n % bs == 0) {
        io::dequantize_row(t, base, out, n);
        return;
      }
      std::vector<float> tmp(static_cast<size_t>((b1 - b0) * bs));
      io::dequantize_row(t, base, tmp.data(), (b1 - b0) * bs);
      std::copy_n(tmp.data() + (begin - b0 * bs), n, out);
      return;
    }
  }
}

std::string weight_type_name(const Weight& w) {
  switch (w.type) {
    case WeightType::F32: return "F32";
    case WeightType::F16: return "F16";
    case WeightType::BF16: return "BF16";
    case WeightType::GGML: return io::ggml_type_name(io::GgmlType(w.ggml_type));
  }
  return "?";
}

const float* Weight::f32(int64_t begin, int64_t n, std::vector<float>& scratch) const {
  if (type == WeightType::F32) return static_cast<const float*>(data) + begin;
  if (scratch.size() < size_t(n)) scratch.resize(size_t(n));
  read(begin, n, scratch.data());
  return scratch.data();
}

int64_t ActView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const auto& t : table) {
    int64_t c = 1;
    for (int64_t s : t.shape) c *= s;
    n += c;
  }
  return n;
}

namespace detail {

json read_json(const std::string& path) {
  const io::MappedFile f = io::MappedFile::open(path);
  const char* p = reinterpret_cast<const char*>(f.data());
  try {
    return json::parse(p, p + f.size());
  } catch (const json::exception& e) {
    data_error(path + ": not valid JSON: " + e.what());
  }
}

namespace {
// The first i < n with bad(p[i]), or -1. Chunks of 4096 are or-reduced without an early exit, which the
// compiler vectorizes; only a chunk with a hit is searched.
template <class T, class Bad>
int64_t first_where(const T* p, int64_t n, Bad bad) {
  constexpr int64_t kChunk = 4096;
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t k = std::min(kChunk, n - b);
    unsigned hit = 0;
    for (int64_t i = 0; i < k; i++) hit |= unsigned(bad(p[b + i]));
    if (hit)
      for (int64_t i = 0; i < k; i++)
        if (bad(p[b + i])) return b + i;
  }
  return -1;
}

// Stored bits with an all-ones exponent e (Inf or NaN), or float values with !(|x| <= FLT_MAX).
template <class U>
int64_t first_nonfinite(const U* p, int64_t n, U e) {
  return first_where(p, n, [e](U x) { return (x & e) == e; });
}
int64_t first_nonfinite(const float* p, int64_t n) {
  return first_where(p, n, [](float x) { return !(std::fabs(x) <= FLT_MAX); });
}

// The same for a quantized (GGML) weight, by its dequantized values, never expanded whole: an [out, in]
// matrix of a type with vector decoders (io/qpanel.hpp) in panels of about 256 Ki values over the threads
// (the lowest bad index wins, as a sequential scan would find it); anything else through Weight::read,
// about 1 Mi values (whole rows) at a time.
int64_t first_nonfinite_ggml(const Weight& w) {
  const int64_t n = w.numel(), row = w.shape.size() > 1 ? n / w.shape[0] : n;
  const auto t = io::GgmlType(w.ggml_type);
  if (w.shape.size() == 2 && !w.in_out && io::qmatmul_supports(t) && row % io::ggml_type_traits(w.ggml_type)->block_size == 0) {
    const int rows = int(w.shape[0]), per = int(std::max<int64_t>(1, (int64_t(1) << 18) / row));
    const int panels = (rows + per - 1) / per;
    int64_t first = n;
#pragma omp parallel reduction(min : first) if (panels > 1)
    {
      std::vector<float> buf(size_t(std::min(per, rows)) * size_t(row));
#pragma omp for schedule(dynamic, 1)
      for (int p = 0; p < panels; p++) {
        const int r0 = p * per, r1 = std::min(rows, r0 + per);
        io::dequantize_panel(t, w.data, r0, r1, int(row), buf.data());
        const int64_t i = first_nonfinite(buf.data(), int64_t(r1 - r0) * row);
        if (i >= 0) first = std::min(first, int64_t(r0) * row + i);
      }
    }
    return first < n ? first : -1;
  }
  const int64_t step = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(row, 1)) * row;
  std::vector<float> buf(size_t(std::min(step, n)));
  for (int64_t b = 0; b < n; b += step) {
    const int64_t k = std::min(step, n - b);
    w.read(b, k, buf.data());
    const int64_t i = first_nonfinite(buf.data(), k);
    if (i >= 0) return b + i;
  }
  return -1;
}
}  // namespace

// Refuses NaN and Inf: F32/F16/BF16 by their bit patterns (exponent all ones), without converting
// anything; a quantized (GGML) weight by its dequantized values.
void check_finite(const Weight& w, const std::string& file) {
  const int64_t n = w.numel();
  const int64_t bad = w.type == WeightType::F32    ? first_nonfinite(static_cast<const uint32_t*>(w.data), n, 0x7f800000u)
                      : w.type == WeightType::GGML ? first_nonfinite_ggml(w)
                                                   : first_nonfinite(static_cast<const uint16_t*>(w.data), n,
                                                                     uint16_t(w.type == WeightType::F16 ? 0x7c00 : 0x7f80));
  if (bad >= 0) {
    float v;
    w.read(bad, 1, &v);
    data_error(file + ": tensor " + w.name + " holds " + (std::isnan(v) ? "NaN" : "Inf") + " at flat index " +
               std::to_string(bad) + "; refusing to compute with it");
  }
}

std::string dtype_summary(const Model& m) {
  std::map<std::string, int> n;
  for (const auto& s : m.table) n[weight_type_name(m.weight(s.name))]++;
  std::string s;
  for (const auto& [t, c] : n) s += std::string(s.empty() ? "" : "+") + t;
  return s;
}

}  // namespace detail

using detail::check_finite;
using detail::dtype_summary;
using detail::read_json;

namespace {
Weight* slot(Model& m, const TensorSpec& s);
}

const Weight& Model::weight(const std::string& name) const {
  const auto it = index.find(name);
  if (it == index.end()) usage_error(path + ": no tensor named " + name);
  return *slot(const_cast<Model&>(*this), table[it->second]);
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Buffers some checkpoints carry that are not weights: causal masks, their fill value, rotary tables.
bool is_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") || ends_with(name, "attention.bias") ||
         ends_with(name, "attention.masked_bias") || ends_with(name, "rotary_emb.inv_freq");
}

// Where a tensor lives: its file and its header entry.
struct Found {
  const io::SafetensorsFile* file;
  const io::TensorInfo* info;
};

WeightType weight_type(io::DType t) {
  switch (t) {
    case io::DType::F32: return WeightType::F32;
    case io::DType::F16: return WeightType::F16;
    case io::DType::BF16: return WeightType::BF16;
  }
  return WeightType::F32;
}

Weight* slot(Model& m, const TensorSpec& s) { return &role_slot(m, m.blocks, s.role, s.layer); }

// A tensor's bytes copied to dst in pieces of 4 MiB, each piece's whole mapped pages released once
// copied: the copy and its source are never resident together beyond one piece.
void copy_releasing(const io::SafetensorsFile& file, const io::TensorInfo& t, void* dst) {
  constexpr size_t kPiece = size_t(4) << 20;
  const unsigned char* src = file.bytes(t);
  const size_t n = size_t(t.end - t.begin);
  for (size_t i = 0; i < n; i += kPiece) {
    const size_t k = std::min(kPiece, n - i);
    std::memcpy(static_cast<unsigned char*>(dst) + i, src + i, k);
    io::TensorInfo piece = t;
    piece.begin = t.begin + i, piece.end = t.begin + i + k;
    file.release(piece);
  }
}

// Whether a tied checkpoint's lm_head.weight holds exactly the embedding's values, compared a block of
// rows at a time (not as two whole fp32 copies: GPT-2's would be 2 × 154 MB), its pages released after.
bool same_as_embedding(const io::SafetensorsFile& file, const io::TensorInfo& t, const Weight& wte) {
  const size_t es = io::dtype_size(t.dtype);
  const int64_t n = t.numel(), block = int64_t(1) << 18;
  std::vector<float> a, b(size_t(std::min(n, block)));
  bool same = true;
  for (int64_t i = 0; i < n && same; i += block) {
    const int64_t k = std::min(block, n - i);
    io::TensorInfo piece = t;
    piece.shape = {k};
    piece.begin = t.begin + uint64_t(i) * es, piece.end = piece.begin + uint64_t(k) * es;
    a.resize(size_t(k));
    file.read_f32(piece, a.data());
    wte.read(i, k, b.data());
    same = std::equal(a.begin(), a.end(), b.begin());
    file.release(piece);
  }
  return same;
}

// Builds the model from safetensors files whose tensors `where(name)` locates; checks the family's
// table against them (missing, mis-shaped, extra) before anything is read.
Model from_files(const Arch& arch, const std::vector<std::shared_ptr<io::SafetensorsFile>>& files,
                 const std::map<std::string, const io::SafetensorsFile*>& weight_map, const std::string& path) {
  Model m;
  m.arch = arch;
  m.path = path;
  m.table = tensor_table(arch);
  m.blocks.resize(size_t(arch.n_layer));
  const std::string& prefix = family(arch.model_type, path).optional_prefix;  // GPT-2's "transformer."
  auto locate = [&](const std::string& name) -> Found {
    for (const std::string& n :
         prefix.empty() ? std::vector<std::string>{name} : std::vector<std::string>{name, prefix + name}) {
      if (!weight_map.empty()) {
        const auto it = weight_map.find(n);
        if (it != weight_map.end()) {
          const io::TensorInfo* t = it->second->find(n);
          if (!t)
            data_error(it->second->path() + ": tensor " + n + " is missing (model.safetensors.index.json places it in this shard)");
          return {it->second, t};
        }
      } else {
        for (const auto& f : files)
          if (const io::TensorInfo* t = f->find(n)) return {f.get(), t};
      }
    }
    return {nullptr, nullptr};
  };
  std::set<std::pair<const io::SafetensorsFile*, std::string>> used;
  std::vector<Found> found;
  for (const auto& s : m.table) {
    const Found f = locate(s.name);
    if (!f.info)
      data_error((files.size() == 1 ? files[0]->path() : path) + ": tensor " + s.name + " is missing (expected shape " +
                 shape_string(s.shape) + " for this " + arch.model_type + " config)");
    if (f.info->shape != s.shape)
      data_error(f.file->path() + ": tensor " + f.info->name + " has shape " + shape_string(f.info->shape) +
                 ", expected " + shape_string(s.shape) + " from the config");
    used.insert({f.file, f.info->name});
    found.push_back(f);
  }
  for (const auto& f : files)
    for (const auto& t : f->tensors()) {
      if (used.count({f.get(), t.name}) || is_buffer(t.name)) continue;
      const std::string bare =
          !prefix.empty() && t.name.rfind(prefix, 0) == 0 ? t.name.substr(prefix.size()) : t.name;
      if (bare == "lm_head.weight" && arch.tied_embeddings) continue;  // checked equal to wte below
      data_error(f->path() + ": unexpected tensor " + t.name + " " + shape_string(t.shape) + " (not a parameter of this " +
                 arch.model_type + " config" + (arch.tied_embeddings && bare != "lm_head.weight" ? "" : "") + ")");
    }
  for (size_t i = 0; i < m.table.size(); i++) {
    const TensorSpec& s = m.table[i];
    const Found& f = found[i];
    Weight* w = slot(m, s);
    w->name = f.info->name;
    w->shape = s.shape;
    w->type = weight_type(f.info->dtype);
    w->data = f.file->bytes(*f.info);
    // GPT-2's Conv1D matrices are [in, out]; every other family's are nn.Linear [out, in].
    w->in_out = arch.conv1d && s.shape.size() == 2 && !is_embedding(s.role);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(w->data);
    if (addr % (w->type == WeightType::F32 ? 4 : 2) != 0) {
      // Unaligned: copied into memory of our own in its stored type, each piece's mapped pages
      // released as it is copied, so the file is resident once, never beside a whole copy.
      const size_t bytes = size_t(f.info->end - f.info->begin);
      auto owned = std::make_shared<std::vector<uint32_t>>((bytes + 3) / 4);
      copy_releasing(*f.file, *f.info, owned->data());
      w->data = owned->data();
      m.keep_alive.push_back(owned);
    }
    check_finite(*w, f.file->path());
    m.index[s.name] = i;
  }
  for (const auto& f : files) m.keep_alive.push_back(f);
  // A tied checkpoint may still carry lm_head.weight: accept it only as a true copy of the embedding.
  if (arch.tied_embeddings) {
    const Found lm = locate("lm_head.weight");
    if (lm.info) {
      if (lm.info->shape != m.wte.shape)
        data_error(lm.file->path() + ": tensor lm_head.weight has shape " + shape_string(lm.info->shape) + ", expected " +
                   shape_string(m.wte.shape) + " (tied to the embedding)");
      if (!same_as_embedding(*lm.file, *lm.info, m.wte))
        data_error(lm.file->path() + ": lm_head.weight differs from the embedding, but the config ties them "
                   "(tie_word_embeddings); refusing to guess which one is meant");
    }
  }
  return m;
}

}  // namespace

QkvMaps qkv_maps(const Model& m, int l) {
  const Arch& a = m.arch;
  if (l < 0 || l >= a.n_layer) usage_error("layer " + std::to_string(l) + " is outside [0, " + std::to_string(a.n_layer) + ")");
  const BlockWeights& w = m.blocks[size_t(l)];
  const int d = a.d, dh = a.dh, qd = a.q_dim(), kvd = a.kv_dim();
  QkvMaps r;
  r.Wq.resize(size_t(qd) * d), r.Wk.resize(size_t(kvd) * d), r.Wv.resize(size_t(kvd) * d);
  auto whole = [](const Weight& x) {
    std::vector<float> v(size_t(x.numel()));
    if (x.present()) x.read(0, x.numel(), v.data());
    return v;
  };
  if (a.qkv_layout == QkvLayout::Separate) {
    r.Wq = whole(w.wq), r.Wk = whole(w.wk), r.Wv = whole(w.wv);
    if (a.qkv_bias) r.bq = whole(w.bq), r.bk = whole(w.bk), r.bv = whole(w.bv);
    return r;
  }
  const std::vector<float> W = whole(w.wqkv), B = a.qkv_bias ? whole(w.bqkv) : std::vector<float>();
  // row(part, i): which output of the fused map is row i of the Q (0), K (1) or V (2) map.
  auto row = [&](int part, int i) {
    const int h = i / dh, e = i % dh;
    switch (a.qkv_layout) {
      case QkvLayout::Gpt2Thirds: return part * d + i;
      case QkvLayout::NeoxPerHead: return h * 3 * dh + part * dh + e;
      default: return part == 0 ? i : part == 1 ? qd + i : qd + kvd + i;  // Stacked
    }
  };
  std::vector<float>* dst[3] = {&r.Wq, &r.Wk, &r.Wv};
  std::vector<float>* bdst[3] = {&r.bq, &r.bk, &r.bv};
  for (int part = 0; part < 3; part++) {
    const int n = part == 0 ? qd : kvd;
    if (!B.empty()) bdst[part]->resize(size_t(n));
    for (int i = 0; i < n; i++) {
      const int o = row(part, i);
      for (int c = 0; c < d; c++)  // Conv1D [d, 3d] is read transposed
        (*dst[part])[size_t(i) * d + c] = w.wqkv.in_out ? W[size_t(c) * 3 * d + o] : W[size_t(o) * d + c];
      if (!B.empty()) (*bdst[part])[size_t(i)] = B[size_t(o)];
    }
  }
  return r;
}

Model load_lm(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) data_error(path + ": no such file or directory");
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    const std::string cj = (dir / "config.json").string();
    const std::string single = (dir / "model.safetensors").string();
    const std::string index = (dir / "model.safetensors.index.json").string();
    if (!fs::exists(single) && !fs::exists(index))
      data_error(path + ": a model directory needs model.safetensors (or model.safetensors.index.json and its shards); "
                        "neither found");
    if (!fs::exists(cj)) data_error(path + ": a model directory needs config.json (not found)");
    const Arch arch = arch_from_config(read_json(cj), cj);
    std::vector<std::shared_ptr<io::SafetensorsFile>> files;
    std::map<std::string, const io::SafetensorsFile*> weight_map;
    std::string what;
    if (fs::exists(single)) {
      files.push_back(std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(single)));
      what = "model.safetensors";
    } else if (fs::exists(index)) {
      const json j = read_json(index);
      const auto wm = j.find("weight_map");
      if (wm == j.end() || !wm->is_object())
        data_error(index + ": key \"weight_map\" is missing or not an object {tensor name: shard file}");
      std::map<std::string, const io::SafetensorsFile*> by_file;
      for (const auto& [name, file] : wm->items()) {
        if (!file.is_string()) data_error(index + ": weight_map[\"" + name + "\"] is not a file name");
        const std::string f = file.get<std::string>();
        if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
          data_error(index + ": weight_map[\"" + name + "\"] = \"" + f + "\" is not a file name in this directory");
        if (!by_file.count(f)) {
          const std::string fp = (dir / f).string();
          if (!fs::exists(fp)) data_error(index + ": shard " + f + " (holding " + name + ") is missing");
          files.push_back(std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(fp)));
          by_file[f] = files.back().get();
        }
        weight_map[name] = by_file[f];
      }
      what = std::to_string(files.size()) + " shards (model.safetensors.index.json)";
    } else {
      data_error(path + ": a model directory needs model.safetensors or model.safetensors.index.json (neither found)");
    }
    Model m = from_files(arch, files, weight_map, path);
    m.source = path + " (Hugging Face directory: config.json + " + what + ", " + dtype_summary(m) + ")";
    return m;
  }
  if (ends_with(path, ".safetensors")) {
    auto f = std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(path));
    json cj;
    const auto it = f->metadata().find("config");
    const std::string beside = (fs::path(path).parent_path() / "config.json").string();
    if (it != f->metadata().end()) {
      try {
        cj = json::parse(it->second);
      } catch (const json::exception& e) {
        data_error(path + ": __metadata__ config is not JSON: " + e.what());
      }
    } else if (fs::exists(beside)) {
      cj = read_json(beside);
    } else {
      data_error(path + ": no config: neither __metadata__[\"config\"] nor a config.json beside it");
    }
    const Arch arch = arch_from_config(cj, it != f->metadata().end() ? path + " __metadata__ config" : beside);
    Model m = from_files(arch, {f}, {}, path);
    m.source = path + " (safetensors" + std::string(it != f->metadata().end() ? ", config in __metadata__" : "") + ", " +
               dtype_summary(m) + ")";
    return m;
  }
  // GGUF: llama.cpp's gpt2, llama, qwen2, gemma, gemma2, phi3 as views (gguf_family).
  if (ends_with(path, ".gguf")) return load_gguf_lm(path);
  // llm.c .bin: GPT-2 as views into the mapped file (llmc_load.cpp).
  if (ends_with(path, ".bin")) return load_llmc_lm(path);
  usage_error(path + ": unknown model format; expected a directory, a .safetensors file, a .gguf file or an llm.c .bin file");
}

}  // namespace qkv

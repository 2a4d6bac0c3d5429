#include "qkv/io/llmc.hpp"

#include <algorithm>

#include "io_util.hpp"
#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/half.hpp"
#include "qkv/io/mapped_file.hpp"

namespace qkv::io {

using detail::load_le;

namespace {

constexpr int32_t kMagic = 20240326;
constexpr int64_t kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * 4;

struct Dims {
  int64_t V, Vp, maxT, L, C;
};

// One row per llm.c parameter kind, in file order. Stored [rows, cols] per layer (llm.c's [out, in]);
// Hugging Face holds the transposed [cols, rows] when `transpose`.
enum class Rows { Vp, maxT, C, C3, C4, one };
enum class Cols { C, C4, C3, one };
struct Param {
  const char* hf;  // name; per-layer ones get the "h.{l}." prefix
  bool per_layer;
  Rows rows;
  Cols cols;
  bool transpose;
};
constexpr Param kParams[] = {
    {"wte.weight", false, Rows::Vp, Cols::C, false},
    {"wpe.weight", false, Rows::maxT, Cols::C, false},
    {"ln_1.weight", true, Rows::one, Cols::C, false},
    {"ln_1.bias", true, Rows::one, Cols::C, false},
    {"attn.c_attn.weight", true, Rows::C3, Cols::C, true},
    {"attn.c_attn.bias", true, Rows::one, Cols::C3, false},
    {"attn.c_proj.weight", true, Rows::C, Cols::C, true},
    {"attn.c_proj.bias", true, Rows::one, Cols::C, false},
    {"ln_2.weight", true, Rows::one, Cols::C, false},
    {"ln_2.bias", true, Rows::one, Cols::C, false},
    {"mlp.c_fc.weight", true, Rows::C4, Cols::C, true},
    {"mlp.c_fc.bias", true, Rows::one, Cols::C4, false},
    {"mlp.c_proj.weight", true, Rows::C, Cols::C4, true},
    {"mlp.c_proj.bias", true, Rows::one, Cols::C, false},
    {"ln_f.weight", false, Rows::one, Cols::C, false},
    {"ln_f.bias", false, Rows::one, Cols::C, false},
};

int64_t rows_of(Rows r, const Dims& d) {
  switch (r) {
    case Rows::Vp: return d.Vp;
    case Rows::maxT: return d.maxT;
    case Rows::C: return d.C;
    case Rows::C3: return 3 * d.C;
    case Rows::C4: return 4 * d.C;
    case Rows::one: return 1;
  }
  return 0;
}
int64_t cols_of(Cols c, const Dims& d) {
  switch (c) {
    case Cols::C: return d.C;
    case Cols::C3: return 3 * d.C;
    case Cols::C4: return 4 * d.C;
    case Cols::one: return 1;
  }
  return 0;
}

std::string hf_name(const Param& p, int64_t layer) {
  return p.per_layer ? "h." + std::to_string(layer) + "." + p.hf : std::string(p.hf);
}

// Hugging Face shape of one layer's slice.
std::vector<int64_t> hf_shape(const Param& p, const Dims& d) {
  const int64_t r = rows_of(p.rows, d), c = cols_of(p.cols, d);
  if (p.rows == Rows::Vp) return {d.V, c};  // padding rows dropped
  if (p.rows == Rows::one) return {c};
  return p.transpose ? std::vector<int64_t>{c, r} : std::vector<int64_t>{r, c};
}

// Total parameter count, or -1 on int64 overflow.
int64_t param_count(const Dims& d) {
  int64_t total = 0;
  for (const Param& p : kParams) {
    int64_t n = 0;
    if (__builtin_mul_overflow(rows_of(p.rows, d), cols_of(p.cols, d), &n)) return -1;
    if (p.per_layer && __builtin_mul_overflow(n, d.L, &n)) return -1;
    if (__builtin_add_overflow(total, n, &total)) return -1;
  }
  return total;
}

}  // namespace

LlmcLayout llmc_layout(const unsigned char* p, int64_t size, const std::string& path) {
  if (size < kHeaderBytes)
    data_error(path + ": file is " + std::to_string(size) + " bytes, expected at least " +
               std::to_string(kHeaderBytes) + " (the llm.c header of 256 int32)");
  int32_t h[8];
  for (int i = 0; i < 8; ++i) h[i] = load_le<int32_t>(p + 4 * i);
  if (h[0] != kMagic)
    data_error(path + ": bad magic " + std::to_string(h[0]) + ", expected " + std::to_string(kMagic) +
               " (an llm.c GPT-2 checkpoint)");
  if (h[1] != 3 && h[1] != 5)
    data_error(path + ": unknown version " + std::to_string(h[1]) + ", expected 3 (fp32) or 5 (bf16)");
  const char* field[8] = {"magic", "version", "max_seq_len", "vocab_size",
                          "num_layers", "num_heads", "channels", "padded_vocab_size"};
  for (int i = 2; i < 8; ++i)
    if (h[i] <= 0)
      data_error(path + ": header[" + std::to_string(i) + "] " + field[i] + " is " + std::to_string(h[i]) +
                 ", expected a positive value");
  if (h[6] % h[5] != 0)
    data_error(path + ": num_heads " + std::to_string(h[5]) + " does not divide channels " +
               std::to_string(h[6]));
  if (h[7] < h[3])
    data_error(path + ": padded_vocab_size " + std::to_string(h[7]) + " is less than vocab_size " +
               std::to_string(h[3]));

  LlmcLayout lay;
  lay.version = h[1];
  lay.padded_vocab_size = h[7];
  lay.config.n_positions = h[2];
  lay.config.vocab_size = h[3];
  lay.config.n_layer = h[4];
  lay.config.n_head = h[5];
  lay.config.n_embd = h[6];
  lay.config.n_inner = 0;
  lay.config.attn_only = false;
  lay.config.validate(path);

  const Dims d{h[3], h[7], h[2], h[4], h[6]};
  const int64_t es = lay.version == 3 ? 4 : 2;
  const int64_t count = param_count(d);
  int64_t expected = -1;
  if (count < 0 || __builtin_mul_overflow(count, es, &expected) ||
      __builtin_add_overflow(expected, kHeaderBytes, &expected))
    data_error(path + ": the header's dimensions imply more than 2^63 bytes of parameters");
  if (size != expected)
    data_error(path + ": file is " + std::to_string(size) + " bytes, expected " + std::to_string(expected) +
               " (1024-byte header + " + std::to_string(count) + " parameters of " + std::to_string(es) +
               " bytes, from the header's dimensions): " +
               (size < expected ? "truncated" : std::to_string(size - expected) + " trailing bytes"));

  // Each kind for all layers at once in the file; Hugging Face order is wte, wpe, each layer's, ln_f.
  std::vector<LlmcTensor> layered[std::size(kParams)], global[std::size(kParams)];
  int64_t pos = 0;
  for (std::size_t k = 0; k < std::size(kParams); ++k) {
    const Param& prm = kParams[k];
    const int64_t r = rows_of(prm.rows, d), c = cols_of(prm.cols, d);
    for (int64_t l = 0; l < (prm.per_layer ? d.L : 1); ++l) {
      LlmcTensor t;
      t.name = hf_name(prm, l);
      t.stored_shape = prm.rows == Rows::Vp    ? std::vector<int64_t>{d.V, c}
                       : prm.rows == Rows::one ? std::vector<int64_t>{c}
                                               : std::vector<int64_t>{r, c};
      t.index = pos;
      t.transposed = prm.transpose;
      pos += r * c;
      (prm.per_layer ? layered[k] : global[k]).push_back(std::move(t));
    }
  }
  for (std::size_t k = 0; k < 2; ++k) lay.tensors.push_back(std::move(global[k][0]));
  for (int64_t l = 0; l < d.L; ++l)
    for (std::size_t k = 0; k < std::size(kParams); ++k)
      if (kParams[k].per_layer) lay.tensors.push_back(std::move(layered[k][static_cast<std::size_t>(l)]));
  for (std::size_t k = 2; k < std::size(kParams); ++k)
    if (!kParams[k].per_layer) lay.tensors.push_back(std::move(global[k][0]));
  return lay;
}

LlmcCheckpoint read_llmc(const std::string& path) {
  const MappedFile file = MappedFile::open(path);
  const unsigned char* p = file.data();
  const LlmcLayout lay = llmc_layout(p, static_cast<int64_t>(file.size()), path);
  LlmcCheckpoint ck;
  ck.version = lay.version;
  ck.padded_vocab_size = lay.padded_vocab_size;
  ck.config = lay.config;
  // Sizes now agree with the file: allocating what the header says is bounded by the file size.
  const int64_t es = ck.version == 3 ? 4 : 2;
  auto value = [&](int64_t index) -> float {
    const unsigned char* q = p + kHeaderBytes + index * es;
    return es == 4 ? load_le<float>(q) : bf16_to_float(load_le<uint16_t>(q));
  };
  for (const LlmcTensor& s : lay.tensors) {
    NamedTensor t;
    t.name = s.name;
    const int64_t r = s.stored_shape[0], c = s.stored_shape.size() == 2 ? s.stored_shape[1] : 1;
    t.shape = s.transposed ? std::vector<int64_t>{c, r} : s.stored_shape;
    t.data.resize(static_cast<std::size_t>(r * c));
    if (s.transposed) {
      // llm.c [out = r, in = c] -> Hugging Face Conv1D [in, out]: hf[i][o] = llmc[o][i]
      for (int64_t o = 0; o < r; ++o)
        for (int64_t i = 0; i < c; ++i)
          t.data[static_cast<std::size_t>(i * r + o)] = value(s.index + o * c + i);
    } else {
      for (int64_t i = 0; i < r * c; ++i) t.data[static_cast<std::size_t>(i)] = value(s.index + i);
    }
    ck.tensors.push_back(std::move(t));
  }
  return ck;
}

void write_llmc(const std::string& path, const GPT2Config& config,
                const std::function<const float*(const std::string& hf_name)>& get, int version,
                int padded_vocab_size) {
  if (version != 3 && version != 5)
    data_error(path + ": cannot write llm.c checkpoint: version " + std::to_string(version) +
               ", expected 3 (fp32) or 5 (bf16)");
  config.validate(path);
  if (config.attn_only)
    data_error(path + ": cannot write llm.c checkpoint: the model is attention-only, llm.c's format has MLPs");
  if (config.mlp_dim() != 4 * config.n_embd)
    data_error(path + ": cannot write llm.c checkpoint: n_inner is " + std::to_string(config.n_inner) +
               ", llm.c requires 4 * n_embd = " + std::to_string(4 * config.n_embd));
  if (padded_vocab_size < config.vocab_size)
    data_error(path + ": cannot write llm.c checkpoint: padded_vocab_size " + std::to_string(padded_vocab_size) +
               " is less than vocab_size " + std::to_string(config.vocab_size));
  const Dims d{config.vocab_size, padded_vocab_size, config.n_positions, config.n_layer, config.n_embd};

  // Fetch every tensor first so that a missing one fails before any file is created.
  std::vector<std::vector<const float*>> src(std::size(kParams));
  for (std::size_t k = 0; k < std::size(kParams); ++k) {
    const int64_t layers = kParams[k].per_layer ? d.L : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const std::string name = hf_name(kParams[k], l);
      const float* ptr = get(name);
      if (ptr == nullptr)
        data_error(path + ": cannot write llm.c checkpoint: tensor \"" + name + "\" was not provided");
      src[k].push_back(ptr);
    }
  }

  write_file_atomic(path, [&](std::FILE* f) {
    int32_t header[kHeaderInts] = {};
    header[0] = kMagic;
    header[1] = version;
    header[2] = config.n_positions;
    header[3] = config.vocab_size;
    header[4] = config.n_layer;
    header[5] = config.n_head;
    header[6] = config.n_embd;
    header[7] = padded_vocab_size;
    write_bytes(f, header, sizeof header, path);
    std::vector<float> buf;
    std::vector<uint16_t> half;
    for (std::size_t k = 0; k < std::size(kParams); ++k) {
      const Param& prm = kParams[k];
      const int64_t r = rows_of(prm.rows, d), c = cols_of(prm.cols, d);
      for (const float* s : src[k]) {
        buf.assign(static_cast<std::size_t>(r * c), 0.0f);
        if (prm.transpose) {
          for (int64_t o = 0; o < r; ++o)
            for (int64_t i = 0; i < c; ++i) buf[static_cast<std::size_t>(o * c + i)] = s[i * r + o];
        } else {
          const int64_t keep = (prm.rows == Rows::Vp ? d.V : r) * c;  // wte's padding rows stay zero
          std::copy(s, s + keep, buf.begin());
        }
        if (version == 3) {
          write_bytes(f, buf.data(), buf.size() * 4, path);
        } else {
          half.resize(buf.size());
          for (std::size_t i = 0; i < buf.size(); ++i) half[i] = float_to_bf16(buf[i]);
          write_bytes(f, half.data(), half.size() * 2, path);
        }
      }
    }
  });
}

}  // namespace qkv::io

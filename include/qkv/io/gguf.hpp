// GGUF (llama.cpp's model file), versions 2 and 3, read strictly and written as llama.cpp writes it.
//
// Layout (little-endian):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
//   kv_count × { string key, u32 value_type, value },
//   tensor_count × { string name, u32 n_dims, u64 ne[n_dims] (ne[0] innermost), u32 ggml_type, u64 offset },
//   zero padding to `general.alignment` (default 32), then the data section; each tensor's offset is
//   relative to its start and a multiple of the alignment.
//   string = u64 length + bytes; array = u32 element type, u64 count, elements (arrays may nest).
//
// Reading maps the file and checks everything before trusting it: every count and length against the
// bytes left (no allocation larger than the file can justify), every tensor's byte size from its shape
// and its type's block size, every offset inside the data section and aligned, no two tensors
// overlapping, keys and tensor names unique. Every error is a qkv::Error (Data) naming the file and the
// key or tensor.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "qkv/io/gguf_quant.hpp"
#include "qkv/io/mapped_file.hpp"

namespace qkv::io {

// The 13 metadata value types, numbered as the format numbers them.
enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);  // "UINT8", ... as the spec spells them

struct GgufValue;
struct GgufArray {
  GgufType type = GgufType::UINT8;  // element type (ARRAY for nested arrays)
  std::vector<GgufValue> items;     // every item holds `type`
};

// One metadata value. The variant's index is the GgufType number.
struct GgufValue {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;
  Storage v;

  GgufValue() = default;
  template <class T>
  requires(!std::is_same_v<std::decay_t<T>, GgufValue>) GgufValue(T x) : v(std::move(x)) {}
  GgufType type() const { return GgufType(v.index()); }
  bool operator==(const GgufValue& o) const;
};
inline bool operator==(const GgufArray& a, const GgufArray& b) {
  return a.type == b.type && a.items == b.items;
}

// Convenience constructors for arrays.
GgufValue gguf_string_array(const std::vector<std::string>& items);
GgufValue gguf_int32_array(const std::vector<int32_t>& items);

// Metadata in file order, with lookup by key and typed getters that throw naming the file and key.
class GgufMetadata {
 public:
  explicit GgufMetadata(std::string where = "gguf") : where_(std::move(where)) {}
  // Appends (or replaces, keeping its position) a key.
  void set(const std::string& key, GgufValue value);
  const GgufValue* find(std::string_view key) const;  // nullptr when absent
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const std::vector<std::pair<std::string, GgufValue>>& entries() const { return entries_; }
  std::size_t size() const { return entries_.size(); }

  const GgufValue& get(std::string_view key) const;  // throws "<where>: key K is missing"
  // Any integer type whose value fits int64 (UINT64 above INT64_MAX is an error naming the key).
  int64_t get_int(std::string_view key) const;
  // An integer in [lo, hi], else an error naming the key and the range.
  int64_t get_int_in(std::string_view key, int64_t lo, int64_t hi) const;
  double get_float(std::string_view key) const;  // FLOAT32 or FLOAT64
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const GgufArray& get_array(std::string_view key, GgufType element) const;  // checks the element type
  std::vector<std::string> get_string_array(std::string_view key) const;
  const std::string& where() const { return where_; }

 private:
  std::string where_;
  std::vector<std::pair<std::string, GgufValue>> entries_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> ne;  // dims, innermost first (ne[0] is the contiguous one); n_dims = ne.size()
  uint64_t offset = 0;       // relative to the data section
  uint64_t nbytes = 0;       // ggml_row_size(type, ne[0]) × ne[1] × ...
  const unsigned char* data = nullptr;  // into the mapping
  int64_t numel() const;
  int64_t rows() const;                // numel / ne[0] (0 when ne[0] is 0): the units read_rows works in
  std::vector<int64_t> shape() const;  // outermost first (C order), as safetensors and PyTorch print it
};

class GgufFile {
 public:
  static constexpr uint32_t kDefaultAlignment = 32;
  static constexpr int kMaxDims = 4;           // GGML_MAX_DIMS
  static constexpr std::size_t kMaxName = 63;  // GGML_MAX_NAME - 1 bytes
  static constexpr int kMaxArrayDepth = 16;    // nesting of arrays inside arrays

  // Maps `path` read-only and validates it. Throws qkv::Error (Data) naming the file and the key or
  // tensor at fault.
  static GgufFile open(const std::string& path);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // of the data section, from the start of the file
  const GgufMetadata& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // in file order
  const GgufTensorInfo* find(std::string_view name) const;                 // nullptr when absent
  const GgufTensorInfo& tensor(std::string_view name) const;               // throws naming it
  const std::string& path() const { return file_.path(); }
  // Drops the tensor's whole mapped pages from the resident set once it has been copied out
  // (MappedFile::release); reading it again still works.
  void release(const GgufTensorInfo& t) const { file_.release(t.data, t.nbytes); }
  // Dequantizes a whole tensor into out (numel() floats), row by row. Throws naming the tensor when its
  // type has no dequantizer in qkv.
  void read_f32(const GgufTensorInfo& t, float* out) const;
  // Dequantizes rows [r0, r0 + n) (a row = ne[0] values) into out (n · ne[0] floats): for callers that
  // stream a large tensor instead of expanding it whole. Throws naming the tensor for rows outside it.
  void read_rows(const GgufTensorInfo& t, int64_t r0, int64_t n, float* out) const;

 private:
  GgufFile() = default;
  MappedFile file_;
  uint32_t version_ = 0, alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  GgufMetadata metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

struct GgufWriteTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> ne;         // innermost first
  std::vector<unsigned char> data;  // exactly ggml_row_size(type, ne[0]) × ne[1] × ... bytes
  // Or, when set (and data empty), made when the writer reaches this tensor, so that a whole model is never
  // held in memory at once (qkv convert): the same size rule, checked then.
  std::function<std::vector<unsigned char>()> produce;
};

// Writes a version-3 GGUF: header, metadata in the given order, tensor infos in the given order, each
// tensor's data at the next multiple of the alignment (`general.alignment` when the metadata sets it,
// else 32) with zero padding, as llama.cpp's gguf writer lays it out. Atomic (temporary file + rename).
// Throws qkv::Error naming `path` and the tensor or key on empty/duplicate/too-long names, more than 4
// dims, a row not a whole number of blocks, a data size that does not match, or a bad alignment value
// (an error while producing a tensor, or its size, leaves no file).
void write_gguf(const std::string& path, const GgufMetadata& metadata,
                const std::vector<GgufWriteTensor>& tensors);

// Quantizes (or converts) numel floats, C order with ne[0] innermost, into a tensor of `type`.
GgufWriteTensor make_gguf_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne,
                                 const float* x);

}  // namespace qkv::io

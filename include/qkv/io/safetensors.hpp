// safetensors: 8-byte little-endian header length N, N bytes of UTF-8 JSON
// {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}},
// then the data section; offsets are relative to its start. Reading maps the file and validates it
// as strictly as the reference implementation (the Rust crate) does.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/io/half.hpp"
#include "qkv/io/mapped_file.hpp"

namespace qkv::io {

enum class DType { F32, F16, BF16 };

const char* dtype_name(DType dtype);  // "F32", "F16", "BF16" as the format spells them
std::size_t dtype_size(DType dtype);  // bytes per element

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // byte offsets relative to the data section: [begin, end)
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the header against the file. Throws qkv::Error (Data) naming
  // the file, the tensor or field, and expected vs found.
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by begin offset
  const TensorInfo* find(std::string_view name) const;                 // nullptr when absent
  // Zero-copy pointer into the mapping when dtype is F32 and the address is 4-byte aligned, else nullptr.
  const float* f32_view(const TensorInfo& t) const;
  // Copies numel() floats to `out`, widening F16/BF16 exactly; safe for any data alignment.
  void read_f32(const TensorInfo& t, float* out) const;
  // The raw bytes of a tensor (end - begin of them), whatever its dtype and alignment.
  const unsigned char* bytes(const TensorInfo& t) const { return data_ + t.begin; }
  const std::string& path() const { return file_.path(); }
  // Drops the tensor's whole mapped pages from the resident set once it has been copied out
  // (MappedFile::release); reading it again still works.
  void release(const TensorInfo& t) const { file_.release(bytes(t), t.end - t.begin); }

 private:
  SafetensorsFile() = default;
  MappedFile file_;
  const unsigned char* data_ = nullptr;  // start of the data section inside file_
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
};

struct WriteTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;  // numel floats, C order
};

// Writes tensors (in the given order, contiguous) stored as `dtype` (F16/BF16 rounded to nearest even),
// with `metadata` as "__metadata__" when non-empty. The header is padded with spaces so that the data
// section starts 8-byte aligned. Atomic (temporary file + rename). Throws qkv::Error naming `path` and
// the tensor on duplicate / reserved names, negative shapes, null data or I/O failure.
void write_safetensors(const std::string& path, const std::vector<WriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, DType dtype = DType::F32);

}  // namespace qkv::io

#include "qkv/io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "io_util.hpp"
#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"

namespace qkv::io {

using detail::load_le;
using detail::shape_str;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference implementation

// The dtypes the format defines that qkv does not read: named in the error, distinct from typos.
const std::set<std::string, std::less<>> kOtherFormatDtypes = {
    "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "I32", "U32", "F64", "I64", "U64"};

// Index of the first byte that is not part of a well-formed UTF-8 sequence, or npos.
std::size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    unsigned lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;   // no overlong forms
      if (c == 0xed) hi = 0x9f;   // no surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;   // <= U+10FFFF
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return i;
    i += len;
  }
  return std::string_view::npos;
}

// "string \"abc\"", "number -3", ... short, for "found ..." in messages.
std::string describe(const json& v) { return detail::describe_json(v); }

bool parse_dtype(std::string_view s, DType* out) {
  if (s == "F32") *out = DType::F32;
  else if (s == "F16") *out = DType::F16;
  else if (s == "BF16") *out = DType::BF16;
  else return false;
  return true;
}

// A non-negative integer that fits int64 (shape entries) or uint64 (offsets); else an error.
uint64_t get_unsigned(const json& v, const std::string& where, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) data_error(where + ": " + what + " is " + describe(v) + ", expected a non-negative integer");
  data_error(where + ": " + what + ": expected a non-negative integer, found " + describe(v));
}

}  // namespace

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
}

std::size_t dtype_size(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated at open(): never overflows
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile st;
  st.file_ = MappedFile::open(path);
  const unsigned char* p = st.file_.data();
  const uint64_t size = st.file_.size();
  if (size < 8)
    data_error(path + ": file is " + std::to_string(size) +
               " bytes, expected at least 8 (the safetensors header length)");
  const uint64_t n = load_le<uint64_t>(p);
  if (n > kMaxHeaderBytes)
    data_error(path + ": header length is " + std::to_string(n) + " bytes, expected at most " +
               std::to_string(kMaxHeaderBytes));
  if (n > size - 8)
    data_error(path + ": header length is " + std::to_string(n) + " bytes, but only " +
               std::to_string(size - 8) + " bytes follow the 8-byte length (file is " +
               std::to_string(size) + " bytes)");
  const std::string_view header(reinterpret_cast<const char*>(p + 8), n);
  if (const std::size_t bad = invalid_utf8_at(header); bad != std::string_view::npos)
    data_error(path + ": header is not valid UTF-8 (byte " + std::to_string(bad) + " of the header)");
  if (header.empty() || header[0] != '{') {
    std::string found = "an empty header";
    if (!header.empty()) {
      found = "byte '";
      found += header[0];
      found += "'";
    }
    data_error(path + ": header must be a JSON object starting with '{', found " + found);
  }

  // Parse, rejecting duplicate keys in any object (the reference's serde does too for the top level).
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  json j;
  try {
    j = json::parse(header.begin(), header.end(), [&](int /*depth*/, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::object_start) {
        keys.emplace_back();
      } else if (ev == json::parse_event_t::object_end) {
        if (!keys.empty()) keys.pop_back();
      } else if (ev == json::parse_event_t::key && !keys.empty() && duplicate.empty()) {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(k).second) duplicate = k;
      }
      return true;
    });
  } catch (const json::exception& e) {
    data_error(path + ": header is not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) data_error(path + ": header has the key \"" + duplicate + "\" twice");
  if (!j.is_object()) data_error(path + ": header: expected a JSON object, found " + describe(j));

  const uint64_t data_size = size - 8 - n;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object())
        data_error(path + ": __metadata__: expected an object of strings, found " + describe(v));
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string())
          data_error(path + ": __metadata__ key \"" + k + "\": expected a string, found " + describe(s));
        st.metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor \"" + name + "\"";
    if (!v.is_object())
      data_error(where + ": expected an object with dtype, shape, data_offsets, found " + describe(v));
    TensorInfo t;
    t.name = name;

    const auto dt = v.find("dtype");
    if (dt == v.end()) data_error(where + ": missing \"dtype\"");
    if (!dt->is_string()) data_error(where + ": dtype: expected a string, found " + describe(*dt));
    const auto& ds = dt->get_ref<const std::string&>();
    if (!parse_dtype(ds, &t.dtype)) {
      if (kOtherFormatDtypes.count(ds))
        data_error(where + ": dtype " + ds + " is not supported, expected F32, F16 or BF16");
      data_error(where + ": unknown dtype \"" + ds + "\", expected F32, F16 or BF16");
    }

    const auto sh = v.find("shape");
    if (sh == v.end()) data_error(where + ": missing \"shape\"");
    if (!sh->is_array()) data_error(where + ": shape: expected an array, found " + describe(*sh));
    for (std::size_t i = 0; i < sh->size(); ++i) {
      const uint64_t d = get_unsigned((*sh)[i], where, "shape[" + std::to_string(i) + "]");
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        data_error(where + ": shape[" + std::to_string(i) + "] is " + std::to_string(d) + ", too large");
      t.shape.push_back(static_cast<int64_t>(d));
    }
    int64_t nbytes = 0;
    if (!detail::checked_numel(t.shape, static_cast<int64_t>(dtype_size(t.dtype)), &nbytes))
      data_error(where + ": shape " + shape_str(t.shape) + " of " + ds + " overflows: more than " +
                 std::to_string(std::numeric_limits<int64_t>::max()) + " bytes");

    const auto off = v.find("data_offsets");
    if (off == v.end()) data_error(where + ": missing \"data_offsets\"");
    if (!off->is_array() || off->size() != 2)
      data_error(where + ": data_offsets: expected an array [begin, end], found " + describe(*off));
    t.begin = get_unsigned((*off)[0], where, "data_offsets[0]");
    t.end = get_unsigned((*off)[1], where, "data_offsets[1]");
    if (t.end < t.begin)
      data_error(where + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                 "]: end is before begin");
    if (t.end - t.begin != static_cast<uint64_t>(nbytes))
      data_error(where + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                 "] span " + std::to_string(t.end - t.begin) + " bytes, expected " +
                 std::to_string(nbytes) + " (shape " + shape_str(t.shape) + " of " + ds + ")");
    st.tensors_.push_back(std::move(t));
  }

  // The data section must be exactly the tensors, back to back from offset 0, in some order.
  std::stable_sort(st.tensors_.begin(), st.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : st.tensors_) {
    const std::string where = path + ": tensor \"" + t.name + "\"";
    const std::string offs = "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
    if (t.end > data_size)
      data_error(where + ": " + offs + " reach past the end of the data section, which is " +
                 std::to_string(data_size) + " bytes (file truncated?)");
    if (t.begin > pos)
      data_error(where + ": " + offs + " leave a hole: expected it to begin at " + std::to_string(pos) +
                 (prev ? " where tensor \"" + prev->name + "\" ends" : std::string(" (the data section start)")) +
                 ", found " + std::to_string(t.begin));
    if (t.begin < pos)
      data_error(where + ": " + offs + " overlap tensor \"" + prev->name + "\", which ends at " +
                 std::to_string(pos) + ": expected begin " + std::to_string(pos) + ", found " +
                 std::to_string(t.begin));
    pos = t.end;
    prev = &t;
  }
  if (pos != data_size)
    data_error(path + ": the data section is " + std::to_string(data_size) + " bytes but the tensors cover " +
               std::to_string(pos) + ": " + std::to_string(data_size - pos) + " trailing bytes" +
               (prev ? " after tensor \"" + prev->name + "\"" : std::string()));

  st.data_ = p + 8 + n;
  for (std::size_t i = 0; i < st.tensors_.size(); ++i) st.index_.emplace(st.tensors_[i].name, i);
  return st;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const float* SafetensorsFile::f32_view(const TensorInfo& t) const {
  if (t.dtype != DType::F32) return nullptr;
  const unsigned char* p = data_ + t.begin;
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(float) != 0) return nullptr;
  return reinterpret_cast<const float*>(p);
}

void SafetensorsFile::read_f32(const TensorInfo& t, float* out) const {
  const unsigned char* p = data_ + t.begin;
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::F32:
      if (n > 0) std::memcpy(out, p, static_cast<std::size_t>(n) * 4);
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_float(load_le<uint16_t>(p + 2 * i));
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(load_le<uint16_t>(p + 2 * i));
      break;
  }
}

void write_safetensors(const std::string& path, const std::vector<WriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, DType dtype) {
  const uint64_t es = dtype_size(dtype);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  uint64_t offset = 0;
  std::vector<int64_t> numels;
  for (const WriteTensor& t : tensors) {
    const std::string where = path + ": tensor \"" + t.name + "\"";
    if (t.name == "__metadata__") data_error(where + ": the name is reserved by the format");
    if (!names.insert(t.name).second) data_error(where + ": the name appears twice");
    int64_t nbytes = 0;
    if (!detail::checked_numel(t.shape, static_cast<int64_t>(es), &nbytes))
      data_error(where + ": invalid shape " + shape_str(t.shape) + ": expected non-negative dims");
    if (nbytes > 0 && t.data == nullptr) data_error(where + ": no data (null pointer)");
    header[t.name] = {{"dtype", dtype_name(dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + static_cast<uint64_t>(nbytes)}}};
    offset += static_cast<uint64_t>(nbytes);
    numels.push_back(nbytes / static_cast<int64_t>(es));
  }
  std::string h = header.dump();
  h.append((8 - (8 + h.size()) % 8) % 8, ' ');  // the data section starts 8-byte aligned
  if (h.size() > kMaxHeaderBytes)
    data_error(path + ": header would be " + std::to_string(h.size()) + " bytes, more than the " +
               std::to_string(kMaxHeaderBytes) + " readers accept");

  write_file_atomic(path, [&](std::FILE* f) {
    const uint64_t n = h.size();
    write_bytes(f, &n, 8, path);
    write_bytes(f, h.data(), h.size(), path);
    std::vector<uint16_t> buf;
    for (std::size_t ti = 0; ti < tensors.size(); ++ti) {
      const float* src = tensors[ti].data;
      const int64_t numel = numels[ti];
      if (dtype == DType::F32) {
        write_bytes(f, src, static_cast<std::size_t>(numel) * 4, path);
        continue;
      }
      constexpr int64_t kChunk = 1 << 14;
      for (int64_t i = 0; i < numel; i += kChunk) {
        const int64_t m = std::min(kChunk, numel - i);
        buf.resize(static_cast<std::size_t>(m));
        for (int64_t k = 0; k < m; ++k)
          buf[k] = dtype == DType::F16 ? float_to_f16(src[i + k]) : float_to_bf16(src[i + k]);
        write_bytes(f, buf.data(), static_cast<std::size_t>(m) * 2, path);
      }
    }
  });
}

}  // namespace qkv::io

// GGUF reader and writer (format summary in include/qkv/io/gguf.hpp).
#include "qkv/io/gguf.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "io_util.hpp"
#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"

namespace qkv::io {

using detail::load_le;

namespace {

constexpr unsigned char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kWriteVersion = 3;

// Bytes each metadata value type occupies at the least (strings: their length field; arrays: type + count).
uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL:
      return 1;
    case GgufType::UINT16:
    case GgufType::INT16:
      return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32:
      return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64:
    case GgufType::STRING:
      return 8;
    case GgufType::ARRAY:
      return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) {
  return t <= 12;
}

std::string qname(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += "0123456789abcdef"[u >> 4];
      out += "0123456789abcdef"[u & 15];
    } else {
      out += c;
    }
  }
  return out + (s.size() > 80 ? "...'" : "'");
}

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t i = 0, n = s.size();
  while (i < n) {
    const unsigned c = p[i];
    std::size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0xc2 && c <= 0xdf)
      len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else
      return false;
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return false;
    for (std::size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return false;
    i += len;
  }
  return true;
}

// A bounds-checked cursor over the mapped bytes; every failure names the file, the byte offset and what
// was being read.
class Reader {
 public:
  Reader(const unsigned char* p, uint64_t n, std::string path) : p_(p), n_(n), path_(std::move(path)) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }

  [[noreturn]] void fail(const std::string& what, const std::string& why) const {
    data_error(path_ + ": " + what + ": " + why);
  }
  void need(uint64_t k, const std::string& what) const {
    if (k > left())
      fail(what, "truncated: needs " + std::to_string(k) + " bytes at offset " + std::to_string(pos_) +
                     " but the file has " + std::to_string(left()) + " left");
  }
  template <class T>
  T get(const std::string& what) {
    need(sizeof(T), what);
    T v = load_le<T>(p_ + pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const std::string& what) {
    const uint64_t len = get<uint64_t>(what + " (string length)");
    if (len > left())
      fail(what, "string length " + std::to_string(len) + " runs past the end of the file (" +
                     std::to_string(left()) + " bytes left at offset " + std::to_string(pos_) + ")");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), std::size_t(len));
    pos_ += len;
    return s;
  }

  GgufValue value(GgufType t, const std::string& what, int depth) {
    switch (t) {
      case GgufType::UINT8:
        return get<uint8_t>(what);
      case GgufType::INT8:
        return get<int8_t>(what);
      case GgufType::UINT16:
        return get<uint16_t>(what);
      case GgufType::INT16:
        return get<int16_t>(what);
      case GgufType::UINT32:
        return get<uint32_t>(what);
      case GgufType::INT32:
        return get<int32_t>(what);
      case GgufType::FLOAT32:
        return get<float>(what);
      case GgufType::UINT64:
        return get<uint64_t>(what);
      case GgufType::INT64:
        return get<int64_t>(what);
      case GgufType::FLOAT64:
        return get<double>(what);
      case GgufType::BOOL: {
        const uint8_t b = get<uint8_t>(what);
        if (b > 1) fail(what, "BOOL value " + std::to_string(b) + " (expected 0 or 1)");
        return b == 1;
      }
      case GgufType::STRING:
        return str(what);
      case GgufType::ARRAY: {
        if (depth >= GgufFile::kMaxArrayDepth)
          fail(what, "arrays nested deeper than " + std::to_string(GgufFile::kMaxArrayDepth) + " levels");
        const uint32_t et = get<uint32_t>(what + " (array element type)");
        if (!valid_type(et))
          fail(what, "unknown array element type " + std::to_string(et) + " (valid: 0..12)");
        const uint64_t count = get<uint64_t>(what + " (array length)");
        const GgufType e = GgufType(et);
        // Bound the allocation by the bytes left before reserving anything.
        if (count > left() / min_value_bytes(e))
          fail(what, "array of " + std::to_string(count) + " " + gguf_type_name(e) +
                         " values cannot fit in the " + std::to_string(left()) + " bytes left");
        GgufArray a;
        a.type = e;
        a.items.reserve(std::size_t(count));
        for (uint64_t i = 0; i < count; ++i)
          a.items.push_back(value(e, what + "[" + std::to_string(i) + "]", depth + 1));
        return a;
      }
    }
    fail(what, "unknown value type");
  }

 private:
  const unsigned char* p_;
  uint64_t n_, pos_ = 0;
  std::string path_;
};

std::string key_where(const std::string& where, std::string_view key) {
  return where + ": key " + qname(key);
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
  return uint32_t(t) <= 12 ? names[uint32_t(t)] : "UNKNOWN";
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (v.index() != o.v.index()) return false;
  // Floats compare by bits, so NaN payloads round-trip as equal and -0 differs from +0.
  if (const float* a = std::get_if<float>(&v)) {
    const float b = std::get<float>(o.v);
    return std::memcmp(a, &b, 4) == 0;
  }
  if (const double* a = std::get_if<double>(&v)) {
    const double b = std::get<double>(o.v);
    return std::memcmp(a, &b, 8) == 0;
  }
  return v == o.v;
}

GgufValue gguf_string_array(const std::vector<std::string>& items) {
  GgufArray a;
  a.type = GgufType::STRING;
  for (const auto& s : items) a.items.emplace_back(s);
  return a;
}

GgufValue gguf_int32_array(const std::vector<int32_t>& items) {
  GgufArray a;
  a.type = GgufType::INT32;
  for (int32_t x : items) a.items.emplace_back(x);
  return a;
}

// ---- metadata ----

void GgufMetadata::set(const std::string& key, GgufValue value) {
  if (auto it = index_.find(key); it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(key, std::move(value));
}

const GgufValue* GgufMetadata::find(std::string_view key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const GgufValue& GgufMetadata::get(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) data_error(key_where(where_, key) + " is missing");
  return *v;
}

int64_t GgufMetadata::get_int(std::string_view key) const {
  const GgufValue& v = get(key);
  int64_t out = 0;
  bool ok = true;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (x > uint64_t(std::numeric_limits<int64_t>::max())) ok = false;
          out = int64_t(x);
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          out = int64_t(x);
        } else {
          ok = false;
        }
      },
      v.v);
  if (!ok)
    data_error(key_where(where_, key) + ": expected an integer, found " + gguf_type_name(v.type()) +
               (v.type() == GgufType::UINT64 ? " above INT64_MAX" : ""));
  return out;
}

int64_t GgufMetadata::get_int_in(std::string_view key, int64_t lo, int64_t hi) const {
  const int64_t x = get_int(key);
  if (x < lo || x > hi)
    data_error(key_where(where_, key) + " is " + std::to_string(x) + ", expected a value in [" +
               std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

double GgufMetadata::get_float(std::string_view key) const {
  const GgufValue& v = get(key);
  if (const float* f = std::get_if<float>(&v.v)) return *f;
  if (const double* d = std::get_if<double>(&v.v)) return *d;
  data_error(key_where(where_, key) + ": expected FLOAT32 or FLOAT64, found " + gguf_type_name(v.type()));
}

bool GgufMetadata::get_bool(std::string_view key) const {
  const GgufValue& v = get(key);
  if (const bool* b = std::get_if<bool>(&v.v)) return *b;
  data_error(key_where(where_, key) + ": expected BOOL, found " + gguf_type_name(v.type()));
}

const std::string& GgufMetadata::get_string(std::string_view key) const {
  const GgufValue& v = get(key);
  if (const std::string* s = std::get_if<std::string>(&v.v)) return *s;
  data_error(key_where(where_, key) + ": expected STRING, found " + gguf_type_name(v.type()));
}

const GgufArray& GgufMetadata::get_array(std::string_view key, GgufType element) const {
  const GgufValue& v = get(key);
  const GgufArray* a = std::get_if<GgufArray>(&v.v);
  if (!a)
    data_error(key_where(where_, key) + ": expected an ARRAY of " + gguf_type_name(element) + ", found " +
               gguf_type_name(v.type()));
  if (a->type != element)
    data_error(key_where(where_, key) + ": expected an ARRAY of " + gguf_type_name(element) +
               ", found an ARRAY of " + gguf_type_name(a->type));
  return *a;
}

std::vector<std::string> GgufMetadata::get_string_array(std::string_view key) const {
  const GgufArray& a = get_array(key, GgufType::STRING);
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const auto& it : a.items) out.push_back(std::get<std::string>(it.v));
  return out;
}

// ---- tensors ----

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (uint64_t d : ne) n *= int64_t(d);  // checked against overflow when the file was opened
  return n;
}

std::vector<int64_t> GgufTensorInfo::shape() const {
  std::vector<int64_t> s;
  for (auto it = ne.rbegin(); it != ne.rend(); ++it) s.push_back(int64_t(*it));
  return s;
}

const GgufTensorInfo* GgufFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* t = find(name);
  if (!t) data_error(path() + ": tensor " + qname(name) + " is missing");
  return *t;
}

int64_t GgufTensorInfo::rows() const {
  const int64_t n0 = ne.empty() ? 1 : int64_t(ne[0]);
  return n0 == 0 ? 0 : numel() / n0;
}

void GgufFile::read_rows(const GgufTensorInfo& t, int64_t r0, int64_t n, float* out) const {
  const auto tr = ggml_type_traits(uint32_t(t.type));
  if (!tr->dequantizes)
    data_error(path() + ": tensor " + qname(t.name) + " has type " + tr->name +
               ", which qkv does not dequantize (supported: " + ggml_type_list(false) + ")");
  if (r0 < 0 || n < 0 || r0 > t.rows() || n > t.rows() - r0)
    data_error(path() + ": tensor " + qname(t.name) + ": rows [" + std::to_string(r0) + ", " +
               std::to_string(r0 + n) + ") are outside its " + std::to_string(t.rows()) + " rows");
  const int64_t n0 = t.ne.empty() ? 1 : int64_t(t.ne[0]);
  const std::size_t row_bytes = ggml_row_size(t.type, n0);
  for (int64_t r = 0; r < n; ++r)
    dequantize_row(t.type, t.data + std::size_t(r0 + r) * row_bytes, out + r * n0, n0);
}

void GgufFile::read_f32(const GgufTensorInfo& t, float* out) const {
  read_rows(t, 0, t.rows(), out);
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.file_ = MappedFile::open(path);
  f.metadata_ = GgufMetadata(path);
  Reader r(f.file_.data(), f.file_.size(), path);

  r.need(4, "magic");
  if (std::memcmp(f.file_.data(), kMagic, 4) != 0) {
    std::string got(reinterpret_cast<const char*>(f.file_.data()), 4);
    data_error(path + ": not a GGUF file: magic " + qname(got) + ", expected 'GGUF'");
  }
  r.get<uint32_t>("magic");
  f.version_ = r.get<uint32_t>("version");
  if (f.version_ == 1)
    data_error(path +
               ": GGUF version 1 (the 2023 draft with 32-bit counts) is not supported; re-convert the model");
  if (f.version_ != 2 && f.version_ != 3)
    data_error(path + ": GGUF version " + std::to_string(f.version_) +
               " is not supported (qkv reads versions 2 and 3" +
               (f.version_ > 0xffff ? "; a byte-swapped version suggests a big-endian file" : "") + ")");
  const uint64_t n_tensors = r.get<uint64_t>("tensor count");
  const uint64_t n_kv = r.get<uint64_t>("metadata key-value count");
  // Each key-value needs >= 13 bytes (key length, type, a 1-byte value); each tensor info >= 24.
  if (n_kv > r.left() / 13)
    data_error(path + ": metadata key-value count " + std::to_string(n_kv) + " cannot fit in the " +
               std::to_string(r.left()) + " bytes left");
  if (n_tensors > r.left() / 24)
    data_error(path + ": tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
               std::to_string(r.left()) + " bytes left");

  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string what = "metadata entry " + std::to_string(i);
    std::string key = r.str(what + " key");
    if (key.empty()) r.fail(what, "empty key");
    if (!valid_utf8(key)) r.fail(what, "key " + qname(key) + " is not valid UTF-8");
    if (f.metadata_.has(key)) data_error(key_where(path, key) + " appears twice");
    const uint32_t type = r.get<uint32_t>("key " + qname(key) + " (value type)");
    if (!valid_type(type))
      data_error(key_where(path, key) + ": unknown value type " + std::to_string(type) + " (valid: 0..12)");
    GgufValue v = r.value(GgufType(type), "key " + qname(key), 0);
    f.metadata_.set(key, std::move(v));
  }
  if (const GgufValue* a = f.metadata_.find("general.alignment")) {
    const uint32_t* u = std::get_if<uint32_t>(&a->v);
    if (!u)
      data_error(key_where(path, "general.alignment") + ": expected UINT32, found " +
                 gguf_type_name(a->type()));
    if (*u == 0 || (*u & (*u - 1)) != 0)
      data_error(key_where(path, "general.alignment") + " is " + std::to_string(*u) +
                 ", expected a power of two");
    f.alignment_ = *u;
  }

  f.tensors_.reserve(std::size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = r.str("tensor info " + std::to_string(i) + " name");
    const std::string tw = "tensor " + qname(t.name);
    if (t.name.empty()) r.fail("tensor info " + std::to_string(i), "empty tensor name");
    if (t.name.size() > kMaxName)
      data_error(path + ": " + tw + ": name is " + std::to_string(t.name.size()) +
                 " bytes, ggml allows at most " + std::to_string(kMaxName));
    if (!valid_utf8(t.name)) data_error(path + ": " + tw + ": name is not valid UTF-8");
    if (f.index_.count(t.name)) data_error(path + ": " + tw + " appears twice");
    const uint32_t n_dims = r.get<uint32_t>(tw + " (n_dims)");
    if (n_dims > uint32_t(kMaxDims))
      data_error(path + ": " + tw + " has " + std::to_string(n_dims) + " dims, ggml allows at most " +
                 std::to_string(kMaxDims));
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.get<uint64_t>(tw + " (ne[" + std::to_string(d) + "])");
      if (ne > uint64_t(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, int64_t(ne), &numel))
        data_error(path + ": " + tw + ": element count overflows int64 at ne[" + std::to_string(d) +
                   "] = " + std::to_string(ne));
      t.ne.push_back(ne);
    }
    const uint32_t type = r.get<uint32_t>(tw + " (type)");
    const auto tr = ggml_type_traits(type);
    if (!tr) data_error(path + ": " + tw + ": unknown ggml type " + std::to_string(type));
    t.type = GgmlType(type);
    const int64_t ne0 = n_dims ? int64_t(t.ne[0]) : 1;
    if (ne0 % tr->block_size != 0)
      data_error(path + ": " + tw + ": ne[0] = " + std::to_string(ne0) + " is not a multiple of " + tr->name +
                 "'s block size " + std::to_string(tr->block_size));
    // nbytes = (numel / block) × type size, checked against overflow.
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(uint64_t(numel / tr->block_size), uint64_t(tr->type_size), &nbytes))
      data_error(path + ": " + tw + ": byte size overflows");
    t.nbytes = nbytes;
    t.offset = r.get<uint64_t>(tw + " (offset)");
    if (t.offset % f.alignment_ != 0)
      data_error(path + ": " + tw + ": offset " + std::to_string(t.offset) +
                 " is not a multiple of the alignment " + std::to_string(f.alignment_));
    f.index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t end_infos = r.pos();
  f.data_offset_ = end_infos + (f.alignment_ - end_infos % f.alignment_) % f.alignment_;
  const uint64_t fsize = f.file_.size();
  if (!f.tensors_.empty() && f.data_offset_ > fsize)
    data_error(path + ": the data section would start at byte " + std::to_string(f.data_offset_) +
               " (after padding to the alignment " + std::to_string(f.alignment_) + ") but the file has " +
               std::to_string(fsize) + " bytes");
  const uint64_t data_size = f.data_offset_ <= fsize ? fsize - f.data_offset_ : 0;
  for (auto& t : f.tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      data_error(path + ": tensor " + qname(t.name) + ": bytes [" + std::to_string(t.offset) + ", " +
                 (t.nbytes > std::numeric_limits<uint64_t>::max() - t.offset
                      ? std::string("overflow")
                      : std::to_string(t.offset + t.nbytes)) +
                 ") of the data section run past its end (" + std::to_string(data_size) + " bytes)");
    t.data = f.file_.data() + f.data_offset_ + t.offset;
  }
  // No two tensors may share a byte.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : f.tensors_)
    if (t.nbytes > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo* a = by_offset[i - 1];
    const GgufTensorInfo* b = by_offset[i];
    if (b->offset < a->offset + a->nbytes)
      data_error(path + ": tensors " + qname(a->name) + " (bytes [" + std::to_string(a->offset) + ", " +
                 std::to_string(a->offset + a->nbytes) + ")) and " + qname(b->name) + " (from byte " +
                 std::to_string(b->offset) + ") overlap");
  }
  return f;
}

// ---- writer ----

namespace {

void put_str(std::string& out, std::string_view s) {
  const uint64_t n = s.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out.append(s);
}
template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_value(std::string& out, const GgufValue& v, const std::string& what) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          put_str(out, x);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          put<uint32_t>(out, uint32_t(x.type));
          put<uint64_t>(out, x.items.size());
          for (const auto& it : x.items) {
            if (it.type() != x.type)
              data_error(what + ": array item of type " + gguf_type_name(it.type()) + " in an ARRAY of " +
                         gguf_type_name(x.type));
            put_value(out, it, what);
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          put<uint8_t>(out, x ? 1 : 0);
        } else {
          put<T>(out, x);
        }
      },
      v.v);
}

}  // namespace

void write_gguf(const std::string& path, const GgufMetadata& metadata,
                const std::vector<GgufWriteTensor>& tensors) {
  uint32_t alignment = GgufFile::kDefaultAlignment;
  if (const GgufValue* a = metadata.find("general.alignment")) {
    const uint32_t* u = std::get_if<uint32_t>(&a->v);
    if (!u || *u == 0 || (*u & (*u - 1)) != 0)
      data_error(path + ": key 'general.alignment' must be a UINT32 power of two");
    alignment = *u;
  }
  std::string head;
  head.append(reinterpret_cast<const char*>(kMagic), 4);
  put<uint32_t>(head, kWriteVersion);
  put<uint64_t>(head, tensors.size());
  put<uint64_t>(head, metadata.size());
  for (const auto& [key, v] : metadata.entries()) {
    if (key.empty() || !valid_utf8(key))
      data_error(path + ": key " + qname(key) + ": keys must be non-empty UTF-8");
    put_str(head, key);
    put<uint32_t>(head, uint32_t(v.type()));
    put_value(head, v, path + ": key " + qname(key));
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) {
    const std::string tw = path + ": tensor " + qname(t.name);
    if (t.name.empty() || t.name.size() > GgufFile::kMaxName || !valid_utf8(t.name))
      data_error(tw + ": names must be 1.." + std::to_string(GgufFile::kMaxName) + " bytes of UTF-8");
    if (!names.insert(t.name).second) data_error(tw + " appears twice");
    if (t.ne.size() > std::size_t(GgufFile::kMaxDims)) data_error(tw + ": more than 4 dims");
    const auto tr = ggml_type_traits(uint32_t(t.type));
    if (!tr) data_error(tw + ": unknown type");
    uint64_t numel = 1;
    for (uint64_t d : t.ne) numel *= d;
    const uint64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    if (ne0 % uint64_t(tr->block_size) != 0)
      data_error(tw + ": ne[0] = " + std::to_string(ne0) + " is not a multiple of " + tr->name +
                 "'s block size");
    const uint64_t nbytes = numel / uint64_t(tr->block_size) * tr->type_size;
    if (!t.produce && t.data.size() != nbytes)
      data_error(tw + ": holds " + std::to_string(t.data.size()) + " bytes, its shape and type need " +
                 std::to_string(nbytes));
    put_str(head, t.name);
    put<uint32_t>(head, uint32_t(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(head, d);
    put<uint32_t>(head, uint32_t(t.type));
    put<uint64_t>(head, offset);
    sizes.push_back(nbytes);
    offset += nbytes + (alignment - nbytes % alignment) % alignment;
  }
  head.append((alignment - head.size() % alignment) % alignment, '\0');
  write_file_atomic(path, [&](std::FILE* f) {
    write_bytes(f, head.data(), head.size(), path);
    const std::string zeros(alignment, '\0');
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const GgufWriteTensor& t = tensors[i];
      std::vector<unsigned char> made;
      if (t.produce) {
        made = t.produce();
        if (made.size() != sizes[i])
          data_error(path + ": tensor " + qname(t.name) + ": produced " + std::to_string(made.size()) +
                     " bytes, its shape and type need " + std::to_string(sizes[i]));
      }
      const std::vector<unsigned char>& d = t.produce ? made : t.data;
      write_bytes(f, d.data(), d.size(), path);
      write_bytes(f, zeros.data(), (alignment - d.size() % alignment) % alignment, path);
    }
  });
}

GgufWriteTensor make_gguf_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne,
                                 const float* x) {
  const auto tr = ggml_type_traits(uint32_t(type));
  if (!tr || !tr->supported)
    data_error("tensor " + qname(name) + ": type " + ggml_type_name(type) + " cannot be written by qkv");
  const int64_t n0 = ne.empty() ? 1 : int64_t(ne[0]);
  if (n0 % tr->block_size != 0)
    data_error("tensor " + qname(name) + ": ne[0] = " + std::to_string(n0) + " is not a multiple of " +
               tr->name + "'s block size " + std::to_string(tr->block_size));
  int64_t numel = 1;
  for (uint64_t d : ne) numel *= int64_t(d);
  GgufWriteTensor t{name, type, std::move(ne), {}};
  t.data.resize(std::size_t(numel / tr->block_size) * tr->type_size);
  if (n0 == 0) return t;
  const std::size_t row_bytes = ggml_row_size(type, n0);
  try {
    for (int64_t r = 0; r < numel / n0; ++r)
      quantize_row(type, x + r * n0, t.data.data() + std::size_t(r) * row_bytes, n0);
  } catch (const Error& e) {
    data_error("tensor " + qname(name) + ": " + e.what());
  }
  return t;
}

}  // namespace qkv::io

#include "qkv/io/npy.hpp"

#include <cstring>
#include <string_view>

#include "io_util.hpp"
#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/half.hpp"
#include "qkv/io/mapped_file.hpp"

namespace qkv::io {

using detail::load_le;
using detail::shape_str;

namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes

enum class Kind { F, I, U, B };
struct NpyDtype {
  const char* descr;
  Kind kind;
  std::size_t size;
};
constexpr NpyDtype kDtypes[] = {
    {"<f2", Kind::F, 2}, {"<f4", Kind::F, 4}, {"<f8", Kind::F, 8}, {"|i1", Kind::I, 1},
    {"|u1", Kind::U, 1}, {"<i2", Kind::I, 2}, {"<u2", Kind::U, 2}, {"<i4", Kind::I, 4},
    {"<u4", Kind::U, 4}, {"<i8", Kind::I, 8}, {"<u8", Kind::U, 8}, {"|b1", Kind::B, 1},
};

// Parser of the header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& path) : s_(s), path_(path) {}

  void parse(std::string* descr, bool* fortran, std::vector<int64_t>* shape) {
    bool has_descr = false, has_fortran = false, has_shape = false;
    ws();
    expect('{');
    for (;;) {
      ws();
      if (peek() == '}') break;
      const std::string key = str();
      ws();
      expect(':');
      ws();
      bool* seen;
      if (key == "descr") {
        if (peek() == '[') fail("descr is a structured dtype, expected a simple one like '<f4'");
        *descr = str();
        seen = &has_descr;
      } else if (key == "fortran_order") {
        *fortran = boolean();
        seen = &has_fortran;
      } else if (key == "shape") {
        *shape = tuple();
        seen = &has_shape;
      } else {
        fail("unexpected key '" + key + "', expected 'descr', 'fortran_order' and 'shape'");
      }
      if (*seen) fail("key '" + key + "' appears twice");
      *seen = true;
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}' after the value of '" + key + "'");
    }
    ++i_;
    ws();
    if (i_ != s_.size()) fail("unexpected text after the closing '}'");
    if (!has_descr) fail("missing key 'descr'");
    if (!has_fortran) fail("missing key 'fortran_order'");
    if (!has_shape) fail("missing key 'shape'");
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    std::string shown(s_.substr(0, 120));
    for (char& c : shown)
      if (c == '\n') c = ' ';
    data_error(path_ + ": .npy header: " + why + " (at byte " + std::to_string(i_) + " of header \"" +
               shown + (s_.size() > 120 ? "..." : "") + "\")");
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string str() {
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    const std::size_t start = ++i_;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') fail("escapes in strings are not supported");
      ++i_;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    for (;;) {
      ws();
      if (peek() == ')') break;
      if (peek() == '-') fail("negative dimension in shape");
      if (peek() < '0' || peek() > '9') fail("expected a dimension (non-negative integer)");
      int64_t d = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (__builtin_mul_overflow(d, int64_t{10}, &d) || __builtin_add_overflow(d, int64_t{peek() - '0'}, &d))
          fail("dimension overflows int64");
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2 long literal
      dims.push_back(d);
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != ')') fail("expected ',' or ')' in shape");
    }
    ++i_;
    return dims;
  }

  std::string_view s_;
  const std::string& path_;
  std::size_t i_ = 0;
};

template <class T>
void convert(const unsigned char* p, std::size_t n, std::vector<double>& out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<double>(load_le<T>(p + i * sizeof(T)));
}

std::string npy_header(const std::string& descr, const std::vector<int64_t>& shape, int* major) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  dict += shape.size() == 1 ? ",), }" : "), }";
  for (int v : {1, 2}) {
    const std::size_t preamble = v == 1 ? 10 : 12;
    const std::size_t unpadded = preamble + dict.size() + 1;  // + '\n'
    const std::size_t len = dict.size() + (64 - unpadded % 64) % 64 + 1;
    if (v == 2 || len <= 0xffff) {
      *major = v;
      return dict + std::string(len - 1 - dict.size(), ' ') + "\n";
    }
  }
  return {};  // unreachable
}

void write_npy_impl(const std::string& path, const std::vector<int64_t>& shape, const void* data,
                    const char* descr, std::size_t es) {
  int64_t nbytes = 0;
  if (!detail::checked_numel(shape, static_cast<int64_t>(es), &nbytes))
    data_error(path + ": cannot write .npy: invalid shape " + shape_str(shape) +
               ", expected non-negative dims");
  if (nbytes > 0 && data == nullptr) data_error(path + ": cannot write .npy: no data (null pointer)");
  int major = 1;
  const std::string header = npy_header(descr, shape, &major);
  write_file_atomic(path, [&](std::FILE* f) {
    write_bytes(f, kMagic, 6, path);
    const unsigned char ver[2] = {static_cast<unsigned char>(major), 0};
    write_bytes(f, ver, 2, path);
    if (major == 1) {
      const auto len = static_cast<uint16_t>(header.size());
      write_bytes(f, &len, 2, path);
    } else {
      const auto len = static_cast<uint32_t>(header.size());
      write_bytes(f, &len, 4, path);
    }
    write_bytes(f, header.data(), header.size(), path);
    write_bytes(f, data, static_cast<std::size_t>(nbytes), path);
  });
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  const MappedFile file = MappedFile::open(path);
  const unsigned char* p = file.data();
  const std::size_t size = file.size();
  if (size < 10)
    data_error(path + ": file is " + std::to_string(size) + " bytes, expected at least 10 (the .npy preamble)");
  if (std::memcmp(p, kMagic, 6) != 0) data_error(path + ": not a .npy file: it does not start with \\x93NUMPY");
  const int major = p[6], minor = p[7];
  if (!(major >= 1 && major <= 3 && minor == 0))
    data_error(path + ": .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
               ", expected 1.0, 2.0 or 3.0");
  std::size_t preamble = 10, hlen = 0;
  if (major == 1) {
    hlen = load_le<uint16_t>(p + 8);
  } else {
    if (size < 12)
      data_error(path + ": file is " + std::to_string(size) + " bytes, expected at least 12 (the .npy " +
                 std::to_string(major) + ".0 preamble)");
    hlen = load_le<uint32_t>(p + 8);
    preamble = 12;
  }
  if (hlen > size - preamble)
    data_error(path + ": .npy header length is " + std::to_string(hlen) + " bytes, but only " +
               std::to_string(size - preamble) + " bytes follow the preamble");
  std::string descr;
  bool fortran = false;
  NpyArray a;
  HeaderParser(std::string_view(reinterpret_cast<const char*>(p + preamble), hlen), path)
      .parse(&descr, &fortran, &a.shape);
  if (fortran)
    data_error(path + ": fortran_order is True, expected False (only C-order arrays are supported)");
  const NpyDtype* dt = nullptr;
  for (const NpyDtype& d : kDtypes)
    if (descr == d.descr) dt = &d;
  if (dt == nullptr) {
    if (!descr.empty() && descr[0] == '>')
      data_error(path + ": dtype '" + descr + "' is big-endian, expected little-endian ('<')");
    data_error(path + ": unsupported dtype '" + descr +
               "', expected one of <f2 <f4 <f8 |i1 |u1 <i2 <u2 <i4 <u4 <i8 <u8 |b1");
  }
  int64_t nbytes = 0;
  if (!detail::checked_numel(a.shape, static_cast<int64_t>(dt->size), &nbytes))
    data_error(path + ": shape " + shape_str(a.shape) + " of " + descr + " overflows");
  const std::size_t data_off = preamble + hlen;
  if (static_cast<uint64_t>(nbytes) != size - data_off)
    data_error(path + ": shape " + shape_str(a.shape) + " of " + descr + " needs " + std::to_string(nbytes) +
               " data bytes, found " + std::to_string(size - data_off) +
               (static_cast<uint64_t>(nbytes) > size - data_off ? " (file truncated)" : " (trailing bytes)"));
  const auto n = static_cast<std::size_t>(nbytes) / dt->size;
  a.data.resize(n);
  const unsigned char* d = p + data_off;
  switch (dt->kind) {
    case Kind::F:
      if (dt->size == 2)
        for (std::size_t i = 0; i < n; ++i) a.data[i] = f16_to_float(load_le<uint16_t>(d + 2 * i));
      else if (dt->size == 4)
        convert<float>(d, n, a.data);
      else
        convert<double>(d, n, a.data);
      break;
    case Kind::I:
      if (dt->size == 1) convert<int8_t>(d, n, a.data);
      else if (dt->size == 2) convert<int16_t>(d, n, a.data);
      else if (dt->size == 4) convert<int32_t>(d, n, a.data);
      else convert<int64_t>(d, n, a.data);
      break;
    case Kind::U:
      if (dt->size == 1) convert<uint8_t>(d, n, a.data);
      else if (dt->size == 2) convert<uint16_t>(d, n, a.data);
      else if (dt->size == 4) convert<uint32_t>(d, n, a.data);
      else convert<uint64_t>(d, n, a.data);
      break;
    case Kind::B:
      for (std::size_t i = 0; i < n; ++i) a.data[i] = d[i] != 0 ? 1.0 : 0.0;
      break;
  }
  return a;
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  write_npy_impl(path, shape, data, "<f4", 4);
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const int32_t* data) {
  write_npy_impl(path, shape, data, "<i4", 4);
}

}  // namespace qkv::io

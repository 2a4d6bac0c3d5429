// Small helpers shared by the io readers and writers (private to src/io).
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qkv::io::detail {

static_assert(std::endian::native == std::endian::little,
              "qkv's file formats are little-endian and read by memcpy: a big-endian host needs byte swaps");

template <class T>
T load_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// "[2, 3]"
inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Product of non-negative dims; false when a dim is negative or the product (times `scale`) exceeds
// INT64_MAX.
inline bool checked_numel(const std::vector<int64_t>& shape, int64_t scale, int64_t* out) {
  int64_t n = scale;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  *out = n;
  return true;
}

// A short "found ..." text for error messages: the JSON type and a preview limited in depth and length
// (json::dump recurses, so it must never see a hostile, deeply nested value).
inline std::string json_preview(const nlohmann::json& v, int depth = 2) {
  using nlohmann::json;
  if (v.is_array() || v.is_object()) {
    const bool arr = v.is_array();
    if (depth == 0 || v.empty()) return v.empty() ? (arr ? "[]" : "{}") : (arr ? "[...]" : "{...}");
    std::string s = arr ? "[" : "{";
    std::size_t i = 0;
    for (auto it = v.begin(); it != v.end(); ++it, ++i) {
      if (i == 4) {
        s += ", ...";
        break;
      }
      if (i) s += ", ";
      if (!arr) s += json(it.key()).dump(-1, ' ', true, json::error_handler_t::replace) + ": ";
      s += json_preview(*it, depth - 1);
    }
    return s + (arr ? "]" : "}");
  }
  std::string d = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (d.size() > 60) d = d.substr(0, 57) + "...";
  return d;
}

inline std::string describe_json(const nlohmann::json& v) { return std::string(v.type_name()) + " " + json_preview(v); }

}  // namespace qkv::io::detail

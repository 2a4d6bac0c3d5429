// The fields of an API request body, read and bounded: a missing key (or, for numbers, null) gives the
// fallback; a wrong type or a number out of range is a 400 naming the key. Used by serve_lab.cpp and
// serve_generate.cpp.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "service.hpp"

namespace qkv::server::fields {

[[noreturn]] inline void bad(const std::string& msg, json extra = json::object()) {
  throw ApiError(400, msg, std::move(extra));
}

inline int64_t int64_of(const json& req, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  if (!req.contains(key) || req[key].is_null()) return fallback;
  const json& v = req[key];
  if (!v.is_number_integer()) bad(std::string("\"") + key + "\" must be an integer");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(std::string("\"") + key + "\" is " + std::to_string(x) + ", outside [" + std::to_string(lo) + ", " +
        std::to_string(hi) + "]");
  return x;
}

inline int int_of(const json& req, const char* key, int fallback, int lo, int hi) {
  return int(int64_of(req, key, fallback, lo, hi));
}

inline double number_of(const json& req, const char* key, double fallback) {
  if (!req.contains(key) || req[key].is_null()) return fallback;
  if (!req[key].is_number()) bad(std::string("\"") + key + "\" must be a number");
  return req[key].get<double>();
}

inline bool bool_of(const json& req, const char* key, bool fallback) {
  if (!req.contains(key)) return fallback;
  if (!req[key].is_boolean()) bad(std::string("\"") + key + "\" must be true or false");
  return req[key].get<bool>();
}

inline std::string string_of(const json& req, const char* key, const std::string& fallback) {
  if (!req.contains(key)) return fallback;
  if (!req[key].is_string()) bad(std::string("\"") + key + "\" must be a string");
  return req[key].get<std::string>();
}

}  // namespace qkv::server::fields

// Helpers shared by the fuzz targets (fuzz/targets/*.cpp). Each target defines LLVMFuzzerTestOneInput;
// it is linked either with libFuzzer (-DQKV_FUZZ=ON, clang: fuzz_<target>) or with replay_main.cpp
// (every build: qkv_fuzz_replay_<target>, which CTest runs over fuzz/corpus/<target> and
// fuzz/regressions/<target>).
//
// The contract every target checks: on any input the code under test either succeeds or throws
// qkv::Error. Anything else (another exception, a crash, a sanitizer report, a hang, an allocation
// beyond the limit) is a bug. Where the API promises more (decode(encode(s)) == s, a validated
// header describes bytes that exist) the target checks that too, with QKV_FUZZ_CHECK.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/error.hpp"

namespace qkv::fuzz {

// A property the API promises did not hold: print it and abort, which both libFuzzer and the replay
// driver report as a failure with the input that caused it.
#define QKV_FUZZ_CHECK(cond, what)                                                          \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "qkv fuzz: property violated at %s:%d: %s (%s)\n", __FILE__,     \
                   __LINE__, #cond, std::string(what).c_str());                             \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

// A per-process scratch directory ($TMPDIR or /tmp, then qkv_fuzz_<pid>), created on first use and
// removed at exit. The readers take paths, so each input is written to a file there first.
const std::string& scratch_dir();

// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
std::string write_scratch(const std::string& name, std::string_view bytes);

// Splits `data` at each occurrence of `sep` into at most `parts` pieces (the last takes the rest);
// missing pieces are empty. Seeds stay human-readable: vocab, "\n@@@@\n", merges, "\n@@@@\n", text.
inline std::vector<std::string_view> split(std::string_view data, std::string_view sep, std::size_t parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const std::size_t at = data.find(sep);
    if (at == std::string_view::npos) break;
    out.push_back(data.substr(0, at));
    data.remove_prefix(at + sep.size());
  }
  out.push_back(data);
  while (out.size() < parts) out.push_back({});
  return out;
}

inline std::string_view as_view(const uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace qkv::fuzz

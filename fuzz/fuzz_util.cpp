#include "fuzz_util.hpp"

#include <filesystem>
#include <fstream>

namespace qkv::fuzz {

namespace fs = std::filesystem;

namespace {
struct Scratch {
  fs::path dir;
  Scratch() {
    const char* t = std::getenv("TMPDIR");
    dir = fs::path(t && *t ? t : "/tmp") / ("qkv_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
Scratch& scratch() {
  static Scratch s;
  return s;
}
}  // namespace

const std::string& scratch_dir() {
  static const std::string d = scratch().dir.string();
  return d;
}

std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) {
    std::fprintf(stderr, "qkv fuzz: cannot write the scratch file %s\n", path.c_str());
    std::abort();
  }
  return path;
}

}  // namespace qkv::fuzz

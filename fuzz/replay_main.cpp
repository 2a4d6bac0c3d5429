// Replays inputs through a fuzz target's LLVMFuzzerTestOneInput without libFuzzer, so every build
// (any compiler, with or without sanitizers) checks the seed corpus and every regression input.
// Usage: qkv_fuzz_replay_<target> FILE_OR_DIR...   (directories: every regular file, recursively,
// in sorted order; a missing directory is skipped, since regressions/<target>/ may not exist yet).
// A single allocation above kMaxAllocation bytes aborts, as libFuzzer's -malloc_limit_mb does: no input
// of the corpus justifies it, so it is an allocation that a header merely claimed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
constexpr std::size_t kMaxAllocation = std::size_t(1) << 30;  // 1 GiB
const char* g_current = "";
}  // namespace

void* operator new(std::size_t n) {
  if (n > kMaxAllocation) {
    std::fprintf(stderr, "qkv fuzz replay: %s: allocation of %zu bytes exceeds the %zu-byte limit\n", g_current, n,
                 kMaxAllocation);
    std::abort();
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// Under ASan every form of operator new that is not replaced here goes to ASan's allocator, and a
// delete replaced here would then free() it (alloc-dealloc-mismatch): the nothrow forms (which
// std::stable_sort's temporary buffer uses) must be replaced too. The aligned forms are left to the
// runtime entirely, new and delete alike.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else if (fs::exists(p, ec)) {
      std::fprintf(stderr, "qkv fuzz replay: %s: not a file or directory\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string name = f.string();
    g_current = name.c_str();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("qkv fuzz replay: %zu inputs, no failure\n", files.size());
  return 0;
}

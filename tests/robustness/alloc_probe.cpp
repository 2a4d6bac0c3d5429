#include "alloc_probe.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> g_probing{false};
std::atomic<std::size_t> g_largest{0};
}  // namespace

namespace qkv::probe {
void start() {
  g_largest = 0;
  g_probing = true;
}
void stop() { g_probing = false; }
std::size_t largest() { return g_largest.load(); }
}  // namespace qkv::probe

void* operator new(std::size_t n) {
  if (g_probing.load(std::memory_order_relaxed)) {
    std::size_t prev = g_largest.load(std::memory_order_relaxed);
    while (n > prev && !g_largest.compare_exchange_weak(prev, n)) {
    }
    if (n > qkv::probe::kRefuse) throw std::bad_alloc();
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

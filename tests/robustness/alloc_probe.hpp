// The allocation probe: while a Probe is alive, the largest single operator new is recorded, and a
// request above kRefuse bytes is refused with std::bad_alloc without reaching malloc. A test can thus
// show that a reader allocated (or tried to allocate) only what the file backs, never what a header
// merely claims, identically with and without ASan. The replacement operators live in
// alloc_probe.cpp (a separate translation unit, so no compiler pairs them up across inlining).
#pragma once
#include <cstddef>

namespace qkv::probe {

constexpr std::size_t kRefuse = std::size_t(1) << 30;

void start();
void stop();
std::size_t largest();

struct Probe {
  Probe() { start(); }
  ~Probe() { stop(); }
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;
  std::size_t largest() const { return probe::largest(); }
};

}  // namespace qkv::probe

using qkv::probe::Probe;

// Per-op wall-clock profile of a forward pass (`qkv bench forward --profile`). Off by default: a disabled
// profile::Scope costs one relaxed atomic load. Scopes are meant for the calling thread of a forward (they
// time whole ops, each of which may run on OpenMP threads inside), not for code inside parallel regions.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace qkv::profile {

struct Entry {
  std::string op;
  double seconds = 0;
  long calls = 0;
};

void set_enabled(bool on);
bool enabled();
// Adds `seconds` to op `op` (entries keep first-seen order).
void add(const char* op, double seconds);
// The entries so far, then cleared.
std::vector<Entry> take();

// Times its own lifetime as op `op` when profiling is enabled.
class Scope {
 public:
  explicit Scope(const char* op) : op_(enabled() ? op : nullptr) {
    if (op_) t0_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (op_) add(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* op_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace qkv::profile

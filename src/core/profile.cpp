// Per-op wall-clock profile (profile.hpp).
#include "qkv/profile.hpp"

#include <atomic>
#include <mutex>

namespace qkv::profile {
namespace {
std::atomic<bool> g_on{false};
std::mutex g_mu;
std::vector<Entry> g_entries;
}  // namespace

void set_enabled(bool on) {
  g_on.store(on, std::memory_order_relaxed);
}
bool enabled() {
  return g_on.load(std::memory_order_relaxed);
}
void add(const char* op, double seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Entry& e : g_entries)
    if (e.op == op) {
      e.seconds += seconds;
      ++e.calls;
      return;
    }
  g_entries.push_back(Entry{op, seconds, 1});
}
std::vector<Entry> take() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<Entry> out;
  out.swap(g_entries);
  return out;
}

}  // namespace qkv::profile

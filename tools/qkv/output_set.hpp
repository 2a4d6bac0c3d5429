// All-or-nothing output of several files: each file is written atomically by the io layer, and if any
// later one fails, the files this command already wrote are removed again, so a failed command leaves
// no half set behind (a dump with some hooks missing would look complete to the next reader).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace qkv::cli {

class OutputSet {
 public:
  // Call after each file is in place.
  const std::string& add(const std::string& path) { return written_.emplace_back(path); }
  void commit() { committed_ = true; }
  ~OutputSet() {
    if (committed_) return;
    std::error_code ec;
    for (const auto& p : written_) std::filesystem::remove(p, ec);
  }

 private:
  std::vector<std::string> written_;
  bool committed_ = false;
};

}  // namespace qkv::cli

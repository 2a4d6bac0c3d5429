// Sweeps, part 3: the sum tree of the statistics, a function of the windows only. Windows fall into
// blocks of kSumBlock consecutive windows (the last block of the sweep may be shorter); a block's sum is
// its window records added in window order, starting from zero; the total is the block sums added in
// block order. A chunk stores, in window order, one row per block that lies wholly inside it (that
// block's sum) and one row per window of a block it shares with a neighbouring chunk (the window's own
// record); the reduction finishes those shared blocks in window order. Chunking (--chunk-windows,
// --shard-mb), ranks, threads and resumption therefore change no bit of the statistics.
#include <algorithm>

#include "qkv/analysis/sweep.hpp"
#include "qkv/error.hpp"

namespace qkv::analysis::sweep {

std::vector<SumItem> sum_items(int64_t w0, int64_t w1, int64_t n_windows) {
  std::vector<SumItem> items;
  for (int64_t w = w0; w < w1;) {
    const int64_t b0 = w / kSumBlock * kSumBlock, b1 = std::min(b0 + kSumBlock, n_windows);
    if (b0 >= w0 && b1 <= w1) {
      items.push_back({b0, b1 - b0});
      w = b1;
    } else {
      items.push_back({w, 1});
      w++;
    }
  }
  return items;
}

std::vector<double> chunk_rows(const Layout& lay, int64_t w0, int64_t w1, int64_t n_windows,
                               const std::vector<std::vector<double>>& recs) {
  if (recs.size() != size_t(w1 - w0)) usage_error("chunk_rows: one record per window of the chunk expected");
  const size_t n = lay.size();
  std::vector<double> rows;
  for (const SumItem& it : sum_items(w0, w1, n_windows)) {
    std::vector<double> sum(n, 0.0);
    for (int64_t w = it.first; w < it.first + it.count; w++) {
      const std::vector<double>& r = recs[size_t(w - w0)];
      for (size_t i = 0; i < n; i++) sum[i] += r[i];  // window order within the block
    }
    rows.insert(rows.end(), sum.begin(), sum.end());
  }
  return rows;
}

BlockReducer::BlockReducer(const Layout& lay, int64_t n_windows)
    : n_windows_(n_windows), total_(lay.size(), 0.0), block_(lay.size(), 0.0) {}

void BlockReducer::add(int64_t w0, int64_t w1, const double* rows, size_t n_values, const std::string& where) {
  const size_t n = total_.size();
  const std::vector<SumItem> items = sum_items(w0, w1, n_windows_);
  if (n_values != items.size() * n)
    data_error(where + ": " + std::to_string(n_values) + " values, expected " + std::to_string(items.size()) +
               " rows of " + std::to_string(n));
  if (w0 != next_)
    data_error(where + ": starts at window " + std::to_string(w0) + ", expected " + std::to_string(next_));
  for (const SumItem& it : items) {
    const double* r = rows + (&it - items.data()) * n;
    const int64_t b1 = std::min(it.first / kSumBlock * kSumBlock + kSumBlock, n_windows_);
    if (it.count > 1) {  // a whole block's sum
      for (size_t i = 0; i < n; i++) total_[i] += r[i];
      continue;
    }
    for (size_t i = 0; i < n; i++) block_[i] += r[i];  // a window of a shared block, in window order
    if (it.first + 1 == b1) {
      for (size_t i = 0; i < n; i++) total_[i] += block_[i];
      std::fill(block_.begin(), block_.end(), 0.0);
    }
  }
  next_ = w1;
}

const std::vector<double>& BlockReducer::total() const {
  if (next_ != n_windows_)
    data_error("sweep statistics: windows [" + std::to_string(next_) + ", " + std::to_string(n_windows_) +
               ") are missing from the sum");
  return total_;
}

}  // namespace qkv::analysis::sweep

#include <algorithm>

#include "qkv/error.hpp"
#include "qkv/train/train.hpp"

namespace qkv {

DataSource induction_data(int vocab, int seq_len) {
  if (vocab < 2 || seq_len < 8) usage_error("induction data: need vocab >= 2 and seq_len >= 8");
  return [vocab, seq_len](std::mt19937_64& rng) {
    std::uniform_int_distribution<int> tok(0, vocab - 1);
    Sample s;
    s.ids.resize(size_t(seq_len));
    for (int& t : s.ids) t = tok(rng);
    if (rng() % 2 == 0) {
      // A random prefix of n tokens repeated: [a b c … | a b c …], then random filler.
      const int n = std::uniform_int_distribution<int>(4, seq_len / 2)(rng);
      for (int i = 0; i < n; i++) s.ids[size_t(n + i)] = s.ids[size_t(i)];
    } else {
      // Several segments copied from earlier positions to later ones.
      const int copies = std::uniform_int_distribution<int>(1, 4)(rng);
      for (int c = 0; c < copies; c++) {
        const int len = std::uniform_int_distribution<int>(3, std::max(3, seq_len / 6))(rng);
        if (2 * len >= seq_len) continue;
        const int src = std::uniform_int_distribution<int>(0, seq_len - 2 * len)(rng);
        const int dst = std::uniform_int_distribution<int>(src + len, seq_len - len)(rng);
        std::copy_n(s.ids.begin() + src, len, s.ids.begin() + dst);
      }
    }
    s.targets.assign(size_t(seq_len), -1);
    for (int t = 0; t + 1 < seq_len; t++) s.targets[size_t(t)] = s.ids[size_t(t) + 1];
    return s;
  };
}

DataSource text_data(std::vector<int> tokens, int seq_len) {
  if (int64_t(tokens.size()) < int64_t(seq_len) + 1)
    usage_error("training text has " + std::to_string(tokens.size()) + " tokens; need at least seq_len + 1 = " +
                std::to_string(seq_len + 1));
  auto shared = std::make_shared<const std::vector<int>>(std::move(tokens));
  return [shared, seq_len](std::mt19937_64& rng) {
    const size_t start = std::uniform_int_distribution<size_t>(0, shared->size() - size_t(seq_len) - 1)(rng);
    Sample s;
    s.ids.assign(shared->begin() + int64_t(start), shared->begin() + int64_t(start) + seq_len);
    s.targets.assign(shared->begin() + int64_t(start) + 1, shared->begin() + int64_t(start) + seq_len + 1);
    return s;
  };
}

}  // namespace qkv

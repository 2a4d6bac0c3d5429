#include <algorithm>

#include "qkv/error.hpp"
#include "qkv/train/train.hpp"

namespace qkv {

DataSource induction_data(std::vector<int> alphabet, int seq_len) {
  if (alphabet.size() < 2 || seq_len < 8) usage_error("induction data: need an alphabet of >= 2 tokens and seq_len >= 8");
  // g: a fixed shuffle of the alphabet (its own generator, so every run shares it).
  std::vector<int> skip = alphabet;
  std::shuffle(skip.begin(), skip.end(), std::mt19937_64(0x5eed));
  std::vector<int> index_of(size_t(*std::max_element(alphabet.begin(), alphabet.end())) + 1, 0);
  for (size_t i = 0; i < alphabet.size(); i++) index_of[size_t(alphabet[i])] = int(i);
  return [alphabet = std::move(alphabet), skip = std::move(skip), index_of = std::move(index_of),
          seq_len](std::mt19937_64& rng) {
    std::uniform_int_distribution<size_t> tok(0, alphabet.size() - 1);
    Sample s;
    s.ids.resize(size_t(seq_len));
    for (int& t : s.ids) t = alphabet[tok(rng)];
    // Loss only where the next token can be known from the context: the next token of uniformly
    // random filler carries no signal, only noise that drowns the copying signal.
    s.targets.assign(size_t(seq_len), -1);
    auto predictable = [&](int t) { s.targets[size_t(t)] = s.ids[size_t(t) + 1]; };
    const uint64_t kind = rng() % 8;
    if (kind < 1) {
      // TransformerLens's probe: a random prefix of n tokens repeated once, then random filler.
      const int n = std::uniform_int_distribution<int>(4, seq_len / 2)(rng);
      for (int i = 0; i < n; i++) s.ids[size_t(n + i)] = s.ids[size_t(i)];
      for (int t = n; t + 1 < 2 * n; t++) predictable(t);
    } else if (kind < 5) {
      // Several segments copied from random earlier positions to random later ones: only "find the
      // earlier occurrence of this token, copy what followed" predicts them — no position does.
      const int copies = std::uniform_int_distribution<int>(1, 4)(rng);
      std::vector<char> read(size_t(seq_len), 0), written(size_t(seq_len), 0);
      for (int c = 0; c < copies; c++) {
        const int len = std::uniform_int_distribution<int>(3, std::max(3, seq_len / 4))(rng);
        if (2 * len >= seq_len) continue;
        const int src = std::uniform_int_distribution<int>(0, seq_len - 2 * len)(rng);
        const int dst = std::uniform_int_distribution<int>(src + len, seq_len - len)(rng);
        // A copy may not overwrite an earlier copy's source or destination, nor read from an earlier
        // destination, so every target set below stays true.
        bool clash = false;
        for (int i = 0; i < len; i++)
          clash = clash || read[size_t(dst + i)] || written[size_t(dst + i)] || written[size_t(src + i)];
        if (clash) continue;
        std::copy_n(s.ids.begin() + src, len, s.ids.begin() + dst);
        for (int i = 0; i < len; i++) read[size_t(src + i)] = written[size_t(dst + i)] = 1;
        for (int t = dst; t + 1 < dst + len; t++) predictable(t);
      }
    } else {
      // A skip-bigram chain: mostly x[t+1] = g(x[t-1]) for one fixed shuffle g of the alphabet.
      // Predicting it needs the token BEFORE the current one, which rewards a previous-token head in
      // the first layer on its own — the half of the induction circuit that random tokens alone
      // give no reason to build.
      for (int t = 1; t + 1 < seq_len; t++)
        if (rng() % 8 != 0) {
          s.ids[size_t(t) + 1] = skip[size_t(index_of[size_t(s.ids[size_t(t) - 1])])];
          predictable(t);
        }
    }
    return s;
  };
}

DataSource induction_data(int vocab, int seq_len) {
  std::vector<int> all(static_cast<size_t>(std::max(vocab, 0)));
  for (int i = 0; i < vocab; i++) all[size_t(i)] = i;
  return induction_data(std::move(all), seq_len);
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

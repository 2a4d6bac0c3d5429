#include <algorithm>
#include <sstream>

#include "qkv/error.hpp"
#include "qkv/train/train.hpp"

namespace qkv {

InductionMix parse_induction_mix(const std::string& spec) {
  InductionMix m{0, 0, 0, 0, 0};
  std::istringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    int* w = nullptr;
    const std::string key = item.substr(0, eq);
    if (key == "probe") w = &m.probe;
    if (key == "copies") w = &m.copies;
    if (key == "skip") w = &m.skip;
    if (key == "periodic") w = &m.periodic;
    if (key == "recall") w = &m.recall;
    int value = -1;
    if (eq != std::string::npos) {
      try {
        size_t used = 0;
        value = std::stoi(item.substr(eq + 1), &used);
        if (used != item.size() - eq - 1) value = -1;
      } catch (const std::exception&) {
        value = -1;
      }
    }
    if (!w || value < 0 || value > 1000)
      usage_error("--mix: '" + item + "' is not KIND=WEIGHT with KIND one of probe, copies, skip, periodic, recall and WEIGHT 0..1000");
    *w = value;
  }
  if (m.probe + m.copies + m.skip + m.periodic + m.recall <= 0) usage_error("--mix: every weight is 0 ('" + spec + "')");
  return m;
}

std::string to_string(const InductionMix& m) {
  return "probe=" + std::to_string(m.probe) + ",copies=" + std::to_string(m.copies) + ",skip=" + std::to_string(m.skip) +
         ",periodic=" + std::to_string(m.periodic) +
         ",recall=" + std::to_string(m.recall);
}

DataSource induction_data(std::vector<int> alphabet, int seq_len, InductionMix mix) {
  if (alphabet.size() < 2 || seq_len < 8) usage_error("induction data: need an alphabet of >= 2 tokens and seq_len >= 8");
  if (mix.probe < 0 || mix.copies < 0 || mix.skip < 0 || mix.periodic < 0 || mix.recall < 0 ||
      mix.probe + mix.copies + mix.skip + mix.periodic + mix.recall <= 0)
    usage_error("induction data: the mix's weights must be >= 0 and not all 0");
  // g: a fixed shuffle of the alphabet (its own generator, so every run shares it).
  std::vector<int> skip = alphabet;
  std::shuffle(skip.begin(), skip.end(), std::mt19937_64(0x5eed));
  std::vector<int> index_of(size_t(*std::max_element(alphabet.begin(), alphabet.end())) + 1, 0);
  for (size_t i = 0; i < alphabet.size(); i++) index_of[size_t(alphabet[i])] = int(i);
  const uint64_t total = uint64_t(mix.probe + mix.copies + mix.skip + mix.periodic + mix.recall);
  return [alphabet = std::move(alphabet), skip = std::move(skip), index_of = std::move(index_of), seq_len, mix,
          total](std::mt19937_64& rng) {
    std::uniform_int_distribution<size_t> tok(0, alphabet.size() - 1);
    Sample s;
    s.ids.resize(size_t(seq_len));
    for (int& t : s.ids) t = alphabet[tok(rng)];
    // Loss only where the next token can be known from the context: the next token of uniformly
    // random filler carries no signal, only noise that drowns the copying signal.
    s.targets.assign(size_t(seq_len), -1);
    auto predictable = [&](int t) { s.targets[size_t(t)] = s.ids[size_t(t) + 1]; };
    uint64_t kind = rng() % total;
    if (kind < uint64_t(mix.probe)) {
      // TransformerLens's probe: a random prefix of n tokens repeated once, then random filler.
      const int n = std::uniform_int_distribution<int>(4, seq_len / 2)(rng);
      for (int i = 0; i < n; i++) s.ids[size_t(n + i)] = s.ids[size_t(i)];
      for (int t = n; t + 1 < 2 * n; t++) predictable(t);
      return s;
    }
    kind -= uint64_t(mix.probe);
    if (kind < uint64_t(mix.copies)) {
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
      return s;
    }
    kind -= uint64_t(mix.copies);
    if (kind < uint64_t(mix.skip)) {
      // A skip-bigram chain: mostly x[t+1] = g(x[t-1]) for one fixed shuffle g of the alphabet.
      // Predicting it needs the token BEFORE the current one, which rewards a previous-token head in
      // the first layer on its own — the half of the induction circuit that random tokens alone
      // give no reason to build.
      //
      // Since g is a function, x[a] = x[b] makes x[a+2] = x[b+2]: a chain that meets a token again
      // replays its continuation two steps on. Those replays reward matching the PREVIOUS token
      // (x[t-1] = x[j-1], so x[t+1] = x[j+1]) — a shifted copying circuit that competes with the
      // induction head and, in measured runs, always won. So a chained position carries loss only
      // where x[t-1] occurs for the first time in the sequence.
      std::vector<char> seen(index_of.size(), 0);
      seen[size_t(s.ids[0])] = 1;
      for (int t = 1; t + 1 < seq_len; t++) {
        const int prev = s.ids[size_t(t) - 1];
        const bool first = t == 1 || !seen[size_t(prev)];
        seen[size_t(prev)] = 1;
        if (rng() % 8 != 0) {
          s.ids[size_t(t) + 1] = skip[size_t(index_of[size_t(prev)])];
          if (first) predictable(t);
        }
      }
      return s;
    }
    kind -= uint64_t(mix.skip);
    if (kind < uint64_t(mix.recall) && alphabet.size() >= 8) {
      // Associative recall in a bigram language (after Bietti et al. 2023, "Birth of a Transformer"):
      // the filler follows a fixed global bigram map h (the shuffle g above) three times in four, so
      // the CURRENT token predicts the next one everywhere and has to stay legible in the residual
      // stream; among it, k = 4..16 trigger pairs A -> B specific to this sequence recur in random
      // order. The token before an A changes from one occurrence to the next, so matching the
      // previous token (the shifted circuit) rarely finds B; the induction circuit (a previous-token
      // head writes "after A" into B's position, a second head's query A finds that key, its OV
      // copies B) predicts it at every A but the first. Triggers never appear as filler or as a B,
      // so each A is unambiguous. Scored: each A after its first, and each filler step h made.
      const int k = std::uniform_int_distribution<int>(4, std::min<int>(16, int(alphabet.size()) / 2))(rng);
      std::vector<char> is_trigger(index_of.size(), 0), seen(index_of.size(), 0);
      std::vector<int> a(static_cast<size_t>(k)), b(static_cast<size_t>(k));
      for (int p = 0; p < k; p++) {
        do a[size_t(p)] = alphabet[tok(rng)];
        while (is_trigger[size_t(a[size_t(p)])]);
        is_trigger[size_t(a[size_t(p)])] = 1;
      }
      auto non_trigger = [&] {
        int t;
        do t = alphabet[tok(rng)];
        while (is_trigger[size_t(t)]);
        return t;
      };
      for (int p = 0; p < k; p++) b[size_t(p)] = non_trigger();
      s.ids[0] = non_trigger();  // every A has a predecessor
      for (int t = 1; t < seq_len;) {
        const int prev = s.ids[size_t(t) - 1];  // never a trigger: an A is always followed by its B
        if (t + 1 < seq_len && rng() % 3 == 0) {
          const size_t p = size_t(rng() % uint64_t(k));
          s.ids[size_t(t)] = a[p];
          s.ids[size_t(t) + 1] = b[p];
          if (seen[size_t(a[p])]) predictable(t);
          seen[size_t(a[p])] = 1;
          t += 2;
          continue;
        }
        const int next = skip[size_t(index_of[size_t(prev)])];
        if (rng() % 4 != 0 && !is_trigger[size_t(next)]) {
          s.ids[size_t(t)] = next;
          predictable(t - 1);
        } else {
          s.ids[size_t(t)] = non_trigger();
        }
        t++;
      }
      return s;
    }
    // A random segment of random length n repeated to the end: every token from the first repeat on
    // follows from the context, and since n differs per sequence no fixed position offset finds it.
    const int n = std::uniform_int_distribution<int>(3, seq_len / 2)(rng);
    for (int t = n; t < seq_len; t++) s.ids[size_t(t)] = s.ids[size_t(t - n)];
    for (int t = n; t + 1 < seq_len; t++) predictable(t);
    return s;
  };
}

DataSource induction_data(int vocab, int seq_len, InductionMix mix) {
  std::vector<int> all(static_cast<size_t>(std::max(vocab, 0)));
  for (int i = 0; i < vocab; i++) all[size_t(i)] = i;
  return induction_data(std::move(all), seq_len, mix);
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

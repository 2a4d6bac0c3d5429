// qkv tour: the claim table (claims/claim.hpp) run on one model with the context built once
// (claims/context.hpp): a verdict or an n/a with its reason for every claim.
#include "qkv/analysis/tour.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include "analysis/claims/claim.hpp"
#include "analysis/claims/context.hpp"
#include "qkv/error.hpp"
#include "qkv/model_files.hpp"

namespace qkv::analysis {
namespace {

// The options against the model, before anything runs (qkv::Error, Usage).
void check_options(const Arch& a, const TourOptions& o, TourResult& r) {
  const int T = int(o.text_ids.size());
  if (T < 2) usage_error("tour: the text must have at least 2 tokens (it has " + std::to_string(T) + ")");
  if (T > a.n_ctx)
    usage_error("tour: the text is " + std::to_string(T) + " tokens but the model has " +
                std::to_string(a.n_ctx) + " positions");
  for (int id : o.text_ids)
    if (id < 0 || id >= a.vocab_size)
      usage_error("tour: token " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(a.vocab_size) + ")");
  if (o.bos >= a.vocab_size) usage_error("tour: bos " + std::to_string(o.bos) + " is outside the vocabulary");
  if (o.batch < 1) usage_error("tour: batch must be >= 1");
  const int max_n = (a.n_ctx - (o.bos >= 0 ? 1 : 0)) / 2;
  r.n = o.n > 0 ? o.n : std::min(25, max_n);
  if (r.n < 2 || r.n > max_n)
    usage_error("tour: the repeated sequence length " + std::to_string(r.n) + " is outside [2, " +
                std::to_string(max_n) + "] for a model with " + std::to_string(a.n_ctx) + " positions");
}

}  // namespace

double Claim::number(const std::string& key) const {
  for (const auto& m : measured)
    if (m.key == key && !m.is_text()) return m.value;
  throw Error(ErrorKind::Data, "claim " + id + ": no measure '" + key + "'");
}

const Claim* TourResult::claim(const std::string& id) const {
  for (const auto& c : claims)
    if (c.id == id) return &c;
  return nullptr;
}

int TourResult::held_count() const {
  return int(std::count_if(claims.begin(), claims.end(), [](const Claim& c) { return c.applies && c.held; }));
}

int TourResult::applicable_count() const {
  return int(std::count_if(claims.begin(), claims.end(), [](const Claim& c) { return c.applies; }));
}

const std::vector<std::string>& tour_claim_ids() {
  static const std::vector<std::string> ids = [] {
    std::vector<std::string> v;
    for (const auto& u : detail::claim_table()) v.push_back(u.id);
    return v;
  }();
  return ids;
}

TourResult tour(const Model& model, const TourOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const Arch& a = model.arch;
  TourResult r;
  r.arch = a;
  r.L = a.n_layer, r.H = a.H, r.n_kv = a.n_kv, r.d = a.d, r.dh = a.dh;
  r.text_ids = o.text_ids, r.T = int(o.text_ids.size()), r.bos = o.bos, r.seed = o.seed, r.batch = o.batch;
  check_options(a, o, r);

  const auto& table = detail::claim_table();
  const int total = int(table.size()) + 1;
  int step = 0;
  if (o.progress) o.progress(++step, total, "heads (choosing the induction and previous-token heads)");
  detail::TourContext ctx(model, o, r);
  for (const detail::ClaimUnit& u : table) {
    if (o.progress) o.progress(++step, total, u.id);
    detail::Builder b(u.id, u.source, u.seed);
    const std::optional<std::string> why = u.applies ? u.applies(a) : std::nullopt;
    r.claims.push_back(why ? b.na(*why) : u.measure(ctx, b));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string default_tour_text(const std::function<std::vector<int>(const std::string&)>& encode,
                              int max_tokens) {
  static const char* candidates[] = {
      "The old lighthouse keeper climbed the stairs to light the lamp. The old lighthouse keeper climbed the "
      "stairs to light the lamp.",
      "The cat sat on the mat. The dog ran in the park. The cat sat on the mat. The dog ran in the park.",
      "The cat sat on the mat. The cat sat on the mat.",
      "the cat sat. the cat sat.",
      "a cat. a cat.",
  };
  for (const char* c : candidates) {
    const size_t n = encode(c).size();
    if (n >= 2 && int(n) <= max_tokens) return c;
  }
  return "";
}

TourInput tour_input(const Arch& a, const Tokenizer* tok, const std::vector<int>& ids,
                     const std::string& text, int bos, int n, int batch, uint64_t seed) {
  TourInput in;
  TourOptions& o = in.options;
  if (!ids.empty()) {
    o.text_ids = ids;
    in.text = text;
    if (o.text_ids.size() < 2) usage_error("the tour text must have at least 2 tokens");
  } else if (tok) {
    in.text = default_tour_text([&](const std::string& t) { return tok->encode(t); }, std::min(60, a.n_ctx));
    if (in.text.empty())
      usage_error("the model's " + std::to_string(a.n_ctx) +
                  " positions fit no default tour text; give --tokens");
    o.text_ids = tok->encode(in.text);
  } else {
    // No tokenizer: a seeded random sequence repeated twice, as long as fits (at most 2 × 25).
    const int half = std::min(25, a.n_ctx / 2);
    if (half < 1) usage_error("the model has fewer than 2 positions");
    o.text_ids = repeated_random_tokens(a.vocab_size, half, 1, seed + 1000)[0];
  }
  for (int id : o.text_ids) in.labels.push_back(tok ? token_label(*tok, id) : "#" + std::to_string(id));
  // BOS for the repeated random sequences: bos >= -1 as given, else <|endoftext|> when the tokenizer ends
  // with it.
  o.bos = -1;
  if (bos >= -1) {
    o.bos = bos;
    if (o.bos >= a.vocab_size)
      usage_error("--bos: " + std::to_string(o.bos) + " is outside [0, " + std::to_string(a.vocab_size) +
                  ")");
  } else if (tok && tok->vocab_size() > 0 && tok->token_string(tok->vocab_size() - 1) == "<|endoftext|>") {
    o.bos = tok->vocab_size() - 1;
  }
  const int max_n = (a.n_ctx - (o.bos >= 0 ? 1 : 0)) / 2;
  if (n != 0 && (n < 2 || n > max_n))
    usage_error("--seq-len: " + std::to_string(n) + " is outside [2, " + std::to_string(max_n) +
                "] (the repeated sequence must fit the model's " + std::to_string(a.n_ctx) + " positions)");
  if (max_n < 2)
    usage_error("the model's " + std::to_string(a.n_ctx) + " positions are too few for the tour");
  o.n = n, o.batch = batch, o.seed = seed;
  return in;
}

}  // namespace qkv::analysis

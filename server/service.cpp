#include "service.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "qkv/analysis/circuits.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/head_weights.hpp"
#include "qkv/analysis/patching.hpp"
#include "qkv/analysis/running_example.hpp"
#include "qkv/analysis/soft_dictionary.hpp"
#include "qkv/error.hpp"
#include "qkv/model_files.hpp"

namespace qkv::server {
namespace an = qkv::analysis;

namespace {

[[noreturn]] void bad(const std::string& msg, json extra = json::object()) { throw ApiError(400, msg, std::move(extra)); }

bool get_bool(const json& req, const char* key, bool fallback) {
  if (!req.contains(key)) return fallback;
  if (!req[key].is_boolean()) bad(std::string("\"") + key + "\" must be true or false");
  return req[key].get<bool>();
}

int get_int(const json& req, const char* key, int fallback, int lo, int hi) {
  if (!req.contains(key)) return fallback;
  const json& v = req[key];
  if (!v.is_number_integer()) bad(std::string("\"") + key + "\" must be an integer");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(std::string("\"") + key + "\" is " + std::to_string(x) + ", outside [" + std::to_string(lo) + ", " +
        std::to_string(hi) + "]");
  return int(x);
}

// A list of rows of finite numbers, at most max_rows × max_cols, every row as long as the first.
Matrix get_matrix(const json& req, const char* key, int max_rows, int max_cols, bool required) {
  if (!req.contains(key)) {
    if (required) bad(std::string("\"") + key + "\" is missing: a list of rows of numbers");
    return {};
  }
  const json& m = req[key];
  const std::string k = std::string("\"") + key + "\"";
  if (!m.is_array()) bad(k + " must be a list of rows of numbers");
  if (int(m.size()) > max_rows) bad(k + " has " + std::to_string(m.size()) + " rows; at most " + std::to_string(max_rows));
  Matrix out;
  for (size_t i = 0; i < m.size(); i++) {
    const json& row = m[i];
    if (!row.is_array() || row.empty()) bad(k + ": row " + std::to_string(i) + " must be a non-empty list of numbers");
    if (int(row.size()) > max_cols)
      bad(k + ": row " + std::to_string(i) + " has " + std::to_string(row.size()) + " numbers; at most " +
          std::to_string(max_cols));
    if (!out.empty() && row.size() != out[0].size())
      bad(k + ": every row needs " + std::to_string(out[0].size()) + " numbers, row " + std::to_string(i) + " has " +
          std::to_string(row.size()));
    std::vector<double> r;
    for (const json& x : row) {
      if (!x.is_number()) bad(k + ": row " + std::to_string(i) + " holds something that is not a number");
      const double v = x.get<double>();
      if (!std::isfinite(v) || std::abs(v) > 1e6) bad(k + ": row " + std::to_string(i) + " holds a number outside ±1e6");
      r.push_back(v);
    }
    out.push_back(std::move(r));
  }
  return out;
}

json matrix_json(const Matrix& m) {
  json j = json::array();
  for (const auto& row : m) {
    json r = json::array();
    for (double v : row) r.push_back(std::isfinite(v) ? json(v) : json(nullptr));
    j.push_back(std::move(r));
  }
  return j;
}

// Rows of a [T, T] float block, each value exactly the float (as a double: JSON round-trips it).
json square_json(const float* p, int T) {
  json j = json::array();
  for (int i = 0; i < T; i++) j.push_back(std::vector<double>(p + int64_t(i) * T, p + int64_t(i + 1) * T));
  return j;
}

// The pattern without the model's scale (÷√dh for GPT-2): softmax over the visible j (j ≤ i, and
// i − window < j with a sliding window) of S_ij·mult, mult = 1/scale, in double.
std::vector<float> unscaled_pattern(const float* S, int T, double mult, int window = 0) {
  std::vector<float> A(size_t(T) * T, 0.0f);
  std::vector<double> row(static_cast<size_t>(T));
  for (int i = 0; i < T; i++) {
    const int j0 = window > 0 ? std::max(0, i - window + 1) : 0;
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = j0; j <= i; j++) mx = std::max(mx, row[size_t(j)] = double(S[int64_t(i) * T + j]) * mult);
    double sum = 0;
    for (int j = j0; j <= i; j++) sum += row[size_t(j)] = std::exp(row[size_t(j)] - mx);
    for (int j = j0; j <= i; j++) A[size_t(i) * T + j] = float(row[size_t(j)] / sum);
  }
  return A;
}

// Mean-pooled n×n picture of a [T, T] pattern (exact when n == T), rounded to 4 decimals.
json thumbnail(const float* A, int T, int n) {
  json j = json::array();
  for (int a = 0; a < n; a++) {
    const int i0 = int(int64_t(a) * T / n), i1 = int(int64_t(a + 1) * T / n);
    std::vector<double> r;
    for (int b = 0; b < n; b++) {
      const int j0 = int(int64_t(b) * T / n), j1 = int(int64_t(b + 1) * T / n);
      double s = 0;
      for (int i = i0; i < i1; i++)
        for (int k = j0; k < j1; k++) s += A[int64_t(i) * T + k];
      r.push_back(std::round(s / double((i1 - i0) * (j1 - j0)) * 1e4) / 1e4);
    }
    j.push_back(std::move(r));
  }
  return j;
}

std::string short_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string scores_are(const Arch& a, bool scale) {
  std::string qk = a.rotary() ? "(R_i q_i)·(R_j k_j), the ROTATED q and k (hook_rot_q, hook_rot_k)" : "q·k";
  std::string s;
  // 1/√dh, the usual scale (GPT-2, Llama, …), in the seed's words; other scales by their value
  const bool sqrt_dh = std::abs(a.attn_scale * std::sqrt(double(a.dh)) - 1.0) < 1e-12;
  if (sqrt_dh && !a.rotary() && a.attn_softcap == 0)
    return scale ? "q·k/√dh (unmasked)" : "q·k (unmasked, not divided by √dh)";
  if (scale)
    s = short_num(a.attn_scale) + "·" + qk;
  else
    s = qk + " (without the model's scale " + short_num(a.attn_scale) + ")";
  s += " (unmasked";
  if (a.attn_softcap > 0) s += ", before the soft-cap";
  return s + ")";
}

}  // namespace

Service::Service(std::string model_path, Model model, std::optional<Tokenizer> tokenizer,
                 ServiceOptions options)
    : path_(std::move(model_path)),
      lm_(std::move(model)),
      tok_(std::move(tokenizer)),
      opt_(options),
      forwards_(std::clamp(options.max_concurrent_forwards, 1, 1024)) {}

json Service::info() const {
  const Arch& a = lm_.arch;
  json wins = json::array();
  for (int l = 0; l < a.n_layer; l++) wins.push_back(a.window_of(l));
  return {{"path", path_},
          {"source", lm_.source},
          {"parameters", lm_.num_parameters()},
          {"model_type", a.model_type},
          {"config",
           {{"vocab_size", a.vocab_size},
            {"n_positions", a.n_ctx},
            {"n_embd", a.d},
            {"n_layer", a.n_layer},
            {"n_head", a.H},
            {"n_kv_head", a.n_kv},
            {"head_dim", a.dh},
            {"attn_only", a.attn_only()},
            {"rotary", a.rotary()},
            {"rotary_dim", a.rotary() ? json(a.rotary_dim) : json(nullptr)},
            {"rope_theta", a.rotary() ? json(a.rope_theta) : json(nullptr)},
            {"attn_scale", a.attn_scale},
            {"attn_softcap", a.attn_softcap},
            {"window", wins},
            {"norm", a.norm == NormKind::LayerNorm ? "LayerNorm" : a.norm == NormKind::RMSNorm ? "RMSNorm" : "RMSNorm (1 + w)"}}},
          {"tokenizer", tok_ ? json(tok_->vocab_size()) : json(nullptr)},
          {"patch_limits",
           {{"max_tokens", std::min(a.n_ctx, opt_.max_patch_tokens)}, {"max_sites", opt_.max_patch_sites}}},
          {"features", {{"heads", true}, {"circuits", true}, {"patching", true}, {"rope", a.rotary()}}}};
}

std::vector<std::string> Service::labels(const std::vector<int>& ids) const {
  std::vector<std::string> out;
  for (int id : ids) {
    if (tok_ && id < tok_->vocab_size()) {
      out.push_back(token_label(*tok_, id));
    } else {  // no tokenizer, or an id past its vocabulary (a family checkpoint with a smaller tokenizer)
      std::string s = "#";
      s += std::to_string(id);
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::vector<int> Service::request_ids(const json& req) const {
  if (!req.is_object()) bad("the request body must be a JSON object");
  std::vector<int> ids;
  const int V = lm_.arch.vocab_size, P = lm_.arch.n_ctx;
  if (req.contains("ids")) {
    if (req.contains("text")) bad("give \"text\" or \"ids\", not both");
    const json& a = req["ids"];
    if (!a.is_array()) bad("\"ids\" must be a list of token ids");
    for (size_t i = 0; i < a.size(); i++) {
      if (!a[i].is_number_integer()) bad("\"ids\": position " + std::to_string(i) + " is not an integer");
      const int64_t id = a[i].get<int64_t>();
      if (id < 0 || id >= V)
        bad("\"ids\": id " + std::to_string(id) + " at position " + std::to_string(i) + " is outside the vocabulary [0, " +
            std::to_string(V) + ")");
      ids.push_back(int(id));
      if (int(ids.size()) > P) break;  // enough to refuse below; the count is reported as given
    }
    if (int(a.size()) > P)
      bad("the input is " + std::to_string(a.size()) + " tokens but the model's context is " + std::to_string(P) +
              " tokens; shorten it (nothing is truncated)",
          {{"tokens", a.size()}, {"n_positions", P}});
  } else if (req.contains("text")) {
    if (!req["text"].is_string()) bad("\"text\" must be a string");
    if (!tok_) bad(path_ + " has no tokenizer beside it (vocab.json + merges.txt); send \"ids\" instead of \"text\"");
    ids = tok_->encode(req["text"].get<std::string>());
    if (int(ids.size()) > P)
      bad("the text is " + std::to_string(ids.size()) + " tokens but the model's context is " + std::to_string(P) +
              " tokens; shorten it (nothing is truncated)",
          {{"tokens", ids.size()}, {"n_positions", P}});
  } else {
    bad("give \"text\" (a string) or \"ids\" (a list of token ids)");
  }
  if (ids.empty()) bad("the input is empty: type some text");
  return ids;
}

json Service::tokenize(const json& req) const {
  if (!req.is_object() || !req.contains("text") || !req["text"].is_string()) bad("give \"text\" (a string)");
  if (!tok_) bad(path_ + " has no tokenizer beside it (vocab.json + merges.txt)");
  const std::vector<int> ids = tok_->encode(req["text"].get<std::string>());
  std::vector<std::string> strings;
  for (int id : ids) strings.push_back(tok_->token_string(id));
  const int P = lm_.arch.n_ctx;
  return {{"ids", ids}, {"tokens", strings}, {"labels", labels(ids)}, {"count", ids.size()}, {"n_positions", P},
          {"fits", int(ids.size()) <= P}};
}

std::shared_ptr<const Computed> Service::compute(const std::vector<int>& ids) {
  {
    std::lock_guard<std::mutex> lk(cache_mu_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if ((*it)->ids == ids) {
        auto hit = *it;
        cache_.splice(cache_.begin(), cache_, it);
        return hit;
      }
  }
  auto c = std::make_shared<Computed>();
  {
    ForwardSlot slot(forwards_);
    c->ids = ids;
    c->T = int(ids.size());
    // The engine's pattern, and S = scale·(R_i q_i)·(R_j k_j) unmasked and before any soft-cap: the visible
    // cells are the forward's own hook_attn_scores (without a soft-cap), the masked ones computed here
    // from the rotated q and k the forward used (hook_rot_q/k; hook_q/k for learned positions), in double.
    // Query head h reads key head h / (H / n_kv).
    const Arch& a = lm_.arch;
    c->L = a.n_layer, c->H = a.H, c->dh = a.dh, c->scale = a.attn_scale;
    const std::string qn = a.rotary() ? "attn.hook_rot_q" : "attn.hook_q",
                      kn = a.rotary() ? "attn.hook_rot_k" : "attn.hook_k";
    auto keep = [&](const std::string& n) {
      return n.ends_with("." + qn) || n.ends_with("." + kn) || n.ends_with(".attn.hook_pattern") ||
             n.ends_with(".attn.hook_attn_scores");
    };
    const auto acts = run_with_cache(lm_, ids, keep, true);
    const int T = c->T, H = a.H, dh = a.dh, g = a.H / a.n_kv;
    for (int l = 0; l < c->L; l++) {
      const std::string pre = "blocks." + std::to_string(l) + ".";
      const Tensor& q = acts.at(pre + qn);                                  // [T, H, dh]
      const Tensor& k = acts.at(pre + kn);                                  // [T, n_kv, dh]
      const float* hooked = acts.at(pre + "attn.hook_attn_scores").data();  // [H, T, T], masked: -inf
      std::vector<float> S(size_t(H) * T * T);
      for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
          const float* qi = q.data() + (int64_t(i) * H + h) * dh;
          for (int j = 0; j < T; j++) {
            const size_t at = (size_t(h) * T + i) * T + j;
            if (a.attn_softcap == 0 && an::visible(a, l, i, j)) {
              S[at] = hooked[at];
              continue;
            }
            const float* kj = k.data() + (int64_t(j) * a.n_kv + h / g) * dh;
            double s = 0;
            for (int e = 0; e < dh; e++) s += double(qi[e]) * double(kj[e]);
            S[at] = float(s * a.attn_scale);
          }
        }
      c->S.push_back(std::move(S));
      const Tensor& A = acts.at(pre + "attn.hook_pattern");
      c->A.emplace_back(A.data(), A.data() + A.numel());
    }
  }
  if (c->bytes() <= opt_.cache_bytes) {
    std::lock_guard<std::mutex> lk(cache_mu_);
    cache_.push_front(c);
    size_t total = 0;
    for (auto it = cache_.begin(); it != cache_.end();) {
      total += (*it)->bytes();
      if (total > opt_.cache_bytes) it = cache_.erase(it);
      else ++it;
    }
  }
  return c;
}

json Service::attention(const json& req) {
  const std::vector<int> ids = request_ids(req);
  const bool scale = get_bool(req, "scale", true);
  const bool want_grid = get_bool(req, "grid", true);
  const int thumb = get_int(req, "thumb", 48, 1, 256);
  const Arch& cfg = lm_.arch;
  const bool has_focus = req.contains("layer") || req.contains("head");
  const int layer = get_int(req, "layer", 0, 0, cfg.n_layer - 1);
  const int head = get_int(req, "head", 0, 0, cfg.H - 1);
  const bool want_swap = get_bool(req, "swap_check", false);
  const auto c = compute(ids);
  const int T = c->T, H = c->H;
  const double unscale = 1.0 / c->scale;  // the model's scale undone
  json out = {{"ids", ids},
              {"tokens", labels(ids)},
              {"T", T},
              {"n_layer", c->L},
              {"n_head", H},
              {"n_kv_head", cfg.n_kv},
              {"head_dim", c->dh},
              {"model_type", cfg.model_type},
              {"rotary", cfg.rotary()},
              {"attn_scale", c->scale},
              {"scale", scale}};
  auto pattern_of = [&](int l, int h) {
    const float* S = c->S[size_t(l)].data() + int64_t(h) * T * T;
    if (scale) return std::vector<float>(c->A[size_t(l)].begin() + int64_t(h) * T * T,
                                         c->A[size_t(l)].begin() + int64_t(h + 1) * T * T);
    return unscaled_pattern(S, T, unscale, cfg.window_of(l));
  };
  if (want_grid) {
    const int n = std::min(T, thumb);
    json layers = json::array();
    for (int l = 0; l < c->L; l++) {
      json heads = json::array();
      for (int h = 0; h < H; h++) heads.push_back(thumbnail(pattern_of(l, h).data(), T, n));
      layers.push_back(std::move(heads));
    }
    out["grid"] = {{"size", n}, {"exact", n == T}, {"layers", std::move(layers)}};
  }
  if (has_focus || !want_grid) {
    const std::vector<float> A = pattern_of(layer, head);
    const float* S = c->S[size_t(layer)].data() + int64_t(head) * T * T;
    std::vector<float> scores(S, S + int64_t(T) * T);
    if (!scale)
      for (auto& s : scores) s = float(double(s) * unscale);
    double diff = 0, norm = 0, max_asym = 0;
    int mi = 0, mj = 0;
    for (int i = 0; i < T; i++)
      for (int j = 0; j < T; j++) {
        const double a = scores[size_t(i) * T + j], b = scores[size_t(j) * T + i];
        diff += (a - b) * (a - b), norm += a * a;
        if (i > j && std::abs(a - b) > max_asym) max_asym = std::abs(a - b), mi = i, mj = j;
      }
    out["focus"] = {{"layer", layer},
                    {"head", head},
                    {"pattern", square_json(A.data(), T)},
                    {"scores", square_json(scores.data(), T)},
                    {"scores_are", scores_are(cfg, scale)},
                    {"kv_head", head / (cfg.H / cfg.n_kv)},
                    {"window", cfg.window_of(layer)},
                    {"asymmetry", norm > 0 ? std::sqrt(diff / norm) : 0.0},
                    {"max_asymmetry", {{"i", mi}, {"j", mj}, {"value", max_asym}}}};
    if (want_swap) out["focus"]["swap"] = swap_check(ids, layer, head, c->S[size_t(layer)].data() + int64_t(head) * T * T, T);
  }
  return out;
}

json Service::soft_dictionary_example() {
  const SoftDictionaryInput in = bank_example();
  return {{"names", in.names},
          {"K", matrix_json(in.K)},
          {"V", matrix_json(in.V)},
          {"Q", matrix_json(bank_all_queries())},
          {"query_row", 1},
          {"value_dims", {"river", "money"}},
          {"scale", true}};
}

json Service::soft_dictionary(const json& req) const {
  if (!req.is_object()) bad("the request body must be a JSON object");
  const int rows = opt_.max_soft_dictionary_rows, dims = opt_.max_soft_dictionary_dims;
  SoftDictionaryInput in;
  in.K = get_matrix(req, "K", rows, dims, true);
  in.Q = get_matrix(req, "Q", rows, dims, true);
  in.V = get_matrix(req, "V", rows, dims, false);
  in.scale = get_bool(req, "scale", true);
  if (in.K.empty() || in.Q.empty()) bad("need at least one key (\"K\") and one query (\"Q\")");
  if (in.Q[0].size() != in.K[0].size())
    bad("queries and keys must have the same length d_k: Q rows have " + std::to_string(in.Q[0].size()) +
        " numbers, K rows " + std::to_string(in.K[0].size()));
  if (!in.V.empty() && in.V.size() != in.K.size())
    bad("as many values as keys are needed: " + std::to_string(in.K.size()) + " keys, " + std::to_string(in.V.size()) +
        " values");
  if (req.contains("names")) {
    if (!req["names"].is_array() || req["names"].size() != in.K.size())
      bad("\"names\" must be a list of one string per key");
    for (const json& n : req["names"]) {
      if (!n.is_string()) bad("\"names\" must be a list of strings");
      in.names.push_back(n.get<std::string>());
    }
  }
  SoftDictionaryResult r = qkv::soft_dictionary(in);
  return {{"scores", matrix_json(r.scores)},       {"scaled", matrix_json(r.scaled)},
          {"exp_scores", matrix_json(r.exp_scores)}, {"weights", matrix_json(r.weights)},
          {"output", matrix_json(r.output)},       {"sqrt_dk", r.sqrt_dk},
          {"scale", in.scale}};
}

// The same keys as `qkv example running --json` (tools/qkv/cmd_example.cpp); the browser test compares them.
json Service::running_example(const json& req) {
  if (!req.is_object()) bad("the request body must be a JSON object");
  for (const auto& [k, v] : req.items())
    if (k != "scale" && k != "masked") bad("unknown key \"" + k + "\": the running example takes \"scale\" and \"masked\"");
  const bool scale = get_bool(req, "scale", true), masked = get_bool(req, "masked", false);
  const an::RunningExample r = an::running_example({scale, masked});
  json j = {{"tokens", r.tokens}, {"from_seed", r.from_seed}, {"rule", an::running_example_rule()},
            {"X", matrix_json(r.X)}, {"mean", r.mean}, {"sigma", r.sigma}, {"u", matrix_json(r.u)},
            {"W_Q", matrix_json(r.W_Q)}, {"W_K", matrix_json(r.W_K)}, {"W_V", matrix_json(r.W_V)},
            {"n", r.n}, {"d", r.d}, {"d_k", r.dk}, {"scale", r.scale}, {"masked", r.masked}};
  for (size_t h = 0; h < r.heads.size(); h++) {
    const auto& hd = r.heads[h];
    const auto& p = hd.picks;
    j["heads"].push_back({{"head", h + 1},
                          {"picks", {{"q", {p.q[0] + 1, p.q[1] + 1}}, {"k", {p.k[0] + 1, p.k[1] + 1}}, {"v", {p.v[0] + 1, p.v[1] + 1}}}},
                          {"picks_from", h == 0 ? "seed 004" : "qkv (the seed gives head 2's columns, not its picks)"},
                          {"Q", matrix_json(hd.Q)}, {"K", matrix_json(hd.K)}, {"V", matrix_json(hd.V)},
                          {"QK", matrix_json(hd.QK)}, {"S", matrix_json(hd.S)}, {"A", matrix_json(hd.A)},
                          {"O", matrix_json(hd.O)}});
  }
  for (const auto& c : an::running_example_checks())
    j["checks"].push_back({{"id", c.id}, {"what", c.what}, {"seed", c.seed}, {"decimals", c.decimals},
                           {"computed", c.computed}, {"ok", c.ok()}});
  return j;
}

// The same keys as `qkv example matrix --json`.
json Service::whole_matrix(const json& req) const {
  if (!req.is_object()) bad("the request body must be a JSON object");
  if (!req.contains("text") || !req["text"].is_string()) bad("give \"text\" (a string: the sentence)");
  WholeMatrixInput in;
  in.tokens = split_words(req["text"].get<std::string>());
  if (in.tokens.empty()) bad("the sentence is empty: type some words");
  if (in.tokens.size() > 64) bad("the sentence has " + std::to_string(in.tokens.size()) + " words and marks; at most 64");
  if (req.contains("score")) {
    if (!req["score"].is_string()) bad("\"score\" must be content, previous, decay or mix");
    const std::string k = req["score"].get<std::string>();
    if (k != "content" && k != "previous" && k != "decay" && k != "mix")
      bad("\"score\" is '" + k + "': expected content, previous, decay or mix");
    in.kind = parse_score_kind(k);
  }
  in.dk = get_int(req, "d_k", 2, 1, 4096);
  in.scale = get_bool(req, "scale", true);
  in.masked = get_bool(req, "masked", false);
  const WholeMatrixResult r = qkv::whole_matrix(in);
  return {{"tokens", r.tokens}, {"score", score_kind_name(in.kind)}, {"d_k", in.dk}, {"scale", in.scale},
          {"masked", in.masked}, {"sqrt_dk", r.sqrt_dk}, {"z", matrix_json(r.z)}, {"QK", matrix_json(r.qk)},
          {"S", matrix_json(r.S)}, {"A", matrix_json(r.A)}, {"row_max", r.row_max}, {"binary_rows", r.binary_rows}};
}

json Service::heads(const json& req) {
  if (!req.is_object()) bad("the request body must be a JSON object");
  const bool with_text = req.contains("text") || req.contains("ids");
  if (!with_text) {
    std::lock_guard<std::mutex> lk(heads_mu_);
    if (heads_cache_) return *heads_cache_;
  }
  std::vector<int> text;
  if (with_text) text = request_ids(req);
  const Arch& c = lm_.arch;
  const int n = std::min(50, c.n_ctx / 2);
  if (n < 1) bad("the model's context is too short for a repeated sequence");
  const int batch = 4, bos = -1;
  const uint64_t seed = 0;
  const auto seqs = an::repeated_random_tokens(c.vocab_size, n, batch, seed, bos);
  an::HeadScan scan;
  {
    ForwardSlot slot(forwards_);
    scan = an::scan_heads(lm_, seqs, n, bos, text);
  }
  json heads = json::array();
  for (const auto& h : scan.heads) {
    json j = {{"layer", h.layer},
              {"head", h.head},
              {"previous_token", h.previous_token},
              {"duplicate_token", h.duplicate_token},
              {"induction", h.induction},
              {"induction_detector", h.induction_detector},
              {"induction_shifted", h.induction_shifted}};
    if (scan.has_text)
      j.update({{"text_previous_token", h.text_previous_token},
                {"text_duplicate_token", h.text_duplicate_token},
                {"text_induction", h.text_induction}});
    heads.push_back(std::move(j));
  }
  json out = {{"seq_len", n},
              {"batch", batch},
              {"seed", seed},
              {"n_layer", c.n_layer},
              {"n_head", c.H},
              {"repeated_ids", seqs[0]},
              {"has_text", scan.has_text},
              {"heads", std::move(heads)}};
  if (!with_text) {
    std::lock_guard<std::mutex> lk(heads_mu_);
    heads_cache_ = out;
  }
  return out;
}

json Service::circuits() {
  std::lock_guard<std::mutex> lk(circuits_mu_);  // computed once; later requests read the cached result
  if (circuits_cache_) return *circuits_cache_;
  an::CircuitsOptions o;
  // OV copying needs W_Uᵀ W_E over the whole vocabulary: minutes for GPT-2's 50257 tokens on a small
  // machine, so the page leaves it out there (`qkv circuits` computes it).
  o.copying = lm_.arch.vocab_size <= 4096;
  const an::CircuitsResult r = an::circuits(lm_, o);
  json heads = json::array(), comps = json::array();
  for (const auto& h : r.heads)
    heads.push_back({{"layer", h.layer},
                     {"head", h.head},
                     {"qk_norm", h.qk_norm},
                     {"qk_antisym_share", h.qk_antisym_share},
                     {"ov_norm", h.ov_norm},
                     {"copying", o.copying ? json(h.copying) : json(nullptr)}});
  for (const auto& c : r.compositions)
    comps.push_back({{"l1", c.l1}, {"h1", c.h1}, {"l2", c.l2}, {"h2", c.h2}, {"q", c.q}, {"k", c.k}, {"v", c.v}});
  const auto& b = r.baseline;
  circuits_cache_ = json{{"n_layer", lm_.arch.n_layer},
                         {"n_head", lm_.arch.H},
                         {"n_kv_head", lm_.arch.n_kv},
                         {"fold_ln", o.fold_ln},
                         {"copying", o.copying},
                         {"heads", std::move(heads)},
                         {"compositions", std::move(comps)},
                         {"baseline",
                          {{"samples", b.samples},
                           {"q_mean", b.q_mean},
                           {"q_std", b.q_std},
                           {"k_mean", b.k_mean},
                           {"k_std", b.k_std},
                           {"v_mean", b.v_mean},
                           {"v_std", b.v_std}}}};
  return *circuits_cache_;
}

}  // namespace qkv::server

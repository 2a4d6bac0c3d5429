// qkv serve's generation view (docs/api.md "POST /api/generate", docs/generate.md "In qkv serve"): a
// prompt continued through generate.hpp's K/V-cached generate(), one event per new token as it is
// chosen, each with the attention row of the query that chose it — per layer, per head, over every
// position so far — and, on request, a contrastive steering vector (analysis/steer.hpp) made from
// positive and negative texts and added at one hook during the whole generation.
// Every number comes from the engine; this file reads and bounds requests and shapes the events.
#include <algorithm>
#include <cmath>

#include "qkv/analysis/steer.hpp"
#include "qkv/error.hpp"
#include "qkv/generate.hpp"
#include "request_fields.hpp"
#include "service.hpp"

namespace qkv::server {
namespace an = qkv::analysis;
using namespace fields;

namespace {

// Three decimals are what the page draws; they keep a GPT-2 small event (144 rows) small.
double round3(float p) { return std::round(double(p) * 1000.0) / 1000.0; }

}  // namespace

struct Service::GenerateJob {
  std::vector<int> prompt;
  GenerateOptions o;
  json steer = nullptr;  // {"hook", "coef", "norm", "positive", "negative"} when steering
};

// The steering vector of {"hook", "positive": [texts], "negative": [texts], "coef"}: the mean activation
// of the positive texts minus the negative texts' (a BOS the tokenizer adds is left out of the mean).
void Service::steer_from(const json& s, GenerateJob& job) {
  if (!s.is_object()) bad("\"steer\" must be an object {\"hook\", \"positive\", \"negative\", \"coef\"}");
  for (const auto& [k, v] : s.items())
    if (k != "hook" && k != "positive" && k != "negative" && k != "coef") bad("\"steer\": unknown key \"" + k + "\"");
  if (!s.contains("hook") || !s["hook"].is_string()) bad("\"steer\": \"hook\" must be a hook name");
  if (!tok_) bad("\"steer\": " + path_ + " has no tokenizer to read the positive and negative texts");
  auto side = [&](const char* key) {
    if (!s.contains(key) || !s[key].is_array() || s[key].empty())
      bad(std::string("\"steer\": \"") + key + "\" must be a non-empty list of texts");
    if (s[key].size() > size_t(opt_.max_steer_texts))
      bad(std::string("\"steer\": \"") + key + "\" has more than " + std::to_string(opt_.max_steer_texts) + " texts");
    std::vector<an::SteerText> out;
    for (const json& t : s[key]) {
      if (!t.is_string()) bad(std::string("\"steer\": \"") + key + "\" must hold strings");
      an::SteerText st{tok_->encode(t.get<std::string>()), 0};
      if (st.ids.empty()) bad(std::string("\"steer\": an empty text in \"") + key + "\"");
      if (int(st.ids.size()) > lm_.arch.n_ctx)
        bad(std::string("\"steer\": a text in \"") + key + "\" is longer than the model's context");
      st.from = tok_->adds_bos() && st.ids[0] == tok_->bos_id() ? 1 : 0;
      out.push_back(std::move(st));
    }
    return out;
  };
  const std::string hook = s["hook"].get<std::string>();
  const double coef = number_of(s, "coef", 4.0);
  if (!std::isfinite(coef)) bad("\"steer\": \"coef\" must be finite");
  steer_width(lm_, hook, "\"steer\": \"hook\"");  // an unknown hook, named as the request names it
  const auto pos = side("positive"), neg = side("negative");
  Steer st;
  st.hook = hook;
  st.coef = float(coef);
  st.source = "the steering texts";
  {
    ForwardSlot slot(forwards_);
    st.vec = an::steering_vector(lm_, hook, pos, neg);
  }
  double norm = 0;
  for (float x : st.vec) norm += double(x) * x;
  job.steer = {{"hook", hook}, {"coef", coef}, {"norm", std::sqrt(norm)}, {"width", st.vec.size()},
               {"positive", pos.size()}, {"negative", neg.size()}};
  job.o.steer.push_back(std::move(st));
}

std::shared_ptr<Service::GenerateJob> Service::generate_job(const json& req) {
  if (!req.is_object()) bad("the request body must be a JSON object");
  static const char* keys[] = {"text", "ids", "max_new_tokens", "temperature", "top_k", "top_p", "seed",
                               "steer", "stop_at_eos"};
  for (const auto& [k, v] : req.items())
    if (std::find(std::begin(keys), std::end(keys), k) == std::end(keys)) bad("unknown key \"" + k + "\"");
  auto job = std::make_shared<GenerateJob>();
  job->prompt = request_ids(req);
  const int room = lm_.arch.n_ctx - int(job->prompt.size());
  if (room < 1) bad("the prompt fills the model's context (" + std::to_string(lm_.arch.n_ctx) + " tokens): no room to generate");
  job->o.max_new_tokens =
      int(int64_of(req, "max_new_tokens", std::min(32, room), 1, std::min(opt_.max_generate_tokens, room)));
  Sampling& sm = job->o.sampling;
  sm.temperature = number_of(req, "temperature", 0.0);
  sm.top_k = int(int64_of(req, "top_k", 0, 0, lm_.arch.vocab_size));
  sm.top_p = number_of(req, "top_p", 1.0);
  sm.seed = uint64_t(int64_of(req, "seed", 0, 0, int64_t(1) << 53));
  check_sampling(sm);  // qkv::Error (usage) -> 400
  const bool eos = bool_of(req, "stop_at_eos", true);
  if (eos && tok_ && tok_->eos_id() >= 0) job->o.stop_ids.push_back(tok_->eos_id());
  if (req.contains("steer") && !req["steer"].is_null()) steer_from(req["steer"], *job);
  return job;
}

// Runs the job: emits {"event": "prompt"}, one {"event": "token"} per new token, then {"event": "done"};
// stops early (stop_reason "callback") when emit returns false (the client went away).
void Service::generate_stream(const GenerateJob& job, const std::function<bool(const json&)>& emit) {
  const Arch& a = lm_.arch;
  // The pattern row of the last query of every step, per layer: where the model looked when it chose.
  std::vector<std::vector<std::vector<float>>> rows(a.n_layer, std::vector<std::vector<float>>(a.H));
  std::vector<std::string> names;
  for (int l = 0; l < a.n_layer; l++) names.push_back("blocks." + std::to_string(l) + ".attn.hook_pattern");
  Hooks hooks;
  hooks.wants = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  hooks.fn = [&](const std::string& n, ActView v) {
    const int l = int(std::find(names.begin(), names.end(), n) - names.begin());
    const int64_t Tq = v.shape[v.shape.size() - 2], Tk = v.shape.back();
    for (int h = 0; h < a.H; h++) {
      const float* r = v.data + (int64_t(h) * Tq + (Tq - 1)) * Tk;
      rows[l][h].assign(r, r + Tk);
    }
  };
  GenerateOptions o = job.o;
  o.hooks = &hooks;
  bool go = emit({{"event", "prompt"}, {"ids", job.prompt}, {"labels", labels(job.prompt)},
                  {"n_layer", a.n_layer}, {"n_head", a.H}, {"max_new_tokens", o.max_new_tokens},
                  {"steer", job.steer}});
  if (!go) return;
  int step = 0;
  o.on_token = [&](int id) {
    json att = json::array();
    for (int l = 0; l < a.n_layer; l++) {
      json hs = json::array();
      for (int h = 0; h < a.H; h++) {
        json r = json::array();
        for (float p : rows[l][h]) r.push_back(round3(p));
        hs.push_back(std::move(r));
      }
      att.push_back(std::move(hs));
    }
    const int query = int(job.prompt.size()) + step - 1;  // the position whose output chose this token
    go = emit({{"event", "token"}, {"step", step++}, {"id", id}, {"label", labels({id})[0]},
               {"query", query}, {"attention", std::move(att)}});
    return go;
  };
  GenerateResult r;
  {
    ForwardSlot slot(forwards_);
    r = generate(lm_, job.prompt, o);
  }
  if (!go) return;
  json text = nullptr;
  if (tok_) {  // the EOS that stopped it is not shown
    std::vector<int> shown = r.tokens;
    if (r.stop_reason == "stop_id") shown.pop_back();
    text = tok_->decode_after(job.prompt, shown);
  }
  const std::string reason = r.stop_reason == "stop_id" ? "eos" : r.stop_reason;
  emit({{"event", "done"}, {"tokens", r.tokens}, {"text", text}, {"stop_reason", reason},
        {"prefill_ms", r.prefill_ms}, {"decode_ms", r.decode_ms}, {"tokens_per_second", r.tokens_per_second()}});
}

}  // namespace qkv::server

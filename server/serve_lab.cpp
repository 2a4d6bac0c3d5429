// qkv serve's patching view and rotary panels (docs/api.md, docs/patching.md "In qkv serve"):
//   POST /api/patch       activation patching of one hook over every layer × head (× position), the same
//                         sweep and the same JSON keys as `qkv patch --json`
//   POST /api/patch-site  one site of that sweep: the pattern of its head before and after the patch
//   POST /api/rope        one head's score of a fixed q/k pair as a function of the offset i − j
// and the Q/K swap check of /api/attention's focus (S computed with W_Q ↔ W_K equals Sᵀ).
// Every number comes from the engine (analysis/patching.hpp, lm.hpp); this file only reads requests
// and bounds them.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "qkv/analysis/attribution.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/patching.hpp"
#include "qkv/error.hpp"
#include "qkv/model_files.hpp"
#include "qkv/report/attribute_json.hpp"
#include "qkv/report/patch_json.hpp"
#include "request_fields.hpp"
#include "service.hpp"

namespace qkv::server {
namespace an = qkv::analysis;
using namespace fields;

namespace {

json square(const float* p, int T) {
  json j = json::array();
  for (int i = 0; i < T; i++) j.push_back(std::vector<double>(p + int64_t(i) * T, p + int64_t(i + 1) * T));
  return j;
}

json num_or_null(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

// Heads per layer of a hook's sites (0: a [T, d] activation, one site per layer).
int site_heads(const Arch& a, const std::string& hook) {
  auto ends = [&](const char* s) { return hook.ends_with(s); };
  if (ends("attn.hook_k") || ends("attn.hook_v") || ends("attn.hook_rot_k")) return a.n_kv;
  if (ends("attn.hook_q") || ends("attn.hook_rot_q") || ends("attn.hook_z") || ends("attn.hook_result") ||
      ends("attn.hook_pattern") || ends("attn.hook_attn_scores"))
    return a.H;
  return 0;
}

const std::set<std::string> kPatchKeys = {"clean",  "corrupt", "clean_ids", "corrupt_ids",  "repeated",
                                          "seed",   "bos",     "hook",      "per_position", "direction",
                                          "metric", "answer",  "wrong",     "position",     "loss_positions",
                                          "job"};

}  // namespace

struct Service::PatchJob {
  std::vector<int> clean, corrupt;
  an::SweepOptions o;
  json inputs;
};

// ids from `text_key` (a string, through the tokenizer) or `ids_key` (a list of token ids): never
// empty, inside the vocabulary, at most the model's context and the patching limit.
std::vector<int> Service::ids_from(const json& req, const char* text_key, const char* ids_key) const {
  const int V = lm_.arch.vocab_size, P = std::min(lm_.arch.n_ctx, opt_.max_patch_tokens);
  const std::string tk = std::string("\"") + text_key + "\"", ik = std::string("\"") + ids_key + "\"";
  std::vector<int> ids;
  if (req.contains(ids_key)) {
    if (req.contains(text_key)) bad("give " + tk + " or " + ik + ", not both");
    const json& a = req[ids_key];
    if (!a.is_array()) bad(ik + " must be a list of token ids");
    if (int(a.size()) > P)
      bad(ik + " is " + std::to_string(a.size()) + " tokens; patching takes at most " + std::to_string(P) +
              " (nothing is truncated)",
          {{"tokens", a.size()}, {"max_tokens", P}});
    for (size_t i = 0; i < a.size(); i++) {
      if (!a[i].is_number_integer()) bad(ik + ": position " + std::to_string(i) + " is not an integer");
      const int64_t id = a[i].get<int64_t>();
      if (id < 0 || id >= V)
        bad(ik + ": id " + std::to_string(id) + " at position " + std::to_string(i) +
            " is outside the vocabulary [0, " + std::to_string(V) + ")");
      ids.push_back(int(id));
    }
  } else if (req.contains(text_key)) {
    if (!req[text_key].is_string()) bad(tk + " must be a string");
    if (!tok_) bad(path_ + " has no tokenizer beside it; send " + ik + " (token ids) instead of " + tk);
    const std::string text = req[text_key].get<std::string>();
    if (text.size() > size_t(64) * 1024) bad(tk + " is longer than 64 KiB");
    ids = tok_->encode(text);
    if (int(ids.size()) > P)
      bad(tk + " is " + std::to_string(ids.size()) + " tokens; patching takes at most " + std::to_string(P) +
              " (nothing is truncated)",
          {{"tokens", ids.size()}, {"max_tokens", P}});
  } else {
    bad("give " + tk + " (a text) or " + ik +
        " (token ids), or \"repeated\": N for the repeated-sequence task");
  }
  if (ids.empty()) bad(tk + " is empty: type some text");
  return ids;
}

// A request of /api/patch or /api/patch-site read into the sweep's inputs, as `qkv patch` reads its
// arguments (the same defaults: --repeated's bos and seeds, its loss positions).
Service::PatchJob Service::patch_job(const json& req, bool site) const {
  if (!req.is_object()) bad("the request body must be a JSON object");
  for (const auto& [k, v] : req.items())
    if ((!kPatchKeys.count(k) || (site && k == "job")) &&
        !(site && (k == "layer" || k == "head" || k == "pos" || k == "view_head")))
      bad("unknown key \"" + k + "\"");
  const Arch& a = lm_.arch;
  PatchJob job;
  int rep_start = 0, repeated = 0;
  if (req.contains("repeated")) {
    for (const char* k : {"clean", "corrupt", "clean_ids", "corrupt_ids"})
      if (req.contains(k))
        bad(std::string("\"repeated\" builds the clean and corrupt inputs itself; do not also give \"") + k +
            "\"");
    repeated = int_of(req, "repeated", 0, 1, opt_.max_patch_tokens);
    const int seed = int_of(req, "seed", 0, 0, 1 << 30);
    int bos = -1;
    if (req.contains("bos"))
      bos = int_of(req, "bos", -1, -1, a.vocab_size - 1);
    else if (tok_ && tok_->vocab_size() > 0 && tok_->token_string(tok_->vocab_size() - 1) == "<|endoftext|>")
      bos = tok_->vocab_size() - 1;
    if (bos >= a.vocab_size) bad("\"bos\": " + std::to_string(bos) + " is outside the vocabulary");
    rep_start = bos >= 0 ? 1 : 0;
    const int T = rep_start + 2 * repeated, P = std::min(a.n_ctx, opt_.max_patch_tokens);
    if (T > P)
      bad("\"repeated\": " + std::to_string(repeated) + " repeated twice is " + std::to_string(T) +
          " tokens; at most " + std::to_string(P) + " here");
    job.clean = an::repeated_random_tokens(a.vocab_size, repeated, 1, uint64_t(seed), bos)[0];
    const auto other = an::repeated_random_tokens(a.vocab_size, repeated, 1, uint64_t(seed) + 7919, bos)[0];
    job.corrupt = job.clean;
    for (int i = 0; i < repeated; i++) job.corrupt[size_t(rep_start + i)] = other[size_t(rep_start + i)];
  } else {
    job.clean = ids_from(req, "clean", "clean_ids");
    job.corrupt = ids_from(req, "corrupt", "corrupt_ids");
  }
  if (job.clean.size() != job.corrupt.size())
    bad("clean and corrupt must have equal length in tokens (patching copies activations position by "
        "position): "
        "clean has " +
            std::to_string(job.clean.size()) + ", corrupt " + std::to_string(job.corrupt.size()),
        {{"clean_tokens", labels(job.clean)}, {"corrupt_tokens", labels(job.corrupt)}});
  const int T = int(job.clean.size());
  auto token = [&](const char* key) {
    const json& v = req[key];
    int id = -1;
    if (v.is_number_integer()) {
      const int64_t x = v.get<int64_t>();
      if (x < 0 || x >= a.vocab_size)
        bad(std::string("\"") + key + "\": token " + std::to_string(x) + " is outside the vocabulary [0, " +
            std::to_string(a.vocab_size) + ")");
      id = int(x);
    } else if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (s.empty()) bad(std::string("\"") + key + "\" is empty: give a one-token text or a token id");
      if (!tok_) bad(std::string("\"") + key + "\": the model has no tokenizer; give a token id");
      const auto ids = tok_->encode(s);
      if (ids.size() != 1)
        bad(std::string("\"") + key + "\": '" + s + "' is " + std::to_string(ids.size()) +
            " tokens, not one (give a token id instead)");
      id = ids[0];
    } else {
      bad(std::string("\"") + key + "\" must be a token id or a one-token text");
    }
    return id;
  };
  const std::string mk =
      string_of(req, "metric", req.contains("answer") || req.contains("wrong") ? "logit_diff" : "loss");
  an::PatchMetric& m = job.o.metric;
  if (mk == "logit_diff") {
    if (!req.contains("answer") || !req.contains("wrong"))
      bad("the logit difference needs \"answer\" and \"wrong\" (token ids or one-token texts)");
    if (req.contains("loss_positions")) bad("give either \"answer\"/\"wrong\" or \"loss_positions\"");
    m.kind = an::PatchMetric::Kind::LogitDiff;
    m.answer = token("answer");
    m.wrong = token("wrong");
    m.position = int_of(req, "position", -1, -1, T - 1);
  } else if (mk == "loss") {
    if (req.contains("answer") || req.contains("wrong"))
      bad("\"answer\"/\"wrong\" go with \"metric\": \"logit_diff\"");
    m.kind = an::PatchMetric::Kind::Loss;
    if (req.contains("loss_positions")) {
      const json& lp = req["loss_positions"];
      if (!lp.is_array() || lp.empty()) bad("\"loss_positions\" must be a non-empty list of positions");
      for (const json& p : lp) {
        if (!p.is_number_integer()) bad("\"loss_positions\" must hold integers");
        const int64_t x = p.get<int64_t>();
        if (x < 0 || x >= T - 1)
          bad("\"loss_positions\": " + std::to_string(x) + " is outside [0, " + std::to_string(T - 1) +
              ") (a loss position predicts the clean input's next token)");
        m.loss_positions.push_back(int(x));
      }
    } else if (repeated > 0) {  // the second copy, each position predicting the next token of it
      for (int t = rep_start + repeated; t < rep_start + 2 * repeated - 1; t++) m.loss_positions.push_back(t);
    } else {
      bad("the loss needs \"loss_positions\" (or use the repeated-sequence task)");
    }
    if (m.loss_positions.empty())
      bad("the loss has no position to read (the repeated sequence is too short)");
    for (int p : m.loss_positions) m.targets.push_back(job.clean[size_t(p) + 1]);
  } else {
    bad("\"metric\" is '" + mk + "': expected logit_diff or loss");
  }
  const std::string dir = string_of(req, "direction", "noising");
  if (dir == "noising")
    job.o.direction = an::PatchDirection::Noising;
  else if (dir == "denoising")
    job.o.direction = an::PatchDirection::Denoising;
  else
    bad("\"direction\" is '" + dir + "': expected noising or denoising");
  job.o.hook = string_of(req, "hook", "");
  if (job.o.hook.empty()) bad("\"hook\" is missing: e.g. attn.hook_v (every layer) or blocks.1.attn.hook_k");
  if (job.o.hook.size() > 80) bad("\"hook\" is too long");
  job.o.per_position = bool_of(req, "per_position", false);
  job.inputs = {{"clean", job.clean}, {"corrupt", job.corrupt}, {"tokens", T}};
  if (repeated) job.inputs["repeated"] = repeated;
  return job;
}

json Service::patch(const json& req) {
  const PatchJob job = patch_job(req, false);
  const Arch& a = lm_.arch;
  const int T = int(job.clean.size());
  const std::vector<int> layers = an::hook_layers(lm_, job.o.hook);  // refuses unknown hooks (400)
  const int heads = site_heads(a, job.o.hook);
  const int64_t sites = int64_t(layers.size()) * std::max(heads, 1) * (job.o.per_position ? T : 1);
  if (sites > opt_.max_patch_sites)
    bad("this sweep has " + std::to_string(sites) + " sites (one forward each); at most " +
            std::to_string(opt_.max_patch_sites) +
            " here: name one layer (blocks.L.…), drop per_position or shorten the text",
        {{"sites", sites}, {"max_sites", opt_.max_patch_sites}});
  // "job": a name the page polls /api/patch-progress with while this request runs
  std::string jid;
  if (req.contains("job")) {
    jid = string_of(req, "job", "");
    if (jid.empty() || jid.size() > 64 ||
        jid.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
            std::string::npos)
      bad("\"job\" must be 1 to 64 letters, digits, '_' or '-'");
    std::lock_guard<std::mutex> lk(progress_mu_);
    if (progress_.count(jid)) bad("\"job\" '" + jid + "' is already running");
    if (progress_.size() >= 256) bad("too many sweeps running; try again when one has finished", {});
    progress_[jid] = {0, int(sites)};
  }
  struct Forget {
    Service* s;
    const std::string& id;
    ~Forget() {
      if (id.empty()) return;
      std::lock_guard<std::mutex> lk(s->progress_mu_);
      s->progress_.erase(id);
    }
  } forget{this, jid};
  an::SweepOptions o = job.o;
  if (!jid.empty())
    o.progress = [this, &jid](int done, int total) {
      std::lock_guard<std::mutex> lk(progress_mu_);
      progress_[jid] = {done, total};
    };
  an::SweepResult r;
  {
    ForwardSlot slot(forwards_);
    r = an::patch_sweep(lm_, job.clean, job.corrupt, o);
  }
  json sj = json::array();
  for (size_t i = 0; i < r.sites.size(); i++) {
    const auto& s = r.sites[i];
    sj.push_back({{"layer", s.layer},
                  {"head", s.head < 0 ? json(nullptr) : json(s.head)},
                  {"pos", s.pos < 0 ? json(nullptr) : json(s.pos)},
                  {"metric", r.metric[i]},
                  {"normalised", num_or_null(r.normalised[i])}});
  }
  const bool noising = job.o.direction == an::PatchDirection::Noising;
  return {{"hook", r.hook},
          {"kind", r.kind},
          {"direction", an::direction_name(job.o.direction)},
          {"metric", job.o.metric.describe()},
          {"inputs", job.inputs},
          {"clean", r.clean},
          {"corrupt", r.corrupt},
          {"tokens_run", r.T_run},
          {"last_row_only", r.last_only},
          {"forwards", r.forwards},
          {"sites_skipped", r.sites_skipped},
          {"seconds", r.seconds},
          {"sites", sj},
          // for the page: the grid's shape and labels
          {"layers", r.layers},
          {"heads", r.heads},
          {"n_head", a.H},
          {"n_kv_head", a.n_kv},
          {"per_position", job.o.per_position},
          {"T", T},
          {"clean_tokens", labels(job.clean)},
          {"corrupt_tokens", labels(job.corrupt)},
          {"base", noising ? "clean" : "corrupt"},
          {"loss_positions", job.o.metric.loss_positions},
          {"answer",
           job.o.metric.kind == an::PatchMetric::Kind::LogitDiff ? json(job.o.metric.answer) : json(nullptr)},
          {"wrong",
           job.o.metric.kind == an::PatchMetric::Kind::LogitDiff ? json(job.o.metric.wrong) : json(nullptr)},
          {"answer_label", job.o.metric.kind == an::PatchMetric::Kind::LogitDiff
                               ? json(labels({job.o.metric.answer})[0])
                               : json(nullptr)},
          {"wrong_label", job.o.metric.kind == an::PatchMetric::Kind::LogitDiff
                              ? json(labels({job.o.metric.wrong})[0])
                              : json(nullptr)}};
}

// Path patching SENDER:RECEIVER:q|k|v (heads as LAYER.HEAD) on the same inputs and metric as a sweep:
// `qkv patch --path … --json`'s keys.
json Service::path_patch(const json& req) {
  if (!req.is_object()) bad("the request body must be a JSON object");
  if (!req.contains("path") || !req["path"].is_string())
    bad("\"path\" is missing: SENDER:RECEIVER:q|k|v with heads as LAYER.HEAD, e.g. 0.1:1.0:k");
  const std::string path = req["path"].get<std::string>();
  json rest = req;
  rest.erase("path");
  if (rest.contains("hook") || rest.contains("per_position"))
    bad("path patching takes no \"hook\" or \"per_position\"");
  rest["hook"] = "attn.hook_z";  // unused: patch_job reads the inputs and the metric
  const PatchJob job = patch_job(rest, false);
  const an::PathSpec sp = an::parse_path_spec("\"path\"", path);
  an::PathResult r;
  {
    ForwardSlot slot(forwards_);
    r = an::path_patch(lm_, job.clean, job.corrupt, sp, job.o.direction,
                       job.o.metric);  // refuses bad heads (400)
  }
  return qkv::report::path_patch_json(r, path, job.o.metric, job.inputs);
}

json Service::patch_progress(const json& req) {
  if (!req.is_object()) bad("the request body must be a JSON object");
  const std::string jid = string_of(req, "job", "");
  std::lock_guard<std::mutex> lk(progress_mu_);
  const auto it = progress_.find(jid);
  if (it == progress_.end()) return {{"job", jid}, {"running", false}};
  return {{"job", jid}, {"running", true}, {"done", it->second.first}, {"total", it->second.second}};
}

// Direct logit attribution and the logit lens of one input (`qkv attribute --json`'s keys).
json Service::attribute(const json& req) {
  if (!req.is_object()) bad("the request body must be a JSON object");
  for (const auto& [k, v] : req.items())
    if (k != "text" && k != "ids" && k != "answer" && k != "wrong" && k != "position")
      bad("unknown key \"" + k + "\"");
  const std::vector<int> ids = request_ids(req);
  const Arch& a = lm_.arch;
  auto token = [&](const char* key) {
    if (!req.contains(key)) bad(std::string("\"") + key + "\" is missing: a token id or a one-token text");
    const json& v = req[key];
    if (v.is_number_integer()) {
      const int64_t x = v.get<int64_t>();
      if (x < 0 || x >= a.vocab_size)
        bad(std::string("\"") + key + "\": token " + std::to_string(x) + " is outside the vocabulary [0, " +
            std::to_string(a.vocab_size) + ")");
      return int(x);
    }
    if (!v.is_string() || v.get<std::string>().empty())
      bad(std::string("\"") + key + "\" must be a token id or a one-token text");
    if (!tok_) bad(std::string("\"") + key + "\": the model has no tokenizer; give a token id");
    const auto t = tok_->encode(v.get<std::string>());
    if (t.size() != 1)
      bad(std::string("\"") + key + "\": '" + v.get<std::string>() + "' is " + std::to_string(t.size()) +
          " tokens, not one (give a token id instead)");
    return t[0];
  };
  const int A = token("answer"), B = token("wrong");
  const int position = int_of(req, "position", -1, -1, int(ids.size()) - 1);
  an::AttributionResult r;
  {
    ForwardSlot slot(forwards_);
    r = an::attribute(lm_, ids, A, B, position);
  }
  json j = qkv::report::attribute_json(r, ids, [&](int id) { return labels({id})[0]; });
  j.update({{"labels", labels(ids)},
            {"answer_label", labels({r.answer})[0]},
            {"wrong_label", labels({r.wrong})[0]},
            {"n_layer", a.n_layer},
            {"n_head", a.H}});
  return j;
}

// One site: the base run and the patched run over all T tokens, every layer's pattern kept; the site's
// head (for a key/value head: the first query head reading it; for a [T, d] activation: "view_head")
// at the site's layer shown before and after, and how much every head's pattern moved.
json Service::patch_site(const json& req) {
  const PatchJob job = patch_job(req, true);
  const Arch& a = lm_.arch;
  const int T = int(job.clean.size());
  const std::vector<int> layers = an::hook_layers(lm_, job.o.hook);
  if (!req.contains("layer")) bad("\"layer\" is missing: the site's layer");
  const int layer = int_of(req, "layer", 0, 0, a.n_layer - 1);
  if (std::find(layers.begin(), layers.end(), layer) == layers.end())
    bad("\"layer\" " + std::to_string(layer) + " is not a layer of " + job.o.hook);
  const int heads = site_heads(a, job.o.hook);
  const int head = heads > 0 ? int_of(req, "head", -1, -1, heads - 1) : -1;
  if (heads == 0 && req.contains("head") && !req["head"].is_null())
    bad(job.o.hook + " has no heads: \"head\" must be null");
  const int pos = int_of(req, "pos", -1, -1, T - 1);
  const bool kv = job.o.hook.ends_with("attn.hook_k") || job.o.hook.ends_with("attn.hook_v") ||
                  job.o.hook.ends_with("attn.hook_rot_k");
  const int group = a.H / a.n_kv;
  int view = kv ? std::max(head, 0) * group : heads > 0 ? std::max(head, 0) : 0;
  if (req.contains("view_head")) view = int_of(req, "view_head", view, 0, a.H - 1);
  const bool noising = job.o.direction == an::PatchDirection::Noising;
  const std::vector<int>& base = noising ? job.clean : job.corrupt;
  const std::vector<int>& src_ids = noising ? job.corrupt : job.clean;
  const std::string name = an::hook_at_layer(job.o.hook, layer);
  auto patterns = [](const std::string& n) { return n.ends_with(".attn.hook_pattern"); };
  an::PatchedRun before, after, src;
  {
    ForwardSlot slot(forwards_);
    src = an::run_patched(lm_, src_ids, {}, [&](const std::string& n) { return n == name; });
    before = an::run_patched(lm_, base, {}, patterns);
    after = an::run_patched(lm_, base, {an::Patch{name, head, pos, &src.acts.at(name)}}, patterns);
  }
  const an::PatchMetric& m = job.o.metric;
  const double mb = an::metric_value(m, before.logits, T, a.vocab_size, T);
  const double ms = an::metric_value(m, src.logits, T, a.vocab_size, T);
  const double mp = an::metric_value(m, after.logits, T, a.vocab_size, T);
  const double mc = noising ? mb : ms, mk = noising ? ms : mb;
  json change = json::array();
  for (int l = 0; l < a.n_layer; l++) {
    const std::string pn = "blocks." + std::to_string(l) + ".attn.hook_pattern";
    const Tensor &p0 = before.acts.at(pn), &p1 = after.acts.at(pn);
    json row = json::array();
    for (int h = 0; h < a.H; h++) {
      double d = 0;
      for (int64_t i = int64_t(h) * T * T; i < int64_t(h + 1) * T * T; i++)
        d = std::max(d, double(std::abs(p1.data()[i] - p0.data()[i])));
      row.push_back(d);
    }
    change.push_back(std::move(row));
  }
  const std::string pn = "blocks." + std::to_string(layer) + ".attn.hook_pattern";
  const float* p0 = before.acts.at(pn).data() + int64_t(view) * T * T;
  const float* p1 = after.acts.at(pn).data() + int64_t(view) * T * T;
  json heads_read = json::array();
  if (kv)
    for (int h = std::max(head, 0) * group; h < (head < 0 ? a.H : (head + 1) * group); h++)
      heads_read.push_back(h);
  return {{"hook", job.o.hook},
          {"patched", name},
          {"layer", layer},
          {"head", head < 0 ? json(nullptr) : json(head)},
          {"pos", pos < 0 ? json(nullptr) : json(pos)},
          {"view_head", view},
          {"kv_site", kv},
          {"query_heads_of_site", heads_read},
          {"direction", an::direction_name(job.o.direction)},
          {"base", noising ? "clean" : "corrupt"},
          {"T", T},
          {"tokens", labels(base)},
          {"before", square(p0, T)},
          {"after", square(p1, T)},
          {"max_abs_change", change[size_t(layer)][size_t(view)]},
          {"pattern_change", change},
          {"clean", mc},
          {"corrupt", mk},
          {"metric", mp},
          {"normalised", num_or_null((mp - mk) / (mc - mk))},
          {"note", "all " + std::to_string(T) +
                       " tokens run (the sweep truncates after the metric's last position), "
                       "so the metric may differ from the heatmap's cell by float rounding"}};
}

// One head's score of a fixed (unrotated) q/k pair as the offset Δ = i − j grows: the query q of token
// i and the key k of token j (the text's own, before the rotation), placed at positions p + Δ and p:
//   score(Δ) = scale · (R_{p+Δ} q)·(R_p k)
// for p = 0 and for p = shift (rotary: the same curve, to rounding: it depends on Δ only).
json Service::rope(const json& req) {
  const Arch& a = lm_.arch;
  if (!a.rotary())
    bad(path_ + " is a " + a.model_type +
            " model with learned positions: the position is added to the residual stream before W_Q and W_K, "
            "so there is no rotation and no score-versus-offset curve of a fixed q/k pair",
        {{"rotary", false}});
  const std::vector<int> ids = request_ids(req);
  const int T = int(ids.size());
  const int layer = int_of(req, "layer", 0, 0, a.n_layer - 1);
  const int head = int_of(req, "head", 0, 0, a.H - 1);
  const int i = int_of(req, "i", T - 1, 0, T - 1);
  const int j = int_of(req, "j", 0, 0, T - 1);
  // the curve runs over offsets 0 .. n − 1 from key position 0 and from key position `shift`; both stay
  // inside the model's context (n + shift <= n_ctx)
  const int shift = int_of(req, "shift", std::min(a.n_ctx / 4, 37), 0, std::max(0, a.n_ctx - 2));
  const int n = int_of(req, "offsets", std::min(a.n_ctx - shift, opt_.max_rope_offsets), 2,
                       std::max(2, std::min(a.n_ctx - shift, opt_.max_rope_offsets)));
  const int g = head / (a.H / a.n_kv);
  const std::string pre = "blocks." + std::to_string(layer) + ".";
  std::map<std::string, Tensor> acts;
  {
    ForwardSlot slot(forwards_);
    acts = run_with_cache(
        lm_, ids, [&](const std::string& s) { return s == pre + "attn.hook_q" || s == pre + "attn.hook_k"; },
        true);
  }
  const float* q = acts.at(pre + "attn.hook_q").data() + (int64_t(i) * a.H + head) * a.dh;
  const float* k = acts.at(pre + "attn.hook_k").data() + (int64_t(j) * a.n_kv + g) * a.dh;
  auto curve = [&](int p) {
    std::vector<float> Q(size_t(n) * a.dh), K(static_cast<size_t>(a.dh));
    std::vector<int> qp(static_cast<size_t>(n));
    for (int d = 0; d < n; d++) {
      std::copy(q, q + a.dh, Q.begin() + int64_t(d) * a.dh);
      qp[size_t(d)] = p + d;
    }
    std::copy(k, k + a.dh, K.begin());
    apply_rotary(a, Q.data(), n, qp.data());
    apply_rotary(a, K.data(), 1, &p);
    std::vector<double> s(static_cast<size_t>(n));
    for (int d = 0; d < n; d++) {
      double acc = 0;
      for (int e = 0; e < a.dh; e++) acc += double(Q[size_t(d) * a.dh + e]) * double(K[size_t(e)]);
      s[size_t(d)] = acc * a.attn_scale;
    }
    return s;
  };
  const std::vector<double> s0 = curve(0), s1 = curve(shift);
  double dmax = 0, smax = 0;
  for (int d = 0; d < n; d++)
    dmax = std::max(dmax, std::abs(s0[size_t(d)] - s1[size_t(d)])),
    smax = std::max(smax, std::abs(s0[size_t(d)]));
  double plain = 0;
  for (int e = 0; e < a.dh; e++) plain += double(q[e]) * double(k[e]);
  const auto c = compute(ids);
  json out = {
      {"layer", layer},
      {"head", head},
      {"kv_head", g},
      {"i", i},
      {"j", j},
      {"tokens", labels(ids)},
      {"T", T},
      {"rotary_dim", a.rotary_dim},
      {"head_dim", a.dh},
      {"rope_theta", a.rope_theta},
      {"rope_scaling", a.rope_scaling.type},
      {"attn_scale", a.attn_scale},
      {"offsets", n},
      {"score", s0},
      {"shift", shift},
      {"score_shifted", s1},
      {"max_abs_shift_diff", dmax},
      {"max_abs_score", smax},
      {"unrotated", plain * a.attn_scale},
      {"what",
       "score(Δ) = scale·(R_{p+Δ} q_i)·(R_p k_j) with the text's unrotated q of token i and k of token j, "
       "p = 0 (score) and p = shift (score_shifted)"}};
  if (i >= j) {
    const double sij = c->S[size_t(layer)][(size_t(head) * T + i) * T + j];
    out["text_offset"] = i - j;
    out["S_ij"] = sij;  // the forward's own rotated pair at positions (i, j)
    out["S_ij_vs_curve"] = i - j < n ? json(std::abs(sij - s0[size_t(i - j)])) : json(nullptr);
  }
  return out;
}

json Service::swap_check(const std::vector<int>& ids, int layer, int head, const float* S, int T) const {
  const Arch& a = lm_.arch;
  const std::string un = "blocks." + std::to_string(layer) + ".ln1.hook_normalized";
  std::map<std::string, Tensor> acts;
  {
    ForwardSlot slot(forwards_);
    acts = run_with_cache(
        lm_, ids, [&](const std::string& s) { return s == un; }, true);
  }
  const Tensor& u = acts.at(un);  // [T, d]
  const QkvMaps w = qkv_maps(lm_, layer);
  const int g = head / (a.H / a.n_kv), d = a.d, dh = a.dh;
  // q' from the KEY map of the head's key/value group, k' from the head's QUERY map: the roles swapped.
  std::vector<float> Qs(size_t(T) * dh), Ks(size_t(T) * dh);
  for (int t = 0; t < T; t++)
    for (int e = 0; e < dh; e++) {
      const float* wk = w.Wk.data() + (int64_t(g) * dh + e) * d;
      const float* wq = w.Wq.data() + (int64_t(head) * dh + e) * d;
      double sq = w.bk.empty() ? 0 : w.bk[size_t(g) * dh + e],
             sk = w.bq.empty() ? 0 : w.bq[size_t(head) * dh + e];
      for (int x = 0; x < d; x++) {
        const double ux = u.data()[int64_t(t) * d + x];
        sq += ux * wk[x], sk += ux * wq[x];
      }
      Qs[size_t(t) * dh + e] = float(sq), Ks[size_t(t) * dh + e] = float(sk);
    }
  std::vector<int> pos(static_cast<size_t>(T));
  for (int t = 0; t < T; t++) pos[size_t(t)] = t;
  apply_rotary(a, Qs.data(), T, pos.data());
  apply_rotary(a, Ks.data(), T, pos.data());
  double dmax = 0, smax = 0, asym = 0, norm = 0;
  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++) {
      double s = 0;
      for (int e = 0; e < dh; e++) s += double(Qs[size_t(i) * dh + e]) * double(Ks[size_t(j) * dh + e]);
      s *= a.attn_scale;
      const double st = S[int64_t(j) * T + i];
      dmax = std::max(dmax, std::abs(s - st));
      smax = std::max(smax, std::abs(st));
      asym += (S[int64_t(i) * T + j] - st) * (S[int64_t(i) * T + j] - st), norm += st * st;
    }
  const double tol = 1e-4 * smax + 1e-7;  // float rounding of two different GEMM orders
  return {{"max_abs_diff", dmax},
          {"max_abs_S", smax},
          {"tolerance", tol},
          {"transposes", dmax <= tol},
          {"asymmetry", norm > 0 ? std::sqrt(asym / norm) : 0.0},
          {"what", std::string(a.rotary() ? "S' = scale·(R_i q'_i)·(R_j k'_j)" : "S' = scale·q'_i·k'_j") +
                       " with q' = u·W_K + b_K and k' = u·W_Q + b_Q (the maps and biases swapped" +
                       (a.rotary() ? ", each rotated at its own position" : "") + ") against Sᵀ"}};
}

}  // namespace qkv::server

// Activation and path patching as users of the family forward's hook points (see patching.hpp).
#include "qkv/analysis/patching.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "qkv/error.hpp"

namespace qkv::analysis {
namespace {

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// How an activation is laid out, from its hook name.
enum class Layout { Heads, Pattern, Rows };

Layout layout_of(const std::string& name) {
  for (const char* s :
       {"attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_rot_q", "attn.hook_rot_k", "attn.hook_z"})
    if (ends_with(name, s)) return Layout::Heads;
  if (ends_with(name, "attn.hook_attn_scores") || ends_with(name, "attn.hook_pattern"))
    return Layout::Pattern;
  return Layout::Rows;
}

// Heads of an activation: n_kv for k/v (and rotated k), H for the others; 0 for [T, d] rows.
int heads_of(const Arch& a, const std::string& name) {
  if (layout_of(name) == Layout::Rows) return 0;
  if (ends_with(name, "attn.hook_k") || ends_with(name, "attn.hook_v") || ends_with(name, "attn.hook_rot_k"))
    return a.n_kv;
  return a.H;
}

std::set<std::string> patchable_names(const Model& m) {
  std::set<std::string> names;
  for (const auto& n : hook_names(m))
    if (n != "logits" && n != "ln_final.hook_normalized") names.insert(n);
  return names;
}

void check_patch(const Model& m, const Patch& p, int T) {
  if (!patchable_names(m).count(p.hook))
    usage_error("patch: no hook point '" + p.hook + "' in this model (see qkv dump or hook_names)");
  if (!p.source) usage_error("patch " + p.hook + ": no source activation");
  const int heads = heads_of(m.arch, p.hook);
  if (heads == 0 && p.head >= 0)
    usage_error("patch " + p.hook + ": a [T, d] activation has no heads (head " + std::to_string(p.head) +
                ")");
  if (p.head >= heads && heads > 0)
    usage_error("patch " + p.hook + ": head " + std::to_string(p.head) + " is outside [0, " +
                std::to_string(heads) + ")");
  if (p.pos >= T)
    usage_error("patch " + p.hook + ": position " + std::to_string(p.pos) + " is outside [0, " +
                std::to_string(T) + ")");
}

// Copies the patch's slice of its source into the activation v.
void apply(const Patch& p, ActView v) {
  if (p.source->shape() != v.shape) {
    std::string a, b;
    for (auto s : p.source->shape()) a += (a.empty() ? "" : ", ") + std::to_string(s);
    for (auto s : v.shape) b += (b.empty() ? "" : ", ") + std::to_string(s);
    usage_error("patch " + p.hook + ": the source is [" + a + "] but the run's activation is [" + b +
                "] (clean and corrupt runs must have equal lengths)");
  }
  const float* src = p.source->data();
  float* dst = v.data;
  const Layout lay = layout_of(p.hook);
  if (lay == Layout::Rows) {  // [T, d]
    const int64_t T = v.shape[0], d = v.shape[1];
    for (int64_t t = 0; t < T; t++)
      if (p.pos < 0 || t == p.pos) std::copy_n(src + t * d, d, dst + t * d);
  } else if (lay == Layout::Heads) {  // [T, X, dh]
    const int64_t T = v.shape[0], X = v.shape[1], dh = v.shape[2];
    for (int64_t t = 0; t < T; t++)
      for (int64_t h = 0; h < X; h++)
        if ((p.pos < 0 || t == p.pos) && (p.head < 0 || h == p.head))
          std::copy_n(src + (t * X + h) * dh, dh, dst + (t * X + h) * dh);
  } else {  // [H, T, T], pos = the query row
    const int64_t H = v.shape[0], T = v.shape[1];
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < T; i++)
        if ((p.pos < 0 || i == p.pos) && (p.head < 0 || h == p.head))
          std::copy_n(src + (h * T + i) * T, T, dst + (h * T + i) * T);
  }
}

std::vector<int> head_ids(const std::vector<int>& ids, int n) {
  return std::vector<int>(ids.begin(), ids.begin() + n);
}

// The metric resolved for a run truncated to T_run tokens: its last position and whether one row suffices.
struct Eval {
  PatchMetric metric;
  int T_run = 0;
  bool last_only = false;
};

Eval resolve(const Model& m, const PatchMetric& metric, int T) {
  const int V = m.arch.vocab_size;
  Eval e;
  e.metric = metric;
  if (metric.kind == PatchMetric::Kind::LogitDiff) {
    const int p = metric.position < 0 ? T - 1 : metric.position;
    if (p >= T)
      usage_error("metric: position " + std::to_string(p) + " is outside [0, " + std::to_string(T) + ")");
    for (int id : {metric.answer, metric.wrong})
      if (id < 0 || id >= V)
        usage_error("metric: answer token " + std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(V) + ")");
    e.metric.position = p;
    e.T_run = p + 1;
    e.last_only = true;
  } else {
    if (metric.loss_positions.empty()) usage_error("metric: no loss positions");
    if (metric.targets.size() != metric.loss_positions.size())
      usage_error("metric: " + std::to_string(metric.targets.size()) + " targets for " +
                  std::to_string(metric.loss_positions.size()) + " loss positions");
    int last = 0;
    for (size_t i = 0; i < metric.loss_positions.size(); i++) {
      const int p = metric.loss_positions[i];
      if (p < 0 || p >= T)
        usage_error("metric: loss position " + std::to_string(p) + " is outside [0, " + std::to_string(T) +
                    ")");
      if (metric.targets[i] < 0 || metric.targets[i] >= V)
        usage_error("metric: target token " + std::to_string(metric.targets[i]) +
                    " is outside the vocabulary");
      last = std::max(last, p);
    }
    e.T_run = last + 1;
    e.last_only = std::all_of(metric.loss_positions.begin(), metric.loss_positions.end(),
                              [&](int p) { return p == last; });
  }
  return e;
}

double eval(const Eval& e, const std::vector<float>& logits, const Model& m) {
  return metric_value(e.metric, logits, e.last_only ? 1 : e.T_run, m.arch.vocab_size, e.T_run);
}

void check_pair(const std::vector<int>& clean, const std::vector<int>& corrupt) {
  if (clean.empty()) usage_error("the clean input is empty");
  if (clean.size() != corrupt.size())
    usage_error(
        "clean and corrupt inputs must have equal length (patching copies activations position by position): "
        "clean has " +
        std::to_string(clean.size()) + " tokens, corrupt " + std::to_string(corrupt.size()));
}

double normalise(double m, double clean, double corrupt) {
  return clean == corrupt ? std::nan("") : (m - corrupt) / (clean - corrupt);
}

}  // namespace

const char* direction_name(PatchDirection d) {
  return d == PatchDirection::Noising ? "noising" : "denoising";
}

std::string PatchMetric::describe() const {
  if (kind == Kind::LogitDiff)
    return "logit[" + std::to_string(answer) + "] − logit[" + std::to_string(wrong) + "] at position " +
           (position < 0 ? std::string("last") : std::to_string(position));
  return "mean loss on " + std::to_string(loss_positions.size()) + " position(s)";
}

double metric_value(const PatchMetric& mt, const std::vector<float>& logits, int rows, int V, int T) {
  auto row = [&](int p) -> const float* {
    const int r = rows == 1 ? 0 : p;
    if (rows == 1 && p != T - 1)
      usage_error("metric: position " + std::to_string(p) + " needs every row's logits");
    return logits.data() + size_t(r) * V;
  };
  if (mt.kind == PatchMetric::Kind::LogitDiff) {
    const float* l = row(mt.position < 0 ? T - 1 : mt.position);
    return double(l[mt.answer]) - double(l[mt.wrong]);
  }
  double sum = 0;
  for (size_t i = 0; i < mt.loss_positions.size(); i++) {
    const float* l = row(mt.loss_positions[i]);
    double mx = -INFINITY;
    for (int j = 0; j < V; j++) mx = std::max(mx, double(l[j]));
    double z = 0;
    for (int j = 0; j < V; j++) z += std::exp(double(l[j]) - mx);
    sum += mx + std::log(z) - double(l[mt.targets[i]]);
  }
  return sum / double(mt.loss_positions.size());
}

PatchedRun run_patched(const Model& m, const std::vector<int>& ids, const std::vector<Patch>& patches,
                       const std::function<bool(const std::string&)>& keep, bool last_only,
                       int stop_at_layer, int start_at_layer, const float* resid_pre) {
  const int T = int(ids.size());
  for (const auto& p : patches) check_patch(m, p, T);
  PatchedRun r;
  Hooks h;
  h.wants = [&](const std::string& n) {
    if (keep && keep(n)) return true;
    return std::any_of(patches.begin(), patches.end(), [&](const Patch& p) { return p.hook == n; });
  };
  h.fn = [&](const std::string& n, ActView v) {
    for (const auto& p : patches)
      if (p.hook == n) apply(p, v);
    if (keep && keep(n)) {
      Tensor t(v.shape);
      std::copy_n(v.data, v.numel(), t.data());
      r.acts[n] = std::move(t);
    }
  };
  RunState st;
  RunOptions o;
  o.hooks = &h;
  o.last_only = last_only;
  o.stop_at_layer = stop_at_layer;
  o.start_at_layer = start_at_layer;
  o.resid_pre = resid_pre;
  o.materialise_all = true;
  r.logits = run(m, ids, st, o);
  return r;
}

std::string hook_at_layer(const std::string& hook, int layer) {
  std::string h = hook;
  if (ends_with(h, "attn.hook_result"))
    h = h.substr(0, h.size() - std::string("hook_result").size()) + "hook_z";
  if (h.rfind("blocks.", 0) == 0) return h;
  return "blocks." + std::to_string(layer) + "." + h;
}

std::vector<int> hook_layers(const Model& m, const std::string& hook) {
  const int L = m.arch.n_layer;
  std::vector<int> layers;
  if (hook.rfind("blocks.", 0) == 0) {
    const size_t dot = hook.find('.', 7);
    int l = -1;
    try {
      l = std::stoi(hook.substr(7, dot - 7));
    } catch (...) {
    }
    if (dot == std::string::npos || l < 0 || l >= L || hook.substr(7, dot - 7) != std::to_string(l))
      usage_error("--hook: '" + hook + "' does not name a layer in [0, " + std::to_string(L) + ")");
    layers.push_back(l);
  } else {
    for (int l = 0; l < L; l++) layers.push_back(l);
  }
  const std::string full = hook_at_layer(hook, layers[0]);
  if (!patchable_names(m).count(full)) {
    std::string known;
    const std::string pre = "blocks." + std::to_string(layers[0]) + ".";
    for (const auto& n : hook_names(m))
      if (n.rfind(pre, 0) == 0) known += (known.empty() ? "" : ", ") + n.substr(pre.size());
    usage_error("--hook: no hook point '" + full + "' in this model; a layer's hook points are: " + known +
                " (and attn.hook_result, a head's slice of hook_z)");
  }
  return layers;
}

std::string hook_kind(const std::string& name) {
  const Layout lay = layout_of(name);
  return lay == Layout::Heads ? "heads" : lay == Layout::Pattern ? "pattern" : "rows";
}

int hook_heads(const Arch& a, const std::string& name) { return heads_of(a, name); }

SweepResult patch_sweep(const Model& m, const std::vector<int>& clean, const std::vector<int>& corrupt,
                        const SweepOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  check_pair(clean, corrupt);
  SweepResult r;
  r.hook = o.hook;
  r.direction = o.direction;
  r.T = int(clean.size());
  r.layers = hook_layers(m, o.hook);
  const Eval e = resolve(m, o.metric, r.T);
  r.T_run = e.T_run;
  r.last_only = e.last_only;
  const std::string first = hook_at_layer(o.hook, r.layers[0]);
  const Layout lay = layout_of(first);
  r.kind = lay == Layout::Heads ? "heads" : lay == Layout::Pattern ? "pattern" : "rows";
  r.heads = heads_of(m.arch, first);

  // The two unpatched runs keep the hooked activation (the patches' source) and each layer's input
  // residual: a patch at block l changes nothing before it, so its forward resumes at l from the base
  // run's resid_pre (bit-identical to running blocks 0 .. l−1 again; on average half the work).
  std::set<std::string> names;
  for (int l : r.layers) {
    names.insert(hook_at_layer(o.hook, l));
    names.insert("blocks." + std::to_string(l) + ".hook_resid_pre");
  }
  auto keep = [&](const std::string& n) { return names.count(n) > 0; };
  const std::vector<int> c = head_ids(clean, e.T_run), k = head_ids(corrupt, e.T_run);
  const PatchedRun cr = run_patched(m, c, {}, keep, e.last_only);
  const PatchedRun kr = run_patched(m, k, {}, keep, e.last_only);
  r.forwards = 2;
  r.clean = eval(e, cr.logits, m);
  r.corrupt = eval(e, kr.logits, m);
  const bool noising = o.direction == PatchDirection::Noising;
  const std::vector<int>& base = noising ? c : k;
  const PatchedRun& src = noising ? kr : cr;
  const PatchedRun& base_run = noising ? cr : kr;
  const double base_metric = noising ? r.clean : r.corrupt;

  std::vector<int> heads = {-1}, positions = {-1};
  if (r.heads > 0) {
    heads.clear();
    for (int h = 0; h < r.heads; h++) heads.push_back(h);
  }
  if (o.per_position) {
    positions.clear();
    for (int t = 0; t < r.T; t++) positions.push_back(t);
  }
  const int total = int(r.layers.size() * heads.size() * positions.size());
  for (int l : r.layers) {
    const std::string name = hook_at_layer(o.hook, l);
    const Tensor& s = src.acts.at(name);
    const float* resid = base_run.acts.at("blocks." + std::to_string(l) + ".hook_resid_pre").data();
    for (int h : heads)
      for (int p : positions) {
        r.sites.push_back({l, h, p});
        double v = base_metric;
        if (p >= e.T_run) {
          r.sites_skipped++;  // after the metric's last position: causality says nothing changes
        } else {
          v = eval(e, run_patched(m, base, {Patch{name, h, p, &s}}, nullptr, e.last_only, -1, l, l > 0 ? resid : nullptr).logits, m);
          r.forwards++;
        }
        r.metric.push_back(v);
        r.normalised.push_back(normalise(v, r.clean, r.corrupt));
        if (o.progress) o.progress(int(r.sites.size()), total);
      }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

PathResult path_patch(const Model& m, const std::vector<int>& clean, const std::vector<int>& corrupt,
                      const PathSpec& s, PatchDirection direction, const PatchMetric& metric) {
  check_pair(clean, corrupt);
  const Arch& a = m.arch;
  if (s.input != 'q' && s.input != 'k' && s.input != 'v')
    usage_error("path: the receiver's input must be q, k or v (got '" + std::string(1, s.input) + "')");
  if (s.sender_layer < 0 || s.sender_layer >= a.n_layer || s.receiver_layer < 0 ||
      s.receiver_layer >= a.n_layer)
    usage_error("path: layers must be in [0, " + std::to_string(a.n_layer) + ")");
  if (s.sender_layer >= s.receiver_layer)
    usage_error("path: the sender's layer (" + std::to_string(s.sender_layer) +
                ") must come before the receiver's (" + std::to_string(s.receiver_layer) + ")");
  if (s.sender_head < 0 || s.sender_head >= a.H)
    usage_error("path: sender head " + std::to_string(s.sender_head) + " is outside [0, " +
                std::to_string(a.H) + ")");
  const int rh = s.input == 'q' ? a.H : a.n_kv;
  if (s.receiver_head < 0 || s.receiver_head >= rh)
    usage_error("path: receiver head " + std::to_string(s.receiver_head) + " is outside [0, " +
                std::to_string(rh) + ")" + (s.input == 'q' ? "" : " (key/value heads)"));
  PathResult r;
  r.spec = s;
  r.direction = direction;
  const Eval e = resolve(m, metric, int(clean.size()));
  const std::vector<int> c = head_ids(clean, e.T_run), k = head_ids(corrupt, e.T_run);
  const bool noising = direction == PatchDirection::Noising;
  const std::vector<int>& base_ids = noising ? c : k;
  const std::vector<int>& src_ids = noising ? k : c;
  const std::string Ls = "blocks." + std::to_string(s.sender_layer) + ".";
  const std::string Lr = "blocks." + std::to_string(s.receiver_layer) + ".";
  const std::string recv = Lr + "attn.hook_" + std::string(1, s.input);
  const std::set<std::string> base_keep = {Ls + "hook_attn_out", Lr + "hook_resid_pre"};
  const std::set<std::string> src_keep = {Ls + "attn.hook_z", recv};
  const PatchedRun base = run_patched(
      m, base_ids, {}, [&](const std::string& n) { return base_keep.count(n) > 0; }, e.last_only);
  const PatchedRun src = run_patched(
      m, src_ids, {}, [&](const std::string& n) { return src_keep.count(n) > 0; }, e.last_only);
  const double mb = eval(e, base.logits, m), ms = eval(e, src.logits, m);
  r.clean = noising ? mb : ms;
  r.corrupt = noising ? ms : mb;
  // Δ: the sender's contribution swapped, as the engine computes attn_out (W_O, and any post-norm).
  const PatchedRun sent = run_patched(
      m, base_ids, {Patch{Ls + "attn.hook_z", s.sender_head, -1, &src.acts.at(Ls + "attn.hook_z")}},
      [&](const std::string& n) { return n == Ls + "hook_attn_out"; }, false, s.sender_layer);
  const Tensor& a0 = base.acts.at(Ls + "hook_attn_out");
  const Tensor& a1 = sent.acts.at(Ls + "hook_attn_out");
  Tensor x1 = base.acts.at(Lr + "hook_resid_pre");
  double dn = 0;
  for (int64_t i = 0; i < x1.numel(); i++) {
    const float delta = a1.data()[i] - a0.data()[i];
    x1.data()[i] += delta;
    dn += double(delta) * delta;
  }
  r.delta_norm = std::sqrt(dn);
  // The receiver's input from norm1(x'): the receiver layer run on x' (stopped there), its q/k/v kept.
  const PatchedRun recvd = run_patched(
      m, base_ids, {Patch{Lr + "hook_resid_pre", -1, -1, &x1}},
      [&](const std::string& n) { return n == recv; }, false, s.receiver_layer);
  const Tensor& input = recvd.acts.at(recv);
  r.metric = eval(
      e, run_patched(m, base_ids, {Patch{recv, s.receiver_head, -1, &input}}, nullptr, e.last_only).logits,
      m);
  r.normalised = normalise(r.metric, r.clean, r.corrupt);
  r.receiver_metric = eval(
      e,
      run_patched(m, base_ids, {Patch{recv, s.receiver_head, -1, &src.acts.at(recv)}}, nullptr, e.last_only)
          .logits,
      m);
  r.receiver_normalised = normalise(r.receiver_metric, r.clean, r.corrupt);
  r.forwards = 6;
  return r;
}

PathSpec parse_path_spec(const std::string& arg, const std::string& spec) {
  auto bad = [&] {
    usage_error(arg + ": '" + spec + "' is not SENDER:RECEIVER:q|k|v with heads as LAYER.HEAD, e.g. 0.1:1.0:k");
  };
  const size_t c1 = spec.find(':'), c2 = c1 == std::string::npos ? c1 : spec.find(':', c1 + 1);
  if (c2 == std::string::npos || spec.size() != c2 + 2 || spec.size() > 32) bad();
  auto head = [&](const std::string& x, int& l, int& h) {
    const size_t dot = x.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 >= x.size() || x.find_first_not_of("0123456789.") != std::string::npos ||
        x.find('.', dot + 1) != std::string::npos || dot > 9 || x.size() - dot > 10)
      bad();
    l = std::stoi(x.substr(0, dot));
    h = std::stoi(x.substr(dot + 1));
  };
  PathSpec s;
  head(spec.substr(0, c1), s.sender_layer, s.sender_head);
  head(spec.substr(c1 + 1, c2 - c1 - 1), s.receiver_layer, s.receiver_head);
  s.input = spec[c2 + 1];
  if (s.input != 'q' && s.input != 'k' && s.input != 'v') bad();
  return s;
}

double fraction_of_receiver_effect(const PathResult& r) {
  return r.direction == PatchDirection::Noising ? (1 - r.normalised) / (1 - r.receiver_normalised)
                                                : r.normalised / r.receiver_normalised;
}

}  // namespace qkv::analysis

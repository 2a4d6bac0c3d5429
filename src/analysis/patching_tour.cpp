// The tour's causal claims, measured by patching on the repeated random sequences (patching.hpp):
//   qk_where_v_what       the induction head's keys patched from a run whose first copy differs: its pattern
//                         moves and the loss rises; its values patched: the pattern is bit-identical while
//                         the head's output changes and the loss rises.
//   k_composition_causal  path patching from the previous-token head into the induction head's key input
//                         carries most of the effect of patching that head's whole key.
//   ov_fault_separate     seed 003's corollary: OV patched, the pattern still a sensible induction pattern,
//                         the head's output no longer promotes the right token.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/patching.hpp"
#include "qkv/analysis/tour.hpp"

namespace qkv::analysis {
namespace {

constexpr double kLossRise = 0.01;     // nats: "the loss rises"
constexpr double kPatternMove = 0.1;   // the induction score falls by ≥ 0.1: "the pattern moves"
constexpr double kHeadScore = 0.8;     // an induction head / a sensible induction pattern
constexpr double kPathShare = 0.5;     // "most of the effect"
constexpr double kOutputBroken = 0.5;  // the head's direct logit for the right token falls to ≤ half

std::string num(double v, int sig = 3) {
  if (std::isnan(v)) return "nan";
  char b[64];
  const double a = std::fabs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e6))
    std::snprintf(b, sizeof b, "%.*e", std::max(0, sig - 2), v);
  else
    std::snprintf(b, sizeof b, "%.*g", sig, v);
  return b;
}
std::string head_name(const HeadRef& h) {
  return std::to_string(h.layer) + "." + std::to_string(h.head);
}

Claim make(const std::string& id, const std::string& source, const std::string& seed) {
  Claim c;
  c.id = id, c.source = source, c.seed = seed;
  return c;
}
void m(Claim& c, const std::string& k, double v) {
  c.measured.push_back({k, v, ""});
}
void t(Claim& c, const std::string& k, const std::string& v) {
  c.measured.push_back({k, 0, v.empty() ? "-" : v});
}

// Mean of A[i, i − n + 1] over the rows i of the second copy: the induction stripe ([T, T] pattern of one
// head).
double induction_stripe(const float* A, int T, int n, int start) {
  double s = 0;
  for (int i = start + n; i < start + 2 * n; i++) s += A[size_t(i) * T + (i - n + 1)];
  return s / n;
}

}  // namespace

std::vector<Claim> patching_claims(const Model& model, const PatchingClaimsInput& in) {
  std::vector<Claim> out;
  const Claim qk0 =
      make("qk_where_v_what", "seed 000",
           "Q·K decides where attention goes, V decides what moves: patch the induction head's keys and its "
           "pattern moves; patch its values and the pattern stays while the output changes.");
  const Claim kc0 =
      make("k_composition_causal", "seed 000",
           "The induction head's key is built from the previous-token head's note: patching only that path "
           "carries the effect.");
  const Claim ov0 =
      make("ov_fault_separate", "seed 003",
           "A head whose pattern looks sensible but whose output is useless has a broken value–output pair.");
  const Arch& a = model.arch;
  const std::vector<std::vector<int>>& seqs = in.seqs;
  const int L = a.n_layer, H = a.H, n = in.n, start = in.bos >= 0 ? 1 : 0;
  const HeadRef ind = in.induction, prev = in.previous;
  const double ind_score = ind.valid() ? in.induction_score : 0;
  std::string why;
  if (L < 2)
    why = "one layer: no earlier head for an induction head to compose with";
  else if (!ind.valid() || ind_score < kHeadScore)
    why = "no induction head on this model (best score " + num(ind_score) + " < " + num(kHeadScore) +
          "): there is no circuit to patch";
  if (!why.empty()) {
    for (Claim c : {qk0, kc0, ov0}) {
      c.held = false;
      c.applies = false;
      c.summary = "n/a";
      c.criterion = "applies to a model with an induction head (score ≥ " + num(kHeadScore) +
                    ") in a layer after the first";
      c.note = why;
      out.push_back(c);
    }
    return out;
  }
  const int T = int(seqs.at(0).size()), d = a.d, dh = a.dh, cl = ind.layer, ch = ind.head;
  const std::string b = "blocks." + std::to_string(cl) + ".attn.";
  const std::string pat = b + "hook_pattern", zn = b + "hook_z", kn = b + "hook_k", vn = b + "hook_v";
  // corrupt: the first copy replaced by other random tokens; the second copy, where the loss is read, kept
  const auto other = repeated_random_tokens(a.vocab_size, n, int(seqs.size()), in.seed + 7919, in.bos);
  PatchMetric metric;
  metric.kind = PatchMetric::Kind::Loss;
  for (int p = start + n; p < start + 2 * n - 1; p++) metric.loss_positions.push_back(p);
  // W_O's rows of the head [dh, d] (Conv1D [H·dh, d] or nn.Linear [d, H·dh]) and the unembedding W_U [V, d]
  // (lm_head, or the embedding when tied).
  std::vector<float> WO(size_t(dh) * d), WU(size_t(a.vocab_size) * d);
  {
    const Weight& w = model.blocks[size_t(cl)].wo;
    std::vector<float> all(size_t(w.numel()));
    w.read(0, w.numel(), all.data());
    for (int e = 0; e < dh; e++)
      for (int j = 0; j < d; j++)
        WO[size_t(e) * d + j] = w.in_out ? all[(size_t(ch) * dh + e) * d + j] : all[size_t(j) * H * dh + size_t(ch) * dh + e];
    (model.lm_head.present() ? model.lm_head : model.wte).read(0, int64_t(a.vocab_size) * d, WU.data());
  }
  auto direct_logit = [&](const Tensor& z, const std::vector<int>& ids) {  // mean over loss positions
    double s = 0;
    for (int p : metric.loss_positions) {
      const float* zp = z.data() + (size_t(p) * H + ch) * dh;
      const float* u = WU.data() + size_t(ids[size_t(p) + 1]) * d;
      for (int e = 0; e < dh; e++) {
        double w = 0;
        for (int j = 0; j < d; j++) w += double(WO[size_t(e) * d + j]) * u[j];
        s += zp[e] * w;
      }
    }
    return s / double(metric.loss_positions.size());
  };
  const double B = double(seqs.size());
  double l_clean = 0, l_corrupt = 0, l_k = 0, l_v = 0, l_path = 0;
  double s_clean = 0, s_k = 0, s_v = 0, v_pat_diff = 0, k_pat_diff = 0, v_z_diff = 0, dl_clean = 0, dl_v = 0;
  int forwards = 0;
  const auto keep = [&](const std::string& x) { return x == pat || x == zn || x == kn || x == vn; };
  const int G = H / model.arch.n_kv;
  for (size_t s = 0; s < seqs.size(); s++) {
    const std::vector<int>& clean = seqs[s];
    std::vector<int> corrupt = clean;
    for (int i = 0; i < n; i++) corrupt[size_t(start + i)] = other[s][size_t(start + i)];
    metric.targets.clear();
    for (int p : metric.loss_positions) metric.targets.push_back(clean[size_t(p) + 1]);
    auto loss = [&](const PatchedRun& x) {
      return metric_value(metric, x.logits, T, a.vocab_size, T);
    };
    const PatchedRun c = run_patched(model, clean, {}, keep);
    const PatchedRun k = run_patched(model, corrupt, {}, keep);
    const PatchedRun pk = run_patched(model, clean, {Patch{kn, ch / G, -1, &k.acts.at(kn)}}, keep);
    const PatchedRun pv = run_patched(model, clean, {Patch{vn, ch / G, -1, &k.acts.at(vn)}}, keep);
    forwards += 4;
    l_clean += loss(c) / B, l_corrupt += loss(k) / B, l_k += loss(pk) / B, l_v += loss(pv) / B;
    const float* A0 = c.acts.at(pat).data() + size_t(ch) * T * T;
    const float* Ak = pk.acts.at(pat).data() + size_t(ch) * T * T;
    const float* Av = pv.acts.at(pat).data() + size_t(ch) * T * T;
    s_clean += induction_stripe(A0, T, n, start) / B;
    s_k += induction_stripe(Ak, T, n, start) / B;
    s_v += induction_stripe(Av, T, n, start) / B;
    for (size_t i = 0; i < size_t(T) * T; i++) {
      v_pat_diff = std::max(v_pat_diff, std::fabs(double(Av[i]) - A0[i]));
      k_pat_diff = std::max(k_pat_diff, std::fabs(double(Ak[i]) - A0[i]));
    }
    const Tensor& z0 = c.acts.at(zn);
    const Tensor& zv = pv.acts.at(zn);
    for (int p = 0; p < T; p++)
      for (int e = 0; e < dh; e++) {
        const size_t i = (size_t(p) * H + ch) * dh + e;
        v_z_diff = std::max(v_z_diff, std::fabs(double(zv.data()[i]) - z0.data()[i]));
      }
    dl_clean += direct_logit(z0, clean) / B;
    dl_v += direct_logit(zv, clean) / B;
    const PathResult pr = path_patch(model, clean, corrupt, {prev.layer, prev.head, cl, ch / G, 'k'},
                                     PatchDirection::Noising, metric);
    forwards += pr.forwards;
    l_path += pr.metric / B;
  }
  const double rise_k = l_k - l_clean, rise_v = l_v - l_clean, rise_path = l_path - l_clean;
  const std::string h = head_name(ind);
  // ---- qk_where_v_what
  {
    Claim c = qk0;
    t(c, "head", h);
    m(c, "loss_clean", l_clean), m(c, "loss_corrupt", l_corrupt), m(c, "loss_k_patched", l_k),
        m(c, "loss_v_patched", l_v);
    m(c, "induction_score_clean", s_clean), m(c, "induction_score_k_patched", s_k),
        m(c, "induction_score_v_patched", s_v);
    m(c, "pattern_max_abs_diff_k", k_pat_diff), m(c, "pattern_max_abs_diff_v", v_pat_diff),
        m(c, "z_max_abs_diff_v", v_z_diff);
    m(c, "forwards", forwards), m(c, "batch", B);
    const bool k_ok = s_clean - s_k >= kPatternMove && rise_k >= kLossRise;
    const bool v_ok = v_pat_diff == 0 && v_z_diff > 0 && rise_v >= kLossRise;
    c.held = k_ok && v_ok;
    c.summary =
        "head " + h + ", noising from a run whose first copy differs: keys patched → induction stripe " +
        num(s_clean) + " → " + num(s_k) + ", loss " + num(l_clean, 4) + " → " + num(l_k, 4) +
        "; values patched → pattern max |Δ| " + num(v_pat_diff) + " (stripe " + num(s_v) + "), z max |Δ| " +
        num(v_z_diff) + ", loss → " + num(l_v, 4) + " (corrupt run " + num(l_corrupt, 4) + ")";
    c.criterion = "holds when patching the head's keys lowers its induction stripe by ≥ " +
                  num(kPatternMove) + " and raises the repeated-half loss by ≥ " + num(kLossRise) +
                  " nats, and patching its values leaves the "
                  "pattern bit-identical (max |Δ| = 0) while its z changes and the loss rises by ≥ " +
                  num(kLossRise) + " nats";
    if (!c.held)
      c.note = v_pat_diff != 0 ? "the pattern changed when only the values were patched: the patch is wrong"
               : !k_ok         ? "does not hold on this model: the keys' patch moves the stripe by " +
                             num(s_clean - s_k) + " and the loss by " + num(rise_k) + " nats"
                       : "does not hold on this model: the values' patch raises the loss by only " +
                             num(rise_v) + " nats";
    out.push_back(c);
  }
  // ---- k_composition_causal
  {
    Claim c = kc0;
    const double share = rise_k != 0 ? rise_path / rise_k : std::nan("");
    t(c, "sender", head_name(prev)), t(c, "receiver", h + " k");
    m(c, "loss_clean", l_clean), m(c, "loss_path_patched", l_path), m(c, "loss_receiver_k_patched", l_k);
    m(c, "share_of_receiver_effect", share);
    m(c, "normalised_path", (l_path - l_corrupt) / (l_clean - l_corrupt));
    c.held = rise_k >= kLossRise && share >= kPathShare;
    c.summary = "noising " + head_name(prev) + " → " + h + " key only: loss " + num(l_clean, 4) + " → " +
                num(l_path, 4) + ", against " + num(l_k, 4) +
                " with the receiver's whole key patched: the path carries " + num(100 * share) +
                "% of the key's effect";
    c.criterion =
        "holds when patching the receiver's whole key raises the loss by ≥ " + num(kLossRise) +
        " nats and the sender → receiver-key path alone carries ≥ " + num(100 * kPathShare) +
        "% of that rise (path patching: the sender's output swapped only in the receiver's key input, norm "
        "recomputed, everything else clean)";
    if (!c.held)
      c.note = rise_k < kLossRise
                   ? "does not hold on this model: the receiver's key barely matters here"
                   : "does not hold on this model: the key's effect comes mostly through other paths";
    out.push_back(c);
  }
  // ---- ov_fault_separate
  {
    Claim c = ov0;
    t(c, "head", h);
    m(c, "induction_score_v_patched", s_v), m(c, "pattern_max_abs_diff_v", v_pat_diff);
    m(c, "direct_logit_clean", dl_clean), m(c, "direct_logit_v_patched", dl_v), m(c, "loss_rise_v", rise_v);
    c.held = v_pat_diff == 0 && s_v >= kHeadScore && dl_clean > 0 && dl_v <= kOutputBroken * dl_clean &&
             rise_v >= kLossRise;
    c.summary = "head " + h + " with only its values patched: pattern bit-identical (max |Δ| " +
                num(v_pat_diff) + "), induction stripe " + num(s_v) +
                " — it still looks right — but its direct logit for the right next token " + num(dl_clean) +
                " → " + num(dl_v) + " and the loss rises " + num(rise_v) + " nats";
    c.criterion =
        "holds when, with the values patched, the pattern is bit-identical with induction stripe ≥ " +
        num(kHeadScore) + ", the head's direct logit (z_h·W_O_h·W_U[next], no final norm) falls to ≤ " +
        num(kOutputBroken) + " × its clean value (> 0), and the loss rises by ≥ " + num(kLossRise) + " nats";
    if (!c.held)
      c.note = v_pat_diff != 0
                   ? "the pattern changed: the patch is wrong"
                   : "does not hold on this model: the OV patch does not break the head's output enough";
    out.push_back(c);
  }
  return out;
}

void add_patching_claims(const GPT2& g, const TourOptions& o, const std::vector<std::vector<int>>& seqs,
                         TourResult& r) {
  PatchingClaimsInput in{seqs, r.n, o.bos, o.seed, r.induction, r.previous, 0.0};
  if (r.induction.valid()) in.induction_score = r.heads.heads[size_t(r.induction.layer) * r.H + r.induction.head].induction;
  for (Claim& c : patching_claims(model_view(g), in)) r.claims.push_back(std::move(c));
}

}  // namespace qkv::analysis

// The tour's causal claims, measured by patching on the repeated random sequences (patching.hpp), one set of
// runs shared by the three:
//   qk_where_v_what       the induction head's keys patched from a run whose first copy differs: its pattern
//                         moves and the loss rises; its values patched: the pattern is bit-identical while
//                         the head's output changes and the loss rises.
//   k_composition_causal  path patching from the previous-token head into the induction head's key input
//                         carries most of the effect of patching that head's whole key.
//   ov_fault_separate     seed 003's corollary: OV patched, the pattern still a sensible induction pattern,
//                         the head's output no longer promotes the right token.
#include "qkv/analysis/patching.hpp"

#include <algorithm>
#include <cmath>

#include "analysis/claims/claim.hpp"
#include "analysis/claims/context.hpp"

namespace qkv::analysis::detail {
namespace {

constexpr double kLossRise = 0.01;     // nats: "the loss rises"
constexpr double kPatternMove = 0.1;   // the induction score falls by ≥ 0.1: "the pattern moves"
constexpr double kHeadScore = 0.8;     // an induction head / a sensible induction pattern
constexpr double kPathShare = 0.5;     // "most of the effect"
constexpr double kOutputBroken = 0.5;  // the head's direct logit for the right token falls to ≤ half

// Mean of A[i, i − n + 1] over the rows i of the second copy: the induction stripe ([T, T] pattern of one
// head).
double induction_stripe(const float* A, int T, int n, int start) {
  double s = 0;
  for (int i = start + n; i < start + 2 * n; i++) s += A[size_t(i) * T + (i - n + 1)];
  return s / n;
}

// The head's direct logit: W_O's rows of the head [dh, d] (Conv1D [H·dh, d] or nn.Linear [d, H·dh])
// against the unembedding W_U [V, d] (lm_head, or the embedding when tied), one next token at a time.
struct DirectLogit {
  int d = 0, dh = 0, H = 0, head = 0;
  std::vector<float> WO, WU;
  DirectLogit(const Model& m, int layer, int head_) : d(m.arch.d), dh(m.arch.dh), H(m.arch.H), head(head_) {
    WO.resize(size_t(dh) * d), WU.resize(size_t(m.arch.vocab_size) * d);
    const Weight& w = m.blocks[size_t(layer)].wo;
    std::vector<float> all(size_t(w.numel()));
    w.read(0, w.numel(), all.data());
    for (int e = 0; e < dh; e++)
      for (int j = 0; j < d; j++)
        WO[size_t(e) * d + j] =
            w.in_out ? all[(size_t(head) * dh + e) * d + j] : all[size_t(j) * H * dh + size_t(head) * dh + e];
    (m.lm_head.present() ? m.lm_head : m.wte).read(0, int64_t(m.arch.vocab_size) * d, WU.data());
  }
  // Mean over the loss positions p of z_h[p]·W_O_h·W_U[ids[p + 1]].
  double operator()(const Tensor& z, const std::vector<int>& ids, const std::vector<int>& positions) const {
    double s = 0;
    for (int p : positions) {
      const float* zp = z.data() + (size_t(p) * H + head) * dh;
      const float* u = WU.data() + size_t(ids[size_t(p) + 1]) * d;
      for (int e = 0; e < dh; e++) {
        double w = 0;
        for (int j = 0; j < d; j++) w += double(WO[size_t(e) * d + j]) * u[j];
        s += zp[e] * w;
      }
    }
    return s / double(positions.size());
  }
};

// One clean sequence and its corrupt twin: the runs and the path patch, added into m (divided by the batch).
void patch_one(const Model& model, const TourContext& ctx, const std::vector<int>& clean,
               const std::vector<int>& corrupt, const DirectLogit& dlog, PatchMetric& metric,
               PatchingMeasure& m) {
  const Arch& a = model.arch;
  const int T = int(clean.size()), n = ctx.r.n, start = ctx.o.bos >= 0 ? 1 : 0, ch = ctx.ch, dh = a.dh,
            H = a.H;
  const int g = ch / (H / a.n_kv);
  const double B = m.batch;
  const std::string b = "blocks." + std::to_string(ctx.cl) + ".attn.";
  const std::string pat = b + "hook_pattern", zn = b + "hook_z", kn = b + "hook_k", vn = b + "hook_v";
  const auto keep = [&](const std::string& x) { return x == pat || x == zn || x == kn || x == vn; };
  metric.targets.clear();
  for (int p : metric.loss_positions) metric.targets.push_back(clean[size_t(p) + 1]);
  auto loss = [&](const PatchedRun& x) { return metric_value(metric, x.logits, T, a.vocab_size, T); };
  const PatchedRun c = run_patched(model, clean, {}, keep);
  const PatchedRun k = run_patched(model, corrupt, {}, keep);
  const PatchedRun pk = run_patched(model, clean, {Patch{kn, g, -1, &k.acts.at(kn)}}, keep);
  const PatchedRun pv = run_patched(model, clean, {Patch{vn, g, -1, &k.acts.at(vn)}}, keep);
  m.forwards += 4;
  m.l_clean += loss(c) / B, m.l_corrupt += loss(k) / B, m.l_k += loss(pk) / B, m.l_v += loss(pv) / B;
  const float* A0 = c.acts.at(pat).data() + size_t(ch) * T * T;
  const float* Ak = pk.acts.at(pat).data() + size_t(ch) * T * T;
  const float* Av = pv.acts.at(pat).data() + size_t(ch) * T * T;
  m.s_clean += induction_stripe(A0, T, n, start) / B;
  m.s_k += induction_stripe(Ak, T, n, start) / B;
  m.s_v += induction_stripe(Av, T, n, start) / B;
  for (size_t i = 0; i < size_t(T) * T; i++) {
    m.v_pat_diff = std::max(m.v_pat_diff, std::fabs(double(Av[i]) - A0[i]));
    m.k_pat_diff = std::max(m.k_pat_diff, std::fabs(double(Ak[i]) - A0[i]));
  }
  const Tensor& z0 = c.acts.at(zn);
  const Tensor& zv = pv.acts.at(zn);
  for (int p = 0; p < T; p++)
    for (int e = 0; e < dh; e++) {
      const size_t i = (size_t(p) * H + ch) * dh + e;
      m.v_z_diff = std::max(m.v_z_diff, std::fabs(double(zv.data()[i]) - z0.data()[i]));
    }
  m.dl_clean += dlog(z0, clean, metric.loss_positions) / B;
  m.dl_v += dlog(zv, clean, metric.loss_positions) / B;
  const HeadRef& prev = ctx.r.previous;
  const PathResult pr = path_patch(model, clean, corrupt, {prev.layer, prev.head, ctx.cl, g, 'k'},
                                   PatchDirection::Noising, metric);
  m.forwards += pr.forwards;
  m.l_path += pr.metric / B;
}

std::string criterion_applies() {
  return "applies to a model with an induction head (score ≥ " + num(kHeadScore) +
         ") in a layer after the first";
}

}  // namespace

PatchingMeasure measure_patching(const TourContext& ctx) {
  PatchingMeasure m;
  const double score = ctx.scan(ctx.r.induction).induction;
  if (score < kHeadScore) {
    m.why_na = "no induction head on this model (best score " + num(score) + " < " + num(kHeadScore) +
               "): there is no circuit to patch";
    return m;
  }
  const Model& model = ctx.model;
  const int n = ctx.r.n, start = ctx.o.bos >= 0 ? 1 : 0;
  // corrupt: the first copy replaced by other random tokens; the second copy, where the loss is read, kept
  const auto other =
      repeated_random_tokens(model.arch.vocab_size, n, int(ctx.seqs.size()), ctx.o.seed + 7919, ctx.o.bos);
  PatchMetric metric;
  metric.kind = PatchMetric::Kind::Loss;
  for (int p = start + n; p < start + 2 * n - 1; p++) metric.loss_positions.push_back(p);
  const DirectLogit dlog(model, ctx.cl, ctx.ch);
  m.batch = double(ctx.seqs.size());
  for (size_t s = 0; s < ctx.seqs.size(); s++) {
    std::vector<int> corrupt = ctx.seqs[s];
    for (int i = 0; i < n; i++) corrupt[size_t(start + i)] = other[s][size_t(start + i)];
    patch_one(model, ctx, ctx.seqs[s], corrupt, dlog, metric, m);
  }
  return m;
}

namespace {

Claim qk_where_v_what(TourContext& ctx, Builder b) {
  const PatchingMeasure& m = ctx.patching();
  if (!m.why_na.empty()) return b.na(m.why_na, criterion_applies());
  const double rise_k = m.l_k - m.l_clean, rise_v = m.l_v - m.l_clean;
  b.t("head", ctx.chosen)
      .m("loss_clean", m.l_clean)
      .m("loss_corrupt", m.l_corrupt)
      .m("loss_k_patched", m.l_k);
  b.m("loss_v_patched", m.l_v).m("induction_score_clean", m.s_clean).m("induction_score_k_patched", m.s_k);
  b.m("induction_score_v_patched", m.s_v)
      .m("pattern_max_abs_diff_k", m.k_pat_diff)
      .m("pattern_max_abs_diff_v", m.v_pat_diff);
  b.m("z_max_abs_diff_v", m.v_z_diff).m("forwards", m.forwards).m("batch", m.batch);
  const bool k_ok = m.s_clean - m.s_k >= kPatternMove && rise_k >= kLossRise;
  const bool v_ok = m.v_pat_diff == 0 && m.v_z_diff > 0 && rise_v >= kLossRise;
  std::string note;
  if (!(k_ok && v_ok))
    note = m.v_pat_diff != 0 ? "the pattern changed when only the values were patched: the patch is wrong"
           : !k_ok           ? "does not hold on this model: the keys' patch moves the stripe by " +
                         num(m.s_clean - m.s_k) + " and the loss by " + num(rise_k) + " nats"
                   : "does not hold on this model: the values' patch raises the loss by only " + num(rise_v) +
                         " nats";
  return b.done(k_ok && v_ok,
                "head " + ctx.chosen +
                    ", noising from a run whose first copy differs: keys patched → induction stripe " +
                    num(m.s_clean) + " → " + num(m.s_k) + ", loss " + num(m.l_clean, 4) + " → " +
                    num(m.l_k, 4) + "; values patched → pattern max |Δ| " + num(m.v_pat_diff) + " (stripe " +
                    num(m.s_v) + "), z max |Δ| " + num(m.v_z_diff) + ", loss → " + num(m.l_v, 4) +
                    " (corrupt run " + num(m.l_corrupt, 4) + ")",
                "holds when patching the head's keys lowers its induction stripe by ≥ " + num(kPatternMove) +
                    " and raises the repeated-half loss by ≥ " + num(kLossRise) +
                    " nats, and patching its values leaves the pattern bit-identical (max |Δ| = 0) while its "
                    "z changes and "
                    "the loss rises by ≥ " +
                    num(kLossRise) + " nats",
                note);
}

Claim k_composition_causal(TourContext& ctx, Builder b) {
  const PatchingMeasure& m = ctx.patching();
  if (!m.why_na.empty()) return b.na(m.why_na, criterion_applies());
  const double rise_k = m.l_k - m.l_clean, rise_path = m.l_path - m.l_clean;
  const double share = rise_k != 0 ? rise_path / rise_k : std::nan("");
  const std::string prev = head_name(ctx.r.previous);
  b.t("sender", prev).t("receiver", ctx.chosen + " k");
  b.m("loss_clean", m.l_clean).m("loss_path_patched", m.l_path).m("loss_receiver_k_patched", m.l_k);
  b.m("share_of_receiver_effect", share)
      .m("normalised_path", (m.l_path - m.l_corrupt) / (m.l_clean - m.l_corrupt));
  const bool held = rise_k >= kLossRise && share >= kPathShare;
  return b.done(
      held,
      "noising " + prev + " → " + ctx.chosen + " key only: loss " + num(m.l_clean, 4) + " → " +
          num(m.l_path, 4) + ", against " + num(m.l_k, 4) +
          " with the receiver's whole key patched: the path carries " + num(100 * share) +
          "% of the key's effect",
      "holds when patching the receiver's whole key raises the loss by ≥ " + num(kLossRise) +
          " nats and the sender → receiver-key path alone carries ≥ " + num(100 * kPathShare) +
          "% of that rise (path patching: the sender's output swapped only in the receiver's key input, norm "
          "recomputed, everything else clean)",
      held ? ""
      : rise_k < kLossRise
          ? "does not hold on this model: the receiver's key barely matters here"
          : "does not hold on this model: the key's effect comes mostly through other paths");
}

Claim ov_fault_separate(TourContext& ctx, Builder b) {
  const PatchingMeasure& m = ctx.patching();
  if (!m.why_na.empty()) return b.na(m.why_na, criterion_applies());
  const double rise_v = m.l_v - m.l_clean;
  b.t("head", ctx.chosen).m("induction_score_v_patched", m.s_v).m("pattern_max_abs_diff_v", m.v_pat_diff);
  b.m("direct_logit_clean", m.dl_clean).m("direct_logit_v_patched", m.dl_v).m("loss_rise_v", rise_v);
  const bool held = m.v_pat_diff == 0 && m.s_v >= kHeadScore && m.dl_clean > 0 &&
                    m.dl_v <= kOutputBroken * m.dl_clean && rise_v >= kLossRise;
  return b.done(held,
                "head " + ctx.chosen + " with only its values patched: pattern bit-identical (max |Δ| " +
                    num(m.v_pat_diff) + "), induction stripe " + num(m.s_v) +
                    " — it still looks right — but its direct logit for the right next "
                    "token " +
                    num(m.dl_clean) + " → " + num(m.dl_v) + " and the loss rises " + num(rise_v) + " nats",
                "holds when, with the values patched, the pattern is bit-identical with induction stripe ≥ " +
                    num(kHeadScore) +
                    ", the head's direct logit (z_h·W_O_h·W_U[next], no final norm) falls to ≤ " +
                    num(kOutputBroken) + " × its clean value (> 0), and the loss rises by ≥ " +
                    num(kLossRise) + " nats",
                held ? ""
                : m.v_pat_diff != 0
                    ? "the pattern changed: the patch is wrong"
                    : "does not hold on this model: the OV patch does not break the head's output enough");
}

std::optional<std::string> two_layers(const Arch& a) {
  if (a.n_layer >= 2) return std::nullopt;
  return std::string("one layer: no earlier head for an induction head to compose with");
}

}  // namespace

std::vector<ClaimUnit> patching_claims() {
  return {
      {"qk_where_v_what", "seed 000",
       "Q·K decides where attention goes, V decides what moves: patch the induction head's keys and its "
       "pattern moves; "
       "patch its values and the pattern stays while the output changes.",
       two_layers, qk_where_v_what},
      {"k_composition_causal", "seed 000",
       "The induction head's key is built from the previous-token head's note: patching only that path "
       "carries the effect.",
       two_layers, k_composition_causal},
      {"ov_fault_separate", "seed 003",
       "A head whose pattern looks sensible but whose output is useless has a broken value–output pair.",
       two_layers, ov_fault_separate},
  };
}

}  // namespace qkv::analysis::detail

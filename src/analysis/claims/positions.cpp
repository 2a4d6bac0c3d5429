// What rotary positions, grouped-query attention and a K/V cache do to the seeds' picture (issue 15): the
// score depends on i − j only, the QK circuit moves with the offset, a KV group's heads share one key and
// value lens, and caching K and V is exact under the causal mask. Measured on the forward's own hooks.
#include <algorithm>
#include <cmath>

#include "analysis/claims/claim.hpp"
#include "analysis/claims/context.hpp"

namespace qkv::analysis::detail {
namespace {

constexpr double kRelative = 1e-5;  // equal i − j: equal scores to rounding (relative to |score|)
constexpr double kMoves = 1e-3;     // different i − j: scores differ by more than this (relative)
constexpr double kCircuitMoves = 0.01;
constexpr double kCacheRel = 1e-5;

float dot(const float* a, const float* b, int n) {  // one fixed order
  float s = 0;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

std::optional<std::string> rotary_only(const Arch& a) {
  if (a.rotary()) return std::nullopt;
  return std::string(
      "positions are learned embeddings added to the row: the score depends on the rows, which carry "
      "absolute positions; W_Q W_Kᵀ is the whole QK circuit");
}

// One q, k pair of the chosen head (the query of the last token, the key of the middle one, before rotation)
// rotated to positions (p + Δ, p): the same score for every p, another for another Δ. Also the chart's data.
Claim rope_relative(TourContext& ctx, Builder b) {
  const Arch& a = ctx.a;
  const int T = ctx.r.T, dh = a.dh, ti = T - 1, tj = T / 2;
  const std::vector<float> Q = ctx.head_rows(ctx.cl, "attn.hook_q", ctx.ch);
  const std::vector<float> K = ctx.head_rows(ctx.cl, "attn.hook_k", ctx.ch / (a.H / a.n_kv));
  const std::vector<float> q(Q.begin() + ti * dh, Q.begin() + (ti + 1) * dh),
      k(K.begin() + tj * dh, K.begin() + (tj + 1) * dh);
  auto score = [&](int pi, int pj) {
    std::vector<float> qq = q, kk = k;
    apply_rotary(a, qq.data(), 1, &pi);
    apply_rotary(a, kk.data(), 1, &pj);
    return double(dot(qq.data(), kk.data(), dh));
  };
  TourResult& r = ctx.r;  // the chart: offsets 0 .. maxoff with the key at position 0, and at offset_shift
  const int maxoff = a.n_ctx > 256 ? 128 : a.n_ctx / 2;
  r.offset_shift = std::min(a.n_ctx - 1 - maxoff, 4096);
  for (int off = 0; off <= maxoff; off++) {
    r.offsets.push_back(off);
    r.offset_score.push_back(score(off, 0));
    r.offset_score_shifted.push_back(score(r.offset_shift + off, r.offset_shift));
  }
  const int cap = std::min(a.n_ctx, 4096) - 1, delta = std::min(5, cap);
  std::vector<double> same;
  for (int p : {0, 7, cap / 2, cap - delta}) same.push_back(score(p + delta, p));
  double spread_same = 0, mag = 0, spread_diff = 0;
  for (double s : same)
    spread_same = std::max(spread_same, std::abs(s - same[0])), mag = std::max(mag, std::abs(s));
  for (int dd : {0, 1, 2, 3, 8})
    spread_diff = std::max(spread_diff, std::abs(score(dd, 0) - score(delta, 0)));
  const double rs = mag > 0 ? spread_same / mag : 0, rd = mag > 0 ? spread_diff / mag : 0;
  const bool held = rs <= kRelative && rd >= kMoves;
  return b.m("equal_offset_rel_spread", rs)
      .m("different_offset_rel_spread", rd)
      .done(held,
            "head " + ctx.chosen + ": one q, k pair rotated to (p + " + std::to_string(delta) +
                ", p) for p = 0, 7, " + std::to_string(cap / 2) + ", " + std::to_string(cap - delta) +
                ": scores agree to " + num(rs) + " (relative); at other offsets they move by " + num(rd),
            "holds when at equal i − j the spread is ≤ " + num(kRelative) +
                " and at different i − j it is ≥ " + num(kMoves),
            held ? "" : "the rotation does not make the score a function of i − j on this model");
}

// ‖W_Qᵀ (R_Δ − I) W_K‖_F / ‖W_Qᵀ W_K‖_F of the chosen head, factored through dh × dh Grams:
// Gq = W_Q^h W_Q^hᵀ, Gk = W_K^g W_K^gᵀ, ‖W_Qᵀ A W_K‖² = ⟨Gq A, A Gk⟩_F (Gq symmetric).
Claim qk_circuit_position_dependent(TourContext& ctx, Builder b) {
  const Arch& a = ctx.a;
  const int dh = a.dh, d = a.d, ch = ctx.ch, cg = ctx.ch / (a.H / a.n_kv);
  const QkvMaps maps = qkv_maps(ctx.model, ctx.cl);
  std::vector<double> Gq(size_t(dh) * dh), Gk(size_t(dh) * dh);
  for (int i = 0; i < dh; i++)
    for (int j = 0; j < dh; j++) {
      double sq = 0, sk = 0;
      for (int c = 0; c < d; c++) {
        sq += double(maps.Wq[size_t(ch * dh + i) * d + c]) * maps.Wq[size_t(ch * dh + j) * d + c];
        sk += double(maps.Wk[size_t(cg * dh + i) * d + c]) * maps.Wk[size_t(cg * dh + j) * d + c];
      }
      Gq[size_t(i) * dh + j] = sq, Gk[size_t(i) * dh + j] = sk;
    }
  auto norm2 = [&](const std::vector<double>& A) {
    std::vector<double> GA(size_t(dh) * dh, 0), AG(size_t(dh) * dh, 0);
    for (int i = 0; i < dh; i++)
      for (int k = 0; k < dh; k++)
        for (int j = 0; j < dh; j++) {
          GA[size_t(i) * dh + j] += Gq[size_t(i) * dh + k] * A[size_t(k) * dh + j];
          AG[size_t(i) * dh + j] += A[size_t(i) * dh + k] * Gk[size_t(k) * dh + j];
        }
    double tr = 0;
    for (size_t i = 0; i < GA.size(); i++) tr += GA[i] * AG[i];
    return tr;
  };
  std::vector<double> I(size_t(dh) * dh, 0);
  for (int i = 0; i < dh; i++) I[size_t(i) * dh + i] = 1;
  const double base = std::sqrt(std::max(0.0, norm2(I)));
  std::string moves;
  double at1 = 0;
  for (int delta : {1, 4, 16, 64}) {
    if (delta >= a.n_ctx) break;
    std::vector<double> A(size_t(dh) * dh, 0);  // R_Δ − I: each basis vector rotated to position Δ
    for (int j = 0; j < dh; j++) {
      std::vector<float> e(size_t(dh), 0.0f);
      e[size_t(j)] = 1;
      apply_rotary(a, e.data(), 1, &delta);
      for (int i = 0; i < dh; i++) A[size_t(i) * dh + j] = double(e[size_t(i)]) - (i == j ? 1.0 : 0.0);
    }
    const double rel = base > 0 ? std::sqrt(std::max(0.0, norm2(A))) / base : 0;
    if (delta == 1) at1 = rel;
    b.m("delta_" + std::to_string(delta), rel);
    moves += (moves.empty() ? "" : ", ") + std::string("Δ=") + std::to_string(delta) + ": " + num(rel);
  }
  const bool held = at1 >= kCircuitMoves;
  return b.done(held,
                "head " + ctx.chosen + ": ‖W_Qᵀ(R_Δ − I)W_K‖/‖W_Qᵀ W_K‖ (factored, no d×d matrix) — " + moves,
                "holds when it is already ≥ " + num(kCircuitMoves) +
                    " at Δ = 1: W_Q W_Kᵀ alone is not the whole QK circuit",
                held ? "" : "the rotation barely moves this head's QK circuit at Δ = 1");
}

std::optional<std::string> grouped_only(const Arch& a) {
  if (a.n_kv < a.H) return std::nullopt;
  return std::string("multi-head attention: every head has its own W_K and W_V");
}

// Two heads of the chosen head's KV group: each one's z is its own pattern times the group's ONE set of
// values (the forward reads the shared lens, not a per-head one), while their queries and patterns differ.
Claim gqa_shared_kv(TourContext& ctx, Builder b) {
  const Arch& a = ctx.a;
  const int T = ctx.r.T, dh = a.dh, G = a.H / a.n_kv, cg = ctx.ch / G, h0 = cg * G, h1 = h0 + 1, cl = ctx.cl;
  const Tensor& P = ctx.text(cl, "attn.hook_pattern");
  const std::vector<float> v = ctx.head_rows(cl, "attn.hook_v", cg);
  const std::string qn = a.rotary() ? "attn.hook_rot_q" : "attn.hook_q";
  const std::vector<float> q0 = ctx.head_rows(cl, qn, h0), q1 = ctx.head_rows(cl, qn, h1);
  double zerr = 0, zmax = 0, qdiff = 0, pdiff = 0;
  for (int h : {h0, h1}) {
    const std::vector<float> z = ctx.head_rows(cl, "attn.hook_z", h);
    for (int i = 0; i < T; i++)
      for (int e = 0; e < dh; e++) {
        double s = 0;
        for (int j = 0; j < T; j++) s += double(P.at(h, i, j)) * v[size_t(j) * dh + e];
        zerr = std::max(zerr, std::abs(s - z[size_t(i) * dh + e]));
        zmax = std::max(zmax, double(std::abs(z[size_t(i) * dh + e])));
      }
  }
  for (size_t i = 0; i < q0.size(); i++) qdiff = std::max(qdiff, double(std::abs(q0[i] - q1[i])));
  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++) pdiff = std::max(pdiff, double(std::abs(P.at(h0, i, j) - P.at(h1, i, j))));
  const double zrel = zerr / std::max(1e-30, zmax);
  b.m("groups", a.n_kv)
      .m("heads_per_group", G)
      .m("shared_value_rel_err", zrel)
      .m("query_max_abs_diff", qdiff);
  b.m("pattern_max_abs_diff", pdiff);
  const bool held = zrel <= 1e-5 && qdiff > 0 && pdiff > 0;
  return b.done(
      held,
      std::to_string(a.n_kv) + " key/value heads for " + std::to_string(a.H) + " query heads: heads " +
          head_name(cl, h0) + " and " + head_name(cl, h1) + " both read KV head " + std::to_string(cg) +
          " (each z = its pattern × the group's one v, to " + sci(zrel) +
          " of max |z|) while their queries differ by up to " + num(qdiff) + " and their patterns by " +
          num(pdiff) + "; a group's K- or V-composition is one number for all its heads",
      "holds when both heads' z are their own pattern times the shared values (≤ 1e-5 of max |z|) and their "
      "queries and patterns differ (> 0)",
      held ? "" : "the heads of one group do not read one shared value lens, or they are identical");
}

// Feed the tokens one at a time, each run extending a K/V cache, and compare every step's logits with the
// full forward's row: under the causal mask no earlier K or V depends on a later token.
Claim kv_cache_exact(TourContext& ctx, Builder b) {
  const Tensor& full = ctx.logits();
  const std::vector<int>& ids = ctx.o.text_ids;
  const int T = ctx.r.T, V = ctx.a.vocab_size;
  KvCache kc;
  RunState st;
  RunOptions ro;
  ro.cache = &kc;
  double err = 0, scale = 0;
  for (int t = 0; t < T; t++) {
    const std::vector<float>& lg = run(ctx.model, {ids[size_t(t)]}, st, ro);
    for (int v = 0; v < V; v++) {
      err = std::max(err, double(std::abs(lg[size_t(v)] - full[int64_t(t) * V + v])));
      scale = std::max(scale, double(std::abs(full[int64_t(t) * V + v])));
    }
  }
  const double rel = scale > 0 ? err / scale : err;
  const bool held = rel <= kCacheRel;
  return b.m("steps", T)
      .m("logits_max_abs_diff", err)
      .m("logits_rel_diff", rel)
      .done(held,
            std::to_string(T) +
                " tokens fed one at a time, each step reading the cached keys and values of the earlier "
                "ones: every step's logits equal the full forward's row to " +
                num(rel) + " (relative)",
            "holds when max |cached − full| ≤ " + num(kCacheRel) +
                " of the largest logit (float sums in another order, nothing else)",
            held ? "" : "the cached run does not reproduce the full forward");
}

}  // namespace

std::vector<ClaimUnit> position_claims() {
  return {
      {"rope_relative", "issue 15", "With rotary positions the score depends on i − j, not on i and j.",
       rotary_only, rope_relative},
      {"qk_circuit_position_dependent", "issue 15",
       "The score is x_i W_Q W_Kᵀ x_jᵀ — with rotary it is x_i W_Q R_(j−i) W_Kᵀ x_jᵀ: the QK circuit moves "
       "with the offset.",
       rotary_only, qk_circuit_position_dependent},
      {"gqa_shared_kv", "issue 15",
       "Each head has its own W_K and W_V — false under grouped-query attention: a group shares one key and "
       "value lens.",
       grouped_only, gqa_shared_kv},
      {"kv_cache_exact", "seed 000",
       "Nothing is stored; all three are worked out on the spot — and under the causal mask no earlier row's "
       "K or V "
       "depends on a later token, so a K/V cache is exact.",
       nullptr, kv_cache_exact},
  };
}

}  // namespace qkv::analysis::detail

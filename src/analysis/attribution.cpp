// Direct logit attribution and the logit lens (attribution.hpp), read from one hooked forward.
#include "qkv/analysis/attribution.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "qkv/analysis/patching.hpp"
#include "qkv/error.hpp"

namespace qkv::analysis {
namespace {

// Row `id` of the unembedding W_U as fp32 [d] (lm_head, or the embedding when tied).
std::vector<double> unembed_row(const Model& m, int id) {
  const Weight& W = m.lm_head.present() ? m.lm_head : m.wte;
  const int d = m.arch.d, V = m.arch.vocab_size;
  std::vector<float> r(static_cast<size_t>(d));
  if (!W.in_out) {
    W.read(int64_t(id) * d, d, r.data());
  } else {  // [d, V]
    for (int j = 0; j < d; j++) W.read(int64_t(j) * V + id, 1, &r[size_t(j)]);
  }
  return {r.begin(), r.end()};
}

// The final norm's gain γ (1 + w for Gemma's norm) and bias β (zeros when absent), in double.
void final_norm_params(const Model& m, std::vector<double>& g, std::vector<double>& b) {
  const int d = m.arch.d;
  std::vector<float> w(static_cast<size_t>(d)), bb(static_cast<size_t>(d), 0.0f);
  m.lnf_w.read(0, d, w.data());
  if (m.lnf_b.present()) m.lnf_b.read(0, d, bb.data());
  g.assign(w.begin(), w.end());
  if (m.arch.norm == NormKind::RMSNormPlusOne)
    for (auto& x : g) x += 1.0;
  b.assign(bb.begin(), bb.end());
}

// 1/σ (LayerNorm) or 1/rms (RMSNorm) of x [d], and its mean (0 for RMSNorm), in double.
std::pair<double, double> norm_stats(const Arch& a, const float* x) {
  const int d = a.d;
  double mu = 0;
  if (a.norm == NormKind::LayerNorm) {
    for (int j = 0; j < d; j++) mu += x[j];
    mu /= d;
  }
  double v = 0;
  for (int j = 0; j < d; j++) v += (x[j] - mu) * (x[j] - mu);
  return {1.0 / std::sqrt(v / d + a.norm_eps), mu};
}

// The final norm as the lens applies it: gain γ, bias β (used with LayerNorm), whether it centres.
struct FinalNorm {
  const std::vector<double>&g, &beta;
  bool centre;
};

// One row of the logit lens: the final norm (its own scale) and the unembedding applied to x [d].
// wall: W_U as stored [d, V] when it is stored so (else empty: rows of [V, d] are read per chunk).
LensRow lens_row(const Model& m, const FinalNorm& fn, const std::vector<float>& wall, int answer, int wrong,
                 const std::string& where, int layer, const float* x) {
  const Arch& a = m.arch;
  const int d = a.d, V = a.vocab_size;
  const Weight& W = m.lm_head.present() ? m.lm_head : m.wte;
  std::vector<float> logits(static_cast<size_t>(V));
  const auto [sc, mu] = norm_stats(a, x);
  std::vector<double> n(static_cast<size_t>(d));
  for (int j = 0; j < d; j++)
    n[size_t(j)] = (x[j] - mu) * sc * fn.g[size_t(j)] + (fn.centre ? fn.beta[size_t(j)] : 0.0);
  std::vector<float> scratch;
  constexpr int kRows = 1024;
  for (int v0 = 0; v0 < V; v0 += kRows) {
    const int nr = std::min(kRows, V - v0);
    const float* wr = W.in_out ? nullptr : W.f32(int64_t(v0) * d, int64_t(nr) * d, scratch);
    for (int i = 0; i < nr; i++) {
      double t = 0;
      for (int j = 0; j < d; j++)
        t += n[size_t(j)] * (wr ? wr[size_t(i) * d + j] : wall[size_t(j) * V + v0 + i]);
      if (a.final_softcap > 0) t = a.final_softcap * std::tanh(t / a.final_softcap);
      logits[size_t(v0 + i)] = float(t);
    }
  }
  LensRow lr;
  lr.where = where, lr.layer = layer;
  lr.logit_diff = double(logits[size_t(answer)]) - double(logits[size_t(wrong)]);
  lr.top_token = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
  lr.answer_rank = 1 + int(std::count_if(logits.begin(), logits.end(),
                                         [&](float v) { return v > logits[size_t(answer)]; }));
  return lr;
}

// "prefix" + n (+ "H" + h): appended piecewise (GCC 12's -Wrestrict misfires on chained operator+ at -O3).
std::string label(const char* prefix, int n, int h = -1) {
  std::string s(prefix);
  s += std::to_string(n);
  if (h >= 0) {
    s += 'H';
    s += std::to_string(h);
  }
  return s;
}

}  // namespace

AttributionResult attribute(const Model& m, const std::vector<int>& ids_in, int answer, int wrong,
                            int position) {
  const Arch& a = m.arch;
  const int T0 = int(ids_in.size()), V = a.vocab_size, d = a.d, L = a.n_layer, H = a.H, dh = a.dh;
  if (T0 < 1) usage_error("attribute: the input is empty");
  const int p = position < 0 ? T0 - 1 : position;
  if (p >= T0)
    usage_error("--position: " + std::to_string(p) + " is outside [0, " + std::to_string(T0) + ")");
  if (answer < 0 || answer >= V)
    usage_error("--answer: token " + std::to_string(answer) + " is outside the vocabulary [0, " +
                std::to_string(V) + ")");
  if (wrong < 0 || wrong >= V)
    usage_error("--wrong: token " + std::to_string(wrong) + " is outside the vocabulary [0, " +
                std::to_string(V) + ")");
  const std::vector<int> ids(ids_in.begin(), ids_in.begin() + p + 1);  // causal: later tokens do not matter
  AttributionResult r;
  r.position = p, r.answer = answer, r.wrong = wrong, r.T = T0;
  r.per_head = !a.post_norms;

  std::set<std::string> keep = {"blocks.0.hook_resid_pre"};
  for (int l = 0; l < L; l++) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    for (const char* s : {"attn.hook_z", "hook_attn_out", "hook_mlp_out", "hook_resid_post"})
      keep.insert(b + s);
  }
  const PatchedRun run = run_patched(
      m, ids, {}, [&](const std::string& n) { return keep.count(n) > 0; }, true);
  r.logit_diff = double(run.logits[size_t(answer)]) - double(run.logits[size_t(wrong)]);
  const auto row = [&](const std::string& name) { return run.acts.at(name).data() + size_t(p) * d; };

  // u = W_U[A] − W_U[B]; the frozen scale from the final residual.
  const std::vector<double> ua = unembed_row(m, answer), ub = unembed_row(m, wrong);
  std::vector<double> u(static_cast<size_t>(d)), g, beta;
  for (int j = 0; j < d; j++) u[size_t(j)] = ua[size_t(j)] - ub[size_t(j)];
  final_norm_params(m, g, beta);
  const float* xf = row("blocks." + std::to_string(L - 1) + ".hook_resid_post");
  const double s = norm_stats(a, xf).first;
  r.norm_scale = s;
  const bool centre = a.norm == NormKind::LayerNorm;
  // A part c's share: ((c − mean(c))·s ⊙ γ)·u  (no centring for RMSNorm).
  auto share = [&](const double* c) {
    double mu = 0;
    if (centre) {
      for (int j = 0; j < d; j++) mu += c[j];
      mu /= d;
    }
    double t = 0;
    for (int j = 0; j < d; j++) t += (c[j] - mu) * s * g[size_t(j)] * u[size_t(j)];
    return t;
  };
  auto add = [&](std::string name, std::string kind, int layer, int head, const double* c) {
    r.terms.push_back({std::move(name), std::move(kind), layer, head, share(c)});
  };
  std::vector<double> c(static_cast<size_t>(d));
  auto from = [&](const float* x) {
    for (int j = 0; j < d; j++) c[size_t(j)] = x[j];
    return c.data();
  };
  add("embed", "embed", -1, -1, from(row("blocks.0.hook_resid_pre")));
  std::vector<float> wo;
  for (int l = 0; l < L; l++) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    const float* att = row(b + "hook_attn_out");
    if (r.per_head) {
      const BlockWeights& w = m.blocks[size_t(l)];
      const int qd = a.q_dim();
      wo.resize(size_t(qd) * d);
      w.wo.read(0, int64_t(qd) * d, wo.data());
      const float* z = row(b + "attn.hook_z");  // [H, dh] at position p (hook_z is [T, H, dh])
      std::vector<double> sum(static_cast<size_t>(d), 0.0);
      for (int h = 0; h < H; h++) {
        // c = z_h · W_O[h·dh:(h+1)·dh, :]   (W_O stored [qd, d] (Conv1D) or [d, qd] (Linear))
        std::fill(c.begin(), c.end(), 0.0);
        for (int e = 0; e < dh; e++) {
          const double ze = z[size_t(h) * dh + e];
          const int i = h * dh + e;
          for (int j = 0; j < d; j++)
            c[size_t(j)] += ze * (w.wo.in_out ? wo[size_t(i) * d + j] : wo[size_t(j) * qd + i]);
        }
        for (int j = 0; j < d; j++) sum[size_t(j)] += c[size_t(j)];
        add(label("L", l, h), "head", l, h, c.data());
      }
      if (w.bo.present()) {
        std::vector<float> bo(static_cast<size_t>(d));
        w.bo.read(0, d, bo.data());
        for (int j = 0; j < d; j++) sum[size_t(j)] += bo[size_t(j)];
        add(label("attn_bias L", l), "attn_bias", l, -1, from(bo.data()));
      }
      for (int j = 0; j < d; j++)
        r.heads_vs_attn_out_max_abs =
            std::max(r.heads_vs_attn_out_max_abs, std::fabs(sum[size_t(j)] - att[j]));
    } else {
      add(label("attn L", l), "attn", l, -1, from(att));
    }
    if (!a.attn_only()) add(label("mlp L", l), "mlp", l, -1, from(row(b + "hook_mlp_out")));
  }
  double nb = 0;
  for (int j = 0; j < d; j++) nb += beta[size_t(j)] * u[size_t(j)];
  if (centre && m.lnf_b.present()) r.terms.push_back({"ln_final bias", "norm_bias", -1, -1, nb});
  for (const auto& t : r.terms) r.sum_terms += t.value;
  r.sum_minus_logit_diff = r.sum_terms - r.logit_diff;
  if (!r.per_head)
    r.note =
        "post-attention norm (Gemma 2): a head's output passes a norm before the residual, so the split is "
        "per "
        "attention layer, not per head";
  if (a.final_softcap > 0) {
    r.note += std::string(r.note.empty() ? "" : "; ") +
              "final soft-cap: the terms add up to the logit difference BEFORE the cap";
    r.sum_minus_logit_diff = std::nan("");
  }

  // Logit lens: the final norm (its own scale) and the unembedding applied to the residual after each layer.
  const Weight& W = m.lm_head.present() ? m.lm_head : m.wte;
  std::vector<float> wall;  // W_U stored [d, V] (Conv1D): read once
  if (W.in_out) {
    wall.resize(size_t(d) * V);
    W.read(0, int64_t(d) * V, wall.data());
  }
  const FinalNorm fn{g, beta, centre};
  r.lens.push_back(lens_row(m, fn, wall, answer, wrong, "embed", -1, row("blocks.0.hook_resid_pre")));
  for (int l = 0; l < L; l++) {
    const std::string n = "blocks." + std::to_string(l) + ".hook_resid_post";
    r.lens.push_back(lens_row(m, fn, wall, answer, wrong, n, l, row(n)));
  }
  return r;
}

}  // namespace qkv::analysis

// qkv quant-effect --model A.gguf --reference B — how much quantization bends the lenses: per layer and
// head, the relative error of q, k, v, the scores S and the pattern A of a quantized model against its
// unquantized reference on the same tokens, and the KL divergence of the next-token distributions.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/lm.hpp"
#include "qkv/report/svg.hpp"
#include "qkv/report/table.hpp"

namespace qkv::cli {
namespace {

const char* const kQuantities[] = {"q", "k", "v", "scores", "pattern"};
const char* const kHooks[] = {"attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores",
                              "attn.hook_pattern"};

// ‖a − b‖ / ‖b‖ over head h's entries: [T, H, dh] tensors (q, k, v) or [H, T, T] (scores, pattern; the
// masked −inf entries above the diagonal are skipped). 0 when both are 0.
double rel_error(const Tensor& a, const Tensor& b, int h, bool heads_first) {
  double num = 0, den = 0;
  auto add = [&](size_t i) {
    const double x = a.data()[i], y = b.data()[i];
    if (!std::isfinite(x) || !std::isfinite(y)) return;
    num += (x - y) * (x - y);
    den += y * y;
  };
  if (heads_first) {
    const int64_t TT = b.dim(1) * b.dim(2);
    for (int64_t i = 0; i < TT; ++i) add(size_t(h * TT + i));
  } else {
    const int64_t T = b.dim(0), H = b.dim(1), dh = b.dim(2);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < dh; ++j) add(size_t((t * H + h) * dh + j));
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

// KL(p_ref ‖ p_quant) of the softmax of two logit rows, in nats, in double.
double kl_row(const float* ref, const float* q, int V) {
  double mr = -INFINITY, mq = -INFINITY;
  for (int i = 0; i < V; ++i) mr = std::max(mr, double(ref[i])), mq = std::max(mq, double(q[i]));
  double zr = 0, zq = 0;
  for (int i = 0; i < V; ++i) zr += std::exp(double(ref[i]) - mr), zq += std::exp(double(q[i]) - mq);
  double kl = 0;
  for (int i = 0; i < V; ++i) {
    const double lr = double(ref[i]) - mr - std::log(zr), lq = double(q[i]) - mq - std::log(zq);
    kl += std::exp(lr) * (lr - lq);
  }
  return std::max(0.0, kl);
}

void run_quant_effect(const ModelArgs& a, const std::string& reference, const std::string& svg, bool json) {
  if (reference.empty()) usage_error("--reference is required: the unquantized model to compare against");
  // Any family, through the one hooked forward (for GPT-2 its trace is bit-identical to forward()'s).
  const LoadedLM m = load_lm_arg(a);
  const Model ref = load_lm(reference);
  const Arch &c = m.model.arch, &r = ref.arch;
  if (c.n_layer != r.n_layer || c.H != r.H || c.n_kv != r.n_kv || c.dh != r.dh || c.d != r.d ||
      c.vocab_size != r.vocab_size || c.attn_only() != r.attn_only() || c.rotary() != r.rotary())
    usage_error("--reference " + reference + " has another shape than " + m.path +
                " (layers, heads, key/value heads, head size, width, vocabulary)");
  const std::vector<int> ids =
      input_ids(m, a, "The quick brown fox jumps over the lazy dog because the dog was lazy.");
  if (int(ids.size()) > r.n_ctx)
    usage_error("the input is " + std::to_string(ids.size()) + " tokens but --reference has " +
                std::to_string(r.n_ctx) + " positions");
  auto keep = [](const std::string& n) {
    for (const char* h : kHooks)
      if (n.size() > std::strlen(h) && n.compare(n.size() - std::strlen(h), std::strlen(h), h) == 0)
        return true;
    return false;
  };
  const std::map<std::string, Tensor> tq = run_with_cache(m.model, ids, keep),
                                      tr = run_with_cache(ref, ids, keep);
  const int L = c.n_layer, H = c.H, G = c.H / c.n_kv, T = int(ids.size()), V = c.vocab_size;
  // err[k][l][h]; k and v of a grouped-query model: the key/value head query head h reads (h / G)
  std::vector<std::vector<std::vector<double>>> err(
      5, std::vector<std::vector<double>>(size_t(L), std::vector<double>(size_t(H))));
  for (int l = 0; l < L; ++l)
    for (int k = 0; k < 5; ++k) {
      const std::string hook = "blocks." + std::to_string(l) + "." + kHooks[k];
      const Tensor& x = tq.at(hook);
      const Tensor& y = tr.at(hook);
      for (int h = 0; h < H; ++h)
        err[size_t(k)][size_t(l)][size_t(h)] = rel_error(x, y, (k == 1 || k == 2) ? h / G : h, k >= 3);
    }
  const Tensor& lq = tq.at("logits");
  const Tensor& lr = tr.at("logits");
  std::vector<double> kl(static_cast<size_t>(T));
  double kl_mean = 0;
  for (int t = 0; t < T; ++t) {
    kl[size_t(t)] = kl_row(lr.data() + size_t(t) * size_t(V), lq.data() + size_t(t) * size_t(V), V);
    kl_mean += kl[size_t(t)] / T;
  }

  if (!svg.empty()) {
    report::GridSpec g;
    g.title = std::filesystem::path(m.path).filename().string() + " vs " +
              std::filesystem::path(reference).filename().string() +
              ": relative error per head (rows layers, columns heads)";
    g.cols = 5;
    g.value_label = "‖x̂ − x‖ / ‖x‖";
    g.scale = report::ColorScale::Sequential;
    g.vmin = 0;
    for (int k = 0; k < 5; ++k) {
      report::HeatmapSpec p;
      p.set_values(err[size_t(k)]);
      p.title = std::string(kQuantities[k]) + (k == 3 ? " S" : k == 4 ? " A" : "");
      p.row_title = "layer";
      p.col_title = "head";
      g.panels.push_back(p);
    }
    double top = 0;
    for (const auto& e : err)
      for (const auto& row : e)
        for (double v : row)
          if (std::isfinite(v)) top = std::max(top, v);
    g.vmax = top > 0 ? top : 1;
    io::write_file_atomic(svg, report::grid_svg(g));
  }

  if (json) {
    nlohmann::json heads = nlohmann::json::array();
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        nlohmann::json e = {{"layer", l}, {"head", h}};
        for (int k = 0; k < 5; ++k) e[kQuantities[k]] = err[size_t(k)][size_t(l)][size_t(h)];
        heads.push_back(e);
      }
    print_json({{"model", m.model.source},
                {"reference", ref.source},
                {"grouped_query", G > 1},
                {"tokens", ids},
                {"heads", heads},
                {"kl_next_token", {{"mean", kl_mean}, {"last", kl.back()}, {"per_position", kl}}},
                {"svg", svg.empty() ? nlohmann::json(nullptr) : nlohmann::json(svg)}});
    return;
  }
  std::cout << "model      " << m.model.source << "\nreference  " << ref.source << "\ntokens     " << T
            << "\n\nrelative error ‖x̂ − x‖ / ‖x‖ per head (x from the reference, x̂ from the model):\n";
  report::Table t({"layer", "head", "q", "k", "v", "scores", "pattern"});
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      std::vector<std::string> row = {std::to_string(l), std::to_string(h)};
      for (int k = 0; k < 5; ++k) row.push_back(report::fmt_num(err[size_t(k)][size_t(l)][size_t(h)], 3));
      t.add(row);
    }
  if (G > 1)
    std::cout << "(grouped-query attention: the k and v columns are those of the key/value head each query "
                 "head reads, "
              << G << " query heads per key/value head)\n";
  std::cout << t.str() << "\nKL(reference ‖ model) of the next-token distribution: mean "
            << report::fmt_num(kl_mean, 3) << " nats over " << T << " positions, last position "
            << report::fmt_num(kl.back(), 3) << " nats\n";
  if (!svg.empty()) std::cout << "wrote " << svg << "\n";
}

}  // namespace

void register_quant_effect(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "quant-effect",
      "How far quantization moves q, k, v, the scores and the patterns of every head, and the next-token KL");
  auto a = std::make_shared<ModelArgs>();
  auto reference = std::make_shared<std::string>();
  auto svg = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  add_model_option(cmd, *a);
  add_input_options(cmd, *a);
  cmd->add_option("--reference", *reference, "the unquantized model (any format, same shape)")->required();
  cmd->add_option("--svg", *svg, "write the layer × head heatmaps of the five relative errors here");
  cmd->add_flag("--json", *json, "JSON output");
  cmd->callback([=] { run_quant_effect(*a, *reference, *svg, *json); });
}

QKV_COMMAND(28, register_quant_effect);

}  // namespace qkv::cli

// qkv project | scores | swap | heads | circuits | ablate — the seeds' claims about Q, K and V as
// experiments on a model. Each command parses, calls one analysis function, and renders its struct.
#include <algorithm>
#include <iostream>
#include <sstream>

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/analysis/ablate.hpp"
#include "qkv/analysis/circuits.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/head_weights.hpp"
#include "qkv/analysis/projections.hpp"
#include "qkv/analysis/scores.hpp"
#include "qkv/analysis/swap.hpp"
#include "qkv/error.hpp"
#include "qkv/model_files.hpp"
#include "qkv/report/experiments_json.hpp"
#include "qkv/report/table.hpp"

namespace qkv::cli {
namespace {

using report::fmt;
using report::fmt_sci;
namespace an = qkv::analysis;

struct ExpArgs {
  ModelArgs m;
  int layer = 0, head = 0;
  bool json = false;
};

void add_common(CLI::App* cmd, ExpArgs& a, bool input, bool layer, bool head) {
  add_model_option(cmd, a.m);
  if (input) add_input_options(cmd, a.m);
  if (layer) cmd->add_option("--layer", a.layer, "block index, from 0");
  if (head) cmd->add_option("--head", a.head, "head index within the block, from 0");
  cmd->add_flag("--json", a.json, "JSON output");
}

std::string labels_at(const std::vector<std::string>& labels, int i) {
  return "'" + labels[size_t(i)] + "' (" + std::to_string(i) + ")";
}

// The tokens an experiment reads: --tokens, --text, else report::experiment_ids's default (checked
// against the model by input_ids when it comes from the tokenizer).
std::vector<int> experiment_ids(const LoadedLM& lm, const ModelArgs& a) {
  if (!a.tokens.empty() || !a.text.empty() || lm.tokenizer) return input_ids(lm, a, report::kExperimentText);
  return report::experiment_ids(lm.model.arch, nullptr, {});
}

std::string family_line(const Arch& c) {
  return c.model_type + ": " + std::to_string(c.n_layer) + " layer(s), " + std::to_string(c.H) + " query heads / " +
         std::to_string(c.n_kv) + " key-value heads of " + std::to_string(c.dh) + ", d = " + std::to_string(c.d) +
         (c.rotary() ? ", rotary positions (rotary_dim " + std::to_string(c.rotary_dim) + ")" : ", learned positions");
}

// ---- project ---------------------------------------------------------------------------------------

// Where Q, K and V are stored, in the seed's words for GPT-2's fused c_attn (cut into thirds, then heads).
std::string stored_line(const Model& m, const an::ProjectionResult& r) {
  const Arch& c = m.arch;
  const BlockWeights& b = m.blocks[size_t(r.layer)];
  const Weight& w = c.qkv_layout == QkvLayout::Separate ? b.wq : b.wqkv;
  const std::string d = std::to_string(r.d);
  if (c.qkv_layout == QkvLayout::Gpt2Thirds)
    return w.name + " " + shape_string(r.weight_shape) + " -> 3 × [" + d + ", " + d + "] -> " +
           std::to_string(r.H) + " heads × " + std::to_string(r.dh) + " each; bias " +
           shape_string(r.bias_shape) + " -> 3 × [" + d + "]";
  return "layer " + std::to_string(r.layer) + ": " + r.layout + ", " + w.name + " " +
         shape_string(r.weight_shape) +
         (r.has_bias ? "; bias " + shape_string(r.bias_shape) : std::string("; no Q/K/V biases")) +
         " -> W_Q [" + std::to_string(c.q_dim()) + ", " + d + "], W_K and W_V [" +
         std::to_string(c.kv_dim()) + ", " + d + "] (nn.Linear layout)";
}

void run_project(const ExpArgs& a) {
  const LoadedLM lm = load_lm_arg(a.m);
  an::check_layer(lm.model, a.layer);
  const auto ids = experiment_ids(lm, a.m);
  const an::ProjectionResult r = an::project(lm.model, ids, a.layer);
  if (a.json) {
    print_json(report::project_json(r));
    return;
  }
  std::cout << family_line(lm.model.arch) << "\n"
            << stored_line(lm.model, r) << "\n"
            << "q, k, v = " << r.norm
            << "(x)·W + b computed here (the model's own maps, own norm, plain loops) for " << r.T
            << " tokens, against the forward's hook_q / hook_k / hook_v (before any rotation):\n\n";
  report::Table t({"", "max |own − model|", "max |model|", "raw row instead of " + r.norm + ": ‖err‖/‖q‖",
                   "bias dropped: ‖err‖/‖q‖", "‖b‖"});
  const char* names[3] = {"q", "k", "v"};
  const an::ProjectionPart* parts[3] = {&r.q, &r.k, &r.v};
  for (int i = 0; i < 3; i++)
    t.add({names[i], fmt_sci(parts[i]->max_abs_diff), fmt(parts[i]->max_abs, 3),
           fmt(parts[i]->ln_trap_rel, 3), r.has_bias ? fmt(parts[i]->bias_trap_rel, 3) : "n/a (no bias)",
           r.has_bias ? fmt(parts[i]->bias_norm, 3) : "-"});
  std::cout << t.str() << "\n"
            << r.norm << " computed here vs the model's: max |diff| " << fmt_sci(r.ln_max_abs_diff)
            << "\nhead h = columns [h·" << r.dh << ", (h+1)·" << r.dh << ") of each map (k, v: " << r.n_kv
            << " heads): max |diff| " << fmt_sci(r.heads_max_abs_diff)
            << "  (a wrong cut, heads interleaved: relative error " << fmt(r.interleaved_cut_rel, 3) << ")\n";
}

// ---- scores ----------------------------------------------------------------------------------------

void print_scores(const an::ScoresResult& r, const std::vector<std::string>& labels) {
  report::Table t({"measure", "value"});
  t.add({"‖S − Sᵀ‖_F / ‖S‖_F", fmt(r.asym_rel, 4)});
  t.add({"largest |S_ij − S_ji|", fmt(r.max_asym, 4)});
  t.add({"‖M‖_F, M = W_Q W_Kᵀ [" + std::to_string(r.d) + "×" + std::to_string(r.d) + "] (from the factors" +
             (r.rotated ? "; offset 0, R_0 = I" : "") + ")",
         fmt(r.M.norm, 4)});
  t.add({"antisymmetric share ‖M − Mᵀ‖/(2‖M‖)  (random M: ≈ 0.71, symmetric: 0)", fmt(r.M.antisym_share, 4)});
  const std::string R = r.rotated ? "R" : "";
  t.add({"x-x part " + R + "(uW_Q)·" + R + "(uW_K): ‖·‖/‖S‖", fmt(r.share_xx, 4)});
  t.add({"x-b part " + R + "(uW_Q)·" + R + "b_K: ‖·‖/‖S‖" + (r.rotated ? "" : "  (constant along a row)"), fmt(r.share_xb, 4)});
  t.add({"b-x part " + R + "b_Q·" + R + "(uW_K): ‖·‖/‖S‖", fmt(r.share_bx, 4)});
  t.add({"b-b part " + R + "b_Q·" + R + "b_K: ‖·‖/‖S‖" + (r.rotated ? "" : "  (constant)"), fmt(r.share_bb, 4)});
  t.add({"all bias terms: ‖S − x-x‖/‖S‖", fmt(r.bias_share, 4)});
  t.add({"bias share the softmax sees (row-centred, visible keys)", fmt(r.bias_share_softmax, 4)});
  t.add({"max |x-x + x-b + b-x + b-b − S_model|", fmt_sci(r.reconstruction_max_abs)});
  t.add({"max |S − hook_attn_scores| (visible keys, soft-cap applied)", fmt_sci(r.S_vs_hook_max_abs)});
  std::cout << t.str();
  if (r.T > 1)
    std::cout << "\nlargest asymmetry at i = " << labels_at(labels, r.max_i) << ", j = " << labels_at(labels, r.max_j)
              << ": S_ij = " << fmt(r.S_ij, 3) << ", S_ji = " << fmt(r.S_ji, 3) << "\n";
}

void run_scores(const ExpArgs& a) {
  const LoadedLM lm = load_lm_arg(a.m);
  const Arch& c = lm.model.arch;
  an::check_head(lm.model, a.layer, a.head);
  const auto ids = experiment_ids(lm, a.m);
  const auto labels = token_labels(lm, ids);
  const an::ScoresResult r = an::score_asymmetry(lm.model, ids, a.layer, a.head);
  if (a.json) {
    print_json(report::scores_json(r, labels));
    return;
  }
  std::cout << family_line(c) << "\nlayer " << r.layer << ", head " << r.head << " (reads key/value head " << r.kv_head
            << "): raw scores S = " << fmt(r.scale, 4) << "·q·kᵀ"
            << (r.rotated ? " on the ROTATED q and k (R_i q_i)·(R_j k_j) (hook_rot_q / hook_rot_k)" : "")
            << ", before " << (c.attn_softcap > 0 ? "the soft-cap, " : "") << "the mask and the softmax, " << r.T
            << " tokens\n\n";
  print_scores(r, labels);
}

// ---- swap ------------------------------------------------------------------------------------------

void run_swap(const ExpArgs& a) {
  const LoadedLM lm = load_lm_arg(a.m);
  const Arch& c = lm.model.arch;
  an::check_head(lm.model, a.layer, a.head);
  const auto ids = experiment_ids(lm, a.m);
  const an::SwapResult r = an::swap_query_key(lm.model, ids, a.layer, a.head);
  if (a.json) {
    print_json(report::swap_json(r));
    return;
  }
  std::cout << family_line(c) << "\nlayer " << r.layer << ", head " << r.head << ", " << r.T
            << " tokens; S = " << fmt(r.scale, 4) << "·q·kᵀ recomputed here from the model's own maps"
            << (r.rotated ? ", q and k ROTATED to their positions (a swap exchanges the maps; each row keeps "
                            "its position)"
                          : "")
            << " (max |S − model| " << fmt_sci(r.S_vs_model_max_abs) << ")\n\n";
  report::Table t({"swap", "compared with", "‖·‖_F / ‖S‖_F", "max |diff|"});
  t.add({std::string("Q ↔ K, matrix and bias") + (r.rotated ? " (rotated)" : ""), "Sᵀ", fmt_sci(r.full_vs_ST_rel),
         fmt_sci(r.full_vs_ST_max_abs)});
  t.add({"Q ↔ K, matrices only", "S", fmt(r.matrices_vs_S_rel, 4), ""});
  t.add({"Q ↔ K, matrices only", "Sᵀ", fmt(r.matrices_vs_ST_rel, 4), r.has_bias ? "" : "(no biases: = the full swap)"});
  t.add({"pattern of the full swap", "Aᵀ (A = softmax(mask(S)))", fmt(r.pattern_full_vs_AT_rel, 4), ""});
  t.add({"pattern of the full swap", "A", fmt(r.pattern_full_vs_A_rel, 4), ""});
  std::cout
      << t.str()
      << "\nThe full swap is an identity (the dot product commutes): it tests the slicing, not the model."
      << (r.has_bias
              ? ""
              : " This model has no Q/K biases, so swapping the matrices alone already is the full swap.")
      << " Rows of A sum to 1, columns do not (max |column sum − 1| = " << fmt(r.column_sum_max_dev, 3)
      << "), so no transpose survives the mask and the softmax.\n";
}

// ---- heads -----------------------------------------------------------------------------------------

struct HeadsArgs {
  ExpArgs e;
  int n = 0, batch = 4, bos = -1, top = 0;
  uint64_t seed = 0;
  std::string sort = "induction";
};

using report::repeated_length;

void run_heads(const HeadsArgs& a) {
  const LoadedLM lm = load_lm_arg(a.e.m);
  const Arch& c = lm.model.arch;
  const int n = repeated_length(c, a.n, a.bos, 1);
  std::vector<int> text;
  if (!a.e.m.text.empty() || !a.e.m.tokens.empty()) text = input_ids(lm, a.e.m);
  const auto seqs = an::repeated_random_tokens(c.vocab_size, n, a.batch, a.seed, a.bos);
  an::HeadScan scan = an::scan_heads(lm.model, seqs, n, a.bos, text);
  auto key = [&](const an::HeadScores& s) {
    return a.sort == "previous" ? s.previous_token : a.sort == "duplicate" ? s.duplicate_token : s.induction;
  };
  std::vector<an::HeadScores> ranked = scan.heads;
  std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& x, const auto& y) { return key(x) > key(y); });
  if (a.e.json) {
    print_json(report::heads_json(scan, n, a.batch, a.seed, a.bos));
    return;
  }
  std::cout << family_line(c) << "; patterns from the forward's hook_pattern (its own mask"
            << (c.window.empty() ? "" : " and windows") << ")\n";
  std::cout
      << a.batch << " random sequences of " << n << " tokens, each repeated twice (seed " << a.seed
      << (a.bos >= 0 ? ", BOS " + std::to_string(a.bos) : std::string()) << ")"
      << (scan.has_text ? "; and the given text (" + std::to_string(scan.text_tokens) + " tokens)" : "")
      << ".\nprevious / duplicate: TransformerLens's detector (attention mass on the expected positions over "
         "the total); induction: mean of the pattern's (1 − n) diagonal on the repeated half; shifted: the "
         "(2 − n) diagonal, one token further on.\n\n";
  std::vector<std::string> header = {"layer.head",           "previous", "duplicate", "induction",
                                     "induction (detector)", "shifted"};
  if (scan.has_text)
    for (std::string h : {"text previous", "text duplicate", "text induction"}) header.push_back(h);
  report::Table t(header);
  const size_t shown = a.top > 0 ? std::min(ranked.size(), size_t(a.top)) : ranked.size();
  for (size_t i = 0; i < shown; i++) {
    const auto& s = ranked[i];
    std::vector<std::string> row = {std::to_string(s.layer) + "." + std::to_string(s.head), fmt(s.previous_token, 3),
                                    fmt(s.duplicate_token, 3), fmt(s.induction, 3), fmt(s.induction_detector, 3),
                                    fmt(s.induction_shifted, 3)};
    if (scan.has_text)
      for (double v : {s.text_previous_token, s.text_duplicate_token, s.text_induction}) row.push_back(fmt(v, 3));
    t.add(row);
  }
  std::cout << t.str();
}

// ---- ablate ----------------------------------------------------------------------------------------

void run_ablate(const HeadsArgs& a) {
  const LoadedLM lm = load_lm_arg(a.e.m);
  const Arch& c = lm.model.arch;
  an::check_head(lm.model, a.e.layer, a.e.head);
  const int n = repeated_length(c, a.n, a.bos, 2);
  const auto seqs = an::repeated_random_tokens(c.vocab_size, n, a.batch, a.seed, a.bos);
  const an::AblationResult r = an::ablate_head(lm.model, seqs, n, a.bos, a.e.layer, a.e.head);
  if (a.e.json) {
    print_json(report::ablate_json(r, a.seed));
    return;
  }
  std::cout
      << family_line(c) << "; edits through the forward's hooks: QK = the head's rows of "
      << "hook_pattern made uniform over its visible keys, OV = the head's slice of hook_z zeroed (z = A·v"
      << (c.n_kv < c.H ? "; the group's shared v stays for the other heads" : "") << ")\n";
  std::cout << "layer " << r.layer << ", head " << r.head << "; " << r.batch << " random sequences of " << r.n
            << " tokens repeated twice (seed " << a.seed << "). Loss: mean cross-entropy on the repeated half "
            << "(first half, intact: " << fmt(r.loss_first_half, 4) << ").\n\n";
  report::Table t({"head", "loss", "Δ vs intact", "its pattern vs intact (max |diff|)"});
  t.add({"intact", fmt(r.loss_intact, 4), "", "0"});
  t.add({"QK ablated: uniform pattern over j ≤ i", fmt(r.loss_qk, 4), fmt(r.loss_qk - r.loss_intact, 4),
         fmt_sci(r.qk_pattern_max_abs_diff)});
  t.add({"OV ablated: values zeroed (its z)", fmt(r.loss_ov, 4), fmt(r.loss_ov - r.loss_intact, 4),
         fmt_sci(r.ov_pattern_max_abs_diff) +
             (r.ov_pattern_max_abs_diff == 0 ? " (identical)" : " (CHANGED)")});
  std::cout << t.str() << "\nhooked forward without an edit vs the forward without hooks: max |Δ logits| "
            << fmt_sci(r.intact_vs_model_max_abs) << "\n";
}

// ---- circuits --------------------------------------------------------------------------------------

struct CircuitsArgs {
  ExpArgs e;
  an::CircuitsOptions o;
  bool no_fold = false;
  int top = 10;
};

void run_circuits(CircuitsArgs a) {
  a.o.fold_ln = !a.no_fold;
  const LoadedLM lm = load_lm_arg(a.e.m);
  const Arch& arch = lm.model.arch;
  const an::CircuitsResult r = an::circuits(lm.model, a.o);
  const an::CompositionBaseline& b = r.baseline;
  if (a.e.json) {
    print_json(report::circuits_json(r));
    return;
  }
  std::cout << family_line(arch) << "\nPer query head h ("
            << (r.options.fold_ln ? "the norms' multipliers folded in" : "raw weights")
            << "): QK = W_Q^h W_K^gᵀ"
            << (arch.rotary() ? " at offset 0 (with rotary it is W_Q^h R_Δ W_K^gᵀ: see qkv tour's "
                                "qk_circuit_position_dependent)"
                              : "")
            << ", OV = W_V^g W_O^h, g = h / " << arch.H / arch.n_kv
            << " its key/value head; both from [dh, dh] factors; copying = Σλ/Σ|λ| of W_E·OV·W_U (1 = copies "
               "the token it attends to).\n\n";
  report::Table t({"layer.head", "‖QK‖_F", "QK antisym share", "‖OV‖_F", "OV copying"});
  for (const auto& h : r.heads)
    t.add({std::to_string(h.layer) + "." + std::to_string(h.head), fmt(h.qk_norm, 3),
           fmt(h.qk_antisym_share, 3), fmt(h.ov_norm, 3), r.options.copying ? fmt(h.copying, 3) : "-"});
  std::cout << t.str();
  if (r.compositions.empty()) {
    std::cout << "\nOne layer: no compositions.\n";
    return;
  }
  std::cout << "\nComposition ‖left·right‖_F/(‖left‖_F‖right‖_F), left = the earlier head's OV; Q: right = QK, K: "
               "right = QKᵀ, V: right = OV. Random factors of the same shapes ("
            << b.samples << " samples): Q " << fmt(b.q_mean, 3) << " ± " << fmt(b.q_std, 3) << ", K "
            << fmt(b.k_mean, 3) << " ± " << fmt(b.k_std, 3) << ", V " << fmt(b.v_mean, 3) << " ± " << fmt(b.v_std, 3)
            << ".\n";
  const std::pair<const char*, double an::Composition::*> kinds[3] = {
      {"K", &an::Composition::k}, {"Q", &an::Composition::q}, {"V", &an::Composition::v}};
  const double means[3] = {b.k_mean, b.q_mean, b.v_mean};
  for (int i = 0; i < 3; i++) {
    auto sorted = r.compositions;
    const auto field = kinds[i].second;
    std::stable_sort(sorted.begin(), sorted.end(), [&](const auto& x, const auto& y) { return x.*field > y.*field; });
    std::cout << "\n" << kinds[i].first << "-composition, top " << std::min<size_t>(sorted.size(), size_t(a.top)) << ":\n";
    report::Table c({"from", "to", "score", "− baseline"});
    for (size_t j = 0; j < sorted.size() && j < size_t(a.top); j++)
      c.add({std::to_string(sorted[j].l1) + "." + std::to_string(sorted[j].h1),
             std::to_string(sorted[j].l2) + "." + std::to_string(sorted[j].h2), fmt(sorted[j].*field, 3),
             fmt(sorted[j].*field - means[i], 3)});
    std::cout << c.str();
  }
  if (!r.group_compositions.empty()) {
    auto sorted = r.group_compositions;
    std::cout << "\nGrouped-query attention: " << r.H << " query heads share " << r.n_kv
              << " key/value lenses, so an earlier head's write into a group's key or value lens is ONE "
                 "number per group: "
                 "‖OV1·W_K^g‖/(‖OV1‖‖W_K^g‖) (K) and the same with W_V^g (V); random factors: K "
              << fmt(b.kg_mean, 3) << " ± " << fmt(b.kg_std, 3) << ", V " << fmt(b.vg_mean, 3) << " ± " << fmt(b.vg_std, 3)
              << ".\n";
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.k > y.k; });
    report::Table c({"from", "into group", "K (group)", "V (group)"});
    for (size_t j = 0; j < sorted.size() && j < size_t(a.top); j++)
      c.add({std::to_string(sorted[j].l1) + "." + std::to_string(sorted[j].h1),
             std::to_string(sorted[j].l2) + ".kv" + std::to_string(sorted[j].g2), fmt(sorted[j].k, 3), fmt(sorted[j].v, 3)});
    std::cout << c.str();
  }
}

}  // namespace

void register_experiments(CLI::App& app) {
  {
    auto* cmd = app.add_subcommand("project", "Seed 000's check: slice the Q/K/V weights (GPT-2's c_attn) yourself, reproduce q, k, v; the two traps");
    auto a = std::make_shared<ExpArgs>();
    add_common(cmd, *a, true, true, false);
    cmd->callback([a] { run_project(*a); });
  }
  {
    auto* cmd = app.add_subcommand("scores", "Raw scores S against Sᵀ, W_Q W_Kᵀ's antisymmetric share, the biases' share");
    auto a = std::make_shared<ExpArgs>();
    add_common(cmd, *a, true, true, true);
    cmd->callback([a] { run_scores(*a); });
  }
  {
    auto* cmd = app.add_subcommand("swap", "Swap the query and key maps: fully (Sᵀ), matrices only (neither), after softmax");
    auto a = std::make_shared<ExpArgs>();
    add_common(cmd, *a, true, true, true);
    cmd->callback([a] { run_swap(*a); });
  }
  {
    auto* cmd = app.add_subcommand("heads", "Previous-token, duplicate-token and induction scores of every head, ranked");
    auto a = std::make_shared<HeadsArgs>();
    add_common(cmd, a->e, true, false, false);
    cmd->add_option("--seq-len", a->n, "length of the random sequence that is repeated (default min(50, fits))");
    cmd->add_option("--batch", a->batch, "random sequences averaged over")->check(CLI::Range(1, 1000));
    cmd->add_option("--seed", a->seed, "random seed");
    cmd->add_option("--bos", a->bos, "prepend this token id (default: none)");
    cmd->add_option("--sort", a->sort, "rank by induction, previous or duplicate")
        ->check(CLI::IsMember({"induction", "previous", "duplicate"}));
    cmd->add_option("--top", a->top, "show only the best N heads (text output)")->check(CLI::Range(0, 1 << 20));
    cmd->callback([a] { run_heads(*a); });
  }
  {
    auto* cmd = app.add_subcommand("ablate", "Seed 003: a head's loss with its QK side (uniform pattern) or OV side (zero values) ablated");
    auto a = std::make_shared<HeadsArgs>();
    add_common(cmd, a->e, false, true, true);
    cmd->add_option("--seq-len", a->n, "length of the random sequence that is repeated (default min(50, fits))");
    cmd->add_option("--batch", a->batch, "random sequences averaged over")->check(CLI::Range(1, 1000));
    cmd->add_option("--seed", a->seed, "random seed");
    cmd->add_option("--bos", a->bos, "prepend this token id (default: none)");
    cmd->callback([a] { run_ablate(*a); });
  }
  {
    auto* cmd = app.add_subcommand("circuits", "QK and OV circuits per head, OV copying, Q/K/V-composition vs random");
    auto a = std::make_shared<CircuitsArgs>();
    add_common(cmd, a->e, false, false, false);
    cmd->add_flag("--no-fold-ln", a->no_fold, "use the raw weights (default: fold ln_1/ln_f weights in)");
    cmd->add_option("--samples", a->o.baseline_samples, "random baseline samples")->check(CLI::Range(0, 100000));
    cmd->add_option("--seed", a->o.seed, "baseline random seed");
    cmd->add_option("--top", a->top, "composition pairs shown per kind (text output)")->check(CLI::Range(1, 1 << 20));
    cmd->callback([a] { run_circuits(*a); });
  }
}

QKV_COMMAND(30, register_experiments);

}  // namespace qkv::cli

// qkv patch — activation patching over every layer × head (× position) of one hook (or, with
// --attribution, its first-order estimate from one backward), or path patching from a sender head into a
// receiver head's q/k/v: a table, --json, and an SVG heatmap.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <set>

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/attribution_patching.hpp"
#include "qkv/analysis/edge_attribution.hpp"
#include "qkv/analysis/patching.hpp"
#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/lm_grad.hpp"
#include "qkv/model_files.hpp"
#include "qkv/report/patch_json.hpp"
#include "qkv/report/svg.hpp"
#include "qkv/report/table.hpp"

namespace qkv::cli {

// A token argument: an id ("464") or a text that the model's tokenizer makes exactly one token.
int token_arg(const LoadedLM& m, const std::string& arg, const std::string& v) {
  if (v.empty()) usage_error(arg + ": empty");
  const bool digits = v.find_first_not_of("0123456789") == std::string::npos;
  int id = -1;
  if (digits && v.size() < 10) {
    id = std::stoi(v);
  } else {
    if (!m.tokenizer) usage_error(arg + ": '" + v + "' is not a token id and the model has no tokenizer");
    const auto ids = m.tokenizer->encode(v);
    if (ids.size() != 1)
      usage_error(arg + ": '" + v + "' is " + std::to_string(ids.size()) +
                  " tokens, not one (give a token id instead)");
    id = ids[0];
  }
  if (id < 0 || id >= m.model.arch.vocab_size)
    usage_error(arg + ": token " + std::to_string(id) + " is outside the vocabulary [0, " +
                std::to_string(m.model.arch.vocab_size) + ")");
  return id;
}

namespace {

namespace an = qkv::analysis;
using report::fmt;

struct PatchArgs {
  ModelArgs m;
  std::string clean, corrupt, clean_tokens, corrupt_tokens;
  int repeated = 0, bos = -2;
  uint64_t seed = 0;
  std::string answer, wrong, loss_positions;
  int position = -1;
  std::string hook, direction = "noising", path, svg;
  bool per_position = false, json = false, attribution = false, edges = false;
};

std::vector<int> ids_of(const LoadedLM& m, const std::string& targ, const std::string& text,
                        const std::string& karg, const std::string& tokens) {
  std::vector<int> ids;
  if (!tokens.empty()) {
    ids = parse_ints(karg, tokens);
  } else {
    if (!m.tokenizer)
      usage_error(m.path + " has no tokenizer beside it; give " + karg + " instead of " + targ);
    ids = m.tokenizer->encode(text);
    if (ids.empty()) usage_error(targ + ": the text is empty after tokenization");
  }
  const std::string arg = tokens.empty() ? targ : karg;
  for (size_t i = 0; i < ids.size(); i++)
    if (ids[i] < 0 || ids[i] >= m.model.arch.vocab_size)
      usage_error(arg + ": id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(m.model.arch.vocab_size) + ")");
  if (int(ids.size()) > m.model.arch.n_ctx)
    usage_error(arg + ": " + std::to_string(ids.size()) + " tokens but the model has " +
                std::to_string(m.model.arch.n_ctx) + " positions");
  return ids;
}

// "3,5,9-12" -> {3, 5, 9, 10, 11, 12}
std::vector<int> parse_positions(const std::string& arg, const std::string& s) {
  std::vector<int> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    const std::string part = s.substr(i, j - i);
    const size_t dash = part.find('-', 1);
    if (dash != std::string::npos) {
      const auto a = parse_ints(arg, part.substr(0, dash)), b = parse_ints(arg, part.substr(dash + 1));
      if (a[0] > b[0]) usage_error(arg + ": range '" + part + "' runs backwards");
      if (b[0] - a[0] > 1000000) usage_error(arg + ": range '" + part + "' is too long");
      for (int p = a[0]; p <= b[0]; p++) out.push_back(p);
    } else {
      out.push_back(parse_ints(arg, part)[0]);
    }
    i = j + 1;
  }
  return out;
}

std::string tok_label(const LoadedLM& m, int id) {
  return m.tokenizer ? token_label(*m.tokenizer, id) : "#" + std::to_string(id);
}

// The clean and corrupt inputs: --repeated's task (clean [bos] r r, corrupt with the first copy replaced),
// or the given texts / ids; equal lengths.
struct PatchInputs {
  std::vector<int> clean, corrupt;
  int rep_start = 0;  // --repeated: the first copy's position (1 after a BOS)
};

PatchInputs patch_inputs(const LoadedLM& m, const PatchArgs& a) {
  const Arch& arch = m.model.arch;
  PatchInputs in;
  std::vector<int>&clean = in.clean, &corrupt = in.corrupt;
  int& rep_start = in.rep_start;
  if (a.repeated > 0) {
    if (!a.clean.empty() || !a.corrupt.empty() || !a.clean_tokens.empty() || !a.corrupt_tokens.empty())
      usage_error(
          "--repeated: builds the clean and corrupt inputs itself; do not also give --clean/--corrupt");
    int bos = -1;
    if (a.bos >= -1)
      bos = a.bos;
    else if (m.tokenizer && m.tokenizer->vocab_size() > 0 &&
             m.tokenizer->token_string(m.tokenizer->vocab_size() - 1) == "<|endoftext|>")
      bos = m.tokenizer->vocab_size() - 1;
    if (bos >= arch.vocab_size) usage_error("--bos: " + std::to_string(bos) + " is outside the vocabulary");
    rep_start = bos >= 0 ? 1 : 0;
    if (rep_start + 2 * a.repeated > arch.n_ctx)
      usage_error("--repeated: " + std::to_string(a.repeated) + " repeated twice does not fit the model's " +
                  std::to_string(arch.n_ctx) + " positions");
    clean = an::repeated_random_tokens(arch.vocab_size, a.repeated, 1, a.seed, bos)[0];
    // corrupt: the FIRST copy replaced by other random tokens, the second copy (where the loss is read) kept
    const auto other = an::repeated_random_tokens(arch.vocab_size, a.repeated, 1, a.seed + 7919, bos)[0];
    corrupt = clean;
    for (int i = 0; i < a.repeated; i++) corrupt[size_t(rep_start + i)] = other[size_t(rep_start + i)];
  } else {
    if (a.clean.empty() == a.clean_tokens.empty())
      usage_error("give one of --clean TEXT or --clean-tokens IDS (or --repeated N)");
    if (a.corrupt.empty() == a.corrupt_tokens.empty())
      usage_error("give one of --corrupt TEXT or --corrupt-tokens IDS");
    clean = ids_of(m, "--clean", a.clean, "--clean-tokens", a.clean_tokens);
    corrupt = ids_of(m, "--corrupt", a.corrupt, "--corrupt-tokens", a.corrupt_tokens);
  }
  if (clean.size() != corrupt.size())
    usage_error(
        "--clean and --corrupt must have equal length in tokens (patching copies activations position by "
        "position): "
        "clean has " +
        std::to_string(clean.size()) + ", corrupt " + std::to_string(corrupt.size()));
  return in;
}

// The metric: a logit difference (--answer/--wrong) or the loss of the clean next token at some positions.
an::PatchMetric patch_metric(const LoadedLM& m, const PatchArgs& a, const PatchInputs& in) {
  const std::vector<int>& clean = in.clean;
  const int T = int(clean.size()), rep_start = in.rep_start;
  an::PatchMetric metric;
  if (!a.answer.empty() || !a.wrong.empty()) {
    if (a.answer.empty() || a.wrong.empty())
      usage_error("--answer and --wrong go together (a logit difference)");
    if (!a.loss_positions.empty())
      usage_error("--loss-positions: give either --answer/--wrong or --loss-positions");
    metric.kind = an::PatchMetric::Kind::LogitDiff;
    metric.answer = token_arg(m, "--answer", a.answer);
    metric.wrong = token_arg(m, "--wrong", a.wrong);
    if (a.position >= T)
      usage_error("--position: " + std::to_string(a.position) + " is outside [0, " + std::to_string(T) + ")");
    metric.position = a.position;
  } else {
    metric.kind = an::PatchMetric::Kind::Loss;
    if (!a.loss_positions.empty()) {
      metric.loss_positions = parse_positions("--loss-positions", a.loss_positions);
    } else if (a.repeated > 0) {  // the second copy, each position predicting the next token of it
      for (int t = rep_start + a.repeated; t < rep_start + 2 * a.repeated - 1; t++)
        metric.loss_positions.push_back(t);
    } else {
      usage_error(
          "no metric: give --answer A --wrong B (logit difference) or --loss-positions P (loss of the clean "
          "next token)");
    }
    for (int p : metric.loss_positions) {
      if (p < 0 || p >= T - 1)
        usage_error("--loss-positions: " + std::to_string(p) + " is outside [0, " + std::to_string(T - 1) +
                    ") (a loss position predicts the clean input's next token)");
      metric.targets.push_back(clean[size_t(p) + 1]);
    }
  }
  return metric;
}

an::PatchDirection patch_direction(const PatchArgs& a) {
  an::PatchDirection dir = an::PatchDirection::Noising;
  if (a.direction == "noising")
    dir = an::PatchDirection::Noising;
  else if (a.direction == "denoising")
    dir = an::PatchDirection::Denoising;
  else
    usage_error("--direction: '" + a.direction + "' is not noising or denoising");

  return dir;
}

// --path SENDER:RECEIVER:q|k|v: one path, against the receiver's whole q/k/v patched.
void run_path(const LoadedLM& m, const PatchArgs& a, const PatchInputs& in, an::PatchDirection dir,
              const an::PatchMetric& metric, const nlohmann::json& inputs) {
  const std::vector<int>&clean = in.clean, &corrupt = in.corrupt;
  const int T = int(clean.size());
  if (!a.hook.empty()) usage_error("--path: give either --hook (a sweep) or --path (one path)");
  if (a.attribution) usage_error("--attribution: estimates a --hook sweep's sites; path patching (--path) has none");
  const an::PathSpec s = an::parse_path_spec("--path", a.path);
  const an::PathResult r = an::path_patch(m.model, clean, corrupt, s, dir, metric);
  const double frac = an::fraction_of_receiver_effect(r);  // the share of the receiver's effect the path carries
  if (a.json) {
    print_json(report::path_patch_json(r, a.path, metric, inputs));
    return;
  }
  std::cout << "path patching (" << an::direction_name(dir) << ") " << s.sender_layer << "." << s.sender_head
            << " -> " << s.receiver_layer << "." << s.receiver_head << " " << s.input << " on " << T
            << " tokens; metric " << metric.describe() << "\n"
            << "clean " << fmt(r.clean, 4) << ", corrupt " << fmt(r.corrupt, 4)
            << " (normalised: 0 = corrupt, 1 = clean)\n\n";
  report::Table t({"what is patched", "metric", "normalised"});
  t.add({"sender's output, only into the receiver's " + std::string(1, s.input), fmt(r.metric, 4),
         fmt(r.normalised, 3)});
  t.add({"the receiver's whole " + std::string(1, s.input) + " (activation patch)", fmt(r.receiver_metric, 4),
         fmt(r.receiver_normalised, 3)});
  std::cout << t.str() << "\nthe path carries " << fmt(100 * frac, 1) << "% of the receiver's " << s.input
            << " effect; |Δ| of the sender's contribution " << fmt(r.delta_norm, 3) << "; " << r.forwards
            << " forwards\n";
}

// --hook: every site of one hook, as a table, --json and an SVG heatmap.
void run_hook_sweep(const LoadedLM& m, const PatchArgs& a, const PatchInputs& in, an::PatchDirection dir,
                    const an::PatchMetric& metric, const nlohmann::json& inputs) {
  const std::vector<int>&clean = in.clean, &corrupt = in.corrupt;
  const int T = int(clean.size());
  if (a.hook.empty())
    usage_error("give --hook NAME (e.g. attn.hook_v, every layer) or --path SENDER:RECEIVER:q|k|v");
  an::SweepOptions o;
  o.hook = a.hook;
  o.per_position = a.per_position;
  o.direction = dir;
  o.metric = metric;
  an::AttributionPatchResult att;
  an::SweepResult act;
  if (a.attribution)
    att = an::attribution_sweep(m.model, grad_params(m.model), clean, corrupt, o);
  else
    act = an::patch_sweep(m.model, clean, corrupt, o);
  const an::SweepResult& r = a.attribution ? att : act;
  // The grid: one row per layer (or layer.head with --per-position), one column per head (or position).
  const bool heads = r.heads > 0;
  std::vector<std::string> rows, cols;
  std::vector<std::vector<double>> grid;
  const int per_row = a.per_position ? T : (heads ? r.heads : 1);
  for (size_t i = 0; i < r.sites.size(); i += size_t(per_row)) {
    const auto& s = r.sites[i];
    rows.push_back(a.per_position && heads ? std::to_string(s.layer) + "." + std::to_string(s.head)
                                           : "layer " + std::to_string(s.layer));
    grid.emplace_back(r.normalised.begin() + long(i), r.normalised.begin() + long(i) + per_row);
  }
  const std::vector<int>& shown = dir == an::PatchDirection::Noising ? clean : corrupt;
  std::vector<std::string> svg_cols;  // the picture labels positions with their tokens; the table by number
  for (int c = 0; c < per_row; c++) {
    cols.push_back(a.per_position ? std::to_string(c) : heads ? "head " + std::to_string(c) : "all");
    svg_cols.push_back(a.per_position ? std::to_string(c) + " " + tok_label(m, shown[size_t(c)])
                                      : cols.back());
  }
  if (!a.svg.empty()) {
    report::HeatmapSpec h;
    h.set_values(grid);
    h.row_labels = rows;
    h.col_labels = svg_cols;
    h.title = "qkv patch " + a.hook + (a.attribution ? " --attribution" : "") + " (" + an::direction_name(dir) +
              "): " + metric.describe();
    h.row_title = a.per_position && heads ? "layer.head" : "layer";
    h.col_title = a.per_position ? "position" : heads ? "head" : "";
    h.value_label = "normalised metric (0 corrupt, 1 clean)";
    h.scale = report::ColorScale::Sequential;
    h.vmin = 0.0, h.vmax = 1.0;
    io::write_file_atomic(a.svg, report::heatmap_svg(h));
  }
  if (a.json) {
    print_json(a.attribution ? report::attribution_sweep_json(att, metric, inputs, a.svg)
                             : report::patch_sweep_json(act, metric, inputs, a.svg));
    return;
  }
  std::cout << (a.attribution ? "attribution patching (first-order estimates from one backward) of "
                               : "activation patching of ")
            << a.hook << " (" << an::direction_name(dir) << ": "
            << (dir == an::PatchDirection::Noising ? "clean run, corrupt activation patched in"
                                                   : "corrupt run, clean activation patched in")
            << ") on " << T << " tokens\nmetric " << metric.describe() << ": clean " << fmt(r.clean, 4)
            << ", corrupt " << fmt(r.corrupt, 4)
            << "; cells: (m − corrupt)/(clean − corrupt), 0 = corrupt, 1 = clean\n\n";
  if (r.clean == r.corrupt)
    std::cout << "note: the clean and corrupt runs give the same metric, so nothing can be normalised (cells "
                 "are nan); "
                 "the raw metric of each site is in --json\n\n";
  std::vector<std::string> header = {""};
  header.insert(header.end(), cols.begin(), cols.end());
  report::Table t(header);
  for (size_t i = 0; i < rows.size(); i++) {
    std::vector<std::string> cells = {rows[i]};
    for (double v : grid[i]) cells.push_back(fmt(v, 3));
    t.add(cells);
  }
  std::cout << t.str() << "\n"
            << r.sites.size() << " sites, " << r.forwards
            << (a.attribution ? " forwards and 1 backward (estimate = (source − base activation) · gradient"
                              : " forwards (2 unpatched + 1 per site")
            << (r.sites_skipped ? ", " + std::to_string(r.sites_skipped) +
                                      " sites after the metric's last position need none"
                                : "")
            << ") of " << r.T_run << " tokens" << (r.last_only ? ", last row's logits only" : "") << ", "
            << fmt(r.seconds, 2) << " s" << (a.svg.empty() ? "" : "; heatmap: " + a.svg) << "\n";
}

// --attribution --edges: every sender → receiver q/k/v edge between heads, estimated from one backward.
void run_edges(const LoadedLM& m, const PatchArgs& a, const PatchInputs& in, an::PatchDirection dir,
               const an::PatchMetric& metric, const nlohmann::json& inputs) {
  if (!a.attribution) usage_error("--edges: edge attribution patching is --attribution --edges");
  if (!a.hook.empty() || a.per_position || !a.svg.empty())
    usage_error("--edges: every edge between heads; give no --hook, --per-position or --svg");
  const an::EdgeAttributionResult r = an::edge_attribution(m.model, grad_params(m.model), in.clean, in.corrupt, dir, metric);
  if (a.json) return print_json(report::edge_attribution_json(r, metric, inputs));
  std::cout << "edge attribution patching (" << an::direction_name(dir) << ") on " << in.clean.size()
            << " tokens; metric " << metric.describe() << ": clean " << fmt(r.clean, 4) << ", corrupt "
            << fmt(r.corrupt, 4) << "\nestimate = (sender's output, " << (dir == an::PatchDirection::Noising ? "corrupt − clean" : "clean − corrupt")
            << ") · ∂metric/∂(receiver's q|k|v input); the 20 largest |estimate| of " << r.edges.size() << " edges:\n\n";
  std::vector<an::Edge> top = r.edges;
  std::stable_sort(top.begin(), top.end(), [](const an::Edge& x, const an::Edge& y) { return std::fabs(x.estimate) > std::fabs(y.estimate); });
  report::Table t({"sender", "receiver", "input", "estimate", "normalised"});
  for (size_t i = 0; i < std::min<size_t>(20, top.size()); i++) {
    const an::Edge& e = top[i];
    t.add({std::to_string(e.sender_layer) + "." + std::to_string(e.sender_head),
           std::to_string(e.receiver_layer) + "." + std::to_string(e.receiver_head), std::string(1, e.input),
           fmt(e.estimate, 4), fmt(e.normalised, 3)});
  }
  std::cout << t.str() << "\n" << r.forwards << " forwards and " << r.backwards << " backward of " << r.T_run
            << " tokens, " << fmt(r.seconds, 2) << " s\n";
}

void run_patch(const PatchArgs& a) {
  const LoadedLM m = load_lm_arg(a.m);
  const PatchInputs in = patch_inputs(m, a);
  const an::PatchMetric metric = patch_metric(m, a, in);
  const an::PatchDirection dir = patch_direction(a);
  const nlohmann::json inputs = {{"clean", in.clean}, {"corrupt", in.corrupt}, {"tokens", in.clean.size()}};
  if (!a.path.empty()) return run_path(m, a, in, dir, metric, inputs);
  if (a.edges) return run_edges(m, a, in, dir, metric, inputs);
  run_hook_sweep(m, a, in, dir, metric, inputs);
}

}  // namespace

void register_patch(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("patch",
                         "Activation patching (every layer × head × position of a hook; --attribution: estimated "
                         "from one backward) and path patching, normalised 0 = corrupt, 1 = clean");
  auto a = std::make_shared<PatchArgs>();
  add_model_option(cmd, a->m);
  cmd->add_option("--clean", a->clean, "clean input text");
  cmd->add_option("--corrupt", a->corrupt, "corrupted input text (same length in tokens)");
  cmd->add_option("--clean-tokens", a->clean_tokens, "clean input as token ids, e.g. 464,3290");
  cmd->add_option("--corrupt-tokens", a->corrupt_tokens, "corrupted input as token ids");
  cmd->add_option("--repeated", a->repeated,
                  "the repeated-sequence task: clean [bos] r r, corrupt [bos] r' r (first copy "
                  "replaced), loss on the second copy; N = |r|")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seed", a->seed, "--repeated: random seed");
  cmd->add_option(
         "--bos", a->bos,
         "--repeated: token before the sequence, -1 for none (default <|endoftext|> if the tokenizer has it)")
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("--answer", a->answer, "logit difference: the right token (id or one-token text)");
  cmd->add_option("--wrong", a->wrong, "logit difference: the wrong token (id or one-token text)");
  cmd->add_option("--position", a->position, "logit difference: the position read (default the last)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--loss-positions", a->loss_positions,
                  "loss of the clean next token at these positions, e.g. 3,5,9-12");
  cmd->add_option("--hook", a->hook,
                  "hook to sweep: attn.hook_q|k|v|z|pattern|attn_scores|result, hook_resid_pre|mid|post, "
                  "hook_attn_out, hook_mlp_out, mlp.hook_pre|pre_linear|post (every layer) or blocks.L.… (one layer)");
  cmd->add_flag("--per-position", a->per_position, "one site per position too");
  cmd->add_flag("--attribution", a->attribution,
                "attribution patching: every site estimated to first order, (source − base activation) · "
                "∂metric/∂activation, from one backward instead of one forward per site (--json: each site's "
                "\"estimate\")");
  cmd->add_flag("--edges", a->edges,
                "with --attribution: edge attribution patching, every sender head → later receiver head's q, k or v "
                "input, (sender's output difference in the residual) · ∂metric/∂(receiver's input) (--json: "
                "\"edges\", docs/patching.md)");
  cmd->add_option("--direction", a->direction,
                  "noising (clean run, corrupt activation in; default) or denoising");
  cmd->add_option("--path", a->path,
                  "path patching SENDER:RECEIVER:q|k|v, heads as LAYER.HEAD, e.g. 0.1:1.0:k");
  cmd->add_option("--svg", a->svg, "write the sweep's heatmap to this file");
  cmd->add_flag("--json", a->json, "JSON output");
  cmd->callback([a] { run_patch(*a); });
}

QKV_COMMAND(45, register_patch);

}  // namespace qkv::cli

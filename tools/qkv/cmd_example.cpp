// qkv example bank|robot|running|shapes — the seeds' hand-worked examples, recomputed: the soft dictionary
// (seeds 001, 004), seed 004's running example "the cat climbed the", and the shape table / 4d² count.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <sstream>

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/analysis/running_example.hpp"
#include "qkv/analysis/shapes.hpp"
#include "qkv/analysis/soft_dictionary.hpp"
#include "qkv/error.hpp"
#include "qkv/report/table.hpp"

namespace qkv::cli {
namespace {

struct ExampleArgs {
  std::string query;
  std::vector<std::string> values;  // name=a,b
  bool no_scale = false;
  bool all_queries = false;
  bool json = false;
  int decimals = 2;
  // running
  int row = 0;  // 1-based; 0: every row
  int head = 0;  // 1-based; 0: both (JSON) / head 1 (table)
  bool masked = false, unmasked = false;
  // matrix
  std::string text = "The cat sat on the mat because the cat was tired";
  std::string score = "content";
  int dk = 2;
  // shapes
  ModelArgs model;
  int64_t n = 5;
};

nlohmann::json to_json(const SoftDictionaryResult& r, size_t row) {
  nlohmann::json j;
  j["scores"] = r.scores[row];
  j["scaled"] = r.scaled[row];
  j["weights"] = r.weights[row];
  if (!r.output.empty()) j["output"] = r.output[row];
  return j;
}

void run_example(const std::string& which, const ExampleArgs& a) {
  const bool bank = which == "bank";
  SoftDictionaryInput in = bank ? bank_example() : robot_example();
  const size_t dk = in.K[0].size();
  if (!a.query.empty()) in.Q = {parse_numbers("--query", a.query, dk)};
  for (const std::string& v : a.values) {
    if (!bank) usage_error("--value: the robot example (seed 001) has no values; use it with 'qkv example bank'");
    const size_t eq = v.find('=');
    if (eq == std::string::npos) usage_error("--value: expected NAME=a,b (e.g. river=0,1), found '" + v + "'");
    const std::string name = v.substr(0, eq);
    const auto it = std::find(in.names.begin(), in.names.end(), name);
    if (it == in.names.end()) usage_error("--value: unknown token '" + name + "', expected sat, bank or river");
    in.V[size_t(it - in.names.begin())] = parse_numbers("--value " + name, v.substr(eq + 1), in.V[0].size());
  }
  in.scale = !a.no_scale;
  const SoftDictionaryResult r = soft_dictionary(in);

  SoftDictionaryResult all;
  if (a.all_queries) {
    if (!bank) usage_error("--all-queries: only the bank example (seed 004) gives every token's query");
    SoftDictionaryInput every = in;
    every.Q = bank_all_queries();
    every.Q[1] = in.Q[0];  // the bank row is the (possibly edited) single query
    all = soft_dictionary(every);
  }

  if (a.json) {
    nlohmann::json j = to_json(r, 0);
    if (a.all_queries) {
      j["A"] = all.weights;
      j["O"] = all.output;
    }
    print_json(j);
    return;
  }
  using report::fmt;
  using report::fmt_vec;
  const int p = a.decimals;
  std::cout << (bank ? "seed 004 — \"sat · bank · river\", values [river, money]; the query of \"bank\""
                     : "seed 001 — the query of \"it\" against robot, patient, it")
            << "\nq = " << report::fmt_short(in.Q[0]) << ", d_k = " << dk << ", √d_k = " << fmt(r.sqrt_dk, 2)
            << (in.scale ? "" : "  (division by √d_k turned OFF)") << "\n\n";
  std::vector<std::string> head = {"key", "k"};
  if (bank) head.push_back("v");
  for (std::string h : {"q·k", in.scale ? "÷√d_k" : "(unscaled)", "e^score", "weight"}) head.push_back(h);
  report::Table t(head);
  double sum_e = 0, sum_w = 0;
  for (size_t i = 0; i < in.names.size(); i++) {
    std::vector<std::string> row = {in.names[i], report::fmt_short(in.K[i])};
    if (bank) row.push_back(report::fmt_short(in.V[i]));
    row.push_back(fmt(r.scores[0][i], p));
    row.push_back(fmt(r.scaled[0][i], p));
    row.push_back(fmt(r.exp_scores[0][i], p));
    row.push_back(fmt(r.weights[0][i], p));
    sum_e += r.exp_scores[0][i];
    sum_w += r.weights[0][i];
    t.add(row);
  }
  std::vector<std::string> total(head.size() - 2, "");
  total[0] = "sum";
  total.push_back(fmt(sum_e, p));
  total.push_back(fmt(sum_w, p));
  t.add(total);
  std::cout << t.str();
  if (bank) std::cout << "\noutput Σ a·v = " << fmt_vec(r.output[0], p) << "\n";
  if (a.all_queries) {
    std::cout << "\nevery query at once (rows sat, bank, river; no causal mask, as in the seed):\nA =\n"
              << report::fmt_matrix(all.weights, p) << "O =\n"
              << report::fmt_matrix(all.output, p);
  }
}

std::string picks_text(const analysis::RunningPicks& p) {
  auto col = [](int c) { return "u" + std::to_string(c + 1); };
  return "q = [" + col(p.q[0]) + ", " + col(p.q[1]) + "], k = [" + col(p.k[0]) + ", " + col(p.k[1]) + "], v = [" +
         col(p.v[0]) + ", " + col(p.v[1]) + "]";
}

nlohmann::json picks_json(const analysis::RunningPicks& p) {  // 1-based columns of u, as the seed writes them
  return {{"q", {p.q[0] + 1, p.q[1] + 1}}, {"k", {p.k[0] + 1, p.k[1] + 1}}, {"v", {p.v[0] + 1, p.v[1] + 1}}};
}

void run_running(const ExampleArgs& a, int p) {
  using report::fmt;
  using report::fmt_vec;
  const bool scale = !a.no_scale;
  const analysis::RunningExample un = analysis::running_example({scale, false});
  const analysis::RunningExample ma = analysis::running_example({scale, true});
  const std::vector<analysis::RunningCheck> checks = analysis::running_example_checks();
  if (a.json) {
    const analysis::RunningExample& r = a.masked ? ma : un;
    nlohmann::json j;
    j["tokens"] = r.tokens;
    j["from_seed"] = r.from_seed;
    j["rule"] = analysis::running_example_rule();
    j["X"] = r.X, j["mean"] = r.mean, j["sigma"] = r.sigma, j["u"] = r.u;
    j["W_Q"] = r.W_Q, j["W_K"] = r.W_K, j["W_V"] = r.W_V;
    j["n"] = r.n, j["d"] = r.d, j["d_k"] = r.dk, j["scale"] = r.scale, j["masked"] = r.masked;
    for (size_t h = 0; h < r.heads.size(); h++) {
      const auto& hd = r.heads[h];
      j["heads"].push_back({{"head", h + 1},
                            {"picks", picks_json(hd.picks)},
                            {"picks_from", h == 0 ? "seed 004" : "qkv (the seed gives head 2's columns, not its picks)"},
                            {"Q", hd.Q}, {"K", hd.K}, {"V", hd.V}, {"QK", hd.QK}, {"S", hd.S}, {"A", hd.A}, {"O", hd.O}});
    }
    for (const auto& c : checks)
      j["checks"].push_back({{"id", c.id}, {"what", c.what}, {"seed", c.seed}, {"decimals", c.decimals},
                             {"computed", c.computed}, {"ok", c.ok()}});
    print_json(j);
    return;
  }
  const analysis::RunningExample& r = un;
  const int head = a.head ? a.head - 1 : 0;
  std::cout << "seed 004 — the running example \"the cat climbed the\": n = " << r.n << " tokens, d = " << r.d
            << ", two heads of d_k = d_v = " << r.dk << (scale ? "" : "  (division by √d_k turned OFF)")
            << "\n\n";
  std::cout << "Step 0 — u = LayerNorm(X): subtract each row's mean μ, divide by its σ (no learned scale or "
               "bias)\n";
  report::Table t0({"token", "X", "μ", "σ", "u", "row of X"});
  for (int i = 0; i < r.n; i++)
    t0.add({r.tokens[size_t(i)], report::fmt_short(r.X[size_t(i)]), fmt(r.mean[size_t(i)], p), fmt(r.sigma[size_t(i)], p),
            fmt_vec(r.u[size_t(i)], p), r.from_seed[size_t(i)] ? "the seed's" : "reconstructed"});
  std::cout << t0.str() << "X: " << analysis::running_example_rule() << "\n\n";

  std::cout << "Step 1 — Q = u·W_Q, K = u·W_K, V = u·W_V; the toy's W only pick columns of u\n"
            << "  head 1 (columns 1-2, the seed's):  " << picks_text(r.heads[0].picks) << "\n"
            << "  head 2 (columns 3-4, the seed's next page; it does not give the picks, qkv chose these): "
            << picks_text(r.heads[1].picks) << "\n";
  report::Table t1({"token", "q (head 1)", "k", "v", "q (head 2)", "k", "v"});
  for (size_t i = 0; i < size_t(r.n); i++)
    t1.add({r.tokens[i], fmt_vec(r.heads[0].Q[i], p), fmt_vec(r.heads[0].K[i], p), fmt_vec(r.heads[0].V[i], p),
            fmt_vec(r.heads[1].Q[i], p), fmt_vec(r.heads[1].K[i], p), fmt_vec(r.heads[1].V[i], p)});
  std::cout << t1.str() << "\n";

  const bool show_un = !a.masked, show_ma = !a.unmasked;
  for (const analysis::RunningExample* v : {&un, &ma}) {
    if ((v == &un && !show_un) || (v == &ma && !show_ma)) continue;
    const auto& hd = v->heads[size_t(head)];
    std::cout << "Steps 2-4, head " << head + 1 << ", "
              << (v->masked ? "with the causal mask (the next page: no row looks ahead)"
                            : "unmasked (the seed's page: rows 1-4 look at tokens after them)")
              << "\n";
    if (a.row == 0) {
      Matrix S = hd.S;  // shown as the softmax reads it: −inf where the mask hides a key
      for (size_t i = 0; v->masked && i < S.size(); i++)
        for (size_t j = i + 1; j < S.size(); j++) S[i][j] = -INFINITY;
      std::cout << (scale ? "S = q·kᵀ/√d_k" : "S = q·kᵀ (not divided)") << (v->masked ? ", masked" : "") << " =\n"
                << report::fmt_matrix(S, p) << "A = softmax(S" << (v->masked ? ", causal" : "") << ") =\n"
                << report::fmt_matrix(hd.A, p) << "O = A·V =\n"
                << report::fmt_matrix(hd.O, p) << "\n";
      continue;
    }
    const size_t i = size_t(a.row - 1);
    std::cout << "row " << a.row << " (" << v->tokens[i] << "): q = " << fmt_vec(hd.Q[i], p) << "\n";
    report::Table t({"key", "k", "v", "q·k", scale ? "÷√d_k" : "(unscaled)", "e^score", "weight"});
    for (size_t j = 0; j < size_t(v->n); j++) {
      const bool hidden = v->masked && j > i;
      t.add({v->tokens[j], fmt_vec(hd.K[j], p), fmt_vec(hd.V[j], p), fmt(hd.QK[i][j], p), fmt(hd.S[i][j], p),
             hidden ? "masked" : fmt(std::exp(hd.S[i][j]), p), fmt(hd.A[i][j], p)});
    }
    std::cout << t.str() << "output Σ a·v = " << fmt_vec(hd.O[i], p) << "\n\n";
  }

  if (a.row) return;
  std::cout << "Every number seed 004 states about the running example (head 1), to the seed's rounding:\n";
  report::Table tc({"check", "seed", "qkv", "", "the seed's words"});
  int held = 0;
  for (const auto& c : checks) {
    const bool exact = c.decimals > 6;  // "exactly 0" checks: show the residue itself
    tc.add({c.id, exact ? "0" : fmt(c.seed, c.decimals), exact ? report::fmt_sci(c.computed) : fmt(c.computed, c.decimals + 1),
            c.ok() ? "ok" : "DIFFERS", c.what});
    held += c.ok();
  }
  std::cout << tc.str() << held << " of " << checks.size() << " match\n";
}

void run_matrix(const ExampleArgs& a, int p) {
  WholeMatrixInput in;
  in.tokens = split_words(a.text);
  in.kind = parse_score_kind(a.score);
  in.dk = a.dk, in.scale = !a.no_scale, in.masked = a.masked;
  const WholeMatrixResult r = whole_matrix(in);
  if (a.json) {
    print_json({{"tokens", r.tokens}, {"score", score_kind_name(in.kind)}, {"d_k", in.dk}, {"scale", in.scale},
                {"masked", in.masked}, {"sqrt_dk", r.sqrt_dk}, {"z", r.z}, {"QK", r.qk}, {"S", r.S}, {"A", r.A},
                {"row_max", r.row_max}, {"binary_rows", r.binary_rows}});
    return;
  }
  const int n = int(r.tokens.size());
  std::cout << "seed 004 — the whole matrix: " << n << " tokens, score function '" << score_kind_name(in.kind)
            << "', d_k = " << in.dk << (in.scale ? ", divided by √d_k" : ", NOT divided by √d_k")
            << (in.masked ? ", causal mask" : "") << "\nthe toy's q·k = √d_k · z (z the score function's unit-scale "
            << "score); each row of A is where that token looks and sums to 1\n";
  std::vector<std::string> head = {"A"};
  for (const auto& t : r.tokens) head.push_back(t);
  head.push_back("max");
  report::Table t(head);
  for (int i = 0; i < n; i++) {
    std::vector<std::string> row = {r.tokens[size_t(i)]};
    for (int j = 0; j < n; j++) row.push_back(report::fmt(r.A[size_t(i)][size_t(j)], p));
    row.push_back(report::fmt(r.row_max[size_t(i)], p));
    t.add(row);
  }
  std::cout << t.str() << r.binary_rows << " of " << n << " rows put more than 0.99 on one token"
            << (r.binary_rows * 2 >= n ? " — the matrix has gone binary" : "") << "\n";
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out;
  for (int64_t v : s) out += (out.empty() ? "" : " × ") + std::to_string(v);
  return out;
}

std::string thousands(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < s.size(); i++) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return (v < 0 ? "-" : "") + out;
}

nlohmann::json shapes_json(const analysis::ShapesResult& s) {
  nlohmann::json j;
  const auto& g = s.dims;
  j["dims"] = {{"n", g.n}, {"d", g.d}, {"H", g.H}, {"n_kv", g.n_kv}, {"d_head", g.dh}, {"biases", g.biases}};
  for (const auto& r : s.rows) j["rows"].push_back({{"name", r.name}, {"head", r.head}, {"all", r.all}, {"formula", r.formula}});
  const auto& p = s.params;
  j["params"] = {{"W_Q", p.W_Q}, {"W_K", p.W_K}, {"W_V", p.W_V}, {"W_O", p.W_O}, {"b_Q", p.b_Q}, {"b_K", p.b_K},
                 {"b_V", p.b_V}, {"b_O", p.b_O}, {"weights", p.weights()}, {"biases", p.biases()}, {"total", p.total()}};
  j["four_d2"] = s.four_d2;
  return j;
}

void run_shapes(const ExampleArgs& a) {
  const analysis::ShapesResult toy = analysis::attention_shapes(analysis::running_example_dims());
  const LoadedLM lm = load_lm_arg(a.model);
  const Arch& cfg = lm.model.arch;
  const analysis::ShapesResult mod = analysis::attention_shapes(analysis::attention_dims(cfg, a.n));
  std::vector<analysis::TensorCount> layers;
  bool all_match = true;
  for (int l = 0; l < cfg.n_layer; l++) {
    layers.push_back(analysis::attention_tensor_count(lm.model.table, l));
    all_match = all_match && layers.back().weights == mod.params.weights() && layers.back().biases == mod.params.biases();
  }
  // Seed 001's figure is about GPT-2 small: its tensor table (the one qkv loads it with) needs no weights.
  const Arch small =
      arch_from_config(default_config("gpt2", "small"), "GPT-2 small");  // d = 768, 12 layers, 12 heads
  const analysis::ShapesResult gs = analysis::attention_shapes(analysis::attention_dims(small, a.n));
  const analysis::TensorCount gs_t = analysis::attention_tensor_count(tensor_table(small), 0);
  const double gs_millions = double(gs_t.weights + gs_t.biases) / 1e6;
  const bool gs_rounds = std::fabs(gs_millions - 2.4) <= 0.05, gs_weights_4d2 = gs_t.weights == gs.four_d2;

  if (a.json) {
    nlohmann::json j;
    j["toy"] = shapes_json(toy);
    j["model"] = shapes_json(mod);
    j["model"]["path"] = lm.path;
    j["model"]["family"] = cfg.model_type;
    j["model"]["n_layer"] = cfg.n_layer;
    for (const auto& t : layers) j["model"]["tensors"].push_back({{"weights", t.weights}, {"biases", t.biases}, {"names", t.names}});
    j["model"]["tensors_match_formula"] = all_match;
    j["model"]["weights_over_4d2"] = double(mod.params.weights()) / double(mod.four_d2);
    j["model"]["total_over_4d2"] = double(mod.params.total()) / double(mod.four_d2);
    j["gpt2_small"] = shapes_json(gs);
    j["gpt2_small"]["tensors"] = {{"weights", gs_t.weights}, {"biases", gs_t.biases}, {"names", gs_t.names}};
    j["gpt2_small"]["millions_with_biases"] = gs_millions;
    j["gpt2_small"]["seed_2_4_million"] = gs_rounds;
    j["gpt2_small"]["weights_equal_4d2"] = gs_weights_4d2;
    print_json(j);
    return;
  }
  std::cout
      << "seed 004 — the shape of every matrix (one layer; \"one head\" is what one head reads or makes)\n"
      << "running example: n = 5, d = 4, H = 2, d_k = d_v = 2.  " << lm.path << " (" << cfg.model_type
      << "): n = " << a.n << ", d = " << cfg.d << ", H = " << cfg.H << " (n_kv = " << mod.dims.n_kv
      << "), d_k = d_v = " << cfg.dh << "\n";
  report::Table t(
      {"matrix", "all heads", "toy, one head", "toy, all heads", "model, one head", "model, all heads"});
  for (size_t i = 0; i < toy.rows.size(); i++)
    t.add({toy.rows[i].name, mod.rows[i].formula, shape_str(toy.rows[i].head), shape_str(toy.rows[i].all),
           shape_str(mod.rows[i].head), shape_str(mod.rows[i].all)});
  std::cout << t.str() << "\nseed 001 — \"the four matrices of an attention layer hold about 4d² parameters: "
            << "roughly 2.4 million per layer in GPT-2 small\"\n";
  report::Table c({"model", "d", "4d²", "W_Q+W_K+W_V+W_O", "+ biases", "from the tensors", "tensors"});
  const auto& tm = layers.front();
  c.add({lm.path, std::to_string(cfg.d), thousands(mod.four_d2), thousands(mod.params.weights()),
         thousands(mod.params.total()), thousands(tm.weights) + " + " + thousands(tm.biases),
         all_match ? "every layer matches" : "DIFFER"});
  c.add({"GPT-2 small (parameter table)", std::to_string(small.d), thousands(gs.four_d2),
         thousands(gs.params.weights()), thousands(gs.params.total()),
         thousands(gs_t.weights) + " + " + thousands(gs_t.biases),
         gs_t.weights + gs_t.biases == gs.params.total() ? "matches" : "DIFFER"});
  std::cout << c.str() << "GPT-2 small per seed 004: d = " << small.d << ", d_k = d_v = " << small.dh
            << " per head, " << small.H << " heads\ntensors of layer 0 of " << lm.path << ": ";
  for (size_t i = 0; i < tm.names.size(); i++) std::cout << (i ? ", " : "") << tm.names[i];
  std::ostringstream m;
  m.precision(3);
  m << gs_millions;
  std::cout << "\nGPT-2 small: " << thousands(gs_t.weights + gs_t.biases) << " = " << m.str()
            << " million with biases (" << thousands(gs_t.weights) << " = 4d² exactly without): \"roughly 2.4 million\" "
            << (gs_rounds && gs_weights_4d2 ? "holds" : "does NOT hold") << "\n";
}

}  // namespace

void register_example(CLI::App& app) {
  auto* cmd = app.add_subcommand("example",
                                 "The seeds' worked examples: bank (seed 004), robot (seed 001), running (seed 004's "
                                 "\"the cat climbed the\"), shapes (seed 004's shape table, seed 001's 4d²), matrix "
                                 "(seed 004's whole n × n matrix under four toy score functions)");
  auto a = std::make_shared<ExampleArgs>();
  auto which = std::make_shared<std::string>();
  cmd->add_option("name", *which, "bank, robot, running, shapes or matrix")
      ->required()
      ->check(CLI::IsMember({"bank", "robot", "running", "shapes", "matrix"}));
  cmd->add_option("--query", a->query, "the query as a,b (seed 004 suggests 1,0 and 0,0; bank, robot)");
  cmd->add_option("--value", a->values, "replace a value, e.g. river=0,1 (repeatable; bank only)");
  cmd->add_flag("--no-scale", a->no_scale, "do not divide the scores by √d_k (bank, robot, running)");
  cmd->add_flag("--all-queries", a->all_queries, "every token's query at once: the 3×3 A and 3×2 O (bank only)");
  cmd->add_option("--decimals", a->decimals, "digits after the point in the table")->check(CLI::Range(0, 12));
  cmd->add_option("--row", a->row, "running: follow one row (1-5) through q·k, ÷√d_k, e^score, weight, Σ a·v")
      ->check(CLI::Range(1, 5));
  cmd->add_option("--head", a->head, "running: 1 (the seed's head) or 2 (columns 3-4, picks chosen by qkv)")
      ->check(CLI::Range(1, 2));
  auto* m = cmd->add_flag("--masked", a->masked, "running: only the causal-mask view (the next page's); matrix: apply the mask");
  auto* u = cmd->add_flag("--unmasked", a->unmasked, "running: only the unmasked view (the seed's page)");
  m->excludes(u);
  add_model_option(cmd, a->model);
  cmd->add_option("--text", a->text, "matrix: the sentence (split into words and punctuation)");
  cmd->add_option("--score", a->score, "matrix: content, previous, decay or mix")
      ->check(CLI::IsMember({"content", "previous", "decay", "mix"}));
  cmd->add_option("--dk", a->dk, "matrix: d_k (1-4096); without ÷√d_k the matrix goes binary as it grows")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--n", a->n, "shapes: the number of tokens n in the table")->check(CLI::Range(1, 1 << 20));
  cmd->add_flag(
      "--json", a->json,
      "JSON. bank/robot: scores, scaled, weights, output (+ A, O with --all-queries). running: X, u, "
      "mean, sigma, tokens, from_seed, rule, and per head Q, K, V, QK, S (= q·k/√d_k, before the mask), A, "
      "O (every row; --row only narrows the table); checks (every number the seed states). shapes: toy, "
      "model, gpt2_small. matrix: tokens, z, QK, S, A, "
      "row_max, binary_rows");
  cmd->footer("running: X's last row [-0.5, -0.5, -0.5, 1.5] is seed 004's. " +
              analysis::running_example_rule() +
              " Head 2 (columns 3-4) is on the seed's next page, which does not give its picks: qkv uses q = "
              "[u1, u3], "
              "k = [u3, u1], v = [u3, u4], so W_Q, W_K and W_V are permutation matrices.");
  cmd->callback([a, which, cmd] {
    // Options that belong to another example are usage errors, not silently ignored.
    const std::map<std::string, std::vector<std::string>> allowed = {
        {"bank", {"--query", "--value", "--no-scale", "--all-queries", "--decimals", "--json"}},
        {"robot", {"--query", "--no-scale", "--decimals", "--json"}},
        {"running", {"--no-scale", "--row", "--head", "--masked", "--unmasked", "--decimals", "--json"}},
        {"shapes", {"--model", "--n", "--json"}},
        {"matrix", {"--text", "--score", "--dk", "--no-scale", "--masked", "--decimals", "--json"}}};
    for (const char* opt : {"--query", "--value", "--no-scale", "--all-queries", "--decimals", "--row", "--head",
                            "--masked", "--unmasked", "--model", "--n", "--text", "--score", "--dk"}) {
      const auto& ok = allowed.at(*which);
      if (cmd->count(opt) && std::find(ok.begin(), ok.end(), opt) == ok.end())
        usage_error(std::string(opt) + ": not an option of 'qkv example " + *which + "'");
    }
    if (*which == "running") return run_running(*a, cmd->count("--decimals") ? a->decimals : 3);
    if (*which == "shapes") return run_shapes(*a);
    if (*which == "matrix") return run_matrix(*a, cmd->count("--decimals") ? a->decimals : 2);
    run_example(*which, *a);
  });
}

QKV_COMMAND(10, register_example);

}  // namespace qkv::cli

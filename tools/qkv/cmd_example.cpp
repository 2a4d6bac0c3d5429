// qkv example bank|robot — the seeds' hand-worked soft-dictionary examples, recomputed.
#include <iostream>

#include "cli.hpp"
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

}  // namespace

void register_example(CLI::App& app) {
  auto* cmd = app.add_subcommand("example", "The seeds' worked examples: bank (seed 004), robot (seed 001)");
  auto a = std::make_shared<ExampleArgs>();
  auto which = std::make_shared<std::string>();
  cmd->add_option("name", *which, "bank or robot")->required()->check(CLI::IsMember({"bank", "robot"}));
  cmd->add_option("--query", a->query, "the query as a,b (seed 004 suggests 1,0 and 0,0)");
  cmd->add_option("--value", a->values, "replace a value, e.g. river=0,1 (repeatable; bank only)");
  cmd->add_flag("--no-scale", a->no_scale, "do not divide the scores by √d_k");
  cmd->add_flag("--all-queries", a->all_queries, "every token's query at once: the 3×3 A and 3×2 O (bank only)");
  cmd->add_option("--decimals", a->decimals, "digits after the point in the table")->check(CLI::Range(0, 12));
  cmd->add_flag("--json", a->json, "JSON: scores, scaled, weights, output (+ A, O with --all-queries)");
  cmd->callback([a, which] { run_example(*which, *a); });
}

QKV_COMMAND(10, register_example);

}  // namespace qkv::cli

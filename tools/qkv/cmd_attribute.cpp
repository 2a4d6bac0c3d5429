// qkv attribute — direct logit attribution of a logit difference to every head, MLP and the embedding
// (final norm's scale frozen), checked to add up, and the logit lens over layers.
#include <algorithm>
#include <cmath>
#include <iostream>

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/analysis/attribution.hpp"
#include "qkv/error.hpp"
#include "qkv/model_files.hpp"
#include "qkv/report/attribute_json.hpp"
#include "qkv/report/table.hpp"

namespace qkv::cli {

int token_arg(const LoadedLM& m, const std::string& arg, const std::string& v);  // cmd_patch.cpp

namespace {

using report::fmt;
namespace an = qkv::analysis;

struct AttributeArgs {
  ModelArgs m;
  std::string answer, wrong;
  int position = -1;
  bool json = false;
};

std::string label(const LoadedLM& m, int id) {
  return m.tokenizer ? token_label(*m.tokenizer, id) : "#" + std::to_string(id);
}

void run_attribute(const AttributeArgs& a) {
  const LoadedLM m = load_lm_arg(a.m);
  const std::vector<int> ids = input_ids(m, a.m);
  if (a.answer.empty() || a.wrong.empty())
    usage_error("--answer and --wrong are required (the logit difference to attribute)");
  const int A = token_arg(m, "--answer", a.answer), B = token_arg(m, "--wrong", a.wrong);
  if (a.position >= int(ids.size()))
    usage_error("--position: " + std::to_string(a.position) + " is outside [0, " +
                std::to_string(ids.size()) + ")");
  const an::AttributionResult r = an::attribute(m.model, ids, A, B, a.position);
  if (a.json) {
    print_json(report::attribute_json(r, ids, [&](int id) { return label(m, id); }));
    return;
  }
  std::cout << "direct logit attribution of logit['" << label(m, A) << "'] − logit['" << label(m, B)
            << "'] at position " << r.position << " ('" << label(m, ids[size_t(r.position)]) << "') of "
            << ids.size() << " tokens\n"
            << "the model's logit difference " << fmt(r.logit_diff, 4) << "; the terms sum to "
            << fmt(r.sum_terms, 4) << " (difference " << report::fmt_sci(r.sum_minus_logit_diff)
            << "); final norm's scale frozen at " << fmt(r.norm_scale, 4) << "\n";
  if (!r.note.empty()) std::cout << "note: " << r.note << "\n";
  std::cout << "\n";
  report::Table t({"term", "share of the logit difference"});
  for (const auto& x : r.terms) t.add({x.name, fmt(x.value, 4)});
  std::cout << t.str();
  std::vector<an::AttributionTerm> top = r.terms;
  std::sort(top.begin(), top.end(),
            [](const auto& x, const auto& y) { return std::fabs(x.value) > std::fabs(y.value); });
  std::cout << "largest: ";
  for (size_t i = 0; i < std::min<size_t>(3, top.size()); i++)
    std::cout << (i ? ", " : "") << top[i].name << " " << fmt(top[i].value, 3);
  std::cout
      << "\n\nlogit lens (the final norm and unembedding applied to the residual stream after each layer):\n";
  report::Table l({"after", "logit difference", "top token", "answer's rank"});
  for (const auto& x : r.lens)
    l.add({x.layer < 0 ? "embed" : "layer " + std::to_string(x.layer), fmt(x.logit_diff, 4),
           label(m, x.top_token), std::to_string(x.answer_rank)});
  std::cout << l.str();
}

}  // namespace

void register_attribute(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "attribute", "Direct logit attribution per head and MLP (final norm frozen) and the logit lens");
  auto a = std::make_shared<AttributeArgs>();
  add_model_option(cmd, a->m);
  add_input_options(cmd, a->m);
  cmd->add_option("--answer", a->answer, "the right token (id or one-token text)");
  cmd->add_option("--wrong", a->wrong, "the wrong token (id or one-token text)");
  cmd->add_option("--position", a->position, "the position read (default the last)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_flag("--json", a->json, "JSON output");
  cmd->callback([a] { run_attribute(*a); });
}

QKV_COMMAND(46, register_attribute);

}  // namespace qkv::cli

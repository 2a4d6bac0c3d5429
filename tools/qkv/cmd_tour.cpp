// qkv tour — every claim of the seeds measured on one model: a verdict per claim by a stated criterion,
// printed as a table (or JSON), and DIR/index.html with the pictures.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/analysis/family_tour.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/tour.hpp"
#include "qkv/error.hpp"
#include "qkv/model_files.hpp"
#include "qkv/report/family_report.hpp"
#include "qkv/report/experiments_json.hpp"
#include "qkv/report/table.hpp"
#include "qkv/report/tour_report.hpp"

namespace qkv::cli {
namespace {

namespace an = qkv::analysis;

struct TourArgs {
  ModelArgs m;
  std::string out = "qkv-report";
  bool json = false, quiet = false;
  int n = 0, batch = 4, bos = -2;
  uint64_t seed = 0;
  std::string compare;  // --compare DIR: a second model, toured the same way, side by side
};

// Wraps `s` to `width` columns (by code points), continuation lines indented by `indent` spaces.
std::string wrap(const std::string& s, size_t width, size_t indent) {
  std::string out, line, word;
  auto cps = [](const std::string& t) {
    size_t n = 0;
    for (unsigned char ch : t) n += (ch & 0xC0) != 0x80;
    return n;
  };
  auto flush_word = [&] {
    if (word.empty()) return;
    if (!line.empty() && cps(line) + 1 + cps(word) > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    word.clear();
  };
  for (char ch : s) {
    if (ch == ' ') flush_word();
    else word += ch;
  }
  flush_word();
  return out + line;
}

// Each claim: its verdict (or n/a), the seed's sentence, what was measured and the criterion.
void print_claims(const std::vector<an::Claim>& claims) {
  int i = 0;
  for (const auto& cl : claims) {
    ++i;
    const std::string verdict = !cl.applies ? "n/a" : cl.held ? "HOLDS" : "DOES NOT HOLD";
    std::string head = (i < 10 ? " " : "") + std::to_string(i) + ". " + cl.id + "  [" + cl.source + "]";
    std::cout << head << std::string(head.size() < 60 ? 60 - head.size() : 1, ' ') << verdict << "\n";
    std::cout << "    seed:      " << wrap(cl.seed, 100, 15) << "\n";
    std::cout << "    measured:  " << wrap(cl.summary, 100, 15) << "\n";
    if (!cl.criterion.empty()) std::cout << "    criterion: " << wrap(cl.criterion, 100, 15) << "\n";
    if (!cl.note.empty()) std::cout << "    note:      " << wrap(cl.note, 100, 15) << "\n";
  }
}

// The tour of a model of another family (Llama, Qwen2, Gemma, …): the claims that carry over, the ones
// rotary, grouped-query attention and RMSNorm add, and n/a with a reason for the rest.
void run_family_tour(const TourArgs& a, const LoadedLM& lm) {
  an::FamilyTourOptions o;
  o.seed = a.seed;
  if (!a.m.tokens.empty() || !a.m.text.empty()) o.text_ids = input_ids(lm, a.m);
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a.out, ec) && !fs::is_directory(a.out, ec)) data_error(a.out + ": exists and is not a directory");
  const an::FamilyTourResult r = an::family_tour(lm.model, o);
  const Arch& c = lm.model.arch;
  const std::string html = report::write_family_tour_report(r, c, lm.path, a.out);
  if (a.json) {
    nlohmann::json j = report::family_tour_json(r, lm.path, c);
    j["report"] = html;
    print_json(j);
    return;
  }
  std::cout << "qkv tour of " << lm.path << " (" << c.model_type << "): " << c.n_layer << " layer(s), " << c.H
            << " query heads / " << c.n_kv << " key-value heads of " << c.dh << ", d = " << c.d << "\ntour text: "
            << r.text_ids.size() << " tokens" << (o.text_ids.empty() ? " (random ids repeated)" : "") << "\nchosen head "
            << r.chosen.layer << "." << r.chosen.head << " (top induction score); previous-token head " << r.previous.layer
            << "." << r.previous.head << "\n\n";
  print_claims(r.claims);
  report::Table t({"claim", "verdict"});
  for (const auto& cl : r.claims) t.add({cl.id, !cl.applies ? "n/a" : cl.held ? "holds" : "does not hold"});
  std::cout << "\n" << t.str() << "\n" << r.held_count() << " of " << r.applicable_count() << " applicable claims hold on this "
            << c.model_type << " model (" << r.claims.size() - size_t(r.applicable_count()) << " n/a; "
            << report::fmt(r.seconds, 1) << " s). Report: " << html << "\n";
}

// One model's tour, whichever path runs it (the GPT-2 tour or the family tour), for --compare: its
// claims, its own report page and its JSON, printed by the caller.
struct Side {
  report::TourSide side;
  nlohmann::json json;
  std::string summary;
};

Side tour_side(const TourArgs& a, const std::string& path) {
  ModelArgs m = a.m;
  m.model = path;
  Side s;
  {
    const LoadedLM fam = load_lm_arg(m);
    s.side.model = fam.path, s.side.family = fam.model.arch.model_type;
    if (fam.model.arch.model_type != "gpt2") {
      an::FamilyTourOptions o;
      o.seed = a.seed;
      if (!m.tokens.empty() || !m.text.empty()) o.text_ids = input_ids(fam, m);
      const an::FamilyTourResult r = an::family_tour(fam.model, o);
      s.side.claims = r.claims;
      s.side.page = report::family_tour_page(r, fam.model.arch, fam.path);
      s.json = report::family_tour_json(r, fam.path, fam.model.arch);
      s.summary = std::to_string(r.held_count()) + " of " + std::to_string(r.applicable_count()) + " applicable claims hold";
      return s;
    }
  }
  const LoadedModel lm = load_model_arg(m);
  std::vector<int> ids;
  if (!m.tokens.empty() || !m.text.empty()) ids = input_ids(lm, m);
  report::TourInput in = report::tour_input(lm.model.config, lm.tokenizer ? &*lm.tokenizer : nullptr, ids, m.text, a.bos,
                                            a.n, a.batch, a.seed);
  const an::TourResult r = an::tour(lm.model, in.options);
  report::TourReportInfo info;
  info.model = lm.path;
  info.labels = token_labels(lm, in.options.text_ids);
  info.text = in.text;
  s.side.claims = r.claims;
  s.side.page = report::tour_page(r, info);
  s.json = report::tour_json(r, lm.path, info.labels, "");
  size_t na = 0;
  for (const auto& cl : r.claims) na += !cl.applies;
  s.summary = std::to_string(r.held_count()) + " of " + std::to_string(r.claims.size() - na) + " applicable claims hold";
  return s;
}

void run_compare(const TourArgs& a) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a.out, ec) && !fs::is_directory(a.out, ec)) data_error(a.out + ": exists and is not a directory");
  const Side x = tour_side(a, a.m.model), y = tour_side(a, a.compare);
  const std::string html = report::write_page_in_dir(report::compare_page(x.side, y.side), a.out);
  if (a.json) {
    print_json({{"models", {x.json, y.json}}, {"report", html}});
    return;
  }
  auto verdict = [](const std::vector<an::Claim>& cs, const std::string& id) -> std::string {
    for (const auto& c : cs)
      if (c.id == id) return !c.applies ? "n/a" : c.held ? "holds" : "does not hold";
    return "-";
  };
  std::vector<std::string> ids;
  for (const auto* cs : {&x.side.claims, &y.side.claims})
    for (const auto& c : *cs)
      if (std::find(ids.begin(), ids.end(), c.id) == ids.end()) ids.push_back(c.id);
  report::Table t({"claim", x.side.model + " (" + x.side.family + ")", y.side.model + " (" + y.side.family + ")"});
  for (const auto& id : ids) t.add({id, verdict(x.side.claims, id), verdict(y.side.claims, id)});
  std::cout << "qkv tour: " << x.side.model << " beside " << y.side.model << "\n\n" << t.str() << "\n" << x.side.model
            << ": " << x.summary << "; " << y.side.model << ": " << y.summary << ". Report: " << html << "\n";
}

void run_tour(const TourArgs& a) {
  if (!a.compare.empty()) return run_compare(a);
  {
    const LoadedLM fam = load_lm_arg(a.m);
    if (fam.model.arch.model_type != "gpt2") return run_family_tour(a, fam);
  }
  const LoadedModel lm = load_model_arg(a.m);
  std::vector<int> ids;
  if (!a.m.tokens.empty() || !a.m.text.empty()) ids = input_ids(lm, a.m);
  report::TourInput in = report::tour_input(lm.model.config, lm.tokenizer ? &*lm.tokenizer : nullptr, ids, a.m.text,
                                            a.bos, a.n, a.batch, a.seed);
  an::TourOptions& o = in.options;
  const std::string& text = in.text;
  if (!a.quiet)
    o.progress = [t0 = std::chrono::steady_clock::now()](int i, int total, const std::string& what) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::cerr << "[" << i << "/" << total << "] " << what << "  (" << report::fmt(s, 1) << " s)" << std::endl;
    };

  // Check the output directory before the (possibly long) run.
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a.out, ec) && !fs::is_directory(a.out, ec)) data_error(a.out + ": exists and is not a directory");

  const an::TourResult r = an::tour(lm.model, o);
  report::TourReportInfo info;
  info.model = lm.path;
  info.labels = token_labels(lm, o.text_ids);
  info.text = text;
  const std::string html = report::write_tour_report(r, info, a.out);

  if (a.json) {
    print_json(report::tour_json(r, lm.path, info.labels, html));
    return;
  }
  std::cout << "qkv tour of " << lm.path << ": " << r.L << " layer(s), " << r.H << " heads of " << r.dh << ", d = " << r.d
            << "\ntour text: " << r.T << " tokens"
            << (text.empty() ? " (random ids repeated: no tokenizer)" : ": \"" + text + "\"")
            << "\nchosen head " << r.induction.layer << "." << r.induction.head << " (top induction score"
            << (r.L >= 2 ? " in layers ≥ 1" : "") << "); previous-token head " << r.previous.layer << "."
            << r.previous.head << "\n\n";
  print_claims(r.claims);
  report::Table t({"claim", "verdict"});
  size_t na = 0;
  for (const auto& cl : r.claims) {
    t.add({cl.id, !cl.applies ? "n/a" : cl.held ? "holds" : "does not hold"});
    na += !cl.applies;
  }
  std::cout << "\n" << t.str() << "\n" << r.held_count() << " of " << r.claims.size() - na
            << (na ? " applicable" : "") << " claims hold on this model" << (na ? " (" + std::to_string(na) + " n/a)" : "") << " ("
            << report::fmt(r.seconds, 1) << " s). Report: " << html << "\n";
}

}  // namespace

void register_tour(CLI::App& app) {
  auto* cmd = app.add_subcommand("tour", "Every claim of the seeds measured on a model: verdicts, and an HTML report with the pictures");
  auto a = std::make_shared<TourArgs>();
  add_model_option(cmd, a->m);
  add_input_options(cmd, a->m);
  cmd->add_option("--out", a->out, "directory for index.html (default qkv-report)");
  cmd->add_flag("--json", a->json, "JSON: {\"model\": …, \"claims\": [{\"id\", \"held\", \"measured\", \"criterion\", \"seed\"}, …]}");
  cmd->add_option("--seq-len", a->n, "length of the repeated random sequences (default min(25, fits))");
  cmd->add_option("--batch", a->batch, "repeated random sequences")->check(CLI::Range(1, 256));
  cmd->add_option("--seed", a->seed, "random seed");
  cmd->add_option("--bos", a->bos, "token prepended to the repeated sequences, -1 for none (default: <|endoftext|> if the tokenizer has it)")
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_flag("--quiet", a->quiet, "no progress on stderr");
  cmd->add_option("--compare", a->compare,
                  "a second model (any family) toured the same way: both verdicts per claim, and one report with the two "
                  "side by side");
  cmd->callback([a] { run_tour(*a); });
}

QKV_COMMAND(5, register_tour);

}  // namespace qkv::cli

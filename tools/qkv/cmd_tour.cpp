// qkv tour — every claim of the seeds measured on one model of any family: a verdict (or n/a with its reason)
// per claim by a stated criterion, printed as a table (or JSON), and DIR/index.html with the pictures;
// --compare B tours a second model the same way and puts the two side by side.
#include <chrono>
#include <filesystem>
#include <iostream>

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/analysis/tour.hpp"
#include "qkv/error.hpp"
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

// One model, loaded once, with the tour's inputs resolved (before anything runs: a bad --compare fails fast).
struct Prepared {
  LoadedLM lm;
  an::TourInput in;
};

Prepared prepare(const TourArgs& a, const std::string& path) {
  ModelArgs m = a.m;
  m.model = path;
  Prepared p{load_lm_arg(m), {}};
  std::vector<int> ids;
  if (!m.tokens.empty() || !m.text.empty()) ids = input_ids(p.lm, m);
  p.in = an::tour_input(p.lm.model.arch, p.lm.tokenizer ? &*p.lm.tokenizer : nullptr, ids, m.text, a.bos, a.n,
                        a.batch, a.seed);
  if (!a.quiet)
    p.in.options.progress = [t0 = std::chrono::steady_clock::now()](int i, int total,
                                                                    const std::string& what) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::cerr << "[" << i << "/" << total << "] " << what << "  (" << report::fmt(s, 1) << " s)"
                << std::endl;
    };
  return p;
}

struct Toured {
  an::TourResult r;
  report::TourReportInfo info;
};

Toured run(const Prepared& p) {
  return {an::tour(p.lm.model, p.in.options), {p.lm.path, p.in.labels, p.in.text}};
}

void check_out(const std::string& out) {  // before the (possibly long) run
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec)) data_error(out + ": exists and is not a directory");
}

void run_tour(const TourArgs& a) {
  check_out(a.out);
  const Prepared px = prepare(a, a.m.model);
  if (a.compare.empty()) {
    const Toured x = run(px);
    const std::string html = report::write_tour_report(x.r, x.info, a.out);
    if (a.json) return print_json(report::tour_json(x.r, x.info, html));
    std::cout << report::tour_text(x.r, x.info, html);
    return;
  }
  const Prepared py = prepare(a, a.compare);
  const Toured x = run(px), y = run(py);
  const report::TourSide sx{x.r, x.info}, sy{y.r, y.info};
  const std::string html = report::write_page_in_dir(report::compare_page(sx, sy), a.out);
  if (a.json)
    return print_json({{"models", {report::tour_json(x.r, x.info, ""), report::tour_json(y.r, y.info, "")}},
                       {"report", html}});
  std::cout << report::compare_text(sx, sy, html);
}

}  // namespace

void register_tour(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("tour",
                         "Every claim of the seeds measured on a model of any family: verdicts, and an HTML "
                         "report with the pictures");
  auto a = std::make_shared<TourArgs>();
  add_model_option(cmd, a->m);
  add_input_options(cmd, a->m);
  cmd->add_option("--out", a->out, "directory for index.html (default qkv-report)");
  cmd->add_flag(
      "--json", a->json,
      "JSON: {\"model\", \"family\", \"held\", \"applicable\", \"claims\": [{\"id\", \"held\", \"applies\", "
      "\"measured\", \"criterion\", \"seed\", \"note\"}, …]}");
  cmd->add_option("--seq-len", a->n, "length of the repeated random sequences (default min(25, fits))");
  cmd->add_option("--batch", a->batch, "repeated random sequences")->check(CLI::Range(1, 256));
  cmd->add_option("--seed", a->seed, "random seed");
  cmd->add_option("--bos", a->bos,
                  "token prepended to the repeated sequences, -1 for none (default: <|endoftext|> if the "
                  "tokenizer has it)")
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_flag("--quiet", a->quiet, "no progress on stderr");
  cmd->add_option(
      "--compare", a->compare,
      "a second model (any family) toured the same way: both verdicts per claim, and one report with the two "
      "side by side");
  cmd->callback([a] { run_tour(*a); });
}

QKV_COMMAND(5, register_tour);

}  // namespace qkv::cli

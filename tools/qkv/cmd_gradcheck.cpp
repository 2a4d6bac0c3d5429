// qkv gradcheck — every backward of one head and of the whole attention sublayer against central
// finite differences, in double.
#include <iostream>

#include "cli.hpp"
#include "qkv/gradcheck.hpp"
#include "qkv/report/table.hpp"

namespace qkv::cli {

void register_gradcheck(CLI::App& app) {
  auto* cmd = app.add_subcommand("gradcheck", "Backward passes against central differences (double precision)");
  struct Args {
    int T = 5, d = 12, H = 3;
    uint64_t seed = 1;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--T", a->T, "tokens")->check(CLI::Range(1, 64));
  cmd->add_option("--d", a->d, "model width of the sublayer check")->check(CLI::Range(1, 64));
  cmd->add_option("--H", a->H, "heads of the sublayer check (must divide d)")->check(CLI::Range(1, 64));
  cmd->add_option("--seed", a->seed, "random seed");
  cmd->add_flag("--json", a->json, "JSON: {\"max_abs_error\": {...}, \"ds_row_sum_max_abs\": ...}");
  cmd->callback([a] {
    const AttentionShape shape{a->T, a->d, a->H};
    shape.validate();
    const GradcheckResult head = gradcheck_head(a->T, a->d / a->H, a->seed);
    const GradcheckResult sub = gradcheck_sublayer(shape, a->seed + 1);
    const double ds_rows = std::max(head.ds_row_sum_max_abs, sub.ds_row_sum_max_abs);
    if (a->json) {
      nlohmann::json errors = nlohmann::json::object();
      for (const auto& [n, e] : head.max_abs_error) errors[n] = e;
      for (const auto& [n, e] : sub.max_abs_error) errors[n] = e;
      print_json({{"max_abs_error", errors}, {"ds_row_sum_max_abs", ds_rows}});
      return;
    }
    std::cout << "central differences, h = 1e-6, double precision; L = Σ dout ⊙ out for random dout\n\n";
    report::Table t({"gradient", "of", "max |analytic − numeric|"});
    for (const auto& [n, e] : head.max_abs_error)
      t.add({n, "one head (T=" + std::to_string(a->T) + ", d_k=" + std::to_string(a->d / a->H) + ")",
             report::fmt_sci(e)});
    for (const auto& [n, e] : sub.max_abs_error)
      t.add({n, "sublayer (T=" + std::to_string(a->T) + ", d=" + std::to_string(a->d) + ", H=" +
                    std::to_string(a->H) + ")",
             report::fmt_sci(e)});
    std::cout << t.str() << "\nlargest |row sum of dS| = " << report::fmt_sci(ds_rows)
              << "  (the softmax Jacobian: each row of dS sums to zero)\n";
  });
}

QKV_COMMAND(80, register_gradcheck);

}  // namespace qkv::cli

// qkv saturate — seed 004's √d_k argument, measured.
#include <iostream>

#include "cli.hpp"
#include "qkv/analysis/saturate.hpp"
#include "qkv/report/table.hpp"

namespace qkv::cli {

void register_saturate(CLI::App& app) {
  auto* cmd = app.add_subcommand("saturate", "Why divide by √d_k: score spread, one-hot rows, vanishing gradients");
  auto o = std::make_shared<SaturateOptions>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--keys", o->keys, "keys per softmax row")->check(CLI::Range(1, 100000));
  cmd->add_option("--rows", o->rows, "random query rows per d_k")->check(CLI::Range(1, 100000));
  cmd->add_option("--max-dk", o->dk_max, "largest d_k (powers of two from 2)")->check(CLI::Range(2, 65536));
  cmd->add_option("--seed", o->seed, "random seed");
  cmd->add_flag("--json", *json, "JSON: {\"rows\": [...]}");
  cmd->callback([o, json] {
    const auto rows = saturate(*o);
    if (*json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& r : rows)
        j.push_back({{"dk", r.dk},
                     {"std_raw", r.std_raw},
                     {"std_scaled", r.std_scaled},
                     {"max_weight_raw", r.max_weight_raw},
                     {"max_weight_scaled", r.max_weight_scaled},
                     {"onehot_share_raw", r.onehot_raw},
                     {"onehot_share_scaled", r.onehot_scaled},
                     {"grad_norm_raw", r.grad_norm_raw},
                     {"grad_norm_scaled", r.grad_norm_scaled}});
      print_json({{"keys", o->keys}, {"rows_per_dk", o->rows}, {"seed", o->seed}, {"rows", j}});
      return;
    }
    std::cout << "q, k ~ N(0, 1) in d_k dimensions; " << o->keys << " keys per softmax row, " << o->rows
              << " rows per d_k.\nmax weight: mean largest softmax weight of a row (1.00 = one-hot); "
                 "one-hot rows: largest weight > 0.99; ‖dS‖: mean gradient norm through the softmax for a unit-variance upstream gradient.\n\n";
    report::Table t({"d_k", "std q·k", "std q·k/√d_k", "max weight raw", "÷√d_k", "one-hot rows raw", "÷√d_k",
                     "‖dS‖ raw", "÷√d_k"});
    for (const auto& r : rows)
      t.add({std::to_string(r.dk), report::fmt(r.std_raw, 2), report::fmt(r.std_scaled, 2),
             report::fmt(r.max_weight_raw, 3), report::fmt(r.max_weight_scaled, 3),
             report::fmt(100 * r.onehot_raw, 0) + "%", report::fmt(100 * r.onehot_scaled, 0) + "%", report::fmt_sci(r.grad_norm_raw),
             report::fmt_sci(r.grad_norm_scaled)});
    std::cout << t.str();
  });
}

QKV_COMMAND(70, register_saturate);

}  // namespace qkv::cli

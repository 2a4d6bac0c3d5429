// qkv dump — every activation of one forward as DIR/<hook name>.npy, and with --grad beside each the
// gradient of a metric (a logit difference, or the loss of the next tokens) with respect to it,
// DIR/<hook name>_grad.npy (include/qkv/lm_grad.hpp).
#include <filesystem>
#include <iostream>
#include <set>

#include "cli.hpp"
#include "model_input.hpp"
#include "output_set.hpp"
#include "qkv/error.hpp"
#include "qkv/io/npy.hpp"
#include "qkv/lm.hpp"
#include "qkv/lm_grad.hpp"

namespace fs = std::filesystem;

namespace qkv::cli {

int token_arg(const LoadedLM& m, const std::string& arg, const std::string& v);  // cmd_patch.cpp

namespace {

struct DumpArgs {
  ModelArgs m;
  std::string out, layers;
  bool grad = false;
  std::string answer, wrong, loss_positions;
  int position = -1;
  bool position_given = false;
};

// The metric --grad differentiates: --answer/--wrong (at --position, default the last) or --loss-positions.
LogitMetric grad_metric(const LoadedLM& m, const DumpArgs& a, const std::vector<int>& ids) {
  const int T = int(ids.size());
  const bool diff = !a.answer.empty() || !a.wrong.empty();
  if (!a.grad) {
    if (diff || !a.loss_positions.empty() || a.position_given)
      usage_error("--answer, --wrong, --position and --loss-positions choose the metric of --grad; add --grad");
    return {};
  }
  if (diff) {
    if (a.answer.empty() || a.wrong.empty()) usage_error("--answer and --wrong go together (a logit difference)");
    if (!a.loss_positions.empty()) usage_error("--loss-positions: give either --answer/--wrong or --loss-positions");
    if (a.position >= T)
      usage_error("--position: " + std::to_string(a.position) + " is outside [0, " + std::to_string(T) + ")");
    return logit_diff_metric(token_arg(m, "--answer", a.answer), token_arg(m, "--wrong", a.wrong), a.position);
  }
  if (a.position_given) usage_error("--position: reads a logit difference; give --answer and --wrong");
  if (a.loss_positions.empty())
    usage_error("--grad: give --answer A --wrong B (a logit difference) or --loss-positions P (the next-token loss)");
  std::vector<int> pos = parse_ints("--loss-positions", a.loss_positions);
  for (int p : pos)
    if (p < 0 || p + 1 >= T)
      usage_error("--loss-positions: " + std::to_string(p) + " is outside [0, " + std::to_string(T - 1) +
                  ") (a loss position predicts the next token)");
  return next_token_loss_metric(ids, pos);
}

void run_dump(const DumpArgs& a) {
  const LoadedLM m = load_lm_arg(a.m);
  const std::vector<int> ids = input_ids(m, a.m);
  std::set<int> layers;
  if (!a.layers.empty())
    for (int l : parse_ints("--layers", a.layers)) {
      if (l < 0 || l >= m.model.arch.n_layer)
        usage_error("--layers: layer " + std::to_string(l) + " is outside [0, " + std::to_string(m.model.arch.n_layer) + ")");
      layers.insert(l);
    }
  const LogitMetric metric = grad_metric(m, a, ids);
  // Every hook point of the chosen blocks (and the final norm and logits), copied out of one forward.
  const auto keep = [&](const std::string& name) {
    if (layers.empty() || name.rfind("blocks.", 0) != 0) return true;
    return layers.count(std::stoi(name.substr(7))) > 0;
  };
  const std::map<std::string, Tensor> acts = run_with_cache(m.model, ids, keep);
  GradRun g;
  if (a.grad) g = run_with_grads(grad_params(m.model), ids, metric, keep);
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec || !fs::is_directory(a.out)) data_error(a.out + ": cannot create the output directory (" + ec.message() + ")");
  // Each file goes to a temporary name and is renamed into place (io::write_npy), so a failure
  // leaves no partial file.
  OutputSet files;
  std::vector<int32_t> ids32(ids.begin(), ids.end());
  io::write_npy(files.add((fs::path(a.out) / "tokens.npy").string()), {int64_t(ids.size())}, ids32.data());
  for (const auto& [name, t] : acts)
    io::write_npy(files.add((fs::path(a.out) / (name + ".npy")).string()), t.shape(), t.data());
  for (const auto& [name, t] : g.grads)
    io::write_npy(files.add((fs::path(a.out) / (name + "_grad.npy")).string()), t.shape(), t.data());
  files.commit();
  std::cout << "wrote " << acts.size() + 1 << " arrays (" << ids.size() << " tokens)";
  if (a.grad) std::cout << " and " << g.grads.size() << " gradients of " << metric.description << " = " << g.value;
  std::cout << " to " << a.out << "/\n";
}

void register_dump(CLI::App& app) {
  auto* cmd = app.add_subcommand("dump", "Write every traced activation as DIR/<hook name>.npy (--grad: and its "
                                         "gradient as DIR/<hook name>_grad.npy)");
  auto a = std::make_shared<DumpArgs>();
  add_model_option(cmd, a->m);
  add_input_options(cmd, a->m);
  cmd->add_option("--out", a->out, "output directory")->required();
  cmd->add_option("--layers", a->layers, "only these blocks, e.g. 0,3 (default: all)");
  cmd->add_flag("--grad", a->grad,
                "also write NAME_grad.npy: the gradient of the metric (--answer/--wrong or --loss-positions) "
                "with respect to each activation");
  cmd->add_option("--answer", a->answer, "--grad's logit difference: the right token (id or one-token text)");
  cmd->add_option("--wrong", a->wrong, "--grad's logit difference: the wrong token (id or one-token text)");
  cmd->add_option("--position", a->position, "--grad's logit difference: the position read (default the last)")
      ->check(CLI::Range(0, 1 << 30))
      ->each([a](const std::string&) { a->position_given = true; });
  cmd->add_option("--loss-positions", a->loss_positions,
                  "--grad's metric instead: the mean loss of the next token at these positions, e.g. 3,5,9");
  cmd->callback([a] { run_dump(*a); });
}

}  // namespace

QKV_COMMAND(20, register_dump);

}  // namespace qkv::cli

// steering_vector (analysis/steer.hpp): mean over positions, mean over texts, positive minus negative.
#include "qkv/analysis/steer.hpp"

#include "qkv/error.hpp"
#include "qkv/generate.hpp"

namespace qkv::analysis {
namespace {

// Σ over texts of each text's mean row at `hook`, in double, divided by the number of texts.
std::vector<double> mean_of_means(const Model& m, const std::string& hook,
                                  const std::vector<SteerText>& texts, int64_t w, const char* side) {
  if (texts.empty()) usage_error(std::string("--") + side + ": no texts");
  std::vector<double> acc(size_t(w), 0.0);
  for (size_t i = 0; i < texts.size(); i++) {
    const SteerText& t = texts[i];
    const int T = int(t.ids.size());
    if (t.from < 0 || t.from >= T)
      usage_error(std::string("--") + side + ": text " + std::to_string(i + 1) + " has " + std::to_string(T) +
                  " tokens and none left to average after the first " + std::to_string(t.from));
    std::vector<double> sum(size_t(w), 0.0);
    Hooks h;
    h.wants = [&](const std::string& n) { return n == hook; };
    h.fn = [&](const std::string&, ActView v) {
      for (int p = t.from; p < T; p++)
        for (int64_t j = 0; j < w; j++) sum[size_t(j)] += double(v.data[int64_t(p) * w + j]);
    };
    RunState st;
    RunOptions ro;
    ro.hooks = &h;
    if (hook != "logits" && hook != "ln_final.hook_normalized") {  // stop after the last block that has it
      const size_t dot = hook.find('.', 7);
      if (hook.rfind("blocks.", 0) == 0 && dot != std::string::npos)
        ro.stop_at_layer = std::stoi(hook.substr(7, dot - 7));
    }
    run(m, t.ids, st, ro);
    for (int64_t j = 0; j < w; j++) acc[size_t(j)] += sum[size_t(j)] / double(T - t.from);
  }
  for (double& a : acc) a /= double(texts.size());
  return acc;
}

}  // namespace

std::vector<float> steering_vector(const Model& m, const std::string& hook,
                                   const std::vector<SteerText>& positive,
                                   const std::vector<SteerText>& negative) {
  const int64_t w = steer_width(m, hook, "--hook");
  const std::vector<double> p = mean_of_means(m, hook, positive, w, "positive");
  const std::vector<double> n = mean_of_means(m, hook, negative, w, "negative");
  std::vector<float> v(static_cast<size_t>(w));
  for (int64_t j = 0; j < w; j++) v[size_t(j)] = float(p[size_t(j)] - n[size_t(j)]);
  return v;
}

}  // namespace qkv::analysis

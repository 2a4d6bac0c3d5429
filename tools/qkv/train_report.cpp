#include "train_report.hpp"

#include <algorithm>
#include <sstream>

#include "qkv/io/atomic_file.hpp"
#include "qkv/report/svg.hpp"

namespace qkv::cli {

void write_train_csv(const std::string& path, const std::vector<TrainRecord>& h) {
  std::ostringstream o;
  o.precision(8);
  o << "step,lr,loss,grad_norm,seconds,tokens_per_second,first_half_loss,repeated_half_loss,in_context_loss,previous_token_score,induction_score,shifted_induction_score\n";
  for (const auto& r : h) {
    o << r.step << ',' << r.lr << ',' << r.loss << ',' << r.grad_norm << ',' << r.seconds << ',' << r.tokens_per_second;
    if (r.evaluated)
      o << ',' << r.eval.first_half << ',' << r.eval.repeated_half << ',' << r.eval.in_context() << ','
        << r.heads.previous_token << ',' << r.heads.induction << ','
        << r.heads.induction_shifted << '\n';
    else
      o << ",,,,,,\n";
  }
  io::write_file_atomic(path, o.str());
}

void write_train_svg(const std::string& path, const std::vector<TrainRecord>& h, int eval_n) {
  report::LineChartSpec c;
  c.title = "training loss, and the in-context loss on " + std::to_string(eval_n) + "-token sequences repeated twice";
  c.x_label = "step";
  c.y_label = "loss (nats)";
  c.width = 760;
  c.height = 420;
  report::Series train{"training loss (batch mean)", {}, {}, "", false, false};
  report::Series first{"first half (unpredictable)", {}, {}, "", true, true};
  report::Series second{"repeated half (copyable)", {}, {}, "", true, false};
  report::Series diff{"in-context: repeated − first", {}, {}, "", true, false};
  // Thin the per-step curve to at most ~400 points so the picture stays small.
  const size_t every = std::max<size_t>(1, h.size() / 400);
  for (size_t i = 0; i < h.size(); i++) {
    const TrainRecord& r = h[i];
    if (i % every == 0 || i + 1 == h.size()) {
      train.x.push_back(r.step);
      train.y.push_back(r.loss);
    }
    if (r.evaluated) {
      first.x.push_back(r.step);
      first.y.push_back(r.eval.first_half);
      second.x.push_back(r.step);
      second.y.push_back(r.eval.repeated_half);
      diff.x.push_back(r.step);
      diff.y.push_back(r.eval.in_context());
    }
  }
  c.series = {train};
  if (!first.x.empty()) {
    c.series.push_back(first);
    c.series.push_back(second);
    c.series.push_back(diff);
  }
  const std::string losses = report::line_chart_svg(c);
  if (first.x.empty()) return io::write_file_atomic(path, losses);

  // Below it, on the same steps: the two heads of the circuit as they form (0 … 1).
  report::LineChartSpec hc;
  hc.title = "the circuit forming: best head scores on " + std::to_string(eval_n) + "-token random sequences repeated twice";
  hc.x_label = "step";
  hc.y_label = "head score";
  hc.width = c.width;
  hc.height = 300;
  hc.ymin = 0;
  hc.ymax = 1;
  report::Series prev{"previous-token (layer 0)", {}, {}, "", true, false};
  report::Series ind{"induction (layer ≥ 1)", {}, {}, "", true, false};
  report::Series shifted{"one token further (≥ 1)", {}, {}, "", true, true};
  for (const TrainRecord& r : h)
    if (r.evaluated) {
      prev.x.push_back(r.step);
      prev.y.push_back(r.heads.previous_token);
      ind.x.push_back(r.step);
      ind.y.push_back(r.heads.induction);
      shifted.x.push_back(r.step);
      shifted.y.push_back(r.heads.induction_shifted);
    }
  hc.series = {prev, ind, shifted};
  std::string heads = report::line_chart_svg(hc);
  heads.insert(4, " y=\"" + std::to_string(c.height) + "\"");  // "<svg" → "<svg y=…": nested below the first
  const int W = c.width, H = c.height + hc.height;
  io::write_file_atomic(path, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(W) + "\" height=\"" +
                                  std::to_string(H) + "\" viewBox=\"0 0 " + std::to_string(W) + " " + std::to_string(H) +
                                  "\">\n" + losses + heads + "</svg>\n");
}

}  // namespace qkv::cli

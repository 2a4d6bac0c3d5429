// What `qkv sweep` writes and prints from a finished sweep (sweep_report.hpp).
#include "qkv/report/sweep_report.hpp"

#include <cstdio>
#include <filesystem>

#include "qkv/io/atomic_file.hpp"
#include "qkv/report/svg.hpp"

namespace fs = std::filesystem;
namespace sw = qkv::analysis::sweep;

namespace qkv::report {

nlohmann::json sweep_stats_json(const sw::RunResult& r) {
  nlohmann::json heads = nlohmann::json::array();
  for (const auto& h : r.stats.heads)
    heads.push_back({{"layer", h.layer},
                     {"head", h.head},
                     {"previous_token", h.previous_token},
                     {"duplicate_token", h.duplicate_token},
                     {"induction", h.induction},
                     {"entropy", h.entropy},
                     {"sink", h.sink},
                     {"dla", h.dla},
                     {"offset", h.offset}});
  const sw::Plan& p = r.plan;
  // Nothing here depends on the chunking (sweep.json records it): other chunkings give the same bytes.
  return {{"model_hash", p.model_hash}, {"n_tokens", p.n_tokens},     {"window", p.window},
          {"stride", p.stride},         {"max_offset", p.max_offset}, {"windows", r.stats.windows},
          {"query_rows", r.stats.rows}, {"heads", heads}};
}

std::string sweep_stats_csv(const sw::RunResult& r) {
  std::string s = "layer,head,previous_token,duplicate_token,induction,entropy,sink,dla";
  const size_t K = r.stats.heads.empty() ? 0 : r.stats.heads[0].offset.size();
  for (size_t k = 0; k < K; k++) s += ",offset_" + std::to_string(k);
  s += "\n";
  char b[64];
  auto num = [&](double v) {
    std::snprintf(b, sizeof b, ",%.17g", v);
    return std::string(b);
  };
  for (const auto& h : r.stats.heads) {
    s += std::to_string(h.layer) + "," + std::to_string(h.head) + num(h.previous_token) +
         num(h.duplicate_token) + num(h.induction) + num(h.entropy) + num(h.sink) + num(h.dla);
    for (double v : h.offset) s += num(v);
    s += "\n";
  }
  return s;
}

void write_sweep_outputs(const std::string& out, const sw::RunResult& r, int L, int H) {
  const fs::path dir(out);
  io::write_file_atomic((dir / "stats.json").string(), sweep_stats_json(r).dump(2) + "\n");
  io::write_file_atomic((dir / "stats.csv").string(), sweep_stats_csv(r));
  struct Panel {
    const char* file;
    const char* title;
    double sw::HeadStat::*field;
    const char* unit;
  };
  const Panel panels[] = {
      {"previous_token.svg", "previous-token score on the corpus", &sw::HeadStat::previous_token, "score"},
      {"duplicate_token.svg", "duplicate-token score on the corpus", &sw::HeadStat::duplicate_token, "score"},
      {"induction.svg", "induction score on the corpus", &sw::HeadStat::induction, "score"},
      {"entropy.svg", "mean attention entropy (rows i ≥ 1)", &sw::HeadStat::entropy, "nats"},
      {"sink.svg", "mean attention to position 0 (rows i ≥ 1)", &sw::HeadStat::sink, "weight"},
      {"dla.svg", "mean direct logit attribution norm", &sw::HeadStat::dla, "‖logits‖₂"},
  };
  std::vector<std::string> rows, cols;
  for (int l = 0; l < L; l++) rows.push_back("layer " + std::to_string(l));
  for (int h = 0; h < H; h++) cols.push_back("head " + std::to_string(h));
  for (const auto& p : panels) {
    HeatmapSpec s;
    s.rows = size_t(L), s.cols = size_t(H);
    for (const auto& h : r.stats.heads) s.values.push_back(h.*(p.field));
    s.row_labels = rows, s.col_labels = cols;
    s.title = p.title, s.value_label = p.unit, s.scale = ColorScale::Sequential;
    io::write_file_atomic((dir / p.file).string(), heatmap_svg(s));
  }
  HeatmapSpec s;
  s.rows = r.stats.heads.size();
  s.cols = s.rows ? r.stats.heads[0].offset.size() : 0;
  for (const auto& h : r.stats.heads) {
    s.row_labels.push_back(std::to_string(h.layer) + "." + std::to_string(h.head));
    for (double v : h.offset) s.values.push_back(v);
  }
  for (size_t k = 0; k < s.cols; k++) s.col_labels.push_back(std::to_string(k));
  s.title = "mean attention by offset i − j", s.row_title = "head", s.col_title = "offset";
  s.value_label = "weight", s.scale = ColorScale::Sequential, s.show_values = false;
  io::write_file_atomic((dir / "offset.svg").string(), heatmap_svg(s));
}

}  // namespace qkv::report

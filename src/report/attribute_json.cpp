// `qkv attribute --json` (attribute_json.hpp).
#include "qkv/report/attribute_json.hpp"

#include <cmath>

namespace qkv::report {

nlohmann::json attribute_json(const analysis::AttributionResult& r, const std::vector<int>& ids,
                              const std::function<std::string(int)>& label) {
  auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json terms = nlohmann::json::array(), lens = nlohmann::json::array();
  for (const auto& t : r.terms)
    terms.push_back({{"name", t.name}, {"kind", t.kind}, {"layer", t.layer}, {"head", t.head}, {"value", t.value}});
  for (const auto& l : r.lens)
    lens.push_back({{"where", l.where},
                    {"layer", l.layer},
                    {"logit_diff", l.logit_diff},
                    {"top_token", l.top_token},
                    {"top_label", label(l.top_token)},
                    {"answer_rank", l.answer_rank}});
  return {{"tokens", ids},
          {"position", r.position},
          {"answer", r.answer},
          {"wrong", r.wrong},
          {"logit_diff", r.logit_diff},
          {"sum_terms", r.sum_terms},
          {"sum_minus_logit_diff", finite(r.sum_minus_logit_diff)},
          {"norm_scale", r.norm_scale},
          {"per_head", r.per_head},
          {"heads_vs_attn_out_max_abs", r.heads_vs_attn_out_max_abs},
          {"note", r.note},
          {"terms", terms},
          {"lens", lens}};
}

}  // namespace qkv::report

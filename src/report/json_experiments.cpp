#include <algorithm>
#include <cmath>

#include "qkv/error.hpp"
#include "qkv/report/experiments_json.hpp"

namespace qkv::report {

namespace an = qkv::analysis;
using nlohmann::json;

const char* const kExperimentText = "When Mary and John went to the store, John gave a drink to Mary.";

std::vector<int> experiment_ids(const Arch& c, const Tokenizer* tok, const std::vector<int>& given) {
  if (!given.empty()) return given;
  if (tok) return tok->encode(kExperimentText);
  const int n = std::min(16, c.n_ctx);
  const std::vector<int> seq = an::repeated_random_tokens(c.vocab_size, n, 1, 0)[0];
  return std::vector<int>(seq.begin(), seq.begin() + n);
}

int repeated_length(const Arch& c, int requested, int bos, int min_n) {
  const int start = bos >= 0 ? 1 : 0;
  const int max_n = (c.n_ctx - start) / 2;
  if (max_n < min_n) usage_error("--seq-len: the model has only " + std::to_string(c.n_ctx) + " positions");
  const int n = requested != 0 ? requested : std::min(50, max_n);
  if (n < min_n || n > max_n)
    usage_error("--seq-len: " + std::to_string(n) + " is outside [" + std::to_string(min_n) + ", " +
                std::to_string(max_n) + "] (the repeated sequence must fit the model's " +
                std::to_string(c.n_ctx) + " positions)");
  if (bos >= c.vocab_size)
    usage_error("--bos: " + std::to_string(bos) + " is outside [0, " + std::to_string(c.vocab_size) + ")");
  return n;
}

namespace {
json part_json(const an::ProjectionPart& p) {
  return {{"max_abs_diff", p.max_abs_diff}, {"max_abs", p.max_abs}, {"ln_trap_rel", p.ln_trap_rel},
          {"bias_trap_rel", p.bias_trap_rel}, {"bias_norm", p.bias_norm}};
}

}  // namespace

json project_json(const an::ProjectionResult& r) {
  // q_weight_shape: the stored tensor that holds Q (GPT-2: c_attn [d, 3d]), and what the maps were read from
  return {{"family", r.family},
          {"layout", r.layout},
          {"norm", r.norm},
          {"layer", r.layer},
          {"tokens", r.T},
          {"d", r.d},
          {"heads", r.H},
          {"kv_heads", r.n_kv},
          {"dh", r.dh},
          {"q_weight_shape", r.weight_shape},
          {"q_bias_shape", r.has_bias ? json(r.bias_shape) : json(nullptr)},
          {"has_bias", r.has_bias},
          {"ln_max_abs_diff", r.ln_max_abs_diff},
          {"q", part_json(r.q)},
          {"k", part_json(r.k)},
          {"v", part_json(r.v)},
          {"heads_max_abs_diff", r.heads_max_abs_diff},
          {"interleaved_cut_rel", r.interleaved_cut_rel}};
}

json scores_json(const an::ScoresResult& r, const std::vector<std::string>& labels) {
  std::vector<std::vector<double>> S;
  for (int i = 0; i < r.T; i++) S.emplace_back(r.S.a.begin() + i * r.T, r.S.a.begin() + (i + 1) * r.T);
  return {{"family", r.family},
          {"rotated", r.rotated},
          {"scale", r.scale},
          {"kv_head", r.kv_head},
          {"S_vs_hook_max_abs", r.S_vs_hook_max_abs},
          {"S_is", r.rotated ? "scale·(R_i q_i)·(R_j k_j): the rotated q and k, before the mask"
                             : "scale·q·kᵀ, before the mask"},
          {"layer", r.layer},
          {"head", r.head},
          {"tokens", labels},
          {"S", S},
          {"asym_rel", r.asym_rel},
          {"max_asym",
           {{"value", r.max_asym}, {"i", r.max_i}, {"j", r.max_j}, {"S_ij", r.S_ij}, {"S_ji", r.S_ji}}},
          {"M",
           {{"shape", {r.d, r.d}},
            {"norm", r.M.norm},
            {"antisym_share", r.M.antisym_share},
            {"sym_share", r.M.sym_share}}},
          {"bias",
           {{"share_xx", r.share_xx},
            {"share_xb", r.share_xb},
            {"share_bx", r.share_bx},
            {"share_bb", r.share_bb},
            {"bias_share", r.bias_share},
            {"bias_share_softmax", r.bias_share_softmax},
            {"reconstruction_max_abs", r.reconstruction_max_abs}}}};
}

json swap_json(const an::SwapResult& r) {
  return {{"family", r.family},
          {"rotated", r.rotated},
          {"has_bias", r.has_bias},
          {"scale", r.scale},
          {"layer", r.layer},
          {"head", r.head},
          {"tokens", r.T},
          {"S_vs_model_max_abs", r.S_vs_model_max_abs},
          {"full_swap", {{"vs_ST_max_abs", r.full_vs_ST_max_abs}, {"vs_ST_rel", r.full_vs_ST_rel}}},
          {"matrices_only", {{"vs_S_rel", r.matrices_vs_S_rel}, {"vs_ST_rel", r.matrices_vs_ST_rel}}},
          {"pattern", {{"full_swap_vs_AT_rel", r.pattern_full_vs_AT_rel},
                       {"full_swap_vs_A_rel", r.pattern_full_vs_A_rel},
                       {"column_sum_max_dev", r.column_sum_max_dev}}}};
}

json heads_json(const an::HeadScan& scan, int n, int batch, uint64_t seed, int bos) {
  json heads = json::array();
  for (const auto& s : scan.heads) {
    json j = {{"layer", s.layer}, {"head", s.head}, {"previous_token", s.previous_token},
              {"duplicate_token", s.duplicate_token}, {"induction", s.induction},
              {"induction_detector", s.induction_detector}, {"induction_shifted", s.induction_shifted}};
    if (scan.has_text)
      j["text"] = {{"previous_token", s.text_previous_token}, {"duplicate_token", s.text_duplicate_token},
                   {"induction", s.text_induction}};
    heads.push_back(j);
  }
  auto best = [&](auto score) {
    const auto it = std::max_element(scan.heads.begin(), scan.heads.end(),
                                     [&](const auto& x, const auto& y) { return score(x) < score(y); });
    return json{{"layer", it->layer}, {"head", it->head}, {"score", score(*it)}};
  };
  return {{"seq_len", n}, {"batch", batch}, {"seed", seed}, {"bos", bos},
          {"text_tokens", scan.has_text ? scan.text_tokens : 0}, {"heads", heads},
          {"best", {{"previous_token", best([](const auto& s) { return s.previous_token; })},
                    {"duplicate_token", best([](const auto& s) { return s.duplicate_token; })},
                    {"induction", best([](const auto& s) { return s.induction; })}}}};
}

json ablate_json(const an::AblationResult& r, uint64_t seed) {
  return {{"family", r.family},
          {"ov_ablation", "the head's slice of hook_z zeroed"},
          {"layer", r.layer},
          {"head", r.head},
          {"seq_len", r.n},
          {"batch", r.batch},
          {"seed", seed},
          {"loss",
           {{"intact", r.loss_intact},
            {"qk_ablated", r.loss_qk},
            {"ov_ablated", r.loss_ov},
            {"first_half", r.loss_first_half}}},
          {"ov_pattern_max_abs_diff", r.ov_pattern_max_abs_diff},
          {"qk_pattern_max_abs_diff", r.qk_pattern_max_abs_diff},
          {"intact_vs_model_max_abs", r.intact_vs_model_max_abs}};
}

json circuits_json(const an::CircuitsResult& r) {
  const an::CompositionBaseline& b = r.baseline;
  json heads = json::array(), comp = json::array();
  for (const auto& c : r.heads)
    heads.push_back({{"layer", c.layer}, {"head", c.head}, {"qk_norm", c.qk_norm},
                     {"qk_antisym_share", c.qk_antisym_share}, {"ov_norm", c.ov_norm}, {"copying", c.copying}});
  for (const auto& c : r.compositions)
    comp.push_back({{"from", {c.l1, c.h1}}, {"to", {c.l2, c.h2}}, {"q", c.q}, {"k", c.k}, {"v", c.v}});
  json j = {{"fold_ln", r.options.fold_ln},
            {"heads", heads},
            {"composition", comp},
            {"baseline",
             {{"samples", b.samples},
              {"q_mean", b.q_mean},
              {"q_std", b.q_std},
              {"k_mean", b.k_mean},
              {"k_std", b.k_std},
              {"v_mean", b.v_mean},
              {"v_std", b.v_std}}}};
  j["family"] = r.family, j["kv_heads"] = r.n_kv, j["query_heads"] = r.H;
  json g = json::array();
  for (const auto& c : r.group_compositions)
    g.push_back({{"from", {c.l1, c.h1}}, {"to_group", {c.l2, c.g2}}, {"k", c.k}, {"v", c.v}});
  j["group_composition"] = g;
  if (!r.group_compositions.empty())
    j["baseline"]["group"] = {
        {"k_mean", b.kg_mean}, {"k_std", b.kg_std}, {"v_mean", b.vg_mean}, {"v_std", b.vg_std}};
  return j;
}

}  // namespace qkv::report

// Kept for the GPT-2 tour until it moves to Model (src/analysis/tour.cpp, patching_tour.cpp still take a
// class GPT2): model_view and the `const GPT2&` overloads it calls, each the Model overload on a view of
// the same floats. Nothing else calls them; this file goes when the tour runs on Model.
#include "qkv/analysis/ablate.hpp"
#include "qkv/analysis/circuits.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/head_weights.hpp"
#include "qkv/analysis/patching.hpp"
#include "qkv/analysis/projections.hpp"
#include "qkv/analysis/scores.hpp"
#include "qkv/analysis/swap.hpp"

namespace qkv::analysis {

Model model_view(const GPT2& g) {
  nlohmann::json cj = {{"model_type", "gpt2"},
                       {"vocab_size", g.config.vocab_size},
                       {"n_positions", g.config.n_positions},
                       {"n_embd", g.config.n_embd},
                       {"n_layer", g.config.n_layer},
                       {"n_head", g.config.n_head},
                       {"layer_norm_epsilon", g.config.layer_norm_epsilon},
                       {"qkv_attn_only", g.config.attn_only}};
  if (g.config.n_inner > 0) cj["n_inner"] = g.config.n_inner;
  Model m;
  m.arch = arch_from_config(cj, "GPT2 in memory");
  m.source = g.source;
  m.table = tensor_table(m.arch);
  m.blocks.resize(size_t(m.arch.n_layer));
  for (size_t i = 0; i < m.table.size(); i++) {
    const TensorSpec& s = m.table[i];
    Weight* w = &role_slot(m, m.blocks, s.role, s.layer);
    w->name = s.name;
    w->shape = s.shape;
    w->type = WeightType::F32;
    w->data = g.param(s.name);
    w->in_out = s.shape.size() == 2 && !is_embedding(s.role);
    m.index[s.name] = i;
  }
  return m;
}

// kept for the GPT-2 tour until it moves to Model
ProjectionResult project(const GPT2& g, const std::vector<int>& ids, int layer) {
  return project(model_view(g), ids, layer);
}

// kept for the GPT-2 tour until it moves to Model
ScoresResult score_asymmetry(const GPT2& g, const std::vector<int>& ids, int layer, int head) {
  return score_asymmetry(model_view(g), ids, layer, head);
}

// kept for the GPT-2 tour until it moves to Model
SwapResult swap_query_key(const GPT2& g, const std::vector<int>& ids, int layer, int head) {
  return swap_query_key(model_view(g), ids, layer, head);
}

// kept for the GPT-2 tour until it moves to Model
HeadScan scan_heads(const GPT2& g, const std::vector<std::vector<int>>& repeated, int n, int bos,
                    const std::vector<int>& text) {
  return scan_heads(model_view(g), repeated, n, bos, text);
}

// kept for the GPT-2 tour until it moves to Model
CircuitsResult circuits(const GPT2& g, const CircuitsOptions& options) {
  return circuits(model_view(g), options);
}

// kept for the GPT-2 tour until it moves to Model
AblationResult ablate_head(const GPT2& g, const std::vector<std::vector<int>>& repeated, int n, int bos,
                           int layer, int head) {
  return ablate_head(model_view(g), repeated, n, bos, layer, head);
}

// kept for the GPT-2 tour until it moves to Model
HeadWeights head_weights(const GPT2& g, int layer, int head, bool fold_ln_1) {
  return head_weights(model_view(g), layer, head, fold_ln_1);
}

}  // namespace qkv::analysis

// Gemma and Gemma 2: the Llama-style core with RMSNorm's (1 + w) gain, embeddings scaled by √d, GeGLU,
// tied embeddings, a head size of their own; Gemma 2 adds post-norms, query_pre_attn_scalar, soft-caps
// and a sliding window on every other layer.
#include <cmath>

#include "model/families/common.hpp"

namespace qkv::family_rows {
namespace {

void read_gemma(const ConfigKeys& k, Arch& a) {
  read_llama_like(k, a);
  a.norm = NormKind::RMSNormPlusOne;
  a.embed_scale = true;
  a.tied_embeddings = k.boolean("tie_word_embeddings", true);
  a.mlp = activation(k, k.has("hidden_activation") ? "hidden_activation" : "hidden_act", "gelu_pytorch_tanh",
                     true);
}

void read_gemma2(const ConfigKeys& k, Arch& a) {
  read_gemma(k, a);
  a.post_norms = true;
  a.attn_scale = 1.0 / std::sqrt(k.number("query_pre_attn_scalar", a.dh));
  a.attn_softcap = k.number("attn_logit_softcapping", 0.0);
  a.final_softcap = k.number("final_logit_softcapping", 0.0);
  sliding(k, a, false);
}

nlohmann::json gemma_config(const std::string& type, const std::string& architecture, bool tiny) {
  nlohmann::json j = llama_like_config(type, architecture, tiny);
  j["head_dim"] = tiny ? 32 : 256;  // not d / H: Gemma's head size is its own
  j["num_key_value_heads"] = type == "gemma" ? 1 : 2;
  j["hidden_act"] = "gelu_pytorch_tanh";
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["tie_word_embeddings"] = true;
  j["bos_token_id"] = 2, j["eos_token_id"] = 1;
  return j;
}

nlohmann::json gemma1_config(bool tiny) {
  return gemma_config("gemma", "GemmaForCausalLM", tiny);
}

nlohmann::json gemma2_config(bool tiny) {
  nlohmann::json j = gemma_config("gemma2", "Gemma2ForCausalLM", tiny);
  j["query_pre_attn_scalar"] = tiny ? 24 : 256;
  j["attn_logit_softcapping"] = tiny ? 5.0 : 50.0;  // tiny: low enough that random scores reach it
  j["final_logit_softcapping"] = tiny ? 3.0 : 30.0;
  j["sliding_window"] = tiny ? 8 : 4096;
  return j;
}

}  // namespace

Family gemma() {
  return {"gemma", "Gemma", "GemmaForCausalLM", "gemma", "", read_gemma, llama_like_tensors, gemma1_config};
}
Family gemma2() {
  return {"gemma2", "Gemma 2",   "Gemma2ForCausalLM", "gemma2",
          "",       read_gemma2, llama_like_tensors,  gemma2_config};
}

}  // namespace qkv::family_rows

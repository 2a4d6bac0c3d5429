// GPT-2 (Hugging Face's GPT2LMHeadModel; llm.c's .bin and llama.cpp's gpt2 GGUF load into the same Arch):
// learned positions, LayerNorm with bias, c_attn — one Conv1D [d, 3d] whose column thirds are Q, K, V —,
// GELU (tanh) MLP, tied embeddings. qkv's own attention-only variant ("qkv_attn_only": true) has no ln_2
// and no MLP; the bundled model is one.
#include "model/families/common.hpp"
#include "qkv/error.hpp"

namespace qkv::family_rows {
namespace {

void read(const ConfigKeys& k, Arch& a) {
  // Hugging Face's GPT2Config defaults (GPT-2 small) for absent keys; ranges named by GPT-2's own keys.
  a.vocab_size = k.integer_in("vocab_size", 50257, 1, 1 << 24);
  a.n_ctx = k.has("n_positions") ? k.integer_in("n_positions", 1024, 1, 1 << 20)
                                 : k.integer_in("n_ctx", 1024, 1, 1 << 20);
  a.d = k.integer_in("n_embd", 768, 1, 1 << 16);
  a.n_layer = k.integer_in("n_layer", 12, 1, 1024);
  a.H = a.n_kv = k.integer_in("n_head", 12, 1, a.d);
  if (a.H > 0 && a.d % a.H != 0)
    data_error(k.where + ": n_head " + std::to_string(a.H) + " does not divide n_embd " +
               std::to_string(a.d));
  a.dh = a.H > 0 ? a.d / a.H : 0;
  const std::string act = k.string("activation_function", "gelu_new");
  if (act != "gelu_new")
    data_error(k.where + ": config key \"activation_function\" is \"" + act +
               "\", expected \"gelu_new\" (the only activation qkv implements for GPT-2)");
  const bool attn_only = k.boolean("qkv_attn_only", false);
  const int inner = k.integer_in("n_inner", 0, 0, 1 << 18);  // 0 or null: 4 · n_embd
  a.d_ff = attn_only ? 0 : inner > 0 ? inner : 4 * a.d;
  a.norm = NormKind::LayerNorm, a.norm_bias = true, a.norm_eps = k.number("layer_norm_epsilon", 1e-5);
  a.pos = PosKind::Learned;
  a.qkv_layout = QkvLayout::Gpt2Thirds;
  a.conv1d = true;
  a.qkv_bias = a.o_bias = a.mlp_bias = true;
  a.mlp = attn_only ? MlpKind::None : MlpKind::GeluTanh;
  a.tied_embeddings = true;
}

void tensors(const Arch& a, TensorList& t) {
  const int64_t d = a.d, ff = a.d_ff;
  t.add("wte.weight", {a.vocab_size, d}, Role::wte);
  t.add("wpe.weight", {a.n_ctx, d}, Role::wpe);
  for (int l = 0; l < a.n_layer; l++) {
    const std::string p = "h." + std::to_string(l) + ".";
    t.add(p + "ln_1.weight", {d}, Role::ln1_w, l);
    t.add(p + "ln_1.bias", {d}, Role::ln1_b, l);
    t.add(p + "attn.c_attn.weight", {d, 3 * d}, Role::wqkv, l);
    t.add(p + "attn.c_attn.bias", {3 * d}, Role::bqkv, l);
    t.add(p + "attn.c_proj.weight", {d, d}, Role::wo, l);
    t.add(p + "attn.c_proj.bias", {d}, Role::bo, l);
    if (a.attn_only()) continue;
    t.add(p + "ln_2.weight", {d}, Role::ln2_w, l);
    t.add(p + "ln_2.bias", {d}, Role::ln2_b, l);
    t.add(p + "mlp.c_fc.weight", {d, ff}, Role::w_up, l);
    t.add(p + "mlp.c_fc.bias", {ff}, Role::b_up, l);
    t.add(p + "mlp.c_proj.weight", {ff, d}, Role::w_down, l);
    t.add(p + "mlp.c_proj.bias", {d}, Role::b_down, l);
  }
  t.add("ln_f.weight", {d}, Role::lnf_w);
  t.add("ln_f.bias", {d}, Role::lnf_b);
}

nlohmann::json default_config(bool tiny) {
  // GPT-2 small, or a 2-layer d = 64 miniature of it.
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"vocab_size", tiny ? 512 : 50257},
          {"n_positions", tiny ? 128 : 1024},
          {"n_ctx", tiny ? 128 : 1024},
          {"n_embd", tiny ? 64 : 768},
          {"n_layer", tiny ? 2 : 12},
          {"n_head", tiny ? 4 : 12},
          {"n_inner", nullptr},
          {"layer_norm_epsilon", 1e-5},
          {"activation_function", "gelu_new"},
          {"qkv_attn_only", false}};
}

}  // namespace

Family gpt2() {
  return {"gpt2", "GPT-2", "GPT2LMHeadModel", "gpt2", "transformer.", read, tensors, default_config,
          InitDraw::per_tensor_double};
}

}  // namespace qkv::family_rows

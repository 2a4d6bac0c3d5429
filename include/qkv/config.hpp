// GPT-2 hyper-parameters, named as Hugging Face's config.json names them.
#pragma once
#include <cstdint>
#include <string>

namespace qkv {

struct GPT2Config {
  int vocab_size = 50257;
  int n_positions = 1024;  // n_ctx: the number of learned positions (wpe rows)
  int n_embd = 768;        // d
  int n_layer = 12;
  int n_head = 12;         // H; dh = n_embd / n_head
  int n_inner = 0;         // MLP width; 0 means 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  bool attn_only = false;  // qkv extension: blocks without ln_2 and MLP (config key "qkv_attn_only")

  int head_dim() const { return n_embd / n_head; }
  int mlp_dim() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  // Throws qkv::Error (Data) naming the field when a value is out of range or n_head does not divide n_embd.
  void validate(const std::string& where) const;
};

}  // namespace qkv

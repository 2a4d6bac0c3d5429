// GPT-2 hyper-parameters as Hugging Face's config.json spells them (plus "qkv_attn_only").
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/config.hpp"

namespace qkv::io {

// Reads keys vocab_size, n_positions (fallback n_ctx), n_embd, n_layer, n_head, n_inner (null or int),
// layer_norm_epsilon, activation_function (must be "gelu_new" if present), model_type (must be "gpt2"
// if present), qkv_attn_only (bool, default false). Missing keys keep GPT2Config's defaults (which are
// Hugging Face's); unknown keys are ignored. A wrong JSON type is an error naming the key, the expected
// type and what was found. The result is validated with GPT2Config::validate(where).
GPT2Config config_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json config_to_json(const GPT2Config& config);

GPT2Config read_config_json(const std::string& path);
void write_config_json(const std::string& path, const GPT2Config& config);  // atomic

}  // namespace qkv::io

// What the checkpoint readers of the model layer share (lm_load.cpp, llmc_load.cpp, gguf_family.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "qkv/lm.hpp"

namespace qkv::detail {

// A JSON file, parsed; qkv::Error naming the file when it is unreadable or not JSON.
nlohmann::json read_json(const std::string& path);
// Refuses NaN and Inf in a weight, naming the file, the tensor and the flat index: F32/F16/BF16 by their
// bit patterns (exponent all ones, nothing converted), a quantized (GGML) one by its dequantized values.
void check_finite(const Weight& w, const std::string& file);
// "F32", "BF16+F32", …: the storage types of a model's weights, for `qkv info`'s source line.
std::string dtype_summary(const Model& m);

}  // namespace qkv::detail

namespace qkv {
// An llm.c GPT-2 .bin as views into the mapped file (llmc_load.cpp); load_lm's .bin branch.
Model load_llmc_lm(const std::string& path);
}  // namespace qkv

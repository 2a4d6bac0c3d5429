#include "qkv/config.hpp"

#include "qkv/error.hpp"

namespace qkv {

void GPT2Config::validate(const std::string& where) const {
  auto bad = [&](const std::string& field, long long value, const std::string& want) {
    data_error(where + ": " + field + " is " + std::to_string(value) + ", expected " + want);
  };
  if (vocab_size < 1 || vocab_size > (1 << 24)) bad("vocab_size", vocab_size, "1 .. 16777216");
  if (n_positions < 1 || n_positions > (1 << 20)) bad("n_positions", n_positions, "1 .. 1048576");
  if (n_embd < 1 || n_embd > (1 << 16)) bad("n_embd", n_embd, "1 .. 65536");
  if (n_layer < 1 || n_layer > 1024) bad("n_layer", n_layer, "1 .. 1024");
  if (n_head < 1 || n_head > n_embd) bad("n_head", n_head, "1 .. n_embd");
  if (n_embd % n_head != 0)
    data_error(where + ": n_head " + std::to_string(n_head) + " does not divide n_embd " +
               std::to_string(n_embd));
  if (n_inner < 0 || n_inner > (1 << 18)) bad("n_inner", n_inner, "0 (meaning 4 * n_embd) .. 262144");
  if (!(layer_norm_epsilon > 0.0 && layer_norm_epsilon < 1.0))
    data_error(where + ": layer_norm_epsilon is " + std::to_string(layer_norm_epsilon) +
               ", expected a number in (0, 1)");
}

}  // namespace qkv

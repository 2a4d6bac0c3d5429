// read_config_json (JSON parse + config_from_json + GPT2Config::validate) on arbitrary bytes. A config
// it accepts is valid and survives config_to_json -> config_from_json unchanged.
#include "fuzz_util.hpp"
#include "qkv/io/config_json.hpp"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("config.json", fuzz::as_view(data, size));
  try {
    const GPT2Config c = io::read_config_json(path);
    c.validate("fuzz");
    const GPT2Config d = io::config_from_json(io::config_to_json(c), "round trip");
    QKV_FUZZ_CHECK(c.vocab_size == d.vocab_size && c.n_positions == d.n_positions && c.n_embd == d.n_embd &&
                       c.n_layer == d.n_layer && c.n_head == d.n_head && c.n_inner == d.n_inner &&
                       c.layer_norm_epsilon == d.layer_norm_epsilon && c.attn_only == d.attn_only,
                   "config round trip");
  } catch (const Error&) {
  }
  return 0;
}

// load_model on a .safetensors file whose config is in __metadata__["config"] (as qkv writes them):
// config validation, tensor names/shapes against GPT-2's table, lm_head/buffers, NaN/Inf. What loads
// must be finite and run forward on two tokens. No allocation may exceed what the file can back.
#include <cmath>

#include "fuzz_util.hpp"
#include "qkv/model.hpp"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.safetensors", fuzz::as_view(data, size));
  try {
    const GPT2 m = load_model(path);
    for (float x : m.params) QKV_FUZZ_CHECK(std::isfinite(x), "load_model promised finite weights");
    const int T = std::min(2, m.config.n_positions);
    std::vector<int> ids(size_t(T), 0);
    if (T > 1) ids[1] = m.config.vocab_size - 1;
    Activations acts;
    const auto& logits = forward(m, ids, acts);
    QKV_FUZZ_CHECK(logits.size() == size_t(T) * size_t(m.config.vocab_size), "logits shape");
  } catch (const Error&) {
  }
  return 0;
}

// load_lm on a .safetensors file whose config is in __metadata__["config"] (as qkv writes them): the
// config read through the family table, tensor names/shapes against the family's table, lm_head/buffers,
// NaN/Inf. What loads must run forward on two tokens with finite logits. No allocation may exceed what
// the file can back.
#include <algorithm>
#include <cmath>

#include "fuzz_util.hpp"
#include "qkv/lm.hpp"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.safetensors", fuzz::as_view(data, size));
  try {
    const Model m = load_lm(path);
    const int T = std::min(2, m.arch.n_ctx);
    std::vector<int> ids(size_t(T), 0);
    if (T > 1) ids[1] = m.arch.vocab_size - 1;
    RunState st;
    const auto& logits = run(m, ids, st);
    QKV_FUZZ_CHECK(logits.size() == size_t(T) * size_t(m.arch.vocab_size), "logits shape");
  } catch (const Error&) {
  }
  return 0;
}

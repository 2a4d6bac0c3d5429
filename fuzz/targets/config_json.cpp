// A config.json on arbitrary bytes through the family table's readers (arch_from_config: JSON parse,
// model_type's row, every key typed and ranged). A config it accepts describes a model whose every tensor
// has positive dimensions and whose heads tile the width they claim.
#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "qkv/arch.hpp"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    const Arch a = arch_from_config(j, "fuzz config.json");
    QKV_FUZZ_CHECK(a.n_layer >= 1 && a.H >= 1 && a.n_kv >= 1 && a.H % a.n_kv == 0 && a.dh >= 1, "heads");
    QKV_FUZZ_CHECK(a.vocab_size >= 1 && a.n_ctx >= 1 && a.d >= 1, "sizes");
    if (a.n_layer > 4096) return 0;  // a table of that many blocks is large but legitimate; not built here
    for (const TensorSpec& s : tensor_table(a))
      for (int64_t x : s.shape) QKV_FUZZ_CHECK(x >= 1, s.name);
  } catch (const Error&) {
  }
  return 0;
}

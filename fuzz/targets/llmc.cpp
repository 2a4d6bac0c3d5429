// read_llmc on arbitrary bytes, then load_lm on the same file (the .bin path: llm.c tensors as views into
// the mapped file under GPT-2's family table, NaN/Inf check). What it accepts must have exactly the
// shapes it claims, and its parameters are bounded by the file.
#include "fuzz_util.hpp"
#include "qkv/io/llmc.hpp"
#include "qkv/lm.hpp"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("in.bin", fuzz::as_view(data, size));
  try {
    const io::LlmcCheckpoint ck = io::read_llmc(path);
    const int L = ck.config.n_layer;
    QKV_FUZZ_CHECK(ck.tensors.size() == size_t(2 + 12 * L + 2), "tensor count");
    for (const auto& t : ck.tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      QKV_FUZZ_CHECK(int64_t(t.data.size()) == n, t.name);
    }
  } catch (const Error&) {
  }
  try {
    const Model m = load_lm(path);
    QKV_FUZZ_CHECK(m.num_parameters() * 2 <= int64_t(size), "parameters are bounded by the file");
  } catch (const Error&) {
  }
  return 0;
}

// Tokenizer::from_files on arbitrary vocab.json and merges.txt, then encode/decode of arbitrary text
// with whatever loaded. The input is  vocab "\n@@@@\n" merges "\n@@@@\n" text.
// Promises checked: ids are inside the vocabulary and decode(encode(text)) == text.
#include "fuzz_util.hpp"
#include "qkv/tokenizer.hpp"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split(fuzz::as_view(data, size), "\n@@@@\n", 3);
  const std::string vocab = fuzz::write_scratch("vocab.json", parts[0]);
  const std::string merges = fuzz::write_scratch("merges.txt", parts[1]);
  try {
    const Tokenizer t = Tokenizer::from_files(vocab, merges);
    const std::vector<int> ids = t.encode(parts[2]);
    for (int id : ids) QKV_FUZZ_CHECK(id >= 0 && id < t.vocab_size(), std::to_string(id));
    QKV_FUZZ_CHECK(t.decode(ids) == parts[2], "decode(encode(text)) == text");
  } catch (const Error&) {
  }
  return 0;
}

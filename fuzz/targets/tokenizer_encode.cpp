// GPT-2's pre-tokenizer and BPE on arbitrary bytes (invalid UTF-8 included), with a committed subset
// of GPT-2's vocabulary (fuzz/data/tokenizer: the 256 byte tokens and the first merges). Promises
// checked: ids inside the vocabulary, decode(encode(s)) == s, encode is deterministic (the cache), and
// decode of arbitrary ids either works or throws qkv::Error.
#include <cstring>

#include "fuzz_util.hpp"
#include "qkv/tokenizer.hpp"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer t = Tokenizer::from_dir(QKV_FUZZ_DATA_DIR "/tokenizer");
  const std::string_view s = fuzz::as_view(data, size);
  const std::vector<int> ids = t.encode(s);
  for (int id : ids) QKV_FUZZ_CHECK(id >= 0 && id < t.vocab_size(), std::to_string(id));
  QKV_FUZZ_CHECK(t.decode(ids) == s, "decode(encode(s)) == s");
  QKV_FUZZ_CHECK(t.encode(s) == ids, "encode is deterministic");
  // The same bytes read as little-endian int32 ids: decode validates each one.
  std::vector<int> raw(size / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);
  try {
    t.decode(raw);
  } catch (const Error&) {
  }
  return 0;
}

// GgufFile::open (header, 13 value types, nested arrays, tensor infos, alignment, offsets) and what it
// permits, on arbitrary bytes: an accepted file's tensors lie inside the file, aligned and disjoint;
// every supported tensor dequantizes; metadata and tensors survive write_gguf + open unchanged; the
// families' loader (gpt2, llama, qwen2, gemma, gemma2, phi3; a loaded model runs two tokens) and the
// metadata tokenizer (gpt2, llama, none) either succeed or throw qkv::Error.
#include "qkv/io/gguf.hpp"

#include <cstring>

#include "fuzz_util.hpp"
#include "qkv/io/gguf_family.hpp"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("in.gguf", fuzz::as_view(data, size));
  try {
    const auto f = io::GgufFile::open(path);
    QKV_FUZZ_CHECK(f.data_offset() % f.alignment() == 0, "data section aligned");
    std::vector<io::GgufWriteTensor> back;
    for (const io::GgufTensorInfo& t : f.tensors()) {
      QKV_FUZZ_CHECK(t.offset % f.alignment() == 0, t.name);
      QKV_FUZZ_CHECK(f.data_offset() + t.offset + t.nbytes <= size, t.name);
      QKV_FUZZ_CHECK(std::memcmp(t.data, data + f.data_offset() + t.offset, t.nbytes) == 0, t.name);
      QKV_FUZZ_CHECK(f.find(t.name) == &t, t.name);
      const auto tr = io::ggml_type_traits(uint32_t(t.type));
      QKV_FUZZ_CHECK(tr.has_value(), t.name);
      if (tr->dequantizes && t.numel() <= (1 << 22)) {
        std::vector<float> y(size_t(t.numel()));
        f.read_f32(t, y.data());
      }
      back.push_back({t.name, t.type, t.ne, std::vector<unsigned char>(t.data, t.data + t.nbytes)});
    }
    for (size_t i = 0; i < f.tensors().size(); ++i)
      for (size_t j = i + 1; j < f.tensors().size(); ++j) {
        const auto &a = f.tensors()[i], &b = f.tensors()[j];
        if (a.nbytes && b.nbytes)
          QKV_FUZZ_CHECK(a.offset + a.nbytes <= b.offset || b.offset + b.nbytes <= a.offset,
                         a.name + " / " + b.name);
      }

    const std::string out = fuzz::scratch_dir() + "/out.gguf";
    io::write_gguf(out, f.metadata(), back);
    const auto g = io::GgufFile::open(out);
    QKV_FUZZ_CHECK(g.metadata().size() == f.metadata().size(), "metadata count round trip");
    for (size_t i = 0; i < f.metadata().size(); ++i) {
      QKV_FUZZ_CHECK(g.metadata().entries()[i].first == f.metadata().entries()[i].first, "key round trip");
      QKV_FUZZ_CHECK(g.metadata().entries()[i].second == f.metadata().entries()[i].second,
                     f.metadata().entries()[i].first);
    }
    QKV_FUZZ_CHECK(g.tensors().size() == back.size(), "tensor count round trip");
    for (size_t i = 0; i < back.size(); ++i) {
      const auto& t = g.tensors()[i];
      QKV_FUZZ_CHECK(t.name == back[i].name && t.type == back[i].type && t.ne == back[i].ne, back[i].name);
      QKV_FUZZ_CHECK(t.nbytes == back[i].data.size(), back[i].name);
      QKV_FUZZ_CHECK(t.nbytes == 0 || std::memcmp(t.data, back[i].data.data(), t.nbytes) == 0, back[i].name);
    }

    try {
      if (f.metadata().has("tokenizer.ggml.model")) gguf_tokenizer(f);
    } catch (const Error&) {
    }
    try {
      const Model m = load_gguf_lm(path);
      if (m.arch.n_ctx >= 2 && int64_t(m.arch.d) * m.arch.vocab_size <= (1 << 22)) {
        RunState st;
        const std::vector<float>& y = run(m, {0, m.arch.vocab_size - 1}, st);
        QKV_FUZZ_CHECK(y.size() == size_t(2) * size_t(m.arch.vocab_size), "logits shape");
      }
    } catch (const Error&) {
    }
  } catch (const Error&) {
  }
  return 0;
}

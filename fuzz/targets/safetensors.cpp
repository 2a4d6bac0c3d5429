// SafetensorsFile::open (header length, UTF-8, JSON, dtypes, shapes, offsets) and the reads it
// permits, on arbitrary bytes. A header it accepts must describe exactly the bytes in the file, and
// what it read must survive write_safetensors + open unchanged.
#include <cstring>
#include <map>

#include "fuzz_util.hpp"
#include "qkv/io/safetensors.hpp"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("in.safetensors", fuzz::as_view(data, size));
  try {
    const auto f = io::SafetensorsFile::open(path);
    uint64_t n = 0;
    std::memcpy(&n, data, 8);  // open() accepted it, so the 8-byte length is there
    const uint64_t data_size = size - 8 - n;
    uint64_t pos = 0;
    std::vector<std::vector<float>> values;
    std::vector<io::WriteTensor> back;
    for (const io::TensorInfo& t : f.tensors()) {
      QKV_FUZZ_CHECK(t.begin == pos, t.name);
      QKV_FUZZ_CHECK(t.end - t.begin == uint64_t(t.numel()) * io::dtype_size(t.dtype), t.name);
      QKV_FUZZ_CHECK(f.find(t.name) == &t, t.name);
      pos = t.end;
      values.emplace_back(size_t(t.numel()));
      f.read_f32(t, values.back().data());
      if (const float* v = f.f32_view(t); v != nullptr && t.numel() > 0)
        QKV_FUZZ_CHECK(std::memcmp(v, values.back().data(), size_t(t.numel()) * 4) == 0, t.name);
      back.push_back({t.name, t.shape, values.back().data()});
    }
    QKV_FUZZ_CHECK(pos == data_size, "the tensors cover the data section");

    // Round trip through the writer (as F32: widening is exact, so the values must come back bit for bit).
    const std::string out = fuzz::scratch_dir() + "/out.safetensors";
    io::write_safetensors(out, back, f.metadata());
    const auto g = io::SafetensorsFile::open(out);
    QKV_FUZZ_CHECK(g.metadata() == f.metadata(), "metadata round trip");
    QKV_FUZZ_CHECK(g.tensors().size() == f.tensors().size(), "tensor count round trip");
    for (size_t i = 0; i < back.size(); ++i) {
      const io::TensorInfo* t = g.find(back[i].name);
      QKV_FUZZ_CHECK(t != nullptr && t->shape == back[i].shape && t->dtype == io::DType::F32, back[i].name);
      std::vector<float> v(size_t(t->numel()));
      g.read_f32(*t, v.data());
      QKV_FUZZ_CHECK(v.empty() || std::memcmp(v.data(), values[i].data(), v.size() * 4) == 0, back[i].name);
    }
  } catch (const Error&) {
  }
  return 0;
}

// read_npy on arbitrary bytes. What it accepts holds exactly product(shape) values (1 for a 0-d array).
#include "fuzz_util.hpp"
#include "qkv/io/npy.hpp"

using namespace qkv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("in.npy", fuzz::as_view(data, size));
  try {
    const io::NpyArray a = io::read_npy(path);
    int64_t n = 1;
    for (int64_t d : a.shape) n *= d;
    QKV_FUZZ_CHECK(int64_t(a.data.size()) == n, "numel");
  } catch (const Error&) {
  }
  return 0;
}

// NumPy .npy arrays (format 1.0 / 2.0 / 3.0, little-endian, C order).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qkv::io {

struct NpyArray {
  std::vector<int64_t> shape;  // empty for a 0-d array (which holds one element)
  std::vector<double> data;    // C order, converted from the stored dtype
};

// Reads dtypes '<f2' '<f4' '<f8' '|i1' '|u1' '<i2' '<u2' '<i4' '<u4' '<i8' '<u8' '|b1' (64-bit integers
// beyond 2^53 lose precision in the conversion to double). Rejects Fortran order, big-endian and
// structured dtypes, and any mismatch between the header's shape and the file size, with a qkv::Error
// naming the file and the problem.
NpyArray read_npy(const std::string& path);

// Write NumPy format 1.0 (2.0 if the header would not fit), C order; the header is padded with spaces
// and a final newline to a multiple of 64 bytes. '<f4' and '<i4' respectively. Atomic.
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data);
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const int32_t* data);

}  // namespace qkv::io

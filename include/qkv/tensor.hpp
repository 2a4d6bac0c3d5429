// An owning, contiguous, row-major tensor of up to 4 dimensions. Ops take raw pointers and sizes
// (llm.c style) so the same kernels serve float (the product) and double (the gradient checks).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

namespace qkv {

template <class T>
class TensorT {
 public:
  TensorT() = default;
  explicit TensorT(std::vector<int64_t> shape, T fill = T(0)) : shape_(std::move(shape)) {
    data_.assign(static_cast<size_t>(count(shape_)), fill);
  }
  TensorT(std::initializer_list<int64_t> shape) : TensorT(std::vector<int64_t>(shape)) {}

  static int64_t count(const std::vector<int64_t>& shape) {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
  }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  std::vector<T>& vec() { return data_; }
  const std::vector<T>& vec() const { return data_; }
  T& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  const T& operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  // Row-major element access for 2-D and 3-D tensors.
  T& at(int64_t i, int64_t j) { return data_[static_cast<size_t>(i * shape_[1] + j)]; }
  const T& at(int64_t i, int64_t j) const { return data_[static_cast<size_t>(i * shape_[1] + j)]; }
  T& at(int64_t i, int64_t j, int64_t k) { return data_[static_cast<size_t>((i * shape_[1] + j) * shape_[2] + k)]; }
  const T& at(int64_t i, int64_t j, int64_t k) const {
    return data_[static_cast<size_t>((i * shape_[1] + j) * shape_[2] + k)];
  }
  void reshape(std::vector<int64_t> shape) {
    shape_ = std::move(shape);
    data_.resize(static_cast<size_t>(count(shape_)));
  }
  void fill(T v) { std::fill(data_.begin(), data_.end(), v); }

 private:
  std::vector<int64_t> shape_;
  std::vector<T> data_;
};

using Tensor = TensorT<float>;

std::string shape_string(const std::vector<int64_t>& shape);  // "[768, 2304]"

}  // namespace qkv

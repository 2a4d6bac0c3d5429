// safetensors files from Python through qkv's own reader and writer (include/qkv/io/safetensors.hpp):
// read every tensor as a float32 copy (F16 / BF16 widened exactly) with the reader's strict validation,
// and write float32 arrays as F32, F16 or BF16, atomically. qkv/sae.py reads and writes SAELens's
// sae_weights.safetensors with them; the errors are the CLI's (qkv.Error naming the file and tensor).
#include <pybind11/stl.h>

#include "py_model.hpp"
#include "qkv/io/safetensors.hpp"

namespace qkv_py {
namespace {

py::dict read(const std::string& path) {
  const qkv::io::SafetensorsFile f = qkv::io::SafetensorsFile::open(path);
  py::dict out;
  for (const qkv::io::TensorInfo& t : f.tensors()) {
    py::array_t<float> a(shape_of(t.shape));
    f.read_f32(t, a.mutable_data());
    out[py::str(t.name)] = a;
  }
  return out;
}

qkv::io::DType dtype_of(const std::string& s) {
  if (s == "F32") return qkv::io::DType::F32;
  if (s == "F16") return qkv::io::DType::F16;
  if (s == "BF16") return qkv::io::DType::BF16;
  qkv::usage_error("write_safetensors: dtype " + s + ": expected F32, F16 or BF16");
}

void write(const std::string& path, const std::vector<std::pair<std::string, py::array>>& tensors,
           const std::map<std::string, std::string>& metadata, const std::string& dtype) {
  std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>> keep;
  std::vector<qkv::io::WriteTensor> ts;
  for (const auto& [name, a] : tensors) {
    keep.emplace_back(a);
    const auto& k = keep.back();
    ts.push_back({name, std::vector<int64_t>(k.shape(), k.shape() + k.ndim()), k.data()});
  }
  qkv::io::write_safetensors(path, ts, metadata, dtype_of(dtype));
}

}  // namespace

void bind_safetensors(py::module_& mod) {
  mod.def("read_safetensors", &read, py::arg("path"),
          "Every tensor of a safetensors file as a float32 copy (F16/BF16 widened), validated as the CLI does.");
  mod.def("write_safetensors", &write, py::arg("path"), py::arg("tensors"), py::arg("metadata"), py::arg("dtype") = "F32",
          "Writes [(name, array), ...] as F32, F16 or BF16 with `metadata`, atomically.");
}

}  // namespace qkv_py

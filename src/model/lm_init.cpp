// Random checkpoints of any family, laid out exactly as Hugging Face writes them (`qkv init --arch`).
#include <filesystem>
#include <random>
#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/safetensors.hpp"
#include "qkv/lm.hpp"

namespace fs = std::filesystem;

namespace qkv {

void write_random_checkpoint(const std::string& dir, const nlohmann::json& config, WeightType dtype, int shards,
                             uint64_t seed) {
  const Arch arch = arch_from_config(config, "qkv init config");
  if (shards < 1 || shards > 1000) usage_error("--shards: expected 1 .. 1000, found " + std::to_string(shards));
  const std::vector<TensorSpec> table = tensor_table(arch);
  if (shards > int(table.size()))
    usage_error("--shards " + std::to_string(shards) + ": the model has only " + std::to_string(table.size()) + " tensors");
  double sigma = 0.02;
  if (const auto it = config.find("initializer_range"); it != config.end() && it->is_number()) sigma = it->get<double>();
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<float>> data;
  for (const TensorSpec& s : table) {
    int64_t n = 1;
    for (int64_t x : s.shape) n *= x;
    std::vector<float> v(static_cast<size_t>(n));
    const bool norm_w = is_norm_weight(s.role), norm_b = is_norm_bias(s.role);
    // Norm weights near their identity (1, or 0 for Gemma's 1 + w) but not at it, so a test can tell
    // w from 1 + w; biases as large as the weights, so a dropped bias shows.
    const double base = norm_w ? (arch.norm == NormKind::RMSNormPlusOne ? 0.0 : 1.0) : 0.0;
    const double sd = norm_w || norm_b ? 0.1 : sigma;
    for (auto& x : v) x = float(base + sd * normal(rng));
    data.push_back(std::move(v));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) data_error(dir + ": cannot create the output directory (" + ec.message() + ")");
  const io::DType dt = dtype == WeightType::F32 ? io::DType::F32 : dtype == WeightType::F16 ? io::DType::F16 : io::DType::BF16;
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"qkv_init_seed", std::to_string(seed)}};
  // Files first, config.json last: a directory without config.json is not a model, so an
  // interrupted init never leaves something that loads half-written.
  if (shards == 1) {
    std::vector<io::WriteTensor> ts;
    for (size_t i = 0; i < table.size(); i++) ts.push_back({table[i].name, table[i].shape, data[i].data()});
    io::write_safetensors((fs::path(dir) / "model.safetensors").string(), ts, meta, dt);
  } else {
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
    int64_t total = 0;
    const size_t n = table.size();
    for (int s = 0; s < shards; s++) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
      std::vector<io::WriteTensor> ts;
      for (size_t i = n * size_t(s) / size_t(shards); i < n * size_t(s + 1) / size_t(shards); i++) {
        ts.push_back({table[i].name, table[i].shape, data[i].data()});
        index["weight_map"][table[i].name] = name;
        total += int64_t(data[i].size() * io::dtype_size(dt));
      }
      io::write_safetensors((fs::path(dir) / name).string(), ts, meta, dt);
    }
    index["metadata"]["total_size"] = total;
    io::write_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  }
  nlohmann::json cj = config;
  cj["torch_dtype"] = dtype == WeightType::F32 ? "float32" : dtype == WeightType::F16 ? "float16" : "bfloat16";
  io::write_file_atomic((fs::path(dir) / "config.json").string(), cj.dump(2) + "\n");
}

}  // namespace qkv

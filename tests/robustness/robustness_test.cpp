// Malformed inputs that tests/io, tests/model and tests/tokenizer do not already cover (the table in
// docs/robustness.md names the test of every row): allocations bounded by the file rather than by what
// a header claims, Inf as well as NaN, directories and FIFOs given where a file is expected, and
// writers on a full file system.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/llmc.hpp"
#include "qkv/io/npy.hpp"
#include "qkv/io/safetensors.hpp"
#include "qkv/lm.hpp"
#include "qkv/lm_train.hpp"
#include "qkv/tokenizer.hpp"

#include "alloc_probe.hpp"

namespace qkv {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           ("qkv_robustness_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// A safetensors file: 8-byte length, the header padded to 8, the data.
std::string st_bytes(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

// Runs f; returns the qkv::Error message, or a description of what else happened.
template <class F>
std::string error_of(F&& f, ErrorKind want = ErrorKind::Data) {
  try {
    f();
  } catch (const Error& e) {
    if (e.kind() != want) return std::string("wrong error kind: ") + e.what();
    return e.what();
  } catch (const std::bad_alloc&) {
    return "std::bad_alloc (an allocation the input merely claimed)";
  } catch (const std::exception& e) {
    return std::string("not a qkv::Error: ") + e.what();
  }
  return "no error";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

const std::string kFx = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/";

// ---- allocations are bounded by the file, never by what a header claims ----

TEST(NoAbsurdAllocation, SafetensorsHeaderLength2To63) {
  TempDir d;
  write_raw(d / "x.safetensors", le64(uint64_t{1} << 63) + "{}");
  Probe p;
  const std::string e = error_of([&] { io::SafetensorsFile::open(d / "x.safetensors"); });
  EXPECT_LT(p.largest(), 1u << 16);
  EXPECT_HAS(e, "header length is 9223372036854775808 bytes, expected at most 100000000");
}

TEST(NoAbsurdAllocation, SafetensorsShapeClaimingExabytes) {
  TempDir d;
  write_raw(d / "x.safetensors",
            st_bytes(R"({"t":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}})", "abcd"));
  Probe p;
  const std::string e = error_of([&] { io::SafetensorsFile::open(d / "x.safetensors"); });
  EXPECT_LT(p.largest(), 1u << 16);
  EXPECT_HAS(e, "overflows");
}

TEST(NoAbsurdAllocation, NpyHeaderLengthAndShape) {
  TempDir d;
  write_raw(d / "a.npy", std::string("\x93NUMPY\x02\x00", 8) + "\xff\xff\xff\xff" + "{}");
  write_raw(d / "b.npy", std::string("\x93NUMPY\x01\x00", 8) + std::string("\x46\x00", 2) +
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }    \n");
  Probe p;
  const std::string a = error_of([&] { io::read_npy(d / "a.npy"); });
  const std::string b = error_of([&] { io::read_npy(d / "b.npy"); });
  EXPECT_LT(p.largest(), 1u << 16);
  EXPECT_HAS(a, "header length is 4294967295 bytes, but only 2 bytes follow");
  EXPECT_HAS(b, "needs 4000000000000 data bytes");
  EXPECT_HAS(b, "(file truncated)");
}

TEST(NoAbsurdAllocation, LlmcHeaderClaimingGpt2Xl) {
  TempDir d;
  std::vector<int32_t> h(256, 0);
  const int32_t dims[8] = {20240326, 3, 1024, 50257, 48, 25, 1600, 50304};
  std::memcpy(h.data(), dims, sizeof dims);
  write_raw(d / "x.bin", std::string(reinterpret_cast<const char*>(h.data()), 1024));
  Probe p;
  const std::string e = error_of([&] { load_lm(d / "x.bin"); });
  EXPECT_LT(p.largest(), 1u << 16);
  EXPECT_HAS(e, "truncated");
}

// A config that claims a model far larger than the file. load_lm must compare the file's tensors
// with the table before it allocates anything the config claims, so the allocation
// is bounded by the file's size. The file here is under 1 KiB; the config claims ~2^46 parameters.
std::string huge_config_model(const TempDir& d) {
  const nlohmann::json cfg = {{"model_type", "gpt2"}, {"vocab_size", 1 << 24}, {"n_positions", 1 << 20},
                              {"n_embd", 1 << 16},    {"n_layer", 1024},       {"n_head", 1}};
  const nlohmann::json header = {{"__metadata__", {{"config", cfg.dump()}}},
                                 {"wte.weight", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  const std::string path = d / "huge.safetensors";
  write_raw(path, st_bytes(header.dump(), std::string(4, '\0')));
  return path;
}

TEST(NoAbsurdAllocation, ConfigClaimingAHugeModelOverATinyFile) {
  TempDir d;
  const std::string path = huge_config_model(d);
  Probe p;
  const std::string e = error_of([&] { load_lm(path); });
  EXPECT_LT(p.largest(), std::size_t(64) << 20) << "load_lm allocated what the config claims before checking "
                                                   "the file's tensors against it";
  EXPECT_HAS(e, path);
  EXPECT_HAS(e, "wte.weight");
}

TEST(NoAbsurdAllocation, HuggingFaceDirectoryWithHugeConfig) {
  TempDir d;
  io::write_file_atomic(d / "config.json", nlohmann::json{{"model_type", "gpt2"}, {"vocab_size", 1 << 24},
                                                          {"n_positions", 1024}, {"n_embd", 1 << 16},
                                                          {"n_layer", 1024}, {"n_head", 1}}.dump());
  fs::copy_file(kFx + "tiny/model.safetensors", d.path / "model.safetensors");
  Probe p;
  const std::string e = error_of([&] { load_lm(d.path.string()); });
  EXPECT_LT(p.largest(), std::size_t(64) << 20) << "allocated before checking tensors against the config";
  EXPECT_HAS(e, "model.safetensors");
  EXPECT_HAS(e, "wte.weight");
}

// ---- NaN and Inf are reported, naming the tensor and where ----

TEST(NonFinite, InfInSafetensorsIsReported) {
  TempDir d;
  std::ifstream cf(kFx + "tiny/config.json");
  LmParams m = lm_params_from(load_lm(kFx + "tiny"), nlohmann::json::parse(cf));
  m.at("h.0.mlp.c_fc.weight")[7] = -INFINITY;
  save_lm(m, d / "m.safetensors", {{"config", m.config.dump()}});
  const std::string e = error_of([&] { load_lm(d / "m.safetensors"); });
  EXPECT_HAS(e, d / "m.safetensors");
  EXPECT_HAS(e, "tensor h.0.mlp.c_fc.weight holds Inf at flat index 7");
}

TEST(NonFinite, NaNInLlmcIsReported) {
  TempDir d;
  fs::copy_file(kFx + "tiny.bin", d.path / "m.bin");
  // The last parameter of an llm.c file is ln_f.bias[C-1].
  {
    std::fstream f(d / "m.bin", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-4, std::ios::end);
    const float nan = NAN;
    f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  const std::string e = error_of([&] { load_lm(d / "m.bin"); });
  EXPECT_HAS(e, "tensor ln_f.bias holds NaN at flat index 23");
}

TEST(NonFinite, F16InfinityIsReported) {
  TempDir d;
  std::ifstream cf(kFx + "tiny/config.json");
  LmParams m = lm_params_from(load_lm(kFx + "tiny"), nlohmann::json::parse(cf));
  std::vector<io::WriteTensor> ts;
  for (size_t i = 0; i < m.layout.table.size(); i++)
    ts.push_back({m.layout.table[i].name, m.layout.table[i].shape, m.params.data() + m.layout.offset[i]});
  m.at("wpe.weight")[0] = 70000.0f;  // beyond F16's 65504: stored as +Inf
  fs::copy_file(kFx + "tiny/config.json", d.path / "config.json");
  io::write_safetensors(d / "model.safetensors", ts, {}, io::DType::F16);
  const std::string e = error_of([&] { load_lm(d.path.string()); });
  EXPECT_HAS(e, "tensor wpe.weight holds Inf at flat index 0");
}

// ---- a directory or a FIFO where a file is expected: an immediate error naming it, never a hang ----

// Runs f on a thread; if it has not finished after 3 s (blocked opening a FIFO), a writer opens and
// closes the FIFO to release it and the test fails.
std::string error_without_hang(const std::function<void()>& f, const std::string& fifo) {
  auto fut = std::async(std::launch::async, [&] { return error_of(f); });
  if (fut.wait_for(std::chrono::seconds(3)) == std::future_status::ready) return fut.get();
  for (int i = 0; i < 100 && fut.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready; ++i) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return "BLOCKED on the FIFO " + fifo + " (released by the test); then: " + fut.get();
}

TEST(NotARegularFile, EveryReaderRejectsADirectory) {
  TempDir d;
  fs::create_directories(d.path / "dir");
  const std::string dir = d / "dir";
  EXPECT_HAS(error_of([&] { io::SafetensorsFile::open(dir); }), dir + ": not a regular file");
  EXPECT_HAS(error_of([&] { io::read_llmc(dir); }), dir + ": not a regular file");
  EXPECT_HAS(error_of([&] { io::read_npy(dir); }), dir + ": not a regular file");
  // A model directory whose model.safetensors / config.json is itself a directory.
  fs::create_directories(d.path / "m" / "model.safetensors");
  fs::copy_file(kFx + "tiny/config.json", d.path / "m" / "config.json");
  EXPECT_HAS(error_of([&] { load_lm(d / "m"); }), "model.safetensors: not a regular file");
  fs::create_directories(d.path / "c" / "config.json");
  fs::copy_file(kFx + "tiny/model.safetensors", d.path / "c" / "model.safetensors");
  EXPECT_HAS(error_of([&] { load_lm(d / "c"); }), "config.json: not a regular file");
}

TEST(NotARegularFile, TokenizerFilesThatAreDirectories) {
  TempDir d;
  fs::create_directories(d.path / "vocab.json");
  write_raw(d / "merges.txt", "#version: 0.2\n");
  const std::string e = error_of([&] { Tokenizer::from_files(d / "vocab.json", d / "merges.txt"); });
  EXPECT_HAS(e, d / "vocab.json");
  EXPECT_HAS(e, "not a regular file");
}

TEST(NotARegularFile, EveryReaderRejectsAFifoWithoutBlocking) {
  TempDir d;
  const std::string fifo = d / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_HAS(error_without_hang([&] { io::SafetensorsFile::open(fifo); }, fifo), "not a regular file");
  EXPECT_HAS(error_without_hang([&] { io::read_llmc(fifo); }, fifo), "not a regular file");
  EXPECT_HAS(error_without_hang([&] { io::read_npy(fifo); }, fifo), "not a regular file");
  // A model directory whose config.json is a FIFO.
  fs::create_directories(d.path / "m");
  ASSERT_EQ(::mkfifo((d.path / "m" / "config.json").c_str(), 0600), 0);
  fs::copy_file(kFx + "tiny/model.safetensors", d.path / "m" / "model.safetensors");
  EXPECT_HAS(error_without_hang([&] { load_lm(d / "m"); }, (d.path / "m" / "config.json").string()), "not a regular file");
}

TEST(NotARegularFile, TokenizerVocabFifoDoesNotBlock) {
  TempDir d;
  const std::string fifo = d / "vocab.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  write_raw(d / "merges.txt", "#version: 0.2\n");
  const std::string e = error_without_hang([&] { Tokenizer::from_files(fifo, d / "merges.txt"); }, fifo);
  EXPECT_HAS(e, fifo);
  EXPECT_HAS(e, "not a regular file");
}

// ---- writers: a failure leaves neither the file nor a temporary behind ----

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

TEST(Writers, TargetIsADirectoryLeavesNothingBehind) {
  TempDir d;
  fs::create_directories(d.path / "out.npy");
  fs::create_directories(d.path / "config.json");
  const float x[2] = {1, 2};
  EXPECT_HAS(error_of([&] { io::write_npy(d / "out.npy", {2}, x); }), d / "out.npy");
  EXPECT_HAS(error_of([&] { io::write_file_atomic(d / "config.json", "{}"); }), d / "config.json");
  auto names = entries(d.path);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "out.npy"})) << "a temporary file was left behind";
}

TEST(Writers, TokenizerWriteFilesIntoAFileFails) {
  TempDir d;
  write_raw(d / "afile", "x");
  const std::string e = error_of([&] { Tokenizer::byte_level().write_files(d / "afile"); });
  EXPECT_HAS(e, d / "afile");
  EXPECT_EQ(entries(d.path), std::vector<std::string>{"afile"});
}

// ---- input that is not a checkpoint at all ----

TEST(Inputs, EmptyTokenListIsAnError) {
  const Model m = load_lm(kFx + "tiny");
  RunState a;
  const std::string e = error_of([&] { run(m, {}, a); }, ErrorKind::Usage);
  EXPECT_NE(e, "no error");
  EXPECT_EQ(e.find("not a qkv::Error"), std::string::npos) << e;
}

TEST(Inputs, NegativeAndPastVocabularyIdsAreErrors) {
  const Model m = load_lm(kFx + "tiny");
  RunState a;
  for (const std::vector<int>& ids : {std::vector<int>{-1}, std::vector<int>{0, 101}, std::vector<int>{1 << 30}}) {
    const std::string e = error_of([&] { run(m, ids, a); }, ErrorKind::Usage);
    EXPECT_EQ(e.find("no error"), std::string::npos);
    EXPECT_EQ(e.find("not a qkv::Error"), std::string::npos) << e;
  }
  const Tokenizer t = Tokenizer::byte_level();
  EXPECT_HAS(error_of([&] { t.decode({0, 256}); }), "found 256");
  EXPECT_HAS(error_of([&] { t.decode({-5}); }), "found -5");
}

}  // namespace
}  // namespace qkv

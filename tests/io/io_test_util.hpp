// Helpers for the io tests: a per-test temporary directory and checks on qkv::Error messages.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "qkv/error.hpp"

namespace qkv::io::test {

// A fresh directory under the system temp dir, named after the running test; removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    static int counter = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("qkv_io_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
            std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  const std::filesystem::path& dir() const { return dir_; }
  // Names of the entries in the directory (to check that no temporary file was left behind).
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }

 private:
  std::filesystem::path dir_;
};

inline void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

template <class T>
std::string bytes_of(const T& v) {
  std::string s(sizeof v, '\0');
  std::memcpy(s.data(), &v, sizeof v);
  return s;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// Runs `f`, expecting a qkv::Error of kind Data whose message contains every one of `parts`.
template <class F>
void expect_data_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const qkv::Error& e) {
    EXPECT_EQ(e.kind(), qkv::ErrorKind::Data) << e.what();
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing \"" << p << "\" in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected qkv::Error, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected a qkv::Error, nothing was thrown";
}

}  // namespace qkv::io::test

#include "qkv/io/atomic_file.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <stdexcept>

#include "io/io_test_util.hpp"
#include "qkv/io/mapped_file.hpp"

namespace qkv::io {
namespace {

using test::expect_data_error;
using test::read_raw;
using test::TempDir;

TEST(AtomicFile, WritesAndReplaces) {
  TempDir tmp;
  const std::string path = tmp.path("f.txt");
  write_file_atomic(path, std::string_view("first"));
  EXPECT_EQ(read_raw(path), "first");
  write_file_atomic(path, [&](std::FILE* f) { write_bytes(f, "second!", 7, path); }, /*sync=*/true);
  EXPECT_EQ(read_raw(path), "second!");
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"f.txt"});
}

TEST(AtomicFile, FailureInsideTheWriterLeavesTheOldFileAndNoTemporary) {
  TempDir tmp;
  const std::string path = tmp.path("f.txt");
  write_file_atomic(path, std::string_view("keep me"));
  EXPECT_THROW(write_file_atomic(path, [&](std::FILE* f) {
                 write_bytes(f, "partial", 7, path);
                 throw std::runtime_error("boom");
               }),
               std::runtime_error);
  EXPECT_EQ(read_raw(path), "keep me");
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"f.txt"});
}

TEST(AtomicFile, UnwritablePathsNameThePathAndTheReason) {
  TempDir tmp;
  const std::string missing = tmp.path("no/dir/f.txt");
  expect_data_error([&] { write_file_atomic(missing, std::string_view("x")); }, {missing, "No such file or directory"});
  const std::string dir = tmp.path("d");
  std::filesystem::create_directory(dir);
  expect_data_error([&] { write_file_atomic(dir, std::string_view("x")); }, {dir, "cannot write"});
  expect_data_error([&] { write_file_atomic(tmp.dir().string() + "/", std::string_view("x")); }, {"does not name a file"});
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"d"});
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(AtomicFile, WriteErrorsAreReported) {
  // /dev/full accepts opens but every write fails with ENOSPC: the error must surface, not vanish.
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  std::FILE* f = std::fopen("/dev/full", "wb");
  ASSERT_NE(f, nullptr);
  std::setvbuf(f, nullptr, _IONBF, 0);
  expect_data_error([&] { write_bytes(f, "abc", 3, "/dev/full"); }, {"/dev/full", "write failed", "No space left"});
  std::fclose(f);
}

TEST(MappedFile, MapsRegularFilesAndRejectsOthers) {
  TempDir tmp;
  const std::string path = tmp.path("m.bin");
  write_file_atomic(path, std::string_view("hello"));
  MappedFile m = MappedFile::open(path);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), 5), "hello");
  MappedFile n = std::move(m);
  EXPECT_EQ(n.size(), 5u);
  EXPECT_EQ(m.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  write_file_atomic(tmp.path("e.bin"), std::string_view(""));
  EXPECT_EQ(MappedFile::open(tmp.path("e.bin")).size(), 0u);
  expect_data_error([&] { MappedFile::open(tmp.dir().string()); }, {"not a regular file"});
  // A FIFO must be rejected immediately, not block waiting for a writer.
  const std::string fifo = tmp.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_data_error([&] { MappedFile::open(fifo); }, {fifo, "not a regular file"});
}

}  // namespace
}  // namespace qkv::io

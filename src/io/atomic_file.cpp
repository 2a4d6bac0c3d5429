#include "qkv/io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "qkv/error.hpp"

namespace qkv::io {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

void write_bytes(std::FILE* f, const void* data, std::size_t size, const std::string& path) {
  if (size == 0) return;
  if (std::fwrite(data, 1, size, f) != size) {
    const int e = errno;
    data_error(path + ": write failed: " + errno_text(e != 0 ? e : EIO));
  }
}

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write, bool sync) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string base = target.filename().string();
  if (base.empty() || base == "." || base == "..")
    data_error(path + ": cannot write: the path does not name a file");
  static std::atomic<unsigned long> counter{0};

  std::string tmp;
  int fd = -1;
  int open_errno = 0;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = (target.parent_path() /
           ("." + base + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++)))
              .string();
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    open_errno = errno;
    if (fd < 0 && open_errno != EEXIST) break;
  }
  if (fd < 0)
    data_error(path + ": cannot write: cannot create a temporary file in its directory (" + tmp +
               "): " + errno_text(open_errno));

  std::FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    data_error(path + ": cannot write: " + errno_text(e));
  }
  try {
    write(f);
  } catch (...) {
    std::fclose(f);
    ::unlink(tmp.c_str());
    throw;
  }
  int err = 0;
  if (std::fflush(f) != 0 || std::ferror(f)) err = errno != 0 ? errno : EIO;
  if (err == 0 && sync && ::fsync(::fileno(f)) != 0) err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    data_error(path + ": write failed: " + errno_text(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    data_error(path + ": cannot write: renaming the temporary file into place failed: " + errno_text(e));
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes, bool sync) {
  write_file_atomic(
      path, [&](std::FILE* f) { write_bytes(f, bytes.data(), bytes.size(), path); }, sync);
}

}  // namespace qkv::io

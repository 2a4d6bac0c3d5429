// A read-only memory mapping of a whole regular file. Move-only; unmaps in the destructor.
#pragma once
#include <cstddef>
#include <string>

namespace qkv::io {

class MappedFile {
 public:
  // Throws qkv::Error (Data) naming `path` when it cannot be opened, is not a regular file (opening
  // never blocks, so FIFOs are rejected rather than hung on) or cannot be mapped. An empty file maps to
  // data() == nullptr, size() == 0.
  static MappedFile open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops this process's copy of the whole pages inside [p, p + n) (a range of this mapping) from its
  // resident set (madvise MADV_DONTNEED): for a tensor that was copied out and will not be read here
  // again, so the copy and its source are never resident together. Reading the range later still works
  // (the pages fault back in from the file). Pages shared with bytes outside the range are kept.
  void release(const void* p, std::size_t n) const;

 private:
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
};

}  // namespace qkv::io

// Whole-file writes that either fully succeed or leave nothing behind: the bytes go to a temporary file
// in the destination's directory, which is renamed over the destination only after every write,
// the flush and the close have succeeded.
#pragma once
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace qkv::io {

// Calls `write` with a stream open on a temporary file `<dir>/.<name>.tmp.<pid>.<n>`, then flushes,
// optionally fsyncs, closes and renames it to `path`. On any failure (including an exception thrown by
// `write`) the temporary file is removed and a qkv::Error (Data) naming `path` and strerror is thrown;
// an existing file at `path` is then left untouched.
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write,
                       bool sync = false);

// Convenience: atomically writes `bytes` as the whole content of `path`.
void write_file_atomic(const std::string& path, std::string_view bytes, bool sync = false);

// fwrite that throws qkv::Error naming `path` and strerror on a short write. For use inside `write`.
void write_bytes(std::FILE* f, const void* data, std::size_t size, const std::string& path);

}  // namespace qkv::io

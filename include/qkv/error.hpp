// The one exception type of qkv. Thrown at the boundary where bad input is detected; the CLI turns it
// into `qkv: error: <what>` on stderr and the exit code below.
#pragma once
#include <stdexcept>
#include <string>

namespace qkv {

enum class ErrorKind {
  Data = 1,   // a file, tensor or value is malformed or inconsistent -> exit 1
  Usage = 2,  // a command-line argument is wrong -> exit 2
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
};

// Bad data: "<where>: <why>" e.g. data_error("model.safetensors: tensor h.0.attn.c_attn.weight: ...").
[[noreturn]] inline void data_error(const std::string& what) { throw Error(ErrorKind::Data, what); }
// Bad usage: an argument the user passed.
[[noreturn]] inline void usage_error(const std::string& what) { throw Error(ErrorKind::Usage, what); }

}  // namespace qkv

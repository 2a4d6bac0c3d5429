// `qkv serve`'s HTTP API on arbitrary bytes: the fuzz input is what a client sent on one connection
// (one request, several, or garbage). A real httplib::Server, set up by the same configure_routes()
// that `qkv serve` uses, reads it from memory through the protected Server::process_request (no
// sockets, no threads) over a tiny random model with a byte-level tokenizer and a 4 KiB body limit, so
// every route runs fast. Several requests are served one after another as on a keep-alive connection
// (over a socket httplib 0.11.4 answers only the first of requests sent at once: docs/robustness.md).
// Promises checked on every response the server writes (through the logger, which httplib calls once
// per response):
//   - never a 5xx: a malformed request is the client's mistake (4xx), and a 500 means an exception
//     from our handlers that is not an ApiError, qkv::Error or json::exception;
//   - every status >= 400 carries a one-line JSON object {"error": "<non-empty string>", ...} as
//     application/json (except when the request had a Range header: see docs/robustness.md);
//   - every 200 from /api/ is JSON;
//   - no request body larger than the limit is read into memory (chunked, without Content-Length or
//     compressed bodies included: httplib 0.11.4 enforces the limit on Content-Length only).
// Note: libcpp-httplib is Debian's compiled library, so its own parser is neither instrumented for
// coverage nor for ASan (its heap accesses are checked only through ASan's interceptors); the coverage
// that guides the fuzzer is our handlers', nlohmann::json's and the engine's.
#include <httplib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "http.hpp"
#include "qkv/lm.hpp"
#include "qkv/tokenizer.hpp"
#include "service.hpp"

using namespace qkv;

namespace {

// One connection's bytes from the client; what the server writes is dropped (the checks read the
// Response the logger sees), or copied to stderr with QKV_FUZZ_HTTP_ECHO=1 to see what an input gets.
class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view in) : in_(in) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, in_.size() - pos_);
    if (n > 0) std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);  // 0 at the end: the client closed its side
  }
  ssize_t write(const char* ptr, size_t size) override {
    static const bool echo = std::getenv("QKV_FUZZ_HTTP_ECHO") != nullptr;
    if (echo) std::fwrite(ptr, 1, size, stderr);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 50000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8080;
  }
  socket_t socket() const override { return INVALID_SOCKET; }
  size_t consumed() const { return pos_; }
  bool at_end() const { return pos_ >= in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

// Server::process_request is protected: this exposes it for one connection held in memory.
class MemoryServer final : public httplib::Server {
 public:
  // Serves requests from `strm` as httplib's keep-alive loop does (at most keep_alive_max_count_
  // requests, the last one told to close), until the client's bytes are used up, the request says
  // "Connection: close", or a request cannot be read at all.
  void serve_connection(MemoryStream& strm) {
    bool closed = false;
    for (size_t i = 0; i < keep_alive_max_count_ && !closed && !strm.at_end(); ++i) {
      const size_t before = strm.consumed();
      if (!process_request(strm, /*close_connection=*/i + 1 == keep_alive_max_count_, closed, {})) break;
      if (strm.consumed() == before) break;  // made no progress: nothing more will come of this input
    }
  }
};

const Model& tiny_model() {
  static const Model m = [] {
    nlohmann::json c = default_config("gpt2", "tiny");
    c["vocab_size"] = 256;  // the byte-level tokenizer's
    c["n_positions"] = 16, c["n_ctx"] = 16, c["n_embd"] = 8, c["n_layer"] = 2, c["n_head"] = 2;
    const std::string dir = fuzz::scratch_dir() + "/tiny_model";
    write_random_checkpoint(dir, c, WeightType::F32, 1, 1);
    Model g = load_lm(dir);
    std::filesystem::remove_all(dir);  // the mapping stays valid after its files are unlinked (POSIX)
    return g;
  }();
  return m;
}

bool starts_with(const std::string& s, std::string_view p) {
  return s.compare(0, p.size(), p) == 0;
}

constexpr size_t kMaxBody = 4096;

void check_response(const httplib::Request& req, const httplib::Response& res) {
  const std::string what =
      req.method + " " + req.path + " -> " + std::to_string(res.status) + ": " + res.body.substr(0, 300);
  QKV_FUZZ_CHECK(res.status >= 100 && res.status < 500, what);
  QKV_FUZZ_CHECK(req.body.size() <= kMaxBody,
                 "a body of " + std::to_string(req.body.size()) + " bytes was read past the limit: " + what);
  const bool ranged = !req.ranges.empty();  // httplib slices any body to the Range, errors included
  if (res.status >= 400 && !ranged) {
    QKV_FUZZ_CHECK(starts_with(res.get_header_value("Content-Type"), "application/json"), what);
    QKV_FUZZ_CHECK(res.body.find('\n') == std::string::npos, "one line: " + what);
    const auto j = nlohmann::json::parse(res.body, nullptr, /*allow_exceptions=*/false);
    QKV_FUZZ_CHECK(j.is_object() && j.contains("error") && j["error"].is_string() &&
                       !j["error"].get<std::string>().empty(),
                   "{\"error\": \"...\"}: " + what);
  }
  if (res.status == 200 && !ranged && starts_with(req.path, "/api/"))
    QKV_FUZZ_CHECK(!nlohmann::json::parse(res.body, nullptr, false).is_discarded(), "JSON: " + what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer tokenizer = Tokenizer::byte_level();
  // A fresh service and server per input, so no input depends on what an earlier one left in the
  // caches (heads, circuits, recent forwards): a crash replays from its input alone.
  server::ServiceOptions so;
  so.max_concurrent_forwards = 1;
  so.cache_bytes = size_t(1) << 20;
  server::Service service("fuzz-tiny-model", tiny_model(), tokenizer, so);
  server::ServeOptions o;
  o.max_body_bytes = kMaxBody;
  MemoryServer svr;
  server::configure_routes(svr, service, o);
  svr.set_logger(check_response);
  MemoryStream strm(fuzz::as_view(data, size));
  svr.serve_connection(strm);
  return 0;
}

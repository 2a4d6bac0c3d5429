// `qkv serve`'s HTTP layer on malformed requests (docs/robustness.md, the HTTP rows of the table), over a
// real socket: the routes of configure_routes() on a httplib::Server listening on 127.0.0.1, a tiny
// random model with the byte-level tokenizer, and raw bytes written by hand so that requests no client
// library would send (chunked bodies past the limit, no Content-Length, gzip, broken request lines) can
// be sent. Every refusal must be a 4xx with a one-line JSON {"error": ...}.
#include "http.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "qkv/lm.hpp"
#include "qkv/tokenizer.hpp"
#include "service.hpp"

namespace qkv {
namespace {

using nlohmann::json;
constexpr size_t kMaxBody = 4096;

struct Reply {
  int status = 0;
  httplib::Headers headers;
  std::string body;
  std::string header(const std::string& k) const {
    auto it = headers.find(k);
    return it == headers.end() ? "" : it->second;
  }
};

// Parses the complete HTTP/1.1 responses at the start of `raw` (each with a Content-Length, as this
// server writes them).
std::vector<Reply> parse_replies(const std::string& raw) {
  std::vector<Reply> out;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t end = raw.find("\r\n\r\n", pos);
    if (end == std::string::npos) break;
    Reply r;
    std::string head = raw.substr(pos, end - pos);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.rfind("HTTP/1.1 ", 0) != 0) break;
    r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const size_t next = head.find("\r\n", line_end + 2);
      const std::string line =
          head.substr(line_end + 2, next == std::string::npos ? std::string::npos : next - line_end - 2);
      const size_t colon = line.find(": ");
      if (colon != std::string::npos) r.headers.emplace(line.substr(0, colon), line.substr(colon + 2));
      line_end = next;
    }
    pos = end + 4;
    const std::string cl = r.header("Content-Length");
    const size_t n = cl.empty() ? 0 : std::stoul(cl);
    if (r.status != 100) {
      if (raw.size() - pos < n) break;  // the body has not all arrived yet
      r.body = raw.substr(pos, n);
      pos += n;
    }
    out.push_back(std::move(r));
  }
  return out;
}

class HttpApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    nlohmann::json c = default_config("gpt2", "tiny");
    c["vocab_size"] = 256, c["n_positions"] = 16, c["n_ctx"] = 16, c["n_embd"] = 8, c["n_layer"] = 2,
    c["n_head"] = 2;
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("qkv_http_" + std::to_string(::getpid()))).string();
    write_random_checkpoint(dir, c, WeightType::F32, 1, 1);
    Model m = load_lm(dir);
    std::filesystem::remove_all(dir);  // the mapping stays valid after its files are unlinked (POSIX)
    service_ = new server::Service("tiny", std::move(m), Tokenizer::byte_level());
    svr_ = new httplib::Server;
    server::ServeOptions o;
    o.max_body_bytes = kMaxBody;
    server::configure_routes(*svr_, *service_, o);
    svr_->set_read_timeout(10, 0);
    port_ = svr_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = new std::thread([] { svr_->listen_after_bind(); });
    while (!svr_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  static void TearDownTestSuite() {
    svr_->stop();
    thread_->join();
    delete thread_;
    delete svr_;
    delete service_;
  }

  // Sends `bytes` on a new connection and returns the replies once `n` of them (100 Continue aside) have
  // arrived or the server closed the connection (cpp-httplib 0.11.4 answers only the first of several
  // requests sent at once, then waits for the keep-alive timeout); a server still waiting for more of the
  // request fails the test after `timeout_s` instead of hanging it. The client keeps its side open, as HTTP
  // clients do: cpp-httplib 0.11.4 drops the answer to a request whose client has shut its side for writing.
  static std::vector<Reply> send_raw(const std::string& bytes, size_t n = 1, int timeout_s = 5) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(fd, 0);
    timeval tv{timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t k = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (k <= 0) break;  // the server may close before reading everything (a refused body)
      sent += size_t(k);
    }
    std::string raw;
    std::vector<Reply> replies;
    char buf[65536];
    for (;;) {
      const ssize_t k = ::recv(fd, buf, sizeof(buf), 0);
      if (k <= 0) break;
      raw.append(buf, size_t(k));
      replies = parse_replies(raw);
      size_t final_replies = 0;
      for (const Reply& r : replies) final_replies += r.status != 100;
      if (final_replies >= n) break;
    }
    ::close(fd);
    return parse_replies(raw);
  }

  // The first reply: `status`, a one-line JSON object whose "error" contains `message`.
  static void expect_error(const std::vector<Reply>& replies, int status, const std::string& message) {
    ASSERT_FALSE(replies.empty()) << "no reply";
    const Reply& r = replies.front();
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.header("Content-Type").rfind("application/json", 0), 0u) << r.header("Content-Type");
    EXPECT_EQ(r.body.find('\n'), std::string::npos) << r.body;
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_string()) << r.body;
    EXPECT_NE(j["error"].get<std::string>().find(message), std::string::npos) << r.body;
  }

  static std::string post(const std::string& path, const std::string& body, const std::string& extra = "") {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
  }

  static inline server::Service* service_ = nullptr;
  static inline httplib::Server* svr_ = nullptr;
  static inline std::thread* thread_ = nullptr;
  static inline int port_ = 0;
};

TEST_F(HttpApi, ValidRequestsAreServed) {
  const auto r = send_raw(post("/api/tokenize", R"({"text":"hi"})"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200);
  EXPECT_EQ(json::parse(r[0].body)["ids"], json({104, 105}));
  const auto i = send_raw("GET /api/info HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(i.size(), 1u);
  EXPECT_EQ(i[0].status, 200);
  EXPECT_EQ(json::parse(i[0].body)["limits"]["max_body_bytes"], kMaxBody);
}

TEST_F(HttpApi, MalformedRequestLinesAndHeadersAre400) {
  expect_error(send_raw("FETCH /api/info HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "bad request");
  expect_error(send_raw("GET\r\n\r\n"), 400, "bad request");
  expect_error(send_raw("GET /api/info HTTP/9.9\r\n\r\n"), 400, "bad request");
  expect_error(send_raw("GET /api/info HTTP/1.1\r\nX-Long: " + std::string(9000, 'b') + "\r\n\r\n"), 400,
               "bad request");
  expect_error(send_raw("GET /api/info?" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n"), 414,
               "the request URI is too long");
}

TEST_F(HttpApi, UnknownPathsAndTraversalAre404) {
  expect_error(send_raw("GET /api/nope HTTP/1.1\r\n\r\n"), 404, "not found");
  expect_error(send_raw("GET /../../etc/passwd HTTP/1.1\r\n\r\n"), 404, "not found");
  expect_error(send_raw("GET /%2e%2e/%2e%2e/etc/passwd HTTP/1.1\r\n\r\n"), 404, "not found");
  expect_error(send_raw("PUT /api/info HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"), 404, "not found");
}

TEST_F(HttpApi, BadBodiesAre400NamingTheProblem) {
  expect_error(send_raw(post("/api/attention", R"({"text": "ab", "layer": })")), 400,
               "the request body is not valid JSON");
  expect_error(send_raw(post("/api/tokenize", "{\"text\": \"\xff\"}")), 400, "ill-formed UTF-8");
  expect_error(send_raw(post("/api/attention", std::string(2000, '[') + std::string(2000, ']'))), 400,
               "the request body must be a JSON object");
  expect_error(send_raw(post("/api/attention", R"({"ids": [1, 256]})")), 400,
               "\"ids\": id 256 at position 1 is outside the vocabulary [0, 256)");
  expect_error(send_raw(post("/api/attention", R"({"text": "xxxxxxxxxxxxxxxxx"})")), 400,
               "the text is 17 tokens but the model's context is 16 tokens");
  expect_error(send_raw(post("/api/soft-dictionary", R"({"Q": [[1, 2]], "K": [[1, 0], [1]]})")), 400,
               "every row needs 2 numbers");
}

TEST_F(HttpApi, ContentLengthOverTheLimitIs413) {
  const std::string body = R"({"text": ")" + std::string(kMaxBody, 'a') + "\"}";
  expect_error(send_raw(post("/api/tokenize", body)), 413, "the limit is 4096 bytes");
}

// Regression (docs/robustness.md defect 7): cpp-httplib 0.11.4 applied the limit to Content-Length only
// and read a chunked body, or one without Content-Length, into memory whole.
TEST_F(HttpApi, ChunkedBodyIsRefusedBeforeItIsRead) {
  std::string chunks;
  for (int i = 0; i < 16; i++) chunks += "3e8\r\n" + std::string(1000, 'a') + "\r\n";  // 16000 bytes > limit
  const std::string req =
      "POST /api/tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n" +
      chunks + "0\r\n\r\n";
  const auto r = send_raw(req);
  expect_error(r, 411,
               "Transfer-Encoding is not accepted: send the body with a Content-Length (at most 4096 bytes)");
  EXPECT_EQ(r[0].header("Connection"), "close");
  // With a Content-Length beside it (httplib would take the chunked coding).
  expect_error(
      send_raw("POST /api/tokenize HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" +
               chunks + "0\r\n\r\n"),
      411, "Transfer-Encoding is not accepted");
}

TEST_F(HttpApi, BodyWithoutContentLengthIsRefusedAtOnce) {
  // Over the limit: the body used to be read until the client closed the connection, whatever its size.
  expect_error(send_raw("POST /api/tokenize HTTP/1.1\r\nHost: x\r\n\r\n{\"text\": \"" +
                        std::string(6000, 'a') + "\"}"),
               411, "a Content-Length is required (at most 4096 bytes)");
  // No body and the connection left open: the answer used to wait for the 10 s read timeout (then 400).
  const auto t0 = std::chrono::steady_clock::now();
  expect_error(send_raw("POST /api/heads HTTP/1.1\r\nHost: x\r\n\r\n", 1, /*timeout_s=*/3), 411,
               "a Content-Length is required");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(HttpApi, CompressedBodyIsRefused) {
  // gzip of {"text": "a…a"} would inflate past the limit; refused whatever it holds (not even inflated).
  const std::string gz(
      "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\xed\xc1\x31\x0d\x00\x20\x10\x04\x30\x2b\xe4\x64\xe0\x86\x01"
      "\x07\x3f\x90\x7c\xf0\x8e\x08\xd6\xb6\x9d\xda\xa7\x32\x47\x16\x00\x00\x00\x00\x00\xf0\x2d\xf7\x01\xc4"
      "\x33\xe6\x8d\x7c\x17\x00\x00",
      57);  // 57 bytes of gzip, 6012 bytes inflated
  expect_error(send_raw(post("/api/tokenize", gz, "Content-Encoding: gzip\r\n")), 415,
               "compressed request bodies are not accepted (Content-Encoding: gzip)");
  expect_error(send_raw(post("/api/tokenize", "xx", "Content-Encoding: br\r\n")), 415,
               "Content-Encoding: br");
  const auto ok = send_raw(post("/api/tokenize", R"({"text":"a"})", "Content-Encoding: identity\r\n"));
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].status, 200);
}

}  // namespace
}  // namespace qkv

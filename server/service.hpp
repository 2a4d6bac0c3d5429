// The JSON API of `qkv serve`, without any HTTP: each method takes the parsed request body and returns
// the response body, or throws ApiError (a 4xx with a message). The model is read-only; every request
// gets its own activations. docs/api.md documents the requests and responses.
#pragma once
#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <semaphore>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv/lm.hpp"
#include "qkv/tokenizer.hpp"

namespace qkv::server {

using nlohmann::json;

// A client error: HTTP `status` (4xx) and a message that the response carries as {"error": message}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, json extra = json::object())
      : std::runtime_error(message), status(status), extra(std::move(extra)) {}
  int status;
  json extra;  // more fields merged into the error body (e.g. "tokens", "n_positions")
};

struct ServiceOptions {
  int max_concurrent_forwards = 2;        // forwards running at once; more requests wait their turn
  size_t cache_bytes = size_t(256) << 20;  // recent texts' scores and patterns kept for the next click
  int max_soft_dictionary_rows = 32;      // tokens of the hand-made soft dictionary
  int max_soft_dictionary_dims = 256;     // d_k and d_v (the page's "drag d_k up" goes to 256)
  int max_patch_tokens = 256;             // /api/patch: longest clean/corrupt input
  int max_patch_sites = 2048;             // /api/patch: most sites (one forward each) in one sweep
  int max_rope_offsets = 1024;            // /api/rope: offsets i − j charted
  int max_generate_tokens = 256;          // /api/generate: most new tokens in one request
  int max_steer_texts = 16;               // /api/generate: most positive (and negative) steering texts
};

// One of the server's concurrent forwards, held for as long as it lives.
struct ForwardSlot {
  std::counting_semaphore<1024>& s;
  explicit ForwardSlot(std::counting_semaphore<1024>& s) : s(s) { s.acquire(); }
  ~ForwardSlot() { s.release(); }
  ForwardSlot(const ForwardSlot&) = delete;
  ForwardSlot& operator=(const ForwardSlot&) = delete;
};

// One forward's attention: per layer, S [H, T, T] (scaled as the model scales it — 1/√dh for GPT-2 —,
// unmasked; on rotary models computed from the ROTATED q and k, before any soft-cap) and A [H, T, T]
// (the pattern the model computes: softmax of the masked S).
struct Computed {
  std::vector<int> ids;
  int L = 0, H = 0, T = 0, dh = 0;
  double scale = 0;  // the model's multiplier of q·k (1/√dh, query_pre_attn_scalar^-½, or 1)
  std::vector<std::vector<float>> S, A;
  size_t bytes() const { return size_t(2) * size_t(L) * size_t(H) * size_t(T) * size_t(T) * sizeof(float); }
};

class Service {
 public:
  // Any family load_lm reads: every panel (attention with S from the rotated q and k on rotary models,
  // the rotary offset chart on rotary models only).
  Service(std::string model_path, Model model, std::optional<Tokenizer> tokenizer,
          ServiceOptions options = {});

  json info() const;                           // GET  /api/info
  json tokenize(const json& req) const;        // POST /api/tokenize
  json attention(const json& req);             // POST /api/attention
  json soft_dictionary(const json& req) const; // POST /api/soft-dictionary
  static json soft_dictionary_example();       // GET  /api/soft-dictionary
  static json running_example(const json& req); // GET (defaults) and POST /api/running-example
  json whole_matrix(const json& req) const;    // POST /api/whole-matrix
  json heads(const json& req);                 // POST /api/heads
  json circuits();                             // GET  /api/circuits
  json patch(const json& req);                 // POST /api/patch       (serve_lab.cpp)
  json patch_site(const json& req);            // POST /api/patch-site  (serve_lab.cpp)
  json rope(const json& req);                  // POST /api/rope        (serve_lab.cpp)
  json patch_progress(const json& req);        // POST /api/patch-progress (serve_lab.cpp)
  json attribute(const json& req);             // POST /api/attribute   (serve_lab.cpp)
  json path_patch(const json& req);            // POST /api/path-patch  (serve_lab.cpp)

  // POST /api/generate (serve_generate.cpp), streamed: generate_job reads and checks the request (ApiError
  // before anything is sent), generate_stream runs it, calling emit with each event as it happens —
  // {"event": "prompt"}, one {"event": "token"} per new token, {"event": "done"} — and stops when emit
  // returns false.
  struct GenerateJob;
  std::shared_ptr<GenerateJob> generate_job(const json& req);
  void generate_stream(const GenerateJob& job, const std::function<bool(const json&)>& emit);

  const Arch& arch() const { return lm_.arch; }
  const std::string& model_path() const { return path_; }

  // The ids a request asks for: "ids" (array of token ids) or "text" (through the model's tokenizer).
  // Refuses empty input, unknown ids and inputs longer than the model's context (never truncates).
  std::vector<int> request_ids(const json& req) const;
  std::vector<std::string> labels(const std::vector<int>& ids) const;
  std::shared_ptr<const Computed> compute(const std::vector<int>& ids);

 private:
  std::vector<int> ids_from(const json& req, const char* text_key, const char* ids_key) const;
  struct PatchJob;
  PatchJob patch_job(const json& req, bool site) const;
  void steer_from(const json& steer, GenerateJob& job);
  // S' of (layer, head) recomputed with W_Q ↔ W_K (and their biases) swapped, rotated at the same
  // positions, against Sᵀ of the given S [T, T] (scaled as the model scales it).
  json swap_check(const std::vector<int>& ids, int layer, int head, const float* S, int T) const;
  std::string path_;
  Model lm_;
  std::optional<Tokenizer> tok_;
  ServiceOptions opt_;
  mutable std::counting_semaphore<1024> forwards_;  // mutable: const panels run forwards too
  std::mutex cache_mu_;
  std::list<std::shared_ptr<const Computed>> cache_;  // most recent first
  std::mutex heads_mu_, circuits_mu_;
  std::mutex progress_mu_;
  std::map<std::string, std::pair<int, int>> progress_;  // /api/patch "job" -> (sites done, sites)
  std::optional<json> heads_cache_, circuits_cache_;
};

}  // namespace qkv::server

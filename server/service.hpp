// The JSON API of `qkv serve`, without any HTTP: each method takes the parsed request body and returns
// the response body, or throws ApiError (a 4xx with a message). The model is read-only; every request
// gets its own activations. docs/api.md documents the requests and responses.
#pragma once
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <semaphore>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv/model.hpp"
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
};

// One forward's attention: per layer, S [H, T, T] (scaled by 1/√dh, unmasked, as the model computes it)
// and A [H, T, T] (the pattern: softmax of the causally masked S).
struct Computed {
  std::vector<int> ids;
  int L = 0, H = 0, T = 0, dh = 0;
  std::vector<std::vector<float>> S, A;
  size_t bytes() const { return size_t(2) * size_t(L) * size_t(H) * size_t(T) * size_t(T) * sizeof(float); }
};

class Service {
 public:
  Service(std::string model_path, GPT2 model, std::optional<Tokenizer> tokenizer, ServiceOptions options = {});

  json info() const;                           // GET  /api/info
  json tokenize(const json& req) const;        // POST /api/tokenize
  json attention(const json& req);             // POST /api/attention
  json soft_dictionary(const json& req) const; // POST /api/soft-dictionary
  static json soft_dictionary_example();       // GET  /api/soft-dictionary
  static json running_example(const json& req); // GET (defaults) and POST /api/running-example
  json whole_matrix(const json& req) const;    // POST /api/whole-matrix
  json heads(const json& req);                 // POST /api/heads
  json circuits();                             // GET  /api/circuits

  const GPT2& model() const { return model_; }
  const std::string& model_path() const { return path_; }

  // The ids a request asks for: "ids" (array of token ids) or "text" (through the model's tokenizer).
  // Refuses empty input, unknown ids and inputs longer than the model's context (never truncates).
  std::vector<int> request_ids(const json& req) const;
  std::vector<std::string> labels(const std::vector<int>& ids) const;
  std::shared_ptr<const Computed> compute(const std::vector<int>& ids);

 private:
  std::string path_;
  GPT2 model_;
  std::optional<Tokenizer> tok_;
  ServiceOptions opt_;
  std::counting_semaphore<1024> forwards_;
  std::mutex cache_mu_;
  std::list<std::shared_ptr<const Computed>> cache_;  // most recent first
  std::mutex heads_mu_, circuits_mu_;
  std::optional<json> heads_cache_, circuits_cache_;
};

}  // namespace qkv::server

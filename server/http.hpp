// `qkv serve`: the embedded page and the JSON API (docs/api.md) over HTTP, with cpp-httplib.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "service.hpp"

namespace httplib {
class Server;
}

namespace qkv::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                          // 0: any free port (the URL printed says which)
  size_t max_body_bytes = size_t(64) << 10;  // larger request bodies get 413
  bool log = false;                         // one line per request on stderr
};

// Binds, calls on_ready(url) once the socket listens, then serves until SIGINT/SIGTERM. Throws
// qkv::Error (usage) when the address cannot be bound.
void serve(Service& service, const ServeOptions& options, const std::function<void(const std::string&)>& on_ready);

// Everything serve() sets up on the server except sockets and timeouts: the body limit
// (options.max_body_bytes, 413 above it), default headers, the asset and /api/ routes, the JSON error
// handler (every status >= 400 gets {"error": "..."}), the exception handler and, with options.log, the
// request log. The handlers keep a reference to `service`, which must outlive `svr`. serve() calls it;
// so does the HTTP fuzz target (fuzz/targets/http_request.cpp), which feeds it requests without sockets.
void configure_routes(httplib::Server& svr, Service& service, const ServeOptions& options);

// An embedded asset (web/), by URL path: "/" is index.html. nullptr for anything else.
struct Asset {
  const char* path;
  const char* content_type;
  const unsigned char* data;
  size_t size;
};
const Asset* find_asset(const std::string& path);

}  // namespace qkv::server

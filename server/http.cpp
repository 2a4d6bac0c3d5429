#include "http.hpp"

#include <httplib.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <new>
#include <thread>

#include "qkv/error.hpp"

namespace qkv::server {
namespace {

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json; charset=utf-8");
}

void send_error(httplib::Response& res, int status, const std::string& message, const json& extra = json::object()) {
  json body = {{"error", message}};
  body.update(extra);
  send_json(res, status, body);
}

json parse_body(const httplib::Request& req) {
  if (req.body.empty()) return json::object();
  try {
    return json::parse(req.body);
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
}

// Runs one API call and turns every failure into a JSON error: 4xx for the client's mistakes, 500/503
// for ours (the message still says what happened); false when it failed.
template <class F>
bool try_api(httplib::Response& res, F&& f) {
  try {
    f();
    return true;
  } catch (const ApiError& e) {
    send_error(res, e.status, e.what(), e.extra);
  } catch (const qkv::Error& e) {
    send_error(res, e.kind() == ErrorKind::Usage ? 400 : 422, e.what());
  } catch (const json::exception& e) {
    send_error(res, 400, std::string("malformed request: ") + e.what());
  } catch (const std::bad_alloc&) {
    send_error(res, 503, "out of memory: try a shorter text");
  } catch (const std::exception& e) {
    send_error(res, 500, std::string("internal error: ") + e.what());
  }
  return false;
}

// An API call whose JSON result is the response.
template <class F>
void guarded(httplib::Response& res, F&& f) {
  try_api(res, [&] { send_json(res, 200, f()); });
}

// POST /api/generate: the request is checked first (its errors are ordinary JSON errors), then the events
// are streamed as they happen, one JSON object per line (NDJSON, chunked); a failure after the first
// event is sent as an {"event": "error"} line. A client that goes away stops the generation.
void generate_route(Service& service, const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<Service::GenerateJob> job;
  if (!try_api(res, [&] { job = service.generate_job(parse_body(req)); })) return;
  res.set_chunked_content_provider("application/x-ndjson; charset=utf-8",
                                   [&service, job](size_t, httplib::DataSink& sink) {
    auto emit = [&sink](const json& e) {
      const std::string line = e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
      return sink.write(line.data(), line.size());
    };
    try {
      service.generate_stream(*job, emit);
    } catch (const std::bad_alloc&) {
      emit({{"event", "error"}, {"error", "out of memory: try a shorter prompt"}});
    } catch (const std::exception& e) {
      emit({{"event", "error"}, {"error", e.what()}});
    }
    sink.done();
    return true;
  });
}

const char* reason(int status) {
  switch (status) {
    case 400: return "bad request";
    case 404: return "not found: only the page's own files and /api/ endpoints exist";
    case 405: return "method not allowed";
    case 411: return "a Content-Length is required";
    case 413: return "the request body is too large";
    case 414: return "the request URI is too long";
    case 415: return "unsupported request body encoding";
    default: return status >= 500 ? "internal error" : "request refused";
  }
}

}  // namespace

void configure_routes(httplib::Server& svr, Service& service, const ServeOptions& o) {
  svr.set_payload_max_length(o.max_body_bytes);
  svr.set_default_headers({{"X-Content-Type-Options", "nosniff"},
                           {"Cache-Control", "no-store"},
                           {"Referrer-Policy", "no-referrer"}});

  // Only the embedded assets: no mount point, no base directory, so no path reaches the filesystem.
  svr.Get(R"(/[A-Za-z0-9_.\-]*)", [](const httplib::Request& req, httplib::Response& res) {
    const Asset* a = find_asset(req.path);
    if (!a) return send_error(res, 404, "not found: " + req.path);
    res.set_content(reinterpret_cast<const char*>(a->data), a->size, a->content_type);
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; "
                   "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'");
  });
  // The handlers hold a reference to `service` and copies of the options they use: they may outlive `o`.
  const size_t cap = o.max_body_bytes;
  svr.Get("/api/info", [&service, cap](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      json j = service.info();
      j["limits"] = {{"max_body_bytes", cap}, {"n_positions", service.arch().n_ctx}};
      return j;
    });
  });
  svr.Get("/api/soft-dictionary",
          [](const httplib::Request&, httplib::Response& res) { guarded(res, [] { return Service::soft_dictionary_example(); }); });
  svr.Get("/api/heads", [&service](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] { return service.heads(json::object()); });
  });
  svr.Get("/api/circuits",
          [&service](const httplib::Request&, httplib::Response& res) { guarded(res, [&] { return service.circuits(); }); });
  auto post = [&svr, &service](const char* path, json (Service::*fn)(const json&)) {
    svr.Post(path, [&service, fn](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] { return (service.*fn)(parse_body(req)); });
    });
  };
  svr.Post("/api/tokenize", [&service](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { return service.tokenize(parse_body(req)); });
  });
  svr.Post("/api/soft-dictionary", [&service](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { return service.soft_dictionary(parse_body(req)); });
  });
  svr.Get("/api/running-example", [](const httplib::Request&, httplib::Response& res) {
    guarded(res, [] { return Service::running_example(json::object()); });
  });
  svr.Post("/api/running-example", [](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { return Service::running_example(parse_body(req)); });
  });
  svr.Post("/api/whole-matrix", [&service](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { return service.whole_matrix(parse_body(req)); });
  });
  post("/api/attention", &Service::attention);
  post("/api/heads", &Service::heads);
  post("/api/patch", &Service::patch);
  post("/api/patch-site", &Service::patch_site);
  post("/api/rope", &Service::rope);
  post("/api/patch-progress", &Service::patch_progress);
  post("/api/attribute", &Service::attribute);
  post("/api/path-patch", &Service::path_patch);
  svr.Post("/api/generate", [&service](const httplib::Request& req, httplib::Response& res) {
    generate_route(service, req, res);
  });

  // Request bodies are bounded before a byte of them is read. cpp-httplib 0.11.4 applies
  // set_payload_max_length to a Content-Length only: a chunked body or one without Content-Length (read
  // until the client closes) is read whole whatever its size, and a gzip/deflate/brotli body is
  // inflated without a limit; any of them lets one request fill the memory. The API takes JSON sent
  // with a Content-Length (what browsers and curl -d send), so the others are refused here: 411 for a
  // Transfer-Encoding or a body method without Content-Length, 415 for a Content-Encoding. The body is
  // left unread, so the response asks the client to close (httplib itself would read on: what follows
  // on that connection gets a 400 per line, at most keep_alive_max_count of them).
  svr.set_pre_routing_handler([cap](const httplib::Request& req, httplib::Response& res) {
    const auto& m = req.method;
    const bool body_method = m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE" || m == "PRI";
    const std::string limit = " (at most " + std::to_string(cap) + " bytes)";
    if (req.has_header("Transfer-Encoding")) {
      send_error(res, 411, "Transfer-Encoding is not accepted: send the body with a Content-Length" + limit);
    } else if (body_method && !req.has_header("Content-Length")) {
      send_error(res, 411, "a Content-Length is required" + limit);
    } else if (req.has_header("Content-Encoding") && req.get_header_value("Content-Encoding") != "identity") {
      send_error(res, 415, "compressed request bodies are not accepted (Content-Encoding: " +
                               req.get_header_value("Content-Encoding") + "); send plain JSON" + limit);
    } else {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });

  // Whatever a handler did not answer (unknown path, wrong method, body over the cap) becomes a JSON
  // error with the status httplib chose.
  svr.set_error_handler([cap](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() && res.get_header_value("Content-Type").rfind("application/json", 0) == 0) return;
    std::string msg = reason(res.status);
    if (res.status == 413) msg += " (the limit is " + std::to_string(cap) + " bytes)";
    if (res.status == 404) msg += ": " + req.path;
    send_error(res, res.status, msg);
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, 500, "internal error");
  });
  if (o.log)
    svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "%s %s -> %d (%zu bytes)\n", req.method.c_str(), req.path.c_str(), res.status, res.body.size());
    });
}

void serve(Service& service, const ServeOptions& o, const std::function<void(const std::string&)>& on_ready) {
  // SIGINT/SIGTERM are taken by a waiting thread (sigwait), which stops the server cleanly; they are
  // blocked before httplib starts its threads so that every thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  httplib::Server svr;
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second server share
  // a busy port silently instead of failing with a clear message.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });
  svr.set_read_timeout(10, 0);
  svr.set_write_timeout(30, 0);
  svr.set_keep_alive_timeout(5);
  configure_routes(svr, service, o);

  int port = o.port;
  if (port == 0) {
    port = svr.bind_to_any_port(o.host);
    if (port < 0) usage_error("cannot bind " + o.host + " to a free port");
  } else if (!svr.bind_to_port(o.host, port)) {
    usage_error("cannot listen on " + o.host + ":" + std::to_string(port) +
                " (in use, or not an address of this machine); try --port 0 for any free port");
  }
  std::thread stopper([&svr, sigs] {
    int sig = 0;
    sigwait(&sigs, &sig);
    svr.stop();
  });
  const bool v6 = o.host.find(':') != std::string::npos;
  on_ready("http://" + (v6 ? "[" + o.host + "]" : o.host) + ":" + std::to_string(port) + "/");
  svr.listen_after_bind();
  // listen_after_bind returns after stop(); if it returned for another reason, wake the stopper.
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
}

}  // namespace qkv::server

// qkv serve — the seeds' panels as a local web page over the real model (server/, web/, docs/api.md).
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "cli.hpp"
#include "http.hpp"
#include "model_input.hpp"
#include "qkv/error.hpp"

namespace qkv::cli {
namespace {

struct ServeArgs {
  ModelArgs m;
  server::ServeOptions o;
  int forwards = 2;
  int patch_tokens = 256, patch_sites = 2048;
};

void run_serve(ServeArgs& a) {
  // server::serve() stops cleanly on SIGINT/SIGTERM by taking them with sigwait, which needs them blocked
  // in every thread. A thread started before serve() — by OpenMP/BLIS while the model loads or warms up —
  // would keep them unblocked and the kernel could deliver SIGTERM there, killing the process without the
  // clean stop. So they are blocked here, first, and every later thread inherits the mask. One that
  // arrives during the load stays pending and stops the server as soon as serve() waits for it.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  server::ServiceOptions so;
  so.max_concurrent_forwards = a.forwards;
  so.max_patch_tokens = a.patch_tokens;
  so.max_patch_sites = a.patch_sites;
  // Any family load_lm reads: every panel (attention with S from the rotated q and k on rotary models,
  // the rotary offset chart on rotary ones, heads, circuits, patching).
  LoadedLM lm = load_lm_arg(a.m);
  server::Service service(lm.path, std::move(lm.model), std::move(lm.tokenizer), so);
  const bool loopback = a.o.host == "127.0.0.1" || a.o.host == "localhost" || a.o.host == "::1";
  server::serve(service, a.o, [&](const std::string& url) {
    std::cout << "qkv serve: " << url << "\n"
              << "  model " << service.model_path() << " (" << service.arch().model_type << ", "
              << service.arch().n_layer << " layers × " << service.arch().H << " heads, context "
              << service.arch().n_ctx << " tokens)\n  Ctrl-C to stop\n";
    if (!loopback)
      std::cout << "  warning: listening on " << a.o.host
                << ", not only this machine's loopback: anyone who can reach it can use the page\n";
    std::cout.flush();
  });
  std::cout << "qkv serve: stopped\n";
}

void register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve",
                                 "A local web page: the soft dictionary, the model's attention (any family; "
                                 "rotary S from rotated q, k), heads, circuits, activation patching");
  auto a = std::make_shared<ServeArgs>();
  add_model_option(cmd, a->m);
  cmd->add_option("--host", a->o.host, "address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", a->o.port, "port (default 8080; 0 picks a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--max-body", a->o.max_body_bytes, "largest request body in bytes (default 65536)")
      ->check(CLI::Range(1024, 16 << 20));
  cmd->add_option("--forwards", a->forwards, "forwards computed at once; other requests wait (default 2)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--patch-tokens", a->patch_tokens, "longest input of the patching view (default 256)")
      ->check(CLI::Range(2, 1 << 16));
  cmd->add_option("--patch-sites", a->patch_sites,
                  "most sites (one forward each) of one patching sweep (default 2048)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--log", a->o.log, "one line per request on stderr");
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace

QKV_COMMAND(90, register_serve);

}  // namespace qkv::cli

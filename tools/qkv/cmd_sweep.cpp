// qkv sweep — per-head statistics and activation stores over a corpus, split over MPI ranks when run
// under mpirun/srun (docs/sweep.md). The library does the work (analysis/sweep.hpp); this file parses,
// sets up MPI and signals, shows progress and renders the statistics (JSON, CSV, SVG, a table).
#include <omp.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#ifdef QKV_HAVE_MPI
#include <mpi.h>
#endif

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/analysis/sweep.hpp"
#include "qkv/error.hpp"
#include "qkv/report/sweep_report.hpp"
#include "qkv/report/table.hpp"

namespace sw = qkv::analysis::sweep;

namespace qkv::cli {
namespace {

volatile int g_stop = 0;  // int is sig_atomic_t on the platforms qkv builds for
extern "C" void on_signal(int) {
  g_stop = 1;
}

#ifdef QKV_HAVE_MPI
constexpr const char* kMpiNote =
    "MPI: built with MPI; under mpirun/srun the windows are split over the ranks.";
#else
constexpr const char* kMpiNote =
    "MPI: this build has no MPI (configure with libopenmpi-dev installed); it runs as one process.";
#endif

// True when a process manager started us (mpirun, srun --mpi=pmix): only then is MPI initialised.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

std::string hms(double seconds) {
  const int s = int(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

// One line redrawn in place on a terminal; every 10% as its own line otherwise (CI logs), like `qkv train`.
void show_progress(const sw::Progress& p, int ranks) {
  static const bool tty = isatty(STDERR_FILENO);
  static int last_decile = -1;
  const double frac = p.windows_total ? double(p.windows_done) / double(p.windows_total) : 1.0;
  const double left = frac > 0 ? p.seconds / frac - p.seconds : 0;
  const int width = 24, filled = int(frac * width);
  char line[320];
  std::snprintf(line, sizeof line, "sweep windows %lld/%lld [%s%s] %.0f tok/s%s  %s elapsed, %s left",
                static_cast<long long>(p.windows_done), static_cast<long long>(p.windows_total),
                std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(),
                p.seconds > 0 ? double(p.tokens_done) / p.seconds : 0.0,
                ranks > 1 ? (" (rank 0 of " + std::to_string(ranks) + ")").c_str() : "",
                hms(p.seconds).c_str(), hms(left).c_str());
  if (tty) {
    std::fprintf(stderr, "\r%s\033[K", line);
    if (p.windows_done == p.windows_total) std::fprintf(stderr, "\n");
  } else if (int(frac * 10) != last_decile) {
    last_decile = int(frac * 10);
    std::fprintf(stderr, "%s\n", line);
  }
}

struct Args {
  ModelArgs m;
  sw::Options o;
  std::string token_dtype = "uint16", save_dtype = "float32";
  bool json = false;
};

void run(const Args& a) {
  sw::Options o = a.o;
  o.token_dtype = a.token_dtype == "uint32" ? sw::TokenDtype::U32 : sw::TokenDtype::U16;
  o.save_bf16 = a.save_dtype == "bf16";
  sw::Comm comm;
#ifdef QKV_HAVE_MPI
  const bool mpi = launched_by_mpi();
  if (mpi) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &comm.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &comm.size);
    // Non-blocking collectives waited on with short sleeps: a rank that finished its chunks early
    // must not busy-poll (Open MPI's blocking calls do) on a core a slower rank still needs.
    auto wait = [](MPI_Request& req) {
      int done = 0;
      while (MPI_Test(&req, &done, MPI_STATUS_IGNORE), !done) usleep(2000);
    };
    comm.barrier = [wait] {
      MPI_Request req;
      MPI_Ibarrier(MPI_COMM_WORLD, &req);
      wait(req);
    };
    comm.max = [wait](int v) {
      int r = 0;
      MPI_Request req;
      MPI_Iallreduce(&v, &r, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req);
      wait(req);
      return r;
    };
  }
  // Ranks sharing a machine share its cores: unless QKV_THREADS or OMP_NUM_THREADS says otherwise, each
  // gets cores / local ranks threads (OpenMP threads that outnumber the cores spin against each other).
  if (mpi && !std::getenv("QKV_THREADS") && !std::getenv("OMP_NUM_THREADS")) {
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    int local_size = 1;
    MPI_Comm_size(local, &local_size);
    MPI_Comm_free(&local);
    const int threads = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, local_size));
    setenv("QKV_THREADS", std::to_string(threads).c_str(), 1);
    omp_set_num_threads(threads);
  }
  struct Finalize {
    bool on;
    ~Finalize() {
      if (on) MPI_Finalize();
    }
  } finalize{mpi};
#else
  if (launched_by_mpi())
    usage_error("this qkv was built without MPI; run one process, or rebuild with libopenmpi-dev");
#endif
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  const LoadedLM m = load_lm_arg(a.m);
  const int ranks = comm.size;
  auto progress = [&](const sw::Progress& p) {
    if (comm.rank == 0) show_progress(p, ranks);
  };
  const sw::RunResult r = sw::run_sweep(m.model, m.path, m.tokenizer, o, comm, progress, &g_stop);
  if (r.stopped) {
    if (comm.rank == 0)
      std::fprintf(
          stderr,
          "\nqkv sweep: stopped by a signal; the chunks already done are kept: rerun with --resume\n");
#ifdef QKV_HAVE_MPI
    if (mpi) MPI_Finalize(), finalize.on = false;
#endif
    std::exit(143);
  }
  if (comm.rank != 0) return;
  report::write_sweep_outputs(o.out, r, m.model.arch.n_layer, m.model.arch.H);
  if (a.json) {
    print_json(report::sweep_stats_json(r));
    return;
  }
  std::cout << "swept " << r.stats.windows << " windows of " << r.plan.window << " tokens (stride "
            << r.plan.stride << ", " << r.plan.n_tokens << " tokens in the corpus) with " << ranks
            << (ranks == 1 ? " process" : " ranks") << "; " << r.chunks_skipped << " of " << r.plan.n_chunks
            << " chunks were already done\n\n";
  report::Table t({"head", "prev-token", "dup-token", "induction", "entropy", "sink", "DLA norm"});
  for (const auto& h : r.stats.heads)
    t.add({std::to_string(h.layer) + "." + std::to_string(h.head), report::fmt(h.previous_token, 3),
           report::fmt(h.duplicate_token, 3), report::fmt(h.induction, 3), report::fmt(h.entropy, 3),
           report::fmt(h.sink, 3), report::fmt(h.dla, 3)});
  std::cout << t.str() << "\nwrote stats.json, stats.csv, 7 heatmaps"
            << (r.plan.save.empty() ? "" : ", manifest.json and shards") << " to " << o.out << "/\n";
}

}  // namespace

void register_sweep(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("sweep", "Per-head statistics and activation stores over a corpus (MPI-parallel)");
  auto a = std::make_shared<Args>();
  add_model_option(cmd, a->m);
  cmd->add_option("--corpus", a->o.corpus,
                  "text files, tokenized with the model's tokenizer and concatenated");
  cmd->add_option("--tokens-file", a->o.tokens_files,
                  "token id files (raw uint16/uint32, or llm.c's .bin), concatenated");
  cmd->add_option("--token-dtype", a->token_dtype, "ids in --tokens-file: uint16 (default) or uint32")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  cmd->add_option("--out", a->o.out, "output directory")->required();
  cmd->add_option("--window", a->o.window, "tokens per window (default: the model's context)");
  cmd->add_option("--stride", a->o.stride, "tokens between window starts (default: the window)");
  cmd->add_option("--max-offset", a->o.max_offset,
                  "mean attention by offset i − j for 0 .. this (default 32)");
  cmd->add_option("--save", a->o.save,
                  "store this hook for every window (repeatable), e.g. blocks.0.attn.hook_z");
  cmd->add_option("--save-dtype", a->save_dtype, "float32 (default) or bf16 (stored as uint16 bits)")
      ->check(CLI::IsMember({"float32", "bf16"}));
  cmd->add_option("--shard-mb", a->o.shard_mb,
                  "largest shard file in MiB (default 256): sets the windows per chunk");
  cmd->add_option("--chunk-windows", a->o.chunk_windows,
                  "windows per chunk (overrides --shard-mb; default 64 without --save)");
  cmd->add_option("--max-windows", a->o.max_windows, "only the first N windows");
  cmd->add_flag("--resume", a->o.resume, "finish the sweep already in --out (same arguments)");
  cmd->add_flag("--json", a->json, "print the statistics as JSON");
  cmd->footer(kMpiNote);
  cmd->callback([a] { run(*a); });
}

QKV_COMMAND(27, register_sweep);

}  // namespace qkv::cli

// qkv bench attention | forward | train-step | gemm | all | peak — timings on this machine: the median over
// repeated runs (after one warm-up), GFLOP/s, the fraction of the SGEMM peak measured in the same run
// (a 2048² SGEMM through qkv::gemm) and of the FMA peak of the ISA in use (peak.hpp; QKV_ISA or --path),
// and peak memory (VmHWM growth over the case), with the ISA and BLIS kernel that ran. `forward --profile`
// adds the per-op time breakdown; `peak` measures the FMA throughput per ISA and the memory bandwidth.
// Progress goes to stderr; --json prints one object to stdout. docs/performance.md holds the numbers
// and the method.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "qkv/error.hpp"
#include "qkv/flash.hpp"
#include "qkv/gemm.hpp"
#include "qkv/pgemm.hpp"
#include "qkv/lm.hpp"
#include "qkv/lm_train.hpp"
#include "qkv/peak.hpp"
#include "qkv/train/train_lm.hpp"
#include "qkv/profile.hpp"
#include "qkv/report/table.hpp"
#include "qkv/train/train.hpp"

namespace qkv::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The FMA peak of the ISA in use (flash_path(): QKV_ISA), measured once per process unless given.
double g_fma_peak = 0;
double fma_peak_in_use() {
  if (g_fma_peak <= 0) g_fma_peak = measure_fma_peak(flash_path()).gflops;
  return g_fma_peak;
}

// The GEMM a model's projections over many rows take: qkv's packed one (pgemm.hpp) or BLIS.
std::string prefill_gemm() { return pgemm_supported() ? pgemm_name() : "BLIS, kernel " + gemm_kernel(); }

// What every bench JSON says about the kernels that ran: the ISA, BLIS's kernel, the projections' GEMM,
// the FMA peak of that ISA and, given a rate in GFLOP/s, its fraction of it.
nlohmann::json isa_fields(double gflops) {
  const double fma = fma_peak_in_use();
  nlohmann::json j = {{"isa", flash_path_name()},
                      {"blis_kernel", gemm_kernel()},
                      {"projection_gemm", prefill_gemm()},
                      {"fma_peak_gflops", fma}};
  if (gflops > 0) j["fraction_of_fma_peak"] = gflops / fma;
  return j;
}

// kB from /proc/self/status ("VmHWM:" peak resident set, "VmRSS:" current).
double status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = key;
  while (std::getline(f, line))
    if (line.compare(0, k.size(), k) == 0) return std::atof(line.c_str() + k.size());
  return 0;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One warm-up, then `repeats` timed runs; progress on stderr when a run is long.
std::vector<double> time_runs(const std::string& what, int repeats, const std::function<void()>& fn) {
  auto t0 = Clock::now();
  fn();
  const double warm = seconds_since(t0);
  const bool verbose = warm * repeats > 2.0;
  if (verbose) std::cerr << what << ": warm-up " << report::fmt(warm * 1e3, 1) << " ms\n";
  std::vector<double> ms;
  for (int r = 0; r < repeats; r++) {
    t0 = Clock::now();
    fn();
    ms.push_back(seconds_since(t0) * 1e3);
    if (verbose)
      std::cerr << what << ": run " << r + 1 << "/" << repeats << " " << report::fmt(ms.back(), 1) << " ms\n";
  }
  return ms;
}

std::vector<float> random_vector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The machine's SGEMM peak: a 2048 × 2048 × 2048 product through qkv::gemm, median of 7.
double measure_peak_gflops() {
  const int n = 2048;
  const std::vector<float> A = random_vector(size_t(n) * n, 1), B = random_vector(size_t(n) * n, 2);
  std::vector<float> C(size_t(n) * n);
  const std::vector<double> ms = time_runs("sgemm peak", 7, [&] {
    gemm<float>(false, false, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
  });
  return 2.0 * n * n * n / median(ms) * 1e-6;
}

struct Result {
  std::string name;
  int T = 0;
  std::vector<double> ms;
  double flops = 0;
  double peak_mib = 0;  // VmHWM growth over the case (inputs, outputs and workspace)
  double io_mib = -1;   // of which the case's own inputs and outputs (when it is meaningful)
  nlohmann::json extra = nlohmann::json::object();
};

nlohmann::json to_json(const Result& r, double peak) {
  const double med = median(r.ms), gf = r.flops / med * 1e-6;
  nlohmann::json j = {{"case", r.name},
                      {"T", r.T},
                      {"median_ms", med},
                      {"gflops", gf},
                      {"min_ms", *std::min_element(r.ms.begin(), r.ms.end())},
                      {"runs_ms", r.ms},
                      {"peak_memory_mib", r.peak_mib},
                      {"threads", gemm_threads()},
                      {"attention_path", flash_path_name()},
                      {"load_average", load_average()}};
  if (r.io_mib >= 0) j["workspace_mib"] = r.peak_mib - r.io_mib;
  if (peak > 0) {
    j["sgemm_peak_gflops"] = peak;
    j["fraction_of_peak"] = gf / peak;
  }
  j.update(isa_fields(gf));
  for (auto& [k, v] : r.extra.items()) j[k] = v;
  return j;
}

// Runs a case, then (unless given) measures the SGEMM peak after it, so the peak's matrices do not
// hide in the case's VmHWM growth.
void finish(Result r, double peak, bool json) {
  if (peak <= 0) peak = measure_peak_gflops();
  const nlohmann::json j = to_json(r, peak);
  if (json) {
    print_json(j);
    return;
  }
  std::cout << r.name << " T=" << r.T << ": median " << report::fmt(j["median_ms"].get<double>(), 2)
            << " ms over " << r.ms.size() << " runs, " << report::fmt(j["gflops"].get<double>(), 1)
            << " GFLOP/s = " << report::fmt(100 * j["fraction_of_peak"].get<double>(), 1)
            << "% of the SGEMM peak (" << report::fmt(peak, 1) << " GFLOP/s), "
            << report::fmt(100 * j["fraction_of_fma_peak"].get<double>(), 1) << "% of the " << flash_path_name()
            << " FMA peak (" << report::fmt(j["fma_peak_gflops"].get<double>(), 1) << " GFLOP/s), peak memory "
            << report::fmt(r.peak_mib, 1) << " MiB";
  if (r.io_mib >= 0)
    std::cout << " (" << report::fmt(r.peak_mib - r.io_mib, 1) << " MiB beyond inputs/outputs)";
  std::cout << "\n[" << gemm_backend() << ", projections " << prefill_gemm() << ", attention path "
            << flash_path_name() << " (QKV_ISA: every kernel), load " << load_average() << "]\n";
  if (r.extra.contains("profile")) {
    report::Table t({"op", "calls/forward", "ms/forward", "% of forward"});
    for (const auto& e : r.extra["profile"])
      t.add({e["op"].get<std::string>(), report::fmt(e["calls_per_forward"].get<double>(), 0),
             report::fmt(e["ms_per_forward"].get<double>(), 2),
             report::fmt(100 * e["fraction_of_forward"].get<double>(), 1)});
    std::cout << "\nper-op time (mean over the timed runs; ops outside the GEMMs and attention are the "
                 "ones to watch)\n"
              << t.str();
  }
}

// ---- attention ----
Result bench_attention(int T, int H, int dh, bool backward, int repeats) {
  if (T < 1 || H < 1 || dh < 1) usage_error("bench attention: --T, --H and --dh must be at least 1");
  const double hwm0 = status_kib("VmHWM:");
  const size_t n = size_t(H) * T * dh;
  std::vector<float> q = random_vector(n, 1), k = random_vector(n, 2), v = random_vector(n, 3), z(n),
                     lse(size_t(H) * T);
  std::vector<float> dz, dq, dk, dv;
  if (backward) dz = random_vector(n, 4), dq.resize(n), dk.resize(n), dv.resize(n);
  const float scale = 1.0f / std::sqrt(float(dh));
  Result r;
  r.name = backward ? "attention fwd+bwd" : "attention fwd";
  r.T = T;
  r.ms = time_runs(r.name + " T=" + std::to_string(T), repeats, [&] {
    flash_attention_forward(q.data(), k.data(), v.data(), z.data(), lse.data(), H, T, dh, scale);
    if (backward)
      flash_attention_backward(q.data(), k.data(), v.data(), z.data(), lse.data(), dz.data(), dq.data(),
                               dk.data(), dv.data(), H, T, dh, scale);
  });
  // causal FLOPs only, as bench/attention_bench.cpp and bench/compare_pytorch.py count them
  r.flops = (backward ? 14.0 : 4.0) * (0.5 * T * T) * dh * H;
  r.peak_mib = (status_kib("VmHWM:") - hwm0) / 1024;
  r.io_mib = ((backward ? 8.0 : 4.0) * n + double(H) * T) * 4 / (1 << 20);
  r.extra = {{"H", H}, {"dh", dh}, {"avx512", flash_path() == FlashPath::Avx512}};
  return r;
}

// ---- forward ----
// The per-op entries profile.hpp gathered over `repeats` timed runs (the warm-up's taken away before).
nlohmann::json profile_json(int repeats) {
  double total = 0;
  const std::vector<profile::Entry> entries = profile::take();
  for (const auto& e : entries) total += e.seconds;
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& e : entries)
    ops.push_back({{"op", e.op},
                   {"calls_per_forward", double(e.calls) / repeats},
                   {"ms_per_forward", e.seconds * 1e3 / repeats},
                   {"fraction_of_forward", total > 0 ? e.seconds / total : 0.0}});
  return ops;
}

// --T against the model's context (the CLI bounds it only loosely: the context is known once the model is).
void check_forward_T(int T, int n_ctx) {
  if (T < 1 || T > n_ctx) usage_error("bench forward: --T must be in [1, " + std::to_string(n_ctx) + "]");
}

// GPT-2 small's shape with GPT-2's random init, made in memory, through run() (what qkv run does).
Result bench_forward(int T, bool last_only, int repeats, bool prof) {
  const nlohmann::json cfg = default_config("gpt2", "small");
  check_forward_T(T, arch_from_config(cfg, "bench forward").n_ctx);  // before 124 M weights are made
  const LmParams p = init_lm(cfg, 0);
  const Model m = lm_view(p);
  std::cerr << "forward: GPT-2 small with random weights (124M parameters)...\n";
  const double hwm0 = status_kib("VmHWM:");
  std::vector<int> ids(static_cast<size_t>(T));
  std::mt19937_64 rng(1);
  for (auto& i : ids) i = int(rng() % uint64_t(m.arch.vocab_size));
  RunState st;
  RunOptions o;
  o.last_only = last_only;
  Result r;
  r.name = last_only ? "forward (last logits)" : "forward";
  r.T = T;
  // With --profile the warm-up's entries are dropped: the breakdown is the mean over the timed runs.
  bool warm = true;
  r.ms = time_runs("forward T=" + std::to_string(T), repeats, [&] {
    run(m, ids, st, o);
    if (warm && prof) profile::take();
    warm = false;
  });
  r.flops = lm_forward_flops(m.arch, T, last_only);
  r.peak_mib = (status_kib("VmHWM:") - hwm0) / 1024;  // the weights are resident before hwm0
  r.extra = {{"model", "GPT-2 small shape, random weights"}, {"gemm", gemm_backend()}};
  if (prof) r.extra["profile"] = profile_json(repeats);
  return r;
}

// The family forward (lm.hpp) on a checkpoint: `model` if given, else a random one of `arch` written to a
// temporary directory in the shape the families issue names for Llama (d 2048, 16 layers, 32 query /
// 8 key-value heads, SwiGLU 5632, vocab 32000: 1.1 B parameters) and deleted afterwards.
Result bench_family_forward(const std::string& arch, const std::string& model, const std::string& dtype, int T,
                            bool last_only, int repeats, bool prof) {
  namespace fs = std::filesystem;
  std::string dir = model;
  const bool temp = model.empty();
  if (temp) {
    nlohmann::json cfg = default_config(arch, "small");
    if (cfg.contains("hidden_size")) {
      cfg["hidden_size"] = 2048, cfg["num_hidden_layers"] = 16, cfg["num_attention_heads"] = 32;
      if (cfg.contains("num_key_value_heads")) cfg["num_key_value_heads"] = 8;
      if (cfg.contains("intermediate_size")) cfg["intermediate_size"] = 5632;
      if (cfg.contains("head_dim")) cfg["head_dim"] = 64;
      cfg["max_position_embeddings"] = 2048;
    }
    check_forward_T(T, arch_from_config(cfg, "bench forward --arch").n_ctx);  // before the checkpoint is written
    dir = (fs::temp_directory_path() / ("qkv-bench-" + arch + "-" + std::to_string(::getpid()))).string();
    std::cerr << "forward: writing a random " << arch << " checkpoint (" << dtype << ") to " << dir << " ...\n";
    write_random_checkpoint(dir, cfg, dtype == "bf16" ? WeightType::BF16 : dtype == "f16" ? WeightType::F16 : WeightType::F32,
                            1, 0);
  }
  struct Cleanup {
    std::string d;
    bool on;
    ~Cleanup() {
      std::error_code ec;
      if (on) fs::remove_all(d, ec);
    }
  } cleanup{dir, temp};
  const Model m = load_lm(dir);
  check_forward_T(T, m.arch.n_ctx);
  std::vector<int> ids(static_cast<size_t>(T));
  std::mt19937_64 rng(1);
  for (auto& i : ids) i = int(rng() % uint64_t(m.arch.vocab_size));
  RunState st;
  RunOptions o;
  o.last_only = last_only;
  const double hwm0 = status_kib("VmHWM:");
  Result r;
  r.name = std::string(last_only ? "forward (last logits) " : "forward ") + m.arch.model_type;
  r.T = T;
  bool warm = true;  // with --profile the warm-up's entries are dropped, as bench_forward
  r.ms = time_runs("forward T=" + std::to_string(T), repeats, [&] {
    run(m, ids, st, o);
    if (warm && prof) profile::take();
    warm = false;
  });
  r.flops = lm_forward_flops(m.arch, T, last_only);
  r.peak_mib = (status_kib("VmHWM:") - hwm0) / 1024;
  nlohmann::json types = nlohmann::json::object();  // weight type -> tensors of that type
  for (const auto& spec : m.table) {
    const std::string tn = weight_type_name(m.weight(spec.name));
    types[tn] = types.value(tn, 0) + 1;
  }
  r.extra = {{"model", m.source},    {"parameters", m.num_parameters()},      {"gemm", gemm_backend()},
             {"weight_types", types}, {"logits", last_only ? "last" : "all"}};
  if (prof) r.extra["profile"] = profile_json(repeats);
  return r;
}

// ---- train-step ----
// The bundled model's shape (2 layers, attention-only, vocab 256, d 64, 4 heads), batch 32 × 128 tokens,
// through train_lm() (include/qkv/train/train_lm.hpp); one warm-up step, then `steps` timed ones.
Result bench_train_step(int steps) {
  const nlohmann::json c = {{"model_type", "gpt2"}, {"vocab_size", 256}, {"n_positions", 256}, {"n_ctx", 256},
                            {"n_embd", 64},         {"n_layer", 2},      {"n_head", 4},        {"qkv_attn_only", true}};
  const int T = 128, batch = 32;
  LmParams m = init_lm(c, 0);
  TrainSettings s;
  s.steps = steps + 1;
  s.batch = batch;
  s.warmup = 1;
  s.eval_every = 1 << 30;
  const double hwm0 = status_kib("VmHWM:");
  std::vector<double> ms;
  double prev = 0;
  train_lm(m, induction_data(m.arch().vocab_size, T), s, 0, [&](const TrainRecord& rec) {
    const double step_ms = (rec.seconds - prev) * 1e3;
    prev = rec.seconds;
    if (rec.step > 1) ms.push_back(step_ms);
    std::cerr << "train-step: step " << rec.step << "/" << s.steps << " " << report::fmt(step_ms, 1) << " ms"
              << (rec.step == 1 ? " (warm-up)" : "") << ", loss " << report::fmt(rec.loss, 3) << "\n";
  });
  Result r;
  r.name = "train-step";
  r.T = T;
  r.ms = ms;
  // model FLOPs: forward + backward ≈ 3 × the forward over every sequence of the batch (the training
  // forward is the reference one, which computes the full T × T scores; only the causal half counts here)
  r.flops = 3.0 * batch * lm_forward_flops(m.arch(), T);
  r.peak_mib = (status_kib("VmHWM:") - hwm0) / 1024;
  r.extra = {{"batch", batch}, {"model", "2-layer attention-only, vocab 256, d 64, 4 heads"}};
  return r;
}

// ---- gemm: the GPT-2 shapes through BLIS (qkv::gemm) or a dlopen'ed OpenBLAS ----
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                            float*, int);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

struct Backend {
  std::string name;
  CblasSgemm sgemm = nullptr;  // null: qkv::gemm (or pgemm)
  bool packed = false;         // qkv's packed GEMM (pgemm.hpp), B packed from its layout per call as the forward does
  void run(bool tB, int M, int N, int K, const float* A, const float* B, float* C) const {
    if (packed)
      pgemm(M, N, K, A, K,
            [&](int j0, int n, int nr, float* dst) {
              if (tB) pgemm_pack_rows(B + long(j0) * K, K, n, K, nr, dst);
              else pgemm_pack_cols(B, N, j0, n, K, nr, dst);
            },
            false, C, N);
    else if (sgemm)
      sgemm(kRowMajor, kNoTrans, tB ? kTrans : kNoTrans, M, N, K, 1.0f, A, K, B, tB ? K : N, 0.0f, C, N);
    else
      gemm<float>(false, tB, M, N, K, 1.0f, A, K, B, tB ? K : N, 0.0f, C, N);
  }
};

Backend load_backend(const std::string& which, int threads) {
  Backend b;
  if (which == "blis") {
    gemm_init();
    b.name = gemm_backend();
    return b;
  }
  if (which == "packed") {
    if (!pgemm_supported())
      usage_error(std::string("bench gemm: --backend packed needs the avx512 or avx2 path (this is ") +
                  flash_path_name() + ")");
    b.packed = true;
    b.name = "qkv packed GEMM (" + std::string(flash_path_name()) + " micro-kernel), " + std::to_string(threads) +
             " threads";
    return b;
  }
  if (which != "openblas") usage_error("bench gemm: --backend must be blis, packed or openblas");
  // RTLD_DEEPBIND: OpenBLAS's own BLAS symbols win over BLIS's, which this binary links.
  void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h)
    data_error(std::string("cannot load libopenblas.so.0: ") + dlerror() + " (apt-get install libopenblas0)");
  b.sgemm = reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm"));
  auto set = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
  auto core = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_corename"));
  if (!b.sgemm || !set) data_error("libopenblas.so.0 lacks cblas_sgemm or openblas_set_num_threads");
  set(threads);
  const char* ct = std::getenv("OPENBLAS_CORETYPE");
  b.name = std::string("OpenBLAS, core ") + (core ? core() : "?") +
           (ct ? std::string(" (OPENBLAS_CORETYPE=") + ct + ")" : "") + ", " + std::to_string(threads) +
           " threads";
  return b;
}

struct Shape {
  std::string name;
  int N, K;
  bool tB;
};

void run_gemm(const std::string& which, const std::vector<int>& Ts, int repeats, bool json) {
  const Backend b = load_backend(which, gemm_threads());
  const std::vector<Shape> shapes = {{"c_attn [T,768]x[768,2304]", 2304, 768, false},
                                     {"c_fc [T,768]x[768,3072]", 3072, 768, false},
                                     {"mlp c_proj [T,3072]x[3072,768]", 768, 3072, false},
                                     {"unembed [T,768]x[768,50257]^T", 50257, 768, true}};
  nlohmann::json out = nlohmann::json::array();
  report::Table t({"shape", "T", "median ms", "GFLOP/s", "% of FMA peak"});
  auto one = [&](const std::string& name, int M, int N, int K, bool tB) {
    const std::vector<float> A = random_vector(size_t(M) * K, 1), B = random_vector(size_t(K) * N, 2);
    std::vector<float> C(size_t(M) * N);
    const double med =
        median(time_runs(name, repeats, [&] { b.run(tB, M, N, K, A.data(), B.data(), C.data()); }));
    const double gf = 2.0 * M * N * K / med * 1e-6;
    out.push_back({{"shape", name}, {"M", M}, {"N", N}, {"K", K}, {"median_ms", med}, {"gflops", gf},
                   {"fraction_of_fma_peak", gf / fma_peak_in_use()}});
    t.add({name, std::to_string(M), report::fmt(med, 3), report::fmt(gf, 1),
           report::fmt(100 * gf / fma_peak_in_use(), 1)});
  };
  one("square 2048", 2048, 2048, 2048, false);
  for (int T : Ts)
    for (const auto& s : shapes) one(s.name, T, s.N, s.K, s.tB);
  nlohmann::json j = {{"backend", b.name}, {"load_average", load_average()}, {"results", out}};
  j.update(isa_fields(0));
  if (json) {
    print_json(j);
    return;
  }
  std::cout << b.name << ", ISA " << flash_path_name() << " (FMA peak "
            << report::fmt(j["fma_peak_gflops"].get<double>(), 1) << " GFLOP/s), median of " << repeats << ", load "
            << load_average() << "\n\n"
            << t.str();
}

// The single- vs multi-threaded crossover of qkv::gemm's small products (gemm.cpp's threshold):
// square-ish products of growing size with the BLIS thread count set to 1 and to all cores.
void run_gemm_threshold(int repeats, bool json) {
  gemm_init();
  void* h = dlopen("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", RTLD_NOW | RTLD_NOLOAD);
  if (!h) data_error("BLIS is not loaded as /usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4");
  auto set = reinterpret_cast<void (*)(long)>(dlsym(h, "bli_thread_set_num_threads"));
  auto sg = reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm"));
  if (!set || !sg) data_error("libblis lacks bli_thread_set_num_threads or cblas_sgemm");
  // (M, N, K) of the shapes qkv meets: the bundled model's projections (T 128, d 64) and growing squares
  const std::vector<std::array<int, 3>> sizes = {
      {128, 192, 64},  {128, 64, 64},   {128, 256, 64},  {64, 64, 64},    {96, 96, 96},   {128, 128, 128},
      {160, 160, 160}, {192, 192, 192}, {256, 256, 256}, {384, 384, 384}, {512, 512, 512}};
  report::Table t({"M", "N", "K", "MFLOP", "1 thread ms", "2 threads ms", "faster"});
  nlohmann::json out = nlohmann::json::array();
  const int all = gemm_threads();
  for (const auto& s : sizes) {
    const int M = s[0], N = s[1], K = s[2];
    const std::vector<float> A = random_vector(size_t(M) * K, 1), B = random_vector(size_t(K) * N, 2);
    std::vector<float> C(size_t(M) * N);
    double med[2];
    for (int i = 0; i < 2; i++) {
      set(i == 0 ? 1 : all);
      // many products per timed run: each is microseconds
      const int inner = std::max(1, int(2e8 / (2.0 * M * N * K)));
      med[i] = median(time_runs("threshold", repeats,
                                [&] {
                                  for (int r = 0; r < inner; r++)
                                    sg(kRowMajor, kNoTrans, kNoTrans, M, N, K, 1.0f, A.data(), K, B.data(), N,
                                       0.0f, C.data(), N);
                                })) /
               inner;
    }
    const double mflop = 2.0 * M * N * K * 1e-6;
    out.push_back({{"M", M},
                   {"N", N},
                   {"K", K},
                   {"mflop", mflop},
                   {"ms_1_thread", med[0]},
                   {"ms_all_threads", med[1]}});
    t.add({std::to_string(M), std::to_string(N), std::to_string(K), report::fmt(mflop, 2),
           report::fmt(med[0], 4), report::fmt(med[1], 4), med[0] <= med[1] ? "1" : std::to_string(all)});
  }
  set(all);
  if (json) {
    print_json({{"backend", gemm_backend()}, {"load_average", load_average()}, {"results", out}});
    return;
  }
  std::cout << gemm_backend() << ", median of " << repeats << ", load " << load_average() << "\n\n"
            << t.str();
}

// ---- all: every case in its own process (so each peak memory is its own), one peak measured first ----
nlohmann::json run_child(const std::vector<std::string>& args) {
  int fd[2];
  if (pipe(fd) != 0) data_error("bench all: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) data_error("bench all: fork failed");
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    std::vector<char*> argv;
    std::string self = "/proc/self/exe";
    argv.push_back(self.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(fd[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd[0], buf, sizeof buf)) > 0) text.append(buf, size_t(n));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    data_error("bench all: `qkv " + args[0] + " " + args[1] + "` failed");
  return nlohmann::json::parse(text);
}

void run_all(bool json, bool quick, const std::string& path) {
  std::cerr << "bench all: measuring the SGEMM peak...\n";
  const double peak = measure_peak_gflops();
  const std::string p = std::to_string(peak), fp = std::to_string(fma_peak_in_use());
  std::vector<std::vector<std::string>> cases;
  for (int T : quick ? std::vector<int>{256, 1024} : std::vector<int>{256, 1024, 4096, 8192})
    cases.push_back({"bench", "attention", "--T", std::to_string(T), "--json", "--peak", p, "--path", path});
  for (int T : quick ? std::vector<int>{256, 1024} : std::vector<int>{256, 1024, 4096})
    cases.push_back(
        {"bench", "attention", "--T", std::to_string(T), "--backward", "--json", "--peak", p, "--path", path});
  for (int T : {128, 1024})
    cases.push_back({"bench", "forward", "--T", std::to_string(T), "--json", "--peak", p, "--repeats",
                     T >= 1024 ? "5" : "7", "--path", path});
  cases.push_back({"bench", "train-step", "--json", "--peak", p, "--path", path});
  nlohmann::json results = nlohmann::json::array();
  report::Table t({"case", "T", "median ms", "min ms", "GFLOP/s", "% of peak", "peak MiB"});
  for (auto& c : cases) c.insert(c.end(), {"--fma-peak", fp});
  for (const auto& c : cases) {
    std::cerr << "bench all: qkv";
    for (const auto& a : c) std::cerr << " " << a;
    std::cerr << "\n";
    const nlohmann::json j = run_child(c);
    results.push_back(j);
    t.add({j["case"].get<std::string>(), std::to_string(j["T"].get<int>()),
           report::fmt(j["median_ms"].get<double>(), 2), report::fmt(j["min_ms"].get<double>(), 2),
           report::fmt(j["gflops"].get<double>(), 1),
           report::fmt(100 * j["fraction_of_peak"].get<double>(), 1),
           report::fmt(j["peak_memory_mib"].get<double>(), 1)});
  }
  if (json) {
    nlohmann::json j = {{"sgemm_peak_gflops", peak},
                        {"gemm", gemm_backend()},
                        {"attention_path", flash_path_name()},
                        {"load_average", load_average()},
                        {"results", results}};
    j.update(isa_fields(0));
    print_json(j);
    return;
  }
  std::cout << "SGEMM peak " << report::fmt(peak, 1) << " GFLOP/s (2048² through qkv::gemm), "
            << gemm_backend() << ", attention path " << flash_path_name() << ", load " << load_average()
            << "\n\n"
            << t.str();
}

// ---- peak: the machine's limits ----
// The FMA loop of every ISA asked for (default: each this CPU runs) on all GEMM threads, the triad's
// bandwidth, and the SGEMM peak as a fraction of the FMA peak of the ISA in use.
void run_peak(const std::string& isas, int repeats, double array_mib, double sgemm_peak, bool bandwidth, bool json) {
  std::vector<FlashPath> paths;
  if (isas.empty()) {
    for (FlashPath p : {FlashPath::Avx512, FlashPath::Avx2, FlashPath::Neon, FlashPath::Portable})
      if (flash_path_supported(p)) paths.push_back(p);
  } else {
    std::stringstream ss(isas);
    std::string name;
    while (std::getline(ss, name, ',')) {
      const FlashPath p = flash_path_from_name(name.c_str());
      if (p == FlashPath::Auto) usage_error("bench peak: --isa names avx512, avx2, neon or portable, not auto");
      if (!flash_path_supported(p)) usage_error("bench peak: this CPU cannot run the " + name + " FMA loop");
      paths.push_back(p);
    }
  }
  nlohmann::json fma = nlohmann::json::array();
  report::Table t({"ISA", "GFLOP/s (best)", "median", "lanes", "accumulators", "threads"});
  for (FlashPath p : paths) {
    std::cerr << "bench peak: FMA loop, " << flash_path_name(p) << "...\n";
    const FmaPeak f = measure_fma_peak(p, repeats);
    if (p == flash_path()) g_fma_peak = f.gflops;
    fma.push_back({{"isa", flash_path_name(p)}, {"gflops", f.gflops}, {"median_gflops", f.median_gflops}, {"lanes", f.lanes},
                   {"accumulators", f.accumulators}, {"threads", f.threads}});
    t.add({flash_path_name(p), report::fmt(f.gflops, 1), report::fmt(f.median_gflops, 1), std::to_string(f.lanes), std::to_string(f.accumulators),
           std::to_string(f.threads)});
  }
  nlohmann::json j = {{"fma", fma}, {"threads", gemm_threads()}, {"gemm", gemm_backend()}};
  if (bandwidth) {
    std::cerr << "bench peak: triad...\n";
    const Bandwidth b = measure_bandwidth(repeats, array_mib);
    j["bandwidth_gbps"] = b.gbps, j["bandwidth_best_gbps"] = b.best_gbps, j["triad_array_mib"] = b.array_mib;
  }
  if (sgemm_peak <= 0) sgemm_peak = measure_peak_gflops();
  j.update(isa_fields(sgemm_peak));
  j["sgemm_peak_gflops"] = sgemm_peak;
  j["load_average"] = load_average();
  if (json) {
    print_json(j);
    return;
  }
  std::cout << "FMA throughput (register-resident loop, every thread), " << repeats << " runs\n" << t.str();
  if (bandwidth)
    std::cout << "\nmemory bandwidth (triad a = b + s·c, 3 × " << report::fmt(j["triad_array_mib"].get<double>(), 0)
              << " MiB): " << report::fmt(j["bandwidth_gbps"].get<double>(), 1) << " GB/s median, "
              << report::fmt(j["bandwidth_best_gbps"].get<double>(), 1) << " GB/s best\n";
  std::cout << "\nSGEMM 2048³: " << report::fmt(sgemm_peak, 1) << " GFLOP/s = "
            << report::fmt(100 * j["fraction_of_fma_peak"].get<double>(), 1) << "% of the " << flash_path_name()
            << " FMA peak\n[" << gemm_backend() << ", ISA " << flash_path_name() << ", load " << load_average()
            << "]\n";
}

void register_bench_peak(CLI::App* bench) {
  struct Args {
    std::string isa;
    int repeats = 15;
    double array_mib = 0, peak = 0;
    bool json = false, no_bandwidth = false;
  };
  auto a = std::make_shared<Args>();
  auto* c = bench->add_subcommand(
      "peak", "The machine's limits: FMA throughput per ISA on every thread, memory bandwidth (triad), SGEMM");
  c->add_option("--isa", a->isa, "comma-separated ISAs to measure (default: every one this CPU runs)");
  c->add_option("--repeats", a->repeats, "runs of each measurement (default 15; the FMA peak is the best, the bandwidth the median and the best)")->check(CLI::Range(1, 1000));
  c->add_option("--array-mib", a->array_mib, "triad array size in MiB (default: 4 × L3, at least 128)")
      ->check(CLI::Range(1.0, 65536.0));
  c->add_flag("--no-bandwidth", a->no_bandwidth, "skip the triad");
  c->add_option("--peak", a->peak, "use this SGEMM peak (GFLOP/s) instead of measuring it")
      ->check(CLI::PositiveNumber);
  c->add_flag("--json", a->json, "one JSON object on stdout");
  c->callback([a] { run_peak(a->isa, a->repeats, a->array_mib, a->peak, !a->no_bandwidth, a->json); });
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Time attention, the forward, a training step, GEMMs and the machine's FMA and bandwidth peaks");
  bench->require_subcommand(1);
  struct Args {
    int T = 1024, H = 12, dh = 64, repeats = 0, steps = 5;
    bool backward = false, json = false, last_only = false, all_logits = false, quick = false, profile = false;
    double peak = 0;
    std::string backend = "blis", Ts = "128,1024", path = "auto", arch, model, dtype = "f32";
  };
  auto a = std::make_shared<Args>();
  auto common = [a](CLI::App* c) {
    c->add_flag("--json", a->json, "one JSON object on stdout");
    c->add_option("--peak", a->peak, "use this SGEMM peak (GFLOP/s) instead of measuring it");
    c->add_option("--fma-peak", g_fma_peak, "use this FMA peak (GFLOP/s) of the ISA in use instead of measuring it")
        ->check(CLI::PositiveNumber);
    c->add_option("--path", a->path,
                  "attention kernel path: auto (the best this CPU has), portable, avx2, avx512, neon");
  };
  // Forces the attention path (exit 2 naming the path when this CPU cannot run it).
  auto use_path = [a] { flash_force_path(flash_path_from_name(a->path.c_str())); };
  {
    auto* c = bench->add_subcommand("attention",
                                    "Fused causal attention, H × T × dh (GPT-2 small heads by default)");
    c->add_option("--T", a->T, "tokens")->check(CLI::Range(1, 1 << 16));
    c->add_option("--H", a->H, "heads")->check(CLI::Range(1, 1024));
    c->add_option("--dh", a->dh, "head dimension")->check(CLI::Range(1, 1024));
    c->add_flag("--backward", a->backward, "forward + backward");
    c->add_option("--repeats", a->repeats, "timed runs (default: 15 below T=4096, else 5)")
        ->check(CLI::Range(1, 1000));
    common(c);
    c->callback([a, use_path] {
      use_path();
      const int reps = a->repeats ? a->repeats : (a->T < 4096 ? 15 : 5);
      finish(bench_attention(a->T, a->H, a->dh, a->backward, reps), a->peak, a->json);
    });
  }
  {
    auto* c =
        bench->add_subcommand("forward", "The forward (run(), as qkv run does it) of GPT-2 small's shape with random weights made in memory");
    // The bound is the model's context, checked once it is known (GPT-2 in memory: 1024).
    c->add_option("--T", a->T, "tokens (<= the model's context; GPT-2 in memory: 1024)")->check(CLI::Range(1, 1 << 20));
    c->add_flag("--last-only", a->last_only, "GPT-2 in memory: logits of the last position only (what qkv run needs)");
    c->add_flag("--all-logits", a->all_logits, "--model/--arch: every position's logits (default: the last one's, as qkv run)");
    c->add_option("--repeats", a->repeats, "timed runs (default 5)")->check(CLI::Range(1, 1000));
    c->add_flag("--profile", a->profile, "also print the time of each op (layernorm, GEMMs, attention, ...)");
    c->add_option("--arch", a->arch, "time the family forward on a random checkpoint of this family instead "
                                     "(Llama shape: d 2048, 16 layers, 32/8 heads; written to a temp dir)");
    c->add_option("--model", a->model, "time the family forward on this checkpoint");
    c->add_option("--dtype", a->dtype, "with --arch: f32, f16 or bf16")->check(CLI::IsMember({"f32", "f16", "bf16"}));
    common(c);
    c->callback([a, use_path] {
      use_path();
      if (!a->arch.empty() || !a->model.empty()) {
        if (a->last_only && a->all_logits) usage_error("bench forward: --last-only and --all-logits contradict");
        profile::set_enabled(a->profile);
        finish(bench_family_forward(a->arch, a->model, a->dtype, a->T, !a->all_logits, a->repeats ? a->repeats : 5,
                                    a->profile),
               a->peak, a->json);
        return;
      }
      if (a->all_logits) usage_error("bench forward: --all-logits is for --model/--arch (GPT-2 in memory: --last-only)");
      profile::set_enabled(a->profile);
      finish(bench_forward(a->T, a->last_only, a->repeats ? a->repeats : 5, a->profile), a->peak, a->json);
    });
  }
  {
    auto* c =
        bench->add_subcommand("train-step", "A training step of the bundled model's shape, batch 32 × 128");
    c->add_option("--steps", a->steps, "timed steps after one warm-up")->check(CLI::Range(1, 1000));
    common(c);
    c->callback([a, use_path] {
      use_path();
      finish(bench_train_step(a->steps), a->peak, a->json);
    });
  }
  {
    auto* c = bench->add_subcommand("gemm", "SGEMM at GPT-2's shapes: BLIS (qkv::gemm) or OpenBLAS");
    c->add_option("--backend", a->backend,
                  "blis (BLIS_ARCH_TYPE=3 forces haswell), packed (qkv's own packed GEMM, the prefill's: "
                  "avx512 and avx2 paths) or openblas (OPENBLAS_CORETYPE)")
        ->check(CLI::IsMember({"blis", "packed", "openblas"}));
    c->add_option("--Ts", a->Ts, "token counts, e.g. 128,1024");
    c->add_option("--repeats", a->repeats, "timed runs (default 7)")->check(CLI::Range(1, 1000));
    c->add_flag("--json", a->json, "JSON output");
    c->add_option("--fma-peak", g_fma_peak, "use this FMA peak (GFLOP/s) of the ISA in use instead of measuring it")
        ->check(CLI::PositiveNumber);
    c->callback(
        [a] { run_gemm(a->backend, parse_ints("--Ts", a->Ts), a->repeats ? a->repeats : 7, a->json); });
  }
  {
    auto* c =
        bench->add_subcommand("gemm-threshold", "Small SGEMMs on 1 thread vs all: where threading pays");
    c->add_option("--repeats", a->repeats, "timed runs (default 7)")->check(CLI::Range(1, 1000));
    c->add_flag("--json", a->json, "JSON output");
    c->callback([a] { run_gemm_threshold(a->repeats ? a->repeats : 7, a->json); });
  }
  {
    auto* c = bench->add_subcommand("all", "Every case above, each in its own process, as one table");
    c->add_flag("--json", a->json, "JSON output");
    c->add_flag("--quick", a->quick, "attention only up to T=1024");
    c->add_option("--path", a->path, "attention kernel path for every case (auto, portable, avx2, avx512, neon)");
    c->callback([a, use_path] {
      use_path();
      run_all(a->json, a->quick, a->path);
    });
  }
  register_bench_peak(bench);
}

QKV_COMMAND(90, register_bench);

}  // namespace qkv::cli

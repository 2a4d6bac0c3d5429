// Sweeps, part 2: the plan every process agrees on, the chunks each one works through, the shards and
// chunk records it writes (each atomically, the record last), resumption, and the final reduction.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "qkv/analysis/sweep.hpp"
#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/half.hpp"
#include "qkv/io/mapped_file.hpp"
#include "qkv/io/npy.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace qkv::analysis::sweep {
namespace {

std::string chunk_name(int64_t c) {
  char b[32];
  std::snprintf(b, sizeof b, "c%06lld", static_cast<long long>(c));
  return b;
}

// A .npy (format 1.0, C order) with any element type, header padded to 64 bytes like io::write_npy.
void write_npy_raw(const std::string& path, const char* descr, const std::vector<int64_t>& shape,
                   const void* data, size_t bytes) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); i++) dict += (i ? ", " : "") + std::to_string(shape[i]);
  dict += shape.size() == 1 ? ",), }" : "), }";
  size_t total = 10 + dict.size() + 1;
  const size_t pad = (64 - total % 64) % 64;
  dict += std::string(pad, ' ') + "\n";
  std::string head = "\x93NUMPY";
  head += char(1), head += char(0);
  const uint16_t hl = uint16_t(dict.size());
  head += char(hl & 0xff), head += char(hl >> 8);
  head += dict;
  io::write_file_atomic(path, [&](std::FILE* f) {
    io::write_bytes(f, head.data(), head.size(), path);
    io::write_bytes(f, data, bytes, path);
  });
}

json plan_json(const Plan& p) {
  json shapes = json::object();
  for (const auto& [k, v] : p.save_shapes) shapes[k] = v;
  return {{"format", "qkv-sweep 2"},
          {"model", p.model_path},
          {"model_hash", p.model_hash},
          {"corpus", p.corpus},
          {"tokens_files", p.tokens_files},
          {"token_dtype", p.token_dtype},
          {"tokens_source", p.tokens_source},
          {"n_tokens", p.n_tokens},
          {"window", p.window},
          {"stride", p.stride},
          {"max_offset", p.max_offset},
          {"chunk_windows", p.chunk_windows},
          {"n_windows", p.n_windows},
          {"n_chunks", p.n_chunks},
          {"save", p.save},
          {"save_shapes", shapes},
          {"save_dtype", p.save_dtype}};
}

// Every rank runs fn's outcome through an all-reduce: if it threw on any rank, every rank throws (the
// failing rank its own error; the others one that names the rank count) instead of hanging later.
template <class F>
void agree(const Comm& comm, F&& fn) {
  int status = 0;
  std::string what;
  try {
    fn();
  } catch (const Error& e) {
    status = e.exit_code(), what = e.what();
  } catch (const std::exception& e) {
    status = 1, what = e.what();
  }
  const int any = comm.max(status);
  if (status) throw Error(ErrorKind(status), what);
  if (any) throw Error(ErrorKind(any), "another rank failed (its message is above)");
}

int64_t clamp_chunk(int64_t c, int64_t n_windows) {
  return std::max<int64_t>(1, std::min<int64_t>(c, n_windows));
}

// Step 1: everything that can be wrong with the arguments, before any file is written; fills the plan's
// window, stride, max_offset and saved hooks.
void check_options(const Model& model, const std::string& model_path, const std::optional<Tokenizer>& tok,
                   const Options& o, Plan& p) {
  const Arch& cfg = model.arch;
  const fs::path out(o.out);
  std::map<std::string, std::vector<int64_t>> shapes;
  if (o.corpus.empty() == o.tokens_files.empty())
    usage_error("give either --corpus FILE… or --tokens-file FILE…");
  if (!o.corpus.empty() && !tok)
    usage_error(model_path +
                " has no tokenizer beside it (tokenizer.json, or vocab.json + merges.txt); give "
                "--tokens-file instead");
  for (const auto& f : o.corpus.empty() ? o.tokens_files : o.corpus) io::MappedFile::open(f);  // readable?
  p.window = o.window ? o.window : cfg.n_ctx;
  if (p.window < 1) usage_error("--window must be >= 1");
  if (p.window > cfg.n_ctx)
    usage_error("--window " + std::to_string(p.window) + " is longer than the model's context (" +
                std::to_string(cfg.n_ctx) + " positions)");
  p.stride = o.stride ? o.stride : p.window;
  if (p.stride < 1) usage_error("--stride must be >= 1");
  if (o.max_offset < 0) usage_error("--max-offset must be >= 0");
  p.max_offset = std::min(o.max_offset, p.window - 1);
  if (!(o.shard_mb > 0)) usage_error("--shard-mb must be > 0");
  if (o.chunk_windows < 0) usage_error("--chunk-windows must be >= 1 (or 0: the default)");
  if (o.max_windows < 0) usage_error("--max-windows must be >= 1 (or 0: all)");
  shapes = hook_shapes(model, p.window);
  for (const auto& h : o.save) {
    if (!shapes.count(h)) {
      std::string names;
      for (const auto& [k, v] : shapes) names += (names.empty() ? "" : ", ") + k;
      usage_error("--save " + h + ": no such hook; this model records " + names);
    }
    if (std::find(p.save.begin(), p.save.end(), h) == p.save.end())
      p.save.push_back(h), p.save_shapes[h] = shapes[h];
  }
  p.save_dtype = o.save_bf16 ? "bfloat16" : "float32";
  const bool exists = fs::exists(out / "sweep.json");
  if (exists && !o.resume)
    usage_error(o.out +
                " already holds a sweep (sweep.json): pass --resume to finish it, or choose another --out");
  if (!exists && o.resume) usage_error("--resume: " + o.out + " holds no sweep (no sweep.json)");
}

// Step 2: the corpus opened, its windows and chunks counted.
void plan_chunks(const Options& o, const std::vector<std::string>& token_files, TokenDtype read_dtype,
                 Corpus& corpus, Plan& p) {
  corpus = Corpus::open(token_files, read_dtype);
  p.n_tokens = corpus.size();
  if (p.n_tokens < p.window)
    data_error("the corpus has " + std::to_string(p.n_tokens) + " tokens, fewer than one window (" +
               std::to_string(p.window) + ")");
  p.n_windows = (p.n_tokens - p.window) / p.stride + 1;
  if (o.max_windows > 0) p.n_windows = std::min(p.n_windows, o.max_windows);
  int64_t cw = o.chunk_windows;
  if (cw <= 0 && !p.save.empty()) {
    int64_t largest = 0;
    for (const auto& [h, s] : p.save_shapes) {
      int64_t n = 1;
      for (auto x : s) n *= x;
      largest = std::max(largest, n * (o.save_bf16 ? 2 : 4));
    }
    cw = int64_t(o.shard_mb * 1048576.0 / double(largest));
  }
  if (cw <= 0) cw = 64;
  p.chunk_windows = int(clamp_chunk(cw, p.n_windows));
  p.n_chunks = (p.n_windows + p.chunk_windows - 1) / p.chunk_windows;
}

// Step 3: the plan on disk; a resumed sweep must have the same one (any difference would change results).
void write_plan(const Options& o, const Comm& comm, const Plan& p, const json& pj) {
  const fs::path out(o.out);
  const std::string path = (out / "sweep.json").string();
  if (o.resume) {
    std::ifstream in(path);
    json old;
    try {
      old = json::parse(in);
    } catch (const std::exception& e) {
      data_error(path + ": not valid JSON (" + e.what() + ")");
    }
    // The arguments first (what the user changed), then what follows from them.
    std::vector<std::string> keys{"model_hash", "corpus",     "tokens_files",  "token_dtype", "window",
                                  "stride",     "max_offset", "chunk_windows", "save",        "save_dtype"};
    for (const auto& [k, v] : pj.items())
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    for (const auto& k : keys)
      if (const json& v = pj[k]; !old.contains(k) || old[k] != v)
        usage_error("--resume: " + k + " differs from the sweep in " + o.out + " (was " +
                    (old.contains(k) ? old[k].dump() : "absent") + ", now " + v.dump() + ")");
  }
  if (comm.rank != 0) return;
  std::error_code ec;
  fs::create_directories(out / "chunks", ec);
  if (ec) data_error(o.out + ": cannot create the output directory (" + ec.message() + ")");
  if (!o.resume) io::write_file_atomic(path, pj.dump(2) + "\n");
  for (const auto& h : p.save) fs::create_directories(out / "shards" / h);
  // Temporary files of a killed run (io::write_file_atomic's ".<name>.tmp.<pid>.<n>") are garbage now.
  for (const auto& dir : {out / "chunks", out / "shards"})
    if (fs::exists(dir))
      for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() && e.path().filename().string()[0] == '.' &&
            e.path().filename().string().find(".tmp.") != std::string::npos)
          fs::remove(e.path());
}

// A finished chunk: its shards, then its stats (its rows of the sum tree: chunk_rows), then the record
// that says the chunk is done.
void write_chunk(const Options& o, const Plan& p, const Layout& lay, int64_t c, int64_t w0, int64_t w1,
                 const std::vector<std::vector<double>>& recs,
                 const std::map<std::string, std::vector<float>>& buf32,
                 const std::map<std::string, std::vector<uint16_t>>& buf16) {
  const fs::path out(o.out);
  const std::vector<double> rows = chunk_rows(lay, w0, w1, p.n_windows, recs);
  json shards = json::object();
  for (const auto& h : p.save) {
    std::vector<int64_t> shape{w1 - w0};
    for (auto x : p.save_shapes.at(h)) shape.push_back(x);
    const std::string rel = "shards/" + h + "/" + chunk_name(c) + ".npy";
    if (o.save_bf16)
      write_npy_raw((out / rel).string(), "<u2", shape, buf16.at(h).data(),
                    buf16.at(h).size() / size_t(p.chunk_windows) * size_t(w1 - w0) * 2);
    else
      write_npy_raw((out / rel).string(), "<f4", shape, buf32.at(h).data(),
                    buf32.at(h).size() / size_t(p.chunk_windows) * size_t(w1 - w0) * 4);
    shards[h] = {{"file", rel}, {"shape", shape}, {"dtype", p.save_dtype}};
  }
  const std::string stats_rel = "chunks/" + chunk_name(c) + ".stats.npy";
  write_npy_raw((out / stats_rel).string(), "<f8", {int64_t(rows.size() / lay.size()), int64_t(lay.size())},
                rows.data(), rows.size() * 8);
  const json record = {{"chunk", c},
                       {"windows", {w0, w1}},
                       {"tokens", {w0 * p.stride, (w1 - 1) * p.stride + p.window}},
                       {"window_starts", {{"first", w0 * p.stride}, {"step", p.stride}}},
                       {"model_hash", p.model_hash},
                       {"stats", stats_rel},
                       {"shards", shards}};
  io::write_file_atomic((out / "chunks" / (chunk_name(c) + ".json")).string(), record.dump(2) + "\n");
}

// Step 4: this rank's chunks, each window's record computed alone and the chunk written when complete.
void run_chunks(const Model& model, const Options& o, const Plan& p, const Corpus& corpus,
                const std::vector<int64_t>& mine, const Layout& lay,
                const std::function<void(const Progress&)>& progress, const volatile int* stop,
                RunResult& res) {
  const Arch& cfg = model.arch;
  const std::set<std::string> hooks(p.save.begin(), p.save.end());
  Progress pr;
  for (int64_t c : mine)
    pr.windows_total += std::min<int64_t>(p.chunk_windows, p.n_windows - c * p.chunk_windows);
  const auto t0 = std::chrono::steady_clock::now();
  // Threads: a small model runs one window per thread (BLIS single-threaded inside, as the trainer
  // does: a 2-layer d = 128 forward is too small to share); a large one runs its windows one after
  // another with BLIS using every thread. Either way each window's record is computed alone and the
  // records are summed in window order, so the thread count changes no bit.
  const bool per_window = lm_forward_flops(cfg, p.window) < 1e9;
  const int nt = per_window ? std::max(1, omp_get_max_threads()) : 1;
  std::vector<std::unique_ptr<WindowRunner>> runners;
  for (int t = 0; t < nt; t++) runners.push_back(std::make_unique<WindowRunner>(model, hooks));
  std::vector<std::vector<int>> ids(static_cast<size_t>(nt), std::vector<int>(static_cast<size_t>(p.window)));
  std::vector<std::vector<double>> recs;
  std::map<std::string, std::vector<float>> buf32;
  std::map<std::string, std::vector<uint16_t>> buf16;
  for (const auto& h : p.save) {
    int64_t n = 1;
    for (auto x : p.save_shapes.at(h)) n *= x;
    if (o.save_bf16)
      buf16[h].resize(size_t(p.chunk_windows) * size_t(n));
    else
      buf32[h].resize(size_t(p.chunk_windows) * size_t(n));
  }
  for (int64_t c : mine) {
    const int64_t w0 = c * p.chunk_windows, w1 = std::min(p.n_windows, w0 + p.chunk_windows);
    recs.resize(size_t(w1 - w0));
    int err = 0;
    std::string err_what;
    auto window = [&](int64_t w, int tid) {
      if (err || (stop && *stop)) return;
      try {
        WindowRunner& runner = *runners[size_t(tid)];
        std::vector<int>& wid = ids[size_t(tid)];
        corpus.read(w * p.stride, p.window, cfg.vocab_size, wid.data());
        window_record(runner, wid, lay, recs[size_t(w - w0)]);
        for (const auto& h : p.save) {
          const Tensor& t = runner.hook(h);
          const size_t n = size_t(t.numel()), slot = size_t(w - w0);
          if (o.save_bf16) {
            uint16_t* b = buf16.at(h).data() + slot * n;
            for (size_t i = 0; i < n; i++) b[i] = io::float_to_bf16(t.data()[i]);
          } else {
            std::copy(t.data(), t.data() + n, buf32.at(h).data() + slot * n);
          }
        }
      } catch (const std::exception& e) {
#pragma omp critical(qkv_sweep_error)
        if (!err) {
          const auto* qe = dynamic_cast<const Error*>(&e);
          err = qe ? qe->exit_code() : 1, err_what = e.what();
        }
      }
#pragma omp critical(qkv_sweep_progress)
      {
        pr.windows_done++, pr.tokens_done += p.window;
        pr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (progress && (tid == 0 || pr.windows_done == pr.windows_total)) progress(pr);
      }
    };
    if (nt > 1) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
      for (int64_t w = w0; w < w1; w++) window(w, omp_get_thread_num());
    } else {  // outside any OpenMP region, even an inactive one: BLIS threads only at level 0 (gemm.cpp)
      for (int64_t w = w0; w < w1; w++) window(w, 0);
    }
    if (err) throw Error(ErrorKind(err), err_what);
    if (stop && *stop) {
      res.stopped = true;
      break;
    }
    write_chunk(o, p, lay, c, w0, w1, recs, buf32, buf16);
    res.chunks_done_here++;
  }
}

// Step 5 (rank 0): every chunk must be done now; the sum tree's top level, in chunk order; the manifest.
void write_manifest(const Options& o, const Plan& p, const Layout& lay, RunResult& res) {
  const fs::path out(o.out);
  for (int64_t c = 0; c < p.n_chunks; c++)
    if (!fs::exists(out / "chunks" / (chunk_name(c) + ".json")))
      data_error(o.out + ": chunk " + std::to_string(c) + " is not done although every rank finished");
  res.stats = finalize(lay, reduce_chunks(o.out, p, lay));
  json hooks_j = json::object();
  for (const auto& h : p.save) {
    json list = json::array();
    for (int64_t c = 0; c < p.n_chunks; c++) {
      std::ifstream in(out / "chunks" / (chunk_name(c) + ".json"));
      const json r = json::parse(in);
      list.push_back({{"file", r["shards"][h]["file"]},
                      {"shape", r["shards"][h]["shape"]},
                      {"windows", r["windows"]},
                      {"tokens", r["tokens"]}});
    }
    hooks_j[h] = {{"window_shape", p.save_shapes.at(h)}, {"shards", list}};
  }
  const json manifest = {
      {"format", "qkv-sweep-store 1"},
      {"model", p.model_path},
      {"model_hash", p.model_hash},
      {"window", p.window},
      {"stride", p.stride},
      {"n_windows", p.n_windows},
      {"n_tokens", p.n_tokens},
      {"tokens_source", p.tokens_source},
      {"dtype", p.save_dtype},
      {"storage", o.save_bf16 ? "<u2: the upper 16 bits of each float32 (bfloat16), "
                                "rounded to nearest even"
                              : "<f4"},
      {"window_start", "window w covers tokens [w * stride, w * stride + window) of the stream"},
      {"hooks", hooks_j}};
  io::write_file_atomic((out / "manifest.json").string(), manifest.dump(2) + "\n");
}

}  // namespace

std::vector<double> reduce_chunks(const std::string& out, const Plan& plan, const Layout& layout) {
  BlockReducer sum(layout, plan.n_windows);
  for (int64_t c = 0; c < plan.n_chunks; c++) {
    const std::string path = (fs::path(out) / "chunks" / (chunk_name(c) + ".stats.npy")).string();
    const io::NpyArray a = io::read_npy(path);
    const int64_t w0 = c * plan.chunk_windows, w1 = std::min(plan.n_windows, w0 + plan.chunk_windows);
    sum.add(w0, w1, a.data.data(), a.data.size(), path);
  }
  return sum.total();
}

RunResult run_sweep(const Model& model, const std::string& model_path, const std::optional<Tokenizer>& tok,
                    const Options& o, const Comm& comm, const std::function<void(const Progress&)>& progress,
                    const volatile int* stop) {
  RunResult res;
  Plan& p = res.plan;
  const Arch& cfg = model.arch;
  const fs::path out(o.out);

  // 1. Everything that can be wrong with the arguments, on every rank, before any file is written.
  agree(comm, [&] { check_options(model, model_path, tok, o, p); });
  p.model_path = model_path;
  p.model_hash = model_hash(model);
  p.corpus = o.corpus, p.tokens_files = o.tokens_files;
  p.token_dtype = dtype_name(o.token_dtype);
  const TokenDtype cache_dtype = cfg.vocab_size <= 65536 ? TokenDtype::U16 : TokenDtype::U32;
  std::vector<std::string> token_files = o.tokens_files;
  TokenDtype read_dtype = o.token_dtype;
  if (!o.corpus.empty()) {
    token_files = {(out / "corpus.tokens").string()};
    read_dtype = cache_dtype;
    p.token_dtype = dtype_name(cache_dtype);
  }
  p.tokens_source = token_files.size() == 1 ? token_files[0] : "";

  // 2. Rank 0 makes the directory and, for text, the token cache (reused on --resume).
  agree(comm, [&] {
    if (comm.rank != 0 || o.corpus.empty()) return;
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) data_error(o.out + ": cannot create the output directory (" + ec.message() + ")");
    if (!(o.resume && fs::exists(out / "corpus.tokens")))
      tokenize_files(o.corpus, *tok, cache_dtype, token_files[0]);
  });

  Corpus corpus;
  agree(comm, [&] { plan_chunks(o, token_files, read_dtype, corpus, p); });

  // 3. The plan on disk; a resumed sweep must have the same one.
  agree(comm, [&] { write_plan(o, comm, p, plan_json(p)); });

  // 4. What is done (a chunk is done when its record exists: it is written after its shards and
  // stats), and what is mine: the chunks still to do, dealt round-robin over the ranks.
  std::vector<int64_t> mine;
  int64_t todo = 0;
  for (int64_t c = 0; c < p.n_chunks; c++) {
    if (fs::exists(out / "chunks" / (chunk_name(c) + ".json"))) {
      res.chunks_skipped++;
      continue;
    }
    if (todo++ % comm.size == comm.rank) mine.push_back(c);
  }
  comm.barrier();  // every rank has listed the done chunks before any rank adds one

  const Layout lay{cfg.n_layer, cfg.H, p.max_offset};
  // Every rank works through its chunks; a failure on any rank stops them all (agree, above).
  agree(comm, [&] { run_chunks(model, o, p, corpus, mine, lay, progress, stop, res); });
  const int any_stopped = comm.max(res.stopped ? 1 : 0);
  if (any_stopped || comm.rank != 0) {
    res.stopped = any_stopped;
    return res;
  }
  // 5. Rank 0: the statistics summed in chunk order, and the manifest.
  write_manifest(o, p, lay, res);
  res.finished = true;
  return res;
}

}  // namespace qkv::analysis::sweep

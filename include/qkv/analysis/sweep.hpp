// Corpus-scale sweeps (docs/sweep.md): per-head statistics accumulated over windows of a token stream,
// and activation stores (sharded .npy) of chosen hooks, split into chunks of windows that any number
// of processes (MPI ranks) work through independently and that a killed run resumes.
//
//   corpus files ──tokens (mapped, never read whole)──▶ windows [start, start + T), start = w · stride
//   windows ──grouped──▶ chunks of `chunk_windows` (the unit of work, of resumption and of the shards)
//   per window: WindowRunner::run ──▶ per layer, inside its hooks: pattern A [H, T, T] ──▶ detector sums,
//   z ──▶ DLA norms; the saved hooks ──▶ a partial record of doubles + one row per hook in the chunk's shard
//   per chunk: its rows of the sum tree (sweep_sum.cpp) ──▶ chunks/cNNNNNN.stats.npy (+ cNNNNNN.json last)
//   finish: the blocks' sums in block order ──▶ stats.json / stats.csv (finalize)
//
// The sum tree (blocks of kSumBlock windows, each summed in window order, then the blocks in order)
// depends only on the windows, never on the chunk size or on which process summed what, so the
// statistics are bit-for-bit the same for any chunking, any number of ranks and across kill + resume.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "qkv/lm.hpp"
#include "qkv/tokenizer.hpp"

namespace qkv::analysis::sweep {

// ---- the corpus: one or more token files read as one stream ------------------------------------

enum class TokenDtype { U16, U32 };
const char* dtype_name(TokenDtype t);  // "uint16" / "uint32"

// Token files: raw little-endian uint16/uint32 ids (nanoGPT's train.bin) or llm.c's format (a
// 256 × int32 header with magic 20240520, version 1 = uint16 ids, 2 = uint32, then the ids; its dtype
// wins over `dtype`). Files are memory-mapped and concatenated in the given order.
class Corpus {
 public:
  // Throws qkv::Error (Data) naming the file when one cannot be opened, is empty, has a size that is
  // not a whole number of ids, or holds an id >= vocab (checked lazily per window: see read).
  static Corpus open(const std::vector<std::string>& files, TokenDtype dtype);
  int64_t size() const { return total_; }
  // out[0 .. n) = ids [start, start + n) of the stream; throws qkv::Error (Data) naming the file and
  // offset of an id >= vocab.
  void read(int64_t start, int n, int vocab, int* out) const;
  struct File;

 private:
  std::vector<std::shared_ptr<File>> files_;
  int64_t total_ = 0;
};

// Tokenizes text files (in this order, concatenated) into a raw token file at out_path, streaming:
// each file is read in blocks cut after a newline followed by a non-space byte (a boundary GPT-2's
// pre-tokenizer never merges across), so the ids equal tokenizing the whole concatenation at once
// per file. Written atomically. Returns the number of tokens.
int64_t tokenize_files(const std::vector<std::string>& files, const Tokenizer& tok, TokenDtype dtype,
                       const std::string& out_path);
// The same with the block size (bytes) chosen, for the tests.
int64_t tokenize_files(const std::vector<std::string>& files, const Tokenizer& tok, TokenDtype dtype,
                       const std::string& out_path, size_t block);

// ---- the model side: the one place that knows the model ----------------------------------------

struct Layout;

// Runs one window of any family (lm.hpp's hooked forward, every layer's attention materialised as
// `qkv dump` runs it) and turns it into the window's statistics record as the layers go by: each
// layer's pattern [H, T, T] is read inside its hook and never kept, so a runner holds O(T·d + H·T²)
// for ONE layer, not all of them. Also keeps the hooks to save, and the DLA norms of the last run.
class WindowRunner {
 public:
  // hooks: TransformerLens names as `qkv dump` writes them (validated by the caller with hook_shapes).
  WindowRunner(const Model& model, const std::set<std::string>& hooks);
  ~WindowRunner();
  WindowRunner(const WindowRunner&) = delete;
  WindowRunner& operator=(const WindowRunner&) = delete;

  int n_layer() const;
  int n_head() const;  // query heads
  // Runs ids and fills `out` (resized to layout.size()) with the window's record (see Layout).
  void run(const std::vector<int>& ids, const Layout& layout, std::vector<double>& out);
  // dla[i] = the L2 norm over the vocabulary of head h of layer l's direct contribution to the logits
  // at position i of the last run, every norm's scale frozen at the position's own (TransformerLens's
  // apply_ln_to_stack): rstd_f[i] · (Gemma 2: rstd_post[i] ·) ‖(P (z_h[i] · W_O^h)) ⊙ γ_f · W_Uᵀ‖₂,
  // biases excluded, before Gemma 2's final soft-cap; P removes the mean over d for LayerNorm models
  // (RMSNorm does not centre: P = I); γ_f is the final norm's weight (Gemma: 1 + w); Gemma 2's
  // post-attention norm is frozen the same way (rstd_post of the whole attention output, γ_post).
  // Computed as the scales times sqrt(z M_h zᵀ) with M_h [dh, dh] built once in double. T values.
  void dla_norms(int l, int h, double* dla) const;
  const Tensor& hook(const std::string& name) const;  // a saved activation of the last run, dump's shape

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Every hook name the forward records for this model, with its shape for a window of T tokens.
std::map<std::string, std::vector<int64_t>> hook_shapes(const Model& model, int T);

// 64-bit FNV-1a over the architecture (Arch::to_json) and every tensor's name, type, shape and bytes,
// as 16 hex digits.
std::string model_hash(const Model& model);

// ---- statistics ------------------------------------------------------------------------------------

// The layout of one partial record (doubles; sums over windows):
//   [0] windows  [1] query rows  [2] query rows i >= 1  [3 + k] pairs (i, i − k), k = 0 .. K
//   then per head (layer-major), kPerHead + K + 1 values: kPrev, kDup, kInd (TransformerLens detector
//   scores of each window), kEntropy (Σ rows i >= 1 of −Σ_j A log A, nats), kSink (Σ rows i >= 1 of
//   A[i, 0]), kDla (Σ rows of the DLA norm), then Σ_i A[i, i − k] for k = 0 .. K.
struct Layout {
  int L = 0, H = 0, K = 0;
  enum { kPrev = 0, kDup, kInd, kEntropy, kSink, kDla, kPerHead };
  int global() const { return 3 + K + 1; }
  int per_head() const { return kPerHead + K + 1; }
  size_t size() const { return size_t(global()) + size_t(L) * H * per_head(); }
  size_t head(int l, int h) const { return size_t(global()) + (size_t(l) * H + h) * per_head(); }
};

// One window's record: r.run(ids, layout, out). The detector scores use sparse forms of the targets in
// head_detector.hpp, in the dense detector's summation order (tests compare them with detector_score).
void window_record(WindowRunner& r, const std::vector<int>& ids, const Layout& layout, std::vector<double>& out);

struct HeadStat {
  int layer = 0, head = 0;
  double previous_token = 0, duplicate_token = 0, induction = 0;  // means over windows of the detector scores
  double entropy = 0;                                             // mean over query rows i >= 1, nats
  double sink = 0;                                                // mean over query rows i >= 1 of A[i, 0]
  double dla = 0;                                                 // mean over query rows of the DLA norm
  std::vector<double> offset;  // offset[k] = mean over rows i >= k of A[i, i − k]
};
struct Stats {
  int64_t windows = 0, rows = 0;
  std::vector<HeadStat> heads;  // layer-major
};
Stats finalize(const Layout& layout, const std::vector<double>& total);

// ---- the sweep: plan, chunks, resume ---------------------------------------------------------------

struct Options {
  std::string out;
  std::vector<std::string> corpus;        // text files (tokenized into out/corpus.tokens)
  std::vector<std::string> tokens_files;  // or token files
  TokenDtype token_dtype = TokenDtype::U16;
  int window = 0;  // 0: the model's context
  int stride = 0;  // 0: the window
  int max_offset = 32;
  int chunk_windows = 0;          // 0: from shard_mb when saving, else 64
  std::vector<std::string> save;  // hooks
  bool save_bf16 = false;
  double shard_mb = 256;
  bool resume = false;
  int64_t max_windows = 0;  // 0: all
};

// What the processes agree on before any work starts (out/sweep.json): everything the results depend on.
struct Plan {
  std::string model_path, model_hash;
  int window = 0, stride = 0, max_offset = 0, chunk_windows = 0;
  int64_t n_tokens = 0, n_windows = 0, n_chunks = 0;
  std::vector<std::string> corpus, tokens_files;
  std::string token_dtype;
  std::vector<std::string> save;
  std::map<std::string, std::vector<int64_t>> save_shapes;  // per window
  std::string save_dtype = "float32";
  std::string tokens_source;  // the token files actually read
};

// The collective operations a sweep needs; single-process defaults. With MPI (tools/qkv/cmd_sweep.cpp):
// a barrier and an all-reduce (max) of an int, used to agree that every rank is still fine.
struct Comm {
  int rank = 0, size = 1;
  std::function<void()> barrier = [] {};
  std::function<int(int)> max = [](int v) { return v; };
};

struct Progress {
  int64_t windows_done = 0, windows_total = 0;  // this rank's
  int64_t tokens_done = 0;
  double seconds = 0;
};

// Runs (or resumes) the sweep in opts.out as rank comm.rank of comm.size. Errors before work starts
// are qkv::Error on every rank alike, before any file is written. `stop` is polled between windows
// (SIGTERM): the chunk in progress is dropped and every rank returns with stopped set. When every chunk
// is done, rank 0 sums them (reduce_chunks), writes manifest.json and returns the statistics with
// finished set; the caller renders stats.json / stats.csv / the heatmaps.
struct RunResult {
  Plan plan;
  int64_t chunks_done_here = 0, chunks_skipped = 0;
  bool stopped = false;
  bool finished = false;  // rank 0: every chunk done and the outputs written
  Stats stats;
};
RunResult run_sweep(const Model& model, const std::string& model_path, const std::optional<Tokenizer>& tok,
                    const Options& opts, const Comm& comm,
                    const std::function<void(const Progress&)>& progress, const volatile int* stop);

// ---- the sum tree (sweep_sum.cpp) ------------------------------------------------------------------

// Windows per block of the sum tree: a constant, so the sums are a function of the windows only.
constexpr int64_t kSumBlock = 64;
// One row of a chunk's stats: windows [first, first + count) — a whole block (its sum) or one window of
// a block the chunk shares with a neighbour (count 1, its record).
struct SumItem {
  int64_t first = 0, count = 0;
};
// The rows chunk [w0, w1) of a sweep of n_windows stores, in window order.
std::vector<SumItem> sum_items(int64_t w0, int64_t w1, int64_t n_windows);
// Those rows' values, [rows, layout.size()] flattened, from the chunk's window records (recs[w − w0]).
std::vector<double> chunk_rows(const Layout& layout, int64_t w0, int64_t w1, int64_t n_windows,
                               const std::vector<std::vector<double>>& recs);
// Adds the chunks' rows in chunk order (each chunk starting where the last ended) into the total: whole
// blocks' sums in block order, shared blocks finished window by window. `where` names the chunk in errors.
class BlockReducer {
 public:
  BlockReducer(const Layout& layout, int64_t n_windows);
  void add(int64_t w0, int64_t w1, const double* rows, size_t n_values, const std::string& where);
  const std::vector<double>& total() const;  // throws unless every window was added

 private:
  int64_t n_windows_ = 0, next_ = 0;
  std::vector<double> total_, block_;
};

// Reads every chunk record of a finished plan, reduces them (BlockReducer), returns the total record.
std::vector<double> reduce_chunks(const std::string& out, const Plan& plan, const Layout& layout);

}  // namespace qkv::analysis::sweep

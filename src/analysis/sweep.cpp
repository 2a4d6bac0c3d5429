// Sweeps, part 1: the corpus as one stream of token ids, the model adapter (WindowRunner) and one
// window's statistics record. The driver (plan, chunks, resume) is in sweep_run.cpp.
#include "qkv/analysis/sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "qkv/error.hpp"
#include "qkv/gemm.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/mapped_file.hpp"

namespace qkv::analysis::sweep {

const char* dtype_name(TokenDtype t) {
  return t == TokenDtype::U16 ? "uint16" : "uint32";
}

// ---- corpus ----------------------------------------------------------------------------------------

struct Corpus::File {
  io::MappedFile map;
  size_t header = 0;  // bytes before the first id
  int width = 2;      // bytes per id
  int64_t count = 0;
  int64_t first = 0;  // stream index of its first id
};

Corpus Corpus::open(const std::vector<std::string>& files, TokenDtype dtype) {
  if (files.empty()) usage_error("no token files given");
  Corpus c;
  for (const auto& path : files) {
    auto f = std::make_shared<File>();
    f->map = io::MappedFile::open(path);
    f->width = dtype == TokenDtype::U16 ? 2 : 4;
    const size_t n = f->map.size();
    if (n >= 1024) {
      int32_t head[3];
      std::memcpy(head, f->map.data(), sizeof head);
      if (head[0] == 20240520) {  // llm.c: magic, version (1: uint16, 2: uint32), number of tokens
        if (head[1] != 1 && head[1] != 2)
          data_error(path + ": llm.c token file version " + std::to_string(head[1]) + " (expected 1 or 2)");
        f->width = head[1] == 1 ? 2 : 4;
        f->header = 1024;
        if (head[2] < 0 || uint64_t(head[2]) * uint64_t(f->width) != n - 1024)
          data_error(path + ": llm.c header says " + std::to_string(head[2]) + " tokens but the file holds " +
                     std::to_string(n - 1024) + " bytes of ids");
      }
    }
    if (n == f->header) data_error(path + ": holds no tokens");
    if ((n - f->header) % size_t(f->width))
      data_error(path + ": " + std::to_string(n - f->header) + " bytes is not a whole number of " +
                 std::to_string(f->width * 8) + "-bit ids (--token-dtype?)");
    f->count = int64_t((n - f->header) / size_t(f->width));
    f->first = c.total_;
    c.total_ += f->count;
    c.files_.push_back(f);
  }
  return c;
}

void Corpus::read(int64_t start, int n, int vocab, int* out) const {
  if (start < 0 || n < 0 || start + n > total_) usage_error("Corpus::read: range outside the stream");
  size_t fi = 0;
  while (fi + 1 < files_.size() && files_[fi + 1]->first <= start) fi++;
  for (int k = 0; k < n; k++) {
    const int64_t s = start + k;
    while (s >= files_[fi]->first + files_[fi]->count) fi++;
    const File& f = *files_[fi];
    const unsigned char* p = f.map.data() + f.header + size_t(s - f.first) * size_t(f.width);
    uint32_t id = 0;
    if (f.width == 2) {
      uint16_t v;
      std::memcpy(&v, p, 2);
      id = v;
    } else {
      std::memcpy(&id, p, 4);
    }
    if (id >= uint32_t(vocab))
      data_error(f.map.path() + ": token " + std::to_string(s - f.first) + " is id " + std::to_string(id) +
                 ", outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
    out[k] = int(id);
  }
}

namespace {
bool ascii_graphic(unsigned char c) {
  return c >= 0x21 && c <= 0x7e;
}
}  // namespace

int64_t tokenize_files(const std::vector<std::string>& files, const Tokenizer& tok, TokenDtype dtype,
                       const std::string& out_path, size_t block) {
  int64_t total = 0;
  const uint32_t limit = dtype == TokenDtype::U16 ? 65535u : 0xffffffffu;
  io::write_file_atomic(out_path, [&](std::FILE* out) {
    std::vector<unsigned char> buf;
    for (const auto& path : files) {
      const io::MappedFile f = io::MappedFile::open(path);
      const char* p = reinterpret_cast<const char*>(f.data());
      const size_t n = f.size();
      size_t pos = 0;
      while (pos < n) {
        // Cut after "\n" with an ASCII graphic byte on both sides: GPT-2's pre-tokenizer ends a word
        // there whatever follows, so pieces encode to the same ids as the whole file.
        size_t end = std::min(n, pos + block);
        if (end < n) {
          size_t cut = end;
          while (cut > pos + 1 && !(p[cut - 1] == '\n' && ascii_graphic(p[cut - 2]) && ascii_graphic(p[cut])))
            cut--;
          if (cut > pos + 1) {
            end = cut;
          } else {  // no boundary in this block: extend to the next one
            cut = end;
            while (cut < n && !(p[cut - 1] == '\n' && ascii_graphic(p[cut - 2]) && ascii_graphic(p[cut])))
              cut++;
            end = cut;
          }
        }
        const std::vector<int> ids = tok.encode(std::string_view(p + pos, end - pos));
        buf.resize(ids.size() * (dtype == TokenDtype::U16 ? 2 : 4));
        for (size_t i = 0; i < ids.size(); i++) {
          if (uint32_t(ids[i]) > limit)
            usage_error("--token-dtype uint16 cannot hold id " + std::to_string(ids[i]) + " of " + path);
          if (dtype == TokenDtype::U16) {
            const uint16_t v = uint16_t(ids[i]);
            std::memcpy(buf.data() + 2 * i, &v, 2);
          } else {
            const uint32_t v = uint32_t(ids[i]);
            std::memcpy(buf.data() + 4 * i, &v, 4);
          }
        }
        io::write_bytes(out, buf.data(), buf.size(), out_path);
        total += int64_t(ids.size());
        pos = end;
      }
    }
  });
  return total;
}

int64_t tokenize_files(const std::vector<std::string>& files, const Tokenizer& tok, TokenDtype dtype,
                       const std::string& out_path) {
  return tokenize_files(files, tok, dtype, out_path, size_t(1) << 20);
}

// ---- the model adapter -----------------------------------------------------------------------------

struct WindowRunner::Impl {
  const GPT2& model;
  std::set<std::string> hooks;
  Activations acts;
  Trace trace;
  bool tracing = false;
  std::vector<std::vector<double>> M;  // [L·H][dh·dh]
  explicit Impl(const GPT2& m) : model(m) {}
};

namespace {

// E = P Γ (W_U W_Uᵀ) Γ P [d, d], W_U = wteᵀ; Γ = diag(ln_f.weight); P = I − 11ᵀ/d.
std::vector<double> unembed_gram(const GPT2& m) {
  const int d = m.config.n_embd, V = m.config.vocab_size;
  std::vector<double> G(size_t(d) * d, 0.0), rows;
  const float* wte = m.params.data() + m.wte;
  const int block = 2048;
  for (int v0 = 0; v0 < V; v0 += block) {
    const int nb = std::min(block, V - v0);
    rows.assign(wte + size_t(v0) * d, wte + size_t(v0 + nb) * d);
    // G += rowsᵀ rows   (torch: G += W[v0:v0+nb].T @ W[v0:v0+nb])
    gemm<double>(true, false, d, d, nb, 1.0, rows.data(), d, rows.data(), d, 1.0, G.data(), d);
  }
  const float* g = m.params.data() + m.lnf_w;
  for (int a = 0; a < d; a++)
    for (int b = 0; b < d; b++) G[size_t(a) * d + b] *= double(g[a]) * double(g[b]);
  std::vector<double> rmean(size_t(d), 0.0), cmean(size_t(d), 0.0);
  double all = 0;
  for (int a = 0; a < d; a++)
    for (int b = 0; b < d; b++) {
      const double x = G[size_t(a) * d + b];
      rmean[size_t(a)] += x / d, cmean[size_t(b)] += x / d, all += x / (double(d) * d);
    }
  for (int a = 0; a < d; a++)
    for (int b = 0; b < d; b++) G[size_t(a) * d + b] += all - rmean[size_t(a)] - cmean[size_t(b)];
  return G;
}

}  // namespace

WindowRunner::WindowRunner(const GPT2& model, const std::set<std::string>& hooks)
    : impl_(std::make_unique<Impl>(model)) {
  impl_->hooks = hooks;
  impl_->tracing = !hooks.empty();
  impl_->trace.want_logits = hooks.count("logits") > 0;
  for (const auto& h : hooks)
    if (h.rfind("blocks.", 0) == 0) impl_->trace.layers.insert(std::stoi(h.substr(7)));
  if (impl_->tracing && impl_->trace.layers.empty())
    impl_->trace.layers.insert(-1);  // no block, only ln_final/logits

  const int L = model.config.n_layer, H = model.config.n_head, d = model.config.n_embd,
            dh = model.config.head_dim();
  const std::vector<double> E = unembed_gram(model);
  impl_->M.resize(size_t(L) * H);
  std::vector<double> Wo(size_t(dh) * d), B(size_t(dh) * d);
  for (int l = 0; l < L; l++) {
    const float* W_O = model.attention(l, model.params.data()).W_O;  // [d, d], rows h·dh.. are head h
    for (int h = 0; h < H; h++) {
      Wo.assign(W_O + size_t(h) * dh * d, W_O + size_t(h + 1) * dh * d);
      // M_h = W_O^h E W_O^hᵀ [dh, dh]
      gemm<double>(false, false, dh, d, d, 1.0, Wo.data(), d, E.data(), d, 0.0, B.data(), d);
      auto& M = impl_->M[size_t(l) * H + h];
      M.assign(size_t(dh) * dh, 0.0);
      gemm<double>(false, true, dh, dh, d, 1.0, B.data(), d, Wo.data(), d, 0.0, M.data(), dh);
    }
  }
}

WindowRunner::~WindowRunner() = default;
int WindowRunner::n_layer() const {
  return impl_->model.config.n_layer;
}
int WindowRunner::n_head() const {
  return impl_->model.config.n_head;
}

void WindowRunner::run(const std::vector<int>& ids) {
  forward(impl_->model, ids, impl_->acts, impl_->tracing ? &impl_->trace : nullptr);
}

const float* WindowRunner::pattern(int l) const {
  return impl_->acts.attn[size_t(l)].A.data();
}

void WindowRunner::dla_norms(int l, int h, double* dla) const {
  const int T = impl_->acts.T, dh = impl_->model.config.head_dim(), H = impl_->model.config.n_head;
  const std::vector<double>& M = impl_->M[size_t(l) * H + h];
  const float* z = impl_->acts.attn[size_t(l)].z.data() + size_t(h) * T * dh;  // [H, T, dh]
  for (int i = 0; i < T; i++) {
    const float* zi = z + size_t(i) * dh;
    double q = 0;
    for (int a = 0; a < dh; a++) {
      double row = 0;
      for (int b = 0; b < dh; b++) row += M[size_t(a) * dh + b] * double(zi[b]);
      q += double(zi[a]) * row;
    }
    dla[i] = double(impl_->acts.lnf_rstd[size_t(i)]) * std::sqrt(std::max(q, 0.0));
  }
}

const Tensor& WindowRunner::hook(const std::string& name) const {
  auto it = impl_->trace.acts.find(name);
  if (it == impl_->trace.acts.end()) usage_error("hook " + name + " was not recorded");
  return it->second;
}

std::map<std::string, std::vector<int64_t>> hook_shapes(const GPT2& model, int T) {
  // Trace T = 1 and T = 2 tokens: the dimensions that change are the ones that are T.
  Activations acts;
  Trace t1, t2;
  forward(model, std::vector<int>(1, 0), acts, &t1);
  forward(model, std::vector<int>(2, 0), acts, &t2);
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [name, a] : t1.acts) {
    std::vector<int64_t> s = a.shape();
    const auto& s2 = t2.acts.at(name).shape();
    for (size_t i = 0; i < s.size(); i++)
      if (s2[i] != s[i]) s[i] = T;
    out[name] = s;
  }
  return out;
}

std::string model_hash(const GPT2& m) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  };
  const GPT2Config& c = m.config;
  const int64_t cfg[] = {c.vocab_size, c.n_positions, c.n_embd, c.n_layer, c.n_head, c.n_inner, c.attn_only};
  mix(cfg, sizeof cfg);
  mix(&c.layer_norm_epsilon, sizeof c.layer_norm_epsilon);
  mix(m.params.data(), m.params.size() * sizeof(float));
  std::ostringstream s;
  s << std::hex << std::setw(16) << std::setfill('0') << h;
  return s.str();
}

// ---- one window's record ---------------------------------------------------------------------------

void window_record(const WindowRunner& r, const std::vector<int>& ids, const Layout& lay,
                   std::vector<double>& out) {
  const int T = int(ids.size()), K = lay.K, L = lay.L, H = lay.H;
  out.assign(lay.size(), 0.0);
  out[0] = 1, out[1] = T, out[2] = T - 1;
  for (int k = 0; k <= K; k++) out[size_t(3 + k)] = std::max(0, T - k);
  // Threads only where there is work enough to pay for waking them (GPT-2 small at T = 1024: 150 M
  // pattern entries per window; the bundled model at T = 128: 131 k, faster on one thread).
  const bool threads = double(T) * T * L * H >= 4e6;
#pragma omp parallel for schedule(dynamic, 1) if (threads)
  for (int lh = 0; lh < L * H; lh++) {
    const int l = lh / H, h = lh % H;
    const float* A = r.pattern(l) + size_t(h) * T * T;
    double* o = out.data() + lay.head(l, h);
    // The detector's sums, in its order (row-major over the full T × T, whose masked part is exact
    // zeros and changes no sum): hit += A ⊙ target, mass += A.
    double mass = 0, prev = 0, dup = 0, ind = 0, ent = 0, sink = 0;
    for (int i = 0; i < T; i++) {
      const float* row = A + size_t(i) * T;
      double row_ent = 0;
      for (int j = 0; j <= i; j++) {
        const double a = row[j];
        mass += a;
        if (j == i - 1) prev += a;
        if (j < i && ids[size_t(j)] == ids[size_t(i)]) dup += a;
        if (j >= 1 && ids[size_t(j) - 1] == ids[size_t(i)]) ind += a;  // j − 1 <= i − 1 holds
        if (a > 0) row_ent -= a * std::log(a);
        if (i - j <= K) o[Layout::kPerHead + (i - j)] += a;
      }
      if (i >= 1) ent += row_ent, sink += row[0];
    }
    o[Layout::kPrev] = mass > 0 ? prev / mass : 0.0;
    o[Layout::kDup] = mass > 0 ? dup / mass : 0.0;
    o[Layout::kInd] = mass > 0 ? ind / mass : 0.0;
    o[Layout::kEntropy] = ent;
    o[Layout::kSink] = sink;
    std::vector<double> dla(static_cast<size_t>(T));
    r.dla_norms(l, h, dla.data());
    double s = 0;
    for (double x : dla) s += x;
    o[Layout::kDla] = s;
  }
}

Stats finalize(const Layout& lay, const std::vector<double>& t) {
  if (t.size() != lay.size())
    data_error("sweep statistics: record of " + std::to_string(t.size()) + " values, expected " +
               std::to_string(lay.size()));
  Stats s;
  s.windows = int64_t(t[0]);
  s.rows = int64_t(t[1]);
  const double W = t[0], R1 = t[2];
  for (int l = 0; l < lay.L; l++)
    for (int h = 0; h < lay.H; h++) {
      const double* o = t.data() + lay.head(l, h);
      HeadStat hs;
      hs.layer = l, hs.head = h;
      hs.previous_token = W > 0 ? o[Layout::kPrev] / W : 0;
      hs.duplicate_token = W > 0 ? o[Layout::kDup] / W : 0;
      hs.induction = W > 0 ? o[Layout::kInd] / W : 0;
      hs.entropy = R1 > 0 ? o[Layout::kEntropy] / R1 : 0;
      hs.sink = R1 > 0 ? o[Layout::kSink] / R1 : 0;
      hs.dla = t[1] > 0 ? o[Layout::kDla] / t[1] : 0;
      for (int k = 0; k <= lay.K; k++) {
        const double n = t[size_t(3 + k)];
        hs.offset.push_back(n > 0 ? o[Layout::kPerHead + k] / n : 0.0);
      }
      s.heads.push_back(std::move(hs));
    }
  return s;
}

}  // namespace qkv::analysis::sweep

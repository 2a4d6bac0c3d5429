// Sweeps, part 1: the corpus as one stream of token ids, the model adapter (WindowRunner) and one
// window's statistics record. The driver (plan, chunks, resume) is in sweep_run.cpp.
#include "qkv/analysis/sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/gemm.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/mapped_file.hpp"
#include "qkv/profile.hpp"

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
      // A tokenizer.json pipeline (normalizer, Metaspace's prepended "▁", BOS) is not piecewise: each
      // file is one document, encoded whole as Hugging Face encodes a text.
      const size_t blk = tok.gpt2_pretokenizer() ? block : std::max<size_t>(n, 1);
      size_t pos = 0;
      while (pos < n) {
        // Cut after "\n" with an ASCII graphic byte on both sides: GPT-2's pre-tokenizer ends a word
        // there whatever follows, so pieces encode to the same ids as the whole file.
        size_t end = std::min(n, pos + blk);
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

namespace {

// W_O of a layer as dense fp32 [H·dh, d] (rows h·dh .. h·dh + dh − 1 are head h), whatever its layout.
std::vector<float> dense_wo(const Model& m, int l) {
  const Arch& a = m.arch;
  const Weight& w = m.blocks[size_t(l)].wo;
  const int q = a.q_dim(), d = a.d;
  std::vector<float> raw(size_t(q) * d), out(size_t(q) * d);
  w.read(0, int64_t(q) * d, raw.data());
  if (w.in_out) return raw;  // Conv1D [in, out] = [H·dh, d]
  for (int r = 0; r < d; r++)  // nn.Linear [out, in] = [d, H·dh]
    for (int c = 0; c < q; c++) out[size_t(c) * d + r] = raw[size_t(r) * q + c];
  return out;
}

// A norm's weight as the forward applies it (Gemma: 1 + w), in double.
std::vector<double> norm_gain(const Model& m, const Weight& w) {
  const int d = m.arch.d;
  std::vector<float> g(static_cast<size_t>(d));
  w.read(0, d, g.data());
  std::vector<double> out(static_cast<size_t>(d));
  for (int j = 0; j < d; j++) out[size_t(j)] = m.arch.norm == NormKind::RMSNormPlusOne ? 1.0 + g[size_t(j)] : double(g[size_t(j)]);
  return out;
}

constexpr int kGramBlock = 128;

// E = P Γ (W_U W_Uᵀ) Γ P [d, d], W_U [d, V] the unembedding (lm_head, or the embedding when tied);
// Γ = diag(final norm's gain); P = I − 11ᵀ/d for LayerNorm, I for RMSNorm (no centring).
std::vector<double> unembed_gram(const Model& m) {
  const int d = m.arch.d, V = m.arch.vocab_size;
  const Weight& W = m.lm_head.present() ? m.lm_head : m.wte;  // [V, d]
  std::vector<double> G(size_t(d) * d, 0.0), rows;
  std::vector<float> f;
  const int block = 2048;
  for (int v0 = 0; v0 < V; v0 += block) {
    const int nb = std::min(block, V - v0);
    f.resize(size_t(nb) * d);
    W.read(int64_t(v0) * d, int64_t(nb) * d, f.data());
    rows.assign(f.begin(), f.end());
    // G += rowsᵀ rows   (torch: G += W[v0:v0+nb].T @ W[v0:v0+nb]), only the blocks on and below the
    // diagonal (G is symmetric: 58 % of the products for GPT-2 small's d = 768); mirrored below.
    for (int a0 = 0; a0 < d; a0 += kGramBlock)
      for (int b0 = 0; b0 <= a0; b0 += kGramBlock)
        gemm<double>(true, false, std::min(kGramBlock, d - a0), std::min(kGramBlock, d - b0), nb, 1.0,
                     rows.data() + a0, d, rows.data() + b0, d, 1.0, G.data() + size_t(a0) * d + b0, d);
  }
  for (int a0 = 0; a0 < d; a0 += kGramBlock)
    for (int b0 = 0; b0 < a0; b0 += kGramBlock)
      for (int a = a0; a < std::min(a0 + kGramBlock, d); a++)
        for (int b = b0; b < std::min(b0 + kGramBlock, d); b++) G[size_t(b) * d + a] = G[size_t(a) * d + b];
  const std::vector<double> g = norm_gain(m, m.lnf_w);
  for (int a = 0; a < d; a++)
    for (int b = 0; b < d; b++) G[size_t(a) * d + b] *= g[size_t(a)] * g[size_t(b)];
  if (m.arch.norm == NormKind::LayerNorm) {
    std::vector<double> rmean(size_t(d), 0.0), cmean(size_t(d), 0.0);
    double all = 0;
    for (int a = 0; a < d; a++)
      for (int b = 0; b < d; b++) {
        const double x = G[size_t(a) * d + b];
        rmean[size_t(a)] += x / d, cmean[size_t(b)] += x / d, all += x / (double(d) * d);
      }
    for (int a = 0; a < d; a++)
      for (int b = 0; b < d; b++) G[size_t(a) * d + b] += all - rmean[size_t(a)] - cmean[size_t(b)];
  }
  return G;
}

// 1/σ of each row of x [T, d] as the model's norm computes it (LayerNorm: centred; RMSNorm: not), in double.
void row_rstd(const Arch& a, const float* x, int T, int d, double* out) {
  for (int i = 0; i < T; i++) {
    const float* xi = x + size_t(i) * d;
    double mu = 0, ss = 0;
    if (a.norm == NormKind::LayerNorm) {
      for (int j = 0; j < d; j++) mu += xi[j];
      mu /= d;
    }
    for (int j = 0; j < d; j++) ss += (xi[j] - mu) * (xi[j] - mu);
    out[i] = 1.0 / std::sqrt(ss / d + a.norm_eps);
  }
}

// For each query i, the earlier positions j < i holding the same token, ascending (CSR: at[i] ..
// at[i + 1] in pos). The duplicate-token target is 1 exactly there, the induction target at j + 1.
struct Repeats {
  std::vector<int> at, pos;
  explicit Repeats(const std::vector<int>& ids) {
    const int T = int(ids.size());
    std::map<int, std::vector<int>> seen;
    at.assign(size_t(T) + 1, 0);
    for (int i = 0; i < T; i++) {
      std::vector<int>& s = seen[ids[size_t(i)]];
      pos.insert(pos.end(), s.begin(), s.end());
      at[size_t(i) + 1] = int(pos.size());
      s.push_back(i);
    }
  }
};

// One head's detector sums etc. from its pattern A [T, T] (row-major; the masked part exact zeros).
// Each sum gets its terms in the order of the detector's row-major scan over the full T × T (whose
// masked part is exact zeros and changes no sum) — hit += A ⊙ target, mass += A — but only the dense
// ones (mass, entropy) visit every entry: the targets, the offsets and the sink are read where they are
// nonzero, which adds the same terms in the same order.
void head_stats(const float* A, int T, const Repeats& rep, int K, double* o) {
  double mass = 0, prev = 0, dup = 0, ind = 0, ent = 0, sink = 0;
  for (int i = 0; i < T; i++) {
    const float* row = A + size_t(i) * T;
    double row_ent = 0;
    for (int j = 0; j <= i; j++) {
      const double a = row[j];
      mass += a;
      if (a > 0) row_ent -= a * std::log(a);
    }
    if (i >= 1) prev += row[i - 1];
    for (int r = rep.at[size_t(i)]; r < rep.at[size_t(i) + 1]; r++) dup += row[rep.pos[size_t(r)]];
    for (int r = rep.at[size_t(i)]; r < rep.at[size_t(i) + 1]; r++) ind += row[rep.pos[size_t(r)] + 1];  // <= i
    for (int k = 0; k <= std::min(K, i); k++) o[Layout::kPerHead + k] += row[i - k];
    if (i >= 1) ent += row_ent, sink += row[0];
  }
  o[Layout::kPrev] = mass > 0 ? prev / mass : 0.0;
  o[Layout::kDup] = mass > 0 ? dup / mass : 0.0;
  o[Layout::kInd] = mass > 0 ? ind / mass : 0.0;
  o[Layout::kEntropy] = ent;
  o[Layout::kSink] = sink;
}

// q[i] = z_i M z_iᵀ for one head: z [T, H, dh] (float), M [dh, dh]; Y = Z M by a double GEMM, then
// each row's dot product with z_i. zd, y: scratch [T · dh].
void quadratic_forms(const float* z, int T, int H, int h, int dh, const std::vector<double>& M,
                     std::vector<double>& zd, std::vector<double>& y, std::vector<double>& q) {
  zd.resize(size_t(T) * dh), y.resize(size_t(T) * dh), q.assign(size_t(T), 0.0);
  for (int i = 0; i < T; i++)
    for (int r = 0; r < dh; r++) zd[size_t(i) * dh + r] = z[(size_t(i) * H + h) * dh + r];
  gemm<double>(false, false, T, dh, dh, 1.0, zd.data(), dh, M.data(), dh, 0.0, y.data(), dh);
  for (int i = 0; i < T; i++) {
    double s = 0;
    for (int r = 0; r < dh; r++) s += zd[size_t(i) * dh + r] * y[size_t(i) * dh + r];
    q[size_t(i)] = s;
  }
}

}  // namespace

struct WindowRunner::Impl {
  const Model& model;
  std::set<std::string> save;
  std::map<std::string, Tensor> saved;
  RunState st;
  std::vector<std::vector<double>> M;      // [L·H][dh·dh]
  std::vector<std::vector<float>> Wo;      // Gemma 2 only: dense W_O per layer [H·dh, d]
  std::vector<std::vector<double>> qf;     // [L·H][T]: z M zᵀ of the last run
  std::vector<std::vector<double>> rpost;  // [L][T]: Gemma 2's post-attention rstd of the last run
  std::vector<double> rstd_f;              // [T]
  std::vector<float> y;                    // scratch
  std::vector<double> zd, yd;              // scratch of quadratic_forms
  explicit Impl(const Model& m) : model(m) {}
};

WindowRunner::WindowRunner(const Model& model, const std::set<std::string>& hooks)
    : impl_(std::make_unique<Impl>(model)) {
  impl_->save = hooks;
  const Arch& a = model.arch;
  const int L = a.n_layer, H = a.H, d = a.d, dh = a.dh;
  const std::vector<double> E = unembed_gram(model);
  impl_->M.resize(size_t(L) * H);
  impl_->qf.resize(size_t(L) * H);
  if (a.post_norms) impl_->Wo.resize(size_t(L)), impl_->rpost.resize(size_t(L));
  std::vector<double> Wo(size_t(H) * dh * d), B(size_t(H) * dh * d);
  for (int l = 0; l < L; l++) {
    std::vector<float> W_O = dense_wo(model, l);
    std::vector<double> gp;
    if (a.post_norms) gp = norm_gain(model, model.blocks[size_t(l)].post_attn_w);
    Wo.assign(W_O.begin(), W_O.end());
    if (a.post_norms)  // Γ_post folded into W_O^h: the head's output as the post-norm scales it
      for (int r = 0; r < H * dh; r++)
        for (int j = 0; j < d; j++) Wo[size_t(r) * d + j] *= gp[size_t(j)];
    // B = W_O E for every head of the layer at once (one GEMM); M_h = B_h W_O^hᵀ [dh, dh]
    gemm<double>(false, false, H * dh, d, d, 1.0, Wo.data(), d, E.data(), d, 0.0, B.data(), d);
    for (int h = 0; h < H; h++) {
      auto& M = impl_->M[size_t(l) * H + h];
      M.assign(size_t(dh) * dh, 0.0);
      gemm<double>(false, true, dh, dh, d, 1.0, B.data() + size_t(h) * dh * d, d, Wo.data() + size_t(h) * dh * d, d,
                   0.0, M.data(), dh);
    }
    if (a.post_norms) impl_->Wo[size_t(l)] = std::move(W_O);
  }
}

WindowRunner::~WindowRunner() = default;
int WindowRunner::n_layer() const {
  return impl_->model.arch.n_layer;
}
int WindowRunner::n_head() const {
  return impl_->model.arch.H;
}

void WindowRunner::run(const std::vector<int>& ids, const Layout& lay, std::vector<double>& out) {
  Impl& I = *impl_;
  const Arch& a = I.model.arch;
  const int T = int(ids.size()), K = lay.K, H = a.H, dh = a.dh, d = a.d, L = a.n_layer;
  if (lay.L != L || lay.H != H) usage_error("sweep: the record's layout is not this model's");
  out.assign(lay.size(), 0.0);
  out[0] = 1, out[1] = T, out[2] = T - 1;
  for (int k = 0; k <= K; k++) out[size_t(3 + k)] = std::max(0, T - k);
  I.saved.clear();
  I.rstd_f.assign(size_t(T), 0.0);
  const std::string last = "blocks." + std::to_string(L - 1) + ".hook_resid_post";
  const Repeats rep(ids);
  // Threads over heads only where there is work enough to pay for waking them (GPT-2 small at
  // T = 1024: 12 M pattern entries per layer; the bundled model at T = 128: 66 k, faster on one).
  const bool threads = double(T) * T * H >= 2e6;
  Hooks hk;
  hk.wants = [&](const std::string& n) {
    return I.save.count(n) || n == last || n.find(".attn.hook_pattern") != std::string::npos ||
           n.find(".attn.hook_z") != std::string::npos;
  };
  hk.fn = [&](const std::string& n, ActView v) {
    if (I.save.count(n)) {
      Tensor t(v.shape);
      std::copy_n(v.data, v.numel(), t.data());
      I.saved[n] = std::move(t);
    }
    if (n.rfind("blocks.", 0) != 0) return;
    const int l = std::stoi(n.substr(7));
    if (n.find(".attn.hook_pattern") != std::string::npos) {  // A [H, T, T]
      profile::Scope p_("sweep: pattern statistics");
      const float* A = v.data;
#pragma omp parallel for schedule(dynamic, 1) if (threads)
      for (int h = 0; h < H; h++) head_stats(A + size_t(h) * T * T, T, rep, K, out.data() + lay.head(l, h));
    } else if (n.find(".attn.hook_z") != std::string::npos) {  // z [T, H, dh]
      profile::Scope p_("sweep: DLA forms z M zT");
      const float* z = v.data;
      for (int h = 0; h < H; h++)  // the GEMM uses every thread
        quadratic_forms(z, T, H, h, dh, I.M[size_t(l) * H + h], I.zd, I.yd, I.qf[size_t(l) * H + h]);
      if (a.post_norms) {  // the attention output before its norm: y = z · W_O (+ b_O); rstd of each row
        I.y.assign(size_t(T) * d, 0.0f);
        const Weight& bo = I.model.blocks[size_t(l)].bo;
        if (bo.present())
          for (int i = 0; i < T; i++) bo.read(0, d, I.y.data() + size_t(i) * d);
        gemm<float>(false, false, T, d, H * dh, 1.0f, z, H * dh, I.Wo[size_t(l)].data(), d, 1.0f, I.y.data(), d);
        I.rpost[size_t(l)].assign(size_t(T), 0.0);
        Arch rms = a;
        rms.norm = NormKind::RMSNorm;
        row_rstd(rms, I.y.data(), T, d, I.rpost[size_t(l)].data());
      }
    } else if (n == last) {
      row_rstd(a, v.data, T, d, I.rstd_f.data());
    }
  };
  RunOptions o;
  o.hooks = &hk;
  o.materialise_all = true;  // as `qkv dump`: a saved activation equals dump's for the same window
  // The statistics end at the last block's residual (rstd_f is computed from it): the unembedding — a
  // quarter of GPT-2 small's FLOPs at T = 1024 — runs only when its outputs are saved.
  if (!I.save.count("logits") && !I.save.count("ln_final.hook_normalized")) o.stop_at_layer = L - 1;
  qkv::run(I.model, ids, I.st, o);
  std::vector<double> dla(static_cast<size_t>(T));
  for (int l = 0; l < L; l++)
    for (int h = 0; h < H; h++) {
      dla_norms(l, h, dla.data());
      double s = 0;
      for (double x : dla) s += x;
      out[lay.head(l, h) + Layout::kDla] = s;
    }
}

void WindowRunner::dla_norms(int l, int h, double* dla) const {
  const Impl& I = *impl_;
  const std::vector<double>& q = I.qf[size_t(l) * I.model.arch.H + h];
  for (size_t i = 0; i < q.size(); i++) {
    double r = I.rstd_f[i];
    if (I.model.arch.post_norms) r *= I.rpost[size_t(l)][i];
    dla[i] = r * std::sqrt(std::max(q[i], 0.0));
  }
}

const Tensor& WindowRunner::hook(const std::string& name) const {
  auto it = impl_->saved.find(name);
  if (it == impl_->saved.end()) usage_error("hook " + name + " was not recorded");
  return it->second;
}

std::map<std::string, std::vector<int64_t>> hook_shapes(const Model& model, int T) {
  // Trace T = 1 and T = 2 tokens: the dimensions that change are the ones that are T.
  const auto t1 = run_with_cache(model, std::vector<int>(1, 0)), t2 = run_with_cache(model, std::vector<int>(2, 0));
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [name, a] : t1) {
    std::vector<int64_t> s = a.shape();
    const auto& s2 = t2.at(name).shape();
    for (size_t i = 0; i < s.size(); i++)
      if (s2[i] != s[i]) s[i] = T;
    out[name] = s;
  }
  return out;
}

std::string model_hash(const Model& m) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  };
  const std::string arch = m.arch.to_json().dump();
  mix(arch.data(), arch.size());
  for (const TensorSpec& t : m.table) {
    const Weight& w = m.weight(t.name);
    const int type = int(w.type);
    mix(t.name.data(), t.name.size());
    mix(&type, sizeof type);
    mix(w.shape.data(), w.shape.size() * sizeof(int64_t));
    mix(w.data, size_t(w.numel()) * (w.type == WeightType::F32 ? 4 : 2));
  }
  std::ostringstream s;
  s << std::hex << std::setw(16) << std::setfill('0') << h;
  return s.str();
}

// ---- one window's record ---------------------------------------------------------------------------

void window_record(WindowRunner& r, const std::vector<int>& ids, const Layout& lay, std::vector<double>& out) {
  r.run(ids, lay, out);
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

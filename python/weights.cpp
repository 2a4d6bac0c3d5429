// The weights by TransformerLens's names (qkv.Model.W_Q, …, state_dict): each is one strided window over the
// tensor as the checkpoint stores it, so an F32 tensor is handed to NumPy as a read-only view of the
// mapped file (no copy) and any other dtype (F16, BF16, a GGUF quantization) as a float32 copy gathered
// through the same window from the dequantized tensor. A [n_layers, …] stack is a view too when every
// layer's window is a view and the layers lie at one constant distance in memory; otherwise it is a copy.
//
// The windows (element strides over the stored tensor), per layout (arch.hpp's QkvLayout):
//   a linear map stored [out, in] (nn.Linear) has element (o, i) at o·in + i; stored [in, out] (Conv1D)
//   at i·out + o. Head h's output rows of Q are o = base + h·hs + j (j < dh): hs = dh, except NeoX's
//   per-head interleave (hs = 3·dh, K at base dh, V at 2·dh); K and V start at d and 2d in GPT-2's
//   thirds, at H·dh and H·dh + n_kv·dh in Phi-3's stacked rows, at 0 in separate k_proj / v_proj.
#include <pybind11/stl.h>

#include "py_model.hpp"

namespace qkv_py {
namespace {

// A window over one stored tensor: element `offset`, then `shape` with `strides` (in elements).
// w == nullptr: the model has no such tensor (a bias it does not use): zeros.
struct Window {
  const qkv::Weight* w = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> shape, strides;
};

// A linear map's strides over its stored tensor: (step of an output index, step of an input index).
struct LinStrides {
  int64_t out, in;
};
LinStrides lin_strides(const qkv::Weight& w) {
  const int64_t cols = w.shape.at(1);
  return w.in_out ? LinStrides{1, cols} : LinStrides{cols, 1};
}

// Where head h's Q, K or V rows start (base) and how far apart heads are (hs), in the map's outputs.
struct HeadCols {
  int64_t base, hs;
};
HeadCols head_cols(const qkv::Arch& a, int part) {  // part 0 Q, 1 K, 2 V
  const int64_t dh = a.dh;
  switch (a.qkv_layout) {
    case qkv::QkvLayout::Separate: return {0, dh};
    case qkv::QkvLayout::Gpt2Thirds: return {part * int64_t(a.d), dh};
    case qkv::QkvLayout::NeoxPerHead: return {part * dh, 3 * dh};
    case qkv::QkvLayout::Stacked: return {part == 0 ? 0 : part == 1 ? a.q_dim() : int64_t(a.q_dim()) + a.kv_dim(), dh};
  }
  return {0, dh};
}

const qkv::Weight* present(const qkv::Weight& w) { return w.present() ? &w : nullptr; }

// W_Q / W_K / W_V [heads, d_model, d_head] and b_Q / b_K / b_V [heads, d_head] of one layer.
Window qkv_window(const qkv::Model& m, int layer, int part, bool bias) {
  const qkv::Arch& a = m.arch;
  const qkv::BlockWeights& b = m.blocks.at(size_t(layer));
  const int64_t heads = part == 0 ? a.H : a.n_kv, dh = a.dh, d = a.d;
  const bool separate = a.qkv_layout == qkv::QkvLayout::Separate;
  const HeadCols c = head_cols(a, part);
  if (bias) {
    const qkv::Weight& w = separate ? (part == 0 ? b.bq : part == 1 ? b.bk : b.bv) : b.bqkv;
    return {present(w), c.base, {heads, dh}, {c.hs, 1}};
  }
  const qkv::Weight& w = separate ? (part == 0 ? b.wq : part == 1 ? b.wk : b.wv) : b.wqkv;
  const LinStrides s = lin_strides(w);
  return {&w, c.base * s.out, {heads, d, dh}, {c.hs * s.out, s.in, s.out}};
}

// W_O [n_heads, d_head, d_model]: W_O's inputs are the heads' z, h·dh + j; its outputs the residual.
Window o_window(const qkv::Model& m, int layer) {
  const qkv::Arch& a = m.arch;
  const qkv::Weight& w = m.blocks.at(size_t(layer)).wo;
  const LinStrides s = lin_strides(w);
  return {&w, 0, {a.H, a.dh, a.d}, {a.dh * s.in, s.in, s.out}};
}

// The MLP's maps: W_in [d_model, d_mlp] (up_proj / c_fc), W_gate [d_model, d_mlp] (gate_proj), W_out
// [d_mlp, d_model] (down_proj / c_proj), as TransformerLens's GatedMLP names them; a fused gate_up_proj
// (Phi-3) holds the gate's d_mlp outputs first, then up's. `part`: 0 in, 1 gate, 2 out.
Window mlp_window(const qkv::Model& m, int layer, int part) {
  const qkv::Arch& a = m.arch;
  if (a.mlp == qkv::MlpKind::None)
    qkv::usage_error("this " + a.model_type + " model is attention-only: it has no MLP weights");
  const bool gated = a.gated_mlp();
  if (part == 1 && !gated) qkv::usage_error("W_gate: this " + a.model_type + " model's MLP is not gated");
  const qkv::BlockWeights& b = m.blocks.at(size_t(layer));
  const int64_t ff = a.d_ff, d = a.d;
  if (part == 2) {
    const LinStrides s = lin_strides(b.w_down);
    return {&b.w_down, 0, {ff, d}, {s.in, s.out}};
  }
  const qkv::Weight& w = a.gate_up_fused ? b.w_gate_up : part == 0 ? b.w_up : b.w_gate;
  const LinStrides s = lin_strides(w);
  const int64_t first = a.gate_up_fused && part == 0 ? ff : 0;  // up's outputs follow the gate's
  return {&w, first * s.out, {d, ff}, {s.in, s.out}};
}

// b_in [d_mlp] (up's bias; zeros where there is none, as a fused gate_up_proj), b_out [d_model].
Window mlp_bias(const qkv::Model& m, int layer, bool out) {
  mlp_window(m, layer, out ? 2 : 0);  // the same errors
  const qkv::BlockWeights& b = m.blocks.at(size_t(layer));
  const qkv::Weight& w = out ? b.b_down : b.b_up;
  return {m.arch.gate_up_fused && !out ? nullptr : present(w), 0, {out ? m.arch.d : m.arch.d_ff}, {1}};
}

// A norm's weight or bias [d_model] of one layer: ln1 before attention, ln2 before the MLP, Gemma 2's
// ln1_post / ln2_post after them. A bias the norm lacks (RMSNorm) reads as zeros; a norm the model lacks
// is an error naming `what`.
struct NormSlot {
  qkv::Weight qkv::BlockWeights::*w;
  qkv::Weight qkv::BlockWeights::*b;
  const char* what;
};
constexpr NormSlot kLn1{&qkv::BlockWeights::ln1_w, &qkv::BlockWeights::ln1_b, "ln1"};
constexpr NormSlot kLn2{&qkv::BlockWeights::ln2_w, &qkv::BlockWeights::ln2_b, "ln2 (it is attention-only)"};
constexpr NormSlot kLn1Post{&qkv::BlockWeights::post_attn_w, nullptr, "post-norms (Gemma 2 has them)"};
constexpr NormSlot kLn2Post{&qkv::BlockWeights::post_mlp_w, nullptr, "post-norms (Gemma 2 has them)"};

Window norm_window(const qkv::Model& m, int layer, const NormSlot& n, bool bias, const char* kind) {
  const qkv::BlockWeights& blk = m.blocks.at(size_t(layer));
  if (!(blk.*n.w).present())
    qkv::usage_error(std::string(kind) + ": this " + m.arch.model_type + " model has no " + n.what);
  if (!bias) return {&(blk.*n.w), 0, {m.arch.d}, {1}};
  return {n.b ? present(blk.*n.b) : nullptr, 0, {m.arch.d}, {1}};
}

using LayerFn = Window (*)(const qkv::Model&, int);
struct BlockKind {
  const char* name;
  LayerFn fn;
};
const BlockKind kBlockKinds[] = {
    {"W_Q", [](const qkv::Model& m, int l) { return qkv_window(m, l, 0, false); }},
    {"W_K", [](const qkv::Model& m, int l) { return qkv_window(m, l, 1, false); }},
    {"W_V", [](const qkv::Model& m, int l) { return qkv_window(m, l, 2, false); }},
    {"b_Q", [](const qkv::Model& m, int l) { return qkv_window(m, l, 0, true); }},
    {"b_K", [](const qkv::Model& m, int l) { return qkv_window(m, l, 1, true); }},
    {"b_V", [](const qkv::Model& m, int l) { return qkv_window(m, l, 2, true); }},
    {"W_O", &o_window},
    {"b_O", [](const qkv::Model& m, int l) {
       return Window{present(m.blocks.at(size_t(l)).bo), 0, {m.arch.d}, {1}};
     }},
    {"W_in", [](const qkv::Model& m, int l) { return mlp_window(m, l, 0); }},
    {"W_gate", [](const qkv::Model& m, int l) { return mlp_window(m, l, 1); }},
    {"W_out", [](const qkv::Model& m, int l) { return mlp_window(m, l, 2); }},
    {"b_in", [](const qkv::Model& m, int l) { return mlp_bias(m, l, false); }},
    {"b_out", [](const qkv::Model& m, int l) { return mlp_bias(m, l, true); }},
    {"ln1_w", [](const qkv::Model& m, int l) { return norm_window(m, l, kLn1, false, "ln1_w"); }},
    {"ln1_b", [](const qkv::Model& m, int l) { return norm_window(m, l, kLn1, true, "ln1_b"); }},
    {"ln2_w", [](const qkv::Model& m, int l) { return norm_window(m, l, kLn2, false, "ln2_w"); }},
    {"ln2_b", [](const qkv::Model& m, int l) { return norm_window(m, l, kLn2, true, "ln2_b"); }},
    {"ln1_post_w", [](const qkv::Model& m, int l) { return norm_window(m, l, kLn1Post, false, "ln1_post_w"); }},
    {"ln2_post_w", [](const qkv::Model& m, int l) { return norm_window(m, l, kLn2Post, false, "ln2_post_w"); }},
};

// The whole-model weights: W_E [d_vocab, d_model], W_pos [n_ctx, d_model], W_U [d_model, d_vocab], b_U, and the
// final norm's ln_final_w, ln_final_b [d_model] (b zeros for RMSNorm).
Window top_window(const qkv::Model& m, const std::string& kind) {
  const qkv::Arch& a = m.arch;
  if (kind == "W_E") return {&m.wte, 0, {a.vocab_size, a.d}, {a.d, 1}};
  if (kind == "W_pos") {
    if (!m.wpe.present())
      qkv::usage_error("W_pos: this " + a.model_type + " model has rotary positions, no learned position embedding");
    return {&m.wpe, 0, {a.n_ctx, a.d}, {a.d, 1}};
  }
  if (kind == "W_U") {
    const qkv::Weight& w = m.lm_head.present() ? m.lm_head : m.wte;
    const LinStrides s = lin_strides(w);  // the unembedding maps d_model (in) to the vocabulary (out)
    return {&w, 0, {a.d, a.vocab_size}, {s.in, s.out}};
  }
  if (kind == "b_U") return {nullptr, 0, {a.vocab_size}, {1}};
  if (kind == "ln_final_w") return {&m.lnf_w, 0, {a.d}, {1}};
  if (kind == "ln_final_b") return {present(m.lnf_b), 0, {a.d}, {1}};
  qkv::usage_error("no weight named '" + kind + "'");
}

const BlockKind* block_kind(const std::string& kind) {
  for (const BlockKind& k : kBlockKinds)
    if (kind == k.name) return &k;
  return nullptr;
}

// Keeps the model (and so its mapped files) alive as long as an array views it.
py::capsule keep(const ModelPtr& m) {
  return py::capsule(new ModelPtr(m), [](void* p) { delete static_cast<ModelPtr*>(p); });
}

py::array read_only(py::array a) {
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

std::vector<py::ssize_t> byte_strides(const std::vector<int64_t>& s) {
  std::vector<py::ssize_t> b;
  for (int64_t x : s) b.push_back(py::ssize_t(x * int64_t(sizeof(float))));
  return b;
}

bool viewable(const Window& w) { return w.w && w.w->type == qkv::WeightType::F32; }
const float* origin(const Window& w) { return static_cast<const float*>(w.w->data) + w.offset; }

// The window's elements, in C order, into out (zeros without a tensor; dequantized for non-F32).
void gather(const Window& w, float* out) {
  const int64_t n = qkv::Tensor::count(w.shape);
  if (!w.w) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  std::vector<float> whole(size_t(w.w->numel()));
  w.w->read(0, w.w->numel(), whole.data());
  const size_t rank = w.shape.size();
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < n; e++) {
    int64_t off = w.offset;
    for (size_t r = 0; r < rank; r++) off += idx[r] * w.strides[r];
    out[e] = whole[size_t(off)];
    for (size_t r = rank; r-- > 0;)
      if (++idx[r] < w.shape[r]) break;
      else idx[r] = 0;
  }
}

py::array window_array(const ModelPtr& m, const Window& w) {
  if (viewable(w))
    return read_only(py::array(py::dtype::of<float>(), shape_of(w.shape), byte_strides(w.strides), origin(w), keep(m)));
  py::array_t<float> out(shape_of(w.shape));
  gather(w, out.mutable_data());
  return out;
}

// [n_layers, …]: a view when every layer is one and they lie at one distance apart, else a copy.
py::array stack(const ModelPtr& m, const BlockKind& k) {
  const int L = m->lm.arch.n_layer;
  std::vector<Window> ws;
  for (int l = 0; l < L; l++) ws.push_back(k.fn(m->lm, l));
  bool view = true;
  for (const Window& w : ws) view = view && viewable(w);
  const int64_t step = view && L > 1 ? int64_t(origin(ws[1]) - origin(ws[0])) : 0;
  for (int l = 1; view && l < L; l++)
    view = int64_t(origin(ws[size_t(l)]) - origin(ws[size_t(l - 1)])) == step;
  std::vector<int64_t> shape = ws[0].shape;
  shape.insert(shape.begin(), L);
  if (view) {
    std::vector<int64_t> strides = ws[0].strides;
    strides.insert(strides.begin(), step);
    return read_only(py::array(py::dtype::of<float>(), shape_of(shape), byte_strides(strides), origin(ws[0]), keep(m)));
  }
  py::array_t<float> out(shape_of(shape));
  const int64_t per = qkv::Tensor::count(ws[0].shape);
  for (int l = 0; l < L; l++) gather(ws[size_t(l)], out.mutable_data() + l * per);
  return out;
}

// The weight `kind` (W_Q, …, b_U): every layer stacked, or one layer's.
py::array weight(const ModelPtr& m, const std::string& kind, std::optional<int> layer) {
  const BlockKind* k = block_kind(kind);
  if (!k) {
    if (layer) qkv::usage_error(kind + " is not a per-layer weight");
    return window_array(m, top_window(m->lm, kind));
  }
  if (!layer) return stack(m, *k);
  if (*layer < 0 || *layer >= m->lm.arch.n_layer)
    qkv::usage_error("layer " + std::to_string(*layer) + " is outside [0, " + std::to_string(m->lm.arch.n_layer) + ")");
  return window_array(m, k->fn(m->lm, *layer));
}

// Every tensor of the checkpoint by its own name, as stored: F32 views, others dequantized copies.
py::dict state_dict(const ModelPtr& m) {
  py::dict out;
  for (const qkv::TensorSpec& s : m->lm.table) {
    const qkv::Weight& w = m->lm.weight(s.name);
    std::vector<int64_t> strides(w.shape.size(), 1);
    for (size_t r = w.shape.size(); r-- > 1;) strides[r - 1] = strides[r] * w.shape[r];
    out[py::str(s.name)] = window_array(m, Window{&w, 0, w.shape, strides});
  }
  return out;
}

// The names of the dtypes the tensors are stored in ({"F32": n, "Q4_K": n, …}).
py::dict dtypes(const ModelPtr& m) {
  py::dict out;
  for (const qkv::TensorSpec& s : m->lm.table) out[py::str(s.name)] = qkv::weight_type_name(m->lm.weight(s.name));
  return out;
}

// Rows x [n, d_head] rotated to position `offset` with the model's own rotation (the QK circuit at a
// query–key distance; see qkv/factored.py).
py::array rotate(const ModelPtr& m, py::array_t<float, py::array::c_style | py::array::forcecast> x, int offset) {
  const qkv::Arch& a = m->lm.arch;
  if (x.ndim() != 2 || x.shape(1) != a.dh)
    qkv::usage_error("rotate: expected rows [n, " + std::to_string(a.dh) + "]");
  if (offset < 0 || offset >= a.n_ctx)
    qkv::usage_error("offset " + std::to_string(offset) + " is outside [0, " + std::to_string(a.n_ctx) + ")");
  py::array_t<float> out({x.shape(0), x.shape(1)});
  std::copy_n(x.data(), x.size(), out.mutable_data());
  std::vector<int> pos(size_t(x.shape(0)), offset);
  qkv::apply_rotary(a, out.mutable_data(), int(x.shape(0)), pos.data());
  return out;
}

}  // namespace

void bind_weights(py::module_& mod) {
  mod.def("weight", &weight, py::arg("model"), py::arg("kind"), py::arg("layer") = py::none(),
          "A weight by TransformerLens's name (W_Q, W_K, W_V, W_O, b_Q, b_K, b_V, b_O, W_in, W_gate, W_out, b_in, "
          "b_out, ln1_w, ln1_b, ln2_w, ln2_b, ln1_post_w, ln2_post_w, W_E, W_pos, W_U, b_U, "
          "ln_final_w, ln_final_b): "
          "every layer stacked, or one layer's; a read-only view of an F32 checkpoint where the layout allows.");
  mod.def("state_dict", &state_dict, py::arg("model"),
          "Every tensor by the checkpoint's own name, as stored (F32 read-only views; others dequantized copies).");
  mod.def("weight_dtypes", &dtypes, py::arg("model"), "Every tensor's stored dtype by name.");
  mod.def("rotate", &rotate, py::arg("model"), py::arg("rows"), py::arg("offset"),
          "Rows [n, d_head] rotated to position `offset` by the model's rotary embedding (a copy).");
}

}  // namespace qkv_py

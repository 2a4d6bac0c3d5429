// llm.c's GPT-2 checkpoints (gpt2_*.bin, include/qkv/io/llmc.hpp) as a Model whose weights are views into
// the mapped file: version 3 (fp32) used in place, version 5 (bf16) as stored and converted per use. llm.c
// stores matrices [out, in] — nn.Linear's layout — so every view has in_out = false, and wte is the first
// vocab_size of its padded_vocab_size rows. The file costs its size once.
#include <memory>

#include "model/load_util.hpp"
#include "qkv/error.hpp"
#include "qkv/family.hpp"
#include "qkv/io/llmc.hpp"
#include "qkv/io/mapped_file.hpp"
#include "qkv/lm.hpp"

namespace qkv {

Model load_llmc_lm(const std::string& path) {
  auto file = std::make_shared<io::MappedFile>(io::MappedFile::open(path));
  const io::LlmcLayout lay = io::llmc_layout(file->data(), int64_t(file->size()), path);
  const GPT2Config& c = lay.config;
  const nlohmann::json cj = {{"model_type", "gpt2"},         {"vocab_size", c.vocab_size},
                             {"n_positions", c.n_positions}, {"n_embd", c.n_embd},
                             {"n_layer", c.n_layer},         {"n_head", c.n_head}};
  Model m;
  m.arch = arch_from_config(cj, path);
  m.path = path;
  m.table = tensor_table(m.arch);
  m.blocks.resize(size_t(m.arch.n_layer));
  if (lay.tensors.size() != m.table.size())
    throw std::logic_error("llm.c layout and the GPT-2 table disagree on the tensor count");
  const bool f32 = lay.version == 3;
  const unsigned char* params = file->data() + 1024;
  for (size_t i = 0; i < m.table.size(); i++) {
    const TensorSpec& s = m.table[i];
    const io::LlmcTensor& t = lay.tensors[i];
    if (t.name != s.name) throw std::logic_error("llm.c tensor " + t.name + " where the table has " + s.name);
    Weight& w = role_slot(m, m.blocks, s.role, s.layer);
    w.name = s.name;
    w.shape = t.stored_shape;
    w.type = f32 ? WeightType::F32 : WeightType::BF16;
    w.data = params + t.index * (f32 ? 4 : 2);
    w.in_out = false;  // llm.c's matrices are [out, in]
    detail::check_finite(w, path);
    m.index[s.name] = i;
  }
  m.keep_alive.push_back(file);
  m.source = path + " (llm.c checkpoint, version " + std::to_string(lay.version) + ": GPT-2, " +
             (f32 ? "F32" : "BF16") + ", read in place)";
  return m;
}

}  // namespace qkv

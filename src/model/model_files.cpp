#include "qkv/model_files.hpp"

#include "qkv/io/gguf_family.hpp"

#include <cstdlib>
#include <filesystem>

namespace fs = std::filesystem;

namespace qkv {

std::optional<Tokenizer> tokenizer_for_model(const std::string& model_path) {
  std::error_code ec;
  const std::string ext = ".gguf";  // a GGUF carries its tokenizer in its metadata
  if (model_path.size() > ext.size() && model_path.compare(model_path.size() - ext.size(), ext.size(), ext) == 0 &&
      !fs::is_directory(model_path, ec))
    return gguf_tokenizer(model_path);
  fs::path dir = fs::is_directory(model_path, ec) ? fs::path(model_path) : fs::path(model_path).parent_path();
  if (dir.empty()) dir = ".";
  // from_dir prefers tokenizer.json (+ tokenizer_config.json) over vocab.json + merges.txt.
  const bool json = fs::exists(dir / "tokenizer.json", ec);
  const bool hf = fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec);
  const bool openai = fs::exists(dir / "encoder.json", ec) && fs::exists(dir / "vocab.bpe", ec);
  if (!json && !hf && !openai) return std::nullopt;
  return Tokenizer::from_dir(dir.string());
}

std::string default_model_path() {
  if (const char* env = std::getenv("QKV_MODEL"); env && *env) return env;
#ifdef QKV_SOURCE_DIR
  const fs::path bundled = fs::path(QKV_SOURCE_DIR) / "models" / "induction";
  std::error_code ec;
  if (fs::exists(bundled / "model.safetensors", ec)) return bundled.string();
#endif
  return "";
}

std::string token_label(const Tokenizer& tok, int id) {
  std::string out;
  for (char c : tok.token_text(id)) {
    if (c == ' ')
      out += "␣";
    else if (c == '\n')
      out += "↵";
    else if (c == '\t')
      out += "⇥";
    else if (static_cast<unsigned char>(c) < 0x20)
      out += "\\x" + std::string(1, "0123456789abcdef"[(c >> 4) & 15]) + "0123456789abcdef"[c & 15];
    else
      out += c;
  }
  return out;
}

}  // namespace qkv

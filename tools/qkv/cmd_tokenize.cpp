// qkv tokenize — token ids and strings of a text with a model's tokenizer (tokenizer.json as Hugging
// Face's `tokenizers` reads it, or GPT-2's vocab.json + merges.txt), whether BOS was added, and ids
// back to text. The model directory needs only its tokenizer files, not the weights.
#include <filesystem>
#include <iostream>

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/error.hpp"
#include "qkv/io/mapped_file.hpp"
#include "qkv/model_files.hpp"
#include "qkv/report/table.hpp"

namespace fs = std::filesystem;

namespace qkv::cli {
namespace {

struct TokenizeArgs {
  ModelArgs model;
  std::string text, file, texts, decode;
  std::string bos = "auto";
  bool json = false;
};

Tokenizer load_tokenizer(const ModelArgs& a) {
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  if (path.empty()) usage_error("--model is required: no bundled model was found and $QKV_MODEL is not set");
  std::error_code ec;
  if (!fs::exists(path, ec)) data_error(path + ": no such file or directory");
  std::optional<Tokenizer> tok = tokenizer_for_model(path);
  if (!tok)
    usage_error(path + " has no tokenizer beside it (tokenizer.json, or vocab.json + merges.txt)");
  return std::move(*tok);
}

std::string read_text(const std::string& file) {
  const io::MappedFile f = io::MappedFile::open(file);  // rejects directories and FIFOs at once
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

// How the BOS decision reads: "added <s> (id 1, as the tokenizer's files say)".
std::string bos_words(const Tokenizer& tok, Bos mode) {
  const bool added = tok.bos_added(mode);
  const std::string why = mode == Bos::Auto ? "as the tokenizer's files say" : "--bos " + std::string(added ? "yes" : "no");
  if (added) return "added " + tok.token_string(tok.bos_id()) + " (id " + std::to_string(tok.bos_id()) + ", " + why + ")";
  if (tok.bos_id() < 0) return "not added (the tokenizer has no BOS token)";
  return "not added (" + why + "; --bos yes adds " + tok.token_string(tok.bos_id()) + ")";
}

void run_tokenize(const TokenizeArgs& a) {
  const Tokenizer tok = load_tokenizer(a.model);
  const Bos mode = a.bos == "yes" ? Bos::Yes : a.bos == "no" ? Bos::No : Bos::Auto;
  if (mode == Bos::Yes && tok.bos_id() < 0)
    usage_error("--bos yes: the tokenizer has no BOS token (no bos_token in its files)");

  if (!a.decode.empty()) {  // ids -> text
    const std::vector<int> ids = parse_ints("--decode", a.decode);
    for (int id : ids)
      if (id < 0 || id >= tok.vocab_size())
        usage_error("--decode: token id " + std::to_string(id) + " is outside [0, " + std::to_string(tok.vocab_size()) + ")");
    const std::string text = tok.decode(ids);
    if (a.json)  // (bytes that are not UTF-8, e.g. half a character's byte tokens, become U+FFFD)
      std::cout << nlohmann::json{{"ids", ids}, {"text", text}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    else std::cout << text << "\n";
    return;
  }

  if (!a.texts.empty()) {  // a JSON array of texts -> one result per text
    nlohmann::json in;
    try {
      in = nlohmann::json::parse(read_text(a.texts));
    } catch (const nlohmann::json::parse_error& e) {
      data_error(a.texts + ": not valid JSON: " + e.what());
    }
    if (!in.is_array()) data_error(a.texts + ": expected a JSON array of strings, found " + std::string(in.type_name()));
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].is_string())
        data_error(a.texts + ": [" + std::to_string(i) + "]: expected a string, found " + std::string(in[i].type_name()));
      out.push_back({{"ids", tok.encode(in[i].get<std::string>(), mode)}, {"bos_added", tok.bos_added(mode)}});
    }
    std::cout << out.dump() << "\n";
    return;
  }

  const std::string text = a.file.empty() ? a.text : read_text(a.file);
  const std::vector<int> ids = tok.encode(text, mode);
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids) tokens.push_back(tok.token_string(id));
  if (a.json) {
    print_json({{"ids", ids},
                {"tokens", nlohmann::json(tokens)},
                {"bos_added", tok.bos_added(mode)},
                {"bos_id", tok.bos_id() >= 0 ? nlohmann::json(tok.bos_id()) : nlohmann::json(nullptr)},
                {"tokenizer", tok.description()}});
    return;
  }
  std::cout << "tokenizer   " << tok.description() << "\nBOS         " << bos_words(tok, mode) << "\n\n";
  report::Table t({"position", "id", "token", "text"});
  for (size_t i = 0; i < ids.size(); i++)
    t.add({std::to_string(i), std::to_string(ids[i]), tokens[i], token_label(tok, ids[i])});
  std::cout << t.str() << ids.size() << " tokens\n";
}

void register_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Token ids and strings of a text with the model's tokenizer");
  auto a = std::make_shared<TokenizeArgs>();
  add_model_option(cmd, a->model);
  auto* t = cmd->add_option("text", a->text, "the text");
  auto* f = cmd->add_option("--file", a->file, "read the text from a file");
  auto* ts = cmd->add_option("--texts", a->texts, "a JSON array of texts: prints a JSON array of {ids, bos_added}");
  auto* d = cmd->add_option("--decode", a->decode, "token ids back to text, e.g. 1,15043");
  t->excludes(f)->excludes(ts)->excludes(d);
  f->excludes(ts)->excludes(d);
  ts->excludes(d);
  cmd->add_option("--bos", a->bos, "put the BOS token first: yes, no, or auto (as Hugging Face does with these files)")
      ->check(CLI::IsMember({"yes", "no", "auto"}));
  cmd->add_flag("--json", a->json, "JSON: {\"ids\": [...], \"tokens\": [...], \"bos_added\": ...}");
  cmd->callback([a] {
    if (a->text.empty() && a->file.empty() && a->texts.empty() && a->decode.empty())
      usage_error("tokenize: give a TEXT or --file");
    run_tokenize(*a);
  });
}

}  // namespace

QKV_COMMAND(21, register_tokenize);

}  // namespace qkv::cli

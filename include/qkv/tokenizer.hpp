// One Tokenizer type for two sources, each exact:
//
// 1. GPT-2's own files (vocab.json + merges.txt, or OpenAI's encoder.json + vocab.bpe): byte-level
//    BPE with the same ids as OpenAI's encoder.py for every text (below).
// 2. A Hugging Face tokenizer.json (+ tokenizer_config.json): the same ids as Hugging Face
//    `tokenizers` for the BPE tokenizers of GPT-2, Llama 2/TinyLlama, Llama 3, Mistral, Qwen2/3 and
//    Gemma. The pipeline is HF's:
//      text --added tokens split out (leftmost longest; lstrip/rstrip/single_word; those with
//      "normalized": true matched after normalization)--> pieces
//      piece --normalizer (Sequence, Prepend, Replace, NFC/NFD/NFKC/NFKD)--> string
//      string --pre-tokenizer (Sequence, Split {String|Regex, Isolated|Removed|MergedWithPrevious|
//      MergedWithNext|Contiguous, invert}, ByteLevel, Metaspace, Digits)--> words
//      word --BPE (byte-level alphabet or characters; byte_fallback to <0xNN>; unk/fuse_unk;
//      ignore_merges; merges one pair at a time, lowest rank first)--> ids
//    then the post-processor's template around them: BOS as HF adds it (Bos::Auto). When
//    tokenizer_config.json has "add_bos_token"/"add_eos_token" they decide, as transformers'
//    Llama/Gemma fast tokenizers rebuild the template from them; otherwise the tokenizer.json
//    post_processor (TemplateProcessing, alone or in a Sequence; RobertaProcessing/BertProcessing)
//    does. bos_token/eos_token come from tokenizer_config.json (else special_tokens_map.json beside
//    it, else the template); its "split_special_tokens": true leaves special tokens unmatched, as
//    transformers does. Anything else (another model type, normalizer, pre-tokenizer or
//    decoder) is a qkv::Error naming the file and the key. Text must be valid UTF-8 here (HF takes
//    Unicode strings); invalid UTF-8 is a qkv::Error naming the byte offset.
//    decode() follows the decoder (ByteLevel; Replace ▁ -> space, ByteFallback, Fuse, Strip;
//    Metaspace) but keeps bytes exact where HF would put U+FFFD for invalid UTF-8.
//
// GPT-2's files:
// text --pre-tokenizer regex--> words --bytes_to_unicode--> symbols --BPE merges by rank--> ids
//
// The pre-tokenizer is GPT-2's pattern run by PCRE2 (UTF + UCP, JIT when available):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Input that is not valid UTF-8 still encodes: each run of bytes that is not valid UTF-8 becomes a
// word of its own, so decode(encode(s)) == s for any byte string s.
// Special tokens such as <|endoftext|> are not recognised in text (as in OpenAI's encoder.py); they
// still decode. (A tokenizer.json does recognise its added tokens, as Hugging Face does.)
//
// A Tokenizer is immutable after construction and safe to use from many threads at once; copies
// share the vocabulary and the per-word cache.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qkv {

// Whether encode() puts the BOS token first: as the tokenizer's files say (Hugging Face's default,
// add_special_tokens=True), always, or never. Yes on a tokenizer without a BOS token is a qkv::Error.
enum class Bos { Auto, Yes, No };

class Tokenizer {
 public:
  // vocab_json: a JSON object {token string: id} with ids exactly 0..n-1 (HF vocab.json / OpenAI
  // encoder.json). merges_txt: one merge "left right" per line in rank order, an optional
  // "#version" first line (HF merges.txt / OpenAI vocab.bpe). Throws qkv::Error naming the file
  // (and line) for anything malformed.
  static Tokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // A Hugging Face tokenizer.json; tokenizer_config: its tokenizer_config.json or "" for none
  // (then BOS/EOS come from the post-processor alone). special_tokens_map.json beside the config is
  // read for bos_token/eos_token when the config lacks them.
  static Tokenizer from_hf_json(const std::string& tokenizer_json, const std::string& tokenizer_config = "");
  // dir holds tokenizer.json (+ tokenizer_config.json), preferred, or vocab.json + merges.txt
  // (Hugging Face names) or encoder.json + vocab.bpe (OpenAI's).
  static Tokenizer from_dir(const std::string& dir);
  // 256 tokens, token id = byte value, token string = bytes_to_unicode(byte), no merges.
  static Tokenizer byte_level();

  // encode(text, Bos::Auto): GPT-2's files never add BOS; tokenizer.json as Hugging Face does.
  std::vector<int> encode(std::string_view utf8_text) const;
  // Bos::Yes puts bos_id() first (the post-processor's prefix where it has one), Bos::No leaves any
  // prefix out; a suffix (add_eos_token) stays.
  std::vector<int> encode(std::string_view utf8_text, Bos bos) const;
  // Whether encode(text, bos) starts with the BOS token it adds.
  bool bos_added(Bos bos) const;
  bool adds_bos() const { return bos_added(Bos::Auto); }
  // Whether this is GPT-2's own pipeline (vocab.json + merges.txt: its regex pre-tokenizer, no
  // normalizer, no BOS), under which text cut after "\n" between two ASCII graphic bytes encodes
  // piecewise to the same ids as whole (the sweep streams files that way); false for tokenizer.json.
  bool gpt2_pretokenizer() const;
  int bos_id() const;  // -1 if none (GPT-2's files: <|endoftext|> when the vocabulary has it)
  int eos_id() const;  // -1 if none
  // Words for `qkv info` and `qkv tokenize`, e.g. "Hugging Face BPE (Metaspace, byte fallback)".
  std::string description() const;
  // The text of the tokens: concatenated bytes for GPT-2's files; for tokenizer.json the decoder's
  // output (e.g. Llama 2's leading space stripped). Throws qkv::Error naming an id outside
  // [0, vocab_size()).
  std::string decode(const std::vector<int>& ids) const;
  // decode() for generated text: a model's embedding may be larger than its tokenizer (padded
  // vocabularies, or a tokenizer put beside another checkpoint), so an id >= vocab_size() is written
  // "<|id N|>" instead of throwing; the runs of ids between such ids are decoded as above.
  std::string decode_generated(const std::vector<int>& ids) const;
  // The text of `ids` as it reads after `prompt` (decode_generated of both, the prompt's text cut off):
  // a Metaspace tokenizer keeps the space of the first new word; where the prompt's text is not a
  // prefix of the whole, the new ids alone.
  std::string decode_after(const std::vector<int>& prompt, const std::vector<int>& ids) const;
  // The vocabulary string of one token, e.g. "Ġthe" for 262.
  std::string token_string(int id) const;
  // The bytes one token stands for, e.g. " the" for 262 (added tokens: their content).
  std::string token_text(int id) const;
  int vocab_size() const;

  // Writes dir/vocab.json (ordered by id) and dir/merges.txt ("#version: 0.2" first line), or for a
  // tokenizer.json tokenizer copies of tokenizer.json (+ tokenizer_config.json), each through a
  // temporary file and a rename. Creates dir if needed.
  void write_files(const std::string& dir) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv

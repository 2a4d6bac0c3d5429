// Internals of the GPT-2 tokenizer that tests look at directly.
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::tokenizer_detail {

// OpenAI's bytes_to_unicode(): byte -> code point. Printable Latin-1 bytes map to themselves, the
// other 68 bytes to U+0100.. in byte order (so space 0x20 -> U+0120 'Ġ', newline 0x0A -> U+010A 'Ċ').
const std::array<char32_t, 256>& bytes_to_unicode();
// UTF-8 of bytes_to_unicode()[b]: the vocabulary string of the single-byte token b.
std::string byte_symbol(unsigned char b);
// A vocabulary string back to the bytes it stands for. Characters outside the 256-character
// alphabet (none in GPT-2's vocabulary) stand for their own UTF-8 bytes.
std::string symbols_to_bytes(std::string_view token_string);

// Splits text into GPT-2 pre-tokens ("words") in order; the words concatenate to text exactly.
// Valid UTF-8 is split by GPT-2's regex; each run of bytes that is not valid UTF-8 becomes a word.
void pretokenize(std::string_view text, std::vector<std::string_view>& words);
// Whether PCRE2 JIT-compiled the pattern on this machine (informational).
bool pretokenizer_uses_jit();

}  // namespace qkv::tokenizer_detail

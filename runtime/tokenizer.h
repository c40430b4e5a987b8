// GPT-2's byte-level BPE tokenizer, read from a Hugging Face model folder's
// vocab.json and merges.txt: text to the token ids a GPT-2 checkpoint was
// trained on, and back (samples/finetune fine-tunes an imported GPT-2 on a
// text file with it).
//
// Encoding gives the ids transformers' GPT2Tokenizer and GPT2TokenizerFast
// give (tests/interop checks it against theirs on ASCII, Latin, Greek, CJK,
// emoji, digits, contractions and runs of whitespace):
//  1. "<|endoftext|>" in the text is that token, when the vocabulary has it
//     (as the fast tokenizer's added tokens are); the pieces between are
//     encoded on their own.
//  2. Pre-tokenizing splits each piece as GPT-2's pattern does: the
//     contractions 's 't 're 've 'm 'll 'd; an optional space and a run of
//     letters, of numbers, or of anything else that is not whitespace; runs
//     of whitespace, leaving the last space of a run to the word after it.
//     Letters, numbers and whitespace are Unicode's (ICU's general category
//     L*, N* and the White_Space property). A byte that is not valid UTF-8
//     counts as one "anything else" character.
//  3. Each pre-token's UTF-8 bytes become GPT-2's printable characters (the
//     byte-to-unicode table), and merges.txt's pairs are applied lowest rank
//     first until none applies; each resulting symbol is a vocabulary entry.
// Decoding maps ids to their symbols and the symbols back to bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sharc::interop {

class Gpt2Tokenizer {
 public:
  // Reads FOLDER/vocab.json and FOLDER/merges.txt. Throws InteropError
  // (hf_config.h) naming the file, and the line of merges.txt, for a
  // missing file, malformed JSON, an id used twice or a merge whose result
  // is not in the vocabulary.
  static Gpt2Tokenizer load(const std::filesystem::path& folder);

  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes the ids stand for. Throws InteropError for an id outside the
  // vocabulary.
  std::string decode(std::span<const int32_t> ids) const;

  // One more than the largest id.
  int64_t vocab_size() const { return static_cast<int64_t>(symbols_.size()); }
  // "<|endoftext|>"'s id, when the vocabulary has it (GPT-2's document
  // separator and padding token).
  std::optional<int32_t> end_of_text() const { return end_of_text_; }
  // The files a copy of this tokenizer needs (vocab.json, merges.txt).
  const std::vector<std::filesystem::path>& files() const { return files_; }

 private:
  void encode_piece(std::string_view piece, std::unordered_map<std::string, std::vector<int32_t>>& cache,
                    std::vector<int32_t>& out) const;
  void bpe(const std::string& word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> ids_;   // symbol (byte-to-unicode UTF-8) -> id
  std::vector<std::string> symbols_;               // id -> symbol
  std::unordered_map<std::string, int32_t> ranks_;  // "left right" -> merge rank
  std::optional<int32_t> end_of_text_;
  std::vector<std::filesystem::path> files_;
};

}  // namespace sharc::interop

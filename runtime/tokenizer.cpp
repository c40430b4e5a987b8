// GPT-2's byte-level BPE (tokenizer.h): vocab.json and merges.txt read, the
// pre-tokenizing pattern as a scanner over code points, merges by rank.
#include "runtime/tokenizer.h"

#include <unicode/uchar.h>

#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/hf_config.h"

namespace sharc::interop {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kEndOfText = "<|endoftext|>";

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's byte-to-unicode table: the printable bytes (33-126, 161-172,
// 174-255) stand for themselves, the other 68 for U+0100 onwards in byte
// order, so every byte is a visible character and merges.txt can separate
// symbols with a space. As UTF-8 strings, and the way back.
struct ByteSymbols {
  std::string symbol[256];
  std::unordered_map<std::string, uint8_t> byte_of;
  ByteSymbols() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      symbol[b] = utf8(printable ? static_cast<char32_t>(b) : next++);
      byte_of[symbol[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteSymbols& byte_symbols() {
  static const ByteSymbols table;
  return table;
}

// One character of the text: where its bytes are, and what the pattern
// sees in it.
enum class Kind { kLetter, kNumber, kSpace, kOther };
struct Char {
  size_t offset, size;
  char32_t cp;  // 0xFFFFFFFF for a byte that is not valid UTF-8
  Kind kind;
};

Kind kind_of(char32_t cp) {
  if (cp == 0xFFFFFFFF) return Kind::kOther;
  const UChar32 c = static_cast<UChar32>(cp);
  if (u_isUWhiteSpace(c)) return Kind::kSpace;
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return Kind::kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return Kind::kNumber;
    default:
      return Kind::kOther;
  }
}

// The text's characters; a byte that does not start a valid UTF-8 sequence
// (or a sequence that is overlong, a surrogate or past U+10FFFF) is one
// character of its own.
std::vector<Char> characters(std::string_view s) {
  std::vector<Char> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t n = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    bool valid = n > 0 && i + n <= s.size();
    for (size_t k = 1; valid && k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      valid = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (valid && (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) valid = false;
    if (!valid) {
      n = 1;
      cp = 0xFFFFFFFF;
    }
    out.push_back({i, n, cp, kind_of(cp)});
    i += n;
  }
  return out;
}

// The length in characters of GPT-2's pre-token at c[i]: the first of the
// pattern's alternatives that matches there,
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t pre_token(const std::vector<Char>& c, size_t i) {
  const size_t n = c.size();
  if (c[i].cp == U'\'' && i + 1 < n) {
    const char32_t a = c[i + 1].cp;
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
    if (i + 2 < n) {
      const char32_t b = c[i + 2].cp;
      if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
    }
  }
  // An optional space, then a run of letters, of numbers, or of the rest.
  const size_t k = c[i].cp == U' ' && i + 1 < n && c[i + 1].kind != Kind::kSpace ? i + 1 : i;
  if (c[k].kind != Kind::kSpace) {
    size_t j = k;
    while (j < n && c[j].kind == c[k].kind) ++j;
    return j - i;
  }
  // Whitespace: all of it at the end of the text or before one character;
  // before a longer run's next word, all but its last character (which
  // the word's optional space, or a run of its own, takes).
  size_t j = i;
  while (j < n && c[j].kind == Kind::kSpace) ++j;
  return j == n || j - i == 1 ? j - i : j - i - 1;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw InteropError(p.string() + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Gpt2Tokenizer Gpt2Tokenizer::load(const fs::path& folder) {
  Gpt2Tokenizer t;
  const fs::path vocab_file = folder / "vocab.json", merges_file = folder / "merges.txt";
  for (const fs::path& f : {vocab_file, merges_file})
    if (!fs::is_regular_file(f))
      throw InteropError(f.string() + ": not found (sharc reads GPT-2's byte-level BPE tokenizer from vocab.json "
                                      "and merges.txt)");
  t.files_ = {vocab_file, merges_file};

  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_text(vocab_file));
  } catch (const nlohmann::json::exception& e) {
    throw InteropError(vocab_file.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (!vocab.is_object() || vocab.empty())
    throw InteropError(vocab_file.string() + ": not a JSON object of symbols and their ids");
  for (const auto& [symbol, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX)
      throw InteropError(vocab_file.string() + ": the id of \"" + symbol + "\" is " + id.dump() +
                         ", not an integer in [0, 2^31 - 1)");
    const auto value = id.get<int32_t>();
    if (static_cast<size_t>(value) >= t.symbols_.size()) t.symbols_.resize(value + 1);
    if (!t.symbols_[value].empty())
      throw InteropError(vocab_file.string() + ": id " + std::to_string(value) + " is both \"" +
                         t.symbols_[value] + "\" and \"" + symbol + "\"");
    t.symbols_[value] = symbol;
    t.ids_[symbol] = value;
  }
  for (int b = 0; b < 256; ++b)
    if (!t.ids_.contains(byte_symbols().symbol[b]))
      throw InteropError(vocab_file.string() + ": byte " + std::to_string(b) + " (\"" + byte_symbols().symbol[b] +
                         "\") has no id; a byte-level vocabulary holds all 256 bytes");
  if (const auto it = t.ids_.find(std::string(kEndOfText)); it != t.ids_.end()) t.end_of_text_ = it->second;

  std::istringstream merges(read_text(merges_file));
  std::string line;
  for (int number = 1; std::getline(merges, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    const std::string where = merges_file.string() + ":" + std::to_string(number);
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      throw InteropError(where + ": \"" + line + "\" is not two symbols separated by one space");
    const std::string merged = line.substr(0, space) + line.substr(space + 1);
    if (!t.ids_.contains(merged))
      throw InteropError(where + ": the merge \"" + line + "\" makes \"" + merged + "\", which " +
                         vocab_file.filename().string() + " has no id for");
    t.ranks_.emplace(line, static_cast<int32_t>(t.ranks_.size()));
  }
  return t;
}

void Gpt2Tokenizer::bpe(const std::string& word, std::vector<int32_t>& out) const {
  // The symbols of the word: its byte-to-unicode characters, one each.
  std::vector<std::string> parts;
  for (size_t i = 0; i < word.size(); ++i) parts.push_back(byte_symbols().symbol[static_cast<uint8_t>(word[i])]);
  std::string key;
  while (parts.size() > 1) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      key.assign(parts[i]).append(" ").append(parts[i + 1]);
      if (const auto it = ranks_.find(key); it != ranks_.end() && it->second < best) best = it->second, at = i;
    }
    if (best == INT32_MAX) break;
    // Every occurrence of the best pair, left to right.
    const std::string left = parts[at], right = parts[at + 1];
    std::vector<std::string> merged;
    merged.reserve(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i + 1 < parts.size() && parts[i] == left && parts[i + 1] == right) {
        merged.push_back(left + right);
        ++i;
      } else {
        merged.push_back(std::move(parts[i]));
      }
    }
    parts = std::move(merged);
  }
  for (const std::string& p : parts) out.push_back(ids_.at(p));  // load() checked every byte and merge
}

void Gpt2Tokenizer::encode_piece(std::string_view piece,
                                 std::unordered_map<std::string, std::vector<int32_t>>& cache,
                                 std::vector<int32_t>& out) const {
  const std::vector<Char> chars = characters(piece);
  for (size_t i = 0; i < chars.size();) {
    const size_t len = pre_token(chars, i);
    const size_t begin = chars[i].offset, end = chars[i + len - 1].offset + chars[i + len - 1].size;
    std::string word(piece.substr(begin, end - begin));
    auto it = cache.find(word);
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      bpe(word, ids);
      it = cache.emplace(std::move(word), std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
    i += len;
  }
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  std::unordered_map<std::string, std::vector<int32_t>> cache;  // a text repeats its words
  size_t start = 0;
  while (start <= text.size()) {
    const size_t special = end_of_text_ ? text.find(kEndOfText, start) : std::string_view::npos;
    encode_piece(text.substr(start, special == std::string_view::npos ? std::string_view::npos : special - start),
                 cache, out);
    if (special == std::string_view::npos) break;
    out.push_back(*end_of_text_);
    start = special + kEndOfText.size();
  }
  return out;
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || symbols_[id].empty())
      throw InteropError("token id " + std::to_string(id) + " is not in the vocabulary (" + files_[0].string() +
                         ", " + std::to_string(vocab_size()) + " ids)");
    if (end_of_text_ && id == *end_of_text_) {
      out += kEndOfText;
      continue;
    }
    const std::string& symbol = symbols_[id];
    for (const Char& c : characters(symbol)) {
      const auto it = byte_symbols().byte_of.find(symbol.substr(c.offset, c.size));
      if (it == byte_symbols().byte_of.end())
        throw InteropError(files_[0].string() + ": the symbol of id " + std::to_string(id) + " (\"" + symbol +
                           "\") is not made of byte-level characters");
      out += static_cast<char>(it->second);
    }
  }
  return out;
}

}  // namespace sharc::interop

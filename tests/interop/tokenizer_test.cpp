// GPT-2's byte-level BPE tokenizer (runtime/tokenizer.h) against the ids
// transformers gives (fixtures/tokenizer/reference.json, made by
// make_fixtures.py, which also checked them against GPT-2's algorithm run
// with Python's regex module): contractions, whitespace runs, numbers,
// Latin, Greek, Cyrillic, CJK, emoji, combining marks, <|endoftext|>, and
// the whole GPL-3; and the errors for a broken tokenizer folder.
#include "runtime/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/hf_config.h"
#include "tests/common/error_log.h"

namespace {

namespace fs = std::filesystem;
using sharc::interop::Gpt2Tokenizer;
using sharc::interop::InteropError;

const fs::path kFixture = fs::path(SHARC_INTEROP_FIXTURES) / "tokenizer";
const fs::path kScratch = fs::path(SHARC_INTEROP_OUT) / "tokenizer";

// `expr` throws InteropError whose message contains `text`; the message is
// logged for docs/guide/troubleshooting.md with the folders shown as DIR/.
#define EXPECT_TOKENIZER_ERROR(expr, text)                                                    \
  SHARC_EXPECT_ERROR_CONTAINS(expr, InteropError, text,                                   \
                              (std::vector<std::pair<std::string, std::string>>{               \
                                  {kScratch.string() + "/", "DIR/"}, {kFixture.string() + "/", "DIR/"}}))

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// A copy of the fixture's tokenizer in a folder of its own, to break.
fs::path copy_of_fixture(const std::string& name) {
  const fs::path d = kScratch / name;
  fs::remove_all(d);
  fs::create_directories(d);
  for (const char* f : {"vocab.json", "merges.txt"}) fs::copy_file(kFixture / f, d / f);
  return d;
}

TEST(Gpt2Tokenizer, GivesTransformersIds) {
  const Gpt2Tokenizer t = Gpt2Tokenizer::load(kFixture);
  EXPECT_EQ(t.vocab_size(), 512);
  ASSERT_TRUE(t.end_of_text().has_value());
  EXPECT_EQ(*t.end_of_text(), 0);
  const nlohmann::json reference = nlohmann::json::parse(read(kFixture / "reference.json"));
  ASSERT_EQ(reference["cases"].size(), 15u);
  for (const auto& c : reference["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"];
    const std::vector<int32_t> got = t.encode(text);
    EXPECT_EQ(got, want) << "text: " << text.substr(0, 60);
    EXPECT_EQ(t.decode(got), text);
  }
  // The last case is the GPL-3, the text the tokenizer was trained on.
  EXPECT_EQ(reference["cases"].back()["ids"].size(), 15149u);
}

TEST(Gpt2Tokenizer, KeepsBytesThatAreNotUtf8) {
  const Gpt2Tokenizer t = Gpt2Tokenizer::load(kFixture);
  // A lone continuation byte, a truncated sequence, an overlong '/', a
  // surrogate: each a character of its own, and every byte comes back.
  const std::string text = "a\x80 b\xe2\x82 c\xc0\xaf d\xed\xa0\x80 e\xff";
  const std::vector<int32_t> ids = t.encode(text);
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_EQ(t.encode("a b"), (std::vector<int32_t>{t.encode("a")[0], t.encode(" b")[0]}));
}

TEST(Gpt2Tokenizer, RefusesAnIdOutsideTheVocabulary) {
  const Gpt2Tokenizer t = Gpt2Tokenizer::load(kFixture);
  const std::vector<int32_t> ids = {5, 512};
  EXPECT_TOKENIZER_ERROR(t.decode(ids),
                              "token id 512 is not in the vocabulary (" + (kFixture / "vocab.json").string() +
                                  ", 512 ids)");
}

TEST(Gpt2Tokenizer, NamesAMissingFile) {
  const fs::path d = copy_of_fixture("no_merges");
  fs::remove(d / "merges.txt");
  EXPECT_TOKENIZER_ERROR(Gpt2Tokenizer::load(d),
                              (d / "merges.txt").string() +
                                  ": not found (sharc reads GPT-2's byte-level BPE tokenizer from vocab.json and "
                                  "merges.txt)");
}

TEST(Gpt2Tokenizer, NamesTheLineOfABadMerge) {
  const fs::path d = copy_of_fixture("bad_merge");
  write(d / "merges.txt", "#version: 0.2\nĠ t\nq z\n");
  EXPECT_TOKENIZER_ERROR(Gpt2Tokenizer::load(d),
                              (d / "merges.txt").string() +
                                  ":3: the merge \"q z\" makes \"qz\", which vocab.json has no id for");
  write(d / "merges.txt", "#version: 0.2\nĠt\n");
  EXPECT_TOKENIZER_ERROR(Gpt2Tokenizer::load(d),
                              (d / "merges.txt").string() + ":2: \"Ġt\" is not two symbols separated by one space");
}

TEST(Gpt2Tokenizer, RefusesAVocabularyWithoutEveryByte) {
  const fs::path d = copy_of_fixture("no_byte");
  write(d / "vocab.json", R"({"a": 0, "b": 1})");
  EXPECT_TOKENIZER_ERROR(Gpt2Tokenizer::load(d),
                              (d / "vocab.json").string() +
                                  ": byte 0 (\"Ā\") has no id; a byte-level vocabulary holds all 256 bytes");
  write(d / "vocab.json", R"({"a": 0, "b": 0})");
  EXPECT_TOKENIZER_ERROR(Gpt2Tokenizer::load(d),
                              (d / "vocab.json").string() + ": id 0 is both \"a\" and \"b\"");
  write(d / "vocab.json", R"({"a": 0, "b": )");
  EXPECT_TOKENIZER_ERROR(Gpt2Tokenizer::load(d), (d / "vocab.json").string() + ": not valid JSON");
  write(d / "vocab.json", R"({"a": -1})");
  EXPECT_TOKENIZER_ERROR(Gpt2Tokenizer::load(d),
                              (d / "vocab.json").string() + ": the id of \"a\" is -1, not an integer in [0, 2^31 - 1)");
}

}  // namespace

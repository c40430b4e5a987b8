// The safetensors writer and reader (runtime/safetensors.h): a round trip
// with metadata and the reference layout (8-byte little-endian header
// length, JSON, 8-byte aligned data), byte-range reads counted, and each
// malformed file refused with the file and the tensor named. The checkpoint
// index parser's refusals are here too.
#include "runtime/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/checkpoint.h"
#include "tests/common/error_log.h"

namespace sharc::rt {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() { return fs::temp_directory_path() / ("sharc_safetensors_test_" + std::to_string(::getpid())); }

fs::path temp_file(const std::string& name) {
  fs::create_directories(temp_dir());
  return temp_dir() / name;
}

// e.what(), logged for docs/guide/troubleshooting.md (the test's folder
// shown there as DIR).
std::string logged(const std::exception& e) {
  return sharc::testing::log_error_message(e.what(), {{temp_dir().string() + "/", "DIR/"}});
}

// A file of the given header text and `data` bytes after it.
fs::path raw_file(const std::string& name, const std::string& header, size_t data) {
  const fs::path p = temp_file(name);
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header + std::string(data, '\x01');
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

std::string error_of(const fs::path& p) {
  try {
    SafetensorsFile f(p);
  } catch (const SafetensorsError& e) {
    logged(e);
    return e.what();
  }
  ADD_FAILURE() << p << " was accepted";
  return "";
}

TEST(Safetensors, RoundTripsWithMetadataAndCountsTheBytesItReads) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<int32_t> b = {7, 8, 9};
  SafetensorsWriter w;
  w.add("layer/a", "F32", {2, 3}, std::as_bytes(std::span(a)));
  w.add("b", "I32", {3}, std::as_bytes(std::span(b)));
  w.set_metadata("step", "12");
  const fs::path p = temp_file("round_trip.safetensors");
  const std::vector<SafetensorsTensor> written = w.write(p);
  ASSERT_EQ(written.size(), 2u);
  EXPECT_EQ(written[0].begin % 8, 0u) << "data starts 8-byte aligned";
  EXPECT_EQ(written[1].begin, written[0].end);

  const SafetensorsFile f(p);
  EXPECT_EQ(f.metadata().at("step"), "12");
  EXPECT_EQ(f.tensor("layer/a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.tensor("b").dtype, "I32");
  EXPECT_EQ(f.bytes_read(), 0u) << "the header is not counted";
  const std::vector<std::byte> got = f.read_tensor("layer/a");
  EXPECT_EQ(std::memcmp(got.data(), a.data(), got.size()), 0);
  float second_row[3];
  f.read(f.tensor("layer/a").begin + 12, std::as_writable_bytes(std::span(second_row)));
  EXPECT_EQ(second_row[1], 7.0f);
  EXPECT_EQ(f.bytes_read(), 24u + 12u);
  EXPECT_NE(error_of(temp_file("none.safetensors")).find("none.safetensors: cannot open: No such file"),
            std::string::npos);
}

TEST(Safetensors, MalformedFilesAreRefusedByName) {
  struct Case {
    std::string name, header;
    size_t data;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"not_json", "{\"a\": ", 0, "the header is not valid JSON"},
      {"dtype", R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8,
       "tensor \"w\": dtype F64 is not one sharc reads (F32, BF16, I32)"},
      {"short", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
       "tensor \"w\": bytes [0, 16) are outside the 8 data bytes (truncated file?)"},
      {"shape", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "tensor \"w\": 8 bytes do not hold its shape of F32"},
      {"overlap",
       R"({"u":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "tensors \"u\" and \"w\" overlap"},
      {"no_offsets", R"({"w":{"dtype":"F32","shape":[2]}})", 8, "tensor \"w\": data_offsets is not [begin, end]"},
      {"metadata", R"({"__metadata__":{"k":3}})", 0, "__metadata__ \"k\" is not a string"},
  };
  for (const Case& c : cases) {
    const fs::path p = raw_file(c.name + ".safetensors", c.header, c.data);
    const std::string what = error_of(p);
    EXPECT_EQ(what.rfind(p.string() + ": ", 0), 0u) << "names the file: " << what;
    EXPECT_NE(what.find(c.message), std::string::npos) << c.name << ": " << what;
  }
  // A header length beyond the file.
  const fs::path p = temp_file("length.safetensors");
  std::ofstream(p, std::ios::binary) << std::string("\xff\xff\x00\x00\x00\x00\x00\x00{}", 10);
  EXPECT_NE(error_of(p).find("the header length 65535 is larger than the file"), std::string::npos);
}

TEST(Safetensors, TheWriterRefusesWhatItCannotDescribe) {
  const std::vector<float> a(4);
  SafetensorsWriter w;
  w.add("a", "F32", {4}, std::as_bytes(std::span(a)));
  try {
    w.add("a", "F32", {4}, std::as_bytes(std::span(a)));
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(logged(e), "safetensors: tensor \"a\" added twice");
  }
  try {
    w.add("b", "F32", {5}, std::as_bytes(std::span(a)));
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(logged(e), "safetensors: tensor \"b\": 16 bytes do not match its shape");
  }
}

TEST(CheckpointIndex, BadIndexesAreRefusedByName) {
  const std::string head =
      R"({"format":"sharc-checkpoint","version":1,"step":3,"mesh":{"axes":["data"],"sizes":[2]},"files":["p.safetensors"],)";
  auto shard = [](const std::string& offset, const std::string& shape, const std::string& bytes,
                  const std::string& file = "p.safetensors") {
    return R"({"file":")" + file + R"(","tensor":"w@0","offset":)" + offset + R"(,"shape":)" + shape +
           R"(,"bytes":)" + bytes + R"(,"crc32":1})";
  };
  struct Case {
    std::string tensors, message;
  };
  const std::vector<Case> cases = {
      {R"({"w":{"dtype":"F32","shape":[4],"shards":[)" + shard("[0]", "[2]", "[0,8]") + "]}}",
       "tensor \"w\": its shards cover 2 of its 4 elements"},
      {R"({"w":{"dtype":"F32","shape":[4],"shards":[)" + shard("[3]", "[2]", "[0,8]") + "]}}",
       "tensor \"w\": shard \"w@0\" lies outside the tensor"},
      {R"({"w":{"dtype":"F32","shape":[2],"shards":[)" + shard("[0]", "[2]", "[0,4]") + "]}}",
       "tensor \"w\": shard \"w@0\": its byte range does not hold its block"},
      {R"({"w":{"dtype":"F32","shape":[2],"shards":[)" + shard("[0]", "[2]", "[0,8]", "q.safetensors") + "]}}",
       "tensor \"w\": a shard names file \"q.safetensors\", which the index does not list"},
      {R"({"w":{"dtype":"F32","shape":[2],"shards":[)" + shard("[0]", "[2]", "[0,8]") + "," +
           shard("[0]", "[1]", "[8,12]") + "]}}",
       "tensor \"w\": shards \"w@0\" and \"w@0\" overlap"},
      {R"({"w":{"dtype":"U8","shape":[2],"shards":[]}})", "tensor \"w\": dtype U8 is not one sharc reads"},
      // Numbers that are not integers never reach a C++ integer conversion
      // (the fuzzer found a huge size parsed as a double).
      {R"({"w":{"dtype":"F32","shape":[5555555555555555555555555555554],"shards":[]}})",
       "tensor \"w\": a shape's size is not an integer: 5.555555555555556e+30"},
      {R"({"w":{"dtype":"F32","shape":[4],"shards":[)" + shard("[0.5]", "[2]", "[0,8]") + "]}}",
       "tensor \"w\": a shard's offset is not an integer: 0.5"},
      {R"({"w":{"dtype":"F32","shape":[2],"shards":[)" + shard("[0]", "[2]", "[0,1e40]") + "]}}",
       "tensor \"w\": a byte offset is not an integer: 1e+40"},
      {R"({"w":{"dtype":"F32","shape":[-2],"shards":[]}})", "tensor \"w\": a shape's size -2 is out of range"},
  };
  for (const Case& c : cases) {
    try {
      parse_checkpoint_index(head + R"("tensors":)" + c.tensors + "}", "ckpt/index.json");
      ADD_FAILURE() << "accepted: " << c.tensors;
    } catch (const CheckpointError& e) {
      const std::string what = logged(e);
      EXPECT_EQ(what.rfind("ckpt/index.json: ", 0), 0u) << what;
      EXPECT_NE(what.find(c.message), std::string::npos) << what;
    }
  }
  try {
    parse_checkpoint_index(R"({"format":"other"})", "x.json");
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_EQ(logged(e), "x.json: not a sharc checkpoint index (no \"format\": \"sharc-checkpoint\")");
  }
}

// Index version 2: its own CRC-32 (of its compact JSON without "crc32", keys
// sorted; this one was computed by Python's json and zlib, an independent
// implementation), per-chunk CRCs whose count must match the byte range,
// and a CRC per file header.
TEST(CheckpointIndex, Version2ChecksItsOwnCrcAndItsChunks) {
  const std::string index =
      R"({"crc32":3456791782,"files":["p.safetensors"],"format":"sharc-checkpoint",)"
      R"("headers":{"p.safetensors":{"bytes":80,"crc32":12345}},"mesh":{"axes":["data"],"sizes":[2]},)"
      R"("metadata":{"k":"v"},"step":3,"tensors":{"w":{"dtype":"F32","shape":[4],"shards":[)"
      R"({"bytes":[80,88],"chunk_bytes":4,"chunk_crc32":[5,6],"crc32":1,"file":"p.safetensors","offset":[0],)"
      R"("shape":[2],"tensor":"w@0"},{"bytes":[88,96],"chunk_bytes":8,"chunk_crc32":[7],"crc32":2,)"
      R"("file":"p.safetensors","offset":[2],"shape":[2],"tensor":"w@1"}],"spec":[["data"]]}},"version":2})";
  const CheckpointIndex parsed = parse_checkpoint_index(index, "ckpt/index.json");
  EXPECT_EQ(parsed.version, 2);
  EXPECT_EQ(parsed.headers.at("p.safetensors").bytes, 80u);
  EXPECT_EQ(parsed.headers.at("p.safetensors").crc32, 12345u);
  const CheckpointShard& w0 = parsed.tensors.at("w").shards.at(0);
  EXPECT_EQ(w0.chunk_bytes, 4u);
  EXPECT_EQ(w0.chunk_crc32, (std::vector<uint32_t>{5, 6}));

  auto refused = [](const std::string& text, const std::string& message) {
    try {
      parse_checkpoint_index(text, "ckpt/index.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const CheckpointError& e) {
      EXPECT_EQ(logged(e), "ckpt/index.json: " + message);
    }
  };
  // Any value changed, the CRC no longer holds: here the step.
  std::string other_step = index;
  other_step.replace(other_step.find("\"step\":3"), 8, "\"step\":4");
  refused(other_step, "the index fails its CRC-32 check: the file is corrupt");
  nlohmann::json j = nlohmann::json::parse(index);
  j.erase("crc32");
  refused(j.dump(), "the index has no \"crc32\" of its own (version 2 has one)");
  // With a right CRC (computed as the reader computes it), the chunk list
  // must still fit the byte range.
  auto with_crc = [](nlohmann::json v) {
    v.erase("crc32");
    const std::string text = v.dump();
    v["crc32"] = ::crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size()));
    return v.dump();
  };
  j["tensors"]["w"]["shards"][0]["chunk_crc32"] = {5};
  refused(with_crc(j), "tensor \"w\": shard \"w@0\" has 1 chunk CRCs, but its 8 bytes make 2 chunks of 4");
  j["tensors"]["w"]["shards"][0]["chunk_crc32"] = {5, 6};
  j["tensors"]["w"]["shards"][0]["chunk_bytes"] = 0;
  refused(with_crc(j), "tensor \"w\": a shard's chunk_bytes 0 is out of range");
  j["tensors"]["w"]["shards"][0]["chunk_bytes"] = 4;
  j["version"] = 3;
  refused(with_crc(j), "index version 3 is not one this sharc reads (1 to 2)");
}

}  // namespace
}  // namespace sharc::rt

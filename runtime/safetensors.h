// safetensors files (https://github.com/huggingface/safetensors, the format
// Hugging Face and PyTorch users exchange weights in): an 8-byte
// little-endian header length N, N bytes of JSON mapping each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end)} (offsets relative to the
// end of the header) plus an optional "__metadata__" map of strings, then
// the tensors' bytes, row-major, little-endian.
//
// The writer lays tensors out in the order they are added and returns where
// each one landed in the file, so a checkpoint index can name byte ranges.
// The reader validates everything before trusting it (header length within
// the file, JSON well formed, known dtypes, shapes matching their byte
// counts, ranges inside the data and not overlapping) and reads byte ranges
// with pread, counting the bytes it read: a restore reads only what it needs,
// and tests can prove it. Every error names the file, and the tensor when
// there is one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace sharc::rt {

// Thrown for a file that is not a valid safetensors file (or cannot be read
// or written); the message names the file and, where one is at fault, the
// tensor.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The dtypes sharc reads and writes ("F32", "BF16", "I32"); others are
// rejected by name.
size_t safetensors_dtype_size(const std::string& dtype);  // 0 when unknown

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // "F32", "BF16", "I32"
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the file (absolute)
};

// Writes `pieces` back to back into `path` (created or truncated), retrying
// short and interrupted writes, and fsyncs it before returning when `sync`.
// Throws SafetensorsError naming the file. The checkpoint index uses it too.
void write_file(const std::filesystem::path& path, std::span<const std::span<const std::byte>> pieces,
                bool sync = true);

class SafetensorsWriter {
 public:
  // `data` must stay valid until write(). Throws SafetensorsError on a
  // repeated name, an unknown dtype or a size that does not match the shape.
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           std::span<const std::byte> data);
  void set_metadata(const std::string& key, const std::string& value);
  // Writes the file (fsync'd before it returns when `sync`); returns every
  // tensor with its absolute byte range.
  std::vector<SafetensorsTensor> write(const std::filesystem::path& path, bool sync = true) const;

 private:
  struct Entry {
    SafetensorsTensor tensor;
    std::span<const std::byte> data;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsFile {
 public:
  // Opens and validates the header. Throws SafetensorsError.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Parses and validates a header (the JSON text) for a file of `file_size`
  // bytes whose data starts at `data_start`; exposed for the fuzz target.
  static std::vector<SafetensorsTensor> parse_header(const std::string& json, uint64_t data_start,
                                                     uint64_t file_size, const std::string& file,
                                                     std::map<std::string, std::string>* metadata);

  const std::filesystem::path& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The file's first 8 + N bytes as read: the header's length and its JSON
  // (a checkpoint records their CRC-32).
  const std::string& header_bytes() const { return header_bytes_; }
  // The tensor named `name`; throws SafetensorsError naming the file.
  const SafetensorsTensor& tensor(const std::string& name) const;
  const SafetensorsTensor* find(const std::string& name) const;

  // Reads `out.size()` bytes at absolute file offset `offset`; throws when
  // the file is shorter. Counts into bytes_read().
  void read(uint64_t offset, std::span<std::byte> out) const;
  // A whole tensor's bytes.
  std::vector<std::byte> read_tensor(const std::string& name) const;
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::string header_bytes_;
  mutable uint64_t bytes_read_ = 0;
};

}  // namespace sharc::rt

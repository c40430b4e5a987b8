// safetensors reading and writing; see safetensors.h. nlohmann-json parses
// and prints the header; the data moves with POSIX read/write so the writer
// can fsync and the reader can pread exactly the ranges it is asked for.
#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace sharc::rt {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit: 100 MB

[[noreturn]] void fail(const std::string& file, const std::string& why) {
  throw SafetensorsError(file + ": " + why);
}

std::string errno_text() {
  return std::strerror(errno);
}

// Elements of `shape`, or -1 when a dimension is negative or the product
// overflows.
int64_t elements_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "BF16") return 2;
  return 0;
}

void write_file(const std::filesystem::path& path, std::span<const std::span<const std::byte>> pieces,
                bool sync) {
  const std::string file = path.string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(file, "cannot create: " + errno_text());
  try {
    for (std::span<const std::byte> piece : pieces) {
      const std::byte* p = piece.data();
      size_t n = piece.size();
      while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0) {
          if (errno == EINTR) continue;
          fail(file, "write failed: " + errno_text());
        }
        p += w;
        n -= static_cast<size_t>(w);
      }
    }
    if (sync && ::fsync(fd) != 0) fail(file, "fsync failed: " + errno_text());
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail(file, "close failed: " + errno_text());
}

void SafetensorsWriter::add(const std::string& name, const std::string& dtype,
                            const std::vector<int64_t>& shape, std::span<const std::byte> data) {
  if (name.empty() || name == "__metadata__") throw SafetensorsError("safetensors: bad tensor name \"" + name + "\"");
  for (const Entry& e : entries_)
    if (e.tensor.name == name) throw SafetensorsError("safetensors: tensor \"" + name + "\" added twice");
  const size_t es = safetensors_dtype_size(dtype);
  if (es == 0) throw SafetensorsError("safetensors: tensor \"" + name + "\": dtype " + dtype + " is not F32, BF16 or I32");
  const int64_t n = elements_of(shape);
  if (n < 0 || static_cast<uint64_t>(n) * es != data.size())
    throw SafetensorsError("safetensors: tensor \"" + name + "\": " + std::to_string(data.size()) +
                           " bytes do not match its shape");
  Entry e;
  e.tensor.name = name;
  e.tensor.dtype = dtype;
  e.tensor.shape = shape;
  e.data = data;
  entries_.push_back(std::move(e));
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

std::vector<SafetensorsTensor> SafetensorsWriter::write(const std::filesystem::path& path, bool sync) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::vector<SafetensorsTensor> out;
  uint64_t at = 0;
  for (const Entry& e : entries_) {
    const uint64_t size = e.data.size();
    header[e.tensor.name] = {{"dtype", e.tensor.dtype}, {"shape", e.tensor.shape}, {"data_offsets", {at, at + size}}};
    out.push_back(e.tensor);
    out.back().begin = at;
    out.back().end = at + size;
    at += size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as the reference writer does
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  for (SafetensorsTensor& t : out) {
    t.begin += 8 + n;
    t.end += 8 + n;
  }

  std::vector<std::span<const std::byte>> pieces = {std::as_bytes(std::span(len)),
                                                    std::as_bytes(std::span(text.data(), text.size()))};
  for (const Entry& e : entries_) pieces.push_back(e.data);
  write_file(path, pieces, sync);
  return out;
}

std::vector<SafetensorsTensor> SafetensorsFile::parse_header(const std::string& text, uint64_t data_start,
                                                             uint64_t file_size, const std::string& file,
                                                             std::map<std::string, std::string>* metadata) {
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    fail(file, std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) fail(file, "the header is not a JSON object");
  if (data_start > file_size) fail(file, "the header runs past the end of the file");
  const uint64_t data_size = file_size - data_start;
  std::vector<SafetensorsTensor> tensors;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(file, "__metadata__ is not an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(file, "__metadata__ \"" + m.key() + "\" is not a string");
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor \"" + name + "\": ";
    if (!v.is_object()) fail(file, where + "its entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail(file, where + "no dtype");
    if (!v.contains("shape") || !v["shape"].is_array()) fail(file, where + "no shape");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      fail(file, where + "data_offsets is not [begin, end]");
    SafetensorsTensor t;
    t.name = name;
    t.dtype = v["dtype"].get<std::string>();
    const size_t es = safetensors_dtype_size(t.dtype);
    if (es == 0) fail(file, where + "dtype " + t.dtype + " is not one sharc reads (F32, BF16, I32)");
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail(file, where + "the shape holds something other than sizes");
      t.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(d.get<uint64_t>(), uint64_t{1} << 62)));
    }
    for (const json& o : v["data_offsets"])
      if (!o.is_number_unsigned()) fail(file, where + "data_offsets are not byte offsets");
    const uint64_t begin = v["data_offsets"][0].get<uint64_t>(), end = v["data_offsets"][1].get<uint64_t>();
    if (begin > end || end > data_size)
      fail(file, where + "bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ") are outside the " +
                     std::to_string(data_size) + " data bytes (truncated file?)");
    const int64_t n = elements_of(t.shape);
    if (n < 0 || static_cast<uint64_t>(n) > std::numeric_limits<uint64_t>::max() / es ||
        static_cast<uint64_t>(n) * es != end - begin)
      fail(file, where + std::to_string(end - begin) + " bytes do not hold its shape of " + t.dtype);
    t.begin = data_start + begin;
    t.end = data_start + end;
    tensors.push_back(std::move(t));
  }
  std::vector<const SafetensorsTensor*> by_offset;
  for (const SafetensorsTensor& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end && by_offset[i]->begin != by_offset[i]->end)
      fail(file, "tensors \"" + by_offset[i - 1]->name + "\" and \"" + by_offset[i]->name + "\" overlap");
  return tensors;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  const std::string file = path.string();
  fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(file, "cannot open: " + errno_text());
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(file, "cannot stat: " + errno_text());
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < 8) fail(file, "too short for a safetensors header (" + std::to_string(size) + " bytes)");
    unsigned char len[8];
    read(0, std::as_writable_bytes(std::span<unsigned char>(len, 8)));
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
    if (n > kMaxHeader || n > size - 8)
      fail(file, "the header length " + std::to_string(n) + " is larger than the file (" + std::to_string(size) +
                     " bytes) or the format's 100 MB limit");
    std::string text(n, '\0');
    read(8, std::as_writable_bytes(std::span<char>(text.data(), text.size())));
    tensors_ = parse_header(text, 8 + n, size, file, &metadata_);
    header_bytes_.assign(reinterpret_cast<const char*>(len), 8);
    header_bytes_ += text;
    bytes_read_ = 0;  // bytes_read() counts tensor data only
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  for (const SafetensorsTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  if (!t) fail(path_.string(), "no tensor \"" + name + "\"");
  return *t;
}

void SafetensorsFile::read(uint64_t offset, std::span<std::byte> out) const {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t r = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(path_.string(), "read failed: " + errno_text());
    }
    if (r == 0)
      fail(path_.string(), "the file ends at byte " + std::to_string(offset + done) + ", before " +
                               std::to_string(offset + out.size()) + " (truncated?)");
    done += static_cast<size_t>(r);
  }
  bytes_read_ += out.size();
}

std::vector<std::byte> SafetensorsFile::read_tensor(const std::string& name) const {
  const SafetensorsTensor& t = tensor(name);
  std::vector<std::byte> bytes(t.end - t.begin);
  read(t.begin, bytes);
  return bytes;
}

}  // namespace sharc::rt

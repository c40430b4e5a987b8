// Sharded checkpoints; see checkpoint.h. The index is JSON (nlohmann-json),
// the shards safetensors (safetensors.h), the checksums zlib's CRC-32.
#include "runtime/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>  // renameat2, RENAME_EXCHANGE (glibc, _GNU_SOURCE)
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "runtime/safetensors.h"

namespace sharc::rt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "sharc-checkpoint";
// Version 2 added the per-chunk CRCs and those of the file headers and of the
// index itself; version 1 indexes are still read.
constexpr int kVersion = 2;

[[noreturn]] void fail(const std::string& why) {
  throw CheckpointError(why);
}

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string process_file(int process) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "process-%05d.safetensors", process);
  return buf;
}

uint32_t crc32_of(const std::byte* data, size_t n) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}
uint32_t crc32_of(std::string_view text) {
  return crc32_of(reinterpret_cast<const std::byte*>(text.data()), text.size());
}

// The CRC-32 of every `chunk`-byte piece of [data, data + n) (the last one
// shorter), and of the whole, combined from them.
std::pair<uint32_t, std::vector<uint32_t>> chunk_crcs(const std::byte* data, uint64_t n, uint64_t chunk) {
  std::vector<uint32_t> crcs;
  uLong whole = ::crc32(0L, Z_NULL, 0);
  for (uint64_t at = 0; at < n; at += chunk) {
    const uint64_t len = std::min(chunk, n - at);
    crcs.push_back(crc32_of(data + at, len));
    whole = ::crc32_combine(whole, crcs.back(), static_cast<z_off_t>(len));
  }
  return {static_cast<uint32_t>(whole), std::move(crcs)};
}

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(p.string() + ": cannot open to fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail(p.string() + ": fsync failed: " + std::strerror(errno));
}

void write_text(const fs::path& p, const std::string& text) {
  const std::span<const std::byte> piece = std::as_bytes(std::span(text.data(), text.size()));
  try {
    write_file(p, std::span(&piece, 1));
  } catch (const SafetensorsError& e) {
    fail(e.what());
  }
}

[[noreturn]] void bad_index(const std::string& where, const std::string& why) {
  fail(where + ": " + why);
}

// An integer in [lo, hi], or a bad index: a float ("1e300"), a string or an
// out-of-range number never reaches a C++ integer conversion.
int64_t int_in(const json& v, int64_t lo, int64_t hi, const std::string& where, const std::string& what) {
  const std::string text = v.dump().substr(0, 40);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      bad_index(where, what + " " + text + " is out of range");
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) bad_index(where, what + " is not an integer: " + text);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad_index(where, what + " " + text + " is out of range");
  return x;
}

std::vector<int64_t> ints_in(const json& v, int64_t lo, int64_t hi, const std::string& where, const std::string& what) {
  if (!v.is_array()) bad_index(where, what + " is not a list");
  std::vector<int64_t> out;
  for (const json& e : v) out.push_back(int_in(e, lo, hi, where, what));
  return out;
}

std::string dtype_of(const TensorInfo& t) {
  if (t.dtype != "f32")
    fail("parameter \"" + std::string(t.name) + "\" is " + std::string(t.dtype) +
         "; checkpoints hold f32 parameters (sharc keeps master weights in f32)");
  return "F32";
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

// The index's own CRC-32: of its compact JSON without the "crc32" key (keys
// sorted, as nlohmann-json keeps them), so any change to a value shows.
uint32_t index_crc(json index) {
  index.erase("crc32");
  const std::string text = index.dump();
  return crc32_of(text);
}

}  // namespace

std::map<std::vector<int64_t>, std::vector<int>> distinct_blocks(const CheckpointTarget& target, const TensorInfo& t,
                                                                 const std::vector<int>& ranks) {
  std::map<std::vector<int64_t>, std::vector<int>> blocks;
  for (int r : ranks)
    if (target.holds ? target.holds(r, t.name) : target.shard(r, t.name) != nullptr)
      blocks[block_offset(t, target.mesh, r)].push_back(r);
  return blocks;
}

std::vector<std::string> exchange_or_fail(const CheckpointTarget& target, const std::function<std::string()>& part) {
  std::string mine;
  std::exception_ptr own;
  try {
    mine = part();
  } catch (const std::exception& e) {
    mine = std::string("error: ") + e.what();
    own = std::current_exception();
  }
  const std::vector<std::string> all = target.exchange ? target.exchange(mine) : std::vector<std::string>{mine};
  if (own) std::rethrow_exception(own);
  for (size_t p = 0; p < all.size(); ++p)
    if (all[p].rfind("error: ", 0) == 0) fail(all[p].substr(7) + " (on process " + std::to_string(p) + ")");
  return all;
}

fs::path save_checkpoint(const CheckpointTarget& target, const fs::path& dir, const SaveOptions& options) {
  if (options.step < 0) fail("save_checkpoint: negative step " + std::to_string(options.step));
  if (options.crc_chunk_bytes == 0 || options.crc_chunk_bytes > (uint64_t{1} << 40))
    fail("save_checkpoint: crc_chunk_bytes " + std::to_string(options.crc_chunk_bytes) +
         " is not from 1 to 2^40");
  const bool leader = target.process == 0;  // makes the folder, writes the index, publishes
  const std::string name = step_name(options.step);

  // 1. Process 0 prepares the temporary folder and tells the others its name.
  const std::string tmp_name = exchange_or_fail(target, [&]() -> std::string {
    if (!leader) return "";
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail(dir.string() + ": cannot create the checkpoint folder: " + ec.message());
    // Temporaries of saves that died (this job's or others').
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
      if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(e.path(), ec);
    const std::string tmp = ".tmp-" + name + "-" + std::to_string(::getpid());
    fs::create_directory(dir / tmp, ec);
    if (ec) fail((dir / tmp).string() + ": cannot create: " + ec.message());
    return tmp;
  })[0];
  const fs::path tmp = dir / tmp_name;

  // 2. Every process writes the distinct blocks whose lowest holder is one
  //    of its devices into its own file, and reports their shard entries.
  const std::string file = process_file(target.process);
  const std::vector<std::string> parts = exchange_or_fail(target, [&] {
    SafetensorsWriter writer;
    struct Pending {
      std::string path, tensor;
      std::vector<int64_t> offset;
      const float* data;
    };
    std::vector<Pending> pending;
    std::vector<int> all_ranks(static_cast<size_t>(target.mesh.num_devices()));
    for (int r = 0; r < target.mesh.num_devices(); ++r) all_ranks[static_cast<size_t>(r)] = r;
    const std::set<int> local(target.local_ranks.begin(), target.local_ranks.end());
    for (const TensorInfo& t : target.parameters) {
      for (const auto& [offset, holders] : distinct_blocks(target, t, all_ranks)) {
        const int rank = holders.front();
        if (!local.count(rank)) continue;
        const float* data = target.shard(rank, t.name);
        const std::string tensor = std::string(t.name) + "@" + std::to_string(rank);
        writer.add(tensor, dtype_of(t), t.local_shape,
                   std::as_bytes(std::span<const float>(data, static_cast<size_t>(t.local_elements()))));
        pending.push_back({std::string(t.name), tensor, offset, data});
      }
    }
    for (const auto& [k, v] : options.metadata) writer.set_metadata(k, v);
    const std::vector<SafetensorsTensor> written = writer.write(tmp / file);
    const SafetensorsFile back(tmp / file);  // its header, as a restore will read it
    const std::string& head = back.header_bytes();
    json shards = json::array();
    for (size_t i = 0; i < pending.size(); ++i) {
      const Pending& p = pending[i];
      const SafetensorsTensor& w = written[i];
      const auto [crc, chunks] =
          chunk_crcs(reinterpret_cast<const std::byte*>(p.data), w.end - w.begin, options.crc_chunk_bytes);
      shards.push_back({{"parameter", p.path},
                        {"shard", {{"file", file},
                                   {"tensor", p.tensor},
                                   {"offset", p.offset},
                                   {"shape", w.shape},
                                   {"bytes", {w.begin, w.end}},
                                   {"crc32", crc},
                                   {"chunk_bytes", options.crc_chunk_bytes},
                                   {"chunk_crc32", chunks}}}});
    }
    return json{{"header", {{"bytes", head.size()},
                            {"crc32", crc32_of(head)}}},
                {"shards", shards}}
        .dump();
  });

  // 3. Process 0 writes the index and publishes the folder; the others wait
  //    for it, so every process returns once the checkpoint is complete.
  const fs::path final_dir = dir / name;
  exchange_or_fail(target, [&]() -> std::string {
    if (!leader) return "";
    json tensors = json::object();
    for (const TensorInfo& t : target.parameters)
      tensors[std::string(t.name)] = {
          {"dtype", dtype_of(t)}, {"shape", t.shape}, {"spec", t.spec}, {"shards", json::array()}};
    std::vector<std::string> files;
    json headers = json::object();
    for (size_t p = 0; p < parts.size(); ++p) {
      files.push_back(process_file(static_cast<int>(p)));
      const json part = json::parse(parts[p]);
      headers[files.back()] = part.at("header");
      for (const json& s : part.at("shards"))
        tensors[s.at("parameter").get<std::string>()]["shards"].push_back(s.at("shard"));
    }
    json index = {{"format", kFormat},
                  {"version", kVersion},
                  {"step", options.step},
                  {"mesh", {{"axes", target.mesh.axis_names}, {"sizes", target.mesh.axis_sizes}}},
                  {"processes", parts.size()},
                  {"files", files},
                  {"headers", headers},
                  {"metadata", options.metadata},
                  {"tensors", tensors}};
    index["crc32"] = index_crc(index);
    write_text(tmp / "index.json", index.dump(1) + "\n");
    fsync_path(tmp);

    // Publish: rename into place, or, when step-N exists already, exchange
    // the two folders in one atomic renameat2 (the old copy then sits in the
    // temporary and is removed), so no instant lacks a complete step-N; then
    // make the rename durable.
    std::error_code ec;
    if (fs::exists(final_dir)) {
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0)
        fail(final_dir.string() + ": cannot replace the previous copy: " + std::strerror(errno));
      fsync_path(dir);
      fs::remove_all(tmp, ec);
    } else {
      fs::rename(tmp, final_dir, ec);
      if (ec) fail(final_dir.string() + ": cannot publish the checkpoint: " + ec.message());
      fsync_path(dir);
    }
    if (options.keep > 0) {
      std::vector<fs::path> all = list_checkpoints(dir);
      for (size_t i = 0; i + static_cast<size_t>(options.keep) < all.size(); ++i) fs::remove_all(all[i], ec);
    }
    return "";
  });
  return final_dir;
}

std::vector<fs::path> list_checkpoints(const fs::path& dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.size() == 13 && n.rfind("step-", 0) == 0 && fs::exists(e.path() / "index.json"))
      found.push_back(e.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(where + ": not valid JSON (" + e.what() + ")");
  }
  try {
    if (!j.is_object() || j.value("format", "") != kFormat) bad_index(where, "not a sharc checkpoint index (no \"format\": \"sharc-checkpoint\")");
    if (!j["version"].is_number_integer() || j["version"].get<int64_t>() < 1 || j["version"].get<int64_t>() > kVersion)
      bad_index(where, "index version " + j["version"].dump().substr(0, 40) + " is not one this sharc reads (1 to " +
                           std::to_string(kVersion) + ")");
    const int version = j["version"].get<int>();
    if (version >= 2) {
      if (!j.contains("crc32")) bad_index(where, "the index has no \"crc32\" of its own (version 2 has one)");
      const uint32_t crc = static_cast<uint32_t>(int_in(j["crc32"], 0, 0xffffffffLL, where, "the index's CRC-32"));
      if (crc != index_crc(j)) bad_index(where, "the index fails its CRC-32 check: the file is corrupt");
    }
    CheckpointIndex index;
    index.version = version;
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    index.step = int_in(j.at("step"), 0, kMax, where, "the step");
    const json& mesh = j.at("mesh");
    index.mesh.axis_names = mesh.at("axes").get<std::vector<std::string>>();
    for (int64_t size : ints_in(mesh.at("sizes"), 1, 1 << 20, where, "a mesh axis size"))
      index.mesh.axis_sizes.push_back(static_cast<int>(size));
    if (index.mesh.axis_names.size() != index.mesh.axis_sizes.size()) bad_index(where, "the mesh's axes and sizes differ in number");
    for (int size : index.mesh.axis_sizes)
      if (size < 1 || size > (1 << 20)) bad_index(where, "the mesh has an axis of size " + std::to_string(size));
    if (j.contains("metadata")) index.metadata = j["metadata"].get<std::map<std::string, std::string>>();
    index.files = j.at("files").get<std::vector<std::string>>();
    for (const std::string& f : index.files)
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") bad_index(where, "file name \"" + f + "\" is not a plain file name");
    if (version >= 2)
      for (const std::string& f : index.files) {
        const json& h = j.at("headers").at(f);
        index.headers[f] = {static_cast<uint64_t>(int_in(h.at("bytes"), 8, int64_t{1} << 40, where, "a header's size")),
                            static_cast<uint32_t>(int_in(h.at("crc32"), 0, 0xffffffffLL, where, "a header's CRC-32"))};
      }
    for (auto it = j.at("tensors").begin(); it != j.at("tensors").end(); ++it) {
      const std::string name = it.key();
      const std::string at = "tensor \"" + name + "\": ";
      const json& v = it.value();
      CheckpointTensor t;
      t.dtype = v.at("dtype").get<std::string>();
      const size_t es = safetensors_dtype_size(t.dtype);
      if (es == 0) bad_index(where, at + "dtype " + t.dtype + " is not one sharc reads (F32, BF16, I32)");
      t.shape = ints_in(v.at("shape"), 0, int64_t{1} << 40, where, at + "a shape's size");
      int64_t volume = 1;
      for (int64_t d : t.shape) {
        if (d < 0 || d > (int64_t{1} << 40)) bad_index(where, at + "shape " + shape_text(t.shape) + " has a bad size");
        volume = d == 0 ? 0 : (volume > (int64_t{1} << 50) / d ? -1 : volume * d);
        if (volume < 0) bad_index(where, at + "shape " + shape_text(t.shape) + " is too large");
      }
      int64_t covered = 0;
      for (const json& sj : v.at("shards")) {
        CheckpointShard sh;
        sh.file = sj.at("file").get<std::string>();
        if (std::find(index.files.begin(), index.files.end(), sh.file) == index.files.end())
          bad_index(where, at + "a shard names file \"" + sh.file + "\", which the index does not list");
        sh.tensor = sj.at("tensor").get<std::string>();
        sh.offset = ints_in(sj.at("offset"), 0, int64_t{1} << 40, where, at + "a shard's offset");
        sh.shape = ints_in(sj.at("shape"), 0, int64_t{1} << 40, where, at + "a shard's shape");
        if (sh.offset.size() != t.shape.size() || sh.shape.size() != t.shape.size())
          bad_index(where, at + "shard \"" + sh.tensor + "\" has the wrong rank");
        int64_t n = 1;
        for (size_t d = 0; d < t.shape.size(); ++d) {
          if (sh.offset[d] < 0 || sh.shape[d] < 0 || sh.offset[d] > t.shape[d] || sh.shape[d] > t.shape[d] - sh.offset[d])
            bad_index(where, at + "shard \"" + sh.tensor + "\" lies outside the tensor");
          n *= sh.shape[d];
        }
        const std::vector<int64_t> bytes = ints_in(sj.at("bytes"), 0, kMax, where, at + "a byte offset");
        if (bytes.size() != 2 || bytes[0] > bytes[1] ||
            static_cast<uint64_t>(bytes[1] - bytes[0]) != static_cast<uint64_t>(n) * es)
          bad_index(where, at + "shard \"" + sh.tensor + "\": its byte range does not hold its block");
        sh.begin = bytes[0];
        sh.end = bytes[1];
        sh.crc32 = static_cast<uint32_t>(int_in(sj.at("crc32"), 0, 0xffffffffLL, where, at + "a CRC-32"));
        const uint64_t size = sh.end - sh.begin;
        if (version == 1) {  // one CRC for the whole range
          sh.chunk_bytes = std::max<uint64_t>(size, 1);
          if (size > 0) sh.chunk_crc32 = {sh.crc32};
        } else {
          sh.chunk_bytes = static_cast<uint64_t>(
              int_in(sj.at("chunk_bytes"), 1, int64_t{1} << 40, where, at + "a shard's chunk_bytes"));
          const json& crcs = sj.at("chunk_crc32");
          const uint64_t want = (size + sh.chunk_bytes - 1) / sh.chunk_bytes;
          if (!crcs.is_array() || crcs.size() != want)
            bad_index(where, at + "shard \"" + sh.tensor + "\" has " +
                                 (crcs.is_array() ? std::to_string(crcs.size()) : std::string("no list of")) +
                                 " chunk CRCs, but its " + std::to_string(size) + " bytes make " +
                                 std::to_string(want) + " chunks of " + std::to_string(sh.chunk_bytes));
          for (const json& c : crcs)
            sh.chunk_crc32.push_back(static_cast<uint32_t>(int_in(c, 0, 0xffffffffLL, where, at + "a chunk CRC-32")));
        }
        for (const CheckpointShard& o : t.shards) {  // disjoint blocks
          bool overlap = true;
          for (size_t d = 0; d < t.shape.size(); ++d)
            overlap = overlap && sh.offset[d] < o.offset[d] + o.shape[d] && o.offset[d] < sh.offset[d] + sh.shape[d];
          if (overlap && n > 0) bad_index(where, at + "shards \"" + o.tensor + "\" and \"" + sh.tensor + "\" overlap");
        }
        covered += n;
        t.shards.push_back(std::move(sh));
      }
      if (covered != volume)
        bad_index(where, at + "its shards cover " + std::to_string(covered) + " of its " + std::to_string(volume) + " elements");
      index.tensors.emplace(name, std::move(t));
    }
    return index;
  } catch (const json::exception& e) {
    bad_index(where, std::string("malformed index (") + e.what() + ")");
  }
}

namespace {

// A contiguous piece of a saved block that a target block needs: `bytes`
// bytes from byte `src` of the saved block's range to `dst`.
struct Run {
  uint64_t src, bytes;
  std::byte* dst;
};

// Appends the runs of saved block `sh` that overlap the target block
// [offset, offset + shape), held at `out`, to `runs`: one per row of the
// last dimension in the overlap, in increasing `src` order.
void overlap_runs(const CheckpointShard& sh, const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                  size_t element_bytes, std::byte* out, std::vector<Run>& runs) {
  const size_t rank = shape.size();
  std::vector<int64_t> lo(rank), hi(rank);
  for (size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(offset[d], sh.offset[d]);
    hi[d] = std::min(offset[d] + shape[d], sh.offset[d] + sh.shape[d]);
    if (lo[d] >= hi[d]) return;
  }
  if (rank == 0) {
    runs.push_back({0, element_bytes, out});
    return;
  }
  // Strides of the saved block and of the target block.
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) {
    src_stride[d] = src_stride[d + 1] * sh.shape[d + 1];
    dst_stride[d] = dst_stride[d + 1] * shape[d + 1];
  }
  const int64_t run = hi[rank - 1] - lo[rank - 1];
  std::vector<int64_t> idx(lo.begin(), lo.end() - 1);  // over all but the last dimension
  for (;;) {
    int64_t src = lo[rank - 1] - sh.offset[rank - 1], dst = lo[rank - 1] - offset[rank - 1];
    for (size_t d = 0; d + 1 < rank; ++d) {
      src += (idx[d] - sh.offset[d]) * src_stride[d];
      dst += (idx[d] - offset[d]) * dst_stride[d];
    }
    runs.push_back({static_cast<uint64_t>(src) * element_bytes, static_cast<uint64_t>(run) * element_bytes,
                    out + static_cast<uint64_t>(dst) * element_bytes});
    size_t d = rank - 1;
    for (;;) {  // the next index, last dimension but one fastest
      if (d == 0) return;
      --d;
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
    }
  }
}

// Reads at most this much of a shard at a time (whole chunks, at least one).
constexpr uint64_t kReadPiece = uint64_t{1} << 24;

// Copies `runs` (disjoint, in increasing `src` order) of saved block `sh`
// (in `file`, at `file_path`): reads each chunk holding any of them once,
// checked against its CRC-32 before any byte of it is used. `parameter`
// names the tensor in errors.
void read_runs_checked(const SafetensorsFile& file, const fs::path& file_path, const CheckpointShard& sh,
                       const std::string& parameter, const std::vector<Run>& runs) {
  const uint64_t size = sh.end - sh.begin, cb = sh.chunk_bytes;
  // The chunks the runs touch, merged into spans [first, last].
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const Run& r : runs) {
    if (r.bytes == 0) continue;
    const uint64_t first = r.src / cb, last = (r.src + r.bytes - 1) / cb;
    if (!spans.empty() && first <= spans.back().second + 1)
      spans.back().second = std::max(spans.back().second, last);
    else
      spans.emplace_back(first, last);
  }
  const uint64_t per_piece = std::max<uint64_t>(1, kReadPiece / cb);
  std::vector<std::byte> buffer;
  size_t next = 0;  // the first run not yet copied whole
  for (const auto& [first, last] : spans) {
    for (uint64_t c0 = first; c0 <= last; c0 += per_piece) {
      const uint64_t c1 = std::min(last, c0 + per_piece - 1);
      const uint64_t begin = c0 * cb, end = std::min(size, (c1 + 1) * cb);
      buffer.resize(end - begin);
      file.read(sh.begin + begin, buffer);
      for (uint64_t c = c0; c <= c1; ++c) {
        const uint64_t b = c * cb - begin, e = std::min(end, (c + 1) * cb) - begin;
        if (crc32_of(buffer.data() + b, e - b) != sh.chunk_crc32[c])
          fail(file_path.string() + ": tensor \"" + sh.tensor + "\" (a shard of \"" + parameter +
               "\") fails its CRC-32 check: the file is corrupt (bytes [" + std::to_string(sh.begin + c * cb) +
               ", " + std::to_string(sh.begin + c * cb + (e - b)) + ") of the file)");
      }
      // Copy what the runs need of [begin, end); a run may go on in the
      // next piece.
      for (size_t i = next; i < runs.size() && runs[i].src < end; ++i) {
        const Run& r = runs[i];
        const uint64_t r_end = r.src + r.bytes;
        const uint64_t from = std::max(r.src, begin), to = std::min(r_end, end);
        if (from < to) std::memcpy(r.dst + (from - r.src), buffer.data() + (from - begin), to - from);
        if (r_end <= end && i == next) ++next;
      }
    }
  }
}

}  // namespace

RestoreResult restore_checkpoint(const CheckpointTarget& target, const fs::path& path) {
  // A local device's block of a parameter, read and checked, waiting for
  // every other block (on every process) to be read too.
  struct Staged {
    const TensorInfo* parameter;
    std::vector<int> holders;
    std::vector<float> block;
  };
  std::vector<Staged> staged;
  RestoreResult result;
  exchange_or_fail(target, [&]() -> std::string {
    fs::path step_dir = path;
    if (!fs::exists(path / "index.json")) {
      const std::vector<fs::path> all = list_checkpoints(path);
      if (all.empty()) fail(path.string() + ": no checkpoint here (no step-N folder with an index.json)");
      step_dir = all.back();
    }
    const fs::path index_file = step_dir / "index.json";
    std::ifstream in(index_file);
    if (!in) fail(index_file.string() + ": cannot open the checkpoint index");
    std::stringstream ss;
    ss << in.rdbuf();
    const CheckpointIndex index = parse_checkpoint_index(ss.str(), index_file.string());

    // The same model: the same parameters, dtypes and global shapes.
    std::set<std::string> wanted;
    for (const TensorInfo& t : target.parameters) {
      const std::string name(t.name);
      wanted.insert(name);
      auto it = index.tensors.find(name);
      if (it == index.tensors.end())
        fail(index_file.string() + ": no tensor \"" + name + "\", which the program has; is this checkpoint from "
             "another model?");
      if (it->second.shape != t.shape)
        fail(index_file.string() + ": tensor \"" + name + "\" is " + it->second.dtype + shape_text(it->second.shape) +
             " but the program's is " + std::string(t.dtype) + shape_text(t.shape));
      if (it->second.dtype != dtype_of(t))
        fail(index_file.string() + ": tensor \"" + name + "\" is " + it->second.dtype + ", the program's " +
             std::string(t.dtype));
    }
    for (const auto& [name, t] : index.tensors)
      if (!wanted.count(name))
        fail(index_file.string() + ": tensor \"" + name + "\" is not a parameter of the program; is this checkpoint "
             "from another model?");

    std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
    auto open = [&](const std::string& name) -> const SafetensorsFile& {
      auto& f = files[name];
      if (!f) {
        const fs::path p = step_dir / name;
        if (!fs::exists(p))
          fail(index_file.string() + ": names file " + name + ", which is missing from " + step_dir.string());
        f = std::make_unique<SafetensorsFile>(p);
        if (auto h = index.headers.find(name); h != index.headers.end()) {
          const std::string& head = f->header_bytes();
          if (head.size() != h->second.bytes ||
              crc32_of(head) != h->second.crc32)
            fail(p.string() + ": its header (tensor names and byte ranges) fails its CRC-32 check: the file is "
                 "corrupt");
        }
      }
      return *f;
    };
    result.dir = step_dir;
    result.step = index.step;
    result.metadata = index.metadata;
    for (const TensorInfo& t : target.parameters) {
      const CheckpointTensor& saved = index.tensors.at(std::string(t.name));
      // Each distinct block once (copied to every local device holding it
      // at the end); each saved shard read once for all of them.
      const size_t first = staged.size();
      std::vector<std::vector<int64_t>> offsets;
      for (const auto& [offset, holders] : distinct_blocks(target, t, target.local_ranks)) {
        staged.push_back({&t, holders, std::vector<float>(static_cast<size_t>(t.local_elements()))});
        offsets.push_back(offset);
      }
      for (const CheckpointShard& sh : saved.shards) {
        std::vector<Run> runs;
        for (size_t b = 0; b < offsets.size(); ++b)
          overlap_runs(sh, offsets[b], t.local_shape, sizeof(float),
                       reinterpret_cast<std::byte*>(staged[first + b].block.data()), runs);
        if (runs.empty()) continue;
        // The blocks are disjoint, so are their runs.
        std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.src < b.src; });
        const SafetensorsFile& f = open(sh.file);
        const SafetensorsTensor* st = f.find(sh.tensor);
        if (!st || st->begin != sh.begin || st->end != sh.end)
          fail((step_dir / sh.file).string() + ": tensor \"" + sh.tensor + "\" of \"" + std::string(t.name) +
               "\" is not where the index says");
        read_runs_checked(f, step_dir / sh.file, sh, std::string(t.name), runs);
      }
    }
    // Every file's header, also where no block is needed from it: each
    // file by one process (the restore is collective, so all learn of it).
    for (size_t i = 0; i < index.files.size(); ++i)
      if (static_cast<int>(i % static_cast<size_t>(std::max(target.processes, 1))) == target.process)
        open(index.files[i]);
    for (const auto& [name, f] : files) result.bytes_read += f->bytes_read();
    return "";
  });
  // Every process has read and checked all it needs: now, and only now, the
  // parameters change.
  for (const Staged& s : staged)
    for (int r : s.holders) std::copy(s.block.begin(), s.block.end(), target.mutable_shard(r, s.parameter->name));
  return result;
}

void export_parameters(const CheckpointTarget& target, const fs::path& file) {
  std::vector<std::vector<float>> values;
  values.reserve(target.parameters.size());
  SafetensorsWriter writer;
  for (const TensorInfo& t : target.parameters) {
    values.emplace_back(static_cast<size_t>(t.elements()));
    target.get(t.name, values.back());
    writer.add(std::string(t.name), dtype_of(t), t.shape, std::as_bytes(std::span<const float>(values.back())));
  }
  writer.set_metadata("format", "sharc-parameters");
  // get() gathered every parameter on every process; process 0 writes.
  exchange_or_fail(target, [&]() -> std::string {
    if (target.process == 0) writer.write(file);
    return "";
  });
}

void import_parameters(const CheckpointTarget& target, const fs::path& file) {
  const SafetensorsFile f(file);
  std::set<std::string> wanted;
  std::vector<std::vector<float>> values;
  for (const TensorInfo& t : target.parameters) {
    const std::string name(t.name);
    wanted.insert(name);
    const SafetensorsTensor* st = f.find(name);
    if (!st) fail(file.string() + ": no tensor \"" + name + "\", which the program has");
    if (st->shape != t.shape || st->dtype != dtype_of(t))
      fail(file.string() + ": tensor \"" + name + "\" is " + st->dtype + shape_text(st->shape) +
           " but the program's is " + std::string(t.dtype) + shape_text(t.shape));
    values.emplace_back(static_cast<size_t>(t.elements()));
    f.read(st->begin, std::as_writable_bytes(std::span<float>(values.back())));
  }
  for (const SafetensorsTensor& st : f.tensors())
    if (!wanted.count(st.name)) fail(file.string() + ": tensor \"" + st.name + "\" is not a parameter of the program");
  // Everything read: only now do the parameters change.
  for (size_t i = 0; i < target.parameters.size(); ++i) target.set(target.parameters[i].name, values[i]);
}

}  // namespace sharc::rt

// Sharded checkpoints of a generated program's parameters (optimizer state
// and the step count are parameters too, "opt/..."), restorable onto any
// mesh, and whole-parameter export/import as one plain safetensors file.
//
// A checkpoint is a folder <dir>/step-<8 digits>/ holding
//  - process-<5 digits>.safetensors, one per process: the blocks that
//    process saves, one tensor per distinct block ("dot1/kernel@3": the
//    block device 3 holds); a block held by several devices (replication) is
//    saved once, by the process of the lowest rank that holds it;
//  - index.json: format and version, the step, the mesh, the user's
//    metadata, and per parameter its dtype, global shape and spec and its
//    shards: file, tensor, offset of the block in the global tensor, block
//    shape, byte range in the file, the CRC-32 of those bytes and (index
//    version 2) the CRC-32 of every fixed-size chunk of them; also (version
//    2) the CRC-32 of every file's header and of the index itself ("crc32",
//    over the index's compact JSON without that key). So every byte a
//    restore relies on is checked: a flipped bit anywhere is refused.
//
// With several processes (an MpiWorld) saving is collective: every process
// calls save() alike; all of them write into one folder (a filesystem they
// share), and process 0 writes the index from the byte ranges and CRCs the
// others send it (World::all_gather_host), then publishes. An error on any
// process makes save() throw on all of them. Restoring is per process: each
// reads the blocks of its own devices.
//
// Saving is atomic: everything is written into <dir>/.tmp-step-N-<pid>/,
// fsync'd, and renamed to step-N (exchanged with it in one renameat2 when
// step N was saved before; then the folder is fsync'd), so a crash at any
// point leaves every earlier checkpoint intact and no half-written step-N;
// stale temporaries are removed by the next save, and only the last `keep`
// checkpoints are kept.
//
// Restoring reads the index, checks it against the program (every parameter
// present with its dtype and global shape, nothing extra), and gives every
// device its block: of each saved shard, the chunks holding the byte runs
// that this process's distinct blocks need, each read once with pread, and
// nothing else. Every chunk read has its CRC-32 checked, whatever the mesh restored onto
// (an index of version 1 has one CRC per shard: a shard read from is then
// read whole and checked). Restoring is all or nothing: every block is read
// and checked into staging memory (as much as this process's distinct
// blocks) before any parameter changes, and with several processes they
// agree first (it is collective, like saving), so after a failed restore,
// on any process, every program keeps the parameters it had. Every shard
// file's header is checked too, by one process each, even where no device
// needs a block of it. Errors name the file and the tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/mesh.h"
#include "runtime/program_info.h"

namespace sharc::rt {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What checkpointing sees of a program. checkpoint_target(program) makes
// one from any generated Program.
struct CheckpointTarget {
  MeshShape mesh;
  std::span<const TensorInfo> parameters;
  std::vector<int> local_ranks;  // the devices this process drives
  int process = 0;               // this process, of all that save together
  int processes = 1;             // how many save (and restore) together
  // Whether device `rank` (any, local or not) holds a block of `path` (not
  // every pipeline stage does). Unset: shard() is not null, which serves a
  // single process.
  std::function<bool(int rank, std::string_view path)> holds;
  // Local device `rank`'s block of parameter `path`, or nullptr when that
  // device holds none.
  std::function<const float*(int rank, std::string_view path)> shard;
  std::function<float*(int rank, std::string_view path)> mutable_shard;
  // Whole parameters (export/import); with several processes, collective.
  std::function<void(std::string_view path, std::span<float> out)> get;
  std::function<void(std::string_view path, std::span<const float> in)> set;
  // Every process's text, in process order (World::all_gather_host): how
  // processes agree on a save. Also a barrier. Unset: one process.
  std::function<std::vector<std::string>(const std::string& mine)> exchange;
};

template <class Program>
CheckpointTarget checkpoint_target(Program& p) {
  CheckpointTarget t;
  t.mesh = Program::mesh_shape();
  t.parameters = Program::parameters();
  t.local_ranks = p.local_ranks();
  t.process = p.world().process();
  t.processes = p.world().processes();
  t.holds = [](int rank, std::string_view path) { return Program::holds_parameter(rank, path); };
  t.exchange = [&p](const std::string& mine) { return p.world().all_gather_host(mine); };
  t.shard = [&p](int rank, std::string_view path) { return std::as_const(p).parameter_shard(rank, path); };
  t.mutable_shard = [&p](int rank, std::string_view path) { return p.parameter_shard(rank, path); };
  t.get = [&p](std::string_view path, std::span<float> out) { p.get_parameter(path, out); };
  t.set = [&p](std::string_view path, std::span<const float> in) { p.set_parameter(path, in); };
  return t;
}

// The distinct blocks of parameter `t` held by `ranks` (target.holds, or
// a non-null target.shard): offset -> the ranks holding that block,
// ascending (so the first is the lowest). What a process reads once for
// all its devices that hold the same block (restore, interop.h's import).
std::map<std::vector<int64_t>, std::vector<int>> distinct_blocks(const CheckpointTarget& target, const TensorInfo& t,
                                                                 const std::vector<int>& ranks);

// Every process's part of a collective step, through target.exchange: its
// result text, or its error as "error: <what>". When any process failed,
// all of them throw rather than wait: a process its own exception, the
// others a CheckpointError with the first failing process's message. Returns
// every process's text, in process order. (Saving, restoring and
// interop.h's import and export agree this way.)
std::vector<std::string> exchange_or_fail(const CheckpointTarget& target, const std::function<std::string()>& part);

struct SaveOptions {
  int64_t step = 0;  // names the checkpoint: step-<8 digits>
  int keep = 3;      // checkpoints kept after this one is written (0: all)
  // Free-form state a training loop needs back (data position, RNG seeds).
  std::map<std::string, std::string> metadata = {};
  // Every shard's bytes get a CRC-32 per chunk of this many bytes, so a
  // restore that reads part of a shard (onto another mesh) checks what it
  // reads: it reads whole chunks, at most two more per run than it needs.
  uint64_t crc_chunk_bytes = uint64_t{1} << 16;
};

struct RestoreResult {
  std::filesystem::path dir;  // the step-N folder restored
  int64_t step = 0;
  std::map<std::string, std::string> metadata;
  // Bytes read from shard files: the saved bytes the devices' blocks need,
  // rounded out to whole CRC chunks, each chunk read once. A restore that
  // fills every device of a mesh reads every saved byte exactly once.
  uint64_t bytes_read = 0;
};

// A checkpoint's index, parsed and validated (exposed for tools and the fuzz
// target): format and version known; (version 2) the index's own CRC-32
// right; the mesh well formed; every shard in a listed file, its block
// inside the tensor and its byte count matching its shape; a tensor's blocks
// disjoint and covering it exactly.
struct CheckpointShard {
  std::string file, tensor;
  std::vector<int64_t> offset, shape;  // the block in the global tensor
  uint64_t begin = 0, end = 0;         // byte range in `file`
  uint32_t crc32 = 0;                  // of the whole range
  // The range in chunks of chunk_bytes (the last one shorter), each with its
  // CRC-32. An index of version 1 has none: the whole range is one chunk.
  uint64_t chunk_bytes = 0;
  std::vector<uint32_t> chunk_crc32;
};
struct CheckpointTensor {
  std::string dtype;  // "F32"
  std::vector<int64_t> shape;
  std::vector<CheckpointShard> shards;
};
// A shard file's first bytes (its header's length and JSON) and their
// CRC-32 (index version 2).
struct CheckpointFileHeader {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};
struct CheckpointIndex {
  int version = 0;
  int64_t step = 0;
  MeshShape mesh;
  std::map<std::string, std::string> metadata;
  std::vector<std::string> files;
  std::map<std::string, CheckpointFileHeader> headers;  // by file; empty in version 1
  std::map<std::string, CheckpointTensor> tensors;
};
// Throws CheckpointError naming `where` (the index file) and the tensor at
// fault.
CheckpointIndex parse_checkpoint_index(const std::string& json_text, const std::string& where);

// Writes step `options.step` under `dir` (created if missing); returns the
// step-N folder. Throws CheckpointError.
std::filesystem::path save_checkpoint(const CheckpointTarget& target, const std::filesystem::path& dir,
                                      const SaveOptions& options);
// Complete checkpoints under `dir`, oldest first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir);
// Restores `path`: a step-N folder, or a folder of them (the latest is
// taken). With several processes, collective: every process calls it alike.
// Throws CheckpointError (SafetensorsError for a shard file that is not
// valid safetensors); the parameters are then as they were.
RestoreResult restore_checkpoint(const CheckpointTarget& target, const std::filesystem::path& path);

// Every parameter whole, under its path, as one safetensors file (F32),
// readable by Python's safetensors package; and back. Importing checks and
// reads every tensor before it sets any parameter.
void export_parameters(const CheckpointTarget& target, const std::filesystem::path& file);
void import_parameters(const CheckpointTarget& target, const std::filesystem::path& file);

template <class Program>
std::filesystem::path save(Program& program, const std::filesystem::path& dir, const SaveOptions& options = {}) {
  return save_checkpoint(checkpoint_target(program), dir, options);
}
template <class Program>
RestoreResult restore(Program& program, const std::filesystem::path& path) {
  return restore_checkpoint(checkpoint_target(program), path);
}

}  // namespace sharc::rt

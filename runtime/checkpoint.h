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
//    shape, byte range in the file, CRC-32 of those bytes.
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
// device its block: for each distinct block, the byte runs of the saved
// shards that overlap it, read with pread, and nothing else. A shard read
// whole has its CRC-32 checked. Errors name the file and the tensor.
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
  t.holds = [](int rank, std::string_view path) { return Program::holds_parameter(rank, path); };
  t.exchange = [&p](const std::string& mine) { return p.world().all_gather_host(mine); };
  t.shard = [&p](int rank, std::string_view path) { return std::as_const(p).parameter_shard(rank, path); };
  t.mutable_shard = [&p](int rank, std::string_view path) { return p.parameter_shard(rank, path); };
  t.get = [&p](std::string_view path, std::span<float> out) { p.get_parameter(path, out); };
  t.set = [&p](std::string_view path, std::span<const float> in) { p.set_parameter(path, in); };
  return t;
}

struct SaveOptions {
  int64_t step = 0;  // names the checkpoint: step-<8 digits>
  int keep = 3;      // checkpoints kept after this one is written (0: all)
  // Free-form state a training loop needs back (data position, RNG seeds).
  std::map<std::string, std::string> metadata = {};
};

struct RestoreResult {
  std::filesystem::path dir;  // the step-N folder restored
  int64_t step = 0;
  std::map<std::string, std::string> metadata;
  uint64_t bytes_read = 0;  // tensor bytes read from shard files
};

// A checkpoint's index, parsed and validated (exposed for tools and the fuzz
// target): format and version known; the mesh well formed; every shard in a
// listed file, its block inside the tensor and its byte count matching its
// shape; a tensor's blocks disjoint and covering it exactly.
struct CheckpointShard {
  std::string file, tensor;
  std::vector<int64_t> offset, shape;  // the block in the global tensor
  uint64_t begin = 0, end = 0;         // byte range in `file`
  uint32_t crc32 = 0;
};
struct CheckpointTensor {
  std::string dtype;  // "F32"
  std::vector<int64_t> shape;
  std::vector<CheckpointShard> shards;
};
struct CheckpointIndex {
  int64_t step = 0;
  MeshShape mesh;
  std::map<std::string, std::string> metadata;
  std::vector<std::string> files;
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
// taken). Throws CheckpointError.
RestoreResult restore_checkpoint(const CheckpointTarget& target, const std::filesystem::path& path);

// Every parameter whole, under its path, as one safetensors file (F32),
// readable by Python's safetensors package; and back.
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

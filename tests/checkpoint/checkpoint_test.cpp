// Sharded checkpoints (runtime/checkpoint.h) of the MLP classifier's
// generated training programs (samples/mlp_classifier, f32 AdamW):
//  - resume on the same mesh is bitwise exact: 5 steps, save, restore into
//    a fresh program, 5 more steps equal 10 uninterrupted ones bit for bit;
//  - restore onto other meshes (fsdp=8, model=8, and the pipelined program on
//    pipe=2) gives every parameter exactly the saved values; training on is
//    bit for bit the run that got the same values by set_parameter, and its
//    losses stay within 1e-6 of the run that never left data=4,model=2;
//  - a process driving one device reads that device's blocks, rounded out
//    to whole CRC chunks, and nothing else;
//  - keep-last-K, and no temporaries left behind;
//  - a saving process killed (SIGKILL) at 24 random points never leaves the
//    previous checkpoint unloadable;
//  - corrupt or foreign checkpoints fail with the file and the tensor named;
//    a flipped bit anywhere in a checkpoint (shard data, shard header,
//    index) is refused on every restore path (the mesh that saved it,
//    fsdp=8, model=8, the pipelined program, one device of fsdp=8, an index
//    of version 1), and every failed restore leaves the program's
//    parameters bit for bit as they were;
//  - whole-parameter export/import round trips onto another mesh.
#include "runtime/checkpoint.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mlp_train_data4_model2.h"
#include "mlp_train_fsdp8.h"
#include "mlp_train_model8.h"
#include "mlp_train_pipe2.h"
#include "runtime/safetensors.h"
#include "runtime/thread_world.h"
#include "tests/common/error_log.h"

namespace sharc::rt {
namespace {

namespace fs = std::filesystem;

// `expr` throws `Type` whose message contains `text`; the message is logged
// for docs/guide/troubleshooting.md, its test folder shown as DIR.
#define EXPECT_ERROR_CONTAINS(expr, Type, text) SHARC_EXPECT_ERROR_CONTAINS(expr, Type, text, log_replacements())

namespace base = sharc_gen::mlp_train_data4_model2;

constexpr uint64_t kSeed = 7;

// This process's folder of test checkpoints.
fs::path test_root() {
  return fs::temp_directory_path() / ("sharc_checkpoint_test_" + std::to_string(::getpid()));
}

std::vector<std::pair<std::string, std::string>> log_replacements() { return {{test_root().string() + "/", "DIR/"}}; }

// A fresh folder under the test's temporary directory.
fs::path fresh_dir(const std::string& name) {
  const fs::path p = test_root() / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// A generated training program with its own world.
template <class Program>
struct Trainer {
  ThreadWorld world{Program::mesh_shape()};
  Program program{world};

  explicit Trainer(uint64_t seed) { program.init(seed); }

  // One AdamW step on batch `step` (deterministic synthetic images and
  // labels); returns the loss.
  float step(int step) {
    const TensorInfo& images = Program::input_info("images");
    std::vector<float> x(static_cast<size_t>(images.elements())), y(static_cast<size_t>(images.shape[0]));
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>((i * 7 + step * 3) % 10);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i) * (1 + step % 5) + y[i / 784]));
    float loss = 0, grad_norm = 0, lr = 0, accuracy = 0;
    typename Program::Inputs in;
    in.images = x.data();
    in.labels = y.data();
    typename Program::Outputs out;
    out.loss = &loss;
    out.grad_norm = &grad_norm;
    out.lr = &lr;
    out.accuracy = &accuracy;
    program.step(in, out);
    return loss;
  }

  std::map<std::string, std::vector<float>> parameters() const {
    std::map<std::string, std::vector<float>> p;
    for (const TensorInfo& t : Program::parameters()) {
      std::vector<float> v(static_cast<size_t>(t.elements()));
      program.get_parameter(t.name, v);
      p[std::string(t.name)] = std::move(v);
    }
    return p;
  }
};

TEST(Checkpoint, ResumeOnTheSameMeshIsBitwiseExact) {
  Trainer<base::Program> straight(kSeed);
  std::vector<float> losses;
  for (int s = 0; s < 10; ++s) losses.push_back(straight.step(s));

  const fs::path dir = fresh_dir("same_mesh");
  {
    Trainer<base::Program> first(kSeed);
    for (int s = 0; s < 5; ++s) EXPECT_EQ(first.step(s), losses[s]);
    save(first.program, dir, {.step = 5, .keep = 2, .metadata = {{"next_batch", "5"}}});
  }
  Trainer<base::Program> resumed(kSeed + 1);  // other initial values, all overwritten
  const RestoreResult r = restore(resumed.program, dir);
  EXPECT_EQ(r.step, 5);
  EXPECT_EQ(r.metadata.at("next_batch"), "5");
  EXPECT_EQ(r.dir.filename(), "step-00000005");
  for (int s = 5; s < 10; ++s) EXPECT_EQ(resumed.step(s), losses[s]) << "step " << s;
  const auto want = straight.parameters(), got = resumed.parameters();
  for (const auto& [name, v] : want) EXPECT_EQ(got.at(name), v) << name;
}

// Largest |a - b| relative to the largest |b| over all parameters.
double max_rel_error(const std::map<std::string, std::vector<float>>& a,
                     const std::map<std::string, std::vector<float>>& b) {
  double worst = 0;
  for (const auto& [name, want] : b) {
    double scale = 1e-30, diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
      diff = std::max(diff, std::fabs(static_cast<double>(a.at(name)[i]) - want[i]));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

template <class Program>
void restore_elsewhere_and_continue(const fs::path& dir, const std::map<std::string, std::vector<float>>& saved,
                                    const std::vector<float>& losses,
                                    const std::map<std::string, std::vector<float>>& final_params) {
  Trainer<Program> t(kSeed + 2);
  const RestoreResult r = restore(t.program, dir);
  const auto restored = t.parameters();
  ASSERT_EQ(restored.size(), saved.size());
  for (const auto& [name, v] : saved) EXPECT_EQ(restored.at(name), v) << name << ": restored values differ";
  // Every element of every parameter, read once (the blocks of the new mesh
  // tile each tensor; replicated blocks are read once and copied).
  uint64_t global = 0;
  for (const TensorInfo& p : Program::parameters()) global += p.bytes();
  EXPECT_EQ(r.bytes_read, global);
  // The same values handed over whole (set_parameter), with no checkpoint
  // in between: the restored run must be the same run, bit for bit.
  Trainer<Program> handed(kSeed + 3);
  for (const auto& [name, v] : saved) handed.program.set_parameter(name, v);
  for (int s = 5; s < 10; ++s) {
    const float loss = t.step(s);
    EXPECT_EQ(loss, handed.step(s)) << "step " << s;
    // Against the run that stayed on data=4,model=2: other meshes sum in
    // other orders, so the losses agree to rounding...
    EXPECT_NEAR(loss, losses[s], 1e-6 * std::fabs(losses[s])) << "step " << s;
  }
  EXPECT_EQ(t.parameters(), handed.parameters());
  // ... and the parameters to a few ulps of float after AdamW's
  // normalisation, which amplifies rounding where gradients are tiny
  // (measured: at most 4.4e-6 of a tensor's largest value on a machine whose
  // OpenBLAS runs AVX2 kernels, 1.6e-5 where it runs AVX-512 ones: the GEMM
  // kernels sum in machine-dependent orders).
  EXPECT_LE(max_rel_error(t.parameters(), final_params), 5e-5);
}

TEST(Checkpoint, RestoresOntoOtherMeshesAndTrainsOn) {
  Trainer<base::Program> straight(kSeed);
  std::vector<float> losses;
  for (int s = 0; s < 10; ++s) losses.push_back(straight.step(s));
  const fs::path dir = fresh_dir("other_meshes");
  Trainer<base::Program> first(kSeed);
  for (int s = 0; s < 5; ++s) first.step(s);
  save(first.program, dir, {.step = 5});
  const auto saved = first.parameters();
  const auto final_params = straight.parameters();
  {
    SCOPED_TRACE("fsdp=8");
    restore_elsewhere_and_continue<sharc_gen::mlp_train_fsdp8::Program>(dir, saved, losses, final_params);
  }
  {
    SCOPED_TRACE("model=8");
    restore_elsewhere_and_continue<sharc_gen::mlp_train_model8::Program>(dir, saved, losses, final_params);
  }
  {
    SCOPED_TRACE("pipe=2 (pipelined program)");
    restore_elsewhere_and_continue<sharc_gen::mlp_train_pipe2::Program>(dir, saved, losses, final_params);
  }
}

CheckpointIndex read_index(const fs::path& step) {
  std::ifstream in(step / "index.json");
  std::stringstream text;
  text << in.rdbuf();
  return parse_checkpoint_index(text.str(), (step / "index.json").string());
}

// A process that drives only device 3 of fsdp=8 reads device 3's blocks,
// rounded out to whole CRC chunks, and nothing more. Device 3's row blocks
// need one contiguous byte range of each saved shard they overlap, so at
// most two chunks more than the block per (block, shard) pair.
TEST(Checkpoint, ADeviceReadsOnlyItsOwnBlocks) {
  const fs::path dir = fresh_dir("one_device");
  Trainer<base::Program> first(kSeed);
  first.step(0);
  const fs::path step = save(first.program, dir, {.step = 1});
  Trainer<sharc_gen::mlp_train_fsdp8::Program> t(kSeed + 3);
  CheckpointTarget target = checkpoint_target(t.program);
  target.local_ranks = {3};
  const RestoreResult r = restore_checkpoint(target, dir);
  const CheckpointIndex index = read_index(step);
  uint64_t local = 0, pairs = 0, chunk = 0;
  for (const TensorInfo& p : sharc_gen::mlp_train_fsdp8::kParameters) {
    local += p.local_bytes();
    const std::vector<int64_t> off = block_offset(p, t.program.mesh_shape(), 3);
    for (const CheckpointShard& sh : index.tensors.at(std::string(p.name)).shards) {
      chunk = sh.chunk_bytes;
      bool overlap = true;
      for (size_t d = 0; d < off.size(); ++d)
        overlap = overlap && off[d] < sh.offset[d] + sh.shape[d] && sh.offset[d] < off[d] + p.local_shape[d];
      pairs += overlap ? 1 : 0;
    }
  }
  EXPECT_EQ(chunk, uint64_t{1} << 16);  // SaveOptions' default
  EXPECT_GE(r.bytes_read, local);
  EXPECT_LE(r.bytes_read, local + 2 * chunk * pairs);
  std::printf("device 3 of fsdp=8: its blocks %llu bytes, read %llu (%llu block-shard pairs)\n",
              static_cast<unsigned long long>(local), static_cast<unsigned long long>(r.bytes_read),
              static_cast<unsigned long long>(pairs));
  // Device 3's blocks hold the saved values.
  const auto saved = first.parameters();
  for (const TensorInfo& p : sharc_gen::mlp_train_fsdp8::kParameters) {
    const float* shard = t.program.parameter_shard(3, p.name);
    const std::vector<int64_t> off = block_offset(p, t.program.mesh_shape(), 3);
    const std::vector<float>& whole = saved.at(std::string(p.name));
    if (p.shape.size() == 2) {  // dense kernels: rows [off0, off0 + local0)
      for (int64_t i = 0; i < p.local_shape[0]; ++i)
        for (int64_t j = 0; j < p.local_shape[1]; ++j)
          ASSERT_EQ(shard[i * p.local_shape[1] + j], whole[(off[0] + i) * p.shape[1] + off[1] + j]) << p.name;
    }
  }
}

TEST(Checkpoint, KeepsTheLastKAndLeavesNoTemporaries) {
  const fs::path dir = fresh_dir("keep");
  Trainer<base::Program> t(kSeed);
  for (int s = 1; s <= 5; ++s) save(t.program, dir, {.step = s, .keep = 2});
  const std::vector<fs::path> all = list_checkpoints(dir);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].filename(), "step-00000004");
  EXPECT_EQ(all[1].filename(), "step-00000005");
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << e.path();
  // Saving a step again replaces it.
  save(t.program, dir, {.step = 5, .keep = 2});
  EXPECT_EQ(list_checkpoints(dir).size(), 2u);
}

// SIGKILL at random points of a save: the checkpoints that were complete
// before the save began stay loadable, with their values.
TEST(Checkpoint, AKilledSaveNeverLosesThePreviousCheckpoint) {
  const fs::path dir = fresh_dir("kill");
  Trainer<base::Program> t(kSeed);
  t.step(0);
  save(t.program, dir, {.step = 1, .keep = 0});
  const auto values = t.parameters();
  std::mt19937 rng(12345);
  int killed_mid_save = 0;
  for (int k = 0; k < 24; ++k) {
    const std::vector<fs::path> before = list_checkpoints(dir);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // the child saves over and over until it is killed
      for (int64_t s = 2;; ++s) {
        try {
          save(t.program, dir, {.step = s % 4 + 2, .keep = 0});  // steps 2..5, each replaced in turn
        } catch (...) {
          ::_exit(3);
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 40000)(rng)));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saving child exited by itself, status " << status;
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
      if (e.path().filename().string().rfind(".tmp", 0) == 0) ++killed_mid_save;
    // Every checkpoint listed now restores (each replaced step too), and
    // step 1, complete before any of this, is still there.
    const std::vector<fs::path> after = list_checkpoints(dir);
    ASSERT_FALSE(after.empty());
    EXPECT_EQ(after.front().filename(), "step-00000001");
    Trainer<base::Program> fresh(kSeed + 4);
    for (const fs::path& p : after) {
      ASSERT_NO_THROW(restore(fresh.program, p)) << p << " after kill " << k;
      EXPECT_EQ(fresh.parameters(), values) << p;
    }
    EXPECT_GE(after.size(), before.size()) << "a complete checkpoint disappeared";
  }
  std::printf("kill points: 24, of which %d left a half-written temporary behind\n", killed_mid_save);
  EXPECT_GT(killed_mid_save, 0) << "no kill landed inside a save; the test proves nothing";
}

// Writes a copy of `from` with `edit` applied to its bytes.
void edit_file(const fs::path& file, const std::function<void(std::string&)>& edit) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  edit(bytes);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(CheckpointErrors, CorruptTruncatedAndMissingFilesAreNamed) {
  Trainer<base::Program> t(kSeed);
  const fs::path dir = fresh_dir("corrupt");
  const fs::path step = save(t.program, dir, {.step = 1});
  const fs::path shard_file = step / "process-00000.safetensors";
  const fs::path copy = dir / "pristine.safetensors";
  fs::copy_file(shard_file, copy);

  // The shard stored last in the file: the edits below land in it.
  std::string last;
  {
    const SafetensorsFile f(shard_file);
    uint64_t end = 0;
    for (const SafetensorsTensor& st : f.tensors())
      if (st.end > end) {
        end = st.end;
        last = st.name;
      }
  }
  const std::string parameter = last.substr(0, last.find('@'));
  // A flipped byte in the data: the CRC-32 of the shard holding it fails.
  edit_file(shard_file, [](std::string& b) { b[b.size() - 3] ^= 0x10; });
  EXPECT_ERROR_CONTAINS(restore(t.program, dir), CheckpointError,
                        shard_file.string() + ": tensor \"" + last + "\" (a shard of \"" + parameter +
                            "\") fails its CRC-32 check: the file is corrupt");
  // Truncated: the header promises bytes the file no longer has.
  fs::copy_file(copy, shard_file, fs::copy_options::overwrite_existing);
  edit_file(shard_file, [](std::string& b) { b.resize(b.size() - 4); });
  EXPECT_ERROR_CONTAINS(restore(t.program, dir), SafetensorsError,
                        shard_file.string() + ": tensor \"" + last + "\": bytes [");
  EXPECT_ERROR_CONTAINS(restore(t.program, dir), SafetensorsError, "(truncated file?)");
  // The index names a file that is gone.
  fs::remove(shard_file);
  EXPECT_ERROR_CONTAINS(restore(t.program, dir), CheckpointError,
                        (step / "index.json").string() + ": names file process-00000.safetensors, which is missing");
}

// Every parameter's bytes, to compare bit for bit (NaN included).
using Bits = std::map<std::string, std::vector<uint32_t>>;
template <class Program>
Bits bits_of(const Trainer<Program>& t) {
  Bits out;
  for (const auto& [name, v] : t.parameters()) {
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    out[name] = std::move(b);
  }
  return out;
}

// One restore path: a program on some mesh, the parameters it had, and how
// it restores (all its devices, or one of them).
struct RestorePath {
  std::string name;
  std::function<void(const fs::path&)> restore;
  std::function<bool()> unchanged;  // since the last rebaseline()
  std::function<void()> rebaseline;
  int refused = 0, read_past = 0;   // flips refused; flips the path never read
};

template <class Program>
RestorePath restore_path(const std::string& name, uint64_t seed, std::vector<int> ranks = {}) {
  auto t = std::make_shared<Trainer<Program>>(seed);
  auto before = std::make_shared<Bits>(bits_of(*t));
  return {name,
          [t, ranks](const fs::path& dir) {
            CheckpointTarget target = checkpoint_target(t->program);
            if (!ranks.empty()) target.local_ranks = ranks;
            restore_checkpoint(target, dir);
          },
          [t, before] { return bits_of(*t) == *before; }, [t, before] { *before = bits_of(*t); }};
}

std::vector<RestorePath> every_restore_path() {
  std::vector<RestorePath> paths;
  paths.push_back(restore_path<base::Program>("data=4,model=2 (the mesh that saved it)", kSeed + 10));
  paths.push_back(restore_path<sharc_gen::mlp_train_fsdp8::Program>("fsdp=8", kSeed + 11));
  paths.push_back(restore_path<sharc_gen::mlp_train_model8::Program>("model=8", kSeed + 12));
  paths.push_back(restore_path<sharc_gen::mlp_train_pipe2::Program>("pipe=2 (pipelined)", kSeed + 13));
  paths.push_back(restore_path<sharc_gen::mlp_train_fsdp8::Program>("device 3 of fsdp=8", kSeed + 14, {3}));
  return paths;
}

// A flipped bit in `file` at `at` is refused by every path with a message
// that names `file` (and contains `also`), and no path's parameters change.
// A path that does not read the flipped byte at all (one device's restore)
// may succeed, but only if it reads nothing at that position.
void expect_refused(std::vector<RestorePath>& paths, const fs::path& dir, const fs::path& file, uint64_t at,
                    int bit, const std::string& also, bool one_device_may_skip = false) {
  edit_file(file, [&](std::string& b) { b[at] = static_cast<char>(b[at] ^ (1 << bit)); });
  for (RestorePath& p : paths) {
    std::string what;
    try {
      p.restore(dir);
    } catch (const CheckpointError& e) {
      what = e.what();
    } catch (const SafetensorsError& e) {
      what = e.what();
    }
    if (what.empty() && one_device_may_skip && p.name.rfind("device 3", 0) == 0) {
      ++p.read_past;  // it restored what it reads, none of it at `at`
      p.rebaseline();
      continue;
    }
    p.refused += what.empty() ? 0 : 1;
    EXPECT_FALSE(what.empty()) << p.name << ": restored a checkpoint with bit " << bit << " of byte " << at << " of "
                               << file << " flipped";
    EXPECT_NE(what.find(file.string()), std::string::npos) << p.name << ": the message: " << what;
    EXPECT_NE(what.find(also), std::string::npos) << p.name << ": the message: " << what;
    EXPECT_TRUE(p.unchanged()) << p.name << ": parameters changed by a restore that failed (byte " << at << ")";
  }
  edit_file(file, [&](std::string& b) { b[at] = static_cast<char>(b[at] ^ (1 << bit)); });
}

TEST(CheckpointErrors, AFlippedBitAnywhereIsRefusedOnEveryRestorePath) {
  Trainer<base::Program> t(kSeed);
  t.step(0);
  const fs::path dir = fresh_dir("flipped");
  // Small chunks, so that reads onto other meshes are partial.
  const fs::path step = save(t.program, dir, {.step = 1, .crc_chunk_bytes = 4096});
  const fs::path shard_file = step / "process-00000.safetensors";
  const fs::path index_file = step / "index.json";
  const CheckpointIndex index = read_index(step);
  std::vector<RestorePath> paths = every_restore_path();
  std::mt19937 rng(2024);
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi - 1)(rng); };
  auto bit = [&] { return static_cast<int>(pick(0, 8)); };

  // One random byte of every saved shard's data: refused by its CRC, naming
  // the shard, on every mesh. A one-device restore reads only some shards.
  int flips = 0;
  for (const auto& [name, tensor] : index.tensors)
    for (const CheckpointShard& sh : tensor.shards) {
      if (sh.end == sh.begin) continue;
      SCOPED_TRACE(sh.tensor);
      expect_refused(paths, dir, shard_file, pick(sh.begin, sh.end), bit(),
                     "tensor \"" + sh.tensor + "\" (a shard of \"" + name + "\") fails its CRC-32 check", true);
      ++flips;
    }
  // The shard file's header (its length and JSON: names, dtypes, shapes,
  // byte ranges), and the index.
  const SafetensorsFile f(shard_file);
  const uint64_t header = f.header_bytes().size();
  for (int k = 0; k < 12; ++k, ++flips) expect_refused(paths, dir, shard_file, pick(0, header), bit(), "");
  const uint64_t index_size = fs::file_size(index_file);
  for (int k = 0; k < 12; ++k, ++flips) expect_refused(paths, dir, index_file, pick(0, index_size), bit(), "");
  // The value whose silent change worried us most: a user's metadata.
  {
    std::ifstream in(index_file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    expect_refused(paths, dir, index_file, text.find("\"step\": 1") + 8, 1, "the index fails its CRC-32 check");
  }
  std::printf("%d flipped bits, each refused on every restore path that reads it:\n", flips + 1);
  for (const RestorePath& p : paths) std::printf("  %-42s refused %d, never read %d\n", p.name.c_str(), p.refused, p.read_past);
  const RestorePath& one = paths.back();
  // 25 refusals are the headers' and the index's; more are flips in the data it reads.
  EXPECT_GT(one.refused, 25) << "the one-device restore refused no flip in the shards' data";
  // And the pristine checkpoint still restores on every path.
  for (RestorePath& p : paths) EXPECT_NO_THROW(p.restore(dir)) << p.name;
}

// An index of version 1 (one CRC per shard, no header or index CRC) is still
// read: onto another mesh, a shard read from is read whole and checked.
TEST(Checkpoint, ReadsIndexVersion1) {
  Trainer<base::Program> t(kSeed);
  t.step(0);
  const fs::path dir = fresh_dir("version1");
  const fs::path step = save(t.program, dir, {.step = 1});
  const fs::path index_file = step / "index.json";
  {
    std::ifstream in(index_file);
    nlohmann::json j = nlohmann::json::parse(in);
    j["version"] = 1;
    j.erase("crc32");
    j.erase("headers");
    for (auto& [name, tensor] : j["tensors"].items())
      for (auto& sh : tensor["shards"]) {
        sh.erase("chunk_bytes");
        sh.erase("chunk_crc32");
      }
    std::ofstream(index_file) << j.dump(1) << "\n";
  }
  const auto saved = t.parameters();
  Trainer<sharc_gen::mlp_train_model8::Program> other(kSeed + 20);
  const RestoreResult r = restore(other.program, dir);
  EXPECT_EQ(other.parameters(), saved);
  uint64_t global = 0;
  for (const TensorInfo& p : base::kParameters) global += p.bytes();
  EXPECT_EQ(r.bytes_read, global);  // every shard read whole, once
  // A flipped bit in the last shard's data is refused onto another mesh too.
  const CheckpointIndex index = read_index(step);
  EXPECT_EQ(index.version, 1);
  const CheckpointShard* last = nullptr;
  std::string parameter;
  for (const auto& [name, tensor] : index.tensors)
    for (const CheckpointShard& sh : tensor.shards)
      if (!last || sh.end > last->end) {
        last = &sh;
        parameter = name;
      }
  ASSERT_NE(last, nullptr);
  std::vector<RestorePath> paths = every_restore_path();
  expect_refused(paths, dir, step / "process-00000.safetensors", last->end - 1, 3,
                 "tensor \"" + last->tensor + "\" (a shard of \"" + parameter + "\") fails its CRC-32 check", true);
}

TEST(CheckpointErrors, ACheckpointOfAnotherModelIsRefused) {
  Trainer<base::Program> t(kSeed);
  const fs::path dir = fresh_dir("other_model");
  save(t.program, dir, {.step = 1});
  const std::string index = (dir / "step-00000001" / "index.json").string();
  CheckpointTarget target = checkpoint_target(t.program);
  std::vector<TensorInfo> table(target.parameters.begin(), target.parameters.end());

  std::vector<TensorInfo> fewer(table.begin() + 1, table.end());  // the program lacks dense1/kernel
  target.parameters = fewer;
  EXPECT_ERROR_CONTAINS(restore_checkpoint(target, dir), CheckpointError,
                        index + ": tensor \"dense1/kernel\" is not a parameter of the program; is this checkpoint "
                                "from another model?");
  std::vector<TensorInfo> more = table;  // the program has one the checkpoint lacks
  more.push_back(table[0]);
  more.back().name = "dense0/kernel";
  target.parameters = more;
  EXPECT_ERROR_CONTAINS(restore_checkpoint(target, dir), CheckpointError,
                        index + ": no tensor \"dense0/kernel\", which the program has");
  std::vector<TensorInfo> reshaped = table;  // same name, other shape
  reshaped[0].shape = {784, 256};
  reshaped[0].local_shape = {392, 128};
  target.parameters = reshaped;
  EXPECT_ERROR_CONTAINS(restore_checkpoint(target, dir), CheckpointError,
                        index + ": tensor \"dense1/kernel\" is F32[784,512] but the program's is f32[784,256]");
}

TEST(ParameterExport, RoundTripsOntoAnotherMesh) {
  Trainer<base::Program> t(kSeed);
  t.step(0);
  const fs::path file = fresh_dir("export") / "params.safetensors";
  export_parameters(checkpoint_target(t.program), file);
  const SafetensorsFile f(file);
  EXPECT_EQ(f.tensors().size(), base::kParameters.size());
  EXPECT_EQ(f.metadata().at("format"), "sharc-parameters");
  EXPECT_EQ(f.tensor("dense1/kernel").shape, (std::vector<int64_t>{784, 512}));
  Trainer<sharc_gen::mlp_train_model8::Program> other(kSeed + 5);
  import_parameters(checkpoint_target(other.program), file);
  EXPECT_EQ(other.parameters(), t.parameters());
}

TEST(ParameterExport, AnUnreadableDtypeIsNamed) {
  const fs::path file = fresh_dir("dtype") / "f64.safetensors";
  // A valid safetensors file of one F64 tensor (as numpy or torch write them).
  const std::string header = R"({"dense1/kernel":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header + std::string(16, '\0');
  std::ofstream(file, std::ios::binary) << bytes;
  Trainer<base::Program> t(kSeed);
  EXPECT_ERROR_CONTAINS(import_parameters(checkpoint_target(t.program), file), SafetensorsError,
                        file.string() + ": tensor \"dense1/kernel\": dtype F64 is not one sharc reads (F32, BF16, I32)");
}

}  // namespace
}  // namespace sharc::rt

// Generated programs on an MpiWorld under mpirun (label mpi), against the
// same programs on a ThreadWorld in every process:
//   mpi_train_test <local devices> mlp <dir>    the MLP classifier on
//       data=4,model=2: 4 AdamW steps whose inputs each process reads from
//       a dataset file, only its devices' blocks (counted: a quarter of
//       every batch, the data axis being 4 wide); losses, grad norms and
//       every parameter afterwards bit for bit the thread world's;
//   mpi_train_test <local devices> gpt <dir>    the 2-layer GPT the same
//       way (3 steps, dropout on), then the logits program fed the trained
//       parameters: its global output completed on every process and its
//       per-device blocks both bit for bit the thread world's;
//   mpi_train_test <local devices> checkpoint <dir>    a one-process save
//       restores onto these processes; then 2 MLP steps, a collective save
//       (one file per process, the index by process 0), 2 more steps; a
//       fresh program restored from it repeats those 2 steps bit for bit;
//       and process 0 restores the same checkpoint into the fsdp=8 program
//       on a one-process thread world: every parameter equal; a flipped bit
//       in either process's shard file is refused on both processes, and
//       by one process restoring onto fsdp=8, all of whose parameters stay
//       bit for bit as they were;
//   mpi_train_test <local devices> kill <dir>   process 1 SIGKILLs itself
//       in the middle of training; the job must end, not hang (the ctest
//       checks mpirun's exit and message).
// <dir> is a folder every process can reach (one machine here). Each
// process prints FAIL lines and exits non-zero on any.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "gpt2_logits_data4_model2.h"
#include "gpt2_train_data4_model2.h"
#include "mlp_train_data4_model2.h"
#include "mlp_train_fsdp8.h"
#include "runtime/checkpoint.h"
#include "runtime/mpi_world.h"
#include "runtime/safetensors.h"
#include "runtime/thread_world.h"

namespace {

namespace fs = std::filesystem;
using namespace sharc::rt;

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A dataset file: `steps` batches, each the program's inputs (all f32, as
// these programs take them) back to back, whole. Written by process 0.
template <class Program>
struct Dataset {
  fs::path file;
  int steps = 0;
  size_t batch_bytes = 0;
  uint64_t bytes_read = 0;  // by this process, through read_blocks()

  // Byte offset of input `k` of batch `step` in the file.
  size_t at(int step, size_t k) const {
    size_t off = static_cast<size_t>(step) * batch_bytes;
    for (size_t i = 0; i < k; ++i) off += Program::inputs()[i].bytes();
    return off;
  }

  // The whole of input `k` of batch `step` (what one process on its own
  // would feed).
  std::vector<float> read_global(int step, size_t k) const {
    const TensorInfo& t = Program::inputs()[k];
    std::vector<float> v(static_cast<size_t>(t.elements()));
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0 || ::pread(fd, v.data(), t.bytes(), static_cast<off_t>(at(step, k))) != static_cast<ssize_t>(t.bytes()))
      throw std::runtime_error("cannot read " + file.string());
    ::close(fd);
    return v;
  }

  // Per-process loading: for each local device, its block of every input,
  // read with pread run by run; a block two local devices share is read
  // once. Binds them into `in`; the blocks live in `store`.
  void read_blocks(int step, const std::vector<int>& local, typename Program::Inputs& in,
                   std::map<std::pair<size_t, std::vector<int64_t>>, std::vector<float>>& store) {
    store.clear();
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) throw std::runtime_error("cannot open " + file.string());
    for (size_t k = 0; k < Program::inputs().size(); ++k) {
      const TensorInfo& t = Program::inputs()[k];
      for (int r : local) {
        const std::vector<int64_t> offset = Program::block_offset(t, r);
        std::vector<float>& block = store[{k, offset}];
        if (block.empty()) {
          block.resize(static_cast<size_t>(t.local_elements()));
          for (const BlockRun& run : block_runs(t, offset)) {
            const size_t n = static_cast<size_t>(run.elements) * sizeof(float);
            if (::pread(fd, block.data() + run.block, n,
                        static_cast<off_t>(at(step, k) + static_cast<size_t>(run.global) * sizeof(float))) !=
                static_cast<ssize_t>(n))
              throw std::runtime_error("short read of " + file.string());
            bytes_read += n;
          }
        }
        in.set_block(t.name, r, block);
      }
    }
    ::close(fd);
  }
};

// Fills input `t` of batch `step` with values a program of this kind can
// train on: token ids and targets below the vocabulary, class labels below
// 10, a seed, or smooth pixels.
void synthesize(const TensorInfo& t, int step, std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string_view n = t.name;
    if (n == "tokens" || n == "targets") v[i] = static_cast<float>((i * 31 + static_cast<size_t>(step) * 17 + (n == "targets")) % 96);
    else if (n == "labels") v[i] = static_cast<float>((i * 7 + static_cast<size_t>(step) * 3) % 10);
    else if (n == "dropout_seed") v[i] = static_cast<float>(1000 + step);
    else v[i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i) * (1 + step % 5)));
  }
}

template <class Program>
Dataset<Program> make_dataset(World& world, const fs::path& dir, int steps) {
  Dataset<Program> d;
  d.file = dir / "dataset.bin";
  d.steps = steps;
  for (const TensorInfo& t : Program::inputs()) d.batch_bytes += t.bytes();
  if (world.process() == 0) {
    std::FILE* f = std::fopen(d.file.c_str(), "wb");
    for (int s = 0; s < steps; ++s)
      for (const TensorInfo& t : Program::inputs()) {
        std::vector<float> v(static_cast<size_t>(t.elements()));
        synthesize(t, s, v);
        std::fwrite(v.data(), sizeof(float), v.size(), f);
      }
    std::fclose(f);
  }
  world.all_gather_host("");  // a barrier: the file is complete
  return d;
}

// The outputs of one step, bound as global arrays.
template <class Program>
struct StepOutputs {
  std::map<std::string, std::vector<float>> values;
  typename Program::Outputs out;
  StepOutputs() {
    for (const TensorInfo& t : Program::outputs()) {
      auto& v = values[std::string(t.name)];
      v.assign(static_cast<size_t>(t.elements()), NAN);
      out.set(t.name, v);
    }
  }
};

std::map<std::string, std::vector<float>> parameters_of(auto& program) {
  std::map<std::string, std::vector<float>> p;
  for (const TensorInfo& t : program.parameters()) {
    std::vector<float> v(static_cast<size_t>(t.elements()));
    program.get_parameter(t.name, v);  // collective on an MpiWorld
    p[std::string(t.name)] = std::move(v);
  }
  return p;
}

// Trains `steps` steps on the thread world (global inputs) and on `mpi`
// (per-process blocks); every output of every step and every parameter at
// the end must agree bit for bit. Returns the MPI program's parameters.
template <class Program>
void train_both(MpiWorld& mpi, const fs::path& dir, int steps, const std::string& label) {
  Dataset<Program> data = make_dataset<Program>(mpi, dir, steps);
  ThreadWorld threads(Program::mesh_shape());
  Program reference(threads), program(mpi);
  reference.init(7);
  program.init(7);
  std::map<std::pair<size_t, std::vector<int64_t>>, std::vector<float>> store;
  for (int s = 0; s < steps; ++s) {
    typename Program::Inputs global_in;
    std::vector<std::vector<float>> globals;
    for (size_t k = 0; k < Program::inputs().size(); ++k) {
      globals.push_back(data.read_global(s, k));
      global_in.set(Program::inputs()[k].name, globals.back());
    }
    StepOutputs<Program> want, got;
    reference.step(global_in, want.out);
    typename Program::Inputs block_in;
    data.read_blocks(s, program.local_ranks(), block_in, store);
    program.step(block_in, got.out);
    for (const auto& [name, v] : want.values)
      expect(same_bits(v, got.values.at(name)),
             label + " step " + std::to_string(s) + " output " + name + ": " + std::to_string(got.values.at(name)[0]) +
                 " on process " + std::to_string(mpi.process()) + ", " + std::to_string(v[0]) + " on the thread world");
    if (mpi.process() == 0) std::printf("%s step %d: loss %.7g (both worlds)\n", label.c_str(), s, want.values.at("loss")[0]);
  }
  // Per-process loading: a process reads each distinct block its devices
  // need, once, and nothing else. The batch is split 4 ways over "data" and
  // a process's devices never span two data coordinates, so that is at most
  // a quarter of the file (the replicated scalar seed aside).
  uint64_t want_bytes = 0;
  for (const TensorInfo& t : Program::inputs()) {
    std::set<std::vector<int64_t>> distinct;
    for (int r : program.local_ranks()) distinct.insert(Program::block_offset(t, r));
    want_bytes += distinct.size() * t.local_bytes() * static_cast<uint64_t>(steps);
  }
  const uint64_t total = data.batch_bytes * static_cast<uint64_t>(steps);
  std::printf("%s: process %d read %llu of the dataset's %llu bytes\n", label.c_str(), mpi.process(),
              static_cast<unsigned long long>(data.bytes_read), static_cast<unsigned long long>(total));
  expect(data.bytes_read == want_bytes, label + ": process " + std::to_string(mpi.process()) + " read " +
                                            std::to_string(data.bytes_read) + " bytes, not " + std::to_string(want_bytes));
  expect(data.bytes_read <= total / 4 + 4 * static_cast<uint64_t>(steps),
         label + ": process " + std::to_string(mpi.process()) + " read more than a quarter of the dataset");
  const auto want = parameters_of(reference), got = parameters_of(program);
  for (const auto& [name, v] : want) expect(same_bits(v, got.at(name)), label + " parameter " + name + " differs");
  if constexpr (std::is_same_v<Program, sharc_gen::gpt2_train_data4_model2::Program>) {
    // The logits program with the trained parameters: its output whole on
    // every process (complete_global) and as each local device's block.
    namespace lg = sharc_gen::gpt2_logits_data4_model2;
    lg::Program ref_logits(threads), logits(mpi);
    for (const auto& [name, v] : want) {
      if (!find_tensor(lg::kParameters, name)) continue;
      ref_logits.set_parameter(name, v);
      logits.set_parameter(name, v);
    }
    const TensorInfo& tokens = lg::input_info("tokens");
    const TensorInfo& out = lg::output_info("logits");
    std::vector<float> window(static_cast<size_t>(tokens.elements()));
    synthesize(tokens, 99, window);
    std::vector<float> whole_ref(static_cast<size_t>(out.elements())), whole(whole_ref.size(), NAN);
    lg::Program::Inputs in;
    in.tokens = window.data();
    lg::Program::Outputs o_ref, o;
    o_ref.logits = whole_ref.data();
    ref_logits.forward(in, o_ref);
    o.logits = whole.data();
    std::map<int, std::vector<float>> blocks;
    for (int r : logits.local_ranks()) o.set_block("logits", r, blocks[r] = std::vector<float>(static_cast<size_t>(out.local_elements())));
    logits.forward(in, o);
    expect(same_bits(whole_ref, whole), "logits: the global output on process " + std::to_string(mpi.process()) +
                                            " differs from the thread world's");
    for (const auto& [r, block] : blocks) {
      std::vector<float> want_block(block.size());
      copy_block_from_global(out, lg::Program::block_offset(out, r), whole_ref.data(), want_block.data());
      expect(same_bits(want_block, block), "logits: device " + std::to_string(r) + "'s block differs");
    }
  }
}

namespace mlp = sharc_gen::mlp_train_data4_model2;

// Feeds one MLP step its global batch `step`; returns the loss.
float mlp_step(mlp::Program& p, int step) {
  mlp::Program::Inputs in;
  std::vector<std::vector<float>> v;
  for (const TensorInfo& t : mlp::kInputs) {
    v.emplace_back(static_cast<size_t>(t.elements()));
    synthesize(t, step, v.back());
    in.set(t.name, v.back());
  }
  StepOutputs<mlp::Program> out;
  p.step(in, out.out);
  return out.values.at("loss")[0];
}

// Restores checkpoint `bad` into `p`: expects it refused with a message
// naming `file`, and every parameter of `p` bit for bit as it was. Returns
// the message.
template <class Program>
std::string expect_refused(Program& p, const fs::path& bad, const fs::path& file, const std::string& label) {
  const auto before = parameters_of(p);
  std::string what;
  try {
    restore(p, bad);
  } catch (const std::exception& e) {
    what = e.what();
  }
  expect(!what.empty(), label + "restored");
  expect(what.find(file.string()) != std::string::npos, label + "the message: " + what);
  const auto after = parameters_of(p);
  for (const auto& [name, v] : before)
    expect(same_bits(v, after.at(name)), label + "parameter " + name + " changed by the failed restore");
  return what;
}

void checkpoint_case(MpiWorld& mpi, const fs::path& dir) {
  // One process's save restores onto 2 processes: process 0 saves a
  // thread-world program after 3 steps; every process trains the same
  // program itself to know the values.
  {
    ThreadWorld threads(mlp::mesh_shape());
    mlp::Program single(threads);
    single.init(11);
    for (int s = 0; s < 3; ++s) mlp_step(single, s);
    if (mpi.process() == 0) save(single, dir / "single", {.step = 3});
    mpi.all_gather_host("");  // saved
    mlp::Program p(mpi);
    restore(p, dir / "single");
    const auto want = parameters_of(single), got = parameters_of(p);
    for (const auto& [name, v] : want)
      expect(same_bits(v, got.at(name)), "checkpoint: the one-process save restored onto 2 processes: " + name);
  }
  std::vector<float> losses;
  {
    mlp::Program p(mpi);
    p.init(7);
    for (int s = 0; s < 2; ++s) mlp_step(p, s);
    const fs::path saved = save(p, dir / "ckpt", {.step = 2, .keep = 2});
    expect(fs::exists(saved / "process-00000.safetensors") && fs::exists(saved / "process-00001.safetensors"),
           "checkpoint: one file per process in " + saved.string());
    for (int s = 2; s < 4; ++s) losses.push_back(mlp_step(p, s));
  }
  mlp::Program q(mpi);
  const RestoreResult r = restore(q, dir / "ckpt");
  expect(r.step == 2, "checkpoint: restored step " + std::to_string(r.step));
  for (int s = 2; s < 4; ++s) {
    const float loss = mlp_step(q, s);
    expect(std::memcmp(&loss, &losses[s - 2], sizeof loss) == 0,
           "checkpoint: resumed step " + std::to_string(s) + " loss " + std::to_string(loss) + " vs " +
               std::to_string(losses[s - 2]));
  }
  if (mpi.process() == 0) std::printf("checkpoint: resumed losses %.7g %.7g, bit for bit\n", losses[0], losses[1]);
  // Any mesh, any process count: one process, fsdp=8, from the step-2 save.
  const auto saved_params = [&] {
    mlp::Program p(mpi);
    restore(p, dir / "ckpt");
    return parameters_of(p);
  }();
  if (mpi.process() == 0) {
    namespace f8 = sharc_gen::mlp_train_fsdp8;
    ThreadWorld threads(f8::mesh_shape());
    f8::Program p(threads);
    restore(p, dir / "ckpt");
    const auto got = parameters_of(p);
    for (const auto& [name, v] : saved_params)
      expect(same_bits(v, got.at(name)), "checkpoint: fsdp=8 restore of " + name + " differs");
  }
  // A flipped bit in either process's file is refused on both processes
  // (restoring is collective: a process learns of the other's failure), and
  // neither changes a parameter. Process 0 saved every distinct block here
  // (the lowest holder of each); process 1's file holds none, only its
  // header, which its process checks all the same.
  const fs::path saved_step = list_checkpoints(dir / "ckpt").back();
  for (int owner = 0; owner < 2; ++owner) {
    const fs::path bad = dir / ("corrupt-" + std::to_string(owner));
    const std::string file = owner == 0 ? "process-00000.safetensors" : "process-00001.safetensors";
    if (mpi.process() == 0) {
      fs::remove_all(bad);
      fs::copy(saved_step, bad);
      uint64_t at = 8;  // the header's first byte of JSON, in a file that holds no block
      {
        const SafetensorsFile f(bad / file);
        for (const SafetensorsTensor& t : f.tensors()) at = std::max(at, t.end - 1);  // else the last data byte
      }
      std::FILE* fp = std::fopen((bad / file).c_str(), "r+b");
      std::fseek(fp, static_cast<long>(at), SEEK_SET);
      const int byte = std::fgetc(fp);
      std::fseek(fp, static_cast<long>(at), SEEK_SET);
      std::fputc(byte ^ 0x04, fp);
      std::fclose(fp);
    }
    mpi.all_gather_host("");  // corrupted
    const std::string label = "checkpoint: a flipped bit in " + file + ": ";
    mlp::Program p(mpi);
    p.init(5);
    const std::string what =
        expect_refused(p, bad, bad / file, label + "on process " + std::to_string(mpi.process()) + ": ");
    if (mpi.process() == 0) std::printf("checkpoint: a flipped bit in %s: refused (%s)\n", file.c_str(), what.c_str());
    // And onto another process count and mesh: process 0 alone, fsdp=8 on
    // a thread world.
    if (mpi.process() == 0) {
      ThreadWorld threads(sharc_gen::mlp_train_fsdp8::mesh_shape());
      sharc_gen::mlp_train_fsdp8::Program one(threads);
      one.init(6);
      expect_refused(one, bad, bad / file, label + "one process on fsdp=8: ");
    }
    mpi.all_gather_host("");
  }
}

void kill_case(MpiWorld& mpi) {
  mpi.set_recv_timeout(20);  // if mpirun did not stop the job, the survivors would time out
  mlp::Program p(mpi);
  p.init(7);
  if (mpi.process() == 1)
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::printf("process 1: SIGKILL now\n");
      std::fflush(stdout);
      ::raise(SIGKILL);
    }).detach();
  for (int s = 0; s < 100000; ++s) mlp_step(p, s);
  std::printf("FAIL kill: training finished although process 1 was killed\n");
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: mpi_train_test <local devices> mlp|gpt|checkpoint|kill <dir>\n");
    return 2;
  }
  const int local = std::atoi(argv[1]);
  const std::string what = argv[2];
  const fs::path dir = fs::path(argv[3]) / what;
  try {
    MpiWorld mpi(mlp::mesh_shape(), local);
    if (mpi.process() == 0) {
      fs::remove_all(dir);
      fs::create_directories(dir);
    }
    mpi.all_gather_host("");
    if (what == "mlp") train_both<mlp::Program>(mpi, dir, 4, "mlp");
    else if (what == "gpt") train_both<sharc_gen::gpt2_train_data4_model2::Program>(mpi, dir, 3, "gpt");
    else if (what == "checkpoint") checkpoint_case(mpi, dir);
    else if (what == "kill") kill_case(mpi);
    else throw std::invalid_argument("unknown case " + what);
    const std::vector<std::string> all = mpi.all_gather_host(std::to_string(failures));
    int total = 0;
    for (const std::string& f : all) total += std::stoi(f);
    if (mpi.process() == 0) std::printf("%s: %s on %d processes x %d devices\n", what.c_str(), total ? "FAILED" : "PASS",
                                        mpi.processes(), local);
    return total ? 1 : 0;
  } catch (const std::exception& e) {
    std::printf("FAIL %s: %s\n", what.c_str(), e.what());
    return 1;
  }
}

// import_hf and export_hf under mpirun (label mpi): 2 processes x 2 devices
// of the fsdp=2,model=2 GPT-2 program. Each process reads only the bytes
// of the distinct blocks its own devices hold (counted, and fewer than the
// file's), and gets the values a one-process import of all four devices
// gives, bit for bit; the export, collective, is the committed folder byte
// for byte.
//   mpirun -np 2 mpi_import_test FIXTURES OUT
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "interop_gpt2_fsdp2_model2.h"
#include "runtime/interop.h"
#include "runtime/mpi_world.h"
#include "runtime/safetensors.h"
#include "runtime/thread_world.h"

namespace {

namespace fs = std::filesystem;
using namespace sharc;
using Program = sharc_gen::interop_gpt2_fsdp2_model2::Program;

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: mpi_import_test FIXTURES OUT\n");
    return 2;
  }
  const fs::path hf = fs::path(argv[1]) / "gpt2_tiny" / "hf", committed = fs::path(argv[1]) / "gpt2_tiny" / "export";
  try {
    rt::MpiWorld mpi(Program::mesh_shape(), 2);
    Program program(mpi);
    program.init(1);
    const interop::HfConfig config = interop::read_hf_config(hf);
    const interop::ImportResult r = interop::import_hf(program, hf, config);

    // The bytes of this process's distinct blocks, and the file's.
    uint64_t want = 0;
    for (const rt::TensorInfo& t : Program::parameters()) {
      if (std::string(t.name).rfind("opt/", 0) == 0) continue;
      std::set<std::vector<int64_t>> distinct;
      for (int rank : program.local_ranks())
        if (Program::holds_parameter(rank, t.name)) distinct.insert(Program::block_offset(t, rank));
      want += distinct.size() * t.local_bytes();
    }
    uint64_t file_bytes = 0;
    const rt::SafetensorsFile file(hf / "model.safetensors");
    for (const rt::SafetensorsTensor& t : file.tensors()) file_bytes += t.end - t.begin;
    expect(r.bytes_read == want, "process " + std::to_string(mpi.process()) + " read " + std::to_string(r.bytes_read) +
                                     " bytes; its blocks hold " + std::to_string(want));
    expect(want < file_bytes, "a process's blocks are less than the file");
    std::printf("process %d (devices %d, %d) read %llu of the file's %llu tensor bytes\n", mpi.process(),
                program.local_ranks()[0], program.local_ranks()[1], static_cast<unsigned long long>(r.bytes_read),
                static_cast<unsigned long long>(file_bytes));

    // The values of a one-process import, bit for bit.
    rt::ThreadWorld threads(Program::mesh_shape());
    Program whole(threads);
    whole.init(2);
    interop::import_hf(whole, hf, config);
    for (const rt::TensorInfo& t : Program::parameters())
      for (int rank : program.local_ranks())
        if (Program::holds_parameter(rank, t.name) && std::string(t.name).rfind("opt/", 0) != 0)
          expect(std::memcmp(program.parameter_shard(rank, t.name), whole.parameter_shard(rank, t.name),
                             t.local_bytes()) == 0,
                 std::string(t.name) + " on device " + std::to_string(rank) + " differs from the one-process import");

    // The export, written by process 0, is the committed folder.
    const fs::path out = fs::path(argv[2]) / "gpt2_tiny";
    interop::export_hf(program, out, config);
    mpi.all_gather_host("");
    if (mpi.process() == 0)
      for (const char* file : {"config.json", "model.safetensors"})
        expect(read_bytes(out / file) == read_bytes(committed / file) && !read_bytes(committed / file).empty(),
               std::string("the export's ") + file + " is not the committed one");

    const std::vector<std::string> all = mpi.all_gather_host(std::to_string(failures));
    int total = 0;
    for (const std::string& f : all) total += std::stoi(f);
    if (mpi.process() == 0) std::printf("interop import: %s on 2 processes x 2 devices\n", total ? "FAILED" : "PASS");
    return total ? 1 : 0;
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    return 1;
  }
}

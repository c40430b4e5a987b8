// The samples' --backend and --world: which generated program runs (BACKEND
// cpu or cuda in sharc_add_program) and on which world.
//
//   --backend cpu              rt::ThreadWorld: one thread per device (default)
//   --backend cuda --world sim gpu::SimGpuWorld: the devices on the block
//                              simulator, device memory in host memory
//   --backend cuda --world gpu N virtual devices on one GPU (CudaWorld)
//   --backend cuda --world nccl one GPU per rank (NcclWorld)
//
// gpu and nccl need a GPU; without one they say so and the sample exits
// non-zero rather than run something else. nccl also needs MPI (one process
// per GPU, started by mpirun: the bootstrap is runtime/gpu/nccl_mpi.h). On a
// GPU, --world gpu makes a gpu::CudaWorld and --world nccl a gpu::NcclWorld,
// which only a program's nvcc build (NAME_device) runs on: the samples link
// the simulator's builds, so their programs then say so.
#pragma once

#include <memory>
#include <string>

#include "codegen/cli.h"
#include "runtime/gpu/gpu_world.h"
#include "runtime/gpu/nccl_world.h"
#include "runtime/thread_world.h"
#if defined(SHARC_HAVE_MPI)
#include "runtime/gpu/nccl_mpi.h"
#endif

namespace samples {

struct WorldChoice {
  std::string backend = "cpu";  // cpu | cuda
  std::string world = "sim";    // sim | gpu | nccl (cuda only)

  bool cuda() const { return backend == "cuda"; }

  // Adds --backend and --world to a sample's command line (codegen/cli.h).
  void add_to(CLI::App& app) {
    app.add_option("--backend", backend,
                   "cpu: the BACKEND cpu programs, a thread per device; cuda: the BACKEND cuda programs")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    world_option_ = app.add_option("--world", world,
                                   "with --backend cuda: sim (the block simulator), gpu (the devices on "
                                   "one GPU), nccl (a GPU per rank, under mpirun)")
                        ->check(CLI::IsMember({"sim", "gpu", "nccl"}))
                        ->capture_default_str();
  }

  // After parsing: "" or what is wrong with the combination.
  std::string check() const {
    if (!cuda() && world_option_ && world_option_->count() > 0)
      return "--world picks a GPU world: it needs --backend cuda";
#if !defined(SHARC_SAMPLES_CUDA)  // the sample's CMakeLists.txt defines it with its BACKEND cuda programs
    if (cuda())
      return "--backend cuda: this build has no BACKEND cuda programs (sharc was configured with "
             "SHARC_ENABLE_CUDA=OFF)";
#endif
    return "";
  }

  // The world for `mesh`, or null with *error saying why there is none.
  std::unique_ptr<sharc::rt::World> make(const sharc::rt::MeshShape& mesh, std::string* error) const {
    if (!cuda()) return std::make_unique<sharc::rt::ThreadWorld>(mesh);
    if (world == "sim") return std::make_unique<sharc::gpu::SimGpuWorld>(mesh);
    std::string why;
    if (!sharc::gpu::cuda_kernels(&why)) {
      *error = "--world " + world + " needs a GPU: " + why;
      return nullptr;
    }
    if (world == "gpu") return std::make_unique<sharc::gpu::CudaWorld>(mesh);
#if defined(SHARC_HAVE_MPI)
    static sharc::gpu::MpiBootstrap boot;  // this process among mpirun's
    return std::make_unique<sharc::gpu::NcclWorld>(mesh, boot);
#else
    *error = "--world nccl needs MPI (one process per GPU, started by mpirun), and this sample was built "
             "without it; --world gpu runs the mesh's devices on one GPU";
    return nullptr;
#endif
  }

 private:
  CLI::Option* world_option_ = nullptr;
};

}  // namespace samples

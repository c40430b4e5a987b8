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
  bool world_given = false;

  bool cuda() const { return backend == "cuda"; }

  // Takes argv[i] (and its value) when it is --backend or --world; returns
  // whether it did. A bad value sets *error.
  bool parse(int argc, char** argv, int& i, std::string* error) {
    const std::string arg = argv[i];
    std::string* field = arg == "--backend" ? &backend : arg == "--world" ? &world : nullptr;
    if (!field) return false;
    if (i + 1 >= argc) {
      *error = arg + " needs a value";
      return true;
    }
    *field = argv[++i];
    if (field == &world) world_given = true;
    if (backend != "cpu" && backend != "cuda")
      *error = "--backend is cpu or cuda, not " + backend;
    else if (world != "sim" && world != "gpu" && world != "nccl")
      *error = "--world is sim, gpu or nccl, not " + world;
    return true;
  }

  // After parsing: "" or what is wrong with the combination.
  std::string check() const {
    if (!cuda() && world_given) return "--world picks a GPU world: it needs --backend cuda";
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
};

}  // namespace samples

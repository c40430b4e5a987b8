// MpiBootstrap: NcclWorld's bootstrap over MPI_COMM_WORLD (one process per
// GPU, started by mpirun). Header only, for a program that links MPI
// (sharc::mpi brings it):
//
//   sharc::gpu::MpiBootstrap boot;                 // starts MPI if nothing has

//   sharc::gpu::NcclWorld world(Program::mesh_shape(), boot);
#pragma once

#include <mpi.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/gpu/nccl_world.h"

namespace sharc::gpu {

class MpiBootstrap final : public Bootstrap {
 public:
  // Starts MPI if nothing has yet (and finalizes it at exit then).
  MpiBootstrap() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      MPI_Init(nullptr, nullptr);
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<std::string> all_gather(const std::string& mine) override {
    const int n = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
    check(MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[static_cast<size_t>(r)] = total;
      total += sizes[static_cast<size_t>(r)];
    }
    std::string all(static_cast<size_t>(total), '\0');
    check(MPI_Allgatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r)
      out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                               static_cast<size_t>(sizes[static_cast<size_t>(r)])));
    return out;
  }

 private:
  void check(int err, const char* call) const {
    if (err != MPI_SUCCESS)
      throw std::runtime_error("MpiBootstrap: rank " + std::to_string(rank_) + ": " + call + " failed");
  }
  int rank_ = 0, size_ = 1;
};

}  // namespace sharc::gpu

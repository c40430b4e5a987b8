// How the runtime uses BLAS: on how many threads, and what it reports about
// the kernels. Generated code never calls BLAS itself; rt::gemm does
// (kernels.h), and the world decides its threads here, so a user sets
// nothing in the environment.
//
// Threads. A world gives each device a share of the machine's cores
// (ThreadBudget): devices x threads per device = cores, and at least one
// thread each. When one device has the whole machine (a one-device
// program), OpenBLAS's own thread pool runs its GEMMs on every core. When
// several devices share it, OpenBLAS runs single-threaded, since its pool
// is one per process and the devices already are threads; a device whose
// share is more than one thread splits its large GEMMs over a team of its
// own (runtime/team.h) instead. SHARC_THREADS_PER_DEVICE overrides the
// share (tests use it to exercise teams on small machines).
#pragma once

#include <string>

namespace sharc::rt {

// What a benchmark prints beside its numbers.
struct BlasInfo {
  std::string core;           // OpenBLAS's kernel family ("Cooperlake", "Haswell"); "" if unknown
  std::string forced_by_env;  // OPENBLAS_CORETYPE when set (OpenBLAS then skips detection)
  int threads = 1;            // OpenBLAS's thread count now
};
BlasInfo blas_info();

// OpenBLAS's own thread count (openblas_set_num_threads when the BLAS is
// OpenBLAS; otherwise nothing). Not while any device runs a GEMM.
void set_blas_threads(int threads);

// The threads each of `devices` local devices gets on this machine:
// max(1, hardware threads / devices), or SHARC_THREADS_PER_DEVICE when set
// to a positive number.
int threads_per_device(int devices);

}  // namespace sharc::rt

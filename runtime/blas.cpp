// BLAS threads and facts: see blas.h. OpenBLAS's extensions are reached
// through dlsym, so a runtime linked against another CBLAS keeps working
// (single-threaded, core unknown).
#include "runtime/blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <thread>

namespace sharc::rt {

namespace {

template <class F>
F find(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

std::string corename() {
  auto get = find<char* (*)()>("openblas_get_corename");
  const char* name = get ? get() : nullptr;
  return name ? name : "";
}

}  // namespace

BlasInfo blas_info() {
  BlasInfo info;
  info.core = corename();
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) info.forced_by_env = forced;
  auto get = find<int (*)()>("openblas_get_num_threads");
  info.threads = get ? get() : 1;
  return info;
}

void set_blas_threads(int threads) {
  auto set = find<void (*)(int)>("openblas_set_num_threads");
  if (set) set(threads < 1 ? 1 : threads);
}

int threads_per_device(int devices) {
  if (const char* s = std::getenv("SHARC_THREADS_PER_DEVICE")) {
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end != s && *end == '\0' && v > 0) return static_cast<int>(v);
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (devices < 1) devices = 1;
  return cores > devices ? cores / devices : 1;
}

}  // namespace sharc::rt

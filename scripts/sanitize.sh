#!/usr/bin/env bash
# Sanitizer builds of a representative subset, each in its own build folder
# (CI runs this after the tests: .ci/run):
#  - AddressSanitizer + UndefinedBehaviorSanitizer (any report fails): the
#    runtime's tests (every collective, the thread world's failure paths,
#    kernels, timelines), and end to end the generated training programs
#    against the interpreter (emit_train_equivalence_test, data/FSDP/TP),
#    the ring-overlapped ones (emit_ring_equivalence_test) and every
#    pipeline schedule x mesh against the oracle (sharc_pipeline_tests);
#  - ThreadSanitizer: the runtime's tests (the thread world's channels,
#    collectives, asynchronous ppermute, abort and timeout paths, the
#    timelines' per-device clocks), and, when MPI is there, the MPI world's
#    device threads under mpirun (every collective, 4 processes x 2
#    devices; a failing rank). OpenMPI is not instrumented, so what its own
#    code does is suppressed (scripts/tsan-mpi.supp); sharc's code is not.
#   scripts/sanitize.sh [asan|tsan]...   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys (as scripts/build.sh) without the checkout's path (the sources' paths are made
# relative under it, and the working directory is not hashed; the objects
# themselves carry relative paths: CMakeLists.txt's -ffile-prefix-map), so a
# fresh clone anywhere reuses what any other checkout compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
jobs=${SHARC_JOBS:-$(nproc)}
export OPENBLAS_NUM_THREADS=1  # OpenBLAS's own threads are not instrumented

configure() {  # folder, flags
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARC_BUILD_BENCH=OFF \
    -DSHARC_ENABLE_CUDA=OFF \
    -DCMAKE_CXX_FLAGS="$2 -fno-omit-frame-pointer" -DCMAKE_EXE_LINKER_FLAGS="$2" >/dev/null
}

run_asan() {
  local dir=${SHARC_ASAN_DIR:-build-asan}
  configure "$dir" "-fsanitize=address,undefined -fno-sanitize-recover=all"
  local tests=(tests/runtime/runtime_tests tests/emit/emit_train_equivalence_test
               tests/emit/emit_ring_equivalence_test tests/pipeline/sharc_pipeline_tests
               tests/gpu/gpu_kernels_sim_test)
  cmake --build "$dir" -j "$jobs" --target runtime_tests emit_train_equivalence_test \
    emit_ring_equivalence_test sharc_pipeline_tests gpu_kernels_sim_test
  for t in "${tests[@]}"; do
    echo "== ASan+UBSan: $t"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$dir/$t" --gtest_brief=1
  done
}

run_tsan() {
  local dir=${SHARC_TSAN_DIR:-build-tsan}
  configure "$dir" "-fsanitize=thread"
  cmake --build "$dir" -j "$jobs" --target runtime_tests
  echo "== TSan: tests/runtime/runtime_tests"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$dir/tests/runtime/runtime_tests" --gtest_brief=1
  # MPI was found when the target exists; where mpirun is installed (as
  # scripts/install_deps.sh installs it) it must have been. (The target list
  # is read whole first: grep -q stopping early would fail the pipe.)
  local targets; targets=$(cmake --build "$dir" --target help)
  if ! grep -q '^mpi_world_test:' <<<"$targets" && command -v mpirun >/dev/null; then
    echo "sanitize.sh: mpirun is installed but $dir has no mpi_world_test (MPI not found by CMake?)" >&2
    exit 1
  fi
  if grep -q '^mpi_world_test:' <<<"$targets"; then
    cmake --build "$dir" -j "$jobs" --target mpi_world_test
    local supp; supp="$(pwd)/scripts/tsan-mpi.supp"
    for what in collectives failure; do
      echo "== TSan: mpirun -np 4 tests/mpi/mpi_world_test 2 $what"
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
        mpirun -np 4 -x TSAN_OPTIONS="halt_on_error=1 exitcode=66 suppressions=$supp" \
        "$dir/tests/mpi/mpi_world_test" 2 "$what"
    done
  fi
}

modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(asan tsan)
for m in "${modes[@]}"; do
  case "$m" in
    asan) run_asan ;;
    tsan) run_tsan ;;
    *) echo "usage: scripts/sanitize.sh [asan|tsan]..." >&2; exit 2 ;;
  esac
done
echo "sanitizers: clean (${modes[*]})"

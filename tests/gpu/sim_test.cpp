// The block simulator itself (runtime/gpu/sim.h): barriers and warp
// shuffles behave as on a GPU, and the mistakes a GPU would hang on or get
// silently wrong are errors that name the kernel and the thread.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/gpu/dialect.h"

namespace sharc::gpu {
namespace {

// out[block][i] = sum of the block's thread ids, by a block reduction, then
// every thread also writes its warp's maximum id.
SHARC_KERNEL void reduce_kernel(float* sums, float* warp_max_out) {
  float* scratch = shared_memory<float>();
  const float id = static_cast<float>(thread_x());
  const float s = block_sum(id, scratch);
  if (thread_x() == 0) sums[block_x()] = s;
  warp_max_out[block_x() * block_dim_x() + thread_x()] = warp_max(id);
}

TEST(GpuSimulator, BlockAndWarpReductionsSeeEveryThread) {
  const unsigned threads = 96, blocks = 3;
  std::vector<float> sums(blocks, -1.0f), maxima(blocks * threads, -1.0f);
  launch("reduce", reduce_kernel, Dim3{blocks}, Dim3{threads}, 32 * sizeof(float), nullptr,
         sums.data(), maxima.data());
  for (unsigned b = 0; b < blocks; ++b) {
    EXPECT_EQ(sums[b], 95.0f * 96.0f / 2.0f) << "block " << b;
    for (unsigned t = 0; t < threads; ++t)
      EXPECT_EQ(maxima[b * threads + t], static_cast<float>(t / 32 * 32 + 31)) << t;
  }
}

// Thread i writes shared[i], then (after the barrier) reads its neighbour's.
SHARC_KERNEL void rotate_kernel(float* out) {
  float* shared = shared_memory<float>();
  const unsigned i = thread_x(), n = block_dim_x();
  shared[i] = static_cast<float>(i * 10);
  sync_block();
  out[i] = shared[(i + 1) % n];
}

TEST(GpuSimulator, SyncBlockOrdersSharedMemory) {
  std::vector<float> out(64);
  launch("rotate", rotate_kernel, Dim3{1}, Dim3{64}, 64 * sizeof(float), nullptr, out.data());
  for (unsigned i = 0; i < 64; ++i) EXPECT_EQ(out[i], static_cast<float>((i + 1) % 64 * 10));
}

SHARC_KERNEL void early_return_kernel(float* out) {
  if (thread_x() == 5) return;  // the others wait for it at the barrier
  sync_block();
  out[thread_x()] = 1.0f;
}

TEST(GpuSimulator, AThreadThatSkipsABarrierIsAnError) {
  std::vector<float> out(32);
  try {
    launch("early_return", early_return_kernel, Dim3{1}, Dim3{32}, 0, nullptr, out.data());
    FAIL() << "the launch returned";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu simulator: kernel early_return: thread "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(
                  "waits at a sync_block that a thread which already returned never reaches"),
              std::string::npos)
        << e.what();
  }
}

SHARC_KERNEL void noop_kernel(float*) {}

TEST(GpuSimulator, ABlockOfPartialWarpsIsRefused) {
  try {
    launch("noop", noop_kernel, Dim3{1}, Dim3{48}, 0, nullptr, static_cast<float*>(nullptr));
    FAIL() << "the launch returned";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "gpu simulator: kernel noop: a block of 48 threads; sharc's kernels use whole "
                 "warps, 32 to 1024 threads");
  }
}

SHARC_KERNEL void read_uninitialised_kernel(float* out) {
  out[thread_x()] = shared_memory<float>()[thread_x()];
}

TEST(GpuSimulator, SharedMemoryStartsAsNaN) {
  std::vector<float> out(32, 0.0f);
  launch("read_uninitialised", read_uninitialised_kernel, Dim3{1}, Dim3{32}, 32 * sizeof(float),
         nullptr, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v)) << v;
}

}  // namespace
}  // namespace sharc::gpu

// SimGpuWorld (runtime/gpu/gpu_world.h): the devices of a mesh on the block
// simulator. Each device of data=2,model=2 normalises its block of rows with
// the layernorm_forward kernel in device memory, then all-reduces the result
// over 'model' with its communicator, on the device buffer itself. Asserted:
// every device's result against an fp64 reference (within 1e-5 of the
// largest value), and the bytes and calls each device's communicator counted
// equal a ThreadWorld's running the same all-reduce on host buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/gpu/gpu_world.h"
#include "runtime/thread_world.h"

namespace sharc::gpu {
namespace {

constexpr int kRows = 4, kCols = 64;  // each device's block

rt::MeshShape mesh() { return rt::MeshShape{{"data", "model"}, {2, 2}}; }

// Device r's input block: deterministic, different per device.
std::vector<float> block_of(int r) {
  std::vector<float> x(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i) x[i] = static_cast<float>(std::sin(0.37 * i + 1.3 * r) * (1 + r));
  return x;
}

std::vector<float> weights(double phase) {
  std::vector<float> w(kCols);
  for (int c = 0; c < kCols; ++c) w[c] = static_cast<float>(1 + 0.5 * std::cos(0.11 * c + phase));
  return w;
}

// fp64 layer norm of one block.
std::vector<double> layer_norm(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b) {
  std::vector<double> y(x.size());
  for (int r = 0; r < kRows; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < kCols; ++c) mean += x[r * kCols + c];
    mean /= kCols;
    for (int c = 0; c < kCols; ++c) var += (x[r * kCols + c] - mean) * (x[r * kCols + c] - mean);
    var /= kCols;
    for (int c = 0; c < kCols; ++c)
      y[r * kCols + c] = (x[r * kCols + c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c];
  }
  return y;
}

TEST(SimGpuWorld, KernelsInDeviceMemoryAndCollectivesOnDeviceBuffers) {
  SimGpuWorld world(mesh());
  ASSERT_TRUE(world.device_memory_is_host());
  const std::vector<float> w = weights(0.2), b = weights(1.7);
  std::vector<std::vector<float>> result(world.size());
  world.run([&](int rank) {
    KernelSet& k = world.kernels(rank);
    const std::vector<float> x = block_of(rank);
    const size_t bytes = x.size() * sizeof(float);
    void* dx = k.alloc(bytes);
    void* dy = k.alloc(bytes);
    float* dw = static_cast<float*>(k.alloc(kCols * sizeof(float)));
    float* db = static_cast<float*>(k.alloc(kCols * sizeof(float)));
    k.upload(dx, x.data(), bytes);
    k.upload(dw, w.data(), kCols * sizeof(float));
    k.upload(db, b.data(), kCols * sizeof(float));
    LayerNormForward ln;
    ln.out = dy;
    ln.x = dx;
    ln.w = dw;
    ln.b = db;
    ln.rows = kRows;
    ln.cols = kCols;
    k.layernorm_forward(ln);
    world.comm(rank).all_reduce(static_cast<float*>(dy), x.size(), rt::make_group(world.mesh(), rank, {1}),
                                rt::ReduceOp::kSum);
    k.synchronize();
    result[rank].resize(x.size());
    k.download(result[rank].data(), dy, bytes);
    for (void* p : {dx, dy, static_cast<void*>(dw), static_cast<void*>(db)}) k.release(p);
  });
  for (int rank = 0; rank < world.size(); ++rank) {
    // The sum over the model group's two devices: ranks 2d and 2d + 1.
    const int first = rank / 2 * 2;
    const std::vector<double> a = layer_norm(block_of(first), w, b), c = layer_norm(block_of(first + 1), w, b);
    double scale = 0, err = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, std::fabs(a[i] + c[i]));
      err = std::max(err, std::fabs(result[rank][i] - (a[i] + c[i])));
    }
    EXPECT_LE(err, 1e-5 * scale) << "device " << rank;
  }

  // The same all-reduce on a ThreadWorld, on host buffers: the same bytes.
  rt::ThreadWorld threads(mesh());
  threads.run([&](int rank) {
    std::vector<float> y(kRows * kCols, 1.0f);
    threads.comm(rank).all_reduce(y.data(), y.size(), rt::make_group(threads.mesh(), rank, {1}), rt::ReduceOp::kSum);
  });
  for (int rank = 0; rank < world.size(); ++rank) {
    const rt::CommStats& sim = world.comm(rank).stats();
    const rt::CommStats& cpu = threads.comm(rank).stats();
    EXPECT_EQ(sim.count(rt::CollectiveKind::kAllReduce), 1u);
    EXPECT_EQ(sim.bytes(rt::CollectiveKind::kAllReduce), cpu.bytes(rt::CollectiveKind::kAllReduce)) << rank;
    EXPECT_GT(sim.bytes(rt::CollectiveKind::kAllReduce), 0u);
  }
  EXPECT_EQ(world.local_stats().total_bytes(), threads.local_stats().total_bytes());
}

TEST(SimGpuWorld, ADeviceOutsideTheMeshIsNamed) {
  SimGpuWorld world(mesh());
  try {
    world.kernels(4);
    FAIL() << "no error";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "SimGpuWorld: device 4 is not one of its 4 devices");
  }
}

}  // namespace
}  // namespace sharc::gpu

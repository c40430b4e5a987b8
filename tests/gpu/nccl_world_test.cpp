// gpu::NcclWorld without a GPU: one world per rank, each on its own thread,
// with the block simulator's kernels (device memory is host memory) and a
// stand-in for NCCL that moves host memory between the threads as NCCL
// would move device memory between GPUs, and fails where a test says (an
// init that fails, a peer that never arrives). The collectives are checked
// against the same calls on a gpu::SimGpuWorld, whose ring communicators the
// other tests prove; the errors by their text.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/gpu/device_collectives.h"
#include "tests/gpu/fake_nccl.h"
#include "runtime/gpu/gpu_world.h"
#include "runtime/gpu/nccl_world.h"

namespace sharc::gpu {
namespace {

using rt::DType;
using fake::FakeNccl;
using fake::Hub;
using fake::ThreadBootstrap;

const rt::MeshShape kMesh{{"data", "model"}, {2, 4}};

// fn(world, rank) on a NcclWorld per rank, each on its own thread; the
// error each rank's fn threw ("" where none).
std::vector<std::string> on_nccl_worlds(Hub& hub, std::chrono::milliseconds timeout,
                                        const std::function<void(NcclWorld&, int)>& fn) {
  const int n = kMesh.num_devices();
  ThreadBootstrap::Shared shared;
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadBootstrap boot(shared, r, n);
        NcclWorld world(kMesh, boot, std::make_unique<FakeNccl>(hub, r), simulated_kernels(), nullptr, SIZE_MAX,
                        {.timeout = timeout});
        world.run([&](int rank) { fn(world, rank); });
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

// The collectives a generated program makes, on device buffers: each
// returns what the calling device ends with.
std::vector<float> collectives(rt::World& world, int rank) {
  const DeviceContext d = device_context(world, rank, "nccl_world_test", /*simulator_build=*/true);
  rt::Communicator& comm = world.comm(rank);
  const rt::Group model = rt::make_group(world.mesh(), rank, {1}), data = rt::make_group(world.mesh(), rank, {0});
  const rt::Group both = rt::make_group(world.mesh(), rank, {1, 0});  // model-major: not the ranks' order
  std::vector<float> got;
  auto keep = [&](const std::vector<float>& v) { got.insert(got.end(), v.begin(), v.end()); };
  std::vector<float> x(6);  // [2, 3], distinct small integers per rank: sums are exact
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rank * 10 + static_cast<int>(i));
  std::vector<float> a = x;
  all_reduce(d, comm, a.data(), a.size(), model, rt::ReduceOp::kSum);
  keep(a);
  all_reduce(d, comm, a.data(), a.size(), data, rt::ReduceOp::kMax);
  keep(a);
  std::vector<float> g(24);  // [2, 3] gathered along dim 1 over model: interleaved, packed on the device
  all_gather_dim(d, comm, model, x.data(), {2, 3}, 1, g.data());
  keep(g);
  std::vector<float> g2(48);
  all_gather_dim(d, comm, both, x.data(), {2, 3}, 0, g2.data());
  keep(g2);
  std::vector<float> big(24);  // [2, 12] scattered along dim 1 over model
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(rank + static_cast<int>(i));
  std::vector<float> s(6);
  reduce_scatter_dim(d, comm, model, big.data(), {2, 12}, 1, s.data(), rt::ReduceOp::kSum);
  keep(s);
  std::vector<float> t(24);  // [4, 6] -> split dim 0 over model, concat dim 1
  all_to_all_dim(d, comm, model, big.data(), {4, 6}, 0, 1, t.data());
  keep(t);
  std::vector<float> p(6);
  ppermute(d, comm, x.data(), p.data(), p.size(), model, rt::ring_shift(model.size(), 1));
  keep(p);
  std::vector<float> q = x;  // in place, half the ranks receiving nothing
  ppermute(d, comm, q.data(), q.data(), q.size(), data, rt::Permutation{{0, 1}});
  keep(q);
  std::vector<float> r(6, -1.0f);  // point to point, as pipeline stages pass activations
  if (rank < 4) send(d, comm, x.data(), x.size(), rank + 4, /*tag=*/7);
  if (rank >= 4) recv(d, comm, r.data(), r.size(), rank - 4, /*tag=*/7);
  keep(r);
  rt::bf16 h[2] = {rt::bf16(1.5f * static_cast<float>(rank)), rt::bf16(2.0f)};
  all_reduce(d, comm, h, 2, model, rt::ReduceOp::kSum);
  keep({static_cast<float>(h[0]), static_cast<float>(h[1])});
  return got;
}

TEST(NcclWorld, CollectivesOnDeviceBuffersMatchTheSimulatorsWorld) {
  SimGpuWorld sim(kMesh);
  std::vector<std::vector<float>> want(8);
  sim.run([&](int rank) { want[static_cast<size_t>(rank)] = collectives(sim, rank); });
  ASSERT_EQ(want[0].size(), 134u);
  EXPECT_EQ(want[0][0], 60.0f);  // 0 + 10 + 20 + 30: rank 0's first element summed over model
  Hub hub(8);
  std::vector<std::vector<float>> got(8);
  const std::vector<std::string> errors = on_nccl_worlds(hub, std::chrono::seconds(60), [&](NcclWorld& w, int rank) {
    EXPECT_NE(w.device_communicator(rank), nullptr);
    got[static_cast<size_t>(rank)] = collectives(w, rank);
  });
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)]) << "rank " << r;
  }
}

TEST(NcclWorld, AnInitFailureNamesTheRank) {
  Hub hub(8);
  hub.fail_init = 3;
  // Rank 3 alone: the others would wait in their init for it, as NCCL's do.
  struct ThirdOfEight final : Bootstrap {
    int rank() const override { return 3; }
    int size() const override { return 8; }
    std::vector<std::string> all_gather(const std::string&) override {
      return std::vector<std::string>(8, "fake nccl id");
    }
  } boot;
  std::string error;
  try {
    NcclWorld world(kMesh, boot, std::make_unique<FakeNccl>(hub, 3), simulated_kernels(), nullptr, SIZE_MAX, {});
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  EXPECT_EQ(error,
            "NcclWorld: rank 3: ncclCommInitRank failed: ncclCommInitRank: unhandled system error (injected by the "
            "test)");
}

TEST(NcclWorld, APeerThatNeverArrivesTimesOutNamingTheRankAndAborts) {
  Hub hub(8);
  hub.absent = 5;  // ranks 1 and 5 share a 'data' group
  const std::vector<std::string> errors =
      on_nccl_worlds(hub, std::chrono::milliseconds(300), [&](NcclWorld& w, int rank) {
        const DeviceContext d = device_context(w, rank, "nccl_world_test", true);
        std::vector<float> x(4, 1.0f);
        all_reduce(d, w.comm(rank), x.data(), x.size(), rt::make_group(w.mesh(), rank, {0}), rt::ReduceOp::kSum);
        if (rank != 1 && rank != 5) {
          EXPECT_EQ(x, std::vector<float>(4, 2.0f)) << rank;
        }
      });
  EXPECT_EQ(errors[1],
            "NcclWorld: rank 1: all_reduce over ranks {1,5} did not complete within 300 ms: a peer never arrived, so "
            "the communicators were aborted (ncclCommAbort)");
  for (int r : {0, 2, 3, 4, 6, 7}) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << r;
}

TEST(NcclWorld, RefusesARankCountThatIsNotTheMeshs) {
  Hub hub(4);
  ThreadBootstrap::Shared shared;
  ThreadBootstrap boot(shared, 0, 4);
  try {
    NcclWorld world(kMesh, boot, std::make_unique<FakeNccl>(hub, 0), simulated_kernels(), nullptr, SIZE_MAX, {});
    FAIL() << "a world of 4 ranks for 8 devices was made";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "NcclWorld: 4 ranks for the mesh " + kMesh.to_string() +
                  " of 8 devices: start one process per device");
  }
}

TEST(NcclWorld, WithoutAGpuTheLibraryWorldSaysWhy) {
  if (cuda_kernels(nullptr)) GTEST_SKIP() << "a GPU is here: the device run tests NCCL itself";
  ThreadBootstrap::Shared shared;
  ThreadBootstrap boot(shared, 0, 1);
  try {
    NcclWorld world(rt::MeshShape{{"data"}, {1}}, boot);
    FAIL() << "a NcclWorld was made without a GPU";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("NcclWorld: rank 0: no GPU: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace sharc::gpu

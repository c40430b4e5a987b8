// ThreadWorld behaviour beyond single collectives: concurrent subgroups on a
// 2-D mesh, async ppermute overlapping another collective on the same links,
// barriers, the simulated link, permutation validation messages, and failure
// handling (a throw, a mismatched schedule, a forgotten wait) that must end
// run() with the right error instead of hanging.
#include "runtime/thread_world.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sharc::rt {
namespace {

MeshShape data2_model4() {
  return MeshShape{{"data", "model"}, {2, 4}};
}

TEST(ThreadWorld, SubgroupsOnATwoDimensionalMesh) {
  ThreadWorld world(data2_model4());
  world.run([&](int r) {
    Communicator& comm = world.comm(r);
    // Sum of ranks over each 'model' group, then over each 'data' group.
    std::vector<float> x(5, static_cast<float>(r));
    comm.all_reduce(x.data(), 5, make_group(world.mesh(), r, {1}), ReduceOp::kSum);
    const float model_sum = r < 4 ? 0 + 1 + 2 + 3 : 4 + 5 + 6 + 7;
    EXPECT_EQ(x, std::vector<float>(5, model_sum)) << "rank " << r;
    std::vector<float> y(2, static_cast<float>(r)), out(4);
    comm.all_gather(y.data(), out.data(), 2, make_group(world.mesh(), r, {0}));
    const float lo = static_cast<float>(r % 4), hi = lo + 4;
    EXPECT_EQ(out, (std::vector<float>{lo, lo, hi, hi})) << "rank " << r;
    // The whole mesh in {model, data} order: position = model*2 + data.
    float v = static_cast<float>(r);
    std::vector<float> all(8);
    comm.all_gather(&v, all.data(), 1, make_group(world.mesh(), r, {1, 0}));
    EXPECT_EQ(all, (std::vector<float>{0, 4, 1, 5, 2, 6, 3, 7}));
  });
}

TEST(ThreadWorld, AsyncPPermuteOverlapsACollectiveOnTheSameLinks) {
  ThreadWorld world(MeshShape{{"x"}, {4}});
  world.run([&](int r) {
    Communicator& comm = world.comm(r);
    const Group g = make_group(world.mesh(), r, {0});
    std::vector<float> send(6, 10.0f + r), recv(6, -1.0f);
    // Same direction as the ring's sends, so both land on the p -> p+1 channel.
    PendingRecv pending =
        comm.ppermute_start(send.data(), recv.data(), 6, g, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
    send.assign(6, -5.0f);  // the block was copied at start; reuse is safe
    std::vector<float> x(8, 1.0f);
    comm.all_reduce(x.data(), 8, g, ReduceOp::kSum);
    EXPECT_EQ(x, std::vector<float>(8, 4.0f));
    comm.ppermute_wait(pending);
    EXPECT_EQ(recv, std::vector<float>(6, 10.0f + (r + 3) % 4)) << "rank " << r;
    EXPECT_THROW(comm.ppermute_wait(pending), std::logic_error);
  });
}

TEST(ThreadWorld, AsyncPPermuteWithNoIncomingBlockGivesZeros) {
  ThreadWorld world(MeshShape{{"x"}, {2}});
  world.run([&](int r) {
    const Group g = make_group(world.mesh(), r, {0});
    float in = 3.0f, out = -1.0f;
    PendingRecv p = world.comm(r).ppermute_start(&in, &out, 1, g, {{0, 1}});
    world.comm(r).ppermute_wait(p);
    EXPECT_EQ(out, r == 1 ? 3.0f : 0.0f);
  });
}

TEST(ThreadWorld, BarrierWaitsForEveryone) {
  ThreadWorld world(MeshShape{{"x"}, {7}});
  std::atomic<int> arrived{0};
  world.run([&](int r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(r));
    ++arrived;
    world.comm(r).barrier(make_group(world.mesh(), r, {0}));
    EXPECT_EQ(arrived.load(), 7);
  });
}

TEST(ThreadWorld, LinkModelDelaysDelivery) {
  ThreadWorld world(MeshShape{{"x"}, {2}});
  // 4000 bytes at 100 kB/s is 40 ms, plus 20 ms latency.
  world.set_link(LinkModel{0.02, 1e5});
  const auto t0 = std::chrono::steady_clock::now();
  world.run([&](int r) {
    std::vector<float> in(1000, 1.0f), out(1000);
    world.comm(r).ppermute(in.data(), out.data(), 1000, make_group(world.mesh(), r, {0}),
                           {{0, 1}, {1, 0}});
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(s, 0.06);
}

TEST(ThreadWorld, InvalidPermutationNamesTheBadPair) {
  try {
    validate_permutation({{0, 1}, {2, 1}}, 4);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "ppermute: pair (2, 1) repeats destination 1; perm must be a permutation");
  }
  try {
    validate_permutation({{0, 1}, {0, 2}}, 4);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "ppermute: pair (0, 2) repeats source 0; perm must be a permutation");
  }
  // Through a communicator: every member rejects the permutation before
  // sending, so run() reports it instead of deadlocking.
  ThreadWorld world(MeshShape{{"x"}, {3}});
  try {
    world.run([&](int r) {
      float x = 0, y = 0;
      world.comm(r).ppermute(&x, &y, 1, make_group(world.mesh(), r, {0}), {{0, 1}, {1, 3}});
    });
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "ppermute: pair (1, 3) is out of range for a group of 3");
  }
}

TEST(ThreadWorld, ExceptionInOneDevicePropagatesWithoutHanging) {
  ThreadWorld world(MeshShape{{"x"}, {4}});
  world.set_recv_timeout(0);  // rely on the poison wake-up, not the timeout
  const auto t0 = std::chrono::steady_clock::now();
  try {
    world.run([&](int r) {
      std::vector<float> x(16, 1.0f);
      const Group g = make_group(world.mesh(), r, {0});
      world.comm(r).all_reduce(x.data(), 16, g, ReduceOp::kSum);  // completes
      if (r == 2) throw std::runtime_error("device 2 failed");
      world.comm(r).all_reduce(x.data(), 16, g, ReduceOp::kSum);  // blocks forever on others
    });
    FAIL() << "expected std::runtime_error";
  } catch (const WorldAborted&) {
    FAIL() << "run() reported a secondary abort instead of the original failure";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "device 2 failed");
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);

  // The world is reusable after a failed run.
  world.run([&](int r) {
    float x = 1.0f;
    world.comm(r).all_reduce(&x, 1, make_group(world.mesh(), r, {0}), ReduceOp::kSum);
    EXPECT_EQ(x, 4.0f);
  });
}

// All-gather steps lend each chunk where it lies (the receiver copies it
// straight from its neighbour's buffer). When a device fails, its neighbours'
// lent chunks are taken back or waited for before their buffers go: the
// original error is reported, nobody hangs, nothing reads freed memory (the
// sanitizer builds run this), and the next run lends afresh.
TEST(ThreadWorld, LentChunksAreTakenBackWhenADeviceFails) {
  ThreadWorld world(MeshShape{{"x"}, {4}});
  world.set_recv_timeout(0);  // rely on the poison wake-up
  for (int round = 0; round < 3; ++round) {
    try {
      world.run([&](int r) {
        const Group g = make_group(world.mesh(), r, {0});
        std::vector<float> mine(4096, static_cast<float>(r));
        std::vector<float> all(4 * 4096);
        world.comm(r).all_gather(mine.data(), all.data(), 4096, g);  // completes
        for (int k = 0; k < 4; ++k) EXPECT_EQ(all[k * 4096 + 17], static_cast<float>(k));
        if (r == 2) throw std::runtime_error("device 2 failed");
        auto more = std::make_unique<std::vector<float>>(4 * 4096);
        world.comm(r).all_gather(mine.data(), more->data(), 4096, g);  // never completes
      });
      FAIL() << "expected std::runtime_error";
    } catch (const WorldAborted&) {
      FAIL() << "run() reported a secondary abort instead of the original failure";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "device 2 failed");
    }
  }
  world.run([&](int r) {
    std::vector<float> mine(1000, static_cast<float>(r + 1)), all(4000);
    world.comm(r).all_gather(mine.data(), all.data(), 1000, make_group(world.mesh(), r, {0}));
    for (int k = 0; k < 4; ++k) EXPECT_EQ(all[k * 1000 + 999], static_cast<float>(k + 1));
  });
}

TEST(ThreadWorld, MismatchedScheduleTimesOut) {
  ThreadWorld world(MeshShape{{"x"}, {2}});
  world.set_recv_timeout(0.2);
  try {
    world.run([&](int r) {
      const Group g = make_group(world.mesh(), r, {0});
      float x = 1.0f;
      if (r == 0) world.comm(r).all_reduce(&x, 1, g, ReduceOp::kSum);
      // rank 1 never joins
    });
    FAIL() << "expected a timeout";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 waited"), std::string::npos) << e.what();
  }
}

// Pipeline stages: sends return at once, receives match by tag whatever the
// order, both ends count a call, the sender counts the bytes.
TEST(ThreadWorld, SendRecvMatchByTag) {
  ThreadWorld world(MeshShape{{"pipe"}, {3}});
  std::vector<float> got(4, 0.0f);
  world.run([&](int r) {
    Communicator& c = world.comm(r);
    if (r == 0) {
      const float a[2] = {1, 2}, b[2] = {3, 4};
      c.send(a, 2, 2, /*tag=*/11);
      c.send(b, 2, 2, /*tag=*/12);
    } else if (r == 2) {
      c.recv(got.data(), 2, 0, 12);  // the later message first
      c.recv(got.data() + 2, 2, 0, 11);
    }
  });
  EXPECT_EQ(got, (std::vector<float>{3, 4, 1, 2}));
  EXPECT_EQ(world.comm(0).stats().bytes(CollectiveKind::kSendRecv), 16u);
  EXPECT_EQ(world.comm(0).stats().count(CollectiveKind::kSendRecv), 2u);
  EXPECT_EQ(world.comm(2).stats().bytes(CollectiveKind::kSendRecv), 0u);
  EXPECT_EQ(world.comm(2).stats().count(CollectiveKind::kSendRecv), 2u);
  EXPECT_EQ(world.comm(1).stats().count(CollectiveKind::kSendRecv), 0u);
}

TEST(ThreadWorld, RecvOfAMessageNeverSentTimesOut) {
  ThreadWorld world(MeshShape{{"pipe"}, {2}});
  world.set_recv_timeout(0.2);
  try {
    world.run([&](int r) {
      float x = 0;
      if (r == 1) world.comm(r).recv(&x, 1, 0, 5);
    });
    FAIL() << "expected a timeout";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 waited 0.2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(world.run([&](int r) {
    float x = 0;
    if (r == 0) world.comm(r).send(&x, 1, 2, 5);
  }),
               std::invalid_argument);
}

TEST(ThreadWorld, ForgottenWaitIsReported) {
  ThreadWorld world(MeshShape{{"x"}, {2}});
  try {
    world.run([&](int r) {
      float x = 1.0f, y = 0.0f;
      world.comm(r).ppermute_start(&x, &y, 1, make_group(world.mesh(), r, {0}), {{0, 1}});
    });
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("1 message(s) sent but never received (first from rank 0 "
                                         "to rank 1)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ThreadWorld, GroupNotContainingTheCallerIsRejected) {
  ThreadWorld world(MeshShape{{"x"}, {2}});
  EXPECT_THROW(world.run([&](int r) {
    float x = 0;
    world.comm(r).all_reduce(&x, 1, Group{{0, 1}, 1 - r}, ReduceOp::kSum);
  }),
               std::invalid_argument);
}

TEST(ThreadWorld, MemoryIsPerDevice) {
  ThreadWorld world(data2_model4());
  world.run([&](int r) { Buffer b(100 * (r + 1), &world.memory(r)); });
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(world.memory(r).current(), 0u);
    EXPECT_EQ(world.memory(r).peak(), 400u * (r + 1));
  }
}

TEST(ThreadWorld, BadMeshIsRejected) {
  EXPECT_THROW(ThreadWorld(MeshShape{{"x", "x"}, {2, 2}}), std::invalid_argument);
  EXPECT_THROW(ThreadWorld(MeshShape{{"x"}, {0}}), std::invalid_argument);
  EXPECT_THROW(ThreadWorld(MeshShape{{"x"}, {2, 2}}), std::invalid_argument);
}

}  // namespace
}  // namespace sharc::rt

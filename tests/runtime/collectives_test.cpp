// Every ThreadWorld collective on 1..8 devices against a serial computation,
// plus the exact bytes each device sends. Inputs are small integers stored as
// floats, so sums are exact in any order and results compare with ==; the
// byte counts are the ring formulas a cost model would use. Time spent in
// collectives is checked only from below (never an upper bound: these
// machines are shared).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/thread_world.h"

namespace sharc::rt {
namespace {

MeshShape line(int n) {
  return MeshShape{{"x"}, {n}};
}

// Integer-valued data in [-8, 8], different per (rank, seed).
std::vector<float> ints(size_t count, int rank, int seed = 0) {
  std::mt19937 gen(1000 * seed + rank);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(dist(gen));
  return v;
}

float apply(ReduceOp op, float a, float b) {
  return op == ReduceOp::kSum ? a + b : std::max(a, b);
}

std::vector<float> serial_reduce(int n, size_t count, ReduceOp op) {
  std::vector<float> r = ints(count, 0);
  for (int p = 1; p < n; ++p) {
    const std::vector<float> x = ints(count, p);
    for (size_t i = 0; i < count; ++i) r[i] = apply(op, r[i], x[i]);
  }
  return r;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceMatchesSerial) {
  const int n = GetParam();
  ThreadWorld world(line(n));
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    for (size_t count : {size_t{1}, size_t{3}, size_t{64}, size_t{1001}}) {
      const std::vector<float> want = serial_reduce(n, count, op);
      world.run([&](int r) {
        std::vector<float> x = ints(count, r);
        world.comm(r).all_reduce(x.data(), count, make_group(world.mesh(), r, {0}), op);
        EXPECT_EQ(x, want) << "rank " << r << " count " << count;
      });
    }
  }
}

TEST_P(Collectives, AllGatherMatchesSerial) {
  const int n = GetParam();
  ThreadWorld world(line(n));
  const size_t c = 37;
  std::vector<float> want;
  for (int p = 0; p < n; ++p) {
    const std::vector<float> x = ints(c, p);
    want.insert(want.end(), x.begin(), x.end());
  }
  world.run([&](int r) {
    const std::vector<float> x = ints(c, r);
    std::vector<float> out(c * n, -1.0f);
    world.comm(r).all_gather(x.data(), out.data(), c, make_group(world.mesh(), r, {0}));
    EXPECT_EQ(out, want) << "rank " << r;
    // In place: the input already sits in this member's slot of out.
    std::vector<float> inplace(c * n, -1.0f);
    std::copy(x.begin(), x.end(), inplace.begin() + r * c);
    world.comm(r).all_gather(inplace.data() + r * c, inplace.data(), c,
                             make_group(world.mesh(), r, {0}));
    EXPECT_EQ(inplace, want) << "rank " << r;
  });
}

TEST_P(Collectives, ReduceScatterMatchesSerial) {
  const int n = GetParam();
  ThreadWorld world(line(n));
  const size_t c = 29;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    const std::vector<float> full = serial_reduce(n, c * n, op);
    world.run([&](int r) {
      const std::vector<float> x = ints(c * n, r);
      std::vector<float> out(c);
      world.comm(r).reduce_scatter(x.data(), out.data(), c, make_group(world.mesh(), r, {0}), op);
      EXPECT_EQ(out, std::vector<float>(full.begin() + r * c, full.begin() + (r + 1) * c))
          << "rank " << r;
    });
  }
}

TEST_P(Collectives, AllToAllMatchesSerial) {
  const int n = GetParam();
  ThreadWorld world(line(n));
  const size_t c = 11;
  world.run([&](int r) {
    const std::vector<float> x = ints(c * n, r);
    std::vector<float> out(c * n);
    world.comm(r).all_to_all(x.data(), out.data(), c, make_group(world.mesh(), r, {0}));
    for (int i = 0; i < n; ++i) {
      const std::vector<float> src = ints(c * n, i);
      // Chunk i of out is chunk r of member i's input.
      EXPECT_TRUE(std::equal(out.begin() + i * c, out.begin() + (i + 1) * c, src.begin() + r * c))
          << "rank " << r << " chunk " << i;
    }
  });
}

TEST_P(Collectives, PPermuteShiftAndPartial) {
  const int n = GetParam();
  ThreadWorld world(line(n));
  const size_t c = 13;
  Permutation shift, partial;
  for (int p = 0; p < n; ++p) shift.push_back({p, (p + 1) % n});
  partial.push_back({n - 1, 0});  // only position 0 receives
  world.run([&](int r) {
    const Group g = make_group(world.mesh(), r, {0});
    const std::vector<float> x = ints(c, r);
    std::vector<float> out(c, -1.0f);
    world.comm(r).ppermute(x.data(), out.data(), c, g, shift);
    EXPECT_EQ(out, ints(c, (r + n - 1) % n)) << "rank " << r;
    world.comm(r).ppermute(x.data(), out.data(), c, g, partial);
    EXPECT_EQ(out, r == 0 ? ints(c, n - 1) : std::vector<float>(c, 0.0f)) << "rank " << r;
  });
}

TEST_P(Collectives, AllReduceIsBitwiseIdenticalAcrossMembers) {
  const int n = GetParam();
  ThreadWorld world(line(n));
  const size_t count = 999;
  std::vector<std::vector<float>> results(n);
  world.run([&](int r) {
    std::mt19937 gen(r);
    std::normal_distribution<float> dist;
    std::vector<float> x(count);
    for (float& v : x) v = dist(gen) * 1e3f;  // non-integers: order matters
    world.comm(r).all_reduce(x.data(), count, make_group(world.mesh(), r, {0}), ReduceOp::kSum);
    results[r] = std::move(x);
  });
  for (int r = 1; r < n; ++r) EXPECT_EQ(results[r], results[0]) << "rank " << r;
}

// An all-reduce over segments (a gradient bucket reduced in its members'
// buffers) is the all-reduce of the segments packed back to back, bit for
// bit on non-integers (the same chunks in the same order), with the same
// bytes and one call; pieces may be empty, and chunks cross pieces.
TEST_P(Collectives, SegmentedAllReduceIsThePackedOneBitForBit) {
  const int n = GetParam();
  const std::vector<size_t> sizes = {5, 0, 1, 37, 2, 0, 300, 1};
  size_t total = 0;
  for (size_t c : sizes) total += c;
  ThreadWorld packed_world(line(n)), segmented_world(line(n));
  std::vector<std::vector<float>> packed(n), segmented(n);
  auto data = [&](int r) {
    std::mt19937 gen(r + 17);
    std::normal_distribution<float> dist;
    std::vector<float> x(total);
    for (float& v : x) v = dist(gen) * 1e3f;
    return x;
  };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    packed_world.run([&](int r) {
      packed[r] = data(r);
      packed_world.comm(r).all_reduce(packed[r].data(), total,
                                      make_group(packed_world.mesh(), r, {0}), op);
    });
    segmented_world.run([&](int r) {
      const std::vector<float> x = data(r);
      std::vector<std::vector<float>> pieces;
      size_t at = 0;
      for (size_t c : sizes) {
        pieces.emplace_back(x.begin() + at, x.begin() + at + c);
        at += c;
      }
      std::vector<Segment<float>> segments;
      for (auto& piece : pieces) segments.push_back({piece.data(), piece.size()});
      segmented_world.comm(r).all_reduce(segments, make_group(segmented_world.mesh(), r, {0}), op);
      segmented[r].clear();
      for (auto& piece : pieces) segmented[r].insert(segmented[r].end(), piece.begin(), piece.end());
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(segmented[r], packed[r]) << "rank " << r;
      EXPECT_EQ(segmented_world.comm(r).stats().bytes(CollectiveKind::kAllReduce),
                packed_world.comm(r).stats().bytes(CollectiveKind::kAllReduce));
      EXPECT_EQ(segmented_world.comm(r).stats().count(CollectiveKind::kAllReduce),
                packed_world.comm(r).stats().count(CollectiveKind::kAllReduce));
    }
  }
  if (n > 1) {
    EXPECT_NE(packed[0], data(0)) << "the values were reduced";
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Collectives, ::testing::Range(1, 9));

// ---- exact bytes sent ----

TEST(CollectiveBytes, AllReduceSendsTwiceNMinusOneOverN) {
  ThreadWorld world(line(8));
  world.run([&](int r) {
    std::vector<float> x(1024, 1.0f);
    world.comm(r).all_reduce(x.data(), 1024, make_group(world.mesh(), r, {0}), ReduceOp::kSum);
  });
  for (int r = 0; r < 8; ++r) {
    const CommStats& s = world.comm(r).stats();
    EXPECT_EQ(s.bytes(CollectiveKind::kAllReduce), 2u * 7 * 4096 / 8) << "rank " << r;
    EXPECT_EQ(s.count(CollectiveKind::kAllReduce), 1u);
    EXPECT_EQ(s.total_bytes(), 7168u);
  }
  EXPECT_EQ(world.total_stats().bytes(CollectiveKind::kAllReduce), 8u * 7168);
}

TEST(CollectiveBytes, AllReduceUnevenChunks) {
  // 10 floats on 4 devices: balanced chunks of 3, 3, 2, 2. Member p sends every
  // chunk but its own in the reduce-scatter and every chunk but p+1's in the
  // all-gather.
  ThreadWorld world(line(4));
  world.run([&](int r) {
    std::vector<float> x(10, 1.0f);
    world.comm(r).all_reduce(x.data(), 10, make_group(world.mesh(), r, {0}), ReduceOp::kSum);
    EXPECT_EQ(x, std::vector<float>(10, 4.0f));
  });
  const size_t chunk[4] = {3, 3, 2, 2};
  for (int p = 0; p < 4; ++p) {
    EXPECT_EQ(world.comm(p).stats().bytes(CollectiveKind::kAllReduce),
              4 * (2 * 10 - chunk[p] - chunk[(p + 1) % 4]))
        << "rank " << p;
  }
}

TEST(CollectiveBytes, GatherScatterAllToAllAndPPermute) {
  ThreadWorld world(line(8));
  const size_t c = 100;
  world.run([&](int r) {
    const Group g = make_group(world.mesh(), r, {0});
    Communicator& comm = world.comm(r);
    std::vector<float> in(c * 8, 1.0f), out(c * 8);
    comm.all_gather(in.data(), out.data(), c, g);
    comm.reduce_scatter(in.data(), out.data(), c, g, ReduceOp::kSum);
    comm.all_to_all(in.data(), out.data(), c, g);
    // Positions 0..3 send to 4..7; 4..7 keep their own block (not counted).
    comm.ppermute(in.data(), out.data(), c, g,
                  {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {4, 0}, {5, 1}, {6, 2}, {7, 3}});
    comm.ppermute(in.data(), out.data(), c, g, {{0, 1}, {4, 4}});
  });
  for (int r = 0; r < 8; ++r) {
    const CommStats& s = world.comm(r).stats();
    EXPECT_EQ(s.bytes(CollectiveKind::kAllGather), 7u * c * 4);
    EXPECT_EQ(s.bytes(CollectiveKind::kReduceScatter), 7u * c * 4);  // (n-1)/n of 8*c floats
    EXPECT_EQ(s.bytes(CollectiveKind::kAllToAll), 7u * c * 4);
    EXPECT_EQ(s.bytes(CollectiveKind::kPPermute), c * 4 * (r == 0 ? 2 : 1)) << "rank " << r;
    EXPECT_EQ(s.count(CollectiveKind::kPPermute), 2u);
    EXPECT_EQ(s.total_calls(), 5u);
  }
  world.reset_stats();
  EXPECT_EQ(world.total_stats().total_bytes(), 0u);
}

TEST(CollectiveBytes, GroupsOfOneMoveNothing) {
  ThreadWorld world(line(3));
  world.run([&](int r) {
    const Group self = make_group(world.mesh(), r, {});
    Communicator& comm = world.comm(r);
    std::vector<float> x = ints(8, r), out(8);
    comm.all_reduce(x.data(), 8, self, ReduceOp::kSum);
    EXPECT_EQ(x, ints(8, r));
    comm.all_gather(x.data(), out.data(), 8, self);
    EXPECT_EQ(out, x);
    comm.reduce_scatter(x.data(), out.data(), 8, self, ReduceOp::kMax);
    EXPECT_EQ(out, x);
    comm.all_to_all(x.data(), out.data(), 8, self);
    EXPECT_EQ(out, x);
    comm.ppermute(x.data(), out.data(), 8, self, {{0, 0}});
    EXPECT_EQ(out, x);
    comm.barrier(self);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(world.comm(r).stats().total_bytes(), 0u);
    EXPECT_EQ(world.comm(r).stats().total_calls(), 5u);
  }
}

TEST(CollectiveBytes, StatsText) {
  CommStats s;
  s.calls[0] = 1;
  s.bytes_sent[0] = 7168;
  s.seconds_in[0] = 0.25;
  s.calls[4] = 2;
  s.bytes_sent[4] = 800;
  s.seconds_in[4] = 1.5e-6;
  EXPECT_EQ(s.to_string(),
            "all_reduce: 1 call, 7168 bytes sent, 0.250000 s\n"
            "ppermute: 2 calls, 800 bytes sent, 0.000002 s\n");
  EXPECT_DOUBLE_EQ(s.total_seconds(), 0.25 + 1.5e-6);
  EXPECT_STREQ(collective_kind_name(CollectiveKind::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(collective_kind_name(CollectiveKind::kAllToAll), "all_to_all");
}

// ---- time spent in collectives ----

// One call of every kind on a ring of 4; returns each device's statistics.
std::vector<CommStats> time_every_kind(const LinkModel& link) {
  ThreadWorld world(line(4));
  world.set_link(link);
  const size_t c = 256;
  world.run([&](int r) {
    const Group g = make_group(world.mesh(), r, {0});
    Communicator& comm = world.comm(r);
    std::vector<float> in(c * 4, 1.0f), out(c * 4);
    comm.all_reduce(in.data(), c * 4, g, ReduceOp::kSum);
    comm.all_gather(in.data(), out.data(), c, g);
    comm.reduce_scatter(in.data(), out.data(), c, g, ReduceOp::kSum);
    comm.all_to_all(in.data(), out.data(), c, g);
    comm.ppermute(in.data(), out.data(), c, g, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
    comm.send(in.data(), c, (r + 1) % 4, 7);
    comm.recv(out.data(), c, (r + 3) % 4, 7);
  });
  std::vector<CommStats> stats;
  for (int r = 0; r < 4; ++r) stats.push_back(world.comm(r).stats());
  const CommStats total = world.total_stats();
  double sum = 0;
  for (const CommStats& s : stats) sum += s.total_seconds();
  EXPECT_NEAR(total.total_seconds(), sum, 1e-9);  // the same terms, summed in another order
  world.reset_stats();
  EXPECT_EQ(world.total_stats().total_seconds(), 0.0);
  return stats;
}

// Only lower bounds that the link's sleeps guarantee, never an upper bound.
// Take the device that enters a collective first: every message of that
// collective is sent after its sender entered it, so the first device waits at
// least (chain of dependent hops) x latency, however staggered the others are.
// The max over devices therefore has a sound lower bound per kind; all_reduce
// chains 2(n-1) = 6 hops, all_gather and reduce_scatter n-1 = 3, the others
// (send_recv included: each rank sends, then waits for its left neighbour) 1.
TEST(CollectiveTime, IsNonNegativeAndGrowsWithASlowLink) {
  const double latency = 0.02;
  const std::vector<CommStats> fast = time_every_kind(LinkModel{});
  const std::vector<CommStats> slow = time_every_kind(LinkModel{latency, 0});
  const int hops[kNumCollectiveKinds] = {6, 3, 3, 1, 1, 1};
  double fast_total = 0, slow_total = 0;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    double slow_max = 0;
    for (int r = 0; r < 4; ++r) {
      EXPECT_GE(fast[r].seconds(kind), 0.0) << "rank " << r << " " << collective_kind_name(kind);
      slow_max = std::max(slow_max, slow[r].seconds(kind));
    }
    EXPECT_GE(slow_max, hops[k] * latency) << collective_kind_name(kind);
  }
  for (int r = 0; r < 4; ++r) {
    fast_total = std::max(fast_total, fast[r].total_seconds());
    slow_total = std::max(slow_total, slow[r].total_seconds());
    // Time accounting leaves the byte counts alone.
    EXPECT_EQ(slow[r].total_bytes(), fast[r].total_bytes()) << "rank " << r;
  }
  EXPECT_GT(slow_total, fast_total);
}

}  // namespace
}  // namespace sharc::rt

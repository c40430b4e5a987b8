// The thread budget (runtime/blas.h) and device teams (runtime/team.h): the
// budget divides the machine's cores among devices, a team runs every part
// once and passes exceptions on, and a GEMM split over a team computes what
// the double-precision reference computes, for splits over M and over N,
// with and without transposes, and with a batch.
#include "runtime/team.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/blas.h"
#include "runtime/kernels.h"
#include "runtime/thread_world.h"
#include "tests/runtime/gemm_reference.h"

namespace sharc::rt {
namespace {

TEST(ThreadBudget, DevicesTimesThreadsIsTheMachine) {
  unsetenv("SHARC_THREADS_PER_DEVICE");
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(threads_per_device(1), cores);
  EXPECT_EQ(threads_per_device(cores), 1);
  EXPECT_EQ(threads_per_device(4 * cores), 1);  // never below one
  if (cores >= 4) {
    EXPECT_EQ(threads_per_device(2), cores / 2);
  }
  setenv("SHARC_THREADS_PER_DEVICE", "3", 1);
  EXPECT_EQ(threads_per_device(8), 3);
  setenv("SHARC_THREADS_PER_DEVICE", "zero", 1);  // not a positive number: ignored
  EXPECT_EQ(threads_per_device(4 * cores), 1);
  unsetenv("SHARC_THREADS_PER_DEVICE");
}

TEST(ThreadBudget, WorldsTakeTheirShare) {
  unsetenv("SHARC_THREADS_PER_DEVICE");
  ThreadWorld one(MeshShape{{"data"}, {1}});
  EXPECT_EQ(one.threads_per_device(), threads_per_device(1));
  ThreadWorld eight(MeshShape{{"data"}, {8}});
  EXPECT_EQ(eight.threads_per_device(), threads_per_device(8));
  try {
    eight.set_threads_per_device(0);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "ThreadWorld::set_threads_per_device(0): at least one thread per device");
  }
}

TEST(Team, RunsEveryPartOnceAndRethrows) {
  Team team(3);
  EXPECT_EQ(team.size(), 3);
  for (int parts = 1; parts <= 3; ++parts) {
    std::vector<std::atomic<int>> hits(3);
    team.run(parts, [&](int p) { ++hits[p]; });
    for (int p = 0; p < 3; ++p) EXPECT_EQ(hits[p].load(), p < parts ? 1 : 0) << parts;
  }
  try {
    team.run(3, [](int p) {
      if (p == 2) throw std::runtime_error("part 2 failed");
    });
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "part 2 failed");
  }
  try {
    team.run(4, [](int) {});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Team::run: 4 parts on a team of 3");
  }
  team.run(2, [](int) {});  // still usable after an error
}

void check_split_gemm(int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb) {
  std::mt19937 gen(static_cast<unsigned>(M * 131 + N * 7 + K));
  std::normal_distribution<float> dist;
  std::vector<float> A(batch * M * K), B(batch * K * N), C(batch * M * N, 99.0f);
  for (float& x : A) x = dist(gen);
  for (float& x : B) x = dist(gen);
  Team team(4);
  {
    TeamScope scope(&team);
    ASSERT_EQ(current_team(), &team);
    gemm(batch, M, N, K, A.data(), ta, B.data(), tb, C.data());
  }
  EXPECT_EQ(current_team(), nullptr);
  const double max_rel = testing::gemm_max_relative_error(batch, M, N, K, A, ta, B, tb, C);
  EXPECT_LT(max_rel, 1e-5) << batch << "x" << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb;
}

TEST(Team, ParallelForCoversTheRangeOnceInWholeGrains) {
  // Without a team: one call over everything.
  std::vector<std::pair<int64_t, int64_t>> calls;
  parallel_for(1000, 64, [&](int64_t lo, int64_t hi) { calls.emplace_back(lo, hi); });
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(int64_t{0}, int64_t{1000}));
  Team team(3);
  TeamScope scope(&team);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{130},
                    int64_t{1} << 16, (int64_t{1} << 16) + 7}) {
    for (int64_t grain : {int64_t{1}, int64_t{64}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " grain " + std::to_string(grain));
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> bodies{0};
      parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
        ++bodies;
        EXPECT_EQ(lo % grain, 0) << "a part starts inside a grain";
        EXPECT_TRUE(hi == n || hi % grain == 0) << "a part ends inside a grain";
        for (int64_t i = lo; i < hi; ++i) ++hits[static_cast<size_t>(i)];
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "element " << i;
      // As many parts as the team has threads, when there are that many grains.
      if ((n + grain - 1) / grain >= 3) {
        EXPECT_EQ(bodies.load(), 3);
      }
    }
  }
}

TEST(Team, SplitGemmEqualsTheReference) {
  // Large enough (M*N*K >= 4 * 2^22) to be split in four; M >= N splits rows,
  // M < N splits columns; 100 and 200 are not multiples of the 16-wide panels.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_split_gemm(1, 200, 100, 1024, ta, tb);
      check_split_gemm(1, 100, 200, 1024, ta, tb);
    }
  check_split_gemm(2, 64, 300, 512, false, false);
}

}  // namespace
}  // namespace sharc::rt

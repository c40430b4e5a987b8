// Devices as fibers (runtime/fibers.h): a FiberPool runs every fiber once on
// its own thread (contiguous blocks: i * threads / fibers), a waiting fiber
// lets its thread run the
// others, a device's team goes with its fiber, exceptions come back after
// all fibers end; and a ThreadWorld on fewer threads than devices computes
// bit for bit what one thread per device computes, fails the same way
// (a throw, a timeout, lent blocks taken back) and delays by the link model.
// The other runtime tests run their worlds on the default threads, which on
// a machine with fewer cores than devices are fibers too.
#include "runtime/fibers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/team.h"
#include "runtime/thread_world.h"

namespace sharc::rt {
namespace {

#define SKIP_WITHOUT_FIBERS() \
  if (!fibers_available()) GTEST_SKIP() << "built without Boost.Context: no fibers"

TEST(FiberPool, RunsEveryFiberOnceOnItsOwnThread) {
  SKIP_WITHOUT_FIBERS();
  FiberPool pool(8, 3);
  EXPECT_EQ(pool.fibers(), 8);
  EXPECT_EQ(pool.threads(), 3);
  for (int round = 0; round < 3; ++round) {  // the pool is reused
    std::vector<std::atomic<int>> calls(8);
    std::vector<std::thread::id> thread(8);
    pool.run([&](int i) {
      ++calls[static_cast<size_t>(i)];
      thread[static_cast<size_t>(i)] = std::this_thread::get_id();
      fiber_wait(FiberPool::Clock::now());  // switch away and back: same thread
      EXPECT_EQ(thread[static_cast<size_t>(i)], std::this_thread::get_id());
    });
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(calls[static_cast<size_t>(i)].load(), 1) << i;
      for (int j = 0; j < 8; ++j)
        EXPECT_EQ(thread[static_cast<size_t>(i)] == thread[static_cast<size_t>(j)],
                  i * 3 / 8 == j * 3 / 8)
            << i << " " << j;
    }
    EXPECT_EQ(thread[0], std::this_thread::get_id());  // the caller runs thread 0's fibers
  }
}

// Four fibers on one thread, each waiting for the one after it: only
// switching at the waits lets the last one run and the others finish.
TEST(FiberPool, AWaitingFiberLetsItsThreadRunTheOthers) {
  SKIP_WITHOUT_FIBERS();
  FiberPool pool(4, 1);
  std::atomic<int> released{3};  // fiber i may finish once released <= i
  std::vector<int> order;
  pool.run([&](int i) {
    while (released.load() > i) ASSERT_TRUE(fiber_wait());
    order.push_back(i);
    released.store(i - 1);
    pool.notify(i - 1 < 0 ? 0 : i - 1);
  });
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0}));
}

// A fiber on one thread waits with no deadline for a flag another thread's
// fiber sets much later: the waiting thread sleeps, and the notify wakes it.
TEST(FiberPool, NotifyWakesTheThreadOfAWaitingFiber) {
  SKIP_WITHOUT_FIBERS();
  FiberPool pool(2, 2);
  std::atomic<bool> ready{false};
  int passes = 0;
  pool.run([&](int i) {
    if (i == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      ready.store(true);
      pool.notify(1);
    } else {
      while (!ready.load()) {
        ++passes;
        fiber_wait();
      }
    }
  });
  EXPECT_TRUE(ready.load());
  // Without a notify the sleeping thread looks again every millisecond; a
  // thread that never slept would look millions of times.
  EXPECT_LT(passes, 1000);
}

TEST(FiberPool, EachFiberKeepsItsTeam) {
  SKIP_WITHOUT_FIBERS();
  std::vector<std::unique_ptr<Team>> teams;
  for (int i = 0; i < 4; ++i) teams.push_back(std::make_unique<Team>(1));
  FiberPool pool(4, 2);
  pool.run([&](int i) {
    EXPECT_EQ(current_team(), nullptr);
    TeamScope scope(teams[static_cast<size_t>(i)].get());
    for (int k = 0; k < 3; ++k) {
      fiber_wait(FiberPool::Clock::now());
      EXPECT_EQ(current_team(), teams[static_cast<size_t>(i)].get()) << i;
    }
  });
  EXPECT_EQ(current_team(), nullptr);
}

// The calling thread's id, read afresh: std::this_thread::get_id() is
// pthread_self(), which glibc declares const, so the compiler may keep one
// call's answer across a fiber's switch to another thread within a function.
[[gnu::noinline]] std::thread::id thread_now() {
  asm volatile("" ::: "memory");
  return std::this_thread::get_id();
}

// With migration, a fiber notified while its home thread is busy (fiber 0
// computes until fiber 1 is done: without migration, never) is resumed by
// the other thread, and takes its Team with it. Fiber 2 keeps the other
// thread busy until fiber 1 has started on its home thread.
TEST(FiberPool, AnIdleThreadRunsAnotherThreadsReadyFiber) {
  SKIP_WITHOUT_FIBERS();
  FiberPool pool(4, 2);  // fibers 0, 1 on the caller's thread; 2, 3 on the other
  EXPECT_FALSE(pool.migration());
  pool.set_migration(true);
  EXPECT_TRUE(pool.migration());
  Team team(1);
  std::atomic<bool> waiting{false}, released{false}, done{false};
  std::thread::id home, before, after, other;
  Team* team_after = nullptr;
  bool timed_out = false;
  pool.run([&](int i) {
    if (i == 0) {
      home = thread_now();
      fiber_wait(FiberPool::Clock::now());  // let fiber 1 start here first
      const auto give_up = FiberPool::Clock::now() + std::chrono::seconds(10);
      while (!done.load())  // busy: this thread runs nothing else meanwhile
        if (FiberPool::Clock::now() > give_up) {
          timed_out = true;
          done.store(true);
        }
    } else if (i == 1) {
      before = thread_now();
      TeamScope scope(&team);
      waiting.store(true);
      do fiber_wait();  // at least once, released or not
      while (!released.load());
      after = thread_now();
      team_after = current_team();
      done.store(true);
    } else if (i == 2) {
      // Busy too until fiber 1 waits, so that it starts on its home thread.
      other = thread_now();
      const auto give_up = FiberPool::Clock::now() + std::chrono::seconds(10);
      while (!waiting.load() && FiberPool::Clock::now() < give_up) {
      }
      released.store(true);
      pool.notify(1);
    }
  });
  EXPECT_FALSE(timed_out) << "fiber 1 never ran again while its thread was busy";
  EXPECT_EQ(before, home);
  EXPECT_EQ(after, other);
  EXPECT_NE(after, home);
  EXPECT_EQ(team_after, &team);
  EXPECT_EQ(current_team(), nullptr);
  EXPECT_THROW(
      {
        pool.run([&](int) {
          try {
            pool.set_migration(false);
          } catch (const std::logic_error& e) {
            EXPECT_STREQ(e.what(), "FiberPool::set_migration while running");
            throw;
          }
        });
      },
      std::logic_error);
}

TEST(FiberPool, RethrowsTheFirstExceptionAfterEveryFiberEnds) {
  SKIP_WITHOUT_FIBERS();
  FiberPool pool(6, 2);
  std::atomic<int> finished{0};
  try {
    pool.run([&](int i) {
      fiber_wait(FiberPool::Clock::now());
      if (i == 3) throw std::runtime_error("fiber 3 failed");
      ++finished;
    });
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "fiber 3 failed");
  }
  EXPECT_EQ(finished.load(), 5);
  pool.run([&](int) { ++finished; });  // reusable after a failed run
  EXPECT_EQ(finished.load(), 11);
}

TEST(FiberPool, WaitOutsideAFiberReturnsAtOnce) {
  EXPECT_FALSE(fiber_wait());
  if (!fibers_available()) return;
  FiberPool pool(2, 2);
  pool.run([&](int) {
    // A thread of the fiber's own (a team's worker, say) is no fiber.
    std::thread t([] { EXPECT_FALSE(fiber_wait()); });
    t.join();
  });
}

TEST(FiberPool, RejectsBadCounts) {
  SKIP_WITHOUT_FIBERS();
  try {
    FiberPool pool(2, 3);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "FiberPool: 2 fibers on 3 threads");
  }
  EXPECT_THROW(FiberPool(0, 0), std::invalid_argument);
}

// Every collective kind, async ppermute and send/recv, on a 2x4 mesh:
// fibers on 1 and 3 threads give the bits and counts 8 threads give.
std::vector<float> collectives_on(int device_threads, CommStats* stats) {
  ThreadWorld world(MeshShape{{"data", "model"}, {2, 4}});
  world.set_device_threads(device_threads);
  EXPECT_EQ(world.device_threads(), device_threads);
  std::vector<std::vector<float>> out(8);
  world.run([&](int r) {
    Communicator& c = world.comm(r);
    const Group model = make_group(world.mesh(), r, {1});
    const Group data = make_group(world.mesh(), r, {0});
    const Group all = make_group(world.mesh(), r, {0, 1});
    std::vector<float> x(4096);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 97) + 0.37f * r;
    c.all_reduce(x.data(), x.size(), model, ReduceOp::kSum);
    std::vector<float> g(2 * x.size());
    c.all_gather(x.data(), g.data(), x.size(), data);
    std::vector<float> s(g.size() / 8);
    c.reduce_scatter(g.data(), s.data(), s.size(), all, ReduceOp::kSum);
    std::vector<float> a(g.size());
    c.all_to_all(g.data(), a.data(), g.size() / 4, model);
    std::vector<float> p(s.size());
    PendingRecv pending = c.ppermute_start(s.data(), p.data(), s.size(), model,
                                           {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
    c.all_reduce(a.data(), a.size(), data, ReduceOp::kMax);
    c.ppermute_wait(pending);
    std::vector<float> q(p.size());
    if (r % 2 == 0) {
      c.send(p.data(), p.size(), r + 1, /*tag=*/7);
      c.recv(q.data(), q.size(), r + 1, /*tag=*/8);
    } else {
      c.recv(q.data(), q.size(), r - 1, /*tag=*/7);
      c.send(p.data(), p.size(), r - 1, /*tag=*/8);
    }
    c.barrier(all);
    std::vector<float>& o = out[static_cast<size_t>(r)];
    for (const auto* v : {&x, &g, &s, &a, &p, &q}) o.insert(o.end(), v->begin(), v->end());
  });
  *stats = world.total_stats();
  std::vector<float> flat;
  for (const auto& o : out) flat.insert(flat.end(), o.begin(), o.end());
  return flat;
}

TEST(ThreadWorld, DeviceFibersComputeWhatDeviceThreadsCompute) {
  SKIP_WITHOUT_FIBERS();
  CommStats on_threads, on_fibers;
  const std::vector<float> want = collectives_on(8, &on_threads);
  for (int threads : {1, 3}) {
    const std::vector<float> got = collectives_on(threads, &on_fibers);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << threads;
    for (CollectiveKind k : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                             CollectiveKind::kReduceScatter, CollectiveKind::kAllToAll,
                             CollectiveKind::kPPermute, CollectiveKind::kSendRecv}) {
      EXPECT_EQ(on_fibers.bytes(k), on_threads.bytes(k)) << threads;
      EXPECT_EQ(on_fibers.count(k), on_threads.count(k)) << threads;
    }
  }
}

// Devices 0-3 start on thread 0 and 4-7 on thread 1; device 0 computes for
// 100 ms before an all-reduce over all eight. Thread 1, its own devices
// waiting, runs some of devices 1-3 meanwhile; with SHARC_DEVICE_MIGRATION=0
// none. The sums are the same either way.
std::vector<int> devices_run_elsewhere(bool migration) {
  if (!migration) setenv("SHARC_DEVICE_MIGRATION", "0", 1);
  ThreadWorld world(MeshShape{{"x"}, {8}});
  world.set_device_threads(2);
  unsetenv("SHARC_DEVICE_MIGRATION");
  std::vector<std::thread::id> thread(8);
  std::vector<int> moved;
  world.run([&](int r) {
    const std::thread::id start = std::this_thread::get_id();
    if (r == 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    std::vector<float> x(1024, static_cast<float>(r));
    world.comm(r).all_reduce(x.data(), x.size(), make_group(world.mesh(), r, {0}), ReduceOp::kSum);
    EXPECT_EQ(x[0], 28.0f);
    EXPECT_EQ(x[1023], 28.0f);
    thread[static_cast<size_t>(r)] = start;
  });
  for (int r = 1; r < 4; ++r)
    if (thread[static_cast<size_t>(r)] != thread[0]) moved.push_back(r);
  for (int r = 5; r < 8; ++r) EXPECT_EQ(thread[static_cast<size_t>(r)], thread[4]) << r;
  return moved;
}

TEST(ThreadWorld, AnIdleDeviceThreadRunsAnotherThreadsDevices) {
  SKIP_WITHOUT_FIBERS();
  EXPECT_FALSE(devices_run_elsewhere(true).empty());
  EXPECT_TRUE(devices_run_elsewhere(false).empty());
}

TEST(ThreadWorld, DeviceFibersFailLikeDeviceThreads) {
  SKIP_WITHOUT_FIBERS();
  ThreadWorld world(MeshShape{{"x"}, {4}});
  for (int threads : {1, 2}) {
    world.set_device_threads(threads);
    // A throw: the others, blocked in a collective, are woken by the poison.
    world.set_recv_timeout(0);
    for (int round = 0; round < 2; ++round) {
      try {
        world.run([&](int r) {
          const Group g = make_group(world.mesh(), r, {0});
          std::vector<float> mine(4096, static_cast<float>(r)), all(4 * 4096);
          world.comm(r).all_gather(mine.data(), all.data(), 4096, g);
          if (r == 2) throw std::runtime_error("device 2 failed");
          world.comm(r).all_gather(mine.data(), all.data(), 4096, g);  // never completes
        });
        FAIL() << "expected std::runtime_error";
      } catch (const WorldAborted&) {
        FAIL() << "run() reported a secondary abort instead of the original failure";
      } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "device 2 failed");
      }
    }
    // A schedule that never matches: the receive times out.
    world.set_recv_timeout(0.2);
    try {
      world.run([&](int r) {
        float x = 1.0f;
        if (r == 0) world.comm(r).all_reduce(&x, 1, make_group(world.mesh(), r, {0}), ReduceOp::kSum);
      });
      FAIL() << "expected a timeout";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 waited 0.2"), std::string::npos) << e.what();
    }
    world.run([&](int r) {  // and the world runs again
      float x = 1.0f;
      world.comm(r).all_reduce(&x, 1, make_group(world.mesh(), r, {0}), ReduceOp::kSum);
      EXPECT_EQ(x, 4.0f);
    });
  }
}

// 4000 bytes at 100 kB/s plus 20 ms latency: 60 ms, during which the
// receiving device's thread-mate keeps running.
TEST(ThreadWorld, LinkModelDelaysDeliveryOnFibers) {
  SKIP_WITHOUT_FIBERS();
  ThreadWorld world(MeshShape{{"x"}, {3}});
  world.set_device_threads(1);
  world.set_link(LinkModel{0.02, 1e5});
  std::atomic<bool> other_ran{false};
  double waited = 0;
  world.run([&](int r) {
    std::vector<float> block(1000, 1.0f);
    if (r == 0) world.comm(r).send(block.data(), block.size(), 1, 3);
    if (r == 1) {
      const auto t0 = std::chrono::steady_clock::now();
      world.comm(r).recv(block.data(), block.size(), 0, 3);
      waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_TRUE(other_ran.load());
    }
    if (r == 2) other_ran.store(true);
  });
  EXPECT_GE(waited, 0.055);
}

TEST(ThreadWorld, DeviceThreadsAreChecked) {
  ThreadWorld world(MeshShape{{"x"}, {4}});
  try {
    world.set_device_threads(5);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "ThreadWorld::set_device_threads(5): between 1 and the 4 devices");
  }
  EXPECT_THROW(world.set_device_threads(0), std::invalid_argument);
  world.set_device_threads(4);  // one thread each always works
  EXPECT_EQ(world.device_threads(), 4);
  if (!fibers_available()) {
    try {
      world.set_device_threads(2);
      FAIL() << "no error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("needs fibers"), std::string::npos) << e.what();
    }
  }
}

TEST(ThreadWorld, DefaultDeviceThreadsFitTheMachine) {
  const char* env = std::getenv("SHARC_DEVICE_THREADS");
  const std::string saved = env ? env : "";
  unsetenv("SHARC_DEVICE_THREADS");
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const MeshShape eight{{"x"}, {8}};
  {
    ThreadWorld world(eight);
    const int want =
        fibers_available() ? std::min(8, std::max(1, cores / world.threads_per_device())) : 8;
    EXPECT_EQ(world.device_threads(), want);
  }
  const bool fibers = fibers_available();
  setenv("SHARC_DEVICE_THREADS", "3", 1);
  EXPECT_EQ(ThreadWorld(eight).device_threads(), fibers ? 3 : 8);
  setenv("SHARC_DEVICE_THREADS", "100", 1);  // at most one thread per device
  EXPECT_EQ(ThreadWorld(eight).device_threads(), 8);
  setenv("SHARC_DEVICE_THREADS", "two", 1);  // not a positive number: ignored
  EXPECT_EQ(ThreadWorld(eight).device_threads(),
            fibers ? std::min(8, std::max(1, cores / ThreadWorld(eight).threads_per_device())) : 8);
  if (env)
    setenv("SHARC_DEVICE_THREADS", saved.c_str(), 1);
  else
    unsetenv("SHARC_DEVICE_THREADS");
}

}  // namespace
}  // namespace sharc::rt

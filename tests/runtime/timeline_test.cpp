// Timelines (runtime/trace.h) on a ThreadWorld: the virtual clock charges
// each statement its roofline cost and each message its link time, exactly
// and deterministically (the expected times below are worked out by hand
// from the model); the wall clock records the same events with real times;
// with the clock off nothing is recorded; the device clock makes each
// statement's event from the stamps its device read back.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/thread_world.h"
#include "runtime/trace.h"

namespace sharc::rt {
namespace {

MachineModel machine() {
  MachineModel m;
  m.flops_per_s = 1e9;  // 1 GFLOP/s
  m.bytes_per_s = 1e8;  // 100 MB/s
  m.overhead_s = 1e-6;
  return m;
}

TEST(MachineModel, ChargesTheRooflineMaximumPlusOverhead) {
  const MachineModel m = machine();
  EXPECT_DOUBLE_EQ(m.seconds({.flops = 2e6, .bytes = 1e4}), 2e-3 + 1e-6);  // compute bound
  EXPECT_DOUBLE_EQ(m.seconds({.flops = 1e3, .bytes = 1e6}), 1e-2 + 1e-6);  // memory bound
}

// Device 0 computes for 2 ms and sends 1 MB to device 1; device 1 computes
// for 1 ms and receives. The link: 10 us + 1 GB/s, so the message lands at
// 2 ms + 1 ms (transfer) + 10 us; device 1 waited from 1 ms to then.
TEST(VirtualClock, ChargesStatementsAndLinkTimesExactly) {
  ThreadWorld world(MeshShape{{"pipe"}, {2}});
  world.set_link({.latency_s = 10e-6, .bytes_per_s = 1e9});
  MachineModel m = machine();
  m.overhead_s = 0;
  world.set_clock(ClockMode::kVirtual, m);
  std::vector<float> block(250000, 1.0f);  // 1 MB
  world.run([&](int r) {
    Timeline& t = world.timeline(r);
    if (r == 0) {
      t.op("dot  model.cpp:3 l0", {.flops = 2e6, .bytes = 0});
      t.comm_op("send  model.cpp:3 l0");
      world.comm(0).send(block.data(), block.size(), 1, 7);
    } else {
      std::vector<float> in(block.size());
      t.op("tanh  model.cpp:5", {.flops = 1e6, .bytes = 0});
      t.comm_op("recv  model.cpp:3 l0");
      world.comm(1).recv(in.data(), in.size(), 0, 7);
      EXPECT_EQ(in, block);
    }
  });
  const std::vector<DeviceTime> times = world.device_times();
  EXPECT_DOUBLE_EQ(times[0].now_s, 2e-3);
  EXPECT_DOUBLE_EQ(times[0].busy_s, 2e-3);
  EXPECT_DOUBLE_EQ(times[1].now_s, 3e-3 + 10e-6);
  EXPECT_DOUBLE_EQ(times[1].busy_s, 1e-3);
  EXPECT_DOUBLE_EQ(times[1].comm_s, 2e-3 + 10e-6);

  const Trace trace = world.trace();
  EXPECT_EQ(trace.clock, "virtual");
  ASSERT_EQ(trace.track_names, (std::vector<std::string>{"device 0 (pipe=0)", "device 1 (pipe=1)"}));
  ASSERT_EQ(trace.events.size(), 4u);
  const TraceEvent& send = trace.events[1];
  EXPECT_EQ(send.name, "send  model.cpp:3 l0");
  EXPECT_EQ(send.category, "send");
  EXPECT_EQ(send.peer, 1);
  EXPECT_EQ(send.tag, 7);
  EXPECT_EQ(send.bytes, 1000000u);
  EXPECT_DOUBLE_EQ(send.start_s, 2e-3);
  EXPECT_DOUBLE_EQ(send.end_s, 2e-3);  // sends do not wait
  const TraceEvent& recv = trace.events[3];
  EXPECT_EQ(recv.category, "recv");
  EXPECT_EQ(recv.peer, 0);
  EXPECT_EQ(recv.tag, 7);
  EXPECT_DOUBLE_EQ(recv.start_s, 1e-3);
  EXPECT_DOUBLE_EQ(recv.end_s, 3e-3 + 10e-6);
}

// A ring all_reduce of N bytes on n devices: n-1 reduce-scatter steps, each
// sending a chunk of N/n bytes and folding one in (three accesses per
// element, charged at bytes_per_s), then n-1 all-gather steps. With every
// device starting together each step costs the same on every device.
TEST(VirtualClock, RingAllReduceTakesItsModelledTime) {
  const int n = 4;
  const size_t count = 1 << 16;  // 256 KiB of f32
  ThreadWorld world(MeshShape{{"data"}, {n}});
  const double latency = 5e-6, bandwidth = 1e9;
  world.set_link({.latency_s = latency, .bytes_per_s = bandwidth});
  MachineModel m = machine();
  world.set_clock(ClockMode::kVirtual, m);
  world.run([&](int r) {
    std::vector<float> x(count, static_cast<float>(r));
    world.timeline(r).comm_op("all_reduce  model.cpp:9");
    world.comm(r).all_reduce(x.data(), count, make_group(world.mesh(), r, {0}), ReduceOp::kSum);
    EXPECT_EQ(x[0], 0.0f + 1 + 2 + 3);
  });
  const double chunk = 4.0 * count / n;
  const double hop = chunk / bandwidth + latency;
  const double fold = std::max(chunk / 4 / m.flops_per_s, 3 * chunk / m.bytes_per_s) + m.overhead_s;
  const double expected = (n - 1) * (hop + fold) + (n - 1) * hop;
  for (const DeviceTime& t : world.device_times()) {
    EXPECT_NEAR(t.now_s, expected, 1e-12);
    EXPECT_NEAR(t.busy_s, (n - 1) * fold, 1e-12);
    EXPECT_NEAR(t.comm_s, expected - (n - 1) * fold, 1e-12);
  }
  const Trace trace = world.trace();
  ASSERT_EQ(trace.events.size(), static_cast<size_t>(n));
  EXPECT_EQ(trace.events[0].category, "all_reduce");
  EXPECT_EQ(trace.events[0].name, "all_reduce  model.cpp:9");
  EXPECT_EQ(trace.events[0].bytes, static_cast<uint64_t>(2 * (n - 1) * chunk));
}

// The same program twice gives the same trace, bit for bit, though threads
// interleave differently; a second run starts where the latest device ended
// (every device's second statement starts at one time).
TEST(VirtualClock, IsDeterministicAndRunsContinueFromTheLatestDevice) {
  auto once = [] {
    ThreadWorld world(MeshShape{{"data"}, {4}});
    world.set_link({.latency_s = 1e-6, .bytes_per_s = 1e9});
    world.set_clock(ClockMode::kVirtual, machine());
    for (int step = 0; step < 2; ++step)
      world.run([&](int r) {
        world.timeline(r).op("mul  m.cpp:1", {.flops = 1e3 * (r + 1), .bytes = 0});
        std::vector<float> x(1000, 1.0f);
        world.timeline(r).comm_op("all_reduce  m.cpp:2");
        world.comm(r).all_reduce(x.data(), x.size(), make_group(world.mesh(), r, {0}), ReduceOp::kSum);
      });
    return world.trace();
  };
  const Trace a = once(), b = once();
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    EXPECT_EQ(a.events[i].start_s, b.events[i].start_s) << i;
    EXPECT_EQ(a.events[i].end_s, b.events[i].end_s) << i;
  }
  // Step 2's first statement on device 0 starts when the slowest device
  // finished step 1, not when device 0 did.
  std::vector<double> first_all_reduce_end(4, -1);
  std::vector<const TraceEvent*> muls;
  for (const TraceEvent& e : a.events) {
    if (e.name == "all_reduce  m.cpp:2" && first_all_reduce_end[e.device] < 0) first_all_reduce_end[e.device] = e.end_s;
    if (e.device == 0 && e.name == "mul  m.cpp:1") muls.push_back(&e);
  }
  const double step1_end = *std::max_element(first_all_reduce_end.begin(), first_all_reduce_end.end());
  ASSERT_EQ(muls.size(), 2u);
  EXPECT_DOUBLE_EQ(muls[1]->start_s, step1_end);
  for (const TraceEvent& e : a.events)
    if (e.name == "mul  m.cpp:1" && e.start_s > 0) {
      EXPECT_DOUBLE_EQ(e.start_s, step1_end) << "device " << e.device;
    }
}

TEST(WallClock, RecordsEveryStatementAndCallInOrder) {
  ThreadWorld world(MeshShape{{"data"}, {2}});
  world.set_clock(ClockMode::kWall);
  world.run([&](int r) {
    Timeline& t = world.timeline(r);
    t.op("exp  m.cpp:4", {.flops = 1, .bytes = 1});
    std::vector<float> x(64, 1.0f);
    t.comm_op("all_reduce  m.cpp:5");
    world.comm(r).all_reduce(x.data(), x.size(), make_group(world.mesh(), r, {0}), ReduceOp::kSum);
    t.op("log  m.cpp:6", {.flops = 1, .bytes = 1});
  });
  const Trace trace = world.trace();
  EXPECT_EQ(trace.clock, "wall");
  ASSERT_EQ(trace.events.size(), 6u);
  for (int d = 0; d < 2; ++d) {
    const TraceEvent* e = &trace.events[3 * d];
    EXPECT_EQ(e[0].name, "exp  m.cpp:4");
    EXPECT_EQ(e[0].category, "compute");
    EXPECT_EQ(e[1].name, "all_reduce  m.cpp:5");
    EXPECT_EQ(e[1].category, "all_reduce");
    EXPECT_EQ(e[2].name, "log  m.cpp:6");  // closed when the run ended
    for (int k = 0; k < 3; ++k) EXPECT_LE(e[k].start_s, e[k].end_s);
    EXPECT_LE(e[0].end_s, e[1].start_s);
    EXPECT_LE(e[1].end_s, e[2].start_s);
  }
  EXPECT_GT(world.device_times()[0].comm_s, 0.0);
}

TEST(ClockOff, RecordsNothing) {
  ThreadWorld world(MeshShape{{"data"}, {2}});
  world.run([&](int r) {
    world.timeline(r).op("exp  m.cpp:4", {.flops = 1e9, .bytes = 0});
    std::vector<float> x(4, 1.0f);
    world.comm(r).all_reduce(x.data(), x.size(), make_group(world.mesh(), r, {0}), ReduceOp::kSum);
  });
  EXPECT_TRUE(world.trace().events.empty());
  EXPECT_EQ(world.trace().clock, "off");
  EXPECT_EQ(world.device_times()[1].now_s, 0.0);
}

TEST(ThreadWorldClock, CannotChangeWhileRunning) {
  ThreadWorld world(MeshShape{{"data"}, {1}});
  std::string what;
  world.run([&](int) {
    try {
      world.set_clock(ClockMode::kWall);
    } catch (const std::logic_error& e) {
      what = e.what();
    }
  });
  EXPECT_EQ(what, "ThreadWorld::set_clock while running");
}

// A device whose stamps read back as given: the device clock's events are
// the spans between consecutive stamps, whatever the host's clock did.
class ScriptedStamps final : public StampSource {
 public:
  explicit ScriptedStamps(std::vector<double> times) : times_(std::move(times)) {}
  void stamp() override { ++stamped; }
  std::vector<double> read_stamps() override {
    ++reads;
    return std::vector<double>(times_.begin(), times_.begin() + std::min<size_t>(stamped, times_.size()));
  }
  size_t stamped = 0;
  int reads = 0;

 private:
  std::vector<double> times_;
};

TEST(DeviceClock, EachStatementLastsFromItsStampToTheNext) {
  ThreadWorld world(MeshShape{{"data"}, {1}});
  ScriptedStamps stamps({0.0, 2e-3, 2.5e-3, 4e-3});  // three statements and the run's end
  world.timeline(0).set_stamps(&stamps);
  world.set_clock(ClockMode::kDevice);
  world.run([&](int r) {
    world.timeline(r).op("dot  m.cpp:3", {});
    world.timeline(r).comm_op("all_reduce  m.cpp:4");
    std::vector<float> x(4, 1.0f);  // inside the statement's stamps: no event of its own
    world.comm(r).all_reduce(x.data(), x.size(), make_group(world.mesh(), r, {0}), ReduceOp::kSum);
    world.timeline(r).op("exp  m.cpp:5", {});
    EXPECT_EQ(stamps.reads, 0);  // read once, when the run is over
  });
  EXPECT_EQ(stamps.stamped, 4u);
  EXPECT_EQ(stamps.reads, 1);
  const Trace t = world.trace();
  EXPECT_EQ(t.clock, "device");
  ASSERT_EQ(t.events.size(), 3u);
  const char* names[] = {"dot  m.cpp:3", "all_reduce  m.cpp:4", "exp  m.cpp:5"};
  const char* categories[] = {"compute", "collective", "compute"};
  const double spans[] = {2e-3, 0.5e-3, 1.5e-3};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(t.events[i].name, names[i]);
    EXPECT_EQ(t.events[i].category, categories[i]);
    EXPECT_NEAR(t.events[i].end_s - t.events[i].start_s, spans[i], 1e-12) << names[i];
    if (i > 0) {
      EXPECT_DOUBLE_EQ(t.events[i].start_s, t.events[i - 1].end_s);
    }
  }
  EXPECT_NEAR(world.device_times()[0].busy_s, 3.5e-3, 1e-12);
  EXPECT_NEAR(world.device_times()[0].comm_s, 0.5e-3, 1e-12);
}

TEST(DeviceClock, NeedsADeviceThatStampsItsWork) {
  ThreadWorld world(MeshShape{{"data"}, {1}});
  world.set_clock(ClockMode::kDevice);
  std::string what;
  world.run([&](int r) {
    try {
      world.timeline(r).op("dot  m.cpp:3", {});
    } catch (const std::logic_error& e) {
      what = e.what();
    }
  });
  EXPECT_EQ(what,
            "the device clock (ClockMode::kDevice) needs a world whose devices stamp their work, a GPU world; "
            "this device has no StampSource");
}

TEST(DeviceClock, SaysWhenTheDeviceReadsBackOtherStamps) {
  ThreadWorld world(MeshShape{{"data"}, {1}});
  ScriptedStamps stamps({0.0, 1e-3});  // two, where the run gave three
  world.timeline(0).set_stamps(&stamps);
  world.set_clock(ClockMode::kDevice);
  std::string what;
  try {
    world.run([&](int r) {
      world.timeline(r).op("dot  m.cpp:3", {});
      world.timeline(r).op("exp  m.cpp:5", {});
    });
  } catch (const std::logic_error& e) {
    what = e.what();
  }
  EXPECT_EQ(what, "Timeline: 3 stamps given, 2 read back");
}

}  // namespace
}  // namespace sharc::rt

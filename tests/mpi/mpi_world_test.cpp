// MpiWorld under mpirun (label mpi). One program, four cases:
//   mpi_world_test <local devices> collectives   every collective on data=2,model=4
//       (8 devices): values as expected, and on each local device the same
//       values, bit for bit, and the same calls and bytes per kind as the
//       thread world running the same code;
//   mpi_world_test <local devices> failure       rank 5 throws before a whole-mesh
//       all_reduce: its process reports its own error, every other process
//       an abort naming rank 5, and nobody hangs;
//   mpi_world_test <local devices> timeout       rank 0 waits for a message
//       nobody sends: a 1 s timeout error naming rank 1;
//   mpi_world_test <local devices> bad_count     the process count does not
//       make the mesh: the constructor says so.
// Each process prints PASS or FAIL lines and exits non-zero on any FAIL.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/mpi_world.h"
#include "runtime/tensor_collectives.h"
#include "runtime/thread_world.h"
#include "tests/common/error_log_file.h"

namespace {

using namespace sharc::rt;

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

MeshShape mesh() {
  return MeshShape{{"data", "model"}, {2, 4}};
}

// What every device computes: results keyed by name.
using Results = std::map<std::string, std::vector<float>>;

Results work(Communicator& comm, const MeshShape& m, int r) {
  Results out;
  const Group model = make_group(m, r, {1}), data = make_group(m, r, {0}), all = make_group(m, r, {0, 1});
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(r + 1) + 0.01f * static_cast<float>(i);
  std::vector<float> a = x;
  comm.all_reduce(a.data(), a.size(), model, ReduceOp::kSum);
  comm.all_reduce(a.data(), a.size(), data, ReduceOp::kMax);
  out["all_reduce"] = a;
  std::vector<float> g(4 * 5);
  comm.all_gather(x.data(), g.data(), 5, model);
  out["all_gather"] = g;
  std::vector<float> rs(3);
  std::vector<float> in(8 * 3);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(r * 100 + i);
  comm.reduce_scatter(in.data(), rs.data(), 3, all, ReduceOp::kSum);
  out["reduce_scatter"] = rs;
  std::vector<float> t(4 * 2);
  std::vector<float> a2a(t.size());
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(r * 10 + i);
  comm.all_to_all(t.data(), a2a.data(), 2, model);
  out["all_to_all"] = a2a;
  std::vector<float> p(6);
  comm.ppermute(x.data(), p.data(), p.size(), model, ring_shift(4, 1));
  out["ppermute"] = p;
  // Point to point, received in the other order than sent: tags match.
  const int peer = r ^ 1;
  std::vector<float> one(3, static_cast<float>(r)), two(5, static_cast<float>(-r)), got1(3), got2(5);
  comm.send(one.data(), one.size(), peer, 1);
  comm.send(two.data(), two.size(), peer, 2);
  comm.recv(got2.data(), got2.size(), peer, 2);
  comm.recv(got1.data(), got1.size(), peer, 1);
  out["recv1"] = got1;
  out["recv2"] = got2;
  comm.barrier(all);
  return out;
}

int collectives(int local) {
  MpiWorld world(mesh(), local);
  std::vector<Results> mine(world.size());
  world.run([&](int r) { mine[r] = work(world.comm(r), world.mesh(), r); });
  ThreadWorld reference(mesh());
  std::vector<Results> theirs(reference.size());
  reference.run([&](int r) { theirs[r] = work(reference.comm(r), reference.mesh(), r); });
  for (int r : world.local_ranks()) {
    const std::string who = "rank " + std::to_string(r) + ": ";
    expect(mine[r] == theirs[r], who + "results differ from the thread world's");
    expect(mine[r]["recv1"] == std::vector<float>(3, static_cast<float>(r ^ 1)), who + "recv tag 1");
    expect(mine[r]["recv2"] == std::vector<float>(5, static_cast<float>(-(r ^ 1))), who + "recv tag 2");
    // all_reduce: sum over the model group, then max over data.
    float want = 0;
    for (int d = 0; d < 2; ++d) {
      float s = 0;
      for (int mm = 0; mm < 4; ++mm) s += 0.1f * static_cast<float>(d * 4 + mm + 1);
      want = std::max(want, s);
    }
    expect(std::abs(mine[r]["all_reduce"][0] - want) < 1e-5f, who + "all_reduce value");
    const CommStats& a = world.comm(r).stats();
    const CommStats& b = reference.comm(r).stats();
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      const std::string kind = collective_kind_name(static_cast<CollectiveKind>(k));
      expect(a.calls[k] == b.calls[k], who + kind + " calls " + std::to_string(a.calls[k]) + " vs " +
                                           std::to_string(b.calls[k]));
      expect(a.bytes_sent[k] == b.bytes_sent[k], who + kind + " bytes " + std::to_string(a.bytes_sent[k]) +
                                                     " vs " + std::to_string(b.bytes_sent[k]));
    }
  }
  // A second run restarts the tag sequences alike.
  world.run([&](int r) { mine[r] = work(world.comm(r), world.mesh(), r); });
  for (int r : world.local_ranks()) expect(mine[r] == theirs[r], "second run, rank " + std::to_string(r));
  if (failures == 0)
    std::printf("PASS collectives: process %d of %d, %d local devices, bitwise and byte-for-byte as the thread world\n",
                world.process(), world.processes(), local);
  return failures ? 1 : 0;
}

int failure(int local) {
  MpiWorld world(mesh(), local);
  world.set_recv_timeout(30);
  std::string what;
  try {
    world.run([&](int r) {
      if (r == 5) throw std::runtime_error("boom on purpose");
      std::vector<float> x(16, 1.0f);
      world.comm(r).all_reduce(x.data(), x.size(), make_group(world.mesh(), r, {0, 1}), ReduceOp::kSum);
    });
    expect(false, "run() returned although rank 5 failed");
  } catch (const std::exception& e) {
    what = e.what();
  }
  // What is asserted is logged for docs/guide/troubleshooting.md: the
  // failing process's own error, the others' abort naming it.
  if (world.is_local(5)) {
    expect(what == "boom on purpose", "the failing process reports its own error, got: " + what);
  } else {
    const std::string want = "rank 5 (process " + std::to_string(5 / local) + ") failed: boom on purpose";
    expect(what.find(want) != std::string::npos, "an abort naming rank 5, got: " + what);
    sharc::testing::append_error_log("MpiWorld.AFailingRankStopsEveryProcess", want);
  }
  if (failures == 0) std::printf("PASS failure: process %d: %s\n", world.process(), what.c_str());
  return failures ? 1 : 0;
}

int timeout(int local) {
  MpiWorld world(mesh(), local);
  world.set_recv_timeout(1);
  std::string what;
  try {
    world.run([&](int r) {
      if (r != 0) return;
      float x = 0;
      world.comm(0).recv(&x, 1, 1, 99);
    });
  } catch (const std::exception& e) {
    what = e.what();
  }
  if (world.is_local(0)) {
    expect(what.rfind("rank 0 waited 1 s for a message from rank 1 (process " + std::to_string(1 / local) + ")", 0) == 0,
           "timeout message, got: " + what);
    sharc::testing::append_error_log("MpiWorld.AMessageThatNeverComesTimesOut", what);
  }
  if (failures == 0) std::printf("PASS timeout: process %d: %s\n", world.process(), what.empty() ? "-" : what.c_str());
  return failures ? 1 : 0;
}

int bad_count(int local) {
  try {
    MpiWorld world(mesh(), local);
    expect(false, "a world was made");
  } catch (const std::invalid_argument& e) {
    sharc::testing::append_error_log("MpiWorld.ProcessesTimesLocalDevicesMustBeTheMesh", e.what());
    expect(std::string(e.what()).find("processes x " + std::to_string(local) +
                                      " local devices is not the 8 devices of mesh <[\"data\"=2, \"model\"=4]>") !=
               std::string::npos,
           std::string("message: ") + e.what());
    if (failures == 0) std::printf("PASS bad_count: %s\n", e.what());
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: mpi_world_test <local devices> collectives|failure|timeout|bad_count\n");
    return 2;
  }
  const int local = std::atoi(argv[1]);
  const std::string c = argv[2];
  if (c == "collectives") return collectives(local);
  if (c == "failure") return failure(local);
  if (c == "timeout") return timeout(local);
  if (c == "bad_count") return bad_count(local);
  std::fprintf(stderr, "unknown case %s\n", c.c_str());
  return 2;
}

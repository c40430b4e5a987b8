// A stand-in for NCCL between threads of one process, for gpu::NcclWorld
// without a GPU (nccl_world_test.cpp, cuda_programs_test.cpp): one world per
// rank, each on its own thread, with the block simulator's kernels (device
// memory is host memory). FakeNccl moves host memory between the threads as
// NCCL moves device memory between GPUs, and fails where a test says (an
// init that fails, a peer that never arrives); ThreadBootstrap is the
// processes' host exchange.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/gpu/nccl_world.h"

namespace sharc::gpu::fake {

using rt::DType;

// What the ranks share: the calls that meet, and what a test injects.
struct Hub {
  explicit Hub(int n) : nranks(n) {}
  const int nranks;
  int fail_init = -1;  // this rank's ncclCommInitRank fails
  int absent = -1;     // this rank's collectives never reach the others

  std::mutex mu;
  std::condition_variable cv;
  // ncclCommSplit k of every rank: its (color, key).
  std::map<int, std::map<int, std::pair<int, int>>> splits;
  // A collective on one communicator (its ranks, ascending), by sequence.
  struct Op {
    std::string kind;
    size_t count = 0;
    DType dtype = DType::kF32;
    rt::ReduceOp op = rt::ReduceOp::kSum;
    std::map<int, std::pair<const void*, void*>> io;  // comm position -> in, out
    bool done = false;
  };
  std::map<std::vector<int>, std::deque<Op>> ops;
  // Point to point: (src, dst) -> the messages sent, in order.
  std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> mail;
};

inline float load(const void* p, size_t i, DType t) {
  if (t == DType::kBF16) return static_cast<float>(static_cast<const rt::bf16*>(p)[i]);
  if (t == DType::kI32) return static_cast<float>(static_cast<const int32_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
inline void store(void* p, size_t i, DType t, float v) {
  if (t == DType::kBF16)
    static_cast<rt::bf16*>(p)[i] = rt::bf16(v);
  else if (t == DType::kI32)
    static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
  else
    static_cast<float*>(p)[i] = v;
}

// Rank `rank`'s NCCL: a communicator is its ranks (global, ascending).
class FakeNccl final : public NcclApi {
 public:
  FakeNccl(Hub& hub, int rank) : hub_(hub), rank_(rank) {}

  std::string unique_id() override { return "fake nccl id"; }
  Comm init(int nranks, const std::string& id, int rank) override {
    if (rank == hub_.fail_init) throw NcclError("ncclCommInitRank: unhandled system error (injected by the test)");
    EXPECT_EQ(id, "fake nccl id");
    std::vector<int> all(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; ++r) all[static_cast<size_t>(r)] = r;
    return make(all);
  }
  Comm split(Comm, int color, int key) override {
    std::unique_lock lock(hub_.mu);
    const int k = splits_++;
    hub_.splits[k][rank_] = {color, key};
    hub_.cv.notify_all();
    hub_.cv.wait(lock, [&] { return static_cast<int>(hub_.splits[k].size()) == hub_.nranks; });
    std::vector<std::pair<int, int>> members;  // (key, rank) of my color
    for (auto& [r, ck] : hub_.splits[k])
      if (ck.first == color) members.push_back({ck.second, r});
    std::sort(members.begin(), members.end());
    std::vector<int> ranks;
    for (auto& m : members) ranks.push_back(m.second);
    return make(ranks);
  }

  void all_reduce(const void* in, void* out, size_t count, DType dtype, rt::ReduceOp op, Comm c) override {
    arrive(c, "all_reduce", in, out, count, dtype, op);
  }
  void all_gather(const void* in, void* out, size_t count, DType dtype, Comm c) override {
    arrive(c, "all_gather", in, out, count, dtype, rt::ReduceOp::kSum);
  }
  void reduce_scatter(const void* in, void* out, size_t count, DType dtype, rt::ReduceOp op, Comm c) override {
    arrive(c, "reduce_scatter", in, out, count, dtype, op);
  }
  // Sends post at once (NCCL's wait for their receives; these need not);
  // receives complete in done(), in order per sender.
  void group_start() override {}
  void group_end() override {}
  void send(const void* in, size_t count, DType dtype, int peer, Comm c) override {
    const auto* b = static_cast<const std::byte*>(in);
    std::lock_guard lock(hub_.mu);
    hub_.mail[{rank_, global(c, peer)}].emplace_back(b, b + count * rt::dtype_size(dtype));
  }
  void recv(void* out, size_t count, DType dtype, int peer, Comm c) override {
    recvs_.push_back({out, count * rt::dtype_size(dtype), global(c, peer)});
  }
  bool done(Comm c) override {
    std::lock_guard lock(hub_.mu);
    for (auto it = recvs_.begin(); it != recvs_.end();) {
      auto& box = hub_.mail[{it->peer, rank_}];
      if (box.empty()) return false;
      std::memcpy(it->out, box.front().data(), it->bytes);
      box.pop_front();
      it = recvs_.erase(it);
    }
    for (const auto& [ranks, seq] : mine_)
      for (size_t s : seq)
        if (!hub_.ops[ranks][s].done) return false;
    (void)c;
    return true;
  }
  void abort(Comm) override { ++aborts; }
  void destroy(Comm) override {}

  int aborts = 0;

 private:
  struct Recv {
    void* out;
    size_t bytes;
    int peer;  // global rank
  };

  Comm make(const std::vector<int>& ranks) {
    comms_.push_back(ranks);
    return &comms_.back();
  }
  static const std::vector<int>& ranks_of(Comm c) { return *static_cast<const std::vector<int>*>(c); }
  static int global(Comm c, int peer) { return ranks_of(c).at(static_cast<size_t>(peer)); }

  void arrive(Comm c, const char* kind, const void* in, void* out, size_t count, DType dtype, rt::ReduceOp op) {
    if (rank_ == hub_.absent) return;  // never reaches the others
    const std::vector<int>& ranks = ranks_of(c);
    std::lock_guard lock(hub_.mu);
    const size_t seq = next_[ranks]++;
    std::deque<Hub::Op>& q = hub_.ops[ranks];
    if (q.size() <= seq) q.resize(seq + 1);
    Hub::Op& o = q[seq];
    o.kind = kind;
    o.count = count;
    o.dtype = dtype;
    o.op = op;
    const int pos = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
    o.io[pos] = {in, out};
    mine_[ranks].push_back(seq);
    if (o.io.size() == ranks.size()) run(o, static_cast<int>(ranks.size()));
  }

  static void run(Hub::Op& o, int n) {
    const size_t c = o.count;
    auto reduce = [&](size_t from, size_t i) {  // element `from + i` reduced over the ranks
      float v = load(o.io.at(0).first, from + i, o.dtype);
      for (int p = 1; p < n; ++p) {
        const float x = load(o.io.at(p).first, from + i, o.dtype);
        v = o.op == rt::ReduceOp::kMax ? std::max(v, x) : v + x;
      }
      return v;
    };
    if (o.kind == "all_reduce") {
      std::vector<float> sum(c);
      for (size_t i = 0; i < c; ++i) sum[i] = reduce(0, i);
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < c; ++i) store(o.io.at(p).second, i, o.dtype, sum[i]);
    } else if (o.kind == "all_gather") {
      const size_t bytes = c * rt::dtype_size(o.dtype);
      for (int p = 0; p < n; ++p)
        for (int q = 0; q < n; ++q)
          std::memcpy(static_cast<std::byte*>(o.io.at(p).second) + static_cast<size_t>(q) * bytes,
                      o.io.at(q).first, bytes);
    } else {  // reduce_scatter: position p gets chunk p
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < c; ++i) store(o.io.at(p).second, i, o.dtype, reduce(static_cast<size_t>(p) * c, i));
    }
    o.done = true;
  }

  Hub& hub_;
  int rank_;
  int splits_ = 0;
  std::deque<std::vector<int>> comms_;
  std::map<std::vector<int>, size_t> next_;
  std::map<std::vector<int>, std::vector<size_t>> mine_;
  std::vector<Recv> recvs_;
};

class ThreadBootstrap final : public Bootstrap {
 public:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::map<int, std::map<int, std::string>> rounds;
  };
  ThreadBootstrap(Shared& s, int rank, int size) : s_(s), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<std::string> all_gather(const std::string& mine) override {
    std::unique_lock lock(s_.mu);
    const int k = round_++;
    s_.rounds[k][rank_] = mine;
    s_.cv.notify_all();
    s_.cv.wait(lock, [&] { return static_cast<int>(s_.rounds[k].size()) == size_; });
    std::vector<std::string> out;
    for (auto& [r, v] : s_.rounds[k]) out.push_back(v);
    return out;
  }

 private:
  Shared& s_;
  int rank_, size_;
  int round_ = 0;
};

}  // namespace sharc::gpu::fake

// ThreadWorld: channels, message matching and the ring collectives. Every send
// copies the block (or moves a buffer the sender no longer needs) into the
// destination's channel; nothing reads another device's memory. Ring steps use
// the classic schedules so the bytes each device sends are exactly what the
// cost model predicts: reduce_scatter and all_gather send n-1 chunks, all_reduce
// is reduce_scatter followed by all_gather on the same chunks. Failure handling
// is a poison flag plus a broadcast wake-up of every channel, so a throw on one
// device cannot leave the others blocked forever.
#include "runtime/thread_world.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace sharc::rt {
namespace detail {

using Clock = std::chrono::steady_clock;

static Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Matching key for a message: which group's collective, and which call on
// that group. Both ends derive it independently from the collective contract
// (same group, same call order), so no handshake is needed.
struct Tag {
  uint64_t group_key = 0;
  uint64_t seq = 0;
  bool operator==(const Tag&) const = default;
};

using Bytes = std::vector<std::byte>;

struct Message {
  Tag tag;
  Bytes data;
  Clock::time_point arrival;  // wall clock with a simulated link
  double virtual_arrival = 0;  // virtual clock
};

struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Message> queue;
  Clock::time_point link_free{};  // when the simulated link finishes its last block
  double virtual_link_free = 0;   // the same on the virtual clock
};

struct Fabric {
  explicit Fabric(int devices)
      : n(devices), channels(new Channel[static_cast<size_t>(devices) * devices]) {}

  Channel& at(int src, int dst) { return channels[static_cast<size_t>(src) * n + dst]; }

  void poison() {
    poisoned.store(true);
    // Taking each lock before notifying closes the window between a receiver's
    // predicate check and its wait, so no receiver misses the wake-up.
    for (int i = 0; i < n * n; ++i) {
      std::lock_guard<std::mutex> lk(channels[i].mu);
      channels[i].cv.notify_all();
    }
  }

  // Empties every channel and clears the poison flag; returns how many
  // messages were left behind and the first channel holding one.
  size_t reset(int* first_src, int* first_dst) {
    size_t left = 0;
    for (int i = 0; i < n * n; ++i) {
      std::lock_guard<std::mutex> lk(channels[i].mu);
      if (!channels[i].queue.empty() && left == 0) {
        *first_src = i / n;
        *first_dst = i % n;
      }
      left += channels[i].queue.size();
      channels[i].queue.clear();
      channels[i].link_free = {};
      channels[i].virtual_link_free = 0;
    }
    poisoned.store(false);
    return left;
  }

  const int n;
  std::unique_ptr<Channel[]> channels;
  std::atomic<bool> poisoned{false};
  LinkModel link;
  bool virtual_clock = false;
  double recv_timeout_s = 60;
};

namespace {

uint64_t hash_ranks(const std::vector<int>& ranks) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the rank list
  for (int r : ranks) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(r) >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

template <class T>
void combine_as(T* acc, const T* in, size_t count, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (size_t i = 0; i < count; ++i) acc[i] += in[i];
  } else {
    for (size_t i = 0; i < count; ++i) acc[i] = std::max(acc[i], in[i]);
  }
}

// acc op= in over `count` elements of `dtype`; bf16 in f32, rounded per element.
void combine(void* acc, const void* in, size_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kF32:
      return combine_as(static_cast<float*>(acc), static_cast<const float*>(in), count, op);
    case DType::kI32:
      return combine_as(static_cast<int32_t*>(acc), static_cast<const int32_t*>(in), count, op);
    case DType::kBF16: {
      bf16* a = static_cast<bf16*>(acc);
      const bf16* b = static_cast<const bf16*>(in);
      for (size_t i = 0; i < count; ++i) {
        const float x = a[i], y = b[i];
        a[i] = bf16(op == ReduceOp::kSum ? x + y : std::max(x, y));
      }
      return;
    }
  }
}

std::byte* at(void* p, size_t bytes) {
  return static_cast<std::byte*>(p) + bytes;
}
const std::byte* at(const void* p, size_t bytes) {
  return static_cast<const std::byte*>(p) + bytes;
}

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

// memmove that tolerates empty ranges (whose pointers may be null) and
// in-place calls.
void move_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

}  // namespace

class ThreadComm final : public Communicator {
 public:
  ThreadComm(Fabric& fabric, int rank) : fabric_(fabric), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return fabric_.n; }
  void restart_sequences() { seq_.clear(); }

  void do_all_reduce(void* data, size_t count, DType dtype, const Group& group,
                     ReduceOp op) override {
    const CallTimer timer = time_call(CollectiveKind::kAllReduce);
    check(group, "all_reduce");
    count_call(CollectiveKind::kAllReduce);
    const int n = group.size();
    if (n == 1) return;
    const Tag tag = next_tag(group);
    // Balanced split: chunk i has count/n elements plus one for the first
    // count%n chunks, so uneven counts cost at most one extra element per chunk.
    std::vector<size_t> off(n + 1, 0);
    for (int i = 0; i < n; ++i) off[i + 1] = off[i] + count / n + (size_t(i) < count % n ? 1 : 0);
    const size_t es = dtype_size(dtype);
    ring_reduce_scatter(data, off, at(data, off[group.position] * es), dtype, group, tag, op,
                        CollectiveKind::kAllReduce);
    ring_all_gather(data, off, dtype, group, tag, CollectiveKind::kAllReduce);
  }

  void do_all_gather(const void* in, void* out, size_t count_per_rank, DType dtype,
                     const Group& group) override {
    const CallTimer timer = time_call(CollectiveKind::kAllGather);
    check(group, "all_gather");
    count_call(CollectiveKind::kAllGather);
    const int n = group.size();
    const size_t block = count_per_rank * dtype_size(dtype);
    move_bytes(at(out, group.position * block), in, block);
    if (n == 1) return;
    ring_all_gather(out, equal_offsets(n, count_per_rank), dtype, group, next_tag(group),
                    CollectiveKind::kAllGather);
  }

  void do_reduce_scatter(const void* in, void* out, size_t count_per_rank, DType dtype,
                         const Group& group, ReduceOp op) override {
    const CallTimer timer = time_call(CollectiveKind::kReduceScatter);
    check(group, "reduce_scatter");
    count_call(CollectiveKind::kReduceScatter);
    const int n = group.size();
    if (n == 1) {
      move_bytes(out, in, count_per_rank * dtype_size(dtype));
      return;
    }
    ring_reduce_scatter(in, equal_offsets(n, count_per_rank), out, dtype, group, next_tag(group),
                        op, CollectiveKind::kReduceScatter);
  }

  void do_all_to_all(const void* in, void* out, size_t count_per_rank, DType dtype,
                     const Group& group) override {
    const CallTimer timer = time_call(CollectiveKind::kAllToAll);
    check(group, "all_to_all");
    count_call(CollectiveKind::kAllToAll);
    const int n = group.size(), p = group.position;
    const size_t block = count_per_rank * dtype_size(dtype);
    move_bytes(at(out, p * block), at(in, p * block), block);
    if (n == 1) return;
    const Tag tag = next_tag(group);
    // Sends never block, so post all n-1 of them before receiving any.
    for (int k = 1; k < n; ++k) {
      const int j = mod(p + k, n);
      send(CollectiveKind::kAllToAll, group.ranks[j], tag, at(in, j * block), block);
    }
    for (int k = 1; k < n; ++k) {
      const int i = mod(p - k, n);
      receive_into(group.ranks[i], tag, at(out, i * block), count_per_rank, dtype);
    }
  }

  PendingRecv do_ppermute_start(const void* in, void* out, size_t count, DType dtype,
                                const Group& group, const Permutation& perm) override {
    const CallTimer timer = time_call(CollectiveKind::kPPermute);
    check(group, "ppermute");
    validate_permutation(perm, group.size());
    count_call(CollectiveKind::kPPermute);
    const Tag tag = next_tag(group);
    PendingRecv pending;
    pending.out = out;
    pending.count = count;
    pending.dtype = dtype;
    pending.tag[0] = tag.group_key;
    pending.tag[1] = tag.seq;
    pending.active = true;
    for (const auto& [src, dst] : perm) {
      if (src == group.position)
        send(CollectiveKind::kPPermute, group.ranks[dst], tag, static_cast<const std::byte*>(in),
             count * dtype_size(dtype));
      if (dst == group.position) pending.src_rank = group.ranks[src];
    }
    return pending;
  }

  void ppermute_wait(PendingRecv& pending) override {
    const CallTimer timer = time_call(CollectiveKind::kPPermute);
    if (!pending.active) {
      throw std::logic_error("ppermute_wait on rank " + std::to_string(rank_) +
                             " without a matching ppermute_start (or waited twice)");
    }
    pending.active = false;
    if (pending.src_rank < 0) {
      if (pending.count) std::memset(pending.out, 0, pending.count * dtype_size(pending.dtype));
      return;
    }
    receive_into(pending.src_rank, Tag{pending.tag[0], pending.tag[1]}, pending.out, pending.count,
                 pending.dtype);
  }

  void do_send(const void* in, size_t count, DType dtype, int dst, uint64_t tag) override {
    CallTimer timer = time_call(CollectiveKind::kSendRecv, "send");
    timer.peer = dst;
    timer.tag = static_cast<int64_t>(tag);
    check_rank(dst, "send");
    count_call(CollectiveKind::kSendRecv);
    send(CollectiveKind::kSendRecv, dst, Tag{kPointToPoint, tag}, static_cast<const std::byte*>(in),
         count * dtype_size(dtype));
  }

  void do_recv(void* out, size_t count, DType dtype, int src, uint64_t tag) override {
    CallTimer timer = time_call(CollectiveKind::kSendRecv, "recv");
    timer.peer = src;
    timer.tag = static_cast<int64_t>(tag);
    check_rank(src, "recv");
    count_call(CollectiveKind::kSendRecv);
    receive_into(src, Tag{kPointToPoint, tag}, out, count, dtype);
  }

  void barrier(const Group& group) override {
    check(group, "barrier");
    const int n = group.size(), p = group.position;
    if (n == 1) return;
    const Tag tag = next_tag(group);
    // Dissemination barrier: after round k every member has heard, directly or
    // transitively, from 2^(k+1) members, so ceil(log2 n) rounds cover all.
    for (int k = 1; k < n; k *= 2) {
      post(group.ranks[mod(p + k, n)], tag, {});
      receive(group.ranks[mod(p - k, n)], tag);
    }
  }

 private:
  static std::vector<size_t> equal_offsets(int n, size_t count_per_rank) {
    std::vector<size_t> off(n + 1);
    for (int i = 0; i <= n; ++i) off[i] = i * count_per_rank;
    return off;
  }

  void check(const Group& group, const char* what) const {
    if (group.position < 0 || group.position >= group.size() ||
        group.ranks[group.position] != rank_) {
      throw std::invalid_argument(std::string(what) + " on rank " + std::to_string(rank_) +
                                  ": the group's position " + std::to_string(group.position) +
                                  " does not name this device");
    }
  }

  // The group key of point-to-point messages (collectives use a hash of
  // their group's ranks).
  static constexpr uint64_t kPointToPoint = 0x70326170ull;  // "p2p"

  void check_rank(int peer, const char* what) const {
    if (peer < 0 || peer >= fabric_.n)
      throw std::invalid_argument(std::string(what) + " on rank " + std::to_string(rank_) + ": peer rank " +
                                  std::to_string(peer) + " is not in the world of " + std::to_string(fabric_.n));
  }

  Tag next_tag(const Group& group) { return Tag{hash_ranks(group.ranks), seq_[group.ranks]++}; }

  // Member p ends with chunk p (elements `off[p]..off[p+1]`) reduced over the
  // group, written to `out_chunk`. Step s sends chunk p-s-1 to the right
  // neighbour and folds the partial sum of chunk p-s-2 from the left into it,
  // so every chunk is reduced in one fixed order around the ring. `in` may
  // contain `out_chunk`: chunk p of `in` is read before `out_chunk` is written.
  void ring_reduce_scatter(const void* in, const std::vector<size_t>& off, void* out_chunk,
                           DType dtype, const Group& group, Tag tag, ReduceOp op,
                           CollectiveKind kind) {
    const int n = group.size(), p = group.position;
    const int right = group.ranks[mod(p + 1, n)], left = group.ranks[mod(p - 1, n)];
    const size_t es = dtype_size(dtype);
    auto len = [&](int c) { return off[c + 1] - off[c]; };
    const int first = mod(p - 1, n);
    send(kind, right, tag, at(in, off[first] * es), len(first) * es);
    Bytes acc;
    for (int s = 0; s < n - 1; ++s) {
      const int c = mod(p - s - 2, n);
      acc = receive(left, tag);
      expect_size(acc, len(c), dtype, left);
      combine(acc.data(), at(in, off[c] * es), len(c), dtype, op);
      // Two reads and a write per element, on the virtual clock.
      if (Timeline* tl = timeline()) tl->charge(OpCost{static_cast<double>(len(c)), 3.0 * len(c) * es});
      if (s < n - 2) send(kind, right, tag, std::move(acc));
    }
    move_bytes(out_chunk, acc.data(), acc.size());
  }

  // `buf` holds this member's chunk at element off[p]; fills in all the
  // others. Step s sends chunk p-s to the right and receives chunk p-s-1 from
  // the left, which is then forwarded as-is at the next step.
  void ring_all_gather(void* buf, const std::vector<size_t>& off, DType dtype, const Group& group,
                       Tag tag, CollectiveKind kind) {
    const int n = group.size(), p = group.position;
    const int right = group.ranks[mod(p + 1, n)], left = group.ranks[mod(p - 1, n)];
    const size_t es = dtype_size(dtype);
    send(kind, right, tag, at(buf, off[p] * es), (off[p + 1] - off[p]) * es);
    for (int s = 0; s < n - 1; ++s) {
      const int c = mod(p - s - 1, n);
      Bytes block = receive(left, tag);
      expect_size(block, off[c + 1] - off[c], dtype, left);
      move_bytes(at(buf, off[c] * es), block.data(), block.size());
      if (s < n - 2) send(kind, right, tag, std::move(block));
    }
  }

  void expect_size(const Bytes& block, size_t expected, DType dtype, int src) const {
    const size_t es = dtype_size(dtype);
    if (block.size() != expected * es) {
      throw std::runtime_error("rank " + std::to_string(rank_) + " received " +
                               std::to_string(block.size() / es) + " " +
                               std::string(dtype_name(dtype)) + " elements from rank " +
                               std::to_string(src) + " but expected " + std::to_string(expected) +
                               ": members called a collective with different counts or types");
    }
  }

  void send(CollectiveKind kind, int dst, Tag tag, const std::byte* data, size_t bytes) {
    send(kind, dst, tag, Bytes(data, data + bytes));
  }

  // Bytes to oneself never touch a link, so they are not counted.
  void send(CollectiveKind kind, int dst, Tag tag, Bytes&& block) {
    if (dst != rank_) count_bytes(kind, block.size());
    post(dst, tag, std::move(block));
  }

  void post(int dst, Tag tag, Bytes&& block) {
    Channel& ch = fabric_.at(rank_, dst);
    {
      std::lock_guard<std::mutex> lk(ch.mu);
      Clock::time_point arrival{};
      double virtual_arrival = 0;
      const LinkModel& link = fabric_.link;
      const double transfer_s =
          link.bytes_per_s > 0 ? static_cast<double>(block.size()) / link.bytes_per_s : 0.0;
      if (fabric_.virtual_clock) {
        const double start = std::max(timeline()->now(), ch.virtual_link_free);
        ch.virtual_link_free = start + transfer_s;
        virtual_arrival = ch.virtual_link_free + link.latency_s;
      } else if (link.latency_s > 0 || link.bytes_per_s > 0) {
        const Clock::time_point start = std::max(Clock::now(), ch.link_free);
        ch.link_free = start + seconds(transfer_s);
        arrival = ch.link_free + seconds(link.latency_s);
      }
      ch.queue.push_back(Message{tag, std::move(block), arrival, virtual_arrival});
    }
    ch.cv.notify_all();
  }

  Bytes receive(int src, Tag tag) {
    Channel& ch = fabric_.at(src, rank_);
    std::unique_lock<std::mutex> lk(ch.mu);
    const double timeout = fabric_.recv_timeout_s;
    const Clock::time_point deadline = Clock::now() + seconds(timeout);
    for (bool timed_out = false;;) {
      // First match in FIFO order: blocks of one collective between the same
      // pair of devices arrive in the order they were sent.
      auto it = std::find_if(ch.queue.begin(), ch.queue.end(),
                             [&](const Message& m) { return m.tag == tag; });
      if (it != ch.queue.end()) {
        Message m = std::move(*it);
        ch.queue.erase(it);
        lk.unlock();
        if (fabric_.virtual_clock)
          timeline()->arrive(m.virtual_arrival);
        else if (m.arrival > Clock::now())
          std::this_thread::sleep_until(m.arrival);
        return std::move(m.data);
      }
      if (fabric_.poisoned.load()) {
        throw WorldAborted("rank " + std::to_string(rank_) + " aborted while waiting for rank " +
                           std::to_string(src) + ": another device failed");
      }
      if (timed_out) {
        throw std::runtime_error(
            "rank " + std::to_string(rank_) + " waited " + std::to_string(timeout) +
            " s for a message from rank " + std::to_string(src) +
            "; the devices probably issued collectives in different orders or groups");
      }
      if (timeout <= 0) {
        ch.cv.wait(lk);
      } else {
        // Look at the queue once more after a timeout before giving up.
        timed_out = ch.cv.wait_until(lk, deadline) == std::cv_status::timeout;
      }
    }
  }

  void receive_into(int src, Tag tag, void* out, size_t count, DType dtype) {
    Bytes block = receive(src, tag);
    expect_size(block, count, dtype, src);
    move_bytes(out, block.data(), block.size());
  }

  Fabric& fabric_;
  const int rank_;
  std::map<std::vector<int>, uint64_t> seq_;  // next call number per group
};

}  // namespace detail

ThreadWorld::ThreadWorld(MeshShape mesh) : mesh_(std::move(mesh)) {
  if (mesh_.axis_names.size() != mesh_.axis_sizes.size()) {
    throw std::invalid_argument("ThreadWorld: " + std::to_string(mesh_.axis_names.size()) +
                                " axis names but " + std::to_string(mesh_.axis_sizes.size()) +
                                " sizes");
  }
  for (size_t i = 0; i < mesh_.axis_names.size(); ++i) {
    if (mesh_.axis_sizes[i] < 1) {
      throw std::invalid_argument("ThreadWorld: axis \"" + mesh_.axis_names[i] + "\" has size " +
                                  std::to_string(mesh_.axis_sizes[i]));
    }
    if (mesh_.axis_index(mesh_.axis_names[i]) != static_cast<int>(i)) {
      throw std::invalid_argument("ThreadWorld: duplicate axis name: \"" + mesh_.axis_names[i] +
                                  "\"");
    }
  }
  const int n = size();
  fabric_ = std::make_unique<detail::Fabric>(n);
  for (int r = 0; r < n; ++r) {
    comms_.push_back(std::make_unique<detail::ThreadComm>(*fabric_, r));
    memories_.push_back(std::make_unique<DeviceMemory>());
    timelines_.push_back(std::make_unique<Timeline>(r));
    comms_.back()->set_timeline(timelines_.back().get());
  }
}

ThreadWorld::~ThreadWorld() = default;

Communicator& ThreadWorld::comm(int rank) {
  return *comms_.at(rank);
}
DeviceMemory& ThreadWorld::memory(int rank) {
  return *memories_.at(rank);
}
void ThreadWorld::set_link(const LinkModel& link) {
  fabric_->link = link;
}
void ThreadWorld::set_clock(ClockMode mode, const MachineModel& machine) {
  if (running_) throw std::logic_error("ThreadWorld::set_clock while running");
  clock_ = mode;
  machine_ = machine;
  fabric_->virtual_clock = mode == ClockMode::kVirtual;
  clear_trace();
}

Timeline& ThreadWorld::timeline(int rank) {
  return *timelines_.at(rank);
}

Trace ThreadWorld::trace() const {
  Trace t;
  t.clock = clock_mode_name(clock_);
  for (int r = 0; r < size(); ++r) {
    t.track_names.push_back(mesh_.describe(r));
    for (const TraceEvent& e : timelines_[r]->events()) t.events.push_back(e);
  }
  return t;
}

std::vector<DeviceTime> ThreadWorld::device_times() const {
  std::vector<DeviceTime> times;
  for (const auto& t : timelines_) times.push_back(t->time());
  return times;
}

void ThreadWorld::clear_trace() {
  if (running_) throw std::logic_error("ThreadWorld::clear_trace while running");
  const auto origin = std::chrono::steady_clock::now();
  for (auto& t : timelines_) {
    t->clear();
    t->configure(clock_, machine_, origin);
  }
}

void ThreadWorld::set_recv_timeout(double seconds) {
  fabric_->recv_timeout_s = seconds;
}

void ThreadWorld::run(const std::function<void(int rank)>& fn) {
  if (running_) throw std::logic_error("ThreadWorld::run is not reentrant");
  running_ = true;
  int src = -1, dst = -1;
  fabric_->reset(&src, &dst);
  for (auto& c : comms_) c->restart_sequences();
  if (clock_ == ClockMode::kVirtual) {
    double latest = 0;
    for (auto& t : timelines_) latest = std::max(latest, t->time().now_s);
    for (auto& t : timelines_) t->start_at(latest);
  }

  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(comms_.size());
  for (int r = 0; r < size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
        timelines_[r]->finish();
      } catch (...) {
        timelines_[r]->finish();
        {
          // Record before poisoning: the WorldAborted exceptions the poison
          // causes elsewhere must never be the one reported.
          std::lock_guard<std::mutex> lk(mu);
          if (!first) first = std::current_exception();
        }
        fabric_->poison();
      }
    });
  }
  for (auto& t : threads) t.join();
  running_ = false;

  const size_t left = fabric_->reset(&src, &dst);
  if (first) std::rethrow_exception(first);
  if (left) {
    throw std::logic_error("ThreadWorld::run: " + std::to_string(left) +
                           " message(s) sent but never received (first from rank " +
                           std::to_string(src) + " to rank " + std::to_string(dst) +
                           "); is a ppermute_start missing its ppermute_wait?");
  }
}

CommStats ThreadWorld::total_stats() const {
  CommStats total;
  for (const auto& c : comms_) {
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      total.bytes_sent[k] += c->stats().bytes_sent[k];
      total.calls[k] += c->stats().calls[k];
      total.seconds_in[k] += c->stats().seconds_in[k];
    }
  }
  return total;
}

void ThreadWorld::reset_stats() {
  for (auto& c : comms_) c->reset_stats();
}

}  // namespace sharc::rt

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

struct Message {
  Tag tag;
  std::vector<float> data;
  Clock::time_point arrival;
};

struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Message> queue;
  Clock::time_point link_free{};  // when the simulated link finishes its last block
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
    }
    poisoned.store(false);
    return left;
  }

  const int n;
  std::unique_ptr<Channel[]> channels;
  std::atomic<bool> poisoned{false};
  LinkModel link;
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

void combine(float* acc, const float* in, size_t count, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (size_t i = 0; i < count; ++i) acc[i] += in[i];
  } else {
    for (size_t i = 0; i < count; ++i) acc[i] = std::max(acc[i], in[i]);
  }
}

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

// memmove that tolerates empty ranges (whose pointers may be null) and
// in-place calls.
void move_floats(float* dst, const float* src, size_t count) {
  if (count && dst != src) std::memmove(dst, src, count * sizeof(float));
}

}  // namespace

class ThreadComm final : public Communicator {
 public:
  ThreadComm(Fabric& fabric, int rank) : fabric_(fabric), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return fabric_.n; }
  void restart_sequences() { seq_.clear(); }

  void all_reduce(float* data, size_t count, const Group& group, ReduceOp op) override {
    const CallTimer timer = time_call(CollectiveKind::kAllReduce);
    check(group, "all_reduce");
    count_call(CollectiveKind::kAllReduce);
    const int n = group.size();
    if (n == 1) return;
    const Tag tag = next_tag(group);
    // Balanced split: chunk i has count/n elements plus one for the first
    // count%n chunks, so uneven counts cost at most one extra float per chunk.
    std::vector<size_t> off(n + 1, 0);
    for (int i = 0; i < n; ++i) off[i + 1] = off[i] + count / n + (size_t(i) < count % n ? 1 : 0);
    ring_reduce_scatter(data, off, data + off[group.position], group, tag, op,
                        CollectiveKind::kAllReduce);
    ring_all_gather(data, off, group, tag, CollectiveKind::kAllReduce);
  }

  void all_gather(const float* in, float* out, size_t count_per_rank, const Group& group) override {
    const CallTimer timer = time_call(CollectiveKind::kAllGather);
    check(group, "all_gather");
    count_call(CollectiveKind::kAllGather);
    const int n = group.size();
    float* mine = out + group.position * count_per_rank;
    move_floats(mine, in, count_per_rank);
    if (n == 1) return;
    ring_all_gather(out, equal_offsets(n, count_per_rank), group, next_tag(group),
                    CollectiveKind::kAllGather);
  }

  void reduce_scatter(const float* in, float* out, size_t count_per_rank, const Group& group,
                      ReduceOp op) override {
    const CallTimer timer = time_call(CollectiveKind::kReduceScatter);
    check(group, "reduce_scatter");
    count_call(CollectiveKind::kReduceScatter);
    const int n = group.size();
    if (n == 1) {
      move_floats(out, in, count_per_rank);
      return;
    }
    ring_reduce_scatter(in, equal_offsets(n, count_per_rank), out, group, next_tag(group), op,
                        CollectiveKind::kReduceScatter);
  }

  void all_to_all(const float* in, float* out, size_t count_per_rank, const Group& group) override {
    const CallTimer timer = time_call(CollectiveKind::kAllToAll);
    check(group, "all_to_all");
    count_call(CollectiveKind::kAllToAll);
    const int n = group.size(), p = group.position;
    move_floats(out + p * count_per_rank, in + p * count_per_rank, count_per_rank);
    if (n == 1) return;
    const Tag tag = next_tag(group);
    // Sends never block, so post all n-1 of them before receiving any.
    for (int k = 1; k < n; ++k) {
      const int j = mod(p + k, n);
      send(CollectiveKind::kAllToAll, group.ranks[j], tag, in + j * count_per_rank, count_per_rank);
    }
    for (int k = 1; k < n; ++k) {
      const int i = mod(p - k, n);
      receive_into(group.ranks[i], tag, out + i * count_per_rank, count_per_rank);
    }
  }

  PendingRecv ppermute_start(const float* in, float* out, size_t count, const Group& group,
                             const Permutation& perm) override {
    const CallTimer timer = time_call(CollectiveKind::kPPermute);
    check(group, "ppermute");
    validate_permutation(perm, group.size());
    count_call(CollectiveKind::kPPermute);
    const Tag tag = next_tag(group);
    PendingRecv pending;
    pending.out = out;
    pending.count = count;
    pending.tag[0] = tag.group_key;
    pending.tag[1] = tag.seq;
    pending.active = true;
    for (const auto& [src, dst] : perm) {
      if (src == group.position) send(CollectiveKind::kPPermute, group.ranks[dst], tag, in, count);
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
      std::fill(pending.out, pending.out + pending.count, 0.0f);
      return;
    }
    receive_into(pending.src_rank, Tag{pending.tag[0], pending.tag[1]}, pending.out, pending.count);
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

  Tag next_tag(const Group& group) { return Tag{hash_ranks(group.ranks), seq_[group.ranks]++}; }

  // Member p ends with chunk p (bounds `off[p]..off[p+1]`) reduced over the
  // group, written to `out_chunk`. Step s sends chunk p-s-1 to the right
  // neighbour and folds the partial sum of chunk p-s-2 from the left into it,
  // so every chunk is reduced in one fixed order around the ring. `in` may
  // contain `out_chunk`: chunk p of `in` is read before `out_chunk` is written.
  void ring_reduce_scatter(const float* in, const std::vector<size_t>& off, float* out_chunk,
                           const Group& group, Tag tag, ReduceOp op, CollectiveKind kind) {
    const int n = group.size(), p = group.position;
    const int right = group.ranks[mod(p + 1, n)], left = group.ranks[mod(p - 1, n)];
    auto len = [&](int c) { return off[c + 1] - off[c]; };
    const int first = mod(p - 1, n);
    send(kind, right, tag, in + off[first], len(first));
    std::vector<float> acc;
    for (int s = 0; s < n - 1; ++s) {
      const int c = mod(p - s - 2, n);
      acc = receive(left, tag);
      expect_size(acc, len(c), left);
      combine(acc.data(), in + off[c], len(c), op);
      if (s < n - 2) send(kind, right, tag, std::move(acc));
    }
    move_floats(out_chunk, acc.data(), acc.size());
  }

  // `buf` holds this member's chunk at off[p]; fills in all the others. Step s
  // sends chunk p-s to the right and receives chunk p-s-1 from the left, which
  // is then forwarded as-is at the next step.
  void ring_all_gather(float* buf, const std::vector<size_t>& off, const Group& group, Tag tag,
                       CollectiveKind kind) {
    const int n = group.size(), p = group.position;
    const int right = group.ranks[mod(p + 1, n)], left = group.ranks[mod(p - 1, n)];
    send(kind, right, tag, buf + off[p], off[p + 1] - off[p]);
    for (int s = 0; s < n - 1; ++s) {
      const int c = mod(p - s - 1, n);
      std::vector<float> block = receive(left, tag);
      expect_size(block, off[c + 1] - off[c], left);
      move_floats(buf + off[c], block.data(), block.size());
      if (s < n - 2) send(kind, right, tag, std::move(block));
    }
  }

  void expect_size(const std::vector<float>& block, size_t expected, int src) const {
    if (block.size() != expected) {
      throw std::runtime_error("rank " + std::to_string(rank_) + " received " +
                               std::to_string(block.size()) + " floats from rank " +
                               std::to_string(src) + " but expected " + std::to_string(expected) +
                               ": members called a collective with different counts");
    }
  }

  void send(CollectiveKind kind, int dst, Tag tag, const float* data, size_t count) {
    send(kind, dst, tag, std::vector<float>(data, data + count));
  }

  // Bytes to oneself never touch a link, so they are not counted.
  void send(CollectiveKind kind, int dst, Tag tag, std::vector<float>&& block) {
    if (dst != rank_) count_bytes(kind, block.size() * sizeof(float));
    post(dst, tag, std::move(block));
  }

  void post(int dst, Tag tag, std::vector<float>&& block) {
    Channel& ch = fabric_.at(rank_, dst);
    {
      std::lock_guard<std::mutex> lk(ch.mu);
      Clock::time_point arrival{};
      const LinkModel& link = fabric_.link;
      if (link.latency_s > 0 || link.bytes_per_s > 0) {
        const Clock::time_point start = std::max(Clock::now(), ch.link_free);
        const double transfer =
            link.bytes_per_s > 0
                ? static_cast<double>(block.size() * sizeof(float)) / link.bytes_per_s
                : 0.0;
        ch.link_free = start + seconds(transfer);
        arrival = ch.link_free + seconds(link.latency_s);
      }
      ch.queue.push_back(Message{tag, std::move(block), arrival});
    }
    ch.cv.notify_all();
  }

  std::vector<float> receive(int src, Tag tag) {
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
        if (m.arrival > Clock::now()) std::this_thread::sleep_until(m.arrival);
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

  void receive_into(int src, Tag tag, float* out, size_t count) {
    std::vector<float> block = receive(src, tag);
    expect_size(block, count, src);
    move_floats(out, block.data(), count);
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
void ThreadWorld::set_recv_timeout(double seconds) {
  fabric_->recv_timeout_s = seconds;
}

void ThreadWorld::run(const std::function<void(int rank)>& fn) {
  if (running_) throw std::logic_error("ThreadWorld::run is not reentrant");
  running_ = true;
  int src = -1, dst = -1;
  fabric_->reset(&src, &dst);
  for (auto& c : comms_) c->restart_sequences();

  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(comms_.size());
  for (int r = 0; r < size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
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

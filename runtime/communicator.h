// Communicator: the collective-communication interface generated per-device
// code calls. It is an interface only; backends (ThreadWorld today, MPI and NCCL
// later) implement it. Every operation is blocking and collective over a Group:
// each member calls it with the same counts and the same group, and all members
// issue their collectives on a given group in the same order. Statistics count
// bytes this device SENDS, which is what a cost model for ring collectives
// predicts, and the wall time this device's thread spends inside each kind of
// call (waiting included: that is what a collective costs the step); they are
// kept in the base class so every backend reports alike.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/mesh.h"
#include "runtime/trace.h"

namespace sharc::rt {

enum class ReduceOp { kSum, kMax };

// kSendRecv: point-to-point send and recv (pipeline stages), not collective.
enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kPPermute, kSendRecv };
inline constexpr int kNumCollectiveKinds = 6;

// "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "ppermute",
// "send_recv".
const char* collective_kind_name(CollectiveKind kind);

struct CommStats {
  uint64_t bytes_sent[kNumCollectiveKinds] = {};
  // Every call counts, including calls on groups of one that move no data.
  uint64_t calls[kNumCollectiveKinds] = {};
  // Wall time (steady_clock) from entry to return of every call, on the
  // calling device's thread. For ppermute it is start plus wait, so compute
  // overlapped between the two does not count.
  double seconds_in[kNumCollectiveKinds] = {};

  uint64_t bytes(CollectiveKind k) const { return bytes_sent[static_cast<int>(k)]; }
  uint64_t count(CollectiveKind k) const { return calls[static_cast<int>(k)]; }
  double seconds(CollectiveKind k) const { return seconds_in[static_cast<int>(k)]; }
  uint64_t total_bytes() const;
  uint64_t total_calls() const;
  double total_seconds() const;
  // Adds `other`'s counts and seconds, kind by kind (a sum over devices).
  CommStats& operator+=(const CommStats& other);
  // One line per kind that was called:
  // "all_reduce: 3 calls, 24576 bytes sent, 0.000125 s".
  std::string to_string() const;
};

// (source position, destination position) pairs within a group.
using Permutation = std::vector<std::pair<int, int>>;

// Throws std::invalid_argument naming the offending pair when a position is out
// of [0, group_size) or a source or destination appears twice.
void validate_permutation(const Permutation& perm, int group_size);

// The receiving half of an asynchronous ppermute, filled in by ppermute_start()
// and completed by ppermute_wait(). Treat as opaque outside backends.
struct PendingRecv {
  void* out = nullptr;
  size_t count = 0;  // elements of `dtype`
  DType dtype = DType::kF32;
  int src_rank = -1;     // global rank we receive from; -1: nothing arrives, out is zeroed
  uint64_t tag[2] = {};  // backend matching key
  bool active = false;   // true between start and wait
  std::shared_ptr<void> backend_state;  // e.g. an MPI_Request
};

// Every operation takes elements of f32, bf16 or i32 (the element type is
// the pointer's; counts are in elements). Data movement is the same for all
// three; reductions run in the element type's arithmetic: bf16 values are
// added (or compared) in f32 and rounded back to bf16 at every step of the
// ring, as NCCL does. Bytes sent count the elements' real size, so a bf16
// collective sends half the bytes of the same one in f32.
// `count` elements at `data`: one piece of a segmented collective.
template <class T>
struct Segment {
  T* data = nullptr;
  size_t count = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // this device's global rank
  virtual int size() const = 0;  // number of devices in the world

  // In place: every member ends with the elementwise reduction over members.
  // The result is bitwise identical on all members.
  template <class T>
  void all_reduce(T* data, size_t count, const Group& group, ReduceOp op) {
    do_all_reduce(data, count, dtype_of<T>(), group, op);
  }
  // One all-reduce over several buffers, in place, as if they were one
  // buffer of their elements back to back (a gradient bucket): the same
  // chunks, bytes and results as all_reduce on the packed copy, without
  // packing or unpacking it. The buffers must not overlap.
  template <class T>
  void all_reduce(const std::vector<Segment<T>>& segments, const Group& group, ReduceOp op) {
    std::vector<Segment<void>> raw;
    raw.reserve(segments.size());
    for (const Segment<T>& s : segments) raw.push_back({s.data, s.count});
    do_all_reduce_segments(raw, dtype_of<T>(), group, op);
  }
  // out[p*count_per_rank ...] = `in` of the member at position p. `in` may alias
  // its own slot out + position*count_per_rank (the NCCL in-place convention).
  template <class T>
  void all_gather(const T* in, T* out, size_t count_per_rank, const Group& group) {
    do_all_gather(in, out, count_per_rank, dtype_of<T>(), group);
  }
  // `in` holds group.size()*count_per_rank elements; the member at position p
  // gets chunk p reduced over all members. `out` must not overlap `in`.
  template <class T>
  void reduce_scatter(const T* in, T* out, size_t count_per_rank, const Group& group, ReduceOp op) {
    do_reduce_scatter(in, out, count_per_rank, dtype_of<T>(), group, op);
  }
  // Chunk j of `in` goes to position j; chunk i of `out` came from position i.
  // `out` must not overlap `in`.
  template <class T>
  void all_to_all(const T* in, T* out, size_t count_per_rank, const Group& group) {
    do_all_to_all(in, out, count_per_rank, dtype_of<T>(), group);
  }
  // Each (src, dst) pair sends src's `in` to dst's `out`. A member that receives
  // nothing gets zeros (JAX semantics). `in` may equal `out`.
  template <class T>
  void ppermute(const T* in, T* out, size_t count, const Group& group, const Permutation& perm) {
    PendingRecv pending = ppermute_start(in, out, count, group, perm);
    ppermute_wait(pending);
  }
  // Sends immediately and returns; ppermute_wait() blocks until this member's
  // incoming block has landed in `out`. `in` may be reused as soon as start
  // returns; `out` must stay valid until the wait.
  template <class T>
  PendingRecv ppermute_start(const T* in, T* out, size_t count, const Group& group,
                             const Permutation& perm) {
    return do_ppermute_start(in, out, count, dtype_of<T>(), group, perm);
  }
  virtual void ppermute_wait(PendingRecv& pending) = 0;
  virtual void barrier(const Group& group) = 0;

  // Point to point, the one operation that is not collective (pipeline
  // stages pass activations and gradients to neighbours): send() hands
  // `count` elements to global rank `dst` under `tag` and returns at once
  // (the block is copied; `in` may be reused); recv() blocks until the
  // message `tag` from rank `src` has landed in `out`. Messages between two
  // ranks match by tag, not by order. Both count as calls of kSendRecv; the
  // sender counts the bytes.
  template <class T>
  void send(const T* in, size_t count, int dst, uint64_t tag) {
    do_send(in, count, dtype_of<T>(), dst, tag);
  }
  template <class T>
  void recv(T* out, size_t count, int src, uint64_t tag) {
    do_recv(out, count, dtype_of<T>(), src, tag);
  }

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }

  // Scratch memory the dimension-aware collectives (tensor_collectives.h)
  // pack and unpack blocks in: slot 0 or 1, at least `bytes` bytes, 64-byte
  // aligned, uninitialised, kept from call to call. A step repeats the same
  // collectives, and a fresh zeroed block per call cost a page fault per 4
  // KiB once devices shared threads (runtime/fibers.h). Per device, like
  // everything here, so it needs no lock; it must not be held across
  // another call that uses the same slot.
  std::byte* scratch(int slot, size_t bytes);

  // The timeline every call is recorded on (a world gives each device's
  // communicator its own); none by default.
  void set_timeline(Timeline* timeline) { timeline_ = timeline; }
  Timeline* timeline() const { return timeline_; }

 protected:
  // What a backend implements: the operations above on `count` elements of
  // `dtype` at untyped addresses.
  virtual void do_all_reduce(void* data, size_t count, DType dtype, const Group& group,
                             ReduceOp op) = 0;
  virtual void do_all_reduce_segments(const std::vector<Segment<void>>& segments, DType dtype,
                                      const Group& group, ReduceOp op) = 0;
  virtual void do_all_gather(const void* in, void* out, size_t count_per_rank, DType dtype,
                             const Group& group) = 0;
  virtual void do_reduce_scatter(const void* in, void* out, size_t count_per_rank, DType dtype,
                                 const Group& group, ReduceOp op) = 0;
  virtual void do_all_to_all(const void* in, void* out, size_t count_per_rank, DType dtype,
                             const Group& group) = 0;
  virtual PendingRecv do_ppermute_start(const void* in, void* out, size_t count, DType dtype,
                                        const Group& group, const Permutation& perm) = 0;
  virtual void do_send(const void* in, size_t count, DType dtype, int dst, uint64_t tag) = 0;
  virtual void do_recv(void* out, size_t count, DType dtype, int src, uint64_t tag) = 0;

  // Adds the wall time from its construction to its destruction to one kind's
  // seconds, and records the call on the timeline (an event of `category`,
  // e.g. "send" or "recv", with the bytes this device sent during
  // it). Collectives are recorded under their kind's name ("all_reduce").
  // A backend opens one first thing in every collective entry point,
  // so time spent validating, sending and waiting all counts (and a call that
  // throws still counts up to the throw).
  class CallTimer {
   public:
    CallTimer(Communicator& comm, CollectiveKind kind, const char* category)
        : comm_(comm),
          kind_(static_cast<int>(kind)),
          category_(category),
          bytes_before_(comm.stats_.bytes_sent[kind_]),
          start_(std::chrono::steady_clock::now()) {
      if (comm_.timeline_ && comm_.timeline_->mode() != ClockMode::kOff)
        timeline_start_ = comm_.timeline_->begin_comm();
    }
    ~CallTimer() {
      comm_.stats_.seconds_in[kind_] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      if (comm_.timeline_ && comm_.timeline_->mode() != ClockMode::kOff)
        comm_.timeline_->end_comm(category_, timeline_start_, peer, tag,
                                  comm_.stats_.bytes_sent[kind_] - bytes_before_);
    }
    CallTimer(const CallTimer&) = delete;
    CallTimer& operator=(const CallTimer&) = delete;

    // Point to point: the other device and the message tag, for the event.
    int peer = -1;
    int64_t tag = -1;

   private:
    Communicator& comm_;
    int kind_;
    const char* category_;
    uint64_t bytes_before_;
    std::chrono::steady_clock::time_point start_;
    double timeline_start_ = 0;
  };
  [[nodiscard]] CallTimer time_call(CollectiveKind k) {
    return CallTimer(*this, k, collective_kind_name(k));
  }
  [[nodiscard]] CallTimer time_call(CollectiveKind k, const char* category) {
    return CallTimer(*this, k, category);
  }

  void count_call(CollectiveKind k) { ++stats_.calls[static_cast<int>(k)]; }
  void count_bytes(CollectiveKind k, uint64_t bytes) {
    stats_.bytes_sent[static_cast<int>(k)] += bytes;
  }

 private:
  struct FreeScratch {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  CommStats stats_;
  Timeline* timeline_ = nullptr;
  std::unique_ptr<std::byte, FreeScratch> scratch_[2];
  size_t scratch_bytes_[2] = {0, 0};
};

}  // namespace sharc::rt

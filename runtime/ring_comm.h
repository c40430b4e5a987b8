// RingComm: the collective algorithms every sharc backend runs, written once
// over two transport operations a backend supplies: post a block to a device
// under a tag, and receive the block a device posted under a tag. The ring
// schedules make the bytes each device sends exactly what the cost model
// predicts: reduce_scatter and all_gather send n-1 chunks, all_reduce is
// reduce_scatter followed by all_gather on the same chunks, all_to_all posts
// its n-1 blocks before receiving any. ThreadWorld's channels are one
// transport; an MPI world's messages are another, so both reduce in the same
// order and count the same bytes. Internal to the runtime's backends.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "runtime/communicator.h"

namespace sharc::rt::detail {

// Matching key for a message: which group's collective, and which call on
// that group. Both ends derive it independently from the collective contract
// (same group, same call order), so no handshake is needed.
struct Tag {
  uint64_t group_key = 0;
  uint64_t seq = 0;
  bool operator==(const Tag&) const = default;
};

using Bytes = std::vector<std::byte>;

// A collective's buffer as the ring reads and writes it: bytes [0, bytes())
// laid over one or more pieces back to back (a segmented all-reduce's
// buffers, or one buffer).
class Pieces {
 public:
  Pieces(const std::vector<Segment<void>>& segments, size_t element_size);
  Pieces(void* data, size_t bytes);
  size_t bytes() const { return start_.back(); }
  // fn(piece address, offset of the piece from `begin`, piece bytes) for
  // each piece of [begin, end), in order.
  template <class F>
  void each(size_t begin, size_t end, F&& fn) const {
    size_t i = static_cast<size_t>(std::upper_bound(start_.begin(), start_.end(), begin) -
                                   start_.begin()) - 1;
    for (size_t at = begin; at < end; ++i) {
      const size_t stop = std::min(end, start_[i + 1]);
      if (stop > at) fn(data_[i] + (at - start_[i]), at - begin, stop - at);
      at = std::max(at, stop);
    }
  }
  // Copies [begin, end) into `block` (of end - begin bytes), the block a
  // ring step sends.
  void gather(size_t begin, size_t end, Bytes& block) const;
  // The address of [begin, end) when one piece holds all of it (and it is
  // not empty), else null.
  const std::byte* contiguous(size_t begin, size_t end) const;

 private:
  std::vector<std::byte*> data_;
  std::vector<size_t> start_;  // piece i holds bytes [start_[i], start_[i + 1])
};

class RingComm : public Communicator {
 public:
  RingComm(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Tag sequences start again (a new run of the world).
  void restart_sequences() { seq_.clear(); }

  // The collectives (communicator.h), on post() and receive().
  void do_all_reduce(void* data, size_t count, DType dtype, const Group& group,
                     ReduceOp op) override;
  void do_all_reduce_segments(const std::vector<Segment<void>>& segments, DType dtype,
                              const Group& group, ReduceOp op) override;
  void do_all_gather(const void* in, void* out, size_t count_per_rank, DType dtype,
                     const Group& group) override;
  void do_reduce_scatter(const void* in, void* out, size_t count_per_rank, DType dtype,
                         const Group& group, ReduceOp op) override;
  void do_all_to_all(const void* in, void* out, size_t count_per_rank, DType dtype,
                     const Group& group) override;
  PendingRecv do_ppermute_start(const void* in, void* out, size_t count, DType dtype,
                                const Group& group, const Permutation& perm) override;
  void ppermute_wait(PendingRecv& pending) override;
  void do_send(const void* in, size_t count, DType dtype, int dst, uint64_t tag) override;
  void do_recv(void* out, size_t count, DType dtype, int src, uint64_t tag) override;
  void barrier(const Group& group) override;

 protected:
  // The transport. post() hands `block` to device `dst` and returns without
  // waiting; receive() blocks until the block `src` posted under `tag` is
  // here (blocks between two devices match by tag, and arrive in order among
  // equal tags), or throws.
  virtual void post(int dst, Tag tag, Bytes&& block) = 0;
  virtual Bytes receive(int src, Tag tag) = 0;

  // Lending, for transports whose devices share memory: post_lent() hands
  // `dst` the block where it lies, not a copy; receive_with() calls fn on the
  // block's bytes where they lie (lent or not) and releases a lent block when
  // fn returns; wait_lent() returns once every block this device lent has
  // been released, and until then the lender leaves them unchanged. On
  // failure a ring function calls abandon_lent(), which takes back what was
  // not received yet and waits for reads in progress, so no device reads
  // memory its lender has freed. The defaults copy (post) and wait for
  // nothing.
  virtual void post_lent(int dst, Tag tag, const std::byte* data, size_t bytes) {
    post(dst, tag, Bytes(data, data + bytes));
  }
  virtual void receive_with(int src, Tag tag,
                            const std::function<void(const std::byte*, size_t)>& fn) {
    const Bytes block = receive(src, tag);
    fn(block.data(), block.size());
  }
  virtual void wait_lent() {}
  virtual void abandon_lent() noexcept {}

  // Message blocks are recycled: a step sends blocks of the same sizes
  // every time, and in a ring every device receives as many blocks as it
  // sends, so a block this device received and is done with becomes one it
  // sends later. new_block() gives a block of `bytes` bytes, a recycled one
  // (its old contents still there) when one of that size is spare;
  // recycle() keeps `block` for that, up to kSpareBlocks per size and
  // kSpareBytes in all. A fresh block per message cost a zero fill, and
  // page faults once several devices shared a thread's heap.
  Bytes new_block(size_t bytes);
  void recycle(Bytes&& block);
  // new_block() filled with `bytes` bytes from `data`.
  Bytes copy_of(const std::byte* data, size_t bytes);

 private:
  static constexpr size_t kSpareBlocks = 4;
  static constexpr size_t kSpareBytes = size_t{64} << 20;
  std::map<size_t, std::vector<Bytes>> spare_;  // by size
  size_t spare_bytes_ = 0;

  static std::vector<size_t> equal_offsets(int n, size_t count_per_rank);

  // new_block() filled with bytes [begin, end) of `from`.
  Bytes gathered(const Pieces& from, size_t begin, size_t end);

  void check(const Group& group, const char* what) const;

  // The group key of point-to-point messages (collectives use a hash of
  // their group's ranks).
  static constexpr uint64_t kPointToPoint = 0x70326170ull;  // "p2p"

  void check_rank(int peer, const char* what) const;

  Tag next_tag(const Group& group);

  // all_reduce over `data`, `count` elements: reduce_scatter, then
  // all_gather, on the same balanced chunks.
  void ring_all_reduce(const Pieces& data, size_t count, DType dtype, const Group& group,
                       ReduceOp op);

  // Member p ends with chunk p (elements `off[p]..off[p+1]`) reduced over the
  // group, written to `out` from byte `out_at`. Step s sends chunk p-s-1 to
  // the right neighbour and folds the partial sum of chunk p-s-2 from the
  // left into it, so every chunk is reduced in one fixed order around the
  // ring. `in` may contain the output: chunk p of `in` is read before it is
  // written.
  void ring_reduce_scatter(const Pieces& in, const std::vector<size_t>& off, const Pieces& out,
                           size_t out_at, DType dtype, const Group& group, Tag tag, ReduceOp op,
                           CollectiveKind kind);

  // `buf` holds this member's chunk at element off[p]; fills in all the
  // others. Step s sends chunk p-s to the right and receives chunk p-s-1 from
  // the left, which is then forwarded as-is at the next step. Chunks are
  // lent (post_lent), so on a shared-memory transport each step is one copy,
  // from the left neighbour's buffer straight into this one's.
  void ring_all_gather(const Pieces& buf, const std::vector<size_t>& off, DType dtype,
                       const Group& group, Tag tag, CollectiveKind kind);

  void expect_size(const Bytes& block, size_t expected, DType dtype, int src) const;
  void expect_size(size_t bytes, size_t expected, DType dtype, int src) const;

  void send(CollectiveKind kind, int dst, Tag tag, const std::byte* data, size_t bytes);

  // Bytes to oneself never touch a link, so they are not counted.
  void send(CollectiveKind kind, int dst, Tag tag, Bytes&& block);
  // The same, lent (post_lent): `data` stays unchanged until wait_lent().
  void send_lent(CollectiveKind kind, int dst, Tag tag, const std::byte* data, size_t bytes);

  void receive_into(int src, Tag tag, void* out, size_t count, DType dtype);

  const int rank_, size_;
  std::map<std::vector<int>, uint64_t> seq_;  // next call number per group
};

}  // namespace sharc::rt::detail

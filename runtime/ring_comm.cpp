// The ring collectives over a transport; see ring_comm.h.
#include "runtime/ring_comm.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/copy_bytes.h"
#include "runtime/trace.h"

namespace sharc::rt::detail {

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
// in-place calls; copy_bytes where the ranges do not overlap.
void move_bytes(void* dst, const void* src, size_t bytes) {
  if (!bytes || dst == src) return;
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d + bytes <= s || s + bytes <= d)
    copy_bytes(dst, src, bytes);
  else
    std::memmove(dst, src, bytes);
}

}  // namespace

Pieces::Pieces(const std::vector<Segment<void>>& segments, size_t element_size) {
  start_.push_back(0);
  for (const Segment<void>& s : segments) {
    if (s.count == 0) continue;
    data_.push_back(static_cast<std::byte*>(s.data));
    start_.push_back(start_.back() + s.count * element_size);
  }
}

Pieces::Pieces(void* data, size_t bytes) {
  start_.push_back(0);
  if (bytes == 0) return;
  data_.push_back(static_cast<std::byte*>(data));
  start_.push_back(bytes);
}

void Pieces::gather(size_t begin, size_t end, Bytes& block) const {
  each(begin, end, [&](const std::byte* p, size_t at, size_t bytes) {
    copy_bytes(block.data() + at, p, bytes);
  });
}

Bytes RingComm::new_block(size_t bytes) {
  auto it = spare_.find(bytes);
  if (it == spare_.end() || it->second.empty()) return Bytes(bytes);
  Bytes block = std::move(it->second.back());
  it->second.pop_back();
  spare_bytes_ -= bytes;
  return block;
}

Bytes RingComm::copy_of(const std::byte* data, size_t bytes) {
  Bytes block = new_block(bytes);
  copy_bytes(block.data(), data, bytes);
  return block;
}

Bytes RingComm::gathered(const Pieces& from, size_t begin, size_t end) {
  Bytes block = new_block(end - begin);
  from.gather(begin, end, block);
  return block;
}

void RingComm::recycle(Bytes&& block) {
  const size_t bytes = block.size();
  if (bytes == 0 || spare_bytes_ + bytes > kSpareBytes) return;
  std::vector<Bytes>& spare = spare_[bytes];
  if (spare.size() >= kSpareBlocks) return;
  spare.push_back(std::move(block));
  spare_bytes_ += bytes;
}

const std::byte* Pieces::contiguous(size_t begin, size_t end) const {
  const std::byte* found = nullptr;
  int pieces = 0;
  each(begin, end, [&](const std::byte* p, size_t, size_t) {
    found = p;
    ++pieces;
  });
  return pieces == 1 ? found : nullptr;
}

Tag RingComm::next_tag(const Group& group) {
  return Tag{hash_ranks(group.ranks), seq_[group.ranks]++};
}

void RingComm::do_all_reduce(void* data, size_t count, DType dtype, const Group& group,
                             ReduceOp op) {
  const CallTimer timer = time_call(CollectiveKind::kAllReduce);
  check(group, "all_reduce");
  count_call(CollectiveKind::kAllReduce);
  ring_all_reduce(Pieces(data, count * dtype_size(dtype)), count, dtype, group, op);
}

void RingComm::do_all_reduce_segments(const std::vector<Segment<void>>& segments, DType dtype,
                                      const Group& group, ReduceOp op) {
  const CallTimer timer = time_call(CollectiveKind::kAllReduce);
  check(group, "all_reduce");
  count_call(CollectiveKind::kAllReduce);
  size_t count = 0;
  for (const Segment<void>& s : segments) count += s.count;
  ring_all_reduce(Pieces(segments, dtype_size(dtype)), count, dtype, group, op);
}

void RingComm::ring_all_reduce(const Pieces& data, size_t count, DType dtype, const Group& group,
                               ReduceOp op) {
  const int n = group.size();
  if (n == 1) return;
  const Tag tag = next_tag(group);
  // Balanced split: chunk i has count/n elements plus one for the first
  // count%n chunks, so uneven counts cost at most one extra element per chunk.
  std::vector<size_t> off(n + 1, 0);
  for (int i = 0; i < n; ++i) off[i + 1] = off[i] + count / n + (size_t(i) < count % n ? 1 : 0);
  const size_t es = dtype_size(dtype);
  ring_reduce_scatter(data, off, data, off[group.position] * es, dtype, group, tag, op,
                      CollectiveKind::kAllReduce);
  ring_all_gather(data, off, dtype, group, tag, CollectiveKind::kAllReduce);
}

void RingComm::do_all_gather(const void* in, void* out, size_t count_per_rank, DType dtype,
                             const Group& group) {
  const CallTimer timer = time_call(CollectiveKind::kAllGather);
  check(group, "all_gather");
  count_call(CollectiveKind::kAllGather);
  const int n = group.size();
  const size_t block = count_per_rank * dtype_size(dtype);
  move_bytes(at(out, group.position * block), in, block);
  if (n == 1) return;
  ring_all_gather(Pieces(out, n * block), equal_offsets(n, count_per_rank), dtype, group,
                  next_tag(group), CollectiveKind::kAllGather);
}

void RingComm::do_reduce_scatter(const void* in, void* out, size_t count_per_rank, DType dtype,
                                 const Group& group, ReduceOp op) {
  const CallTimer timer = time_call(CollectiveKind::kReduceScatter);
  check(group, "reduce_scatter");
  count_call(CollectiveKind::kReduceScatter);
  const int n = group.size();
  if (n == 1) {
    move_bytes(out, in, count_per_rank * dtype_size(dtype));
    return;
  }
  const size_t es = dtype_size(dtype);
  // The ring only reads `in`.
  ring_reduce_scatter(Pieces(const_cast<void*>(in), n * count_per_rank * es),
                      equal_offsets(n, count_per_rank), Pieces(out, count_per_rank * es), 0, dtype,
                      group, next_tag(group), op, CollectiveKind::kReduceScatter);
}

void RingComm::do_all_to_all(const void* in, void* out, size_t count_per_rank, DType dtype,
                             const Group& group) {
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

PendingRecv RingComm::do_ppermute_start(const void* in, void* out, size_t count, DType dtype,
                                        const Group& group, const Permutation& perm) {
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

void RingComm::ppermute_wait(PendingRecv& pending) {
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

void RingComm::do_send(const void* in, size_t count, DType dtype, int dst, uint64_t tag) {
  CallTimer timer = time_call(CollectiveKind::kSendRecv, "send");
  timer.peer = dst;
  timer.tag = static_cast<int64_t>(tag);
  check_rank(dst, "send");
  count_call(CollectiveKind::kSendRecv);
  send(CollectiveKind::kSendRecv, dst, Tag{kPointToPoint, tag}, static_cast<const std::byte*>(in),
       count * dtype_size(dtype));
}

void RingComm::do_recv(void* out, size_t count, DType dtype, int src, uint64_t tag) {
  CallTimer timer = time_call(CollectiveKind::kSendRecv, "recv");
  timer.peer = src;
  timer.tag = static_cast<int64_t>(tag);
  check_rank(src, "recv");
  count_call(CollectiveKind::kSendRecv);
  receive_into(src, Tag{kPointToPoint, tag}, out, count, dtype);
}

void RingComm::barrier(const Group& group) {
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

std::vector<size_t> RingComm::equal_offsets(int n, size_t count_per_rank) {
  std::vector<size_t> off(n + 1);
  for (int i = 0; i <= n; ++i) off[i] = i * count_per_rank;
  return off;
}

void RingComm::check(const Group& group, const char* what) const {
  if (group.position < 0 || group.position >= group.size() ||
      group.ranks[group.position] != rank_) {
    throw std::invalid_argument(std::string(what) + " on rank " + std::to_string(rank_) +
                                ": the group's position " + std::to_string(group.position) +
                                " does not name this device");
  }
}

void RingComm::check_rank(int peer, const char* what) const {
  if (peer < 0 || peer >= size_)
    throw std::invalid_argument(std::string(what) + " on rank " + std::to_string(rank_) + ": peer rank " +
                                std::to_string(peer) + " is not in the world of " + std::to_string(size_));
}

void RingComm::ring_reduce_scatter(const Pieces& in, const std::vector<size_t>& off,
                                   const Pieces& out, size_t out_at, DType dtype,
                                   const Group& group, Tag tag, ReduceOp op, CollectiveKind kind) {
  const int n = group.size(), p = group.position;
  const int right = group.ranks[mod(p + 1, n)], left = group.ranks[mod(p - 1, n)];
  const size_t es = dtype_size(dtype);
  auto len = [&](int c) { return off[c + 1] - off[c]; };
  const int first = mod(p - 1, n);
  send(kind, right, tag, gathered(in, off[first] * es, off[first + 1] * es));
  Bytes acc;
  for (int s = 0; s < n - 1; ++s) {
    const int c = mod(p - s - 2, n);
    acc = receive(left, tag);
    expect_size(acc, len(c), dtype, left);
    in.each(off[c] * es, off[c + 1] * es, [&](const std::byte* x, size_t at, size_t bytes) {
      combine(acc.data() + at, x, bytes / es, dtype, op);
    });
    // Two reads and a write per element, on the virtual clock.
    if (Timeline* tl = timeline()) tl->charge(OpCost{static_cast<double>(len(c)), 3.0 * len(c) * es});
    if (s < n - 2) send(kind, right, tag, std::move(acc));
  }
  out.each(out_at, out_at + acc.size(), [&](std::byte* y, size_t at, size_t bytes) {
    move_bytes(y, acc.data() + at, bytes);
  });
  recycle(std::move(acc));
}

void RingComm::ring_all_gather(const Pieces& buf, const std::vector<size_t>& off, DType dtype,
                               const Group& group, Tag tag, CollectiveKind kind) {
  const int n = group.size(), p = group.position;
  const int right = group.ranks[mod(p + 1, n)], left = group.ranks[mod(p - 1, n)];
  const size_t es = dtype_size(dtype);
  // A chunk in one piece is lent; one across pieces goes as a copy.
  auto pass_on = [&](int c) {
    const size_t begin = off[c] * es, end = off[c + 1] * es;
    if (const std::byte* at = buf.contiguous(begin, end))
      send_lent(kind, right, tag, at, end - begin);
    else
      send(kind, right, tag, gathered(buf, begin, end));
  };
  // If this throws, nothing lent may be read after the buffer is gone.
  struct Abandon {
    RingComm& comm;
    const int exceptions = std::uncaught_exceptions();
    ~Abandon() {
      if (std::uncaught_exceptions() > exceptions) comm.abandon_lent();
    }
  } abandon{*this};
  pass_on(p);
  for (int s = 0; s < n - 1; ++s) {
    const int c = mod(p - s - 1, n);
    receive_with(left, tag, [&](const std::byte* block, size_t bytes) {
      expect_size(bytes, off[c + 1] - off[c], dtype, left);
      buf.each(off[c] * es, off[c + 1] * es, [&](std::byte* y, size_t at, size_t piece) {
        move_bytes(y, block + at, piece);
      });
    });
    if (s < n - 2) pass_on(c);
  }
  wait_lent();
}

void RingComm::expect_size(const Bytes& block, size_t expected, DType dtype, int src) const {
  expect_size(block.size(), expected, dtype, src);
}

void RingComm::expect_size(size_t bytes, size_t expected, DType dtype, int src) const {
  const size_t es = dtype_size(dtype);
  if (bytes != expected * es) {
    throw std::runtime_error("rank " + std::to_string(rank_) + " received " +
                             std::to_string(bytes / es) + " " +
                             std::string(dtype_name(dtype)) + " elements from rank " +
                             std::to_string(src) + " but expected " + std::to_string(expected) +
                             ": members called a collective with different counts or types");
  }
}

void RingComm::send(CollectiveKind kind, int dst, Tag tag, const std::byte* data, size_t bytes) {
  send(kind, dst, tag, copy_of(data, bytes));
}

void RingComm::send(CollectiveKind kind, int dst, Tag tag, Bytes&& block) {
  if (dst != rank_) count_bytes(kind, block.size());
  post(dst, tag, std::move(block));
}

void RingComm::send_lent(CollectiveKind kind, int dst, Tag tag, const std::byte* data,
                         size_t bytes) {
  if (dst != rank_) count_bytes(kind, bytes);
  post_lent(dst, tag, data, bytes);
}

void RingComm::receive_into(int src, Tag tag, void* out, size_t count, DType dtype) {
  Bytes block = receive(src, tag);
  expect_size(block, count, dtype, src);
  move_bytes(out, block.data(), block.size());
  recycle(std::move(block));
}

}  // namespace sharc::rt::detail

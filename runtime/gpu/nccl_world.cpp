// NcclWorld and its communicator; see nccl_world.h.
#include "runtime/gpu/nccl_world.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace sharc::gpu {

namespace {

std::string ranks_str(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "}";
}

// Device memory for a scratch buffer, from the world's kernels.
struct DeviceScratch {
  KernelSet* kernels = nullptr;
  void* p = nullptr;
  size_t bytes = 0;
  void* get(size_t want) {
    if (want > bytes) {
      if (p) kernels->release(p);
      p = kernels->alloc(want);
      bytes = want;
    }
    return p;
  }
  ~DeviceScratch() {
    if (p) kernels->release(p);
  }
};

// f(), with an NcclError it throws turned into one naming the rank and call.
template <class F>
auto guarded(int rank, const char* call, F&& f) {
  try {
    return f();
  } catch (const NcclError& e) {
    throw std::runtime_error("NcclWorld: rank " + std::to_string(rank) + ": " + call + " failed: " + e.what());
  }
}

}  // namespace

// The rank's collectives as NCCL calls on device buffers. The world's
// communicator does point to point (global ranks are its ranks); one split
// per set of mesh axes does the collectives of the groups over those axes.
class NcclCommunicator final : public rt::Communicator, public rt::BlockMover, public StreamedCommunicator {
 public:
  NcclCommunicator(const rt::MeshShape& mesh, int rank, Bootstrap& boot, NcclApi& nccl, KernelSet& kernels,
                   std::chrono::milliseconds timeout)
      : mesh_(mesh), rank_(rank), nccl_(nccl), kernels_(kernels), timeout_(timeout) {
    scratch_[0].kernels = scratch_[1].kernels = &kernels;
    nccl.use_stream(kernels.compute_stream());  // where the program's kernels run
    // Rank 0's id reaches every rank over the bootstrap.
    const std::vector<std::string> ids = boot.all_gather(rank == 0 ? nccl.unique_id() : std::string());
    world_ = guarded(rank, "ncclCommInitRank", [&] { return nccl.init(mesh.num_devices(), ids.at(0), rank); });
    comms_.push_back(world_);
    std::vector<int> all(static_cast<size_t>(mesh.num_devices()));
    for (size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
    by_ranks_[all] = world_;
    // Every proper, non-empty set of axes, in the same order on every rank.
    const int axes = static_cast<int>(mesh.axis_names.size());
    for (int set = 1; set + 1 < (1 << axes); ++set) {
      std::vector<int> on;
      for (int a = 0; a < axes; ++a)
        if (set & (1 << a)) on.push_back(a);
      const rt::Group g = rt::make_group(mesh, rank, on);
      // The color: the rank's coordinates on the other axes; the group's
      // smallest rank names them uniquely.
      const int color = *std::min_element(g.ranks.begin(), g.ranks.end());
      NcclApi::Comm c = guarded(rank, "ncclCommSplit", [&] { return nccl.split(world_, color, rank); });
      comms_.push_back(c);
      std::vector<int> sorted = g.ranks;
      std::sort(sorted.begin(), sorted.end());
      by_ranks_[sorted] = c;
    }
  }

  ~NcclCommunicator() override {
    for (NcclApi::Comm c : comms_) {
      try {
        aborted_ ? nccl_.abort(c) : nccl_.destroy(c);
      } catch (...) {  // a destructor reports nothing more
      }
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return mesh_.num_devices(); }

  void ppermute_wait(rt::PendingRecv& pending) override {
    if (!pending.active) return;
    pending.active = false;
    wait(world_, "ppermute");
  }

  void barrier(const rt::Group& group) override {
    if (group.size() <= 1) return;
    void* one = scratch(1, sizeof(float));
    nccl_.all_reduce(one, one, 1, rt::DType::kF32, rt::ReduceOp::kSum, comm_of(group, "barrier"));
    wait(comm_of(group, "barrier"), "barrier");
  }

  // StreamedCommunicator: the stream the calls from now on go on.
  void use_stream(Stream s) override { nccl_.use_stream(s); }

  // rt::BlockMover: packing on the device.
  void strided_copy(const void* in, const int64_t (&shape)[3], const int64_t (&strides)[3], size_t elem_bytes,
                    void* out) override {
    kernels_.strided_copy(in, shape, strides, elem_bytes, out);
  }
  void* scratch(int slot, size_t bytes) override { return scratch_[slot].get(bytes); }

 protected:
  void do_all_reduce(void* data, size_t count, rt::DType dtype, const rt::Group& group, rt::ReduceOp op) override {
    auto t = time_call(rt::CollectiveKind::kAllReduce);
    count_call(rt::CollectiveKind::kAllReduce);
    if (group.size() <= 1 || count == 0) return;
    NcclApi::Comm c = comm_of(group, "all_reduce");
    nccl_.all_reduce(data, data, count, dtype, op, c);
    wait(c, "all_reduce", group);
    count_bytes(rt::CollectiveKind::kAllReduce, ring_bytes(2, count, dtype, group));
  }

  void do_all_reduce_segments(const std::vector<rt::Segment<void>>& segments, rt::DType dtype,
                              const rt::Group& group, rt::ReduceOp op) override {
    auto t = time_call(rt::CollectiveKind::kAllReduce);
    count_call(rt::CollectiveKind::kAllReduce);
    if (group.size() <= 1) return;
    NcclApi::Comm c = comm_of(group, "all_reduce");
    size_t total = 0;
    nccl_.group_start();  // one launch for the bucket
    for (const auto& s : segments) {
      if (s.count) nccl_.all_reduce(s.data, s.data, s.count, dtype, op, c);
      total += s.count;
    }
    nccl_.group_end();
    wait(c, "all_reduce", group);
    count_bytes(rt::CollectiveKind::kAllReduce, ring_bytes(2, total, dtype, group));
  }

  void do_all_gather(const void* in, void* out, size_t count, rt::DType dtype, const rt::Group& group) override {
    auto t = time_call(rt::CollectiveKind::kAllGather);
    count_call(rt::CollectiveKind::kAllGather);
    if (group.size() <= 1) return copy(in, out, count, dtype);
    if (in_order(group)) {
      NcclApi::Comm c = comm_of(group, "all_gather");
      nccl_.all_gather(in, out, count, dtype, c);
      wait(c, "all_gather", group);
    } else {  // the group's order is not its ranks': block p from ranks[p]
      exchange(group, [&](int p) { return in; },
               [&](int p) { return static_cast<char*>(out) + static_cast<size_t>(p) * count * rt::dtype_size(dtype); },
               count, dtype, "all_gather");
    }
    count_bytes(rt::CollectiveKind::kAllGather, (group.size() - 1) * count * rt::dtype_size(dtype));
  }

  void do_reduce_scatter(const void* in, void* out, size_t count, rt::DType dtype, const rt::Group& group,
                         rt::ReduceOp op) override {
    auto t = time_call(rt::CollectiveKind::kReduceScatter);
    count_call(rt::CollectiveKind::kReduceScatter);
    if (group.size() <= 1) return copy(in, out, count, dtype);
    if (!in_order(group))
      throw std::invalid_argument(where("reduce_scatter", group) +
                                  ": the group's order is not its ranks' (axes given in other than the mesh's "
                                  "order), which NcclWorld's reduce_scatter does not take yet");
    NcclApi::Comm c = comm_of(group, "reduce_scatter");
    nccl_.reduce_scatter(in, out, count, dtype, op, c);
    wait(c, "reduce_scatter", group);
    count_bytes(rt::CollectiveKind::kReduceScatter, (group.size() - 1) * count * rt::dtype_size(dtype));
  }

  void do_all_to_all(const void* in, void* out, size_t count, rt::DType dtype, const rt::Group& group) override {
    auto t = time_call(rt::CollectiveKind::kAllToAll);
    count_call(rt::CollectiveKind::kAllToAll);
    const size_t bytes = count * rt::dtype_size(dtype);
    if (group.size() <= 1) return copy(in, out, count, dtype);
    exchange(group, [&](int p) { return static_cast<const char*>(in) + static_cast<size_t>(p) * bytes; },
             [&](int p) { return static_cast<char*>(out) + static_cast<size_t>(p) * bytes; }, count, dtype,
             "all_to_all");
    count_bytes(rt::CollectiveKind::kAllToAll, (group.size() - 1) * bytes);
  }

  rt::PendingRecv do_ppermute_start(const void* in, void* out, size_t count, rt::DType dtype, const rt::Group& group,
                                    const rt::Permutation& perm) override {
    auto t = time_call(rt::CollectiveKind::kPPermute);
    count_call(rt::CollectiveKind::kPPermute);
    int to = -1, from = -1;
    for (auto [src, dst] : perm) {
      if (src == group.position) to = group.ranks[static_cast<size_t>(dst)];
      if (dst == group.position) from = group.ranks[static_cast<size_t>(src)];
    }
    const size_t bytes = count * rt::dtype_size(dtype);
    if (to >= 0 && from >= 0 && in == out && count) {  // NCCL may not read and write one buffer at once
      void* copy_in = scratch(1, bytes);
      copy(in, copy_in, count, dtype);
      in = copy_in;
    }
    rt::PendingRecv p;
    p.out = out;
    p.count = count;
    p.dtype = dtype;
    p.src_rank = from;
    if (count && (to >= 0 || from >= 0)) {
      nccl_.group_start();
      if (to >= 0) nccl_.send(in, count, dtype, to, world_);
      if (from >= 0) nccl_.recv(out, count, dtype, from, world_);
      nccl_.group_end();
      p.active = true;
    }
    // Nothing arrives: zeros, after the send (in stream order) read `in`,
    // which may be `out`.
    if (from < 0 && count) zero(out, bytes);
    if (to >= 0) count_bytes(rt::CollectiveKind::kPPermute, bytes);
    return p;
  }

  void do_send(const void* in, size_t count, rt::DType dtype, int dst, uint64_t tag) override {
    auto t = time_call(rt::CollectiveKind::kSendRecv, "send");
    t.peer = dst;
    t.tag = static_cast<int64_t>(tag);
    count_call(rt::CollectiveKind::kSendRecv);
    if (!count) return;
    // Enqueued; stream order keeps `in` until it has gone.
    nccl_.send(in, count, dtype, dst, world_);
    count_bytes(rt::CollectiveKind::kSendRecv, count * rt::dtype_size(dtype));
  }

  void do_recv(void* out, size_t count, rt::DType dtype, int src, uint64_t tag) override {
    auto t = time_call(rt::CollectiveKind::kSendRecv, "recv");
    t.peer = src;
    t.tag = static_cast<int64_t>(tag);
    count_call(rt::CollectiveKind::kSendRecv);
    if (!count) return;
    nccl_.recv(out, count, dtype, src, world_);
    wait(world_, "recv from rank " + std::to_string(src));
  }

 private:
  std::string where(const std::string& what, const rt::Group& group) const {
    return "NcclWorld: rank " + std::to_string(rank_) + ": " + what + " over ranks " + ranks_str(group.ranks);
  }

  NcclApi::Comm comm_of(const rt::Group& group, const char* what) {
    std::vector<int> sorted = group.ranks;
    std::sort(sorted.begin(), sorted.end());
    const auto it = by_ranks_.find(sorted);
    if (it == by_ranks_.end())
      throw std::invalid_argument(where(what, group) + ": no communicator has these ranks (a group of the mesh's "
                                                       "axes has one)");
    return it->second;
  }

  static bool in_order(const rt::Group& group) {
    return std::is_sorted(group.ranks.begin(), group.ranks.end());
  }

  static uint64_t ring_bytes(int passes, size_t count, rt::DType dtype, const rt::Group& group) {
    const uint64_t n = static_cast<uint64_t>(group.size());
    return passes * (n - 1) * (count * rt::dtype_size(dtype) / n);
  }

  // Every member sends block in_of(p) to position p and receives out_of(p)
  // from it (its own block copied), as one NCCL group on the world's
  // communicator.
  template <class In, class Out>
  void exchange(const rt::Group& group, In in_of, Out out_of, size_t count, rt::DType dtype, const char* what) {
    copy(in_of(group.position), out_of(group.position), count, dtype);
    nccl_.group_start();
    for (int p = 0; p < group.size(); ++p) {
      if (p == group.position) continue;
      const int peer = group.ranks[static_cast<size_t>(p)];
      nccl_.send(in_of(p), count, dtype, peer, world_);
      nccl_.recv(out_of(p), count, dtype, peer, world_);
    }
    nccl_.group_end();
    wait(world_, what, group);
  }

  void copy(const void* in, void* out, size_t count, rt::DType dtype) {
    if (in == out || count == 0) return;
    kernels_.strided_copy(in, {1, 1, static_cast<int64_t>(count)}, {0, 0, 1}, rt::dtype_size(dtype), out);
  }

  void zero(void* out, size_t bytes) {
    std::vector<std::byte> z(bytes);
    kernels_.upload(out, z.data(), bytes);
  }

  // Waits until everything enqueued on `c` has completed, or the deadline:
  // then (or on NCCL's error) every communicator is aborted and the error
  // names the rank and the call.
  void wait(NcclApi::Comm c, const std::string& what, const rt::Group* group = nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::string failure;
    try {
      while (!nccl_.done(c)) {
        if (std::chrono::steady_clock::now() > deadline) {
          failure = "did not complete within " + std::to_string(timeout_.count()) +
                    " ms: a peer never arrived, so the communicators were aborted (ncclCommAbort)";
          break;
        }
        std::this_thread::yield();
      }
    } catch (const NcclError& e) {
      failure = std::string("failed: ") + e.what() + "; the communicators were aborted (ncclCommAbort)";
    }
    if (failure.empty()) return;
    aborted_ = true;
    for (NcclApi::Comm each : comms_) {
      try {
        nccl_.abort(each);
      } catch (...) {  // the error below is the one to report
      }
    }
    comms_.clear();
    throw std::runtime_error((group ? where(what, *group) : "NcclWorld: rank " + std::to_string(rank_) + ": " + what) +
                             " " + failure);
  }
  void wait(NcclApi::Comm c, const std::string& what, const rt::Group& group) { wait(c, what, &group); }

  const rt::MeshShape& mesh_;
  int rank_;
  NcclApi& nccl_;
  KernelSet& kernels_;
  std::chrono::milliseconds timeout_;
  NcclApi::Comm world_ = nullptr;
  std::vector<NcclApi::Comm> comms_;
  std::map<std::vector<int>, NcclApi::Comm> by_ranks_;
  DeviceScratch scratch_[2];
  bool aborted_ = false;
};

NcclWorld::NcclWorld(rt::MeshShape mesh, Bootstrap& boot, Parts parts, Options options)
    : mesh_(std::move(mesh)),
      boot_(boot),
      rank_(boot.rank()),
      parts_(std::move(parts)),
      memory_(std::make_unique<rt::DeviceMemory>()),
      timeline_(boot.rank()) {
  if (boot.size() != mesh_.num_devices())
    throw std::invalid_argument("NcclWorld: " + std::to_string(boot.size()) + " ranks for the mesh " +
                                mesh_.to_string() + " of " + std::to_string(mesh_.num_devices()) +
                                " devices: start one process per device");
  if (parts_.memory) memory_->set_source(parts_.memory.get());
  if (parts_.gpu >= 0) cuda_set_device(parts_.gpu);
  comm_ = std::make_unique<NcclCommunicator>(mesh_, rank_, boot_, *parts_.nccl, *parts_.kernels, options.timeout);
  comm_->set_timeline(&timeline_);
  timeline_.set_stamps(parts_.kernels->stamps());  // the device clock: CUDA events on the GPU
}

NcclWorld::NcclWorld(rt::MeshShape mesh, Bootstrap& boot, std::unique_ptr<NcclApi> nccl, KernelSet& kernels,
                     std::unique_ptr<rt::MemorySource> memory, size_t memory_capacity, Options options)
    : NcclWorld(std::move(mesh), boot,
                Parts{std::move(nccl), nullptr, &kernels, std::move(memory), memory_capacity, -1}, options) {}

NcclWorld::NcclWorld(rt::MeshShape mesh, Bootstrap& boot, Options options)
    : NcclWorld(std::move(mesh), boot, libnccl_parts(boot, options), options) {}

NcclWorld::Parts NcclWorld::libnccl_parts(const Bootstrap& boot, const Options& options) {
  const std::string rank = "NcclWorld: rank " + std::to_string(boot.rank()) + ": ";
  Parts p;
  // The node's devices, counted without a context on any of them: each
  // rank then makes one on its own GPU only.
  int devices = 0;
  try {
    devices = cuda_device_count();
  } catch (const std::exception& e) {
    throw std::runtime_error(rank + "no GPU: " + e.what());
  }
  if (devices == 0) throw std::runtime_error(rank + "no GPU: CUDA finds no device");
  p.gpu = options.gpu >= 0 ? options.gpu : boot.rank() % devices;
  std::string why;
  p.nccl = nccl_library(p.gpu, &why);
  if (!p.nccl) throw std::runtime_error(rank + why);
  p.own_kernels = make_cuda_kernels(p.gpu);
  p.kernels = p.own_kernels.get();
  p.memory = make_cuda_memory(p.gpu);
  return p;
}

NcclWorld::~NcclWorld() = default;

void NcclWorld::check_rank(int rank, const char* what) const {
  if (rank != rank_)
    throw std::out_of_range(std::string("NcclWorld: ") + what + " of device " + std::to_string(rank) +
                            ": this process drives device " + std::to_string(rank_) + " only");
}

rt::Communicator& NcclWorld::comm(int rank) {
  check_rank(rank, "comm");
  return *comm_;
}
rt::DeviceMemory& NcclWorld::memory(int rank) {
  check_rank(rank, "memory");
  return *memory_;
}
rt::Timeline& NcclWorld::timeline(int rank) {
  check_rank(rank, "timeline");
  return timeline_;
}
KernelSet& NcclWorld::kernels(int rank) {
  check_rank(rank, "kernels");
  return *parts_.kernels;
}
rt::BlockMover* NcclWorld::device_communicator(int rank) {
  check_rank(rank, "device_communicator");
  return comm_.get();
}

StreamedCommunicator* NcclWorld::streamed_communicator(int rank) {
  check_rank(rank, "streamed_communicator");
  return comm_.get();
}

void NcclWorld::run(const std::function<void(int rank)>& fn) {
  if (parts_.gpu >= 0) cuda_set_device(parts_.gpu);
  fn(rank_);
}

rt::CommStats NcclWorld::local_stats() const { return comm_->stats(); }

size_t NcclWorld::free_memory(int rank) {
  check_rank(rank, "free_memory");
  if (parts_.gpu >= 0) return cuda_free_memory(parts_.gpu);
  const size_t used = memory_->current();
  return parts_.capacity > used ? parts_.capacity - used : 0;
}

}  // namespace sharc::gpu

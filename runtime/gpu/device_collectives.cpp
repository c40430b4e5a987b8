// Collectives on device buffers; see device_collectives.h.
#include "runtime/gpu/device_collectives.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/kernels.h"
#include "runtime/tensor_collectives.h"

namespace sharc::gpu {
namespace {

// A host copy of `count` elements of a device buffer (downloaded when `in`
// is given), uploaded back by put().
template <class T>
struct Staged {
  std::vector<T> host;
  explicit Staged(size_t count) : host(count) {}
  Staged(const DeviceContext& d, const T* in, size_t count) : host(count) {
    if (count) d.kernels->download(host.data(), in, count * sizeof(T));
  }
  void put(const DeviceContext& d, T* out) const {
    if (!host.empty()) d.kernels->upload(out, host.data(), host.size() * sizeof(T));
  }
};

// A collective's work goes on d.stream for its duration: the KernelSet's
// copies and packing, and a communicator that enqueues on a device stream
// (NcclWorld's). Where the host touches device buffers itself (the
// simulator's memory), everything given to that stream runs first.
class OnStream {
 public:
  explicit OnStream(const DeviceContext& d) : d_(d), was_(d.kernels->current_stream()) {
    d.kernels->use_stream(d.stream);
    if (d.streamed_comm) d.streamed_comm->use_stream(d.stream);
    if (d.host_memory) d.kernels->synchronize_stream(d.stream);
  }
  ~OnStream() {
    d_.kernels->use_stream(was_);
    if (d_.streamed_comm) d_.streamed_comm->use_stream(was_);
  }
  OnStream(const OnStream&) = delete;
  OnStream& operator=(const OnStream&) = delete;

 private:
  const DeviceContext& d_;
  Stream was_;
};

}  // namespace

template <class T>
void all_reduce(const DeviceContext& d, rt::Communicator& comm, T* data, size_t count, const rt::Group& group,
                rt::ReduceOp op) {
  const OnStream on(d);
  if (d.host_memory || d.device_comm) return comm.all_reduce(data, count, group, op);
  Staged<T> s(d, data, count);
  comm.all_reduce(s.host.data(), count, group, op);
  s.put(d, data);
}

template <class T>
void all_reduce(const DeviceContext& d, rt::Communicator& comm, const std::vector<rt::Segment<T>>& segments,
                const rt::Group& group, rt::ReduceOp op) {
  const OnStream on(d);
  if (d.host_memory || d.device_comm) return comm.all_reduce(segments, group, op);
  std::vector<Staged<T>> staged;
  std::vector<rt::Segment<T>> host;
  staged.reserve(segments.size());
  for (const rt::Segment<T>& s : segments) {
    staged.emplace_back(d, s.data, s.count);
    host.push_back({staged.back().host.data(), s.count});
  }
  comm.all_reduce(host, group, op);
  for (size_t k = 0; k < segments.size(); ++k) staged[k].put(d, segments[k].data);
}

template <class T>
void all_gather_dim(const DeviceContext& d, rt::Communicator& comm, const rt::Group& group, const T* in,
                    const std::vector<int64_t>& local_shape, int dim, T* out) {
  const OnStream on(d);
  if (d.host_memory || d.device_comm) return rt::all_gather_dim(comm, group, in, local_shape, dim, out, d.device_comm);
  const auto n = static_cast<size_t>(rt::num_elements(local_shape));
  Staged<T> s(d, in, n), r(n * static_cast<size_t>(group.size()));
  rt::all_gather_dim(comm, group, s.host.data(), local_shape, dim, r.host.data());
  r.put(d, out);
}

template <class T>
void reduce_scatter_dim(const DeviceContext& d, rt::Communicator& comm, const rt::Group& group, const T* in,
                        const std::vector<int64_t>& full_shape, int dim, T* out, rt::ReduceOp op) {
  const OnStream on(d);
  if (d.host_memory || d.device_comm)
    return rt::reduce_scatter_dim(comm, group, in, full_shape, dim, out, op, d.device_comm);
  const auto n = static_cast<size_t>(rt::num_elements(full_shape));
  Staged<T> s(d, in, n), r(n / static_cast<size_t>(group.size()));
  rt::reduce_scatter_dim(comm, group, s.host.data(), full_shape, dim, r.host.data(), op);
  r.put(d, out);
}

template <class T>
void all_to_all_dim(const DeviceContext& d, rt::Communicator& comm, const rt::Group& group, const T* in,
                    const std::vector<int64_t>& local_shape, int split_dim, int concat_dim, T* out) {
  const OnStream on(d);
  if (d.host_memory || d.device_comm)
    return rt::all_to_all_dim(comm, group, in, local_shape, split_dim, concat_dim, out, d.device_comm);
  const auto n = static_cast<size_t>(rt::num_elements(local_shape));
  Staged<T> s(d, in, n), r(n);
  rt::all_to_all_dim(comm, group, s.host.data(), local_shape, split_dim, concat_dim, r.host.data());
  r.put(d, out);
}

template <class T>
void ppermute(const DeviceContext& d, rt::Communicator& comm, const T* in, T* out, size_t count,
              const rt::Group& group, const rt::Permutation& perm) {
  const OnStream on(d);
  if (d.host_memory || d.device_comm) return comm.ppermute(in, out, count, group, perm);
  Staged<T> s(d, in, count), r(count);
  comm.ppermute(s.host.data(), r.host.data(), count, group, perm);
  r.put(d, out);
}

template <class T>
void send(const DeviceContext& d, rt::Communicator& comm, const T* in, size_t count, int dst, uint64_t tag) {
  const OnStream on(d);
  if (d.host_memory || d.device_comm) return comm.send(in, count, dst, tag);
  Staged<T> s(d, in, count);
  comm.send(s.host.data(), count, dst, tag);  // send copies the block
}

template <class T>
void recv(const DeviceContext& d, rt::Communicator& comm, T* out, size_t count, int src, uint64_t tag) {
  const OnStream on(d);
  if (d.host_memory || d.device_comm) return comm.recv(out, count, src, tag);
  Staged<T> r(count);
  comm.recv(r.host.data(), count, src, tag);
  r.put(d, out);
}

template <class T>
PendingTransfer ppermute_start(const DeviceContext& d, rt::Communicator& comm, const T* in, T* out, size_t count,
                               const rt::Group& group, const rt::Permutation& perm) {
  const OnStream on(d);
  PendingTransfer p;
  if (d.host_memory || d.device_comm) {
    p.recv = comm.ppermute_start(in, out, count, group, perm);
    return p;
  }
  p.bytes = count * sizeof(T);
  p.staged_in = std::make_shared<std::vector<std::byte>>(p.bytes);
  p.staged_out = std::make_shared<std::vector<std::byte>>(p.bytes);
  if (p.bytes) d.kernels->download(p.staged_in->data(), in, p.bytes);
  p.device_out = out;
  p.recv = comm.ppermute_start(reinterpret_cast<const T*>(p.staged_in->data()),
                               reinterpret_cast<T*>(p.staged_out->data()), count, group, perm);
  return p;
}

void ppermute_wait(const DeviceContext& d, rt::Communicator& comm, PendingTransfer& pending) {
  const OnStream on(d);
  comm.ppermute_wait(pending.recv);
  if (pending.device_out && pending.bytes) d.kernels->upload(pending.device_out, pending.staged_out->data(), pending.bytes);
  pending.staged_in.reset();
  pending.staged_out.reset();
}

void init_block(const DeviceContext& d, const rt::InitSpec& spec, uint64_t seed, const int64_t* global_shape,
                const int64_t* offset, const int64_t* local_shape, int rank, float* device, size_t count) {
  if (d.host_memory) {  // the host writes the shard itself, after everything given before
    d.kernels->synchronize_stream(d.stream);
    return rt::init_block(spec, seed, global_shape, offset, local_shape, rank, device);
  }
  Staged<float> s(count);
  rt::init_block(spec, seed, global_shape, offset, local_shape, rank, s.host.data());
  s.put(d, device);
}

void require_host_memory(const DeviceContext& d, std::string_view program, std::string_view call) {
  if (d.host_memory) {
    d.kernels->synchronize();  // the host reads the buffers next: nothing given may still write them
    return;
  }
  throw std::invalid_argument(std::string(call) + " of program \"" + std::string(program) +
                              "\" (BACKEND cuda) would give the host a pointer into the memory of " +
                              d.kernels->name() +
                              ", which it cannot read; get_parameter and set_parameter copy whole "
                              "parameters (checkpoints of BACKEND cuda programs on a GPU are to come)");
}

#define SHARC_DEVICE_COLLECTIVES_FOR(T)                                                                         \
  template void all_reduce<T>(const DeviceContext&, rt::Communicator&, T*, size_t, const rt::Group&,          \
                              rt::ReduceOp);                                                                   \
  template void all_reduce<T>(const DeviceContext&, rt::Communicator&, const std::vector<rt::Segment<T>>&,    \
                              const rt::Group&, rt::ReduceOp);                                                 \
  template void all_gather_dim<T>(const DeviceContext&, rt::Communicator&, const rt::Group&, const T*,        \
                                  const std::vector<int64_t>&, int, T*);                                       \
  template void reduce_scatter_dim<T>(const DeviceContext&, rt::Communicator&, const rt::Group&, const T*,    \
                                      const std::vector<int64_t>&, int, T*, rt::ReduceOp);                     \
  template void all_to_all_dim<T>(const DeviceContext&, rt::Communicator&, const rt::Group&, const T*,        \
                                  const std::vector<int64_t>&, int, int, T*);                                  \
  template void ppermute<T>(const DeviceContext&, rt::Communicator&, const T*, T*, size_t, const rt::Group&,  \
                            const rt::Permutation&);                                                           \
  template void send<T>(const DeviceContext&, rt::Communicator&, const T*, size_t, int, uint64_t);            \
  template void recv<T>(const DeviceContext&, rt::Communicator&, T*, size_t, int, uint64_t);                  \
  template PendingTransfer ppermute_start<T>(const DeviceContext&, rt::Communicator&, const T*, T*, size_t,   \
                                             const rt::Group&, const rt::Permutation&);
SHARC_DEVICE_COLLECTIVES_FOR(float)
SHARC_DEVICE_COLLECTIVES_FOR(rt::bf16)
SHARC_DEVICE_COLLECTIVES_FOR(int32_t)
#undef SHARC_DEVICE_COLLECTIVES_FOR

}  // namespace sharc::gpu

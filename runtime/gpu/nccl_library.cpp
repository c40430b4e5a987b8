// nccl_library(): NcclApi over libnccl (built with SHARC_ENABLE_CUDA); see
// nccl_world.h.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "runtime/gpu/nccl_world.h"

namespace sharc::gpu {

namespace {

void check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw NcclError(std::string(call) + ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) + ")");
}

ncclComm_t as_nccl(NcclApi::Comm c) { return static_cast<ncclComm_t>(c); }

ncclDataType_t nccl_type(rt::DType t) {
  switch (t) {
    case rt::DType::kF32: return ncclFloat32;
    case rt::DType::kBF16: return ncclBfloat16;
    case rt::DType::kI32: return ncclInt32;
  }
  throw NcclError("no NCCL type for " + std::string(rt::dtype_name(t)));
}

ncclRedOp_t nccl_op(rt::ReduceOp op) { return op == rt::ReduceOp::kMax ? ncclMax : ncclSum; }

// Everything runs on the device's legacy default stream, after the
// program's kernels and before its next ones.
class Libnccl final : public NcclApi {
 public:
  explicit Libnccl(int device) : device_(device) {}

  std::string unique_id() override {
    ncclUniqueId id;
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    return std::string(id.internal, sizeof id.internal);
  }
  Comm init(int nranks, const std::string& id, int rank) override {
    if (id.size() != NCCL_UNIQUE_ID_BYTES) throw NcclError("ncclCommInitRank: the unique id is not NCCL's");
    ncclUniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof uid.internal);
    if (cudaSetDevice(device_) != cudaSuccess) throw NcclError("cudaSetDevice failed");
    ncclComm_t c = nullptr;
    check(ncclCommInitRank(&c, nranks, uid, rank), "ncclCommInitRank");
    return c;
  }
  Comm split(Comm parent, int color, int key) override {
    ncclComm_t c = nullptr;
    check(ncclCommSplit(as_nccl(parent), color, key, &c, nullptr), "ncclCommSplit");
    return c;
  }
  void all_reduce(const void* in, void* out, size_t count, rt::DType dtype, rt::ReduceOp op, Comm comm) override {
    check(ncclAllReduce(in, out, count, nccl_type(dtype), nccl_op(op), as_nccl(comm), stream()), "ncclAllReduce");
  }
  void all_gather(const void* in, void* out, size_t count, rt::DType dtype, Comm comm) override {
    check(ncclAllGather(in, out, count, nccl_type(dtype), as_nccl(comm), stream()), "ncclAllGather");
  }
  void reduce_scatter(const void* in, void* out, size_t count, rt::DType dtype, rt::ReduceOp op,
                      Comm comm) override {
    check(ncclReduceScatter(in, out, count, nccl_type(dtype), nccl_op(op), as_nccl(comm), stream()),
          "ncclReduceScatter");
  }
  void group_start() override { check(ncclGroupStart(), "ncclGroupStart"); }
  void group_end() override { check(ncclGroupEnd(), "ncclGroupEnd"); }
  void send(const void* in, size_t count, rt::DType dtype, int peer, Comm comm) override {
    check(ncclSend(in, count, nccl_type(dtype), peer, as_nccl(comm), stream()), "ncclSend");
  }
  void recv(void* out, size_t count, rt::DType dtype, int peer, Comm comm) override {
    check(ncclRecv(out, count, nccl_type(dtype), peer, as_nccl(comm), stream()), "ncclRecv");
  }
  bool done(Comm comm) override {
    ncclResult_t async = ncclSuccess;
    check(ncclCommGetAsyncError(as_nccl(comm), &async), "ncclCommGetAsyncError");
    check(async, "NCCL (asynchronous)");
    const cudaError_t q = cudaStreamQuery(stream());
    if (q == cudaErrorNotReady) return false;
    if (q != cudaSuccess) throw NcclError(std::string("cudaStreamQuery: ") + cudaGetErrorString(q));
    return true;
  }
  void abort(Comm comm) override { check(ncclCommAbort(as_nccl(comm)), "ncclCommAbort"); }
  void destroy(Comm comm) override { check(ncclCommDestroy(as_nccl(comm)), "ncclCommDestroy"); }

 private:
  void use_stream(void* s) override { stream_ = static_cast<cudaStream_t>(s); }
  cudaStream_t stream() const { return stream_; }
  cudaStream_t stream_ = nullptr;  // until use_stream: the legacy default stream
  int device_;
};

}  // namespace

std::unique_ptr<NcclApi> nccl_library(int device, std::string* why_not) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    if (why_not) *why_not = "no CUDA device " + std::to_string(device) + " for NCCL";
    return nullptr;
  }
  return std::make_unique<Libnccl>(device);
}

}  // namespace sharc::gpu

// The KernelSet of the CUDA device: sharc's kernels (kernel_launches.h,
// compiled here by nvcc) on the default stream, device memory from
// cudaMalloc, and GEMMs through cuBLASLt with its bias and GELU epilogues.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "runtime/gpu/kernel_launches.h"
#include "runtime/memory.h"

namespace sharc::gpu {
inline namespace cuda_target {

void throw_launch_error(const char* what, cudaError_t err) {
  throw std::runtime_error(std::string("CUDA launch of ") + what + " failed: " +
                           cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

}  // inline namespace cuda_target

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
}

void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt ") + what + " failed: " +
                             cublasLtGetStatusString(status));
}

cudaDataType_t cuda_type(DType t) {
  if (t == DType::kBF16) return CUDA_R_16BF;
  if (t == DType::kF32) return CUDA_R_32F;
  throw std::invalid_argument("gemm: operands are f32 or bf16, not i32");
}

template <class T, cublasStatus_t (*Destroy)(T)>
struct LtHandle {
  T h = nullptr;
  ~LtHandle() {
    if (h) Destroy(h);
  }
};

class CudaKernels final : public LaunchingKernels, public rt::StampSource {
 public:
  explicit CudaKernels(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    name_ = "cuda:" + std::to_string(device) + " " + prop.name + " (sm_" +
            std::to_string(prop.major) + std::to_string(prop.minor) + ")";
    check_lt(cublasLtCreate(&lt_), "cublasLtCreate");
    check(cudaMalloc(&workspace_, kWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
    for (float*& scratch : reduce_scratch_)
      check(cudaMalloc(&scratch, kReduceScratchFloats * sizeof(float)), "cudaMalloc (reduction scratch)");
    // Blocking streams: each runs beside the other, and both stay ordered
    // with the legacy default stream, where cudaMemcpy and anything launched
    // on stream 0 run (upload and download are full barriers, as before).
    check(cudaStreamCreate(&compute_), "cudaStreamCreate (compute)");
    check(cudaStreamCreate(&comm_), "cudaStreamCreate (comm)");
    for (cudaEvent_t& e : events_) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    current_ = compute_;
  }
  ~CudaKernels() override {
    cudaDeviceSynchronize();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    for (cudaEvent_t e : stamp_events_) cudaEventDestroy(e);
    cudaStreamDestroy(comm_);
    cudaStreamDestroy(compute_);
    cudaFree(workspace_);
    for (float* scratch : reduce_scratch_) cudaFree(scratch);
    cublasLtDestroy(lt_);
  }

  Stream compute_stream() override { return compute_; }
  Stream comm_stream() override { return comm_; }
  float* reduce_scratch(Stream s) override { return reduce_scratch_[s == comm_ ? 1 : 0]; }
  // One event per direction, recorded again for every wait: a stream's wait
  // takes the event as it stands when the wait is given.
  void wait_stream(Stream waiter, Stream on) override {
    cudaEvent_t e = events_[on == comm_ ? 1 : 0];
    check(cudaEventRecord(e, static_cast<cudaStream_t>(on)), "cudaEventRecord");
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), e, 0), "cudaStreamWaitEvent");
  }
  void synchronize_stream(Stream s) override {
    check(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), "cudaStreamSynchronize");
  }

  // The device clock: a timing event per stamp, recorded on the current
  // stream; read back after the whole device is done (the stamps of a ring
  // step sit on both streams).
  rt::StampSource* stamps() override { return this; }
  void stamp() override {
    if (stamps_used_ == stamp_events_.size()) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreate(&e), "cudaEventCreate (a stamp)");
      stamp_events_.push_back(e);
    }
    check(cudaEventRecord(stamp_events_[stamps_used_++], static_cast<cudaStream_t>(current_stream())),
          "cudaEventRecord (a stamp)");
  }
  std::vector<double> read_stamps() override {
    std::vector<double> seconds;
    if (stamps_used_ == 0) return seconds;
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (reading the stamps)");
    for (size_t i = 0; i < stamps_used_; ++i) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, stamp_events_[0], stamp_events_[i]), "cudaEventElapsedTime");
      seconds.push_back(1e-3 * ms);
    }
    stamps_used_ = 0;
    return seconds;
  }

  std::string name() const override { return name_; }

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw std::runtime_error("cudaMalloc of " + std::to_string(bytes) + " bytes failed (" +
                               cudaGetErrorString(err) + "); the device has " +
                               std::to_string(free) + " bytes free of " + std::to_string(total));
    }
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
  }
  void synchronize() override { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  // Row-major C[m, n] = op(A) op(B) is column-major C^T[n, m] = op(B)^T
  // op(A)^T: cuBLASLt's first operand is B's memory, its second A's.
  void gemm(const Gemm& g) override {
    if (g.m == 0 || g.n == 0) return;
    const cudaDataType_t ab = cuda_type(g.ab_dtype), c = cuda_type(g.c_dtype);
    LtHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc;
    check_lt(cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                            sizeof op_first),
             "set TRANSA");
    check_lt(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                            sizeof op_second),
             "set TRANSB");
    if (g.epilogue == Gemm::Epilogue::kGeluBackward && (!g.pre_gelu || g.bias))
      throw std::invalid_argument("gemm: the GELU backward epilogue reads pre_gelu and takes no bias");
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const bool gelu = g.epilogue == Gemm::Epilogue::kGelu;
    const bool aux = (gelu && g.pre_gelu) || g.epilogue == Gemm::Epilogue::kGeluBackward;
    if (g.epilogue == Gemm::Epilogue::kGeluBackward)
      epilogue = CUBLASLT_EPILOGUE_DGELU;
    else if (gelu && g.pre_gelu)
      epilogue = g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    else if (gelu)
      epilogue = g.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else if (g.bias)
      epilogue = CUBLASLT_EPILOGUE_BIAS;
    check_lt(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                            sizeof epilogue),
             "set EPILOGUE");
    if (g.bias)
      check_lt(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                              sizeof g.bias),
               "set BIAS_POINTER");
    if (aux) {
      const int64_t ld = g.ldc;
      check_lt(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                              &g.pre_gelu, sizeof g.pre_gelu),
               "set EPILOGUE_AUX_POINTER");
      check_lt(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                              sizeof ld),
               "set EPILOGUE_AUX_LD");
    }
    // Layouts as cuBLASLt sees the memory: column major, rows x cols, ld.
    LtHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> first, second, out;
    check_lt(cublasLtMatrixLayoutCreate(&first.h, ab, g.trans_b ? g.k : g.n,
                                        g.trans_b ? g.n : g.k, g.ldb),
             "MatrixLayoutCreate (B)");
    check_lt(cublasLtMatrixLayoutCreate(&second.h, ab, g.trans_a ? g.m : g.k,
                                        g.trans_a ? g.k : g.m, g.lda),
             "MatrixLayoutCreate (A)");
    check_lt(cublasLtMatrixLayoutCreate(&out.h, c, g.n, g.m, g.ldc), "MatrixLayoutCreate (C)");
    LtHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref;
    check_lt(cublasLtMatmulPreferenceCreate(&pref.h), "MatmulPreferenceCreate");
    const size_t workspace = kWorkspaceBytes;
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &workspace, sizeof workspace),
             "set MAX_WORKSPACE_BYTES");
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    check_lt(cublasLtMatmulAlgoGetHeuristic(lt_, desc.h, first.h, second.h, out.h, out.h, pref.h,
                                            1, &heuristic, &found),
             "MatmulAlgoGetHeuristic");
    if (found == 0)
      throw std::runtime_error("cuBLASLt has no algorithm for a " + std::to_string(g.m) + "x" +
                               std::to_string(g.n) + "x" + std::to_string(g.k) +
                               " GEMM with these types, strides and epilogue");
    check_lt(cublasLtMatmul(lt_, desc.h, &g.alpha, g.b, first.h, g.a, second.h, &g.beta, g.c,
                            out.h, g.c, out.h, &heuristic.algo, workspace_, kWorkspaceBytes,
                            static_cast<cudaStream_t>(stream())),
             "Matmul");
  }

 private:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  cudaEvent_t events_[2] = {};
  std::vector<cudaEvent_t> stamp_events_;  // the device clock's, reused run after run
  size_t stamps_used_ = 0;
  int device_;
  std::string name_;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  float* reduce_scratch_[2] = {};  // the compute stream's, the comm stream's
};

}  // namespace

KernelSet* cuda_kernels(std::string* why_not) {
  static std::once_flag once;
  static std::unique_ptr<CudaKernels> kernels;
  static std::string reason;
  std::call_once(once, [] {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      reason = std::string("no CUDA device (") + cudaGetErrorName(err) + ": " +
               cudaGetErrorString(err) + ")";
      return;
    }
    if (count == 0) {
      reason = "no CUDA device";
      return;
    }
    try {
      kernels = std::make_unique<CudaKernels>(0);
    } catch (const std::exception& e) {
      reason = e.what();
    }
  });
  if (!kernels && why_not) *why_not = reason;
  return kernels.get();
}

namespace {

// cudaMalloc'd memory for a DeviceMemory (gpu::CudaWorld's devices).
class CudaMemory final : public rt::MemorySource {
 public:
  explicit CudaMemory(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw std::runtime_error("cudaMalloc of " + std::to_string(bytes) + " bytes on cuda:" +
                               std::to_string(device_) + " failed (" + cudaGetErrorString(err) +
                               "); " + std::to_string(free) + " bytes free of " + std::to_string(total));
    }
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  void zero(void* p, size_t bytes) override { check(cudaMemset(p, 0, bytes), "cudaMemset"); }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<KernelSet> make_cuda_kernels(int device) { return std::make_unique<CudaKernels>(device); }

std::unique_ptr<rt::MemorySource> make_cuda_memory(int device) { return std::make_unique<CudaMemory>(device); }

size_t cuda_free_memory(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

void cuda_set_device(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

int cuda_device_count() {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  return count;
}

}  // namespace sharc::gpu

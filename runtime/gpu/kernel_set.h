// KernelSet: the host API to sharc's GPU kernels (kernels.cuh) and GEMMs,
// one implementation per place they run:
//  - simulated_kernels(): the block simulator on host memory (always built;
//    what CI tests);
//  - cuda_kernels(): the CUDA device, with cuBLASLt for the GEMMs (built with
//    SHARC_ENABLE_CUDA; null, with the reason, where there is no device).
// Tests and benchmarks are written once against this interface. Generated
// programs call the kernel templates directly.
//
// Pointers are device pointers (from alloc()); activations are f32 or bf16
// (`dtype`), everything else is f32 unless named otherwise. Calls are
// asynchronous on the device: synchronize() waits for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/gpu/kernel_args.h"
#include "runtime/memory.h"
#include "runtime/trace.h"

namespace sharc::gpu {

using rt::DType;

struct LayerNormForward {
  DType dtype = DType::kF32;
  void* out = nullptr;     // [rows, cols]
  float* mean = nullptr;   // [rows], nullable
  float* rstd = nullptr;   // [rows], nullable
  const void* x = nullptr;
  const void* add = nullptr;  // nullable: normalise x + add (the residual stream) ...
  void* sum_out = nullptr;    // ... and write x + add here
  const float* w = nullptr;  // [cols]
  const float* b = nullptr;  // [cols]
  int rows = 0, cols = 0;
  float eps = 1e-5f;
};

struct LayerNormBackward {
  DType dtype = DType::kF32;
  void* dx = nullptr;      // [rows, cols]: written, or added to when accumulate
  float* dw = nullptr;     // [cols]: written, or added to when accumulate_params
  float* db = nullptr;     // [cols]: likewise
  float* scratch = nullptr;  // layernorm_backward_scratch(rows, cols) floats
  const void* dout = nullptr;
  const void* x = nullptr;
  const float* w = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  int rows = 0, cols = 0;
  bool accumulate = false;         // dx += (the residual stream's gradient)
  bool accumulate_params = false;  // dw, db += (a layer used more than once)
};
size_t layernorm_backward_scratch(int rows, int cols);

// loss[r] = logsumexp(logits[r]) - logits[r][targets[r]]; with dlogits,
// also (softmax(logits[r]) - onehot) * dloss (may be logits itself).
struct CrossEntropy {
  DType dtype = DType::kF32;
  float* loss = nullptr;  // [rows]
  void* dlogits = nullptr;
  const void* logits = nullptr;  // [rows, vocab]
  const int32_t* targets = nullptr;  // a target outside [0, vocab): NaN loss and gradient
  int rows = 0, vocab = 0;
  float dloss = 1.0f;
  // Instead of targets: labels as floats (the DSL's), with one_hot's meaning
  // (a label that is no class index picks no logit: the loss is the
  // logsumexp). Generated programs pass these.
  const float* float_targets = nullptr;
  const float* dloss_rows = nullptr;  // nullable: each row's dloss (the loss's adjoint)
};

// [batch, seq, heads, head_dim] views with the given element strides.
struct Attention {
  DType dtype = DType::kF32;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // [batch, heads, seq]
  AttentionStrides sq{}, sk{}, sv{}, so{};
  int batch = 0, heads = 0, seq = 0, head_dim = 0;
  float scale = 1.0f;
  bool causal = true;
};

struct AttentionBackward {
  DType dtype = DType::kF32;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  float* delta = nullptr;  // [batch, heads, seq] scratch
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  AttentionStrides sq{}, sk{}, sv{}, so{}, sdo{}, sdq{}, sdk{}, sdv{};
  int batch = 0, heads = 0, seq = 0, head_dim = 0;
  float scale = 1.0f;
  bool causal = true;
};
// The head sizes the attention kernels are instantiated for.
bool attention_supports_head_dim(int head_dim);

// db (+)= the sum of dout [rows, cols] over its rows: a linear layer's bias
// gradient, in f32, in a fixed order.
struct BiasGrad {
  DType dtype = DType::kF32;
  float* db = nullptr;       // [cols]
  float* scratch = nullptr;  // bias_grad_scratch(rows, cols) floats
  const void* dout = nullptr;
  int rows = 0, cols = 0;
  bool accumulate = false;
};
size_t bias_grad_scratch(int rows, int cols);

// out[n] = wte[ids[n]] + wpe[n % seq] (wpe nullable), as dtype.
struct Embedding {
  DType dtype = DType::kF32;
  void* out = nullptr;  // [rows, cols]
  const int32_t* ids = nullptr;
  const float* wte = nullptr;  // [vocab, cols]
  const float* wpe = nullptr;  // [seq, cols], nullable
  int64_t rows = 0;
  int cols = 0, seq = 1, vocab = 0;
};

// The embedding's positions grouped by token, in a fixed order (tokens
// ascending, positions ascending within one): made on the host, which has
// the token ids before it uploads them, and uploaded with them.
struct EmbeddingBuckets {
  std::vector<int32_t> positions;  // all positions, token by token
  std::vector<int32_t> starts;     // bucket k is positions[starts[k] .. starts[k + 1])
  std::vector<int32_t> tokens;     // the token of bucket k
};
EmbeddingBuckets embedding_buckets(const int32_t* ids, int64_t n);

// dwte[token] += sum of dout over its positions; dwpe[t] += sum over the
// batch of dout[b, t]. dout is [batch * seq, cols]; the bucket arrays are
// device copies of EmbeddingBuckets'.
struct EmbeddingBackward {
  DType dtype = DType::kF32;
  float* dwte = nullptr;
  float* dwpe = nullptr;  // nullable
  const void* dout = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* starts = nullptr;
  const int32_t* tokens = nullptr;
  int buckets = 0;
  int batch = 0, seq = 0, cols = 0, vocab = 0;  // tokens outside [0, vocab) are skipped
};

// The embedding lookup of generated programs (one_hot(ids) @ table, without
// the one-hot): out[n] = dtype(table[id(n) - first]) where first <= id(n) <
// first + vocab (this device's rows), else zeros. Ids are the DSL's float
// labels (float_ids) or int32 (ids): exactly one is set.
struct EmbeddingLookup {
  DType dtype = DType::kF32;    // out's
  void* out = nullptr;          // [tokens, cols]
  const float* table = nullptr; // [vocab, cols]
  const float* float_ids = nullptr;
  const int32_t* ids = nullptr;
  int64_t tokens = 0, first = 0, vocab = 0;
  int cols = 0;
};

// Its gradient: dtable[v] = (dtable[v] +, with accumulate) the sum of dout
// over the tokens whose id is first + v, added in token order (the same on
// every run; no atomics, no host work). round_bf16 rounds each sum through
// bf16 first, as the bf16 GEMM the kernel replaces would.
struct EmbeddingGrad {
  DType dtype = DType::kF32;  // dout's
  float* dtable = nullptr;    // [vocab, cols]
  const void* dout = nullptr; // [tokens, cols]
  const float* float_ids = nullptr;
  const int32_t* ids = nullptr;
  int64_t tokens = 0, first = 0, vocab = 0;
  int cols = 0;
  bool round_bf16 = false, accumulate = false;
};

// norm = sqrt(sum of squares of every tensor); clip_factor (nullable) =
// min(1, max_norm / max(norm, 1e-30)), optax's clip_by_global_norm. Device
// arrays: tensors, chunks (tensor_chunks()), partial (num_chunks floats).
struct GlobalNorm {
  const NormTensor* tensors = nullptr;
  const TensorChunk* chunks = nullptr;
  int num_chunks = 0;
  float* partial = nullptr;
  float* norm = nullptr;
  float* clip_factor = nullptr;
  float max_norm = 1.0f;
};

// C = alpha * op(A) op(B) + beta * C (+ bias, then gelu), row major:
// op(A) is [m, k], op(B) [k, n], C [m, n]. A and B are both f32 or both
// bf16; C is f32 or bf16; accumulation is f32.
struct Gemm {
  // kGelu: c = gelu(alpha op(A) op(B) + beta c + bias) (tanh approximation),
  // the argument saved in pre_gelu when that is set. kGeluBackward: c =
  // (alpha op(A) op(B) + beta c) * gelu'(pre_gelu), the gradient through a
  // GELU whose argument the forward saved (pre_gelu is read; no bias).
  enum class Epilogue { kNone, kGelu, kGeluBackward };
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  DType ab_dtype = DType::kBF16;
  const void* a = nullptr;
  int64_t lda = 0;  // row stride of A as stored
  const void* b = nullptr;
  int64_t ldb = 0;
  DType c_dtype = DType::kF32;
  void* c = nullptr;
  int64_t ldc = 0;
  const void* bias = nullptr;  // [n] of c_dtype (cuBLASLt's rule), nullable
  Epilogue epilogue = Epilogue::kNone;
  void* pre_gelu = nullptr;  // c_dtype, ldc: gelu's argument (kGelu: nullable, written)
  float alpha = 1.0f, beta = 0.0f;
};

// The blocks of a multi-tensor AdamW launch over tensors of these sizes.
std::vector<TensorChunk> tensor_chunks(const std::vector<int64_t>& sizes);

// The size of KernelSet::reduce_scratch: 1 MiB.
constexpr size_t kReduceScratchFloats = size_t{1} << 18;

class KernelSet {
 public:
  virtual ~KernelSet() = default;
  // "simulator", or the device: "cuda:0 NVIDIA H100 80GB HBM3 (sm_90)".
  virtual std::string name() const = 0;

  // Streams. A device runs two, the emission plan's (codegen/emission_plan.h):
  // compute (kernels, GEMMs, whole collectives) and comm (a ring's
  // transfers), so a transfer can run beside the GEMM next to it. Work on one
  // stream runs in the order given; across the two, only where wait_stream
  // says. The launches and library calls of this KernelSet (and upload and
  // download) go on current_stream(), compute_stream() unless use_stream
  // says otherwise. A KernelSet whose work runs when it is given (the
  // default simulator) has only the null stream.
  virtual Stream compute_stream() { return nullptr; }
  virtual Stream comm_stream() { return nullptr; }
  virtual Stream current_stream() { return nullptr; }
  virtual void use_stream(Stream) {}
  // Nothing given to `waiter` from now on starts before everything given to
  // `on` so far has finished (an event recorded on `on`, waited on by
  // `waiter`).
  virtual void wait_stream(Stream waiter, Stream on) {}
  // The host waits until everything given to `s` has finished.
  virtual void synchronize_stream(Stream s) { synchronize(); }
  // The device clock (rt::ClockMode::kDevice): stamps on current_stream(),
  // or null where this KernelSet keeps none (a world then gives its own).
  virtual rt::StampSource* stamps() { return nullptr; }

  // kReduceScratchFloats floats of this KernelSet's own memory for the
  // partial sums of gpu::reduce's long reductions on stream s (work on one
  // stream runs in order, so one buffer per stream serves them all), or
  // null where it keeps none (gpu::reduce then makes each result in one
  // pass). Like cuBLASLt's workspace, it is outside the buffer plan.
  virtual float* reduce_scratch(Stream s) { return nullptr; }

  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;

  virtual void layernorm_forward(const LayerNormForward& a) = 0;
  virtual void layernorm_backward(const LayerNormBackward& a) = 0;
  virtual void cross_entropy(const CrossEntropy& a) = 0;
  virtual void embedding_forward(const Embedding& a) = 0;
  virtual void embedding_backward(const EmbeddingBackward& a) = 0;
  virtual void embedding_lookup(const EmbeddingLookup& a) = 0;
  virtual void embedding_grad(const EmbeddingGrad& a) = 0;
  virtual void global_norm(const GlobalNorm& a) = 0;
  virtual void bias_grad(const BiasGrad& a) = 0;
  virtual void attention_forward(const Attention& a) = 0;
  virtual void attention_backward(const AttentionBackward& a) = 0;
  // tensors and chunks are device arrays (tensor_chunks() makes the latter).
  virtual void adamw(const AdamWTensor* tensors, const TensorChunk* chunks, int num_chunks,
                     const AdamWHyper& h) = 0;
  virtual void gemm(const Gemm& g) = 0;
  // out (contiguous)[i0][i1][i2] = in[i0 * strides[0] + i1 * strides[1] +
  // i2 * strides[2]], elements of 2 or 4 bytes moved as bits: how a
  // collective's interleaved blocks are packed on the device
  // (rt::BlockMover; gpu::NcclWorld).
  virtual void strided_copy(const void* in, const int64_t (&shape)[3], const int64_t (&strides)[3],
                            size_t elem_bytes, void* out) = 0;
  // One warp runs one tensor-core mma (dialect.h, mma_16x8x16) on device
  // arrays d[16x8] = a[16x16] b[16x8], row major, a and b rounded to bf16:
  // checks the fragment layout the tensor-core kernels rely on.
  virtual void mma_16x8x16_check(float* d, const float* a, const float* b) = 0;
  // bf16 attention runs on the tensor cores (true, the default) or on the
  // scalar kernels f32 uses (false): a switch for tests and benchmarks.
  virtual void set_tensor_cores(bool on) = 0;
  // Query rows each warp of the tensor-core attention forward and dq
  // kernels owns: 16 (the default) or 32 (each tile fragment read from
  // shared memory feeds two blocks of 16 rows, at twice the registers:
  // slower on an H100, kernels.cuh says by how much), for tests and
  // benchmarks. Other counts throw std::invalid_argument.
  virtual void set_attention_rows_per_warp(int rows) = 0;
};

// The simulator's kernels, shared by every device: they run when they are
// given, on the null stream.
KernelSet& simulated_kernels();
// A device's own simulated kernels that run their streams' work late: each
// stream's launches wait in a queue until something needs them (the host
// reading or handing over a buffer, a stream that waits for them, a
// synchronize), so that work the program does not order explicitly runs
// out of order, and a missing wait_stream changes the results instead of
// going unnoticed (SimGpuWorld::set_deferred_streams). With
// ignore_waits, wait_stream does nothing: the check of that check.
std::unique_ptr<KernelSet> make_deferred_simulated_kernels(bool ignore_waits = false);
// The CUDA device's kernels, or null with *why_not saying why (sharc built
// without CUDA, no device, a driver error).
KernelSet* cuda_kernels(std::string* why_not);

// For gpu::CudaWorld: a KernelSet of its own (cuBLASLt handle and workspace)
// on CUDA device `device`, memory for a DeviceMemory from cudaMalloc there,
// the device's free bytes, and cudaSetDevice for the calling thread. Each
// throws std::runtime_error saying why (no device, a driver error, or sharc
// built without CUDA).
std::unique_ptr<KernelSet> make_cuda_kernels(int device);
std::unique_ptr<rt::MemorySource> make_cuda_memory(int device);
size_t cuda_free_memory(int device);
void cuda_set_device(int device);
int cuda_device_count();

}  // namespace sharc::gpu

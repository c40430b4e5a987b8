// The KernelSet of the block simulator: sharc's kernels run on host memory
// (kernel_launches.h, compiled here by the host compiler), and GEMMs run as
// a plain reference loop with cuBLASLt's semantics (f32 accumulation, then
// alpha, beta, bias and the GELU epilogue, one rounding on store).
#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include "runtime/elementwise.h"
#include "runtime/gpu/kernel_launches.h"
#include "runtime/gpu/kernel_limits.h"

namespace sharc::gpu {

size_t layernorm_backward_scratch(int rows, int cols) { return layernorm_backward_scratch_floats(rows, cols); }

size_t bias_grad_scratch(int rows, int cols) {
  return static_cast<size_t>(layernorm_slices(rows)) * static_cast<size_t>(cols);
}

bool attention_supports_head_dim(int head_dim) { return attention_head_dim_supported(head_dim); }

std::vector<TensorChunk> tensor_chunks(const std::vector<int64_t>& sizes) {
  std::vector<TensorChunk> chunks;
  for (size_t t = 0; t < sizes.size(); ++t)
    for (int64_t b = 0; b < sizes[t]; b += kTensorChunk)
      chunks.push_back({static_cast<int32_t>(t), b,
                        b + kTensorChunk < sizes[t] ? b + kTensorChunk : sizes[t]});
  return chunks;
}

EmbeddingBuckets embedding_buckets(const int32_t* ids, int64_t n) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  EmbeddingBuckets out;
  out.positions = order;
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || ids[order[i]] != ids[order[i - 1]]) {
      out.starts.push_back(static_cast<int32_t>(i));
      out.tokens.push_back(ids[order[i]]);
    }
  out.starts.push_back(static_cast<int32_t>(n));
  return out;
}

namespace {

float load(DType t, const void* p, int64_t i) {
  return t == DType::kBF16 ? static_cast<float>(static_cast<const rt::bf16*>(p)[i])
                           : static_cast<const float*>(p)[i];
}
void store(DType t, void* p, int64_t i, float v) {
  if (t == DType::kBF16)
    static_cast<rt::bf16*>(p)[i] = rt::bf16(v);
  else
    static_cast<float*>(p)[i] = v;
}

// d/dx of the tanh-approximated GELU.
float gelu_derivative(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  const float u = kC * (x + 0.044715f * x * x * x);
  const float t = std::tanh(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kC * (1.0f + 3.0f * 0.044715f * x * x);
}

class SimKernels : public LaunchingKernels {
 public:
  std::string name() const override { return "simulator"; }
  // Shared by every device: one stream, the null one, whatever it is told.
  void use_stream(Stream) override {}

 protected:
  // Launches run when given; a deferred set queues whole calls instead.
  Stream stream() const override { return nullptr; }

 public:

  // Shared by every device, whose threads call it at once; its launches
  // run when given, so each thread's buffer serves that thread's calls.
  float* reduce_scratch(Stream) override {
    thread_local std::vector<float> scratch(kReduceScratchFloats);
    return scratch.data();
  }

  void* alloc(size_t bytes) override {
    return ::operator new(bytes > 0 ? bytes : 1, std::align_val_t{256});
  }
  void release(void* p) override { ::operator delete(p, std::align_val_t{256}); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

  void gemm(const Gemm& g) override {
    if (g.epilogue == Gemm::Epilogue::kGeluBackward && (!g.pre_gelu || g.bias))
      throw std::invalid_argument("gemm: the GELU backward epilogue reads pre_gelu and takes no bias");
    if (g.ab_dtype == DType::kI32 || g.c_dtype == DType::kI32)
      throw std::invalid_argument("gemm: operands are f32 or bf16");
    // The operands widened to f32 once, op(B) as [k, n]; each row of C
    // accumulates over p in order (the reference order), a row at a time.
    std::vector<float> b(static_cast<size_t>(g.k) * g.n), acc(static_cast<size_t>(g.n));
    for (int p = 0; p < g.k; ++p)
      for (int j = 0; j < g.n; ++j)
        b[static_cast<size_t>(p) * g.n + j] =
            load(g.ab_dtype, g.b, g.trans_b ? int64_t{j} * g.ldb + p : int64_t{p} * g.ldb + j);
    for (int i = 0; i < g.m; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int p = 0; p < g.k; ++p) {
        const float a = load(g.ab_dtype, g.a, g.trans_a ? int64_t{p} * g.lda + i : int64_t{i} * g.lda + p);
        const float* brow = b.data() + static_cast<size_t>(p) * g.n;
        for (int j = 0; j < g.n; ++j) acc[j] += a * brow[j];
      }
      for (int j = 0; j < g.n; ++j) {
        const int64_t c = int64_t{i} * g.ldc + j;
        float v = g.alpha * acc[j];
        if (g.beta != 0.0f) v += g.beta * load(g.c_dtype, g.c, c);
        if (g.epilogue == Gemm::Epilogue::kGeluBackward) {
          v *= gelu_derivative(load(g.c_dtype, g.pre_gelu, c));
          store(g.c_dtype, g.c, c, v);
          continue;
        }
        if (g.bias) v += load(g.c_dtype, g.bias, j);
        if (g.epilogue == Gemm::Epilogue::kGelu) {
          if (g.pre_gelu) store(g.c_dtype, g.pre_gelu, c, v);
          v = rt::gelu(v);
        }
        store(g.c_dtype, g.c, c, v);
      }
    }
  }
};

// A device's simulated kernels whose two streams run their work late
// (make_deferred_simulated_kernels): every call is queued whole, its
// arguments copied, on the current stream's sim::StreamQueue, and runs
// there when the host needs it (download, synchronize, a collective on
// host memory through synchronize_stream) or a waiting stream does.
class DeferredSimKernels final : public SimKernels {
 public:
  explicit DeferredSimKernels(bool ignore_waits) : ignore_waits_(ignore_waits) { current_ = &compute_; }
  ~DeferredSimKernels() override { run_everything(); }

  Stream compute_stream() override { return &compute_; }
  Stream comm_stream() override { return &comm_; }
  void use_stream(Stream s) override { LaunchingKernels::use_stream(s); }  // SimKernels' ignores it
  // A buffer per stream: queued launches read it late.
  float* reduce_scratch(Stream s) override {
    std::vector<float>& scratch = s == &comm_ ? comm_scratch_ : compute_scratch_;
    if (scratch.empty()) scratch.resize(kReduceScratchFloats);
    return scratch.data();
  }
  void wait_stream(Stream waiter, Stream on) override {
    if (ignore_waits_ || !waiter || !on) return;
    auto* q = queue(on);
    const size_t mark = q->given();
    queue(waiter)->give([q, mark] { q->run_until(mark); });
  }
  void synchronize_stream(Stream s) override {
    if (s) queue(s)->run_all();
  }
  void synchronize() override { run_everything(); }

  void release(void* p) override {
    run_everything();  // nothing queued may still read it
    SimKernels::release(p);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    // The host's bytes as they are now, copied when the stream gets there.
    auto copy = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                         static_cast<const std::byte*>(src) + bytes);
    defer([dst, copy] { std::memcpy(dst, copy->data(), copy->size()); });
  }
  void download(void* dst, const void* src, size_t bytes) override {
    synchronize_stream(current_);
    std::memcpy(dst, src, bytes);
  }

#define SHARC_DEFERRED(method, Args)                                   \
  void method(const Args& a) override {                               \
    defer([this, a] { SimKernels::method(a); });                       \
  }
  SHARC_DEFERRED(layernorm_forward, LayerNormForward)
  SHARC_DEFERRED(layernorm_backward, LayerNormBackward)
  SHARC_DEFERRED(cross_entropy, CrossEntropy)
  SHARC_DEFERRED(embedding_forward, Embedding)
  SHARC_DEFERRED(embedding_backward, EmbeddingBackward)
  SHARC_DEFERRED(embedding_lookup, EmbeddingLookup)
  SHARC_DEFERRED(embedding_grad, EmbeddingGrad)
  SHARC_DEFERRED(global_norm, GlobalNorm)
  SHARC_DEFERRED(bias_grad, BiasGrad)
  SHARC_DEFERRED(attention_forward, Attention)
  SHARC_DEFERRED(attention_backward, AttentionBackward)
  SHARC_DEFERRED(gemm, Gemm)
#undef SHARC_DEFERRED
  void adamw(const AdamWTensor* tensors, const TensorChunk* chunks, int num_chunks, const AdamWHyper& h) override {
    defer([=, this] { SimKernels::adamw(tensors, chunks, num_chunks, h); });
  }
  void strided_copy(const void* in, const int64_t (&shape)[3], const int64_t (&strides)[3], size_t elem_bytes,
                    void* out) override {
    const std::array<int64_t, 3> sh = {shape[0], shape[1], shape[2]}, st = {strides[0], strides[1], strides[2]};
    defer([=, this] {
      const int64_t shape3[3] = {sh[0], sh[1], sh[2]}, strides3[3] = {st[0], st[1], st[2]};
      SimKernels::strided_copy(in, shape3, strides3, elem_bytes, out);
    });
  }
  void mma_16x8x16_check(float* d, const float* a, const float* b) override {
    defer([=, this] { SimKernels::mma_16x8x16_check(d, a, b); });
  }

 private:
  sim::StreamQueue* queue(Stream s) { return static_cast<sim::StreamQueue*>(s); }
  void defer(std::function<void()> work) { sim::StreamQueue::give_or_run(current_, std::move(work)); }
  void run_everything() {
    while (!compute_.idle() || !comm_.idle()) {
      compute_.run_all();
      comm_.run_all();
    }
  }

  bool ignore_waits_;
  std::vector<float> compute_scratch_, comm_scratch_;
  sim::StreamQueue compute_{"compute"}, comm_{"comm"};
};

}  // namespace

KernelSet& simulated_kernels() {
  static SimKernels kernels;
  return kernels;
}

std::unique_ptr<KernelSet> make_deferred_simulated_kernels(bool ignore_waits) {
  return std::make_unique<DeferredSimKernels>(ignore_waits);
}

}  // namespace sharc::gpu

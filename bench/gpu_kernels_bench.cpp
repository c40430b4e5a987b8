// bench_gpu_kernels: sharc's GPU kernels (runtime/gpu) at the shapes of the
// GPT-2 124M training step (d=768, 12 heads, vocab 50304, T=1024, bf16
// activations), one kernel at a time: milliseconds per call and the rate
// (GB/s for the memory-bound kernels, TFLOP/s for attention and GEMMs).
// With --peers it also runs bench/gpu_kernels_peers.py (PyTorch: layer_norm,
// cross_entropy, scaled_dot_product_attention, fused AdamW, linear) in the
// same invocation, and prints torch's time and sharc's speed relative to it.
//
//   bench_gpu_kernels [--batch 16] [--seq 1024] [--iters 20] [--peers]
//   bench_gpu_kernels --sim     tiny shapes on the block simulator (a smoke
//                               test: it checks that the bench runs, no more)
//
// Without a GPU (and without --sim) it says why and exits 0.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/cli.h"
#include "runtime/gpu/kernel_set.h"

namespace {

using sharc::gpu::KernelSet;
using sharc::rt::DType;

struct Options {
  int batch = 16, seq = 1024, iters = 20;
  int dim = 768, heads = 12, vocab = 50304, layers = 12;
  bool peers = false, sim = false;
};

// The command line (codegen/cli.h). Returns -1 to go on with `o` filled, or
// the status main() returns (0 after --help, 2 after a mistake).
int parse(int argc, char** argv, Options& o) {
  CLI::App app{"GPT-2 124M's kernels one at a time (layer norm, attention, cross-entropy, AdamW, the GEMMs), "
               "with PyTorch's beside them when asked.",
               "bench_gpu_kernels"};
  app.add_option("--batch", o.batch, "sequences per batch")->check(sharc::cli::at_least(1))->capture_default_str();
  app.add_option("--seq", o.seq, "tokens per sequence")->check(sharc::cli::at_least(1))->capture_default_str();
  app.add_option("--iters", o.iters, "timed runs of each kernel")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_flag("--peers", o.peers, "also time PyTorch's kernels on the same shapes");
  app.add_flag("--sim", o.sim, "run tiny shapes once on the block simulator (no GPU needed)");
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  if (o.sim) {  // small enough for the simulator
    o.batch = 1;
    o.seq = 64;
    o.dim = 64;
    o.heads = 2;
    o.vocab = 512;
    o.layers = 1;
    o.iters = 1;
    o.peers = false;
  }
  return -1;
}

// Device memory that is released with the bench.
class Arena {
 public:
  explicit Arena(KernelSet& k) : k_(k) {}
  ~Arena() {
    for (void* p : owned_) k_.release(p);
  }
  // n elements of `bytes_each`, filled with small values (bf16 or f32 by size).
  void* filled(size_t n, size_t bytes_each, float scale = 0.02f) {
    void* p = k_.alloc(n * bytes_each);
    owned_.push_back(p);
    if (bytes_each == 2) {
      std::vector<sharc::rt::bf16> h(n);
      for (size_t i = 0; i < n; ++i) h[i] = sharc::rt::bf16(scale * std::sin(0.7f * i));
      k_.upload(p, h.data(), n * 2);
    } else {
      std::vector<float> h(n);
      for (size_t i = 0; i < n; ++i) h[i] = scale * std::cos(0.3f * i);
      k_.upload(p, h.data(), n * 4);
    }
    return p;
  }
  void* raw(size_t bytes) {
    void* p = k_.alloc(bytes);
    owned_.push_back(p);
    return p;
  }
  float* f32(size_t n, float scale = 0.02f) { return static_cast<float*>(filled(n, 4, scale)); }
  void* bf16(size_t n) { return filled(n, 2); }

 private:
  KernelSet& k_;
  std::vector<void*> owned_;
};

double time_ms(KernelSet& k, int iters, const std::function<void()>& call) {
  call();  // warm-up (and cuBLASLt's heuristics)
  k.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) call();
  k.synchronize();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count() / iters;
}

// name -> ms, from the peers script's "peer NAME MS" lines.
std::map<std::string, double> run_peers(const Options& o) {
  std::map<std::string, double> out;
  // SHARC_PEERS_SCRIPT overrides the script's path (a bench binary carried
  // to another machine: scripts/gpu_bundle.sh).
  const char* script = std::getenv("SHARC_PEERS_SCRIPT");
  const std::string path = script ? script : SHARC_BENCH_DIR "/gpu_kernels_peers.py";
  const std::string cmd = "python3 " + path + " --batch " +
                          std::to_string(o.batch) + " --seq " + std::to_string(o.seq) +
                          " --iters " + std::to_string(o.iters) + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return out;
  char line[512];
  while (std::fgets(line, sizeof line, pipe.get())) {
    char name[128];
    double ms = 0;
    if (std::sscanf(line, "peer %127s %lf", name, &ms) == 2)
      out[name] = ms;
    else
      std::printf("  (peers) %s", line);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line, also into a pipe
  Options o;
  if (const int code = parse(argc, argv, o); code >= 0) return code;
  KernelSet* k = nullptr;
  if (o.sim) {
    k = &sharc::gpu::simulated_kernels();
  } else {
    std::string why;
    k = sharc::gpu::cuda_kernels(&why);
    if (!k) {
      std::printf("bench_gpu_kernels: no GPU to measure on: %s\n", why.c_str());
      return 0;
    }
  }
  const int64_t N = int64_t{o.batch} * o.seq, C = o.dim, V = o.vocab, H = o.heads, D = C / H;
  std::printf("bench_gpu_kernels on %s: batch %d x seq %d, d=%lld, %lld heads, vocab %lld, bf16\n",
              k->name().c_str(), o.batch, o.seq, static_cast<long long>(C),
              static_cast<long long>(H), static_cast<long long>(V));
  Arena mem(*k);

  struct Row {
    std::string name;
    double ms;
    double rate;
    const char* unit;
  };
  std::vector<Row> rows;
  auto run = [&](const std::string& name, double amount, const char* unit,
                 const std::function<void()>& call) {
    const double ms = time_ms(*k, o.iters, call);
    rows.push_back({name, ms, amount / (ms * 1e-3) / 1e9, unit});
    if (std::strcmp(unit, "TFLOP/s") == 0) rows.back().rate /= 1e3;
    // As it goes: a run cut short (a device call's time limit) keeps what it measured.
    std::printf("  measured %-24s %10.3f ms\n", name.c_str(), ms);
  };

  // LayerNorm over [N, C].
  {
    sharc::gpu::LayerNormForward f;
    f.dtype = DType::kBF16;
    f.x = mem.bf16(N * C);
    f.out = mem.bf16(N * C);
    f.w = mem.f32(C, 1.0f);
    f.b = mem.f32(C);
    f.mean = mem.f32(N);
    f.rstd = mem.f32(N);
    f.rows = static_cast<int>(N);
    f.cols = static_cast<int>(C);
    run("layernorm_fwd", 2.0 * N * C * 2, "GB/s", [&] { k->layernorm_forward(f); });
    sharc::gpu::LayerNormBackward b;
    b.dtype = DType::kBF16;
    b.dx = mem.bf16(N * C);
    b.dw = mem.f32(C);
    b.db = mem.f32(C);
    b.scratch = mem.f32(sharc::gpu::layernorm_backward_scratch(f.rows, f.cols));
    b.dout = mem.bf16(N * C);
    b.x = f.x;
    b.w = f.w;
    b.mean = f.mean;
    b.rstd = f.rstd;
    b.rows = f.rows;
    b.cols = f.cols;
    b.accumulate = true;
    run("layernorm_bwd", 2.0 * (4.0 * N * C), "GB/s", [&] { k->layernorm_backward(b); });
  }
  // Cross-entropy, forward and backward, over [N, V].
  {
    sharc::gpu::CrossEntropy a;
    a.dtype = DType::kBF16;
    a.logits = mem.bf16(N * V);
    a.dlogits = mem.bf16(N * V);
    std::vector<int32_t> t(N);
    for (int64_t i = 0; i < N; ++i) t[i] = static_cast<int32_t>((i * 7919) % V);
    auto* targets = static_cast<int32_t*>(mem.raw(N * 4));
    k->upload(targets, t.data(), N * 4);
    a.targets = targets;
    a.loss = mem.f32(N);
    a.rows = static_cast<int>(N);
    a.vocab = static_cast<int>(V);
    a.dloss = 1.0f / N;
    run("cross_entropy_fwd_bwd", 2.0 * (3.0 * N * V), "GB/s", [&] { k->cross_entropy(a); });
  }
  // Causal attention over a packed [B, T, 3, H, D] projection.
  {
    void* qkv = mem.bf16(N * 3 * C);
    sharc::gpu::Attention a;
    a.dtype = DType::kBF16;
    a.q = qkv;
    a.k = static_cast<char*>(qkv) + C * 2;
    a.v = static_cast<char*>(qkv) + 2 * C * 2;
    a.sq = a.sk = a.sv = {int64_t{o.seq} * 3 * C, 3 * C, D};
    a.o = mem.bf16(N * C);
    a.so = {int64_t{o.seq} * C, C, D};
    a.lse = mem.f32(int64_t{o.batch} * H * o.seq);
    a.batch = o.batch;
    a.heads = static_cast<int>(H);
    a.seq = o.seq;
    a.head_dim = static_cast<int>(D);
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    const double fwd_flops = 4.0 * o.batch * H * double(o.seq) * o.seq * D / 2;  // causal
    if (sharc::gpu::attention_supports_head_dim(static_cast<int>(D))) {
      run("attention_fwd", fwd_flops, "TFLOP/s", [&] { k->attention_forward(a); });
      sharc::gpu::AttentionBackward g;
      g.dtype = DType::kBF16;
      g.q = a.q;
      g.k = a.k;
      g.v = a.v;
      g.o = a.o;
      g.dout = mem.bf16(N * C);
      g.lse = a.lse;
      g.delta = mem.f32(int64_t{o.batch} * H * o.seq);
      void* dqkv = mem.bf16(N * 3 * C);
      g.dq = dqkv;
      g.dk = static_cast<char*>(dqkv) + C * 2;
      g.dv = static_cast<char*>(dqkv) + 2 * C * 2;
      g.sq = g.sk = g.sv = g.sdq = g.sdk = g.sdv = a.sq;
      g.so = g.sdo = a.so;
      g.batch = a.batch;
      g.heads = a.heads;
      g.seq = a.seq;
      g.head_dim = a.head_dim;
      g.scale = a.scale;
      run("attention_bwd", 2.5 * fwd_flops, "TFLOP/s", [&] { k->attention_backward(g); });
      // The tensor-core kernels with 32 query rows a warp (the default is
      // 16): what wider blocks would buy, in the same run.
      k->set_attention_rows_per_warp(32);
      run("attention_fwd_32rows", fwd_flops, "TFLOP/s", [&] { k->attention_forward(a); });
      run("attention_bwd_32rows", 2.5 * fwd_flops, "TFLOP/s", [&] { k->attention_backward(g); });
      k->set_attention_rows_per_warp(16);
      k->set_tensor_cores(false);
      run("attention_fwd_scalar", fwd_flops, "TFLOP/s", [&] { k->attention_forward(a); });
      k->set_tensor_cores(true);
    }
  }
  // AdamW over the model's parameter tensors, one launch.
  {
    std::vector<int64_t> sizes = {V * C, int64_t{o.seq} * C};
    for (int l = 0; l < o.layers; ++l)
      for (int64_t s : {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C})
        sizes.push_back(s);
    sizes.push_back(C);
    sizes.push_back(C);
    int64_t total = 0;
    std::vector<sharc::gpu::AdamWTensor> tensors;
    for (int64_t s : sizes) {
      tensors.push_back({mem.f32(s), mem.f32(s, 1e-3f), mem.f32(s, 1e-4f), mem.f32(s, 1e-6f),
                         nullptr, s, 0.1f});
      total += s;
    }
    const auto chunks = sharc::gpu::tensor_chunks(sizes);
    auto* dt = static_cast<sharc::gpu::AdamWTensor*>(
        mem.raw(tensors.size() * sizeof(sharc::gpu::AdamWTensor)));
    k->upload(dt, tensors.data(), tensors.size() * sizeof(sharc::gpu::AdamWTensor));
    auto* dc = static_cast<sharc::gpu::TensorChunk*>(
        mem.raw(chunks.size() * sizeof(sharc::gpu::TensorChunk)));
    k->upload(dc, chunks.data(), chunks.size() * sizeof(sharc::gpu::TensorChunk));
    sharc::gpu::AdamWHyper h;
    h.b2 = 0.95f;
    h.lr = mem.f32(1, 6e-4f);
    h.count = mem.f32(1, 1.0f);
    run("adamw_" + std::to_string(total / 1000000) + "M", 28.0 * total, "GB/s",
        [&] { k->adamw(dt, dc, static_cast<int>(chunks.size()), h); });
  }
  // GEMMs of one layer's forward (fc with bias and GELU) and the LM head.
  {
    sharc::gpu::Gemm g;
    g.m = static_cast<int>(N);
    g.n = static_cast<int>(4 * C);
    g.k = static_cast<int>(C);
    g.ab_dtype = g.c_dtype = DType::kBF16;
    g.a = mem.bf16(N * C);
    g.lda = C;
    g.b = mem.bf16(C * 4 * C);
    g.trans_b = true;  // weights stored [out, in], as nn.Linear
    g.ldb = C;
    g.c = mem.bf16(N * 4 * C);
    g.ldc = 4 * C;
    g.bias = mem.bf16(4 * C);
    g.epilogue = sharc::gpu::Gemm::Epilogue::kGelu;
    g.pre_gelu = mem.bf16(N * 4 * C);
    run("gemm_fc_bias_gelu", 2.0 * N * 4 * C * C, "TFLOP/s", [&] { k->gemm(g); });
    sharc::gpu::Gemm lm;
    lm.m = static_cast<int>(N);
    lm.n = static_cast<int>(V);
    lm.k = static_cast<int>(C);
    lm.ab_dtype = lm.c_dtype = DType::kBF16;
    lm.a = g.a;
    lm.lda = C;
    lm.b = mem.bf16(V * C);
    lm.trans_b = true;
    lm.ldb = C;
    lm.c = mem.bf16(N * V);
    lm.ldc = V;
    run("gemm_lm_head", 2.0 * N * V * C, "TFLOP/s", [&] { k->gemm(lm); });
  }

  const auto peers = o.peers ? run_peers(o) : std::map<std::string, double>{};
  std::printf("%-24s %10s %12s", "kernel", "ms", "rate");
  if (o.peers) std::printf(" %10s %12s", "torch ms", "sharc/torch");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("%-24s %10.3f %7.1f %-7s", r.name.c_str(), r.ms, r.rate, r.unit);
    if (o.peers) {
      auto it = peers.find(r.name);
      if (it != peers.end())
        std::printf(" %10.3f %11.2fx", it->second, it->second / r.ms);
      else
        std::printf(" %10s %12s", "-", "-");
    }
    std::printf("\n");
  }
  if (o.peers)
    std::printf("sharc/torch > 1 means sharc is faster; peers ran in the same invocation.\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_kernels: %s\n", e.what());
  return 1;
}

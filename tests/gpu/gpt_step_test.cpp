// The GPU kernels composed into the DSL's GPT training step, against the
// fp64 oracle: three AdamW steps of a 2-layer GPT
// (samples/gpt2/model.h's build_train; dropout off; clipping at 1), run
// once by the interpreter of the global program and once as the sequence
// of KernelSet calls a CUDA renderer will emit. The sequence: embeddings,
// layernorm with the residual add fused, GEMMs with bias and GELU epilogues,
// attention reading q, k and v in place from the head-major qkv projection,
// the tied LM head, fused cross-entropy, then the backward pass and the
// global norm, clipping and AdamW on the device.
//
// This test pins down what each kernel must mean for the DSL's ops: the
// parameter layouts ([in, out] kernels, head-major qkv columns), layernorm's
// epsilon, the attention scale, the mean loss, clipping, and optax's AdamW
// with decay on every parameter. Built into both GPU test binaries: on the
// simulator in CI, on the device under label `cuda`.
//
// Tolerance: f32 activations. Each step's loss and gradient norm are within
// 1e-4 relative of the oracle's. Every parameter and Adam moment after three
// steps is within 2e-3 of its tensor's largest magnitude: Adam divides by
// sqrt(v), so where a gradient is near zero, f32 rounding in it moves the
// update by up to about lr.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "codegen/interpret.h"
#include "runtime/gpu/kernel_set.h"
#include "samples/gpt2/model.h"

namespace sharc::gpu {
namespace {

constexpr int kBatch = 2;
constexpr uint64_t kSeed = 0;

GPTConfig tiny_gpt() {
  GPTConfig c;
  c.vocab = 64;
  c.context = 16;
  c.embed = 64;
  c.heads = 2;  // head_dim 32
  c.layers = 2;
  c.dropout = 0.0;
  return c;
}

Optimizer step_optimizer() {
  return adamw(Schedule::warmup_cosine(1e-2, 2, 10, 1e-3), 1e-2, 0.9, 0.999, /*eps=*/1e-6);
}

HostValues batch_for(const GPTConfig& c, int step) {
  std::vector<double> tokens(kBatch * c.context), targets(kBatch * c.context);
  auto token = [&](int64_t i) { return static_cast<double>((i * i * 7 + i * 3 + 1) % 61 % c.vocab); };
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t = 0; t < c.context; ++t) {
      const int64_t i = 5 * b + 3 * step + t;
      tokens[b * c.context + t] = token(i);
      targets[b * c.context + t] = token(i + 1);
    }
  return {{"tokens", tokens}, {"targets", targets}, {"dropout_seed", {0.0}}};
}

KernelSet* kernels_for_test(std::string* why) {
#if SHARC_GPU_TEST_CUDA
  return cuda_kernels(why);
#else
  (void)why;
  return &simulated_kernels();
#endif
}

// Device memory owned by the test.
class Memory {
 public:
  explicit Memory(KernelSet& k) : k_(k) {}
  ~Memory() {
    for (void* p : owned_) k_.release(p);
  }
  float* zeros(size_t n) { return upload(std::vector<float>(n, 0.0f)); }
  float* upload(const std::vector<float>& v) {
    auto* p = static_cast<float*>(raw(v.size() * 4));
    k_.upload(p, v.data(), v.size() * 4);
    return p;
  }
  int32_t* upload(const std::vector<int32_t>& v) {
    auto* p = static_cast<int32_t*>(raw(std::max<size_t>(v.size(), 1) * 4));
    if (!v.empty()) k_.upload(p, v.data(), v.size() * 4);
    return p;
  }
  void* raw(size_t bytes) {
    void* p = k_.alloc(bytes);
    owned_.push_back(p);
    return p;
  }
  std::vector<float> download(const float* p, size_t n) {
    k_.synchronize();
    std::vector<float> v(n);
    k_.download(v.data(), p, n * 4);
    return v;
  }

 private:
  KernelSet& k_;
  std::vector<void*> owned_;
};

TEST(GpuGptStep, ThreeAdamWStepsOfTheKernelsMatchTheOracle) {
  std::string why;
  KernelSet* kp = kernels_for_test(&why);
  if (!kp) GTEST_SKIP() << why;
  KernelSet& k = *kp;
  const GPTConfig c = tiny_gpt();
  const Optimizer opt = step_optimizer();
  const ir::Graph g =
      trace("gpt2_train", [&](ProgramBuilder& b) { gpt2::build_train(b, c, kBatch, opt); });
  const int N = kBatch * static_cast<int>(c.context), T = static_cast<int>(c.context);
  const int C = static_cast<int>(c.embed), V = static_cast<int>(c.vocab);
  const int H = static_cast<int>(c.heads), D = C / H, F = static_cast<int>(c.mlp_ratio) * C;
  const int L = static_cast<int>(c.layers);

  // Parameters, their gradients and Adam moments, by path.
  Memory mem(k);
  std::map<std::string, float*> param, grad, m1, m2;
  std::map<std::string, int64_t> size;
  std::vector<std::string> order;
  for (const ir::Node& n : g.nodes) {
    if (n.op != ir::Op::kParameter || n.name.rfind("opt/", 0) == 0) continue;
    const std::vector<float> init = init_global(n, kSeed);
    order.push_back(n.name);
    size[n.name] = static_cast<int64_t>(init.size());
    param[n.name] = mem.upload(init);
    grad[n.name] = mem.zeros(init.size());
    m1[n.name] = mem.zeros(init.size());
    m2[n.name] = mem.zeros(init.size());
  }
  ASSERT_EQ(order.size(), 4u + 12u * L) << "the GPT's parameter list changed";
  auto P = [&](const std::string& name) -> const float* {
    EXPECT_TRUE(param.count(name)) << name;
    return param.at(name);
  };
  auto G = [&](const std::string& name) { return grad.at(name); };

  // Activations kept for the backward pass.
  auto buf = [&](int64_t n) { return mem.zeros(n); };
  float* emb = buf(N * C);
  std::vector<float*> h1(L), qkv(L), y(L), lse(L), attn_out(L), resid_a(L), resid_b(L), h2(L),
      pre(L), act(L), mlp_out(L), mean1(L), rstd1(L), mean2(L), rstd2(L);
  for (int l = 0; l < L; ++l) {
    h1[l] = buf(N * C);
    qkv[l] = buf(N * 3 * C);
    y[l] = buf(N * C);
    lse[l] = buf(kBatch * H * T);
    attn_out[l] = buf(N * C);
    resid_a[l] = buf(N * C);
    resid_b[l] = buf(N * C);
    h2[l] = buf(N * C);
    pre[l] = buf(N * F);
    act[l] = buf(N * F);
    mlp_out[l] = buf(N * C);
    mean1[l] = buf(N);
    rstd1[l] = buf(N);
    mean2[l] = buf(N);
    rstd2[l] = buf(N);
  }
  float *resid_f = buf(N * C), *hf = buf(N * C), *mean_f = buf(N), *rstd_f = buf(N);
  float *logits = buf(int64_t{N} * V), *loss = buf(N);
  float *dres = buf(N * C), *dh = buf(N * C), *dy = buf(N * C), *dqkv = buf(N * 3 * C);
  float *dpre = buf(N * F), *delta = buf(kBatch * H * T);
  float* scratch = buf(std::max(layernorm_backward_scratch(N, F), bias_grad_scratch(N, F)));

  auto linear = [&](float* out, const float* in, const std::string& layer, int fan_in, int fan_out,
                    Gemm::Epilogue epilogue = Gemm::Epilogue::kNone, float* saved = nullptr) {
    Gemm m;
    m.m = N;
    m.n = fan_out;
    m.k = fan_in;
    m.ab_dtype = m.c_dtype = DType::kF32;
    m.a = in;
    m.lda = fan_in;
    m.b = P(layer + "/kernel");
    m.ldb = fan_out;
    m.c = out;
    m.ldc = fan_out;
    m.bias = P(layer + "/bias");
    m.epilogue = epilogue;
    m.pre_gelu = saved;
    k.gemm(m);
  };
  // dW = in^T dout, db = sum of dout; d_in = dout W^T (with GELU's backward
  // through `saved` when set).
  auto linear_backward = [&](float* d_in, const float* dout, const float* in,
                             const std::string& layer, int fan_in, int fan_out,
                             const float* saved = nullptr) {
    Gemm w;
    w.trans_a = true;
    w.m = fan_in;
    w.n = fan_out;
    w.k = N;
    w.ab_dtype = w.c_dtype = DType::kF32;
    w.a = in;
    w.lda = fan_in;
    w.b = dout;
    w.ldb = fan_out;
    w.c = G(layer + "/kernel");
    w.ldc = fan_out;
    k.gemm(w);
    BiasGrad bg;
    bg.db = G(layer + "/bias");
    bg.scratch = scratch;
    bg.dout = dout;
    bg.rows = N;
    bg.cols = fan_out;
    k.bias_grad(bg);
    Gemm x;
    x.trans_b = true;
    x.m = N;
    x.n = fan_in;
    x.k = fan_out;
    x.ab_dtype = x.c_dtype = DType::kF32;
    x.a = dout;
    x.lda = fan_out;
    x.b = P(layer + "/kernel");
    x.ldb = fan_out;
    x.c = d_in;
    x.ldc = fan_in;
    if (saved) {
      x.epilogue = Gemm::Epilogue::kGeluBackward;
      x.pre_gelu = const_cast<float*>(saved);
    }
    k.gemm(x);
  };
  auto layernorm = [&](float* out, float* mean, float* rstd, const float* x, const float* add,
                       float* sum_out, const std::string& ln) {
    LayerNormForward a;
    a.out = out;
    a.mean = mean;
    a.rstd = rstd;
    a.x = x;
    a.add = add;
    a.sum_out = sum_out;
    a.w = P(ln + "/scale");
    a.b = P(ln + "/bias");
    a.rows = N;
    a.cols = C;
    a.eps = static_cast<float>(c.epsilon);
    k.layernorm_forward(a);
  };
  auto layernorm_backward = [&](const float* dout, const float* x, const float* mean,
                                const float* rstd, const std::string& ln, bool accumulate) {
    LayerNormBackward a;
    a.dx = dres;
    a.dw = G(ln + "/scale");
    a.db = G(ln + "/bias");
    a.scratch = scratch;
    a.dout = dout;
    a.x = x;
    a.w = P(ln + "/scale");
    a.mean = mean;
    a.rstd = rstd;
    a.rows = N;
    a.cols = C;
    a.accumulate = accumulate;
    k.layernorm_backward(a);
  };
  // The DSL's qkv columns are head-major: (batch, seq, heads, 3 * head_dim).
  const AttentionStrides qkv_strides{int64_t{T} * 3 * C, 3 * C, 3 * D};
  const AttentionStrides y_strides{int64_t{T} * C, C, D};

  // Device tables for the global norm and AdamW.
  std::vector<NormTensor> norm_tensors;
  std::vector<AdamWTensor> adam_tensors;
  std::vector<int64_t> sizes;
  for (const auto& name : order) {
    norm_tensors.push_back({grad[name], size[name]});
    adam_tensors.push_back({param[name], grad[name], m1[name], m2[name], nullptr, size[name],
                            static_cast<float>(opt.weight_decay)});
    sizes.push_back(size[name]);
  }
  const auto chunks = tensor_chunks(sizes);
  auto* dev_norm = static_cast<NormTensor*>(mem.raw(norm_tensors.size() * sizeof(NormTensor)));
  k.upload(dev_norm, norm_tensors.data(), norm_tensors.size() * sizeof(NormTensor));
  auto* dev_adam = static_cast<AdamWTensor*>(mem.raw(adam_tensors.size() * sizeof(AdamWTensor)));
  k.upload(dev_adam, adam_tensors.data(), adam_tensors.size() * sizeof(AdamWTensor));
  auto* dev_chunks = static_cast<TensorChunk*>(mem.raw(chunks.size() * sizeof(TensorChunk)));
  k.upload(dev_chunks, chunks.data(), chunks.size() * sizeof(TensorChunk));
  float *norm = buf(1), *clip = buf(1), *partial = buf(chunks.size()), *lr = buf(1),
        *count = buf(1);

  HostValues oracle_state;
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const HostValues in = batch_for(c, step);
    const HostValues want = interpret(g, in, kSeed, &oracle_state);
    std::vector<int32_t> ids(in.at("tokens").begin(), in.at("tokens").end());
    std::vector<int32_t> targets(in.at("targets").begin(), in.at("targets").end());
    const int32_t* dev_ids = mem.upload(ids);
    const int32_t* dev_targets = mem.upload(targets);

    // Forward.
    Embedding e;
    e.out = emb;
    e.ids = dev_ids;
    e.wte = P("wte/embedding");
    e.wpe = P("wpe/embedding");
    e.rows = N;
    e.cols = C;
    e.seq = T;
    e.vocab = V;
    k.embedding_forward(e);
    for (int l = 0; l < L; ++l) {
      const std::string h = "h" + std::to_string(l);
      if (l == 0)
        layernorm(h1[l], mean1[l], rstd1[l], emb, nullptr, nullptr, h + "/ln1");
      else
        layernorm(h1[l], mean1[l], rstd1[l], resid_b[l - 1], mlp_out[l - 1], resid_a[l], h + "/ln1");
      linear(qkv[l], h1[l], h + "/attn/qkv", C, 3 * C);
      Attention a;
      a.q = qkv[l];
      a.k = qkv[l] + D;
      a.v = qkv[l] + 2 * D;
      a.sq = a.sk = a.sv = qkv_strides;
      a.o = y[l];
      a.so = y_strides;
      a.lse = lse[l];
      a.batch = kBatch;
      a.heads = H;
      a.seq = T;
      a.head_dim = D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(D));
      k.attention_forward(a);
      linear(attn_out[l], y[l], h + "/attn/proj", C, C);
      const float* stream_in = l == 0 ? emb : resid_a[l];
      layernorm(h2[l], mean2[l], rstd2[l], stream_in, attn_out[l], resid_b[l], h + "/ln2");
      linear(act[l], h2[l], h + "/mlp/fc", C, F, Gemm::Epilogue::kGelu, pre[l]);
      linear(mlp_out[l], act[l], h + "/mlp/proj", F, C);
    }
    layernorm(hf, mean_f, rstd_f, resid_b[L - 1], mlp_out[L - 1], resid_f, "ln_f");
    Gemm head;  // tied: logits = hf wte^T
    head.trans_b = true;
    head.m = N;
    head.n = V;
    head.k = C;
    head.ab_dtype = head.c_dtype = DType::kF32;
    head.a = hf;
    head.lda = C;
    head.b = P("wte/embedding");
    head.ldb = C;
    head.c = logits;
    head.ldc = V;
    k.gemm(head);
    CrossEntropy ce;
    ce.loss = loss;
    ce.logits = logits;
    ce.dlogits = logits;  // in place
    ce.targets = dev_targets;
    ce.rows = N;
    ce.vocab = V;
    ce.dloss = 1.0f / N;
    k.cross_entropy(ce);

    // Backward.
    Gemm dwte;  // d wte = dlogits^T hf (the embedding's rows are added below)
    dwte.trans_a = true;
    dwte.m = V;
    dwte.n = C;
    dwte.k = N;
    dwte.ab_dtype = dwte.c_dtype = DType::kF32;
    dwte.a = logits;
    dwte.lda = V;
    dwte.b = hf;
    dwte.ldb = C;
    dwte.c = G("wte/embedding");
    dwte.ldc = C;
    k.gemm(dwte);
    Gemm dhf;  // d hf = dlogits wte
    dhf.m = N;
    dhf.n = C;
    dhf.k = V;
    dhf.ab_dtype = dhf.c_dtype = DType::kF32;
    dhf.a = logits;
    dhf.lda = V;
    dhf.b = P("wte/embedding");
    dhf.ldb = C;
    dhf.c = dh;
    dhf.ldc = C;
    k.gemm(dhf);
    layernorm_backward(dh, resid_f, mean_f, rstd_f, "ln_f", /*accumulate=*/false);
    for (int l = L - 1; l >= 0; --l) {
      const std::string h = "h" + std::to_string(l);
      // dres: the gradient of the residual stream after this block.
      linear_backward(dpre, dres, act[l], h + "/mlp/proj", F, C, /*saved=*/pre[l]);
      linear_backward(dh, dpre, h2[l], h + "/mlp/fc", C, F);
      layernorm_backward(dh, resid_b[l], mean2[l], rstd2[l], h + "/ln2", true);
      linear_backward(dy, dres, y[l], h + "/attn/proj", C, C);
      AttentionBackward ab;
      ab.q = qkv[l];
      ab.k = qkv[l] + D;
      ab.v = qkv[l] + 2 * D;
      ab.o = y[l];
      ab.dout = dy;
      ab.lse = lse[l];
      ab.delta = delta;
      ab.dq = dqkv;
      ab.dk = dqkv + D;
      ab.dv = dqkv + 2 * D;
      ab.sq = ab.sk = ab.sv = ab.sdq = ab.sdk = ab.sdv = qkv_strides;
      ab.so = ab.sdo = y_strides;
      ab.batch = kBatch;
      ab.heads = H;
      ab.seq = T;
      ab.head_dim = D;
      ab.scale = 1.0f / std::sqrt(static_cast<float>(D));
      k.attention_backward(ab);
      linear_backward(dh, dqkv, h1[l], h + "/attn/qkv", C, 3 * C);
      layernorm_backward(dh, l == 0 ? emb : resid_a[l], mean1[l], rstd1[l], h + "/ln1", true);
    }
    const EmbeddingBuckets buckets = embedding_buckets(ids.data(), N);
    k.upload(G("wpe/embedding"), std::vector<float>(size["wpe/embedding"], 0.0f).data(),
             size["wpe/embedding"] * 4);
    EmbeddingBackward eb;
    eb.dwte = G("wte/embedding");
    eb.dwpe = G("wpe/embedding");
    eb.dout = dres;
    eb.positions = mem.upload(buckets.positions);
    eb.starts = mem.upload(buckets.starts);
    eb.tokens = mem.upload(buckets.tokens);
    eb.buckets = static_cast<int>(buckets.tokens.size());
    eb.batch = kBatch;
    eb.seq = T;
    eb.cols = C;
    eb.vocab = V;
    k.embedding_backward(eb);

    // Clipping and AdamW, with this step's learning rate from the program.
    GlobalNorm gn;
    gn.tensors = dev_norm;
    gn.chunks = dev_chunks;
    gn.num_chunks = static_cast<int>(chunks.size());
    gn.partial = partial;
    gn.norm = norm;
    gn.clip_factor = clip;
    gn.max_norm = 1.0f;
    k.global_norm(gn);
    const float lr_value = static_cast<float>(want.at("lr")[0]);
    const float count_value = static_cast<float>(step + 1);
    k.upload(lr, &lr_value, 4);
    k.upload(count, &count_value, 4);
    AdamWHyper hyper;
    hyper.b1 = static_cast<float>(opt.b1);
    hyper.b2 = static_cast<float>(opt.b2);
    hyper.eps = static_cast<float>(opt.eps);
    hyper.lr = lr;
    hyper.count = count;
    hyper.grad_scale = clip;
    k.adamw(dev_adam, dev_chunks, static_cast<int>(chunks.size()), hyper);

    const auto losses = mem.download(loss, N);
    double mean_loss = 0;
    for (float x : losses) mean_loss += x;
    mean_loss /= N;
    EXPECT_NEAR(mean_loss, want.at("loss")[0], 1e-4 * std::abs(want.at("loss")[0])) << "loss";
    const double got_norm = mem.download(norm, 1)[0];
    EXPECT_NEAR(got_norm, want.at("grad_norm")[0], 1e-4 * want.at("grad_norm")[0]) << "grad norm";
  }

  // Every parameter and moment after three steps.
  auto expect_tensor = [&](const std::string& name, const float* dev) {
    const auto& w = oracle_state.at(name);
    const auto got = mem.download(dev, w.size());
    double scale = 1e-6, worst = 0;
    size_t at = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < w.size(); ++i)
      if (std::abs(got[i] - w[i]) > worst) {
        worst = std::abs(got[i] - w[i]);
        at = i;
      }
    EXPECT_LE(worst, 2e-3 * scale) << name << ": element " << at << " is " << got[at]
                                   << ", the oracle's " << w[at];
  };
  for (const auto& name : order) {
    expect_tensor(name, param[name]);
    expect_tensor("opt/m/" + name, m1[name]);
    expect_tensor("opt/v/" + name, m2[name]);
  }
}

}  // namespace
}  // namespace sharc::gpu

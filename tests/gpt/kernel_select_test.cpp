// Kernel selection (codegen/kernel_select.h) on the GPT sample's training
// program: the DSL marks layer_norm, attention, softmax_cross_entropy, each
// parameter's AdamW update and the global norm as composite regions;
// autodiff carries the marks to their gradients; the partitioner to the
// nodes it makes. Asserted on the per-device program: which parts run as
// which kernel, and the reason of each fallback (a head size without a
// kernel, dropout on the attention weights, a collective inside a region).
#include <gtest/gtest.h>

#include <algorithm>

#include <map>
#include <string>
#include <vector>

#include "codegen/kernel_select.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "samples/gpt2/model.h"

namespace sharc {
namespace {

GPTConfig config(int64_t embed, int64_t heads, double dropout) {
  GPTConfig c;
  c.vocab = 16;
  c.context = 8;
  c.embed = embed;
  c.heads = heads;
  c.layers = 2;
  c.dropout = dropout;
  return c;
}

Lowered lowered(const GPTConfig& c, const std::string& mesh) {
  const ir::Graph g = trace("gpt2_train", [&](ProgramBuilder& b) {
    gpt2::build_train(b, c, /*batch=*/8, adamw(Schedule::constant(1e-3), 1e-2));
  });
  return lower(g, Mesh::parse(mesh, 8));
}

// kind forward|backward -> the kernels (or "fallback: reason") its parts got.
std::multimap<std::string, std::string> choices(const ir::Graph& g) {
  std::multimap<std::string, std::string> out;
  for (const KernelChoice& k : select_kernels(g)) {
    EXPECT_FALSE(k.nodes.empty());
    out.emplace(std::string(ir::composite_name(g.composites[k.composite].kind)) + (k.backward ? " backward" : " forward"),
                k.kernel.empty() ? "fallback: " + k.reason : k.kernel);
  }
  return out;
}

// Every part of `kind` got `what`, and there are `count` of them.
void expect_all(const std::multimap<std::string, std::string>& c, const std::string& kind, const std::string& what,
                size_t count) {
  EXPECT_EQ(c.count(kind), count) << kind;
  for (auto [it, end] = c.equal_range(kind); it != end; ++it) EXPECT_EQ(it->second, what) << kind;
}

TEST(KernelSelection, TheGptRunsItsRegionsAsKernelsOnTheMegatronMesh) {
  // 4 heads of 16 on data=2,model=4: each device holds one whole head.
  const Lowered l = lowered(config(64, 4, 0.0), "data=2,model=4");
  const auto c = choices(l.partitioned);
  // Two blocks' ln1 and ln2 and the final ln_f, whose features 'model' does
  // not split.
  expect_all(c, "layer_norm forward", "layernorm_forward", 5);
  expect_all(c, "layer_norm backward", "layernorm_backward", 5);
  expect_all(c, "attention forward", "attention_forward", 2);
  expect_all(c, "attention backward", "attention_backward", 2);
  // Every parameter's update.
  size_t params = 0;
  for (const ir::Node& n : l.partitioned.nodes)
    params += n.op == ir::Op::kParameter && n.name.rfind("opt/", 0) != 0;
  // The tied embedding splits the logits' vocabulary over 'model', so the
  // loss's logsumexp crosses devices; so does the norm of gradients that
  // 'model' shards.
  expect_all(c, "softmax_cross_entropy forward",
             "fallback: the partitioner put a reduce_scatter over 'model' inside it: the mesh splits a dimension "
             "the kernel needs whole",
             1);
  expect_all(c, "softmax_cross_entropy backward",
             "fallback: the partitioner put an all_reduce over 'model' inside it: the mesh splits a dimension the "
             "kernel needs whole",
             1);
  expect_all(c, "global_norm forward",
             "fallback: the partitioner put an all_reduce over 'model' inside it: the mesh splits a dimension the "
             "kernel needs whole",
             1);
  std::printf("%s", format_kernel_choices(l.partitioned, select_kernels(l.partitioned)).c_str());
}

// Data parallel, scanned blocks: every region whole on every device (the
// gradients' all-reduce over 'data' follows the kernels that make them).
TEST(KernelSelection, DataParallelRunsEveryRegionAsItsKernel) {
  GPTConfig cfg = config(64, 4, 0.0);
  cfg.scan = true;
  const Lowered l = lowered(cfg, "data=8");
  const auto c = choices(l.partitioned);
  // Each layer of a scan is traced (the emitter writes the layers' code
  // once, from the first): a region per layer.
  expect_all(c, "layer_norm forward", "layernorm_forward", 5);
  expect_all(c, "layer_norm backward", "layernorm_backward", 5);
  expect_all(c, "attention forward", "attention_forward", 2);
  expect_all(c, "attention backward", "attention_backward", 2);
  expect_all(c, "softmax_cross_entropy forward", "cross_entropy", 1);
  expect_all(c, "softmax_cross_entropy backward", "cross_entropy", 1);
  expect_all(c, "global_norm forward", "global_norm", 1);
}

TEST(KernelSelection, AHeadSizeWithoutAKernelFallsBackSayingWhy) {
  // 4 heads of 24.
  const Lowered l = lowered(config(96, 4, 0.0), "data=2,model=4");
  const auto c = choices(l.partitioned);
  const std::string why = "fallback: head size 24: the attention kernels are built for 8, 16, 32, 64";
  expect_all(c, "attention forward", why, 2);
  expect_all(c, "attention backward", why, 2);
  expect_all(c, "layer_norm forward", "layernorm_forward", 5);  // the rest still fits
}

TEST(KernelSelection, DropoutOnTheAttentionWeightsFallsBack) {
  const Lowered l = lowered(config(64, 4, 0.1), "data=8");
  const auto c = choices(l.partitioned);
  expect_all(c, "attention forward", "fallback: dropout 0.1 on the attention weights: the attention kernels have none",
             2);
}

// A layer norm over a feature axis the mesh splits needs its statistics
// summed across devices: a collective inside the region, so no kernel.
TEST(KernelSelection, ACollectiveInsideARegionFallsBack) {
  const ir::Graph g = trace("ln", [](ProgramBuilder& b) {
    Scope s = b.scope();
    Tensor x = b.input("x", {8, 16}, P(None, "model"));
    Param scale = s.param("scale", {16}, with_partitioning(ones(), P("model")));
    Param bias = s.param("bias", {16}, with_partitioning(zeros(), P("model")));
    b.output("y", layer_norm(x, scale, bias), P(None, "model"));
  });
  const Lowered l = lower(g, Mesh::parse("model=2", 2));
  const std::vector<KernelChoice> k = select_kernels(l.partitioned);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].kernel, "");
  EXPECT_NE(k[0].reason.find("inside it: the mesh splits a dimension the kernel needs whole"), std::string::npos)
      << k[0].reason;
  EXPECT_EQ(k[0].reason.rfind("the partitioner put a", 0), 0u) << k[0].reason;
  EXPECT_NE(format_kernel_choices(l.partitioned, k).find(" layer_norm forward: falls back: the partitioner put a"),
            std::string::npos);
}

// ---- use_gpu_kernels: the selected parts become Kernel nodes ---------------

Lowered lowered_for_gpu(const ir::Graph& g, const std::string& mesh, int devices) {
  PipelineOptions o;
  o.gpu_kernels = true;
  return lower(g, Mesh::parse(mesh, devices), o);
}

// kernel name -> how many Kernel and KernelOutput nodes carry it.
std::map<std::string, int> kernel_nodes(const ir::Graph& g) {
  std::map<std::string, int> out;
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::kKernel || n.op == ir::Op::kKernelOutput) ++out[n.kernel];
  return out;
}

ir::Graph bf16_gpt() {
  return trace("gpt2_train", [&](ProgramBuilder& b) {
    b.set_dtype(ir::DType::kBF16);
    gpt2::build_train(b, config(64, 4, 0.0), /*batch=*/8, adamw(Schedule::constant(1e-3), 1e-2));
  });
}

// In bf16 mixed precision the residual stream is bf16, and on data=8 every
// layer norm (forward, and backward with the stream's gradient added) is
// the kernel in bf16; its statistics stay f32.
TEST(GpuKernels, TheBf16GptsLayerNormsRunAsKernelsInBf16) {
  const Lowered l = lowered_for_gpu(bf16_gpt(), "data=8", 8);
  const std::map<std::string, int> k = kernel_nodes(l.partitioned);
  ASSERT_EQ(k.count("layernorm_forward"), 1u) << format_kernel_choices(l.partitioned, l.kernels);
  EXPECT_EQ(k.at("layernorm_forward"), 5);
  EXPECT_EQ(k.at("layernorm_backward"), 5);
  int priors = 0;
  for (const ir::Node& n : l.partitioned.nodes) {
    if (n.kernel == "layernorm_forward" || n.kernel == "layernorm_backward") {
      EXPECT_EQ(n.dtype, ir::DType::kBF16) << n.kernel;
      priors += n.kernel == "layernorm_backward" && n.ints == std::vector<int>{1};
    }
    if (n.kernel == "layernorm_forward.mean" || n.kernel == "layernorm_forward.rstd") {
      EXPECT_EQ(n.dtype, ir::DType::kF32) << n.kernel;
    }
  }
  EXPECT_EQ(priors, 4);  // every layer norm but the last (ln_f) adds to the stream's gradient
}

// No `kernel` node in the program, and the kernel choices say `says` (the
// region and the reason it falls back).
void expect_falls_back(const Lowered& l, const std::string& kernel, const std::string& says) {
  EXPECT_EQ(kernel_nodes(l.partitioned).count(kernel), 0u) << kernel;
  const std::string choices = format_kernel_choices(l.partitioned, l.kernels);
  EXPECT_NE(choices.find(says), std::string::npos) << choices;
}

// With 'model' the gradient reaching a layer norm is a partial sum, which
// the partitioner converts to f32 before adding up: the bf16 kernel would
// read it whole in bf16, so the layer norms fall back, saying so.
TEST(GpuKernels, Bf16LayerNormsWhoseGradientIsSummedInF32FallBack) {
  expect_falls_back(lowered_for_gpu(bf16_gpt(), "data=2,model=4", 8), "layernorm_backward",
                    " layer_norm backward: falls back: its result's gradient leaves it in f32 (partial sums the "
                    "partitioner adds after converting them): the bf16 kernel reads the whole gradient in bf16");
}

TEST(GpuKernels, TheGptsLayerNormsAttentionAndAdamWRunAsKernels) {
  const ir::Graph g = trace("gpt2_train", [&](ProgramBuilder& b) {
    gpt2::build_train(b, config(64, 4, 0.0), /*batch=*/8, adamw(Schedule::constant(1e-3), 1e-2));
  });
  const Lowered l = lowered_for_gpu(g, "data=2,model=4", 8);
  size_t params = 0;
  for (const ir::Node& n : l.partitioned.nodes)
    params += n.op == ir::Op::kParameter && n.name.rfind("opt/", 0) != 0;
  const int p = static_cast<int>(params);
  // Every parameter's AdamW update in one launch: the kernel node is the
  // first parameter's new value.
  // The GEMM epilogues: TheGptsProjectionsTakeTheirEpilogues.
  const std::map<std::string, int> want = {
      {"gemm_bias", 2},                 {"gemm_bias_gelu", 2},         {"gemm_bias_gelu.pre_gelu", 2},
      {"gemm_dgelu", 2},
      {"layernorm_forward", 5},         {"layernorm_forward.mean", 5}, {"layernorm_forward.rstd", 5},
      {"layernorm_backward", 5},        {"layernorm_backward.dscale", 5}, {"layernorm_backward.dbias", 5},
      {"attention_forward", 2},         {"attention_forward.lse", 2},  {"attention_backward", 2},
      {"embedding_lookup", 1},          {"embedding_grad", 1},
      {"adamw", 1},                     {"adamw.param", p - 1},        {"adamw.m", p},
      {"adamw.v", p}};
  EXPECT_EQ(kernel_nodes(l.partitioned), want);
  for (const ir::Node& n : l.partitioned.nodes)
    if (n.op == ir::Op::kKernel && n.kernel == "adamw") {
      EXPECT_EQ(n.ints, std::vector<int>{p});
      EXPECT_EQ(n.args.size(), 2u + 4u * params);  // lr, t, then w, g, m, v per tensor
    }
  // Nothing of a layer norm or attention region is left but its kernels
  // and the all-reduces of its parameter gradients, which leave it.
  for (const ir::Node& n : l.partitioned.nodes) {
    if (n.composite < 0) continue;
    const ir::CompositeKind kind = l.partitioned.composites[n.composite].kind;
    if (kind != ir::CompositeKind::kLayerNorm && kind != ir::CompositeKind::kAttention) continue;
    EXPECT_TRUE(n.op == ir::Op::kKernel || n.op == ir::Op::kKernelOutput || ir::is_collective(n.op) ||
                ir::is_source(n.op))
        << ir::op_name(n.op) << " " << n.name;
  }
  // The backward kernel of every layer norm but the last adds to the
  // gradient that the residual stream brought to its input (flag 1).
  int accumulating = 0;
  for (const ir::Node& n : l.partitioned.nodes)
    if (n.op == ir::Op::kKernel && n.kernel == "layernorm_backward") {
      ASSERT_EQ(n.ints.size(), 1u);
      accumulating += n.ints[0];
      EXPECT_EQ(n.args.size(), 5u + n.ints[0]);
    }
  EXPECT_EQ(accumulating, 4);
  // The choices say so, and say why the rest runs as generated kernels.
  const auto c = [&] {
    std::multimap<std::string, std::string> out;
    for (const KernelChoice& k : l.kernels)
      out.emplace(std::string(ir::composite_name(l.partitioned.composites[k.composite].kind)) +
                      (k.backward ? " backward" : " forward"),
                  k.kernel.empty() ? "fallback: " + k.reason : k.kernel);
    return out;
  }();
  expect_all(c, "layer_norm forward", "layernorm_forward", 5);
  expect_all(c, "layer_norm backward", "layernorm_backward", 5);
  expect_all(c, "adam forward", "adamw", params);
  expect_all(c, "attention forward", "attention_forward", 2);
  expect_all(c, "attention backward", "attention_backward", 2);
  // One head of 16 per device: the kernels read q, k and v in place from
  // the packed projection [4, 8, 1, 48] and write its gradient the same way.
  for (const ir::Node& n : l.partitioned.nodes) {
    if (n.op != ir::Op::kKernel || n.kernel.rfind("attention_", 0) != 0) continue;
    const bool forward = n.kernel == "attention_forward";
    ASSERT_EQ(n.args.size(), forward ? 1u : 4u);
    const ir::Node& qkv = l.partitioned.nodes[n.args[forward ? 0 : 1]];
    EXPECT_EQ(qkv.shape, (ir::Shape{4, 8, 1, 48}));
    EXPECT_EQ(n.shape, (forward ? ir::Shape{4, 8, 1, 16} : ir::Shape{4, 8, 1, 48}));
    EXPECT_DOUBLE_EQ(n.scalar, 0.25);  // 1 / sqrt(16), on q
    if (!forward) {
      EXPECT_EQ(l.partitioned.nodes[n.args[2]].kernel, "attention_forward");
      EXPECT_EQ(l.partitioned.nodes[n.args[3]].kernel, "attention_forward.lse");
      EXPECT_EQ(l.partitioned.nodes[n.args[3]].shape, (ir::Shape{4, 1, 8}));
    }
  }
  const std::string report = format_report(predict(l));
  EXPECT_NE(report.find("Composite regions on the GPU: each part's kernel, or why generated kernels compute it:\n"
                        "  dsl/transformer.cpp:"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("/ln1 layer_norm backward: layernorm_backward\n"), std::string::npos) << report;
  // A CPU program keeps every region's nodes.
  EXPECT_TRUE(kernel_nodes(lower(g, Mesh::parse("data=2,model=4", 8)).partitioned).empty());
  EXPECT_TRUE(lower(g, Mesh::parse("data=2,model=4", 8)).kernels.empty());
}

// On data=8 every region of the GPT's training step is one launch: the
// scanned layers' layer norms and attention, the cross-entropy forward and
// backward, the global norm and clip factor, the AdamW updates.
TEST(GpuKernels, DataParallelRunsTheGptsRegionsAsKernels) {
  GPTConfig cfg = config(64, 4, 0.0);
  cfg.scan = true;
  const ir::Graph g = trace("gpt2_train", [&](ProgramBuilder& b) {
    gpt2::build_train(b, cfg, /*batch=*/8, adamw(Schedule::constant(1e-3), 1e-2), gpt2::train_options(cfg));
  });
  const Lowered l = lowered_for_gpu(g, "data=8", 8);
  std::map<std::string, int> k = kernel_nodes(l.partitioned);
  EXPECT_EQ(k["layernorm_forward"], 5);
  EXPECT_EQ(k["layernorm_backward"], 5);
  EXPECT_EQ(k["attention_forward"], 2);
  EXPECT_EQ(k["attention_backward"], 2);
  EXPECT_EQ(k["cross_entropy"], 2);  // the losses, then their gradient
  EXPECT_EQ(k["adamw"], 1);
  for (const ir::Node& n : l.partitioned.nodes) {
    if (n.op != ir::Op::kKernel || n.kernel != "cross_entropy") continue;
    const ir::Node& logits = l.partitioned.nodes[n.args[0]];
    const ir::Node& labels = l.partitioned.nodes[n.args[1]];
    EXPECT_EQ(logits.shape, (ir::Shape{1, 8, 16}));  // a window of 8 tokens, 16 classes
    EXPECT_EQ(labels.shape, (ir::Shape{1, 8}));
    EXPECT_EQ(labels.dtype, ir::DType::kF32);
    if (n.args.size() == 3) {  // backward: each example's loss gradient in, dlogits out
      EXPECT_EQ(l.partitioned.nodes[n.args[2]].shape, (ir::Shape{1, 8}));
      EXPECT_EQ(n.shape, logits.shape);
    } else {
      ASSERT_EQ(n.args.size(), 2u);
      EXPECT_EQ(n.shape, labels.shape);
    }
  }
  std::multimap<std::string, std::string> c;
  for (const KernelChoice& kc : l.kernels)
    c.emplace(std::string(ir::composite_name(l.partitioned.composites[kc.composite].kind)) +
                  (kc.backward ? " backward" : " forward"),
              kc.kernel.empty() ? "fallback: " + kc.reason : kc.kernel);
  expect_all(c, "softmax_cross_entropy forward", "cross_entropy", 1);
  expect_all(c, "softmax_cross_entropy backward", "cross_entropy", 1);
  expect_all(c, "global_norm forward", "global_norm", 1);
  // The norm of every gradient and the clip factor (max norm 1, the
  // sample's), which each gradient's scaling reads.
  int norms = 0;
  for (const ir::Node& n : l.partitioned.nodes) {
    if (n.op != ir::Op::kKernel || n.kernel != "global_norm") continue;
    ++norms;
    EXPECT_EQ(n.ints, std::vector<int>{static_cast<int>(n.args.size())});
    EXPECT_EQ(n.args.size(), static_cast<size_t>(k["adamw.m"]));  // one per parameter
    EXPECT_DOUBLE_EQ(n.scalar, 1.0);
    EXPECT_TRUE(n.shape.empty());
  }
  EXPECT_EQ(norms, 1);
  EXPECT_EQ(k["global_norm.clip_factor"], 1);
}

// The token embedding, one_hot(ids) @ wte, is a gather and its gradient a
// scatter-add, with no one-hot made. On data=2,model=4 the vocabulary is
// split over 'model': each device looks up its rows (a token outside them
// gives zeros) and the partial sums' reduce-scatter and all-gather follow
// the lookup. Where 'data' splits the batch, the gradient's all-reduce comes
// before the tied head's gradient is added, so that add stays a generated
// kernel; on one device the scatter-add adds to that gradient itself.
TEST(GpuKernels, TheEmbeddingIsAGatherAndItsGradientAScatterAdd) {
  for (const std::string mesh : {"data=2,model=4", "data=8", "data=1"}) {
    SCOPED_TRACE(mesh);
    GPTConfig cfg = config(64, 4, 0.0);
    cfg.scan = true;
    const ir::Graph g = trace("gpt2_train", [&](ProgramBuilder& b) {
      gpt2::build_train(b, cfg, /*batch=*/8, adamw(Schedule::constant(1e-3), 1e-2), gpt2::train_options(cfg));
    });
    const Lowered l = lowered_for_gpu(g, mesh, mesh == "data=1" ? 1 : 8);
    const ir::Graph& p = l.partitioned;
    const bool model = mesh == "data=2,model=4", one = mesh == "data=1";
    const ir::Shape table = {model ? 4 : 16, 64};  // 16 tokens, 4 per device on 'model'
    int lookups = 0, grads = 0;
    for (const ir::Node& n : p.nodes) {
      if (n.op != ir::Op::kKernel || n.kernel.rfind("embedding_", 0) != 0) continue;
      EXPECT_EQ(n.axes, model ? std::vector<std::string>{"model"} : std::vector<std::string>{}) << n.kernel;
      const ir::Node& ids = p.nodes[n.args[1]];
      EXPECT_EQ(ids.op, ir::Op::kInput) << n.kernel;  // the tokens themselves, the DSL's float labels
      EXPECT_EQ(ids.dtype, ir::DType::kF32);
      if (n.kernel == "embedding_lookup") {
        ++lookups;
        EXPECT_EQ(p.nodes[n.args[0]].shape, table);
        EXPECT_EQ(n.shape, (ir::Shape{model ? 4 : one ? 8 : 1, 8, 64}));
        // The partial sums over the split vocabulary, summed after it.
        int collectives = 0;
        for (const ir::Node& u : p.nodes)
          collectives += ir::is_collective(u.op) && std::find(u.args.begin(), u.args.end(), &n - p.nodes.data()) != u.args.end();
        EXPECT_EQ(collectives, model ? 1 : 0);
        continue;
      }
      ++grads;
      EXPECT_EQ(n.shape, table);
      EXPECT_EQ(n.dtype, ir::DType::kF32);
      // ints = {prior added in the kernel, rounded through bf16}.
      EXPECT_EQ(n.ints, (std::vector<int>{one ? 1 : 0, 0}));
      EXPECT_EQ(n.args.size(), one ? 3u : 2u);
    }
    EXPECT_EQ(lookups, 1);
    EXPECT_EQ(grads, 1);
    // No one-hot is left: nothing compares tokens with the classes.
    for (const ir::Node& n : p.nodes) {
      if (n.composite < 0 || p.composites[n.composite].kind != ir::CompositeKind::kEmbedding) continue;
      EXPECT_TRUE(n.op == ir::Op::kKernel || ir::is_collective(n.op) || (n.op == ir::Op::kAdd && !one) ||
                  ir::is_source(n.op))
          << ir::op_name(n.op);
    }
  }
}

// PyTorch's clip factor (TrainOptions::clip_form) is not the global_norm
// kernel's: generated kernels compute the norm and the factor, saying why.
TEST(GpuKernels, PyTorchsClipFormFallsBackSayingWhy) {
  GPTConfig cfg = config(64, 4, 0.0);
  cfg.scan = true;
  TrainOptions o = gpt2::train_options(cfg);
  o.clip_form = ClipForm::kTorch;
  const ir::Graph g = trace("gpt2_train", [&](ProgramBuilder& b) {
    gpt2::build_train(b, cfg, /*batch=*/8, adamw(Schedule::constant(1e-3), 1e-2), o);
  });
  expect_falls_back(lowered_for_gpu(g, "data=8", 8), "global_norm",
                    " global_norm forward: falls back: its clip factor is not optax's min(1, max_norm / norm) "
                    "(TrainOptions::clip_form): the kernel computes only that one");
}

// A weight decay mask splits the AdamW updates into two multi-tensor
// launches, one per decay (the matrices decayed, the rest not).
TEST(GpuKernels, AdamWWithADecayMaskIsOneLaunchPerDecay) {
  GPTConfig cfg = config(64, 4, 0.0);
  cfg.scan = true;
  const ir::Graph g = trace("gpt2_train", [&](ProgramBuilder& b) {
    gpt2::build_train(b, cfg, /*batch=*/8, adamw(Schedule::constant(1e-3), 1e-2, decay_mask(2)),
                      gpt2::train_options(cfg));
  });
  const Lowered l = lowered_for_gpu(g, "data=8", 8);
  std::vector<int> tensors;
  for (const ir::Node& n : l.partitioned.nodes)
    if (n.op == ir::Op::kKernel && n.kernel == "adamw") tensors.push_back(n.ints.at(0));
  ASSERT_EQ(tensors.size(), 2u);
  // The layers are scanned: a stacked parameter's rank is one layer's, so
  // the stacked layer norms and biases (rank 2 here) are not decayed.
  int matrices = 0, others = 0;
  for (const ir::Node& n : g.nodes) {
    if (n.op != ir::Op::kParameter || n.name.rfind("opt/", 0) == 0) continue;
    const size_t rank = n.shape.size() - (n.name.rfind("h/", 0) == 0 ? 1 : 0);
    (rank >= 2 ? matrices : others) += 1;
  }
  EXPECT_EQ(matrices, 6);  // wte, wpe, and the stacked qkv, attention proj, fc and mlp proj kernels
  std::sort(tensors.begin(), tensors.end());
  EXPECT_EQ(tensors, (std::vector<int>{std::min(matrices, others), std::max(matrices, others)}));
  // Each launch's tensors share one decay: 1e-2 for the matrices, 0 for the rest.
  for (const ir::Node& n : l.partitioned.nodes)
    if (n.op == ir::Op::kKernel && n.kernel == "adamw") {
      const ir::Composite& c = l.partitioned.composites.at(n.composite);
      EXPECT_DOUBLE_EQ(c.weight_decay, n.ints.at(0) == matrices ? 1e-2 : 0.0) << c.label;
    }
}

// A learning-rate group has a rate of its own, so its parameters' AdamW
// updates are a launch of their own: the kernel reads one rate per launch.
TEST(GpuKernels, AdamWWithALearningRateGroupIsOneLaunchPerRate) {
  GPTConfig cfg = config(64, 4, 0.0);
  cfg.scan = true;
  Optimizer o = adamw(Schedule::constant(1e-3), 1e-2);
  o.lr_groups = {lr_group({"wte/*", "wpe/*"}, 0.1)};
  const ir::Graph g = trace("gpt2_train", [&](ProgramBuilder& b) {
    gpt2::build_train(b, cfg, /*batch=*/8, o, gpt2::train_options(cfg));
  });
  const Lowered l = lowered_for_gpu(g, "data=8", 8);
  std::vector<int> tensors, rates;
  for (const ir::Node& n : l.partitioned.nodes)
    if (n.op == ir::Op::kKernel && n.kernel == "adamw") {
      tensors.push_back(n.ints.at(0));
      rates.push_back(n.args.at(0));
    }
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_NE(rates[0], rates[1]);
  std::sort(tensors.begin(), tensors.end());
  EXPECT_EQ(tensors.front(), 2);  // the embeddings
}

// Where 'model' splits the classes the loss needs the devices' partial
// sums: collectives inside the region, so generated kernels compute it;
// a remat policy that computes attention twice keeps generated kernels too.
TEST(GpuKernels, TheLossOnSplitClassesAndRematerialisedAttentionFallBack) {
  GPTConfig cfg = config(64, 4, 0.0);
  const ir::Graph g = trace("gpt2_train", [&](ProgramBuilder& b) {
    gpt2::build_train(b, cfg, /*batch=*/8, adamw(Schedule::constant(1e-3), 1e-2), gpt2::train_options(cfg, 1));
  });
  const Lowered l = lowered_for_gpu(g, "data=2,model=4", 8);
  std::map<std::string, std::string> why;
  for (const KernelChoice& kc : l.kernels)
    why[std::string(ir::composite_name(l.partitioned.composites[kc.composite].kind)) +
        (kc.backward ? " backward" : " forward")] = kc.kernel.empty() ? kc.reason : kc.kernel;
  EXPECT_EQ(why["softmax_cross_entropy forward"].rfind("the partitioner put a", 0), 0u)
      << why["softmax_cross_entropy forward"];
  EXPECT_NE(why["softmax_cross_entropy forward"].find("over 'model' inside it"), std::string::npos)
      << why["softmax_cross_entropy forward"];
  EXPECT_EQ(why["attention forward"],
            "a remat policy computes it twice: sharc runs the kernel for attention computed once");
  EXPECT_EQ(why["attention backward"], why["attention forward"]);
  EXPECT_EQ(kernel_nodes(l.partitioned).count("attention_forward"), 0u);
  EXPECT_EQ(kernel_nodes(l.partitioned).count("cross_entropy"), 0u);
  // 'model' shards gradients: the norm's partial sums are all-reduced inside.
  EXPECT_EQ(why["global_norm forward"].rfind("the partitioner put a", 0), 0u) << why["global_norm forward"];
  EXPECT_EQ(kernel_nodes(l.partitioned).count("global_norm"), 0u);
}

ir::Graph layer_norm_program(bool bf16) {
  return trace("ln", [bf16](ProgramBuilder& b) {
    Scope s = b.scope();
    Tensor x = b.input("x", {8, 16}, P("data", None));
    if (bf16) x = astype(x, ir::DType::kBF16);
    Param scale = s.param("scale", {16}, with_partitioning(ones(), P(None)));
    Param bias = s.param("bias", {16}, with_partitioning(zeros(), P(None)));
    b.output("y", layer_norm(x, scale, bias), P("data", None));
  });
}

// Without a backward part the forward kernel writes no statistics.
TEST(GpuKernels, AnInferenceLayerNormIsOneKernelWithoutStatistics) {
  const Lowered l = lowered_for_gpu(layer_norm_program(false), "data=2", 2);
  EXPECT_EQ(kernel_nodes(l.partitioned), (std::map<std::string, int>{{"layernorm_forward", 1}}));
  for (const ir::Node& n : l.partitioned.nodes)
    if (n.op == ir::Op::kKernel) {
      ASSERT_EQ(n.args.size(), 3u);
      EXPECT_EQ(l.partitioned[n.args[0]].op, ir::Op::kInput);
      EXPECT_EQ(l.partitioned[n.args[1]].name, "scale");
      EXPECT_EQ(l.partitioned[n.args[2]].name, "bias");
      EXPECT_EQ(n.shape, (ir::Shape{4, 16}));  // the local rows
    }
  ASSERT_EQ(l.kernels.size(), 1u);
  EXPECT_EQ(l.kernels[0].kernel, "layernorm_forward");
}

// z = layer_norm(h) + h: autodiff hands y and h the same gradient, so h's
// gradient before the layer norm's is dy itself; the backward kernel adds
// its part to it (dy passed twice, flag 1), and drops none of it.
TEST(GpuKernels, ALayerNormBesideItsInputAddsToTheSameGradient) {
  const ir::Graph g = trace("ln_skip", [](ProgramBuilder& b) {
    Scope s = b.scope();
    Param w = s.param("w", {16, 16}, with_partitioning(lecun_normal(), P(None, None)));
    Param scale = s.param("scale", {16}, with_partitioning(ones(), P(None)));
    Param bias = s.param("bias", {16}, with_partitioning(zeros(), P(None)));
    Tensor x = b.input("x", {8, 16}, P("data", None));
    train_step(b, {x},
               [&](const std::vector<Tensor>& mb) {
                 Tensor h = matmul(mb[0], w);
                 Tensor z = add(layer_norm(h, scale, bias), h);
                 return sum(mul(z, z), {0, 1});
               },
               adamw(Schedule::constant(1e-3), 0.0));
  });
  const Lowered l = lowered_for_gpu(g, "data=2", 2);
  int kernels = 0;
  for (const ir::Node& n : l.partitioned.nodes)
    if (n.op == ir::Op::kKernel && n.kernel == "layernorm_backward") {
      ++kernels;
      EXPECT_EQ(n.ints, std::vector<int>{1});
      ASSERT_EQ(n.args.size(), 6u);
      EXPECT_EQ(n.args[5], n.args[0]);  // the prior gradient is dy
    }
  EXPECT_EQ(kernels, 1);
}

// bf16 in, bf16 out (layer_norm gives x's dtype; the statistics are f32
// inside): the same kernel, reading and writing bf16.
TEST(GpuKernels, ABf16LayerNormIsTheKernelInBf16) {
  const Lowered l = lowered_for_gpu(layer_norm_program(true), "data=2", 2);
  EXPECT_EQ(kernel_nodes(l.partitioned), (std::map<std::string, int>{{"layernorm_forward", 1}}));
  for (const ir::Node& n : l.partitioned.nodes)
    if (n.op == ir::Op::kKernel) {
      EXPECT_EQ(n.dtype, ir::DType::kBF16);
      EXPECT_EQ(l.partitioned[n.args[0]].dtype, ir::DType::kBF16);
    }
  ASSERT_EQ(l.kernels.size(), 1u);
  EXPECT_EQ(l.kernels[0].kernel, "layernorm_forward");
}

// ---- GEMM epilogues ---------------------------------------------------------

// A dense layer of `width` outputs, gelu, and a dense layer back, trained
// with SGD: the forward's bias add and gelu and the backward's gelu
// gradient are what cuBLASLt's epilogues do.
ir::Graph gelu_mlp(int64_t width, ir::DType dtype = ir::DType::kF32) {
  return trace("gelu_mlp", [&](ProgramBuilder& b) {
    Scope s = b.scope();
    Param w1 = s.param("w1", {16, width}, with_partitioning(lecun_normal(), P(None, "model")));
    Param b1 = s.param("b1", {width}, with_partitioning(zeros(), P("model")));
    Param w2 = s.param("w2", {width, 16}, with_partitioning(lecun_normal(), P("model", None)));
    Tensor x = b.input("x", {8, 16}, P("data", None));
    train_step(b, {x},
               [&](const std::vector<Tensor>& mb) {
                 Tensor h = gelu(add(matmul(astype(mb[0], dtype), astype(w1, dtype)), astype(b1, dtype)));
                 Tensor y = astype(matmul(h, astype(w2, dtype)), ir::DType::kF32);
                 return sum(mul(y, y), {0, 1});
               },
               sgd(Schedule::constant(1e-3)));
  });
}

TEST(GpuKernels, GemmsTakeTheBiasAddGeluAndGeluGradientAsEpilogues) {
  for (ir::DType t : {ir::DType::kF32, ir::DType::kBF16}) {
    SCOPED_TRACE(ir::dtype_name(t));
    const Lowered l = lowered_for_gpu(gelu_mlp(32, t), "data=2,model=2", 4);
    // The forward GEMM writes gelu's result and its argument (which the
    // gradient reads); the backward GEMM dh = dy w2^T is multiplied by
    // gelu'(z) as it is written.
    EXPECT_EQ(kernel_nodes(l.partitioned),
              (std::map<std::string, int>{{"gemm_bias_gelu", 1}, {"gemm_bias_gelu.pre_gelu", 1}, {"gemm_dgelu", 1}}));
    int forward = -1, pre = -1, backward = -1;
    for (int i = 0; i < static_cast<int>(l.partitioned.nodes.size()); ++i) {
      const ir::Node& n = l.partitioned[i];
      EXPECT_NE(n.op, ir::Op::kGelu);
      EXPECT_NE(n.op, ir::Op::kTanh) << "gelu's gradient is left as elementwise ops";
      if (n.kernel == "gemm_bias_gelu") forward = i;
      if (n.kernel == "gemm_bias_gelu.pre_gelu") pre = i;
      if (n.kernel == "gemm_dgelu") backward = i;
    }
    ASSERT_GE(forward, 0);
    ASSERT_GE(backward, 0);
    const ir::Node& f = l.partitioned[forward];
    ASSERT_EQ(f.args.size(), 3u);  // x (its local rows), w1 and b1, each as the GEMM reads it (t)
    EXPECT_EQ(f.shape, (ir::Shape{4, 16}));  // local: rows split over data, width over model
    EXPECT_EQ(f.dtype, t);
    EXPECT_EQ(f.dot.lhs_contract, std::vector<int>{1});
    EXPECT_EQ(l.partitioned[pre].args, std::vector<int>{forward});
    const ir::Node& b = l.partitioned[backward];
    ASSERT_EQ(b.args.size(), 3u);
    EXPECT_EQ(b.args[2], pre);  // gelu'(z) from the argument the forward kept
    EXPECT_TRUE(b.backward);
    EXPECT_EQ(b.dot.rhs_contract, std::vector<int>{1});  // dy w2^T: w2 read transposed
  }
}

TEST(GpuKernels, AGemmTooNarrowForCublasLtEpiloguesKeepsThemAsGeneratedKernels) {
  // 12 columns over model=2: 6 per device, not a multiple of 8 (cuBLASLt's
  // epilogue buffers' leading dimension), so the dots stay plain GEMMs.
  const Lowered l = lowered_for_gpu(gelu_mlp(12), "data=2,model=2", 4);
  EXPECT_TRUE(kernel_nodes(l.partitioned).empty());
  int gelus = 0;
  for (const ir::Node& n : l.partitioned.nodes) gelus += n.op == ir::Op::kGelu;
  EXPECT_EQ(gelus, 1);
}

TEST(GpuKernels, TheGptsProjectionsTakeTheirEpilogues) {
  const ir::Graph g = trace("gpt2_train", [&](ProgramBuilder& b) {
    gpt2::build_train(b, config(64, 4, 0.0), /*batch=*/8, adamw(Schedule::constant(1e-3), 1e-2));
  });
  // Per block: the qkv projection with its bias; the MLP's first
  // projection with its bias and gelu (keeping gelu's argument for the
  // backward) and the gelu gradient on the GEMM that brings the MLP's
  // gradient back. On one whole device the output projections also take
  // their biases; on model=4 their GEMMs give partial sums, summed before
  // the bias is added, so they stay plain.
  std::map<std::string, int> megatron = {{"gemm_bias", 2},
                                         {"gemm_bias_gelu", 2},
                                         {"gemm_bias_gelu.pre_gelu", 2},
                                         {"gemm_dgelu", 2}};
  std::map<std::string, int> whole = megatron;
  whole["gemm_bias"] = 6;  // and attn/proj, mlp/proj
  for (auto [mesh, want] : {std::pair{"data=2,model=4", megatron}, std::pair{"data=8", whole}}) {
    SCOPED_TRACE(mesh);
    std::map<std::string, int> gemms;
    for (const auto& [k, count] : kernel_nodes(lowered_for_gpu(g, mesh, 8).partitioned))
      if (k.rfind("gemm", 0) == 0) gemms[k] = count;
    EXPECT_EQ(gemms, want);
  }
}

}  // namespace
}  // namespace sharc

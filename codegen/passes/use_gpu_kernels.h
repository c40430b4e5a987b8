// Pass: use_gpu_kernels (GPU programs: PipelineOptions::gpu_kernels).
//
// Requires: a partitioned graph.
// Ensures: every composite region part that select_kernels
//   (codegen/kernel_select.h) lets run as its KernelSet kernel, and whose
//   nodes this pass can map onto the kernel's operands and results, is
//   replaced by one Kernel node (its first result) and KernelOutput nodes
//   (the others); the rest is unchanged. The collectives a part holds (a
//   gradient's all-reduce that only leaves it) stay, reading the kernel's
//   results. `choices` receives the final choice of every part: a part the
//   pass cannot map gets the reason.
//
// What is mapped:
//  - layer_norm: forward  y, mean, rstd = layernorm_forward(x, scale, bias)
//    and, when the program trains, backward
//      dx, dscale, dbias = layernorm_backward(dy, x, scale, mean, rstd[, prior])
//    where prior is the gradient of x that other users of x gave before
//    (autodiff sums into it: dx = prior + the layer norm's part), ints = {1}.
//    The two parts go together: the backward kernel reads the statistics the
//    forward kernel writes, not the forward's intermediate values, so when
//    one part falls back, both do. The kernels read and write f32 here (a
//    bf16 input falls back).
//  - adam: every parameter's Adam(W) update of one hyper-parameter set
//    (betas, eps, weight decay, and learning rate: an LrGroup's is its own) as
//    ONE multi-tensor launch,
//      w', m', v' (per tensor) = adamw(lr, t, w0, g0, m0, v0, w1, g1, ...)
//    ints = {tensors}; the kernel node is tensor 0's w', each other new value
//    a kernel_output with ints = {its tensor}. The kernel writes them over
//    the old values (BufferPlan::in_place_of). In a pipeline each parameter
//    gets a launch of its own, since the stages update their own parameters.
//  - attention (causal, no dropout): the packed projection qkv
//    [B, T, H, 3D] in, each head's q | k | v side by side:
//      y, lse = attention_forward(qkv)        y [B, T, H, D], lse [B, H, T]
//      dqkv = attention_backward(dy, qkv, y, lse)
//    scalar = the scale on q, 1/sqrt(D). The kernels read q, k and v (and
//    write their gradients) in place, as strided views; the backward
//    recomputes the probabilities from lse. The parts go together.
//  - softmax_cross_entropy: the per-example losses,
//      loss = cross_entropy(logits, labels)
//      dlogits = cross_entropy(logits, labels, dloss)
//    with the DSL's float labels (one_hot's meaning) and each example's
//    loss gradient; the mean over the batch stays outside. A mesh that
//    splits the classes puts collectives inside: it falls back.
//  - embedding (one_hot(ids) @ table, no one-hot made): a gather and the
//    deterministic scatter-add of its gradient,
//      y = embedding_lookup(table, ids)           y [..., E] in the dot's dtype
//      dtable = embedding_grad(dy, ids[, prior])  f32 [V, E], ints = {prior, bf16}
//    with ids the DSL's f32 labels or i32, and the table f32. The kernel
//    nodes carry the mesh axes that split the vocabulary (axes): a device
//    holds rows [block start, + V) and a token outside them picks zeros, so
//    a 'model'-split vocabulary keeps its partial sums' all-reduce after the
//    lookup. prior is the gradient the table's other uses gave first (a
//    tied LM head); bf16 rounds the sum through bf16, as the bf16 dot did.
//  - global_norm: the gradients' norm and, with clipping, the clip factor,
//      norm = global_norm(g0, g1, ...)          ints = {tensors}
//      factor = kernel_output(norm)             scalar = max_norm
//    The scaling of each gradient by the factor stays (generated kernels),
//    reading the factor the kernel writes. A mesh that shards a gradient
//    puts the norm's partial sums' all-reduce inside: it falls back.
//  - GEMM epilogues (no region): a local dot whose only reader cuBLASLt
//    can apply as it writes the result (passes/use_gpu_kernels.cpp,
//    epilogue_gemm, says which dots qualify):
//      c[, pre_gelu] = gemm_bias | gemm_gelu | gemm_bias_gelu(a, b[, bias])
//        for dot + broadcast(bias) [then gelu], or gelu(dot); pre_gelu
//        (a kernel_output) is gelu's argument, written when the program
//        reads it elsewhere (gelu's gradient does);
//      dx = gemm_dgelu(a, b, x)
//        for gy * gelu'(x) as autodiff writes it (ir/autodiff.h,
//        match_gelu_gradient) with gy the dot's result.
//    The kernel node carries the dot's dims and line.
//
//   before: %56 = reduce(%31) sum axes=[2] ... %77 = add(%75, %76)   (17 nodes)
//   after:  %56 = kernel(%31, %33, %35) layernorm_forward : f32[8,64,64]
//           %57 = kernel_output(%56) layernorm_forward.mean : f32[8,64,1]
//           %58 = kernel_output(%56) layernorm_forward.rstd : f32[8,64,1]
#pragma once

#include <vector>

#include "codegen/kernel_select.h"
#include "ir/ir.h"

namespace sharc {

ir::Graph use_gpu_kernels(const ir::Graph& g, std::vector<KernelChoice>* choices = nullptr);

}  // namespace sharc

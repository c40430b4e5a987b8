// Llama-style decoders (Hugging Face's LlamaForCausalLM), built from the
// DSL's primitive ops like transformer.h's GPT: RMSNorm, rotary position
// embeddings, a SwiGLU MLP and grouped-query attention. Being compositions
// of primitive ops, they need nothing new from autodiff, the oracle or the
// partitioner; tests/autodiff checks each against finite differences.
//
// Layout (Megatron's, as for the GPT): q, k and v are column-parallel over
// 'model' ("heads"), o row-parallel; gate and up column-parallel ("mlp"),
// down row-parallel; the vocabulary on 'model'. Grouped-query attention
// splits the key/value heads over 'model' too, so each device holds whole
// groups: its query heads and the key/value heads they read. The heads and
// the key/value heads must both divide by 'model'.
//
// Parameter paths: embed/embedding; h0/attn_norm/scale,
// h0/attn/{q,k,v,o}/kernel, h0/mlp_norm/scale, h0/mlp/{gate,up,down}/kernel
// (scanned: h/...); norm/scale; lm_head/kernel unless tied. Kernels are
// (in, out) as everywhere in sharc; Hugging Face's nn.Linear stores
// (out, in) (runtime/interop.h transposes).
#pragma once

#include <optional>
#include <string>

#include "dsl/layers.h"
#include "dsl/module.h"
#include "dsl/transformer.h"

namespace sharc {

// A Llama's sizes and options.
struct LlamaConfig {
  int64_t vocab = 64;       // token ids are floats in [0, vocab)
  int64_t context = 16;     // the longest sequence
  int64_t embed = 32;       // model width; divisible by heads
  int64_t heads = 4;        // query heads
  int64_t kv_heads = 2;     // key/value heads; divides heads (fewer: grouped-query attention)
  int64_t layers = 2;       // decoder blocks
  int64_t mlp_hidden = 80;  // SwiGLU's hidden width
  double epsilon = 1e-6;    // RMSNorm
  double rope_theta = 10000.0;   // the rotary base
  bool tie_embeddings = false;   // logits = x @ embed^T, else a separate lm_head
  bool scan = false;             // stacked blocks (Layers), as GPTConfig::scan
  std::string layer_axis;        // scanned: the mesh axis of the stacked layer dimension, or none

  // The Llama of a Hugging Face LlamaForCausalLM checkpoint: its
  // config.json or the folder holding it. An error at this line names the
  // file and the key (another architecture, rotary scaling, biases).
  static LlamaConfig from_hf(const std::string& path, SrcLoc loc = Here::current());
};

// Root-mean-square layer norm (Llama's): x / sqrt(mean(x^2) + epsilon) *
// scale over the last dimension, in f32; `scale` (features) starts at ones.
class RMSNorm : public Module {
 public:
  // The parameter `scale` (features) under scope `s`.
  RMSNorm(Scope s, int64_t features, double epsilon, SrcLoc loc = Here::current());
  // (..., features) -> (..., features).
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
  Param scale;  // (features)

 private:
  std::string path_;
  double epsilon_;
};

// Rotary position embeddings (RoFormer; Hugging Face's rotate_half form):
// x (batch, seq, heads, head_dim) with position t's pairs (i, i + head_dim/2)
// rotated by t * theta^(-2i / head_dim).
Tensor rotary_embedding(Tensor x, double theta, SrcLoc loc = Here::current());

// SwiGLU: silu(x @ gate) * (x @ up), then @ down.
class SwiGLU : public Module {
 public:
  // The layers gate, up and down under scope `s`.
  SwiGLU(Scope s, int64_t features, int64_t hidden, SrcLoc loc = Here::current());
  // (..., features) -> (..., features).
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
  Linear gate;  // (features, hidden)
  Linear up;    // (features, hidden)
  Linear down;  // (hidden, features)

 private:
  std::string path_;
};

// Causal self-attention with rotary embeddings and grouped-query heads:
// query head h reads key/value head h / (heads / kv_heads).
class GroupedQueryAttention : public Module {
 public:
  // The layers q, k, v and o under scope `s`, sized by `c`.
  GroupedQueryAttention(Scope s, const LlamaConfig& c, SrcLoc loc = Here::current());
  // (B, T, embed) -> (B, T, embed).
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
  Linear q;  // (embed, heads * head_dim)
  Linear k;  // (embed, kv_heads * head_dim)
  Linear v;  // (embed, kv_heads * head_dim)
  Linear o;  // (heads * head_dim, embed)

 private:
  std::string path_;
  int64_t heads_, kv_heads_, head_dim_;
  double theta_;
};

// Pre-norm decoder block: x + attn(attn_norm(x)), then + mlp(mlp_norm(x)).
class LlamaBlock : public Module {
 public:
  // The block's modules under scope `s`, sized by `c`.
  LlamaBlock(Scope s, const LlamaConfig& c, SrcLoc loc = Here::current());
  // (B, T, embed) -> (B, T, embed).
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
  RMSNorm attn_norm;           // before attention
  GroupedQueryAttention attn;  // the attention branch
  RMSNorm mlp_norm;            // before the MLP
  SwiGLU mlp;                  // the MLP branch
};

// Llama: token embedding, `layers` blocks (Layers "h"), a final RMSNorm and
// the output head.
class Llama : public Module {
 public:
  // The model's modules under scope `s`, sized by `c`.
  Llama(Scope s, const LlamaConfig& c, SrcLoc loc = Here::current());
  // (B, T) float token ids -> logits (B, T, vocab).
  Tensor operator()(Tensor ids, SrcLoc loc = Here::current()) const;
  // The configuration it was constructed with.
  const LlamaConfig& config() const { return config_; }

  Embedding embed;              // token embedding
  Layers<LlamaBlock> blocks;    // "h"
  RMSNorm norm;                 // the final norm
  std::optional<Linear> lm_head;  // the output head, unless tie_embeddings

 private:
  LlamaConfig config_;
};

}  // namespace sharc

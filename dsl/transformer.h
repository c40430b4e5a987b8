// Transformer modules for GPT-style language models, built from the DSL's
// primitive ops like module.h's Linear and LayerNorm: Embedding,
// PositionalEmbedding, CausalSelfAttention, MLPBlock, TransformerBlock, GPT.
// They name every dimension with logical axes only ("batch", "seq", "embed",
// "heads", "mlp", "vocab", "kv"); transformer_logical_rules() maps them to the
// Megatron layout, so the same model is data parallel on data=8, FSDP on
// fsdp=8, tensor parallel on model=8 and a mix on data=2,model=4.
//
// The Megatron layout: attention heads and the MLP's hidden units are split
// over 'model'. The QKV and MLP-in projections are column-parallel (output
// dimension "heads"/"mlp" -> 'model'), the attention-out and MLP-out
// projections row-parallel (input dimension on 'model'), so each block costs
// one all-reduce of the activations over 'model' per projection pair in the
// forward pass and one in the backward pass.
//
// Non-obvious decision: the fused QKV kernel (embed, 3*embed) orders its
// columns head-major, (heads, {q, k, v}, head_dim), not (q | k | v) as GPT-2's
// c_attn does. A block of 'model' columns is then whole heads with their q, k
// and v, so the reshape to (B, T, heads, 3*head_dim) and the q/k/v slices are
// local on every device; with (q | k | v) a device's columns would be a third
// of the queries and no keys. Nothing else depends on the order: the model is
// trained from scratch.
#pragma once

#include <optional>
#include <vector>

#include "dsl/layers.h"
#include "dsl/module.h"
#include "dsl/sharding_rules.h"

namespace sharc {

// A GPT's sizes and options (the GPT module below and its blocks).
struct GPTConfig {
  int64_t vocab = 96;    // token ids are floats in [0, vocab)
  int64_t context = 64;  // rows of the positional table: the longest sequence
  int64_t embed = 64;    // model width; divisible by heads
  int64_t heads = 8;     // divisible by the mesh's 'model' axis
  int64_t layers = 2;          // transformer blocks
  int64_t mlp_ratio = 4;       // MLP hidden width = mlp_ratio * embed
  double dropout = 0.1;        // on embeddings, attention weights and residual branches
  // On the attention weights alone (Hugging Face's attn_pdrop beside
  // resid_pdrop); unset: `dropout`. The GPU attention kernels have none, so
  // a program for them sets 0 here (codegen/kernel_select.h).
  std::optional<double> attention_dropout;
  double epsilon = 1e-5;       // LayerNorm
  bool tie_embeddings = true;  // logits = x @ wte^T, else a separate lm_head
  // The blocks as a scanned Layers (dsl/layers.h): parameters stacked over a
  // leading layer axis under "h/..." (laid out by layer_axis), instead of
  // one set per block under "h0/...", "h1/...". Same numbers either way.
  bool scan = false;
  std::string layer_axis;  // scanned: the mesh axis the stacked layer dimension is split over, or none

  // The GPT of a Hugging Face GPT-2 checkpoint: its config.json, or the
  // folder holding it (n_embd, n_head, n_layer, n_positions, vocab_size,
  // n_inner, layer_norm_epsilon, tie_word_embeddings, the dropout rates).
  // Blocks unrolled; set scan after. A file that cannot be read, another
  // architecture, or a setting sharc computes differently (an activation
  // other than tanh GELU, embd_pdrop unlike resid_pdrop) is an error at
  // this line naming the file and the key.
  static GPTConfig from_hf(const std::string& path, SrcLoc loc = Here::current());
};

// The logical-to-mesh rules for the modules below (Flax sharding_rules):
// batch -> data, then fsdp; heads, mlp and vocab -> model; embed, seq and kv
// (the per-head dimension) replicated. With shard_batch = false the batch is
// replicated too (a sampling program of batch 1 on data=8).
LogicalRules transformer_logical_rules(bool shard_batch = true);

// FSDP over 'fsdp' for every parameter of at least min_fsdp_size elements
// (inactive on meshes without 'fsdp'): Scalax's default threshold of 2^20
// would leave a small model replicated.
ShardingRules transformer_sharding_rules(int64_t min_fsdp_size = 1024);

// Token embedding (flax.nnx.Embed): a (num_embeddings, features) table laid
// out P("vocab", "embed"). The lookup is one_hot(ids) @ table, so with the
// vocabulary split over 'model' it is a contraction with partial sums, and
// its gradient is a dense matmul that autodiff already knows.
class Embedding : public Module {
 public:
  // The table `embedding` (num_embeddings, features) under scope `s`.
  Embedding(Scope s, int64_t num_embeddings, int64_t features,
            Initializer init = with_partitioning(normal(0.02), P("vocab", "embed")),
            SrcLoc loc = Here::current());
  // (B...) float ids -> (B..., features).
  Tensor operator()(Tensor ids, SrcLoc loc = Here::current()) const;
  // The tied output head: (..., features) -> (..., num_embeddings), x @ table^T.
  Tensor attend(Tensor x, SrcLoc loc = Here::current()) const;
  Param embedding;  // (num_embeddings, features)

 private:
  std::string path_;
  int64_t num_embeddings_;
};

// Learned absolute positions: a (context, features) table P("seq", "embed")
// whose first T rows are added to a (B, T, features) input.
class PositionalEmbedding : public Module {
 public:
  // The table `embedding` (context, features) under scope `s`.
  PositionalEmbedding(Scope s, int64_t context, int64_t features,
                      Initializer init = with_partitioning(normal(0.01), P("seq", "embed")),
                      SrcLoc loc = Here::current());
  // x (B, T, features) plus the table's first T rows.
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
  Param embedding;  // (context, features)

 private:
  std::string path_;
};

// Multi-head causal self-attention. qkv: (embed, 3*embed) column-parallel
// (head-major columns, see the file comment); proj: (embed, embed)
// row-parallel. `seed` (a scalar tensor) draws the dropout masks; an empty
// seed or a zero rate disables dropout.
class CausalSelfAttention : public Module {
 public:
  // The layers qkv and proj under scope `s`, sized by `c`.
  CausalSelfAttention(Scope s, const GPTConfig& c, SrcLoc loc = Here::current());
  // (B, T, embed) -> (B, T, embed), T <= context.
  Tensor operator()(Tensor x, Tensor seed = Tensor(), SrcLoc loc = Here::current()) const;
  Linear qkv;   // (embed, 3 * embed), columns head-major
  Linear proj;  // (embed, embed)

 private:
  std::string path_;
  int64_t heads_, head_dim_;
  double dropout_, attention_dropout_;
};

// Position-wise MLP: column-parallel fc (embed -> mlp_ratio*embed) with GELU,
// row-parallel proj back to embed.
class MLPBlock : public Module {
 public:
  // The layers fc and proj under scope `s`, sized by `c`.
  MLPBlock(Scope s, const GPTConfig& c, SrcLoc loc = Here::current());
  // (..., embed) -> (..., embed); `seed` draws the residual dropout's mask.
  Tensor operator()(Tensor x, Tensor seed = Tensor(), SrcLoc loc = Here::current()) const;
  Linear fc;    // (embed, mlp_ratio * embed), then GELU
  Linear proj;  // (mlp_ratio * embed, embed)

 private:
  std::string path_;
  double dropout_;
};

// Pre-LayerNorm block (GPT-2): x + attn(ln1(x)), then + mlp(ln2(x)).
class TransformerBlock : public Module {
 public:
  // The block's modules under scope `s`, sized by `c`.
  TransformerBlock(Scope s, const GPTConfig& c, SrcLoc loc = Here::current());
  // (B, T, embed) -> (B, T, embed); `seed` draws the dropout masks.
  Tensor operator()(Tensor x, Tensor seed = Tensor(), SrcLoc loc = Here::current()) const;
  LayerNorm ln1;             // before attention
  CausalSelfAttention attn;  // the attention branch
  LayerNorm ln2;             // before the MLP
  MLPBlock mlp;              // the MLP branch
};

// GPT: token + positional embeddings, `layers` blocks (Layers "h": scopes
// h0, h1, ..., or stacked under h when scanned), a final LayerNorm and the
// output head, tied to the token table or not. Parameter paths:
// wte/embedding, wpe/embedding, h0/attn/qkv/kernel (scanned:
// h/attn/qkv/kernel), ..., ln_f/scale, [lm_head/kernel].
class GPT : public Module {
 public:
  // The model's modules under scope `s`, sized by `c`.
  GPT(Scope s, const GPTConfig& c, SrcLoc loc = Here::current());
  // (B, T) float token ids -> logits (B, T, vocab), vocab on "vocab".
  Tensor operator()(Tensor ids, Tensor seed = Tensor(), SrcLoc loc = Here::current()) const;
  // The configuration it was constructed with.
  const GPTConfig& config() const { return config_; }

  Embedding wte;                   // token embedding
  PositionalEmbedding wpe;         // positions
  Layers<TransformerBlock> blocks;  // "h": h0, h1, ... (or stacked under h when scanned)
  LayerNorm ln_f;                  // the final LayerNorm
  std::optional<Linear> lm_head;   // the output head, unless tie_embeddings

 private:
  GPTConfig config_;
};

}  // namespace sharc

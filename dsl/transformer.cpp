// Transformer modules; see transformer.h. Parameters are attributed to the
// line that constructs the module (the user's model), ops to the lines below,
// so generated code and collectives point at the exact step of the block, and
// the layer's label ("h1/attn/proj") says which instance.
#include "dsl/transformer.h"

#include <cmath>

#include "dsl/program.h"

namespace sharc {

namespace {

// Dropout when training (a seed is given and the rate is positive).
Tensor maybe_dropout(Tensor x, double rate, Tensor seed, SrcLoc loc = Here::current()) {
  return seed.valid() && rate > 0.0 ? dropout(x, rate, seed, loc) : x;
}

// Checks a GPTConfig at the line that uses it; returns s for member initializers.
Scope checked(Scope s, const GPTConfig& c, const SrcLoc& loc) {
  auto positive = [&](int64_t v, const char* what) {
    if (v <= 0)
      user_error(loc,
                 std::string("GPTConfig.") + what + " must be positive, got " + std::to_string(v));
  };
  positive(c.vocab, "vocab");
  positive(c.context, "context");
  positive(c.embed, "embed");
  positive(c.heads, "heads");
  positive(c.layers, "layers");
  positive(c.mlp_ratio, "mlp_ratio");
  if (c.embed % c.heads != 0)
    user_error(loc, "GPTConfig: embed " + std::to_string(c.embed) + " does not divide into " +
                        std::to_string(c.heads) + " heads");
  if (c.dropout < 0.0 || c.dropout >= 1.0)
    user_error(loc, "GPTConfig: dropout " + std::to_string(c.dropout) + " is not in [0, 1)");
  return s;
}

// A (rows, cols) kernel initialised with normal(stddev) and laid out by the
// logical names of its two dimensions.
Initializer kernel(double stddev, const char* in, const char* out) {
  return with_partitioning(normal(stddev), P(in, out));
}

LinearOptions column_parallel(const char* out) {
  return {.kernel_init = kernel(0.02, "embed", out),
          .bias_init = with_partitioning(zeros(), P(out))};
}

// GPT-2 scales the residual projections' init by 1/sqrt(2 * layers) so the
// residual stream's variance does not grow with depth.
LinearOptions row_parallel(const char* in, const GPTConfig& c) {
  return {.kernel_init = kernel(0.02 / std::sqrt(2.0 * c.layers), in, "embed"),
          .bias_init = with_partitioning(zeros(), P("embed"))};
}

}  // namespace

LogicalRules transformer_logical_rules(bool shard_batch) {
  LogicalRules rules;
  if (shard_batch) {
    rules.push_back({"batch", "data"});
    rules.push_back({"batch", "fsdp"});
  } else {
    rules.push_back({"batch", std::nullopt});
  }
  for (const char* tp : {"heads", "mlp", "vocab"}) rules.push_back({tp, "model"});
  for (const char* replicated : {"embed", "seq", "kv"}) rules.push_back({replicated, std::nullopt});
  return rules;
}

ShardingRules transformer_sharding_rules(int64_t min_fsdp_size) {
  return {FSDPRule("fsdp", min_fsdp_size)};
}

// ---- Embedding

Embedding::Embedding(Scope s, int64_t num_embeddings, int64_t features, Initializer init,
                     SrcLoc loc)
    : path_(s.path()), num_embeddings_(num_embeddings) {
  embedding = s.param("embedding", {num_embeddings, features}, std::move(init), loc);
}

Tensor Embedding::operator()(Tensor ids, SrcLoc loc) const {
  if (!ids.valid()) user_error(loc, "Embedding '" + path_ + "': empty ids tensor");
  LabelScope label(*embedding.tracer(), path_);
  // (B..., vocab) x (vocab, features): contracting a 'model'-split vocab gives
  // partial sums, resolved by the partitioner. A GPU program runs the region
  // as a gather and its gradient as a scatter-add (codegen/kernel_select.h).
  CompositeScope region(*embedding.tracer(), ir::make_composite(ir::CompositeKind::kEmbedding, loc));
  const DType dt = embedding.tracer()->graph().dtype;
  return matmul(astype(one_hot(ids, num_embeddings_), dt), astype(embedding, dt));
}

Tensor Embedding::attend(Tensor x, SrcLoc loc) const {
  if (!x.valid() || x.rank() == 0 || x.dim(-1) != embedding.dim(1))
    user_error(loc, "Embedding '" + path_ + "'.attend: " + x.describe() + " must end in the " +
                        std::to_string(embedding.dim(1)) + " features of " + embedding.describe());
  LabelScope label(*embedding.tracer(), path_);
  const DType dt = embedding.tracer()->graph().dtype;
  return matmul(astype(x, dt), transpose(astype(embedding, dt), {1, 0}));
}

// ---- PositionalEmbedding

PositionalEmbedding::PositionalEmbedding(Scope s, int64_t context, int64_t features,
                                         Initializer init, SrcLoc loc)
    : path_(s.path()) {
  embedding = s.param("embedding", {context, features}, std::move(init), loc);
}

Tensor PositionalEmbedding::operator()(Tensor x, SrcLoc loc) const {
  if (!x.valid() || x.rank() != 3 || x.dim(2) != embedding.dim(1) || x.dim(1) > embedding.dim(0))
    user_error(loc, "PositionalEmbedding '" + path_ + "': input " + x.describe() +
                        " must be (batch, seq <= " + std::to_string(embedding.dim(0)) + ", " +
                        std::to_string(embedding.dim(1)) + ")");
  LabelScope label(*embedding.tracer(), path_);
  const int64_t t = x.dim(1);
  Tensor rows = t == embedding.dim(0) ? Tensor(embedding) : slice(embedding, 0, 0, t);
  return add(x, astype(rows, x.dtype()));  // (B, T, E) + (T, E)
}

// ---- CausalSelfAttention

CausalSelfAttention::CausalSelfAttention(Scope s, const GPTConfig& c, SrcLoc loc)
    : qkv(checked(s, c, loc) / "qkv", c.embed, 3 * c.embed, column_parallel("heads"), loc),
      proj(s / "proj", c.embed, c.embed, row_parallel("heads", c), loc),
      path_(s.path()),
      heads_(c.heads),
      head_dim_(c.embed / c.heads),
      dropout_(c.dropout),
      attention_dropout_(c.attention_dropout.value_or(c.dropout)) {}

Tensor CausalSelfAttention::operator()(Tensor x, Tensor seed, SrcLoc loc) const {
  if (!x.valid() || x.rank() != 3 || x.dim(2) != heads_ * head_dim_)
    user_error(loc, "CausalSelfAttention '" + path_ + "': input " + x.describe() +
                        " must be (batch, seq, " + std::to_string(heads_ * head_dim_) + ")");
  LabelScope label(*qkv.kernel.tracer(), path_);
  const int64_t b = x.dim(0), t = x.dim(1), h = heads_, d = head_dim_;
  // (B, T, 3E) -> (B, T, H, 3*Dh): columns are head-major, so each device's
  // block of 'model' columns is whole heads. Pinning the heads dimension here
  // is what reports heads % model != 0 at this line.
  Tensor fused = reshape(qkv(x), {b, t, h, 3 * d});
  fused = with_sharding_constraint(fused, P("batch", "seq", "heads", "kv"));
  Tensor y;
  {
    // From the packed projection to the heads' outputs: one composite
    // region, an attention kernel's work on a GPU (ir::Composite).
    ir::Composite attention = ir::make_composite(ir::CompositeKind::kAttention, loc);
    attention.heads = h;
    attention.head_dim = d;
    attention.causal = true;
    attention.dropout = seed.valid() ? attention_dropout_ : 0.0;
    CompositeScope region(*qkv.kernel.tracer(), std::move(attention));
    // (B, T, H, Dh) -> (B, H, T, Dh); the 1/sqrt(Dh) goes on q (T*Dh, not T*T, multiplies).
    Tensor q =
        mul(transpose(slice(fused, 3, 0, d), {0, 2, 1, 3}), 1.0 / std::sqrt(static_cast<double>(d)));
    Tensor k_t = transpose(slice(fused, 3, d, d), {0, 2, 3, 1});    // (B, H, Dh, T)
    Tensor v = transpose(slice(fused, 3, 2 * d, d), {0, 2, 1, 3});  // (B, H, T, Dh)
    // Causal mask: key position j > query position i gets -1e9, which exp()
    // turns into exactly 0 in fp32 and fp64 alike.
    Tensor future = greater(iota({t, t}, 1), iota({t, t}, 0));  // (T, T)
    Tensor scores = add(matmul(q, k_t), astype(mul(future, -1e9), q.dtype()));  // (B, H, T, T)
    Tensor weights = maybe_dropout(softmax(scores, -1), attention_dropout_, seed);
    y = transpose(matmul(weights, v), {0, 2, 1, 3});  // (B, T, H, Dh)
  }
  y = proj(reshape(y, {b, t, h * d}));  // row-parallel
  return maybe_dropout(y, dropout_, seed);
}

// ---- MLPBlock

MLPBlock::MLPBlock(Scope s, const GPTConfig& c, SrcLoc loc)
    : fc(checked(s, c, loc) / "fc", c.embed, c.mlp_ratio * c.embed, column_parallel("mlp"), loc),
      proj(s / "proj", c.mlp_ratio * c.embed, c.embed, row_parallel("mlp", c), loc),
      path_(s.path()),
      dropout_(c.dropout) {}

Tensor MLPBlock::operator()(Tensor x, Tensor seed, SrcLoc loc) const {
  if (!x.valid() || x.rank() == 0 || x.dim(-1) != fc.kernel.dim(0))
    user_error(loc, "MLPBlock '" + path_ + "': input " + x.describe() + " must end in " +
                        std::to_string(fc.kernel.dim(0)) + " features");
  LabelScope label(*fc.kernel.tracer(), path_);
  Tensor h = gelu(fc(x));                         // (..., mlp): column-parallel
  return maybe_dropout(proj(h), dropout_, seed);  // row-parallel: summed over 'model'
}

// ---- TransformerBlock

TransformerBlock::TransformerBlock(Scope s, const GPTConfig& c, SrcLoc loc)
    : ln1(checked(s, c, loc) / "ln1", c.embed, {.epsilon = c.epsilon}, loc),
      attn(s / "attn", c, loc),
      ln2(s / "ln2", c.embed, {.epsilon = c.epsilon}, loc),
      mlp(s / "mlp", c, loc) {}

Tensor TransformerBlock::operator()(Tensor x, Tensor seed, SrcLoc loc) const {
  x = add(x, attn(ln1(x), seed, loc));
  return add(x, mlp(ln2(x), seed, loc));
}

// ---- GPT

GPT::GPT(Scope s, const GPTConfig& c, SrcLoc loc)
    : wte(checked(s, c, loc) / "wte", c.vocab, c.embed,
          with_partitioning(normal(0.02), P("vocab", "embed")), loc),
      wpe(s / "wpe", c.context, c.embed, with_partitioning(normal(0.01), P("seq", "embed")), loc),
      blocks(s / "h", c.layers, [c, loc](Scope s) { return TransformerBlock(s, c, loc); },
             {.scan = c.scan, .layer_axis = c.layer_axis}, loc),
      ln_f(s / "ln_f", c.embed, {.epsilon = c.epsilon}, loc),
      config_(c) {
  if (!c.tie_embeddings)
    lm_head.emplace(s / "lm_head", c.embed, c.vocab,
                    LinearOptions{.kernel_init = kernel(0.02, "embed", "vocab"), .use_bias = false},
                    loc);
}

Tensor GPT::operator()(Tensor ids, Tensor seed, SrcLoc loc) const {
  if (!ids.valid() || ids.rank() != 2 || ids.dim(1) > config_.context)
    user_error(loc, "GPT: token ids " + ids.describe() +
                        " must be (batch, seq <= " + std::to_string(config_.context) + ")");
  if (seed.valid() && seed.rank() != 0)
    user_error(loc, "GPT: the dropout seed must be a scalar, got " + seed.describe());
  Tensor x = maybe_dropout(wpe(wte(ids)), config_.dropout, seed);
  // Unrolled, each block is a PipelineLayer (no effect without set_pipeline).
  x = blocks(x, [&](const TransformerBlock& block, Tensor x) { return block(x, seed); }, loc);
  x = ln_f(x);
  return lm_head ? (*lm_head)(x) : wte.attend(x);
}

}  // namespace sharc

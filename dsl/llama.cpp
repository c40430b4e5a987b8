// Llama-style decoders; see llama.h.
#include "dsl/llama.h"

#include <cmath>

#include "dsl/program.h"

namespace sharc {

namespace {

// Checks a LlamaConfig at the line that uses it; returns s for member initializers.
Scope checked(Scope s, const LlamaConfig& c, const SrcLoc& loc) {
  auto positive = [&](int64_t v, const char* what) {
    if (v <= 0) user_error(loc, std::string("LlamaConfig.") + what + " must be positive, got " + std::to_string(v));
  };
  positive(c.vocab, "vocab");
  positive(c.context, "context");
  positive(c.embed, "embed");
  positive(c.heads, "heads");
  positive(c.kv_heads, "kv_heads");
  positive(c.layers, "layers");
  positive(c.mlp_hidden, "mlp_hidden");
  if (c.embed % c.heads != 0)
    user_error(loc, "LlamaConfig: embed " + std::to_string(c.embed) + " does not divide into " +
                        std::to_string(c.heads) + " heads");
  if ((c.embed / c.heads) % 2 != 0)
    user_error(loc, "LlamaConfig: the head size " + std::to_string(c.embed / c.heads) +
                        " is odd; rotary embeddings rotate pairs of its elements");
  if (c.heads % c.kv_heads != 0)
    user_error(loc, "LlamaConfig: kv_heads " + std::to_string(c.kv_heads) + " does not divide the " +
                        std::to_string(c.heads) + " heads");
  return s;
}

LinearOptions projection(const char* in, const char* out) {
  return {.kernel_init = with_partitioning(normal(0.02), P(in, out)), .use_bias = false};
}

}  // namespace

// ---- RMSNorm

RMSNorm::RMSNorm(Scope s, int64_t features, double epsilon, SrcLoc loc) : path_(s.path()), epsilon_(epsilon) {
  scale = s.param("scale", {features}, with_partitioning(ones(), P("embed")), loc);
}

Tensor RMSNorm::operator()(Tensor x, SrcLoc loc) const {
  if (!x.valid() || x.rank() == 0 || x.dim(-1) != scale.dim(0))
    user_error(loc, "RMSNorm '" + path_ + "': input " + x.describe() + " must end in " +
                        std::to_string(scale.dim(0)) + " features");
  LabelScope label(*scale.tracer(), path_);
  const DType in = x.dtype();
  x = astype(x, DType::kF32, loc);  // the statistic in f32, as Hugging Face's
  Tensor rms = sqrt(add(mean(mul(x, x, loc), {-1}, /*keepdims=*/true, loc), epsilon_, loc), loc);
  return astype(mul(div(x, rms, loc), astype(scale, DType::kF32, loc), loc), in, loc);
}

// ---- rotary embeddings

Tensor rotary_embedding(Tensor x, double theta, SrcLoc loc) {
  if (!x.valid() || x.rank() != 4 || x.dim(3) % 2 != 0)
    user_error(loc, "rotary_embedding: " + x.describe() + " must be (batch, seq, heads, head_dim) with an even head_dim");
  const int64_t t = x.dim(1), half = x.dim(3) / 2;
  // angle(t, i) = t * theta^(-2i / head_dim), as (seq, 1, half) against (B, T, H, half).
  Tensor inv_freq = exp(mul(iota({t, 1, half}, 2, loc), -2.0 * std::log(theta) / static_cast<double>(x.dim(3)), loc), loc);
  Tensor angle = mul(iota({t, 1, half}, 0, loc), inv_freq, loc);
  Tensor c = astype(cos(angle, loc), x.dtype(), loc), s = astype(sin(angle, loc), x.dtype(), loc);
  Tensor x1 = slice(x, 3, 0, half, loc), x2 = slice(x, 3, half, half, loc);
  // (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), the halves joined by padding.
  Tensor first = sub(mul(x1, c, loc), mul(x2, s, loc), loc);
  Tensor second = add(mul(x2, c, loc), mul(x1, s, loc), loc);
  return add(pad(first, 3, 0, half, loc), pad(second, 3, half, 0, loc), loc);
}

// ---- SwiGLU

SwiGLU::SwiGLU(Scope s, int64_t features, int64_t hidden, SrcLoc loc)
    : gate(s / "gate", features, hidden, projection("embed", "mlp"), loc),
      up(s / "up", features, hidden, projection("embed", "mlp"), loc),
      down(s / "down", hidden, features, projection("mlp", "embed"), loc),
      path_(s.path()) {}

Tensor SwiGLU::operator()(Tensor x, SrcLoc loc) const {
  LabelScope label(*gate.kernel.tracer(), path_);
  Tensor g = gate(x, loc);
  return down(mul(mul(g, sigmoid(g, loc), loc), up(x, loc), loc), loc);  // silu(g) * up
}

// ---- GroupedQueryAttention

GroupedQueryAttention::GroupedQueryAttention(Scope s, const LlamaConfig& c, SrcLoc loc)
    : q(checked(s, c, loc) / "q", c.embed, c.embed, projection("embed", "heads"), loc),
      k(s / "k", c.embed, c.kv_heads * (c.embed / c.heads), projection("embed", "heads"), loc),
      v(s / "v", c.embed, c.kv_heads * (c.embed / c.heads), projection("embed", "heads"), loc),
      o(s / "o", c.embed, c.embed, projection("heads", "embed"), loc),
      path_(s.path()),
      heads_(c.heads),
      kv_heads_(c.kv_heads),
      head_dim_(c.embed / c.heads),
      theta_(c.rope_theta) {}

Tensor GroupedQueryAttention::operator()(Tensor x, SrcLoc loc) const {
  if (!x.valid() || x.rank() != 3 || x.dim(2) != heads_ * head_dim_)
    user_error(loc, "GroupedQueryAttention '" + path_ + "': input " + x.describe() + " must be (batch, seq, " +
                        std::to_string(heads_ * head_dim_) + ")");
  LabelScope label(*q.kernel.tracer(), path_);
  const int64_t b = x.dim(0), t = x.dim(1), h = heads_, kv = kv_heads_, d = head_dim_, group = h / kv;
  const P heads_layout("batch", "seq", "heads", "kv");
  // Pinning the heads here is what reports heads % model != 0 (and kv_heads
  // % model) at this line.
  Tensor qh = with_sharding_constraint(reshape(q(x, loc), {b, t, h, d}, loc), heads_layout, loc);
  Tensor kh = with_sharding_constraint(reshape(k(x, loc), {b, t, kv, d}, loc), heads_layout, loc);
  Tensor vh = with_sharding_constraint(reshape(v(x, loc), {b, t, kv, d}, loc), heads_layout, loc);
  qh = rotary_embedding(qh, theta_, loc);
  kh = rotary_embedding(kh, theta_, loc);
  // Each key/value head serves `group` query heads, its own run of them.
  auto repeat = [&](Tensor y) {
    if (group == 1) return y;
    Tensor r = broadcast_to(reshape(y, {b, t, kv, 1, d}, loc), {b, t, kv, group, d}, loc);
    return with_sharding_constraint(reshape(r, {b, t, h, d}, loc), heads_layout, loc);
  };
  Tensor qt = mul(transpose(qh, {0, 2, 1, 3}, loc), 1.0 / std::sqrt(static_cast<double>(d)), loc);  // (B, H, T, D)
  Tensor kt = transpose(repeat(kh), {0, 2, 3, 1}, loc);                                            // (B, H, D, T)
  Tensor vt = transpose(repeat(vh), {0, 2, 1, 3}, loc);                                            // (B, H, T, D)
  Tensor future = greater(iota({t, t}, 1, loc), iota({t, t}, 0, loc), loc);
  Tensor scores = add(matmul(qt, kt, loc), astype(mul(future, -1e9, loc), qt.dtype(), loc), loc);
  Tensor y = transpose(matmul(softmax(scores, -1, loc), vt, loc), {0, 2, 1, 3}, loc);  // (B, T, H, D)
  return o(reshape(y, {b, t, h * d}, loc), loc);
}

// ---- LlamaBlock

LlamaBlock::LlamaBlock(Scope s, const LlamaConfig& c, SrcLoc loc)
    : attn_norm(checked(s, c, loc) / "attn_norm", c.embed, c.epsilon, loc),
      attn(s / "attn", c, loc),
      mlp_norm(s / "mlp_norm", c.embed, c.epsilon, loc),
      mlp(s / "mlp", c.embed, c.mlp_hidden, loc) {}

Tensor LlamaBlock::operator()(Tensor x, SrcLoc loc) const {
  x = add(x, attn(attn_norm(x, loc), loc), loc);
  return add(x, mlp(mlp_norm(x, loc), loc), loc);
}

// ---- Llama

Llama::Llama(Scope s, const LlamaConfig& c, SrcLoc loc)
    : embed(checked(s, c, loc) / "embed", c.vocab, c.embed, with_partitioning(normal(0.02), P("vocab", "embed")), loc),
      blocks(s / "h", c.layers, [c, loc](Scope s) { return LlamaBlock(s, c, loc); },
             {.scan = c.scan, .layer_axis = c.layer_axis}, loc),
      norm(s / "norm", c.embed, c.epsilon, loc),
      config_(c) {
  if (!c.tie_embeddings) lm_head.emplace(s / "lm_head", c.embed, c.vocab, projection("embed", "vocab"), loc);
}

Tensor Llama::operator()(Tensor ids, SrcLoc loc) const {
  if (!ids.valid() || ids.rank() != 2 || ids.dim(1) > config_.context)
    user_error(loc, "Llama: token ids " + ids.describe() + " must be (batch, seq <= " +
                        std::to_string(config_.context) + ")");
  Tensor x = embed(ids, loc);
  x = blocks(x, [&](const LlamaBlock& block, Tensor x) { return block(x, loc); }, loc);
  x = norm(x, loc);
  return lm_head ? (*lm_head)(x, loc) : embed.attend(x, loc);
}

}  // namespace sharc

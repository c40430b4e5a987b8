// TPDense / TPAsyncDense: dense layers with explicit per-device communication.
#include "dsl/tp_dense.h"

namespace sharc {

namespace {

TPDenseOptions with_mode(TPDenseOptions o, TPMode mode) {
  o.mode = mode;
  return o;
}

void check_input(const Tensor& x, int64_t in, const char* what, const SrcLoc& loc) {
  if (!x.valid()) user_error(loc, std::string(what) + " of an empty Tensor");
  if (x.rank() < 2 || x.dim(-1) != in)
    user_error(loc, std::string(what) + " expects (..., " + std::to_string(in) + ") with a batch dimension, got " +
                        x.describe());
}

}  // namespace

P TPDense::x_spec(const TPDenseOptions& o, size_t rank) {
  std::vector<DimSpec> d(rank);
  if (o.batch_axis) d[0] = DimSpec(*o.batch_axis);
  if (o.mode != TPMode::kNone) d[rank - 1] = DimSpec(o.axis);
  return P(std::move(d));
}

P TPDense::kernel_spec(const TPDenseOptions& o) {
  return o.mode == TPMode::kScatter ? P(o.axis, None) : P(None, o.axis);
}

P TPDense::y_spec(const TPDenseOptions& o, size_t rank) {
  std::vector<DimSpec> d(rank);
  if (o.batch_axis) d[0] = DimSpec(*o.batch_axis);
  d[rank - 1] = DimSpec(o.axis);
  return P(std::move(d));
}

TPDense::TPDense(Scope s, int64_t in_features, int64_t out_features, TPDenseOptions o, SrcLoc loc)
    : path_(s.path()), o_(std::move(o)), in_(in_features), out_(out_features) {
  kernel = s.param("kernel", {in_features, out_features}, with_partitioning(o_.kernel_init, kernel_spec(o_)), loc);
  if (o_.use_bias) bias = s.param("bias", {out_features}, with_partitioning(o_.bias_init, P(o_.axis)), loc);
}

Tensor TPDense::operator()(Tensor x, SrcLoc loc) const {
  check_input(x, in_, "TPDense", loc);
  LabelScope label(*kernel.tracer(), path_);
  const TPDenseOptions o = o_;
  const bool has_bias = bias.valid();
  std::vector<Tensor> args{x, kernel};
  std::vector<P> in_specs{x_spec(o, x.rank()), kernel_spec(o)};
  if (has_bias) {
    args.push_back(bias);
    in_specs.push_back(P(o.axis));
  }
  std::vector<int64_t> out_shape = x.shape();
  out_shape.back() = out_;
  auto body = [o, has_bias, loc](const std::vector<Tensor>& b) {
    Tensor xl = b[0];
    const int last = static_cast<int>(xl.rank()) - 1;
    if (o.mode == TPMode::kGather) xl = all_gather(xl, o.axis, last, loc);
    Tensor y = matmul(xl, b[1], loc);
    if (o.mode == TPMode::kScatter) y = psum_scatter(y, o.axis, last, loc);
    if (has_bias) y = add(y, b[2], loc);
    return std::vector<Tensor>{y};
  };
  return shard_map(body, args, in_specs, {y_spec(o, x.rank())}, {out_shape}, loc)[0];
}

TPAsyncDense::TPAsyncDense(Scope s, int64_t in_features, int64_t out_features, TPDenseOptions o, SrcLoc loc)
    : TPDense(s, in_features, out_features, with_mode(std::move(o), TPMode::kGather), loc) {}

Tensor TPAsyncDense::operator()(Tensor x, SrcLoc loc) const {
  check_input(x, in_, "TPAsyncDense", loc);
  LabelScope label(*kernel.tracer(), path_);
  const TPDenseOptions o = o_;
  const bool has_bias = bias.valid();
  const int64_t in = in_;
  std::vector<Tensor> args{x, kernel};
  std::vector<P> in_specs{x_spec(o, x.rank()), kernel_spec(o)};
  if (has_bias) {
    args.push_back(bias);
    in_specs.push_back(P(o.axis));
  }
  std::vector<int64_t> out_shape = x.shape();
  out_shape.back() = out_;
  auto body = [o, has_bias, in, loc](const std::vector<Tensor>& b) {
    Tensor block = b[0];
    const Tensor& k = b[1];  // (in, out / n): every row block of the kernel
    const int64_t piece = block.dim(-1);
    const int n = static_cast<int>(in / piece);
    // The kernel as n row blocks: (n, in / n, out / n).
    const Tensor k3 = reshape(k, {n, piece, k.dim(1)}, loc);
    const Tensor p = axis_index(o.axis, loc);
    const Tensor blocks = iota({n}, 0, loc);
    std::vector<std::pair<int, int>> right;
    for (int j = 0; j < n; ++j) right.emplace_back(j, (j + 1) % n);
    Tensor acc;
    for (int step = 0; step < n; ++step) {
      // This step's block is (p - step) mod n: select its kernel rows with a
      // 0/1 vector, (p - step) + n * (0 > p - step) == iota.
      Tensor w = add(p, static_cast<double>(-step), loc);
      Tensor wrapped = add(w, mul(greater(full({}, 0.0, loc), w, loc), static_cast<double>(n), loc), loc);
      Tensor select = equal(blocks, wrapped, loc);  // (n)
      Tensor rows = dot_general(select, k3, {{}, {}, {0}, {0}}, loc);  // (in / n, out / n)
      // Start the block's trip to the right neighbour before this step's GEMM.
      Tensor next = step + 1 < n ? ppermute(block, o.axis, right, loc) : Tensor();
      Tensor y = matmul(block, rows, loc);
      acc = acc.valid() ? add(acc, y, loc) : y;
      if (next.valid()) block = next;
    }
    if (has_bias) acc = add(acc, b[2], loc);
    return std::vector<Tensor>{acc};
  };
  return shard_map(body, args, in_specs, {y_spec(o, x.rank())}, {out_shape}, loc)[0];
}

}  // namespace sharc

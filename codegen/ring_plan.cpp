// ring_plan(): the per-step shapes of a RingDot; see ring_plan.h.
#include "codegen/ring_plan.h"

#include <algorithm>

namespace sharc {

namespace {

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Dimensions of an operand that are neither batch nor contracting, in order:
// they appear in the dot's result in this order.
std::vector<int> free_dims(size_t rank, const std::vector<int>& batch,
                           const std::vector<int>& contract) {
  std::vector<int> f;
  for (int i = 0; i < static_cast<int>(rank); ++i)
    if (!contains(batch, i) && !contains(contract, i)) f.push_back(i);
  return f;
}

int64_t outer(const ir::Shape& s, int dim) {
  int64_t o = 1;
  for (int d = 0; d < dim; ++d) o *= s[d];
  return o;
}

int index_of(const std::vector<int>& v, int x) {
  return static_cast<int>(std::find(v.begin(), v.end(), x) - v.begin());
}

}  // namespace

RingPlan ring_plan(const ir::Node& n, const ir::Shape& lhs, const ir::Shape& rhs, int ring) {
  if (n.op != ir::Op::kRingDot) internal_error("ring_plan of a non-ring_dot node");
  RingPlan p;
  p.n = ring;
  p.halves = n.ring.direction == RingDirection::kBidirectional ? 2 : 1;
  p.gather = n.ring.kind == ir::RingKind::kGather;
  p.operand[0] = p.step_operand[0] = lhs;
  p.operand[1] = p.step_operand[1] = rhs;
  p.result = p.step_result = n.shape;
  const ir::DotDims& d = n.dot;
  const std::vector<int> lfree = free_dims(lhs.size(), d.lhs_batch, d.lhs_contract);
  const std::vector<int> rfree = free_dims(rhs.size(), d.rhs_batch, d.rhs_contract);
  const int nb = static_cast<int>(d.lhs_batch.size());
  const int nlf = static_cast<int>(lfree.size());

  if (p.gather) {
    const int w = n.ring.operand;
    p.moving = w;
    p.move_dim = n.dim;
    p.step_operand[w][n.dim] /= p.halves;
    const std::vector<int>& batch = w == 0 ? d.lhs_batch : d.rhs_batch;
    if (contains(batch, n.dim)) {
      // A batch dimension: the other operand holds all n blocks of it.
      const int i = index_of(batch, n.dim);
      p.sliced = 1 - w;
      p.slice_dim = (w == 0 ? d.rhs_batch : d.lhs_batch)[i];
      p.out_dim = i;
    } else {
      p.out_dim = w == 0 ? nb + index_of(lfree, n.dim) : nb + nlf + index_of(rfree, n.dim);
    }
    p.out_parts = p.pieces();
    p.out_contiguous = outer(p.result, p.out_dim) == 1;
  } else {
    const int k = n.dim - nb;  // index among the result's free dimensions
    p.sliced = k < nlf ? 0 : 1;
    p.slice_dim = k < nlf ? lfree[k] : rfree[k - nlf];
    p.out_dim = n.dim;
    p.out_parts = p.halves;
    p.out_contiguous = p.halves == 1 || outer(p.result, p.out_dim) == 1;
  }
  p.step_result[p.out_dim] /= p.gather ? p.pieces() : p.halves;
  if (p.sliced >= 0) {
    p.step_operand[p.sliced][p.slice_dim] /= p.pieces();
    p.slice_contiguous = outer(p.operand[p.sliced], p.slice_dim) == 1;
  }
  if (ir::dot_shape(p.step_operand[0], p.step_operand[1], d) != p.step_result)
    internal_error("ring_plan: a step's dot does not make a piece of the result");
  return p;
}

int ring_block(bool gather, int half, int step, int position, int n) {
  const int shift = gather ? step : step + 1;
  const int b = half == 0 ? position - shift : position + shift;
  return ((b % n) + n) % n;
}

}  // namespace sharc

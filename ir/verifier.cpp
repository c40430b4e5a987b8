// The IR verifier: checks the Constraints of every op (listed here, one
// `fail_if` each) and the graph-level invariants (topological order, outputs,
// shardings consistent with the mesh). It runs at pipeline entry and exit, and
// after every pass when the pipeline is asked to (PipelineOptions::verify_each).
#include <algorithm>
#include <set>

#include "ir/ir.h"

namespace sharc::ir {

namespace {

struct Checker {
  const Graph& g;
  int id = 0;

  void fail_if(bool bad, const std::string& what) const {
    if (bad) internal_error("IR verification failed at " + node_str(g, id) + ": " + what);
  }

  bool is_perm(const std::vector<int>& p, size_t n) const {
    if (p.size() != n) return false;
    std::vector<int> s = p;
    std::sort(s.begin(), s.end());
    for (size_t i = 0; i < n; ++i)
      if (s[i] != static_cast<int>(i)) return false;
    return true;
  }

  void check_sharding(const Sharding& s, const Shape& shape, bool local) const {
    fail_if(s.rank() != shape.size(), "sharding rank differs from tensor rank");
    std::set<std::string> seen;
    for (auto& a : s.used_axes()) {
      fail_if(!g.mesh.has(a), "sharding names unknown mesh axis \"" + a + "\"");
      fail_if(!seen.insert(a).second, "mesh axis \"" + a + "\" used twice");
    }
    if (!local)
      for (size_t d = 0; d < shape.size(); ++d)
        fail_if(shape[d] % s.parts(g.mesh, d) != 0, "dimension " + std::to_string(d) +
                                                        " does not divide by its axes");
  }

  static bool in_range(const std::vector<int>& v, const Shape& s) {
    for (int x : v)
      if (x < 0 || x >= static_cast<int>(s.size())) return false;
    return true;
  }

  static bool contains(const std::vector<int>& v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  }

  // Dot and RingDot: dimension lists pair up, are in range, sizes agree, and
  // `result` is dot_shape(l, r, d).
  void check_dot(const Shape& l, const Shape& r, const DotDims& d, const Shape& result) const {
    fail_if(
        d.lhs_batch.size() != d.rhs_batch.size() || d.lhs_contract.size() != d.rhs_contract.size(),
        "unpaired dot dimensions");
    fail_if(!in_range(d.lhs_batch, l) || !in_range(d.lhs_contract, l) ||
                !in_range(d.rhs_batch, r) || !in_range(d.rhs_contract, r),
            "dot dimension out of range");
    if (!in_range(d.lhs_batch, l) || !in_range(d.rhs_batch, r)) return;
    for (size_t i = 0; i < d.lhs_batch.size(); ++i)
      fail_if(l[d.lhs_batch[i]] != r[d.rhs_batch[i]], "batch size mismatch");
    for (size_t i = 0; i < d.lhs_contract.size(); ++i)
      fail_if(l[d.lhs_contract[i]] != r[d.rhs_contract[i]], "contraction size mismatch");
    fail_if(dot_shape(l, r, d) != result, "dot result shape mismatch");
  }

  // The Constraints of RingDot, as listed at RingAttrs in ir.h.
  void check_ring_dot(const Node& n, const Shape& lhs, const Shape& rhs) const {
    // Constraints: one mesh axis, of size >= 2.
    fail_if(n.axes.size() != 1, "ring_dot runs over exactly one mesh axis");
    if (n.axes.size() != 1) return;
    fail_if(!g.mesh.has(n.axes[0]), "unknown mesh axis \"" + n.axes[0] + "\"");
    if (!g.mesh.has(n.axes[0])) return;
    const int64_t ring = g.mesh.size(n.axes[0]);
    fail_if(ring < 2, "ring_dot over an axis of size " + std::to_string(ring));
    const bool bidirectional = n.ring.direction == RingDirection::kBidirectional;
    const DotDims& d = n.dot;
    if (n.ring.kind == RingKind::kGather) {
      // Constraints: the travelling operand is lhs or rhs, `dim` one of its
      // batch or free dimensions; the result is the dot of the gathered operand.
      fail_if(n.ring.operand != 0 && n.ring.operand != 1, "ring_dot gathers neither lhs nor rhs");
      if (n.ring.operand != 0 && n.ring.operand != 1) return;
      Shape l = lhs, r = rhs;
      Shape& x = n.ring.operand == 0 ? l : r;
      const std::vector<int>& contract = n.ring.operand == 0 ? d.lhs_contract : d.rhs_contract;
      fail_if(n.dim < 0 || n.dim >= static_cast<int>(x.size()), "ring_dot gather dim out of range");
      if (n.dim < 0 || n.dim >= static_cast<int>(x.size())) return;
      fail_if(contains(contract, n.dim), "ring_dot gathers a contracting dimension");
      // Constraints: bidirectional halves split the travelling block evenly.
      fail_if(bidirectional && x[n.dim] % 2 != 0,
              "bidirectional ring_dot block does not split in halves");
      x[n.dim] *= ring;
      check_dot(l, r, d, n.shape);
      return;
    }
    // Constraints: kScatter: `dim` is a free dimension of the result, which
    // is the dot's block along it.
    const int rank = static_cast<int>(n.shape.size());
    fail_if(n.dim < static_cast<int>(d.lhs_batch.size()) || n.dim >= rank,
            "ring_dot scatter dim is not a free dimension of the result");
    if (n.dim < static_cast<int>(d.lhs_batch.size()) || n.dim >= rank) return;
    fail_if(bidirectional && n.shape[n.dim] % 2 != 0,
            "bidirectional ring_dot block does not split in halves");
    Shape full = n.shape;
    full[n.dim] *= ring;
    check_dot(lhs, rhs, d, full);
  }

  void check(const Node& n) {
    const Op op = n.op;
    // Constraints: operands precede their user (the list is topologically ordered).
    for (int a : n.args) fail_if(a < 0 || a >= id, "operand %" + std::to_string(a) + " is not defined before use");
    // Constraints: operand count matches the op's arity.
    fail_if(op_arity(op) >= 0 && static_cast<int>(n.args.size()) != op_arity(op), "wrong operand count");
    for (auto d : n.shape) fail_if(d <= 0, "non-positive dimension");
    auto arg = [&](int i) -> const Node& { return g.nodes[n.args[i]]; };
    // Constraints: collectives and local slices appear only in partitioned IR.
    fail_if((is_collective(op) || op == Op::kLocalSlice || op == Op::kRingDot || op == Op::kPPermute ||
             op == Op::kAxisIndex || op == Op::kSend || op == Op::kRecv || op == Op::kKernel ||
             op == Op::kKernelOutput) &&
                !g.partitioned,
            "collective in a global (unpartitioned) program");
    // Constraints: shard_map appears only in global IR.
    fail_if(op == Op::kShardMap && g.partitioned, "shard_map in a per-device program");
    if (n.sharding) check_sharding(*n.sharding, n.shape, g.partitioned);

    // Constraints: element types. Ops that follow their operand's type have
    // it; binary ops and dots take operands of one type; i32 is only moved,
    // compared, added, multiplied and converted; random numbers are f32.
    if (dtype_follows_operand(op) && static_cast<int>(n.args.size()) > dtype_operand(op))
      fail_if(n.dtype != arg(dtype_operand(op)).dtype,
              std::string("element type ") + dtype_name(n.dtype).data() +
                  " differs from its operand's " + dtype_name(arg(dtype_operand(op)).dtype).data());
    if (is_binary(op) || op == Op::kDot || op == Op::kRingDot)
      fail_if(arg(0).dtype != arg(1).dtype, "operands of different element types");
    if (op == Op::kSelect)
      fail_if(arg(1).dtype != arg(2).dtype, "select branches of different element types");
    if (n.dtype == DType::kI32 || (!n.args.empty() && arg(dtype_operand(op)).dtype == DType::kI32 &&
                                   op != Op::kConvert)) {
      const bool integer_op =
          is_source(op) || op == Op::kConvert || op == Op::kAdd || op == Op::kSub ||
          op == Op::kMul || op == Op::kMax || op == Op::kMin || op == Op::kGreater ||
          op == Op::kEqual || op == Op::kNeg || op == Op::kAbs || op == Op::kSelect ||
          op == Op::kBroadcast || op == Op::kReshape ||
          op == Op::kTranspose || op == Op::kSlice || op == Op::kPad || op == Op::kAddSlice || op == Op::kReduce ||
          op == Op::kShardingConstraint || is_collective(op) || op == Op::kLocalSlice ||
          op == Op::kPPermute || op == Op::kShardMap || op == Op::kSend || op == Op::kRecv ||
          op == Op::kKernel || op == Op::kKernelOutput;
      fail_if(!integer_op, std::string(op_name(op)) + " on i32 values");
    }
    fail_if(op == Op::kRandomUniform && n.dtype != DType::kF32, "random_uniform is f32");

    if (is_binary(op) || is_ternary(op)) {
      // Constraints: binary and ternary elementwise operands and result have one shape.
      for (size_t a = 0; a < n.args.size(); ++a)
        fail_if(arg(static_cast<int>(a)).shape != n.shape, "elementwise shapes differ");
    } else if (is_unary(op) || op == Op::kShardingConstraint) {
      fail_if(arg(0).shape != n.shape, "shape differs from operand");
    }
    switch (op) {
      case Op::kParameter:
      case Op::kInput:
        // Constraints: sources are named.
        fail_if(n.name.empty(), "unnamed source");
        break;
      case Op::kBroadcast: {
        // Constraints: ints maps each operand dim to a strictly increasing output
        // dim whose size equals the operand's, or the operand dim is 1.
        const Shape& in = arg(0).shape;
        fail_if(n.ints.size() != in.size(), "broadcast dims size differs from operand rank");
        for (size_t i = 0; i < in.size(); ++i) {
          int o = n.ints[i];
          fail_if(o < 0 || o >= static_cast<int>(n.shape.size()), "broadcast dim out of range");
          fail_if(i > 0 && o <= n.ints[i - 1], "broadcast dims not increasing");
          fail_if(in[i] != 1 && in[i] != n.shape[o], "broadcast size mismatch");
        }
        break;
      }
      case Op::kIota:
        // Constraints: iota names one dimension of its shape.
        fail_if(n.ints.size() != 1 || n.ints[0] < 0 || n.ints[0] >= static_cast<int>(n.shape.size()),
                "iota dimension out of range");
        break;
      case Op::kRandomUniform:
        // Constraints: random_uniform's operand (the seed) is a scalar.
        fail_if(!arg(0).shape.empty(), "random_uniform seed is not a scalar");
        break;
      case Op::kSlice:
      case Op::kPad: {
        // Constraints: slice/pad ints = {dim, a, b} with dim in range, a, b >= 0;
        // slice keeps [a, a+b) of dim; pad adds a zeros before and b after.
        fail_if(n.ints.size() != 3, "slice/pad needs {dim, a, b}");
        if (n.ints.size() != 3) break;
        const int d = n.ints[0];
        const Shape& in = arg(0).shape;
        fail_if(d < 0 || d >= static_cast<int>(in.size()) || n.ints[1] < 0 || n.ints[2] < 0,
                "slice/pad attributes out of range");
        if (d < 0 || d >= static_cast<int>(in.size())) break;
        Shape expect = in;
        if (op == Op::kSlice) {
          fail_if(n.ints[1] + n.ints[2] > in[d], "slice reaches past the end");
          expect[d] = n.ints[2];
        } else {
          expect[d] = in[d] + n.ints[1] + n.ints[2];
        }
        fail_if(expect != n.shape, "slice/pad shape mismatch");
        break;
      }
      case Op::kAddSlice: {
        // Constraints: add_slice ints = {dim, start}; the update has the
        // target's shape but along dim, where it fits from start; the result
        // has the target's shape.
        fail_if(n.ints.size() != 2, "add_slice needs {dim, start}");
        if (n.ints.size() != 2) break;
        const int d = n.ints[0];
        const Shape& x = arg(0).shape;
        const Shape& y = arg(1).shape;
        fail_if(d < 0 || d >= static_cast<int>(x.size()) || x.size() != y.size(), "add_slice dimension out of range");
        if (d < 0 || d >= static_cast<int>(x.size()) || x.size() != y.size()) break;
        Shape expect = x;
        expect[d] = y[d];
        fail_if(expect != y || n.ints[1] < 0 || n.ints[1] + y[d] > x[d], "add_slice update does not fit");
        fail_if(n.shape != x, "add_slice shape differs from its target's");
        fail_if(arg(0).dtype != arg(1).dtype, "add_slice operands of different element types");
        break;
      }
      case Op::kReshape:
        // Constraints: element count is preserved.
        fail_if(num_elements(n.shape) != num_elements(arg(0).shape), "reshape changes element count");
        break;
      case Op::kTranspose: {
        // Constraints: ints is a permutation; out dim i has operand dim perm[i]'s size.
        fail_if(!is_perm(n.ints, arg(0).shape.size()), "perm is not a permutation");
        for (size_t i = 0; i < n.ints.size(); ++i)
          fail_if(n.shape[i] != arg(0).shape[n.ints[i]], "transpose shape mismatch");
        break;
      }
      case Op::kReduce: {
        // Constraints: axes are distinct operand dims; they are removed from the shape.
        const Shape& in = arg(0).shape;
        std::set<int> ax(n.ints.begin(), n.ints.end());
        fail_if(ax.size() != n.ints.size(), "duplicate reduce axis");
        Shape expect;
        for (int i = 0; i < static_cast<int>(in.size()); ++i)
          if (!ax.count(i)) expect.push_back(in[i]);
        for (int a : ax) fail_if(a < 0 || a >= static_cast<int>(in.size()), "reduce axis out of range");
        fail_if(expect != n.shape, "reduce shape mismatch");
        break;
      }
      case Op::kDot:
        // Constraints: batch and contracting lists pair up with equal sizes; the
        // result shape is dot_shape().
        check_dot(arg(0).shape, arg(1).shape, n.dot, n.shape);
        break;
      case Op::kRingDot:
        check_ring_dot(n, arg(0).shape, arg(1).shape);
        break;
      case Op::kAllGather:
      case Op::kReduceScatter:
      case Op::kLocalSlice:
      case Op::kAllToAll:
      case Op::kAllReduce: {
        // Constraints: collectives name at least one mesh axis, no axis twice;
        // dim (and dim2) are in range.
        fail_if(n.axes.empty(), "collective over no axes");
        std::set<std::string> seen;
        for (auto& a : n.axes) {
          fail_if(!g.mesh.has(a), "unknown mesh axis \"" + a + "\"");
          fail_if(!seen.insert(a).second, "axis repeated");
        }
        if (op == Op::kAllReduce) {
          fail_if(arg(0).shape != n.shape, "all_reduce changes shape");
          break;
        }
        const int rank = static_cast<int>(n.shape.size());
        fail_if(n.dim < 0 || n.dim >= rank, "dim out of range");
        if (n.dim < 0 || n.dim >= rank) break;
        const int64_t k = g.mesh.size(n.axes);
        Shape expect = arg(0).shape;
        if (op == Op::kAllGather) expect[n.dim] *= k;
        if (op == Op::kReduceScatter || op == Op::kLocalSlice) {
          fail_if(expect[n.dim] % k != 0, "dim does not divide by axes");
          expect[n.dim] /= k;
        }
        if (op == Op::kAllToAll) {
          fail_if(n.dim2 < 0 || n.dim2 >= rank || n.dim2 == n.dim, "bad concat dim");
          if (n.dim2 < 0 || n.dim2 >= rank) break;
          fail_if(expect[n.dim] % k != 0, "split dim does not divide by axes");
          expect[n.dim] /= k;
          expect[n.dim2] *= k;
        }
        fail_if(expect != n.shape, "collective result shape mismatch");
        break;
      }
      case Op::kShardMap:
        // Constraints: shard_map names a body of the graph and one of its
        // results, and has operands.
        fail_if(n.ints.size() != 2 || n.ints[0] < 0 || n.ints[0] >= static_cast<int>(g.shard_maps.size()) ||
                    !g.shard_maps[n.ints[0]] || n.ints[1] < 0,
                "shard_map does not name a body and result");
        fail_if(n.args.empty(), "shard_map without operands");
        break;
      case Op::kSend:
      case Op::kRecv:
        // Constraints: one mesh axis, a peer position on it and a tag; a
        // send keeps its operand's shape.
        fail_if(n.axes.size() != 1 || !g.mesh.has(n.axes[0]), "needs one mesh axis");
        fail_if(n.ints.size() != 2, "needs a peer position and a tag");
        if (n.axes.size() == 1 && g.mesh.has(n.axes[0]) && n.ints.size() == 2)
          fail_if(n.ints[0] < 0 || n.ints[0] >= g.mesh.size(n.axes[0]), "peer position out of range");
        if (op == Op::kSend) fail_if(arg(0).shape != n.shape, "send changes shape");
        break;
      case Op::kPPermute:
      case Op::kAxisIndex: {
        // Constraints: one mesh axis; ppermute keeps the shape and its pairs
        // are distinct sources and destinations in [0, axis size);
        // axis_index is a scalar.
        fail_if(n.axes.size() != 1 || !g.mesh.has(n.axes[0]), "needs one mesh axis");
        if (n.axes.size() != 1 || !g.mesh.has(n.axes[0])) break;
        if (op == Op::kAxisIndex) {
          fail_if(!n.shape.empty(), "axis_index is not a scalar");
          break;
        }
        fail_if(arg(0).shape != n.shape, "ppermute changes shape");
        fail_if(n.ints.size() % 2 != 0, "ppermute pairs are not pairs");
        const int size = g.mesh.size(n.axes[0]);
        std::set<int> src, dst;
        for (size_t i = 0; i + 1 < n.ints.size(); i += 2) {
          fail_if(n.ints[i] < 0 || n.ints[i] >= size || n.ints[i + 1] < 0 || n.ints[i + 1] >= size,
                  "ppermute position out of range");
          fail_if(!src.insert(n.ints[i]).second || !dst.insert(n.ints[i + 1]).second,
                  "ppermute pairs are not a permutation");
        }
        break;
      }
      case Op::kKernel:
        fail_if(n.kernel.empty(), "kernel without a name");
        break;
      case Op::kKernelOutput:
        // Constraints: a further result of the kernel node that is its operand.
        fail_if(arg(0).op != Op::kKernel, "kernel_output of something other than a kernel");
        fail_if(n.kernel.rfind(arg(0).kernel + ".", 0) != 0, "kernel_output named for another kernel");
        break;
      default:
        break;
    }
  }
};

}  // namespace

void verify(const Graph& g) {
  Checker c{g};
  for (c.id = 0; c.id < static_cast<int>(g.nodes.size()); ++c.id) c.check(g.nodes[c.id]);
  std::set<std::string> names;
  for (auto& o : g.outputs) {
    if (o.value < 0 || o.value >= static_cast<int>(g.nodes.size()))
      internal_error("IR verification failed: output \"" + o.name + "\" refers to no node");
    if (!names.insert(o.name).second)
      internal_error("IR verification failed: two outputs named \"" + o.name + "\"");
  }
  std::set<int> targets;
  const int count = static_cast<int>(g.nodes.size());
  for (auto& u : g.updates) {
    // Constraints: an update writes a Parameter, once, from a value of its shape.
    if (u.target < 0 || u.target >= count || g.nodes[u.target].op != Op::kParameter)
      internal_error("IR verification failed: update target %" + std::to_string(u.target) + " is not a parameter");
    if (u.value < 0 || u.value >= count || g.nodes[u.value].shape != g.nodes[u.target].shape)
      internal_error("IR verification failed: update of %" + std::to_string(u.target) + " has a value of another shape");
    if (!targets.insert(u.target).second)
      internal_error("IR verification failed: parameter %" + std::to_string(u.target) + " updated twice");
  }
  for (auto& gr : g.gradients)
    // Constraints: a gradient belongs to a Parameter and is a node (of the
    // parameter's shape in a global graph; layouts may differ once partitioned).
    if (gr.parameter < 0 || gr.parameter >= count || g.nodes[gr.parameter].op != Op::kParameter ||
        gr.value < 0 || gr.value >= count ||
        (!g.partitioned && g.nodes[gr.value].shape != g.nodes[gr.parameter].shape))
      internal_error("IR verification failed: gradient %" + std::to_string(gr.value) + " of %" +
                     std::to_string(gr.parameter) + " is not a value of a parameter's shape");
  for (auto& n : g.nodes)
    // Constraints: layout_of names an earlier Parameter of the same shape.
    if (n.layout_of >= 0 && (n.op != Op::kParameter || n.layout_of >= count ||
                             g.nodes[n.layout_of].op != Op::kParameter || g.nodes[n.layout_of].shape != n.shape))
      internal_error("IR verification failed: layout_of of \"" + n.name + "\" is not a parameter of its shape");
}

}  // namespace sharc::ir

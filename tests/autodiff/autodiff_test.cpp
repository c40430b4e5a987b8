// append_gradients: one test per op of the global IR (named after it) plus the
// composite DSL ops a training step uses (softmax, layer_norm, cross entropy,
// mse, dropout, one-hot embedding). Each traces a small program whose output
// "loss" is a scalar, appends the gradients of every parameter, runs the fp64
// oracle and compares each gradient element with a central finite difference
// of the oracle's loss (parameters perturbed through interpret's `state`).
// Inputs keep away from non-differentiable points (relu at 0, max ties, log and
// sqrt of non-positive values); ties are tested separately against the
// documented rule. Then: attribution of the appended nodes, and the user error
// for a non-scalar loss.
#include "ir/autodiff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/interpret.h"
#include "dsl/llama.h"
#include "dsl/sharc.h"
#include "tests/common/expect_error.h"

namespace sharc {
namespace {

using ir::Graph;
using ir::Node;
using ir::Op;

constexpr uint64_t kSeed = 7;

// Deterministic test data in [lo, hi): an LCG keyed by the tensor's name, so a
// test's values never change between runs or machines.
std::vector<double> fill(const std::string& name, int64_t n, double lo = -1.0, double hi = 1.0) {
  uint64_t s = 1469598103934665603ull;  // FNV-1a of the name
  for (char c : name) s = (s ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::vector<double> v(n);
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<double>(s >> 11) * 0x1.0p-53;
  }
  return v;
}

std::vector<int> all_axes(const Tensor& x) {
  std::vector<int> a(x.rank());
  for (int i = 0; i < static_cast<int>(a.size()); ++i) a[i] = i;
  return a;
}

// sum(y * w) for a fixed, non-uniform input w, so every element of y gets its
// own cotangent (a plain sum would hide transposed or permuted gradients).
Tensor weighted_sum(ProgramBuilder& b, Tensor y, const std::string& name = "weights") {
  if (y.rank() == 0) return mul(y, b.input(name, {}));
  return sum(mul(y, b.input(name, y.shape())), all_axes(y));
}

struct Check {
  HostValues inputs = {};                    // required input values (labels, ids, ...)
  HostValues params = {};                    // required parameter values (log of > 0, ...)
  std::vector<std::string> wrt_inputs = {};  // inputs differentiated too (all parameters are)
  std::set<std::string> zero = {};           // wrt values whose gradient must be a zeros constant
};

struct Result {
  Graph g;  // forward + backward; gradients as outputs "d/<name>"
  int forward_nodes = 0;
  std::map<std::string, int> grad;  // wrt name -> gradient node
  HostValues values;                // wrt name -> analytic gradient
};

double loss_of(const Graph& forward, const HostValues& inputs, const HostValues& params) {
  HostValues state = params;
  return interpret(forward, inputs, kSeed, &state).at("loss").at(0);
}

// Compares the analytic gradient of every parameter (and of c.wrt_inputs)
// with central finite differences of the oracle's loss.
//
// Step and tolerance: h = 1e-6 * max(1, |v|). The central difference has a
// truncation error of h^2/6 |f'''| ~ 2e-13 for the O(1) third derivatives of
// these tiny programs, and a rounding error of about eps |loss| / h ~ 1e-10
// |loss| (the two losses round independently, each within a few ulps). The
// losses here are O(1)-O(10), so differences stay below ~1e-9 absolute
// (measured: at most 8e-10, against tolerances of 2e-7 and more); a
// tolerance of 1e-6 relative to the tensor's largest gradient, plus 1e-9
// absolute for all-zero gradients, leaves over two orders of margin while still
// catching a wrong rule (a transposed dot, a missed broadcast sum, a wrong
// constant in gelu's derivative all give relative errors far above 1e-3).
Result check_gradients(const ProgramFn& fn, Check c = {}) {
  Result r;
  r.g = trace("autodiff", fn);
  const Graph forward = r.g;
  r.forward_nodes = static_cast<int>(forward.nodes.size());
  int loss = -1;
  for (auto& o : forward.outputs)
    if (o.name == "loss") loss = o.value;
  EXPECT_GE(loss, 0) << "the program must output \"loss\"";
  if (loss < 0) return r;

  std::vector<int> wrt;
  for (int id = 0; id < r.forward_nodes; ++id) {
    const Node& n = forward.nodes[id];
    const bool is_input = n.op == Op::kInput;
    if (n.op == Op::kParameter && !c.params.count(n.name))
      c.params[n.name] = fill(n.name, ir::num_elements(n.shape));
    if (is_input && !c.inputs.count(n.name))
      c.inputs[n.name] = fill(n.name, ir::num_elements(n.shape));
    if (n.op == Op::kParameter ||
        (is_input && std::count(c.wrt_inputs.begin(), c.wrt_inputs.end(), n.name)))
      wrt.push_back(id);
  }

  const std::vector<int> grads = append_gradients(r.g, loss, wrt, SrcLoc("autodiff_test.cpp", 1));
  EXPECT_EQ(grads.size(), wrt.size());
  for (size_t i = 0; i < wrt.size(); ++i) {
    const std::string& name = forward.nodes[wrt[i]].name;
    r.grad[name] = grads[i];
    r.g.outputs.push_back({"d/" + name, grads[i], SrcLoc(), std::nullopt, std::nullopt});
  }
  ir::verify(r.g);

  HostValues state = c.params;
  const HostValues out = interpret(r.g, c.inputs, kSeed, &state);
  for (int w : wrt) {
    const Node& n = forward.nodes[w];
    SCOPED_TRACE("gradient of " + std::string(ir::op_name(n.op)) + " \"" + n.name + "\" " +
                 ir::shape_str(n.shape));
    const std::vector<double>& analytic = out.at("d/" + n.name);
    r.values[n.name] = analytic;
    const bool in_params = n.op == Op::kParameter;
    std::vector<double> fd(analytic.size());
    for (size_t e = 0; e < analytic.size(); ++e) {
      HostValues ins = c.inputs, ps = c.params;
      double& v = (in_params ? ps : ins)[n.name][e];
      const double base = v, h = 1e-6 * std::max(1.0, std::abs(base));
      v = base + h;
      const double up = loss_of(forward, ins, ps);
      v = base - h;
      const double down = loss_of(forward, ins, ps);
      fd[e] = (up - down) / (2 * h);
    }
    double scale = 0.0, max_abs = 0.0, max_rel = 0.0;
    for (size_t e = 0; e < fd.size(); ++e)
      scale = std::max({scale, std::abs(fd[e]), std::abs(analytic[e])});
    const double tol = 1e-6 * scale + 1e-9;
    int bad = 0;
    std::ostringstream first;
    for (size_t e = 0; e < fd.size(); ++e) {
      const double err = std::abs(analytic[e] - fd[e]);
      max_abs = std::max(max_abs, err);
      max_rel = std::max(max_rel, err / std::max(std::abs(fd[e]), 1e-300));
      if (err > tol && bad++ < 8)
        first << "  [" << e << "] analytic " << analytic[e] << " vs finite difference " << fd[e]
              << "\n";
    }
    EXPECT_EQ(bad, 0) << bad << " of " << fd.size() << " elements differ (tolerance " << tol
                      << ", max abs error " << max_abs << ", max rel error " << max_rel << "):\n"
                      << first.str();
    if (c.zero.count(n.name)) {
      const Node& gn = r.g.nodes[r.grad[n.name]];
      EXPECT_TRUE(gn.op == Op::kConstant && gn.scalar == 0.0) << ir::node_str(r.g, r.grad[n.name]);
    } else {
      EXPECT_GT(scale, 1e-3) << "the gradient is trivially zero: the test checks nothing";
    }
  }
  return r;
}

int count_appended(const Result& r, Op op) {
  int k = 0;
  for (size_t id = r.forward_nodes; id < r.g.nodes.size(); ++id) k += r.g.nodes[id].op == op;
  return k;
}

// ---- Sources ---------------------------------------------------------------

TEST(Autodiff, Parameter) {
  check_gradients([](ProgramBuilder& b) {
    Param w = b.scope().param("w", {3, 4}, zeros());
    b.output("loss", weighted_sum(b, w));
  });
}

TEST(Autodiff, Input) {
  // Inputs can be differentiated too (the gradient w.r.t. data).
  check_gradients(
      [](ProgramBuilder& b) {
        Tensor x = b.input("x", {2, 5});
        Param w = b.scope().param("w", {2, 5}, zeros());
        b.output("loss", weighted_sum(b, mul(tanh(x), w)));
      },
      {.wrt_inputs = {"x"}});
}

TEST(Autodiff, Constant) {
  // loss = sum((w + 2.5) * w * weights): the constant feeds the product rule.
  check_gradients([](ProgramBuilder& b) {
    Param w = b.scope().param("w", {6}, zeros());
    b.output("loss", weighted_sum(b, mul(add(w, 2.5), w)));
  });
}

TEST(Autodiff, Iota) {
  check_gradients([](ProgramBuilder& b) {
    Param w = b.scope().param("w", {3, 4}, zeros());
    b.output("loss", weighted_sum(b, mul(w, add(iota({3, 4}, 1), 1.0))));
  });
}

// ---- Elementwise binary ------------------------------------------------------

TEST(Autodiff, Add) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {2, 3}, zeros()), y = b.scope().param("y", {2, 3}, zeros());
    b.output("loss", weighted_sum(b, add(x, y)));
  });
}

TEST(Autodiff, Sub) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {2, 3}, zeros()), y = b.scope().param("y", {2, 3}, zeros());
    b.output("loss", weighted_sum(b, sub(x, y)));
  });
}

TEST(Autodiff, Mul) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {2, 3}, zeros()), y = b.scope().param("y", {2, 3}, zeros());
    b.output("loss", weighted_sum(b, mul(x, y)));
  });
}

TEST(Autodiff, Div) {
  check_gradients(
      [](ProgramBuilder& b) {
        Param x = b.scope().param("x", {2, 3}, zeros()), y = b.scope().param("y", {2, 3}, zeros());
        b.output("loss", weighted_sum(b, div(x, y)));
      },
      {.params = {{"y", fill("y", 6, 0.5, 1.5)}}});
}

TEST(Autodiff, Max) {
  // Distinct values (the fill streams differ), so no element is at a tie.
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 4}, zeros()), y = b.scope().param("y", {3, 4}, zeros());
    b.output("loss", weighted_sum(b, maximum(x, y)));
  });
}

TEST(Autodiff, Min) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 4}, zeros()), y = b.scope().param("y", {3, 4}, zeros());
    b.output("loss", weighted_sum(b, minimum(x, y)));
  });
}

TEST(Autodiff, MaxMinTiesSplitEvenly) {
  // At x == y, maximum and minimum give half of the cotangent to each operand
  // (lax.max's rule); elsewhere all of it to the selected one.
  Graph g = trace("ties", [](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3}, zeros()), y = b.scope().param("y", {3}, zeros());
    b.output("loss", add(sum(maximum(x, y), {0}), sum(mul(minimum(x, y), 3.0), {0})));
  });
  const int x = 0, y = 1;
  ASSERT_EQ(g.nodes[x].name, "x");
  auto grads = append_gradients(g, g.outputs[0].value, {x, y}, SrcLoc());
  g.outputs.push_back({"dx", grads[0], SrcLoc(), std::nullopt, std::nullopt});
  g.outputs.push_back({"dy", grads[1], SrcLoc(), std::nullopt, std::nullopt});
  ir::verify(g);
  HostValues state = {{"x", {1.0, 2.0, 5.0}}, {"y", {1.0, 4.0, 0.0}}};
  auto out = interpret(g, {}, kSeed, &state);
  // d/dx: max picks x where x > y (1 each), min picks x where x < y (3 each).
  EXPECT_EQ(out["dx"], (std::vector<double>{0.5 + 1.5, 3.0, 1.0}));
  EXPECT_EQ(out["dy"], (std::vector<double>{0.5 + 1.5, 1.0, 3.0}));
}

TEST(Autodiff, Greater) {
  // A mask has zero gradient: x and y reach the loss only through greater.
  check_gradients(
      [](ProgramBuilder& b) {
        Param x = b.scope().param("x", {2, 3}, zeros()), y = b.scope().param("y", {2, 3}, zeros());
        Param w = b.scope().param("w", {2, 3}, zeros());
        b.output("loss", weighted_sum(b, mul(w, greater(x, y))));
      },
      {.zero = {"x", "y"}});
}

TEST(Autodiff, Equal) {
  check_gradients(
      [](ProgramBuilder& b) {
        Param x = b.scope().param("x", {2, 3}, zeros());
        Param w = b.scope().param("w", {2, 3}, zeros());
        Tensor y = b.input("y", {2, 3});
        b.output("loss", weighted_sum(b, mul(w, add(equal(x, y), 0.5))));
      },
      {.zero = {"x"}});
}

// ---- Elementwise unary -------------------------------------------------------

void check_unary(Tensor (*op)(Tensor, SrcLoc), double lo, double hi) {
  check_gradients(
      [op](ProgramBuilder& b) {
        Param x = b.scope().param("x", {3, 4}, zeros());
        b.output("loss", weighted_sum(b, op(x, SrcLoc())));
      },
      {.params = {{"x", fill("x", 12, lo, hi)}}});
}

TEST(Autodiff, Neg) {
  check_unary(neg, -1, 1);
}
TEST(Autodiff, Relu) {
  // No element of the data lies within a finite-difference step of the kink at 0.
  check_unary(relu, -1, 1);
}
TEST(Autodiff, Gelu) {
  check_unary(gelu, -3, 3);
}
TEST(Autodiff, TheGeluRuleIsWhatItsMatcherFinds) {
  // match_gelu_gradient finds gy * gelu'(x) among the appended nodes: one
  // root, whose x is gelu's operand and whose gy is the cotangent of gelu's
  // result (here sin's adjoint, cos(y) * w). Nothing else matches.
  auto r = check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 4}, zeros());
    b.output("loss", weighted_sum(b, sin(gelu(mul(x, x)))));
  });
  int gelu_node = -1;
  for (int id = 0; id < r.forward_nodes; ++id)
    if (r.g.nodes[id].op == Op::kGelu) gelu_node = id;
  ASSERT_GE(gelu_node, 0);
  std::vector<std::pair<int, GeluGradient>> found;
  for (int id = 0; id < static_cast<int>(r.g.nodes.size()); ++id)
    if (const auto m = match_gelu_gradient(r.g, id)) found.emplace_back(id, *m);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].second.x, r.g.nodes[gelu_node].args[0]);
  const Node& gy = r.g.nodes[found[0].second.gy];
  EXPECT_TRUE(gy.backward);
  EXPECT_EQ(gy.op, Op::kMul);
  EXPECT_EQ(gy.shape, (ir::Shape{3, 4}));
  // A different constant is a different function: no match.
  Graph changed = r.g;
  for (Node& n : changed.nodes)
    if (n.op == Op::kConstant && n.scalar == 0.5) n.scalar = 0.25;
  EXPECT_FALSE(match_gelu_gradient(changed, found[0].first).has_value());
}
TEST(Autodiff, Tanh) {
  check_unary(tanh, -2, 2);
}
TEST(Autodiff, Exp) {
  check_unary(exp, -1, 1);
}
TEST(Autodiff, Log) {
  check_unary(log, 0.2, 3);
}
TEST(Autodiff, Sqrt) {
  check_unary(sqrt, 0.2, 3);
}
TEST(Autodiff, Sin) {
  check_unary(sin, -3, 3);
}
TEST(Autodiff, Cos) {
  check_unary(cos, -3, 3);
}
TEST(Autodiff, Abs) {
  // fill("x") keeps every element away from the kink at 0 by more than a step.
  check_unary(abs, -2, 2);
}
TEST(Autodiff, Sigmoid) {
  check_unary(sigmoid, -4, 4);
}
TEST(Autodiff, Erf) {
  check_unary(erf, -2, 2);
}
TEST(Autodiff, Log1p) {
  check_unary(log1p, -0.5, 3);
}
TEST(Autodiff, Expm1) {
  check_unary(expm1, -2, 2);
}

TEST(Autodiff, Pow) {
  // Both operands differentiated; the base stays positive, where x^y log x is
  // the derivative in y.
  check_gradients(
      [](ProgramBuilder& b) {
        Param x = b.scope().param("x", {3, 4}, zeros()), y = b.scope().param("y", {3, 4}, zeros());
        b.output("loss", weighted_sum(b, pow(x, y)));
      },
      {.params = {{"x", fill("x", 12, 0.3, 2.5)}, {"y", fill("y", 12, -1.5, 2.5)}}});
}

TEST(Autodiff, PowAtZeroBaseHasNoNaNGradient) {
  // 0^2 = 0 with d/dx = 2 * 0 = 0 and d/dy taken as 0 (log 0 is not used).
  const ProgramFn fn = [](ProgramBuilder& b) {
    Param x = b.scope().param("x", {2}, zeros()), y = b.scope().param("y", {2}, zeros());
    b.output("loss", weighted_sum(b, pow(x, y)));
  };
  const Result r =
      check_gradients(fn, {.params = {{"x", {0.0, 1.5}}, {"y", {2.0, 2.0}}}});
  EXPECT_EQ(r.values.at("y")[0], 0.0);
  EXPECT_EQ(r.values.at("x")[0], 0.0);
  // 0^0 = 1, flat in x: d/dx is 0, not 0 * 0^-1 = 0 * inf.
  Graph g = trace("pow00", fn);
  int loss = -1, x = -1;
  for (auto& o : g.outputs)
    if (o.name == "loss") loss = o.value;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].name == "x" && g.nodes[i].op == Op::kParameter) x = static_cast<int>(i);
  const int dx = append_gradients(g, loss, {x}, SrcLoc("autodiff_test.cpp", 1))[0];
  g.outputs.push_back({"dx", dx, SrcLoc(), std::nullopt, std::nullopt});
  HostValues state = {{"x", {0.0, 1.5}}, {"y", {0.0, 0.0}}};
  const std::vector<double> got = interpret(g, {{"weights", {1.0, 1.0}}}, kSeed, &state).at("dx");
  EXPECT_EQ(got[0], 0.0);
  EXPECT_EQ(got[1], 0.0);
}

TEST(Autodiff, Select) {
  // The gradient goes to the branch taken; the condition gets none.
  const Result r = check_gradients(
      [](ProgramBuilder& b) {
        Param x = b.scope().param("x", {3, 4}, zeros()), y = b.scope().param("y", {3, 4}, zeros());
        Param c = b.scope().param("c", {3, 4}, zeros());
        b.output("loss", weighted_sum(b, where(greater(c, full({}, 0.0)), mul(x, x), exp(y))));
      },
      {.zero = {"c"}});
  const std::vector<double> c = fill("c", 12);
  const std::vector<double>& dx = r.values.at("x");
  const std::vector<double>& dy = r.values.at("y");
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(c[i] > 0 ? dy[i] : dx[i], 0.0) << "element " << i << " of the branch not taken";
    EXPECT_NE(c[i] > 0 ? dx[i] : dy[i], 0.0) << "element " << i << " of the branch taken";
  }
}

// ---- Layout ------------------------------------------------------------------

TEST(Autodiff, BroadcastBias) {
  // x (4,3) + bias (3): the bias's gradient sums over the new leading dim.
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {4, 3}, zeros()), bias = b.scope().param("bias", {3}, zeros());
    b.output("loss", weighted_sum(b, tanh(add(x, bias))));
  });
}

TEST(Autodiff, BroadcastSizeOneDims) {
  // (4,1,3) + (4,5,3): dim 1 stretched 1 -> 5; (1,3) -> (2,4,3): a new dim and a stretched one.
  auto r = check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {4, 1, 3}, zeros()),
          y = b.scope().param("y", {4, 5, 3}, zeros());
    Param z = b.scope().param("z", {1, 3}, zeros());
    b.output("loss", add(weighted_sum(b, sin(add(x, y))),
                         weighted_sum(b, mul(broadcast_to(z, {2, 4, 3}), z), "weights2")));
  });
  EXPECT_GE(count_appended(r, Op::kReduce), 2);
}

TEST(Autodiff, Reshape) {
  // Split (6,4) -> (2,3,4), then merge (2,3,4) -> (3,8).
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {6, 4}, zeros());
    Tensor split = reshape(x, {2, 3, 4});
    Tensor y = mul(split, add(iota({2, 3, 4}, 1), 0.5));
    b.output("loss", weighted_sum(b, sin(reshape(y, {3, 8}))));
  });
}

TEST(Autodiff, Transpose) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {2, 3, 4}, zeros());
    b.output("loss", weighted_sum(b, sin(transpose(x, {2, 0, 1}))));
  });
}

TEST(Autodiff, DotMatmul2D) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 4}, zeros()), w = b.scope().param("w", {4, 5}, zeros());
    b.output("loss", weighted_sum(b, matmul(x, w)));
  });
}

TEST(Autodiff, DotBatchedMatmul) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {2, 3, 4}, zeros()),
          w = b.scope().param("w", {2, 4, 5}, zeros());
    b.output("loss", weighted_sum(b, tanh(matmul(x, w))));
  });
}

TEST(Autodiff, DotGeneral) {
  // lhs (A=3, B=2, C=4, D=5), rhs (E=6, A=3, B=2, D=5): batch B (lhs dim 1,
  // rhs dim 2), contracting D and A listed in an order that is not either
  // operand's (lhs [3,0] x rhs [3,1]), lhs free C, rhs free E -> (B, C, E).
  auto r = check_gradients([](ProgramBuilder& b) {
    Param lhs = b.scope().param("lhs", {3, 2, 4, 5}, zeros());
    Param rhs = b.scope().param("rhs", {6, 3, 2, 5}, zeros());
    ir::DotDims d{
        .lhs_batch = {1}, .rhs_batch = {2}, .lhs_contract = {3, 0}, .rhs_contract = {3, 1}};
    b.output("loss", weighted_sum(b, tanh(dot_general(lhs, rhs, d))));
  });
  // Both adjoint dots need a transpose back into operand order.
  EXPECT_EQ(count_appended(r, Op::kDot), 2);
  EXPECT_EQ(count_appended(r, Op::kTranspose), 2);
}

TEST(Autodiff, DotGeneralSwappedBatchDims) {
  // Two batch dims paired in swapped order: lhs (2,3,4) batch [0,1], rhs
  // (3,2,4,5) batch [1,0]; contract 4; outer-product-like free dims.
  check_gradients([](ProgramBuilder& b) {
    Param lhs = b.scope().param("lhs", {2, 3, 4}, zeros());
    Param rhs = b.scope().param("rhs", {3, 2, 4, 5}, zeros());
    ir::DotDims d{
        .lhs_batch = {0, 1}, .rhs_batch = {1, 0}, .lhs_contract = {2}, .rhs_contract = {2}};
    b.output("loss", weighted_sum(b, sin(dot_general(lhs, rhs, d))));
  });
}

TEST(Autodiff, DotOuterProduct) {
  // No contracting dims: (3) x (4) -> (3,4).
  check_gradients([](ProgramBuilder& b) {
    Param u = b.scope().param("u", {3}, zeros()), v = b.scope().param("v", {4}, zeros());
    b.output("loss", weighted_sum(b, sin(dot_general(u, v, {}))));
  });
}

TEST(Autodiff, ReduceSum) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 4, 5}, zeros());
    b.output("loss", weighted_sum(b, sin(sum(x, {0, 2}))));
  });
}

TEST(Autodiff, ReduceMean) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 4, 5}, zeros());
    b.output("loss", weighted_sum(b, sin(mean(x, {2, 0}, /*keepdims=*/true))));
  });
}

TEST(Autodiff, ReduceMax) {
  // Distinct values: exactly one element of each group gets the gradient.
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 4, 5}, zeros());
    b.output("loss", weighted_sum(b, sin(max(x, {0, 2}))));
  });
}

TEST(Autodiff, ReduceMaxTiesShareEqually) {
  // Elements equal to the maximum split the cotangent equally (jax's rule).
  Graph g = trace("ties", [](ProgramBuilder& b) {
    Param x = b.scope().param("x", {2, 3}, zeros());
    b.output("loss", sum(mul(max(x, {1}), b.input("w", {2})), {0}));
  });
  auto grads = append_gradients(g, g.outputs[0].value, {0}, SrcLoc());
  g.outputs.push_back({"dx", grads[0], SrcLoc(), std::nullopt, std::nullopt});
  ir::verify(g);
  HostValues state = {{"x", {2.0, 2.0, 2.0, 1.0, 7.0, 7.0}}};
  auto out = interpret(g, {{"w", {3.0, 4.0}}}, kSeed, &state);
  EXPECT_EQ(out["dx"], (std::vector<double>{1.0, 1.0, 1.0, 0.0, 2.0, 2.0}));
}

TEST(Autodiff, Slice) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {4, 6}, zeros());
    b.output("loss", weighted_sum(b, sin(slice(x, 1, 1, 3))));
  });
}

TEST(Autodiff, Pad) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {4, 3}, zeros());
    b.output("loss", weighted_sum(b, sin(add(pad(x, 0, 2, 1), 0.25))));
  });
}

TEST(Autodiff, RandomUniform) {
  // The noise itself is a constant of the parameters; the seed gets zeros
  // (it is not differentiable, and finite differences of it would change the
  // stream, so it is checked separately, without them).
  auto program = [](ProgramBuilder& b) {
    Param w = b.scope().param("w", {4, 5}, zeros());
    b.output("loss", weighted_sum(b, mul(w, random_uniform({4, 5}, b.input("seed", {})))));
  };
  check_gradients(program, {.inputs = {{"seed", {3.0}}}});
  Graph g = trace("seed", program);
  const Node* seed = g.find("seed", Op::kInput);
  ASSERT_NE(seed, nullptr);
  auto grads =
      append_gradients(g, g.outputs[0].value, {static_cast<int>(seed - g.nodes.data())}, SrcLoc());
  EXPECT_EQ(g.nodes[grads[0]].op, Op::kConstant);
  EXPECT_EQ(g.nodes[grads[0]].scalar, 0.0);
  EXPECT_TRUE(g.nodes[grads[0]].shape.empty());
}

TEST(Autodiff, ShardingConstraint) {
  // The cotangent is pinned to the forward constraint's layout.
  auto r = check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {4, 6}, zeros());
    b.output("loss", weighted_sum(b, sin(with_sharding_constraint(tanh(x), P("data", None)))));
  });
  ASSERT_EQ(count_appended(r, Op::kShardingConstraint), 1);
  for (size_t id = r.forward_nodes; id < r.g.nodes.size(); ++id)
    if (r.g.nodes[id].op == Op::kShardingConstraint) {
      ASSERT_TRUE(r.g.nodes[id].spec.has_value());
      EXPECT_EQ(*r.g.nodes[id].spec, P("data", None));
    }
}

// ---- Composite DSL ops ---------------------------------------------------------

TEST(Autodiff, Softmax) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 5}, zeros());
    b.output("loss", weighted_sum(b, softmax(x)));
  });
}

TEST(Autodiff, LayerNorm) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 6}, zeros());
    Param scale = b.scope().param("scale", {6}, zeros()),
          bias = b.scope().param("bias", {6}, zeros());
    b.output("loss", weighted_sum(b, layer_norm(x, scale, bias)));
  });
}

TEST(Autodiff, SoftmaxCrossEntropy) {
  // Class ids stored as floats.
  check_gradients(
      [](ProgramBuilder& b) {
        Param logits = b.scope().param("logits", {4, 5}, zeros());
        b.output("loss", softmax_cross_entropy(mul(logits, 2.0), b.input("labels", {4})));
      },
      {.inputs = {{"labels", {0, 3, 4, 1}}}});
}

// PyTorch's ignore_index: positions labelled -100 count for nothing, in the
// loss (the mean over the other positions, checked against the plain loss
// of those positions alone) and in the gradient (their rows exactly zero).
TEST(Autodiff, SoftmaxCrossEntropyIgnoringPadding) {
  const Result r = check_gradients(
      [](ProgramBuilder& b) {
        Param logits = b.scope().param("logits", {4, 5}, zeros());
        b.output("loss", softmax_cross_entropy(mul(logits, 2.0), b.input("labels", {4}), IgnoreLabel{-100}));
      },
      {.inputs = {{"labels", {0, -100, 4, -100}}}});
  for (size_t e = 0; e < 20; ++e)
    if (e / 5 == 1 || e / 5 == 3) {
      EXPECT_EQ(r.values.at("logits")[e], 0.0) << "element " << e << " of an ignored row";
    }

  // The value: the mean of the plain loss of rows 0 and 2, each alone.
  const Graph g = trace("masked", [](ProgramBuilder& b) {
    Param logits = b.scope().param("logits", {4, 5}, zeros());
    Tensor labels = b.input("labels", {4});
    b.output("loss", softmax_cross_entropy(logits, labels, IgnoreLabel{-100}));
    b.output("row0", softmax_cross_entropy(slice(logits, 0, 0, 1), slice(labels, 0, 0, 1)));
    b.output("row2", softmax_cross_entropy(slice(logits, 0, 2, 1), slice(labels, 0, 2, 1)));
  });
  HostValues state = {{"logits", fill("logits", 20)}};
  const HostValues out = interpret(g, {{"labels", {0, -100, 4, -100}}}, kSeed, &state);
  EXPECT_NEAR(out.at("loss")[0], 0.5 * (out.at("row0")[0] + out.at("row2")[0]), 1e-14);
  EXPECT_GT(out.at("loss")[0], 0.1);
  // Every position ignored: 0, not 0/0.
  HostValues state2 = state;
  EXPECT_EQ(interpret(g, {{"labels", {-100, -100, -100, -100}}}, kSeed, &state2).at("loss")[0], 0.0);
}

// Llama's pieces (dsl/llama.h), compositions of the ops above: each
// against finite differences of the oracle.
TEST(Autodiff, RmsNorm) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 8}, zeros());
    RMSNorm norm(b.scope() / "norm", 8, 1e-6);
    b.output("loss", weighted_sum(b, norm(x)));
  });
}

TEST(Autodiff, RotaryEmbedding) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {2, 4, 2, 6}, zeros());
    b.output("loss", weighted_sum(b, rotary_embedding(x, 10000.0)));
  });
}

TEST(Autodiff, SwiGLU) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 4}, zeros());
    SwiGLU mlp(b.scope() / "mlp", 4, 6);
    b.output("loss", weighted_sum(b, mlp(x)));
  });
}

TEST(Autodiff, GroupedQueryAttention) {
  check_gradients([](ProgramBuilder& b) {
    LlamaConfig c;
    c.embed = 8;
    c.heads = 4;
    c.kv_heads = 2;
    Param x = b.scope().param("x", {2, 3, 8}, zeros());
    GroupedQueryAttention attn(b.scope() / "attn", c);
    b.output("loss", weighted_sum(b, attn(x)));
  });
}

TEST(Autodiff, MeanSquaredError) {
  check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {3, 4}, zeros()), w = b.scope().param("w", {4, 2}, zeros());
    b.output("loss", mean_squared_error(matmul(x, w), b.input("target", {3, 2})));
  });
}

TEST(Autodiff, Dropout) {
  // A fixed seed fixes the mask, so the loss is linear in the kept elements
  // and the gradient is weights * mask / (1 - rate).
  auto r = check_gradients(
      [](ProgramBuilder& b) {
        Param x = b.scope().param("x", {4, 8}, zeros());
        b.output("loss", weighted_sum(b, dropout(x, 0.25, b.input("seed", {}))));
      },
      {.inputs = {{"seed", {11.0}}}});
  const auto weights = fill("weights", 32);
  int kept = 0;
  for (size_t e = 0; e < 32; ++e) {
    const double g = r.values["x"][e];
    EXPECT_TRUE(g == 0.0 || std::abs(g - weights[e] / 0.75) < 1e-12) << e << ": " << g;
    kept += g != 0.0;
  }
  EXPECT_GT(kept, 8);
  EXPECT_LT(kept, 32);
}

TEST(Autodiff, OneHotEmbedding) {
  // matmul(one_hot(ids, V), table): only the looked-up rows get gradient,
  // a row looked up twice gets the sum.
  auto r = check_gradients(
      [](ProgramBuilder& b) {
        Param table = b.scope().param("table", {5, 3}, zeros());
        Tensor emb = matmul(one_hot(b.input("ids", {4}), 5), table);
        b.output("loss", weighted_sum(b, tanh(emb)));
      },
      {.inputs = {{"ids", {2, 0, 2, 4}}}});
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(r.values["table"][1 * 3 + c], 0.0);
    EXPECT_EQ(r.values["table"][3 * 3 + c], 0.0);
  }
}

// ---- Graph structure -------------------------------------------------------------

TEST(Autodiff, SharedValueAccumulates) {
  // h has three users (two through one mul) and x two: adjoints add up.
  auto r = check_gradients([](ProgramBuilder& b) {
    Param x = b.scope().param("x", {2, 3}, zeros()), w = b.scope().param("w", {3, 3}, zeros());
    Tensor h = tanh(matmul(x, w));
    Tensor y = add(mul(h, h), sin(h));
    b.output("loss", add(weighted_sum(b, add(y, x)), weighted_sum(b, exp(h), "weights2")));
  });
  EXPECT_GE(count_appended(r, Op::kAdd), 3);
}

TEST(Autodiff, UnreachedParameterGetsZeros) {
  // `unused` feeds nothing; `after` is used only after the loss is computed.
  auto r = check_gradients(
      [](ProgramBuilder& b) {
        Param w = b.scope().param("w", {3}, zeros());
        b.scope().param("unused", {2, 2}, zeros());
        Param after = b.scope().param("after", {3}, zeros());
        Tensor loss = weighted_sum(b, sin(w));
        b.output("loss", loss);
        b.output("other", add(mul(after, loss), after));
      },
      {.zero = {"unused", "after"}});
  EXPECT_EQ(r.g.nodes[r.grad["unused"]].shape, (ir::Shape{2, 2}));
}

TEST(Autodiff, IntermediateWrtStopsThere) {
  // d loss / d h for an intermediate h = tanh(x @ w): the weights, and nothing
  // is differentiated behind h (no adjoint dot, no tanh rule).
  Graph g = trace("mid", [](ProgramBuilder& b) {
    Param x = b.scope().param("x", {2, 3}, zeros()), w = b.scope().param("w", {3, 4}, zeros());
    Tensor h = tanh(matmul(x, w));
    b.output("h", h);
    b.output("loss", weighted_sum(b, h));
  });
  const int forward_nodes = static_cast<int>(g.nodes.size());
  const auto grads = append_gradients(g, g.outputs[1].value, {g.outputs[0].value}, SrcLoc());
  g.outputs.push_back({"dh", grads[0], SrcLoc(), std::nullopt, std::nullopt});
  ir::verify(g);
  for (int id = forward_nodes; id < static_cast<int>(g.nodes.size()); ++id)
    EXPECT_TRUE(g.nodes[id].op != Op::kDot && g.nodes[id].op != Op::kTanh) << ir::node_str(g, id);
  HostValues state;
  const auto out = interpret(g, {{"weights", fill("weights", 8)}}, kSeed, &state);
  EXPECT_EQ(out.at("dh"), fill("weights", 8));
}

TEST(Autodiff, NonScalarLossIsAUserError) {
  Graph g = trace("bad", [](ProgramBuilder& b) {
    Param w = b.scope().param("w", {8}, zeros());
    b.output("loss", mul(w, 2.0));
  });
  const size_t before = g.nodes.size();
  const int line = __LINE__ + 2;
  try {
    append_gradients(g, g.outputs[0].value, {0}, Here::current());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    sharc::testing::user_message(e);  // no IR node numbers; names file:line
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tests/autodiff/autodiff_test.cpp:" + std::to_string(line) + ": error:"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("loss must be a scalar, got f32[8]"), std::string::npos) << msg;
    // The value is named by the op and DSL line that made it.
    EXPECT_NE(msg.find("(the mul result f32[8] at tests/autodiff/autodiff_test.cpp:"),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(g.nodes.size(), before);  // nothing appended
}

TEST(Autodiff, PartitionedGraphIsAnInternalError) {
  Graph g = trace("late", [](ProgramBuilder& b) {
    b.output("loss", sum(b.scope().param("w", {4}, zeros()), {0}));
  });
  g.partitioned = true;
  EXPECT_THROW(append_gradients(g, g.outputs[0].value, {0}, SrcLoc()), std::logic_error);
}

TEST(Autodiff, AppendedNodesAreBackwardAndAttributed) {
  Graph g = trace("dense", [](ProgramBuilder& b) {
    Tensor x = b.input("x", {2, 4});
    Linear dense(b.scope() / "dense", 4, 3);
    b.output("loss", mean(relu(dense(x)), {0, 1}));
  });
  const int forward_nodes = static_cast<int>(g.nodes.size());
  std::vector<int> wrt;
  for (int id = 0; id < forward_nodes; ++id)
    if (g.nodes[id].op == Op::kParameter) wrt.push_back(id);
  ASSERT_EQ(wrt.size(), 2u);
  const auto grads = append_gradients(g, g.outputs[0].value, wrt, SrcLoc());
  ir::verify(g);
  const Node* fwd_dot = g.find("dense", Op::kDot);
  ASSERT_NE(fwd_dot, nullptr);
  const SrcLoc dot_loc = fwd_dot->loc;
  ASSERT_TRUE(dot_loc.known());
  for (int id = 0; id < forward_nodes; ++id)
    EXPECT_FALSE(g.nodes[id].backward) << ir::node_str(g, id);
  int dots = 0;
  for (int id = forward_nodes; id < static_cast<int>(g.nodes.size()); ++id) {
    const Node& n = g.nodes[id];
    EXPECT_TRUE(n.backward) << ir::node_str(g, id);
    if (n.op != Op::kDot) continue;
    ++dots;
    EXPECT_EQ(n.loc.str(), dot_loc.str()) << ir::node_str(g, id);
    EXPECT_EQ(n.name, "dense") << ir::node_str(g, id);
  }
  // Only the kernel's adjoint needs a dot (x is an input, not differentiated).
  EXPECT_EQ(dots, 1);
  EXPECT_EQ(g.nodes[grads[0]].shape, (ir::Shape{4, 3}));
  EXPECT_EQ(g.nodes[grads[1]].shape, (ir::Shape{3}));
}

}  // namespace
}  // namespace sharc

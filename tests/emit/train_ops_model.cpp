// A small training-like program for the generated-code equivalence test: a
// two-layer MLP with a loss, and parameter updates written by hand (no
// autodiff) so that one call of the generated Program is one training step.
// It uses every op added for training: iota, maximum/minimum, greater/equal,
// sin/cos, slice/pad, random_uniform (through dropout, with the step number
// as its seed), one_hot, softmax_cross_entropy, mean_squared_error and full,
// plus an optimizer-state parameter (a momentum buffer laid out like w1,
// initialised to zeros). The updates are not gradients; they only need to
// read the step's values and write tensors of each parameter's shape.
#include "dsl/sharc.h"

using namespace sharc;

SHARC_PROGRAM(train_ops_model, b) {
  Scope s = b.scope();
  Tensor x = b.input("x", {8, 16}, P("data", None));
  Tensor labels = b.input("labels", {8}, P("data"));           // class indices 0..7, as floats
  Tensor target = b.input("target", {8, 4}, P("data", None));  // regression target
  Tensor step = b.input("step", {});                           // dropout seed

  Param w1 = s.param("w1", {16, 32}, with_partitioning(lecun_normal(), P(None, "model")));
  Param b1 = s.param("b1", {32}, with_partitioning(normal(0.1), P("model")));
  Param w2 = s.param("w2", {32, 8}, with_partitioning(xavier_uniform(), P("model", None)));
  // Optimizer state: zeros, laid out like w1 (propagation copies its layout).
  Param m1 = s.param("w1_momentum", {16, 32}, zeros());
  b.graph().nodes[m1.id()].layout_of = w1.id();

  // ---- forward
  Tensor h = matmul(x, w1) + b1;                      // (8, 32)
  Tensor column = mul(iota({8, 32}, 1), 1.0 / 32.0);  // global column index / 32
  Tensor a = add(maximum(sin(h), cos(mul(h, 0.5))), minimum(h, column));
  Tensor d = dropout(a, 0.25, step);  // random_uniform, greater, full
  Tensor logits = matmul(d, w2);      // (8, 8)
  Tensor ce = softmax_cross_entropy(logits, labels);
  Tensor mse = mean_squared_error(slice(logits, 1, 2, 4), target);
  Tensor loss = add(ce, mul(mse, 0.5));

  // ---- hand-written updates
  const ir::DotDims batch_contract = {
      .lhs_batch = {}, .rhs_batch = {}, .lhs_contract = {0}, .rhs_contract = {0}};
  // w1: momentum SGD on x^T d (16, 32).
  Tensor g1 = mul(dot_general(x, d, batch_contract), 0.125);
  Tensor m1_new = add(mul(m1, 0.9), g1);
  Tensor w1_new = sub(w1, mul(m1_new, 0.1));
  // b1: the middle half of h's column sums, padded back to 32 with zeros.
  Tensor gb = pad(slice(sum(h, {0}), 0, 4, 16), 0, 8, 8);
  Tensor b1_new = sub(b1, mul(gb, 0.01));
  // w2: towards the labels (one_hot = iota + equal), clipped to [-1, 1].
  Tensor err = sub(one_hot(labels, 8), softmax(logits, -1));
  Tensor w2_step = add(w2, mul(dot_general(d, err, batch_contract), 0.05));
  Tensor w2_new = minimum(maximum(w2_step, full({}, -1.0)), full({}, 1.0));
  // A mask output that compares with equal and greater on non-trivial values.
  Tensor mask = mul(greater(logits, full({}, 0.0)), equal(one_hot(labels, 8), full({}, 1.0)));

  // Updates between parameters: swap_a and swap_b trade values every step
  // (each takes the other's value as the step found it), tied_c and tied_d
  // both take one value (copied to one, moved to the other).
  Param swap_a = s.param("swap_a", {4}, normal(1.0));
  Param swap_b = s.param("swap_b", {4}, ones());
  Param tied_c = s.param("tied_c", {4}, normal(1.0));
  Param tied_d = s.param("tied_d", {4}, ones());
  Tensor tied = add(tied_c, tied_d);

  b.output("loss", loss);
  b.output("swap_a", swap_a);  // a parameter read as an output: its value before the update
  b.output("logits", logits, P("data", None));
  b.output("mask", mask);
  b.graph().updates.push_back({w1.id(), w1_new.id()});
  b.graph().updates.push_back({b1.id(), b1_new.id()});
  b.graph().updates.push_back({w2.id(), w2_new.id()});
  b.graph().updates.push_back({m1.id(), m1_new.id()});
  b.graph().updates.push_back({swap_a.id(), swap_b.id()});
  b.graph().updates.push_back({swap_b.id(), swap_a.id()});
  b.graph().updates.push_back({tied_c.id(), tied.id()});
  b.graph().updates.push_back({tied_d.id(), tied.id()});
}

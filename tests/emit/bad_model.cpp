// Models for the generator's error test (generator_errors_test.cpp). It is
// linked into a generator executable directly, not through sharc_add_program,
// since generating bad_model must fail. The test finds the line the error must
// name by the ERROR-HERE marker, so edits above it do not break the test.
#include "dsl/sharc.h"

using namespace sharc;

// A typo in a mesh axis name: 'modle' is not an axis of data=2,model=4.
SHARC_PROGRAM(bad_model, b) {
  Scope s = b.scope();
  Param w =
      s.param("w", {16, 16}, with_partitioning(lecun_normal(), P(None, "modle")));  // ERROR-HERE
  b.output("y", matmul(b.input("x", {4, 16}, P("data", None)), w));
}

// A correct model, so the test can check what a successful run leaves behind.
SHARC_PROGRAM(good_model, b) {
  Scope s = b.scope();
  Param w = s.param("w", {16, 16}, with_partitioning(lecun_normal(), P(None, "model")));
  b.output("y", relu(matmul(b.input("x", {4, 16}, P("data", None)), w)));
}

// A matmul whose contracted sizes differ (x has 16 features, w 32 rows):
// docs/guide/getting-started.md shows the generator's message for it.
SHARC_PROGRAM(bad_matmul, b) {
  Scope s = b.scope();
  Param w = s.param("w", {32, 4}, lecun_normal());
  Tensor x = b.input("x", {8, 16});
  b.output("y", matmul(x, w));
}

// The DotReluDot programs for the generator: sharc_add_program() links this
// file with the generator's main(), which looks the programs up by name.
// The models themselves live in model.h, shared with the tests.
#include "samples/dot_relu_dot/model.h"

// The seed's model on a mesh with 'data' and 'model' axes.
SHARC_PROGRAM(dot_relu_dot, b) {
  dot_relu_dot::build_dot_relu_dot(b);
}

// The same model annotated with logical axis names; the program-wide rules
// map them to mesh axes ('batch'->'data', 'hidden'->'model', 'embed'->None).
SHARC_PROGRAM(logical_dot_relu_dot, b) {
  b.set_logical_rules(dot_relu_dot::kShardingRules);
  dot_relu_dot::build_logical_dot_relu_dot(b);
}

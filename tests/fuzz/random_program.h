// Random DSL programs for differential testing of the partitioner: a pure,
// deterministic function of a seed that returns a traceable program, the mesh
// to partition it over and values for its inputs. Programs are chains and DAGs
// (later ops reuse earlier values) over the DSL's ops, on tiny shapes built
// from sizes that divide by the mesh axes (2..16, plus 1, 6 and 12), with
// random valid layouts on inputs, parameters, constraints and outputs.
//
// It is not a model zoo and knows nothing about partitioning: the only
// decisions it makes are "what would a user plausibly write". Its one
// non-obvious rule: every op keeps values O(1) and inside the ops' domains
// (exp only of tanh, log/sqrt only of x*x+1, division only by x*x+1 or
// exp(tanh x), rescaling after growth), so an fp32 partitioned run can be
// compared with the fp64 oracle with one tight relative tolerance.
//
// Determinism: the same seed gives the same mesh, the same graph (tracing
// `fn` twice gives identical IR) and bitwise the same inputs, on any platform
// (own splitmix64 generator, no std:: distributions, no global state).
#pragma once

#include <cstdint>
#include <string>

#include "codegen/interpret.h"
#include "ir/ir.h"
#include "dsl/sharc.h"

namespace sharc::fuzz {

struct RandomProgram {
  uint64_t seed = 0;
  std::string name;   // "random_<seed>", a valid C++ identifier suffix
  Mesh mesh;          // 1 to 8 devices, 1 to 3 axes named "a", "b", "c"
  ProgramFn fn;       // builds the program; pure (captures only seed and mesh)
  ir::Graph graph;    // trace(name, fn)
  HostValues inputs;  // one float-representable value in [-1, 1) per input
  std::string ops;    // what the generator chose, e.g. "matmul dot_general(gram) softmax"
};

RandomProgram random_program(uint64_t seed);

}  // namespace sharc::fuzz

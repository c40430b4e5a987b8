// The emitter over the fuzz suite's random programs (tests/fuzz/): every one
// of them, lowered for its mesh, must emit without error, deterministically,
// with one runtime call per kernel and collective of the partitioned IR.
// Compiling and running that code is what emit_equivalence_test does for
// fixed programs; this test covers the emitter's breadth in process.
#include <gtest/gtest.h>

#include <string>

#include "codegen/emit_cpu.h"
#include "codegen/pipeline.h"
#include "tests/fuzz/random_program.h"

namespace sharc {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(EmitRandomPrograms, EmitDeterministicallyWithOneCallPerKernelAndCollective) {
  EmitOptions o;
  o.cpp_namespace = "sharc_gen::random";
  o.templates = load_templates(SHARC_TEMPLATES_DIR);
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const fuzz::RandomProgram p = fuzz::random_program(seed);
    SCOPED_TRACE(p.name + " on " + p.mesh.str() + ": " + p.ops);
    const Lowered l = lower(p.graph, p.mesh);
    o.program = p.name;
    o.header_name = p.name + ".h";
    EmittedFiles a, b;
    ASSERT_NO_THROW(a = emit_cpu(l.partitioned, o));
    b = emit_cpu(l.partitioned, o);
    ASSERT_EQ(a.source, b.source);
    ASSERT_EQ(a.header, b.header);
    std::map<ir::Op, int> ops;
    for (auto& n : l.partitioned.nodes) ++ops[n.op];
    EXPECT_EQ(count(a.source, "rt::gemm("), ops[ir::Op::kDot]);
    EXPECT_EQ(count(a.source, "rt::all_gather_dim("), ops[ir::Op::kAllGather]);
    EXPECT_EQ(count(a.source, "rt::reduce_scatter_dim("), ops[ir::Op::kReduceScatter]);
    EXPECT_EQ(count(a.source, "comm.all_reduce("), ops[ir::Op::kAllReduce]);
    EXPECT_EQ(count(a.source, "rt::all_to_all_dim("), ops[ir::Op::kAllToAll]);
    EXPECT_EQ(count(a.source, "rt::slice_block("), ops[ir::Op::kLocalSlice]);
    EXPECT_EQ(count(a.source, "rt::reduce("), ops[ir::Op::kReduce]);
    EXPECT_EQ(count(a.source, "rt::init_block("), ops[ir::Op::kParameter]);
  }
}

}  // namespace
}  // namespace sharc

namespace sharc {
namespace {

// Inputs/Outputs fields keep the user's names unless they are C++ keywords:
// an input called "seed" or "out" (names the generated functions use for
// their own locals) is still the field `seed` / `out`.
TEST(EmitNames, ApiFieldsKeepUserNamesThatOnlyClashWithGeneratedLocals) {
  const ir::Graph g = trace("names", [](ProgramBuilder& b) {
    Tensor seed = b.input("seed", {4});
    Tensor out = b.input("out", {4});
    Tensor kw = b.input("double", {4});
    b.output("in", add(add(seed, out), kw));
  });
  EmitOptions o;
  o.program = "names";
  o.cpp_namespace = "sharc_gen::names";
  o.header_name = "names.h";
  o.templates = load_templates(SHARC_TEMPLATES_DIR);
  const EmittedFiles f = emit_cpu(lower(g, Mesh::parse("data=2", 2)).partitioned, o);
  EXPECT_NE(f.header.find("const float* seed = nullptr;"), std::string::npos) << f.header;
  EXPECT_NE(f.header.find("const float* out = nullptr;"), std::string::npos) << f.header;
  EXPECT_NE(f.header.find("float* in = nullptr;"), std::string::npos) << f.header;
  // A keyword still gets a suffix.
  EXPECT_EQ(f.header.find("const float* double = nullptr;"), std::string::npos) << f.header;
}

}  // namespace
}  // namespace sharc

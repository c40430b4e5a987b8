// The generated API a driver relies on without hard-coding sizes: the tables
// of parameters, inputs and outputs (kParameters/kInputs/kOutputs and the
// same from the Program class), lookup by name with errors that list what
// exists, and set_parameter/get_parameter/Inputs::set/Outputs::set that check
// span sizes, naming the tensor and both sizes. Checked against the traced
// global program (names, shapes, DSL lines) and the partitioned one (local
// shapes), for DotReluDot on data=2,model=4 and a training program.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/pipeline.h"
#include "dsl/program.h"
#include "emit_dot_relu_dot_2x4.h"
#include "emit_train_ops_model_2x4.h"
#include "tests/common/error_log.h"

namespace sharc {
namespace {

using ::testing::HasSubstr;
namespace drd = sharc_gen::emit_dot_relu_dot_2x4;
namespace tom = sharc_gen::emit_train_ops_model_2x4;

// The message of the exception f throws, which must be of type E (logged
// for docs/guide/troubleshooting.md).
template <class E, class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return testing::log_error_message(e.what());
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "nothing was thrown";
  return "";
}

// Every row of a table against the node it describes, global and partitioned.
void expect_rows_match(std::span<const rt::TensorInfo> table, const ir::Graph& global,
                       const ir::Graph& partitioned, ir::Op op) {
  std::vector<const ir::Node*> nodes, locals;
  for (const ir::Node& n : global.nodes)
    if (n.op == op) nodes.push_back(&n);
  for (const ir::Node& n : partitioned.nodes)
    if (n.op == op) locals.push_back(&n);
  ASSERT_EQ(table.size(), nodes.size());
  ASSERT_EQ(locals.size(), nodes.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const rt::TensorInfo& t = table[i];
    SCOPED_TRACE(std::string(t.name));
    EXPECT_EQ(t.name, nodes[i]->name);
    EXPECT_EQ(t.dtype, "f32");
    EXPECT_EQ(t.shape, nodes[i]->shape);
    EXPECT_EQ(t.local_shape, locals[i]->shape);
    EXPECT_EQ(t.spec.size(), t.shape.size());
    EXPECT_EQ(t.declared_at, nodes[i]->loc.str());
    EXPECT_EQ(t.elements(), ir::num_elements(t.shape));
    EXPECT_EQ(t.bytes(), 4 * static_cast<size_t>(ir::num_elements(t.shape)));
    EXPECT_EQ(t.local_bytes(), 4 * static_cast<size_t>(ir::num_elements(t.local_shape)));
  }
}

ir::Graph traced(const std::string& program) {
  return trace(program, ProgramRegistry::all().at(program));
}

TEST(ProgramApi, DotReluDotTablesDescribeTheProgram) {
  const ir::Graph g = traced("dot_relu_dot");
  const Lowered l = lower(g, Mesh::parse("data=2,model=4", 8));
  expect_rows_match(drd::kParameters, g, l.partitioned, ir::Op::kParameter);
  expect_rows_match(drd::kInputs, g, l.partitioned, ir::Op::kInput);
  ASSERT_EQ(drd::kOutputs.size(), 1u);
  EXPECT_EQ(drd::kOutputs[0].name, "y");
  EXPECT_EQ(drd::kOutputs[0].type_str(), "f32[8,1024]");

  // The two parameters as the Flax guide lays them out, in declaration order.
  ASSERT_EQ(drd::kParameters.size(), 2u);
  const rt::TensorInfo& k = drd::kParameters[0];
  EXPECT_EQ(k.name, "dot1/kernel");
  EXPECT_EQ(k.type_str(), "f32[1024,1024]");
  EXPECT_EQ(k.spec_str(), "P(None, 'model')");
  EXPECT_EQ(k.spec, (rt::Spec{{}, {"model"}}));
  EXPECT_EQ(k.local_type_str(), "f32[1024,256]");
  EXPECT_EQ(k.local_bytes(), 1048576u);
  EXPECT_EQ(k.bytes(), 4194304u);
  EXPECT_EQ(drd::kParameters[1].spec_str(), "P('model', None)");
  EXPECT_EQ(drd::kInputs[0].spec_str(), "P('data', None)");
  // The old per-tensor constants say the same.
  EXPECT_EQ(k.spec, drd::kParam_dot1_kernel_spec);
}

TEST(ProgramApi, TheClassReachesTheSameTables) {
  EXPECT_EQ(drd::Program::parameters().data(), drd::kParameters.data());
  EXPECT_EQ(drd::Program::inputs().size(), drd::kInputs.size());
  EXPECT_EQ(drd::Program::outputs().size(), drd::kOutputs.size());
  EXPECT_EQ(&drd::Program::parameter_info("w2"), &drd::kParameters[1]);
  EXPECT_EQ(drd::Program::mesh_shape().num_devices(), drd::kNumDevices);
  EXPECT_EQ(drd::kProgram, "dot_relu_dot");
}

TEST(ProgramApi, TrainingProgramListsOptimizerStateToo) {
  const ir::Graph g = traced("train_ops_model");
  const Lowered l = lower(g, Mesh::parse("data=2,model=4", 8));
  expect_rows_match(tom::kParameters, g, l.partitioned, ir::Op::kParameter);
  expect_rows_match(tom::kInputs, g, l.partitioned, ir::Op::kInput);
  EXPECT_EQ(tom::kOutputs.size(), g.outputs.size());
  for (size_t i = 0; i < tom::kOutputs.size(); ++i)
    EXPECT_EQ(tom::kOutputs[i].name, g.outputs[i].name);
}

TEST(ProgramApi, LookupByName) {
  EXPECT_EQ(drd::parameter_info("w2").local_type_str(), "f32[256,1024]");
  EXPECT_EQ(drd::input_info("x").shape, (std::vector<int64_t>{8, 1024}));
  EXPECT_EQ(drd::output_info("y").local_shape, (std::vector<int64_t>{4, 1024}));
  EXPECT_EQ(rt::find_tensor(drd::kParameters, "w3"), nullptr);
  EXPECT_EQ(rt::find_tensor(drd::kParameters, "w2"), &drd::kParameters[1]);
  EXPECT_EQ(thrown<std::out_of_range>([] { drd::parameter_info("w3"); }),
            "no parameter \"w3\" in program dot_relu_dot; its parameters are \"dot1/kernel\", "
            "\"w2\"");
  EXPECT_EQ(thrown<std::out_of_range>([] { drd::input_info("y"); }),
            "no input \"y\" in program dot_relu_dot; its inputs are \"x\"");
}

TEST(ProgramApi, WrongSizesAreErrorsNamingThePathAndBothSizes) {
  rt::ThreadWorld world(drd::mesh_shape());
  drd::Program program(world);
  program.init(0);
  std::vector<float> small(1000);
  EXPECT_EQ(thrown<std::invalid_argument>([&] { program.get_parameter("dot1/kernel", small); }),
            "get_parameter(\"dot1/kernel\"): got 1000 floats, but the parameter f32[1024,1024] "
            "has 1048576");
  EXPECT_EQ(thrown<std::invalid_argument>([&] { program.set_parameter("w2", small); }),
            "set_parameter(\"w2\"): got 1000 floats, but the parameter f32[1024,1024] has "
            "1048576");
  EXPECT_THAT(thrown<std::out_of_range>([&] { program.get_parameter("nope", small); }),
              HasSubstr("no parameter \"nope\" in program dot_relu_dot"));

  drd::Program::Inputs in;
  EXPECT_EQ(thrown<std::invalid_argument>([&] { in.set("x", small); }),
            "Inputs::set(\"x\"): got 1000 floats, but the input f32[8,1024] has 8192");
  EXPECT_THAT(thrown<std::out_of_range>([&] { in.set("z", small); }),
              HasSubstr("no input \"z\" in program dot_relu_dot; its inputs are \"x\""));
  drd::Program::Outputs out;
  EXPECT_EQ(thrown<std::invalid_argument>([&] { out.set("y", small); }),
            "Outputs::set(\"y\"): got 1000 floats, but the output f32[8,1024] has 8192");
  // A field left null, with no per-device blocks either, is refused before
  // any device runs.
  EXPECT_EQ(thrown<std::invalid_argument>([&] { program.forward(in, out); }),
            "forward: input \"x\" f32[8,1024] has no global array (Inputs::x) and no block for "
            "device 0 (Inputs::set_block)");
  // Blocks for only some devices are not enough either.
  std::vector<float> block(drd::input_info("x").local_elements());
  for (int r = 0; r < 7; ++r) in.set_block("x", r, block);
  EXPECT_EQ(thrown<std::invalid_argument>([&] { program.forward(in, out); }),
            "forward: input \"x\" f32[8,1024] has no global array (Inputs::x) and no block for "
            "device 7 (Inputs::set_block)");
  // A block is checked against the device's share, the device and the dtype.
  EXPECT_EQ(thrown<std::invalid_argument>([&] { in.set_block("x", 0, small); }),
            "Inputs::set_block(\"x\", device 0): got 1000 elements, but the device's block "
            "f32[4,1024] has 4096");
  EXPECT_EQ(thrown<std::out_of_range>([&] { in.set_block("x", 8, block); }),
            "Inputs::set_block(\"x\", device 8): no such device; the mesh has 8");
  std::vector<int32_t> ids(block.size());
  EXPECT_EQ(thrown<std::invalid_argument>([&] { in.set_block("x", 1, ids); }),
            "Inputs::set_block(\"x\", device 1): the block is f32; pass float values");
  EXPECT_THAT(thrown<std::out_of_range>([&] { in.set_block("z", 1, block); }),
              HasSubstr("no input \"z\" in program dot_relu_dot"));
  EXPECT_EQ(thrown<std::out_of_range>([&] { program.parameter_shard(8, "w2"); }),
            "parameter_shard: device 8 is not one of this process's (process 0 of 1 drives 0, 1, 2, 3, "
            "4, 5, 6, 7)");
}

// Per-process loading, on one process: every device fed its own block of
// the input (block_offset says which) and handing back its block of the
// output computes what the global arrays do, bit for bit.
TEST(ProgramApi, PerDeviceBlocksMatchGlobalArrays) {
  rt::ThreadWorld world(drd::mesh_shape());
  drd::Program program(world);
  program.init(3);
  const rt::TensorInfo& xi = drd::input_info("x");
  const rt::TensorInfo& yi = drd::output_info("y");
  std::vector<float> x(xi.elements());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * static_cast<float>(i));
  std::vector<float> y(yi.elements(), -1.0f);
  drd::Program::Inputs global_in;
  drd::Program::Outputs global_out;
  global_in.set("x", x);
  global_out.set("y", y);
  program.forward(global_in, global_out);

  drd::Program::Inputs in;
  drd::Program::Outputs out;
  std::vector<std::vector<float>> xb(8), yb(8);
  for (int r = 0; r < 8; ++r) {
    EXPECT_TRUE(drd::Program::holds_parameter(r, "w2"));
    const std::vector<int64_t> off = drd::Program::block_offset(xi, r);
    EXPECT_EQ(off, (std::vector<int64_t>{(r / 4) * 4, 0})) << r;  // data = r / 4
    xb[r].resize(xi.local_elements());
    rt::copy_block_from_global(xi, off, x.data(), xb[r].data());
    in.set_block("x", r, xb[r]);
    yb[r].assign(yi.local_elements(), -1.0f);
    out.set_block("y", r, yb[r]);
  }
  program.forward(in, out);
  std::vector<float> assembled(y.size(), -1.0f);
  for (int r = 0; r < 8; ++r) rt::copy_block_to_global(yi, drd::Program::block_offset(yi, r), yb[r].data(), assembled.data());
  EXPECT_EQ(std::memcmp(assembled.data(), y.data(), y.size() * sizeof(float)), 0);
}

// The runs a loader reads for one block: whole rows when only the first
// dimension is split, one run per row otherwise.
TEST(ProgramApi, BlockRunsCoverTheBlockInOrder) {
  rt::TensorInfo t{"t", "f32", {4, 6}, {{"data"}, {"model"}}, {2, 3}, ""};
  const std::vector<rt::BlockRun> runs = rt::block_runs(t, {2, 3});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].global, 2 * 6 + 3);
  EXPECT_EQ(runs[0].block, 0);
  EXPECT_EQ(runs[0].elements, 3);
  EXPECT_EQ(runs[1].global, 3 * 6 + 3);
  EXPECT_EQ(runs[1].block, 3);
  rt::TensorInfo rows{"r", "f32", {4, 6}, {{"data"}, {}}, {2, 6}, ""};
  const std::vector<rt::BlockRun> whole = rt::block_runs(rows, {2, 0});
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].global, 12);
  EXPECT_EQ(whole[0].elements, 12);
}

TEST(ProgramApi, SpansMoveWholeParametersAndBindInputs) {
  rt::ThreadWorld world(drd::mesh_shape());
  drd::Program program(world);
  program.init(0);
  for (const rt::TensorInfo& p : drd::Program::parameters()) {
    std::vector<float> v(p.elements());
    std::iota(v.begin(), v.end(), 0.5f);
    program.set_parameter(p.name, v);
    std::vector<float> back(p.elements(), -1.0f);
    program.get_parameter(p.name, back);
    EXPECT_EQ(back, v) << p.name;
    // Device 0 holds the first block: for dot1/kernel (split on columns) the
    // first 256 columns of row 0 start the shard.
    EXPECT_EQ(program.parameter_shard_size(p.name), static_cast<size_t>(p.local_elements()));
  }
  std::vector<float> x(drd::input_info("x").elements(), 0.25f);
  std::vector<float> y(drd::output_info("y").elements(), -1.0f);
  drd::Program::Inputs in;
  drd::Program::Outputs out;
  in.set("x", x);
  out.set("y", y);
  EXPECT_EQ(in.x, x.data());
  EXPECT_EQ(out.y, y.data());
  program.forward(in, out);
  EXPECT_NE(y[0], -1.0f);
}

}  // namespace
}  // namespace sharc

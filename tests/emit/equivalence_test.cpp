// Generated-code equivalence. Each generated program (built by
// sharc_add_program in this folder's CMakeLists.txt) runs init + forward on a
// ThreadWorld and is checked three ways:
//  - against the fp64 oracle (sharc::interpret of the global program), within
//    a tolerance: the claim users rely on;
//  - bit for bit against the per-device interpreter (execute_partitioned) on
//    the same partitioned IR, with the same per-device collective calls and
//    bytes: the emitter's contract is to do exactly what the interpreter does;
//  - every parameter shard equals its block of the globally initialised
//    parameter: sharded init is mesh independent.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "dsl/program.h"
#include "emit_dot_relu_dot_1x8.h"
#include "emit_dot_relu_dot_2x4.h"
#include "emit_dot_relu_dot_4x2.h"
#include "emit_dot_relu_dot_8x1.h"
#include "emit_logical_dot_relu_dot_2x4.h"
#include "emit_ops_model_2x4.h"

namespace sharc {
namespace {

using Arrays = std::map<std::string, std::vector<float>>;

// What one run of a generated program left behind.
struct GeneratedRun {
  Arrays outputs;
  std::vector<rt::CommStats> comm;
  // shards[path][rank]: the parameter shard device `rank` holds.
  std::map<std::string, std::vector<std::vector<float>>> shards;
};

// Runs generated program G (a namespace's Program and constants wrapped in a
// traits struct) on its own mesh; `bind` points the Inputs/Outputs fields at
// the arrays.
template <class G>
GeneratedRun run_generated(const Arrays& inputs, uint64_t seed) {
  rt::ThreadWorld world(G::mesh_shape());
  typename G::Program program(world);
  program.init(seed);
  GeneratedRun run;
  typename G::Program::Inputs in;
  typename G::Program::Outputs out;
  G::bind(inputs, run.outputs, in, out);
  program.forward(in, out);
  for (int r = 0; r < world.size(); ++r) run.comm.push_back(world.comm(r).stats());
  for (std::string_view path : G::kParameterPaths) {
    auto& shards = run.shards[std::string(path)];
    for (int r = 0; r < world.size(); ++r) {
      const float* p = program.parameter_shard(r, path);
      shards.emplace_back(p, p + program.parameter_shard_size(path));
    }
  }
  return run;
}

template <size_t N>
std::vector<float> zeros(const std::array<int64_t, N>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return std::vector<float>(n, 0.0f);
}

// A global shape and layout as the generated header states them.
struct Layout {
  ir::Shape shape;
  std::vector<std::vector<std::string>> spec;
};

template <size_t N>
ir::Shape to_vector(const std::array<int64_t, N>& a) {
  return ir::Shape(a.begin(), a.end());
}

// Traits of each generated program: its namespace's API plus what the test
// needs to rebuild the same IR in process (registered program, mesh).
#define SHARC_DOT_RELU_DOT_TRAITS(Name, ns, program_name, mesh_text)                               \
  struct Name {                                                                                    \
    using Program = ns::Program;                                                                   \
    static constexpr const char* kName = #Name;                                                    \
    static constexpr const char* kProgram = program_name;                                          \
    static constexpr const char* kMeshText = mesh_text;                                            \
    static constexpr auto& kParameterPaths = ns::kParameterPaths;                                  \
    static rt::MeshShape mesh_shape() { return ns::mesh_shape(); }                                 \
    static void bind(const Arrays& inputs, Arrays& outputs, Program::Inputs& in,                   \
                     Program::Outputs& out) {                                                      \
      in.x = inputs.at("x").data();                                                                \
      outputs["y"] = zeros(ns::kOutput_y_shape);                                                   \
      out.y = outputs["y"].data();                                                                 \
    }                                                                                              \
    static Arrays inputs() { return {{"x", input_values(ns::kInput_x_shape)}}; }                   \
    static std::map<std::string, Layout> layouts() {                                               \
      return {                                                                                     \
          {"x", {to_vector(ns::kInput_x_shape), ns::kInput_x_spec}},                               \
          {"y", {to_vector(ns::kOutput_y_shape), ns::kOutput_y_spec}},                             \
          {"dot1/kernel", {to_vector(ns::kParam_dot1_kernel_shape), ns::kParam_dot1_kernel_spec}}, \
          {"w2", {to_vector(ns::kParam_w2_shape), ns::kParam_w2_spec}}};                           \
    }                                                                                              \
  };

// A deterministic input: x[i] = sin(0.37 i) + 0.25 (as the e2e tests).
template <size_t N>
std::vector<float> input_values(const std::array<int64_t, N>& shape) {
  std::vector<float> x = zeros(shape);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i) + 0.25);
  return x;
}

SHARC_DOT_RELU_DOT_TRAITS(DotReluDot8x1, sharc_gen::emit_dot_relu_dot_8x1, "dot_relu_dot",
                          "data=8,model=1")
SHARC_DOT_RELU_DOT_TRAITS(DotReluDot4x2, sharc_gen::emit_dot_relu_dot_4x2, "dot_relu_dot",
                          "data=4,model=2")
SHARC_DOT_RELU_DOT_TRAITS(DotReluDot2x4, sharc_gen::emit_dot_relu_dot_2x4, "dot_relu_dot",
                          "data=2,model=4")
SHARC_DOT_RELU_DOT_TRAITS(DotReluDot1x8, sharc_gen::emit_dot_relu_dot_1x8, "dot_relu_dot",
                          "data=1,model=8")
SHARC_DOT_RELU_DOT_TRAITS(LogicalDotReluDot2x4, sharc_gen::emit_logical_dot_relu_dot_2x4,
                          "logical_dot_relu_dot", "data=2,model=4")

struct OpsModel2x4 {
  using Program = sharc_gen::emit_ops_model_2x4::Program;
  static constexpr const char* kName = "OpsModel2x4";
  static constexpr const char* kProgram = "ops_model";
  static constexpr const char* kMeshText = "data=2,model=4";
  static constexpr auto& kParameterPaths = sharc_gen::emit_ops_model_2x4::kParameterPaths;
  static rt::MeshShape mesh_shape() { return sharc_gen::emit_ops_model_2x4::mesh_shape(); }
  static void bind(const Arrays& inputs, Arrays& outputs, Program::Inputs& in,
                   Program::Outputs& out) {
    namespace ns = sharc_gen::emit_ops_model_2x4;
    in.x = inputs.at("x").data();
    outputs["y"] = zeros(ns::kOutput_y_shape);
    outputs["h"] = zeros(ns::kOutput_h_shape);
    out.y = outputs["y"].data();
    out.h = outputs["h"].data();
    outputs["moved"] = zeros(ns::kOutput_moved_shape);
    outputs["sliced"] = zeros(ns::kOutput_sliced_shape);
    outputs["total"] = zeros(ns::kOutput_total_shape);
    out.moved = outputs["moved"].data();
    out.sliced = outputs["sliced"].data();
    out.total = outputs["total"].data();
  }
  static Arrays inputs() {
    return {{"x", input_values(sharc_gen::emit_ops_model_2x4::kInput_x_shape)}};
  }
  static std::map<std::string, Layout> layouts() {
    namespace ns = sharc_gen::emit_ops_model_2x4;
    return {{"h", {to_vector(ns::kOutput_h_shape), ns::kOutput_h_spec}},
            {"moved", {to_vector(ns::kOutput_moved_shape), ns::kOutput_moved_spec}},
            {"total", {to_vector(ns::kOutput_total_shape), ns::kOutput_total_spec}},
            {"up/bias", {to_vector(ns::kParam_up_bias_shape), ns::kParam_up_bias_spec}},
            {"norm/scale", {to_vector(ns::kParam_norm_scale_shape), ns::kParam_norm_scale_spec}},
            {"w_down", {to_vector(ns::kParam_w_down_shape), ns::kParam_w_down_spec}}};
  }
};

// The block of a global row-major array that starts at `offset`, row-major.
std::vector<float> block_of(const std::vector<float>& full, const ir::Shape& global,
                            const std::vector<int64_t>& offset, const ir::Shape& local) {
  std::vector<float> out;
  std::vector<int64_t> idx(local.size(), 0);
  for (int64_t e = 0; e < ir::num_elements(local); ++e) {
    int64_t g = 0;
    for (size_t d = 0; d < local.size(); ++d) g = g * global[d] + offset[d] + idx[d];
    out.push_back(full[g]);
    for (int d = static_cast<int>(local.size()) - 1; d >= 0; --d) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

HostValues to_host(const Arrays& a) {
  HostValues h;
  for (auto& [k, v] : a) h[k].assign(v.begin(), v.end());
  return h;
}

// One generated program under test: how to run it and what to rebuild in
// process (the registered program and the mesh it was generated for).
struct Case {
  const char* name;
  const char* program;
  const char* mesh;
  GeneratedRun (*run)(const Arrays& inputs, uint64_t seed);
  Arrays (*inputs)();
  std::map<std::string, Layout> (*layouts)();
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " (" << c.mesh << ")";
}

template <class G>
Case make_case() {
  return {G::kName, G::kProgram, G::kMeshText, &run_generated<G>, &G::inputs, &G::layouts};
}

class Generated : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    global_ = trace(c.program, ProgramRegistry::all().at(c.program));
    lowered_ = lower(global_, Mesh::parse(c.mesh));
    inputs_ = c.inputs();
    run_ = c.run(inputs_, kSeed);
  }
  static constexpr uint64_t kSeed = 7;
  ir::Graph global_;
  Lowered lowered_;
  Arrays inputs_;
  GeneratedRun run_;
};

INSTANTIATE_TEST_SUITE_P(Programs, Generated,
                         ::testing::Values(make_case<DotReluDot8x1>(), make_case<DotReluDot4x2>(),
                                           make_case<DotReluDot2x4>(), make_case<DotReluDot1x8>(),
                                           make_case<LogicalDotReluDot2x4>(),
                                           make_case<OpsModel2x4>()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

// fp32 per-device math against the fp64 oracle, relative to each output's max
// magnitude: a 1024-long dot of O(1) values accumulates ~1e-7 relative error
// per term, so 1e-5 leaves a 10x margin (ops_model's softmax, layer_norm and
// log/exp chain stay well inside it too).
TEST_P(Generated, MatchesOracle) {
  const HostValues want = interpret(global_, to_host(inputs_), kSeed);
  for (auto& [name, got] : run_.outputs) {
    const std::vector<double>& w = want.at(name);
    ASSERT_EQ(got.size(), w.size()) << name;
    double scale = 0, worst = 0;
    size_t at = 0;
    for (double v : w) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < got.size(); ++i)
      if (std::fabs(got[i] - w[i]) > worst) worst = std::fabs(got[i] - w[i]), at = i;
    EXPECT_LE(worst, 1e-5 * scale)
        << "output " << name << ": max abs error " << worst << " at " << at << ": got " << got[at]
        << " want " << w[at] << " (scale " << scale << ")";
  }
}

TEST_P(Generated, MatchesPerDeviceInterpreterBitForBit) {
  const ExecResult want = execute_partitioned(lowered_.partitioned, to_host(inputs_), kSeed);
  for (auto& [name, got] : run_.outputs) {
    const std::vector<double>& w = want.outputs.at(name);
    ASSERT_EQ(got.size(), w.size()) << name;
    int shown = 0;
    for (size_t i = 0; i < got.size() && shown < 5; ++i)
      if (static_cast<double>(got[i]) != w[i]) {
        ADD_FAILURE() << "output " << name << "[" << i << "]: generated " << got[i]
                      << ", interpreter " << w[i];
        ++shown;
      }
  }
  ASSERT_EQ(run_.comm.size(), want.comm.size());
  for (size_t r = 0; r < want.comm.size(); ++r)
    for (int k = 0; k < rt::kNumCollectiveKinds; ++k) {
      const char* kind = rt::collective_kind_name(static_cast<rt::CollectiveKind>(k));
      EXPECT_EQ(run_.comm[r].bytes_sent[k], want.comm[r].bytes_sent[k])
          << "device " << r << " " << kind;
      EXPECT_EQ(run_.comm[r].calls[k], want.comm[r].calls[k]) << "device " << r << " " << kind;
    }
}

// The shapes and Specs the header exposes are those of the partitioned IR.
TEST_P(Generated, HeaderStatesTheLayouts) {
  const ir::Graph& local = lowered_.partitioned;
  for (auto& [name, layout] : GetParam().layouts()) {
    const ir::Node* n = local.find(name, ir::Op::kParameter);
    if (!n) n = local.find(name, ir::Op::kInput);
    if (!n)
      for (auto& o : local.outputs)
        if (o.name == name) n = &local[o.value];
    ASSERT_NE(n, nullptr) << name;
    EXPECT_EQ(layout.spec, n->sharding->dims) << name;
    ir::Shape global = n->shape;
    for (size_t d = 0; d < global.size(); ++d) global[d] *= n->sharding->parts(local.mesh, d);
    EXPECT_EQ(layout.shape, global) << name;
  }
}

TEST_P(Generated, ParameterShardsAreBlocksOfTheGlobalInit) {
  const ir::Graph& local = lowered_.partitioned;
  const Mesh& mesh = local.mesh;
  for (const ir::Node& p : global_.nodes) {
    if (p.op != ir::Op::kParameter) continue;
    const ir::Node* lp = local.find(p.name, ir::Op::kParameter);
    ASSERT_NE(lp, nullptr) << p.name;
    const std::vector<float> full = init_global(p, kSeed);
    const auto& shards = run_.shards.at(p.name);
    ASSERT_EQ(shards.size(), static_cast<size_t>(mesh.num_devices()));
    for (int r = 0; r < mesh.num_devices(); ++r) {
      const std::vector<float> want =
          block_of(full, p.shape, block_offset(*lp->sharding, lp->shape, mesh, r), lp->shape);
      ASSERT_EQ(shards[r].size(), want.size()) << p.name << " on device " << r;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(shards[r][i], want[i]) << p.name << " on device " << r << ", element " << i;
    }
  }
}

}  // namespace
}  // namespace sharc

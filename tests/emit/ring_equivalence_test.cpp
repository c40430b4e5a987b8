// Generated-code equivalence for ring collective matmuls (ring_model.cpp:
// every dot forced onto a ring by ProgramBuilder::set_collective_matmul). Each
// generated program runs init + forward on a ThreadWorld and is checked
//  - bit for bit against the per-device interpreter on the same partitioned
//    IR, with the same ppermute calls and bytes on every device: the emitter
//    prints the interpreter's ring steps statement for statement;
//  - within 1e-5 (relative to each output's largest magnitude) against the
//    fp64 oracle;
// and the IR and the generated source really are rings: no all_gather or
// reduce_scatter left, one loop of ppermutes per RingDot.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "dsl/program.h"
#include "emit_ring_mlp_2x4.h"
#include "emit_ring_ops_bi.h"
#include "emit_ring_ops_uni.h"

namespace sharc {
namespace {

using Arrays = std::map<std::string, std::vector<float>>;

template <size_t N>
std::vector<float> values(const std::array<int64_t, N>& shape, double phase) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * i + phase) + 0.25);
  return v;
}

template <size_t N>
float* output(Arrays& outputs, const std::string& name, const std::array<int64_t, N>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  outputs[name].assign(n, 0.0f);
  return outputs[name].data();
}

struct GeneratedRun {
  Arrays inputs, outputs;
  std::vector<rt::CommStats> comm;
};

// ring_ops_uni and ring_ops_bi share their API; NS is the generated namespace.
#define SHARC_RING_OPS_RUN(fn, NS)                                                          \
  GeneratedRun fn() {                                                                       \
    namespace ns = NS;                                                                      \
    GeneratedRun r;                                                                         \
    r.inputs = {                                                                            \
        {"x", values(ns::kInput_x_shape, 0.1)},   {"xt", values(ns::kInput_xt_shape, 0.2)}, \
        {"xb", values(ns::kInput_xb_shape, 0.3)}, {"wb", values(ns::kInput_wb_shape, 0.4)}, \
        {"ht", values(ns::kInput_ht_shape, 0.5)}, {"a", values(ns::kInput_a_shape, 0.6)},   \
        {"c", values(ns::kInput_c_shape, 0.7)}};                                            \
    ns::Program::Inputs in;                                                                 \
    in.x = r.inputs["x"].data();                                                            \
    in.xt = r.inputs["xt"].data();                                                          \
    in.xb = r.inputs["xb"].data();                                                          \
    in.wb = r.inputs["wb"].data();                                                          \
    in.ht = r.inputs["ht"].data();                                                          \
    in.a = r.inputs["a"].data();                                                            \
    in.c = r.inputs["c"].data();                                                            \
    ns::Program::Outputs out;                                                               \
    out.y = output(r.outputs, "y", ns::kOutput_y_shape);                                    \
    out.z = output(r.outputs, "z", ns::kOutput_z_shape);                                    \
    out.v = output(r.outputs, "v", ns::kOutput_v_shape);                                    \
    out.u = output(r.outputs, "u", ns::kOutput_u_shape);                                    \
    out.s = output(r.outputs, "s", ns::kOutput_s_shape);                                    \
    rt::ThreadWorld world(ns::mesh_shape());                                                \
    ns::Program program(world);                                                             \
    program.init(kSeed);                                                                    \
    program.forward(in, out);                                                               \
    for (int d = 0; d < world.size(); ++d) r.comm.push_back(world.comm(d).stats());         \
    return r;                                                                               \
  }

constexpr uint64_t kSeed = 5;

SHARC_RING_OPS_RUN(run_ring_ops_uni, sharc_gen::emit_ring_ops_uni)
SHARC_RING_OPS_RUN(run_ring_ops_bi, sharc_gen::emit_ring_ops_bi)

GeneratedRun run_ring_mlp() {
  namespace ns = sharc_gen::emit_ring_mlp_2x4;
  GeneratedRun r;
  r.inputs = {{"x", values(ns::kInput_x_shape, 0.1)}};
  ns::Program::Inputs in;
  in.x = r.inputs["x"].data();
  ns::Program::Outputs out;
  out.y = output(r.outputs, "y", ns::kOutput_y_shape);
  rt::ThreadWorld world(ns::mesh_shape());
  ns::Program program(world);
  program.init(kSeed);
  program.forward(in, out);
  for (int d = 0; d < world.size(); ++d) r.comm.push_back(world.comm(d).stats());
  return r;
}

struct Case {
  const char* name;     // generated library (sharc_add_program NAME)
  const char* program;  // registered program
  const char* mesh;
  int rings;  // RingDots expected in the partitioned IR
  GeneratedRun (*run)();
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class RingGenerated : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    global_ = trace(c.program, ProgramRegistry::all().at(c.program));
    lowered_ = lower(global_, Mesh::parse(c.mesh));
    run_ = c.run();
    for (auto& [k, v] : run_.inputs) inputs_[k].assign(v.begin(), v.end());
  }
  ir::Graph global_;
  Lowered lowered_;
  GeneratedRun run_;
  HostValues inputs_;
};

INSTANTIATE_TEST_SUITE_P(
    Rings, RingGenerated,
    ::testing::Values(Case{"emit_ring_ops_uni", "ring_ops_uni", "model=4", 6, &run_ring_ops_uni},
                      Case{"emit_ring_ops_bi", "ring_ops_bi", "model=4", 6, &run_ring_ops_bi},
                      Case{"emit_ring_mlp_2x4", "ring_mlp", "data=2,model=4", 2, &run_ring_mlp}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST_P(RingGenerated, EveryDotIsARing) {
  int rings = 0;
  for (auto& n : lowered_.partitioned.nodes) {
    rings += n.op == ir::Op::kRingDot;
    EXPECT_NE(n.op, ir::Op::kAllGather) << ir::to_string(lowered_.partitioned);
    EXPECT_NE(n.op, ir::Op::kReduceScatter) << ir::to_string(lowered_.partitioned);
  }
  EXPECT_EQ(rings, GetParam().rings);
}

TEST_P(RingGenerated, MatchesPerDeviceInterpreterBitForBit) {
  const ExecResult want = execute_partitioned(lowered_.partitioned, inputs_, kSeed);
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
  for (size_t d = 0; d < want.comm.size(); ++d) {
    EXPECT_GT(want.comm[d].count(rt::CollectiveKind::kPPermute), 0u) << "device " << d;
    for (int k = 0; k < rt::kNumCollectiveKinds; ++k) {
      const char* kind = rt::collective_kind_name(static_cast<rt::CollectiveKind>(k));
      EXPECT_EQ(run_.comm[d].bytes_sent[k], want.comm[d].bytes_sent[k])
          << "device " << d << " " << kind;
      EXPECT_EQ(run_.comm[d].calls[k], want.comm[d].calls[k]) << "device " << d << " " << kind;
    }
  }
}

// 1e-5 of each output's scale: at most 64-term fp32 dot products of O(1)
// values, ~1e-7 relative error per term.
TEST_P(RingGenerated, MatchesOracle) {
  const HostValues want = interpret(global_, inputs_, kSeed);
  for (auto& [name, got] : run_.outputs) {
    const std::vector<double>& w = want.at(name);
    ASSERT_EQ(got.size(), w.size()) << name;
    double scale = 0, worst = 0;
    for (double v : w) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - w[i]));
    EXPECT_LE(worst, 1e-5 * scale) << "output " << name;
  }
}

// The generated source runs each ring as one loop of ppermutes.
TEST_P(RingGenerated, SourceHasOneRingLoopPerRingDot) {
  const std::string name = GetParam().name;
  std::ifstream f(std::string(SHARC_GENERATED_DIR) + "/" + name + "/" + name + ".cpp");
  ASSERT_TRUE(f) << "cannot read the generated " << name << ".cpp";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string src = ss.str();
  auto count = [&](const std::string& what) {
    int n = 0;
    for (size_t at = src.find(what); at != std::string::npos; at = src.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("}  // ring step"), GetParam().rings) << src;
  EXPECT_EQ(count("=> ring_dot "), GetParam().rings) << src;
  EXPECT_EQ(count("rt::all_gather_dim("), 0);
  EXPECT_EQ(count("rt::reduce_scatter_dim("), 0);
}

}  // namespace
}  // namespace sharc

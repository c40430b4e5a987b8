// Generated code in bf16 mixed precision (mixed_precision_model.cpp: f32
// master weights, bf16 matmul inputs and activations, f32 loss), on three
// meshes: data parallel (gradients widened and reduced in f32), data x
// tensor parallel (bf16 reduce_scatter / all_gather of activations) and
// tensor parallel with every dot on a ring (bf16 ppermutes and ring adds).
// Five training steps of the generated Program are checked
//  - bit for bit against the per-device interpreter (execute_partitioned,
//    bf16 rounded after every op, collectives on bf16 copies): the loss and
//    every parameter after every step, and the bytes each device sends;
//  - against the fp64 oracle within the bf16 bound of the dtype tests (2% of
//    the loss, 2% of each parameter's largest magnitude; see
//    tests/dsl/dtype_test.cpp for why);
//  - against the report: bytes per device and kind, and the peak memory,
//    counted with bf16 buffers at two bytes, equal exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "dsl/program.h"
#include "tests/common/golden.h"
#include "emit_classifier_i32_2x2.h"
#include "emit_mixed_mlp_data2_model2.h"
#include "emit_mixed_mlp_data4.h"
#include "emit_mixed_mlp_ring_model4.h"

namespace sharc {
namespace {

#define SHARC_MIXED_TRAITS(Name, ns, program_name, mesh_text)      \
  struct Name {                                                    \
    using Program = ns::Program;                                   \
    static constexpr const char* kProgram = program_name;          \
    static constexpr const char* kMesh = mesh_text;                \
    static constexpr auto& kParameters = ns::kParameters;          \
    static rt::MeshShape mesh_shape() { return ns::mesh_shape(); } \
  };

SHARC_MIXED_TRAITS(Data4, sharc_gen::emit_mixed_mlp_data4, "mixed_mlp", "data=4,model=1")
SHARC_MIXED_TRAITS(Data2Model2, sharc_gen::emit_mixed_mlp_data2_model2, "mixed_mlp",
                   "data=2,model=2")
SHARC_MIXED_TRAITS(RingModel4, sharc_gen::emit_mixed_mlp_ring_model4, "mixed_mlp_ring",
                   "data=1,model=4")

constexpr uint64_t kSeed = 11;
constexpr int kSteps = 5;

template <class G>
class MixedPrecision : public ::testing::Test {};
using Programs = ::testing::Types<Data4, Data2Model2, RingModel4>;
TYPED_TEST_SUITE(MixedPrecision, Programs);

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

TYPED_TEST(MixedPrecision, FiveStepsMatchInterpreterBitForBitAndOracleWithinBF16) {
  const ir::Graph global =
      trace(TypeParam::kProgram, ProgramRegistry::all().at(TypeParam::kProgram));
  const Lowered lowered = lower(global, Mesh::parse(TypeParam::kMesh));
  const Report report = predict(lowered.partitioned);

  std::vector<float> x(8 * 16), y(8 * 4), loss(1);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * i) * 1.5);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(std::cos(0.3 * i));
  HostValues host = {{"x", {x.begin(), x.end()}}, {"y", {y.begin(), y.end()}}};

  rt::ThreadWorld world(TypeParam::mesh_shape());
  typename TypeParam::Program program(world);
  program.init(kSeed);
  HostValues exec_state, oracle_state;
  for (int k = 0; k < kSteps; ++k) {
    SCOPED_TRACE("step " + std::to_string(k) + " on " + std::string(TypeParam::kMesh));
    typename TypeParam::Program::Inputs in;
    in.set("x", x).set("y", y);
    typename TypeParam::Program::Outputs out;
    std::vector<float> grad_norm(1), lr(1);
    out.set("loss", loss).set("grad_norm", grad_norm).set("lr", lr);
    world.reset_stats();
    program.step(in, out);

    const ExecResult exec =
        execute_partitioned(lowered.partitioned, host, kSeed, k == 0 ? nullptr : &exec_state);
    const HostValues oracle = interpret(global, host, kSeed, &oracle_state);
    exec_state = exec.params;

    EXPECT_EQ(static_cast<double>(loss[0]), exec.outputs.at("loss")[0]) << "bit for bit";
    const double l0 = oracle.at("loss")[0];
    EXPECT_LE(std::fabs(loss[0] - l0), 2e-2 * std::fabs(l0));
    for (const rt::TensorInfo& p : TypeParam::kParameters) {
      const std::string path(p.name);
      std::vector<float> got(exec.params.at(path).size());
      program.get_parameter(path, got);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(static_cast<double>(got[i]), exec.params.at(path)[i]) << path << "[" << i << "]";
      const std::vector<double>& o = oracle_state.at(path);
      double diff = 0;
      for (size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::fabs(got[i] - o[i]));
      EXPECT_LE(diff, 2e-2 * max_abs(o)) << path;
    }
    for (int r = 0; r < world.size(); ++r)
      for (int c = 0; c < rt::kNumCollectiveKinds; ++c) {
        const char* kind = rt::collective_kind_name(static_cast<rt::CollectiveKind>(c));
        EXPECT_EQ(world.comm(r).stats().bytes_sent[c], exec.comm[r].bytes_sent[c])
            << "device " << r << " " << kind;
        EXPECT_EQ(world.comm(r).stats().bytes_sent[c], report.bytes[r][c])
            << "device " << r << " " << kind;
      }
    if (k == 0) {  // the report's peak: construction, init and one step
      for (int r = 0; r < world.size(); ++r)
        EXPECT_EQ(world.memory(r).peak(), report.peak_bytes[r]) << "device " << r;
    }
  }
}

// i32 labels: the generated API takes them as int32_t (its table says i32),
// refuses a float span for them by name, and three training steps equal the
// interpreter bit for bit and the fp64 oracle within f32 rounding (1e-5 of
// the loss; the program is f32 but for its labels).
TEST(I32Inputs, LabelsAsInt32MatchInterpreterAndOracle) {
  namespace ns = sharc_gen::emit_classifier_i32_2x2;
  EXPECT_EQ(ns::input_info("labels").dtype, "i32");
  EXPECT_EQ(ns::input_info("x").dtype, "f32");
  const ir::Graph global = trace("classifier_i32", ProgramRegistry::all().at("classifier_i32"));
  const Lowered lowered = lower(global, Mesh::parse("data=2,model=2"));
  std::vector<float> x(8 * 16), loss(1), grad_norm(1), lr(1);
  std::vector<int32_t> labels(8);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.3 * i));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((5 * i + 1) % 4);
  const HostValues host = {{"x", {x.begin(), x.end()}}, {"labels", {labels.begin(), labels.end()}}};

  rt::ThreadWorld world(ns::mesh_shape());
  ns::Program program(world);
  program.init(kSeed);
  ns::Program::Inputs in;
  try {
    in.set("labels", std::span<const float>(x.data(), 8));
    ADD_FAILURE() << "a float span bound to i32 labels";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Inputs::set: input \"labels\" is i32; pass int32_t values");
  }
  in.set("x", x).set("labels", labels);
  ns::Program::Outputs out;
  out.set("loss", loss).set("grad_norm", grad_norm).set("lr", lr);
  HostValues exec_state, oracle_state;
  for (int k = 0; k < 3; ++k) {
    program.step(in, out);
    const ExecResult exec =
        execute_partitioned(lowered.partitioned, host, kSeed, k == 0 ? nullptr : &exec_state);
    exec_state = exec.params;
    const HostValues oracle = interpret(global, host, kSeed, &oracle_state);
    EXPECT_EQ(static_cast<double>(loss[0]), exec.outputs.at("loss")[0]) << "step " << k;
    EXPECT_NEAR(loss[0], oracle.at("loss")[0], 1e-5 * std::fabs(oracle.at("loss")[0]))
        << "step " << k;
  }
}

// The generated code really is bf16: activations in rt::BufferBF16, bf16
// GEMMs, rounding in fused loops; the parameter table still says f32 (master
// weights).
TEST(MixedPrecisionSource, ActivationsAreBF16BuffersAndParametersF32) {
  for (const rt::TensorInfo& p : sharc_gen::emit_mixed_mlp_data2_model2::kParameters)
    EXPECT_EQ(p.dtype, "f32") << p.name;
  const std::string src = sharc::testing::read_generated(
      std::string(SHARC_GENERATED_DIR) + "/emit_mixed_mlp_data2_model2", "emit_mixed_mlp_data2_model2");
  ASSERT_FALSE(src.empty()) << "generated source not found";
  for (const char* want : {"rt::BufferBF16 ", "rt::bf16(", "static_cast<float>("})
    EXPECT_NE(src.find(want), std::string::npos) << want;
}

}  // namespace
}  // namespace sharc

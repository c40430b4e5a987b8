// Generated-code equivalence for a TRAINING program (train_ops_model.cpp:
// every training op, hand-written parameter updates, an optimizer-state
// parameter), generated for two meshes. Three steps of the generated Program
// (step() with the step number as the dropout seed) are checked
//  - bit for bit against three steps of the per-device interpreter
//    (execute_partitioned, each step fed the previous step's
//    ExecResult::params as `state`): outputs, every parameter after every
//    step, and the collective calls and bytes of every step;
//  - within 1e-5 (relative to each tensor's largest magnitude) against three
//    steps of the fp64 oracle (interpret() with its `state` argument);
// and set_parameter/get_parameter move whole parameters in and out exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "dsl/program.h"
#include "emit_train_ops_model_2x4.h"
#include "emit_train_ops_model_4x2.h"

namespace sharc {
namespace {

using Arrays = std::map<std::string, std::vector<float>>;

template <size_t N>
std::vector<float> zeros(const std::array<int64_t, N>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return std::vector<float>(n, 0.0f);
}

// The program's inputs for step `k`: fixed data, the step number as the seed.
Arrays step_inputs(int k) {
  Arrays a;
  a["x"].resize(8 * 16);
  for (size_t i = 0; i < a["x"].size(); ++i)
    a["x"][i] = static_cast<float>(std::sin(0.37 * i) + 0.25);
  for (int i = 0; i < 8; ++i) a["labels"].push_back(static_cast<float>((3 * i + 1) % 8));
  for (int i = 0; i < 8 * 4; ++i) a["target"].push_back(static_cast<float>(std::cos(0.11 * i)));
  a["step"] = {static_cast<float>(k)};
  return a;
}

HostValues to_host(const Arrays& a) {
  HostValues h;
  for (auto& [k, v] : a) h[k].assign(v.begin(), v.end());
  return h;
}

// Traits of one generated program: its namespace's API and the mesh it was
// generated for (to rebuild the same IR in process).
#define SHARC_TRAIN_TRAITS(Name, ns, mesh_text)                                  \
  struct Name {                                                                  \
    using Program = ns::Program;                                                 \
    static constexpr const char* kMeshText = mesh_text;                          \
    static constexpr auto& kParameterPaths = ns::kParameterPaths;                \
    static rt::MeshShape mesh_shape() { return ns::mesh_shape(); }               \
    static void bind(const Arrays& inputs, Arrays& outputs, Program::Inputs& in, \
                     Program::Outputs& out) {                                    \
      in.x = inputs.at("x").data();                                              \
      in.labels = inputs.at("labels").data();                                    \
      in.target = inputs.at("target").data();                                    \
      in.step = inputs.at("step").data();                                        \
      outputs["loss"] = zeros(ns::kOutput_loss_shape);                           \
      outputs["logits"] = zeros(ns::kOutput_logits_shape);                       \
      outputs["mask"] = zeros(ns::kOutput_mask_shape);                           \
      out.loss = outputs["loss"].data();                                         \
      out.logits = outputs["logits"].data();                                     \
      out.mask = outputs["mask"].data();                                         \
      outputs["swap_a"] = zeros(ns::kOutput_swap_a_shape);                       \
      out.swap_a = outputs["swap_a"].data();                                     \
    }                                                                            \
    static bool momentum_laid_out_like_w1() {                                    \
      return ns::kParam_w1_momentum_spec == ns::kParam_w1_spec;                  \
    }                                                                            \
  };

SHARC_TRAIN_TRAITS(Train2x4, sharc_gen::emit_train_ops_model_2x4, "data=2,model=4")
SHARC_TRAIN_TRAITS(Train4x2, sharc_gen::emit_train_ops_model_4x2, "data=4,model=2")

constexpr uint64_t kSeed = 7;
constexpr int kSteps = 3;

template <class G>
class TrainProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    global_ = trace("train_ops_model", ProgramRegistry::all().at("train_ops_model"));
    lowered_ = lower(global_, Mesh::parse(G::kMeshText));
  }

  // Global shape of parameter `path` in the partitioned program.
  ir::Shape global_shape(const std::string& path) const {
    const ir::Node* n = lowered_.partitioned.find(path, ir::Op::kParameter);
    if (!n) throw std::out_of_range(path);
    ir::Shape s = n->shape;
    for (size_t d = 0; d < s.size(); ++d) s[d] *= n->sharding->parts(lowered_.partitioned.mesh, d);
    return s;
  }

  std::vector<float> get(const typename G::Program& p, const std::string& path) const {
    std::vector<float> v(ir::num_elements(global_shape(path)), std::nanf(""));
    p.get_parameter(path, v);
    return v;
  }

  ir::Graph global_;
  Lowered lowered_;
};

using Programs = ::testing::Types<Train2x4, Train4x2>;
TYPED_TEST_SUITE(TrainProgram, Programs);

// Reports the first few differing elements; bit for bit means == on floats
// (no NaNs are expected in this program).
void expect_bitwise(const std::vector<float>& got, const std::vector<double>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int shown = 0;
  for (size_t i = 0; i < got.size() && shown < 5; ++i)
    if (static_cast<double>(got[i]) != want[i]) {
      ADD_FAILURE() << what << "[" << i << "]: generated " << got[i] << ", interpreter " << want[i];
      ++shown;
    }
}

// fp32 against fp64, relative to the tensor's largest magnitude. 1e-5: the
// longest reduction is 32 terms and three steps compound little (updates
// scale by <= 0.1), so errors stay near 1e-6; dropout masks and one_hot are
// exact in both (uniform_at is a float either way, labels are integers).
void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0, worst = 0;
  size_t at = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - want[i]) > worst) worst = std::fabs(got[i] - want[i]), at = i;
  EXPECT_LE(worst, 1e-5 * scale) << what << ": max abs error " << worst << " at " << at << ": got "
                                 << got[at] << " want " << want[at] << " (scale " << scale << ")";
}

TYPED_TEST(TrainProgram, ThreeStepsMatchInterpreterBitForBitAndOracle) {
  rt::ThreadWorld world(TypeParam::mesh_shape());
  typename TypeParam::Program program(world);
  program.init(kSeed);
  HostValues exec_state, oracle_state;
  for (int k = 0; k < kSteps; ++k) {
    SCOPED_TRACE("step " + std::to_string(k) + " on " + TypeParam::kMeshText);
    const Arrays inputs = step_inputs(k);
    Arrays outputs;
    typename TypeParam::Program::Inputs in;
    typename TypeParam::Program::Outputs out;
    TypeParam::bind(inputs, outputs, in, out);
    std::vector<rt::CommStats> before;
    for (int r = 0; r < world.size(); ++r) before.push_back(world.comm(r).stats());
    program.step(in, out);

    const ExecResult exec = execute_partitioned(this->lowered_.partitioned, to_host(inputs), kSeed,
                                                k == 0 ? nullptr : &exec_state);
    const HostValues oracle = interpret(this->global_, to_host(inputs), kSeed, &oracle_state);
    exec_state = exec.params;
    for (auto& [name, got] : outputs) {
      expect_bitwise(got, exec.outputs.at(name), "output " + name);
      expect_close(got, oracle.at(name), "output " + name);
    }
    for (std::string_view p : TypeParam::kParameterPaths) {
      const std::string path(p);
      const std::vector<float> got = this->get(program, path);
      expect_bitwise(got, exec.params.at(path), "parameter " + path);
      expect_close(got, oracle_state.at(path), "parameter " + path);
    }
    for (int r = 0; r < world.size(); ++r)
      for (int c = 0; c < rt::kNumCollectiveKinds; ++c) {
        const char* kind = rt::collective_kind_name(static_cast<rt::CollectiveKind>(c));
        EXPECT_EQ(world.comm(r).stats().calls[c] - before[r].calls[c], exec.comm[r].calls[c])
            << "device " << r << " " << kind;
        EXPECT_EQ(world.comm(r).stats().bytes_sent[c] - before[r].bytes_sent[c],
                  exec.comm[r].bytes_sent[c])
            << "device " << r << " " << kind;
      }
  }
}

// The updates really change parameters (the test above would also pass for a
// program that ignored them if the interpreter did too): the momentum starts
// at zero and becomes nonzero, and parameter-to-parameter updates read the
// values the step started from.
TYPED_TEST(TrainProgram, StepsUpdateParametersAndOptimizerState) {
  rt::ThreadWorld world(TypeParam::mesh_shape());
  typename TypeParam::Program program(world);
  program.init(kSeed);
  const std::vector<float> w1_0 = this->get(program, "w1");
  const std::vector<float> a0 = this->get(program, "swap_a"), b0 = this->get(program, "swap_b");
  const std::vector<float> c0 = this->get(program, "tied_c"), d0 = this->get(program, "tied_d");
  for (float v : this->get(program, "w1_momentum")) ASSERT_EQ(v, 0.0f);
  const Arrays inputs = step_inputs(0);
  Arrays outputs;
  typename TypeParam::Program::Inputs in;
  typename TypeParam::Program::Outputs out;
  TypeParam::bind(inputs, outputs, in, out);
  program.step(in, out);
  EXPECT_NE(this->get(program, "w1"), w1_0);
  bool moved = false;
  for (float v : this->get(program, "w1_momentum")) moved = moved || v != 0.0f;
  EXPECT_TRUE(moved);
  // Parameter-to-parameter updates: a swap, and one value for two parameters.
  EXPECT_EQ(this->get(program, "swap_a"), b0);
  EXPECT_EQ(this->get(program, "swap_b"), a0);
  std::vector<float> cd(c0.size());
  for (size_t i = 0; i < cd.size(); ++i) cd[i] = c0[i] + d0[i];
  EXPECT_EQ(this->get(program, "tied_c"), cd);
  EXPECT_EQ(this->get(program, "tied_d"), cd);
  EXPECT_TRUE(TypeParam::momentum_laid_out_like_w1());
}

// Device memory after a step is exactly the persistent parameter shards: the
// update swaps buffers without leaking the old ones or keeping temporaries.
TYPED_TEST(TrainProgram, OnlyParameterShardsStayAllocated) {
  rt::ThreadWorld world(TypeParam::mesh_shape());
  typename TypeParam::Program program(world);
  program.init(kSeed);
  size_t shard_bytes = 0;
  for (std::string_view p : TypeParam::kParameterPaths)
    shard_bytes += program.parameter_shard_size(p) * sizeof(float);
  for (int k = 0; k < 2; ++k) {
    const Arrays inputs = step_inputs(k);
    Arrays outputs;
    typename TypeParam::Program::Inputs in;
    typename TypeParam::Program::Outputs out;
    TypeParam::bind(inputs, outputs, in, out);
    program.step(in, out);
    for (int r = 0; r < world.size(); ++r) EXPECT_EQ(world.memory(r).current(), shard_bytes);
  }
}

// set_parameter then get_parameter gives the array back bit for bit, each
// device holds its block of it, and a step from parameters set this way is
// the interpreter's step from the same `state` (restoring a checkpoint).
TYPED_TEST(TrainProgram, SetAndGetParameterRoundTrip) {
  rt::ThreadWorld world(TypeParam::mesh_shape());
  typename TypeParam::Program program(world);
  program.init(kSeed);
  HostValues state;
  int salt = 0;
  for (std::string_view p : TypeParam::kParameterPaths) {
    const std::string path(p);
    const ir::Shape shape = this->global_shape(path);
    std::vector<float> v(ir::num_elements(shape));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(0.3 * std::sin(0.7 * i + salt));
    ++salt;
    program.set_parameter(path, v);
    EXPECT_EQ(this->get(program, path), v) << path;
    state[path].assign(v.begin(), v.end());

    const ir::Node* n = this->lowered_.partitioned.find(path, ir::Op::kParameter);
    for (int r = 0; r < world.size(); ++r) {
      const auto off = block_offset(*n->sharding, n->shape, this->lowered_.partitioned.mesh, r);
      const float* shard = program.parameter_shard(r, path);
      std::vector<int64_t> idx(n->shape.size(), 0);
      for (int64_t e = 0; e < ir::num_elements(n->shape); ++e) {
        int64_t g = 0;
        for (size_t d = 0; d < shape.size(); ++d) g = g * shape[d] + off[d] + idx[d];
        ASSERT_EQ(shard[e], v[g]) << path << " device " << r << " element " << e;
        for (int d = static_cast<int>(idx.size()) - 1; d >= 0; --d) {
          if (++idx[d] < n->shape[d]) break;
          idx[d] = 0;
        }
      }
    }
  }
  const Arrays inputs = step_inputs(5);
  Arrays outputs;
  typename TypeParam::Program::Inputs in;
  typename TypeParam::Program::Outputs out;
  TypeParam::bind(inputs, outputs, in, out);
  program.step(in, out);
  const ExecResult exec =
      execute_partitioned(this->lowered_.partitioned, to_host(inputs), kSeed, &state);
  for (auto& [name, got] : outputs) expect_bitwise(got, exec.outputs.at(name), "output " + name);
  for (std::string_view p : TypeParam::kParameterPaths)
    expect_bitwise(this->get(program, std::string(p)), exec.params.at(std::string(p)),
                   "parameter " + std::string(p));

  std::vector<float> sink(1);
  EXPECT_THROW(program.set_parameter("no/such", sink), std::out_of_range);
  EXPECT_THROW(program.get_parameter("no/such", sink), std::out_of_range);
}

}  // namespace
}  // namespace sharc

// docs/guide/from-jax.md puts each seed example beside its sharc form; this
// test holds the two to the same layouts. tests/docs/jax_layouts.py ran the
// JAX form on 8 fake CPU devices and recorded, per parameter and output, the
// PartitionSpec JAX gave it and device 0's block shape
// (tests/docs/jax_layouts.json); here every row of the generated programs'
// tables (kParameters, kOutputs) must say the same, and every recorded
// tensor must be one of those rows.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "docs_distjax_pp_data2_pipe4.h"
#include "docs_distjax_tp_data4_tensor2.h"
#include "docs_mlp_path_rules_fsdp2_model4.h"
#include "docs_regressor_fsdp4.h"
#include "emit_dot_relu_dot_2x4.h"
#include "emit_logical_dot_relu_dot_2x4.h"

namespace sharc {
namespace {

nlohmann::json recorded(const std::string& example) {
  std::ifstream f(std::string(SHARC_SOURCE_ROOT) + "/tests/docs/jax_layouts.json");
  EXPECT_TRUE(f) << "tests/docs/jax_layouts.json cannot be read";
  const nlohmann::json all = nlohmann::json::parse(f);
  EXPECT_TRUE(all.contains(example)) << example << " is not recorded";
  return all.value(example, nlohmann::json::object());
}

std::string mesh_str(const rt::MeshShape& m) {
  std::string s;
  for (size_t a = 0; a < m.axis_names.size(); ++a)
    s += (a ? "," : "") + m.axis_names[a] + "=" + std::to_string(m.axis_sizes[a]);
  return s;
}

// Whether device `rank` holds a block of parameter `path` (a pipelined
// program's holds_parameter).
using Holds = std::function<bool(int rank, std::string_view path)>;

// Every recorded tensor is a row of sharc's tables with the same spec and
// block; with `every_row`, every row of the tables is recorded too (a
// training program's optimizer state, which the JAX side does not make, is
// left out by passing false). A tensor recorded with "devices" (a pipeline
// stage's layer) must be held by exactly those devices.
void expect_jax_layouts(const std::string& example, const rt::MeshShape& mesh,
                        std::span<const rt::TensorInfo> parameters,
                        std::span<const rt::TensorInfo> outputs, bool every_row = true,
                        const Holds& holds = nullptr) {
  SCOPED_TRACE(example);
  const nlohmann::json jax = recorded(example);
  EXPECT_EQ(jax.value("mesh", ""), mesh_str(mesh));
  const nlohmann::json& tensors = jax["tensors"];
  size_t compared = 0;
  for (std::span<const rt::TensorInfo> table : {parameters, outputs})
    for (const rt::TensorInfo& t : table) {
      const std::string name(t.name);
      if (!tensors.contains(name)) {
        EXPECT_FALSE(every_row) << "sharc's " << name << " has no JAX layout recorded";
        continue;
      }
      EXPECT_EQ(t.spec_str(), tensors[name]["spec"].get<std::string>()) << name;
      EXPECT_EQ(t.local_shape, tensors[name]["local_shape"].get<std::vector<int64_t>>()) << name;
      if (tensors[name].contains("devices")) {
        EXPECT_TRUE(holds) << example << " records devices but the test gives no holds_parameter";
        std::vector<int> holders;
        for (int rank = 0; holds && rank < mesh.num_devices(); ++rank)
          if (holds(rank, name)) holders.push_back(rank);
        EXPECT_EQ(holders, tensors[name]["devices"].get<std::vector<int>>())
            << name << " is held by other devices";
      }
      ++compared;
    }
  EXPECT_EQ(compared, tensors.size()) << "JAX recorded tensors that sharc's program does not have";
}

TEST(FromJax, TheGuidesDotReluDotLaysOutAsJaxDoes) {
  namespace prog = sharc_gen::emit_dot_relu_dot_2x4;
  expect_jax_layouts("flax_dot_relu_dot", prog::mesh_shape(), prog::kParameters, prog::kOutputs);
}

TEST(FromJax, TheGuidesLogicalDotReluDotLaysOutAsJaxDoes) {
  namespace prog = sharc_gen::emit_logical_dot_relu_dot_2x4;
  expect_jax_layouts("flax_logical_dot_relu_dot", prog::mesh_shape(), prog::kParameters,
                     prog::kOutputs);
}

// Scalax's bare FSDPShardingRule() against FSDPRule's kLargestPowerOfTwo
// mode, on examples/own_project's regressor over fsdp=4: the model's weights
// (the training program's optimizer state follows its parameters and is
// not recorded).
TEST(FromJax, ScalaxsFsdpRuleShardsTheRegressorAsSharcsDoes) {
  namespace prog = sharc_gen::docs_regressor_fsdp4;
  expect_jax_layouts("scalax_fsdp_regressor", prog::mesh_shape(), prog::kParameters, {},
                     /*every_row=*/false);
}

// Scalax's TreePathShardingRule against PathRule, on the MLP classifier
// over fsdp=2,model=4 (samples/mlp_classifier/model.cpp,
// mlp_train_path_rules).
TEST(FromJax, ScalaxsPathRulesShardTheMlpAsSharcsDo) {
  namespace prog = sharc_gen::docs_mlp_path_rules_fsdp2_model4;
  expect_jax_layouts("scalax_path_rules_mlp", prog::mesh_shape(), prog::kParameters, {},
                     /*every_row=*/false);
}

// DistJax's tensor-parallel MLP block (TPAsyncDense up, TPDense scatter
// down) on its ('data', 'tensor') = (4, 2) mesh: parameters and output.
TEST(FromJax, DistJaxsTensorParallelBlockLaysOutAsSharcsDoes) {
  namespace prog = sharc_gen::docs_distjax_tp_data4_tensor2;
  expect_jax_layouts("distjax_tp_mlp_block", prog::mesh_shape(), prog::kParameters, prog::kOutputs);
}

// DistJax's pipeline classifier on ('data', 'pipe') = (2, 4): each stage's
// layers sit on that stage's devices (JAX: the stacked parameters' blocks
// along 'pipe'; sharc: holds_parameter), with the same blocks. The input and
// output layers are replicated in both; JAX keeps them on every device,
// sharc on the first and the last stage only, so only their layouts are
// compared.
TEST(FromJax, DistJaxsPipelineStagesHoldTheLayersSharcsDo) {
  namespace prog = sharc_gen::docs_distjax_pp_data2_pipe4;
  expect_jax_layouts("distjax_pp_classifier", prog::mesh_shape(), prog::kParameters, {},
                     /*every_row=*/false, &prog::Program::holds_parameter);
  EXPECT_TRUE(prog::Program::holds_parameter(0, "input_dense/kernel"));
  EXPECT_FALSE(prog::Program::holds_parameter(1, "input_dense/kernel"));
  EXPECT_TRUE(prog::Program::holds_parameter(7, "output_dense/kernel"));
  EXPECT_FALSE(prog::Program::holds_parameter(6, "output_dense/kernel"));
}

}  // namespace
}  // namespace sharc

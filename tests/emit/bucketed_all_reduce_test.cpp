// All-reduce buckets: a maximal run of adjacent all_reduce nodes with the same
// bucket id (dim2 >= 0), axes and reduce kind runs as ONE collective over the
// packed operands, in the per-device interpreter and in emitted code. On the
// hand-built program of bucketed_graph.h:
//  - all_reduce_bucket_end finds exactly the documented runs;
//  - the interpreter makes one all_reduce call per bucket instead of one per
//    member, sends the same bytes, and gives bitwise the same results as the
//    unbucketed program (inputs are small integers, so every sum is exact in
//    any order; see the note below);
//  - the emitted program (bucketed_emit, at build time) matches the
//    interpreter on the bucketed program bit for bit, call for call, byte for
//    byte, on non-integer inputs, and prints one comm.all_reduce per bucket,
//    over the members' own buffers (the interpreter packs them: the same
//    chunks, so the same sums).
//
// NOTE: with non-integer values and groups of more than two devices, bucketing
// may change the last bits of a sum: the ring reduces each chunk starting at a
// different member, and packing moves elements between chunks. Bucketed and
// unbucketed programs are equal within rounding; every executor of the SAME
// program agrees bit for bit.
#include "bucketed_all_reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "codegen/execute.h"
#include "tests/emit/bucketed_graph.h"

namespace sharc {
namespace {

namespace gen = sharc_gen::bucketed_all_reduce;

constexpr int kAllReduce = static_cast<int>(rt::CollectiveKind::kAllReduce);

HostValues integer_inputs() {
  HostValues in;
  for (int i = 0; i < 64; ++i) in["x"].push_back((i * 7) % 11 - 5);
  for (int i = 0; i < 64; ++i) in["y"].push_back((i * 5) % 9 - 4);
  return in;
}

HostValues float_inputs() {
  HostValues in;
  for (int i = 0; i < 64; ++i) in["x"].push_back(static_cast<float>(std::sin(0.37 * i) + 0.25));
  for (int i = 0; i < 64; ++i) in["y"].push_back(static_cast<float>(std::cos(0.23 * i) - 0.1));
  return in;
}

TEST(AllReduceBuckets, RunsAreMaximalAndRespectIdAxesKindAndDependencies) {
  const ir::Graph g = test::bucketed_all_reduce_graph(true);
  // Expected end of the run starting at each all_reduce that starts one.
  const std::map<int, int> want = {{9, 11},  {11, 12}, {12, 13}, {13, 15},
                                   {15, 16}, {16, 17}, {17, 18}};
  for (auto [first, end] : want) EXPECT_EQ(all_reduce_bucket_end(g, first), end) << first;
  for (int id = 0; id < test::kFirstAllReduce; ++id)
    EXPECT_EQ(all_reduce_bucket_end(g, id), id + 1);
  const ir::Graph plain = test::bucketed_all_reduce_graph(false);
  for (int id = 0; id < test::kEndAllReduce; ++id)
    EXPECT_EQ(all_reduce_bucket_end(plain, id), id + 1) << id;
}

TEST(AllReduceBuckets, InterpreterMakesOneCallPerBucketWithSameBytesAndResults) {
  const HostValues in = integer_inputs();
  const ExecResult bucketed = execute_partitioned(test::bucketed_all_reduce_graph(true), in, 1);
  const ExecResult plain = execute_partitioned(test::bucketed_all_reduce_graph(false), in, 1);
  ASSERT_EQ(bucketed.comm.size(), plain.comm.size());
  for (size_t r = 0; r < plain.comm.size(); ++r) {
    // Nine all_reduce nodes; buckets 0 and 1 have two members each.
    EXPECT_EQ(plain.comm[r].calls[kAllReduce], 9u) << "device " << r;
    EXPECT_EQ(bucketed.comm[r].calls[kAllReduce], 7u) << "device " << r;
    EXPECT_EQ(bucketed.comm[r].bytes_sent[kAllReduce], plain.comm[r].bytes_sent[kAllReduce])
        << "device " << r;
  }
  ASSERT_EQ(bucketed.outputs.size(), 9u);
  for (auto& [name, want] : plain.outputs) {
    const std::vector<double>& got = bucketed.outputs.at(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << name << "[" << i << "]";
  }
  // The sums are the sums: sum_x[j] is column j of x, chain2 is 4x chain.
  for (int j = 0; j < 8; ++j) {
    double col = 0;
    for (int i = 0; i < 8; ++i) col += in.at("x")[i * 8 + j];
    EXPECT_EQ(plain.outputs.at("sum_x")[j], col) << j;
    EXPECT_EQ(plain.outputs.at("chain2")[j], 4 * plain.outputs.at("chain")[j]) << j;
  }
}

TEST(AllReduceBuckets, GeneratedCodeMatchesInterpreterBitForBit) {
  const HostValues in = float_inputs();
  const ExecResult want = execute_partitioned(test::bucketed_all_reduce_graph(true), in, 1);

  rt::ThreadWorld world(gen::mesh_shape());
  gen::Program program(world);
  program.init(1);
  std::vector<float> x(in.at("x").begin(), in.at("x").end());
  std::vector<float> y(in.at("y").begin(), in.at("y").end());
  std::map<std::string, std::vector<float>> outs;
  gen::Program::Inputs pin;
  gen::Program::Outputs pout;
  pin.x = x.data();
  pin.y = y.data();
  for (auto& [name, v] : want.outputs) outs[name].assign(v.size(), std::nanf(""));
  pout.sum_x = outs["sum_x"].data();
  pout.sum_xx = outs["sum_xx"].data();
  pout.sum_x_b3 = outs["sum_x_b3"].data();
  pout.max_x = outs["max_x"].data();
  pout.sum_y = outs["sum_y"].data();
  pout.sum_yy = outs["sum_yy"].data();
  pout.sum_xx_alone = outs["sum_xx_alone"].data();
  pout.chain = outs["chain"].data();
  pout.chain2 = outs["chain2"].data();
  program.forward(pin, pout);

  for (auto& [name, w] : want.outputs)
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_EQ(static_cast<double>(outs.at(name)[i]), w[i]) << name << "[" << i << "]";
  for (int r = 0; r < world.size(); ++r)
    for (int k = 0; k < rt::kNumCollectiveKinds; ++k) {
      EXPECT_EQ(world.comm(r).stats().calls[k], want.comm[r].calls[k]) << "device " << r;
      EXPECT_EQ(world.comm(r).stats().bytes_sent[k], want.comm[r].bytes_sent[k]) << "device " << r;
    }
}

// The emitted source spells each bucket as one collective over its
// members' buffers: 7 comm.all_reduce calls for 9 all_reduce nodes. Bucket 0's
// operands are read again later, so its members get copies; bucket 1's are
// not, so its members take the operands' buffers and nothing is copied.
TEST(AllReduceBuckets, EmittedSourceHasOneAllReducePerBucket) {
  const std::filesystem::path src =
      std::filesystem::path(SHARC_BUCKETED_DIR) / "bucketed_all_reduce.cpp";
  std::ifstream f(src);
  ASSERT_TRUE(f) << src;
  std::stringstream text;
  text << f.rdbuf();
  const std::string s = text.str();
  int calls = 0;
  for (size_t at = s.find("comm.all_reduce("); at != std::string::npos;
       at = s.find("comm.all_reduce(", at + 1))
    ++calls;
  EXPECT_EQ(calls, 7);
  // Values are named after their layer and op (EmissionPlan::var): the
  // graph's all_reduces are all in layer "grads", in program order.
  const std::string bucket0 =
      "  rt::copy(partials_reduce_2.data(), grads_all_reduce_2.data(), 8);\n"
      "  comm.all_reduce(std::vector<rt::Segment<float>>{\n"
      "                      {grads_all_reduce.data(), 8},\n"
      "                      {grads_all_reduce_2.data(), 8},\n"
      "                  },\n"
      "                  dev.group_data, rt::ReduceOp::kSum);\n";
  EXPECT_NE(s.find(bucket0), std::string::npos) << s;
  EXPECT_NE(s.find("rt::copy(partials_reduce.data(), grads_all_reduce.data(), 8);"), std::string::npos) << s;
  const std::string bucket1 =
      "  grads_all_reduce_6 = std::move(partials_reduce_5);  // f32[8] [{}], in partials_reduce_5's "
      "buffer (its last use)\n"
      "  comm.all_reduce(std::vector<rt::Segment<float>>{\n"
      "                      {grads_all_reduce_5.data(), 8},\n"
      "                      {grads_all_reduce_6.data(), 8},\n"
      "                  },\n"
      "                  dev.group_model, rt::ReduceOp::kSum);\n";
  EXPECT_NE(s.find(bucket1), std::string::npos) << s;
  EXPECT_NE(s.find("  grads_all_reduce_5 = std::move(partials_reduce_4);"), std::string::npos) << s;
  EXPECT_EQ(s.find("bucket_0"), std::string::npos) << "no packed buffer";
}

}  // namespace
}  // namespace sharc

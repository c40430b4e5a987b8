// Differential fuzzing of the whole pipeline: random programs (chains and
// DAGs over every DSL op, random meshes of 1-8 devices with up to 3 axes,
// random valid layouts; see random_program.h) are lowered, run per device on
// the thread runtime (fp32 kernels, real ring collectives) and compared with
// the fp64 oracle on the unpartitioned program.
//
// Reproduce one case: SHARC_FUZZ_SEEDS=123 ./sharc_fuzz_tests (or "100-199").
// A failure prints the seed, the mesh, the ops drawn, the global IR with its
// propagated shardings and the per-device IR.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>

#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "tests/fuzz/random_program.h"

namespace sharc::fuzz {
namespace {

constexpr uint64_t kDefaultCases = 1000;  // about 2 s on 2 cores

// Tolerance: |got - want| <= kRtol * max|want| + kAtol, per output.
// The devices compute in fp32 (unit roundoff 6e-8) and the oracle in fp64.
// Programs are at most ~15 ops deep; every op is well conditioned on the
// values the generator feeds it (division only by >= 1/e, log/sqrt only of
// >= 1, layer_norm with eps 0.1 so 1/sqrt(var+eps) <= 3.2, values rescaled
// to O(1) by exact powers of two), and sums run over at most 4096 terms, so
// the expected error is ~1e-6 of the output's magnitude. 1e-4 leaves two
// orders of magnitude of margin while a wrong block, a missing reduction or
// a misplaced collective changes values by O(max|want|). The absolute term
// covers outputs that are zero up to rounding (e.g. x - mean(x) of a
// broadcast value).
constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-6;

std::vector<uint64_t> seeds_to_run() {
  std::vector<uint64_t> seeds;
  const char* env = std::getenv("SHARC_FUZZ_SEEDS");
  if (env && *env) {
    const std::string s = env;
    const size_t dash = s.find('-');
    const uint64_t lo = std::stoull(s.substr(0, dash));
    const uint64_t hi = dash == std::string::npos ? lo : std::stoull(s.substr(dash + 1));
    for (uint64_t x = lo; x <= hi; ++x) seeds.push_back(x);
  } else {
    for (uint64_t x = 0; x < kDefaultCases; ++x) seeds.push_back(x);
  }
  return seeds;
}

std::string describe(const RandomProgram& p, const Lowered* l) {
  std::ostringstream os;
  os << "seed " << p.seed << " on mesh " << p.mesh.str() << "\nops: " << p.ops << "\n";
  if (l) {
    os << "global IR (after propagate_shardings):\n" << l->global;
    os << "partitioned IR:\n" << l->partitioned;
  } else {
    os << "traced IR:\n" << p.graph;
  }
  os << "reproduce: SHARC_FUZZ_SEEDS=" << p.seed << " ./tests/sharc_fuzz_tests\n";
  return os.str();
}

// Compares one output; on mismatch returns the max error and the first few
// differing elements.
std::string compare(const std::string& name, const std::vector<double>& got,
                    const std::vector<double>& want) {
  std::ostringstream os;
  if (got.size() != want.size()) {
    os << "output " << name << ": " << got.size() << " values, want " << want.size();
    return os.str();
  }
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  const double tol = kRtol * scale + kAtol;
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (!(err <= tol)) {  // also catches NaN
      if (shown++ < 8) os << "  [" << i << "] got " << got[i] << " want " << want[i] << "\n";
    }
    if (!(err <= worst)) worst = err;
  }
  if (shown == 0) return "";
  std::ostringstream head;
  head << "output " << name << ": " << shown << " of " << got.size()
       << " values off; max abs error " << worst << " > tolerance " << tol << " (max|want| "
       << scale << ")\n";
  return head.str() + os.str();
}

TEST(RandomPartitioning, MatchesOracle) {
  std::vector<uint64_t> failed;
  for (uint64_t seed : seeds_to_run()) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const RandomProgram p = random_program(seed);
    Lowered l;
    HostValues want;
    ExecResult got;
    try {
      l = lower(p.graph, p.mesh);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "lower() threw: " << e.what() << "\n" << describe(p, nullptr);
      failed.push_back(seed);
      continue;
    }
    try {
      want = interpret(p.graph, p.inputs, seed);
      got = execute_partitioned(l.partitioned, p.inputs, seed);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "running threw: " << e.what() << "\n" << describe(p, &l);
      failed.push_back(seed);
      continue;
    }
    std::string bad;
    for (const auto& [name, w] : want) {
      auto it = got.outputs.find(name);
      if (it == got.outputs.end()) {
        bad += "output " + name + " missing from the partitioned run\n";
        continue;
      }
      bad += compare(name, it->second, w);
    }
    if (!bad.empty()) {
      ADD_FAILURE() << bad << describe(p, &l);
      failed.push_back(seed);
    }
  }
  if (!failed.empty()) {
    std::string list;
    for (uint64_t s : failed) list += " " + std::to_string(s);
    ADD_FAILURE() << failed.size() << " failing seeds:" << list;
  }
}

// The generator is a pure function of the seed: same mesh, same IR, same
// inputs; and tracing its ProgramFn again reproduces the graph exactly.
TEST(RandomPartitioning, GeneratorIsDeterministic) {
  for (uint64_t seed : {0ull, 1ull, 17ull, 299ull, 123456789ull}) {
    const RandomProgram a = random_program(seed), b = random_program(seed);
    EXPECT_EQ(a.mesh, b.mesh) << seed;
    EXPECT_EQ(ir::to_string(a.graph), ir::to_string(b.graph)) << seed;
    EXPECT_EQ(ir::to_string(a.graph), ir::to_string(trace(a.name, a.fn))) << seed;
    EXPECT_EQ(a.inputs, b.inputs) << seed;
    EXPECT_EQ(a.ops, b.ops) << seed;
  }
  EXPECT_NE(ir::to_string(random_program(1).graph), ir::to_string(random_program(2).graph));
}

// The default cases exercise every DSL op, every collective the
// partitioner can insert, DAG reuse and all mesh sizes; otherwise a passing
// MatchesOracle would mean little.
TEST(RandomPartitioning, CasesCoverOpsCollectivesAndMeshes) {
  std::map<ir::Op, int> global_ops, local_ops;
  std::map<int, int> devices;
  std::map<size_t, int> axis_counts;
  int reused = 0, pinned_outputs = 0;
  for (uint64_t seed = 0; seed < kDefaultCases; ++seed) {
    const RandomProgram p = random_program(seed);
    ++devices[p.mesh.num_devices()];
    ++axis_counts[p.mesh.axes().size()];
    for (auto& n : p.graph.nodes) ++global_ops[n.op];
    for (size_t id = 0; id < p.graph.nodes.size(); ++id)
      if (!ir::is_source(p.graph.nodes[id].op) && p.graph.users(static_cast<int>(id)).size() > 1)
        ++reused;
    for (auto& o : p.graph.outputs) pinned_outputs += o.spec.has_value();
    try {
      for (auto& n : lower(p.graph, p.mesh).partitioned.nodes) ++local_ops[n.op];
    } catch (const std::exception&) {
      // MatchesOracle reports it.
    }
  }
  std::ostringstream summary;
  summary << "coverage over " << kDefaultCases << " cases:";
  for (auto& [op, count] : global_ops) summary << " " << ir::op_name(op) << "=" << count;
  summary << " |";
  for (auto& [op, count] : local_ops)
    if (ir::is_collective(op) || op == ir::Op::kLocalSlice)
      summary << " " << ir::op_name(op) << "=" << count;
  summary << " | devices:";
  for (auto& [n, count] : devices) summary << " " << n << "x" << count;
  summary << " | reused=" << reused << " pinned_outputs=" << pinned_outputs;
  std::cout << summary.str() << "\n";
  using ir::Op;
  for (Op op :
       {Op::kParameter, Op::kInput,     Op::kConstant, Op::kAdd,    Op::kSub,
        Op::kMul,       Op::kDiv,       Op::kNeg,      Op::kRelu,   Op::kGelu,
        Op::kTanh,      Op::kExp,       Op::kLog,      Op::kSqrt,   Op::kBroadcast,
        Op::kReshape,   Op::kTranspose, Op::kDot,      Op::kReduce, Op::kShardingConstraint})
    EXPECT_GE(global_ops[op], 20) << ir::op_name(op);
  for (Op op : {Op::kAbs, Op::kSigmoid, Op::kErf, Op::kSelect, Op::kExpm1, Op::kLog1p, Op::kPow})
    EXPECT_GE(global_ops[op], 10) << ir::op_name(op);
  for (Op op : {Op::kAllGather, Op::kReduceScatter, Op::kAllReduce, Op::kAllToAll, Op::kLocalSlice})
    EXPECT_GE(local_ops[op], 5) << ir::op_name(op);
  for (int n = 1; n <= 8; n *= 2) EXPECT_GE(devices[n], 10) << n << " devices";
  EXPECT_GE(devices[3] + devices[6], 5) << "meshes with an axis of size 3";
  for (size_t k = 1; k <= 3; ++k) EXPECT_GE(axis_counts[k], 30) << k << " mesh axes";
  EXPECT_GE(reused, 100) << "values used more than once (DAGs)";
  EXPECT_GE(pinned_outputs, 30);
}

}  // namespace
}  // namespace sharc::fuzz

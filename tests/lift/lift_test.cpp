// sharc-lift end to end (label lift). The build lifted this file's
// SHARC_ELEMENTWISE functions (functions.h) into lift_test.lifted.h, which
// it includes; the tests check:
//  - the lifted IR and the header against goldens (tests/golden/lift/);
//  - each lifted function, traced on a tensor of points (many close to its
//    branches) and run by the fp64 oracle, against the C++ function itself
//    on floats;
//  - its gradients (autodiff through the selects) against central finite
//    differences of the oracle, at points on both sides of every branch;
//  - every unsupported construct (bad_functions.cpp) gives its message at its
//    line and column, with the source line and a caret;
//  - the custom-activation sample's lifted activation is fused with its
//    neighbouring elementwise ops in the emission plan every renderer prints,
//    and appears inside the fused loop of the generated CPU code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/emission_plan.h"
#include "codegen/interpret.h"
#include "codegen/pipeline.h"
#include "dsl/sharc.h"
#include "ir/autodiff.h"
#include "lift_test.lifted.h"
#include "samples/custom_activation/model.h"
#include "tests/common/expect_error.h"
#include "tests/common/golden.h"
#include "tests/lift/functions.h"

namespace sharc {
namespace {

namespace fs = std::filesystem;
using testing::read_file;

// One lifted function under test: its Tensor form applied to x (the other
// arguments fixed), the same on floats, and the points to try (besides a
// grid), chosen around its branches.
struct Case {
  std::string name;
  std::function<Tensor(Tensor)> lifted;
  std::function<float(float)> cxx;
  std::vector<double> near_branches;
  double lo = -3, hi = 3;  // the grid
};

std::vector<Case> cases() {
  const double e = 1e-3;  // off a branch point by much more than a finite-difference step
  return {
      {"huber",
       [](Tensor x) { return lifted::huber(x, 1.0); },
       [](float x) { return lifted::huber(x, 1.0f); },
       {1 - e, 1 + e, -1 - e, -1 + e}},
      {"leaky_clip",
       [](Tensor x) { return lifted::leaky_clip(x, 0.2, 2.0); },
       [](float x) { return lifted::leaky_clip(x, 0.2f, 2.0f); },
       {-e, e, 2 - e, 2 + e, -10 + e, -10 - e},
       -12,
       4},
      {"soft_sign_gate",
       [](Tensor x) { return lifted::soft_sign_gate(x, 1.5); },
       [](float x) { return lifted::soft_sign_gate(x, 1.5f); },
       {-e, e, 1.5 - e, 1.5 + e, -1.5 - e, -1.5 + e}},
      {"taylor_sin",
       [](Tensor x) { return lifted::taylor_sin(x); },
       [](float x) { return lifted::taylor_sin(x); },
       {0.5, -0.25}},
      {"softplus",
       [](Tensor x) { return lifted::softplus(x); },
       [](float x) { return lifted::softplus(x); },
       {20 - e, 20 + e},
       -5,
       25},
      {"smooth_relu",
       [](Tensor x) { return lifted::smooth_relu(x, 4.0); },
       [](float x) { return lifted::smooth_relu(x, 4.0f); },
       {5 - e, 5 + e}},
      {"pow_elu",
       [](Tensor x) { return lifted::pow_elu(x, 0.7); },
       [](float x) { return lifted::pow_elu(x, 0.7f); },
       {-e, e}},
      {"gated_mix",
       [](Tensor x) { return lifted::gated_mix(x, -0.5, 0.75); },
       [](float x) { return lifted::gated_mix(x, -0.5f, 0.75f); },
       {-0.5 - e, -0.5 + e, 0.75 - e, 0.75 + e}},
      {"halving",
       [](Tensor x) { return lifted::halving(x); },
       [](float x) { return lifted::halving(x); },
       {1 - e, 1 + e, 8 - e, 8 + e},
       -2,
       12},
      {"log_mix",
       [](Tensor x) { return lifted::log_mix(x); },
       [](float x) { return lifted::log_mix(x); },
       {0.0 + e, -e}},
      {"ramp_sum",
       [](Tensor x) { return lifted::ramp_sum(x); },
       [](float x) { return lifted::ramp_sum(x); },
       {-e, e, 1 - e, 1 + e, 4 - e, 4 + e},
       -3,
       6},
      {"side_effects",
       [](Tensor x) { return lifted::side_effects(x); },
       [](float x) { return lifted::side_effects(x); },
       {-e, e, 2 - e, 2 + e, 2.4 - e, 2.4 + e}},
      {"cube_by_loop",
       [](Tensor x) { return lifted::cube_by_loop(x); },
       [](float x) { return lifted::cube_by_loop(x); },
       {-e, e}},
  };
}

// The grid (avoiding exact branch points) and the near-branch points.
std::vector<double> points(const Case& c) {
  std::vector<double> p = c.near_branches;
  for (int i = 0; i < 61; ++i) p.push_back(c.lo + (c.hi - c.lo) * (i + 0.37) / 61);
  return p;
}

ir::Graph trace_case(const Case& c, int64_t n) {
  return trace(c.name, [&](ProgramBuilder& b) {
    Tensor x = b.input("x", {n});
    Tensor y = c.lifted(x);
    b.output("y", y);
    // A weighted sum, so every element gets its own cotangent.
    b.output("loss", sum(mul(y, b.input("w", {n})), {0}));
  });
}

std::vector<double> weights(size_t n) {
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = 0.5 + std::fmod(0.618034 * static_cast<double>(i), 1.0);
  return w;
}

TEST(LiftGolden, LiftedIr) {
  testing::check_golden(fs::path(SHARC_SOURCE_DIR) / "tests/golden/lift/lift_test.lifted.ir",
                        read_file(SHARC_LIFTED_DIR "/lift_test.lifted.ir"));
}

TEST(LiftGolden, Header) {
  testing::check_golden(fs::path(SHARC_SOURCE_DIR) / "tests/golden/lift/lift_test.lifted.h",
                        read_file(SHARC_LIFTED_DIR "/lift_test.lifted.h"));
}

TEST(LiftGolden, CoversTheConstructsAsked) {
  // At least 6 functions, with nested if/else (a select feeding a select),
  // the ternary, a constant loop, and a call of one lifted function from
  // another, in the golden the review reads.
  const std::string ir = read_file(SHARC_LIFTED_DIR "/lift_test.lifted.ir");
  size_t functions = 0;
  for (size_t at = ir.find("program @"); at != std::string::npos; at = ir.find("program @", at + 1))
    ++functions;
  EXPECT_GE(functions, 6u);
  EXPECT_NE(ir.find("if (x < 0.0f) { y = slope * x; if (y < -limit"), std::string::npos);
  EXPECT_NE(ir.find("x >= 0.0f ? x : 0.5f * x"), std::string::npos);
  EXPECT_NE(ir.find("sum += term"), std::string::npos);
  // smooth_relu inlines softplus: softplus's select appears in its program.
  const std::string smooth = ir.substr(ir.find("program @smooth_relu"));
  EXPECT_NE(smooth.substr(0, smooth.find("}")).find("log1p"), std::string::npos);
}

TEST(Lift, OracleOfTheLiftedFormEqualsTheCxxFunction) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<double> x = points(c);
    const ir::Graph g = trace_case(c, static_cast<int64_t>(x.size()));
    const HostValues out = interpret(g, {{"x", x}, {"w", weights(x.size())}}, 1);
    const std::vector<double>& y = out.at("y");
    for (size_t i = 0; i < x.size(); ++i) {
      // The C++ function computes in float: its result is within a few ulps
      // of the fp64 oracle's.
      const double want = c.cxx(static_cast<float>(x[i]));
      EXPECT_NEAR(y[i], want, 3e-6 * std::max(1.0, std::fabs(want))) << "at x = " << x[i];
    }
  }
}

TEST(Lift, TensorArgumentsBroadcastLikeNumbers) {
  // huber(x, delta) with delta a tensor of another shape, and a number.
  const ir::Graph g = trace("broadcast", [](ProgramBuilder& b) {
    Tensor x = b.input("x", {2, 3});
    Tensor delta = b.input("delta", {3});
    b.output("tensor", lifted::huber(x, delta));
    b.output("number", lifted::huber(x, 0.5));
  });
  const std::vector<double> x = {-2, -0.4, 0.1, 0.3, 1.2, 3};
  const HostValues out = interpret(g, {{"x", x}, {"delta", {0.5, 0.5, 0.5}}}, 1);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(out.at("tensor")[i], lifted::huber(static_cast<float>(x[i]), 0.5f), 1e-6);
    EXPECT_EQ(out.at("tensor")[i], out.at("number")[i]);
  }
}

TEST(Lift, CallWithoutATensorIsAnError) {
  // On plain numbers the C++ function itself is the better overload; made to
  // take the Tensor form, the call says what to do, at the caller's line.
  const int line = __LINE__ + 2;
  const std::string what = testing::error_at("tests/lift/lift_test.cpp", line, [] {
    trace("numbers", [](ProgramBuilder& b) { b.output("y", lifted::huber(lift::Arg(1.0), 2.0)); });
  });
  EXPECT_NE(what.find("huber: no argument is a Tensor; on numbers, call the C++ function itself"),
            std::string::npos)
      << what;
}

TEST(Lift, DslErrorsInLiftedCodePointAtTheCxxWithACaret) {
  // The DSL checks a lifted function's ops like any others; a mistake
  // (softplus's exp on i32 ids) is reported at the C++ expression, with the
  // source line and a caret under its column.
  try {
    trace("ids", [](ProgramBuilder& b) {
      b.output("y", lifted::softplus(b.input("ids", {4}, P(), DType::kI32)));
    });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.loc().file, "tests/lift/functions.h") << e.what();
    EXPECT_NE(e.message().find("i32 holds ids and labels"), std::string::npos) << e.what();
    const std::string shown = render_diagnostic(e, {SHARC_SOURCE_DIR});
    std::ifstream f(std::string(SHARC_SOURCE_DIR) + "/tests/lift/functions.h");
    std::string line;
    for (int k = 0; k < e.loc().line; ++k) std::getline(f, line);
    EXPECT_NE(shown.find(line), std::string::npos) << shown;
    EXPECT_NE(shown.find("| " + std::string(static_cast<size_t>(e.loc().column - 1), ' ') + "^\n"),
              std::string::npos)
        << shown;
  }
}

// d loss / d x by autodiff, against central differences of the oracle's
// loss. The step h = 1e-6 stays on one side of every branch (points are at
// least 1e-3 away); the tolerance 1e-6 of the gradient's scale leaves
// orders of margin over the difference's error (see autodiff_test.cpp) while
// a wrong select routing (the gradient of the other branch) is off by O(1).
TEST(Lift, GradientsMatchFiniteDifferencesNearBranches) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<double> x = points(c);
    const std::vector<double> w = weights(x.size());
    ir::Graph g = trace_case(c, static_cast<int64_t>(x.size()));
    const ir::Graph forward = g;
    int loss = -1, xin = -1;
    for (const ir::Output& o : g.outputs)
      if (o.name == "loss") loss = o.value;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].op == ir::Op::kInput && g.nodes[i].name == "x") xin = static_cast<int>(i);
    const std::vector<int> grads = append_gradients(g, loss, {xin}, SrcLoc("lift_test.cpp", 1));
    g.outputs.push_back({"dx", grads[0], SrcLoc(), std::nullopt, std::nullopt});
    ir::verify(g);
    const std::vector<double> dx = interpret(g, {{"x", x}, {"w", w}}, 1).at("dx");
    double scale = 0;
    std::vector<double> fd(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double h = 1e-6 * std::max(1.0, std::fabs(x[i]));
      std::vector<double> up = x, down = x;
      up[i] += h;
      down[i] -= h;
      fd[i] = (interpret(forward, {{"x", up}, {"w", w}}, 1).at("loss")[0] -
               interpret(forward, {{"x", down}, {"w", w}}, 1).at("loss")[0]) /
              (2 * h);
      scale = std::max({scale, std::fabs(fd[i]), std::fabs(dx[i])});
    }
    ASSERT_GT(scale, 1e-3) << "a trivially zero gradient checks nothing";
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(dx[i], fd[i], 1e-6 * scale + 1e-9) << "at x = " << x[i];
  }
}

// ---- diagnostics ------------------------------------------------------------

struct Expected {
  int line, column;
  std::string message;
};

TEST(LiftErrors, EveryUnsupportedConstructIsNamedAtItsColumnWithACaret) {
  const std::string file = std::string(SHARC_SOURCE_DIR) + "/tests/lift/bad_functions.cpp";
  const fs::path ir = fs::temp_directory_path() / "sharc_lift_bad.ir";
  fs::remove(ir);
  const std::string cmd = std::string(SHARC_LIFT_TOOL) + " " + file + " --ir " + ir.string() +
                          " -- -I" + SHARC_SOURCE_DIR + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_NE(status, 0) << out;
  EXPECT_FALSE(fs::exists(ir)) << "a failed run writes nothing";

  std::vector<std::string> source = {""};  // 1-based
  {
    std::ifstream f(file);
    for (std::string l; std::getline(f, l);) source.push_back(l);
  }
  const std::vector<Expected> expected = {
      {13, 56,
       "parameter 'x' is a pointer ('const float *'); a SHARC_ELEMENTWISE function takes "
       "float or double by value"},
      {15, 52, "parameter 'x' is a reference ('float &')"},
      {17, 63,
       "call to 'helper', which is neither a <cmath> function sharc knows nor a "
       "SHARC_ELEMENTWISE function"},
      {20, 10,
       "loop whose trip count depends on data: the condition 'x > 1.0f' is not known at "
       "compile time"},
      {25, 33, "recursion: 'factorial' calls itself"},
      {29, 16, "static or global state: 'calls' keeps its value between calls"},
      {34, 61, "static or global state: 'g_scale' is a global variable"},
      {37, 3, "I/O ('printf') in a SHARC_ELEMENTWISE function"},
      {42, 13,
       "I/O in a SHARC_ELEMENTWISE function: lifted code runs inside generated kernels, "
       "where streams do not exist"},
      {46, 56,
       "unsupported type 'int' of parameter 'n'; a SHARC_ELEMENTWISE function takes float "
       "or double"},
      {49, 9, "unsupported type 'float[2]' of local 'v'"},
      {54, 33,
       "'twin' is lifted twice with 1 parameters; its Tensor form takes Tensors or "
       "numbers whatever the C++ types, so mark one overload only"},
  };
  std::vector<std::string> lines;
  {
    std::istringstream is(out);
    for (std::string l; std::getline(is, l);) lines.push_back(l);
  }
  for (const Expected& e : expected) {
    const std::string head = "tests/lift/bad_functions.cpp:" + std::to_string(e.line) + ":" +
                             std::to_string(e.column) + ": error: ";
    SCOPED_TRACE(head + e.message);
    size_t i = 0;
    while (i < lines.size() && lines[i].find(head) == std::string::npos) ++i;
    ASSERT_LT(i + 2, lines.size()) << "no diagnostic at that line and column in:\n" << out;
    EXPECT_NE(lines[i].find(head + e.message), std::string::npos) << lines[i];
    EXPECT_EQ(lines[i + 1], source[e.line]) << "the source line";
    const std::string& caret = lines[i + 2];
    EXPECT_EQ(caret.find('^'), static_cast<size_t>(e.column - 1)) << "the caret: '" << caret << "'";
  }
  EXPECT_NE(out.find(std::to_string(expected.size()) + " errors generated."), std::string::npos)
      << out;
}

// ---- fusion -----------------------------------------------------------------

// The lines of swish_knee's body in samples/custom_activation/model.cpp.
bool in_swish_knee(const SrcLoc& loc) {
  static const std::pair<int, int> lines = [] {
    std::ifstream f(std::string(SHARC_SOURCE_DIR) + "/samples/custom_activation/model.cpp");
    int first = 0, last = 0, k = 0;
    for (std::string l; std::getline(f, l);) {
      ++k;
      if (l.find("inline float swish_knee(") != std::string::npos) first = k;
      if (first && !last && l == "}") last = k;
    }
    return std::pair<int, int>{first, last};
  }();
  return loc.file == "samples/custom_activation/model.cpp" && loc.line > lines.first &&
         loc.line < lines.second;
}

TEST(LiftFusion, LiftedActivationIsFusedWithItsNeighbours) {
  const ir::Graph global = trace("act_train", [](ProgramBuilder& b) {
    custom_activation::build_train(b, custom_activation::Config{});
  });
  for (const char* mesh : {"data=8", "model=8", "fsdp=4,model=2"}) {
    SCOPED_TRACE(mesh);
    const Lowered l = lower(global, Mesh::parse(mesh));
    const ir::Graph& g = l.partitioned;
    const EmissionPlan plan = plan_emission(g);
    // Every forward node lifted from swish_knee is computed in a fused loop
    // (a statement with a tree) that also computes an elementwise op from
    // outside it (the bias add before it); there are two such loops, one per
    // hidden layer.
    std::set<int> loops;
    int lifted = 0;
    for (size_t k = 0; k < plan.buffers.stmts.size(); ++k) {
      const BufferPlan::Stmt& s = plan.buffers.stmts[k];
      bool has_lifted = false, has_neighbour = false;
      for (int t : s.tree) {
        const ir::Node& n = g.nodes[t];
        if (n.backward) continue;
        if (in_swish_knee(n.loc)) {
          has_lifted = true;
          ++lifted;
        } else if (ir::is_elementwise(n.op)) {
          has_neighbour = true;
        }
      }
      if (has_lifted) {
        EXPECT_TRUE(has_neighbour) << "statement " << k << " fuses the activation alone";
        loops.insert(static_cast<int>(k));
      }
    }
    int lifted_nodes = 0;
    for (const ir::Node& n : g.nodes)
      lifted_nodes += !n.backward && in_swish_knee(n.loc) && ir::is_elementwise(n.op);
    EXPECT_EQ(lifted, lifted_nodes) << "every lifted forward node is in a fused loop";
    EXPECT_GE(lifted, 8);
    EXPECT_EQ(loops.size(), 2u);
  }
#ifdef SHARC_ACT_TRAIN_CPP
  // The generated CPU code prints that plan: the select of swish_knee's
  // branch is a line of a fused loop that also computes the bias add.
  const std::string code = read_file(SHARC_ACT_TRAIN_CPP);
  const size_t sel = code.find("= rt::select(");
  ASSERT_NE(sel, std::string::npos) << "no select in the generated code";
  const size_t line_end = code.find('\n', sel);
  EXPECT_NE(code.substr(sel, line_end - sel).find("samples/custom_activation/model.cpp:"),
            std::string::npos)
      << code.substr(sel, line_end - sel);
  const size_t head = code.rfind("=> fused ", sel);
  ASSERT_NE(head, std::string::npos);
  const std::string loop = code.substr(head, sel - head);
  EXPECT_EQ(loop.find("fused loop of"), std::string::npos) << "the select is outside the loop";
  // The loop's header lists the ops it fuses; the bias add is one of them
  // (after the bias's broadcast, which fuses too).
  EXPECT_NE(loop.substr(0, loop.find('\n')).find(" add, "), std::string::npos) << loop;
#endif
}

}  // namespace
}  // namespace sharc

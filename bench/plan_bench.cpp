// bench_plan: the planner's ranking against the clock. The MLP classifier's
// training step (samples/mlp_classifier, mlp_train) is planned for 8
// devices on a machine (default `cpu`, sharc-calibrate's figures for this
// machine), and every candidate that fits is generated and built
// (bench/CMakeLists.txt: sharc_add_program ... MESH auto DEVICES 8
// CANDIDATE k, one program per rank). This runs each on the thread world
// and prints, in one run: the candidate, its predicted and measured step
// time, its predicted and measured peak memory per device; then Spearman's
// rank correlation between predicted and measured times, the chosen plan
// against the fastest measured, and against the best of the sample's
// hand-written meshes (samples/mlp_classifier/CMakeLists.txt).
//
// Per candidate: a fresh world and program, init(0), one step whose peak
// (construction, init and the step, as the plan predicts it) must equal the
// prediction byte for byte (--check makes a difference fail the run), then
// --warmup untimed and --windows windows of --steps timed steps; the
// fastest window counts (bench/timed_steps.h). Times are measured, never
// judged: the ratios are for the reader (docs/guide/planning.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/timed_steps.h"
#include "bench_plan_mlp_candidates.h"  // written by bench/CMakeLists.txt
#include "codegen/cli.h"
#include "codegen/machine.h"
#include "codegen/plan.h"
#include "dsl/program.h"
#include "runtime/thread_world.h"
#include "tests/common/mlp_step.h"

namespace {

namespace rt = sharc::rt;

struct Options {
  int steps = 10, warmup = 2, windows = 3;
  std::string machine = "cpu";
  bool check = false;
};

struct Measurement {
  double step_s = 0;
  double comm_s = 0;  // a step's seconds inside collectives, waiting included, mean over devices
  uint64_t peak = 0;
};

template <class Program>
Measurement measure_candidate(const Options& o) {
  Measurement m;
  {
    rt::ThreadWorld world(Program::mesh_shape());
    const sharc::testing::MlpStep one = sharc::testing::mlp_train_step<Program>(world);
    m.peak = *std::max_element(one.measured.peak_bytes.begin(), one.measured.peak_bytes.end());
  }
  rt::ThreadWorld world(Program::mesh_shape());
  Program program(world);
  program.init(0);
  const std::vector<float> images = sharc::testing::fixed_values(Program::input_info("images").elements(), 2);
  std::vector<float> labels(Program::input_info("labels").elements());
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(i % 10);
  float loss = 0, accuracy = 0, grad_norm = 0, lr = 0;
  typename Program::Outputs out;
  out.loss = &loss;
  out.accuracy = &accuracy;
  out.grad_norm = &grad_norm;
  out.lr = &lr;
  auto step = [&](int) {
    typename Program::Inputs in;
    in.images = images.data();
    in.labels = labels.data();
    program.step(in, out);
  };
  const sharc::bench::Timing t = sharc::bench::timed_steps(world, o.warmup, o.steps, step, o.windows);
  m.step_s = t.step_s;
  for (int r = 0; r < world.size(); ++r) m.comm_s += world.comm(r).stats().total_seconds() / t.steps / world.size();
  return m;
}

// Ranks (1 = smallest), ties sharing their mean rank.
std::vector<double> ranks(const std::vector<double>& x) {
  std::vector<size_t> order(x.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[order[k]] = (static_cast<double>(i + j) / 2.0) + 1.0;
    i = j + 1;
  }
  return r;
}

// Spearman's rank correlation: Pearson's over the ranks.
double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(ra.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < ra.size(); ++i) ma += ra[i] / n, mb += rb[i] / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"The planner's ranking of the MLP classifier's candidates on 8 devices against their measured "
               "step times and peaks, every candidate generated and run in one invocation.",
               "bench_plan"};
  app.add_option("--steps", o.steps, "timed steps per window")->check(sharc::cli::at_least(1))->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(sharc::cli::at_least(0))->capture_default_str();
  app.add_option("--windows", o.windows, "timed windows; the fastest counts")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--machine", o.machine, "the machine the plan is costed on; the programs were built on "
                                         "`cpu` (bench/CMakeLists.txt)")
      ->capture_default_str();
  app.add_flag("--check", o.check, "fail unless every measured peak is the predicted one, byte for byte");
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;

  auto it = sharc::ProgramRegistry::all().find("mlp_train");
  const sharc::ir::Graph traced = sharc::trace("mlp_train", it->second);
  const sharc::Plan plan = sharc::plan("mlp_train", traced, 8, 0, sharc::load_machine(o.machine));

  // The built programs, by rank, measured in turn.
  std::vector<Measurement> measured;
  std::vector<std::string> built_meshes;
#define SHARC_MEASURE(ns)                                                              \
  measured.push_back(measure_candidate<bench_plan_mlp::ns::Program>(o));               \
  built_meshes.push_back(bench_plan_mlp::ns::Program::mesh_shape().to_string());
  SHARC_BENCH_PLAN_MLP_CANDIDATES(SHARC_MEASURE)
#undef SHARC_MEASURE

  int fitting = 0;
  while (fitting < static_cast<int>(plan.candidates.size()) && plan.candidates[fitting].fits) ++fitting;
  const int n = std::min<int>(fitting, static_cast<int>(measured.size()));
  std::printf("bench_plan: mlp_train on 8 devices, machine %s; %d candidates that fit, %d built; %d warm-up, "
              "%d windows of %d timed steps\n\n",
              plan.machine.name.c_str(), fitting, static_cast<int>(measured.size()), o.warmup, o.windows, o.steps);
  std::printf("rank  %-22s %-5s %13s %13s %7s %10s %10s %14s %14s\n", "mesh", "tp", "predicted ms", "measured ms",
              "ratio", "comm pred", "comm meas", "predicted peak", "measured peak");
  // The sample's hand-written meshes (synchronous TP).
  const std::vector<std::string> hand_written = {"data=8", "fsdp=8", "model=8", "data=4,model=2", "fsdp=4,model=2"};
  std::vector<double> predicted_s, measured_s;
  int mismatches = 0, fastest = 0, best_hand = -1;
  for (int k = 0; k < n; ++k) {
    const sharc::PlanCandidate& c = plan.candidates[k];
    const Measurement& m = measured[k];
    const bool same_mesh = sharc::Mesh::parse(c.mesh).str() == built_meshes[k];
    const bool peak_ok = m.peak == c.peak_bytes && same_mesh;
    mismatches += !peak_ok;
    predicted_s.push_back(c.step_s);
    measured_s.push_back(m.step_s);
    if (m.step_s < measured[fastest].step_s) fastest = k;
    if (!c.ring && std::find(hand_written.begin(), hand_written.end(), c.mesh) != hand_written.end() &&
        (best_hand < 0 || m.step_s < measured[best_hand].step_s))
      best_hand = k;
    std::printf("%4d  %-22s %-5s %13.3f %13.3f %7.2f %10.3f %10.3f %14llu %14llu%s\n", k + 1, c.mesh.c_str(),
                c.ring ? "ring" : "auto", c.step_s * 1e3, m.step_s * 1e3, m.step_s / c.step_s, c.comm_s * 1e3,
                m.comm_s * 1e3, static_cast<unsigned long long>(c.peak_bytes),
                static_cast<unsigned long long>(m.peak),
                peak_ok ? "" : same_mesh ? "  PEAK DIFFERS" : "  NOT THE PLAN'S MESH");
  }
  std::printf("\nSpearman's rank correlation, predicted against measured step times over %d candidates: %.3f\n", n,
              spearman(predicted_s, measured_s));
  std::printf("chosen (rank 1) %s: %.3f ms measured; the fastest measured, rank %d %s: %.3f ms (chosen %+.1f%%)\n",
              plan.candidates[0].mesh.c_str(), measured[0].step_s * 1e3, fastest + 1,
              plan.candidates[fastest].mesh.c_str(), measured[fastest].step_s * 1e3,
              100 * (measured[0].step_s / measured[fastest].step_s - 1));
  if (best_hand >= 0)
    std::printf("the best hand-written mesh, %s: %.3f ms (chosen %+.1f%%)\n", plan.candidates[best_hand].mesh.c_str(),
                measured[best_hand].step_s * 1e3, 100 * (measured[0].step_s / measured[best_hand].step_s - 1));
  std::printf("peaks: %d of %d as predicted, byte for byte\n", n - mismatches, n);
  if (o.check && (mismatches > 0 || n < static_cast<int>(measured.size()))) {
    std::fprintf(stderr, "bench_plan --check: %d candidates' peaks or meshes differ from the plan's%s\n", mismatches,
                 n < static_cast<int>(measured.size()) ? ", and more programs were built than candidates fit" : "");
    return 1;
  }
  return 0;
}

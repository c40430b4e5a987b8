// bench_plan: the planner's ranking against the clock. Two samples'
// training steps are planned for 8 devices on a machine (default `cpu`,
// sharc-calibrate's figures for this machine): the MLP classifier's
// (samples/mlp_classifier, mlp_train) and the GPT's (samples/gpt2,
// gpt2_train with the sample's options). Every candidate that fits is
// generated and built (bench/CMakeLists.txt: sharc_add_program ... MESH auto
// DEVICES 8 CANDIDATE k, one program per rank). This runs each on the
// thread world and prints, in one run and per sample: the candidate, its
// predicted and measured step time, its predicted and measured peak memory
// per device; then Spearman's rank correlation between predicted and
// measured times, the chosen plan against the fastest measured, and against
// the best of the sample's hand-written meshes (the samples' CMakeLists).
//
// Per candidate: a fresh world and program, init(0), one step whose peak
// (construction, init and the step, as the plan predicts it) must equal the
// prediction byte for byte (--check makes a difference fail the run), then
// --warmup untimed and --windows windows of --steps timed steps; the
// fastest window counts (bench/timed_steps.h). That runs --rounds times
// over all the candidates in turn (or those --candidates names).
//
// Two measures of a candidate's time come of the rounds: "measured ms",
// its fastest round, and "paired", its time over the chosen plan's in the
// same round (paired_ratio). Where the machine's speed drifts over
// minutes, a fastest round is mostly the luck of when it ran, and the
// paired ratios are the ones to rank by (docs/guide/planning.md,
// "Measured"). Times are measured, never judged: the ratios are for the
// reader.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench/timed_steps.h"
#include "bench_plan_candidates.h"  // written by bench/CMakeLists.txt
#include "codegen/cli.h"
#include "codegen/machine.h"
#include "codegen/plan.h"
#include "dsl/program.h"
#include "runtime/thread_world.h"
#include "tests/common/gpt2_steps.h"
#include "tests/common/mlp_step.h"

namespace {

namespace rt = sharc::rt;

struct Options {
  int steps = 10, warmup = 2, windows = 1, rounds = 9;
  std::string machine = "cpu";
  std::string trace_dir;  // --trace: each candidate's step on the wall clock, SAMPLE_cK.json
  std::vector<int> candidates;  // --candidates: the ranks measured (1-based); empty: all
  bool check = false;
};

struct Measurement {
  double step_s = 0;
  double comm_s = 0;  // a step's seconds inside collectives, waiting included, mean over devices
  uint64_t peak = 0;
  bool ran = false;  // false: left out by --candidates
  std::vector<double> round_s;  // every round's step time, in order
};

// One step of a sample's program on its fixed inputs.
template <class Program>
void feed_step(sharc::testing::MlpFeed<Program>& feed, Program& program, int) {
  feed.step(program);
}
template <class Program>
void feed_step(sharc::testing::Gpt2Feed<Program>& feed, Program& program, int s) {
  feed.step(program, static_cast<float>(s + 1));
}

template <class Program, class Feed>
Measurement measure_candidate(const Options& o, const std::string& trace_name) {
  Measurement m;
  m.ran = true;
  rt::ThreadWorld world(Program::mesh_shape());
  Program program(world);
  program.init(0);
  world.reset_stats();
  Feed feed;
  feed_step(feed, program, 0);
  const sharc::Measured first = sharc::measure(world);
  m.peak = *std::max_element(first.peak_bytes.begin(), first.peak_bytes.end());
  const sharc::bench::Timing t =
      sharc::bench::timed_steps(world, o.warmup, o.steps, [&](int s) { feed_step(feed, program, s + 1); }, o.windows);
  m.step_s = t.step_s;
  m.round_s = {t.step_s};
  for (int r = 0; r < world.size(); ++r) m.comm_s += world.comm(r).stats().total_seconds() / t.steps / world.size();
  if (!o.trace_dir.empty()) {
    // One more step, each statement on the wall clock (bench/trace_summary.py reads it).
    world.set_clock(rt::ClockMode::kWall);
    feed_step(feed, program, t.steps + o.warmup + 1);
    const std::string path = o.trace_dir + "/" + trace_name + ".json";
    std::ofstream(path) << rt::chrome_trace_json(world.trace());
  }
  return m;
}

// The median over rounds of a's step time over b's in the same round: the
// candidates of a round run seconds apart, so a slow spell of the machine
// that outlasts a round cancels out of each ratio.
double paired_ratio(const Measurement& a, const Measurement& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.round_s.size() && i < b.round_s.size(); ++i) r.push_back(a.round_s[i] / b.round_s[i]);
  std::sort(r.begin(), r.end());
  const size_t n = r.size();
  return n == 0 ? 0.0 : n % 2 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
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

// A sample's programs, measured: what bench_sample ranks.
struct Sample {
  std::string name;                // "mlp": its traces' prefix
  std::string program;             // the registry's name
  std::string options;             // the build's OPTIONS, "layers=2,scan=1"
  std::vector<std::string> hand_written;  // the sample's own meshes (synchronous TP)
  std::vector<Measurement> measured;      // by rank
  std::vector<std::string> built_meshes;  // by rank, as the programs say

  // Round `round`'s measurement of the candidate of rank k: the first
  // round's in full (for a candidate --candidates leaves out, a placeholder
  // that keeps rank k at index k), a later round's step time where it is
  // faster (its peak and comm time stay the first round's); every round's
  // step time in round_s.
  void record(size_t k, int round, const Measurement& m, const std::string& mesh) {
    if (round == 0) {
      measured.push_back(m);
      built_meshes.push_back(mesh);
    } else if (m.ran) {
      measured[k].step_s = std::min(measured[k].step_s, m.step_s);
      measured[k].round_s.push_back(m.step_s);
    }
  }
};

// What tells two candidates of a plan apart: the choices a program is
// generated from.
std::string identity(const sharc::PlanCandidate& c) {
  return c.mesh + (c.ring ? " ring" : "") + " " + c.schedule_str() + " " + std::to_string(c.microbatches) + " " +
         c.remat_str() + " " + c.bucket_str();
}

// Prints the sample's table and summary; returns false when --check fails.
// The programs were generated from the plan on `cpu` (bench/CMakeLists.txt:
// CANDIDATE k is that plan's rank k); with --machine another machine's plan
// ranks them, each found in it by its choices.
bool bench_sample(const Options& o, const Sample& sample) {
  const auto it = sharc::ProgramRegistry::all().find(sample.program);
  const sharc::PlanTrace t =
      sharc::trace_for_plan(sample.program, it->second, sharc::parse_program_options(sample.options));
  auto plan_on = [&](const std::string& machine) {
    return sharc::plan(sample.program, t.traced, 8, 0, sharc::load_machine(machine), {}, t.retrace);
  };
  const sharc::Plan built = plan_on("cpu");
  const sharc::Plan plan = o.machine == "cpu" ? built : plan_on(o.machine);
  const std::vector<Measurement>& measured = sample.measured;
  const int n = std::min<int>(built.fitting(), static_cast<int>(measured.size()));
  // Rows in `plan`'s order: its rank, and the built program's.
  // A built program the other machine's search never costs (a mesh it
  // prunes, a bucket size it does not try) is left out of the ranking.
  std::vector<std::pair<int, int>> rows;
  std::string unranked;
  for (int k = 0; k < n; ++k) {
    if (!measured[k].ran) continue;
    const auto found = std::find_if(plan.candidates.begin(), plan.candidates.end(),
                                    [&](const sharc::PlanCandidate& c) {
                                      return c.fits && identity(c) == identity(built.candidates[k]);
                                    });
    if (found == plan.candidates.end())
      unranked += "\n  " + identity(built.candidates[k]);
    else
      rows.emplace_back(static_cast<int>(found - plan.candidates.begin()), k);
  }
  std::sort(rows.begin(), rows.end());
  const int ran = static_cast<int>(
      std::count_if(measured.begin(), measured.end(), [](const Measurement& m) { return m.ran; }));
  std::printf("bench_plan: %s%s%s%s on 8 devices, machine %s; %d candidates that fit, %d built, %d measured; %d "
              "rounds of %d warm-up and %d windows of %d timed steps\n\n",
              sample.program.c_str(), sample.options.empty() ? "" : " (", sample.options.c_str(),
              sample.options.empty() ? "" : ")", plan.machine.name.c_str(), plan.fitting(),
              static_cast<int>(measured.size()), ran, o.rounds, o.warmup, o.windows, o.steps);
  // The chosen plan's measurement, when it was measured (rows[0] is then
  // rank 1): every row's rounds are paired with its rounds (paired_ratio).
  const Measurement* chosen = rows.empty() || rows[0].first != 0 ? nullptr : &measured[rows[0].second];
  std::printf("rank  %-22s %-5s %13s %13s %7s %7s %10s %10s %14s %14s\n", "mesh", "tp", "predicted ms", "measured ms",
              "ratio", "paired", "comm pred", "comm meas", "predicted peak", "measured peak");
  // By row: the predicted and the fastest round's step times, and the
  // step time over the chosen's, paired by round.
  std::vector<double> predicted_s, measured_s, paired;
  int mismatches = 0;
  for (const auto& [rank, k] : rows) {
    const sharc::PlanCandidate& c = plan.candidates[rank];
    const Measurement& m = measured[k];
    const bool same_mesh = sharc::Mesh::parse(c.mesh).str() == sample.built_meshes[k];
    const bool peak_ok = m.peak == c.peak_bytes && same_mesh;
    mismatches += !peak_ok;
    predicted_s.push_back(c.step_s);
    measured_s.push_back(m.step_s);
    paired.push_back(chosen ? paired_ratio(m, *chosen) : 0.0);
    char paired_text[16] = "-";  // no chosen plan measured to pair with
    if (chosen) std::snprintf(paired_text, sizeof paired_text, "%.3f", paired.back());
    std::printf("%4d  %-22s %-5s %13.3f %13.3f %7.2f %7s %10.3f %10.3f %14llu %14llu%s\n", rank + 1, c.mesh.c_str(),
                c.ring ? "ring" : "auto", c.step_s * 1e3, m.step_s * 1e3, m.step_s / c.step_s, paired_text,
                c.comm_s * 1e3, m.comm_s * 1e3, static_cast<unsigned long long>(c.peak_bytes),
                static_cast<unsigned long long>(m.peak),
                peak_ok ? "" : same_mesh ? "  PEAK DIFFERS" : "  NOT THE PLAN'S MESH");
  }
  if (!unranked.empty())
    std::printf("\nbuilt, but not costed on %s (its search never reaches them):%s\n", plan.machine.name.c_str(),
                unranked.c_str());
  if (rows.empty()) {
    std::fprintf(stderr, "bench_plan: %s: no built program is among %s's candidates\n", sample.program.c_str(),
                 plan.machine.name.c_str());
    return false;
  }
  // The row with the smallest `by`, over every row or the sample's
  // hand-written meshes (synchronous TP, as the samples build them); -1
  // when there is none.
  auto least = [&](const std::vector<double>& by, bool hand_written) {
    int best = -1;
    for (int row = 0; row < static_cast<int>(rows.size()); ++row) {
      const sharc::PlanCandidate& c = plan.candidates[rows[row].first];
      const auto& hand = sample.hand_written;
      if (hand_written && (c.ring || std::find(hand.begin(), hand.end(), c.mesh) == hand.end())) continue;
      if (best < 0 || by[row] < by[best]) best = row;
    }
    return best;
  };
  auto name_of = [&](int row) {
    const sharc::PlanCandidate& c = plan.candidates[rows[row].first];
    return "rank " + std::to_string(rows[row].first + 1) + " " + c.mesh + (c.ring ? " (ring)" : "");
  };
  std::printf("\nSpearman's rank correlation, predicted against measured step times over %d candidates: %.3f",
              static_cast<int>(rows.size()), spearman(predicted_s, measured_s));
  if (chosen) std::printf(" (paired with the chosen's rounds: %.3f)", spearman(predicted_s, paired));
  std::printf("\n");
  const int fastest = least(measured_s, false);
  if (!chosen) {
    std::printf("chosen (rank 1) %s: not measured (not built: the programs are the plan on cpu's; or left out by "
                "--candidates); the fastest measured, %s: %.3f ms\n",
                identity(plan.candidates[0]).c_str(), name_of(fastest).c_str(), measured_s[fastest] * 1e3);
  } else {
    // Against the fastest and the best hand-written mesh, by the fastest
    // rounds and by rounds paired: the chosen's time over theirs.
    auto against = [&](const char* what, bool hand_written) {
      const int by_min = least(measured_s, hand_written), by_pair = least(paired, hand_written);
      if (by_min < 0) return;
      const Measurement& other = measured[rows[by_pair].second];
      std::printf("%s: fastest rounds %s, %.3f ms (chosen %+.1f%%); paired rounds %s (chosen %+.1f%%", what,
                  name_of(by_min).c_str(), measured_s[by_min] * 1e3, 100 * (measured_s[0] / measured_s[by_min] - 1),
                  name_of(by_pair).c_str(), 100 * (paired_ratio(*chosen, other) - 1));
      if (by_pair != 0) {
        // How often the chosen won: a median is one number of many.
        int won = 0, n = 0;
        for (; n < static_cast<int>(std::min(chosen->round_s.size(), other.round_s.size())); ++n)
          won += chosen->round_s[n] < other.round_s[n];
        std::printf(", faster in %d of %d rounds", won, n);
      }
      std::printf(")\n");
    };
    std::printf("chosen (rank 1) %s: %.3f ms measured\n", plan.candidates[0].mesh.c_str(), measured_s[0] * 1e3);
    against("the fastest", false);
    against("the best hand-written mesh", true);
  }
  const int ranked = static_cast<int>(rows.size());
  std::printf("%s peaks: %d of %d as predicted, byte for byte\n\n", sample.program.c_str(), ranked - mismatches,
              ranked);
  if (o.check && (mismatches > 0 || n < static_cast<int>(measured.size()))) {
    std::fprintf(stderr, "bench_plan --check: %s: %d candidates' peaks or meshes differ from the plan's%s\n",
                 sample.program.c_str(), mismatches,
                 n < static_cast<int>(measured.size()) ? ", and more programs were built than candidates fit" : "");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> samples = {"mlp", "gpt2"};
  CLI::App app{"The planner's ranking of the MLP classifier's and the GPT's candidates on 8 devices against their "
               "measured step times and peaks, every candidate generated and run in one invocation.",
               "bench_plan"};
  app.add_option("--sample", samples, "the samples to measure")
      ->check(CLI::IsMember({"mlp", "gpt2"}))
      ->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps per window")->check(sharc::cli::at_least(1))->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(sharc::cli::at_least(0))->capture_default_str();
  app.add_option("--windows", o.windows, "timed windows; the fastest counts")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "rounds over every candidate: its fastest is \"measured ms\"; its median time over the chosen's in the same round, \"paired\"")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--machine", o.machine,
                 "the machine whose plan ranks the programs (built from the plan on `cpu`, bench/CMakeLists.txt): "
                 "a name or a machine file")
      ->capture_default_str();
  app.add_option("--trace", o.trace_dir, "also write each candidate's step on the wall clock to DIR/SAMPLE_cK.json")
      ->check(CLI::ExistingDirectory);
  app.add_option("--candidates", o.candidates,
                 "measure only these ranks of the plan on cpu (1 = its choice), e.g. --candidates 1 3 5; default all")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--check", o.check, "fail unless every measured peak is the predicted one, byte for byte");
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
#define SHARC_COUNT(c) +1
  const int built = std::min(0 SHARC_BENCH_PLAN_MLP_CANDIDATES(SHARC_COUNT), 0 SHARC_BENCH_PLAN_GPT2_CANDIDATES(SHARC_COUNT));
#undef SHARC_COUNT
  for (int k : o.candidates)
    if (k > built) {
      std::fprintf(stderr, "bench_plan: --candidates %d: each sample has %d candidates built (ranks 1 to %d)\n", k,
                   built, built);
      return 2;
    }

  // --rounds rounds, each measuring every candidate of the sample in turn.
  auto run = [&](Sample sample, const std::function<void(Sample&, int round)>& measure_round) {
    for (int round = 0; round < o.rounds; ++round) measure_round(sample, round);
    return bench_sample(o, sample);
  };
  auto measures = [&](size_t k) {
    return o.candidates.empty() ||
           std::find(o.candidates.begin(), o.candidates.end(), static_cast<int>(k) + 1) != o.candidates.end();
  };
#define SHARC_MEASURE(c, ns, Feed)                                                                            \
  s.record(k, round,                                                                                          \
           measures(k) ? measure_candidate<ns::c::Program, sharc::testing::Feed<ns::c::Program>>(o, s.name + "_" #c) \
                       : Measurement{},                                                                       \
           ns::c::Program::mesh_shape().to_string());                                                         \
  ++k;
  bool ok = true;
  auto wants = [&](const char* s) { return std::find(samples.begin(), samples.end(), s) != samples.end(); };
  if (wants("mlp")) {
    // samples/mlp_classifier/CMakeLists.txt's meshes.
    Sample mlp{.name = "mlp", .program = "mlp_train", .options = "",
               .hand_written = {"data=8", "fsdp=8", "model=8", "data=4,model=2", "fsdp=4,model=2"},
               .measured = {}, .built_meshes = {}};
    ok &= run(std::move(mlp), [&](Sample& s, int round) {
      size_t k = 0;
#define SHARC_MEASURE_MLP(c) SHARC_MEASURE(c, bench_plan_mlp, MlpFeed)
      SHARC_BENCH_PLAN_MLP_CANDIDATES(SHARC_MEASURE_MLP)
#undef SHARC_MEASURE_MLP
    });
  }
  if (wants("gpt2")) {
    // samples/gpt2/CMakeLists.txt's meshes.
    Sample gpt2{.name = "gpt2", .program = "gpt2_train", .options = SHARC_BENCH_PLAN_GPT2_OPTIONS,
                .hand_written = {"data=8", "model=8", "data=2,model=4", "data=4,model=2", "fsdp=4,model=2"},
                .measured = {}, .built_meshes = {}};
    ok &= run(std::move(gpt2), [&](Sample& s, int round) {
      size_t k = 0;
#define SHARC_MEASURE_GPT2(c) SHARC_MEASURE(c, bench_plan_gpt2, Gpt2Feed)
      SHARC_BENCH_PLAN_GPT2_CANDIDATES(SHARC_MEASURE_GPT2)
#undef SHARC_MEASURE_GPT2
    });
  }
#undef SHARC_MEASURE
  return ok ? 0 : 1;
}

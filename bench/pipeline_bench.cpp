// bench_pipeline: a 4-layer GPT (dsl/transformer.h; width 64, 4 heads,
// context 32, batch 16) trained on 4 simulated devices three ways, side by
// side: pipeline parallel (pipe=4, one block per stage, 1F1B over 8
// micro-batches), data parallel (data=4) and tensor parallel (model=4). For
// each it prints the wall time of a training step on the thread world with a
// simulated link, the bytes each device sends per step, the peak memory per
// device (the report's prediction), and for the pipeline the bubble on the
// plan's virtual clock (equal per-layer costs: the schedule's own,
// (p-1)/(m+p-1)) and the share of each stage's step spent waiting in
// receives on the wall clock. Then each step once more on the runtime's
// virtual clock (runtime/trace.h: every statement charged its modelled cost
// on the machine model, every message its link time; deterministic): the
// step's virtual time and the share of device time not spent computing
// (the pipeline's bubble plus every wait for a transfer or collective). Steps run in the per-device interpreter (codegen/execute.h), which
// calls the same kernels and collectives as generated code but is not
// compiled per program, so its absolute times are an interpreter's; compare
// the rows, not the numbers with other benchmarks. It prints and never
// judges; the ctest smoke test only checks that it runs.
//
//   bench_pipeline [--steps N] [--warmup N] [--latency-us L] [--gbps B]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "codegen/cli.h"
#include "codegen/execute.h"
#include "codegen/pipeline.h"
#include "codegen/report.h"
#include "codegen/stage_plan.h"
#include "dsl/sharc.h"
#include "dsl/train.h"

namespace {

using namespace sharc;

constexpr int64_t kBatch = 16, kContext = 32;

GPTConfig config() {
  GPTConfig c;
  c.vocab = 64;
  c.context = kContext;
  c.embed = 64;
  c.heads = 4;
  c.layers = 4;
  c.dropout = 0.0;
  return c;
}

ir::Graph gpt_train(bool pipelined) {
  return trace("gpt_train", [pipelined](ProgramBuilder& b) {
    if (pipelined) b.set_pipeline({.axis = "pipe", .microbatches = 8, .schedule = "1f1b"});
    b.set_logical_rules(transformer_logical_rules());
    b.set_sharding_rules(transformer_sharding_rules());
    const GPTConfig c = config();
    GPT model(b.scope(), c);
    Tensor tokens = b.input("tokens", {kBatch, c.context}, P("batch", "seq"));
    Tensor targets = b.input("targets", {kBatch, c.context}, P("batch", "seq"));
    train_step(
        b, {tokens, targets}, [&](const std::vector<Tensor>& mb) { return softmax_cross_entropy(model(mb[0]), mb[1]); },
        adamw(Schedule::constant(1e-3), 1e-2), {.clip_global_norm = 1.0});
  });
}

HostValues batch(int step) {
  HostValues h;
  for (int64_t i = 0; i < kBatch * kContext; ++i) {
    h["tokens"].push_back(static_cast<double>((i * 7 + step * 3) % 64));
    h["targets"].push_back(static_cast<double>((i * 7 + step * 3 + 1) % 64));
  }
  return h;
}

struct Row {
  std::string mesh, strategy;
  double step_ms = 0, sent_kib = 0, peak_kib = 0, bubble = -1, recv_wait = -1;
  double virtual_ms = 0, virtual_idle = 0;
};

Row run(const std::string& mesh, const std::string& strategy, bool pipelined, int steps, int warmup,
        const rt::LinkModel& link) {
  const Lowered l = lower(gpt_train(pipelined), Mesh::parse(mesh));
  Row r{mesh, strategy};
  ExecOptions o;
  o.link = link;
  HostValues state;
  double total = 0, last_dt = 0;
  ExecResult last;
  for (int s = 0; s < warmup + steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    last = execute(l, batch(s), 0, s == 0 ? nullptr : &state, o);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state = last.params;
    last_dt = dt;
    if (s >= warmup) total += dt;
  }
  r.step_ms = 1e3 * total / std::max(steps, 1);
  const Report report = predict(l);
  uint64_t sent = 0, peak = 0;
  for (size_t d = 0; d < report.bytes.size(); ++d) {
    uint64_t b = 0;
    for (uint64_t x : report.bytes[d]) b += x;
    sent = std::max(sent, b);
    peak = std::max(peak, report.peak_bytes[d]);
  }
  // The runtime's virtual clock: one more step, timed by the model.
  ExecOptions v = o;
  v.virtual_clock = true;
  const ExecResult timed = execute(l, batch(0), 0, nullptr, v);
  double busy = 0, end = 0;
  for (const rt::DeviceTime& t : timed.device_times) {
    busy += t.busy_s;
    end = std::max(end, t.now_s);
  }
  r.virtual_ms = 1e3 * end;
  r.virtual_idle = 1 - busy / (static_cast<double>(timed.device_times.size()) * end);
  r.sent_kib = sent / 1024.0;
  r.peak_kib = peak / 1024.0;
  if (l.stages) {
    const StageTimeline t = simulate_stages(*l.stages, l.partitioned, layer_unit_costs(*l.stages, l.partitioned),
                                            [](int) { return 0.0; });
    r.bubble = t.bubble_fraction();
    // Wall clock: each device's time in send/recv (receives wait for the
    // neighbour) over the last step's wall time, averaged over devices
    // (every execute() is a fresh world, so its counters are that step's).
    double wait = 0;
    for (const rt::CommStats& c : last.comm) wait += c.seconds(rt::CollectiveKind::kSendRecv);
    r.recv_wait = wait / static_cast<double>(last.comm.size()) / std::max(last_dt, 1e-12);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3, warmup = 1;
  double latency_us = 20, link_gbps = 16;  // 2 GB/s
  CLI::App app{"A 4-layer GPT trained on 4 simulated devices pipelined (1F1B), data parallel and tensor "
               "parallel, side by side: step time, bytes sent, peak memory, the pipeline's bubble.",
               "bench_pipeline"};
  sharc::cli::add_steps(app, steps, warmup);
  sharc::cli::add_link(app, latency_us, link_gbps);
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  const double gbps = link_gbps / 8;  // GB/s
  openblas_set_num_threads(1);
  const rt::LinkModel link{latency_us * 1e-6, gbps * 1e9};
  std::printf("GPT 4 layers, width 64, 4 heads, context %lld, batch %lld, 4 devices; link %.0f us + %.1f GB/s; "
              "%d steps after %d warm-up (per-device interpreter); virtual clock: %.0f GFLOP/s, %.0f GB/s "
              "per device\n\n",
              static_cast<long long>(kContext), static_cast<long long>(kBatch), latency_us, gbps, steps, warmup,
              rt::MachineModel{}.flops_per_s / 1e9, rt::MachineModel{}.bytes_per_s / 1e9);
  std::vector<Row> rows = {
      run("pipe=4", "pipeline, 1F1B, 8 micro-batches", true, steps, warmup, link),
      run("data=4", "data parallel", false, steps, warmup, link),
      run("model=4", "tensor parallel (Megatron)", false, steps, warmup, link),
  };
  std::printf("%-8s %-34s %10s %14s %14s %16s %12s %12s %14s\n", "mesh", "strategy", "step ms", "sent KiB/dev",
              "peak KiB/dev", "bubble (plan)", "recv wait", "virtual ms", "virtual idle");
  for (const Row& r : rows) {
    char bubble[32] = "-", wait[32] = "-";
    if (r.bubble >= 0) std::snprintf(bubble, sizeof bubble, "%.1f%%", 100 * r.bubble);
    if (r.recv_wait >= 0) std::snprintf(wait, sizeof wait, "%.1f%%", 100 * r.recv_wait);
    std::printf("%-8s %-34s %10.1f %14.1f %14.1f %16s %12s %12.3f %13.1f%%\n", r.mesh.c_str(), r.strategy.c_str(),
                r.step_ms, r.sent_kib, r.peak_kib, bubble, wait, r.virtual_ms, 100 * r.virtual_idle);
  }
  return 0;
}

// The planner (plan.h): candidates from the program's axes, each lowered and
// predicted, ranked by predicted step time among those that fit.
#include "codegen/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <sstream>

#include "codegen/op_cost.h"
#include "codegen/report.h"
#include "codegen/stage_plan.h"
#include "dsl/sharding_rules.h"

namespace sharc {

namespace {

void add_axis(std::vector<std::string>& axes, const std::string& a) {
  if (std::find(axes.begin(), axes.end(), a) == axes.end()) axes.push_back(a);
}

// "1.23 ms", "850 us", "2.10 s".
std::string seconds_str(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  return buf;
}

// "12.4 MiB", "512 B".
std::string bytes_str(uint64_t b) {
  char buf[32];
  const double v = static_cast<double>(b);
  if (b < 1024)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", v / 1024);
  else if (b < (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.1f MiB", v / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", v / (1 << 30));
  return buf;
}

// One collective on one device, as the runtime's ring algorithms run it
// (runtime/ring_comm.cpp) on the link model: a ring step waits for its
// message (the latency, and its bytes at the link's rate, one step after
// another); an all-to-all posts every block at once on links of their own;
// a reducing ring adds each arriving chunk into its own (one flop, and two
// reads and a write, per element, on the compute model; f32 assumed).
double collective_seconds(const CollectiveReport& col, uint64_t sent, const PlanMachine& m) {
  const int g = col.group_size;
  if (g <= 1 || sent == 0) return 0;
  const double bytes = static_cast<double>(sent);
  const double rate = m.link.bytes_per_s > 0 ? m.link.bytes_per_s : INFINITY;
  const double calls = static_cast<double>(std::max<uint64_t>(col.calls, 1));
  double reduced = 0;  // bytes added into the device's own
  double t = 0;
  switch (col.kind) {
    case rt::CollectiveKind::kAllReduce:
      t = calls * 2 * (g - 1) * m.link.latency_s + bytes / rate;
      reduced = bytes / 2;
      break;
    case rt::CollectiveKind::kReduceScatter:
      t = calls * (g - 1) * m.link.latency_s + bytes / rate;
      reduced = bytes;
      break;
    case rt::CollectiveKind::kAllGather:
      t = calls * (g - 1) * m.link.latency_s + bytes / rate;
      break;
    case rt::CollectiveKind::kAllToAll:
      t = calls * m.link.latency_s + bytes / (g - 1) / rate;
      break;
    case rt::CollectiveKind::kPPermute:
    case rt::CollectiveKind::kSendRecv:
      t = calls * m.link.latency_s + bytes / rate;
      break;
  }
  if (reduced > 0) t += m.compute.seconds(rt::OpCost{reduced / 4, 3 * reduced});
  return t;
}

// The candidate's numbers from its lowered program.
void cost(const Lowered& l, const PlanMachine& m, PlanCandidate& c) {
  const Report r = predict(l);
  for (uint64_t p : r.peak_bytes) c.peak_bytes = std::max(c.peak_bytes, p);
  for (int d = 0; d < r.num_devices; ++d) {
    uint64_t sent = 0;
    for (uint64_t b : r.bytes[d]) sent += b;
    c.sent_bytes = std::max(c.sent_bytes, sent);
    double comm = 0;
    for (const CollectiveReport& col : r.collectives)
      if (!col.bytes.empty()) comm += collective_seconds(col, col.bytes[d], m);
    c.comm_s = std::max(c.comm_s, comm);
  }
  if (l.stages) {
    // The stages through their schedule, each step its statement's cost.
    std::vector<std::vector<double>> seconds;
    for (const ir::Graph& g : l.stage_graphs) seconds.push_back(statement_seconds(g, m.compute));
    const StageTimeline t = simulate_stage_steps(
        *l.stages, l.partitioned, [&](int stage, int step) { return seconds[stage][step]; },
        [](int) { return 0.0; });
    c.compute_s = t.makespan;
    c.bubble = t.bubble_fraction();
  } else {
    for (double s : statement_seconds(l.partitioned, m.compute)) c.compute_s += s;
  }
  c.step_s = c.compute_s + c.comm_s;
}

std::string share(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * f);
  return buf;
}

// How much more a is than b, in percent: "41%", "0.4%" (a decimal under 10).
std::string percent(double a, double b) {
  char buf[32];
  const double p = b > 0 ? 100.0 * (a - b) / b : 0.0;
  std::snprintf(buf, sizeof buf, p < 10 ? "%.1f%%" : "%.0f%%", p);
  return buf;
}

}  // namespace

std::string PlanMachine::str() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s (%.3g flop/s, %.3g B/s memory, %.3g us a statement; link %.3g us + %.3g B/s)",
                name.c_str(), compute.flops_per_s, compute.bytes_per_s, compute.overhead_s * 1e6,
                link.latency_s * 1e6, link.bytes_per_s);
  return buf;
}

std::optional<PlanMachine> known_machine(const std::string& name) {
  if (name == "cpu") return PlanMachine{};
  return std::nullopt;
}

PlanAxes plan_axes(const ir::Graph& traced) {
  PlanAxes out;
  std::vector<std::string>& axes = out.axes;
  if (traced.pipeline) add_axis(axes, traced.pipeline->axis);
  std::set<std::string> logical;
  auto from_rules = [&](const LogicalRules& rules) {
    for (const LogicalRule& r : rules) {
      logical.insert(r.logical);
      if (r.mesh_axis) add_axis(axes, *r.mesh_axis);
    }
  };
  if (traced.rules) from_rules(*traced.rules);
  for (const ir::Node& n : traced.nodes)
    if (n.rules) from_rules(*n.rules);
  if (traced.sharding_rules)
    for (const ShardingRule& r : *traced.sharding_rules)
      for (const std::string& a : r.axes()) add_axis(axes, a);
  // Names in specs that no rule maps are mesh axes themselves, which every
  // mesh must have (a rule to an absent axis is skipped; a name is an error).
  for (const ir::Node& n : traced.nodes)
    if (n.spec)
      for (size_t d = 0; d < n.spec->rank(); ++d)
        for (const std::string& name : (*n.spec)[d].axes)
          if (!logical.contains(name)) {
            add_axis(axes, name);
            add_axis(out.required, name);
          }
  if (traced.pipeline) add_axis(out.required, traced.pipeline->axis);
  // Major to minor as meshes are usually laid out: the pipeline, then the
  // batch's axes, then the rest, tensor parallelism innermost (its
  // collectives are the most frequent, so its groups are neighbours).
  auto order = [](const std::string& a) {
    return a == "pipe" ? 0 : a == "data" ? 1 : a == "fsdp" ? 2 : (a == "model" || a == "tensor") ? 4 : 3;
  };
  for (std::vector<std::string>* list : {&axes, &out.required})
    std::stable_sort(list->begin(), list->end(),
                     [&](const std::string& a, const std::string& b) { return order(a) < order(b); });
  return out;
}

std::vector<std::string> plan_meshes(const PlanAxes& axes, int devices) {
  std::vector<std::string> out;
  const std::vector<std::string>& names = axes.axes;
  std::vector<int> sizes(names.size(), 1);
  std::function<void(size_t, int)> split = [&](size_t i, int left) {
    if (i == names.size()) {
      if (left != 1) return;
      std::string mesh;
      for (size_t k = 0; k < names.size(); ++k) {
        const bool required = std::find(axes.required.begin(), axes.required.end(), names[k]) != axes.required.end();
        if (sizes[k] > 1 || required)
          mesh += (mesh.empty() ? "" : ",") + names[k] + "=" + std::to_string(sizes[k]);
      }
      if (mesh.empty() && !names.empty()) mesh = names.front() + "=1";  // one device
      out.push_back(mesh);
      return;
    }
    for (int s = 1; s <= left; ++s)
      if (left % s == 0) {
        sizes[i] = s;
        split(i + 1, left / s);
      }
    sizes[i] = 1;
  };
  split(0, devices);
  return out;
}

Plan plan(const std::string& program, const ir::Graph& traced, int devices, uint64_t budget_bytes,
          const PlanMachine& machine, const PipelineOptions& options) {
  Plan p;
  p.program = program;
  p.devices = devices;
  p.budget_bytes = budget_bytes;
  p.machine = machine;
  const PlanAxes axes = plan_axes(traced);
  p.axes = axes.axes;
  if (p.axes.empty())
    throw Error(SrcLoc(), "program '" + program + "' names no mesh axis (no logical rule maps to one, no spec "
                          "names one), so there is nothing to split " + std::to_string(devices) +
                          " devices over; give a MESH");
  for (const std::string& mesh : plan_meshes(axes, devices)) {
    PlanCandidate c;
    c.mesh = mesh;
    try {
      const Lowered l = lower(traced, Mesh::parse(mesh, devices, SrcLoc()), options);
      cost(l, machine, c);
      c.partitions = true;
      c.fits = budget_bytes == 0 || c.peak_bytes <= budget_bytes;
    } catch (const Error& e) {
      c.verdict = "does not partition: " + std::string(e.what());
    }
    p.candidates.push_back(std::move(c));
  }
  // Fitting candidates by step time, then those over the budget by peak,
  // then those that do not partition, each in a fixed order.
  auto group = [](const PlanCandidate& c) { return !c.partitions ? 2 : c.fits ? 0 : 1; };
  std::stable_sort(p.candidates.begin(), p.candidates.end(), [&](const PlanCandidate& a, const PlanCandidate& b) {
    if (group(a) != group(b)) return group(a) < group(b);
    if (group(a) == 0 && a.step_s != b.step_s) return a.step_s < b.step_s;
    if (group(a) != 2 && a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
    return false;
  });
  if (!p.candidates.empty() && p.candidates[0].partitions && p.candidates[0].fits) p.chosen = 0;
  for (PlanCandidate& c : p.candidates) {
    if (!c.partitions) continue;
    if (!c.fits) {
      c.verdict = "over the budget by " + bytes_str(c.peak_bytes - budget_bytes);
      continue;
    }
    if (&c == &p.candidates[0]) {
      c.verdict = "chosen";
      continue;
    }
    const PlanCandidate& best = p.candidates[0];
    const double more_comm = c.comm_s - best.comm_s, more_compute = c.compute_s - best.compute_s;
    c.verdict = percent(c.step_s, best.step_s) + " slower: ";
    if (more_comm >= more_compute)
      c.verdict += "communication " + seconds_str(c.comm_s) + " against " + seconds_str(best.comm_s);
    else
      c.verdict += "compute " + seconds_str(c.compute_s) + " against " + seconds_str(best.compute_s) +
                   (c.bubble > 0 ? " (the pipeline idle " + share(c.bubble) + " of it)" : "");
  }
  return p;
}

std::string format_plan(const Plan& p) {
  std::ostringstream o;
  o << "sharc plan: " << p.program << " on " << p.devices << " devices";
  o << ", memory budget " << (p.budget_bytes ? bytes_str(p.budget_bytes) + " per device" : std::string("none"));
  o << "\nmachine: " << p.machine.str() << "\n";
  o << "axes searched: ";
  for (size_t i = 0; i < p.axes.size(); ++i) o << (i ? ", " : "") << p.axes[i];
  o << " (" << p.candidates.size() << " candidates)\n\n";
  size_t width = 4;
  for (const PlanCandidate& c : p.candidates) width = std::max(width, c.mesh.size());
  char row[256];
  std::snprintf(row, sizeof row, "%4s  %-*s  %11s  %11s  %11s  %12s  %12s  %s\n", "rank", static_cast<int>(width),
                "mesh", "step", "compute", "comm", "peak/device", "sent/device", "verdict");
  o << row;
  int rank = 0;
  for (const PlanCandidate& c : p.candidates) {
    const std::string r = c.partitions ? std::to_string(++rank) : "-";
    if (c.partitions)
      std::snprintf(row, sizeof row, "%4s  %-*s  %11s  %11s  %11s  %12s  %12s  ", r.c_str(), static_cast<int>(width),
                    c.mesh.c_str(), seconds_str(c.step_s).c_str(), seconds_str(c.compute_s).c_str(),
                    seconds_str(c.comm_s).c_str(), bytes_str(c.peak_bytes).c_str(), bytes_str(c.sent_bytes).c_str());
    else
      std::snprintf(row, sizeof row, "%4s  %-*s  %11s  %11s  %11s  %12s  %12s  ", r.c_str(), static_cast<int>(width),
                    c.mesh.c_str(), "-", "-", "-", "-", "-");
    o << row << c.verdict << "\n";
  }
  if (p.chosen >= 0) {
    o << "\nchosen: " << p.candidates[p.chosen].mesh << ", as you would write it:\n";
    o << "  sharc_add_program(NAME SOURCE ... PROGRAM " << p.program << " MESH \"" << p.candidates[p.chosen].mesh
      << "\")\n";
  } else {
    o << "\nnothing fits the budget\n";
  }
  return o.str();
}

std::optional<uint64_t> parse_bytes(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const std::string unit = text.substr(used);
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},         {"B", 1},         {"KiB", 1024.0},   {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"KB", 1e3},     {"MB", 1e6},      {"GB", 1e9},       {"TiB", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits)
    if (unit == name) {
      if (!(v > 0) || !std::isfinite(v * scale)) return std::nullopt;
      return static_cast<uint64_t>(std::llround(v * scale));
    }
  return std::nullopt;
}

}  // namespace sharc

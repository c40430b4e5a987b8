// The planner (plan.h): candidates from the program's axes, each lowered and
// predicted, ranked by predicted step time among those that fit.
#include "codegen/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "codegen/buffer_plan.h"
#include "codegen/op_cost.h"
#include "codegen/report.h"
#include "codegen/ring_plan.h"
#include "codegen/stage_plan.h"
#include "dsl/sharding_rules.h"

namespace sharc {

namespace {

// The most micro-batches gradient accumulation is tried with.
constexpr int kMaxAccumulation = 64;

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

}  // namespace

// As the runtime's ring algorithms run it (runtime/ring_comm.cpp): a ring
// step waits for its message (the latency, and its bytes at the link's rate
// for a message of its size, one step after another); an all-to-all posts
// every block at once on links of their own; a point-to-point message goes
// at the link's rate for those; a reducing ring adds each arriving chunk
// into its own (one flop, and two reads and a write, per element, at the
// rate of data in cache: the chunk just arrived; f32 assumed).
double collective_seconds(const CollectiveReport& col, uint64_t sent, const LinkLevel& link,
                          const PlanMachine& m) {
  const int g = col.group_size;
  if (g <= 1 || sent == 0) return 0;
  const double bytes = static_cast<double>(sent);
  const double calls = static_cast<double>(std::max<uint64_t>(col.calls, 1));
  // Per call: the messages it waits for one after another (a ring's
  // steps; an all-reduce's ring goes round twice; an all-to-all posts every
  // block at once and waits once), its messages (a ring step's block each,
  // an all-to-all's block for each peer), how many links its bytes share
  // (an all-to-all's blocks go on links of their own), and the bytes it
  // adds into the device's own.
  double waits = 1, messages = 1, links = 1, reduced = 0;
  switch (col.kind) {
    case rt::CollectiveKind::kAllReduce:
      waits = messages = 2.0 * (g - 1);
      reduced = bytes / 2;
      break;
    case rt::CollectiveKind::kReduceScatter:
      waits = messages = g - 1;
      reduced = bytes;
      break;
    case rt::CollectiveKind::kAllGather:
      waits = messages = g - 1;
      break;
    case rt::CollectiveKind::kAllToAll:
      messages = links = g - 1;
      break;
    case rt::CollectiveKind::kPPermute:
    case rt::CollectiveKind::kSendRecv:
      break;
  }
  const double message = bytes / calls / messages;
  const bool point_to_point =
      col.kind == rt::CollectiveKind::kPPermute || col.kind == rt::CollectiveKind::kSendRecv;
  const double link_rate = point_to_point ? link.permute_rate_for(message) : link.rate_for(message);
  auto at = [](double bytes, double rate) { return rate > 0 ? bytes / rate : 0.0; };
  const double latency = calls * waits * link.latency_s;
  // A link that measured its reducing steps with their adds: the reducing
  // steps' bytes at that rate, the rest (an all-reduce's gathering half) at
  // the collective rate, and no adds beside them.
  if (reduced > 0) {
    if (const double reduce_rate = link.reduce_rate_for(message); reduce_rate > 0)
      return latency + at(reduced, reduce_rate) + at(bytes - reduced, link_rate);
  }
  double t = latency + at(bytes / links, link_rate);
  if (reduced > 0)
    t += m.compute_for_cached(ir::DType::kF32, 3 * reduced / calls).seconds(rt::OpCost{reduced / 4, 3 * reduced});
  return t;
}

namespace {

// The cost model of a GEMM on operands of shapes `lhs` and `rhs`: the
// machine's rate for its (M, N, K) and transposition (PlanMachine::gemm).
rt::MachineModel gemm_model(const PlanMachine& m, ir::DType dtype, const ir::DotDims& d, const ir::Shape& lhs,
                            const ir::Shape& rhs) {
  const LocalDotLayout l = local_dot_layout(d, lhs, rhs);
  return m.compute_for_gemm(dtype, static_cast<double>(l.M), static_cast<double>(l.N), static_cast<double>(l.K),
                            l.trans_lhs, l.trans_rhs);
}

}  // namespace

// A RingDot on one device (ring_plan.h), as the emitted loop runs it: each
// step's GEMMs (one statement for its halves) hide the transfers of the
// pieces the next step multiplies, so a step after the first takes the
// longer of the two (on a machine whose transfers take the compute's
// cores, the sum); a scatter ring then adds the arriving sums. A step's
// GEMMs go at the rate of their own shape, but never faster than the whole
// GEMM they are cut from: BLAS blocks the whole as well as any caller
// could, so a piece that the rate table puts faster is the table's
// interpolation, not the machine (measured on this repo's CPU: 4 GEMMs of
// 196x128x64 took the time of the one 784x128x64 they split, where the
// table had them 15% faster). A step sends one piece for each half (two
// messages, a block's bytes, both ways round the ring), and copies what
// is not contiguous: the sliced operand's piece before each GEMM, a gather
// ring's result piece into place after it, a scatter ring's sums into
// place at the end (a read and a write of each element). The adds and
// copies touch what was just computed or received: they go at the rate of
// data in cache, the messages at the link's point-to-point rate.
double ring_dot_seconds(const ir::Graph& g, const ir::Node& n, const PlanMachine& m, double* copy_s) {
  const int ring = g.mesh.size(n.axes);
  if (ring <= 1) return 0;
  const RingPlan p = ring_plan(n, g.nodes[n.args[0]].shape, g.nodes[n.args[1]].shape, ring);
  const RingStepCost step = ring_step_cost(g, n, ring);
  // The whole GEMM: what the synchronous dot multiplies (a gather ring's
  // travelling operand gathered whole).
  ir::Shape whole[2] = {p.operand[0], p.operand[1]};
  if (p.gather) whole[p.moving][p.move_dim] *= p.n;
  const rt::MachineModel piece_rate = gemm_model(m, n.dtype, n.dot, p.step_operand[0], p.step_operand[1]);
  const rt::MachineModel whole_rate = gemm_model(m, n.dtype, n.dot, whole[0], whole[1]);
  const double gemm =
      (piece_rate.flops_per_s < whole_rate.flops_per_s ? piece_rate : whole_rate).seconds(step.gemm);
  const double add = p.gather ? 0.0 : p.halves * m.compute_for_cached(n.dtype, step.add.bytes).seconds(step.add);
  const double es = static_cast<double>(ir::dtype_size(n.dtype));
  const double piece = es * static_cast<double>(p.gather ? p.step_operand_count(p.moving) : p.step_result_count());
  const LinkLevel& link = m.link_for(g.mesh, n.axes);
  const double link_rate = link.permute_rate_for(piece);  // a step's message
  // The halves go round the ring in opposite directions. Where transfers
  // run beside the compute (a GPU's copy engines), they run beside each
  // other too: a step waits for one piece. Where the cores make them (the
  // thread world copies every message), each is its own latency and bytes.
  const double messages = m.overlaps_compute ? 1.0 : p.halves;
  const double transfer = messages * (link.latency_s + (link_rate > 0 ? piece / link_rate : 0.0));
  // Copies, in elements read and written once: per step, and once.
  double step_copies = 0, once_copies = 0;
  if (p.sliced >= 0 && !p.slice_contiguous)
    step_copies += p.halves * static_cast<double>(p.step_operand_count(p.sliced));
  if (!p.out_contiguous) {
    if (p.gather)
      step_copies += p.halves * static_cast<double>(p.step_result_count());
    else
      once_copies += p.halves * static_cast<double>(p.step_result_count());
  }
  if (p.gather) once_copies += static_cast<double>(ir::num_elements(p.operand[p.moving]));
  auto copy_seconds = [&](double elements) {
    const double bytes = 2 * elements * es;
    return m.compute_for_cached(n.dtype, bytes).seconds(rt::OpCost{0, bytes});
  };
  auto total = [&](bool copies) {
    const double first = gemm + (copies ? copy_seconds(step_copies) : 0.0);
    const double later_step = m.overlaps_compute ? std::max(first, transfer) : first + transfer;
    return first + (ring - 1) * (later_step + add) + (copies ? copy_seconds(once_copies) : 0.0);
  };
  const double seconds = total(true);
  if (copy_s) *copy_s = seconds - total(false);  // what the copies add: some hide under the transfers
  return seconds;
}

namespace {

// The elements of `shape` before `dim`: 1 when blocks along `dim` are
// contiguous runs.
int64_t outer_elements(const ir::Shape& shape, int dim) {
  int64_t outer = 1;
  for (int i = 0; i < dim && i < static_cast<int>(shape.size()); ++i) outer *= shape[i];
  return outer;
}

// The packing a dimension-aware collective does around its flat one
// (runtime/tensor_collectives.h): a gather along an inner dim lands in a
// temporary and is copied into place, a reduce-scatter along one packs its
// input first, an all-to-all both as needed. Each copy reads and writes its
// elements once, at the rate of data in cache (the block the statement
// before wrote, or the one the collective just received); contiguous
// blocks cost nothing.
double pack_seconds(const ir::Graph& g, const ir::Node& n, const PlanMachine& m) {
  if (n.args.empty()) return 0;
  const ir::Shape& in = g.nodes[n.args[0]].shape;
  double elements = 0;
  switch (n.op) {
    case ir::Op::kAllGather:
      if (outer_elements(in, n.dim) > 1) elements = static_cast<double>(ir::num_elements(n.shape));
      break;
    case ir::Op::kReduceScatter:
      if (outer_elements(in, n.dim) > 1) elements = static_cast<double>(ir::num_elements(in));
      break;
    case ir::Op::kAllToAll: {
      if (outer_elements(in, n.dim) > 1) elements += static_cast<double>(ir::num_elements(in));
      if (outer_elements(n.shape, n.dim2) > 1) elements += static_cast<double>(ir::num_elements(n.shape));
      break;
    }
    default:
      return 0;
  }
  if (elements == 0) return 0;
  const double bytes = 2 * elements * static_cast<double>(ir::dtype_size(n.dtype));
  return m.compute_for_cached(n.dtype, bytes).seconds(rt::OpCost{0, bytes});
}

// The seconds of compute statement `st` at `model`'s rates, its
// transcendentals at the machine's rate for them.
double statement_seconds_on(const ir::Graph& g, const BufferPlan::Stmt& st, const PlanMachine& m,
                            const rt::MachineModel& model) {
  rt::OpCost c = statement_cost(g, st);
  if (m.transcendentals_per_s > 0)
    c.flops += statement_transcendentals(g, st) * model.flops_per_s / m.transcendentals_per_s;
  return model.seconds(c);
}

// Per node of `g`: the seconds its statement takes on `m` (statement_cost at
// its dtype's rates; a RingDot with its transfers; a collective's packing,
// its transfers being the collective's own time; 0 for nodes that are no
// statement of their own). `ring_copy_s` adds up the ring dots' copies.
std::vector<double> step_seconds(const ir::Graph& g, const PlanMachine& m, double& ring_copy_s) {
  std::vector<double> seconds(g.nodes.size(), 0.0);
  for (const BufferPlan::Stmt& st : plan_buffers(g).stmts) {
    const ir::Node& n = g.nodes[st.node];
    if (n.op == ir::Op::kRingDot && st.bucket.empty()) {
      double copies = 0;
      seconds[st.node] = ring_dot_seconds(g, n, m, &copies);
      ring_copy_s += copies;
    } else if (n.op == ir::Op::kDot || is_gemm_kernel(n))
      seconds[st.node] = statement_seconds_on(
          g, st, m, gemm_model(m, n.dtype, n.dot, g.nodes[n.args[0]].shape, g.nodes[n.args[1]].shape));
    else if (!is_comm_statement(g, st))
      seconds[st.node] = statement_seconds_on(g, st, m, m.compute_for(n.dtype));
    else if (st.bucket.empty())
      seconds[st.node] = pack_seconds(g, n, m);
  }
  return seconds;
}

int count_ring_dots(const Lowered& l) {
  int n = 0;
  auto count = [&](const ir::Graph& g) {
    for (const ir::Node& x : g.nodes) n += x.op == ir::Op::kRingDot;
  };
  if (l.stage_graphs.empty()) count(l.partitioned);
  for (const ir::Graph& g : l.stage_graphs) count(g);
  return n;
}

// The bucket floor's machine: `m` with adds over data in cache at its
// fastest cached rate (a smaller bucket's adds touch less, and may go
// faster). Made once a plan: it depends on the machine alone.
PlanMachine bucket_floor_machine(const PlanMachine& m) {
  PlanMachine floor = m;
  double fastest = 0;
  for (const SizedRate& r : m.cached_memory) fastest = std::max(fastest, r.bytes_per_s);
  if (fastest > 0) floor.cached_memory = {{.bytes = 1, .bytes_per_s = fastest}};
  return floor;
}

// The candidate's numbers from its lowered program on `m`; its buckets'
// floor on `floor_machine` (bucket_floor_machine(m)).
void cost(const Lowered& l, const PlanMachine& m, const PlanMachine& floor_machine, PlanCandidate& c) {
  c.peak_bytes = c.sent_bytes = 0;  // a variant starts from a copy of the candidate it varies
  c.compute_s = c.comm_s = c.ring_copy_s = c.bucket_s = c.bucket_floor_s = c.step_s = c.bubble = 0;
  const Report r = predict(l);
  const Mesh& mesh = l.partitioned.mesh;
  // By the collective's axes: the link it crosses, and that link at its
  // best rate (the bucket floor's).
  struct Link {
    const LinkLevel& at;
    LinkLevel best;
  };
  std::map<std::vector<std::string>, Link> links;
  for (uint64_t p : r.peak_bytes) c.peak_bytes = std::max(c.peak_bytes, p);
  c.buckets = static_cast<int>(
      std::count_if(r.collectives.begin(), r.collectives.end(), [](const CollectiveReport& col) { return col.bucket; }));
  for (int d = 0; d < r.num_devices; ++d) {
    uint64_t sent = 0;
    for (uint64_t b : r.bytes[d]) sent += b;
    c.sent_bytes = std::max(c.sent_bytes, sent);
    double comm = 0, buckets = 0, floor = 0;
    for (const CollectiveReport& col : r.collectives) {
      if (col.bytes.empty() || col.ring_dot) continue;  // a ring dot's transfers are in its time
      auto link = links.find(col.axes);
      if (link == links.end()) {
        const LinkLevel& at = m.link_for(mesh, col.axes);
        link = links.emplace(col.axes, Link{at, at.at_best_rate()}).first;
      }
      const double s = collective_seconds(col, col.bytes[d], link->second.at, m);
      comm += s;
      if (col.bucket) {
        buckets += s;
        floor += collective_seconds(col, col.bytes[d], link->second.best, floor_machine);
      }
    }
    if (comm > c.comm_s) c.comm_s = comm, c.bucket_s = buckets, c.bucket_floor_s = floor;
  }
  if (l.stages) {
    // The stages through their schedule, each step its statement's cost.
    std::vector<std::vector<double>> seconds;
    double copies = 0;  // every stage's: a bound on what the schedule's critical path holds
    for (const ir::Graph& g : l.stage_graphs) seconds.push_back(step_seconds(g, m, copies));
    c.ring_copy_s = copies;
    const StageTimeline t = simulate_stage_steps(
        *l.stages, l.partitioned, [&](int stage, int step) { return seconds[stage][step]; },
        [](int) { return 0.0; });
    c.compute_s = t.makespan;
    c.bubble = t.bubble_fraction();
  } else {
    for (double s : step_seconds(l.partitioned, m, c.ring_copy_s)) c.compute_s += s;
  }
  c.step_s = c.compute_s + c.comm_s;
}

// Every repeated block of `g` under `policy`: a scanned Layers is one block
// ("h"), an unrolled one a block per layer ("h0", "h1", ...).
std::vector<ir::RematRule> remat_rules(const ir::Graph& g, ir::RematPolicy policy) {
  std::vector<ir::RematRule> rules;
  for (const ir::Repeat& r : g.repeats) {
    if (r.scan)
      rules.push_back({.block = r.name, .policy = policy, .loc = r.loc});
    else
      for (int i = 0; i < r.length; ++i)
        rules.push_back({.block = r.name + std::to_string(i), .policy = policy, .loc = r.loc});
  }
  return rules;
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

PlanTrace trace_for_plan(const std::string& program, const ProgramFn& fn, const ProgramOptions& options) {
  bool reads_microbatches = false;
  PlanTrace t;
  t.traced = trace(
      program,
      [&](ProgramBuilder& b) {
        fn(b);
        reads_microbatches = b.options_read().contains("microbatches");
      },
      options);
  if (reads_microbatches && !options.contains("microbatches"))
    t.retrace = [program, fn, options](int microbatches) {
      ProgramOptions o = options;
      o["microbatches"] = std::to_string(microbatches);
      return trace(program, fn, o);
    };
  return t;
}

Plan plan(const std::string& program, const ir::Graph& traced, int devices, uint64_t budget_bytes,
          const PlanMachine& machine, const PipelineOptions& options, const Retrace& retrace) {
  Plan p;
  p.program = program;
  p.devices = devices;
  p.budget_bytes = budget_bytes;
  p.machine = machine;
  const PlanMachine floor_machine = bucket_floor_machine(machine);
  const PlanAxes axes = plan_axes(traced);
  p.axes = axes.axes;
  if (p.axes.empty())
    throw Error(SrcLoc(), "program '" + program + "' names no mesh axis (no logical rule maps to one, no spec "
                          "names one), so there is nothing to split " + std::to_string(devices) +
                          " devices over; give a MESH");
  if (machine.max_devices() > 0 && devices > machine.max_devices())
    throw Error(SrcLoc(), "machine " + machine.name + " has " + std::to_string(machine.max_devices()) +
                              " devices, fewer than DEVICES " + std::to_string(devices) +
                              " (a machine with a level across nodes has no limit: h100-ib)");
  // The choices beyond the mesh (plan.h).
  const bool training =
      std::any_of(traced.nodes.begin(), traced.nodes.end(), [](const ir::Node& n) { return n.backward; });
  std::vector<std::optional<ir::RematPolicy>> remats{std::nullopt};
  if (training && !traced.repeats.empty())
    remats = {ir::RematPolicy::kSaveAll, ir::RematPolicy::kSaveDots, ir::RematPolicy::kRecomputeAll};
  p.program_remat = !traced.remat.empty();
  if (remats.size() > 1)
    for (const ir::Repeat& r : traced.repeats)
      p.remat_blocks += (p.remat_blocks.empty() ? "" : ", ") +
                        (r.scan || r.length == 1 ? "\"" + r.name + (r.scan ? "" : "0") + "\""
                                                 : "\"" + r.name + "0\" to \"" + r.name +
                                                       std::to_string(r.length - 1) + "\"");
  // The program traced again for each micro-batch count the search tries
  // (nullptr: the count does not trace, e.g. it does not divide the batch).
  std::map<int, std::optional<ir::Graph>> retraced;
  std::map<int, std::string> retrace_error;
  auto graph_for = [&](int k) -> const ir::Graph* {
    if (k == 0) return &traced;
    auto it = retraced.find(k);
    if (it == retraced.end()) {
      std::optional<ir::Graph> g;
      try {
        g = retrace(k);
      } catch (const Error& e) {
        retrace_error[k] = e.what();
      }
      it = retraced.emplace(k, std::move(g)).first;
    }
    return it->second ? &*it->second : nullptr;
  };
  p.microbatch_search = static_cast<bool>(retrace);
  // The gradient buckets' size is searched unless the options fix it.
  const bool search_buckets = training && !options.bucket_bytes;
  // One variant of a mesh, lowered and costed; nullopt when it does not
  // trace or partition (`why` says why).
  auto evaluate = [&](const std::string& mesh_text, const PlanCandidate& v, int* rings,
                      std::string& why) -> std::optional<PlanCandidate> {
    const ir::Graph* g = graph_for(v.microbatches);
    if (!g) {
      why = retrace_error[v.microbatches];
      return std::nullopt;
    }
    PlanCandidate c = v;
    c.mesh = mesh_text;
    c.pipeline_microbatches = g->pipeline ? g->pipeline->microbatches : 0;
    try {
      // The verifier after every pass is left to the chosen plan, which
      // the generator lowers again (it is a tenth of a lowering's time).
      PipelineOptions quick = options;
      quick.verify_each = false;
      const Lowered l = lower_candidate(*g, c, devices, quick);
      if (rings) *rings = count_ring_dots(l);
      cost(l, machine, floor_machine, c);
    } catch (const Error& e) {
      why = e.what();
      return std::nullopt;
    }
    c.partitions = true;
    c.fits = budget_bytes == 0 || c.peak_bytes <= budget_bytes;
    return c;
  };
  // Each mesh's variants (plan.h): schedules, then rings, then micro-batch
  // counts, then remat policies.
  struct MeshSearch {
    std::string mesh;
    std::vector<std::pair<std::optional<ir::PipelineSchedule>, int>> schedules{{std::nullopt, 1}};
    std::vector<int> counts{0};  // 0: the program's own
    bool rings = false;          // ring variants change the program
    std::vector<PlanCandidate> made;
    std::string refused;         // the first variant's reason, when none partitions
    double bound = INFINITY;     // no variant of the mesh is faster
  };
  std::vector<MeshSearch> searches;
  for (const std::string& mesh_text : plan_meshes(axes, devices)) {
    MeshSearch m;
    m.mesh = mesh_text;
    const Mesh mesh = Mesh::parse(mesh_text, devices, SrcLoc());
    const int stages =
        traced.pipeline && mesh.has(traced.pipeline->axis) ? mesh.size(traced.pipeline->axis) : 1;
    if (stages > 1)
      m.schedules = {{traced.pipeline->schedule, traced.pipeline->virtual_stages}};
    for (const auto& alt : std::vector<std::pair<ir::PipelineSchedule, int>>{
             {ir::PipelineSchedule::kGPipe, 1}, {ir::PipelineSchedule::k1F1B, 1}, {ir::PipelineSchedule::kInterleaved, 2}})
      if (stages > 1 && alt != std::pair(m.schedules[0].first.value(), m.schedules[0].second))
        m.schedules.push_back(alt);
    // Micro-batch counts: a pipeline's stages, twice and four times that
    // (a smaller bubble against smaller steps: all tried); gradient
    // accumulation's 1, 2, 4, ... while the one before does not fit (more
    // is only slower).
    if (retrace && traced.pipeline) {
      m.counts = {stages, 2 * stages, 4 * stages};
    } else if (retrace) {
      m.counts.clear();
      for (int k = 1; k <= kMaxAccumulation; k *= 2) m.counts.push_back(k);
    }
    // The first variant, with and without rings: a bound on every variant.
    // Accumulating more and recomputing more only add statements; other
    // schedules and more micro-batches change a pipeline's idle time, not
    // its work, so its busy time and communication bound them.
    bool tensor = false;
    for (const MeshAxis& a : mesh.axes()) tensor |= (a.name == "model" || a.name == "tensor") && a.size > 1;
    int base_rings = -1;
    for (bool ring : tensor ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
      PlanCandidate v;
      v.schedule = m.schedules[0].first;
      v.virtual_stages = m.schedules[0].second;
      v.microbatches = m.counts[0];
      v.remat = remats[0];
      v.ring = ring;
      int rings = 0;
      std::string why;
      std::optional<PlanCandidate> c = evaluate(m.mesh, v, &rings, why);
      if (!c) {
        if (m.refused.empty()) m.refused = why;
        break;
      }
      if (!ring) base_rings = rings;
      if (ring && rings == base_rings) break;  // rings nothing more: the same program
      m.rings |= ring;
      // Other bucket sizes can at most save the buckets' time above its floor.
      const double buckets = search_buckets ? c->bucket_s - c->bucket_floor_s : 0.0;
      m.bound = std::min(m.bound, (stages > 1 ? c->compute_s * (1 - c->bubble) + c->comm_s : c->step_s) - buckets);
      m.made.push_back(std::move(*c));
    }
    searches.push_back(std::move(m));
  }
  // The rest of each mesh's variants, meshes by their bound, while the
  // bound is below the fastest fitting candidate found.
  double best = INFINITY;
  for (const MeshSearch& m : searches)
    for (const PlanCandidate& c : m.made)
      if (c.fits) best = std::min(best, c.step_s);
  std::vector<MeshSearch*> order;
  for (MeshSearch& m : searches) order.push_back(&m);
  std::stable_sort(order.begin(), order.end(), [](const MeshSearch* a, const MeshSearch* b) { return a->bound < b->bound; });
  for (MeshSearch* m : order) {
    if (m->made.empty()) continue;  // does not partition
    if (m->bound >= best) {
      const bool more = m->schedules.size() > 1 || m->counts.size() > 1 || remats.size() > 1;
      p.pruned += more && std::none_of(m->made.begin(), m->made.end(), [](const PlanCandidate& c) { return c.fits; });
      continue;
    }
    const bool pipelined = m->schedules[0].first.has_value();
    for (const auto& [schedule, chunks] : m->schedules)
      for (bool ring : m->rings ? std::vector<bool>{false, true} : std::vector<bool>{false})
        for (int k : m->counts) {
          bool fits_saving_all = false, refused = false, slow_first = false;
          for (const std::optional<ir::RematPolicy>& remat : remats) {
            PlanCandidate v;
            v.schedule = schedule;
            v.virtual_stages = chunks;
            v.microbatches = k;
            v.remat = remat;
            v.ring = ring;
            const auto same = [&](const PlanCandidate& c) {
              return c.schedule == v.schedule && c.virtual_stages == v.virtual_stages && c.microbatches == k &&
                     c.remat == remat && c.ring == ring;
            };
            const auto done = std::find_if(m->made.begin(), m->made.end(), same);
            std::optional<PlanCandidate> c;
            if (done != m->made.end()) {
              c = *done;
            } else {
              std::string why;
              c = evaluate(m->mesh, v, nullptr, why);
              if (!c) {
                refused = true;  // more recomputing does not make it partition, nor larger counts trace
                break;
              }
              m->made.push_back(*c);
              if (c->fits) best = std::min(best, c->step_s);
            }
            if (c->fits) {
              fits_saving_all = !remat || *remat == ir::RematPolicy::kSaveAll;
              break;  // more recomputing is only slower
            }
            if (c->step_s >= best) {
              // More recomputing is only slower; without a pipeline, so are
              // more micro-batches when this is the first policy.
              slow_first = !remat || *remat == remats.front();
              break;
            }
          }
          if (refused || ((fits_saving_all || slow_first) && !pipelined)) break;  // more accumulation is only slower
        }
  }
  // Smaller gradient buckets (plan.h): for each candidate that fits and
  // whose buckets' time is enough that it could become the fastest, the
  // sizes of kBucketSizes from the largest down, while each is faster than
  // the one before; a size that buckets nothing differently is skipped.
  if (search_buckets) {
    for (MeshSearch& m : searches) {
      const size_t variants = m.made.size();
      for (size_t i = 0; i < variants; ++i) {
        const PlanCandidate base = m.made[i];
        if (!base.partitions || !base.fits || base.buckets == 0 ||
            base.step_s - base.bucket_s + base.bucket_floor_s >= best)
          continue;
        const PlanCandidate* before = &base;
        for (size_t size : kBucketSizes) {
          PlanCandidate v = base;
          v.bucket_bytes = size;
          std::string why;
          std::optional<PlanCandidate> c = evaluate(m.mesh, v, nullptr, why);
          if (!c) break;
          if (c->buckets == before->buckets) continue;  // the same program
          if (c->step_s >= before->step_s) break;      // smaller ones go on losing
          m.made.push_back(std::move(*c));
          before = &m.made.back();
          if (before->fits) best = std::min(best, before->step_s);
        }
      }
    }
  }
  for (MeshSearch& m : searches) {
    if (m.made.empty()) {
      PlanCandidate c;
      c.mesh = m.mesh;
      c.verdict = "does not partition: " + m.refused;
      m.made.push_back(std::move(c));
    }
    for (PlanCandidate& c : m.made) p.candidates.push_back(std::move(c));
  }
  // Fitting candidates by step time, then those over the budget by peak,
  // then those that do not partition, each in a fixed order.
  auto group = [](const PlanCandidate& c) { return !c.partitions ? 2 : c.fits ? 0 : 1; };
  std::stable_sort(p.candidates.begin(), p.candidates.end(), [&](const PlanCandidate& a, const PlanCandidate& b) {
    if (group(a) != group(b)) return group(a) < group(b);
    // Step times a rounding apart are a tie (gpipe and 1f1b often are).
    if (group(a) == 0 && std::abs(a.step_s - b.step_s) > 1e-9 * std::max(a.step_s, b.step_s))
      return a.step_s < b.step_s;
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

std::string PlanCandidate::schedule_str() const {
  if (!schedule) return "";
  std::string s = ir::schedule_name(*schedule);
  if (*schedule == ir::PipelineSchedule::kInterleaved) s += "/" + std::to_string(virtual_stages);
  return s + " x" + std::to_string(pipeline_microbatches);
}

std::string PlanCandidate::remat_str() const {
  return remat ? ir::remat_policy_name(*remat) : "";
}

std::string PlanCandidate::bucket_str() const {
  if (!bucket_bytes) return "";
  if (bucket_bytes % (size_t{1} << 20) == 0) return std::to_string(bucket_bytes >> 20) + "MiB";
  if (bucket_bytes % 1024 == 0) return std::to_string(bucket_bytes >> 10) + "KiB";
  return std::to_string(bucket_bytes);
}

Lowered lower_candidate(const ir::Graph& traced, const PlanCandidate& c, int devices,
                        const PipelineOptions& options) {
  PipelineOptions o = options;
  if (c.schedule) {
    o.schedule = c.schedule;
    o.virtual_stages = c.virtual_stages;
  }
  if (c.ring) o.collective_matmul = CollectiveMatmul::kAlways;
  if (c.bucket_bytes) o.bucket_bytes = c.bucket_bytes;
  const Mesh mesh = Mesh::parse(c.mesh, devices, SrcLoc());
  if (!c.remat) return lower(traced, mesh, o);
  ir::Graph g = traced;
  g.remat = remat_rules(traced, *c.remat);
  return lower(std::move(g), mesh, o);
}

std::string format_plan(const Plan& p) {
  std::ostringstream o;
  o << "sharc plan: " << p.program << " on " << p.devices << " devices";
  o << ", memory budget " << (p.budget_bytes ? bytes_str(p.budget_bytes) + " per device" : std::string("none"));
  o << "\nmachine: " << p.machine.str() << "\n";
  o << "axes searched: ";
  for (size_t i = 0; i < p.axes.size(); ++i) o << (i ? ", " : "") << p.axes[i];
  o << " (" << p.candidates.size() << " candidates)\n\n";
  // The columns of the choices some candidate makes.
  bool schedules = false, remats = false, rings = false, buckets = false;
  size_t width = 4, schedule_width = 8;
  for (const PlanCandidate& c : p.candidates) {
    width = std::max(width, c.mesh.size());
    schedules |= c.schedule.has_value();
    schedule_width = std::max(schedule_width, c.schedule_str().size());
    remats |= c.remat.has_value();
    rings |= c.ring;
    buckets |= c.bucket_bytes > 0;
  }
  const bool micro = p.microbatch_search;
  const std::string default_buckets = std::to_string(kDefaultBucketBytes >> 20) + "MiB";
  auto choices = [&](const std::string& schedule, const std::string& k, const std::string& remat,
                     const std::string& tp, const std::string& bucket) {
    char buf[96];
    std::string s;
    if (micro) {
      std::snprintf(buf, sizeof buf, "  %5s", k.c_str());
      s += buf;
    }
    if (schedules) {
      std::snprintf(buf, sizeof buf, "  %-*s", static_cast<int>(schedule_width), schedule.c_str());
      s += buf;
    }
    if (remats) {
      std::snprintf(buf, sizeof buf, "  %-13s", remat.c_str());
      s += buf;
    }
    if (rings) {
      std::snprintf(buf, sizeof buf, "  %-4s", tp.c_str());
      s += buf;
    }
    if (buckets) {
      std::snprintf(buf, sizeof buf, "  %-7s", bucket.c_str());
      s += buf;
    }
    return s;
  };
  char row[256];
  std::snprintf(row, sizeof row, "%4s  %-*s", "rank", static_cast<int>(width), "mesh");
  o << row << choices("schedule", "micro", "remat", "tp", "buckets");
  std::snprintf(row, sizeof row, "  %11s  %11s  %11s  %12s  %12s  %s\n", "step", "compute", "comm", "peak/device",
                "sent/device", "verdict");
  o << row;
  int rank = 0;
  for (const PlanCandidate& c : p.candidates) {
    const std::string r = c.partitions ? std::to_string(++rank) : "-";
    std::snprintf(row, sizeof row, "%4s  %-*s", r.c_str(), static_cast<int>(width), c.mesh.c_str());
    o << row;
    if (c.partitions) {
      o << choices(c.schedule ? c.schedule_str() : "-", c.microbatches ? std::to_string(c.microbatches) : "-",
                   c.remat ? c.remat_str() : "-", c.ring ? "ring" : "auto", c.bucket_str().empty() ? default_buckets : c.bucket_str());
      std::snprintf(row, sizeof row, "  %11s  %11s  %11s  %12s  %12s  ", seconds_str(c.step_s).c_str(),
                    seconds_str(c.compute_s).c_str(), seconds_str(c.comm_s).c_str(), bytes_str(c.peak_bytes).c_str(),
                    bytes_str(c.sent_bytes).c_str());
    } else {
      o << choices("-", "-", "-", "-", "-");
      std::snprintf(row, sizeof row, "  %11s  %11s  %11s  %12s  %12s  ", "-", "-", "-", "-", "-");
    }
    o << row << c.verdict << "\n";
  }
  if (p.pruned > 0)
    o << "\n" << p.pruned << (p.pruned == 1 ? " mesh" : " meshes")
      << " over the budget searched no further (micro-batches, remat, schedules): none of their variants can "
         "be faster than a plan that fits\n";
  if (p.chosen >= 0) {
    const PlanCandidate& c = p.candidates[p.chosen];
    o << "\nchosen: " << c.mesh;
    std::vector<std::string> also;
    if (c.microbatches) also.push_back(std::to_string(c.microbatches) + (c.microbatches == 1 ? " micro-batch" : " micro-batches"));
    if (c.schedule) also.push_back(c.schedule_str());
    if (c.remat && (*c.remat != ir::RematPolicy::kSaveAll || p.program_remat))
      also.push_back("remat " + c.remat_str());
    if (c.ring) also.push_back("ring tensor parallelism");
    if (c.bucket_bytes) also.push_back(c.bucket_str() + " gradient buckets");
    for (size_t i = 0; i < also.size(); ++i) o << (i ? ", " : " with ") << also[i];
    o << "; as you would write it:\n";
    o << "  sharc_add_program(NAME SOURCE ... PROGRAM " << p.program << " MESH \"" << c.mesh << "\""
      << (c.bucket_bytes ? " BUCKET_BYTES " + c.bucket_str() : std::string())
      << (c.microbatches ? " OPTIONS microbatches=" + std::to_string(c.microbatches) : std::string()) << ")\n";
    // Saving every activation is what a program without remat rules does.
    const bool remat = c.remat && (*c.remat != ir::RematPolicy::kSaveAll || p.program_remat);
    if (c.schedule || remat || c.ring) o << "and in the program:\n";
    if (c.schedule) {
      o << "  b.set_pipeline({.microbatches = " << c.pipeline_microbatches << ", .schedule = \""
        << ir::schedule_name(*c.schedule) << "\"";
      if (c.virtual_stages > 1) o << ", .virtual_stages = " << c.virtual_stages;
      o << "});\n";
    }
    if (c.ring) o << "  b.set_collective_matmul(sharc::CollectiveMatmul::kAlways);\n";
    if (remat && *c.remat == ir::RematPolicy::kSaveAll) {
      o << "  TrainOptions::remat: none (every activation saved)\n";
    } else if (remat) {
      static const char* kPolicy[] = {"kSaveAll", "kRecomputeAll", "kSaveDots"};
      o << "  TrainOptions::remat: sharc::remat(BLOCK, sharc::RematPolicy::" << kPolicy[static_cast<int>(*c.remat)]
        << ") for BLOCK in " << p.remat_blocks << "\n";
    }
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

// The stage plan of a pipelined program; see stage_plan.h.
#include "codegen/stage_plan.h"

#include <algorithm>
#include <climits>
#include <map>
#include <sstream>
#include <tuple>

namespace sharc {

namespace {

using ir::Node;
using ir::Op;
using Phase = StageUnit::Phase;

int pipelined_layers(const ir::Graph& g) {
  int layers = 0;
  for (const Node& n : g.nodes) layers = std::max(layers, n.layer + 1);
  return layers;
}

std::string where(const ir::PipelineConfig& pc) { return "set_pipeline at " + pc.loc.str(); }

}  // namespace

std::string StageUnit::str() const {
  switch (phase) {
    case Phase::kPre: return "pre";
    case Phase::kPost: return "post";
    case Phase::kForward: return "F" + std::to_string(micro_batch);
    case Phase::kBackward: return "B" + std::to_string(micro_batch);
  }
  return "?";
}

std::vector<StageUnit> schedule_units(ir::PipelineSchedule schedule, int p, int s, int v, int m) {
  std::vector<StageUnit> u;
  auto F = [&](int chunk, int j) { u.push_back({Phase::kForward, chunk, j}); };
  auto B = [&](int chunk, int j) { u.push_back({Phase::kBackward, chunk, j}); };
  if (v == 1) {
    if (schedule == ir::PipelineSchedule::kGPipe) {
      for (int j = 0; j < m; ++j) F(s, j);
      for (int j = 0; j < m; ++j) B(s, j);
      return u;
    }
    // 1F1B: the forwards that fill the pipeline below this stage, then one
    // forward and one backward in turn, then the backwards left.
    const int warmup = std::min(p - s - 1, m);
    for (int j = 0; j < warmup; ++j) F(s, j);
    for (int i = 0; i < m - warmup; ++i) {
      F(s, warmup + i);
      B(s, i);
    }
    for (int j = m - warmup; j < m; ++j) B(s, j);
    return u;
  }
  // Interleaved (Megatron): micro-batches go through the stage's v chunks in
  // groups of p; the k-th forward is micro-batch group*p + i of local chunk
  // within/p, the k-th backward the same with the chunks in reverse.
  const int total = m * v;
  auto unit_of = [&](int k, bool backward) {
    const int group = k / (p * v), within = k % (p * v);
    const int local = backward ? v - 1 - within / p : within / p;
    if (backward)
      B(s + local * p, group * p + within % p);
    else
      F(s + local * p, group * p + within % p);
  };
  const int warmup = std::min((p - s - 1) * 2 + (v - 1) * p, total);
  for (int k = 0; k < warmup; ++k) unit_of(k, false);
  for (int i = 0; i < total - warmup; ++i) {
    unit_of(warmup + i, false);
    unit_of(i, true);
  }
  for (int k = total - warmup; k < total; ++k) unit_of(k, true);
  return u;
}

void check_pipeline(const ir::Graph& g, ir::PipelineSchedule schedule, int v) {
  const ir::PipelineConfig& pc = *g.pipeline;
  if (!g.mesh.has(pc.axis))
    user_error(pc.loc, "set_pipeline: the pipe axis '" + pc.axis + "' is not in the mesh " + g.mesh.str() +
                           "; its axes are " + g.mesh.names());
  const int p = g.mesh.size(pc.axis), layers = pipelined_layers(g);
  if (layers == 0)
    user_error(pc.loc, "set_pipeline: no layer was traced inside a PipelineLayer, so there is nothing to "
                       "pipeline over '" + pc.axis + "'");
  if (v > 1 && schedule != ir::PipelineSchedule::kInterleaved)
    user_error(pc.loc, "set_pipeline: " + std::to_string(v) + " chunks per stage need the 'interleaved' schedule, not '" +
                           ir::schedule_name(schedule) + "'");
  if (layers % (p * v) != 0)
    user_error(pc.loc, "set_pipeline: " + std::to_string(layers) + " pipelined layers do not divide into " +
                           std::to_string(p) + " stages x " + std::to_string(v) + " chunks per stage (the '" +
                           pc.axis + "' axis of mesh " + g.mesh.str() + ")");
  if (schedule == ir::PipelineSchedule::kInterleaved && pc.microbatches % p != 0)
    user_error(pc.loc, "set_pipeline: the interleaved schedule needs the micro-batch count (" +
                           std::to_string(pc.microbatches) + ") to be a multiple of the " + std::to_string(p) +
                           " stages on '" + pc.axis + "'");
  const std::vector<std::vector<int>> users = [&] {
    std::vector<std::vector<int>> u(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (int a : g.nodes[i].args) u[a].push_back(static_cast<int>(i));
    return u;
  }();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.sharding || !n.sharding->uses(pc.axis)) continue;
    const std::string what = ir::describe_value(n) + " is partitioned over the pipe axis '" + pc.axis + "' (" +
                             n.sharding->str() + ")";
    if (n.op != Op::kParameter)
      user_error(n.loc, what + ", which carries pipeline stages only (" + where(pc) + "); use another axis");
    bool inside = !users[i].empty();
    for (int u : users[i]) {  // the model's reads; the gradient and the optimizer step follow them
      const Node& user = g.nodes[u];
      if (!user.backward && user.micro_batch < ir::kAfterMicroBatches && user.layer < 0) inside = false;
    }
    if (!inside)
      user_error(n.loc, what + " but is used outside the pipelined layers; that axis carries pipeline stages only (" +
                            where(pc) + ")");
    user_error(n.loc, what + "; the pipeline already places its layer on a stage (" + where(pc) +
                          "), so remove '" + pc.axis + "' from its spec");
  }
}

StagePlan plan_stages(const ir::Graph& g, ir::PipelineSchedule schedule, int v) {
  if (!g.pipeline) internal_error("plan_stages: the program has no pipeline");
  const ir::PipelineConfig& pc = *g.pipeline;
  StagePlan plan;
  plan.axis = pc.axis;
  plan.stages = g.mesh.size(pc.axis);
  plan.chunks_per_stage = v;
  plan.microbatches = pc.microbatches;
  plan.layers = pipelined_layers(g);
  plan.schedule = schedule;
  const int p = plan.stages, chunks = p * v, N = static_cast<int>(g.nodes.size());
  const int per_chunk = std::max(plan.layers / chunks, 1);

  std::vector<std::vector<int>> users(N);
  for (int i = 0; i < N; ++i)
    for (int a : g.nodes[i].args)
      if (users[a].empty() || users[a].back() != i) users[a].push_back(i);

  // Placement: floating or anchored to a chunk. An operand's weight is its
  // size before any broadcast, so mul(gradient, broadcast(scale)) stays
  // with the gradient.
  plan.chunk.assign(N, -1);
  std::vector<bool> floating(N, false);
  std::vector<int64_t> weight(N, 0);
  for (int i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    weight[i] = n.op == Op::kBroadcast ? weight[n.args[0]] : ir::num_elements(n.shape);
    if (ir::is_source(n.op)) {
      floating[i] = true;
    } else if (n.layer >= 0) {
      plan.chunk[i] = std::min(n.layer / per_chunk, chunks - 1);
    } else {
      int best = -1;
      for (int a : n.args) {
        if (floating[a]) continue;
        if (best < 0 || weight[a] > weight[best] || (weight[a] == weight[best] && plan.chunk[a] > plan.chunk[best]))
          best = a;
      }
      if (best < 0)
        floating[i] = true;
      else
        plan.chunk[i] = plan.chunk[best];
    }
  }
  // A broadcast of an anchored value runs where it is read (the value moves,
  // not its broadcast): with its earliest reader.
  for (int i = N - 1; i >= 0; --i) {
    const Node& n = g.nodes[i];
    if (n.op != Op::kBroadcast || floating[i] || n.layer >= 0) continue;
    int c = INT_MAX;
    for (int u : users[i])
      if (!floating[u]) c = std::min(c, plan.chunk[u]);
    if (c != INT_MAX) plan.chunk[i] = c;
  }
  auto stage_of = [&](int id) { return plan.stage_of_chunk(plan.chunk[id]); };

  // Units per stage and their positions.
  std::vector<std::map<std::tuple<int, int, int>, int>> unit_index(p);
  plan.units.resize(p);
  for (int s = 0; s < p; ++s) {
    plan.units[s].push_back({Phase::kPre, -1, -1});
    for (const StageUnit& u : schedule_units(schedule, p, s, v, plan.microbatches))
      plan.units[s].push_back(u);
    plan.units[s].push_back({Phase::kPost, -1, -1});
    for (size_t k = 0; k < plan.units[s].size(); ++k) {
      const StageUnit& u = plan.units[s][k];
      unit_index[s][{static_cast<int>(u.phase), u.chunk, u.micro_batch}] = static_cast<int>(k);
    }
  }
  auto post = [&](int s) { return static_cast<int>(plan.units[s].size()) - 1; };

  // Anchored nodes: the unit of their micro-batch, no earlier than their
  // operands' on the same stage.
  std::vector<int> unit(N, -1);
  for (int i = 0; i < N; ++i) {
    if (floating[i]) continue;
    const Node& n = g.nodes[i];
    const int s = stage_of(i);
    int u = 0;
    if (n.micro_batch >= ir::kAfterMicroBatches) {
      u = post(s);
    } else if (n.micro_batch >= 0) {
      const Phase ph = n.backward ? Phase::kBackward : Phase::kForward;
      auto it = unit_index[s].find({static_cast<int>(ph), plan.chunk[i], n.micro_batch});
      if (it == unit_index[s].end())
        internal_error("plan_stages: no unit for micro-batch " + std::to_string(n.micro_batch) + " of chunk " +
                       std::to_string(plan.chunk[i]) + " on stage " + std::to_string(s) + ": " + ir::node_str(g, i));
      u = it->second;
    }
    for (int a : n.args)
      if (!floating[a] && stage_of(a) == s) u = std::max(u, unit[a]);
    unit[i] = u;
  }

  // Floating nodes: needed on a stage where something there reads them, at
  // the unit of their earliest reader.
  std::vector<std::vector<int>> funit(p, std::vector<int>(N, INT_MAX));
  auto need = [&](int s, int id, int u) {
    if (floating[id]) funit[s][id] = std::min(funit[s][id], u);
  };
  for (int i = 0; i < N; ++i)
    if (!floating[i])
      for (int a : g.nodes[i].args) need(stage_of(i), a, unit[i]);
  plan.output_stage.clear();
  for (const ir::Output& o : g.outputs) {
    const int s = floating[o.value] ? p - 1 : stage_of(o.value);
    plan.output_stage.push_back(s);
    need(s, o.value, post(s));
  }
  // Received values: (value, stage) -> (unit, first reader), earliest first.
  std::map<std::pair<int, int>, std::pair<int, int>> recv;
  auto receive = [&](int id, int s, int u, int reader) {
    auto key = std::make_pair(id, s);
    auto it = recv.find(key);
    if (it == recv.end() || std::make_pair(u, reader) < it->second) recv[key] = {u, reader};
  };
  for (int i = 0; i < N; ++i)
    if (!floating[i])
      for (int a : g.nodes[i].args)
        if (!floating[a] && stage_of(a) != stage_of(i)) receive(a, stage_of(i), unit[i], i);
  // Parameters are held where they are read, and every holder applies the
  // update, so an update's value is needed on each holder (which may make a
  // floating value, and so a parameter, needed somewhere new: repeat).
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = N - 1; i >= 0; --i)
      if (floating[i])
        for (int s = 0; s < p; ++s)
          if (funit[s][i] != INT_MAX)
            for (int a : g.nodes[i].args) need(s, a, funit[s][i]);
    for (const ir::Update& up : g.updates) {
      std::vector<int> holders;
      for (int s = 0; s < p; ++s)
        if (funit[s][up.target] != INT_MAX) holders.push_back(s);
      if (holders.empty()) {
        const int s = floating[up.value] ? 0 : stage_of(up.value);
        funit[s][up.target] = post(s);
        holders.push_back(s);
      }
      for (int s : holders) {
        if (floating[up.value]) {
          if (funit[s][up.value] == INT_MAX) changed = true;
          need(s, up.value, post(s));
        } else if (stage_of(up.value) != s) {
          receive(up.value, s, post(s), INT_MAX);
        }
      }
    }
  }

  // The steps: sorted by (unit, node, kind); sends go right after their
  // value. A forward or backward unit receives first, as a stage does (take
  // the activation, run the layers, pass it on); in pre and post, a receive
  // goes right before its first reader (post sums scalars across stages).
  for (auto& [key, at] : recv) {
    const Phase ph = plan.units[key.second][at.first].phase;
    if (ph == Phase::kForward || ph == Phase::kBackward) at.second = -1;
  }
  struct Item {
    int unit, node, order, value;
    StageStep step;
  };
  std::vector<std::vector<Item>> items(p);
  std::vector<std::vector<int>> sends(N);
  for (auto& [key, at] : recv) sends[key.first].push_back(key.second);
  plan.holds.assign(p, std::vector<bool>(N, false));
  for (int i = 0; i < N; ++i) {
    if (floating[i]) {
      for (int s = 0; s < p; ++s)
        if (funit[s][i] != INT_MAX) {
          items[s].push_back({funit[s][i], i, 1, i, {StageStep::Kind::kCompute, i, -1, funit[s][i]}});
          plan.holds[s][i] = true;
        }
      continue;
    }
    const int s = stage_of(i);
    items[s].push_back({unit[i], i, 1, i, {StageStep::Kind::kCompute, i, -1, unit[i]}});
    plan.holds[s][i] = true;
    std::sort(sends[i].begin(), sends[i].end());
    for (int dst : sends[i]) items[s].push_back({unit[i], i, 2 + dst, i, {StageStep::Kind::kSend, i, dst, unit[i]}});
  }
  for (auto& [key, at] : recv) {
    const auto [id, s] = key;
    items[s].push_back({at.first, at.second, 0, id, {StageStep::Kind::kRecv, id, stage_of(id), at.first}});
    plan.holds[s][id] = true;
  }
  plan.steps.resize(p);
  for (int s = 0; s < p; ++s) {
    std::sort(items[s].begin(), items[s].end(), [](const Item& a, const Item& b) {
      return std::tie(a.unit, a.node, a.order, a.value) < std::tie(b.unit, b.node, b.order, b.value);
    });
    for (const Item& it : items[s]) plan.steps[s].push_back(it.step);
  }
  // A plan that deadlocks is a sharc bug: fail here, not in a run.
  simulate_stages(plan, g, [](int) { return 1.0; }, [](int) { return 0.0; });
  return plan;
}

std::vector<ir::Graph> split_stages(const ir::Graph& g, const StagePlan& plan) {
  std::vector<ir::Graph> out;
  const int N = static_cast<int>(g.nodes.size());
  for (int s = 0; s < plan.stages; ++s) {
    ir::Graph sg;
    sg.name = g.name;
    sg.mesh = g.mesh;
    sg.partitioned = true;
    sg.dtype = g.dtype;
    sg.pipeline = g.pipeline;
    std::vector<int> map(N, -1);
    auto mapped = [&](int v) {
      if (map[v] < 0) internal_error("split_stages: stage " + std::to_string(s) + " reads %" + std::to_string(v) +
                                     " before it has it: " + ir::node_str(g, v));
      return map[v];
    };
    // A send or recv node, described like the value it moves.
    auto transfer = [&](Op op, int v, int peer) {
      Node t = g.nodes[v];
      t.op = op;
      t.args = op == Op::kSend ? std::vector<int>{mapped(v)} : std::vector<int>{};
      t.axes = {plan.axis};
      t.ints = {peer, v};
      t.dim = t.dim2 = -1;
      t.layout_of = -1;
      t.fixed = false;
      t.spec.reset();
      t.rules.reset();
      return sg.add(std::move(t));
    };
    for (const StageStep& st : plan.steps[s]) {
      if (st.kind == StageStep::Kind::kSend) {
        transfer(Op::kSend, st.value, st.peer);
      } else if (st.kind == StageStep::Kind::kRecv) {
        map[st.value] = transfer(Op::kRecv, st.value, st.peer);
      } else {
        Node n = g.nodes[st.value];
        for (int& a : n.args) a = mapped(a);
        if (n.layout_of >= 0) n.layout_of = map[n.layout_of];
        map[st.value] = sg.add(std::move(n));
      }
    }
    for (size_t i = 0; i < g.outputs.size(); ++i)
      if (plan.output_stage[i] == s) {
        ir::Output o = g.outputs[i];
        o.value = mapped(o.value);
        sg.outputs.push_back(std::move(o));
      }
    for (const ir::Update& u : g.updates)
      if (map[u.target] >= 0) sg.updates.push_back({map[u.target], mapped(u.value)});
    for (const ir::Gradient& gr : g.gradients)
      if (map[gr.parameter] >= 0 && map[gr.value] >= 0) sg.gradients.push_back({map[gr.parameter], map[gr.value]});
    ir::verify(sg);
    out.push_back(std::move(sg));
  }
  return out;
}

std::string StagePlan::str(const ir::Graph& g) const {
  std::ostringstream os;
  os << "pipeline over '" << axis << "': " << stages << " stages x " << chunks_per_stage << " chunks, "
     << microbatches << " micro-batches, " << ir::schedule_name(schedule) << "\n";
  for (int s = 0; s < stages; ++s) {
    os << "stage " << s << ":\n";
    int current = -1;
    for (const StageStep& st : steps[s]) {
      if (st.unit != current) {
        if (current >= 0) os << "\n";
        current = st.unit;
        const StageUnit& u = units[s][st.unit];
        os << "  " << u.str();
        if (u.chunk >= 0 && chunks_per_stage > 1) os << " c" << u.chunk;
        os << ":";
      }
      switch (st.kind) {
        case StageStep::Kind::kCompute: os << " %" << st.value << "=" << ir::op_name(g.nodes[st.value].op); break;
        case StageStep::Kind::kSend: os << " send(%" << st.value << "->" << st.peer << ")"; break;
        case StageStep::Kind::kRecv: os << " recv(%" << st.value << "<-" << st.peer << ")"; break;
      }
    }
    os << "\n";
  }
  return os.str();
}

double StageTimeline::bubble_fraction() const {
  if (makespan <= 0 || busy.empty()) return 0;
  double total = 0;
  for (double b : busy) total += b;
  return 1.0 - total / (static_cast<double>(busy.size()) * makespan);
}

StageTimeline simulate_stages(const StagePlan& plan, const ir::Graph& g,
                              const std::function<double(int)>& compute_seconds,
                              const std::function<double(int)>& link_seconds) {
  const int p = plan.stages;
  StageTimeline t;
  t.spans.resize(p);
  t.busy.assign(p, 0.0);
  std::vector<size_t> pc(p, 0);
  std::vector<double> clock(p, 0.0);
  std::map<std::pair<int, int>, double> arrival;  // (value, destination stage) -> time
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      for (; pc[s] < plan.steps[s].size(); ++pc[s]) {
        const StageStep& st = plan.steps[s][pc[s]];
        StageTimeline::Span span{static_cast<int>(pc[s]), clock[s], clock[s]};
        if (st.kind == StageStep::Kind::kCompute) {
          const double c = compute_seconds(st.value);
          span.end = clock[s] += c;
          t.busy[s] += c;
        } else if (st.kind == StageStep::Kind::kSend) {
          arrival[{st.value, st.peer}] = clock[s] + link_seconds(st.value);
        } else {
          auto it = arrival.find({st.value, s});
          if (it == arrival.end()) break;  // blocked: try the other stages
          span.end = clock[s] = std::max(clock[s], it->second);
        }
        t.spans[s].push_back(span);
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int s = 0; s < p; ++s) {
    if (pc[s] < plan.steps[s].size())
      stuck += " stage " + std::to_string(s) + " waits for %" + std::to_string(plan.steps[s][pc[s]].value) + " (" +
               ir::node_str(g, plan.steps[s][pc[s]].value) + ");";
    t.makespan = std::max(t.makespan, clock[s]);
  }
  if (!stuck.empty()) internal_error("the pipeline schedule deadlocks:" + stuck);
  return t;
}

}  // namespace sharc

// The stage plan of a pipelined program; see stage_plan.h.
#include "codegen/stage_plan.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <memory>
#include <map>
#include <sstream>
#include <tuple>

#include "codegen/op_cost.h"
#include "codegen/passes/drop_nodes.h"
#include "codegen/runtime_mesh.h"

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
  for (const ir::Repeat& r : g.repeats)
    if (r.scan)
      user_error(r.loc, "Layers '" + r.name + "' is scanned (its parameters stacked over one layer axis), which "
                        "set_pipeline cannot place on stages yet; make it unrolled (LayersOptions::scan = false) in a "
                        "pipelined program");
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
  const std::vector<std::vector<int>> users = users_of(g);
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

  const std::vector<std::vector<int>> users = users_of(g);

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
      const Phase ph = n.backward || n.remat ? Phase::kBackward : Phase::kForward;  // remat: for the backward
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
  // value. A forward or backward unit first receives what the same pass of
  // the same micro-batch sent it from the neighbouring chunk, as a stage does
  // (take the activation, run the layers, pass it on). Any other receive
  // goes right before its first reader: post sums scalars across stages, and
  // a tied embedding's two gradient halves meet on the last stage while the
  // first stage's half still waits for that stage's input gradient, so
  // receiving it at the start of the unit would deadlock.
  for (auto& [key, at] : recv) {
    const auto [id, s] = key;
    const StageUnit& to = plan.units[s][at.first];
    const StageUnit& from = plan.units[stage_of(id)][unit[id]];
    const int upstream = to.phase == Phase::kForward ? to.chunk - 1 : to.chunk + 1;
    if ((to.phase == Phase::kForward || to.phase == Phase::kBackward) && from.phase == to.phase &&
        from.micro_batch == to.micro_batch && from.chunk == upstream)
      at.second = -1;
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
    sg.repeats = g.repeats;
    sg.composites = g.composites;
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

std::function<double(int)> layer_unit_costs(const StagePlan& plan, const ir::Graph& local) {
  auto first = std::make_shared<std::map<std::tuple<int, int, bool>, int>>();
  for (const std::vector<StageStep>& steps : plan.steps)
    for (const StageStep& st : steps) {
      const Node& n = local.nodes[st.value];
      if (st.kind == StageStep::Kind::kCompute && n.layer >= 0)
        first->try_emplace({n.layer, n.micro_batch, n.backward}, st.value);
    }
  return [first, &local](int id) {
    const Node& n = local.nodes[id];
    if (n.layer < 0) return 0.0;
    auto it = first->find({n.layer, n.micro_batch, n.backward});
    return it != first->end() && it->second == id ? (n.backward ? 2.0 : 1.0) : 0.0;
  };
}

std::vector<std::vector<StageTimeline::UnitSpan>> StageTimeline::unit_spans(const StagePlan& plan) const {
  const StageTimeline& t = *this;
  std::vector<std::vector<StageTimeline::UnitSpan>> out(plan.stages);
  for (int s = 0; s < plan.stages; ++s) {
    std::map<int, StageTimeline::UnitSpan> by_unit;
    for (const StageTimeline::Span& sp : t.spans[s]) {
      const StageStep& st = plan.steps[s][sp.step];
      const StageUnit& u = plan.units[s][st.unit];
      if (st.kind != StageStep::Kind::kCompute || sp.end <= sp.start) continue;
      if (u.phase != Phase::kForward && u.phase != Phase::kBackward) continue;
      auto [it, fresh] = by_unit.try_emplace(st.unit, StageTimeline::UnitSpan{st.unit, sp.start, sp.end});
      if (!fresh) {
        it->second.start = std::min(it->second.start, sp.start);
        it->second.end = std::max(it->second.end, sp.end);
      }
    }
    for (auto& [k, span] : by_unit) out[s].push_back(span);
  }
  return out;
}

std::string schedule_svg(const StagePlan& plan, const StageTimeline& t, const std::string& title) {
  const double left = 80, top = 44, row = 30, width = 960, cell_pad = 2;
  const double scale = t.makespan > 0 ? width / t.makespan : 1;
  const double height = top + row * plan.stages + 24;
  auto fmt = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return std::string(buf);
  };
  auto esc = [](const std::string& s) {
    std::string o;
    for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
    return o;
  };
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fmt(left + width + 20) << "\" height=\""
     << fmt(height) << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  os << "  <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  char bubble[32];
  std::snprintf(bubble, sizeof bubble, "%.1f%%", 100 * t.bubble_fraction());
  os << "  <text x=\"" << fmt(left) << "\" y=\"18\" font-size=\"13\">" << esc(title) << ": "
     << ir::schedule_name(plan.schedule) << ", " << plan.stages << " stages x " << plan.chunks_per_stage
     << (plan.chunks_per_stage == 1 ? " chunk, " : " chunks, ") << plan.microbatches << " micro-batches; bubble "
     << bubble << "</text>\n";
  os << "  <text x=\"" << fmt(left) << "\" y=\"34\" fill=\"#555\">F = forward, B = backward of a "
        "micro-batch (forward 1, backward 2 per layer); time runs right</text>\n";
  const auto spans = t.unit_spans(plan);
  for (int s = 0; s < plan.stages; ++s) {
    const double y = top + row * s;
    os << "  <text x=\"8\" y=\"" << fmt(y + row / 2 + 4) << "\">stage " << s << "</text>\n";
    os << "  <line x1=\"" << fmt(left) << "\" y1=\"" << fmt(y + row) << "\" x2=\"" << fmt(left + width)
       << "\" y2=\"" << fmt(y + row) << "\" stroke=\"#ddd\"/>\n";
    for (const StageTimeline::UnitSpan& sp : spans[s]) {
      const StageUnit& u = plan.units[s][sp.unit];
      const bool fwd = u.phase == Phase::kForward;
      const int local_chunk = u.chunk / plan.stages;  // 0 .. v-1
      static const char* kForward[] = {"#8ab4f8", "#c6dafc"};
      static const char* kBackward[] = {"#f28b82", "#fad2cf"};
      const char* fill = (fwd ? kForward : kBackward)[local_chunk % 2];
      const double x = left + sp.start * scale, w = (sp.end - sp.start) * scale;
      std::string label = u.str();
      if (plan.chunks_per_stage > 1) label += "." + std::to_string(local_chunk);
      os << "  <rect x=\"" << fmt(x + cell_pad / 2) << "\" y=\"" << fmt(y + cell_pad) << "\" width=\""
         << fmt(std::max(w - cell_pad, 1.0)) << "\" height=\"" << fmt(row - 2 * cell_pad) << "\" fill=\"" << fill
         << "\" stroke=\"#444\" stroke-width=\"0.5\"><title>stage " << s << ": " << esc(label)
         << " (micro-batch " << u.micro_batch << ", model chunk " << u.chunk << ")</title></rect>\n";
      os << "  <text x=\"" << fmt(x + w / 2) << "\" y=\"" << fmt(y + row / 2 + 4)
         << "\" text-anchor=\"middle\">" << esc(label) << "</text>\n";
    }
  }
  os << "</svg>\n";
  return os.str();
}

rt::Trace virtual_trace(const StagePlan& plan, const std::vector<ir::Graph>& stage_graphs,
                        const StageTimeline& timeline) {
  const Mesh& mesh = stage_graphs.at(0).mesh;
  const int axis = mesh.index(plan.axis);
  rt::Trace trace;
  trace.clock = "virtual";
  const rt::MeshShape ms = mesh_shape(mesh);
  for (int d = 0; d < mesh.num_devices(); ++d) trace.track_names.push_back(ms.describe(d));
  auto peer_device = [&](int d, int stage) { return ms.peer_on_axis(d, axis, stage); };
  for (int d = 0; d < mesh.num_devices(); ++d) {
    const int s = mesh.coords(d)[axis];
    const ir::Graph& g = stage_graphs[s];
    for (const StageTimeline::Span& sp : timeline.spans[s]) {
      const StageStep& st = plan.steps[s][sp.step];
      const Node& n = g.nodes[sp.step];  // stage node k is step k
      rt::TraceEvent e;
      e.device = d;
      e.start_s = sp.start;
      e.end_s = sp.end;
      e.detail = plan.units[s][st.unit].str();
      e.name = statement_label(n);
      e.category = st.kind == StageStep::Kind::kSend   ? "send"
                   : st.kind == StageStep::Kind::kRecv ? "recv"
                   : ir::is_collective(n.op)            ? "collective"
                                                        : "compute";
      if (st.kind != StageStep::Kind::kCompute) {
        e.peer = peer_device(d, st.peer);
        e.tag = st.value;
        if (st.kind == StageStep::Kind::kSend)
          e.bytes = static_cast<uint64_t>(ir::num_elements(n.shape)) * ir::dtype_size(n.dtype);
      }
      trace.events.push_back(std::move(e));
    }
  }
  return trace;
}

std::string StagePlan::str(const ir::Graph& g) const {
  std::ostringstream os;
  os << "pipeline over '" << axis << "': " << stages << " stages x " << chunks_per_stage
     << (chunks_per_stage == 1 ? " chunk, " : " chunks, ")
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
  return simulate_stage_steps(
      plan, g, [&](int s, int k) { return compute_seconds(plan.steps[s][k].value); }, link_seconds);
}

StageTimeline simulate_stage_steps(const StagePlan& plan, const ir::Graph& g,
                                   const std::function<double(int stage, int step)>& step_seconds,
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
          const double c = step_seconds(s, static_cast<int>(pc[s]));
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

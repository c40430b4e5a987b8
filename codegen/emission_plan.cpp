// The backend-neutral emission plan; see emission_plan.h.
#include "codegen/emission_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "codegen/ring_plan.h"

namespace sharc {

namespace {

using ir::Node;
using ir::Op;
using Task = EmissionPlan::Task;
using TaskKind = EmissionPlan::TaskKind;

bool needs_group(const Node& v) {
  return ir::is_collective(v.op) || v.op == Op::kLocalSlice || v.op == Op::kRingDot ||
         v.op == Op::kPPermute || v.op == Op::kAxisIndex;
}

// What a value that is neither a parameter nor an input is called: the layer
// that made it and its op ("dense1_dot", "h0_attn_reshape"; "relu" outside
// a layer), "grad_" first for the gradient computation and "remat_" for a
// forward value computed again for it (passes/rematerialize.h); name_values() adds
// "_n" to the n-th value of one name. Nothing is numbered program-wide, so a
// mesh that adds or drops collectives, or an op appended to the model,
// renames nothing else and a diff of two generated files shows only what
// changed.
std::string iteration_marker(int iteration) { return "\x01" + std::to_string(iteration) + "\x02"; }

std::string value_name(const Node& v) {
  // A kernel's results by the kernel: "layernorm_forward", "layernorm_forward_rstd".
  std::string base = v.kernel.empty() ? ir::op_name(v.op) : v.kernel;
  std::replace(base.begin(), base.end(), '.', '_');
  if (!v.name.empty()) base = v.name + "_" + base;
  if (v.backward) base = "grad_" + base;
  if (v.remat) base = "remat_" + base;  // computed again for the backward pass
  return base;
}

void name_values(const ir::Graph& g, const ir::Graph& scope, EmissionPlan& p) {
  const size_t n = g.nodes.size();
  // Parameters by path (members of Device), inputs by name, everything else
  // by value_name() in program order. Device members and the Inputs/Outputs
  // fields are named from `scope`, so every stage of a pipeline names them
  // alike.
  p.var.assign(n, "");
  cpp::Names device_names;
  for (auto& a : scope.mesh.axes()) p.axis_var[a.name] = device_names.user(a.name + "_index");
  std::map<std::string, std::string> param_var;
  for (const Node& v : scope.nodes)
    if (v.op == Op::kParameter) param_var[v.name] = device_names.user(v.name);
  for (size_t i = 0; i < n; ++i)
    if (g.nodes[i].op == Op::kParameter) p.var[i] = param_var.at(g.nodes[i].name);
  for (const ir::Graph* from : {&scope, &g})
    for (const Node& v : from->nodes)
      if (needs_group(v) && !p.group_var.count(v.axes))
        p.group_var[v.axes] = device_names.user("group_" + cpp::join(v.axes, "_"));
  for (size_t i = 0; i < n; ++i)
    if (g.nodes[i].op == Op::kInput) p.var[i] = p.locals.user(g.nodes[i].name);
  // A value computed from a node of the global program is numbered among
  // the global program's values of its name (Node::origin_rank): "relu_2" is
  // the second relu outside a layer on every mesh, however many values the
  // mesh fuses away, combines or adds. Those names are taken first; the
  // collectives and slices the partitioner added follow in program order.
  //
  // A value of a scanned layer (Node::repeat) is named as the same value of
  // every other layer, as an element of a member array indexed by the
  // layer: "h_attn_dot" + iteration_marker(3) is layer 3's, spelled
  // h_attn_dot[3], or h_attn_dot[l] in the loop body that computes every
  // layer (emit_cpu.cpp). Its Node::origin_rank counts within its layer.
  std::map<std::tuple<int, std::string>, std::string> layer_var;  // (repeat, wanted name) -> name
  auto scanned = [&](const Node& v) { return v.repeat >= 0 && v.iteration >= 0 && g.repeats[v.repeat].scan; };
  auto name = [&](const Node& v, const std::string& wanted) {
    if (!scanned(v)) return p.locals.user(wanted);
    auto [it, fresh] = layer_var.try_emplace({v.repeat, wanted}, "");
    if (fresh) it->second = p.locals.user(wanted);
    return it->second + iteration_marker(v.iteration);
  };
  for (size_t i = 0; i < n; ++i) {
    const Node& v = g.nodes[i];
    if (!p.var[i].empty() || !p.buffers.needs_buffer[i] || v.origin_rank < 0) continue;
    const std::string base = value_name(v);
    p.var[i] = name(v, v.origin_rank == 0 ? base : base + "_" + std::to_string(v.origin_rank + 1));
  }
  // The collectives and slices the partitioner added: numbered within their
  // layer too, in a scanned one.
  std::map<std::tuple<int, int, std::string>, int> added;  // (repeat, layer, name) -> how many so far
  for (size_t i = 0; i < n; ++i) {
    const Node& v = g.nodes[i];
    if (!p.var[i].empty() || !p.buffers.needs_buffer[i]) continue;
    std::string wanted = value_name(v);
    if (scanned(v))
      if (const int k = added[{v.repeat, v.iteration, wanted}]++; k > 0) wanted += "_" + std::to_string(k + 1);
    p.var[i] = name(v, wanted);
  }

  // The Inputs/Outputs fields: their own scope (members, not locals).
  cpp::Names in_fields(cpp::Names::Scope::kFields);
  for (const Node& v : scope.nodes)
    if (v.op == Op::kInput && !p.input_field.count(v.name)) {
      p.input_index[v.name] = static_cast<int>(p.input_field.size());
      p.input_field[v.name] = in_fields.user(v.name);
    }
  cpp::Names out_fields(cpp::Names::Scope::kFields);
  for (auto& o : scope.outputs) {
    p.output_index[o.name] = static_cast<int>(p.output_field.size());
    p.output_field[o.name] = out_fields.user(o.name);
  }

  for (size_t i = 0; i < n; ++i) {
    const Node& v = g.nodes[i];
    if (v.op == Op::kInput)
      p.inputs.push_back({v.name, p.input_field.at(v.name), static_cast<int>(i), v.loc});
  }
  for (const ir::Output& o : g.outputs)
    p.outputs.push_back({o.name, p.output_field.at(o.name), o.value, o.loc});
}

// Builds the task list, statement by statement, and the waits between the
// two streams.
class Scheduler {
 public:
  Scheduler(const ir::Graph& g, EmissionPlan& p) : g_(g), p_(p) {}

  void run() {
    producer_.assign(g_.nodes.size(), -1);
    p_.stmt_tasks.assign(p_.buffers.stmts.size(), {});
    for (size_t k = 0; k < p_.buffers.stmts.size(); ++k) {
      stmt_ = static_cast<int>(k);
      const BufferPlan::Stmt& s = p_.buffers.stmts[k];
      const Node& v = g_[s.node];
      if (!s.bucket.empty()) {
        data_task(s, TaskKind::kCollective, Stream::kComm);
        for (int m : s.bucket) producer_[m] = last();
        continue;
      }
      if (v.op == Op::kRingDot)
        ring(s);
      else
        data_task(s, kind_of(v), stream_of(v));
      producer_[s.node] = last();
      for (int k : s.stores) producer_[k] = last();
    }
  }

 private:
  static TaskKind kind_of(const Node& v) {
    if (v.op == Op::kInput) return TaskKind::kHost;
    if (v.op == Op::kDot) return TaskKind::kGemm;
    if (ir::is_collective(v.op) || v.op == Op::kPPermute || v.op == Op::kSend || v.op == Op::kRecv)
      return TaskKind::kCollective;
    return TaskKind::kKernel;
  }
  static Stream stream_of(const Node& v) {
    return kind_of(v) == TaskKind::kCollective ? Stream::kComm : Stream::kCompute;
  }

  int last() const { return static_cast<int>(p_.tasks.size()) - 1; }

  // Adds a task that waits for `after` (any streams; same-stream ones are
  // implied by order and dropped, as are those an earlier wait of this stream
  // already covers).
  int add(TaskKind kind, Stream stream, std::vector<int> after, int step = -1, int half = -1) {
    Task t{stmt_, kind, stream, step, half, {}};
    const int me = static_cast<int>(p_.tasks.size());
    int need = -1;
    for (int a : after)
      if (a >= 0 && p_.tasks[a].stream != stream) need = std::max(need, a);
    int& synced = synced_[static_cast<int>(stream)];
    if (need > synced) {
      t.waits.push_back(need);
      synced = need;
    }
    p_.tasks.push_back(std::move(t));
    p_.stmt_tasks[stmt_].push_back(me);
    return me;
  }

  std::vector<int> producers_of(const BufferPlan::Stmt& s) const {
    std::vector<int> r;
    for (int x : s.reads) r.push_back(producer_[x]);
    return r;
  }

  void data_task(const BufferPlan::Stmt& s, TaskKind kind, Stream stream) {
    add(kind, stream, producers_of(s));
  }

  // A RingDot's steps (see emission_plan.h for the schedule).
  void ring(const BufferPlan::Stmt& s) {
    const Node& v = g_[s.node];
    const RingPlan rp =
        ring_plan(v, g_[v.args[0]].shape, g_[v.args[1]].shape, g_.mesh.size(v.axes));
    const int n = rp.n, H = rp.halves;
    std::vector<int> gemm_prev, gemm_cur;
    if (rp.gather) {
      // The block this device holds, copied into the travelling buffer.
      const int setup = add(TaskKind::kKernel, Stream::kCompute, producers_of(s));
      int transfer_prev = -1;
      for (int k = 0; k < n; ++k) {
        int transfer = -1;
        if (k + 1 < n) {
          // Receives into the buffer step k-1's GEMMs read; sends what step
          // k's GEMMs read (ready once the previous transfer landed).
          std::vector<int> after = gemm_prev;
          after.push_back(k == 0 ? setup : transfer_prev);
          transfer = add(TaskKind::kTransfer, Stream::kComm, after, k);
        }
        gemm_cur.clear();
        for (int h = 0; h < H; ++h)
          gemm_cur.push_back(add(TaskKind::kGemm, Stream::kCompute,
                                 {k == 0 ? setup : transfer_prev}, k, H == 2 ? h : -1));
        gemm_prev = gemm_cur;
        transfer_prev = transfer;
      }
      return;
    }
    int add_prev = -1;
    const std::vector<int> inputs = producers_of(s);
    for (int k = 0; k < n; ++k) {
      int transfer = -1;
      if (k > 0) {
        // The running sum of step k-1 moves on while this step's GEMMs run.
        transfer =
            add(TaskKind::kTransfer, Stream::kComm, {k == 1 ? gemm_prev.back() : add_prev}, k);
      }
      gemm_cur.clear();
      for (int h = 0; h < H; ++h)
        gemm_cur.push_back(add(TaskKind::kGemm, Stream::kCompute,
                               k == 0 ? inputs : std::vector<int>{}, k, H == 2 ? h : -1));
      if (k > 0) add_prev = add(TaskKind::kRingAdd, Stream::kCompute, {transfer}, k);
      gemm_prev = gemm_cur;
    }
    if (!rp.out_contiguous) add(TaskKind::kKernel, Stream::kCompute, {});  // place the sums
  }

  const ir::Graph& g_;
  EmissionPlan& p_;
  int stmt_ = -1;
  std::vector<int> producer_;  // per node: the task that writes its buffer
  int synced_[2] = {-1, -1};   // per stream: the latest task of the other it waited for
};

}  // namespace

const char* stream_name(Stream s) {
  return s == Stream::kCompute ? "compute" : "comm";
}

const char* task_kind_name(EmissionPlan::TaskKind k) {
  switch (k) {
    case TaskKind::kHost:
      return "host";
    case TaskKind::kKernel:
      return "kernel";
    case TaskKind::kGemm:
      return "gemm";
    case TaskKind::kCollective:
      return "collective";
    case TaskKind::kTransfer:
      return "transfer";
    case TaskKind::kRingAdd:
      return "ring_add";
  }
  internal_error("unknown TaskKind");
}

bool EmissionPlan::ordered_before(int a, int b) const {
  if (a == b || a < 0 || b < 0) return false;
  // Walk back from b over its predecessors: the previous task on its stream
  // and the tasks it waits for. Every edge points to a lower index.
  std::vector<bool> seen(tasks.size(), false);
  std::vector<int> todo = {b};
  while (!todo.empty()) {
    const int t = todo.back();
    todo.pop_back();
    if (t == a) return true;
    if (t < a || seen[t]) continue;
    seen[t] = true;
    for (int w : tasks[t].waits) todo.push_back(w);
    for (int q = t - 1; q >= 0; --q)
      if (tasks[q].stream == tasks[t].stream) {
        todo.push_back(q);
        break;
      }
  }
  return false;
}

std::vector<int> EmissionPlan::find(int stmt, TaskKind kind, int ring_step) const {
  std::vector<int> r;
  for (int t : stmt_tasks.at(stmt))
    if (tasks[t].kind == kind && (ring_step < 0 || tasks[t].ring_step == ring_step)) r.push_back(t);
  return r;
}

std::string EmissionPlan::schedule_str() const {
  std::string s;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    s += "t" + std::to_string(i) + " stmt " + std::to_string(t.stmt) + " " +
         task_kind_name(t.kind) + " " + stream_name(t.stream);
    if (t.ring_step >= 0) s += " step=" + std::to_string(t.ring_step);
    if (t.half >= 0) s += " half=" + std::to_string(t.half);
    if (!t.waits.empty()) {
      s += " waits";
      for (size_t w = 0; w < t.waits.size(); ++w)
        s += (w ? ", t" : " t") + std::to_string(t.waits[w]);
    }
    s += "\n";
  }
  return s;
}

EmissionPlan plan_emission(const ir::Graph& g, const ir::Graph* device_scope) {
  if (!g.partitioned) internal_error("plan_emission needs a partitioned (per-device) graph");
  ir::verify(g);
  EmissionPlan p;
  p.buffers = plan_buffers(g);
  name_values(g, device_scope ? *device_scope : g, p);
  Scheduler(g, p).run();
  return p;
}

}  // namespace sharc

// The buffer plan shared by the CPU emitter and the report; see buffer_plan.h.
#include "codegen/buffer_plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "codegen/execute.h"
#include "codegen/ring_plan.h"
#include "runtime/arena.h"
#include "runtime/gpu/kernel_args.h"
#include "runtime/gpu/kernel_limits.h"

namespace sharc {

namespace {

using ir::Node;
using ir::Op;
using ir::Shape;

void add_unique(std::vector<int>& v, int x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

// The nodes of the loop that computes `v` (root `r`): operands that this
// loop computes too (inlined, with root r) are collected recursively; others
// are buffers it reads.
void collect_tree(const ir::Graph& g, const BufferPlan& p, int r, int v, std::vector<int>& tree,
                  std::vector<int>& reads) {
  for (int a : g[v].args) {
    if (p.inlined[a] && (p.root[a] == r || p.duplicated[a]))
      collect_tree(g, p, r, a, tree, reads);
    else if (g[a].op != Op::kConstant)
      add_unique(reads, a);
  }
  add_unique(tree, v);
}

uint64_t bytes_of(const Shape& s, ir::DType t) {
  return static_cast<uint64_t>(ir::num_elements(s)) * ir::dtype_size(t);
}
uint64_t bytes_of(const Node& v) { return bytes_of(v.shape, v.dtype); }

// Running current/peak of one device's DeviceMemory, and the step arena's
// placements (rt::ArenaPlan, as DeviceMemory makes them): a block is a
// handle, freed by handle; persistent blocks (parameter shards, their new
// values) are counted but never placed in the arena.
struct Tracker {
  uint64_t current = 0, peak = 0;
  int peak_stmt = -1;
  int stmt = -1;
  rt::ArenaPlan arena;
  // Per block, by handle (offset -1: persistent, not in the arena).
  std::vector<ArenaPlacement> placements;
  int events = 0;
  int alloc(uint64_t b, bool persistent = false) {
    current += b;
    if (current > peak) {
      peak = current;
      peak_stmt = stmt;
    }
    const int64_t offset = !persistent && b > 0 ? static_cast<int64_t>(arena.take(b)) : -1;
    placements.push_back({offset, b, events++, std::numeric_limits<int>::max()});
    return static_cast<int>(placements.size()) - 1;
  }
  void free(int h) {
    ArenaPlacement& blk = placements.at(h);
    SHARC_CHECK(blk.freed == std::numeric_limits<int>::max(), "block freed twice in the memory replay");
    current -= blk.bytes;
    if (blk.offset >= 0) arena.give(static_cast<size_t>(blk.offset), blk.bytes);
    blk.freed = events++;
  }
};

// The transposes of one local dot on operands of shapes ls, rs: allocated
// before the GEMM, released after it (emit_local_dot).
void local_dot_temps(Tracker& t, const ir::DotDims& d, const Shape& ls, const Shape& rs,
                     ir::DType dtype) {
  const LocalDotLayout l = local_dot_layout(d, ls, rs);
  std::vector<int> held;
  if (l.transpose_lhs) held.push_back(t.alloc(bytes_of(ls, dtype)));
  if (l.transpose_rhs) held.push_back(t.alloc(bytes_of(rs, dtype)));
  for (int h : held) t.free(h);
}

// A RingDot's temporaries, in the emitter's order (emit_ring_dot): the
// step buffers live for the whole ring, each step's local dots allocate and
// release their transposes; every step is alike, so one step gives the peak.
void ring_dot_temps(Tracker& t, const ir::Graph& g, const Node& v) {
  const RingPlan plan =
      ring_plan(v, g[v.args[0]].shape, g[v.args[1]].shape, g.mesh.size(v.axes));
  const int H = plan.halves;
  const uint64_t f = ir::dtype_size(v.dtype);
  std::vector<int> held;
  auto alloc = [&](uint64_t b) { held.push_back(t.alloc(b)); };
  if (plan.sliced >= 0 && !plan.slice_contiguous)
    alloc(static_cast<uint64_t>(plan.step_operand_count(plan.sliced)) * f);
  const uint64_t piece = static_cast<uint64_t>(plan.step_result_count()) * f;
  if (plan.gather) {
    if (!plan.out_contiguous) alloc(piece);
    const uint64_t count = static_cast<uint64_t>(plan.step_operand_count(plan.moving)) * f;
    for (int h = 0; h < H; ++h) alloc(count), alloc(count);  // cur, next
  } else {
    for (int h = 0; h < H; ++h) {
      alloc(piece), alloc(piece);  // part, incoming
      if (!plan.out_contiguous) alloc(piece);  // sum
    }
  }
  for (int h = 0; h < H; ++h)
    local_dot_temps(t, v.dot, plan.step_operand[0], plan.step_operand[1], v.dtype);
  for (int h : held) t.free(h);
}

// A kernel's scratch (kernel_scratch_bytes): allocated before its launch,
// released after it (emit_kernel).
void kernel_temps(Tracker& t, const ir::Graph& g, const Node& v) {
  if (const uint64_t b = kernel_scratch_bytes(g, v)) t.free(t.alloc(b));
}

}  // namespace

int64_t multi_tensor_chunks(const ir::Graph& g, const ir::Node& kernel) {
  // adamw: lr, t, then (w, g, m, v) per tensor; global_norm: the tensors.
  const bool adamw = kernel.kernel == "adamw";
  int64_t chunks = 0;
  for (int t = 0; t < kernel.ints.at(0); ++t) {
    const int x = kernel.args[static_cast<size_t>(adamw ? 2 + 4 * t : t)];
    chunks += (ir::num_elements(g[x].shape) + gpu::kTensorChunk - 1) / gpu::kTensorChunk;
  }
  return chunks;
}

uint64_t kernel_scratch_bytes(const ir::Graph& g, const ir::Node& kernel) {
  if (kernel.kernel == "adamw")  // the launch's tensor table and chunk list, uploaded to the device
    return kernel.ints.at(0) * sizeof(gpu::AdamWTensor) + multi_tensor_chunks(g, kernel) * sizeof(gpu::TensorChunk);
  if (kernel.kernel == "layernorm_backward") {
    const ir::Shape& x = g[kernel.args[1]].shape;
    const int64_t cols = x.back(), rows = ir::num_elements(x) / cols;
    return gpu::layernorm_backward_scratch_floats(static_cast<int>(rows), static_cast<int>(cols)) * sizeof(float);
  }
  if (kernel.kernel == "global_norm")  // the tensor table, the chunk list and a partial sum per chunk
    return kernel.ints.at(0) * sizeof(gpu::NormTensor) +
           multi_tensor_chunks(g, kernel) * (sizeof(gpu::TensorChunk) + sizeof(float));
  if (kernel.kernel == "cross_entropy" && kernel.args.size() == 3) {  // the backward launch's losses
    const ir::Shape& logits = g[kernel.args[0]].shape;
    return static_cast<uint64_t>(ir::num_elements(logits) / logits.back()) * sizeof(float);
  }
  if (kernel.kernel == "attention_backward") {  // delta: rowsum(dy * y), one float per query row of a head
    const ir::Shape& qkv = g[kernel.args[1]].shape;
    return static_cast<uint64_t>(qkv[0] * qkv[1] * qkv[2]) * sizeof(float);
  }
  return 0;
}

BufferPlan plan_buffers(const ir::Graph& g) {
  BufferPlan p;
  const size_t n = g.nodes.size();
  p.users.assign(n, {});
  for (size_t i = 0; i < n; ++i)
    for (int a : g.nodes[i].args) p.users[a].insert(static_cast<int>(i));
  p.is_output.assign(n, false);
  p.is_update_value.assign(n, false);
  for (auto& u : g.updates) p.is_update_value[u.value] = true;
  for (auto& o : g.outputs) {
    p.is_output[o.value] = true;
    const Node& v = g[o.value];
    if (!v.sharding || !v.sharding->partial.empty())
      internal_error("output \"" + o.name +
                     "\" is a partial sum; partition_per_device must resolve it");
  }

  // Fusion and constants (see buffer_plan.h).
  p.inlined.assign(n, false);
  p.needs_buffer.assign(n, true);
  // root[i]: the statement (fused loop) that computes node i. Users come
  // after their operands, so walking backwards decides every user first.
  p.root.assign(n, -1);
  p.kept.assign(n, false);
  p.duplicated.assign(n, false);
  // Where the statement of a node that is not elementwise runs: itself, or
  // for a bucketed all-reduce, its bucket's first member.
  std::vector<int> runs_at(n);
  for (int first = 0; first < static_cast<int>(n);) {
    const int end = all_reduce_bucket_end(g, first);
    for (int m = first; m < end; ++m) runs_at[m] = first;
    first = end;
  }
  for (size_t i = n; i-- > 0;) {
    const Node& v = g.nodes[i];
    p.root[i] = static_cast<int>(i);
    // An iota along a dimension the mesh does not split is its local index,
    // computed in place like a broadcast's read (a one-hot's [rows, vocab]
    // iota is never stored).
    const bool iota = v.op == Op::kIota && (!v.sharding || v.sharding->dims.at(v.ints[0]).empty());
    const bool broadcast = v.op == Op::kBroadcast || iota;
    if (!(ir::is_elementwise(v.op) || broadcast) || p.users[i].empty()) continue;
    const bool lives_on = p.is_output[i] || p.is_update_value[i];
    // Inlined: every user is elementwise, of this micro-batch, in one loop.
    // A broadcast inlined there is an indexed read of its operand.
    int r = -1;
    bool fuse = !lives_on;
    for (int u : p.users[i]) {
      fuse = fuse && ir::is_elementwise(g[u].op) && g[u].micro_batch == v.micro_batch &&
             (r < 0 || p.root[u] == r);
      r = p.root[u];
    }
    if (fuse) {
      p.inlined[i] = true;
      p.root[i] = r;
      continue;
    }
    if (broadcast) {
      // Read in place by every loop that reads it, when all its readers are
      // loops of this micro-batch; else materialised once (a dot, a
      // reduction or a collective reads it).
      bool everywhere = !lives_on;
      for (int u : p.users[i])
        everywhere = everywhere && ir::is_elementwise(g[u].op) && g[u].micro_batch == v.micro_batch;
      if (everywhere) {
        p.inlined[i] = true;
        p.duplicated[i] = true;
      }
      continue;
    }
    // Kept: computed in the first loop that reads it (an elementwise user of
    // this micro-batch) and also stored, for readers that run after that
    // loop: later loops, and ops that are not elementwise (a dot, a
    // reduction, the backward pass).
    int host = -1;
    for (int u : p.users[i])
      if (ir::is_elementwise(g[u].op) && g[u].micro_batch == v.micro_batch &&
          (host < 0 || p.root[u] < host))
        host = p.root[u];
    if (host < 0) continue;
    bool after = true;
    for (int u : p.users[i]) {
      const int at = ir::is_elementwise(g[u].op) ? p.root[u] : runs_at[u];
      after = after && (at > host || (at == host && g[u].micro_batch == v.micro_batch));
    }
    if (after) {
      p.inlined[i] = true;
      p.kept[i] = true;
      p.root[i] = host;
    }
  }
  // A kernel's further results are written by its launch: stored by the
  // kernel's statement, as a loop stores the values it keeps.
  for (size_t i = 0; i < n; ++i)
    if (g.nodes[i].op == Op::kKernelOutput) {
      p.inlined[i] = p.kept[i] = true;
      p.root[i] = g.nodes[i].args[0];
    }
  for (size_t i = 0; i < n; ++i) {
    const Node& v = g.nodes[i];
    if (v.op == Op::kConstant) {
      bool other = p.is_output[i] || p.is_update_value[i];
      for (int u : p.users[i])
        other = other || !(ir::is_elementwise(g[u].op) || (g[u].op == Op::kBroadcast && p.inlined[u]));
      p.needs_buffer[i] = other;
    }
    if ((p.inlined[i] && !p.kept[i]) || v.op == Op::kParameter || v.op == Op::kSend)
      p.needs_buffer[i] = false;
  }

  // Statements, in program order.
  for (size_t i = 0; i < n; ++i) {
    const Node& v = g.nodes[i];
    const int id = static_cast<int>(i);
    if (v.op == Op::kParameter || p.inlined[i] || (v.op == Op::kConstant && !p.needs_buffer[i]))
      continue;
    BufferPlan::Stmt s{id, {}, {}, {}, {}};
    const int bucket_end = all_reduce_bucket_end(g, id);
    if (bucket_end > id + 1) {
      for (int m = id; m < bucket_end; ++m) {
        s.bucket.push_back(m);
        add_unique(s.reads, g[m].args[0]);
      }
      i = bucket_end - 1;
    } else if (ir::is_elementwise(v.op)) {
      collect_tree(g, p, id, id, s.tree, s.reads);
      std::sort(s.tree.begin(), s.tree.end());
      for (int t : s.tree)
        if (p.kept[t]) s.stores.push_back(t);
    } else {
      for (int a : v.args) add_unique(s.reads, a);
      if (v.op == Op::kKernel)
        for (int u : p.users[i])
          if (g[u].op == Op::kKernelOutput) s.stores.push_back(u);
    }
    p.stmts.push_back(std::move(s));
  }

  // Last statement reading each value; outputs and updates live to the end,
  // parameters persist.
  std::vector<int> last(n, -1);
  for (size_t k = 0; k < p.stmts.size(); ++k)
    for (int r : p.stmts[k].reads) last[r] = static_cast<int>(k);
  auto step_buffer = [&](int v) {
    return !p.is_output[v] && !p.is_update_value[v] && g[v].op != Op::kParameter;
  };
  p.takes_buffer_of.assign(n, -1);
  std::set<int> taken;
  for (size_t k = 0; k < p.stmts.size(); ++k) {
    std::vector<int> members = p.stmts[k].bucket;
    const Op op = g[p.stmts[k].node].op;
    if (members.empty() && p.stmts[k].tree.empty() &&
        (op == Op::kAllReduce || op == Op::kReshape || op == Op::kShardingConstraint || op == Op::kAddSlice))
      members.push_back(p.stmts[k].node);
    for (int m : members) {
      const int a = g[m].args[0];
      // An operand two members read is copied for both (one cannot take it
      // before the other has copied it).
      const auto readers = std::count_if(members.begin(), members.end(),
                                         [&](int x) { return g[x].args[0] == a; });
      if (last[a] == static_cast<int>(k) && step_buffer(a) && !p.is_update_value[m] &&
          g[a].dtype == g[m].dtype && ir::num_elements(g[a].shape) == ir::num_elements(g[m].shape) &&
          readers == 1 && taken.insert(a).second)
        p.takes_buffer_of[m] = a;
    }
  }
  p.frees_after.assign(p.stmts.size(), {});
  for (size_t k = 0; k < p.stmts.size(); ++k)
    for (int r : p.stmts[k].reads)
      if (last[r] == static_cast<int>(k) && step_buffer(r) && !taken.count(r))
        p.frees_after[k].push_back(r);

  // In-place updates (see buffer_plan.h).
  p.in_place_of.assign(n, -1);
  std::map<int, int> updates_of_value, updates_of_target;
  std::set<int> values;
  for (auto& u : g.updates) {
    ++updates_of_value[u.value];
    ++updates_of_target[u.target];
    values.insert(u.value);
  }
  for (auto& u : g.updates) {
    const int v = u.value, param = u.target;
    if (v == param || g[v].op == Op::kParameter || updates_of_value[v] != 1 ||
        updates_of_target[param] != 1 || values.count(param) || p.is_output[param] ||
        p.is_output[v] || g[v].dtype != ir::DType::kF32 || g[param].dtype != ir::DType::kF32 ||
        g[v].shape != g[param].shape)
      continue;
    // A loop's value, or the AdamW kernel's (it updates its tensors in place).
    const bool kernel = (g[v].op == Op::kKernel || g[v].op == Op::kKernelOutput) &&
                        g[p.root[v]].kernel == "adamw";
    if (!ir::is_elementwise(g[v].op) && !kernel) continue;
    const int k = static_cast<int>(std::find_if(p.stmts.begin(), p.stmts.end(),
                                                [&](const BufferPlan::Stmt& s) {
                                                  return s.node == p.root[v];
                                                }) -
                                   p.stmts.begin());
    if (k == static_cast<int>(p.stmts.size()) || last[param] != k) continue;
    const BufferPlan::Stmt& s = p.stmts[k];
    if (s.node != v && !p.kept[v]) continue;
    // Every read of the old value in the loop is at the loop's element (no
    // broadcast of it) and comes no later than the node that writes v.
    bool ok = true;
    for (int t : s.tree)
      for (int a : g[t].args)
        if (a == param && (g[t].op == Op::kBroadcast || t > v)) ok = false;
    if (ok) p.in_place_of[v] = param;
  }
  return p;
}

LocalDotLayout local_dot_layout(const ir::DotDims& d, const Shape& ls, const Shape& rs) {
  auto in = [](const std::vector<int>& xs, int x) {
    return std::find(xs.begin(), xs.end(), x) != xs.end();
  };
  auto concat = [](std::vector<int> a, const std::vector<int>& b, const std::vector<int>& c) {
    a.insert(a.end(), b.begin(), b.end());
    a.insert(a.end(), c.begin(), c.end());
    return a;
  };
  auto identity = [](const std::vector<int>& perm) {
    for (size_t i = 0; i < perm.size(); ++i)
      if (perm[i] != static_cast<int>(i)) return false;
    return true;
  };
  LocalDotLayout l;
  std::vector<int> lhs_free, rhs_free;
  for (int b : d.lhs_batch) l.B *= ls[b];
  for (int i = 0; i < static_cast<int>(ls.size()); ++i)
    if (!in(d.lhs_batch, i) && !in(d.lhs_contract, i)) lhs_free.push_back(i), l.M *= ls[i];
  for (int c : d.lhs_contract) l.K *= ls[c];
  for (int i = 0; i < static_cast<int>(rs.size()); ++i)
    if (!in(d.rhs_batch, i) && !in(d.rhs_contract, i)) rhs_free.push_back(i), l.N *= rs[i];
  l.lhs_perm = concat(d.lhs_batch, lhs_free, d.lhs_contract);
  l.rhs_perm = concat(d.rhs_batch, d.rhs_contract, rhs_free);
  if (!identity(l.lhs_perm)) {
    l.trans_lhs = identity(concat(d.lhs_batch, d.lhs_contract, lhs_free));
    l.transpose_lhs = !l.trans_lhs;
  }
  if (!identity(l.rhs_perm)) {
    l.trans_rhs = identity(concat(d.rhs_batch, rhs_free, d.rhs_contract));
    l.transpose_rhs = !l.trans_rhs;
  }
  return l;
}

MemoryProfile simulate_memory(const ir::Graph& g, const BufferPlan& p,
                              std::vector<ArenaPlacement>* placements) {
  Tracker t;
  uint64_t persistent = 0;
  std::map<int, int> held;  // node -> its buffer's block
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == Op::kParameter) {
      persistent += bytes_of(g.nodes[i]);
      held[static_cast<int>(i)] = t.alloc(bytes_of(g.nodes[i]), /*persistent=*/true);
    }
  // A value the step hands to a parameter outlives the step (emit_updates);
  // one computed in place takes the parameter's block, and a copy-like
  // result its operand's (emit_bucket, take_operand_buffer).
  auto result = [&](int v) {
    if (p.in_place_of[v] >= 0)
      held[v] = held.at(p.in_place_of[v]);
    else if (p.takes_buffer_of[v] >= 0)
      held[v] = held.at(p.takes_buffer_of[v]);
    else
      held[v] = t.alloc(bytes_of(g[v]), p.is_update_value[v] != 0);
  };

  for (size_t k = 0; k < p.stmts.size(); ++k) {
    const BufferPlan::Stmt& s = p.stmts[k];
    t.stmt = static_cast<int>(k);
    const Node& v = g[s.node];
    if (!s.bucket.empty()) {
      for (int m : s.bucket) result(m);  // reduced in place: no packed buffer
    } else if (v.op != Op::kSend) {  // a send has no result
      result(s.node);  // the statement's result
      for (int k : s.stores) result(k);  // and the values its loop keeps
      if (v.op == Op::kDot)
        local_dot_temps(t, v.dot, g[v.args[0]].shape, g[v.args[1]].shape, v.dtype);
      else if (v.op == Op::kRingDot)
        ring_dot_temps(t, g, v);
      else if (v.op == Op::kKernel)
        kernel_temps(t, g, v);
    }
    for (int r : p.frees_after[k]) t.free(held.at(r));
  }

  // Updates (emit_updates): snapshots of updated parameters that another
  // parameter takes, then each moved value replaces its parameter's buffer.
  t.stmt = static_cast<int>(p.stmts.size());
  std::set<int> targets;
  std::map<int, int> remaining;
  for (auto& u : g.updates) {
    targets.insert(u.target);
    ++remaining[u.value];
  }
  std::set<int> snapshot;
  for (auto& u : g.updates) {
    if (u.value == u.target || g[u.value].op != Op::kParameter || !targets.count(u.value) ||
        snapshot.count(u.value))
      continue;
    t.alloc(bytes_of(g[u.value]), /*persistent=*/true);
    snapshot.insert(u.value);
  }
  for (auto& u : g.updates) {
    const bool last = --remaining[u.value] == 0;
    if (u.value == u.target || p.in_place_of[u.value] == u.target) continue;
    const bool moved = snapshot.count(u.value) ? last : g[u.value].op != Op::kParameter && last;
    if (moved) t.free(held.at(u.target));  // the old shard goes
  }

  MemoryProfile m;
  m.persistent_bytes = persistent;
  m.arena_bytes = t.arena.high_water();
  if (placements) {
    placements->clear();
    for (const ArenaPlacement& a : t.placements)
      if (a.offset >= 0) placements->push_back(a);
  }
  m.peak_bytes = t.peak;
  m.peak_stmt = t.peak_stmt;
  return m;
}

ActivationProfile simulate_activations(const ir::Graph& g, const BufferPlan& p) {
  const size_t n = g.nodes.size();
  std::vector<bool> from_gradient(n, false), activation(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Node& v = g.nodes[i];
    from_gradient[i] = v.backward;
    for (int a : v.args) from_gradient[i] = from_gradient[i] || from_gradient[a];
    activation[i] = !from_gradient[i] && v.micro_batch >= 0 && v.micro_batch < ir::kAfterMicroBatches &&
                    p.needs_buffer[i] && v.op != Op::kParameter;
  }
  ActivationProfile a;
  std::map<int, int> live_per_micro_batch;  // micro-batch -> live activation buffers
  uint64_t live_bytes = 0;
  auto add = [&](int v) {
    if (!activation[v]) return;
    ++live_per_micro_batch[g[v].micro_batch];
    live_bytes += bytes_of(g[v]);
  };
  auto release = [&](int v) {
    if (!activation[v]) return;
    live_bytes -= bytes_of(g[v]);
    if (--live_per_micro_batch[g[v].micro_batch] == 0) live_per_micro_batch.erase(g[v].micro_batch);
  };
  for (size_t k = 0; k < p.stmts.size(); ++k) {
    const BufferPlan::Stmt& s = p.stmts[k];
    std::vector<int> made = s.bucket;
    if (s.bucket.empty()) {
      made.push_back(s.node);
      made.insert(made.end(), s.stores.begin(), s.stores.end());
    }
    for (int m : made) add(m);
    // A result in its operand's buffer: the operand's bytes are the result's.
    for (int m : made)
      if (p.takes_buffer_of[m] >= 0) release(p.takes_buffer_of[m]);
    a.max_micro_batches = std::max(a.max_micro_batches, static_cast<int>(live_per_micro_batch.size()));
    a.max_bytes = std::max(a.max_bytes, live_bytes);
    for (int r : p.frees_after[k]) release(r);
  }
  return a;
}

}  // namespace sharc

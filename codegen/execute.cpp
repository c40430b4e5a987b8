// The per-device interpreter on the thread runtime; see execute.h.
#include "codegen/execute.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

#include "codegen/buffer_plan.h"
#include "codegen/op_cost.h"
#include "codegen/passes/partition_per_device.h"
#include "codegen/ring_plan.h"
#include "codegen/runtime_mesh.h"
#include "runtime/elementwise.h"
#include "runtime/init.h"
#include "runtime/kernels.h"
#include "runtime/memory.h"
#include "runtime/philox.h"
#include "runtime/tensor_collectives.h"
#include "runtime/thread_world.h"

namespace sharc {

namespace {

using ir::Node;
using ir::Op;
using ir::Shape;


std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// Copies the block at `offset` with `local` shape out of a global row-major array.
void take_block(const float* global, const Shape& gshape, const std::vector<int64_t>& offset,
                const Shape& local, float* out) {
  auto st = strides_of(gshape);
  int64_t base = 0;
  for (size_t d = 0; d < gshape.size(); ++d) base += offset[d] * st[d];
  if (local.empty()) { out[0] = global[base]; return; }
  rt::strided_copy(global + base, local, st, out);
}

void put_block(std::vector<double>& global, const Shape& gshape, const std::vector<int64_t>& offset,
               const Shape& local, const float* in) {
  auto st = strides_of(gshape);
  const int64_t n = ir::num_elements(local);
  std::vector<int64_t> idx(local.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t g = 0;
    for (size_t d = 0; d < local.size(); ++d) g += (offset[d] + idx[d]) * st[d];
    global[g] = in[e];
    for (int d = static_cast<int>(local.size()) - 1; d >= 0; --d) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

rt::Group group_of(const Mesh& mesh, const rt::MeshShape& ms, int rank, const std::vector<std::string>& axes) {
  std::vector<int> idx;
  for (auto& a : axes) idx.push_back(mesh.index(a));
  return rt::make_group(ms, rank, idx);
}

rt::ReduceOp reduce_op(ir::ReduceKind k) { return k == ir::ReduceKind::kSum ? rt::ReduceOp::kSum : rt::ReduceOp::kMax; }

float apply_unary(Op op, float x) {
  switch (op) {
    case Op::kNeg: return -x;
    case Op::kRelu: return rt::relu(x);
    case Op::kGelu: return rt::gelu(x);
    case Op::kTanh: return rt::tanh(x);
    case Op::kExp: return rt::exp(x);
    case Op::kLog: return std::log(x);
    case Op::kSqrt: return std::sqrt(x);
    case Op::kSin: return std::sin(x);
    case Op::kCos: return std::cos(x);
    case Op::kAbs: return std::abs(x);
    case Op::kSigmoid: return rt::sigmoid(x);
    case Op::kErf: return std::erf(x);
    case Op::kLog1p: return std::log1p(x);
    case Op::kExpm1: return std::expm1(x);
    case Op::kConvert: return x;  // rounded (bf16) or truncated (i32) after the op, like any result
    default: internal_error("not unary");
  }
}

float apply_binary(Op op, float a, float b) {
  switch (op) {
    case Op::kAdd: return a + b;
    case Op::kSub: return a - b;
    case Op::kMul: return a * b;
    case Op::kDiv: return a / b;
    case Op::kPow: return std::pow(a, b);
    case Op::kMax: return std::max(a, b);
    case Op::kMin: return std::min(a, b);
    case Op::kGreater: return a > b ? 1.0f : 0.0f;
    case Op::kEqual: return a == b ? 1.0f : 0.0f;
    default: internal_error("not binary");
  }
}

// Local dot_general as local_dot_layout() plans it: one batched GEMM, an
// operand stored as the matrix transpose passed with BLAS's transpose flag,
// one in any other order copied into (batch, free, contract) or
// (batch, contract, free) first.
template <class T>
void local_dot(const Node& n, const Shape& ls, const T* l, const Shape& rs, const T* r, T* out) {
  const LocalDotLayout layout = local_dot_layout(n.dot, ls, rs);
  std::vector<T> lt, rt_;
  const T* lp = l;
  const T* rp = r;
  if (layout.transpose_lhs) {
    lt.resize(ir::num_elements(ls));
    rt::transpose(l, ls, layout.lhs_perm, lt.data());
    lp = lt.data();
  }
  if (layout.transpose_rhs) {
    rt_.resize(ir::num_elements(rs));
    rt::transpose(r, rs, layout.rhs_perm, rt_.data());
    rp = rt_.data();
  }
  rt::gemm(layout.B, layout.M, layout.N, layout.K, lp, layout.trans_lhs, rp, layout.trans_rhs, out);
}

// bf16 values live in this interpreter's f32 buffers, rounded to bf16 after
// every op (so they hold exactly what a bf16 buffer would); collectives and
// ring dots run on bf16 copies, so bytes sent and the rounding at every ring
// hop are those of generated code's bf16 buffers.
std::vector<rt::bf16> to_bf16(const float* x, size_t n) {
  std::vector<rt::bf16> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = rt::bf16(x[i]);
  return r;
}

// Runs f(in, out) in the node's element type: directly on the f32 buffers,
// or on bf16 copies of `in` (nin elements) and `out` (nout) copied back.
template <class F>
void in_dtype(const Node& n, const float* in, size_t nin, float* out, size_t nout, F&& f) {
  // i32 runs as f32 too: the same four bytes, exact below 2^24.
  if (n.dtype != ir::DType::kBF16) return f(in, out);
  const std::vector<rt::bf16> x = to_bf16(in, nin);
  std::vector<rt::bf16> y(nout);
  f(x.data(), y.data());
  for (size_t i = 0; i < nout; ++i) out[i] = y[i];
}

// RingDot (ir.h, RingAttrs) on one device, laid out by ring_plan(); the
// emitter prints exactly these steps (CpuEmitter::emit_ring_dot). Every step
// starts its ppermutes BEFORE its GEMMs and waits for them after, so the
// transfers overlap the multiplications. Half 0 travels right (to p + 1),
// half 1 left.
// Each step's GEMMs (and a scatter ring's add) are marked on `clock` as
// the emitter marks them.
template <class T>
void ring_dot(rt::Communicator& comm, const rt::Group& grp, const Node& n, const Shape& ls,
              const T* lhs, const Shape& rs, const T* rhs, T* out, rt::DeviceMemory& mem,
              rt::Timeline& clock, const std::string& label, const RingStepCost& cost) {
  using Buffer = rt::BasicBuffer<T>;
  const RingPlan plan = ring_plan(n, ls, rs, grp.size());
  const int p = grp.position, H = plan.halves;
  const T* operand[2] = {lhs, rhs};
  const int64_t piece = plan.step_result_count();
  // Operand `sliced`'s piece i: a pointer into it, or a copy in `slice_buf`.
  Buffer slice_buf;
  if (plan.sliced >= 0 && !plan.slice_contiguous)
    slice_buf = Buffer(static_cast<size_t>(plan.step_operand_count(plan.sliced)), &mem);
  auto sliced_piece = [&](int i) -> const T* {
    const T* x = operand[plan.sliced];
    if (plan.slice_contiguous) return x + i * plan.step_operand_count(plan.sliced);
    rt::slice_block(x, plan.operand[plan.sliced], plan.slice_dim, plan.pieces(), i,
                    slice_buf.data());
    return slice_buf.data();
  };
  // kGather's result piece: written in place, or into `piece_buf` and placed after.
  Buffer piece_buf;
  if (plan.gather && !plan.out_contiguous)
    piece_buf = Buffer(static_cast<size_t>(piece), &mem);
  auto permutation = [&](int h) { return rt::ring_shift(grp.size(), h == 0 ? 1 : -1); };
  std::vector<rt::PendingRecv> pending(H);

  if (plan.gather) {
    const int w = plan.moving;
    const int64_t count = plan.step_operand_count(w);
    std::vector<Buffer> cur, next;
    for (int h = 0; h < H; ++h) {
      cur.emplace_back(static_cast<size_t>(count), &mem);
      next.emplace_back(static_cast<size_t>(count), &mem);
      if (H == 1)
        rt::copy(operand[w], cur[h].data(), static_cast<size_t>(count));
      else
        rt::slice_block(operand[w], plan.operand[w], plan.move_dim, H, h, cur[h].data());
    }
    for (int k = 0; k < plan.n; ++k) {
      const bool send = k + 1 < plan.n;
      if (send)
        for (int h = 0; h < H; ++h)
          pending[h] =
              comm.ppermute_start(cur[h].data(), next[h].data(), count, grp, permutation(h));
      clock.op(label, cost.gemm);
      for (int h = 0; h < H; ++h) {
        const int i = ring_block(true, h, k, p, plan.n) * H + h;
        const T* step[2];
        step[w] = cur[h].data();
        step[1 - w] = plan.sliced >= 0 ? sliced_piece(i) : operand[1 - w];
        T* dst = plan.out_contiguous ? out + i * piece : piece_buf.data();
        local_dot(n, plan.step_operand[0], step[0], plan.step_operand[1], step[1], dst);
        if (!plan.out_contiguous)
          rt::place_block(dst, plan.result, plan.out_dim, plan.out_parts, i, out);
      }
      if (send)
        for (int h = 0; h < H; ++h) {
          comm.ppermute_wait(pending[h]);
          std::swap(cur[h], next[h]);
        }
    }
    return;
  }

  // kScatter: acc[h] is the running sum of half h (in place in `out` when
  // its block is a contiguous run of it).
  const int s = plan.sliced;
  std::vector<Buffer> own, part, incoming;
  std::vector<T*> acc;
  for (int h = 0; h < H; ++h) {
    part.emplace_back(static_cast<size_t>(piece), &mem);
    incoming.emplace_back(static_cast<size_t>(piece), &mem);
    if (plan.out_contiguous) {
      acc.push_back(out + h * piece);
    } else {
      own.emplace_back(static_cast<size_t>(piece), &mem);
      acc.push_back(own.back().data());
    }
  }
  for (int k = 0; k < plan.n; ++k) {
    if (k > 0)
      for (int h = 0; h < H; ++h)
        pending[h] = comm.ppermute_start(acc[h], incoming[h].data(), piece, grp, permutation(h));
    clock.op(label, cost.gemm);
    for (int h = 0; h < H; ++h) {
      const T* step[2];
      step[s] = sliced_piece(ring_block(false, h, k, p, plan.n) * H + h);
      step[1 - s] = operand[1 - s];
      local_dot(n, plan.step_operand[0], step[0], plan.step_operand[1], step[1],
                k == 0 ? acc[h] : part[h].data());
    }
    if (k > 0)
      for (int h = 0; h < H; ++h) {
        comm.ppermute_wait(pending[h]);
        clock.op(label, cost.add);
        for (int64_t e = 0; e < piece; ++e)
          acc[h][e] = T(static_cast<float>(part[h][e]) + static_cast<float>(incoming[h][e]));
      }
  }
  if (!plan.out_contiguous)
    for (int h = 0; h < H; ++h)
      rt::place_block(acc[h], plan.result, plan.out_dim, plan.out_parts, h, out);
}

}  // namespace

std::vector<int64_t> block_offset(const ir::Sharding& s, const Shape& local, const Mesh& mesh, int rank) {
  std::vector<int64_t> off(local.size(), 0);
  for (size_t d = 0; d < local.size(); ++d) off[d] = block_index(s, d, mesh, rank) * local[d];
  return off;
}

int all_reduce_bucket_end(const ir::Graph& g, int first) {
  const Node& head = g.nodes[first];
  int end = first + 1;
  if (head.op != Op::kAllReduce || head.dim2 < 0) return end;
  for (; end < static_cast<int>(g.nodes.size()); ++end) {
    const Node& n = g.nodes[end];
    if (n.op != Op::kAllReduce || n.dim2 != head.dim2 || n.axes != head.axes ||
        n.reduce != head.reduce || n.dtype != head.dtype)
      break;
    if (n.args[0] >= first) break;  // reads a member: it must wait for the collective
  }
  return end;
}

namespace {

// Runs graphs[s] on the devices at position s of `pipe_axis` (one graph and
// no axis: every device runs it).
ExecResult run_graphs(const std::vector<const ir::Graph*>& graphs, const std::string& pipe_axis,
                      const HostValues& inputs, uint64_t seed, const HostValues* state,
                      const ExecOptions& options) {
  for (const ir::Graph* g : graphs)
    if (!g->partitioned) internal_error("execute_partitioned needs a per-device graph");
  const Mesh& mesh = graphs[0]->mesh;
  const rt::MeshShape ms = mesh_shape(mesh);
  rt::ThreadWorld world(ms);
  world.set_link(options.link);
  world.set_clock(options.virtual_clock ? rt::ClockMode::kVirtual
                  : options.trace       ? rt::ClockMode::kWall
                                        : rt::ClockMode::kOff,
                  options.machine);
  const int ndev = world.size();
  const int pipe = pipe_axis.empty() ? -1 : mesh.index(pipe_axis);
  auto stage_of_rank = [&](int rank) { return pipe < 0 ? 0 : ms.coords(rank)[pipe]; };
  if (static_cast<int>(graphs.size()) != (pipe < 0 ? 1 : mesh.size(pipe_axis)))
    internal_error("execute: " + std::to_string(graphs.size()) + " stage programs for the mesh " + mesh.str());

  // Global shapes of outputs and parameters, from local shape x parts.
  auto global_shape = [&](const Node& n) {
    Shape s = n.shape;
    for (size_t d = 0; d < s.size(); ++d) s[d] *= n.sharding->parts(mesh, d);
    return s;
  };
  for (const ir::Graph* g : graphs)
    for (auto& n : g->nodes)
      if (n.op == Op::kInput) {
        auto it = inputs.find(n.name);
        if (it == inputs.end()) user_error(n.loc, "no value given for program input \"" + n.name + "\"");
        if (static_cast<int64_t>(it->second.size()) != ir::num_elements(global_shape(n)))
          user_error(n.loc, "input \"" + n.name + "\" has the wrong number of values");
      }
  std::map<std::string, std::vector<float>> input_f, state_f;
  for (auto& [k, v] : inputs) input_f[k].assign(v.begin(), v.end());
  if (state)
    for (auto& [k, v] : *state) state_f[k].assign(v.begin(), v.end());

  ExecResult res;
  res.largest_param_bytes.assign(ndev, 0);
  res.persistent_bytes.assign(ndev, 0);
  res.gradient_bytes.assign(ndev, 0);
  for (const ir::Graph* g : graphs) {
    for (auto& o : g->outputs) res.outputs[o.name].assign(ir::num_elements(global_shape((*g)[o.value])), 0.0);
    for (auto& n : g->nodes)
      if (n.op == Op::kParameter) res.params[n.name].assign(ir::num_elements(global_shape(n)), 0.0);
  }
  std::mutex mu;

  // Per graph: which value updates each parameter, which values are
  // gradients, and the last use of every value, so buffers are freed as a
  // device would.
  const size_t stages = graphs.size();
  std::vector<std::vector<int>> updated_by_of(stages), last_use_of(stages);
  std::vector<std::vector<bool>> is_gradient_of(stages);
  for (size_t s = 0; s < stages; ++s) {
    const ir::Graph& g = *graphs[s];
    std::vector<int>& updated_by = updated_by_of[s];
    updated_by.assign(g.nodes.size(), -1);
    for (auto& u : g.updates) updated_by[u.target] = u.value;
    is_gradient_of[s].assign(g.nodes.size(), false);
    for (auto& gr : g.gradients) is_gradient_of[s][gr.value] = true;
    std::vector<int>& last_use = last_use_of[s];
    last_use.assign(g.nodes.size(), -1);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (int a : g.nodes[i].args) last_use[a] = static_cast<int>(i);
    for (auto& o : g.outputs) last_use[o.value] = static_cast<int>(g.nodes.size());
    // Parameters are persistent device state; update values live to the end.
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].op == Op::kParameter) last_use[i] = static_cast<int>(g.nodes.size());
    for (auto& u : g.updates) last_use[u.value] = static_cast<int>(g.nodes.size());
  }
  // Per graph and node: the statement the generated code runs there (the
  // buffer plan's), its name and its virtual-clock cost; the timeline marks
  // each as the emitted code does.
  struct Mark {
    bool statement = false, comm = false;
    std::string label;
    rt::OpCost cost;
  };
  std::vector<std::vector<Mark>> marks_of(stages);
  if (world.clock() != rt::ClockMode::kOff) {
    for (size_t s = 0; s < stages; ++s) {
      const ir::Graph& g = *graphs[s];
      marks_of[s].resize(g.nodes.size());
      for (const BufferPlan::Stmt& st : plan_buffers(g).stmts) {
        Mark& m = marks_of[s][st.node];
        m.statement = true;
        m.comm = is_comm_statement(g, st);
        m.label = statement_label(g.nodes[st.node]);
        m.cost = statement_cost(g, st);
      }
    }
  }

  world.run([&](int rank) {
    rt::Communicator& comm = world.comm(rank);
    rt::DeviceMemory& mem = world.memory(rank);
    const int stage = stage_of_rank(rank);
    const ir::Graph& g = *graphs[stage];
    const std::vector<int>& updated_by = updated_by_of[stage];
    const std::vector<int>& last_use = last_use_of[stage];
    const std::vector<bool>& is_gradient = is_gradient_of[stage];
    rt::Timeline& clock = world.timeline(rank);
    // The device at `position` on `axis` with this device's other coordinates.
    auto peer_rank = [&](const std::string& axis, int position) {
      return ms.peer_on_axis(rank, mesh.index(axis), position);
    };
    std::vector<rt::Buffer> val(g.nodes.size());
    auto free_operands = [&](int id) {
      for (int a : g.nodes[id].args)
        if (last_use[a] == id) val[a] = rt::Buffer();
    };
    // A bucket of all-reduces (see all_reduce_bucket_end): results, then one
    // packed buffer, one collective, unpack. Generated code reduces the same
    // elements in the members' own buffers (emit_bucket), with the same
    // chunks, so the same results.
    auto run_bucket = [&](int first, int end) {
      const Node& head = g.nodes[first];
      size_t total = 0;
      for (int m = first; m < end; ++m) {
        val[m] = rt::Buffer(static_cast<size_t>(ir::num_elements(g.nodes[m].shape)), &mem);
        total += val[m].size();
      }
      // One packed buffer of the bucket's element type (bucket_all_reduces
      // groups one type per bucket).
      auto reduce_packed = [&](auto& packed) {
        size_t at = 0;
        for (int m = first; m < end; ++m) {
          const float* x = val[g.nodes[m].args[0]].data();
          for (size_t i = 0; i < val[m].size(); ++i)
            packed[at + i] = static_cast<std::remove_reference_t<decltype(packed[0])>>(x[i]);
          at += val[m].size();
        }
        comm.all_reduce(packed.data(), total, group_of(mesh, ms, rank, head.axes),
                        reduce_op(head.reduce));
        at = 0;
        for (int m = first; m < end; ++m) {
          for (size_t i = 0; i < val[m].size(); ++i) val[m][i] = static_cast<float>(packed[at + i]);
          at += val[m].size();
        }
      };
      if (head.dtype == ir::DType::kBF16) {
        rt::BasicBuffer<rt::bf16> packed(total, &mem);
        reduce_packed(packed);
      } else {
        rt::Buffer packed(total, &mem);
        reduce_packed(packed);
      }
      for (int m = first; m < end; ++m) free_operands(m);
    };
    // Gradient buffers are counted as they are made (they may be freed soon after).
    auto count_gradient = [&](int id) {
      if (is_gradient[id]) res.gradient_bytes[rank] += val[id].bytes();
    };
    for (size_t id = 0; id < g.nodes.size(); ++id) {
      if (!marks_of[stage].empty() && marks_of[stage][id].statement) {
        const Mark& m = marks_of[stage][id];
        if (m.comm)
          clock.comm_op(m.label);
        else
          clock.op(m.label, m.cost);
      }
      const int bucket_end = all_reduce_bucket_end(g, static_cast<int>(id));
      if (bucket_end > static_cast<int>(id) + 1) {
        run_bucket(static_cast<int>(id), bucket_end);
        for (int m = static_cast<int>(id); m < bucket_end; ++m) count_gradient(m);
        id = bucket_end - 1;
        continue;
      }
      const Node& n = g.nodes[id];
      const int64_t count = ir::num_elements(n.shape);
      if (n.op == Op::kSend) {  // bf16 values travel as bf16
        const int dst = peer_rank(n.axes[0], n.ints[0]);
        const auto tag = static_cast<uint64_t>(n.ints[1]);
        if (n.dtype == ir::DType::kBF16) {
          const std::vector<rt::bf16> x = to_bf16(val[n.args[0]].data(), static_cast<size_t>(count));
          comm.send(x.data(), static_cast<size_t>(count), dst, tag);
        } else {
          comm.send(val[n.args[0]].data(), static_cast<size_t>(count), dst, tag);
        }
        free_operands(static_cast<int>(id));
        continue;
      }
      rt::Buffer out(static_cast<size_t>(count), &mem);
      auto arg = [&](int i) -> const float* { return val[n.args[i]].data(); };
      auto arg_shape = [&](int i) -> const Shape& { return g.nodes[n.args[i]].shape; };
      auto arg_count = [&](int i) { return static_cast<size_t>(ir::num_elements(arg_shape(i))); };
      switch (n.op) {
        case Op::kParameter: {
          const Shape gs = global_shape(n);
          auto off = block_offset(*n.sharding, n.shape, mesh, rank);
          auto it = state_f.find(n.name);
          if (it != state_f.end())
            take_block(it->second.data(), gs, off, n.shape, out.data());
          else
            rt::init_block(init_spec(n.init, n.name, gs), seed, gs.data(), off.data(), n.shape.data(),
                           static_cast<int>(n.shape.size()), out.data());
          res.largest_param_bytes[rank] = std::max(res.largest_param_bytes[rank], out.bytes());
          res.persistent_bytes[rank] += out.bytes();
          break;
        }
        case Op::kIota: {
          const int d = n.ints[0];
          const int64_t base = block_offset(*n.sharding, n.shape, mesh, rank)[d];
          int64_t inner = 1;
          for (size_t i = d + 1; i < n.shape.size(); ++i) inner *= n.shape[i];
          for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(base + (i / inner) % n.shape[d]);
          break;
        }
        case Op::kRandomUniform: {
          const Shape gs = global_shape(n);
          auto off = block_offset(*n.sharding, n.shape, mesh, rank);
          auto gst = strides_of(gs);
          const uint64_t key = random_stream_key(n.key, arg(0)[0]);
          std::vector<int64_t> idx(n.shape.size(), 0);
          for (int64_t e = 0; e < count; ++e) {
            int64_t gi = 0;
            for (size_t d = 0; d < idx.size(); ++d) gi += (off[d] + idx[d]) * gst[d];
            out[e] = rt::uniform_at(key, static_cast<uint64_t>(gi));
            for (int d = static_cast<int>(idx.size()) - 1; d >= 0; --d) {
              if (++idx[d] < n.shape[d]) break;
              idx[d] = 0;
            }
          }
          break;
        }
        case Op::kSlice: {
          const Shape& in = arg_shape(0);
          auto st = strides_of(in);
          rt::strided_copy(arg(0) + n.ints[1] * st[n.ints[0]], n.shape, st, out.data());
          break;
        }
        case Op::kPad: {
          // out is zeroed; copy the operand into its window.
          auto ost = strides_of(n.shape);
          const Shape& in = arg_shape(0);
          std::vector<int64_t> idx(in.size(), 0);
          const int64_t n_in = ir::num_elements(in);
          for (int64_t e = 0; e < n_in; ++e) {
            int64_t o = 0;
            for (size_t d = 0; d < idx.size(); ++d)
              o += (idx[d] + (static_cast<int>(d) == n.ints[0] ? n.ints[1] : 0)) * ost[d];
            out[o] = arg(0)[e];
            for (int d = static_cast<int>(idx.size()) - 1; d >= 0; --d) {
              if (++idx[d] < in[d]) break;
              idx[d] = 0;
            }
          }
          break;
        }
        case Op::kAddSlice: {
          // The target, plus the update at its window along dim.
          std::copy(arg(0), arg(0) + count, out.data());
          auto st = strides_of(n.shape);
          const Shape& in = arg_shape(1);
          std::vector<int64_t> idx(in.size(), 0);
          const int64_t n_in = ir::num_elements(in);
          for (int64_t e = 0; e < n_in; ++e) {
            int64_t o = 0;
            for (size_t d = 0; d < idx.size(); ++d)
              o += (idx[d] + (static_cast<int>(d) == n.ints[0] ? n.ints[1] : 0)) * st[d];
            out[o] += arg(1)[e];
            for (int d = static_cast<int>(idx.size()) - 1; d >= 0; --d) {
              if (++idx[d] < in[d]) break;
              idx[d] = 0;
            }
          }
          break;
        }
        case Op::kInput:
          take_block(input_f.at(n.name).data(), global_shape(n), block_offset(*n.sharding, n.shape, mesh, rank),
                     n.shape, out.data());
          break;
        case Op::kConstant:
          rt::fill(out.data(), count, static_cast<float>(n.scalar));
          break;
        case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kDiv: case Op::kPow: case Op::kMax:
        case Op::kMin: case Op::kGreater: case Op::kEqual:
          for (int64_t i = 0; i < count; ++i) out[i] = apply_binary(n.op, arg(0)[i], arg(1)[i]);
          break;
        case Op::kNeg: case Op::kRelu: case Op::kGelu: case Op::kTanh: case Op::kExp: case Op::kLog:
        case Op::kSqrt: case Op::kSin: case Op::kCos: case Op::kAbs: case Op::kSigmoid: case Op::kErf:
        case Op::kLog1p: case Op::kExpm1: case Op::kConvert:
          for (int64_t i = 0; i < count; ++i) out[i] = apply_unary(n.op, arg(0)[i]);
          break;
        case Op::kSelect:
          for (int64_t i = 0; i < count; ++i) out[i] = rt::select(arg(0)[i], arg(1)[i], arg(2)[i]);
          break;
        case Op::kReshape:
        case Op::kShardingConstraint:
          rt::copy(arg(0), out.data(), count);
          break;
        case Op::kBroadcast: {
          Shape expanded(n.shape.size(), 1);
          for (size_t i = 0; i < n.ints.size(); ++i) expanded[n.ints[i]] = arg_shape(0)[i];
          rt::broadcast(arg(0), expanded, n.shape, out.data());
          break;
        }
        case Op::kTranspose:
          rt::transpose(arg(0), arg_shape(0), n.ints, out.data());
          break;
        case Op::kReduce:
          rt::reduce(arg(0), arg_shape(0), n.ints, reduce_op(n.reduce), out.data());
          break;
        case Op::kDot:
          local_dot(n, arg_shape(0), arg(0), arg_shape(1), arg(1), out.data());
          break;
        case Op::kAllGather:
          in_dtype(n, arg(0), arg_count(0), out.data(), count, [&](const auto* x, auto* y) {
            rt::all_gather_dim(comm, group_of(mesh, ms, rank, n.axes), x, arg_shape(0), n.dim, y);
          });
          break;
        case Op::kReduceScatter:
          in_dtype(n, arg(0), arg_count(0), out.data(), count, [&](const auto* x, auto* y) {
            rt::reduce_scatter_dim(comm, group_of(mesh, ms, rank, n.axes), x, arg_shape(0), n.dim, y,
                                   reduce_op(n.reduce));
          });
          break;
        case Op::kAllReduce:
          in_dtype(n, arg(0), count, out.data(), count, [&](const auto* x, auto* y) {
            rt::copy(x, y, count);
            comm.all_reduce(y, count, group_of(mesh, ms, rank, n.axes), reduce_op(n.reduce));
          });
          break;
        case Op::kAllToAll:
          in_dtype(n, arg(0), arg_count(0), out.data(), count, [&](const auto* x, auto* y) {
            rt::all_to_all_dim(comm, group_of(mesh, ms, rank, n.axes), x, arg_shape(0), n.dim, n.dim2, y);
          });
          break;
        case Op::kRingDot: {
          const std::string ring_label = clock.mode() == rt::ClockMode::kOff ? "" : statement_label(n);
          const RingStepCost ring_cost = ring_step_cost(g, n, static_cast<int>(mesh.size(n.axes)));
          if (n.dtype == ir::DType::kBF16) {
            const std::vector<rt::bf16> l = to_bf16(arg(0), arg_count(0)), r = to_bf16(arg(1), arg_count(1));
            std::vector<rt::bf16> o(count);
            ring_dot(comm, group_of(mesh, ms, rank, n.axes), n, arg_shape(0), l.data(), arg_shape(1), r.data(),
                     o.data(), mem, clock, ring_label, ring_cost);
            for (int64_t i = 0; i < count; ++i) out[i] = o[i];
          } else {
            ring_dot(comm, group_of(mesh, ms, rank, n.axes), n, arg_shape(0), arg(0), arg_shape(1), arg(1),
                     out.data(), mem, clock, ring_label, ring_cost);
          }
          break;
        }
        case Op::kLocalSlice: {
          const rt::Group grp = group_of(mesh, ms, rank, n.axes);
          rt::slice_block(arg(0), arg_shape(0), n.dim, grp.size(), grp.position, out.data());
          break;
        }
        case Op::kPPermute: {
          rt::Permutation perm;
          for (size_t i = 0; i + 1 < n.ints.size(); i += 2) perm.emplace_back(n.ints[i], n.ints[i + 1]);
          in_dtype(n, arg(0), count, out.data(), count, [&](const auto* x, auto* y) {
            comm.ppermute(x, y, static_cast<size_t>(count), group_of(mesh, ms, rank, n.axes), perm);
          });
          break;
        }
        case Op::kAxisIndex:
          out[0] = static_cast<float>(group_of(mesh, ms, rank, n.axes).position);
          break;
        case Op::kRecv: {
          const int src = peer_rank(n.axes[0], n.ints[0]);
          const auto tag = static_cast<uint64_t>(n.ints[1]);
          if (n.dtype == ir::DType::kBF16) {
            rt::BasicBuffer<rt::bf16> x(static_cast<size_t>(count), &mem);
            comm.recv(x.data(), static_cast<size_t>(count), src, tag);
            for (int64_t i = 0; i < count; ++i) out[i] = x[i];
          } else {
            comm.recv(out.data(), static_cast<size_t>(count), src, tag);
          }
          break;
        }
        case Op::kSend:
          internal_error("send handled above");
        case Op::kShardMap:
          internal_error("shard_map in a per-device program");
        case Op::kKernel:
        case Op::kKernelOutput:
          internal_error("execute runs no GPU kernel (" + n.kernel +
                         "): it runs programs lowered without PipelineOptions::gpu_kernels");
      }
      if (n.dtype == ir::DType::kBF16)
        for (int64_t i = 0; i < count; ++i) out[i] = rt::round_to_bf16(out[i]);
      if (n.dtype == ir::DType::kI32)
        for (int64_t i = 0; i < count; ++i) out[i] = std::trunc(out[i]);
      val[id] = std::move(out);
      count_gradient(static_cast<int>(id));
      free_operands(static_cast<int>(id));
    }
    std::lock_guard<std::mutex> lock(mu);
    for (size_t id = 0; id < g.nodes.size(); ++id) {
      const Node& n = g.nodes[id];
      if (n.op != Op::kParameter) continue;
      const int v = updated_by[id] >= 0 ? updated_by[id] : static_cast<int>(id);
      put_block(res.params[n.name], global_shape(n), block_offset(*n.sharding, n.shape, mesh, rank), n.shape,
                val[v].data());
    }
    for (auto& o : g.outputs) {
      const Node& n = g[o.value];
      put_block(res.outputs[o.name], global_shape(n), block_offset(*n.sharding, n.shape, mesh, rank), n.shape,
                val[o.value].data());
    }
  });
  for (int r = 0; r < ndev; ++r) {
    res.comm.push_back(world.comm(r).stats());
    res.peak_bytes.push_back(world.memory(r).peak());
  }
  if (options.trace) *options.trace = world.trace();
  res.device_times = world.device_times();
  return res;
}

}  // namespace

ExecResult execute_partitioned(const ir::Graph& g, const HostValues& inputs, uint64_t seed,
                               const HostValues* state, const ExecOptions& options) {
  return run_graphs({&g}, "", inputs, seed, state, options);
}

ExecResult execute_stages(const std::vector<ir::Graph>& stages, const HostValues& inputs, uint64_t seed,
                          const HostValues* state, const ExecOptions& options) {
  if (stages.empty() || !stages[0].pipeline) internal_error("execute_stages needs a pipelined program's stages");
  std::vector<const ir::Graph*> graphs;
  for (const ir::Graph& g : stages) graphs.push_back(&g);
  return run_graphs(graphs, stages[0].pipeline->axis, inputs, seed, state, options);
}

ExecResult execute(const Lowered& lowered, const HostValues& inputs, uint64_t seed, const HostValues* state,
                   const ExecOptions& options) {
  if (!lowered.stage_graphs.empty()) return execute_stages(lowered.stage_graphs, inputs, seed, state, options);
  return execute_partitioned(lowered.partitioned, inputs, seed, state, options);
}

}  // namespace sharc

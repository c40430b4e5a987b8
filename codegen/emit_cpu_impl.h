// The CPU renderer's class, shared by its three sources (emit_cpu.h is the
// renderer's interface):
//  - emit_cpu.cpp: run() (the files, filled from the templates) and the
//    step's structure: its statements grouped into parts and files, scanned
//    layers folded into loops, a pipeline stage's units, the updates that
//    end a training step;
//  - emit_cpu_api.cpp: the program's API as text: the tensor tables, the
//    Inputs/Outputs setters and checks, the Device's fields and setup,
//    initialisation, parameter lookup and whole-parameter transfer;
//  - emit_cpu_stmt.cpp: one statement of the step as C++ for a device
//    thread: fused elementwise loops, GEMMs, ring dots, collectives and
//    buckets, each with its timeline mark.
//  - emit_cuda_stmt.cpp: what only the CUDA renderer (EmitOptions::backend)
//    spells: a fusion group as a dialect kernel, a composite region's part
//    as a KernelSet launch.
// The CUDA renderer is this class: it prints the same emission plan, its
// statements calling runtime/gpu/device_ops.h and device_collectives.h
// where the CPU's call the runtime's (call(), comm_call()).
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "codegen/buffer_plan.h"
#include "codegen/cpp_writer.h"
#include "codegen/emission_plan.h"
#include "codegen/emit_cpu.h"
#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/op_cost.h"
#include "codegen/report.h"
#include "codegen/ring_plan.h"
#include "runtime/team.h"

namespace sharc::emit_cpu_detail {

using cpp::braced;
using cpp::CodeWriter;
using cpp::double_literal;
using cpp::float_literal;
using cpp::init_kind_name;
using cpp::join;
using cpp::quoted;
using cpp::reduce_op;
using ir::Node;
using ir::Op;
using ir::Shape;

// ---------------------------------------------------------------------------

inline std::string loc_prefix(const Node& n) {
  std::string s = n.loc.known() ? n.loc.str() : "";
  if (!n.name.empty() && !ir::is_source(n.op)) s += (s.empty() ? "" : " ") + n.name;
  return s.empty() ? "" : s + ": ";
}

inline std::string shape_comment(const Node& n) {
  return ir::shape_str(n.shape, n.dtype) + (n.sharding ? " " + n.sharding->str() : "");
}

class CpuEmitter {
 public:
  // The plan (plan_emission) decides fusion, buffers, names and the
  // schedule; this class only spells it as C++ for a device thread, where the
  // two streams are one: plan order respects every wait, and a ring's
  // transfers overlap its GEMMs through ppermute_start / ppermute_wait.
  // A pipelined program passes its stage plan and stage programs: the API
  // and the Device members come from the whole program `g`, and each
  // stage's body from a CpuEmitter of that stage's graph (device_scope = g).
  CpuEmitter(const ir::Graph& g, const EmitOptions& o, const StagePlan* plan = nullptr,
             const std::vector<ir::Graph>* stages = nullptr, const ir::Graph* device_scope = nullptr)
      : g_(g),
        o_(o),
        mesh_(g.mesh),
        plan_stages_(plan),
        stages_(stages),
        pipe_axis_(g.pipeline ? g.pipeline->axis : ""),
        ep_(plan_emission(g, device_scope)),
        plan_(ep_.buffers),
        var_(ep_.var),
        axis_var_(ep_.axis_var),
        field_(ep_.input_field),
        out_field_(ep_.output_field),
        group_var_(ep_.group_var),
        locals_(ep_.locals) {
    if (stages_)
      for (size_t s = 0; s < stages_->size(); ++s)
        for (const Node& v : (*stages_)[s].nodes)
          if (v.op == Op::kParameter) holders_[v.name].push_back(static_cast<int>(s));
  }

  EmittedFiles run();

  // `text` wrapped as comment lines of at most 80 columns, words unbroken:
  // the first line goes on after `first_col` columns of the caller's, the
  // others start with "// ".
  static std::string comment_lines(const std::string& text, size_t first_col);

  // Gives each mark its file and line: marks were recorded in the order
  // they were written, which is the order of the files and of their lines,
  // one per line that starts (after its indentation) with "timeline.op(" or
  // "timeline.comm_op(", and each such line names its label.
  static void place_marks(EmittedFiles& f);

 private:
  // ---- small spellings ----------------------------------------------------

  std::string banner() const;

  std::string mesh_shape_literal() const;

  Shape global_shape(const Node& v) const;

  static std::vector<int64_t> strides_of(const Shape& s);

  // {{"data"}, {}}: a Spec initializer (mesh axes per dimension).
  static std::string spec_literal(const ir::Sharding& s);

  // This device's block index along dim d of sharding s: the mixed-radix
  // number of its coordinates on the dimension's axes, as block_index() in
  // partition_per_device. Empty when the dim is not split.
  std::string block_index_expr(const ir::Sharding& s, size_t d) const;

  // The global coordinate where this device's block of v starts along dim d:
  // "0", or e.g. "dev.model_index * 256".
  std::string block_start_expr(const Node& v, size_t d) const;

  // Element offset of this device's block within the global row-major array:
  // the sum over split dims of block start * stride ("0" when unsplit).
  std::string block_offset_expr(const Node& v) const;

  // Pointer to a value's data and its i-th element, by where it lives.
  std::string ptr(int v) const;
  std::string elem_at(int v, const std::string& index) const;
  std::string elem(int v) const { return elem_at(v, "i"); }
  std::string elem0(int v) const;

  // ---- header pieces -------------------------------------------------------

  using Io = EmissionPlan::Io;
  const std::vector<Io>& ios(bool inputs) const { return inputs ? ep_.inputs : ep_.outputs; }

  // The header's shapes and layouts. The layouts and the tables are built at
  // run time (vectors of strings), so the header only declares them and
  // NAME.cpp defines them (tensor_definitions): an inline variable would be
  // compiled again in every file that includes the header, seconds each for
  // a model with hundreds of parameters.
  std::string tensor_info() const;

  // NAME.cpp's definitions of what tensor_info declares.
  std::string tensor_definitions() const;

  // kParameters, kInputs, kOutputs (sharc::rt::TensorInfo rows) and their
  // checked lookups: what a driver iterates instead of hard-coding shapes.
  // The header declares them and their lookups (`define` false); NAME.cpp
  // defines them.
  void tables(CodeWriter& w, bool define) const;

  // "; optimizer state of \"w\"; updated every step" where it applies.
  std::string training_note(int id) const;

  // Inputs::set / Outputs::set: a field by its input or output name, the
  // span's size checked against the table. Inputs have two: float spans for
  // f32 inputs, int32_t spans for i32 ones (`dtype`); each names the other
  // for an input of the other type.
  std::string io_set(bool inputs, ir::DType dtype = ir::DType::kF32) const;

  // forward() refuses an input or output with neither a global array nor
  // a block for every local device, naming it (rt::check_bound).
  std::string io_checks() const;

  // After a forward() on several processes: every bound global output array
  // gets the blocks the other processes' devices wrote (rt::complete_global).
  std::string complete_outputs() const;

  // Program::holds_parameter: in a pipeline, a parameter lives on the stages
  // that read it; otherwise on every device.
  std::string holds_parameter() const;

  std::string io_fields(bool inputs) const;

  // ---- source pieces ------------------------------------------------------

  std::string init_specs() const;

  std::string device_fields() const;

  // The step arena each device reserves: the size the buffer plan's replay
  // of one step reaches (simulate_memory), the largest stage's when
  // pipelined. The runtime places blocks alike and grows the arena after a
  // step that needed more, so a wrong figure costs allocations, not results.
  uint64_t arena_bytes() const;

  std::string device_setup() const;

  // Pipelined: the condition that a device whose pipe coordinate is `coord`
  // holds parameter v ("" when every device does).
  std::string held_on(const Node& v, const std::string& coord) const;
  std::string held_here(const Node& v) const;

  std::string init_body() const;

  std::string parameter_lookup(bool size) const;

  // ---- the SPMD body ------------------------------------------------------

  // One statement of the body (BufferPlan::Stmt): a node, for a fused loop
  // its root, or for an all-reduce bucket its first member.
  using Stmt = BufferPlan::Stmt;

  // The node a statement is attributed to: itself, or for a fused loop whose
  // root has no DSL line (operators record none) the first op in it that has.
  // Its sharding is the root's: the loop writes the root's buffer.
  Node anchor(const Stmt& s) const;

  // Statements are grouped into sections by layer label ("dot1"), or by DSL
  // line for ops outside any module. Returns {key, title}.
  std::pair<std::string, std::string> section(const Node& v) const;

  static std::string rule(const std::string& title);

  // "// <loc> <label>: <in shardings> -> <out sharding> => <what>"
  std::string describe(const Node& v, const std::vector<int>& reads,
                       const std::string& what) const {
    std::vector<std::string> ins;
    for (int r : reads) {
      const std::string s = g_[r].sharding->str();
      if (std::find(ins.begin(), ins.end(), s) == ins.end()) ins.push_back(s);
    }
    std::string change =
        ins.empty() ? v.sharding->str() : join(ins, ", ") + " -> " + v.sharding->str();
    return "// " + loc_prefix(v) + change + " => " + what;
  }

  // The runtime's buffer and element types of a value's dtype.
  static std::string buf_type(ir::DType t);
  static std::string elem_type(ir::DType t);
  // An f32 expression stored into an element of type t (bf16: rounded to
  // nearest even, as every op's result is).
  static std::string stored(ir::DType t, const std::string& e);

  // A statement's result buffer: from the device's step arena, zeroed unless
  // the statement writes every element (`writes_all`); a parameter's new
  // value outlives the step (rt::persistent), so it is not placed there.
  // Every buffer of the step is a member of the step's struct (split_step),
  // so this assigns it; a parameter's buffer updated in place is a reference
  // member, and gets a comment. Records v in declared_.
  std::string declare(int v, bool writes_all = false);

  static std::string unary_expr(Op op, const std::string& x);

  static std::string binary_expr(Op op, const std::string& a, const std::string& b);

  // A fused elementwise loop: inlined nodes become named scalars (one
  // statement each, so float rounding matches the interpreter's per-op
  // buffers), the root is stored.
  void emit_fused(CodeWriter& w, const Stmt& s);

  // Local dot_general exactly as execute.cpp's local_dot() (local_dot_layout):
  // one batched GEMM, transposed operands passed with BLAS's transpose flags,
  // operands in any other order copied first.
  void emit_dot(CodeWriter& w, const Stmt& s);

  // The statements of local_dot() in execute.cpp on operands of shapes ls, rs
  // at the pointer expressions lp, rp, writing out_expr; transposed copies
  // are named after `stem` and freed after the GEMM.
  void emit_local_dot(CodeWriter& w, const ir::DotDims& d, const Shape& ls, std::string lp,
                      const Shape& rs, std::string rp, const std::string& out_expr,
                      const std::string& stem, ir::DType dtype) {
    const LocalDotLayout layout = local_dot_layout(d, ls, rs);
    const int64_t B = layout.B, M = layout.M, N = layout.N, K = layout.K;
    std::vector<std::string> temps;
    auto transposed = [&](const Shape& shape, const std::string& x, const std::vector<int>& perm,
                          const std::string& role) {
      const std::string t = locals_.user(stem + "_" + role);
      Shape moved;
      for (int p : perm) moved.push_back(shape[p]);
      w.line(buf_type(dtype) + " " + t + "(" + std::to_string(ir::num_elements(shape)) +
             ", &mem, rt::uninitialized);  // " +
             ir::shape_str(moved, dtype) + ": " + role + " as " +
             (role == "lhs" ? "(batch, free, contract)" : "(batch, contract, free)"));
      w.line(call("transpose") + x + ", " + braced(shape) + ", " + braced(perm) + ", " + t +
             ".data());");
      temps.push_back(t);
      return t + ".data()";
    };
    if (layout.transpose_lhs) lp = transposed(ls, lp, layout.lhs_perm, "lhs");
    if (layout.transpose_rhs) rp = transposed(rs, rp, layout.rhs_perm, "rhs");
    w.line((cuda() ? "gpu::gemm(gpu_dev, /*batch=*/" : "rt::gemm(/*batch=*/") + std::to_string(B) + ", /*M=*/" + std::to_string(M) + ", /*N=*/" +
           std::to_string(N) + ", /*K=*/" + std::to_string(K) + ",");
    w.line("         " + lp + (layout.trans_lhs ? ", /*trans_a=*/true, " : ", false, ") + rp +
           (layout.trans_rhs ? ", /*trans_b=*/true, " : ", false, ") + out_expr + ");");
    for (auto& t : temps) w.line(t + " = " + buf_type(dtype) + "();");
  }

  // A RingDot exactly as execute.cpp's ring_dot() runs it (ring_plan()
  // decides the shapes): one loop over the ring's steps; in each, the
  // ppermutes start before the GEMMs and are waited for after them. Half 0
  // of every block travels right (to p + 1), half 1 (bidirectional) left.
  void emit_ring_dot(CodeWriter& w, const Stmt& s);

  std::string group(const Node& v) const { return "dev." + group_var_.at(v.axes); }

  // random_uniform exactly as execute.cpp: the stream key mixes the node's key
  // (a hash of its DSL site) with the seed operand at run time, and element
  // e of this block draws from its GLOBAL flat index (rt::uniform_at), so
  // every mesh gives the same values. One rt::uniform_fill per run that is
  // contiguous both here and in the global tensor: over dimensions c.. where
  // every dimension after c is whole on this device (c = rank - 1 at worst).
  void emit_random_uniform(CodeWriter& w, const Stmt& s);

  // CUDA: a Kernel node (passes/use_gpu_kernels.h), one KernelSet launch
  // writing the node's buffer and its KernelOutputs' (emit_cuda_stmt.cpp).
  void emit_kernel(CodeWriter& w, const Stmt& s);
  // KernelSet::NAME({.field = value, ...}): the fields packed into lines.
  void emit_launch(CodeWriter& w, const std::string& kernel, const std::vector<std::string>& fields);
  // "rt::DType::kBF16": a launch's element type.
  static std::string dtype_literal(ir::DType t);
  // A GEMM with its epilogue (a kernel node "gemm_bias", "gemm_gelu",
  // "gemm_bias_gelu" or "gemm_dgelu"): one KernelSet::gemm on the dot's
  // local layout, `pre_gelu` the buffer of gelu's argument it also writes
  // ("nullptr": none).
  void emit_gemm(CodeWriter& w, const Stmt& s, const std::string& pre_gelu);
  // The multi-tensor AdamW launch (a kernel node "adamw"): its tensor table
  // and chunk list uploaded to the device, the new values in place.
  void emit_adamw(CodeWriter& w, const Stmt& s);
  // The global norm launch (a kernel node "global_norm"): its tensor table
  // and chunk list uploaded into the launch's scratch, the partial sums after.
  void emit_global_norm(CodeWriter& w, const Stmt& s);
  // A multi-tensor launch's table (`rows` of `type`, one per tensor of
  // `sizes` elements) and chunk list, uploaded into its scratch (`what`
  // says what the scratch holds); the launch reads device_tensors and
  // device_chunks.
  void emit_tensor_table(CodeWriter& w, const Node& v, const std::string& type,
                         const std::vector<std::string>& rows, const std::vector<std::string>& sizes,
                         const std::string& what);

  // ---- scanned layers -----------------------------------------------------
  //
  // A scanned Layers (dsl/layers.h) computes every layer with the same code
  // up to which row of the stacked parameters it reads. Its values are
  // elements of member arrays indexed by the layer (emission_plan.h,
  // iteration_marker), its rows' offsets and random streams are marked with
  // the layer they depend on, and fold_layers writes the layers' statements
  // once, as a part called in a loop over l, when the text of every layer's
  // statements is the same relative to its layer (checked, not assumed).

  bool scanned(const Node& v) const;
  // A slice / add_slice of a scanned layer's own row of a stacked value.
  bool layer_row(const Node& v) const;
  // `value` (= layer + k) as text: a layer-relative marker in a layer's row
  // statement, else the number.
  std::string iter_int(const Node& v, int64_t value, int64_t k = 0) const;
  // The layer of a scanned layer's statement, as a marker ("l" in its loop).
  static std::string layer_ref(const Node& v, int64_t k = 0);
  // Whether a value's name is an element of a scanned layer's member array,
  // and that name without its layer marker.
  static bool per_layer(const std::string& var) { return var.find('\x01') != std::string::npos; }
  static std::string base_name(const std::string& var) { return var.substr(0, var.find('\x01')); }

  // Rewrites the layer markers of `text`, written for layer `at`: relative
  // to the loop variable l (relative = true), or as the literal layers.
  // Lines that free a value from outside the layers (marked \x05) are
  // dropped when relative (fold_layers re-adds them guarded), else kept.
  static std::string spell_layers(const std::string& text, int at, bool relative);

  // A copy-like statement's result in its operand's buffer
  // (BufferPlan::takes_buffer_of): prints the move and returns true, or
  // prints nothing and returns false.
  bool take_operand_buffer(CodeWriter& w, int v);

  // An all-reduce bucket: ONE all_reduce over its members' buffers, in
  // place (Communicator::all_reduce over segments), with the chunks and
  // results of execute.cpp's packed buffer. A member takes its operand's
  // buffer where the bucket is the operand's last reader
  // (BufferPlan::takes_buffer_of), and a copy of it otherwise.
  void emit_bucket(CodeWriter& w, const Stmt& s);

  // The statement's mark on the device's timeline (runtime/trace.h): its
  // name and, for computation, its virtual-clock cost (op_cost.h).
  void emit_mark(CodeWriter& w, const Stmt& s);

  // Records a mark just written (EmittedFiles::marks; run() finds its line).
  // Collectives and ring_dots carry the report's bytes per device.
  EmittedMark& record_mark(EmittedMark::Kind kind, int node, const rt::OpCost& cost);
  static std::string cost_literal(const rt::OpCost& c);

  // A window of `in` along dimension d inside `out` (pad, add_slice): the
  // elements after d (inner), the rows before it (outer), and one row's
  // extent in `in` and in `out`.
  struct Window {
    int64_t inner = 1, outer = 1, run = 0, out_run = 0;
  };
  static Window window(const Shape& in, const Shape& out, int d);

  void emit_stmt(CodeWriter& w, const Stmt& s);

  // ---- the CUDA renderer (emit_cuda_stmt.cpp) ---------------------------
  //
  // With Backend::kCuda the same plan is printed with every statement on
  // the device: runtime calls go to runtime/gpu/device_ops.h on the step's
  // gpu_dev (call()), a fusion group becomes a kernel in the dialect
  // (emit_fused, with the kernel's text going before the part that
  // launches it), a composite region's Kernel node becomes a KernelSet launch
  // (emit_kernel), and inputs and outputs cross between the caller's host
  // arrays and device buffers. Collectives go through device_collectives.h:
  // on the device buffers as they are where the host may touch them (the
  // simulator), else staged through host copies.

  bool cuda() const { return o_.backend == Backend::kCuda; }
  // The opening of a runtime call: "rt::copy(" for the CPU, "gpu::copy(gpu_dev, "
  // for CUDA.
  std::string call(const std::string& fn) const {
    return cuda() ? "gpu::" + fn + "(gpu_dev, " : "rt::" + fn + "(";
  }
  // A communicator call's opening: "comm.all_reduce(" for the CPU,
  // "gpu::all_reduce(gpu_dev, comm, " for CUDA (device_collectives.h); and a
  // tensor collective's: "rt::all_gather_dim(comm, " or
  // "gpu::all_gather_dim(gpu_dev, comm, ".
  std::string comm_call(const std::string& fn) const {
    return cuda() ? "gpu::" + fn + "(gpu_dev, comm, " : "comm." + fn + "(";
  }
  std::string collective_call(const std::string& fn) const {
    return cuda() ? "gpu::" + fn + "(gpu_dev, comm, " : "rt::" + fn + "(comm, ";
  }
  // A fusion group's kernel: its name (a scanned layer's statements share
  // one kernel, named without the layer) and parameters (the buffers it reads,
  // then those it writes), set while emit_fused writes its body.
  struct FusedKernel {
    std::string name;
    std::map<int, std::string> param;  // value -> the kernel parameter that points at it
    std::vector<int> reads, writes;
  };
  FusedKernel fused_kernel(const Stmt& s) const;
  // The kernel's definition (its loop body written by emit_fused) for
  // pending_kernels_, and the launch at the statement.
  void finish_fused_kernel(CodeWriter& w, const Stmt& s, const FusedKernel& k, const std::string& body);

  // Each device writes its block of every output into the block the caller
  // bound for it, if any, and into the caller's global array, if any. A block
  // held by several devices (replicated over some axes) is written into the
  // global array by the one at coordinate 0 on those axes only, which marks
  // it written (for rt::complete_global across processes).
  void emit_output(CodeWriter& w, const ir::Output& o);

  // The mesh axes a value is replicated over (size > 1, used by no dimension):
  // its block is held by several devices, and the one at coordinate 0 on them
  // writes it. Returns the guard conditions and the quoted axis names.
  std::pair<std::vector<std::string>, std::vector<std::string>> replicas(const Node& v) const;

  std::string replicated_note(const Node& v) const;

  // Copies this device's block of v (at `src`, local row-major) into its place
  // in the global row-major array `dst`, guarded so that one replica writes
  // (and by `also`, when given); `mark` is a statement that records the write.
  void emit_block_to_global(CodeWriter& w, const Node& v, const std::string& src,
                            const std::string& dst, const std::string& what,
                            const std::string& also = "", const std::string& mark = "") const {
    const Shape gs = global_shape(v);
    std::vector<std::string> owner = replicas(v).first;
    if (!also.empty()) owner.insert(owner.begin(), also);
    const bool guarded = !owner.empty();
    if (guarded) w.open("if (" + join(owner, " && ") + ")");
    if (!mark.empty()) w.line(mark);
    if (v.shape.empty()) {
      w.line(dst + "[0] = " + src + "[0];");
    } else {
      // Copy whole runs: dims after k are not split, so each block row from
      // dim k on is contiguous in both arrays.
      int k = static_cast<int>(v.shape.size()) - 1;
      while (k > 0 && v.shape[k] == gs[k]) --k;
      const auto gst = strides_of(gs), lst = strides_of(v.shape);
      int64_t chunk = 1;
      for (size_t d = k; d < v.shape.size(); ++d) chunk *= v.shape[d];
      std::vector<std::string> src_terms, dst_terms;
      int loops = 0;
      for (int d = 0; d < k; ++d) {
        const std::string start = block_start_expr(v, d);
        std::string idx;
        if (v.shape[d] > 1) {
          idx = "i" + std::to_string(d);
          w.open("for (int64_t " + idx + " = 0; " + idx + " < " + std::to_string(v.shape[d]) +
                 "; ++" + idx + ")");
          ++loops;
          src_terms.push_back(idx + " * " + std::to_string(lst[d]));
        }
        std::string at = start == "0" ? idx : idx.empty() ? start : "(" + start + " + " + idx + ")";
        if (!at.empty()) dst_terms.push_back(at + " * " + std::to_string(gst[d]));
      }
      const std::string start_k = block_start_expr(v, k);
      if (start_k != "0")
        dst_terms.push_back(gst[k] == 1 ? start_k : start_k + " * " + std::to_string(gst[k]));
      const std::string s = src_terms.empty() ? src : src + " + " + join(src_terms, " + ");
      const std::string d = dst_terms.empty() ? dst : dst + " + " + join(dst_terms, " + ");
      w.line("std::copy_n(" + s + ", " + std::to_string(chunk) + ", " + d + ");");
      for (int l = loops - 1; l >= 0; --l) w.close();
    }
    if (guarded) w.close(what);
  }

  // The statement that fills `dst` (this device's block of v, local
  // row-major) from the global row-major array `src`, as for inputs.
  std::string block_from_global(const Node& v, const std::string& src,
                                const std::string& dst) const {
    if (v.shape.empty()) {
      const std::string data = ".data()";
      const bool buffer = dst.size() > data.size() && dst.ends_with(data);
      return (buffer ? dst.substr(0, dst.size() - data.size()) : dst) + "[0] = " + src + "[0];";
    }
    const std::string off = block_offset_expr(v);
    return "rt::strided_copy(" + (off == "0" ? src : src + " + " + off) + ", " + braced(v.shape) +
           ", " + braced(strides_of(global_shape(v))) + ", " + dst + ");";
  }

  // set_parameter / get_parameter: one branch per parameter, run for every
  // device in turn on the caller's thread.
  std::string parameter_transfer(bool set) const;

  // ---- the step -------------------------------------------------------------
  //
  // The step's statements are printed one by one (each with the section rule
  // above it when the section changes) and then put together as parts, each a
  // member function of a struct that holds every buffer of the step:
  // Program::Step for a whole program, Program::Step::StageN for the program
  // of pipeline stage N (pipelined_body).

  struct Chunk {
    std::string heading;  // a pipeline stage's unit title, at the first statement of a unit
    std::string rule;     // the section's rule line, "" inside a section
    std::string text;     // the statement, its mark and the buffers freed after it
    std::vector<std::pair<std::string, std::string>> kernels;  // CUDA: the kernels it launches (name, definition)
    std::vector<int> declares;  // the values whose buffers it makes (declare())
    int lines = 0;
    int unit = -1;             // a pipeline stage's unit (StagePlan::units), -1 for a whole program
    std::string phase, block;  // the part it belongs to (see part_of)
    int repeat = -1, iteration = -1;  // a scanned layer's statement (Node::repeat, iteration)
    size_t marks_begin = 0, marks_end = 0;  // the marks it recorded (marks_)
    int loop = -1;         // fold_layers: written once for the layers of loops_[loop]
    bool dropped = false;  // fold_layers: another layer's copy of a loop's statement
  };

  std::vector<Chunk> step_chunks();

  // The part of the step a statement belongs to: its phase ("forward",
  // "backward" for the gradient computation, "optimizer" for the step after
  // the micro-batches) and its block, the first component of its layer label
  // ("h0" for "h0/attn/qkv"; "" outside layers, which joins the part before).
  static std::pair<std::string, std::string> part_of(const Node& v);

  // A pipeline stage's unit as a part's name: "pre", "forward_mb3",
  // "backward_mb0_chunk5" (with several model chunks per stage: the model's
  // chunk 5), "post".
  std::string unit_name(int unit) const;

  // A part of a step holds at most this many statement lines, unless one
  // statement is longer: GCC's time on a function grows faster than its
  // length, so a deep model's step compiles in time linear in its depth.
  static constexpr int kMaxPartLines = 800;

  struct Part {
    std::string name;  // the member function, "forward_h0"
    std::string what;  // what it computes, for its comment
    std::vector<int> chunks;
    int loop = -1;     // called for each layer l of loops_[loop]
  };

  // The body of forward_device (or of a pipeline stage's case in it, at
  // `indent`); step_struct_ and step_parts_ receive the rest.
  std::string forward_body(int indent);

  // Finds each scanned Layers' runs of statements, one segment per layer
  // (its forward, or its backward with the recomputed values it reads), and
  // writes them once, relative to the layer l, where every layer's segment
  // reads the same relative to its layer: the first layer run (layer 0 in
  // the forward pass, L-1 in the backward) stays as written when it differs
  // (it reads the values from before the layers instead of the previous
  // layer's), and the others become loops_ over the rest. A free of a value
  // from outside the layers is guarded by the layer that frees it. Every
  // other statement's markers are spelled as the literal layer.
  void fold_layers(std::vector<Chunk>& chunks);

  void fold_group(std::vector<Chunk>& chunks, const std::vector<std::pair<size_t, size_t>>& segs, int step);

  // The step as parts (see above); step_struct_ and step_parts_ receive the
  // struct and the parts' definitions. A new part starts where the phase,
  // the block or a pipeline stage's unit changes, or where the part would
  // pass kMaxPartLines; the outputs and the updates are the last part. Every
  // buffer of the step is a member, in the order the step makes them, so
  // which part uses a value never changes how it is spelled (declare()).
  // Returns the lines that run the step, at `indent`: construct the struct
  // and call the parts in order.
  std::string split_step(const std::vector<Chunk>& chunks, const std::string& tail, int indent);

  static std::string unit_title(const StageUnit& u);

  // A pipelined program's step: each device runs the program of its stage
  // (a CpuEmitter of the stage graph, named like this one), chosen by its
  // coordinate on the pipe axis; each stage's program is a struct of its own
  // (Program::Step::StageN), as a whole program's is Program::Step.
  std::string pipelined_body();

  // The end of a training step: every updated parameter's persistent buffer
  // takes its new value, all at once (a value that is itself an updated
  // parameter is its value from the start of the step, as in execute.cpp).
  // New values are moved into place, copied only when one value feeds
  // several parameters or is a parameter's buffer.
  void emit_updates(CodeWriter& w);

  const ir::Graph& g_;
  const EmitOptions& o_;
  const Mesh& mesh_;
  const StagePlan* plan_stages_;              // pipelined: the stage plan
  const std::vector<ir::Graph>* stages_;      // pipelined: the stage programs
  const std::string pipe_axis_;               // pipelined (also in a stage's emitter): the axis
  std::map<std::string, std::vector<int>> holders_;  // pipelined: parameter path -> stages holding it
  // A stage's emitter: the unit (StagePlan::units) of each node, to title them.
  const std::vector<StageUnit>* units_ = nullptr;
  // The marks written so far (a stage's emitter adds to its program's), the
  // stage this emitter writes (-1: not a stage), and its graph's report
  // (made at the first collective, for the bytes).
  std::vector<EmittedMark> own_marks_;
  std::vector<EmittedMark>* marks_ = &own_marks_;
  int stage_ = -1;
  int chunks_per_stage_ = 1;  // a stage's emitter: the stage plan's
  std::optional<Report> report_;
  std::vector<int> node_unit_;
  // The step (split_step): its struct, its parts' definitions (qualified
  // name, text) in the order they run, and the values declare() has made
  // buffers for so far, in order.
  std::string step_struct_;
  struct StepFn {
    std::string name, text;
    // CUDA: the kernels it launches (name, definition), defined before it
    // in its file unless an earlier function there already needed them.
    std::vector<std::pair<std::string, std::string>> kernels;
  };
  std::vector<StepFn> step_fns_;
  // Scanned layers' random streams: table name -> key literal per layer.
  std::map<std::string, std::vector<std::string>> layer_keys_;
  // The loops fold_layers made (Chunk::loop indexes them).
  struct Loop {
    int first = 0, last = 0, step = 1;  // the layers the loop runs, in order
  };
  std::vector<Loop> loops_;
  std::vector<int> declared_;
  // CUDA: the kernel definitions the statement being written needs (moved
  // into its Chunk), and the kernel whose body is being written (elem_at
  // then names its parameters).
  std::vector<std::pair<std::string, std::string>> pending_kernels_;
  // CUDA: the name of a kernel launch's scratch buffer (emit_kernel), taken
  // once for all of them.
  std::string kernel_scratch_;
  // CUDA: each kernel text's name, and the names taken (finish_fused_kernel).
  std::map<std::string, std::string> kernel_names_;
  std::set<std::string> kernel_taken_;
  const FusedKernel* in_kernel_ = nullptr;
  const EmissionPlan ep_;
  const BufferPlan& plan_;
  const std::vector<std::string>& var_;
  const std::map<std::string, std::string>& axis_var_;
  const std::map<std::string, std::string>& field_;
  const std::map<std::string, std::string>& out_field_;
  const std::map<std::vector<std::string>, std::string>& group_var_;
  cpp::Names locals_;  // the plan's names plus the temporaries printed here
};

}  // namespace sharc::emit_cpu_detail

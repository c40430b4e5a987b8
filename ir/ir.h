// The sharc IR: a topologically ordered list of nodes over global shapes (the
// traced DSL program) or, after partition_per_device, over per-device local
// shapes with explicit collectives. There is one list of op kinds,
// SHARC_OP_KINDS, and the enum, names, arity, printer and verifier all follow
// from it, so a new op fails to compile (-Wswitch) until every switch handles
// it. Nodes are plain values; passes build a new Graph rather than mutate.
//
// Text spelling (printer.cpp, used by logs, dumps, goldens and diagnostics):
//   %4 = dot(%2, %3) contract=[1]x[0] : f32[8,1024] [{"data"}, {}]   // model.cpp:31 dot2
// Shardings use Shardy's spelling: one {...} per dimension listing the mesh
// axes it is split over, and `partial={"model"}` for pending sums.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ir/error.h"
#include "ir/initializers.h"
#include "ir/mesh.h"
#include "ir/partition_spec.h"
#include "runtime/dtype.h"

namespace sharc {
class ShardingRule;  // dsl/sharding_rules.h; the IR only carries them
struct ShardMapBody;  // dsl/shard_map.h; the IR only carries them
}  // namespace sharc

namespace sharc {

// Whether a dot and the all_gather feeding it (or the reduce_scatter it
// feeds) become a RingDot: kAlways, kNever, or kAuto, when the collective
// moves more than PipelineOptions::ring_threshold_bytes per device. Set per
// program (ProgramBuilder::set_collective_matmul) and per dot
// (with_collective_matmul), which wins.
enum class CollectiveMatmul { kAuto, kAlways, kNever };
// A ring's blocks travel one way, or half of each block each way.
enum class RingDirection { kUnidirectional, kBidirectional };

// The order in which a pipeline stage runs its micro-batches' forward (F)
// and backward (B) passes (codegen/stage_plan.h has the exact orders):
// kGPipe: all F, then all B; k1F1B (PipeDream-flush): p-r-1 warm-up F on
// stage r, then F and B in turn, then the remaining B; kInterleaved: 1F1B
// over v model chunks per stage (Megatron's interleaved schedule).
enum class PipelineSchedule { kGPipe, k1F1B, kInterleaved };

}  // namespace sharc

namespace sharc::ir {

// X(Enum, text name, arity (-1 = variadic))
#define SHARC_OP_KINDS(X)                                                      \
  /* Sources. */                                                               \
  X(Parameter, "parameter", 0)                                                 \
  X(Input, "input", 0)                                                         \
  X(Constant, "constant", 0) /* every element = scalar */                      \
  X(Iota, "iota", 0)         /* element = its global index along dim ints[0] */ \
  /* Elementwise binary; operands have equal shapes (broadcasts are explicit). */ \
  X(Add, "add", 2)                                                             \
  X(Sub, "sub", 2)                                                             \
  X(Mul, "mul", 2)                                                             \
  X(Div, "div", 2)                                                             \
  X(Pow, "pow", 2) /* a^b, std::pow's special cases */                          \
  X(Max, "max", 2)                                                             \
  X(Min, "min", 2)                                                             \
  X(Greater, "greater", 2) /* 1 where a > b, else 0 */                         \
  X(Equal, "equal", 2)     /* 1 where a == b, else 0 */                        \
  /* Elementwise unary. */                                                     \
  X(Neg, "neg", 1)                                                             \
  X(Relu, "relu", 1)                                                           \
  X(Gelu, "gelu", 1) /* tanh approximation, as jax.nn.gelu */                  \
  X(Tanh, "tanh", 1)                                                           \
  X(Exp, "exp", 1)                                                             \
  X(Log, "log", 1)                                                             \
  X(Sqrt, "sqrt", 1)                                                           \
  X(Sin, "sin", 1)                                                             \
  X(Cos, "cos", 1)                                                             \
  X(Abs, "abs", 1)                                                             \
  X(Sigmoid, "sigmoid", 1) /* 1 / (1 + exp(-x)) */                             \
  X(Erf, "erf", 1)                                                             \
  X(Log1p, "log1p", 1) /* log(1 + x), exact near 0 */                          \
  X(Expm1, "expm1", 1) /* exp(x) - 1, exact near 0 */                          \
  X(Convert, "convert", 1) /* to the node's dtype (bf16: nearest, ties even) */ \
  /* Elementwise ternary: args = (pred, on_true, on_false), one shape; the   */ \
  /* result is on_true where pred != 0, else on_false, of on_true's type.    */ \
  X(Select, "select", 3)                                                       \
  /* Layout and contraction. */                                                \
  X(Broadcast, "broadcast", 1) /* ints = output dim of each operand dim */     \
  X(Reshape, "reshape", 1)                                                     \
  X(Transpose, "transpose", 1) /* ints = perm: out dim i = operand dim perm[i] */ \
  X(Dot, "dot", 2)             /* dot_general, see DotDims */                  \
  X(Reduce, "reduce", 1)       /* ints = reduced axes, removed from the shape */ \
  X(Slice, "slice", 1) /* ints = {dim, start, size} */                         \
  X(Pad, "pad", 1)     /* ints = {dim, before, after}: zeros around */         \
  /* ints = {dim, start}: args[0] with args[1] added into its elements       */ \
  /* [start, start + args[1].shape[dim]) along dim (the other dims equal):    */ \
  /* how autodiff sums the gradients of slices of one value, in place.        */ \
  X(AddSlice, "add_slice", 2)                                                  \
  /* Uniform (0,1) from Philox at (key ^ seed operand, global flat index). */  \
  X(RandomUniform, "random_uniform", 1)                                        \
  X(ShardingConstraint, "sharding_constraint", 1)                              \
  /* Collectives and device-local slicing: partitioned IR only. */             \
  X(AllGather, "all_gather", 1)         /* concat along dim over axes */       \
  X(ReduceScatter, "reduce_scatter", 1) /* reduce over axes, split dim */      \
  X(AllReduce, "all_reduce", 1)                                                \
  X(AllToAll, "all_to_all", 1) /* split dim, concat dim2, over axes */         \
  X(LocalSlice, "local_slice", 1) /* keep this device's block of dim over axes */ \
  /* A dot and the all_gather / reduce_scatter it absorbs, run as a ring of      */ \
  /* ppermutes under the GEMMs (partitioned IR only; see RingAttrs below).       */ \
  X(RingDot, "ring_dot", 2)                                                    \
  /* shard_map (dsl/shard_map.h). Global IR: output ints[1] of the per-device */ \
  /* body Graph::shard_maps[ints[0]] run on the operands' blocks; every output */ \
  /* of one shard_map is its own node with the same operands and body.         */ \
  X(ShardMap, "shard_map", -1)                                                 \
  /* Per-device only (shard_map bodies, partitioned IR): ppermute over the one */ \
  /* mesh axis in `axes`, ints = flattened (source, destination) position      */ \
  /* pairs (receivers of nothing get zeros); axis_index: scalar = this         */ \
  /* device's coordinate on the axis in `axes`.                                */ \
  X(PPermute, "ppermute", 1)                                                   \
  X(AxisIndex, "axis_index", 0)                                                \
  /* Pipeline stage programs only (split_stages): send the operand to the    */ \
  /* device at position ints[0] on the one axis in `axes` (the pipe axis),   */ \
  /* all other coordinates equal, as message ints[1] (its result is unused), */ \
  /* and receive message ints[1] from position ints[0] (shape, type, layout  */ \
  /* of the value sent).                                                     */ \
  X(Send, "send", 1)                                                           \
  X(Recv, "recv", 0)                                                           \
  /* GPU programs only (codegen/passes/use_gpu_kernels.h): a composite       */ \
  /* region's part run as one KernelSet kernel (Node::kernel), its operands */ \
  /* in the kernel's order; its value is the kernel's first result, and     */ \
  /* kernel_output (operand: the kernel node) each further one it writes.   */ \
  X(Kernel, "kernel", -1)                                                      \
  X(KernelOutput, "kernel_output", 1)

enum class Op {
#define SHARC_X(e, n, a) k##e,
  SHARC_OP_KINDS(SHARC_X)
#undef SHARC_X
};

const char* op_name(Op op);
int op_arity(Op op);
bool is_elementwise(Op op);   // unary, binary or ternary (select) elementwise
bool is_unary(Op op);
bool is_binary(Op op);
bool is_ternary(Op op);       // select
bool is_collective(Op op);    // AllGather ... AllToAll (not LocalSlice)
bool is_source(Op op);        // Parameter, Input, Constant, Iota

enum class ReduceKind { kSum, kMax };
const char* reduce_name(ReduceKind k);
const char* collective_matmul_name(CollectiveMatmul m);  // "auto", "always", "never"
const char* ring_direction_name(RingDirection d);        // "unidirectional", "bidirectional"
using ::sharc::PipelineSchedule;
const char* schedule_name(PipelineSchedule s);           // "gpipe", "1f1b", "interleaved"
// The schedule a name spells, or nullopt.
std::optional<PipelineSchedule> parse_schedule(std::string_view name);

// Pipeline parallelism over one mesh axis (ProgramBuilder::set_pipeline): the
// program's pipelined layers (dsl PipelineLayer; Node::layer) are cut into
// stages x virtual_stages consecutive chunks, chunk c on stage c mod stages,
// where stages is the axis size; every train_step runs `microbatches`
// micro-batches through them in `schedule` order. The stage count comes from
// the mesh, so one traced program lowers on any mesh that has the axis.
struct PipelineConfig {
  std::string axis;
  int microbatches = 1;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int virtual_stages = 1;  // model chunks per stage; > 1 only for kInterleaved
  SrcLoc loc;              // the set_pipeline call
};

// Rematerialization (activation checkpointing) of a named block, as
// jax.checkpoint's policies: kSaveAll keeps every forward value the backward
// pass reads (the default); kRecomputeAll keeps only the block's inputs and
// recomputes everything inside it before its backward pass (nothing_saveable,
// Megatron's full recompute); kSaveDots keeps the outputs of its dots and
// recomputes the rest from them (dots_saveable, Megatron's selective
// recompute). The pass is codegen/passes/rematerialize.h.
enum class RematPolicy { kSaveAll, kRecomputeAll, kSaveDots };
const char* remat_policy_name(RematPolicy p);  // "save_all", "recompute_all", "save_dots"

// A block's policy: `block` is a layer label path ("h3", "h3/mlp"); it covers
// the forward nodes whose label is that path or below it.
struct RematRule {
  std::string block;
  RematPolicy policy = RematPolicy::kSaveAll;
  SrcLoc loc;  // where the model asked for it
};

// A repeated layer (dsl Layers): `length` instances of one module traced
// one after another, either unrolled (each with its own parameters under
// scopes name0, name1, ...) or scanned (every parameter stacked with a
// leading layer axis of size `length` under scope `name`, which each layer
// reads its row of with a slice). `layer_axis`: the layout of the stacked
// parameters' layer axis as the user wrote it (a logical or mesh axis name;
// empty: replicated).
struct Repeat {
  std::string name;
  int length = 0;
  bool scan = false;
  std::string layer_axis;
  SrcLoc loc;
};

// A composite region (Graph::composites; Node::composite): the ops one DSL
// function traced that a GPU backend may run as one hand-written kernel
// (runtime/gpu/kernel_set.h), as XLA's composite ops mark theirs. Autodiff
// gives a gradient its forward node's region, so a region has a forward
// part and a backward part (Node::backward); the partitioner gives the
// nodes it makes for a node that node's region, the collectives included:
// a collective inside a region is what keeps its kernel from running on
// the region's local shapes (codegen/kernel_select.h). Regions do not nest:
// inside one, the DSL traces no other.
enum class CompositeKind {
  kLayerNorm,            // layer_norm: normalise over the last axis, scale, shift
  kAttention,            // softmax(q k^T / sqrt(d) + mask) v of CausalSelfAttention
  kSoftmaxCrossEntropy,  // softmax_cross_entropy: the mean loss over the batch
  kAdam,                 // one parameter's Adam / AdamW update (train_step)
  kGlobalNorm,           // the gradients' global norm and clip factor (train_step)
  kEmbedding,            // Embedding's lookup, one_hot(ids) @ table (dsl/transformer.h)
};
const char* composite_name(CompositeKind kind);  // "layer_norm", "attention", ...

struct Composite {
  CompositeKind kind = CompositeKind::kLayerNorm;
  std::string label;  // the module path traced in ("h/ln1"), or the parameter's (kAdam)
  SrcLoc loc;         // the DSL call
  // What a kernel's fit depends on beyond shapes and dtypes.
  int64_t heads = 0, head_dim = 0;  // kAttention (global: the local head count is the partitioner's)
  bool causal = false;              // kAttention
  double dropout = 0.0;             // kAttention: on the attention weights
  double eps = 0.0;                 // kLayerNorm, kAdam
  double b1 = 0.0, b2 = 0.0;        // kAdam: the moments' decay rates
  double weight_decay = 0.0;        // kAdam: AdamW's decoupled weight decay (0: Adam)
};
inline Composite make_composite(CompositeKind kind, SrcLoc loc, std::string label = "") {
  Composite c;
  c.kind = kind;
  c.loc = std::move(loc);
  c.label = std::move(label);
  return c;
}

// Node::micro_batch of the optimizer step that follows all micro-batches.
inline constexpr int kAfterMicroBatches = 1 << 30;

// Element types: f32, bf16 (arithmetic in f32, rounded to nearest even on
// every store) and i32 (token ids, labels). The runtime's enum, so the
// generated code and the IR name a type alike.
using DType = rt::DType;
using rt::dtype_name;
using rt::dtype_size;

// Ops whose result has the element type of an operand (dtype_operand: the
// first, on_true for Select): every op but the sources, Convert,
// RandomUniform (f32), AxisIndex (f32) and ShardMap (its body's). Graph::add
// sets their dtype; the others carry it.
bool dtype_follows_operand(Op op);
inline int dtype_operand(Op op) { return op == Op::kSelect ? 1 : 0; }

using Shape = std::vector<int64_t>;
int64_t num_elements(const Shape& s);
std::string shape_str(const Shape& s, DType t = DType::kF32);  // f32[8,1024], bf16[8]

// A resolved layout: per dimension the mesh axes it is split over (major
// first), plus axes over which the value is a pending partial sum/max.
struct Sharding {
  std::vector<std::vector<std::string>> dims;
  std::vector<std::string> partial;
  ReduceKind partial_kind = ReduceKind::kSum;

  static Sharding replicated(size_t rank) { return {std::vector<std::vector<std::string>>(rank), {}}; }
  size_t rank() const { return dims.size(); }
  bool is_replicated() const;
  bool uses(const std::string& axis) const;  // in dims or partial
  std::vector<std::string> used_axes() const;
  // Number of blocks dimension d is split into on mesh.
  int64_t parts(const Mesh& mesh, size_t d) const;
  Shape local_shape(const Shape& global, const Mesh& mesh) const;
  bool operator==(const Sharding&) const = default;
  std::string str() const;  // [{"data"}, {}] partial={"model"}
};

// dot_general dimension numbers (XLA). Output dims: batch dims (in lhs_batch
// order), then lhs free dims, then rhs free dims, each in operand order.
struct DotDims {
  std::vector<int> lhs_batch, rhs_batch, lhs_contract, rhs_contract;
  bool operator==(const DotDims&) const = default;
};

// RingDot: the "collective matmul" of asynchronous tensor parallelism
// (ring_collective_matmul.h makes it). It computes exactly what a dot and the
// collective it absorbed compute, over the ONE mesh axis in `axes` (n = the
// axis size, p = this device's position in its group along it):
//
//   kGather:  dot(all_gather(args[operand], dim, axes), other): the operand's
//             block travels the ring instead of being gathered up front. At
//             step k = 0..n-1 the device multiplies the block it holds,
//             block (p - k) mod n, into that block's slice of the result,
//             while ppermute passes the block on to its right neighbour
//             (p + 1) and receives block (p - k - 1) from its left (p - 1);
//             the last step sends nothing: n-1 transfers of one block, the
//             all_gather's bytes. Each result block is one dot, as in the
//             synchronous form.
//   kScatter: reduce_scatter(dot(lhs, rhs), dim, axes), `dim` a free
//             dimension of the result: at step k the device computes its
//             partial of result block (p - k - 1) mod n, adds the running sum
//             received from its left neighbour and passes it right; after n-1
//             transfers it holds block p summed over the group, in the order
//             of the ring reduce_scatter (the chunk starts at device p + 1).
//
// kBidirectional splits every block in two halves along the ring dimension
// (the operand's `dim` for kGather, the result's for kScatter): the first
// half travels as above (clockwise, to p + 1), the second the other way
// (to p - 1, block (p + k) mod n, resp. (p + k + 1) mod n), so each step moves
// two half blocks over two links. Same total bytes.
//
// The ppermute of step k+1's block (kGather), resp. of step k's running sum
// (kScatter), is started BEFORE the step's GEMM and waited for after it.
// `dot` holds the dot's dimension numbers over the full (gathered) operands.
//
// Constraints:
//  - partitioned IR only;
//  - `axes` is one mesh axis, of size >= 2;
//  - `dot` is a valid dot_general over the operands, with args[operand]'s
//    `dim` multiplied by n for kGather, and the result shape is that dot's,
//    with `dim` divided by n for kScatter;
//  - kGather: `operand` is 0 or 1 and `dim` a batch or free (not a
//    contracting) dimension of it;
//  - kScatter: `dim` is a free (not a batch) dimension of the result;
//  - kBidirectional: the block splits in halves (the operand's `dim` for
//    kGather, the result's `dim` for kScatter is even).
enum class RingKind { kGather, kScatter };

struct RingAttrs {
  RingKind kind = RingKind::kGather;
  int operand = 0;  // kGather: the travelling operand (0 lhs, 1 rhs)
  RingDirection direction = RingDirection::kUnidirectional;
  bool operator==(const RingAttrs&) const = default;
};

struct Node {
  Op op = Op::kConstant;
  std::vector<int> args;
  Shape shape;  // global shape, or local shape in partitioned IR
  DType dtype = DType::kF32;  // see dtype_follows_operand
  std::string name;  // Parameter/Input: '/'-joined path; else the layer label ("dot1")
  SrcLoc loc;        // the DSL call that created it

  // Attributes (meaning depends on op; see SHARC_OP_KINDS).
  std::vector<int> ints;
  DotDims dot;
  ReduceKind reduce = ReduceKind::kSum;
  double scalar = 0.0;       // Constant
  uint64_t key = 0;          // RandomUniform: the stream (hash of its DSL site)
  Initializer init;          // Parameter
  std::vector<std::string> axes;  // collectives / LocalSlice: mesh axes, major first
  // Collectives / LocalSlice. AllReduce: dim2 >= 0 is its bucket id (set by
  // bucket_all_reduces; see all_reduce_bucket_end in execute.h), -1 none.
  int dim = -1, dim2 = -1;

  // Layout. `spec` is the user's annotation as written (Parameter from its
  // initializer, Input, ShardingConstraint), `rules` its logical rules if any.
  // `sharding` is the resolved layout: set for annotated nodes by
  // resolve_logical_axes (and then `fixed`), for all by propagate_shardings.
  std::optional<P> spec;
  std::optional<LogicalRules> rules;
  std::optional<Sharding> sharding;
  bool fixed = false;

  // Training. `backward`: made by autodiff (the gradient computation), which
  // lets the partitioner prefer all-reduce for gradients (bucketed later).
  // `layout_of`: a Parameter holding optimizer state for parameter node
  // `layout_of`, which it is laid out like (-1: none).
  bool backward = false;
  int layout_of = -1;
  // A forward op computed again for the backward pass (rematerialize): a
  // copy of a forward node, placed before the gradient code that reads it.
  bool remat = false;

  // Dot: the user's choice for this dot (dsl with_collective_matmul); kAuto
  // leaves it to the program setting. The partitioner copies it to the
  // per-device dot. RingDot: its schedule (see RingAttrs).
  CollectiveMatmul collective_matmul = CollectiveMatmul::kAuto;
  RingAttrs ring;

  // Pipeline parallelism. `layer`: the pipelined layer whose code traced this
  // node (dsl PipelineLayer; autodiff gives a gradient its forward node's),
  // -1 outside them. `micro_batch`: the micro-batch of train_step that traced
  // it, kAfterMicroBatches for the optimizer step, -1 before train_step. The
  // partitioner and the passes copy both to the nodes they make from a node;
  // codegen/stage_plan.h places nodes on stages by them.
  int layer = -1;
  int micro_batch = -1;

  // Repeated layers (dsl/layers.h). `iteration`: the layer (0..length-1) of
  // Graph::repeats[repeat] whose code traced this node, -1 outside one;
  // autodiff, rematerialization and the partitioner copy it like `layer`.
  // In a scanned repeat every layer's code is the same up to which row of
  // the stacked parameters it reads, which is what lets the emitter write
  // it once as a loop body.
  int repeat = -1;
  int iteration = -1;

  // The composite region (Graph::composites) whose DSL function traced this
  // node, -1 outside one; autodiff, the partitioner and the passes copy it
  // like `layer`.
  int composite = -1;

  // Kernel: KernelSet's name of the kernel ("layernorm_forward");
  // KernelOutput: that name, a dot, and the result's ("layernorm_forward.rstd").
  // What the kernel needs besides operands and shapes is in `scalar` (a layer
  // norm's epsilon) and `ints` (flags the kernel names; use_gpu_kernels.h).
  std::string kernel;

  // Per-device programs: for the op partition_per_device lowers a node of the
  // global program to, how many nodes of the global program before that one
  // have the same op, name, `backward` and `remat` (-1 on the collectives and slices
  // it adds); copied by every later pass. The global program does not depend
  // on the mesh, so neither does a name made from it (the generated code's
  // variable names, codegen/emission_plan.cpp).
  int origin_rank = -1;
};

// After a training step, persistent Parameter `target` takes the value of node
// `value` (same global shape; the partitioner reshards it to the target's layout).
struct Update {
  int target = -1;
  int value = -1;
};

// Training: node `value` is the gradient the optimizer applies to Parameter
// `parameter` (after micro-batch averaging and clipping). train_step records
// it; the partitioner maps it to the value in its propagated layout, and
// passes that renumber nodes remap it like an update. It changes no
// computation: executors use it to account gradient memory per device.
struct Gradient {
  int parameter = -1;
  int value = -1;
};

struct Output {
  std::string name;
  int value = -1;
  SrcLoc loc;
  std::optional<P> spec;              // requested out sharding (unresolved)
  std::optional<Sharding> sharding;   // resolved / chosen
};

// A value as the user knows it, for error messages: what made it, its shape,
// its module path and DSL line; never an IR node number. E.g.
// "parameter 'dot1/kernel' f32[16,16]", "input 'x' f32[8,16]",
// "dot result f32[8,16] from 'dot1' at model.h:21".
std::string describe_value(const Node& n);

struct Graph {
  std::string name;
  Mesh mesh;                 // set by the pipeline before resolve_logical_axes
  bool partitioned = false;  // shapes are local; collectives may appear
  std::vector<Node> nodes;
  std::vector<Output> outputs;
  std::vector<Update> updates;
  std::vector<Gradient> gradients;
  // Program-wide logical axis rules (ProgramBuilder::set_logical_rules); a
  // PipelineOptions::rules given to lower() takes precedence.
  std::optional<LogicalRules> rules;
  // Sharding rules applied from outside the model, in order, to every
  // parameter (ProgramBuilder::set_sharding_rules); a
  // PipelineOptions::sharding_rules given to lower() takes precedence. Null: none.
  std::shared_ptr<const std::vector<ShardingRule>> sharding_rules;
  // Ring collective matmul for the whole program
  // (ProgramBuilder::set_collective_matmul); PipelineOptions::collective_matmul
  // and ring_direction, given to lower(), take precedence.
  CollectiveMatmul collective_matmul = CollectiveMatmul::kAuto;
  std::optional<RingDirection> ring_direction;
  // The computation dtype of the program's modules (ProgramBuilder::set_dtype,
  // Flax's `dtype`): Linear, Embedding and attention cast their inputs and
  // f32 parameters to it; layer norm, softmax and losses compute in f32.
  DType dtype = DType::kF32;
  // The bodies of the program's shard_maps (ShardMap nodes index them). A
  // body is kept as the user's callable and traced per device once the mesh
  // is known (instantiate_shard_map in dsl/shard_map.h).
  std::vector<std::shared_ptr<const ShardMapBody>> shard_maps;
  // Pipeline parallelism (ProgramBuilder::set_pipeline); nullopt: none.
  std::optional<PipelineConfig> pipeline;
  // Rematerialization policies by block (TrainOptions::remat), in order; the
  // first rule whose block covers a node decides for it.
  std::vector<RematRule> remat;
  // The program's repeated layers (Node::repeat indexes them).
  std::vector<Repeat> repeats;
  // The program's composite regions (Node::composite indexes them).
  std::vector<Composite> composites;
  // While train_step traces micro-batch j (or the optimizer step), add()
  // stamps j (kAfterMicroBatches) on nodes that carry no micro-batch.
  int tracing_micro_batch = -1;

  int add(Node n) {
    const int from = dtype_operand(n.op);
    if (dtype_follows_operand(n.op) && static_cast<int>(n.args.size()) > from &&
        n.args[from] >= 0 && n.args[from] < static_cast<int>(nodes.size()))
      n.dtype = nodes[n.args[from]].dtype;
    if (n.micro_batch < 0) n.micro_batch = tracing_micro_batch;
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }
  const Node& operator[](int id) const { return nodes[id]; }
  Node& operator[](int id) { return nodes[id]; }
  std::vector<int> users(int id) const;
  const Node* find(std::string_view name, Op op) const;  // first with that name
};

// Printer (printer.cpp): the one text form of the IR.
std::ostream& operator<<(std::ostream& os, const Node& n);
std::ostream& operator<<(std::ostream& os, const Graph& g);
std::string to_string(const Graph& g);
std::string node_str(const Graph& g, int id);  // one line, as in a dump
std::string dot_dims_str(const DotDims& d);

// Verifier (verifier.cpp). Checks every Constraints: item of the ops and
// throws internal_error naming the node on the first violation: an invalid
// graph after a pass is a sharc bug, never the user's fault (user mistakes are
// caught with user_error where the DSL builds the node).
void verify(const Graph& g);

// Shape inference shared by the DSL and the partitioner.
Shape dot_shape(const Shape& lhs, const Shape& rhs, const DotDims& d);

}  // namespace sharc::ir

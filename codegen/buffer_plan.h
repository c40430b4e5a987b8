// BufferPlan: which values of a partitioned (per-device) graph the generated
// code keeps in a buffer, which it fuses away, the statements it runs in
// order, and after which statement each buffer is released. The CPU emitter
// (emit_cpu.cpp) prints exactly this plan, and the report (report.h) replays
// it, with the temporaries each statement allocates, to predict every
// device's memory before anything runs. One function decides, two read it, so
// the prediction cannot drift from the generated code.
//
// The rules (all in plan_buffers):
//  - fusion: an elementwise node is computed inside its users' loop when
//    all its users are elementwise, belong to the same micro-batch
//    (ir::Node::micro_batch) and are computed in one loop (a fused loop is a
//    DAG: a value used twice in it, like x in a lifted function's branches,
//    is one named scalar), and the value is no output and no parameter's
//    update (inlined); an elementwise value also read after its loop (by
//    a later loop or an op that is not elementwise, like the backward pass
//    reading a forward activation) is computed in the first loop that
//    reads it and stored from there as well (kept: a loop with several
//    outputs), provided every such reader runs after that loop. Fusing
//    across micro-batches would move
//    work to the last one and keep every micro-batch's operands alive until
//    then: a gradient accumulated over k micro-batches would hold k
//    gradients;
//  - a broadcast is an indexed read of its operand: inlined into the loop
//    of its readers as above, and when its readers are several loops of its
//    micro-batch, inlined into each of them (duplicated) rather than
//    materialised: a layer norm's [B,T,1] statistics read by the forward and
//    the backward loops cost no [B,T,D] block kept across the step. It has
//    a buffer only when something other than a loop reads it;
//  - an iota along a dimension the mesh does not split is read the same
//    way: its value at element i is i's index along that dimension;
//  - a Constant is a literal inside elementwise loops and gets a buffer only
//    when something else reads it, or it is an output or an update's value;
//  - a Kernel (a composite region run as one KernelSet kernel on a GPU,
//    passes/use_gpu_kernels.h) is one statement that writes its own buffer
//    and its KernelOutputs' (stores, as a loop's kept values), and holds its
//    scratch (kernel_scratch_bytes) for the launch only;
//  - Parameters are persistent (members of the generated Device), never
//    allocated or freed by the step; a pipeline stage's send has no result;
//  - every other node is one buffer, allocated by its statement and released
//    right after the last statement that reads it, unless it is an output or
//    an update's value (those live to the end of the step).
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "ir/ir.h"

namespace sharc {

struct BufferPlan {
  // One statement of the step: a node, for a fused loop its root, or for an
  // all-reduce bucket (all_reduce_bucket_end) its first member.
  struct Stmt {
    int node;
    std::vector<int> tree;    // fused loop: the nodes computed in it, in order (root last)
    std::vector<int> stores;  // fused loop: nodes of the tree it also stores (kept), in order;
                              // Kernel: its KernelOutputs
    std::vector<int> reads;   // buffers it reads
    std::vector<int> bucket;  // all-reduce bucket: its members
  };

  std::vector<std::set<int>> users;  // per node
  // is_update_value: the new value of some parameter (Graph::updates), kept to
  // the end of the step like an output.
  std::vector<bool> is_output, is_update_value, inlined, needs_buffer;
  // kept: inlined into a loop and stored by it too (see the rules above);
  // root: per node, the node whose statement computes it (itself unless
  // inlined). duplicated: a broadcast read in place by each of several loops
  // (it is in every one of their trees; its root stays itself).
  std::vector<bool> kept, duplicated;
  std::vector<int> root;
  std::vector<Stmt> stmts;
  // Per statement: the values whose buffers are released right after it
  // (their last read), in the order the emitter frees them.
  std::vector<std::vector<int>> frees_after;
  // Per node: the parameter whose buffer this update value is computed in,
  // or -1. An optimizer's update (p - lr * m / sqrt(v), and m and v
  // themselves) is written over the old value instead of into a new block
  // when nothing could tell: the value updates exactly that parameter, is
  // computed by a fused loop (its root or a kept value), that loop reads the
  // old parameter only at the element it writes, and before writing it, and
  // nothing reads the old value after that loop (no later statement, no
  // output, no other parameter taking it). Saves a parameter-sized block per
  // update and a pass over memory. The AdamW kernel's new values (GPU
  // programs) are written over the old ones on the same conditions.
  std::vector<int> in_place_of;
  // Per node: the operand whose buffer a copy-like statement's result takes
  // instead of a copy, or -1. Copy-like: an all_reduce (reduced in place,
  // a bucket over its members' buffers: Communicator::all_reduce over
  // segments), a reshape, a sharding constraint. A result takes its
  // operand's buffer when the statement is that buffer's last reader, no
  // other member of the same bucket reads it, and the operand is a step
  // buffer (not a parameter, an output or an update's value) and so is the
  // result (not an update's value). Taken operands are not in frees_after:
  // the result frees the block.
  std::vector<int> takes_buffer_of;
};

// The plan of a partitioned graph (lower()'s output). Throws internal_error
// when an output is a partial sum.
BufferPlan plan_buffers(const ir::Graph& partitioned);

// How a local dot_general runs (execute.cpp's local_dot(), the emitter's
// emit_local_dot()): one batched GEMM of B x (M x K) . (K x N). The lhs is
// read as (batch, free, contract), the rhs as (batch, contract, free). An
// operand already stored that way is passed as is; one stored as the matrix
// transpose, (batch, contract, free) for the lhs or (batch, free, contract)
// for the rhs, is passed with BLAS's transpose flag (trans_lhs, trans_rhs);
// only an operand in neither order (batch dims not leading, free or
// contracting dims interleaved or reordered) is copied into a temporary
// permuted by lhs_perm / rhs_perm (transpose_lhs, transpose_rhs).
struct LocalDotLayout {
  std::vector<int> lhs_perm, rhs_perm;
  bool transpose_lhs = false, transpose_rhs = false;  // copied first
  bool trans_lhs = false, trans_rhs = false;          // BLAS transpose flags
  int64_t B = 1, M = 1, N = 1, K = 1;
};
LocalDotLayout local_dot_layout(const ir::DotDims& d, const ir::Shape& lhs, const ir::Shape& rhs);

// The scratch a Kernel node's launch allocates beside its results, in bytes
// (0 for most): released after the launch.
uint64_t kernel_scratch_bytes(const ir::Graph& g, const ir::Node& kernel);
// The blocks of a multi-tensor Kernel node's launch, "adamw" or
// "global_norm" (gpu::tensor_chunks' count for its tensors).
int64_t multi_tensor_chunks(const ir::Graph& g, const ir::Node& kernel);

// Bytes a device holds, replayed from the plan in statement order: the
// persistent parameter shards (allocated when the Program is constructed),
// and the largest total reached during one step, with every temporary the
// generated code allocates (dot transposes, ring buffers, update
// snapshots) counted where it lives. Every device runs the
// same local shapes, so the numbers hold for each of them.
struct MemoryProfile {
  uint64_t persistent_bytes = 0;  // parameter shards
  uint64_t peak_bytes = 0;        // max over construction, init and one step
  int peak_stmt = -1;             // the statement at which the peak is reached (-1: none)
  // The step arena (rt::DeviceMemory): the size that holds every block of a
  // step placed first-fit in allocation order (rt::ArenaPlan), the same
  // offsets the device uses; at least the step's share of the peak, more by
  // what fragmentation costs.
  uint64_t arena_bytes = 0;
};
// A step buffer's place in the arena: [offset, offset + bytes), live from
// allocation event `allocated` until event `freed` (INT_MAX: the step's end).
struct ArenaPlacement {
  int64_t offset = -1;
  uint64_t bytes = 0;
  int allocated = 0, freed = 0;
};
// `placements`, when given, receives every step buffer's placement.
MemoryProfile simulate_memory(const ir::Graph& partitioned, const BufferPlan& plan,
                              std::vector<ArenaPlacement>* placements = nullptr);

// The forward activations a step keeps between its micro-batches, replayed
// from the same plan: over the step, the most micro-batches whose forward
// values (ir::Node::micro_batch in [0, kAfterMicroBatches), neither made by
// autodiff nor computed from a gradient) hold buffers at once, and the most
// bytes those buffers take. On a pipeline stage's program this is what its
// schedule keeps in flight: GPipe all m micro-batches, 1F1B at most p.
struct ActivationProfile {
  int max_micro_batches = 0;
  uint64_t max_bytes = 0;
};
ActivationProfile simulate_activations(const ir::Graph& partitioned, const BufferPlan& plan);

}  // namespace sharc

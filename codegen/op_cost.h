// What each statement of a per-device step costs on the virtual clock
// (runtime/trace.h), and the name it carries in a trace. The generated code
// and the interpreter (execute.cpp) mark the same statements with the same
// costs and names, so their virtual timelines are equal, event for event.
//
// The model counts work from local shapes, nothing else:
//  - a GEMM (Dot, one ring step's dots): 2*B*M*N*K flops; its operands and
//    result as bytes, plus the copies of operands it transposes;
//  - an elementwise loop (a fusion group): one flop per element per op in
//    the group; the buffers it reads and the one it writes as bytes;
//  - a reduction: one flop per element read;
//  - a KernelSet kernel (a composite region on a GPU): its operands and
//    results as bytes, eight flops per element of its first result;
//  - everything else that computes (layout changes, slices, inputs, RNG):
//    its reads and its result as bytes, one flop per result element;
//  - communication (collectives, buckets, ppermute, send, recv, a RingDot's
//    transfers) is no statement cost: its time comes from the link model
//    and the waiting, inside the communicator.
#pragma once

#include <string>
#include <vector>

#include "codegen/buffer_plan.h"
#include "ir/ir.h"
#include "runtime/trace.h"

namespace sharc {

// True when `n` is a GEMM kernel with its epilogue ("gemm_bias",
// "gemm_dgelu", ...: passes/use_gpu_kernels.cpp's gemm_node).
bool is_gemm_kernel(const ir::Node& n);

// True when statement `stmt` is communication (its time is the
// communicator's); a RingDot counts as communication, its steps' GEMMs are
// marked one by one with ring_step_cost.
bool is_comm_statement(const ir::Graph& g, const BufferPlan::Stmt& stmt);

// The cost of a compute statement.
rt::OpCost statement_cost(const ir::Graph& g, const BufferPlan::Stmt& stmt);

// The transcendental functions a compute statement evaluates (exp, log,
// tanh, gelu, sigmoid, erf, sin, cos, pow, and a random number each): one
// per element per such op in an elementwise loop, a random_uniform's
// elements, the exps of cross_entropy and attention kernels and the gelu of
// a GEMM's epilogue. statement_cost counts each as one flop, which is
// what the virtual clock charges; the planner charges them at a machine's
// own rate for them (PlanMachine::transcendentals_per_s): on the CI
// machine one took about 150 flops' time at the GEMM rate.
double statement_transcendentals(const ir::Graph& g, const BufferPlan::Stmt& stmt);

// One step of RingDot `n` on a ring of `ring` devices: its halves' GEMMs
// (one mark before them), and a scatter ring's add of the arriving sum into
// one half (one mark per half, after its transfer has landed; steps after
// the first).
struct RingStepCost {
  rt::OpCost gemm, add;
};
RingStepCost ring_step_cost(const ir::Graph& g, const ir::Node& n, int ring);

// Per node of `g`: the seconds its statement takes on `machine` (0 for
// nodes that are no statement of their own, and for communication).
std::vector<double> statement_seconds(const ir::Graph& g, const rt::MachineModel& machine);

// "dot  model.cpp:31 dot1": the op, its DSL line and its layer label.
std::string statement_label(const ir::Node& n);

}  // namespace sharc

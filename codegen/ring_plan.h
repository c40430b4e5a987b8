// RingPlan: how one device runs a RingDot (ir.h, RingAttrs), reduced to the
// shapes of one step. The per-device interpreter (execute.cpp) runs it and the
// CPU emitter (emit_cpu.cpp) prints it, statement for statement, so the two
// agree bit for bit; neither decides anything about the schedule itself.
//
// Blocks of the ring dimension are cut into `halves` pieces each (2 when
// bidirectional): piece b * halves + h is half h of block b, and a step's dot
// multiplies one piece. The non-obvious choice: the piece is cut from the ring
// dimension itself (the travelling operand's `dim`, or the result's), so every
// piece is a block of n * halves equal blocks, and one slice_block /
// place_block pair covers every variant.
#pragma once

#include <cstdint>

#include "ir/ir.h"

namespace sharc {

struct RingPlan {
  int n = 0;       // ring size: the size of the RingDot's mesh axis
  int halves = 1;  // pieces per block: 1 unidirectional, 2 bidirectional
  bool gather = true;
  int pieces() const { return n * halves; }

  // Operands of the node (full local shapes) and of one step's dot.
  ir::Shape operand[2];
  ir::Shape step_operand[2];
  // kGather: the operand whose block travels (its piece is one half of its
  // block along `move_dim`, cut once before the loop). -1 for kScatter.
  int moving = -1;
  int move_dim = -1;
  // The operand cut into pieces() blocks along `slice_dim` at every step, or
  // -1: kScatter's operand holding the scattered result dimension, or for a
  // kGather along a batch dimension the other operand's paired batch
  // dimension. `slice_contiguous`: a piece is one contiguous run (nothing
  // before slice_dim but size-1 dimensions), so a pointer offset takes it.
  int sliced = -1;
  int slice_dim = -1;
  bool slice_contiguous = false;

  // Result: the node's shape, one step's dot result, and where pieces go:
  // kGather writes piece i as block i of pieces() along `out_dim`; kScatter's
  // final sum of half h is block h of `halves`. `out_contiguous`: those
  // blocks are contiguous runs, so steps write the result in place.
  ir::Shape result;
  ir::Shape step_result;
  int out_dim = -1;
  int out_parts = 1;
  bool out_contiguous = false;

  int64_t step_operand_count(int i) const { return ir::num_elements(step_operand[i]); }
  int64_t step_result_count() const { return ir::num_elements(step_result); }
};

// The plan of RingDot `n` whose operands have local shapes `lhs`, `rhs`, on a
// mesh axis of size `ring`.
RingPlan ring_plan(const ir::Node& n, const ir::Shape& lhs, const ir::Shape& rhs, int ring);

// Block (of n) that half h holds at step k on the device at position p
// (RingAttrs): kGather (p - k), resp. (p + k) for the second half; kScatter
// (p - k - 1), resp. (p + k + 1). Always in [0, n).
int ring_block(bool gather, int half, int step, int position, int n);

}  // namespace sharc

// Pass: rematerialize (activation checkpointing, jax.checkpoint).
//
// Requires: a global (unpartitioned) graph; Graph::remat holds the model's
//   policies by block (TrainOptions::remat).
// Ensures: wherever a gradient node (backward) reads a forward value that
//   its block's policy does not save, it reads a copy computed again (a node
//   with `remat` set) instead. The copies of one block are made once, from
//   the values the policy saves (the block's inputs, parameters, and under
//   kSaveDots its dots' outputs), each placed just before the first gradient
//   node that needs it, so the buffer plan frees the forward originals after
//   their last forward use. Each layer of a scanned Layers (Graph::repeats)
//   is a block of its own under its Layers' rule ("h"): its copies start
//   from the value the previous layer passed it, which is kept. Copies keep their original's
//   attributes (a dropout mask's stream key too), layer and micro-batch, so
//   they compute the same values bit for bit and partition alike; nothing
//   else changes (node ids in outputs, updates, gradients and layout_of are
//   renumbered). With no rules, or only kSaveAll, the graph is unchanged.
// Throws user_error at a rule's line when its block names no forward op
//   (listing the blocks there are), or when two rules name the same block.
//
//   before: %3 = dot(%1, %2) : f32[8,64]          // model.h:20 h0/fc
//           %4 = tanh(%3) : f32[8,64]             // model.h:21 h0
//           ...
//           %9 = mul(%8, %4) : f32[8,64] backward // the tanh's adjoint reads %4
//   after (h0 recompute_all):
//           %9 = dot(%1, %2) : f32[8,64] remat
//           %10 = tanh(%9) : f32[8,64] remat
//           %11 = mul(%8, %10) : f32[8,64] backward
#pragma once

#include "ir/ir.h"

namespace sharc {

ir::Graph rematerialize(const ir::Graph& g);

}  // namespace sharc

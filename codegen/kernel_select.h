// Kernel selection for a GPU backend: which composite regions
// (ir::Composite) of a per-device program run as one of sharc's GPU kernels
// (runtime/gpu/kernel_set.h) on their local shapes, and, for the others, why
// not. A region that falls back is compiled like the code around it:
// generated kernels per fusion group, GEMMs on cuBLASLt.
//
// Each region has a forward part and, in training programs, a backward part
// (the nodes autodiff made from it, Node::backward); each part is chosen on
// its own. A part runs as its kernel when
//  - the partitioner put no collective inside it (a collective there means
//    the part needs a dimension whole that the mesh splits: a layer norm
//    over a sharded feature axis, a cross-entropy over a vocabulary split
//    over 'model'; an embedding's partial sums, summed after its dot, are
//    no such collective), and
//  - its attributes fit the kernel: attention's head size is one the
//    kernels are built for (runtime/gpu/kernel_limits.h), and it has no
//    dropout on the attention weights (the kernels have none).
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace sharc {

struct KernelChoice {
  int composite = -1;     // Graph::composites index
  bool backward = false;  // the part autodiff made
  std::string kernel;     // KernelSet's name for it ("layernorm_forward"); empty: it falls back
  std::string reason;     // a fallback's why, in words
  std::vector<int> nodes; // the part's nodes in the per-device graph, in order
};

// The choice for every part of every region that has nodes in `partitioned`
// (a per-device program, or a pipeline stage's), in region order, forward
// before backward.
std::vector<KernelChoice> select_kernels(const ir::Graph& partitioned);

// A table for people: one line per part, "model.h:21 h/ln1 layer_norm
// forward: layernorm_forward" or "... falls back: <reason>".
std::string format_kernel_choices(const ir::Graph& partitioned, const std::vector<KernelChoice>& choices);

}  // namespace sharc

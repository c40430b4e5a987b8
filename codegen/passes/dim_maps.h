// Which dimensions of an op's operands and result must share a sharding: the
// one table both propagate_shardings and partition_per_device read, so the
// layouts propagation proposes are exactly the ones the partitioner can compute
// locally. Not a pass; a helper of the two.
#pragma once

#include <vector>

#include "ir/ir.h"

namespace sharc {

// Operand `arg` dimension `arg_dim` corresponds to result dimension `result_dim`
// (or, with result_dim == -1, to dimension `other_dim` of operand `other_arg`:
// a dot's paired contracting dimensions).
struct DimLink {
  int arg, arg_dim, result_dim;
  int other_arg = -1, other_dim = -1;
};

std::vector<DimLink> dim_links(const ir::Graph& g, const ir::Node& n);

// Contiguous groups of a reshape: operand dims [in_begin, in_end) hold the
// same elements as result dims [out_begin, out_end). Size-1 dims form their
// own groups.
struct ReshapeGroup {
  int in_begin, in_end, out_begin, out_end;
};
std::vector<ReshapeGroup> reshape_groups(const ir::Shape& in, const ir::Shape& out);

}  // namespace sharc

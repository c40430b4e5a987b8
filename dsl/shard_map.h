// shard_map: an explicit per-device escape hatch, as jax.experimental.shard_map.
//
//   auto ys = shard_map(
//       [](const std::vector<Tensor>& b) {        // b: this device's blocks
//         Tensor y = matmul(b[0], b[1]);           // ordinary ops, LOCAL shapes
//         return std::vector<Tensor>{psum_scatter(y, "model", 1)};
//       },
//       {x, w}, {P("data", "model"), P("model", None)}, {P("data", "model")},
//       {{8, 16}});                                // global result shapes
//
// Inside the body, tensors hold one device's block of the operands (cut per
// `in_specs`) and the body may call the per-device collectives below. The
// body's results are blocks of the global results, laid out per `out_specs`
// (a dimension an out spec leaves unsplit must be the same on every device
// that holds it; sharc takes the block of the lowest-ranked one).
//
// The mesh is not known while a program is traced, so neither are the local
// shapes: the body is kept as a callable (Graph::shard_maps) and traced once
// per lowering, per device program, by instantiate_shard_map(). For the same
// reason the global result shapes are declared (`out_shapes`, like the
// out_shape of jax's pallas_call); a body whose results do not match them is
// reported at the shard_map's line when the program is lowered. Because the
// body runs after the enclosing code has returned, it must capture by value
// (settings, not tensors): a tensor from outside the body is reported at the
// op that uses it; pass it in as an operand instead.
//
// Not differentiable: train_step / append_gradients report a shard_map on the
// gradient path. Parameters are made outside the body and passed in as
// operands (Scope::param inside a body is an error).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ir/partition_spec.h"
#include "dsl/tensor.h"

namespace sharc {

// A shard_map body: one device's blocks of the operands in, its blocks of
// the results out.
using ShardMapFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& local_blocks)>;

// jax.shard_map: `body` runs on every device on its blocks of `args` (laid
// out by in_specs), with the per-device collectives below; its results are
// the blocks of global values of out_shapes laid out by out_specs.
std::vector<Tensor> shard_map(const ShardMapFn& body, const std::vector<Tensor>& args,
                              std::vector<P> in_specs, std::vector<P> out_specs,
                              std::vector<std::vector<int64_t>> out_shapes,
                              SrcLoc loc = Here::current());

// Per-device collectives: valid only on values of a shard_map body (a user
// error elsewhere). `axis` is one mesh axis; the group is the devices that
// share every other coordinate, ordered by their coordinate on `axis`.
//
// Concatenates the group's blocks along `dim` (lax.all_gather(tiled=True)).
Tensor all_gather(Tensor x, const std::string& axis, int dim, SrcLoc loc = Here::current());
// Sum over the group (lax.psum).
Tensor psum(Tensor x, const std::string& axis, SrcLoc loc = Here::current());
// Sum over the group, keeping block `position` of `dim` (lax.psum_scatter(tiled=True)).
Tensor psum_scatter(Tensor x, const std::string& axis, int dim, SrcLoc loc = Here::current());
// Sends the value of position `src` to position `dst` for every pair; a
// position that receives nothing gets zeros (lax.ppermute). Sources and
// destinations are positions 0..n-1 along `axis`, each at most once.
Tensor ppermute(Tensor x, const std::string& axis, std::vector<std::pair<int, int>> perm,
                SrcLoc loc = Here::current());
// This device's coordinate on `axis` as a scalar (lax.axis_index).
Tensor axis_index(const std::string& axis, SrcLoc loc = Here::current());

// What a Graph keeps of a shard_map (ir.h: Graph::shard_maps).
struct ShardMapBody {
  ShardMapFn fn;                  // the body
  std::vector<P> in_specs;        // the operands' layouts
  std::vector<P> out_specs;       // the results' layouts
  std::vector<ir::Shape> in_shapes;   // global
  std::vector<ir::Shape> out_shapes;  // global
  SrcLoc loc;                     // the shard_map call
};

// A body traced for one mesh: `body` is a per-device graph (partitioned, its
// mesh set) whose Input nodes, in order, are the operands' blocks and whose
// outputs, in order, are the results' blocks; `in` and `out` are the specs as
// shardings. User errors (unknown axis, a spec that does not divide, a body
// result of the wrong shape, a bad ppermute) are thrown at the user's line.
struct ShardMapInstance {
  ir::Graph body;                // one device's graph
  std::vector<ir::Sharding> in;  // the operands' layouts
  std::vector<ir::Sharding> out;  // the results' layouts
};
// Traces `body` for `mesh` (see ShardMapInstance).
ShardMapInstance instantiate_shard_map(const ShardMapBody& body, const Mesh& mesh);

// The body of ShardMap node `n` of g (internal_error when g does not hold it).
const ShardMapBody& shard_map_body(const ir::Graph& g, const ir::Node& n);

}  // namespace sharc

// shard_map: tracing the call (global IR), and tracing its body per device.
#include "dsl/shard_map.h"

#include <set>

namespace sharc {

namespace {

using ir::Node;
using ir::Op;
using ir::Shape;

// The body being traced on this thread (instantiate_shard_map), if any.
struct BodyContext {
  Tracer* tracer = nullptr;
  const Mesh* mesh = nullptr;
  BodyContext* previous = nullptr;
};
thread_local BodyContext* g_body = nullptr;

std::string quoted_axes(const Mesh& mesh) {
  std::string s;
  for (size_t i = 0; i < mesh.axes().size(); ++i) s += (i ? ", '" : "'") + mesh.axes()[i].name + "'";
  return s;
}

// The body context x belongs to; user error outside a body.
BodyContext& body_of(const Tensor& x, const char* what, const SrcLoc& loc) {
  if (!x.valid()) user_error(loc, std::string(what) + " of an empty Tensor");
  for (BodyContext* c = g_body; c; c = c->previous)
    if (c->tracer == x.tracer()) return *c;
  user_error(loc, std::string(what) + " of " + x.describe() +
                      ": per-device collectives are only valid inside a shard_map body, on its values");
}

int axis_size(const BodyContext& c, const std::string& axis, const char* what, const SrcLoc& loc) {
  if (!c.mesh->has(axis))
    user_error(loc, std::string(what) + ": unknown mesh axis '" + axis + "'; the mesh " + c.mesh->str() +
                        " has axes " + quoted_axes(*c.mesh));
  return c.mesh->size(axis);
}

int normalize_dim(const Tensor& x, int dim, const char* what, const SrcLoc& loc) {
  const int r = static_cast<int>(x.rank());
  if (dim < -r || dim >= r)
    user_error(loc, std::string(what) + ": dim " + std::to_string(dim) + " is out of range for " + x.describe());
  return dim < 0 ? dim + r : dim;
}

Tensor collective(BodyContext& c, Op op, const Tensor& x, const std::string& axis, int dim, Shape shape,
                  const SrcLoc& loc) {
  Node n;
  n.op = op;
  n.args = {x.id()};
  n.axes = {axis};
  n.dim = dim;
  n.shape = std::move(shape);
  n.loc = loc;
  return c.tracer->add(std::move(n));
}

// A spec as a layout on `mesh`, checked against the global shape.
ir::Sharding to_sharding(const P& spec, const Shape& global, const Mesh& mesh, const SrcLoc& loc,
                         const std::string& what) {
  if (spec.rank() != global.size())
    user_error(loc, "shard_map " + what + " spec " + spec.str() + " has " + std::to_string(spec.rank()) +
                        " entries but the value " + ir::shape_str(global) + " has rank " +
                        std::to_string(global.size()));
  ir::Sharding s = ir::Sharding::replicated(global.size());
  std::set<std::string> seen;
  for (size_t d = 0; d < global.size(); ++d) {
    for (const std::string& a : spec[d].axes) {
      if (!mesh.has(a))
        user_error(loc, "shard_map " + what + " spec " + spec.str() + ": unknown mesh axis '" + a +
                            "'; the mesh " + mesh.str() + " has axes " + quoted_axes(mesh) +
                            " (shard_map specs name mesh axes, not logical ones)");
      if (!seen.insert(a).second)
        user_error(loc, "shard_map " + what + " spec " + spec.str() + " uses mesh axis '" + a + "' twice");
      s.dims[d].push_back(a);
    }
    const int64_t parts = s.parts(mesh, d);
    if (global[d] % parts != 0)
      user_error(loc, "shard_map " + what + " spec " + spec.str() + " splits dimension " + std::to_string(d) +
                          " of " + ir::shape_str(global) + " into " + std::to_string(parts) +
                          " blocks on the mesh " + mesh.str() + ", which does not divide");
  }
  return s;
}

}  // namespace

std::vector<Tensor> shard_map(const ShardMapFn& body, const std::vector<Tensor>& args,
                              std::vector<P> in_specs, std::vector<P> out_specs,
                              std::vector<std::vector<int64_t>> out_shapes, SrcLoc loc) {
  if (!body) user_error(loc, "shard_map without a body");
  if (args.empty()) user_error(loc, "shard_map needs at least one operand");
  if (in_specs.size() != args.size())
    user_error(loc, "shard_map has " + std::to_string(args.size()) + " operands but " +
                        std::to_string(in_specs.size()) + " in specs");
  if (out_specs.size() != out_shapes.size())
    user_error(loc, "shard_map has " + std::to_string(out_specs.size()) + " out specs but " +
                        std::to_string(out_shapes.size()) + " out shapes");
  if (out_specs.empty()) user_error(loc, "shard_map needs at least one output");
  Tracer* t = nullptr;
  for (const Tensor& a : args) {
    if (!a.valid()) user_error(loc, "shard_map operand is an empty Tensor");
    if (t && a.tracer() != t) user_error(loc, "shard_map operands come from different programs");
    t = a.tracer();
  }
  for (size_t i = 0; i < args.size(); ++i)
    if (in_specs[i].rank() != args[i].rank())
      user_error(loc, "shard_map in spec " + std::to_string(i) + " " + in_specs[i].str() + " has " +
                          std::to_string(in_specs[i].rank()) + " entries but operand " + args[i].describe() +
                          " has rank " + std::to_string(args[i].rank()));
  for (size_t j = 0; j < out_specs.size(); ++j) {
    if (out_specs[j].rank() != out_shapes[j].size())
      user_error(loc, "shard_map out spec " + std::to_string(j) + " " + out_specs[j].str() + " has " +
                          std::to_string(out_specs[j].rank()) + " entries but out shape " +
                          ir::shape_str(out_shapes[j]) + " has rank " + std::to_string(out_shapes[j].size()));
    for (int64_t d : out_shapes[j])
      if (d <= 0) user_error(loc, "shard_map out shape " + ir::shape_str(out_shapes[j]) + " has a non-positive dimension");
  }
  auto b = std::make_shared<ShardMapBody>();
  b->fn = body;
  b->in_specs = std::move(in_specs);
  b->out_specs = out_specs;
  for (const Tensor& a : args) b->in_shapes.push_back(a.shape());
  b->out_shapes = out_shapes;
  b->loc = loc;
  ir::Graph& g = t->graph();
  const int index = static_cast<int>(g.shard_maps.size());
  g.shard_maps.push_back(std::move(b));
  std::vector<Tensor> out;
  for (size_t j = 0; j < out_specs.size(); ++j) {
    Node n;
    n.op = Op::kShardMap;
    for (const Tensor& a : args) n.args.push_back(a.id());
    n.ints = {index, static_cast<int>(j)};
    n.shape = out_shapes[j];
    n.spec = out_specs[j];  // the result's layout is fixed (resolve_logical_axes)
    n.loc = loc;
    out.push_back(t->add(std::move(n)));
  }
  return out;
}

ShardMapInstance instantiate_shard_map(const ShardMapBody& b, const Mesh& mesh) {
  ShardMapInstance inst;
  for (size_t i = 0; i < b.in_specs.size(); ++i)
    inst.in.push_back(to_sharding(b.in_specs[i], b.in_shapes[i], mesh, b.loc, "in " + std::to_string(i)));
  for (size_t j = 0; j < b.out_specs.size(); ++j)
    inst.out.push_back(to_sharding(b.out_specs[j], b.out_shapes[j], mesh, b.loc, "out " + std::to_string(j)));

  Tracer tracer("shard_map");
  BodyContext ctx{&tracer, &mesh, g_body};
  g_body = &ctx;
  struct Restore {
    BodyContext* prev;
    ~Restore() { g_body = prev; }
  } restore{ctx.previous};
  ir::Graph& sg = tracer.graph();
  sg.mesh = mesh;
  sg.partitioned = true;
  std::vector<Tensor> locals;
  for (size_t i = 0; i < b.in_shapes.size(); ++i) {
    Node n;
    n.op = Op::kInput;
    n.name = "shard_map_operand" + std::to_string(i);
    n.shape = inst.in[i].local_shape(b.in_shapes[i], mesh);
    n.loc = b.loc;
    locals.push_back(tracer.add(std::move(n)));
  }
  const std::vector<Tensor> results = b.fn(locals);
  if (results.size() != b.out_specs.size())
    user_error(b.loc, "shard_map body returns " + std::to_string(results.size()) + " values but there are " +
                          std::to_string(b.out_specs.size()) + " out specs");
  for (size_t j = 0; j < results.size(); ++j) {
    const Tensor& r = results[j];
    if (!r.valid() || r.tracer() != &tracer)
      user_error(b.loc, "shard_map body output " + std::to_string(j) + " is " +
                            (r.valid() ? r.describe() + ", a value from outside the body" : std::string("an empty Tensor")) +
                            "; return values computed in the body");
    const Shape want = inst.out[j].local_shape(b.out_shapes[j], mesh);
    if (r.shape() != want)
      user_error(b.loc, "shard_map body returns " + ir::shape_str(r.shape()) + " for output " + std::to_string(j) +
                            " but out spec " + b.out_specs[j].str() + " on global " +
                            ir::shape_str(b.out_shapes[j]) + " needs " + ir::shape_str(want) + " on the mesh " +
                            mesh.str());
    sg.outputs.push_back({"shard_map_result" + std::to_string(j), r.id(), b.loc, std::nullopt, std::nullopt});
  }
  for (const Node& n : sg.nodes)
    if (n.op == Op::kParameter)
      user_error(n.loc, "parameter '" + n.name +
                            "' made inside a shard_map body; make it outside and pass it as an operand");
  inst.body = std::move(sg);
  return inst;
}

const ShardMapBody& shard_map_body(const ir::Graph& g, const ir::Node& n) {
  if (n.op != Op::kShardMap || n.ints.size() != 2 || n.ints[0] < 0 ||
      n.ints[0] >= static_cast<int>(g.shard_maps.size()) || !g.shard_maps[n.ints[0]])
    internal_error("shard_map node without its body in the graph");
  return *g.shard_maps[n.ints[0]];
}

Tensor all_gather(Tensor x, const std::string& axis, int dim, SrcLoc loc) {
  BodyContext& c = body_of(x, "all_gather", loc);
  const int n = axis_size(c, axis, "all_gather", loc);
  dim = normalize_dim(x, dim, "all_gather", loc);
  Shape s = x.shape();
  s[dim] *= n;
  return collective(c, Op::kAllGather, x, axis, dim, s, loc);
}

Tensor psum(Tensor x, const std::string& axis, SrcLoc loc) {
  BodyContext& c = body_of(x, "psum", loc);
  axis_size(c, axis, "psum", loc);
  return collective(c, Op::kAllReduce, x, axis, -1, x.shape(), loc);
}

Tensor psum_scatter(Tensor x, const std::string& axis, int dim, SrcLoc loc) {
  BodyContext& c = body_of(x, "psum_scatter", loc);
  const int n = axis_size(c, axis, "psum_scatter", loc);
  dim = normalize_dim(x, dim, "psum_scatter", loc);
  Shape s = x.shape();
  if (s[dim] % n != 0)
    user_error(loc, "psum_scatter of " + x.describe() + " over '" + axis + "' (" + std::to_string(n) +
                        " devices): dimension " + std::to_string(dim) + " of size " + std::to_string(s[dim]) +
                        " does not divide");
  s[dim] /= n;
  return collective(c, Op::kReduceScatter, x, axis, dim, s, loc);
}

Tensor ppermute(Tensor x, const std::string& axis, std::vector<std::pair<int, int>> perm, SrcLoc loc) {
  BodyContext& c = body_of(x, "ppermute", loc);
  const int n = axis_size(c, axis, "ppermute", loc);
  std::set<int> srcs, dsts;
  for (auto [s, d] : perm) {
    const std::string pair = "(" + std::to_string(s) + ", " + std::to_string(d) + ")";
    if (s < 0 || s >= n || d < 0 || d >= n)
      user_error(loc, "ppermute over '" + axis + "': pair " + pair + " is not a pair of positions 0.." +
                          std::to_string(n - 1) + " (the axis has " + std::to_string(n) + " devices)");
    if (!srcs.insert(s).second)
      user_error(loc, "ppermute over '" + axis + "': pair " + pair + " is not a permutation: source " +
                          std::to_string(s) + " appears twice");
    if (!dsts.insert(d).second)
      user_error(loc, "ppermute over '" + axis + "': pair " + pair + " is not a permutation: destination " +
                          std::to_string(d) + " appears twice");
  }
  Tensor t = collective(c, Op::kPPermute, x, axis, -1, x.shape(), loc);
  ir::Node& node = c.tracer->graph().nodes[t.id()];
  for (auto [s, d] : perm) {
    node.ints.push_back(s);
    node.ints.push_back(d);
  }
  return t;
}

Tensor axis_index(const std::string& axis, SrcLoc loc) {
  if (!g_body) user_error(loc, "axis_index('" + axis + "') outside a shard_map body");
  BodyContext& c = *g_body;
  axis_size(c, axis, "axis_index", loc);
  Node n;
  n.op = Op::kAxisIndex;
  n.axes = {axis};
  n.loc = loc;
  return c.tracer->add(std::move(n));
}

}  // namespace sharc

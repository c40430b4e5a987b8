// PartitionSpec (`P`) and logical axis rules, the user's spelling of a layout.
// A spec has one entry per tensor dimension: None (replicated), one axis name,
// or several (`axes("data", "fsdp")`, major to minor). Names may be mesh axes or
// logical names ("embed", "batch") that LogicalRules map to mesh axes; which is
// which is decided later, by the resolve_logical_axes pass, against the mesh.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sharc {

// The type of None, a spec entry that leaves its dimension unsplit.
struct NoneT {
  constexpr bool operator==(const NoneT&) const = default;  // every None is equal
};
// An unsplit dimension in a spec: P(None, "model"), as JAX's None.
inline constexpr NoneT None{};

// One dimension's entry in a spec: the axes it is split over, major first.
struct DimSpec {
  std::vector<std::string> axes;  // empty: the dimension is not split
  DimSpec() = default;
  // None, one axis by name, or several (axes(...)): implicit, so that P's
  // arguments read as JAX's.
  //@{
  DimSpec(NoneT) {}                               // NOLINT: implicit by design
  DimSpec(const char* axis) : axes{axis} {}       // NOLINT
  DimSpec(std::string axis) : axes{std::move(axis)} {}  // NOLINT
  explicit DimSpec(std::vector<std::string> a) : axes(std::move(a)) {}
  //@}
  // The same axes in the same order.
  bool operator==(const DimSpec&) const = default;
};

// Several axes for one dimension: P(axes("data", "fsdp"), None).
template <class... Names>
DimSpec axes(Names... names) {
  return DimSpec(std::vector<std::string>{std::string(names)...});
}

// A PartitionSpec: one entry per dimension of a tensor, each None, a mesh
// axis (or a logical name the rules map to one), or several axes. A spec
// shorter than the tensor leaves the remaining dimensions unsplit, as JAX's.
class P {
 public:
  P() = default;  // rank-0 / fully replicated
  // One entry per argument: P(None, "model"), P("data"), P(axes("data", "fsdp"), None).
  //@{
  template <class... Ts>
  explicit P(Ts... dims) : dims_{DimSpec(dims)...} {}
  explicit P(std::vector<DimSpec> dims) : dims_(std::move(dims)) {}
  //@}

  // The number of entries.
  size_t rank() const { return dims_.size(); }
  // The entries, and entry i.
  //@{
  const std::vector<DimSpec>& dims() const { return dims_; }
  const DimSpec& operator[](size_t i) const { return dims_[i]; }
  //@}
  // The same entries.
  bool operator==(const P&) const = default;
  std::string str() const;  // P(None, 'model'), as in JAX

 private:
  std::vector<DimSpec> dims_;
};

// Ordered (logical name, mesh axis or None) pairs, as Flax sharding_rules:
// (("batch", "data"), ("hidden", "model"), ("embed", None)).
struct LogicalRule {
  std::string logical;                   // the name the model uses ("batch")
  std::optional<std::string> mesh_axis;  // the mesh axis it maps to, or None (unsplit)
};
// The rules in order; the first whose mesh axis the mesh has and the spec
// does not already use wins (Flax's logical_to_mesh_axes).
using LogicalRules = std::vector<LogicalRule>;

}  // namespace sharc

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

struct NoneT {
  constexpr bool operator==(const NoneT&) const = default;
};
inline constexpr NoneT None{};

// One dimension's entry in a spec: the axes it is split over, major first.
struct DimSpec {
  std::vector<std::string> axes;
  DimSpec() = default;
  DimSpec(NoneT) {}                               // NOLINT: implicit by design
  DimSpec(const char* axis) : axes{axis} {}       // NOLINT
  DimSpec(std::string axis) : axes{std::move(axis)} {}  // NOLINT
  explicit DimSpec(std::vector<std::string> a) : axes(std::move(a)) {}
  bool operator==(const DimSpec&) const = default;
};

// Several axes for one dimension: P(axes("data", "fsdp"), None).
template <class... Names>
DimSpec axes(Names... names) {
  return DimSpec(std::vector<std::string>{std::string(names)...});
}

class P {
 public:
  P() = default;  // rank-0 / fully replicated
  template <class... Ts>
  explicit P(Ts... dims) : dims_{DimSpec(dims)...} {}
  explicit P(std::vector<DimSpec> dims) : dims_(std::move(dims)) {}

  size_t rank() const { return dims_.size(); }
  const std::vector<DimSpec>& dims() const { return dims_; }
  const DimSpec& operator[](size_t i) const { return dims_[i]; }
  bool operator==(const P&) const = default;
  std::string str() const;  // P(None, 'model'), as in JAX

 private:
  std::vector<DimSpec> dims_;
};

// Ordered (logical name, mesh axis or None) pairs, as Flax sharding_rules:
// (("batch", "data"), ("hidden", "model"), ("embed", None)).
struct LogicalRule {
  std::string logical;
  std::optional<std::string> mesh_axis;
};
using LogicalRules = std::vector<LogicalRule>;

}  // namespace sharc

// Sharding rules applied from outside the model, as in Scalax: the user picks
// data parallelism, FSDP, tensor parallelism or a mix through the mesh and a
// list of rules, without touching model code. The rules are data; the
// apply_sharding_rules pass (codegen/passes/apply_sharding_rules.h) applies
// them to every parameter once the mesh is known. Each rule records where it
// was constructed, so a rule's mistake is reported at the rule's line.
//
// How rules combine with in-model annotations (with_partitioning, logical
// names):
//  - the in-model annotation, resolved against the mesh and the logical rules,
//    is the starting point (replicated when there is none);
//  - the rules apply in order, each to the result of the previous one;
//  - Replicated() and a matching PathRule pattern replace the layout;
//  - FSDPRule adds its axis to one dimension the layout leaves unsharded;
//  - a rule that names a mesh axis the mesh does not have is inactive on that
//    mesh, so one rule set serves data=8, fsdp=8 and fsdp=4,model=2 alike;
//  - with a non-empty rule list every parameter's layout is fixed by the
//    annotation and the rules (replicated where neither shards it);
//    propagation never chooses it;
//  - optimizer state (a parameter with layout_of) is not matched by rules: it
//    takes its parameter's final layout.
//
//   ShardingRules rules = {
//       PathRule({{"attn/.*kernel", P(None, "model")}}),  // TP where the mesh has 'model'
//       FSDPRule(),                                        // then FSDP over 'fsdp'
//   };
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <variant>
#include <vector>

#include "ir/error.h"
#include "ir/partition_spec.h"

namespace sharc {

// Every parameter is replicated, whatever its in-model annotation says.
class Replicated {
 public:
  // The rule, recorded at the caller's line.
  explicit Replicated(SrcLoc loc = Here::current()) : loc_(std::move(loc)) {}
  // Where it was constructed (its mistakes are reported there).
  const SrcLoc& loc() const { return loc_; }
  // "Replicated()", as the rule is written.
  std::string str() const { return "Replicated()"; }

 private:
  SrcLoc loc_;
};

// Scalax's FSDPShardingRule. A parameter with fewer than min_fsdp_size
// elements keeps its layout. Otherwise one dimension that the layout leaves
// unsharded is split over `axis`; which one is the rule's Dimension:
//
//   kLargestDivisible (default): the largest dimension that divides by the
//     axis size, ties to the lower index; when none divides, the layout is
//     kept. This is Scalax's FSDPShardingRule(fsdp_axis_size=N); sharc knows
//     the mesh, so it always knows N.
//   kLargestPowerOfTwo: the dimension (of size > 1) with the largest
//     power-of-two divisor, ties to the lower index, as Scalax's bare
//     FSDPShardingRule() guesses when it is not told the axis size. Scalax
//     then shards that dimension even when the axis does not divide it
//     (JAX pads); sharc splits only evenly, so it keeps the layout then.
//
// The two differ where the largest dimension is not the most power-of-two
// one: f32[1536,1024] on fsdp=4 splits dimension 0 (1536 is the largest and
// divides by 4) by default and dimension 1 (2^10 divides 1024, only 2^9
// divides 1536) in kLargestPowerOfTwo.
class FSDPRule {
 public:
  // Which dimension a weight is split along (see above).
  enum class Dimension { kLargestDivisible, kLargestPowerOfTwo };
  // Shards every weight of at least min_fsdp_size elements over `axis`, in
  // the kLargestDivisible mode.
  explicit FSDPRule(std::string axis = "fsdp", int64_t min_fsdp_size = int64_t{1} << 20,
                    SrcLoc loc = Here::current());
  // The same in the given mode.
  FSDPRule(std::string axis, int64_t min_fsdp_size, Dimension dimension,
           SrcLoc loc = Here::current());
  // The rule's fields, as constructed.
  //@{
  Dimension dimension() const { return dimension_; }
  const std::string& axis() const { return axis_; }
  int64_t min_fsdp_size() const { return min_fsdp_size_; }
  const SrcLoc& loc() const { return loc_; }
  //@}
  // FSDPRule('fsdp', min_fsdp_size=1048576), with ", largest_power_of_two"
  // before the ')' in that mode.
  std::string str() const;

 private:
  std::string axis_;
  int64_t min_fsdp_size_;
  Dimension dimension_ = Dimension::kLargestDivisible;
  SrcLoc loc_;
};

// One (regex, spec) pair of a PathRule. The spec names mesh axes (not logical
// names); P() replicates, and a spec shorter than the tensor's rank leaves
// the remaining dimensions unsharded, as in JAX.
struct PathPattern {
  std::string regex;  // searched for anywhere in the parameter's path (std::regex_search)
  P spec;             // the layout a matching parameter takes
};

// Path-based rules (Scalax's TreePathShardingRule): the patterns are tried in
// order with std::regex_search anywhere in the parameter's '/'-joined path;
// the first match's spec replaces the layout. Scalars are always replicated.
// An unmatched parameter keeps its layout, or is an error when `strict`.
class PathRule {
 public:
  // The patterns, tried in order; an invalid regex is an error at `loc`.
  //@{
  PathRule(std::initializer_list<PathPattern> patterns, bool strict = false,
           SrcLoc loc = Here::current());
  PathRule(std::vector<PathPattern> patterns, bool strict = false, SrcLoc loc = Here::current());
  //@}
  // The rule's fields, as constructed.
  //@{
  const std::vector<PathPattern>& patterns() const { return patterns_; }
  bool strict() const { return strict_; }
  const SrcLoc& loc() const { return loc_; }
  //@}
  std::string str() const;           // PathRule('kernel' -> P('fsdp', None), 'bias' -> P(), strict)
  std::string patterns_str() const;  // 'kernel', 'bias'

 private:
  std::vector<PathPattern> patterns_;
  bool strict_;
  SrcLoc loc_;
};

// One rule of any kind; converts implicitly from each, so a list reads
// ShardingRules{PathRule(...), FSDPRule()}.
class ShardingRule {
 public:
  // The rule kinds.
  using Kind = std::variant<Replicated, FSDPRule, PathRule>;
  // From a rule of any kind (implicit, so that a list reads naturally).
  //@{
  ShardingRule(Replicated r) : rule_(std::move(r)) {}  // NOLINT: implicit by design
  ShardingRule(FSDPRule r) : rule_(std::move(r)) {}    // NOLINT
  ShardingRule(PathRule r) : rule_(std::move(r)) {}    // NOLINT
  //@}
  // The rule itself.
  const Kind& kind() const { return rule_; }
  // Where the rule was constructed.
  const SrcLoc& loc() const;
  // The rule as written: "FSDPRule('fsdp', min_fsdp_size=1024)".
  std::string str() const;
  // The mesh axes the rule names: when the mesh lacks one, the rule is inactive.
  std::vector<std::string> axes() const;

 private:
  Kind rule_;
};

// Applied in order to every parameter (ProgramBuilder::set_sharding_rules, or
// PipelineOptions::sharding_rules, which takes precedence).
using ShardingRules = std::vector<ShardingRule>;

}  // namespace sharc

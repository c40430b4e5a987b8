// apply_sharding_rules: Scalax-style rules from outside the model -> fixed
// parameter layouts; see the header. Each rule kind is one function from a
// parameter's current layout to its next one, which also says why in the log.
#include "codegen/passes/apply_sharding_rules.h"

#include <algorithm>
#include <regex>
#include <type_traits>
#include <variant>

namespace sharc {

namespace {

std::string param_str(const ir::Node& n) {
  return "'" + n.name + "' " + ir::shape_str(n.shape);
}

// "; the parameter is created at model.cpp:12": rule errors are reported at
// the rule, so they name the parameter's own line too.
std::string created_at(const ir::Node& n) {
  return n.loc.known() ? "; the parameter is created at " + n.loc.str() : "";
}

// The largest power of two that divides n (n > 0).
int64_t pow2_divisor(int64_t n) { return n & -n; }

class RuleApplier {
 public:
  RuleApplier(const Mesh& mesh, std::vector<std::string>* log) : mesh_(mesh), log_(log) {}

  void say(const std::string& line) {
    if (log_) log_->push_back(line);
  }

  // The first mesh axis the rule names that the mesh lacks, or "" when active.
  std::string missing_axis(const ShardingRule& r) const {
    for (const std::string& a : r.axes())
      if (!mesh_.has(a)) return a;
    return "";
  }

  ir::Sharding replicated(const ir::Node& n, const ir::Sharding& s) {
    say("replicated: " + param_str(n) + (s.is_replicated() ? "" : " (was " + s.str() + ")"));
    return ir::Sharding::replicated(n.shape.size());
  }

  // Scalax FSDPShardingRule: of the dimensions still unsharded, the largest
  // that divides by the axis size, or (kLargestPowerOfTwo) the one with the
  // largest power-of-two divisor if the axis divides it; ties to the lower index.
  ir::Sharding fsdp(const FSDPRule& r, const ir::Node& n, ir::Sharding s) {
    const std::string head = "fsdp: " + param_str(n) + ": ";
    const std::string keeps = s.is_replicated() ? "replicated" : "keeps " + s.str();
    // A scanned layer's stacked parameter is judged by one layer's row, and
    // its layer axis (dimension 0) is never the one split: the layer's
    // parameters get the layout they would have unrolled.
    const size_t first = n.init.stack_scope.empty() ? 0 : 1;
    const int64_t elements = ir::num_elements(n.shape) / (first ? n.shape[0] : 1);
    if (elements < r.min_fsdp_size()) {
      say(head + keeps + " (" + std::to_string(elements) + " elements" + (first ? " per layer" : "") +
          " < min_fsdp_size " + std::to_string(r.min_fsdp_size()) + ")");
      return s;
    }
    const int size = mesh_.size(r.axis());
    const std::string axis = r.axis() + "=" + std::to_string(size);
    if (s.uses(r.axis())) {
      say(head + keeps + " (already sharded on '" + r.axis() + "')");
      return s;
    }
    bool some_sharded = false;
    for (size_t d = 0; d < n.shape.size(); ++d) some_sharded |= !s.dims[d].empty();
    const std::string unsharded = some_sharded ? "unsharded " : "";
    if (r.dimension() == FSDPRule::Dimension::kLargestPowerOfTwo) {
      int best = -1;
      for (size_t d = first; d < n.shape.size(); ++d) {
        if (!s.dims[d].empty() || n.shape[d] <= 1) continue;
        if (best < 0 || pow2_divisor(n.shape[d]) > pow2_divisor(n.shape[best]))
          best = static_cast<int>(d);
      }
      if (best < 0) {
        say(head + keeps + " (no " + unsharded + "dimension larger than 1)");
        return s;
      }
      const std::string which = "dimension " + std::to_string(best) + " (size " +
                                std::to_string(n.shape[best]) + ", largest " + unsharded +
                                "power-of-two divisor " +
                                std::to_string(pow2_divisor(n.shape[best]));
      if (n.shape[best] % size != 0) {
        say(head + keeps + " (" + which + ", does not divide by " + axis +
            "; Scalax would split it unevenly)");
        return s;
      }
      s.dims[best].push_back(r.axis());
      say(head + which + ", divisible by " + axis + ")");
      return s;
    }
    int best = -1;
    for (size_t d = first; d < n.shape.size(); ++d) {
      if (!s.dims[d].empty() || n.shape[d] % size != 0) continue;
      if (best < 0 || n.shape[d] > n.shape[best]) best = static_cast<int>(d);
    }
    if (best < 0) {
      say(head + keeps + " (no " + unsharded + "dimension divisible by " + axis + ")");
      return s;
    }
    s.dims[best].push_back(r.axis());
    say(head + "dimension " + std::to_string(best) + " (size " + std::to_string(n.shape[best]) +
        ", largest " + unsharded + "divisible by " + axis + ")");
    return s;
  }

  // Scalax TreePathShardingRule: the first pattern found in the path gives the
  // layout; scalars are replicated; unmatched keeps it, or is an error if strict.
  ir::Sharding path(const PathRule& r, const std::vector<std::regex>& res, const ir::Node& n,
                    const ir::Sharding& s) {
    const std::string head = "path: " + param_str(n) + ": ";
    if (n.shape.empty()) {
      say(head + "scalar, replicated");
      return ir::Sharding::replicated(0);
    }
    for (size_t i = 0; i < res.size(); ++i) {
      if (!std::regex_search(n.name, res[i])) continue;
      ir::Sharding out = from_spec(r, r.patterns()[i], n);
      say(head + "pattern '" + r.patterns()[i].regex + "' -> " + out.str());
      return out;
    }
    if (r.strict())
      user_error(r.loc(), "no sharding rule matches parameter " + param_str(n) +
                              " (strict PathRule at " + r.loc().str() + " with patterns " +
                              r.patterns_str() + ")" + created_at(n) +
                              ". Add a pattern that matches its path, or make the PathRule "
                              "non-strict to keep its in-model layout");
    say(head + "no pattern matches, keeps " + s.str());
    return s;
  }

 private:
  // The layout a PathRule pattern's spec gives parameter n: user errors at the
  // rule's line when it cannot apply to this tensor.
  ir::Sharding from_spec(const PathRule& r, const PathPattern& pat, const ir::Node& n) const {
    const std::string what = "PathRule pattern '" + pat.regex + "' gives " + pat.spec.str() +
                             " for parameter " + param_str(n) + ": ";
    if (pat.spec.rank() > n.shape.size())
      user_error(r.loc(), what + "the spec has " + std::to_string(pat.spec.rank()) +
                              " entries but the parameter has rank " +
                              std::to_string(n.shape.size()) + created_at(n) +
                              ". Make the pattern more specific so it does not match it");
    ir::Sharding s = ir::Sharding::replicated(n.shape.size());
    for (size_t d = 0; d < pat.spec.rank(); ++d)
      for (const std::string& a : pat.spec[d].axes) {
        if (s.uses(a))
          user_error(r.loc(), what + "mesh axis '" + a +
                                  "' is used twice; a mesh axis may shard at most one "
                                  "dimension of a tensor" +
                                  created_at(n));
        s.dims[d].push_back(a);
      }
    for (size_t d = 0; d < n.shape.size(); ++d) {
      const int64_t parts = s.parts(mesh_, d);
      if (n.shape[d] % parts == 0) continue;
      std::string axes;
      for (const std::string& a : s.dims[d])
        axes += (axes.empty() ? "'" : " x '") + a + "'=" + std::to_string(mesh_.size(a));
      if (s.dims[d].size() > 1) axes += " (" + std::to_string(parts) + " blocks)";
      user_error(r.loc(), what + "dimension " + std::to_string(d) + " (size " +
                              std::to_string(n.shape[d]) + ") does not divide by " + axes +
                              created_at(n));
    }
    return s;
  }

  const Mesh& mesh_;
  std::vector<std::string>* log_;
};

std::vector<std::regex> compile(const PathRule& r) {
  std::vector<std::regex> res;
  for (const PathPattern& p : r.patterns()) res.emplace_back(p.regex, std::regex::ECMAScript);
  return res;
}

}  // namespace

ir::Graph apply_sharding_rules(ir::Graph g, const ShardingRules& rules,
                               std::vector<std::string>* log) {
  RuleApplier apply(g.mesh, log);
  // The parameters rules apply to: all but optimizer state.
  std::vector<int> params;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    const ir::Node& n = g.nodes[id];
    if (n.op == ir::Op::kParameter && n.layout_of < 0) params.push_back(static_cast<int>(id));
  }
  if (!rules.empty()) {
    // Each parameter's layout so far: its resolved annotation, else replicated.
    std::vector<ir::Sharding> layout;
    for (int id : params) {
      const ir::Node& n = g.nodes[id];
      layout.push_back(n.fixed && n.sharding ? *n.sharding
                                             : ir::Sharding::replicated(n.shape.size()));
    }
    for (size_t k = 0; k < rules.size(); ++k) {
      const ShardingRule& rule = rules[k];
      const std::string title = "sharding rule " + std::to_string(k + 1) + " of " +
                                std::to_string(rules.size()) + ": " + rule.str() + " at " +
                                rule.loc().str();
      if (const std::string missing = apply.missing_axis(rule); !missing.empty()) {
        apply.say(title + ": inactive, the mesh " + g.mesh.str() + " has no axis '" + missing +
                  "'");
        continue;
      }
      apply.say(title);
      std::vector<std::regex> res;
      if (auto* p = std::get_if<PathRule>(&rule.kind())) res = compile(*p);
      for (size_t i = 0; i < params.size(); ++i) {
        const ir::Node& n = g.nodes[params[i]];
        std::visit(
            [&](const auto& r) {
              using R = std::decay_t<decltype(r)>;
              if constexpr (std::is_same_v<R, Replicated>)
                layout[i] = apply.replicated(n, layout[i]);
              else if constexpr (std::is_same_v<R, FSDPRule>)
                layout[i] = apply.fsdp(r, n, layout[i]);
              else
                layout[i] = apply.path(r, res, n, layout[i]);
            },
            rule.kind());
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      ir::Node& n = g.nodes[params[i]];
      n.sharding = std::move(layout[i]);
      n.fixed = true;
    }
  }
  // Optimizer state follows its parameter exactly, whatever its own annotation.
  for (ir::Node& n : g.nodes) {
    if (n.op != ir::Op::kParameter || n.layout_of < 0) continue;
    const ir::Node& p = g.nodes[n.layout_of];
    n.fixed = p.fixed;
    n.sharding = p.fixed ? p.sharding : std::nullopt;
    if (!rules.empty() && p.fixed)
      apply.say("state: " + param_str(n) + ": laid out like '" + p.name + "' " + n.sharding->str());
  }
  // Postconditions.
  for (const ir::Node& n : g.nodes) {
    if (n.op != ir::Op::kParameter || !n.fixed) continue;
    SHARC_CHECK(n.sharding && n.sharding->rank() == n.shape.size() && n.sharding->partial.empty(),
                "apply_sharding_rules left parameter '" + n.name + "' without a full sharding");
    std::vector<std::string> used;
    for (size_t d = 0; d < n.shape.size(); ++d) {
      for (const std::string& a : n.sharding->dims[d]) {
        SHARC_CHECK(g.mesh.has(a) && std::find(used.begin(), used.end(), a) == used.end(),
                    "parameter '" + n.name + "' has an invalid sharding " + n.sharding->str());
        used.push_back(a);
      }
      SHARC_CHECK(n.shape[d] % n.sharding->parts(g.mesh, d) == 0,
                  "parameter '" + n.name + "' sharding " + n.sharding->str() + " does not divide");
    }
  }
  return g;
}

}  // namespace sharc

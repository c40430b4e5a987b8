// Sharding rule constructors and spellings; applying them is the
// apply_sharding_rules pass. Mistakes visible without a mesh (a bad regex, a
// negative threshold, an empty axis name) are reported here, at the rule's line.
#include "dsl/sharding_rules.h"

#include <regex>

namespace sharc {

FSDPRule::FSDPRule(std::string axis, int64_t min_fsdp_size, SrcLoc loc)
    : FSDPRule(std::move(axis), min_fsdp_size, Dimension::kLargestDivisible, std::move(loc)) {}

FSDPRule::FSDPRule(std::string axis, int64_t min_fsdp_size, Dimension dimension, SrcLoc loc)
    : axis_(std::move(axis)),
      min_fsdp_size_(min_fsdp_size),
      dimension_(dimension),
      loc_(std::move(loc)) {
  if (axis_.empty()) user_error(loc_, "FSDPRule needs a mesh axis name, e.g. FSDPRule(\"fsdp\")");
  if (min_fsdp_size_ < 0)
    user_error(loc_, "FSDPRule min_fsdp_size is " + std::to_string(min_fsdp_size_) +
                         "; it must be >= 0 (0 or 1 shards every tensor that has a divisible "
                         "dimension)");
}

std::string FSDPRule::str() const {
  return "FSDPRule('" + axis_ + "', min_fsdp_size=" + std::to_string(min_fsdp_size_) +
         (dimension_ == Dimension::kLargestPowerOfTwo ? ", largest_power_of_two)" : ")");
}

PathRule::PathRule(std::initializer_list<PathPattern> patterns, bool strict, SrcLoc loc)
    : PathRule(std::vector<PathPattern>(patterns), strict, std::move(loc)) {}

PathRule::PathRule(std::vector<PathPattern> patterns, bool strict, SrcLoc loc)
    : patterns_(std::move(patterns)), strict_(strict), loc_(std::move(loc)) {
  for (const PathPattern& p : patterns_) {
    try {
      [[maybe_unused]] const std::regex compiled(p.regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      user_error(loc_, "PathRule pattern '" + p.regex + "' is not a valid regular expression (" +
                           e.what() + "); patterns use std::regex ECMAScript syntax");
    }
  }
}

std::string PathRule::patterns_str() const {
  std::string s;
  for (const PathPattern& p : patterns_) s += (s.empty() ? "'" : ", '") + p.regex + "'";
  return s.empty() ? "(none)" : s;
}

std::string PathRule::str() const {
  std::string s = "PathRule(";
  for (size_t i = 0; i < patterns_.size(); ++i)
    s += (i ? ", '" : "'") + patterns_[i].regex + "' -> " + patterns_[i].spec.str();
  return s + (strict_ ? ", strict)" : ")");
}

const SrcLoc& ShardingRule::loc() const {
  return std::visit([](const auto& r) -> const SrcLoc& { return r.loc(); }, rule_);
}

std::string ShardingRule::str() const {
  return std::visit([](const auto& r) { return r.str(); }, rule_);
}

std::vector<std::string> ShardingRule::axes() const {
  std::vector<std::string> out;
  auto add = [&](const std::string& a) {
    for (const std::string& b : out)
      if (a == b) return;
    out.push_back(a);
  };
  if (auto* f = std::get_if<FSDPRule>(&rule_)) add(f->axis());
  if (auto* p = std::get_if<PathRule>(&rule_))
    for (const PathPattern& pat : p->patterns())
      for (const DimSpec& d : pat.spec.dims())
        for (const std::string& a : d.axes) add(a);
  return out;
}

}  // namespace sharc

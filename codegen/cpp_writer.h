// Spelling C++ for the generated programs: literals, braced lists, unique
// identifiers and an indenting printer. Shared by the emission plan (which
// names every value once) and by each backend's renderer (the CPU's C++, the
// CUDA backend's host code), so a name or a literal is spelled one way.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/ir.h"
#include "runtime/init.h"

namespace sharc::cpp {

template <class T>
inline std::string join(const std::vector<T>& v, const std::string& sep) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? sep : "") << v[i];
  return os.str();
}

// {4, 1024}: a shape, permutation or axis list as a braced initializer.
template <class T>
inline std::string braced(const std::vector<T>& v) {
  return "{" + join(v, ", ") + "}";
}

inline std::string quoted(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}

// A float literal that parses back to exactly static_cast<float>(v), the value
// the interpreter's Constant holds.
inline std::string float_literal(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(f)) return "std::numeric_limits<float>::quiet_NaN()";
  if (std::isinf(f))
    return f > 0 ? "std::numeric_limits<float>::infinity()"
                 : "(-std::numeric_limits<float>::infinity())";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(f));
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  s += "f";
  return f < 0 ? "(" + s + ")" : s;
}

inline std::string double_literal(double v) {
  if (std::isnan(v)) return "std::numeric_limits<double>::quiet_NaN()";
  if (std::isinf(v))
    return v > 0 ? "std::numeric_limits<double>::infinity()"
                 : "-std::numeric_limits<double>::infinity()";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

inline const char* init_kind_name(rt::InitKind k) {
  switch (k) {
    case rt::InitKind::kZeros:
      return "kZeros";
    case rt::InitKind::kOnes:
      return "kOnes";
    case rt::InitKind::kConstant:
      return "kConstant";
    case rt::InitKind::kNormal:
      return "kNormal";
    case rt::InitKind::kUniform:
      return "kUniform";
    case rt::InitKind::kLecunNormal:
      return "kLecunNormal";
    case rt::InitKind::kXavierUniform:
      return "kXavierUniform";
  }
  internal_error("unknown InitKind");
}

inline const char* reduce_op(ir::ReduceKind k) {
  return k == ir::ReduceKind::kSum ? "rt::ReduceOp::kSum" : "rt::ReduceOp::kMax";
}

// "dot1/kernel" -> "dot1_kernel": a C++ identifier (not yet unique).
inline std::string identifier(const std::string& name) {
  std::string s;
  for (char c : name) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "v_" + s;
  return s;
}

// Unique identifiers within one scope. Generated names (t0, v1, ...) and the
// fixed names of the templates are reserved, so a user input called "out" or
// "t3" gets a suffix instead of a clash.
class Names {
 public:
  // Scopes: local variables of the generated functions also avoid the
  // templates' own names ("dev", "in", "seed", ...); members of the API's
  // Inputs/Outputs structs only avoid C++ keywords, so an input called "seed"
  // is the field `seed`.
  enum class Scope { kLocals, kFields };
  explicit Names(Scope scope = Scope::kLocals) {
    for (const char* k :
         {"and",      "auto",     "bool",   "break",  "case",    "char",   "class",    "const",
          "continue", "default",  "delete", "do",     "double",  "else",   "enum",     "float",
          "for",      "if",       "int",    "long",   "new",     "not",    "or",       "private",
          "public",   "return",   "short",  "signed", "sizeof",  "static", "struct",   "switch",
          "template", "this",     "throw",  "try",    "typedef", "union",  "unsigned", "using",
          "void",     "volatile", "while",  "xor"})
      taken_.insert(k);
    if (scope == Scope::kLocals)
      for (const char* k : {"dev", "comm", "mem", "rank", "in", "out", "i", "rt", "std", "seed",
                            "coords", "sharc", "key", "timeline", "step", "Step", "world", "world_", "dev_", "comm_",
                            "mem_", "timeline_", "in_", "out_", "rank_",
                            // the CUDA renderer's: the namespace, the step's device, a kernel's
                            // element count, an output's host copy
                            "gpu", "gpu_dev", "n", "host"})
        taken_.insert(k);
  }
  // A fresh identifier derived from a user name.
  std::string user(const std::string& name) {
    std::string base = identifier(name);
    if (generated_like(base)) base += "_";
    return take(base);
  }
  // The next name of a generated family ("t" -> t0, t1, ...).
  std::string next(const std::string& prefix) {
    for (;;) {
      std::string s = prefix + std::to_string(counters_[prefix]++);
      if (!taken_.count(s)) return take(s);
    }
  }

 private:
  static bool generated_like(const std::string& s) {
    if (s.size() < 2 || (s[0] != 't' && s[0] != 'v' && s[0] != 'i')) return false;
    return std::all_of(s.begin() + 1, s.end(), [](char c) { return std::isdigit(c); });
  }
  std::string take(std::string base) {
    std::string s = base;
    for (int k = 2; taken_.count(s); ++k) s = base + "_" + std::to_string(k);
    taken_.insert(s);
    return s;
  }
  std::set<std::string> taken_;
  std::map<std::string, int> counters_;
};

// The indenting printer. Lines are appended with the current indent; open()
// and close() bracket a block and close() names what it closes.
class CodeWriter {
 public:
  explicit CodeWriter(int indent = 0) : indent_(indent) {}
  CodeWriter& line(const std::string& s = "") {
    if (!s.empty()) os_ << std::string(2 * indent_, ' ') << s;
    os_ << "\n";
    return *this;
  }
  // Lines already indented (another writer's str() at this depth).
  CodeWriter& text(const std::string& lines) {
    os_ << lines << "\n";
    return *this;
  }
  void open(const std::string& head) {
    line(head.empty() ? "{" : head + " {");
    ++indent_;
  }
  // Ends a block whose closing line the caller writes itself ("};").
  CodeWriter& operator--() {
    --indent_;
    return *this;
  }
  void close(const std::string& what = "") {
    --indent_;
    line(what.empty() ? "}" : "}  // " + what);
  }
  // Without the final newline, so a placeholder line can hold the block.
  std::string str() const {
    std::string s = os_.str();
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }

 private:
  std::ostringstream os_;
  int indent_;
};

}  // namespace sharc::cpp

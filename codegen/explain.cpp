// The map from model lines to generated lines; see explain.h.
#include "codegen/explain.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include "codegen/cpp_writer.h"
#include "ir/error.h"

namespace sharc {

namespace {

using ir::Node;
using ir::Op;
using Kind = EmittedMark::Kind;

// A model line, ordered by file and then by line number (not as text, where
// model.h:100 would come before model.h:21).
struct Line {
  std::string file;
  int line = 0;
  bool operator<(const Line& o) const { return std::tie(file, line) < std::tie(o.file, o.line); }
  bool operator==(const Line& o) const { return line == o.line && file == o.file; }
  std::string str() const { return file + ":" + std::to_string(line); }
};

Line line_of(const SrcLoc& loc) { return {loc.file, loc.line}; }

// One generated line under a model line.
struct Entry {
  int file = 0, line = 0;  // in the generated source file (source_file_name)
  std::string kind, text;
  bool operator<(const Entry& o) const {
    return std::tie(file, line, kind, text) < std::tie(o.file, o.line, o.kind, o.text);
  }
};

// What a model line made, for its heading: op names in order of first
// appearance with their counts ("dot, relu", "reshape x12"), the gradient's
// apart.
struct Made {
  std::vector<std::pair<std::string, int>> ops, gradient;
  std::set<std::string> layers;
  std::vector<std::string> outputs;
  void add(const Node& n) {
    auto& list = n.backward ? gradient : ops;
    const std::string op = ir::op_name(n.op);
    auto it = std::find_if(list.begin(), list.end(), [&](auto& p) { return p.first == op; });
    if (it == list.end())
      list.emplace_back(op, 1);
    else
      ++it->second;
    if (!n.name.empty() && n.op != Op::kParameter && n.op != Op::kInput) layers.insert(n.name);
  }
  static std::string spell(const std::vector<std::pair<std::string, int>>& list) {
    std::vector<std::string> parts;
    for (auto& [op, n] : list) parts.push_back(n == 1 ? op : op + " x" + std::to_string(n));
    return cpp::join(parts, ", ");
  }
  std::string str() const {
    std::string s = spell(ops);
    if (!gradient.empty()) s += std::string(s.empty() ? "" : "; ") + "gradient: " + spell(gradient);
    if (!outputs.empty()) s += std::string(s.empty() ? "" : "; ") + "output " + cpp::join(outputs, ", ");
    if (!layers.empty()) {
      std::vector<std::string> l(layers.begin(), layers.end());
      if (l.size() > 4) l = {l.front(), "...", l.back()};
      s += "  (" + cpp::join(l, ", ") + ")";
    }
    return s;
  }
};

// 2097152 -> "2.10M": three significant digits with a metric suffix.
std::string metric(double v) {
  const char* suffix[] = {"", "K", "M", "G", "T"};
  int k = 0;
  while (v >= 1000 && k < 4) {
    v /= 1000;
    ++k;
  }
  char buf[32];
  if (k == 0)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f%s" : v >= 10 ? "%.1f%s" : "%.2f%s", v, suffix[k]);
  return buf;
}

// Bytes each device sends: one number when the devices that send agree,
// else the range over the devices of the mark's stage.
std::string sent_str(const EmittedMark& m, const std::vector<int>& stage_of_device) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t d = 0; d < m.sent.size(); ++d) {
    if (m.stage >= 0 && stage_of_device[d] != m.stage) continue;
    lo = std::min(lo, m.sent[d]);
    hi = std::max(hi, m.sent[d]);
  }
  if (lo == UINT64_MAX) return "no bytes sent";
  const std::string a = metric(static_cast<double>(lo)), b = metric(static_cast<double>(hi));
  return (a == b ? a : a + ".." + b) + "B sent per device";
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kKernel: return "kernel";
    case Kind::kCollective: return "collective";
    case Kind::kRingGemm: return "ring gemm";
    case Kind::kRingAdd: return "ring add";
  }
  return "?";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The first line at or after `from` that contains `needle` (1-based), 0 if none.
int find_line(const std::vector<std::string>& lines, const std::string& needle, int from = 1) {
  for (size_t i = static_cast<size_t>(std::max(from, 1)) - 1; i < lines.size(); ++i)
    if (lines[i].find(needle) != std::string::npos) return static_cast<int>(i) + 1;
  return 0;
}

}  // namespace

std::string explain(const Lowered& lowered, const EmittedFiles& files, const ExplainOptions& o) {
  const ir::Graph& global = lowered.global;
  const ir::Graph& whole = lowered.partitioned;
  const Mesh& mesh = whole.mesh;
  std::vector<int> stage_of_device(mesh.num_devices(), 0);
  if (whole.pipeline) {
    const int axis = mesh.index(whole.pipeline->axis);
    for (int d = 0; d < mesh.num_devices(); ++d) stage_of_device[d] = mesh.coords(d)[axis];
  }
  const std::vector<std::string> source = lines_of(files.source);
  // The source files that hold code: STEM.cpp, and the part files a large
  // program's step is spread over.
  std::vector<int> used = {0};
  for (const EmittedMark& m : files.marks)
    if (m.file != used.back()) used.push_back(m.file);
  std::vector<std::string> names;
  for (int k : used) names.push_back(source_file_name(o.stem, k, o.backend));
  const std::string src = names.size() == 1 ? names[0] : "the sources (" + cpp::join(names, ", ") + ")";

  std::map<Line, Made> made;
  std::map<Line, std::vector<Entry>> entries;
  int unlocated = 0;
  for (const Node& n : global.nodes) {
    if (n.loc.known())
      made[line_of(n.loc)].add(n);
    else
      ++unlocated;
  }
  for (const ir::Output& out : global.outputs)
    if (out.loc.known()) made[line_of(out.loc)].outputs.push_back(out.name);

  // The timeline marks: every kernel and collective, once each.
  int counts[4] = {0, 0, 0, 0};
  for (const EmittedMark& m : files.marks) {
    ++counts[static_cast<int>(m.kind)];
    const std::string layer = m.layer.empty() || m.op == "input" ? "" : " " + m.layer;
    std::string text;
    if (m.kind == Kind::kCollective || !m.sent.empty()) {
      text = m.what + layer + ", " + sent_str(m, stage_of_device);
    } else {
      text = m.op + layer;
      text += "  " + metric(m.flops) + " flops, " + metric(m.bytes) + "B moved";
      if (m.fused.size() > 1) {
        std::vector<std::string> ops;
        for (auto& f : m.fused) ops.push_back(f.second);
        text += "; fuses " + cpp::join(ops, ", ");
      }
    }
    if (m.stage >= 0) text += "  [stage " + std::to_string(m.stage) + "]";
    const Line at = m.loc.known() ? line_of(m.loc) : Line{"<no model line>", 0};
    entries[at].push_back({m.file, m.line, kind_name(m.kind), text});
    // Ops of other lines computed in this fused loop, by line.
    std::map<Line, std::vector<std::string>> others;
    for (auto& [loc, op] : m.fused)
      if (loc.known() && !(line_of(loc) == at)) others[line_of(loc)].push_back(op);
    for (const auto& [l, ops] : others)
      entries[l].push_back({m.file, m.line, "fused", cpp::join(ops, ", ") + " in the loop of " + m.op +
                                                    (m.loc.known() ? " (" + m.loc.str() + ")" : "")});
  }

  // Parameters: where their shards are initialised.
  const int init = find_line(source, "Program::init_device(");
  int parameters = 0;
  for (const Node& n : whole.nodes) {
    if (n.op != Op::kParameter || !n.loc.known()) continue;
    const int at = init ? find_line(source, "\"" + n.name + "\": block", init) : 0;
    if (!at) internal_error("explain: the source initialises no parameter \"" + n.name + "\"");
    const Node* g = global.find(n.name, Op::kParameter);
    entries[line_of(n.loc)].push_back(
        {0, at, "parameter", "\"" + n.name + "\" " + ir::shape_str(n.shape) + " " + n.sharding->str() +
                              (g ? " of " + ir::shape_str(g->shape) : "") + ", initialised"});
    ++parameters;
  }
  // Outputs: where the step writes them for the caller (after
  // forward_device in STEM.cpp, or in a part file).
  const int step = find_line(source, "::forward_device(");
  std::vector<std::vector<std::string>> part_lines;
  for (const std::string& part : files.parts) part_lines.push_back(lines_of(part));
  for (const ir::Output& out : whole.outputs) {
    if (!out.loc.known()) continue;
    const std::string needle = "// \"" + out.name + "\" (" + out.loc.str() + "): block";
    for (int k = 0; k <= static_cast<int>(files.parts.size()); ++k) {
      const int at = k == 0 ? (step ? find_line(source, needle, step) : 0) : find_line(part_lines[k - 1], needle);
      if (!at) continue;
      entries[line_of(out.loc)].push_back({k, at, "output", "\"" + out.name + "\" to the caller's array"});
      break;
    }
  }
  for (auto& [line, e] : entries) made[line];  // shard_map bodies: lines the global program has not

  std::ostringstream os;
  const int marks = static_cast<int>(files.marks.size());
  os << "// sharc explain: program " << o.program << " on mesh " << mesh.str() << ", from "
     << (o.model_file.empty() ? "<unknown model>" : o.model_file) << ".\n"
     << "// Each line of the model that made an op, with what it became in " << src << ":\n"
     << "//   kernel       a statement, with its modelled flops and bytes moved per device\n"
     << "//   collective   with the bytes each device sends per step\n"
     << "//   ring gemm/add the steps of a ring-overlapped dot\n"
     << "//   fused        this line's elementwise ops inside another line's loop\n"
     << "//   parameter    where its shard is initialised; output: where it is written\n"
     << "// " << src << (names.size() == 1 ? " has " : " have ") << marks << " timeline marks (" << counts[0] << " kernels, " << counts[1]
     << " collectives, " << counts[2] + counts[3] << " ring steps), each listed once below.\n";
  if (unlocated) os << "// " << unlocated << " ops of the program have no model line.\n";
  for (auto& [line, m] : made) {
    os << "\n" << (line.line ? line.str() : line.file) << "  " << m.str() << "\n";
    auto it = entries.find(line);
    if (it == entries.end()) {
      os << "  (no code of its own)\n";
      continue;
    }
    std::vector<Entry> e = it->second;
    std::sort(e.begin(), e.end());
    for (const Entry& x : e) {
      std::string line = std::to_string(x.line), kind = x.kind;
      line.resize(std::max<size_t>(line.size(), 6), ' ');
      kind.resize(std::max<size_t>(kind.size(), 11), ' ');
      os << "  " << source_file_name(o.stem, x.file, o.backend) << ":" << line << " " << kind << " " << x.text << "\n";
    }
  }
  if (!lowered.kernels.empty()) {
    // A GPU program: what each composite region's part runs as.
    std::istringstream lines(format_kernel_choices(whole, lowered.kernels));
    std::string line;
    os << "\n// Composite regions on the GPU: each part's KernelSet kernel (its marks above name\n"
       << "// the kernel), or why generated kernels compute it:\n";
    while (std::getline(lines, line)) os << line << "\n";
  }
  os << "\n// " << made.size() << " model lines, " << marks << " marks, " << parameters << " parameters.\n";
  return os.str();
}

}  // namespace sharc

// Predicted costs of a partitioned program; see report.h.
#include "codegen/report.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>

#include "codegen/buffer_plan.h"
#include "codegen/runtime_mesh.h"
#include "codegen/ring_plan.h"
#include "runtime/mesh.h"

namespace sharc {

namespace {

using ir::Node;
using ir::Op;
using rt::CollectiveKind;



rt::Group group_of(const Mesh& mesh, const rt::MeshShape& ms, int rank,
                   const std::vector<std::string>& axes) {
  std::vector<int> idx;
  for (auto& a : axes) idx.push_back(mesh.index(a));
  return rt::make_group(ms, rank, idx);
}

std::string where(const Node& n) {
  std::string s = n.loc.known() ? n.loc.str() : "";
  if (!n.name.empty()) s += (s.empty() ? "" : " ") + n.name;
  return s;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// Bytes member `p` of a ring all_reduce of `count` elements of `es` bytes
// over n sends (ThreadComm::all_reduce): all chunks but its own, then all but
// p + 1's.
uint64_t all_reduce_bytes(uint64_t count, uint64_t es, int n, int p) {
  if (n == 1) return 0;
  auto len = [&](int c) { return count / n + (static_cast<uint64_t>(c) < count % n ? 1 : 0); };
  return es * (2 * count - len(p) - len((p + 1) % n));
}

// Display width of a UTF-8 string (code points; the report's symbols are
// all one column wide).
size_t width(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) w += (c & 0xC0) != 0x80;
  return w;
}

// A plain text table: a header row, a rule, the rows; numbers right-aligned.
std::string table(const std::vector<std::string>& head,
                  const std::vector<std::vector<std::string>>& rows,
                  const std::vector<bool>& right) {
  std::vector<size_t> w(head.size());
  for (size_t c = 0; c < head.size(); ++c) w[c] = width(head[c]);
  for (auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], width(r[c]));
  auto line = [&](const std::vector<std::string>& r) {
    std::string s = " ";
    for (size_t c = 0; c < r.size(); ++c) {
      const size_t pad = w[c] - width(r[c]);
      const bool last = c + 1 == r.size();
      s.push_back(' ');
      if (right[c]) s.append(pad, ' ');
      s.append(r[c]);
      if (!right[c] && !last) s.append(pad, ' ');
      if (!last) s.push_back(' ');
    }
    s.push_back('\n');
    return s;
  };
  std::string out = line(head);
  std::vector<std::string> rule;
  for (size_t c = 0; c < head.size(); ++c) rule.push_back(std::string(w[c], '-'));
  out += line(rule);
  for (auto& r : rows) out += line(r);
  return out;
}

std::string num(uint64_t v) { return std::to_string(v); }

// 1234567 -> "1234567 (1.18 MiB)"; small values stay plain.
std::string bytes_str(uint64_t b) {
  if (b < 1024) return std::to_string(b);
  char buf[64];
  if (b < 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%llu (%.1f KiB)", static_cast<unsigned long long>(b),
                  static_cast<double>(b) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%llu (%.2f MiB)", static_cast<unsigned long long>(b),
                  static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

// One number when every device has it, else "min..max".
std::string per_device(const std::vector<uint64_t>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *lo == *hi ? bytes_str(*lo) : num(*lo) + ".." + num(*hi);
}

// The report's program and mesh lines and its parameter table.
Report describe_program(const ir::Graph& g) {
  const Mesh& mesh = g.mesh;
  Report r;
  r.program = g.name;
  r.mesh = mesh.str();
  r.num_devices = mesh.num_devices();
  for (const Node& v : g.nodes) {
    if (v.op != Op::kParameter) continue;
    ParameterReport p;
    p.path = v.name;
    p.spec = v.sharding ? v.sharding->str() : "?";
    p.local_shape = v.shape;
    p.global_shape = v.shape;
    if (v.sharding)
      for (size_t d = 0; d < v.shape.size(); ++d) p.global_shape[d] *= v.sharding->parts(mesh, d);
    p.local_bytes = static_cast<uint64_t>(ir::num_elements(v.shape)) * ir::dtype_size(v.dtype);
    p.loc = v.loc;
    r.parameters.push_back(std::move(p));
  }
  return r;
}

}  // namespace

Report predict(const ir::Graph& g) {
  if (!g.partitioned) internal_error("predict() needs a partitioned (per-device) graph");
  const Mesh& mesh = g.mesh;
  const rt::MeshShape ms = mesh_shape(mesh);
  const int devices = mesh.num_devices();
  Report r = describe_program(g);

  const BufferPlan plan = plan_buffers(g);
  r.bytes.assign(devices, KindBytes{});
  r.calls.assign(devices, KindBytes{});
  for (const BufferPlan::Stmt& s : plan.stmts) {
    const Node& v = g[s.node];
    CollectiveReport c;
    c.node = s.node;
    c.axes = v.axes;
    c.where = where(v);
    c.bucket = v.op == Op::kAllReduce && v.dim2 >= 0;  // a bucket of one value too
    const std::string axes = "(" + join(v.axes, ", ") + ")";
    // Element size: a collective moves its operand's type, which is its own.
    const uint64_t es = ir::dtype_size(v.dtype);
    // Bytes one member sends, given its group.
    std::function<uint64_t(const rt::Group&)> sent;
    if (!s.bucket.empty()) {
      int64_t total = 0;
      for (int m : s.bucket) total += ir::num_elements(g[m].shape);
      c.kind = CollectiveKind::kAllReduce;
      c.what = "all_reduce" + axes + " bucket " + std::to_string(v.dim2) + " (" +
               std::to_string(s.bucket.size()) + " values)";
      c.elements = total;
      c.calls = 1;
      sent = [total, es](const rt::Group& gr) {
        return all_reduce_bytes(static_cast<uint64_t>(total), es, gr.size(), gr.position);
      };
    } else {
      switch (v.op) {
        case Op::kAllGather: {
          const int64_t count = ir::num_elements(g[v.args[0]].shape);
          c.kind = CollectiveKind::kAllGather;
          c.what = "all_gather" + axes + " dim=" + std::to_string(v.dim);
          c.elements = count;
          c.calls = 1;
          sent = [count, es](const rt::Group& gr) {
            return es * static_cast<uint64_t>(gr.size() - 1) * static_cast<uint64_t>(count);
          };
          break;
        }
        case Op::kReduceScatter: {
          const int64_t block = ir::num_elements(v.shape);
          c.kind = CollectiveKind::kReduceScatter;
          c.what = "reduce_scatter" + axes + " dim=" + std::to_string(v.dim);
          c.elements = ir::num_elements(g[v.args[0]].shape);
          c.calls = 1;
          sent = [block, es](const rt::Group& gr) {
            return es * static_cast<uint64_t>(gr.size() - 1) * static_cast<uint64_t>(block);
          };
          break;
        }
        case Op::kAllReduce: {
          const int64_t count = ir::num_elements(v.shape);
          c.kind = CollectiveKind::kAllReduce;
          c.what = "all_reduce" + axes;
          c.elements = count;
          c.calls = 1;
          sent = [count, es](const rt::Group& gr) {
            return all_reduce_bytes(static_cast<uint64_t>(count), es, gr.size(), gr.position);
          };
          break;
        }
        case Op::kAllToAll: {
          const int64_t count = ir::num_elements(g[v.args[0]].shape);
          c.kind = CollectiveKind::kAllToAll;
          c.what = "all_to_all" + axes + " split=" + std::to_string(v.dim) +
                   " concat=" + std::to_string(v.dim2);
          c.elements = count;
          c.calls = 1;
          sent = [count, es](const rt::Group& gr) {
            const uint64_t n = static_cast<uint64_t>(gr.size());
            return es * (n - 1) * (static_cast<uint64_t>(count) / n);
          };
          break;
        }
        case Op::kRingDot: {
          const int n = mesh.size(v.axes);
          const RingPlan p = ring_plan(v, g[v.args[0]].shape, g[v.args[1]].shape, n);
          const int64_t piece =
              p.gather ? p.step_operand_count(p.moving) : p.step_result_count();
          c.kind = CollectiveKind::kPPermute;
          c.ring_dot = true;
          c.what = std::string("ring_dot") + axes + (p.gather ? " gather" : " scatter") +
                   (p.halves == 2 ? ", bidirectional" : "") + " (ppermutes)";
          c.elements = piece * p.halves;
          c.calls = static_cast<uint64_t>(n - 1) * p.halves;
          const uint64_t per_device = es * c.calls * static_cast<uint64_t>(piece);
          sent = [per_device](const rt::Group&) { return per_device; };
          break;
        }
        case Op::kSend:
        case Op::kRecv: {
          // A pipeline stage boundary: the sender sends the value once.
          const int64_t count = ir::num_elements(v.shape);
          const bool send = v.op == Op::kSend;
          c.kind = CollectiveKind::kSendRecv;
          c.what = std::string(send ? "send to" : "recv from") + " stage " + std::to_string(v.ints[0]) + axes;
          c.elements = count;
          c.calls = 1;
          sent = [count, es, send](const rt::Group&) { return send ? es * static_cast<uint64_t>(count) : 0; };
          break;
        }
        default:
          // shard_map's ppermute (pairs of group positions in `ints`), matched
          // by name so this file does not depend on that op being present:
          // each pair whose source is this member sends the operand once.
          if (std::string(ir::op_name(v.op)) == "ppermute") {
            const int64_t count = ir::num_elements(g[v.args[0]].shape);
            const std::vector<int> pairs = v.ints;
            c.kind = CollectiveKind::kPPermute;
            c.what = "ppermute" + axes;
            c.elements = count;
            c.calls = 1;
            sent = [count, pairs, es](const rt::Group& gr) {
              uint64_t b = 0;
              for (size_t i = 0; i + 1 < pairs.size(); i += 2)
                if (pairs[i] == gr.position && pairs[i + 1] != gr.position)
                  b += es * static_cast<uint64_t>(count);
              return b;
            };
            break;
          }
          if (ir::is_collective(v.op))
            internal_error(std::string("the report has no byte formula for ") +
                           ir::op_name(v.op) + " at " + v.loc.str());
          continue;
      }
    }
    for (int rank = 0; rank < devices; ++rank) {
      const rt::Group gr = group_of(mesh, ms, rank, v.axes);
      if (rank == 0) c.group_size = gr.size();
      const uint64_t b = sent(gr);
      c.bytes.push_back(b);
      r.bytes[rank][static_cast<int>(c.kind)] += b;
      r.calls[rank][static_cast<int>(c.kind)] += c.calls;
    }
    r.collectives.push_back(std::move(c));
  }

  const MemoryProfile m = simulate_memory(g, plan);
  r.persistent_bytes = m.persistent_bytes;
  r.peak_bytes.assign(devices, m.peak_bytes);
  r.arena_bytes.assign(devices, m.arena_bytes);
  if (m.peak_stmt < 0) {
    r.peak_at = "the parameter shards alone";
  } else if (m.peak_stmt >= static_cast<int>(plan.stmts.size())) {
    r.peak_at = "the parameter updates at the end of the step";
  } else {
    const Node& v = g[plan.stmts[m.peak_stmt].node];
    const std::string w = where(v);
    r.peak_at = std::string(ir::op_name(v.op)) + " %" + std::to_string(plan.stmts[m.peak_stmt].node) +
                (w.empty() ? "" : " (" + w + ")");
  }
  return r;
}

Report predict(const Lowered& lowered) {
  if (lowered.stage_graphs.empty()) {
    Report r = predict(lowered.partitioned);
    r.kernels = format_kernel_choices(lowered.partitioned, lowered.kernels);
    return r;
  }
  const ir::Graph& whole = lowered.partitioned;
  const Mesh& mesh = whole.mesh;
  const int axis = mesh.index(whole.pipeline->axis);
  Report r = describe_program(whole);
  r.bytes.assign(r.num_devices, KindBytes{});
  r.calls.assign(r.num_devices, KindBytes{});
  r.peak_bytes.assign(r.num_devices, 0);
  r.arena_bytes.assign(r.num_devices, 0);
  r.stage_of_device.assign(r.num_devices, 0);
  for (int d = 0; d < r.num_devices; ++d) r.stage_of_device[d] = mesh.coords(d)[axis];
  for (ParameterReport& p : r.parameters)
    for (size_t s = 0; s < lowered.stage_graphs.size(); ++s)
      if (lowered.stage_graphs[s].find(p.path, ir::Op::kParameter)) p.stages.push_back(static_cast<int>(s));
  r.persistent_bytes = 0;
  for (size_t s = 0; s < lowered.stage_graphs.size(); ++s) {
    const Report st = predict(lowered.stage_graphs[s]);
    const int stage = static_cast<int>(s);
    for (CollectiveReport c : st.collectives) {
      c.what = "stage " + std::to_string(s) + ": " + c.what;
      for (int d = 0; d < r.num_devices; ++d)
        if (r.stage_of_device[d] != stage) c.bytes[d] = 0;
      r.collectives.push_back(std::move(c));
    }
    for (int d = 0; d < r.num_devices; ++d)
      if (r.stage_of_device[d] == stage) {
        r.bytes[d] = st.bytes[d];
        r.calls[d] = st.calls[d];
        r.peak_bytes[d] = st.peak_bytes[d];
        r.arena_bytes[d] = st.arena_bytes[d];
      }
    r.stage_persistent_bytes.push_back(st.persistent_bytes);
    r.stage_peak_at.push_back(st.peak_at);
    if (st.persistent_bytes >= r.persistent_bytes) {
      r.persistent_bytes = st.persistent_bytes;
      r.peak_at = "stage " + std::to_string(s) + ": " + st.peak_at;
    }
  }
  r.kernels = format_kernel_choices(whole, lowered.kernels);
  return r;
}

bool matches(const Report& r, const Measured& m, std::string* why) {
  auto fail = [&](const std::string& s) {
    if (why) *why = s;
    return false;
  };
  if (m.comm.size() != static_cast<size_t>(r.num_devices) ||
      m.peak_bytes.size() != static_cast<size_t>(r.num_devices))
    return fail("measured " + std::to_string(m.comm.size()) + " devices, predicted " +
                std::to_string(r.num_devices));
  for (int d = 0; d < r.num_devices; ++d) {
    for (int k = 0; k < rt::kNumCollectiveKinds; ++k) {
      const char* kind = rt::collective_kind_name(static_cast<CollectiveKind>(k));
      if (r.bytes[d][k] != m.comm[d].bytes_sent[k])
        return fail("device " + std::to_string(d) + " " + kind + ": predicted " +
                    num(r.bytes[d][k]) + " bytes, measured " + num(m.comm[d].bytes_sent[k]));
      if (r.calls[d][k] != m.comm[d].calls[k])
        return fail("device " + std::to_string(d) + " " + kind + ": predicted " +
                    num(r.calls[d][k]) + " calls, measured " + num(m.comm[d].calls[k]));
    }
    if (r.peak_bytes[d] != m.peak_bytes[d])
      return fail("device " + std::to_string(d) + ": predicted peak " + num(r.peak_bytes[d]) +
                  " bytes, measured " + num(m.peak_bytes[d]));
    if (d < static_cast<int>(m.arena_bytes.size()) && r.arena_bytes[d] != m.arena_bytes[d])
      return fail("device " + std::to_string(d) + ": predicted step arena " + num(r.arena_bytes[d]) +
                  " bytes, measured " + num(m.arena_bytes[d]));
  }
  return true;
}

std::string format_report(const Report& r, const Measured* m) {
  const char* ok = "\u2713";
  const char* bad = "\u2717";
  std::ostringstream os;
  os << "sharc report: " << r.program << " on " << r.mesh << " (" << r.num_devices
     << " devices)\n\n";

  os << "Parameters (" << r.parameters.size() << "):\n";
  {
    std::vector<std::vector<std::string>> rows;
    const bool staged = !r.stage_of_device.empty();
    for (auto& p : r.parameters) {
      rows.push_back({p.path, p.spec, ir::shape_str(p.global_shape), ir::shape_str(p.local_shape),
                      bytes_str(p.local_bytes)});
      if (staged) {
        std::vector<std::string> on;
        for (int s : p.stages) on.push_back(std::to_string(s));
        rows.back().push_back(join(on, ","));
      }
    }
    if (staged)
      os << table({"parameter", "spec", "global", "local", "bytes/device", "stages"}, rows,
                  {false, false, false, false, true, false});
    else
      os << table({"parameter", "spec", "global", "local", "bytes/device"}, rows,
                  {false, false, false, false, true});
  }

  os << "\nCollectives in one step (" << r.collectives.size() << "), bytes sent per device:\n";
  {
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < r.collectives.size(); ++i) {
      const CollectiveReport& c = r.collectives[i];
      rows.push_back({num(i), c.what, "%" + num(static_cast<uint64_t>(c.node)),
                      num(static_cast<uint64_t>(c.group_size)),
                      num(static_cast<uint64_t>(c.elements)), per_device(c.bytes), c.where});
    }
    if (rows.empty()) rows.push_back({"-", "(none)", "", "", "", "0", ""});
    os << table({"#", "collective", "node", "group", "floats", "bytes/device", "DSL line"}, rows,
                {true, false, false, true, true, true, false});
  }

  if (!r.kernels.empty()) {
    std::istringstream lines(r.kernels);
    std::string line;
    os << "\nComposite regions on the GPU: each part's kernel, or why generated kernels compute it:\n";
    while (std::getline(lines, line)) os << "  " << line << "\n";
  }

  os << "\nBytes sent per device and kind" << (m ? ", predicted vs measured" : "") << ":\n";
  {
    std::vector<std::vector<std::string>> rows;
    for (int d = 0; d < r.num_devices; ++d)
      for (int k = 0; k < rt::kNumCollectiveKinds; ++k) {
        const bool measured_any = m && d < static_cast<int>(m->comm.size()) && m->comm[d].calls[k];
        if (!r.calls[d][k] && !measured_any) continue;
        std::vector<std::string> row = {num(static_cast<uint64_t>(d)),
                                        rt::collective_kind_name(static_cast<CollectiveKind>(k)),
                                        num(r.calls[d][k]), bytes_str(r.bytes[d][k])};
        if (m) {
          const bool have = d < static_cast<int>(m->comm.size());
          const uint64_t calls = have ? m->comm[d].calls[k] : 0, bytes = have ? m->comm[d].bytes_sent[k] : 0;
          row.push_back(have ? num(calls) : "-");
          row.push_back(have ? bytes_str(bytes) : "-");
          row.push_back(have && calls == r.calls[d][k] && bytes == r.bytes[d][k] ? ok : bad);
        }
        rows.push_back(std::move(row));
      }
    std::vector<std::string> head = {"device", "kind", "calls", "predicted bytes"};
    std::vector<bool> right = {true, false, true, true};
    if (m) {
      head.insert(head.end(), {"measured calls", "measured bytes", ""});
      right.insert(right.end(), {true, true, false});
    }
    if (rows.empty()) os << "  (no collectives)\n";
    else os << table(head, rows, right);
  }

  if (r.stage_of_device.empty()) {
    os << "\nPeak memory per device" << (m ? ", predicted vs measured" : "")
       << " (parameter shards " << bytes_str(r.persistent_bytes) << "; peak at " << r.peak_at
       << "):\n";
  } else {
    os << "\nPeak memory per device" << (m ? ", predicted vs measured" : "") << ", by pipeline stage:\n";
    for (size_t s = 0; s < r.stage_persistent_bytes.size(); ++s)
      os << "  stage " << s << ": parameter shards " << bytes_str(r.stage_persistent_bytes[s]) << "; peak at "
         << r.stage_peak_at[s] << "\n";
  }
  {
    std::vector<std::vector<std::string>> rows;
    for (int d = 0; d < r.num_devices; ++d) {
      uint64_t sent = 0, got = 0;
      for (int k = 0; k < rt::kNumCollectiveKinds; ++k) sent += r.bytes[d][k];
      const std::string device =
          num(static_cast<uint64_t>(d)) +
          (r.stage_of_device.empty() ? "" : " (stage " + std::to_string(r.stage_of_device[d]) + ")");
      std::vector<std::string> row = {device, bytes_str(sent),
                                      bytes_str(r.peak_bytes[d]), bytes_str(r.arena_bytes[d])};
      if (m) {
        const bool have = d < static_cast<int>(m->peak_bytes.size());
        const bool have_arena = d < static_cast<int>(m->arena_bytes.size());
        if (have)
          for (int k = 0; k < rt::kNumCollectiveKinds; ++k) got += m->comm[d].bytes_sent[k];
        row.insert(row.begin() + 2, have ? bytes_str(got) : "-");
        row.insert(row.begin() + 4, have ? bytes_str(m->peak_bytes[d]) : "-");
        row.push_back(have_arena ? bytes_str(m->arena_bytes[d]) : "-");
        row.push_back(have && got == sent && m->peak_bytes[d] == r.peak_bytes[d] &&
                              (!have_arena || m->arena_bytes[d] == r.arena_bytes[d])
                          ? ok
                          : bad);
      }
      rows.push_back(std::move(row));
    }
    std::vector<std::string> head = {"device", "sent (predicted)", "peak (predicted)",
                                     "step arena (predicted)"};
    std::vector<bool> right = {true, true, true, true};
    if (m) {
      head = {"device", "sent (predicted)", "sent (measured)", "peak (predicted)",
              "peak (measured)", "step arena (predicted)", "step arena (measured)", ""};
      right = {true, true, true, true, true, true, true, false};
    }
    os << table(head, rows, right);
  }
  if (m) {
    std::string why;
    os << "\n" << (matches(r, *m, &why) ? std::string(ok) + " prediction equals measurement"
                                        : std::string(bad) + " mismatch: " + why)
       << "\n";
  }
  return os.str();
}

}  // namespace sharc

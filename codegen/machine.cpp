// Machine models for the planner (machine.h): JSON in and out, the known
// machines (codegen/machines/*.json, built in by CMake as
// machines_data.cpp), and which link a collective crosses.
#include "codegen/machine.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "ir/error.h"

namespace sharc {

// machines_data.cpp (generated): name -> the file's text, sorted by name.
const std::map<std::string, std::string>& builtin_machine_files();

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw Error(SrcLoc(), "machine " + origin + ": " + what);
}

// Keys of `o` must be among `allowed`.
void only(const json& o, const std::string& where, std::initializer_list<const char*> allowed,
          const std::string& origin) {
  for (const auto& [key, value] : o.items()) {
    bool known = false;
    std::string list;
    for (const char* a : allowed) {
      known |= key == a;
      list += std::string(list.empty() ? "" : ", ") + a;
    }
    if (!known) bad(origin, "unknown field '" + key + "' in " + where + " (it has: " + list + ")");
  }
}

const json& field(const json& o, const char* key, const std::string& where, const std::string& origin) {
  if (!o.is_object() || !o.contains(key)) bad(origin, where + " has no '" + key + "'");
  return o.at(key);
}

// A number >= 0 (> 0 when `positive`).
double number(const json& o, const char* key, const std::string& where, const std::string& origin,
              bool positive) {
  const json& v = field(o, key, where, origin);
  if (!v.is_number()) bad(origin, where + "." + key + " is not a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0 || (positive && x == 0))
    bad(origin, where + "." + key + " must be " + (positive ? "above 0" : "0 or more") + ", not " + v.dump());
  return x;
}

// "16 KiB", "1 MiB", "1000 B": three digits, in the unit the rounded
// figure needs (1048600 bytes is "1 MiB").
std::string bytes_text(double b) {
  char buf[32];
  if (b >= 1023.5 * 1024)
    std::snprintf(buf, sizeof buf, "%.3g MiB", b / (1 << 20));
  else if (b >= 1023.5)
    std::snprintf(buf, sizeof buf, "%.3g KiB", b / 1024);
  else
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string rate(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// Where x falls on an ascending grid of n points (at(i) the i-th): the
// points below and above it and its weight on the one above, on log(x);
// outside the grid both are the nearest end, with weight 0.
struct LogBracket {
  size_t lo = 0, hi = 0;
  double t = 0;
};
template <class At>
LogBracket log_bracket(size_t n, At at, double x) {
  LogBracket b;
  if (x <= at(0)) return b;
  if (x >= at(n - 1)) {
    b.lo = b.hi = n - 1;
    return b;
  }
  b.hi = 1;
  while (at(b.hi) < x) ++b.hi;  // at(hi - 1) < x <= at(hi)
  b.lo = b.hi - 1;
  b.t = std::log(x / at(b.lo)) / std::log(at(b.hi) / at(b.lo));
  return b;
}

// A list of rates by size ("..._by_message", "..._by_size"): [{"bytes": ...,
// "bytes_per_s": ...}, ...], sizes ascending.
std::vector<SizedRate> sized_rates(const json& sizes, const std::string& list, const std::string& origin) {
  if (!sizes.is_array() || sizes.empty())
    bad(origin, list + " must be a non-empty array of {\"bytes\": ..., \"bytes_per_s\": ...}");
  std::vector<SizedRate> rates;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const std::string at = list + "[" + std::to_string(k) + "]";
    only(sizes[k], at, {"bytes", "bytes_per_s"}, origin);
    SizedRate r{.bytes = number(sizes[k], "bytes", at, origin, true),
                .bytes_per_s = number(sizes[k], "bytes_per_s", at, origin, true)};
    if (!rates.empty() && r.bytes <= rates.back().bytes)
      bad(origin, at + ".bytes must be more than the entry before it (the sizes ascend)");
    rates.push_back(r);
  }
  return rates;
}

// The GEMM tables' keys by index 2 * trans_a + trans_b.
constexpr const char* kTranspositions[4] = {"nn", "nt", "tn", "tt"};

// compute.gemm_flops_per_s_by_shape: {"sizes": [...], "nn": [...], ...}.
GemmRates gemm_rates(const json& o, const std::string& where, const std::string& origin) {
  if (!o.is_object()) bad(origin, where + " must be an object: {\"sizes\": [...], \"nn\": [...], \"nt\": [...], "
                                          "\"tn\": [...], \"tt\": [...]}");
  only(o, where, {"sizes", "nn", "nt", "tn", "tt"}, origin);
  GemmRates g;
  const json& sizes = field(o, "sizes", where, origin);
  if (!sizes.is_array() || sizes.empty()) bad(origin, where + ".sizes must be a non-empty array of sizes");
  for (size_t k = 0; k < sizes.size(); ++k) {
    const std::string at = where + ".sizes[" + std::to_string(k) + "]";
    if (!sizes[k].is_number() || !(sizes[k].get<double>() >= 1))
      bad(origin, at + " must be a size of at least 1, not " + sizes[k].dump());
    if (k > 0 && sizes[k].get<double>() <= g.sizes.back())
      bad(origin, at + " must be more than the size before it (the sizes ascend)");
    g.sizes.push_back(sizes[k].get<double>());
  }
  const size_t n = g.sizes.size(), cells = n * n * n;
  for (int t = 0; t < 4; ++t) {
    const json& r = field(o, kTranspositions[t], where, origin);
    const std::string at = where + "." + kTranspositions[t];
    if (!r.is_array() || r.size() != cells)
      bad(origin, at + " must be an array of " + std::to_string(cells) + " rates (one per (M, N, K) of the " +
                      std::to_string(n) + " sizes, K fastest), not " +
                      (r.is_array() ? std::to_string(r.size()) : r.dump()));
    for (size_t k = 0; k < cells; ++k) {
      if (!r[k].is_number() || !(r[k].get<double>() > 0) || !std::isfinite(r[k].get<double>()))
        bad(origin, at + "[" + std::to_string(k) + "] must be above 0, not " + r[k].dump());
      g.rates[t].push_back(r[k].get<double>());
    }
  }
  return g;
}

nlohmann::ordered_json sized_json(const std::vector<SizedRate>& rates) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const SizedRate& r : rates) a.push_back({{"bytes", r.bytes}, {"bytes_per_s", r.bytes_per_s}});
  return a;
}

// " (by message: 1.7e+09 at 16 KiB, ...)" for `what` "by message"; "" for
// none.
std::string sized_text(const std::vector<SizedRate>& rates, const std::string& what) {
  if (rates.empty()) return "";
  std::string s = " (" + what + ": ";
  for (size_t k = 0; k < rates.size(); ++k)
    s += (k ? ", " : "") + rate(rates[k].bytes_per_s) + " at " + bytes_text(rates[k].bytes);
  return s + ")";
}

}  // namespace

double rate_for_size(const std::vector<SizedRate>& r, double bytes, double fallback) {
  if (r.empty()) return fallback;
  const LogBracket b = log_bracket(r.size(), [&](size_t i) { return r[i].bytes; }, bytes);
  return r[b.lo].bytes_per_s + b.t * (r[b.hi].bytes_per_s - r[b.lo].bytes_per_s);
}

double LinkLevel::rate_for(double message_bytes) const { return rate_for_size(by_message, message_bytes, bytes_per_s); }

double LinkLevel::permute_rate_for(double message_bytes) const {
  return permute_by_message.empty() ? rate_for(message_bytes)
                                    : rate_for_size(permute_by_message, message_bytes, bytes_per_s);
}

double LinkLevel::reduce_rate_for(double message_bytes) const {
  return rate_for_size(reduce_by_message, message_bytes, 0);
}

LinkLevel LinkLevel::at_best_rate() const {
  LinkLevel best = *this;
  for (const std::vector<SizedRate>* table : {&by_message, &reduce_by_message})
    for (const SizedRate& r : *table) best.bytes_per_s = std::max(best.bytes_per_s, r.bytes_per_s);
  best.by_message.clear();
  best.permute_by_message.clear();
  // Kept as one entry: the adds then cost nothing beyond the messages.
  best.reduce_by_message.clear();
  if (!reduce_by_message.empty()) best.reduce_by_message = {{.bytes = 1, .bytes_per_s = best.bytes_per_s}};
  return best;
}

double GemmRates::rate(double M, double N, double K, bool trans_a, bool trans_b) const {
  const std::vector<double>& r = rates[2 * trans_a + trans_b];
  const size_t n = sizes.size();
  auto axis = [&](double x) { return log_bracket(n, [&](size_t i) { return sizes[i]; }, x); };
  const LogBracket am = axis(M), an = axis(N), ak = axis(K);
  double sum = 0;
  for (int c = 0; c < 8; ++c) {
    const bool m1 = c & 4, n1 = c & 2, k1 = c & 1;
    const double w = (m1 ? am.t : 1 - am.t) * (n1 ? an.t : 1 - an.t) * (k1 ? ak.t : 1 - ak.t);
    if (w == 0) continue;
    sum += w * r[((m1 ? am.hi : am.lo) * n + (n1 ? an.hi : an.lo)) * n + (k1 ? ak.hi : ak.lo)];
  }
  return sum;
}

rt::MachineModel PlanMachine::compute_for_gemm(ir::DType dtype, double M, double N, double K, bool trans_a,
                                               bool trans_b) const {
  rt::MachineModel m = compute_for(dtype);
  if (!gemm.empty()) m.flops_per_s *= gemm.rate(M, N, K, trans_a, trans_b) / compute.flops_per_s;
  return m;
}

rt::MachineModel PlanMachine::compute_for_cached(ir::DType dtype, double bytes) const {
  rt::MachineModel m = compute_for(dtype);
  m.bytes_per_s = rate_for_size(cached_memory, bytes, m.bytes_per_s);
  return m;
}

rt::MachineModel PlanMachine::compute_for(ir::DType dtype) const {
  rt::MachineModel m = compute;
  if (dtype == ir::DType::kBF16 && bf16_flops_per_s > 0) m.flops_per_s = bf16_flops_per_s;
  return m;
}

const LinkLevel& PlanMachine::link_for(const Mesh& mesh, const std::vector<std::string>& axes) const {
  // Each group: the devices that agree on every axis but `axes`. A level
  // holds it when one unit of the level holds every member of every group.
  const int n = mesh.num_devices();
  std::vector<bool> in_group(mesh.axes().size(), false);
  for (const std::string& a : axes)
    if (mesh.index(a) >= 0) in_group[mesh.index(a)] = true;
  std::map<std::vector<int>, std::vector<int>> groups;  // the other coordinates -> members
  for (int d = 0; d < n; ++d) {
    std::vector<int> key = mesh.coords(d);
    for (size_t i = 0; i < key.size(); ++i)
      if (in_group[i]) key[i] = -1;
    groups[key].push_back(d);
  }
  for (const LinkLevel& level : links) {
    if (level.devices <= 0) return level;
    bool holds = true;
    for (const auto& [key, members] : groups)
      for (int d : members) holds &= d / level.devices == members.front() / level.devices;
    if (holds) return level;
  }
  return links.back();  // more devices than the machine has: plan() refuses them first
}

std::string PlanMachine::str() const {
  std::string s = name + ": ";
  if (bf16_flops_per_s > 0 && bf16_flops_per_s != compute.flops_per_s)
    s += rate(bf16_flops_per_s) + " bf16 flop/s, " + rate(compute.flops_per_s) + " f32";
  else
    s += rate(compute.flops_per_s) + " flop/s";
  s += ", " + rate(compute.bytes_per_s) + " B/s memory, " + rate(compute.overhead_s * 1e6) + " us a statement";
  if (!gemm.empty()) {
    double lo = INFINITY, hi = 0;
    for (const std::vector<double>& r : gemm.rates)
      for (double x : r) lo = std::min(lo, x), hi = std::max(hi, x);
    s += ", GEMMs by shape " + rate(lo) + " to " + rate(hi) + " flop/s";
  }
  s += sized_text(cached_memory, "cached memory");
  if (transcendentals_per_s > 0) s += ", " + rate(transcendentals_per_s) + " transcendentals/s";
  for (const LinkLevel& l : links) {
    s += "; " + l.name + (l.devices > 0 ? " (" + std::to_string(l.devices) + " devices)" : "") + " " +
         rate(l.latency_s * 1e6) + " us + " + rate(l.bytes_per_s) + " B/s";
    s += sized_text(l.by_message, "by message");
    s += sized_text(l.permute_by_message, "permutes by message");
    s += sized_text(l.reduce_by_message, "reducing steps by message");
  }
  if (!overlaps_compute) s += "; transfers take the compute's cores";
  return s;
}

PlanMachine parse_machine(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    bad(origin, std::string("not JSON: ") + e.what());
  }
  if (!j.is_object()) bad(origin, "not a JSON object");
  only(j, "the machine", {"name", "about", "compute", "links", "overlaps_compute"}, origin);
  PlanMachine m;
  const json& name = field(j, "name", "the machine", origin);
  if (!name.is_string() || name.get<std::string>().empty()) bad(origin, "name must be a non-empty string");
  m.name = name.get<std::string>();
  if (j.contains("about")) {
    const json& about = j.at("about");
    if (!about.is_array()) bad(origin, "about must be an array of strings");
    for (const json& line : about) {
      if (!line.is_string()) bad(origin, "about must be an array of strings");
      m.about.push_back(line.get<std::string>());
    }
  }
  if (j.contains("overlaps_compute")) {
    if (!j.at("overlaps_compute").is_boolean())
      bad(origin, "overlaps_compute must be true (transfers run while the device computes) or false (they take "
                  "its cores)");
    m.overlaps_compute = j.at("overlaps_compute").get<bool>();
  }
  const json& compute = field(j, "compute", "the machine", origin);
  only(compute, "compute",
       {"flops_per_s", "memory_bytes_per_s", "statement_overhead_s", "gemm_flops_per_s_by_shape",
        "cached_memory_bytes_per_s_by_size", "transcendentals_per_s"},
       origin);
  const json& flops = field(compute, "flops_per_s", "compute", origin);
  only(flops, "compute.flops_per_s", {"f32", "bf16"}, origin);
  m.compute.flops_per_s = number(flops, "f32", "compute.flops_per_s", origin, true);
  m.bf16_flops_per_s =
      flops.contains("bf16") ? number(flops, "bf16", "compute.flops_per_s", origin, true) : m.compute.flops_per_s;
  m.compute.bytes_per_s = number(compute, "memory_bytes_per_s", "compute", origin, true);
  m.compute.overhead_s = number(compute, "statement_overhead_s", "compute", origin, false);
  if (compute.contains("gemm_flops_per_s_by_shape"))
    m.gemm = gemm_rates(compute.at("gemm_flops_per_s_by_shape"), "compute.gemm_flops_per_s_by_shape", origin);
  if (compute.contains("transcendentals_per_s"))
    m.transcendentals_per_s = number(compute, "transcendentals_per_s", "compute", origin, true);
  if (compute.contains("cached_memory_bytes_per_s_by_size"))
    m.cached_memory = sized_rates(compute.at("cached_memory_bytes_per_s_by_size"),
                                  "compute.cached_memory_bytes_per_s_by_size", origin);
  const json& links = field(j, "links", "the machine", origin);
  if (!links.is_array() || links.empty()) bad(origin, "links must be a non-empty array, innermost level first");
  m.links.clear();
  for (size_t i = 0; i < links.size(); ++i) {
    const std::string where = "links[" + std::to_string(i) + "]";
    const json& l = links[i];
    if (!l.is_object()) bad(origin, where + " is not an object");
    only(l, where, {"name", "devices", "latency_s", "bytes_per_s", "bytes_per_s_by_message", "permute_bytes_per_s_by_message",
                    "reduce_bytes_per_s_by_message"},
         origin);
    LinkLevel level;
    const json& ln = field(l, "name", where, origin);
    if (!ln.is_string()) bad(origin, where + ".name must be a string");
    level.name = ln.get<std::string>();
    const bool last = i + 1 == links.size();
    if (l.contains("devices")) {
      const json& d = l.at("devices");
      if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (1 << 20))
        bad(origin, where + ".devices must be a whole number of devices, not " + d.dump());
      level.devices = d.get<int>();
      if (i > 0 && level.devices % m.links.back().devices != 0)
        bad(origin, where + ".devices (" + std::to_string(level.devices) + ") is not a multiple of the level " +
                        "inside it (" + std::to_string(m.links.back().devices) + ")");
    } else if (!last) {
      bad(origin, where + " needs 'devices': how many devices one unit of it holds (only the last level joins "
                          "every unit)");
    }
    level.latency_s = number(l, "latency_s", where, origin, false);
    level.bytes_per_s = number(l, "bytes_per_s", where, origin, true);
    if (l.contains("bytes_per_s_by_message"))
      level.by_message = sized_rates(l.at("bytes_per_s_by_message"), where + ".bytes_per_s_by_message", origin);
    if (l.contains("permute_bytes_per_s_by_message"))
      level.permute_by_message =
          sized_rates(l.at("permute_bytes_per_s_by_message"), where + ".permute_bytes_per_s_by_message", origin);
    if (l.contains("reduce_bytes_per_s_by_message"))
      level.reduce_by_message =
          sized_rates(l.at("reduce_bytes_per_s_by_message"), where + ".reduce_bytes_per_s_by_message", origin);
    m.links.push_back(std::move(level));
  }
  return m;
}

std::optional<PlanMachine> known_machine(const std::string& name) {
  const auto& files = builtin_machine_files();
  const auto it = files.find(name);
  if (it == files.end()) return std::nullopt;
  return parse_machine(it->second, "codegen/machines/" + name + ".json");
}

std::string known_machine_names() {
  std::string s;
  for (const auto& [name, text] : builtin_machine_files()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

PlanMachine load_machine(const std::string& name_or_file) {
  if (std::optional<PlanMachine> m = known_machine(name_or_file)) return *m;
  if (name_or_file.size() > 5 && name_or_file.ends_with(".json")) {
    std::ifstream in(name_or_file, std::ios::binary);
    if (!in) throw Error(SrcLoc(), "MACHINE file " + name_or_file + " cannot be read");
    std::ostringstream text;
    text << in.rdbuf();
    return parse_machine(text.str(), name_or_file);
  }
  throw Error(SrcLoc(), "unknown MACHINE '" + name_or_file + "'; sharc knows: " + known_machine_names() +
                            ", or give a machine file (a path ending in .json, docs/guide/planning.md)");
}

std::string machine_json(const PlanMachine& m) {
  nlohmann::ordered_json j;
  j["name"] = m.name;
  j["about"] = m.about;
  j["compute"]["flops_per_s"]["f32"] = m.compute.flops_per_s;
  j["compute"]["flops_per_s"]["bf16"] = m.bf16_flops_per_s > 0 ? m.bf16_flops_per_s : m.compute.flops_per_s;
  j["compute"]["memory_bytes_per_s"] = m.compute.bytes_per_s;
  j["compute"]["statement_overhead_s"] = m.compute.overhead_s;
  if (!m.gemm.empty()) {
    nlohmann::ordered_json& g = j["compute"]["gemm_flops_per_s_by_shape"];
    g["sizes"] = m.gemm.sizes;
    for (int t = 0; t < 4; ++t) g[kTranspositions[t]] = m.gemm.rates[t];
  }
  if (!m.cached_memory.empty()) j["compute"]["cached_memory_bytes_per_s_by_size"] = sized_json(m.cached_memory);
  if (m.transcendentals_per_s > 0) j["compute"]["transcendentals_per_s"] = m.transcendentals_per_s;
  j["links"] = nlohmann::ordered_json::array();
  for (const LinkLevel& l : m.links) {
    nlohmann::ordered_json o;
    o["name"] = l.name;
    if (l.devices > 0) o["devices"] = l.devices;
    o["latency_s"] = l.latency_s;
    o["bytes_per_s"] = l.bytes_per_s;
    if (!l.by_message.empty()) o["bytes_per_s_by_message"] = sized_json(l.by_message);
    if (!l.permute_by_message.empty()) o["permute_bytes_per_s_by_message"] = sized_json(l.permute_by_message);
    if (!l.reduce_by_message.empty()) o["reduce_bytes_per_s_by_message"] = sized_json(l.reduce_by_message);
    j["links"].push_back(o);
  }
  j["overlaps_compute"] = m.overlaps_compute;
  return j.dump(2) + "\n";
}

}  // namespace sharc

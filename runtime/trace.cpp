// Chrome trace JSON; see trace.h. Written by hand: the format is a flat list
// of small objects, and the runtime takes no JSON dependency for it.
#include "runtime/trace.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace sharc::rt {

namespace {

std::string escaped(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Microseconds with nanosecond resolution, without exponent notation.
std::string micros(double seconds) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f", seconds * 1e6);
  return buf;
}

}  // namespace

std::string chrome_trace_json(const Trace& trace) {
  std::ostringstream os;
  os << "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"clock\": " << escaped(trace.clock)
     << "}, \"traceEvents\": [\n";
  bool first = true;
  auto sep = [&] {
    if (!first) os << ",\n";
    first = false;
  };
  for (size_t d = 0; d < trace.track_names.size(); ++d) {
    sep();
    os << "  {\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"tid\": " << d
       << ", \"args\": {\"name\": " << escaped(trace.track_names[d]) << "}}";
    sep();
    os << "  {\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": 0, \"tid\": " << d
       << ", \"args\": {\"sort_index\": " << d << "}}";
  }
  for (const TraceEvent& e : trace.events) {
    sep();
    os << "  {\"ph\": \"X\", \"pid\": 0, \"tid\": " << e.device << ", \"name\": " << escaped(e.name)
       << ", \"cat\": " << escaped(e.category) << ", \"ts\": " << micros(e.start_s)
       << ", \"dur\": " << micros(e.end_s - e.start_s) << ", \"args\": {";
    std::string args;
    auto arg = [&](const std::string& k, const std::string& v) {
      args += (args.empty() ? "" : ", ") + escaped(k) + ": " + v;
    };
    if (e.peer >= 0) arg("peer", std::to_string(e.peer));
    if (e.tag >= 0) arg("tag", std::to_string(e.tag));
    if (e.bytes) arg("bytes", std::to_string(e.bytes));
    if (!e.detail.empty()) arg("detail", escaped(e.detail));
    os << args << "}}";
  }
  os << "\n]}\n";
  return os.str();
}

const char* clock_mode_name(ClockMode mode) {
  switch (mode) {
    case ClockMode::kOff: return "off";
    case ClockMode::kWall: return "wall";
    case ClockMode::kVirtual: return "virtual";
    case ClockMode::kDevice: return "device";
  }
  return "?";
}

double MachineModel::seconds(const OpCost& c) const {
  const double compute = flops_per_s > 0 ? c.flops / flops_per_s : 0.0;
  const double memory = bytes_per_s > 0 ? c.bytes / bytes_per_s : 0.0;
  return std::max(compute, memory) + overhead_s;
}

void Timeline::configure(ClockMode mode, const MachineModel& machine,
                         std::chrono::steady_clock::time_point origin) {
  mode_ = mode;
  machine_ = machine;
  origin_ = origin;
}

double Timeline::now() const {
  if (mode_ == ClockMode::kVirtual) return now_;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
}

void Timeline::mark(const char* name, const OpCost& cost, bool compute) {
  if (mode_ == ClockMode::kDevice) {
    if (!stamps_)
      throw std::logic_error("the device clock (ClockMode::kDevice) needs a world whose devices stamp their "
                             "work, a GPU world; this device has no StampSource");
    if (stamped_.empty()) run_start_ = now();
    stamped_.emplace_back(name, compute);
    stamps_->stamp();
    return;
  }
  finish();
  label_ = name;
  if (!compute) return;
  if (mode_ == ClockMode::kVirtual) {
    const double start = now_, took = machine_.seconds(cost);
    now_ += took;
    busy_ += took;
    TraceEvent e;
    e.device = device_;
    e.name = label_;
    e.category = "compute";
    e.start_s = start;
    e.end_s = now_;
    events_.push_back(std::move(e));
  } else {
    open_ = true;
    open_start_ = now();
  }
}

void Timeline::read_stamps() {
  if (stamped_.empty()) return;
  const std::vector<std::pair<std::string, bool>> stamped = std::move(stamped_);
  stamped_.clear();   // read once, even when reading fails
  stamps_->stamp();  // where the last statement ends
  const std::vector<double> t = stamps_->read_stamps();
  if (t.size() != stamped.size() + 1)
    throw std::logic_error("Timeline: " + std::to_string(stamped.size() + 1) + " stamps given, " +
                           std::to_string(t.size()) + " read back");
  for (size_t i = 0; i < stamped.size(); ++i) {
    TraceEvent e;
    e.device = device_;
    e.name = stamped[i].first;
    e.category = stamped[i].second ? "compute" : "collective";
    e.start_s = run_start_ + t[i];
    e.end_s = run_start_ + t[i + 1];
    (stamped[i].second ? busy_ : comm_) += e.end_s - e.start_s;
    events_.push_back(std::move(e));
  }
}

void Timeline::finish() {
  if (mode_ == ClockMode::kDevice) return read_stamps();
  if (!open_) return;
  open_ = false;
  TraceEvent e;
  e.device = device_;
  e.name = label_;
  e.category = "compute";
  e.start_s = open_start_;
  e.end_s = now();
  busy_ += e.end_s - e.start_s;
  events_.push_back(std::move(e));
}

double Timeline::begin_comm() {
  if (mode_ != ClockMode::kDevice) finish();  // device clock: the call is inside its statement's stamps
  return now();
}

void Timeline::end_comm(const char* category, double start, int peer, int64_t tag, uint64_t bytes) {
  if (mode_ == ClockMode::kOff || mode_ == ClockMode::kDevice) return;
  TraceEvent e;
  e.device = device_;
  e.name = label_.empty() ? std::string(category) : label_;
  e.category = category;
  e.start_s = start;
  e.end_s = now();
  e.peer = peer;
  e.tag = tag;
  e.bytes = bytes;
  comm_ += e.end_s - e.start_s;
  events_.push_back(std::move(e));
}

void Timeline::charge(const OpCost& cost) {
  if (mode_ != ClockMode::kVirtual) return;
  const double took = machine_.seconds(cost);
  now_ += took;
  busy_ += took;
  comm_ -= took;  // inside a communication call: busy, not waiting
}

DeviceTime Timeline::time() const {
  DeviceTime t;
  t.now_s = mode_ == ClockMode::kVirtual ? now_ : (events_.empty() ? 0.0 : events_.back().end_s);
  t.busy_s = busy_;
  t.comm_s = comm_;
  return t;
}

void Timeline::clear() {
  now_ = busy_ = comm_ = 0;
  label_.clear();
  open_ = false;
  events_.clear();
  stamped_.clear();
}

}  // namespace sharc::rt

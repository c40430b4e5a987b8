// Chrome trace JSON; see trace.h. Written by hand: the format is a flat list
// of small objects, and the runtime takes no JSON dependency for it.
#include "runtime/trace.h"

#include <cstdio>
#include <sstream>

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

}  // namespace sharc::rt
